"""Services the tests start on 127.0.0.1 and stop afterwards: an S3 endpoint (moto_server) and a
Prefect server (``prefect server start``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "synrail-test", "AWS_SECRET_ACCESS_KEY": "synrail-test",
                  "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, timeout_s: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s:\n{log.read_text()[-3000:]}")


@contextmanager
def service(args: list[str], health_url: str, log: Path, env: dict[str, str], timeout_s: float = 120
            ) -> Iterator[subprocess.Popen]:
    """Run ``args`` in its own process group until the block ends; wait until ``health_url`` answers."""
    with open(log, "wb") as sink:
        process = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for(health_url, timeout_s, process, log)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def moto_s3(log: Path) -> Iterator[dict[str, str]]:
    """An S3 endpoint on 127.0.0.1; yields the environment that points botocore and s3fs at it."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {**os.environ, **S3_CREDENTIALS}
    with service([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], f"{endpoint}/moto-api/",
                 log, env, timeout_s=30):
        yield {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}


@contextmanager
def prefect_server(home: Path, log: Path) -> Iterator[dict[str, str]]:
    """A Prefect server with its own home and SQLite database; yields the client environment."""
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    api = f"http://127.0.0.1:{port}/api"
    with service([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                 f"{api}/health", log, env):
        yield {"PREFECT_HOME": str(home), "PREFECT_API_URL": api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "DO_NOT_TRACK": "1"}

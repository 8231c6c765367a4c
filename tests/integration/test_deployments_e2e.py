"""End to end, as a user runs it: a Prefect server and an S3 endpoint on 127.0.0.1, prefect.yaml's
deployments registered with ``prefect deploy`` and run by a process worker; a video uploaded to the
bucket, the watcher's event starting the incremental run, and the new video's images appearing in
the next dataset version."""

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import s3fs
import yaml
from media import H, W, cab_frames, write_video
from services import BIN, moto_s3, prefect_server, stop

from synrail.config import load_config

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "synrail-e2e"


def prefect(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    result = subprocess.run([str(BIN / "prefect"), "--no-prompt", *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"prefect {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def wait_for_version(fs: s3fs.S3FileSystem, version: str, worker_log: Path, timeout_s: float) -> dict:
    pointer = f"{BUCKET}/dataset/latest.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fs.invalidate_cache()
        if fs.exists(pointer):
            latest = json.loads(fs.cat_file(pointer))
            if latest["version"] == version:
                return latest
        time.sleep(1)
    raise TimeoutError(f"no {version} after {timeout_s} s; worker log:\n{worker_log.read_text()[-5000:]}")


@pytest.fixture(scope="module")
def services_env(tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    with moto_s3(logs / "moto.log") as s3_env, prefect_server(tmp_path_factory.mktemp("home"), logs / "server.log") \
            as prefect_env:
        yield {**os.environ, **s3_env, **prefect_env}, logs


def test_uploaded_video_fires_the_incremental_run(services_env, tmp_path):
    env, logs = services_env
    fs = s3fs.S3FileSystem(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]})
    fs.mkdir(BUCKET)
    for k in range(2):
        fs.put_file(str(write_video(tmp_path / f"line{k}.avi", cab_frames(k, 4))), f"{BUCKET}/videos/line{k}.avi")
    config = load_config(ROOT / "configs/tiny.yaml", {
        "num_images": 8, "image.width": W, "image.height": H, "backgrounds.source": "video",
        "backgrounds.video": {"url": "placeholder", "hfov_deg": 60, "sampling": {"fps": 2.0}},
        "ingest.images_per_video": 4})
    config_path = tmp_path / "video.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env.update({"SYNRAIL_HOME": str(ROOT), "SYNRAIL_CONFIG": str(config_path),
                "SYNRAIL_DATASET": f"s3://{BUCKET}/dataset", "SYNRAIL_VIDEOS": f"s3://{BUCKET}/videos",
                "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "1"})
    for pool in ("synrail-cpu", "synrail-gpu"):
        prefect(env, "work-pool", "create", pool, "--type", "process")
    prefect(env, "deploy", "--all")

    worker_log = logs / "worker.log"
    with open(worker_log, "wb") as sink:
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "synrail-cpu"], cwd=tmp_path,
                                  env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        prefect(env, "deployment", "run", "build-version/full-build")
        wait_for_version(fs, "v0001", worker_log, timeout_s=240)

        fs.put_file(str(write_video(tmp_path / "line2.avi", cab_frames(2, 4))), f"{BUCKET}/videos/line2.avi")
        prefect(env, "deployment", "run", "watch-videos/watch-videos")
        latest = wait_for_version(fs, "v0002", worker_log, timeout_s=240)
        # the pointer is switched before the run reports Completed: wait for that before the worker stops
        triggered = wait_for_triggered_run(env, "line2.avi", worker_log, timeout_s=60)
    finally:
        stop(worker)

    assert latest["num_images"] == 8 + 4
    version = f"{BUCKET}/dataset/versions/v0002"
    images = pq.read_table(f"{version}/manifest/images.parquet", filesystem=fs).to_pylist()
    backgrounds = {b["background_id"]: b["source"]
                   for b in pq.read_table(f"{version}/manifest/backgrounds.parquet", filesystem=fs).to_pylist()}
    new = [r for r in images if backgrounds[r["background_id"]] == "video:line2.avi"]
    assert len(new) == 4 and all(fs.exists(f"{version}/{r['file_name']}") for r in new)
    assert fs.exists(f"{BUCKET}/dataset/versions/v0001/data.yaml")  # the old version stays readable
    assert triggered["state_type"] == "COMPLETED", f"the event's run did not complete: {triggered}"


def wait_for_triggered_run(env: dict[str, str], video: str, worker_log: Path, timeout_s: float) -> dict:
    """The ingest run the watcher's event started for ``video``, once it has reached a final state."""
    deadline = time.monotonic() + timeout_s
    runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = api_post(env, "flow_runs/filter", {"flows": {"name": {"any_": ["ingest-new-videos"]}}})
        triggered = [r for r in runs if (r["parameters"].get("video_url") or "").endswith(video)]
        if triggered and triggered[0]["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return triggered[0]
        time.sleep(1)
    raise TimeoutError(f"no finished ingest run for {video} after {timeout_s} s: {runs}\n"
                       f"worker log:\n{worker_log.read_text()[-5000:]}")


def api_post(env: dict[str, str], path: str, body: dict) -> list[dict]:
    request = urllib.request.Request(f"{env['PREFECT_API_URL']}/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())

"""``kill -9`` of a running ``synrail build`` at several moments, then a rerun: the dataset completes
and equals an uninterrupted build, with no image or annotation lost, doubled or half-written."""

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.stages.local import build_in_process

ROOT = Path(__file__).resolve().parents[2]
SYNRAIL = Path(sys.executable).with_name("synrail")
OVERRIDES = {"num_images": 36, "execution.chunk_size": 4}
ARGS = ["--config", "configs/tiny.yaml", "--num-images", "36", "--set", "execution.chunk_size=4", "--no-progress"]


def images_written(out: Path) -> int:
    return sum(1 for _ in out.glob("images/*/*.jpg"))


RANDOM_COUNT = random.Random(os.environ.get("SYNRAIL_KILL_SEED", "1")).randint(1, 35)  # set the seed to vary it

# When to kill, as a condition on what the build has written so far.
KILL_POINTS: dict[str, Callable[[Path], bool]] = {
    "holding the lock, before any image": lambda out: (out / ".synrail" / "lock").exists(),
    "a third of the images composed": lambda out: images_written(out) >= 12,
    "two thirds composed": lambda out: images_written(out) >= 24,
    "exporting": lambda out: (out / "annotations").exists(),
    f"after a random {RANDOM_COUNT} images": lambda out: images_written(out) >= RANDOM_COUNT,
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "out"
    build_in_process(load_config(ROOT / "configs/tiny.yaml", OVERRIDES), str(out))
    return out


def build(out: Path, home: Path) -> subprocess.Popen:
    """``synrail build`` in a process group of its own, so that its Prefect server dies with it."""
    env = dict(os.environ, PREFECT_HOME=str(home))
    return subprocess.Popen([str(SYNRAIL), "build", *ARGS, "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def kill_when(process: subprocess.Popen, ready: Callable[[], bool], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert process.poll() is None, f"the build ended before the kill point:\n{process.stdout.read().decode()}"
        assert time.monotonic() < deadline, "the kill point never came"
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()  # reaped, as a shell would: a zombie's pid would still look alive to the lock


def dataset_files(out: Path) -> dict[str, bytes]:
    """Every file of the dataset (SynRail's own state under .synrail/ left out), the output's own path
    replaced so that two outputs compare equal."""
    return {str(p.relative_to(out)): p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.rglob("*")) if p.is_file() and not p.relative_to(out).parts[0] == ".synrail"}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_build_killed_and_rerun_equals_an_uninterrupted_one(point, tmp_path, reference):
    out = tmp_path / "out"
    first = build(out, tmp_path / "home")
    kill_when(first, lambda: KILL_POINTS[point](out))
    assert first.returncode == -signal.SIGKILL

    rerun = build(out, tmp_path / "home")
    log = rerun.communicate(timeout=600)[0].decode()
    assert rerun.returncode == 0, log

    assert [p for p in out.rglob("*.tmp")] == []  # no half-written file anywhere, caches included
    assert not (out / ".synrail" / "lock").exists()
    assert validate_dataset(out) == []
    expected, found = dataset_files(reference), dataset_files(out)
    assert sorted(found) == sorted(expected)  # no image or label lost or extra
    assert [name for name in expected if found[name] != expected[name]] == []  # nor any byte changed

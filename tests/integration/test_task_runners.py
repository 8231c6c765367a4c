"""execution.task_runner: Dask worker processes build the same bytes as threads; bad settings and a
missing package fail with a message that says what to do."""

import filecmp
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from prefect import task
from prefect.settings import PREFECT_API_URL
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.testing.utilities import prefect_test_harness

from flows import runners
from flows.build_dataset import build_with_runner
from synrail.config import ConfigError, load_config
from synrail.export.validate import validate_dataset

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
SMALL = {"num_images": 16, "backgrounds.count": 4}


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def dataset_bytes(root: Path) -> list[str]:
    """The files whose bytes must match: the image manifest and the COCO annotations."""
    return ["manifest/images.parquet"] + sorted(str(p.relative_to(root)) for p in (root / "annotations").glob("*.json"))


def test_dask_workers_build_the_same_dataset_as_threads(harness, tmp_path):
    threads, dask = tmp_path / "threads", tmp_path / "dask"
    build_with_runner(load_config(TINY, SMALL), str(threads))
    summary = build_with_runner(load_config(TINY, {**SMALL, "execution.task_runner": "dask",
                                                   "execution.max_workers": 2}), str(dask))
    assert sum(summary.images_per_split.values()) == 16
    assert validate_dataset(dask) == []
    files = dataset_bytes(threads)
    assert len(files) >= 2 and files == dataset_bytes(dask)
    match, mismatch, errors = filecmp.cmpfiles(threads, dask, files, shallow=False)
    assert mismatch == [] and errors == []
    jpegs = sorted(str(p.relative_to(threads)) for p in (threads / "images").rglob("*.jpg"))
    assert len(jpegs) == 16
    assert filecmp.cmpfiles(threads, dask, jpegs, shallow=False)[0] == jpegs


def worker_settings(dask_worker: Any) -> tuple[str | None, int, str | None, bool]:
    import os

    import cv2

    profiling = "profile" in dask_worker.periodic_callbacks  # client.run passes the worker by this name
    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), cv2.getNumThreads(), os.environ.get("PREFECT_API_URL"), profiling


def test_local_dask_workers_share_our_api_keep_glibc_adaptive_and_opencv_on_one_thread(harness):
    our_environment = os.environ.get("PREFECT_API_URL")
    with runners.task_runner_for(load_config(TINY, {"execution.task_runner": "dask",
                                                    "execution.max_workers": 2})) as runner:
        settings = runner.client.run(worker_settings)
    # Dask's default MALLOC_TRIM_THRESHOLD_ made each image-sized array a fresh mmap (3x slower);
    # a worker without our API URL started an ephemeral server of its own; Dask's profiler sampled for
    # a dashboard that is not there
    api_url = PREFECT_API_URL.value()
    assert api_url and len(settings) == 2 and set(settings.values()) == {(None, 1, api_url, False)}
    # and only the workers are told: a URL left in this process would outlive its server
    assert os.environ.get("PREFECT_API_URL") == our_environment


@task
def double(x: int) -> int:
    return 2 * x


def test_submissions_bring_their_own_dask_key_so_dask_never_tokenizes_them(harness, monkeypatch):
    import distributed.client

    def refuse(*args, **kwargs):
        raise AssertionError("Dask tokenized a submission to make its key")

    monkeypatch.setattr(distributed.client, "tokenize", refuse)
    with runners.task_runner_for(load_config(TINY, {"execution.task_runner": "dask",
                                                    "execution.max_workers": 1})) as runner:
        futures = [runner.submit(double, {"x": x}) for x in (1, 2)]
        assert [f.result() for f in futures] == [2, 4]
    keys = [f.wrapped_future.key for f in futures]
    assert all(k.startswith("double-") for k in keys) and len(set(keys)) == 2


def test_the_runner_follows_the_config():
    assert isinstance(runners.task_runner_for(load_config(TINY)), ThreadPoolTaskRunner)
    local = runners.task_runner_for(load_config(TINY, {"execution.task_runner": "dask", "execution.max_workers": 3}))
    assert local.cluster_kwargs == {"n_workers": 3, "threads_per_worker": 1, "processes": True,
                                    "dashboard_address": None}
    remote = runners.task_runner_for(load_config(TINY, {"execution.task_runner": "dask",
                                                        "execution.dask_address": "tcp://10.0.0.5:8786"}))
    assert remote.address == "tcp://10.0.0.5:8786"


def test_execution_settings_stay_out_of_the_build_hash():
    plain = load_config(TINY)
    dask = load_config(TINY, {"execution.task_runner": "dask", "execution.dask_address": "tcp://h:8786"})
    assert plain.build_hash() == dask.build_hash()


@pytest.mark.parametrize("overrides, message", [
    ({"execution.task_runner": "spark"}, "task_runner"),
    ({"execution.dask_address": "tcp://h:8786"}, "dask_address applies only to another task_runner"),
    ({"execution.task_runner": "dask", "execution.ray_address": "auto"}, "ray_address"),
    ({"execution.task_runner": "dask", "execution.dask_address": "tcp://h :8786"}, "must be an address"),
])
def test_bad_runner_settings_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(TINY, overrides)


def test_a_missing_package_names_what_to_install(monkeypatch):
    for module in ["prefect_dask", "prefect_dask.task_runners"]:
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it raises
    runners._dask_runner_class.cache_clear()
    try:
        with pytest.raises(runners.TaskRunnerUnavailable, match=r'pip install "prefect-dask>=0.3.7"'):
            runners.task_runner_for(load_config(TINY, {"execution.task_runner": "dask"}))
    finally:
        runners._dask_runner_class.cache_clear()


@pytest.mark.skipif(importlib.util.find_spec("prefect_ray") is None,
                    reason='prefect-ray is not installed (pip install "synrail[ray]", about 250 MB)')
def test_ray_runner_is_built_from_the_config():
    runner = runners.task_runner_for(load_config(TINY, {"execution.task_runner": "ray"}))
    assert type(runner).__name__ == "RayTaskRunner"


def test_without_ray_the_message_names_the_extra():
    if importlib.util.find_spec("prefect_ray") is not None:
        pytest.skip("prefect-ray is installed")
    with pytest.raises(runners.TaskRunnerUnavailable, match=r'pip install "synrail\[ray\]"'):
        runners.task_runner_for(load_config(TINY, {"execution.task_runner": "ray"}))

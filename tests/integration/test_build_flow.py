"""The build flow on configs/tiny.yaml under Prefect's test harness (one server for this module)."""

import base64
import filecmp
import json
import re
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.testing.utilities import prefect_test_harness

from flows.build_dataset import build_dataset, build_with_runner, expected_task_runs
from synrail.config import load_config
from synrail.export.validate import validate_dataset

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"


@pytest.fixture(scope="module", autouse=True)
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def first_build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("build") / "tiny"
    build_with_runner(load_config(TINY), str(out))
    return out


def dataset_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".synrail" not in p.parts)


def task_states(flow_run_id, expected: int) -> list[str]:
    """Final task-run states; the server records them from events, so wait until all have landed."""
    deadline = time.monotonic() + 30
    while True:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        states = [r.state.name for r in runs if r.state]
        if (len(states) == expected and all(r.state.is_final() for r in runs)) or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


def test_tiny_build_exports_a_valid_dataset(first_build):
    assert validate_dataset(first_build) == []
    cfg = load_config(TINY)
    images = list((first_build / "images").rglob("*.jpg"))
    assert len(images) == cfg.num_images
    assert len(list((first_build / "labels").rglob("*.txt"))) == cfg.num_images
    for name in ["data.yaml", "dataset_card.md", "manifest/backgrounds.parquet", "manifest/gallery.parquet",
                 "manifest/images.parquet", "manifest/annotations.parquet"]:
        assert (first_build / name).is_file(), name
    coco = json.loads((first_build / "annotations/instances_train.json").read_text())
    assert {c["name"] for c in coco["categories"]} == set(cfg.classes)
    assert all(a["segmentation"]["counts"] and "distance_m" in a for a in coco["annotations"])
    assert not list(first_build.rglob("*.tmp"))


def test_rerun_into_the_same_output_recomputes_nothing(first_build):
    cfg = load_config(TINY)
    before = {p: p.stat().st_mtime_ns for p in (first_build / "images").rglob("*.jpg")}
    flow_state = build_dataset.with_options(task_runner=ThreadPoolTaskRunner(max_workers=2))(
        cfg, str(first_build), return_state=True)
    assert flow_state.is_completed()
    chunks = -(-cfg.num_images // cfg.execution.chunk_size)
    expected = cfg.backgrounds.count + len(cfg.classes) + chunks + 1
    assert expected_task_runs(cfg) == expected
    states = task_states(flow_state.state_details.flow_run_id, expected)
    assert len(states) == expected and set(states) == {"Cached"}, states
    assert before == {p: p.stat().st_mtime_ns for p in (first_build / "images").rglob("*.jpg")}


def test_same_seed_gives_identical_bytes_whatever_the_chunking(first_build, tmp_path):
    other = tmp_path / "rechunked"
    cfg = load_config(TINY, {"execution.chunk_size": 5, "execution.backgrounds_per_task": 3,
                             "execution.max_workers": 1})
    assert expected_task_runs(cfg) == -(-cfg.backgrounds.count // 3) + len(cfg.classes) + -(-cfg.num_images // 5) + 1
    build_with_runner(cfg, str(other))
    files = dataset_files(first_build)
    assert files == dataset_files(other)
    match, mismatch, errors = filecmp.cmpfiles(first_build, other, files, shallow=False)
    assert mismatch == [] and errors == []


def test_another_seed_gives_another_dataset(first_build, tmp_path):
    other = tmp_path / "seed1"
    build_with_runner(load_config(TINY, {"seed": 1}), str(other))
    assert validate_dataset(other) == []
    first, second = first_build / "images/train/000000.jpg", other / "images/train/000000.jpg"
    assert first.read_bytes() != second.read_bytes()


def test_video_sources_run_through_the_flow(tmp_path):
    from media import H, W, write_video_folder

    videos = write_video_folder(tmp_path / "videos")
    cfg = load_config(TINY, {"num_images": 6, "image.width": W, "image.height": H, "backgrounds.source": "video",
                             "backgrounds.video": {"url": str(videos), "sampling": {"fps": 2.0}}})
    assert expected_task_runs(cfg) == 4 + len(cfg.classes) + 1 + 1  # 4 video files, classes, 1 chunk, export
    build_with_runner(cfg, str(tmp_path / "out"))
    assert validate_dataset(tmp_path / "out") == []


def test_ablation_builds_every_variant_and_shares_the_backgrounds(tmp_path):
    from flows.ablation import build_ablation
    from synrail.ablation import TABLE7_VARIANTS

    cfg = load_config(TINY, {"num_images": 4, "backgrounds.count": 3})
    summaries = build_ablation.with_options(task_runner=ThreadPoolTaskRunner(max_workers=2))(cfg, str(tmp_path))
    assert set(summaries) == set(TABLE7_VARIANTS)
    for name in TABLE7_VARIANTS:
        assert validate_dataset(tmp_path / name) == []
    shared = tmp_path / ".synrail-shared-cache"
    assert len(list((shared / "backgrounds").glob("*.png"))) == 3  # rendered once for all five variants
    baseline = json.loads((tmp_path / "baseline/.synrail/build.json").read_text())
    assert baseline["name"].endswith("-baseline")
    cards = {n: (tmp_path / n / "dataset_card.md").read_text() for n in TABLE7_VARIANTS}
    assert "harmonize: null" in cards["baseline"] and "backend: ring" in cards["all"]
    assert "scale: linear" in cards["baseline"] and "scale: metric" in cards["rescale"]


def test_the_build_publishes_its_statistics_card_and_samples_to_the_ui(first_build):
    with get_client(sync_client=True) as client:
        everything = client.read_artifacts()
    # other tests in this module publish under the same keys: keep this build's flow run only
    run_id = next(a.flow_run_id for a in everything
                  if a.key == "dataset-counts" and a.description.endswith(first_build.as_posix()))
    artifacts = {a.key: a for a in everything if a.key and a.flow_run_id == run_id}
    progress = [a for a in everything if a.type == "progress" and a.flow_run_id == run_id]
    assert {"dataset-counts", "dataset-classes", "dataset-card", "dataset-samples"} <= set(artifacts)
    counts = json.loads(artifacts["dataset-counts"].data)
    assert sum(row["images"] for row in counts) == load_config(TINY).num_images
    assert "# " in artifacts["dataset-card"].data
    samples = artifacts["dataset-samples"].data  # the grid embedded as an image the UI shows, then its URL
    embedded = re.fullmatch(r"!\[sample grid with boxes\]\(data:image/jpeg;base64,([A-Za-z0-9+/=]+)\)\n\n"
                            r"Full size: (\S+)\n", samples)
    assert embedded and embedded.group(2).endswith("/card/samples.png")
    preview = cv2.imdecode(np.frombuffer(base64.b64decode(embedded.group(1)), np.uint8), cv2.IMREAD_COLOR)
    grid = cv2.imread(str(first_build / "card/samples.png"))
    assert preview.shape == grid.shape  # 960 px wide: kept at full size
    assert np.abs(preview.astype(int) - grid).mean() < 4  # the same picture, JPEG-compressed
    assert progress and max(a.data for a in progress) == 100.0



class RecordingTaskRunner(ThreadPoolTaskRunner):
    """Threads, recording every submission and every wait for a result, in order."""
    events: list[tuple[str, str]] = []

    def submit(self, task, parameters, wait_for=None, dependencies=None):
        self.events.append(("submit", task.name))
        future = super().submit(task, parameters, wait_for, dependencies)
        wait = future.result

        def recorded_result(*args, **kwargs):
            self.events.append(("result", task.name))
            return wait(*args, **kwargs)
        future.result = recorded_result
        return future


def test_backgrounds_and_gallery_are_submitted_together(tmp_path):
    """Every obstacle task is queued before the flow waits for any background, so no worker idles
    through the backgrounds' last tasks."""
    RecordingTaskRunner.events = []
    cfg = load_config(TINY)
    state = build_dataset.with_options(task_runner=RecordingTaskRunner(max_workers=2))(
        cfg, str(tmp_path / "out"), return_state=True)
    assert state.is_completed()
    events = RecordingTaskRunner.events
    last_obstacle_submitted = max(i for i, e in enumerate(events) if e == ("submit", "prepare-obstacles"))
    first_background_awaited = events.index(("result", "prepare-backgrounds"))
    assert last_obstacle_submitted < first_background_awaited, events


def test_the_sample_preview_is_a_jpeg_data_uri_no_wider_than_asked():
    from synrail.export.plots import preview_data_uri

    wide = np.random.default_rng(0).integers(0, 256, (300, 2000, 3), dtype=np.uint8)
    uri = preview_data_uri(cv2.imencode(".png", wide)[1].tobytes(), max_width=500)
    assert uri.startswith("data:image/jpeg;base64,")
    preview = cv2.imdecode(np.frombuffer(base64.b64decode(uri.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR)
    assert preview.shape == (75, 500, 3)
    with pytest.raises(ValueError, match="decodable"):
        preview_data_uri(b"not an image")

"""Approach clips on real footage through the build flow: one compose-video-clips task per video,
the same bytes as the plain loop, and a valid export."""

import csv
from pathlib import Path

import pytest
from media import approach_frames, write_mp4
from prefect.testing.utilities import prefect_test_harness

from flows.build_dataset import build_with_runner
from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.stages.export import read_build_records
from synrail.stages.local import build_in_process
from synrail.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_the_flow_builds_real_clips_as_the_plain_loop_does(tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    frames, _ = approach_frames(1, 8, 50.0, 10.0)
    write_mp4(folder / "run.mp4", frames, 10.0)
    (tmp_path / "meta.csv").write_text("video,speed_kmh\nrun.mp4,50\n")
    cfg = load_config(ROOT / "configs" / "tiny-sequences.yaml", {
        "backgrounds.source": "video",
        "backgrounds.video": {"url": str(folder), "hfov_deg": 60,
                              "sampling": {"stride": 2, "sidecar": str(tmp_path / "meta.csv")}},
        "image.width": 640, "image.height": 360, "num_images": 2, "splits": {"train": 1.0, "val": 0.0, "test": 0.0},
        "gallery.per_class": 1, "sequences.clips": 1, "sequences.frames_per_clip": 6,
        "sequences.first_distance_m": [12, 25]})
    build_with_runner(cfg, str(tmp_path / "flow"))
    build_in_process(cfg, str(tmp_path / "loop"))
    assert validate_dataset(tmp_path / "flow") == []
    (flow_clip,) = read_build_records(Store(str(tmp_path / "flow"))).clips
    (loop_clip,) = read_build_records(Store(str(tmp_path / "loop"))).clips
    assert flow_clip.sha256 == loop_clip.sha256 and flow_clip.source == "video:run.mp4"
    (row,) = csv.DictReader((tmp_path / "flow" / "clips.csv").open())
    assert row["speed_source"] == "sidecar" and float(row["speed_kmh"]) == 50.0

"""Weather, shadows and composite quality control inside a build."""

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.stages.local import build_in_process

ROOT = Path(__file__).resolve().parents[2]


def test_weather_mix_and_quality_control_are_recorded_and_deterministic(tmp_path):
    overrides = {"num_images": 16, "weather.mix": {"none": 1, "rain": 1, "snow": 1, "dark": 1},
                 "quality": {"threshold": 0.6, "max_resamples": 2}}
    cfg = load_config(ROOT / "configs/tiny.yaml", overrides)
    build_in_process(cfg, str(tmp_path / "a"))
    build_in_process(load_config(ROOT / "configs/tiny.yaml", {**overrides, "execution.chunk_size": 3}),
                     str(tmp_path / "b"))
    assert validate_dataset(tmp_path / "a") == []
    images = pq.read_table(tmp_path / "a/manifest/images.parquet").to_pylist()
    conditions = Counter(i["condition"] for i in images)
    assert {"rain", "snow", "dark"} & set(conditions)  # weather was laid over some images
    assert all(i["quality"] is not None and 0 <= i["quality"] <= 1 for i in images if i["num_annotations"])
    assert all(1 <= i["attempts"] <= 3 for i in images)
    redrawn = [i for i in images if i["attempts"] > 1]
    assert all(i["quality"] >= 0 for i in redrawn)
    card = (tmp_path / "a/dataset_card.md").read_text()
    assert "## Composite quality" in card and any(c in card for c in ("rain", "snow", "dark"))
    for name in ["images/train", "labels/train", "annotations"]:
        for path in sorted((tmp_path / "a" / name).iterdir()):
            assert path.read_bytes() == (tmp_path / "b" / name / path.name).read_bytes(), path


def test_quality_control_off_changes_nothing_about_attempts(tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": 4})
    build_in_process(cfg, str(tmp_path / "plain"))
    images = pq.read_table(tmp_path / "plain/manifest/images.parquet").to_pylist()
    assert all(i["attempts"] == 1 and i["quality"] is None for i in images)
    assert "Quality control was off" in (tmp_path / "plain/dataset_card.md").read_text()

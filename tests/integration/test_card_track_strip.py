"""The dataset card shows a few real backgrounds with the track area the build found on them."""

from pathlib import Path

import cv2
import numpy as np
from media import write_frame_sequences

from synrail.config import load_config
from synrail.export.figures import AREA_BGR
from synrail.stages.local import build_in_process

ROOT = Path(__file__).resolve().parents[2]


def test_a_frames_build_card_has_the_track_area_strip_and_a_procedural_one_has_none(tmp_path):
    folder = write_frame_sequences(tmp_path / "frames", 50, 2, 3, "png")
    cfg = load_config(ROOT / "configs" / "tiny.yaml", {
        "num_images": 4, "backgrounds.source": "frames", "backgrounds.frames.url": str(folder),
        "backgrounds.frames.sampling.filters.duplicate_hamming": 0, "splits.train": 0.5, "splits.val": 0.5,
        "splits.test": 0.0})
    out = tmp_path / "out"
    build_in_process(cfg, str(out))
    strip = cv2.imread(str(out / "card" / "track_areas.jpg"))
    assert strip is not None and strip.shape[1] > strip.shape[0]
    assert int((np.abs(strip.astype(int) - AREA_BGR).max(axis=2) < 40).sum()) > 100  # the areas are drawn
    assert "![card/track_areas.jpg](card/track_areas.jpg)" in (out / "dataset_card.md").read_text()

    procedural = tmp_path / "procedural"
    build_in_process(load_config(ROOT / "configs" / "tiny.yaml", {"num_images": 4}), str(procedural))
    assert not (procedural / "card" / "track_areas.jpg").exists()
    assert "track_areas" not in (procedural / "dataset_card.md").read_text()

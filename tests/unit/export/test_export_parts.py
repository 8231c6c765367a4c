import numpy as np
import pytest
import yaml

from synrail.export.coco import decode_rle, encode_rle, encode_window_rle, rle_box_and_area, window_runs
from synrail.export.yolo import data_yaml, yolo_line
from synrail.stages.splits import split_counts


def test_rle_round_trip_and_tight_box():
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = np.zeros((72, 128), bool)
        y0, x0 = rng.integers(0, 60), rng.integers(0, 110)
        mask[y0:y0 + rng.integers(1, 12), x0:x0 + rng.integers(1, 18)] = True
        mask &= rng.random(mask.shape) > 0.2
        mask[y0, x0] = True
        rle = encode_rle(mask)
        assert isinstance(rle["counts"], str) and rle["size"] == [72, 128]
        assert (decode_rle(rle) == mask).all()
        box, area = rle_box_and_area(rle)
        rows, cols = np.nonzero(mask)
        assert box == [cols.min(), rows.min(), cols.max() - cols.min() + 1, rows.max() - rows.min() + 1]
        assert area == mask.sum()


def test_window_rle_is_the_whole_mask_rle():
    # every edge case of the runs: windows at each border, masks starting or ending set, empty and full windows
    rng = np.random.default_rng(1)
    for _ in range(2000):
        height, width = (int(v) for v in rng.integers(1, 30, 2))
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        top, left = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
        window = rng.random((h, w)) < rng.choice([0.0, 0.3, 0.9, 1.0])
        full = np.zeros((height, width), bool)
        full[top:top + h, left:left + w] = window
        assert encode_window_rle(top, left, window, (height, width)) == encode_rle(full)
    assert window_runs(0, 0, np.ones((2, 3), bool), (2, 3)) == [0, 6]
    assert window_runs(1, 1, np.ones((1, 1), bool), (3, 3)) == [4, 1, 4]


def test_yolo_line_is_normalised_centre_and_size():
    assert yolo_line(2, [10, 20, 30, 40], 100, 200) == "2 0.250000 0.200000 0.300000 0.200000"


def test_data_yaml_has_no_path_and_maps_ids_to_names():
    doc = yaml.safe_load(data_yaml(["train", "val"], ["person", "rock"]))
    assert "path" not in doc
    assert doc["train"] == "images/train" and doc["val"] == "images/val" and "test" not in doc
    assert doc["names"] == {0: "person", 1: "rock"}


@pytest.mark.parametrize("total", [1, 3, 7, 24, 200, 1001])
def test_split_counts_add_up_and_keep_small_splits(total):
    counts = split_counts(total, {"train": 0.8, "val": 0.1, "test": 0.1})
    assert sum(counts.values()) == total
    if total >= 3:
        assert min(counts.values()) >= 1
    assert counts["train"] >= counts["val"]


def test_every_split_gets_its_share_of_conditions_and_track_types():
    from collections import Counter

    from synrail.config import load_config
    from synrail.stages.splits import background_plan

    cfg = load_config(None, {"backgrounds.count": 40})
    plan = background_plan(cfg)
    assert Counter(s for s, _, _ in plan) == {"train": 32, "val": 4, "test": 4}
    for split in ("val", "test"):
        conditions = Counter(c for s, c, _ in plan if s == split)
        tracks = Counter(t for s, _, t in plan if s == split)
        assert len(conditions) == 4 and tracks == {"ballasted": 2, "ballastless": 2}
    train = Counter(c for s, c, _ in plan if s == "train")
    assert train["normal"] > train["overcast"] > train["fog"] >= 1
    assert plan == background_plan(cfg) and plan != background_plan(cfg.model_copy(update={"seed": 1}))


def test_random_texture_switch_flattens_unseen_obstacles(tmp_path):
    import cv2
    import numpy as np

    from synrail.config import load_config
    from synrail.stages.gallery import prepare_gallery_item
    from synrail.storage.store import Store

    def chroma_spread(random_texture: bool) -> list[float]:
        """Spread of each pixel's colour direction: shading scales a flat colour, a texture varies it."""
        cfg = load_config(None, {"gallery.random_texture": random_texture})
        spreads = []
        for index in range(8):
            record = prepare_gallery_item(cfg, "unseen_obstacle", index, Store(str(tmp_path)))
            rgba = cv2.imread(str(tmp_path / record.path), cv2.IMREAD_UNCHANGED)
            inner = cv2.erode((rgba[:, :, 3] > 0).astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
            pixels = rgba[inner][:, :3].astype(float) + 8
            spreads.append(float(np.log(pixels / pixels.mean(axis=1, keepdims=True)).std(axis=0).mean()))
        return spreads

    flat, textured = chroma_spread(False), chroma_spread(True)
    assert max(flat) < 0.02 and np.median(textured) > 4 * np.median(flat)


def test_card_figures_are_written_and_linked(tmp_path):
    import cv2

    from synrail.config import load_config
    from synrail.stages.local import build_in_process

    out = tmp_path / "ds"
    build_in_process(load_config(None, {"num_images": 6, "image.width": 320, "image.height": 192,
                                        "backgrounds.count": 3, "gallery.per_class": 2}), str(out))
    card = (out / "dataset_card.md").read_text()
    for name in ["classes", "distances", "conditions", "samples"]:
        figure = cv2.imread(str(out / "card" / f"{name}.png"))
        assert figure is not None and figure.shape[0] > 100, name
        assert f"(card/{name}.png)" in card
    grid = cv2.imread(str(out / "card" / "samples.png"))
    red = (grid[:, :, 2] > 200) & (grid[:, :, 1] < 60) & (grid[:, :, 0] < 60)
    assert red.sum() > 50  # boxes are drawn


def test_card_has_a_camera_table_per_sequence():
    from synrail.export.card import _inputs_section
    from synrail.records import InputReport, SequenceCamera, UnusedFrame

    report = InputReport(
        videos=["cab.mp4", "cctv"],
        unused_frames=[UnusedFrame(video="cab.mp4", frame_index=3, reason="no track: no rail edges"),
                       UnusedFrame(video="cab.mp4", frame_index=5,
                                   reason="rails contradict the sequence camera: lateral offset +4.4 m"),
                       UnusedFrame(video="cctv", frame_index=1, reason="blur")],
        cameras=[SequenceCamera(sequence="cab.mp4", hfov_deg=89.4, hfov_source="sleepers", hfov_sigma_deg=0.3,
                                height_m=3.0, pitch_deg=2.3, gauge_mm=1435, frames_calibrated=2),
                 SequenceCamera(sequence="cctv", hfov_deg=60.0, hfov_source="fallback", gauge_mm=1676)])
    backgrounds = [{"source": "video:cab.mp4"}, {"source": "video:cab.mp4"}, {"source": "video:cctv"}]
    section = _inputs_section(backgrounds, report)
    assert ("| cab.mp4 | 89.4 ± 0.3 (sleepers) | 3.00 | 2.3 | 1435 | 2 | "
            "no track 1; rails contradict the sequence camera 1 |") in section
    assert "| cctv | 60.0 (fallback) | - | - | 1676 | 1 | blur 1 |" in section
    # Reports written before cameras were recorded still read and render.
    assert "Camera per sequence" not in _inputs_section(backgrounds, InputReport.model_validate(
        {"videos": ["cab.mp4"], "notes": []}))

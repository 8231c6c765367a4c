"""Shipped masks first (COCO segmentations), one object per cutout, provenance, real sizes per kind."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from synrail.compose.composite import GalleryCutout, jittered_height
from synrail.segment.base import MaskResult, Prompt
from synrail.sources.cutouts import extract_cutouts, mask_parts
from synrail.sources.gallery_sources import rasterise_segmentation, read_coco_instances, read_rgba_folder
from synrail.sources.sizes import CATEGORY_HEIGHTS_M, category_height_range, normalise_category
from synrail.storage.store import Store

H, W = 240, 320
CLASS_MAP = {"dog": "animal", "person": "person", "car": "vehicle"}
# a dog-like polygon (body, legs, head) well inside the image
DOG = np.array([[60, 150], [70, 110], [130, 100], [150, 70], [175, 75], [170, 105], [165, 150], [150, 150],
                [145, 120], [90, 125], [85, 150]], np.float64)


@dataclass
class BoxSegmenter:
    """The whole prompt box as the mask; counts its calls."""

    calls: int = 0

    @property
    def identity(self) -> str:
        return "grabcut/fake-box"

    def segment(self, image_bgr: np.ndarray, prompts: Sequence[Prompt]) -> list[MaskResult]:
        self.calls += len(prompts)
        out = []
        for p in prompts:
            mask = np.zeros(image_bgr.shape[:2], bool)
            x0, y0, x1, y1 = (int(round(v)) for v in p.box)
            mask[y0:y1, x0:x1] = True
            out.append(MaskResult(mask, 0.8))
        return out


class PassCache:
    def segment_cached(self, segmenter, image_bgr, image_sha256, prompts):  # noqa: ANN001, ANN201
        return segmenter.segment(image_bgr, prompts)


def _gt(polygon: np.ndarray, shape: tuple[int, int] = (H, W), scale: float = 1.0) -> np.ndarray:
    """The polygon drawn independently of pycocotools (8x supersampled, then thresholded at half)."""
    s = 8
    big = np.zeros((shape[0] * s, shape[1] * s), np.uint8)
    cv2.fillPoly(big, [np.round(polygon * scale * s).astype(np.int32)], 1)
    return cv2.resize(big.astype(np.float32), (shape[1], shape[0]), interpolation=cv2.INTER_AREA) >= 0.5


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def _box(polygon: np.ndarray) -> list[float]:
    x0, y0 = polygon.min(0)
    x1, y1 = polygon.max(0)
    return [float(x0), float(y0), float(x1 - x0), float(y1 - y0)]


def _coco_folder(tmp_path: Path, segmentations: dict[int, object], image_shape: tuple[int, int] = (H, W),
                 category: str = "dog") -> tuple[Path, Path]:
    """One image per annotation, all with the DOG outline; ``segmentations``: annotation id -> its field."""
    images_dir = tmp_path / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images, annotations = [], []
    for ann_id, seg in segmentations.items():
        pixels = rng.integers(0, 256, (*image_shape, 3), dtype=np.uint8)
        cv2.imwrite(str(images_dir / f"{ann_id}.png"), pixels)
        images.append({"id": ann_id, "file_name": f"{ann_id}.png", "width": W, "height": H})
        ann = {"id": ann_id, "image_id": ann_id, "category_id": 1, "bbox": _box(DOG), "area": 1.0, "iscrowd": 0}
        if seg is not None:
            ann["segmentation"] = seg
        annotations.append(ann)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 1, "name": category}]}))
    return path, images_dir


def _rle(mask: np.ndarray) -> dict:
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def _uncompressed(mask: np.ndarray) -> dict:
    flat = mask.astype(np.uint8).flatten(order="F")
    changes = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(edges).tolist()
    if flat[0]:
        counts = [0, *counts]
    return {"size": list(mask.shape), "counts": counts}


def _alpha(cache: Store, path: str) -> np.ndarray:
    """The cutout's mask as composition reads it: alpha >= 128 (a clean edge ramps below that outside)."""
    return cv2.imdecode(np.frombuffer(cache.read_bytes(path), np.uint8), cv2.IMREAD_UNCHANGED)[..., 3] >= 128


def _cutout_iou(cache: Store, cutout, gt: np.ndarray) -> float:  # noqa: ANN001
    """The cutout's alpha, put back where its provenance box says it was cut, against the ground truth."""
    alpha = _alpha(cache, cutout.path)
    x0, y0, x1, y1 = (int(v) for v in cutout.source_box)
    assert alpha.shape == (y1 - y0, x1 - x0)
    frame = np.zeros_like(gt)
    frame[y0:y1, x0:x1] = alpha
    return _iou(frame, gt)


# -- 1. shipped masks first ----------------------------------------------------------------------
def test_polygon_rle_and_uncompressed_rle_become_exact_masks(tmp_path):
    gt = _gt(DOG)
    ann_path, images_dir = _coco_folder(tmp_path, {
        1: [DOG.flatten().tolist()], 2: _rle(gt), 3: _uncompressed(gt), 4: None})
    candidates, skipped = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    assert not skipped and len(candidates) == 4
    segmenter, cache = BoxSegmenter(), Store(str(tmp_path / "cache"))
    cutouts, rejected = extract_cutouts(candidates, segmenter, PassCache(), cache)
    assert not rejected
    by_key = {c.instance_key: c for c in cutouts}
    for key in ("coco:1", "coco:2", "coco:3"):
        key = key.replace("coco", "objects365")
        assert by_key[key].mask_source == "annotation" and by_key[key].mask_score == 1.0
        assert _cutout_iou(cache, by_key[key], gt) >= 0.98, key
    # the RLEs are the ground truth itself: exact to the pixel
    assert _cutout_iou(cache, by_key["objects365:2"], gt) == 1.0
    assert _cutout_iou(cache, by_key["objects365:3"], gt) == 1.0
    # boxes only: the segmenter, called for that one annotation only
    assert segmenter.calls == 1 and by_key["objects365:4"].mask_source == "grabcut"
    assert by_key["objects365:4"].mask_score == 0.8


def test_a_polygon_is_rasterised_at_the_decoded_images_resolution(tmp_path):
    """Annotations in the original image's pixels, the image stored at half size (a downscaled copy)."""
    ann_path, images_dir = _coco_folder(tmp_path, {1: [DOG.flatten().tolist()], 2: _rle(_gt(DOG))},
                                        image_shape=(H // 2, W // 2))
    candidates, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    cache = Store(str(tmp_path / "cache"))
    cutouts, rejected = extract_cutouts(candidates, BoxSegmenter(), PassCache(), cache, min_area_px=16)
    assert not rejected
    half = _gt(DOG, (H // 2, W // 2), 0.5)
    for cutout in cutouts:
        assert _cutout_iou(cache, cutout, half) >= 0.95, cutout.instance_key
    assert rasterise_segmentation(_rle(_gt(DOG)), (H // 2, W // 2)).shape == (H // 2, W // 2)


def test_mask_modes_annotation_and_segmenter(tmp_path):
    ann_path, images_dir = _coco_folder(tmp_path, {1: [DOG.flatten().tolist()], 2: None, 3: []})
    only, skipped = read_coco_instances(ann_path, images_dir, CLASS_MAP, mask="annotation")
    assert [c.instance_key for c in only] == ["objects365:1"]
    assert {s.instance_key for s in skipped} == {"objects365:2", "objects365:3"}
    assert all("no segmentation" in s.reason for s in skipped)
    boxes, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP, mask="segmenter")
    assert len(boxes) == 3 and all(c.segmentation is None for c in boxes)
    auto, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    assert [c.segmentation is not None for c in auto] == [True, False, False]
    with pytest.raises(ValueError, match="mask mode"):
        read_coco_instances(ann_path, images_dir, CLASS_MAP, mask="sam")


def test_an_unusable_segmentation_is_skipped_with_its_reason(tmp_path):
    ann_path, images_dir = _coco_folder(tmp_path, {1: {"size": [H, W], "counts": "not an rle !!"}})
    candidates, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    cutouts, skipped = extract_cutouts(candidates, BoxSegmenter(), PassCache(), Store(str(tmp_path / "c")))
    assert not cutouts and len(skipped) == 1 and skipped[0].reason.startswith("unusable segmentation")


# -- 3. one object per cutout --------------------------------------------------------------------
def test_a_two_object_rgba_becomes_two_cutouts_and_specks_are_dropped(tmp_path):
    root = tmp_path / "cars"
    root.mkdir()
    rgba = np.zeros((90, 260, 4), np.uint8)
    rgba[..., :3] = 90
    cv2.rectangle(rgba, (10, 20), (110, 70), (30, 60, 160, 255), -1)
    cv2.rectangle(rgba, (140, 25), (250, 75), (160, 60, 30, 255), -1)
    rgba[5:8, 200:203, 3] = 255  # a speck
    cv2.imwrite(str(root / "two.png"), rgba)
    candidates, _ = read_rgba_folder(root, "vehicle", (1.3, 1.6))
    cache = Store(str(tmp_path / "cache"))
    cutouts, skipped = extract_cutouts(candidates, BoxSegmenter(), PassCache(), cache)
    assert not skipped
    assert sorted((c.instance_key, c.source_box, c.mask_source) for c in cutouts) == [
        ("rgba:two.png#part1", (140.0, 25.0, 251.0, 76.0), "rgba"),
        ("rgba:two.png#part2", (10.0, 20.0, 111.0, 71.0), "rgba")]
    assert [c.mask_px for c in sorted(cutouts, key=lambda c: c.instance_key)] == [111 * 51, 101 * 51]


def test_an_annotation_in_separate_parts_is_left_out_and_a_sitting_person_too(tmp_path):
    left, right = DOG - [40, 0], DOG + [100, 0]
    ann_path, images_dir = _coco_folder(tmp_path, {1: [left.flatten().tolist(), right.flatten().tolist()]})
    candidates, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP, skip_truncated=False)
    cutouts, skipped = extract_cutouts(candidates, BoxSegmenter(), PassCache(), Store(str(tmp_path / "c")))
    assert not cutouts and skipped[0].reason == "mask in 2 separate parts (an occluded object)"

    sitting = np.array([[60, 100], [180, 100], [180, 160], [60, 160]], np.float64)  # wider than tall
    standing = np.array([[200, 40], [240, 40], [240, 160], [200, 160]], np.float64)
    ann_path, images_dir = _coco_folder(tmp_path / "people", {1: [sitting.flatten().tolist()],
                                                              2: [standing.flatten().tolist()]}, category="person")
    candidates, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP, max_overlap=1.0)
    cutouts, skipped = extract_cutouts(candidates, BoxSegmenter(), PassCache(), Store(str(tmp_path / "c")))
    assert [c.instance_key for c in cutouts] == ["objects365:2"]
    assert skipped[0].instance_key == "objects365:1" and skipped[0].reason.startswith("not standing")


def test_mask_parts_keeps_sizeable_parts_largest_first():
    mask = np.zeros((50, 100), bool)
    mask[5:45, 5:45] = True  # 1600 px
    mask[10:30, 60:80] = True  # 400 px: sizeable
    mask[40:45, 90:95] = True  # 25 px: a speck
    parts = mask_parts(mask)
    assert [int(p.sum()) for p in parts] == [1600, 400]
    assert mask_parts(np.zeros((4, 4), bool)) == []


# -- 4. real sizes per kind ----------------------------------------------------------------------
def test_heights_per_category_from_the_table_config_and_class():
    assert normalise_category("car_(automobile)") == "car" and normalise_category("Pickup Truck") == "pickup truck"
    assert category_height_range("Dog") == CATEGORY_HEIGHTS_M["dog"]
    assert category_height_range("bus_(vehicle)") == CATEGORY_HEIGHTS_M["bus"]
    assert category_height_range("Elephant")[0] > 2.0
    assert category_height_range("dog", {"Dog": (0.5, 0.6)}) == (0.5, 0.6)
    assert category_height_range("unicorn") is None
    with pytest.raises(ValueError, match="dog"):
        category_height_range("dog", {"dog": (0.9, 0.5)})


def test_coco_candidates_get_their_categorys_height_range(tmp_path):
    ann_path, images_dir = _coco_folder(tmp_path, {1: None}, category="dog")
    (dog,), _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    assert dog.height_m_range == CATEGORY_HEIGHTS_M["dog"] and dog.class_name == "animal"
    (dog,), _ = read_coco_instances(ann_path, images_dir, CLASS_MAP, category_heights_m={"dog": (0.4, 0.5)})
    assert dog.height_m_range == (0.4, 0.5)
    (dog,), _ = read_coco_instances(ann_path, images_dir, {"dog": "animal", "unicorn": "animal"},
                                    height_m_ranges={"animal": (1.0, 1.1)})
    assert dog.height_m_range == (1.0, 1.1)  # an explicit class range beats the table


def test_jittered_heights_stay_in_the_kinds_range():
    rgba = np.zeros((4, 4, 4), np.uint8)
    dog = GalleryCutout("d", "animal", "coco:dog", rgba, 0.8, (0.35, 0.85))
    drawn = GalleryCutout("p", "animal", "procedural/animal", rgba, 0.8)
    assert jittered_height(dog, 1.5) == 0.85 and jittered_height(dog, 0.1) == 0.35
    assert jittered_height(dog, 1.05) == pytest.approx(0.84)
    assert jittered_height(drawn, 1.5) == pytest.approx(1.2)  # drawn cutouts: as before, unclipped

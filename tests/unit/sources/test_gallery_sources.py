"""Gallery sources in their on-disk layouts, and cutting their candidates out."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from synrail.segment.base import MaskResult, Prompt
from synrail.sources.cutouts import ExtractedCutout, cutout_from_mask, extract_cutouts
from synrail.sources.gallery_sources import (
    ObstacleCandidate,
    Skipped,
    dtd_texture_loader,
    read_coco_instances,
    read_dtd_textures,
    read_pennfudan,
    read_rgba_folder,
    read_rock_folders,
)
from synrail.sources.procedural_obstacles import SIZE_PRIORS_M, render_cutout
from synrail.storage.store import Store

CLASS_MAP = {"Person": "person", "Car": "vehicle", "Horse": "animal", "Cow": "animal"}


# -- fixtures in the datasets' own layouts -------------------------------------------------------
def _noise_image(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _write(path: Path, image: np.ndarray, *params: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), image, list(params))
    return path


def _corrupt(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG this is not an image")
    return path


def _ann(ann_id: int, image_id: int, category_id: int, bbox: list[float], **flags: int) -> dict:
    return {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": bbox,
            "area": bbox[2] * bbox[3], "iscrowd": 0, **flags}


@pytest.fixture
def objects365(tmp_path: Path) -> tuple[Path, Path]:
    """Objects365-style COCO JSON: 2 good images, one corrupt file, one missing file."""
    images_dir = tmp_path / "objects365" / "images" / "val"
    for i, name in ((1, "obj365_val_1.jpg"), (2, "obj365_val_2.jpg")):
        _write(images_dir / "patch0" / name, _noise_image(240, 320, i))
    _corrupt(images_dir / "patch0" / "obj365_val_3.jpg")
    categories = [{"id": 1, "name": "Person"}, {"id": 2, "name": "Car"}, {"id": 3, "name": "Horse"},
                  {"id": 4, "name": "Cow"}, {"id": 5, "name": "Chair"}]
    images = [{"id": i, "file_name": f"patch0/obj365_val_{i}.jpg", "width": 320, "height": 240} for i in (1, 2, 3, 4)]
    annotations = [
        _ann(1, 1, 1, [40, 40, 60, 120]),  # good person
        _ann(2, 1, 1, [150, 60, 50, 100], iscrowd=1),  # crowd
        _ann(3, 1, 2, [200, 30, 20, 20]),  # tiny car
        _ann(4, 1, 3, [0, 100, 50, 60]),  # horse cut by the left border
        _ann(5, 1, 5, [250, 150, 40, 40]),  # chair: unmapped
        _ann(6, 2, 2, [50, 50, 120, 80]),  # car and person overlapping heavily
        _ann(7, 2, 1, [60, 60, 100, 70]),
        _ann(8, 2, 4, [200, 40, 60, 50]),  # good cow, touched a little by person 9
        _ann(9, 2, 1, [230, 80, 40, 100]),  # good person
        _ann(10, 3, 1, [100, 60, 60, 100]),  # good box, corrupt image file
        _ann(11, 4, 1, [100, 60, 60, 100]),  # good box, missing image file
    ]
    ann_path = tmp_path / "objects365" / "annotations" / "zhiyuan_objv2_val.json"
    ann_path.parent.mkdir(parents=True)
    ann_path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return ann_path, images_dir


def _ped_mask(h: int, w: int, boxes: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
    mask = np.zeros((h, w), np.uint8)
    for value, (x0, y0, x1, y1) in enumerate(boxes, start=1):
        cv2.ellipse(mask, ((x0 + x1) // 2, (y0 + y1) // 2), ((x1 - x0) // 2, (y1 - y0) // 2), 0, 0, 360, value, -1)
    return mask


def _write_palette_png(path: Path, labels: np.ndarray) -> None:
    """Instance ids as palette indices with colours, which OpenCV alone would read as BGR."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(labels, "L").convert("P")
    image.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0] + [0] * (768 - 9))
    image.save(path)


def _read_ped_mask(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path))


@pytest.fixture
def pennfudan(tmp_path: Path) -> Path:
    """PennFudanPed: an image with 2 pedestrians (palette mask), one without its mask, a corrupt image
    (grey mask), one truncated."""
    root = tmp_path / "PennFudanPed"
    _write(root / "PNGImages" / "FudanPed00001.png", _noise_image(180, 200, 11))
    _write_palette_png(root / "PedMasks" / "FudanPed00001_mask.png",
                       _ped_mask(180, 200, [(20, 30, 70, 160), (110, 20, 170, 170)]))
    _write(root / "PNGImages" / "FudanPed00002.png", _noise_image(180, 200, 12))
    _corrupt(root / "PNGImages" / "PennPed00003.png")
    _write(root / "PedMasks" / "PennPed00003_mask.png", _ped_mask(180, 200, [(50, 40, 110, 150)]))
    _write(root / "PNGImages" / "FudanPed00004.png", _noise_image(180, 200, 13))
    _write(root / "PedMasks" / "FudanPed00004_mask.png", _ped_mask(180, 200, [(60, 40, 120, 182)]))  # cut at the bottom
    (root / "Annotation").mkdir()
    (root / "Annotation" / "FudanPed00001.txt").write_text("# PASCAL annotation (not read)\n")
    return root


def _band_texture(colours: Sequence[tuple[int, int, int]], dotted: bool = False) -> np.ndarray:
    texture = np.zeros((96, 96, 3), np.uint8)
    texture[:] = colours[0]
    if dotted:
        for y in range(8, 96, 16):
            for x in range(8, 96, 16):
                cv2.circle(texture, (x, y), 4, colours[1], -1)
    else:
        for y in range(0, 96, 16):
            texture[y:y + 8] = colours[1]
    return texture


@pytest.fixture
def dtd(tmp_path: Path) -> Path:
    root = tmp_path / "dtd"
    textures = {"banded/banded_0002.jpg": _band_texture([(255, 0, 0), (255, 255, 0)]),
                "banded/banded_0001.jpg": _band_texture([(255, 0, 0), (0, 0, 255)]),
                "dotted/dotted_0001.jpg": _band_texture([(0, 255, 0), (0, 0, 0)], dotted=True)}
    for rel, texture in textures.items():
        _write(root / "images" / rel, texture, cv2.IMWRITE_JPEG_QUALITY, 98)
    (root / "labels").mkdir()
    (root / "labels" / "train1.txt").write_text("banded/banded_0001.jpg\n")
    return root


@pytest.fixture
def rocks(tmp_path: Path) -> Path:
    root = tmp_path / "rocks"
    _write(root / "granite" / "g1.jpg", _noise_image(100, 150, 21))
    _write(root / "granite" / "g2.png", _noise_image(120, 80, 22))
    _write(root / "basalt" / "b1.jpg", _noise_image(90, 90, 23))
    _corrupt(root / "basalt" / "b2.jpg")
    (root / "basalt" / "notes.txt").write_text("not a photo\n")
    return root


def _rgba(h: int, w: int, seed: int, alpha: np.ndarray | None = None) -> np.ndarray:
    if alpha is None:
        alpha = np.zeros((h, w), np.uint8)
        cv2.ellipse(alpha, (w // 2, h // 2), (w // 3, h // 3), 0, 0, 360, 255, -1)
    return np.dstack([_noise_image(h, w, seed), alpha])


@pytest.fixture
def rgba_folder(tmp_path: Path) -> Path:
    root = tmp_path / "tyres"
    _write(root / "tyre1.png", _rgba(64, 80, 31))
    _write(root / "tyre2.webp", _rgba(70, 50, 32), cv2.IMWRITE_WEBP_QUALITY, 101)  # 101: lossless
    _write(root / "opaque.png", _rgba(40, 40, 33, np.full((40, 40), 255, np.uint8)))
    _write(root / "no_alpha.png", _noise_image(40, 40, 34))
    _corrupt(root / "broken.png")
    return root


# -- fakes ---------------------------------------------------------------------------------------
def box_ellipse_mask(shape: tuple[int, int], box: tuple[float, float, float, float]) -> np.ndarray:
    """The fake segmenter's answer: the ellipse inscribed in the prompt box."""
    x0, y0, x1, y1 = box
    mask = np.zeros(shape, np.uint8)
    centre = (round((x0 + x1) / 2), round((y0 + y1) / 2))
    cv2.ellipse(mask, centre, (max(1, round((x1 - x0) / 2) - 1), max(1, round((y1 - y0) / 2) - 1)), 0, 0, 360, 1, -1)
    return mask.astype(bool)


@dataclass
class FakeSegmenter:
    score: float = 0.9
    calls: int = 0

    @property
    def identity(self) -> str:
        return "fake/ellipse-in-box"

    def segment(self, image_bgr: np.ndarray, prompts: Sequence[Prompt]) -> list[MaskResult]:
        self.calls += 1
        return [MaskResult(box_ellipse_mask(image_bgr.shape[:2], p.box), self.score) for p in prompts]


@dataclass
class FakeMaskCache:
    """Passes straight through, recording which images were segmented."""

    segmented: list[tuple[str, int]]

    def segment_cached(self, segmenter: FakeSegmenter, image_bgr: np.ndarray, image_sha256: str,
                       prompts: Sequence[Prompt]) -> list[MaskResult]:
        self.segmented.append((image_sha256, len(prompts)))
        return segmenter.segment(image_bgr, prompts)


def _reasons(skipped: Sequence[Skipped]) -> dict[str, str]:
    return {s.instance_key: s.reason for s in skipped}


def _file_sha(url: str) -> str:
    return hashlib.sha256(Path(url.removeprefix("file://")).read_bytes()).hexdigest()


def _decode(cache: Store, cutout: ExtractedCutout) -> np.ndarray:
    data = cache.read_bytes(cutout.path)
    assert hashlib.sha256(data).hexdigest() == cutout.sha256
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


# -- adapters ------------------------------------------------------------------------------------
def test_coco_instances_keep_clean_boxes_and_say_why_the_rest_go(objects365):
    ann_path, images_dir = objects365
    candidates, skipped = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    by_key = {c.instance_key: c for c in candidates}
    assert sorted(by_key) == ["objects365:1", "objects365:10", "objects365:11", "objects365:8", "objects365:9"]
    person = by_key["objects365:1"]
    assert person.class_name == "person" and person.source == "objects365:Person"
    assert person.prompt == Prompt(box=(40.0, 40.0, 100.0, 160.0))
    assert person.mask_path is None and person.height_m_range == SIZE_PRIORS_M["person"]
    assert person.image_path.endswith("images/val/patch0/obj365_val_1.jpg")
    assert by_key["objects365:8"].class_name == "animal" and by_key["objects365:8"].source == "objects365:Cow"
    reasons = _reasons(skipped)
    assert set(reasons) == {"objects365:2", "objects365:3", "objects365:4", "objects365:6", "objects365:7"}
    assert reasons["objects365:2"] == "crowd"
    assert reasons["objects365:3"].startswith("tiny")
    assert reasons["objects365:4"].startswith("truncated")
    assert reasons["objects365:6"].startswith("occluded") and reasons["objects365:7"].startswith("occluded")
    assert not any(c.source.endswith("Chair") for c in candidates), "unmapped categories are ignored"


def test_coco_options_and_per_class_size_priors(objects365):
    ann_path, images_dir = objects365
    candidates, skipped = read_coco_instances(ann_path, images_dir, CLASS_MAP, min_area_px=100, skip_crowd=False,
                                              skip_truncated=False, max_overlap=1.0, source_name="o365",
                                              height_m_ranges={"animal": (1.2, 1.8)})
    assert not skipped
    assert len(candidates) == 10
    assert {c.height_m_range for c in candidates if c.class_name == "animal"} == {(1.2, 1.8)}


def test_missing_or_corrupt_coco_json_names_the_file(tmp_path, objects365):
    _, images_dir = objects365
    with pytest.raises(ValueError, match="nowhere.json"):
        read_coco_instances(tmp_path / "nowhere.json", images_dir, CLASS_MAP)
    broken = tmp_path / "broken.json"
    broken.write_text('{"images": [')
    with pytest.raises(ValueError, match="broken.json"):
        read_coco_instances(broken, images_dir, CLASS_MAP)
    no_boxes = tmp_path / "no_boxes.json"
    no_boxes.write_text(json.dumps({"images": [], "categories": [], "annotations": [{"id": 1}]}))
    with pytest.raises(ValueError, match="no_boxes.json"):
        read_coco_instances(no_boxes, images_dir, CLASS_MAP)


def test_pennfudan_gives_one_masked_person_per_instance_id(pennfudan):
    candidates, skipped = read_pennfudan(pennfudan)
    first = [c for c in candidates if "FudanPed00001" in c.instance_key]
    assert [c.mask_value for c in first] == [1, 2]
    assert all(c.class_name == "person" and c.source == "pennfudan" for c in candidates)
    assert all(c.mask_path.endswith("PedMasks/FudanPed00001_mask.png") for c in first)
    mask = _read_ped_mask(pennfudan / "PedMasks" / "FudanPed00001_mask.png")
    ys, xs = np.nonzero(mask == 2)
    assert first[1].prompt == Prompt(box=(xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
    # the corrupt image's mask is fine: the image itself fails when it is cut out
    assert [c.instance_key for c in candidates if "PennPed00003" in c.instance_key] == ["pennfudan:PennPed00003#1"]
    reasons = _reasons(skipped)
    assert sorted(reasons) == ["pennfudan:FudanPed00002", "pennfudan:FudanPed00004#1"]
    assert reasons["pennfudan:FudanPed00002"].startswith("missing mask")
    assert reasons["pennfudan:FudanPed00004#1"].startswith("truncated")


def test_missing_dataset_folder_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="missing folder"):
        read_pennfudan(tmp_path / "PennFudanPed")
    with pytest.raises(ValueError, match="missing folder"):
        read_rock_folders(tmp_path / "rocks")


def test_dtd_textures_are_listed_by_category(dtd):
    paths = read_dtd_textures(dtd)
    assert [p.rsplit("/images/", 1)[1] for p in paths] == [
        "banded/banded_0001.jpg", "banded/banded_0002.jpg", "dotted/dotted_0001.jpg"]


def test_a_linked_category_folder_is_a_category(dtd, tmp_path):
    linked = tmp_path / "linked_dtd"
    (linked / "images").mkdir(parents=True)
    for category in ("banded", "dotted"):
        (linked / "images" / category).symlink_to(dtd / "images" / category, target_is_directory=True)
    assert [p.rsplit("/images/", 1)[1] for p in read_dtd_textures(linked)] == [
        "banded/banded_0001.jpg", "banded/banded_0002.jpg", "dotted/dotted_0001.jpg"]


def test_a_dtd_texture_fills_procedural_unseen_obstacles(dtd):
    banded, _, dotted = read_dtd_textures(dtd)
    cutouts = {}
    for name, path in (("banded", banded), ("dotted", dotted)):
        texture = dtd_texture_loader([path])(np.random.default_rng(0))
        cutouts[name] = render_cutout("unseen_obstacle", np.random.default_rng(5), pixel_height=96, texture=texture)
    a, b = cutouts["banded"].rgba, cutouts["dotted"].rgba
    assert cutouts["banded"].variant.endswith("/texture")
    assert np.array_equal(a[..., 3], b[..., 3]), "same draws, same silhouette"
    inside = a[..., 3] > 0
    mean_a, mean_b = a[inside, :3].mean(0), b[inside, :3].mean(0)
    assert mean_a[0] > 2 * mean_a[1], "blue and red bands: no green"  # B, G, R
    assert mean_b[1] > 2 * mean_b[0] and mean_b[1] > 2 * mean_b[2], "the dotted texture is green"


def test_dtd_loader_is_reproducible_and_passes_over_bad_files(dtd, tmp_path):
    paths = read_dtd_textures(dtd)
    draw = dtd_texture_loader(paths, max_side=32)
    first = draw(np.random.default_rng(3))
    assert first.shape == (32, 32, 3)
    assert np.array_equal(first, draw(np.random.default_rng(3)))
    bad = _corrupt(tmp_path / "bad.jpg")
    assert dtd_texture_loader([str(bad), paths[0]])(np.random.default_rng(0)).shape[2] == 3
    with pytest.raises(ValueError, match="none of the 1"):
        dtd_texture_loader([str(bad)])(np.random.default_rng(0))


@dataclass(frozen=True)
class FakeDetection:
    box: tuple[float, float, float, float]
    score: float


class FakeDetector:
    def detect(self, image: np.ndarray) -> list[FakeDetection]:
        h, w = image.shape[:2]
        if h == w:  # b1.jpg: nothing found
            return []
        return [FakeDetection((1, 1, 10, 10), 0.2), FakeDetection((5, 6, w - 5, h - 6), 0.8)]


def test_rock_folders_prompt_the_whole_photo_or_the_best_detection(rocks):
    candidates, skipped = read_rock_folders(rocks)
    by_key = {c.instance_key: c for c in candidates}
    assert sorted(by_key) == ["rocks:basalt/b1.jpg", "rocks:granite/g1.jpg", "rocks:granite/g2.png"]
    g1 = by_key["rocks:granite/g1.jpg"]
    assert g1.source == "rocks:granite" and g1.class_name == "rock" and g1.height_m_range == SIZE_PRIORS_M["rock"]
    assert g1.prompt.box == pytest.approx((3.0, 2.0, 147.0, 98.0))  # 150 x 100 less 2 % a side
    assert _reasons(skipped)["rocks:basalt/b2.jpg"].startswith("unreadable image")

    detected, skipped = read_rock_folders(rocks, detector=FakeDetector(), class_name="unseen_obstacle",
                                          height_m_range=(0.1, 0.4))
    by_key = {c.instance_key: c for c in detected}
    assert by_key["rocks:granite/g1.jpg"].prompt.box == (5.0, 6.0, 145.0, 94.0)
    assert {c.class_name for c in detected} == {"unseen_obstacle"}
    assert {c.height_m_range for c in detected} == {(0.1, 0.4)}
    assert _reasons(skipped)["rocks:basalt/b1.jpg"] == "no detection"


def test_rgba_folder_takes_the_alpha_as_the_mask(rgba_folder):
    candidates, skipped = read_rgba_folder(rgba_folder, "unseen_obstacle", (0.4, 0.9), source_name="tyres")
    assert [c.instance_key for c in candidates] == ["tyres:tyre1.png", "tyres:tyre2.webp"]
    assert all(c.mask_path == c.image_path and c.prompt is None and c.height_m_range == (0.4, 0.9)
               for c in candidates)
    reasons = _reasons(skipped)
    assert reasons["tyres:opaque.png"].startswith("no transparent pixels")
    assert reasons["tyres:no_alpha.png"] == "no alpha channel"
    assert reasons["tyres:broken.png"].startswith("unreadable image")


# -- cutting out ---------------------------------------------------------------------------------
def test_cutout_from_mask_is_a_tight_hard_edged_crop():
    image = _noise_image(50, 60, 1)
    mask = np.zeros((50, 60), bool)
    mask[10:20, 30:45] = True
    mask[12, 30] = False
    rgba = cutout_from_mask(image, mask)
    assert rgba.shape == (10, 15, 4) and rgba.dtype == np.uint8
    assert np.array_equal(rgba[..., 3], mask[10:20, 30:45] * 255)
    assert np.array_equal(rgba[..., :3], image[10:20, 30:45] * mask[10:20, 30:45, None])
    assert cutout_from_mask(image, np.zeros((50, 60), bool)) is None


def test_extract_cutouts_segments_each_image_once_and_uses_shipped_masks(objects365, pennfudan, rgba_folder, tmp_path):
    ann_path, images_dir = objects365
    coco, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    peds, _ = read_pennfudan(pennfudan)
    rgba, _ = read_rgba_folder(rgba_folder, "unseen_obstacle", (0.4, 0.9))
    orphan = ObstacleCandidate(image_path=str(pennfudan / "PNGImages" / "FudanPed00002.png"), class_name="person",
                               source="pennfudan", instance_key="pennfudan:FudanPed00002#1", prompt=None,
                               mask_path=str(pennfudan / "PedMasks" / "FudanPed00002_mask.png"), mask_value=1,
                               height_m_range=(1.5, 1.9))
    segmenter, mask_cache, cache = FakeSegmenter(), FakeMaskCache([]), Store(str(tmp_path / "cache"))

    cutouts, skipped = extract_cutouts([*coco, *peds, *rgba, orphan], segmenter, mask_cache, cache)

    # one call per readable COCO image, with all its prompts; shipped masks never reach the segmenter
    image_1, image_2 = (images_dir / "patch0" / f"obj365_val_{i}.jpg" for i in (1, 2))
    assert segmenter.calls == 2
    assert sorted(mask_cache.segmented) == sorted([(_file_sha(str(image_1)), 1), (_file_sha(str(image_2)), 2)])
    reasons = _reasons(skipped)
    assert reasons["objects365:10"].startswith("unreadable image")
    assert reasons["objects365:11"].startswith("unreadable image")
    assert reasons["pennfudan:PennPed00003#1"].startswith("unreadable image")
    assert reasons["pennfudan:FudanPed00002#1"].startswith("missing mask")
    assert len(skipped) == 4
    by_key = {c.instance_key: c for c in cutouts}
    assert sorted(by_key) == sorted(["objects365:1", "objects365:8", "objects365:9", "pennfudan:FudanPed00001#1",
                                     "pennfudan:FudanPed00001#2", "rgba:tyre1.png", "rgba:tyre2.webp"])

    for cutout in cutouts:
        assert cutout.path == f"gallery/{cutout.class_name}/{cutout.sha256[:24]}.png"
        assert cache.local_path(cutout.path).is_file()
        rgba_px = _decode(cache, cutout)
        assert rgba_px.shape == (cutout.height_px, cutout.width_px, 4)
        assert int((rgba_px[..., 3] >= 128).sum()) == cutout.mask_px  # the mask, as composition reads the alpha
        assert not rgba_px[rgba_px[..., 3] == 0, :3].any()

    # segmented: the alpha reads as the fake mask's crop (a clean edge ramps across its boundary), the
    # colour is the image's inside and the object's own at the edge
    person = by_key["objects365:1"]
    image = cv2.imread(str(image_1))
    fake = box_ellipse_mask(image.shape[:2], (40, 40, 100, 160))
    ys, xs = np.nonzero(fake)
    crop = (slice(ys.min(), ys.max() + 1), slice(xs.min(), xs.max() + 1))
    rgba_px = _decode(cache, person)
    assert np.array_equal(rgba_px[..., 3] >= 128, fake[crop] > 0)
    interior = cv2.erode(fake[crop].astype(np.uint8), np.ones((7, 7), np.uint8), borderType=cv2.BORDER_CONSTANT,
                         borderValue=0) > 0
    assert np.array_equal(rgba_px[interior, :3], image[crop][interior])
    assert person.mask_score == 0.9 and person.prompt_key == Prompt(box=(40, 40, 100, 160)).key()

    # shipped masks: PennFudan instance ids and RGBA alpha, exactly
    ped = by_key["pennfudan:FudanPed00001#2"]
    ped_mask = _read_ped_mask(pennfudan / "PedMasks" / "FudanPed00001_mask.png") == 2
    ys, xs = np.nonzero(ped_mask)
    assert np.array_equal(_decode(cache, ped)[..., 3] >= 128, ped_mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1])
    assert ped.mask_score == 1.0 and ped.prompt_key == ""
    tyre = by_key["rgba:tyre1.png"]
    alpha = cv2.imread(str(rgba_folder / "tyre1.png"), cv2.IMREAD_UNCHANGED)[..., 3]
    ys, xs = np.nonzero(alpha)
    assert np.array_equal(_decode(cache, tyre)[..., 3], alpha[ys.min():ys.max() + 1, xs.min():xs.max() + 1])
    assert tyre.height_m_range == (0.4, 0.9) and tyre.class_name == "unseen_obstacle"


def test_extract_cutouts_rejects_low_scores_and_small_masks(objects365, rgba_folder, tmp_path):
    ann_path, images_dir = objects365
    coco, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    rgba, _ = read_rgba_folder(rgba_folder, "unseen_obstacle", (0.4, 0.9))
    cache = Store(str(tmp_path / "cache"))

    cutouts, skipped = extract_cutouts(coco, FakeSegmenter(score=0.3), FakeMaskCache([]), cache)
    assert not cutouts
    assert {r for r in _reasons(skipped).values() if not r.startswith("unreadable")} == {"low score (0.30 < 0.5)"}

    cutouts, skipped = extract_cutouts([*coco, *rgba], FakeSegmenter(), FakeMaskCache([]), cache, min_area_px=5000)
    assert [c.instance_key for c in cutouts] == ["objects365:1"]  # its ellipse: about 5500 px
    small = {k: r for k, r in _reasons(skipped).items() if r.startswith("small mask")}
    assert set(small) == {"objects365:8", "objects365:9", "rgba:tyre1.png", "rgba:tyre2.webp"}


def test_a_candidate_without_prompt_or_mask_is_skipped(objects365, tmp_path):
    _, images_dir = objects365
    bare = ObstacleCandidate(image_path=str(images_dir / "patch0" / "obj365_val_1.jpg"), class_name="rock",
                             source="x", instance_key="x:1", prompt=None, mask_path=None, mask_value=None,
                             height_m_range=(0.2, 1.0))
    segmenter = FakeSegmenter()
    cutouts, skipped = extract_cutouts([bare], segmenter, FakeMaskCache([]), Store(str(tmp_path / "cache")))
    assert not cutouts and skipped == [Skipped("x:1", "no prompt and no mask")]
    assert segmenter.calls == 0


# -- decompression bombs -------------------------------------------------------------------------
from media import write_bomb_png  # noqa: E402

from synrail.sources.gallery_sources import unsafe_textures  # noqa: E402
from synrail.sources.image_safety import declared_size, decode_or_reason  # noqa: E402
from synrail.stages.gallery import quarantined_files  # noqa: E402


def _bomb_reason(reason: str) -> bool:
    return reason.startswith("unreadable") and "3600 MP, over inputs.max_image_pixels (100 MP)" in reason


def test_a_bomb_declares_its_size_in_a_few_bytes_and_opencv_alone_would_stop_on_it(tmp_path):
    bomb = write_bomb_png(tmp_path / "bomb.png").read_bytes()
    assert len(bomb) < 1000 and "3600000000 pixels" in declared_size(bomb)  # Pillow refuses it too
    assert declared_size(write_bomb_png(tmp_path / "big.png", 12000, 10000).read_bytes()) == (12000, 10000)
    assert "12000x10000 = 120 MP" in decode_or_reason((tmp_path / "big.png").read_bytes())
    with pytest.raises(cv2.error):  # what stopped whole builds: CV_IO_MAX_IMAGE_PIXELS
        cv2.imdecode(np.frombuffer(bomb, np.uint8), cv2.IMREAD_UNCHANGED)
    assert "3600 MP, over inputs.max_image_pixels (100 MP)" in decode_or_reason(bomb)
    small = cv2.imencode(".png", _noise_image(20, 30, 0))[1].tobytes()
    assert decode_or_reason(small).shape == (20, 30, 3)
    assert "over inputs.max_image_pixels (0.0005 MP)" in decode_or_reason(small, max_pixels=500)
    assert decode_or_reason(b"\x89PNG not one") == "not a decodable image"


def test_a_bomb_in_an_rgba_folder_is_quarantined(rgba_folder):
    write_bomb_png(rgba_folder / "bomb.png")
    candidates, skipped = read_rgba_folder(rgba_folder, "unseen_obstacle", (0.4, 0.9))
    assert "rgba:bomb.png" not in {c.instance_key for c in candidates} and len(candidates) == 2
    (row,) = [s for s in skipped if s.instance_key == "rgba:bomb.png"]
    assert _bomb_reason(row.reason) and row.url.endswith("bomb.png")
    assert [q.url for q in quarantined_files(skipped) if q.url.endswith("bomb.png")] == [row.url]


def test_a_bomb_in_rock_folders_is_quarantined(rocks):
    write_bomb_png(rocks / "granite" / "bomb.png")
    candidates, skipped = read_rock_folders(rocks)
    assert len(candidates) == 3 and _bomb_reason(_reasons(skipped)["rocks:granite/bomb.png"])


def test_bombs_among_coco_and_pennfudan_images_and_masks_are_quarantined(objects365, pennfudan, tmp_path):
    ann_path, images_dir = objects365
    write_bomb_png(images_dir / "patch0" / "obj365_val_2.jpg")  # a PNG under a .jpg name, as uploads go
    write_bomb_png(pennfudan / "PNGImages" / "FudanPed00001.png")
    coco, _ = read_coco_instances(ann_path, images_dir, CLASS_MAP)
    peds, _ = read_pennfudan(pennfudan)
    cutouts, skipped = extract_cutouts([*coco, *peds], FakeSegmenter(), FakeMaskCache([]),
                                       Store(str(tmp_path / "cache")))
    reasons = _reasons(skipped)
    assert _bomb_reason(reasons["objects365:8"]) and _bomb_reason(reasons["pennfudan:FudanPed00001#1"])
    assert "objects365:1" in {c.instance_key for c in cutouts}  # the good image is still cut out
    bombs = {q.url.rsplit("/", 1)[-1] for q in quarantined_files(skipped) if _bomb_reason(q.reason)}
    assert bombs == {"obj365_val_2.jpg", "FudanPed00001.png"}

    write_bomb_png(pennfudan / "PedMasks" / "FudanPed00001_mask.png")  # a bomb of a mask: read while listing
    _, skipped = read_pennfudan(pennfudan)
    (row,) = [s for s in skipped if s.instance_key == "pennfudan:FudanPed00001"]
    assert "3600 MP" in row.reason and row.url.endswith("FudanPed00001_mask.png")


def test_a_bomb_among_dtd_textures_is_passed_over_and_reported(tmp_path):
    good = _write(tmp_path / "dtd" / "images" / "banded" / "banded_0001.jpg", _noise_image(40, 40, 3))
    write_bomb_png(tmp_path / "dtd" / "images" / "banded" / "banded_0002.jpg")
    (row,) = unsafe_textures(tmp_path / "dtd")
    assert _bomb_reason(row.reason) and row.url.endswith("banded_0002.jpg")
    draw = dtd_texture_loader(read_dtd_textures(tmp_path / "dtd"))
    for seed in range(4):  # whichever texture a draw starts at, the bomb is passed over, never decoded
        assert draw(np.random.default_rng(seed)).shape == cv2.imread(str(good)).shape

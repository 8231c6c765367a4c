"""Obstacle candidates from public datasets, read in the layouts they ship in.

Each adapter turns a dataset folder (a local path or any fsspec URL) into ``ObstacleCandidate``s:
an image, our class, a prompt for a segmenter and/or a mask the dataset already gives, and a
physical size prior. Nothing is cut out here (see ``cutouts.py``). A single bad item (an unreadable
image, a missing mask) becomes a ``Skipped`` row with the reason; only a whole unusable source (a
missing folder, a corrupt annotation file) raises ``ValueError``.
"""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import fsspec
import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from synrail.segment.base import Prompt
from synrail.sources.image_safety import DEFAULT_MAX_IMAGE_PIXELS, decode_or_reason, header_problem
from synrail.sources.procedural_obstacles import OBSTACLE_KINDS, SIZE_PRIORS_M
from synrail.sources.sizes import category_height_range, min_aspect, override_range
from synrail.storage.store import Store

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
RGBA_SUFFIXES = (".png", ".webp")
BORDER_PX = 2  # a box this close to the image edge is cut off by it
ALPHA_THRESHOLD = 128

HeightRange = tuple[float, float]
Box = tuple[float, float, float, float]
MaskMode = str  # "auto" | "annotation" | "segmenter": where a COCO source's masks come from
MASK_MODES = ("auto", "annotation", "segmenter")


@dataclass(frozen=True)
class ObstacleCandidate:
    """One object in one dataset image that may become a gallery cutout."""

    image_path: str  # URL (file://, s3://, ...) or local path
    class_name: str  # one of OBSTACLE_KINDS
    source: str  # dataset and its own label, e.g. "objects365:Person", "rocks:granite"
    instance_key: str  # stable id of this object within all sources
    prompt: Prompt | None
    mask_path: str | None  # a shipped mask: label image (see mask_value) or an RGBA image's alpha
    mask_value: int | None  # the object's label in mask_path; None: any non-zero label / alpha
    height_m_range: HeightRange
    # a COCO annotation's own ``segmentation`` (polygons, RLE or uncompressed RLE), rasterised at cut time
    segmentation: Any = None
    annotated_size: tuple[int, int] | None = None  # (height, width) the annotation's image declares
    min_aspect: float | None = None  # the least mask-box height / width of the kind (a standing person)


@dataclass(frozen=True)
class Skipped:
    """A candidate left out, with the reason (and the file's URL when the file itself is unsafe to read)."""

    instance_key: str
    reason: str
    url: str | None = None  # set when a file itself cannot be read safely: it is also quarantined


class Detection(Protocol):
    """A detector's box and score."""

    @property
    def box(self) -> Box:
        """(x0, y0, x1, y1) in pixels."""

    @property
    def score(self) -> float:
        """The detector's confidence."""


class Detector(Protocol):
    """Anything that boxes the object in a photo (rock folders use one when configured)."""

    def detect(self, image: np.ndarray) -> Sequence[Detection]:
        """Detections on one BGR image."""


# -- reading files -------------------------------------------------------------------------------
def read_url_bytes(url: str) -> bytes:
    """The bytes of a local path or fsspec URL; OSError when it cannot be read."""
    try:
        with fsspec.open(url, "rb") as fh:
            return fh.read()
    except OSError:
        raise
    except Exception as exc:  # remote filesystems raise their own error types
        raise OSError(f"cannot read {url}: {exc}") from exc


def read_image_or_reason(url: str, flags: int = cv2.IMREAD_COLOR,
                         max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> np.ndarray | str:
    """The decoded image, or why it cannot be had safely (for a ``Skipped`` row; the row names the file).

    Args:
        url: a URL (file://, s3://, ...) or local path.
        flags: OpenCV ``imread`` flags.
        max_pixels: the most pixels the file's header may declare.

    Returns:
        The decoded array, or "unreadable image: <reason>".
    """
    try:
        decoded = decode_or_reason(read_url_bytes(url), flags, max_pixels)
    except OSError as exc:
        return f"unreadable image: {exc}"
    return f"unreadable image: {decoded}" if isinstance(decoded, str) else decoded


def _to_uint8(image: np.ndarray) -> np.ndarray:
    return (image >> 8).astype(np.uint8) if image.dtype == np.uint16 else image


def _palette_indices(data: bytes) -> np.ndarray | None:
    """The indices of a palette image (OpenCV expands palettes to colour; Pillow keeps them)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image) if image.mode == "P" else None
    except (OSError, ValueError):
        return None


def label_image(data: bytes, decoded: np.ndarray) -> np.ndarray | None:
    """The 2-D labels of a mask file: a grey or palette label image's values, an RGBA image's
    alpha thresholded to 0/1; None for a colour image (its instance ids are lost).

    Args:
        data: the file's bytes (a PNG's palette indices are read from them).
        decoded: the same file decoded unchanged (any depth; scaled to uint8).

    Returns:
        H x W uint8 labels, or None.
    """
    image = _to_uint8(decoded)
    if image.ndim == 2:
        return image
    if image.shape[2] == 4:
        return (image[:, :, 3] >= ALPHA_THRESHOLD).astype(np.uint8)
    indices = _palette_indices(data)
    if indices is not None:
        return indices
    return image[:, :, 0] if (image == image[:, :, :1]).all() else None


def instance_mask(labels: np.ndarray, mask_value: int | None) -> np.ndarray:
    """One instance's mask from a label image.

    Args:
        labels: H x W instance ids (0 is background).
        mask_value: the instance's id; None: every labelled pixel.

    Returns:
        H x W bool.
    """
    return labels > 0 if mask_value is None else labels == mask_value


class UnreadableMask(ValueError):
    """A mask file that cannot be decoded safely (the file is quarantined, not just the instance)."""


def decode_labels(data: bytes, url: str, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> np.ndarray:
    """Labels of a mask file's bytes; ValueError with the reason when they are unusable.

    Args:
        data: the mask file's bytes.
        url: the file's URL, named in the error.
        max_pixels: the most pixels the file's header may declare.

    Returns:
        H x W uint8 labels (``label_image``).

    Raises:
        UnreadableMask: when the file cannot be decoded safely (a ValueError: quarantine the file).
        ValueError: when it is a colour image rather than labels.
    """
    decoded = decode_or_reason(data, cv2.IMREAD_UNCHANGED, max_pixels)
    if isinstance(decoded, str):
        raise UnreadableMask(f"unreadable mask: {decoded}")
    labels = label_image(data, decoded)
    if labels is None:
        raise ValueError(f"mask {url} is a colour image, not instance labels")
    return labels


# -- small helpers -------------------------------------------------------------------------------
def size_prior(class_name: str, override: HeightRange | None = None) -> HeightRange:
    """The real height range (m) of a class: ``override``, else the built-in prior.

    Args:
        class_name: an obstacle class.
        override: a configured (low, high) range.

    Returns:
        (low, high) in metres.

    Raises:
        ValueError: unknown class, or a range that is not 0 < low <= high.
    """
    if class_name not in SIZE_PRIORS_M:
        raise ValueError(f"unknown class {class_name!r}; allowed classes: {', '.join(OBSTACLE_KINDS)}")
    low, high = override if override is not None else SIZE_PRIORS_M[class_name]
    if not 0 < low <= high:
        raise ValueError(f"height range of {class_name!r} must be 0 < low <= high, got {(low, high)}")
    return float(low), float(high)


def _folder(root: str | os.PathLike[str]) -> Store:
    store = Store(os.fspath(root))
    if not store.fs.isdir(store.root_path):
        raise ValueError(f"missing folder: {store.root_url}")
    return store


def _listing(store: Store, rel: str = "") -> tuple[list[str], list[str]]:
    """(file names, folder names) directly under ``rel``, sorted; hidden names left out."""
    if not store.fs.isdir(store.path(rel)):
        raise ValueError(f"missing folder: {store.url(rel)}")
    files, folders = [], []
    for entry in store.fs.ls(store.path(rel), detail=True):
        name = os.path.basename(str(entry["name"]).rstrip("/"))
        if not name.startswith("."):
            # fsspec types a symbolic link neither file nor folder: a linked folder is a folder
            folder = entry["type"] == "directory" or (entry.get("islink") and store.fs.isdir(entry["name"]))
            (folders if folder else files).append(name)
    return sorted(files), sorted(folders)


def _with_suffix(names: Sequence[str], suffixes: tuple[str, ...]) -> list[str]:
    return [n for n in names if n.lower().endswith(suffixes)]


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def xywh_to_xyxy(box: Sequence[float]) -> Box:
    """A COCO box (x, y, w, h) as (x0, y0, x1, y1)."""
    x, y, w, h = (float(v) for v in box)
    return x, y, x + w, y + h


def _touches_border(box: Box, width: int, height: int) -> bool:
    x0, y0, x1, y1 = box
    return x0 <= BORDER_PX or y0 <= BORDER_PX or x1 >= width - BORDER_PX or y1 >= height - BORDER_PX


def _box_area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _intersection(a: Box, b: Box) -> float:
    return _box_area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def mask_box(mask: np.ndarray) -> Box:
    """Tight box of a mask, exclusive right/bottom edges (as COCO's x + w)."""
    x, y, w, h = cv2.boundingRect(mask.astype(np.uint8))
    return float(x), float(y), float(x + w), float(y + h)


# -- COCO / Objects365 ---------------------------------------------------------------------------
def _load_coco_json(annotations_json: str | os.PathLike[str]) -> dict[str, Any]:
    name = os.fspath(annotations_json)
    try:
        data = json.loads(read_url_bytes(name))
    except OSError as exc:
        raise ValueError(f"cannot read COCO annotations {name}: {exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"COCO annotations {name} are not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list)
                                             for k in ("images", "annotations", "categories")):
        raise ValueError(f"COCO annotations {name} need 'images', 'annotations' and 'categories' lists")
    return data


def _coco_skip_reason(ann: Mapping[str, Any], box: Box, image: Mapping[str, Any] | None,
                      others: Sequence[Box], *, min_area_px: float, skip_crowd: bool,
                      skip_truncated: bool, max_overlap: float) -> str | None:
    if image is None:
        return f"unknown image id {ann.get('image_id')!r}"
    if skip_crowd and ann.get("iscrowd"):
        return "crowd"
    # Objects365 marks depicted (posters, screens) and mirrored objects: no real object to cut out
    if ann.get("isfake"):
        return "fake (a depiction)"
    if ann.get("isreflected"):
        return "reflected"
    area = _box_area(box)
    if area < min_area_px:
        return f"tiny ({area:.0f} px < {min_area_px})"
    if skip_truncated:
        if not image.get("width") or not image.get("height"):
            return "truncation unknown (image has no width/height)"
        if _touches_border(box, int(image["width"]), int(image["height"])):
            return f"truncated (box within {BORDER_PX} px of the image border)"
    covered = max((_intersection(box, other) for other in others), default=0.0) / max(area, 1e-9)
    if covered > max_overlap:
        return f"occluded ({covered:.0%} of the box covered by another box > {max_overlap:.0%})"
    return None


def read_coco_instances(annotations_json: str | os.PathLike[str], images_dir: str | os.PathLike[str],
                        class_map: Mapping[str, str], *, min_area_px: float = 1024, skip_crowd: bool = True,
                        skip_truncated: bool = True, max_overlap: float = 0.3, source_name: str = "objects365",
                        height_m_ranges: Mapping[str, HeightRange] | None = None, mask: MaskMode = "auto",
                        category_heights_m: Mapping[str, HeightRange] | None = None,
                        ) -> tuple[list[ObstacleCandidate], list[Skipped]]:
    """Annotated instances of the categories in ``class_map`` (dataset name -> our class).

    Unmapped categories are ignored (but still count as occluders). Each candidate's prompt is
    its box; an annotation's own ``segmentation`` (polygons, RLE, uncompressed RLE) goes with it as the
    mask (``mask: auto`` or ``annotation``), rasterised when it is cut out. Whether the image exists is
    only found out then. Heights: a ``category_heights_m`` entry, else a ``height_m_ranges`` entry of
    the class, else the built-in table of category names (``sizes.py``), else the class's prior.

    Args:
        annotations_json: the COCO-format annotation file.
        images_dir: the folder (or URL) the annotations' ``file_name`` values are relative to.
        class_map: dataset category name -> our class name.
        min_area_px: the smallest box area kept, in pixels.
        skip_crowd: leave out ``iscrowd`` annotations.
        skip_truncated: leave out boxes within ``BORDER_PX`` of the image border.
        max_overlap: the largest share of a box another box of the image may cover.
        source_name: the source tag and instance-key prefix.
        height_m_ranges: our class -> real height range (low, high) in metres (over the built-in table).
        mask: "auto" (an annotation's segmentation where it has one, else the segmenter from its box),
            "annotation" (only annotations with a segmentation; the rest are skipped) or "segmenter"
            (every box to the segmenter).
        category_heights_m: dataset category name -> real height range, over everything else.

    Returns:
        (candidates, annotations skipped with the reason).

    Raises:
        ValueError: when the annotations are malformed, or ``mask`` is unknown.
    """
    if mask not in MASK_MODES:
        raise ValueError(f"unknown mask mode {mask!r} (expected one of {', '.join(MASK_MODES)})")
    data = _load_coco_json(annotations_json)
    class_priors = {c: size_prior(c, (height_m_ranges or {}).get(c)) for c in set(class_map.values())}
    priors = {category: override_range(category, category_heights_m)
              or ((height_m_ranges or {}).get(our_class) and class_priors[our_class])
              or category_height_range(category) or class_priors[our_class]
              for category, our_class in class_map.items()}
    try:
        return _coco_candidates(data, Store(os.fspath(images_dir)), class_map, priors, source_name, mask,
                                min_area_px=min_area_px, skip_crowd=skip_crowd, skip_truncated=skip_truncated,
                                max_overlap=max_overlap)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"COCO annotations {os.fspath(annotations_json)} are malformed: {exc!r}") from exc


def _has_segmentation(ann: Mapping[str, Any]) -> bool:
    seg = ann.get("segmentation")
    if isinstance(seg, dict):
        return bool(seg.get("counts")) and bool(seg.get("size"))
    return isinstance(seg, list) and any(isinstance(p, list) and len(p) >= 6 for p in seg)


def _coco_candidates(data: Mapping[str, Any], images_store: Store, class_map: Mapping[str, str],
                     priors: Mapping[str, HeightRange], source_name: str, mask: MaskMode, **skip_options: Any,
                     ) -> tuple[list[ObstacleCandidate], list[Skipped]]:
    names = {cat["id"]: cat["name"] for cat in data["categories"]}
    images = {img["id"]: img for img in data["images"]}
    boxes_by_image: dict[Any, list[tuple[Any, Box]]] = {}
    for ann in data["annotations"]:
        boxes_by_image.setdefault(ann["image_id"], []).append((ann["id"], xywh_to_xyxy(ann["bbox"])))
    candidates, skipped = [], []
    for ann in data["annotations"]:
        category = names.get(ann["category_id"])
        if category not in class_map:
            continue
        key = f"{source_name}:{ann['id']}"
        box = xywh_to_xyxy(ann["bbox"])
        others = [b for other_id, b in boxes_by_image[ann["image_id"]] if other_id != ann["id"]]
        image = images.get(ann["image_id"])
        reason = _coco_skip_reason(ann, box, image, others, **skip_options)
        if reason is not None:
            skipped.append(Skipped(key, reason))
            continue
        shipped = mask != "segmenter" and _has_segmentation(ann)
        if mask == "annotation" and not shipped:
            skipped.append(Skipped(key, "no segmentation (the source's mask is 'annotation')"))
            continue
        size = (int(image["height"]), int(image["width"])) if image.get("width") and image.get("height") else None
        candidates.append(ObstacleCandidate(
            image_path=images_store.url(image["file_name"]), class_name=class_map[category],
            source=f"{source_name}:{category}", instance_key=key, prompt=Prompt(box=box), mask_path=None,
            mask_value=None, height_m_range=priors[category],
            segmentation=ann["segmentation"] if shipped else None, annotated_size=size,
            min_aspect=min_aspect(category)))
    return candidates, skipped


def rasterise_segmentation(segmentation: Any, shape: tuple[int, int],
                           annotated_size: tuple[int, int] | None = None) -> np.ndarray:
    """A COCO annotation's ``segmentation`` as a mask at the image's resolution.

    Polygons are scaled from the annotation's image size (``annotated_size``) to ``shape`` and drawn
    there; an RLE (compressed or uncompressed) is decoded at its own ``size`` and resized (area
    average or bilinear, then half coverage) when that differs from ``shape``.

    Args:
        segmentation: a list of polygons ``[x0, y0, x1, y1, ...]``, or an RLE dict ``{"size": [h, w],
            "counts": str | list[int]}``.
        shape: the decoded image's (height, width).
        annotated_size: the (height, width) the annotations give the image; None: ``shape``.

    Returns:
        H x W bool.

    Raises:
        ValueError: a segmentation that is neither usable polygons nor an RLE.
    """
    height, width = shape
    if isinstance(segmentation, dict):
        h0, w0 = (int(v) for v in segmentation["size"])
        counts = segmentation["counts"]
        if isinstance(counts, list):
            rle = mask_utils.frPyObjects(segmentation, h0, w0)
        else:
            rle = {"size": [h0, w0], "counts": counts.encode("ascii") if isinstance(counts, str) else counts}
        mask = mask_utils.decode(rle)
        if (h0, w0) == (height, width):
            return mask.astype(bool)
        shrink = height * width < h0 * w0  # area averaging down, bilinear up; the object is where >= half
        return cv2.resize(mask.astype(np.float32), (width, height),
                          interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR) >= 0.5
    if not isinstance(segmentation, list):
        raise ValueError(f"segmentation is a {type(segmentation).__name__}, not polygons or an RLE")
    h0, w0 = annotated_size or shape
    sx, sy = width / w0, height / h0
    polygons = [[float(v) * (sx if i % 2 == 0 else sy) for i, v in enumerate(polygon)]
                for polygon in segmentation if isinstance(polygon, list) and len(polygon) >= 6]
    if not polygons:
        raise ValueError("segmentation has no polygon of at least 3 points")
    return mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polygons, height, width))).astype(bool)


# -- PennFudanPed --------------------------------------------------------------------------------
def read_pennfudan(root: str | os.PathLike[str], *, skip_truncated: bool = True,
                   height_m_range: HeightRange | None = None,
                   max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[list[ObstacleCandidate], list[Skipped]]:
    """Pedestrians of PennFudanPed (``PNGImages/X.png``, ``PedMasks/X_mask.png`` with ids 1..N).

    The masks are given; the prompt is each mask's box (for segmenters that want one anyway).

    Args:
        root: the dataset folder (or URL).
        skip_truncated: leave out people whose mask lies within ``BORDER_PX`` of the image border.
        height_m_range: real height range (low, high) in metres; None uses the built-in prior for a person.
        max_pixels: the most pixels a mask file's header may declare.

    Returns:
        (one candidate per person, what was skipped with the reason: missing or unusable masks, truncations).
    """
    store = _folder(root)
    prior = size_prior("person", height_m_range)
    image_names = _with_suffix(_listing(store, "PNGImages")[0], (".png",))
    mask_names = set(_listing(store, "PedMasks")[0])
    candidates, skipped = [], []
    for name in image_names:
        stem = name.rsplit(".", 1)[0]
        mask_rel = f"PedMasks/{stem}_mask.png"
        if f"{stem}_mask.png" not in mask_names:
            skipped.append(Skipped(f"pennfudan:{stem}", f"missing mask {store.url(mask_rel)}"))
            continue
        try:
            labels = decode_labels(read_url_bytes(store.url(mask_rel)), store.url(mask_rel), max_pixels)
        except (OSError, UnreadableMask) as exc:
            skipped.append(Skipped(f"pennfudan:{stem}", str(exc), url=store.url(mask_rel)))
            continue
        except ValueError as exc:
            skipped.append(Skipped(f"pennfudan:{stem}", str(exc)))
            continue
        for value in (int(v) for v in np.unique(labels) if v > 0):
            key = f"pennfudan:{stem}#{value}"
            box = mask_box(labels == value)
            if skip_truncated and _touches_border(box, labels.shape[1], labels.shape[0]):
                skipped.append(Skipped(key, f"truncated (mask within {BORDER_PX} px of the image border)"))
                continue
            candidates.append(ObstacleCandidate(
                image_path=store.url(f"PNGImages/{name}"), class_name="person", source="pennfudan",
                instance_key=key, prompt=Prompt(box=box), mask_path=store.url(mask_rel), mask_value=value,
                height_m_range=prior, min_aspect=min_aspect("person")))
    return candidates, skipped


# -- DTD textures --------------------------------------------------------------------------------
def read_dtd_textures(root: str | os.PathLike[str]) -> list[str]:
    """URLs of the Describable Textures Dataset's ``images/<category>/*.jpg``, sorted (see also
    :func:`unsafe_textures`)."""
    store = _folder(root)
    return [store.url(f"images/{category}/{name}")
            for category in _listing(store, "images")[1]
            for name in _with_suffix(_listing(store, f"images/{category}")[0], (".jpg", ".jpeg"))]


def _header_problem(url: str, max_pixels: int) -> str | None:
    """Why the image at ``url`` cannot be decoded safely, from its header alone (a few KB read); or None."""
    try:
        with fsspec.open(url, "rb") as fh:
            problem = header_problem(fh, max_pixels)
    except OSError as exc:
        problem = str(exc)
    return None if problem is None else f"unreadable image: {problem}"


def unsafe_textures(root: str | os.PathLike[str], max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> list[Skipped]:
    """The DTD files that cannot be decoded safely (headers only: no texture is decoded here); the
    texture loader passes over them, and the input report quarantines them.

    Args:
        root: the Describable Textures Dataset folder (or URL).
        max_pixels: the most pixels a file's header may declare.

    Returns:
        One ``Skipped`` row per unsafe file, with the reason and its URL.
    """
    return [Skipped(f"dtd:{url.rsplit('/images/', 1)[-1]}", problem, url=url)
            for url in read_dtd_textures(root) if (problem := _header_problem(url, max_pixels)) is not None]


@functools.lru_cache(maxsize=256)
def _load_texture(url: str, max_side: int, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> np.ndarray | None:
    """A texture as BGR uint8, shrunk so its longer side is at most ``max_side``; None if it cannot
    be decoded safely."""
    image = read_image_or_reason(url, cv2.IMREAD_COLOR, max_pixels)
    if isinstance(image, str):
        return None
    scale = max_side / max(image.shape[:2])
    if scale < 1.0:
        size = (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale)))
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    return image


def dtd_texture_loader(paths: Sequence[str], *, max_side: int = 512,
                       max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Callable[[np.random.Generator], np.ndarray]:
    """A function drawing one texture per call, for ``render_cutout(..., texture=...)``.

    The draw depends only on the generator, so renders stay reproducible; an unreadable file is
    passed over for the next one in order; ValueError when none can be read.

    Args:
        paths: the texture files' URLs or paths.
        max_side: textures are shrunk so their longer side is at most this many pixels.
        max_pixels: the most pixels a file's header may declare.

    Returns:
        ``draw(rng)``, which returns a BGR uint8 texture.

    Raises:
        ValueError: when ``paths`` is empty (``draw`` raises it when no file can be read).
    """
    ordered = list(paths)
    if not ordered:
        raise ValueError("no texture files given")

    def draw(rng: np.random.Generator) -> np.ndarray:
        start = int(rng.integers(len(ordered)))
        for k in range(len(ordered)):
            texture = _load_texture(ordered[(start + k) % len(ordered)], max_side, max_pixels)
            if texture is not None:
                return texture
        raise ValueError(f"none of the {len(ordered)} texture files can be read (first: {ordered[0]})")

    return draw


# -- photo folders (rocks) -----------------------------------------------------------------------
def whole_image_box(width: int, height: int, margin: float) -> Box:
    """The whole photo less a ``margin`` share on each side, as a prompt box when no detector boxes the object.

    Args:
        width: the photo width.
        height: the photo height.
        margin: the share cut from each side.

    Returns:
        (x0, y0, x1, y1).
    """
    mx, my = margin * width, margin * height
    return mx, my, width - mx, height - my


def _best_detection_box(detector: Detector, image: np.ndarray) -> Box | None:
    detections = list(detector.detect(image))
    if not detections:
        return None
    return tuple(float(v) for v in max(detections, key=lambda d: d.score).box)  # type: ignore[return-value]


def read_rock_folders(root: str | os.PathLike[str], *, class_name: str = "rock", detector: Detector | None = None,
                      margin: float = 0.02, source_name: str = "rocks", height_m_range: HeightRange | None = None,
                      max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[list[ObstacleCandidate], list[Skipped]]:
    """Photos in class subfolders (``<root>/<label>/*.jpg``), without annotations.

    The prompt is the detector's best box when a detector is given (an image without detections
    is skipped), else the whole image less ``margin`` of each side.

    Args:
        root: the folder (or URL) holding one subfolder per label.
        class_name: our class for every photo.
        detector: boxes the object; None prompts with the whole image less ``margin``.
        margin: the share of the width and height cut from each side of a whole-image box.
        source_name: the source tag (``<source_name>:<label>``) and instance-key prefix.
        height_m_range: real height range (low, high) in metres; None uses the class's built-in prior.
        max_pixels: the most pixels a photo's header may declare.

    Returns:
        (one candidate per photo, photos skipped with the reason).
    """
    store = _folder(root)
    prior = size_prior(class_name, height_m_range)
    candidates, skipped = [], []
    for label in _listing(store)[1]:
        for name in _with_suffix(_listing(store, label)[0], PHOTO_SUFFIXES):
            key = f"{source_name}:{label}/{name}"
            url = store.url(f"{label}/{name}")
            image = read_image_or_reason(url, cv2.IMREAD_COLOR, max_pixels)
            if isinstance(image, str):
                skipped.append(Skipped(key, image, url=url))
                continue
            if detector is None:
                box: Box | None = whole_image_box(image.shape[1], image.shape[0], margin)
            else:
                box = _best_detection_box(detector, image)
            if box is None:
                skipped.append(Skipped(key, "no detection"))
                continue
            candidates.append(ObstacleCandidate(
                image_path=url, class_name=class_name, source=f"{source_name}:{label}", instance_key=key,
                prompt=Prompt(box=box), mask_path=None, mask_value=None, height_m_range=prior))
    return candidates, skipped


# -- ready-made cutouts (RGBA) -------------------------------------------------------------------
def _alpha_problem(url: str, max_pixels: int) -> Skipped | str | None:
    """Why the file at ``url`` is not a usable cutout: a Skipped row to quarantine it when it cannot
    be decoded safely, a reason when it decodes but is no cutout, or None."""
    image = read_image_or_reason(url, cv2.IMREAD_UNCHANGED, max_pixels)
    if isinstance(image, str):
        return Skipped("", image, url=url)
    if image.ndim != 3 or image.shape[2] != 4:
        return "no alpha channel"
    opaque = _to_uint8(image)[:, :, 3] >= ALPHA_THRESHOLD
    if opaque.all():
        return "no transparent pixels (not a cutout)"
    if not opaque.any():
        return "fully transparent"
    return None


def read_rgba_folder(root: str | os.PathLike[str], class_name: str, height_m_range: HeightRange | None = None,
                     *, source_name: str = "rgba", max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                     ) -> tuple[list[ObstacleCandidate], list[Skipped]]:
    """PNG/WebP cutouts with alpha in one folder; the mask is the alpha (no prompt, no segmenter).

    Args:
        root: the folder (or URL).
        class_name: our class for every cutout.
        height_m_range: real height range (low, high) in metres; None uses the class's built-in prior.
        source_name: the source tag and instance-key prefix.
        max_pixels: the most pixels a file's header may declare.

    Returns:
        (one candidate per usable cutout, files skipped with the reason: unreadable, no alpha, fully
        opaque or fully transparent).
    """
    store = _folder(root)
    prior = size_prior(class_name, height_m_range)
    candidates, skipped = [], []
    for name in _with_suffix(_listing(store)[0], RGBA_SUFFIXES):
        key = f"{source_name}:{name}"
        url = store.url(name)
        problem = _alpha_problem(url, max_pixels)
        if isinstance(problem, Skipped):
            skipped.append(Skipped(key, problem.reason, url=problem.url))
            continue
        if problem is not None:
            skipped.append(Skipped(key, problem))
            continue
        candidates.append(ObstacleCandidate(
            image_path=url, class_name=class_name, source=source_name, instance_key=key, prompt=None,
            mask_path=url, mask_value=None, height_m_range=prior))
    return candidates, skipped

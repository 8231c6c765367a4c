"""Cutting candidates out: image + mask (segmented from a prompt, or shipped) -> tight RGBA PNG.

Candidates are grouped by image so each image is read, hashed and segmented once (one
``segment_cached`` call with all its prompts); shipped masks (a COCO annotation's segmentation,
PennFudan labels, RGBA alpha) never reach the segmenter. One cutout holds one object: a shipped
mask of one instance in several sizeable parts (occluded) is left out, an alpha with several sizeable
parts becomes one cutout per part, and specks are dropped. Cutouts are written content-addressed
into the cache store, as the procedural gallery stage does, and described by small ``ExtractedCutout`` records.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict

from synrail.segment.base import MaskResult, Prompt, Segmenter, postprocess_mask
from synrail.segment.edges import decontaminate, edge_alpha
from synrail.sources.gallery_sources import (
    ObstacleCandidate,
    Skipped,
    UnreadableMask,
    decode_labels,
    instance_mask,
    mask_box,
    rasterise_segmentation,
    read_url_bytes,
)
from synrail.sources.image_safety import DEFAULT_MAX_IMAGE_PIXELS, decode_or_reason
from synrail.storage.store import Store, sha256_bytes

PART_SHARE = 0.1  # a mask part under this share of the largest part's area is a speck (dropped)


class SegmentCache(Protocol):
    """What ``synrail.segment.cache.MaskCache`` offers: masks of an image's prompts, cached."""

    def segment_cached(self, segmenter: Segmenter, image_bgr: np.ndarray, image_sha256: str,
                       prompts: Sequence[Prompt]) -> list[MaskResult]:
        """Masks for ``prompts`` on one image, in order, computed only where not cached.

        Args:
            segmenter: the segmenter, whose identity keys the cache.
            image_bgr: the image.
            image_sha256: its content hash.
            prompts: the prompts on it.

        Returns:
            One mask with its score per prompt.
        """


class ExtractedCutout(BaseModel):
    """One cutout written to the cache: an RGBA PNG with its class, source, size and mask score."""

    model_config = ConfigDict(frozen=True)

    cutout_id: str
    class_name: str
    source: str
    path: str  # RGBA PNG, relative to the cache store
    sha256: str
    height_m_range: tuple[float, float]
    width_px: int
    height_px: int
    mask_px: int
    mask_score: float  # the segmenter's score; 1.0 for a shipped mask
    image_path: str  # the source image the pixels come from
    instance_key: str
    prompt_key: str  # Prompt.key() of the prompt segmented; "" for a shipped mask
    source_box: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # x0 y0 x1 y1 cut, source pixels
    mask_source: str = ""  # annotation, rgba, or the segmenter's family (sam, grabcut, ...)


@dataclass(frozen=True)
class _Masked:
    candidate: ObstacleCandidate
    mask: np.ndarray  # H x W bool, the image's size
    score: float
    segmented: bool
    mask_source: str  # annotation, rgba, or the segmenter's family


def cutout_from_mask(image_bgr: np.ndarray, mask: np.ndarray, clean_edges: bool = False) -> np.ndarray | None:
    """Tight B, G, R, A crop around ``mask``: alpha 0/255, colour zero outside; None for an empty mask.

    With ``clean_edges`` the alpha is ``synrail.segment.edges.edge_alpha`` (a guided-filtered ramp at the
    edge that still reads as the mask when thresholded at 128) and the edge's colours come from the
    object's interior (``decontaminate``): no stair-steps when scaled, no halo of the source background.

    Args:
        image_bgr: H x W x 3 (or more channels; the first three are kept) uint8 image.
        mask: H x W mask of the object (nonzero is object).
        clean_edges: soften and decontaminate the edge (else a hard 0/255 alpha).

    Returns:
        h x w x 4 uint8 BGRA crop of the mask's bounding box, or None when the mask is empty.

    Raises:
        ValueError: when the mask and the image differ in size.
    """
    mask = np.asarray(mask, bool)
    if mask.shape != image_bgr.shape[:2]:
        raise ValueError(f"mask {mask.shape} and image {image_bgr.shape[:2]} differ in size")
    if not mask.any():
        return None
    x0, y0, x1, y1 = (int(v) for v in mask_box(mask))
    if clean_edges:
        alpha = edge_alpha(image_bgr[:, :, :3], mask)
        colours = decontaminate(image_bgr[:, :, :3], mask, alpha)
        a8 = np.rint(alpha[y0:y1, x0:x1] * 255).astype(np.uint8)
        bgr = colours[y0:y1, x0:x1] * (a8 > 0)[..., None]
        return np.ascontiguousarray(np.dstack([bgr, a8]))
    inside = mask[y0:y1, x0:x1]
    bgr = image_bgr[y0:y1, x0:x1, :3] * inside[..., None]
    return np.ascontiguousarray(np.dstack([bgr, inside.astype(np.uint8) * 255]))


def group_by_image(candidates: Iterable[ObstacleCandidate]) -> dict[str, list[ObstacleCandidate]]:
    """``candidates`` grouped by image path, so that each image is decoded and segmented once."""
    groups: dict[str, list[ObstacleCandidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.image_path, []).append(candidate)
    return groups


def _labels_or_reason(mask_path: str, image_path: str, image_data: bytes, max_pixels: int) -> np.ndarray | Skipped:
    """The mask file's labels, or a Skipped row (with the file's URL when the file itself is unreadable)."""
    try:
        data = image_data if mask_path == image_path else read_url_bytes(mask_path)
    except FileNotFoundError:
        return Skipped("", f"missing mask {mask_path}")
    except OSError as exc:
        return Skipped("", f"unreadable mask: {exc}", url=mask_path)
    try:
        return decode_labels(data, mask_path, max_pixels)
    except UnreadableMask as exc:
        return Skipped("", str(exc), url=mask_path)
    except ValueError as exc:
        return Skipped("", str(exc))


def _given_masks(group: Sequence[ObstacleCandidate], image_path: str, image_data: bytes,
                 shape: tuple[int, int], max_pixels: int) -> tuple[list[_Masked], list[Skipped]]:
    """Masks the datasets ship; each mask file is read once (it may be the image itself: RGBA)."""
    labels: dict[str, np.ndarray | Skipped] = {}
    masked, skipped = [], []
    for c in group:
        assert c.mask_path is not None
        if c.mask_path not in labels:
            labels[c.mask_path] = _labels_or_reason(c.mask_path, image_path, image_data, max_pixels)
        found = labels[c.mask_path]
        if isinstance(found, Skipped):
            skipped.append(Skipped(c.instance_key, found.reason, url=found.url))
        elif found.shape != shape:
            skipped.append(Skipped(c.instance_key, f"mask size {found.shape} differs from the image's {shape}"))
        else:
            origin = "rgba" if c.mask_path == image_path else "annotation"
            masked.append(_Masked(c, instance_mask(found, c.mask_value), 1.0, segmented=False, mask_source=origin))
    return masked, skipped


def _annotation_masks(group: Sequence[ObstacleCandidate], shape: tuple[int, int],
                      ) -> tuple[list[_Masked], list[Skipped]]:
    """COCO annotations' own segmentations, rasterised at the image's resolution."""
    masked, skipped = [], []
    for c in group:
        try:
            mask = rasterise_segmentation(c.segmentation, shape, c.annotated_size)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            skipped.append(Skipped(c.instance_key, f"unusable segmentation: {exc}"))
            continue
        masked.append(_Masked(c, mask, 1.0, segmented=False, mask_source="annotation"))
    return masked, skipped


def _segmented_masks(group: Sequence[ObstacleCandidate], image_bgr: np.ndarray, image_sha256: str,
                     segmenter: Segmenter, mask_cache: SegmentCache) -> list[_Masked]:
    prompts = [c.prompt for c in group if c.prompt is not None]
    results = mask_cache.segment_cached(segmenter, image_bgr, image_sha256, prompts)
    if len(results) != len(prompts):
        raise ValueError(f"segmenter {segmenter.identity} returned {len(results)} masks for {len(prompts)} prompts")
    family = segmenter.identity.split("/", 1)[0]
    return [_Masked(c, np.asarray(r.mask, bool), float(r.score), segmented=True, mask_source=family)
            for c, r in zip(group, results, strict=True)]


def mask_parts(mask: np.ndarray, share: float = PART_SHARE) -> list[np.ndarray]:
    """The sizeable connected parts of a mask, largest first; parts under ``share`` of the largest
    part's area are specks and dropped.

    Args:
        mask: H x W bool.
        share: the least area of a part, as a share of the largest part's.

    Returns:
        One H x W bool mask per sizeable part (empty for an empty mask).
    """
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if count <= 1:
        return []
    areas = stats[1:, cv2.CC_STAT_AREA]
    order = [int(i) + 1 for i in np.argsort(-areas, kind="stable") if areas[i] >= share * areas.max()]
    return [labels == i for i in order]


def _one_object(item: _Masked, mask: np.ndarray, min_area_px: int) -> list[tuple[str, np.ndarray]] | str:
    """(instance-key suffix, mask) per object in a shipped mask, or why it is left out.

    A mask of one instance (an annotation, a label value) in several sizeable parts is an object seen
    through something in front of it: left out. An alpha (any opaque pixel) may hold several objects:
    each sizeable part big enough to keep becomes a cutout of its own.
    """
    parts = mask_parts(mask)
    if item.candidate.mask_value is not None or item.mask_source == "annotation":
        if len(parts) > 1:
            return f"mask in {len(parts)} separate parts (an occluded object)"
        return [("", parts[0])]
    kept = [part for part in parts if int(part.sum()) >= min_area_px]
    if not kept:
        return f"small mask (largest part under {min_area_px} px)"
    return [("", kept[0])] if len(kept) == 1 else [(f"#part{k}", part) for k, part in enumerate(kept, start=1)]


def _standing_problem(candidate: ObstacleCandidate, mask: np.ndarray) -> str | None:
    """Why a cutout is not what its height range is for (a sitting or crouching person), or None."""
    if candidate.min_aspect is None:
        return None
    x0, y0, x1, y1 = mask_box(mask)
    aspect = (y1 - y0) / max(x1 - x0, 1.0)
    if aspect < candidate.min_aspect:
        return f"not standing (mask box height / width {aspect:.2f} < {candidate.min_aspect})"
    return None


def _final_masks(item: _Masked, min_score: float, min_area_px: int) -> list[tuple[str, np.ndarray]] | str:
    """The masks to cut with, one per object (with its instance-key suffix), or why the candidate is rejected.

    Segmenter masks are cleaned (largest part, holes filled); shipped masks are exact, their holes
    (between legs, under arms) real: only specks are dropped and separate objects split (``_one_object``).
    """
    if item.segmented:
        if item.score < min_score:
            return f"low score ({item.score:.2f} < {min_score})"
        cleaned = postprocess_mask(item.mask, min_area_px)
        if cleaned is None:
            return f"small mask (largest part under {min_area_px} px)"
        masks: list[tuple[str, np.ndarray]] | str = [("", cleaned)]
    else:
        area = int(item.mask.sum())
        if area == 0:
            return "empty mask"
        if area < min_area_px:
            return f"small mask ({area} px < {min_area_px})"
        masks = _one_object(item, item.mask, min_area_px)
    if isinstance(masks, str):
        return masks
    problems = [_standing_problem(item.candidate, mask) for _, mask in masks]
    kept = [pair for pair, problem in zip(masks, problems, strict=True) if problem is None]
    return kept or next(p for p in problems if p is not None)


def _write_cutout(item: _Masked, mask: np.ndarray, image_bgr: np.ndarray, cache: Store,
                  suffix: str = "") -> ExtractedCutout:
    # shipped alpha (rgba) is the maker's own edge; annotation and segmenter masks get a clean one
    rgba = cutout_from_mask(image_bgr, mask, clean_edges=item.mask_source != "rgba")
    assert rgba is not None  # _final_mask never passes an empty mask
    ok, buffer = cv2.imencode(".png", rgba)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {rgba.shape} cutout as PNG")
    png = buffer.tobytes()
    c = item.candidate
    sha = sha256_bytes(png)
    path = f"gallery/{c.class_name}/{sha[:24]}.png"
    cache.write_bytes(path, png)
    return ExtractedCutout(
        cutout_id=f"{c.class_name}-{sha[:16]}", class_name=c.class_name, source=c.source, path=path, sha256=sha,
        height_m_range=c.height_m_range, width_px=rgba.shape[1], height_px=rgba.shape[0],
        mask_px=int(mask.sum()), mask_score=item.score, image_path=c.image_path,
        instance_key=c.instance_key + suffix, prompt_key=c.prompt.key() if item.segmented and c.prompt is not None
        else "", source_box=mask_box(mask), mask_source=item.mask_source)


def _read_image(image_path: str, max_pixels: int) -> tuple[bytes, np.ndarray] | str:
    """The image's bytes (hashed for the mask cache) and BGR pixels, or why they cannot be had safely."""
    try:
        data = read_url_bytes(image_path)
    except OSError as exc:
        return f"unreadable image: {exc}"
    image = decode_or_reason(data, cv2.IMREAD_COLOR, max_pixels)
    return f"unreadable image: {image}" if isinstance(image, str) else (data, image)


def _extract_from_image(image_path: str, group: Sequence[ObstacleCandidate], segmenter: Segmenter,
                        mask_cache: SegmentCache, cache: Store, min_score: float, min_area_px: int,
                        max_pixels: int) -> tuple[list[ExtractedCutout], list[Skipped]]:
    read = _read_image(image_path, max_pixels)
    if isinstance(read, str):
        return [], [Skipped(c.instance_key, read, url=image_path) for c in group]
    data, image = read
    given = [c for c in group if c.mask_path is not None]
    annotated = [c for c in group if c.mask_path is None and c.segmentation is not None]
    prompted = [c for c in group if c.mask_path is None and c.segmentation is None and c.prompt is not None]
    masked, skipped = _given_masks(given, image_path, data, image.shape[:2], max_pixels)
    from_annotations, unusable = _annotation_masks(annotated, image.shape[:2])
    masked += from_annotations
    skipped += unusable
    if prompted:
        masked += _segmented_masks(prompted, image, sha256_bytes(data), segmenter, mask_cache)
    skipped += [Skipped(c.instance_key, "no prompt and no mask") for c in group
                if c.mask_path is None and c.segmentation is None and c.prompt is None]
    cutouts = []
    for item in masked:
        masks = _final_masks(item, min_score, min_area_px)
        if isinstance(masks, str):
            skipped.append(Skipped(item.candidate.instance_key, masks))
        else:
            cutouts += [_write_cutout(item, mask, image, cache, suffix) for suffix, mask in masks]
    return cutouts, skipped


def extract_cutouts(candidates: Iterable[ObstacleCandidate], segmenter: Segmenter, mask_cache: SegmentCache,
                    cache: Store, *, min_score: float = 0.5, min_area_px: int = 256,
                    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[list[ExtractedCutout], list[Skipped]]:
    """Cut every candidate out and write its PNG to ``gallery/<class>/<sha[:24]>.png`` in ``cache``.

    Rejected candidates (an image or mask that cannot be decoded safely, a missing mask, low score,
    small mask) come back as ``Skipped`` rows with the reason; ``max_pixels`` bounds the size an
    image may declare (checked from its header before decoding).

    Args:
        candidates: the objects to cut out, each with a shipped mask or a prompt for the segmenter.
        segmenter: segments the prompted candidates.
        mask_cache: caches the segmenter's masks by image hash and prompt.
        cache: the store the PNGs are written to.
        min_score: the lowest segmenter score kept (shipped masks have none).
        min_area_px: the fewest mask pixels kept (for a segmented mask, of its largest part).
        max_pixels: the most pixels an image or mask file may declare.

    Returns:
        (cutouts written, candidates skipped with the reason).
    """
    cutouts: list[ExtractedCutout] = []
    skipped: list[Skipped] = []
    for image_path, group in group_by_image(candidates).items():
        done, rejected = _extract_from_image(image_path, group, segmenter, mask_cache, cache, min_score,
                                             min_area_px, max_pixels)
        cutouts += done
        skipped += rejected
    return cutouts, skipped

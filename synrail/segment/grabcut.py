"""GrabCut (OpenCV) as a weight-free mask extractor: the default when no SAM checkpoint is given."""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from synrail.segment.base import MaskResult, Prompt, as_bgr8, postprocess_mask

GMM_COMPONENTS = 5  # cv2.grabCut fits 5-component colour GMMs; its k-means needs that many samples per side
SEED_RADIUS_PX = 2  # points become small disks: one pixel alone barely moves the colour models
CONTEXT_FRACTION = 0.4  # GrabCut runs on the box grown by 40% of its size (chosen on even seg26 ids)
POINT_BOX_MARGIN_FRACTION = 0.1  # point-only prompts: box around the points grown by 10% of the long side
MIN_POINT_BOX_MARGIN_PX = 16
RNG_SEED = 0
# Settings picked on the even image ids of a 35-photo hand-masked set, checked on the odd ones
# (benchmarks/segment.py; the figures are in docs/benchmarks): the coarse pass alone is ~50 ms per
# object, the fallback pass runs where the coarse one collapsed or leaked (its score is low).
COARSE_SIDE_PX = 200  # the work region's long side in the coarse pass
FINE_SIDE_PX = 400  # the long side of the fallback pass and of the edge refinement
FALLBACK_BELOW = 0.6  # a coarse score under this reruns GrabCut at FINE_SIDE_PX
FALLBACK_ITERATIONS = 3
SCORE_TOLERANCE = 0.02  # a later iteration is kept unless it scores this much below the best one
MIN_COARSE_SIDE_PX = 8
EDGE_BAND_PASS_PX = 3  # the re-cut band's half-width, in pixels of the pass the mask came from

PixelBox = tuple[int, int, int, int]  # x0, y0, x1, y1 with exclusive ends, inside the image


class GrabCutSegmenter:
    """Box/point prompts to masks with cv2.grabCut; deterministic (the OpenCV RNG is seeded per prompt).

    Coarse to fine: GrabCut runs on the work region (the box grown by CONTEXT_FRACTION) scaled to a
    long side of ``coarse_side`` px, one iteration at a time, keeping the best-scoring iteration (an
    iteration that collapses the mask or leaks to the box border is not kept). Where that score is
    under ``fallback_below`` (GrabCut at a coarse scale can lose a thin or low-contrast object) it
    runs again at ``fine_side`` px and keeps the better of the two. The mask is then upsampled and its
    edge re-cut at ``fine_side`` px by one GrabCut pass in a band around it with the colour models
    frozen, and cut to the box at the image's resolution. Work per object is thus bounded whatever the
    image size.

    ``score`` is a heuristic in [0, 1]: ``box_fit * (1 - border_touch / 2)``, where ``box_fit`` is the
    IoU of the mask's tight box with the prompt box (a fragment, a collapsed mask or disconnected
    blobs score low) and ``border_touch`` the fraction of the box outline the mask covers (a mask
    running along its box is often GrabCut keeping background). Point-only prompts have no real box,
    so their score is ``1 - border_touch`` on the box built around the points.
    """

    def __init__(self, iterations: int = 3, min_area_px: int = 64, coarse_side: int = COARSE_SIDE_PX,
                 fine_side: int = FINE_SIDE_PX, fallback_below: float = FALLBACK_BELOW) -> None:
        if iterations < 1:
            raise ValueError(f"iterations must be at least 1, got {iterations}")
        if not MIN_COARSE_SIDE_PX <= coarse_side <= fine_side:
            raise ValueError(f"need {MIN_COARSE_SIDE_PX} <= coarse_side <= fine_side, got {coarse_side}, {fine_side}")
        self.iterations = iterations
        self.min_area_px = min_area_px
        self.coarse_side = coarse_side
        self.fine_side = fine_side
        self.fallback_below = fallback_below

    @property
    def identity(self) -> str:
        """OpenCV's version and the settings: what decides GrabCut's masks."""
        return (f"grabcut/opencv-{cv2.__version__}/it{self.iterations}/c{self.coarse_side}-f{self.fine_side}"
                f"-fb{self.fallback_below:g}-ctx{CONTEXT_FRACTION:g}-band{EDGE_BAND_PASS_PX:g}")

    def segment(self, image_bgr: np.ndarray, prompts: Sequence[Prompt]) -> list[MaskResult]:
        """One coarse-to-fine GrabCut per prompt, in a window around it.

        Args:
            image_bgr: the image, BGR.
            prompts: the prompts on it (boxes and/or points).

        Returns:
            One mask with its score per prompt, in order.
        """
        bgr = as_bgr8(image_bgr)
        return [self._segment_one(bgr, prompt) for prompt in prompts]

    def _segment_one(self, bgr: np.ndarray, prompt: Prompt) -> MaskResult:
        height, width = bgr.shape[:2]
        empty = MaskResult(np.zeros((height, width), bool), 0.0)
        box = prompt_pixel_box(prompt, (height, width))
        if box is None:
            return empty
        region = work_region(box, prompt.points, (height, width))
        best = self._pass(bgr, prompt, box, region, self.coarse_side, self.iterations)
        if best is None or best[0] < self.fallback_below:
            again = self._pass(bgr, prompt, box, region, self.fine_side, FALLBACK_ITERATIONS)
            if again is not None and (best is None or again[0] > best[0]):
                best = again
        if best is None:
            return empty
        _, region_mask, models, pass_scale = best
        rx0, ry0, rx1, ry1 = region
        refined = refine_edge(bgr[ry0:ry1, rx0:rx1], region_mask, models, shift_box(box, rx0, ry0), self.fine_side,
                              pass_scale)
        full = np.zeros((height, width), bool)
        full[ry0:ry1, rx0:rx1] = refined
        mask = postprocess_mask(full, self.min_area_px)
        if mask is None:
            return empty
        return MaskResult(mask, grabcut_score(mask, box, has_box=prompt.box is not None))

    def _pass(self, bgr: np.ndarray, prompt: Prompt, box: PixelBox, region: PixelBox, side: int,
              iterations: int) -> tuple[float, np.ndarray, tuple[np.ndarray, np.ndarray], float] | None:
        """GrabCut on ``region`` scaled to ``side`` px: (score, region-sized float mask, colour models, scale)."""
        rx0, ry0, rx1, ry1 = region
        crop = bgr[ry0:ry1, rx0:rx1]
        rh, rw = crop.shape[:2]
        scale = min(1.0, side / max(rh, rw))
        sh, sw = max(MIN_COARSE_SIDE_PX, round(rh * scale)), max(MIN_COARSE_SIDE_PX, round(rw * scale))
        fy, fx = sh / rh, sw / rw
        small = crop if (sh, sw) == (rh, rw) else cv2.resize(crop, (sw, sh), interpolation=cv2.INTER_AREA)
        x0, y0, x1, y1 = shift_box(box, rx0, ry0)
        sbox = (math.floor(x0 * fx), math.floor(y0 * fy), max(math.ceil(x1 * fx), math.floor(x0 * fx) + 1),
                max(math.ceil(y1 * fy), math.floor(y0 * fy) + 1))
        labels = initial_labels((sh, sw), sbox, [(x * fx - rx0 * fx, y * fy - ry0 * fy) for x, y in prompt.points],
                                prompt.point_labels)
        if not has_enough_samples(labels):
            return None
        cv2.setRNGSeed(RNG_SEED)
        bgd_model, fgd_model = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
        best: tuple[float, np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None
        for iteration in range(iterations):
            cv2.grabCut(small, labels, None, bgd_model, fgd_model, 1,
                        cv2.GC_INIT_WITH_MASK if iteration == 0 else cv2.GC_EVAL)
            mask = (labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD)
            cleaned = postprocess_mask(mask, 1)
            score = 0.0 if cleaned is None else grabcut_score(cleaned, sbox, has_box=prompt.box is not None)
            if best is None or score >= best[0] - SCORE_TOLERANCE:
                best = (score, mask.copy(), (bgd_model.copy(), fgd_model.copy()))
        assert best is not None
        score, mask, models = best
        up = mask.astype(np.float32) if (sh, sw) == (rh, rw) else cv2.resize(
            mask.astype(np.float32), (rw, rh), interpolation=cv2.INTER_LINEAR)
        return score, up, models, scale


def refine_edge(crop: np.ndarray, soft_mask: np.ndarray, models: tuple[np.ndarray, np.ndarray], box: PixelBox,
                side: int, mask_scale: float = 1.0) -> np.ndarray:
    """The mask's edge re-cut at ``side`` px: one GrabCut pass in a band around it, colour models frozen.

    Args:
        crop: the work region's pixels, BGR.
        soft_mask: the region's mask upsampled from the coarse pass, float in [0, 1].
        models: the coarse pass's (background, foreground) GrabCut colour models.
        box: the prompt's box in region coordinates; nothing outside it is kept.
        side: the long side the band is cut at.
        mask_scale: the scale ``soft_mask`` was computed at (its edge is unsure by about a pixel there).

    Returns:
        The region's mask, bool, nothing outside ``box``.
    """
    rh, rw = crop.shape[:2]
    scale = min(1.0, side / max(rh, rw))
    fh, fw = max(1, round(rh * scale)), max(1, round(rw * scale))
    image = crop if (fh, fw) == (rh, rw) else cv2.resize(crop, (fw, fh), interpolation=cv2.INTER_AREA)
    soft = soft_mask if (fh, fw) == (rh, rw) else cv2.resize(soft_mask, (fw, fh), interpolation=cv2.INTER_LINEAR)
    hard = (soft >= 0.5).astype(np.uint8)
    x0, y0, x1, y1 = box
    inside = np.zeros((fh, fw), bool)
    inside[math.floor(y0 * fh / rh):math.ceil(y1 * fh / rh), math.floor(x0 * fw / rw):math.ceil(x1 * fw / rw)] = True
    # the band: where the upsampled coarse mask may be wrong (a few of its pixels), at least 2 px either side
    band = max(2, round(EDGE_BAND_PASS_PX * scale / mask_scale))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * band + 1, 2 * band + 1))
    labels = np.full((fh, fw), cv2.GC_BGD, np.uint8)
    labels[cv2.dilate(hard, kernel) > 0] = cv2.GC_PR_BGD
    labels[hard > 0] = cv2.GC_PR_FGD
    labels[cv2.erode(hard, kernel) > 0] = cv2.GC_FGD
    labels[~inside] = cv2.GC_BGD
    unsure = (labels == cv2.GC_PR_FGD) | (labels == cv2.GC_PR_BGD)
    if unsure.any() and (labels != cv2.GC_BGD).any():
        bgd_model, fgd_model = (m.copy() for m in models)
        cv2.grabCut(image, labels, None, bgd_model, fgd_model, 1, cv2.GC_EVAL_FREEZE_MODEL)
    fine = ((labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD)).astype(np.float32)
    if (fh, fw) != (rh, rw):
        fine = cv2.resize(fine, (rw, rh), interpolation=cv2.INTER_LINEAR)
    mask = fine >= 0.5
    keep = np.zeros((rh, rw), bool)
    keep[y0:y1, x0:x1] = True
    return mask & keep


def prompt_pixel_box(prompt: Prompt, shape: tuple[int, int]) -> PixelBox | None:
    """The prompt's box in whole pixels (clipped), or one around its points.

    Args:
        prompt: a box and/or points.
        shape: the image's (height, width).

    Returns:
        (x0, y0, x1, y1), or None when the clipped box is empty.
    """
    height, width = shape
    if prompt.box is not None:
        x0, y0, x1, y1 = prompt.box
    else:
        x0, y0, x1, y1 = box_around_points(prompt, shape)
    box = (max(0, math.floor(x0)), max(0, math.floor(y0)), min(width, math.ceil(x1)), min(height, math.ceil(y1)))
    return box if box[2] > box[0] and box[3] > box[1] else None


def box_around_points(prompt: Prompt, shape: tuple[int, int]) -> tuple[float, float, float, float]:
    """Bounding box of the foreground points (all points when there are none), grown by a margin.

    Args:
        prompt: a prompt with points.
        shape: the image's (height, width); the margin is a share of its larger side.

    Returns:
        (x0, y0, x1, y1) in float pixels, not clipped.
    """
    foreground = [p for p, label in zip(prompt.points, prompt.point_labels, strict=True) if label == 1]
    xs, ys = zip(*(foreground or prompt.points), strict=True)
    margin = max(MIN_POINT_BOX_MARGIN_PX, POINT_BOX_MARGIN_FRACTION * max(shape))
    return min(xs) - margin, min(ys) - margin, max(xs) + margin + 1, max(ys) + margin + 1


def work_region(box: PixelBox, points: Sequence[tuple[float, float]], shape: tuple[int, int]) -> PixelBox:
    """The box and the points, grown by CONTEXT_FRACTION of the box size, clipped to the image.

    Args:
        box: the prompt's pixel box.
        points: the prompt's points.
        shape: the image's (height, width).

    Returns:
        The region GrabCut runs on, (x0, y0, x1, y1).
    """
    height, width = shape
    xs = [box[0], box[2]] + [int(x) for x, _ in points]
    ys = [box[1], box[3]] + [int(y) for _, y in points]
    grow_x = math.ceil(CONTEXT_FRACTION * (box[2] - box[0]))
    grow_y = math.ceil(CONTEXT_FRACTION * (box[3] - box[1]))
    return (max(0, min(xs) - grow_x), max(0, min(ys) - grow_y),
            min(width, max(xs) + 1 + grow_x), min(height, max(ys) + 1 + grow_y))


def shift_box(box: PixelBox, dx: int, dy: int) -> PixelBox:
    """``box`` moved by (-dx, -dy): into the coordinates of a region starting at (dx, dy).

    Args:
        box: (x0, y0, x1, y1).
        dx: the region's left column.
        dy: the region's top row.

    Returns:
        The moved box.
    """
    return box[0] - dx, box[1] - dy, box[2] - dx, box[3] - dy


def initial_labels(shape: tuple[int, int], box: PixelBox, points: Sequence[tuple[float, float]],
                   point_labels: Sequence[int]) -> np.ndarray:
    """GrabCut's label image: background outside the box, probable foreground inside, seeds at the points.

    Args:
        shape: the region's (height, width).
        box: the box in region coordinates.
        points: the points in region coordinates.
        point_labels: 1 (foreground) or 0 (background) per point.

    Returns:
        H x W uint8 of ``cv2.GC_*`` labels.
    """
    labels = np.full(shape, cv2.GC_BGD, np.uint8)
    x0, y0, x1, y1 = box
    labels[y0:y1, x0:x1] = cv2.GC_PR_FGD
    if not (labels == cv2.GC_BGD).any():
        # the box covers the whole region (a full-image box): the outer ring is the only background hint
        ring = np.ones(shape, bool)
        ring[1:-1, 1:-1] = False
        labels[ring] = cv2.GC_PR_BGD
    for (x, y), label in zip(points, point_labels, strict=True):
        cv2.circle(labels, (int(round(x)), int(round(y))), SEED_RADIUS_PX,
                   int(cv2.GC_FGD if label == 1 else cv2.GC_BGD), thickness=-1)
    return labels


def has_enough_samples(labels: np.ndarray) -> bool:
    """Whether both foreground and background have enough pixels to fit GrabCut's colour models."""
    foreground = np.count_nonzero((labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD))
    background = labels.size - foreground
    return foreground >= GMM_COMPONENTS and background >= GMM_COMPONENTS


def grabcut_score(mask: np.ndarray, box: PixelBox, has_box: bool) -> float:
    """The heuristic documented on GrabCutSegmenter.

    Args:
        mask: the region's mask, not empty.
        box: the prompt's box in region coordinates.
        has_box: whether the prompt gave the box (else it was built around points).

    Returns:
        A score in [0, 1].
    """
    x0, y0, x1, y1 = box
    inside = mask[y0:y1, x0:x1]
    outline = np.concatenate([inside[0], inside[-1], inside[1:-1, 0], inside[1:-1, -1]])
    border_touch = float(outline.mean())
    if not has_box:
        return 1.0 - border_touch
    ys, xs = np.nonzero(mask)
    tight = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
    return box_iou(tight, box) * (1.0 - 0.5 * border_touch)


def box_iou(a: PixelBox, b: PixelBox) -> float:
    """Intersection over union of two pixel boxes.

    Args:
        a: (x0, y0, x1, y1).
        b: (x0, y0, x1, y1).

    Returns:
        The IoU; 0 when both are empty.
    """
    inter_w = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = inter_w * inter_h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union else 0.0

"""Camera geometry from a detected track, and refinement of a coarse track mask.

- ``estimate_geometry``: focal length from the field of view, pitch from the horizon row, camera
  height from the gauge used as a ruler, curvature and offset from the centreline on the ground.
- ``refine_with_segmenter``: the paper's refinement — points and a box sampled from a coarse mask
  prompt a promptable segmenter (SAM) for an accurate one.
- ``SegmentationModelTrack``: a user's TorchScript rail-segmentation model as the coarse mask.
"""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from synrail.rail.detect import TrackDetection
from synrail.rail.geometry import RAIL_HEAD_WIDTH_M, STANDARD_GAUGE_M, CameraGeometry
from synrail.segment.base import Prompt, Segmenter, postprocess_mask

MIN_REFINED_IOU = 0.3  # a refined mask this far from the coarse one is a segmenter failure


def estimate_geometry(detection: TrackDetection, width: int, height: int, *, hfov_deg: float = 60.0,
                      gauge_m: float = STANDARD_GAUGE_M, rail_head_m: float = RAIL_HEAD_WIDTH_M,
                      track_max_z_m: float | None = None, focal_px: float | None = None,
                      principal: tuple[float, float] | None = None, horizon_v: float | None = None,
                      camera_height_m: float | None = None) -> CameraGeometry:
    """The camera and ego track that explain the detected rails.

    Args:
        detection: the rails found on the frame.
        width: the frame's width.
        height: the frame's height.
        hfov_deg: the field of view, when ``focal_px`` is not given.
        gauge_m: the sequence's track gauge: the ruler of the camera height and every distance.
        rail_head_m: rail-head width (the fits follow head centres, so the ruler is gauge + head).
        track_max_z_m: how far the track area runs; defaults to the ground distance of the
            detection's farthest row, so the geometry claims no more than was seen.
        focal_px: the focal length in pixels (overrides ``hfov_deg``).
        principal: the principal point (cx, cy); the frame's centre by default (a frame whose
            bottom was cut off has it above its centre).
        horizon_v: the horizon row to use instead of the detection's own (a sequence prior).
        camera_height_m: the camera height to use instead of the one the gauge gives (a prior).

    Returns:
        The camera over the rail-top plane with the ego track's offset and curvature.
    """
    focal = focal_px if focal_px is not None else (width / 2) / math.tan(math.radians(hfov_deg) / 2)
    cx, cy = principal if principal is not None else ((width - 1) / 2, (height - 1) / 2)
    horizon = detection.horizon_v if horizon_v is None else horizon_v
    # Negative where the rails vanish below the image centre: the camera looks up at the track's plane.
    pitch = math.atan2(cy - horizon, focal)
    camera_height = (camera_height_m if camera_height_m is not None
                     else _camera_height(detection, height, pitch, gauge_m + rail_head_m, horizon))
    camera = CameraGeometry(width=width, height=height, focal_px=focal, cx=cx, cy=cy, height_m=camera_height,
                            pitch_rad=pitch, gauge_m=gauge_m, rail_head_m=rail_head_m)
    rows = np.arange(detection.top_row, height, dtype=np.float64)
    x, z = camera.ground_point(detection.centre_x(rows), rows)
    offset, curvature = _fit_track_on_ground(x, z)
    reach = float(np.nanmax(z)) if track_max_z_m is None else track_max_z_m
    return camera.model_copy(update={"track_offset_m": offset, "track_curvature": curvature,
                                     "track_max_z_m": reach})


def _camera_height(detection: TrackDetection, height: int, pitch: float, rail_centres_m: float,
                   horizon_v: float) -> float:
    """Least squares of ``gap(v) = rail_centres_m * cos(pitch) * (v - v_horizon) / h`` over the rows.

    The fits follow the rail-head centres, so the ruler is gauge + one head width.
    """
    rows = np.arange(detection.top_row, height, dtype=np.float64)
    t = rows - horizon_v
    gap = detection.gap_px(rows)
    return float(rail_centres_m * math.cos(pitch) * np.dot(t, t) / np.dot(t, gap))


def _fit_track_on_ground(x: np.ndarray, z: np.ndarray) -> tuple[float, float]:
    """Least squares of ``X(Z) = offset + curvature * Z^2 / 2``."""
    seen = np.isfinite(x) & np.isfinite(z)
    design = np.stack([np.ones(int(seen.sum())), 0.5 * z[seen] ** 2], axis=1)
    (offset, curvature), *_ = np.linalg.lstsq(design, x[seen], rcond=None)
    return float(offset), float(curvature)


# -- refinement with a promptable segmenter ------------------------------------------------------
def refine_with_segmenter(image_bgr: np.ndarray, coarse_mask: np.ndarray, segmenter: Segmenter, *,
                          n_points: int = 8, rng: np.random.Generator,
                          logits: np.ndarray | None = None) -> np.ndarray:
    """The segmenter's mask for the track, prompted from the coarse mask; the coarse mask when
    the segmenter fails or disagrees wildly (IoU < 0.3).

    Positive points spread along the mask's height (one per band of rows, at random in its core,
    or its most confident pixel when the coarse model's ``logits`` are given, as the paper
    samples from the logits), negative points just outside its sides, and its bounding box.

    Args:
        image_bgr: H x W x 3 uint8 frame.
        coarse_mask: H x W mask of the track (any dtype; nonzero is track).
        segmenter: the promptable segmenter that refines it.
        n_points: positive points (one per band of rows); half as many negatives, at least 2.
        rng: places the points.
        logits: H x W scores of the coarse model, higher more confident; None places positives at random.

    Returns:
        H x W bool track mask: the refined one, or the coarse one (also when it is empty).
    """
    coarse = coarse_mask.astype(bool)
    if not coarse.any():
        return coarse
    prompt = track_prompt(coarse, n_points=n_points, rng=rng, logits=logits)
    results = segmenter.segment(image_bgr, [prompt])
    if not results:
        return coarse
    refined = postprocess_mask(results[0].mask)
    if refined is None or mask_iou(refined, coarse) < MIN_REFINED_IOU:
        return coarse
    return refined


def track_prompt(mask: np.ndarray, *, n_points: int, rng: np.random.Generator,
                 logits: np.ndarray | None = None) -> Prompt:
    """Box + positive points inside ``mask`` + negative points just outside it.

    Args:
        mask: H x W bool track mask; must not be empty.
        n_points: positive points, one per band of the mask's rows (fewer when it has fewer rows);
            ``max(2, n_points // 2)`` negatives.
        rng: places the points.
        logits: H x W scores of the coarse model: each positive goes to its band's most confident core
            pixel; None picks one at random.

    Returns:
        The prompt: the mask's bounding box (x0, y0, x1, y1, exclusive ends) and the labelled points, in pixels.
    """
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    box = (float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1))
    positives = _inside_points(mask, rows, n_points, rng, logits)
    negatives = _outside_points(mask, rows, max(2, n_points // 2), rng)
    points = tuple(positives + negatives)
    return Prompt(box=box, points=points, point_labels=(1,) * len(positives) + (0,) * len(negatives))


def _row_bands(rows: np.ndarray, count: int) -> list[np.ndarray]:
    return [band for band in np.array_split(rows, min(count, rows.size)) if band.size]


def _inside_points(mask: np.ndarray, rows: np.ndarray, count: int, rng: np.random.Generator,
                   logits: np.ndarray | None) -> list[tuple[float, float]]:
    """One point per band of rows, kept off the mask's edges (an eroded core where there is one)."""
    core = cv2.erode(mask.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
    core = core if core.any() else mask
    points = []
    for band in _row_bands(rows, count):
        vs, us = np.nonzero(core[band[0]:band[-1] + 1])
        if vs.size == 0:
            continue
        vs = vs + band[0]
        if logits is None:
            i = int(rng.integers(vs.size))
        else:  # the most confident pixel; the jitter picks at random among equals
            i = int(np.argmax(logits[vs, us] + rng.uniform(0, 1e-3, vs.size)))
        points.append((float(us[i]), float(vs[i])))
    return points


def _outside_points(mask: np.ndarray, rows: np.ndarray, count: int, rng: np.random.Generator
                    ) -> list[tuple[float, float]]:
    """Points beside the mask, left and right alternately, a few pixels (or 30 % of the row's
    width) beyond its edge: close enough to tell the segmenter where the track ends."""
    width = mask.shape[1]
    points = []
    for k, band in enumerate(_row_bands(rows, count)):
        v = int(band[rng.integers(band.size)])
        cols = np.flatnonzero(mask[v])
        margin = max(3.0, 0.3 * (cols[-1] - cols[0] + 1))
        u = cols[0] - margin if k % 2 == 0 else cols[-1] + margin
        if 0 <= u < width:
            points.append((float(u), float(v)))
    return points


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two boolean masks.

    Args:
        a: a boolean mask.
        b: another of the same shape.

    Returns:
        Their intersection over union, 0 when both are empty.
    """
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


# -- a learned coarse mask ----------------------------------------------------------------------
class SegmentationModelTrack:
    """A user-supplied TorchScript rail-area model: 1x3xHxW RGB in [0, 1] -> 1x1xHxW logits."""

    def __init__(self, torchscript_path: str | Path, device: str = "cpu", threshold: float = 0.5) -> None:
        if not 0 < threshold < 1:
            raise ValueError(f"threshold is a probability in (0, 1), got {threshold}")
        import torch  # optional dependency: only this class needs it

        self._torch = torch
        self._device = torch.device(device)
        self._model = torch.jit.load(str(torchscript_path), map_location=self._device).eval()
        self.threshold = threshold

    def coarse_mask(self, image_bgr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(H x W bool mask where sigmoid(logit) > threshold, H x W float32 logits)."""
        torch = self._torch
        rgb = cv2.cvtColor(image_bgr, cv2.COLOR_BGR2RGB)
        tensor = torch.from_numpy(np.ascontiguousarray(rgb.transpose(2, 0, 1))).float().div_(255.0)
        with torch.inference_mode():
            output = self._model(tensor.unsqueeze(0).to(self._device))
        logits = output.reshape(output.shape[-2:]).float().cpu().numpy()
        if logits.shape != image_bgr.shape[:2]:
            raise ValueError(f"model returned {logits.shape} logits for a {image_bgr.shape[:2]} image")
        threshold_logit = math.log(self.threshold / (1 - self.threshold))
        return logits > threshold_logit, logits

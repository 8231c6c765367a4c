"""A plausibility score per composite, to resample the ones that look pasted.

Four components in [0, 1], 1 = good:
- boundary: the pasted outline should be no sharper than the background's own strong edges
  nearby (mean gradient on a 1-px band around each visible mask against the 95th percentile of
  the background's gradients around it; score ``1 / (1 + excess)``, excess = ratio - 1 above 1);
- colour: the object's mean Lab colour against the background ring around it,
  ``exp(-deltaE / colour_scale)`` (a partial match is expected: obstacles have colours of their own);
- visibility: the mean visible share of the obstacles (occlusion and truncation);
- scale: pixel height against the camera model's height at that ground point,
  ``exp(-((|ln ratio| - rounding) / scale_tolerance) ** 2)``, one pixel of rounding allowed.
Per-obstacle values are averaged. total = the weighted geometric mean of the components, so one
very bad component sinks the composite whatever the others are. No obstacles: every score is 1.

Resampling: attempt k of image i draws from ``synrail.randomness.image_rng(seed, i, k)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from synrail.compose.harmony_kernels import percentile_linear

_EDGE_FLOOR = 4.0  # levels per pixel: below this a background's "strongest edge" is just flatness
_EDGE_PERCENTILE = 95
_RING_PX = (4, 24)  # ring width bounds around an obstacle, pixels
_RING_SHARE = 0.15  # ring width as a share of the obstacle's height
# A mean colour needs no more pixels than this: a large obstacle's interior and ring are taken on
# every k-th pixel (their mean Lab moves by a small fraction of a unit; the score by under 0.01).
_COLOUR_SAMPLES = 4096


class QualityConfig(BaseModel):
    """When to resample a composite, and how the components are weighed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(default=0.5, ge=0, le=1, description="a composite with total below this is redrawn")
    max_resamples: int = Field(default=3, ge=0, description="redraws after the first attempt; then the best is kept")
    boundary_weight: float = Field(default=1.0, ge=0)
    colour_weight: float = Field(default=1.0, ge=0)
    visibility_weight: float = Field(default=0.5, ge=0)
    scale_weight: float = Field(default=1.0, ge=0)
    colour_scale: float = Field(default=40.0, gt=0, description="deltaE (CIE76) at which colour falls to 1/e")
    scale_tolerance: float = Field(default=0.25, gt=0, description="|ln(pixel / expected)| at which scale falls to 1/e")


@dataclass(frozen=True)
class QualityScore:
    """A composite's plausibility: the weighted geometric mean ``total`` of four scores, each in [0, 1]."""

    total: float
    boundary: float
    colour: float
    visibility: float
    scale: float


class _Window(Protocol):
    top: int
    left: int
    mask: np.ndarray


# -- components -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Site:
    """A padded window around one obstacle, with its mask in window coordinates."""

    rows: slice
    cols: slice
    mask: np.ndarray
    ring_px: int


def _site(window: _Window, image_shape: tuple[int, int]) -> _Site:
    h, w = window.mask.shape
    ring = int(np.clip(round(_RING_SHARE * h), *_RING_PX))
    y0, x0 = max(window.top - ring, 0), max(window.left - ring, 0)
    y1, x1 = min(window.top + h + ring, image_shape[0]), min(window.left + w + ring, image_shape[1])
    mask = np.zeros((y1 - y0, x1 - x0), dtype=bool)
    mask[window.top - y0:window.top - y0 + h, window.left - x0:window.left - x0 + w] = window.mask
    return _Site(slice(y0, y1), slice(x0, x1), mask, ring)


def _grow(mask: np.ndarray, px: int) -> np.ndarray:
    return cv2.dilate(mask.astype(np.uint8), np.ones((2 * px + 1, 2 * px + 1), np.uint8)).astype(bool)


def _shrink(mask: np.ndarray, px: int) -> np.ndarray:
    return cv2.erode(mask.astype(np.uint8), np.ones((2 * px + 1, 2 * px + 1), np.uint8),
                     borderType=cv2.BORDER_CONSTANT, borderValue=0).astype(bool)


def _squared_gradient(image_bgr: np.ndarray) -> np.ndarray:
    """H x W x 3 squared gradient per channel, in (levels per pixel)^2 for a step edge (Sobel / 4)."""
    gx = cv2.Sobel(image_bgr, cv2.CV_32F, 1, 0, ksize=3, borderType=cv2.BORDER_REFLECT)  # exact on uint8 too
    gy = cv2.Sobel(image_bgr, cv2.CV_32F, 0, 1, ksize=3, borderType=cv2.BORDER_REFLECT)
    gx /= 4
    gy /= 4
    gx *= gx
    gy *= gy
    gx += gy
    return gx


def _channel_rms(squares: np.ndarray) -> np.ndarray:
    """sqrt of the mean over the last axis of 3 (``squares.mean(axis=-1)``'s float32 sums, without its
    slow reduction over a short strided axis)."""
    total = squares[..., 0] + squares[..., 1]
    total += squares[..., 2]
    total /= 3
    return np.sqrt(total)


def _gradient(image_bgr: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """Colour gradient magnitude (RMS over channels): a seam of equal brightness but another hue counts.

    Args:
        image_bgr: h x w x 3 uint8 image.
        where: h x w bool; when given, only those pixels' magnitudes, in row-major order.

    Returns:
        h x w float32 magnitudes (levels per pixel for a step edge), or one per ``where`` pixel.
    """
    squares = _squared_gradient(image_bgr)
    return _channel_rms(squares if where is None else squares[where])


def boundary_score(image_bgr: np.ndarray, background_bgr: np.ndarray, site: _Site) -> float:
    """1 when the outline is no sharper than the background's strong edges around it.

    Args:
        image_bgr: the composite.
        background_bgr: the background it was pasted on.
        site: the object's window, mask and ring width.

    Returns:
        A score in (0, 1].
    """
    seam = _grow(site.mask, 1) & ~_shrink(site.mask, 1)
    if not seam.any():
        return 1.0
    seam_gradient = float(_gradient(image_bgr[site.rows, site.cols], seam).mean())
    reference = max(float(percentile_linear(_gradient(background_bgr[site.rows, site.cols]).ravel(), _EDGE_PERCENTILE)),
                    _EDGE_FLOOR)
    return 1.0 / (1.0 + max(0.0, seam_gradient / reference - 1.0))


def _pixels(image_bgr: np.ndarray, site: _Site, mask: np.ndarray) -> np.ndarray:
    """Every k-th of the pixels of ``site``'s window under ``mask`` (row-major order), about
    ``_COLOUR_SAMPLES`` of them at most, N x 3 (gathered as whole rows of a flat copy: faster for
    3-byte pixels than a boolean index)."""
    window = np.ascontiguousarray(image_bgr[site.rows, site.cols])
    chosen = np.flatnonzero(mask)
    return window.reshape(-1, window.shape[2])[chosen[::max(1, chosen.size // _COLOUR_SAMPLES)]]


def _mean_lab(pixels_bgr: np.ndarray) -> np.ndarray:
    lab = cv2.cvtColor(pixels_bgr.reshape(1, -1, 3).astype(np.float32) / 255.0, cv2.COLOR_BGR2Lab)
    return lab.reshape(-1, 3).mean(axis=0)


def colour_score(image_bgr: np.ndarray, background_bgr: np.ndarray, site: _Site, colour_scale: float) -> float:
    """exp(-deltaE / colour_scale) between the object's interior and the background ring around it.

    Args:
        image_bgr: the composite.
        background_bgr: the background it was pasted on.
        site: the object's window, mask and ring width.
        colour_scale: the CIELAB distance at which the score falls to 1/e.

    Returns:
        A score in (0, 1].
    """
    inner = _shrink(site.mask, 1)
    if not inner.any():
        inner = site.mask
    ring = _grow(site.mask, site.ring_px) & ~site.mask
    if not ring.any() or not inner.any():
        return 1.0
    obj = _mean_lab(_pixels(image_bgr, site, inner))
    around = _mean_lab(_pixels(background_bgr, site, ring))
    return math.exp(-float(np.linalg.norm(obj - around)) / colour_scale)


def scale_score(pixel_height: float, expected_height: float, tolerance: float) -> float:
    """exp(-(error / tolerance)^2), error = |ln(pixel / expected)| beyond one pixel of rounding.

    Args:
        pixel_height: the pasted height in pixels.
        expected_height: the camera model's height in pixels.
        tolerance: the log error at which the score falls to 1/e.

    Returns:
        A score in [0, 1]; 0 when ``expected_height`` is not positive.
    """
    if expected_height <= 0:
        return 0.0
    rounding = math.log1p(1.0 / expected_height)
    error = max(0.0, abs(math.log(max(pixel_height, 1e-6) / expected_height)) - rounding)
    return math.exp(-((error / tolerance) ** 2))


# -- the score --------------------------------------------------------------------------------------
def _weighted_geometric_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    total_weight = sum(weights)
    if total_weight <= 0:
        return 1.0
    return math.exp(sum(w * math.log(max(v, 1e-9)) for v, w in zip(values, weights, strict=True)) / total_weight)


def composite_quality(image_bgr: np.ndarray, instance_masks: Sequence[_Window], background_bgr: np.ndarray,
                      visibilities: Sequence[float], pixel_heights: Sequence[float],
                      expected_heights: Sequence[float], cfg: QualityConfig = QualityConfig()) -> QualityScore:
    """Score one composite against the background it was pasted on.

    Args:
        image_bgr: the composite.
        instance_masks: the obstacles' visible masks (``Instance.visible_mask``).
        background_bgr: the background it was pasted on.
        visibilities: each obstacle's ``Instance.visibility``.
        pixel_heights: the pasted pixel heights (``Placement.mask.shape[0]``).
        expected_heights: the camera model's heights for them (``CameraGeometry.object_pixel_height``).
        cfg: the weights and scales.

    Returns:
        The four scores and their total; all 1 without obstacles.

    Raises:
        ValueError: the sequences do not have one value per obstacle.
    """
    counts = {len(instance_masks), len(visibilities), len(pixel_heights), len(expected_heights)}
    if len(counts) != 1:
        raise ValueError(f"one value per obstacle expected, got lengths {sorted(counts)}")
    if not instance_masks:
        return QualityScore(total=1.0, boundary=1.0, colour=1.0, visibility=1.0, scale=1.0)
    sites = [_site(m, image_bgr.shape[:2]) for m in instance_masks]
    boundary = float(np.mean([boundary_score(image_bgr, background_bgr, s) for s in sites]))
    colour = float(np.mean([colour_score(image_bgr, background_bgr, s, cfg.colour_scale) for s in sites]))
    visibility = float(np.clip(np.mean(visibilities), 0.0, 1.0))
    scale = float(np.mean([scale_score(p, e, cfg.scale_tolerance)
                           for p, e in zip(pixel_heights, expected_heights, strict=True)]))
    total = _weighted_geometric_mean(
        (boundary, colour, visibility, scale),
        (cfg.boundary_weight, cfg.colour_weight, cfg.visibility_weight, cfg.scale_weight))
    return QualityScore(total=total, boundary=boundary, colour=colour, visibility=visibility, scale=scale)

"""Harmonization kernels: pure array-in, array-out functions the backends of ``harmonizers.py`` are
built from. Nothing here keeps state or knows about configs.

- geometry: the ring of background around an object (``ring_width``, ``ring_mask``, ``ring_pixels``,
  ``mask_window``);
- statistics: CIE Lab conversion, per-channel mean and spread, white points, luminance;
- edges: pixels paired across the object's edge and their lightness steps (``edge_pairs``,
  ``edge_differences``, ``edge_log_ratio``: the edge's reading of an exposure mismatch);
- posteriors: how much of an observed object-to-ring difference is a mismatch to undo rather than
  the scene's own difference (``exposure_correction`` for a gain, ``posterior_shift`` for an offset,
  ``edge_lightness_shift`` and ``edge_cast_shift`` for the lightness and colour steps across the edge);
- transfers: ``harmonize_lab`` (partial Reinhard transfer, the first default), ``white_point_transform``
  (``local``'s von Kries correction, an affine map), ``ring_statistics_lut`` (``ring``'s Lab
  transfer, a per-channel table on 8-bit Lab);
- fills for gradient-domain blending (``smooth_fill``, ``fill_from_nearest``).
"""

from __future__ import annotations

import functools
import math

import cv2
import numpy as np
from scipy import special

_EPS = 1e-3
_CHROMA_SHARE = 0.5  # lab: colour cast moves half as far as luminance: objects keep their own colour
CONTRAST_LIMITS = (0.7, 1.4)  # never flatten or blow up an object's own texture
_RING_SAMPLES = 2048  # statistics need no more pixels
_CLIPPED_WHITE = 0.97  # an object white point this close to 1 may be clipped: it bounds the exposure only
_POSTERIOR_GRID = 241  # points of a posterior over a mismatch
_LAB_8BIT_SCALE = np.array([100.0 / 255.0, 1.0, 1.0], dtype=np.float32)  # OpenCV's 8-bit Lab: L * 255 / 100,
_LAB_8BIT_OFFSET = np.array([0.0, 128.0, 128.0], dtype=np.float32)  # a + 128, b + 128
_TONE_FLOOR = 1e-3  # L / 100 below this counts as this in the power's fit (its log stays finite)
_TONE_STEPS = 12  # Newton steps for a tone curve's power (it converges in 3-5)
_TONE_SAMPLES = 512  # pixels a tone curve's power is fitted on
_TONE_TOLERANCE = 5e-4  # a mean this close (in L / 100) needs no curve
_TONE_POWERS = (0.2, 5.0)  # the powers a tone curve may take
_SCENE_TAIL_DOF = 3.0  # Student-t degrees of freedom of the scene's own object-to-ring difference
_MAD_TO_STD = 1.4826  # a normal distribution's standard deviation per median absolute deviation
_EDGE_SPREAD_FLOOR = 1.0  # L units: an edge never counts as more consistent than this (8-bit, JPEG noise)
_MIN_EDGE_PAIRS = 8  # fewer pairs across the edge than this are no evidence


# --- geometry --------------------------------------------------------------------------------------

def ring_width(object_height_px: int, share: float) -> int:
    """Ring width for an object ``object_height_px`` rows tall: ``share`` of its height, at least 2 px.

    Args:
        object_height_px: the object's height.
        share: ring width per object height.

    Returns:
        The width in pixels.
    """
    return max(2, int(round(share * object_height_px)))


def mask_height(mask: np.ndarray) -> int:
    """Rows from the mask's first to its last set row (0 for an empty mask)."""
    rows = np.flatnonzero(mask.any(axis=1))
    return int(rows[-1] - rows[0] + 1) if rows.size else 0


def mask_window(mask: np.ndarray, margin: int) -> tuple[slice, slice]:
    """The mask's bounding box grown by ``margin`` and cut at the image border.

    Args:
        mask: H x W bool, not empty.
        margin: pixels added on every side.

    Returns:
        (rows, cols) slices of the window.
    """
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    height, width = mask.shape
    return (slice(max(rows[0] - margin, 0), min(rows[-1] + 1 + margin, height)),
            slice(max(cols[0] - margin, 0), min(cols[-1] + 1 + margin, width)))


def ring_mask(mask: np.ndarray, width_px: int) -> np.ndarray:
    """Background pixels within ``width_px`` of ``mask`` (a square neighbourhood: separable, so fast).

    Args:
        mask: H x W bool, the object.
        width_px: the ring width.

    Returns:
        H x W bool, the ring.
    """
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * width_px + 1, 2 * width_px + 1))
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(bool) & ~mask


def ring_pixels(canvas_bgr: np.ndarray, mask: np.ndarray, width_px: int) -> np.ndarray:
    """The colours of ``ring_mask(mask, width_px)`` in ``canvas_bgr`` (the same size), as N x 3.

    Args:
        canvas_bgr: H x W x 3 image.
        mask: H x W bool, the object.
        width_px: the ring width.

    Returns:
        N x 3, one row per ring pixel.
    """
    return canvas_bgr[ring_mask(mask, width_px)]


def ring_pixels_on_grid(image_bgr: np.ndarray, mask: np.ndarray, width_px: int, count: int) -> np.ndarray:
    """The ring's colours (:func:`ring_pixels`) on a grid of every k-th row and column, k such that
    about ``count`` or more remain: a wide ring around a large object costs its dilation and gather
    in proportion to its area, and statistics need no more pixels.

    Args:
        image_bgr: H x W x 3 image, the object's window (:func:`mask_window` grown by the ring), so
            that its background is about the ring.
        mask: H x W bool, the object.
        width_px: the ring width, in full-resolution pixels.
        count: about how many ring pixels are enough.

    Returns:
        N x 3, one row per ring pixel on the grid (all of them when the ring is small).
    """
    background = mask.size - np.count_nonzero(mask)  # the ring is at most this
    step = max(1, int(np.sqrt(background / count)))
    if step == 1:
        return ring_pixels(image_bgr, mask, width_px)
    return ring_pixels(image_bgr[::step, ::step], mask[::step, ::step], max(1, width_px // step))


def subsample(pixels: np.ndarray, count: int = _RING_SAMPLES) -> np.ndarray:
    """Every k-th row of ``pixels`` so that about ``count`` remain (statistics need no more).

    Args:
        pixels: N x C.
        count: about how many rows to keep.

    Returns:
        A strided view of ``pixels``.
    """
    return pixels[::max(1, len(pixels) // count)]


# --- statistics ------------------------------------------------------------------------------------

def to_lab(pixels_bgr: np.ndarray) -> np.ndarray:
    """N x 3 BGR uint8 -> N x 3 float32 CIE Lab (L in [0, 100])."""
    return cv2.cvtColor(pixels_bgr.reshape(1, -1, 3).astype(np.float32) / 255.0, cv2.COLOR_BGR2Lab).reshape(-1, 3)


def to_lab_8bit(pixels_bgr: np.ndarray) -> np.ndarray:
    """N x 3 BGR uint8 -> N x 3 float32 CIE Lab (L in [0, 100]) through OpenCV's 8-bit conversion:
    table-driven, about 6x faster than :func:`to_lab`, within 0.6 in L and 2.4 in a, b of it."""
    lab = cv2.cvtColor(np.ascontiguousarray(pixels_bgr, dtype=np.uint8).reshape(1, -1, 3), cv2.COLOR_BGR2Lab)
    return lab.reshape(-1, 3).astype(np.float32) * _LAB_8BIT_SCALE - _LAB_8BIT_OFFSET


def lab_to_bgr(lab: np.ndarray) -> np.ndarray:
    """N x 3 Lab -> N x 3 BGR uint8, rounded and clipped."""
    bgr = cv2.cvtColor(np.ascontiguousarray(lab, dtype=np.float32).reshape(1, -1, 3), cv2.COLOR_Lab2BGR)
    return np.clip(bgr.reshape(-1, 3) * 255.0 + 0.5, 0, 255).astype(np.uint8)


def mean_std(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation (plus a small epsilon) of N x 3 values."""
    mean, std = cv2.meanStdDev(np.ascontiguousarray(pixels, dtype=np.float32).reshape(-1, 1, 3))  # one C pass
    return mean.ravel().astype(np.float32), std.ravel().astype(np.float32) + _EPS


def luminance(bgr: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of N x 3 BGR values."""
    return bgr @ np.array([0.114, 0.587, 0.299], dtype=np.float32)


def white_point(values: np.ndarray, percentile: float) -> np.ndarray:
    """The ``percentile`` of ``values`` along axis 0 (per channel for N x 3): a region's "white patch".

    Args:
        values: N or N x C values.
        percentile: 0-100.

    Returns:
        The white point (per channel), plus a small epsilon so it can divide.
    """
    return percentile_linear(values, percentile) + _EPS


def percentile_linear(values: np.ndarray, percentile: float) -> np.ndarray:
    """``np.percentile(values, percentile, axis=0)`` (its default "linear" method, a Python-float
    ``percentile``, no NaNs) with the same floating-point steps, without its ~30 us of per-call
    bookkeeping: the kernels take a few percentiles of a few hundred pixels per object.

    Args:
        values: N or N x C floats, N >= 1, no NaNs.
        percentile: 0-100.

    Returns:
        The percentile (per column), of ``values``' dtype.
    """
    count = values.shape[0]
    q = percentile / 100
    index = count * q + (1 + q * (1 - 1 - 1)) - 1  # numpy's virtual index, in its order of operations
    if index >= count - 1:
        return values.max(axis=0)
    below = math.floor(index)
    gamma = index - below
    part = np.partition(values, (below, below + 1), axis=0)
    low, high = part[below], part[below + 1]
    step = high - low
    return high - step * (1 - gamma) if gamma >= 0.5 else low + step * gamma


def median(values: np.ndarray) -> np.ndarray:
    """``np.median(values, axis=0)`` (no NaNs) with the same floating-point steps and less bookkeeping.

    Args:
        values: N or N x C floats, N >= 1, no NaNs.

    Returns:
        The median (per column), of ``values``' dtype.
    """
    half = values.shape[0] // 2
    if values.shape[0] % 2:
        return np.partition(values, half, axis=0)[half]
    part = np.partition(values, (half - 1, half), axis=0)
    return (part[half - 1] + part[half]) / 2


# --- posteriors ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _posterior_grid(prior_range: float) -> np.ndarray:
    """The points of a posterior over a mismatch in [-prior_range, prior_range] (cached: one per setting)."""
    grid = np.linspace(-prior_range, prior_range, _POSTERIOR_GRID)
    grid.flags.writeable = False
    return grid


def _scene_likelihood(observed: np.ndarray, grid: np.ndarray, scene_spread: float, clipped: bool) -> np.ndarray:
    """Likelihood of each ``observed`` difference (rows) if the mismatch were each ``grid`` value:
    the rest is the scene's own difference, Student-t of scale ``scene_spread``; ``clipped``: the
    observation only bounds the difference from below (a censored measurement)."""
    z = (observed[:, None] - grid[None, :]) / scene_spread
    if clipped:
        return special.stdtr(_SCENE_TAIL_DOF, -z)  # P(difference >= z): the t's survival function
    return (1.0 + z * z / _SCENE_TAIL_DOF) ** (-(_SCENE_TAIL_DOF + 1.0) / 2.0)  # t density, up to a factor


def exposure_correction(log_ratio: float, clipped: bool, exposure_range: float, scene_spread: float,
                        edge_check: tuple[float, float] | None = None) -> float:
    """The log gain that best undoes an object's exposure mismatch x, given the log ratio of its white
    point to its surroundings' = x + the scene's own difference.

    x has a flat prior on [-exposure_range, exposure_range]; the scene's difference is Student-t
    (3 degrees of freedom, scale ``scene_spread``): heavy tails, so a ratio far outside the prior is
    put down to the scene and the correction falls back toward none. A ``clipped`` white point (the
    object's highlights at the top of the range) says only that the true ratio is at least
    ``log_ratio``. The gain is the posterior mean of exp(-x), the one factor with the least expected
    squared error in the pixels, not exp of the mean of -x.

    ``edge_check`` (edge log ratio, share) brings a second, independent reading of the same mismatch:
    the luminance step across the object's edge (:func:`edge_log_ratio`). When it points the other
    way (one says brighten, the other darken) the white points are not measuring the mismatch alone
    (a bright sky in the ring, the object's specular highlights): the scene's scale widens to the
    hypotenuse of ``scene_spread`` and share x the two readings' difference, so the correction falls
    back toward none. Readings of one sign are left alone: the edge's size also carries the scene's
    own contrast there, so only its direction is trusted.

    Args:
        log_ratio: log(object white point / ring white point).
        clipped: whether the object's white point is at the top of the range.
        exposure_range: half-width of the flat prior over the mismatch (log units).
        scene_spread: scale of the scene's own difference (log units).
        edge_check: (the edge's log(object / ring) luminance, the disagreement's share of the
            scale), or None.

    Returns:
        The log gain to multiply the object by.
    """
    if edge_check is not None and edge_check[0] * log_ratio < 0:
        scene_spread = float(np.hypot(scene_spread, edge_check[1] * (log_ratio - edge_check[0])))
    grid = _posterior_grid(exposure_range)
    likelihood = _scene_likelihood(np.array([log_ratio]), grid, scene_spread, clipped)[0]
    return float(np.log((likelihood * np.exp(-grid)).sum() / likelihood.sum()))


def posterior_shift(observed: np.ndarray, prior_range: float, scene_spread: float) -> np.ndarray:
    """The part of each observed ring-minus-object difference that is a mismatch to undo: the
    posterior mean of the mismatch x given observed = x + the scene's own difference.

    x has a flat prior on [-prior_range, prior_range], the scene's difference is Student-t (3 degrees
    of freedom, scale ``scene_spread``). A difference well inside the prior is mostly undone; one far
    beyond it is put down to the scene (an object whose colour is its own, a red car on grey ballast)
    and the shift falls back toward none: the strength is set by how far the object is from the ring.

    Args:
        observed: differences, any shape.
        prior_range: half-width of the prior over the mismatch, in the differences' units.
        scene_spread: scale of the scene's own difference, the same units.

    Returns:
        The shifts to apply, the shape of ``observed``, each within +-``prior_range``.
    """
    values = np.asarray(observed, dtype=np.float64)
    grid = _posterior_grid(prior_range)
    likelihood = _scene_likelihood(values.reshape(-1), grid, scene_spread, clipped=False)
    return ((likelihood @ grid) / likelihood.sum(axis=1)).reshape(values.shape)


# --- transfers -------------------------------------------------------------------------------------

def harmonize_lab(object_bgr: np.ndarray, object_mask: np.ndarray, ring_bgr: np.ndarray,
                  strength: float) -> np.ndarray:
    """Colour-statistics transfer in CIE Lab (Reinhard et al. 2001), partial: the object's luminance
    level and contrast move ``strength`` of the way to the ring's, its colour cast half as far.

    Args:
        object_bgr: h x w x 3 uint8 holding the object.
        object_mask: h x w bool, the object's pixels.
        ring_bgr: N x 3 uint8 colours of the background around it.
        strength: 0 (no change) to 1.

    Returns:
        ``object_bgr`` with its masked pixels harmonized (a copy; the input itself when nothing changes).
    """
    if strength <= 0 or ring_bgr.shape[0] < 8 or not object_mask.any():
        return object_bgr
    obj = to_lab(object_bgr[object_mask])
    obj_mean, obj_std = mean_std(obj)
    ring_mean, ring_std = mean_std(to_lab(subsample(ring_bgr)))
    share = np.array([1.0, _CHROMA_SHARE, _CHROMA_SHARE], dtype=np.float32) * strength
    contrast = np.clip((ring_std[0] / obj_std[0]) ** share[0], *CONTRAST_LIMITS)
    scale = np.array([contrast, 1.0, 1.0], dtype=np.float32)
    shifted = (obj - obj_mean) * scale + obj_mean + share * (ring_mean - obj_mean)
    shifted[:, 0] = np.clip(shifted[:, 0], 0.0, 100.0)
    out = object_bgr.copy()
    out[object_mask] = lab_to_bgr(shifted)
    return out


def white_point_transform(obj: np.ndarray, ring: np.ndarray, percentile: float, exposure_range: float,
                          scene_spread: float, cast_strength: float, contrast_share: float,
                          cast_prior: tuple[float, float] | None = None,
                          edge_check: tuple[float, float] | None = None) -> np.ndarray:
    """Von Kries correction of an object toward the light of its ring, by white points, as the 3 x 4
    affine map (BGR in [0, 1] to BGR) it amounts to: per-channel gains plus a luminance contrast step.

    The exposure undoes the posterior mismatch of the luminance white points
    (:func:`exposure_correction`), the colour cast moves ``cast_strength`` of the way to the ring's
    per-channel white point, the luminance contrast ``contrast_share`` of the way (in log).

    Args:
        obj: N x 3 BGR in [0, 1], the object's pixels (or a sample of them).
        ring: M x 3 BGR in [0, 1], the ring's.
        percentile: the white point's percentile.
        exposure_range: the exposure posterior's prior range (log units).
        scene_spread: the exposure posterior's scene scale (log units).
        cast_strength: share of the cast moved, 0-1.
        contrast_share: share of the log contrast ratio moved, 0-1.
        cast_prior: (prior range, scene spread) in log units: the cast moves by the posterior of its
            length (``posterior_shift``) instead of ``cast_strength``, so an object whose white points
            are far from the ring's (no white at all: a red car) keeps its colour.
        edge_check: the edge's reading of the exposure mismatch and its weight, see
            :func:`exposure_correction` (None: the white points alone).

    Returns:
        3 x 4 float32 [matrix | offset]: a pixel x (a BGR column) maps to matrix @ x + offset.
    """
    ring_luminance = luminance(ring)
    object_white = white_point(luminance(obj), percentile)
    log_gain = exposure_correction(float(np.log(object_white / white_point(ring_luminance, percentile))),
                                   clipped=object_white >= _CLIPPED_WHITE,
                                   exposure_range=exposure_range, scene_spread=scene_spread,
                                   edge_check=edge_check)
    log_cast = np.log(white_point(ring, percentile) / white_point(obj, percentile))
    log_cast -= log_cast.mean()  # the cast alone: its exposure part is log_gain's
    if cast_prior is None:
        log_cast *= cast_strength
    else:
        length = float(np.linalg.norm(log_cast))
        log_cast *= cast_strength * float(posterior_shift(length, *cast_prior)) / length if length > _EPS else 0.0
    gains = np.exp(log_gain + log_cast)
    corrected_luminance = luminance(obj * gains)
    contrast = (ring_luminance.std() + _EPS) / (corrected_luminance.std() + _EPS)
    step = float(np.clip(contrast ** contrast_share, *CONTRAST_LIMITS)) - 1.0
    # corrected + (Y(corrected) - mean Y) * step, with Y linear: one affine map of the pixel
    weights = np.array([0.114, 0.587, 0.299]) * gains
    matrix = np.diag(gains) + step * np.ones((3, 1)) * weights[None, :]
    offset = np.full((3, 1), -step * float(corrected_luminance.mean()))
    return np.hstack([matrix, offset]).astype(np.float32)


def white_point_correction(obj: np.ndarray, ring: np.ndarray, percentile: float, exposure_range: float,
                           scene_spread: float, cast_strength: float, contrast_share: float,
                           cast_prior: tuple[float, float] | None = None,
                           edge_check: tuple[float, float] | None = None) -> np.ndarray:
    """:func:`white_point_transform` (same arguments) applied to ``obj``.

    Args:
        obj: N x 3 BGR in [0, 1], the object's pixels.
        ring: M x 3 BGR in [0, 1], the ring's.
        percentile: the white point's percentile.
        exposure_range: the exposure posterior's prior range (log units).
        scene_spread: the exposure posterior's scene scale (log units).
        cast_strength: share of the cast moved, 0-1.
        contrast_share: share of the log contrast ratio moved, 0-1.
        cast_prior: see :func:`white_point_transform`.
        edge_check: see :func:`white_point_transform`.

    Returns:
        The corrected N x 3 values (not clipped).
    """
    transform = white_point_transform(obj, ring, percentile, exposure_range, scene_spread, cast_strength,
                                      contrast_share, cast_prior, edge_check)
    return obj @ transform[:, :3].T + transform[:, 3]


def apply_affine_8bit(pixels_bgr: np.ndarray, transform: np.ndarray) -> np.ndarray:
    """N x 3 uint8 BGR through a 3 x 4 affine map of [0, 1] values (:func:`white_point_transform`),
    rounded and clipped to uint8 in one C pass (``cv2.transform``).

    Args:
        pixels_bgr: N x 3 uint8.
        transform: 3 x 4 [matrix | offset] on values in [0, 1].

    Returns:
        N x 3 uint8.
    """
    scaled = np.hstack([transform[:, :3], transform[:, 3:] * 255.0]).astype(np.float32)  # same map on 0-255
    flat = np.ascontiguousarray(pixels_bgr, dtype=np.uint8).reshape(1, -1, 3)
    return cv2.transform(flat, scaled).reshape(-1, 3)


def ring_statistics_lut(obj_lab: np.ndarray, ring_lab: np.ndarray, lightness_shift: float,
                        cast: np.ndarray, spread: tuple[float, float]) -> np.ndarray:
    """The object's lightness mean moved by ``lightness_shift`` (:func:`edge_lightness_shift`), its
    a, b codes by ``cast`` (:func:`edge_cast_shift`) and, optionally, its spreads toward the ring's,
    as a per-channel table on OpenCV's 8-bit Lab codes (``cv2.LUT``).

    - the lightness shift is a power curve on L (:func:`tone_power`): black and white stay;
    - the cast is an offset on a and b;
    - the spread of each channel (contrast, saturation) by the posterior of the log std ratio, within
      ``CONTRAST_LIMITS`` (not at all for a prior range of 0).

    Every step maps each channel on its own, so a 256-entry table per channel holds the whole
    transfer: statistics come from samples, the pixels pay one table look-up.

    Args:
        obj_lab: N x 3 Lab, the object's pixels (or a sample of them).
        ring_lab: M x 3 Lab, the ring's (read only for the spreads).
        lightness_shift: L units added to the object's mean lightness.
        cast: the (a, b) offsets to add.
        spread: (prior range, scene spread) of the log std ratio.

    Returns:
        256 x 1 x 3 uint8: new 8-bit Lab code per old code, per channel.
    """
    obj_mean, obj_std = mean_std(obj_lab)
    scale = np.ones(3, dtype=np.float32)
    if spread[0] > 0:  # a prior range of 0: the spreads are left alone (and nothing is computed)
        _, ring_std = mean_std(ring_lab)
        scale = np.clip(np.exp(posterior_shift(np.log(ring_std / obj_std), *spread)), *CONTRAST_LIMITS)
    codes = np.arange(256, dtype=np.float32)[:, None]
    values = codes * _LAB_8BIT_SCALE - _LAB_8BIT_OFFSET  # 256 x 3: each code's L, a, b
    offset = np.array([0.0, *np.asarray(cast, dtype=np.float32)], dtype=np.float32)
    mapped = (values - obj_mean) * scale + obj_mean + offset
    mapped[:, 0] = np.clip(mapped[:, 0], 0.0, 100.0)
    scaled_lightness = np.clip((obj_lab[:, 0] - obj_mean[0]) * scale[0] + obj_mean[0], 0.0, 100.0)
    power = tone_power(scaled_lightness, obj_mean[0] + lightness_shift)
    mapped[:, 0] = 100.0 * (mapped[:, 0] / 100.0) ** power
    coded = np.clip((mapped + _LAB_8BIT_OFFSET) / _LAB_8BIT_SCALE + 0.5, 0, 255)
    return coded.astype(np.uint8).reshape(256, 1, 3)


def edge_pairs(mask: np.ndarray, band_px: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixels paired across the object's edge: each background pixel within ``band_px`` outside
    ``mask`` with the nearest object pixel within ``band_px`` inside it.

    The edge's own pixels count, mixtures of object and background as they may be (anti-aliasing,
    resizing): skipping them made both benchmarks worse (real 58 %, synthetic 25-35 %).

    Args:
        mask: H x W bool, the object.
        band_px: the depth of the bands on both sides of the edge.

    Returns:
        (outside, inside): flat pixel indices of equal length (empty when either band is).
    """
    inner = mask & ~_erode(mask, band_px)
    outer = dilate(mask, band_px) & ~mask
    if not inner.any() or not outer.any():
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    _, labels = cv2.distanceTransformWithLabels((~inner).astype(np.uint8), cv2.DIST_L2, 3,
                                                labelType=cv2.DIST_LABEL_PIXEL)
    inside, outside = np.flatnonzero(inner), np.flatnonzero(outer)
    pixel_of_label = np.zeros(int(labels.max()) + 1, dtype=np.intp)
    pixel_of_label[labels.ravel()[inside]] = inside
    return outside, pixel_of_label[labels.ravel()[outside]]


def edge_differences(image_bgr: np.ndarray, mask: np.ndarray, band_px: int) -> np.ndarray:
    """Colour steps across the object's edge (8-bit CIE Lab units), outside minus inside, over the
    pairs of :func:`edge_pairs`.

    Args:
        image_bgr: H x W x 3 uint8, the object pasted.
        mask: H x W bool, the object.
        band_px: the depth of the bands on both sides of the edge.

    Returns:
        N x 3 (L, a, b), one row per outer band pixel (no rows when either band is empty).
    """
    outside, inside = edge_pairs(mask, band_px)
    if not outside.size:
        return np.zeros((0, 3), dtype=np.float32)
    pixels = image_bgr.reshape(-1, 3)
    return to_lab_8bit(pixels[outside]) - to_lab_8bit(pixels[inside])


def _erode(mask: np.ndarray, radius: int) -> np.ndarray:
    """``mask`` shrunk by a disc of ``radius`` pixels (the image border does not erode it)."""
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    return cv2.erode(mask.astype(np.uint8), kernel, borderType=cv2.BORDER_REPLICATE).astype(bool)


def edge_log_ratio(outside_lightness: np.ndarray, inside_lightness: np.ndarray) -> float | None:
    """The object's exposure mismatch as the edge reads it: minus the median step in log luminance
    across the edge, log(object / ring) in the units of the white points' ratio.

    Lightness is turned back into log luminance by CIE's cube law (log Y = 3 log((L + 16) / 116),
    its linear toe below L 8 ignored), so a step counts by the ratio it is, not by its size in L.

    Args:
        outside_lightness: L of the outer pixel of each pair across the edge (:func:`edge_pairs`).
        inside_lightness: L of the inner pixel of each pair.

    Returns:
        The log ratio, or None with fewer than ``_MIN_EDGE_PAIRS`` pairs.
    """
    if outside_lightness.size < _MIN_EDGE_PAIRS:
        return None
    steps = np.log((outside_lightness + 16.0) / (inside_lightness + 16.0))
    return -3.0 * float(median(steps))


def edge_lightness_shift(differences: np.ndarray, prior_range: float, spread_share: float) -> float:
    """The lightness mismatch to undo, from the steps across the object's edge (:func:`edge_differences`).

    A mismatch adds one offset to every step around the edge; the scene's own edges (a dark tyre,
    then bright paint, against one background) vary around it. So the observation is the median
    step and the scene spread ``spread_share`` times the steps' robust spread (their median absolute
    deviation as a standard deviation, at least ``_EDGE_SPREAD_FLOOR``): an object that meets its
    surroundings with one consistent step is mostly corrected, one whose edge steps up here and down
    there keeps most of its lightness (:func:`posterior_shift`).

    Args:
        differences: outer minus inner lightness per pair across the edge.
        prior_range: half-width of the flat prior over the mismatch (L units).
        spread_share: scene spread per robust spread of the steps.

    Returns:
        The L shift to add to the object's mean (0 without enough pairs).
    """
    if differences.size < _MIN_EDGE_PAIRS:
        return 0.0
    middle = float(median(differences))
    robust_spread = _MAD_TO_STD * float(median(np.abs(differences - middle)))
    return float(posterior_shift(middle, prior_range, spread_share * robust_spread + _EDGE_SPREAD_FLOOR))


def edge_cast_shift(differences: np.ndarray, prior_range: float, spread_share: float) -> np.ndarray:
    """The colour cast to undo, from the (a, b) steps across the object's edge: the same evidence as
    :func:`edge_lightness_shift`, in the chroma plane.

    A cast adds one (a, b) offset to every step around the edge, so the observation is the per-channel
    median step and the scene spread ``spread_share`` times the steps' robust spread (the length of
    the per-channel MADs as standard deviations, at least ``_EDGE_SPREAD_FLOOR``). The shift is the
    posterior of the median's length (:func:`posterior_shift`) along its direction: a consistent
    slight tint all around the edge is mostly undone; a step far beyond ``prior_range`` (a red car on
    grey ballast: its colour is its own) falls back toward none, as does one that varies around the
    edge (an object's own colours).

    Args:
        differences: N x 2 outer minus inner (a, b) per pair across the edge.
        prior_range: half-width of the flat prior over the cast's length (a-b units).
        spread_share: scene spread per robust spread of the steps.

    Returns:
        The (a, b) shift to add to the object (zeros without enough pairs).
    """
    if len(differences) < _MIN_EDGE_PAIRS:
        return np.zeros(2, dtype=np.float32)
    middle = median(differences)
    robust_spread = _MAD_TO_STD * float(np.hypot(*median(np.abs(differences - middle))))
    length = float(np.hypot(*middle))
    if length < _EPS:
        return np.zeros(2, dtype=np.float32)
    shift = posterior_shift(length, prior_range, spread_share * robust_spread + _EDGE_SPREAD_FLOOR)
    return (middle / length * float(shift)).astype(np.float32)


def apply_lab_lut_8bit(pixels_bgr: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """N x 3 uint8 BGR through a per-channel table on 8-bit Lab codes (:func:`ring_statistics_lut`):
    to 8-bit Lab, the look-up, back; three table-driven C passes.

    Args:
        pixels_bgr: N x 3 uint8.
        lut: 256 x 1 x 3 uint8.

    Returns:
        N x 3 uint8.
    """
    lab = cv2.cvtColor(np.ascontiguousarray(pixels_bgr, dtype=np.uint8).reshape(1, -1, 3), cv2.COLOR_BGR2Lab)
    return cv2.cvtColor(cv2.LUT(lab, lut), cv2.COLOR_Lab2BGR).reshape(-1, 3)


def tone_power(lightness: np.ndarray, target_mean: float) -> float:
    """The power g of the curve L' = 100 (L / 100)^g that gives ``lightness`` (L in [0, 100]) the mean
    ``target_mean``: an exposure or gamma edit's shape, which keeps black and white where they are
    (an added constant would clip highlights or lift blacks).

    Args:
        lightness: N values in [0, 100] (a sample is enough).
        target_mean: the mean wanted, kept within [1, 99].

    Returns:
        The power, within ``_TONE_POWERS``; 1 when the mean is already within ``_TONE_TOLERANCE``.
    """
    target = float(np.clip(target_mean, 1.0, 99.0)) / 100.0
    if lightness.size == 0 or abs(float(lightness.mean()) / 100.0 - target) < _TONE_TOLERANCE:
        return 1.0
    unit = np.clip(lightness / 100.0, 0.0, 1.0)
    log_sample = np.log(np.maximum(subsample(unit, _TONE_SAMPLES).astype(np.float64), _TONE_FLOOR))  # finite
    power = 1.0
    for _ in range(_TONE_STEPS):  # Newton on mean(L^g) = target: mean(L^g) falls monotonically in g
        powered = np.exp(power * log_sample)
        slope = float((powered * log_sample).mean())
        if abs(slope) < 1e-9:
            break
        step = (float(powered.mean()) - target) / slope
        power = float(np.clip(power - step, *_TONE_POWERS))
        if abs(step) < 1e-3:
            break
    return power


def tone_curve(lightness: np.ndarray, target_mean: float) -> np.ndarray:
    """``lightness`` (L in [0, 100]) through the power curve of :func:`tone_power` whose mean is ``target_mean``.

    Args:
        lightness: N values in [0, 100].
        target_mean: the mean wanted, kept within [1, 99].

    Returns:
        N values in [0, 100].
    """
    power = tone_power(lightness, target_mean)
    if power == 1.0:
        return lightness
    return (100.0 * np.clip(lightness / 100.0, 0.0, 1.0) ** power).astype(lightness.dtype)


# --- fills for gradient-domain blending ------------------------------------------------------------

def smooth_fill(values: np.ndarray, known: np.ndarray, cells: int) -> np.ndarray:
    """A smooth field through the ``known`` pixels of ``values`` (H x W x C float): their Gaussian-
    weighted mean over 1/``cells`` of the window's longer side (normalized convolution), leaning on
    their global mean where almost none is near.

    Args:
        values: H x W x C float.
        known: H x W bool, the pixels whose values count.
        cells: the blur is the longer side divided by ``cells``.

    Returns:
        H x W x C float, defined everywhere.
    """
    global_mean = values[known].mean(axis=0)
    # Work on a coarse copy, 8 px per cell: a blur this wide is smooth at that resolution anyway.
    height, width = known.shape
    scale = min(1.0, 8.0 * cells / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    weight = cv2.resize(known.astype(np.float32), size, interpolation=cv2.INTER_AREA)
    weighted = cv2.resize(np.ascontiguousarray(values * known[:, :, None], dtype=np.float32), size,
                          interpolation=cv2.INTER_AREA).reshape(size[1], size[0], -1)
    sigma = scale * max(height, width) / cells  # one cell, in coarse pixels
    weight = cv2.GaussianBlur(weight, (0, 0), sigma, borderType=cv2.BORDER_CONSTANT)
    weighted = cv2.GaussianBlur(weighted, (0, 0), sigma, borderType=cv2.BORDER_CONSTANT).reshape(weighted.shape)
    prior = 1e-3
    coarse = (weighted + prior * global_mean) / (weight[:, :, None] + prior)
    return cv2.resize(coarse, (width, height), interpolation=cv2.INTER_LINEAR).reshape(values.shape)


def fill_from_nearest(image: np.ndarray, region: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``image`` with each ``region`` pixel replaced by the nearest ``source`` pixel's colour.

    Args:
        image: H x W x 3.
        region: H x W bool, the pixels to replace.
        source: H x W bool, the pixels whose colours are used.

    Returns:
        A new image.
    """
    _, labels = cv2.distanceTransformWithLabels((~source).astype(np.uint8), cv2.DIST_L2, 5,
                                                labelType=cv2.DIST_LABEL_PIXEL)
    colour_of_label = np.zeros((labels.max() + 1, 3), dtype=image.dtype)
    colour_of_label[labels[source]] = image[source]
    filled = image.copy()
    filled[region] = colour_of_label[labels[region]]
    return filled


def dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """``mask`` grown by a disc of ``radius`` pixels.

    Args:
        mask: H x W bool.
        radius: the disc's radius.

    Returns:
        H x W bool.
    """
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(bool)

"""What a pasted obstacle needs to look photographed in its scene: a contact shadow, and the
background's blur, sensor noise and JPEG blocking.

Light azimuth follows the procedural backgrounds' sun (``sun_azimuth_deg``): degrees on the ground
plane seen from above, 0 = light from straight ahead (beyond the scene), 90 = from the right,
180 = from behind the camera, 270 = from the left. Elevation is the light's angle above the ground.
Shadows fall away from the light: light from the right casts them to the left, light from ahead
casts them toward the camera (down the image).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from synrail.rail.geometry import CameraGeometry

_MIN_ELEVATION_DEG = 12.0  # a lower light would cast shadows longer than anything we can check
_SOFTNESS = (0.015, 0.05)  # penumbra blur (Gaussian sigma) as a share of the object's height
_SOFTNESS_REF = 0.03  # how fast a softer penumbra fades the shadow's core
_AO_SHARE = 0.8  # darkness of the contact blob relative to the requested strength
_AO_RISE_SHARE = 0.03  # the contact blob may reach this share of the height above the ground row
_FOOTPRINT_DEPTH = 0.5  # an obstacle's base reaches back this share of its width
_SUN_LEVEL = 232  # a sun (nearly) saturates the sensor...
_SUN_MAX_SHARE = 0.03  # ...in a small...
_SUN_MAX_ASPECT = 2.0  # ...roundish blob


class ShadowConfig(BaseModel):
    """Light used when an image does not show where its light comes from, and shadow strength."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fallback_azimuth_deg: float = 30.0
    fallback_elevation_deg: float = Field(default=50.0, gt=0, le=90)
    strength: tuple[float, float] = (0.4, 0.7)  # darkening at the shadow's core, drawn per obstacle

    @field_validator("strength")
    @classmethod
    def _strength_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= value[0] <= value[1] <= 1:
            raise ValueError(f"strength must be [low, high] within [0, 1], got {list(value)}")
        return value


class _Window(Protocol):
    top: int
    left: int
    mask: np.ndarray


# -- contact shadow ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Frame:
    """A local window of the image (may reach outside it) holding the object and its shadow."""

    top: int
    left: int
    height: int
    width: int

    def place(self, window: _Window) -> np.ndarray:
        local = np.zeros((self.height, self.width), dtype=bool)
        h, w = window.mask.shape
        local[window.top - self.top:window.top - self.top + h, window.left - self.left:window.left - self.left + w] = \
            window.mask
        return local

    def darken(self, canvas_bgr: np.ndarray, darkness: np.ndarray, inplace: bool) -> np.ndarray:
        """``canvas_bgr`` (or a copy) multiplied by ``1 - darkness`` where the frame overlaps it."""
        out = canvas_bgr if inplace else canvas_bgr.copy()
        shaded_px = darkness > 1e-3  # only the shadow's own box: most of the frame is light
        rows, cols = np.flatnonzero(shaded_px.any(axis=1)), np.flatnonzero(shaded_px.any(axis=0))
        if rows.size == 0:
            return out
        top, left = self.top + rows[0], self.left + cols[0]
        y0, x0 = max(top, 0), max(left, 0)
        y1 = min(self.top + rows[-1] + 1, out.shape[0])
        x1 = min(self.left + cols[-1] + 1, out.shape[1])
        if y0 >= y1 or x0 >= x1:
            return out
        keep = 1 - darkness[y0 - self.top:y1 - self.top, x0 - self.left:x1 - self.left]
        shaded = cv2.merge([keep] * out.shape[2])  # repeated, not broadcast: numpy's broadcast is slower
        shaded *= out[y0:y1, x0:x1]
        shaded += 0.5
        np.clip(shaded, 0, 255, out=shaded)
        out[y0:y1, x0:x1] = shaded.astype(np.uint8)
        return out


def _cast_silhouette(silhouette: np.ndarray, ground: int, shear_x: float, slope_y: float) -> np.ndarray:
    """The silhouette laid on the ground: a point ``h`` rows above ``ground`` lands ``shear_x * h``
    columns sideways and ``slope_y * h`` rows below the ground row (above it when negative).

    A shear, then a max over the heights that land on each row: a side-lit shadow collapses many
    heights onto a few rows, and any of them shades the ground (an average would thin it out).
    """
    shear = np.float32([[1, -shear_x, shear_x * ground], [0, 1, 0]])
    upright = silhouette[:ground + 1].astype(np.float32)
    sheared = cv2.warpAffine(upright, shear, upright.shape[::-1], flags=cv2.INTER_LINEAR)
    steps = max(1, math.ceil(abs(slope_y)))  # sub-rows, so a stretched shadow has no gaps
    heights = np.arange((ground + 1) * steps) / steps
    targets = np.rint(ground + slope_y * heights).astype(np.intp)
    inside = (targets >= 0) & (targets < silhouette.shape[0])
    cast = np.zeros(silhouette.shape, dtype=np.float32)
    if not inside.any():
        return cast
    # a max per target row over all heights landing there: sort by target, reduce each run
    order = np.argsort(targets[inside], kind="stable")
    rows = targets[inside][order]
    sources = sheared[ground - np.floor(heights[inside][order]).astype(np.intp)]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    cast[rows[starts]] = np.maximum.reduceat(sources, starts, axis=0)
    return cast


def _foot_columns(silhouette: np.ndarray, height_px: int) -> np.ndarray:
    """Columns of the silhouette's lowest tenth: where it touches the ground."""
    rows = np.flatnonzero(silhouette.any(axis=1))
    cols = np.flatnonzero(silhouette[max(rows[-1] - max(1, height_px // 10), rows[0]):rows[-1] + 1].any(axis=0))
    return np.arange(cols[0], cols[-1] + 1)


def _kernel_radius(sigma: float) -> int:
    """Half the size of the kernel ``cv2.GaussianBlur`` builds for a float image and ``sigma``."""
    return (round(sigma * 8 + 1) | 1) // 2


def _blur_near_content(field: np.ndarray, sigma_x: float, sigma_y: float) -> np.ndarray:
    """``cv2.GaussianBlur(field, (0, 0), sigma_x, sigma_y)`` for a field that is zero outside a small
    box, computed on that box grown by the kernel's reach (the shadow frame is mostly empty: a low
    sun makes it several object heights wide). Outside the grown box the blur is zero either way;
    at the frame's edge the field counts as zero beyond it instead of mirrored."""
    rows, cols = np.nonzero(field.any(axis=1))[0], np.nonzero(field.any(axis=0))[0]
    out = np.zeros_like(field)
    if rows.size == 0:
        return out
    reach_y, reach_x = _kernel_radius(sigma_y), _kernel_radius(sigma_x)
    y0, y1 = max(rows[0] - reach_y, 0), min(rows[-1] + reach_y + 1, field.shape[0])
    x0, x1 = max(cols[0] - reach_x, 0), min(cols[-1] + reach_x + 1, field.shape[1])
    out[y0:y1, x0:x1] = cv2.GaussianBlur(field[y0:y1, x0:x1], (0, 0), sigmaX=sigma_x, sigmaY=sigma_y,
                                         borderType=cv2.BORDER_CONSTANT)
    return out


def _occlusion_blob(shape: tuple[int, int], foot: np.ndarray, ground: int, height_px: int,
                    flatten: float) -> np.ndarray:
    """A soft ellipse under the object's foot columns, where skylight cannot reach the ground."""
    width = foot.size
    half_w, half_h = 0.55 * width + 1, max(1.0, 0.03 * height_px + 0.25 * flatten * width)
    blob = np.zeros(shape, dtype=np.float32)
    cv2.ellipse(blob, (int(round((foot[0] + foot[-1]) / 2)), ground), (int(round(half_w)), int(round(half_h))),
                0, 0, 360, 1.0, thickness=-1)
    sigma = max(0.7, 0.5 * half_h)
    return _blur_near_content(blob, sigma, sigma)


def _shadow_slopes(azimuth_deg: float, elevation_deg: float, flatten: float) -> tuple[float, float]:
    """(columns, rows) the shadow moves per row of object height."""
    cot = 1 / math.tan(math.radians(max(elevation_deg, _MIN_ELEVATION_DEG)))
    azimuth = math.radians(azimuth_deg)
    shear_x = -math.sin(azimuth) * cot  # away from the light, sideways
    slope_y = flatten * math.cos(azimuth) * cot  # light from ahead: toward the camera, down the image
    return shear_x, slope_y


def _with_footprint(cast: np.ndarray, depth_rows: int) -> np.ndarray:
    """The cast silhouette swept over the footprint's depth: the object's base is not a line but
    reaches ``depth_rows`` image rows back (up the image), and every part of it casts a shadow."""
    if depth_rows < 1:
        return cast
    kernel = np.ones((depth_rows + 1, 1), np.uint8)  # anchored at its bottom: sweeps upward only
    return cv2.dilate(cast, kernel, anchor=(0, depth_rows), borderType=cv2.BORDER_CONSTANT, borderValue=0)


def contact_shadow(canvas_bgr: np.ndarray, object_mask: _Window, ground_row: int, light_azimuth_deg: float,
                   light_elevation_deg: float, strength: float, rng: np.random.Generator,
                   flatten: float = 0.2, inplace: bool = False) -> np.ndarray:
    """``canvas_bgr`` with a soft shadow of the object multiplied onto the ground around it (a copy,
    unless ``inplace``).

    Two parts: the silhouette cast on the ground away from the light (flattened by ``flatten``,
    the image's foreshortening of the ground, about camera height / distance; sheared sideways by
    the light's azimuth; blurred by a softness drawn from ``rng`` (0.015-0.05 of the object's
    height, the only draw) and fainter the softer: core darkness ``strength * 0.045 / (softness +
    0.03)``), and a tight ambient-occlusion blob of darkness ``0.8 * strength`` at the foot.
    Only pixels outside ``object_mask`` and at or below ``ground_row - rise`` change, rise = 3 % of
    the object's height (at least 1 px): the blob's soft top edge, and a side-lit footprint. A shadow
    falling away from the camera lies behind the object, above the contact row: only the part of it
    beside the object's foot shows.

    Args:
        canvas_bgr: H x W x 3 uint8 image to darken.
        object_mask: the object's silhouette as a window (``top``, ``left``, bool ``mask``) in image pixels.
        ground_row: image row where the object touches the ground.
        light_azimuth_deg: direction the light comes from, in degrees: 0 straight ahead of the camera,
            90 from the right.
        light_elevation_deg: the light's height above the horizon, in degrees.
        strength: darkness at the shadow's core, 0 (none: the image is returned unchanged) to 1 (black).
        rng: draws the penumbra's softness.
        flatten: vertical foreshortening of the ground, about camera height / distance.
        inplace: darken ``canvas_bgr`` itself instead of a copy.

    Returns:
        The shadowed image: ``canvas_bgr`` itself when ``inplace``, else a new array.
    """
    mask_rows = np.flatnonzero(object_mask.mask.any(axis=1))
    if mask_rows.size == 0 or strength <= 0:
        return canvas_bgr if inplace else canvas_bgr.copy()
    height_px = max(1, ground_row - (object_mask.top + int(mask_rows[0])) + 1)
    softness = rng.uniform(*_SOFTNESS)
    sigma = max(0.7, softness * height_px)
    shear_x, slope_y = _shadow_slopes(light_azimuth_deg, light_elevation_deg, flatten)
    rise = max(1, int(round(_AO_RISE_SHARE * height_px)))

    margin = int(math.ceil(3 * sigma + 0.1 * height_px)) + 2
    reach_x = int(math.ceil(abs(shear_x) * height_px)) + margin
    bottom = max(ground_row + int(math.ceil(max(slope_y, 0) * height_px)) + margin,
                 object_mask.top + object_mask.mask.shape[0])
    top = min(object_mask.top, ground_row - rise)
    frame = _Frame(top=top, left=object_mask.left - reach_x, height=bottom - top + 1,
                   width=object_mask.mask.shape[1] + 2 * reach_x)
    silhouette = frame.place(object_mask)
    ground = ground_row - frame.top

    foot = _foot_columns(silhouette, height_px)
    cast = _with_footprint(_cast_silhouette(silhouette, ground, shear_x, slope_y),
                           int(round(_FOOTPRINT_DEPTH * flatten * foot.size)))
    # The penumbra lies on the ground too: foreshortened vertically like the shadow itself.
    cast = _blur_near_content(cast, sigma, max(0.5, sigma * flatten))
    occlusion = _occlusion_blob(silhouette.shape, foot, ground, height_px, flatten)
    core = strength * (_SOFTNESS[0] + _SOFTNESS_REF) / (softness + _SOFTNESS_REF)  # full strength when sharpest
    darkness = np.maximum(cast * core, occlusion * (strength * _AO_SHARE))
    darkness[:ground - rise] = 0  # nothing above the contact row...
    darkness[silhouette] = 0  # ...and never the object itself
    return frame.darken(canvas_bgr, np.clip(darkness, 0, 1), inplace)


# -- where the light comes from -------------------------------------------------------------------
def light_from_image(background_bgr: np.ndarray, cfg: ShadowConfig = ShadowConfig(),
                     geometry: CameraGeometry | None = None) -> tuple[float, float]:
    """(azimuth, elevation) of the sun when it shows in the sky, else the config's fallback.

    Cheap: the sun is a small, round, saturated blob above the horizon (a bright horizon haze or
    an overexposed sky is large or flat, and is not); its centre is turned into a direction with
    ``geometry`` (by default a level 60-degree camera). Overcast skies, and suns behind the camera
    or above the frame, give the fallback.

    Args:
        background_bgr: H x W x 3 uint8 frame.
        cfg: gives the fallback direction.
        geometry: the frame's camera, which places the horizon and turns a pixel into a direction;
            None assumes a level camera with a 60-degree field of view 2.5 m up.

    Returns:
        (azimuth, elevation) in degrees, azimuth 0 straight ahead of the camera and growing to the right.
    """
    fallback = (cfg.fallback_azimuth_deg, cfg.fallback_elevation_deg)
    height, width = background_bgr.shape[:2]
    g = geometry or CameraGeometry.from_fov(width, height, 60.0, 2.5, 0.0)
    scale = min(1.0, 320 / width)  # a small copy is enough to find a sun
    small = cv2.resize(cv2.cvtColor(background_bgr, cv2.COLOR_BGR2GRAY), None, fx=scale, fy=scale,
                       interpolation=cv2.INTER_AREA)
    sky = cv2.GaussianBlur(small[:max(0, int(g.horizon_v() * scale))], (0, 0), 1.0)
    if sky.shape[0] < 4:
        return fallback
    count, _, stats, centroids = cv2.connectedComponentsWithStats((sky >= _SUN_LEVEL).astype(np.uint8))
    if count < 2:
        return fallback
    blob = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    w, h, area = stats[blob, cv2.CC_STAT_WIDTH], stats[blob, cv2.CC_STAT_HEIGHT], stats[blob, cv2.CC_STAT_AREA]
    if area > _SUN_MAX_SHARE * sky.size or max(w, h) > _SUN_MAX_ASPECT * min(w, h) or area < 0.5 * w * h:
        return fallback
    u, v = centroids[blob]
    return _pixel_direction(g, (u + 0.5) / scale - 0.5, (v + 0.5) / scale - 0.5)


def _pixel_direction(g: CameraGeometry, u: float, v: float) -> tuple[float, float]:
    """(azimuth, elevation) in degrees of the ray through pixel (u, v)."""
    ru, rv = (u - g.cx) / g.focal_px, (v - g.cy) / g.focal_px
    s, c = math.sin(g.pitch_rad), math.cos(g.pitch_rad)
    up, forward = -(rv * c + s), c - rv * s
    return math.degrees(math.atan2(ru, forward)) % 360, math.degrees(math.atan2(up, math.hypot(ru, forward)))


# -- blur, noise and compression of the background --------------------------------------------------
_MAX_BLUR_SIGMA = 8.0
_BLUR_SEARCH_STEPS = 14
_MAD_TO_SIGMA = 1.4826  # median absolute deviation -> standard deviation of a Gaussian


def _gray(image_bgr: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image_bgr, cv2.COLOR_BGR2GRAY).astype(np.float32)


def _inner(mask: np.ndarray | None, shape: tuple[int, int], border_px: int) -> np.ndarray:
    """Pixels at least ``border_px`` inside ``mask`` (all pixels when there is none): their
    statistics are the object's own, not its silhouette edge's."""
    if mask is None:
        mask = np.ones(shape, dtype=bool)
    kernel = np.ones((2 * border_px + 1, 2 * border_px + 1), np.uint8)
    return cv2.erode(mask.astype(np.uint8), kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0).astype(bool)


def laplacian_variance(image_bgr: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Sharpness: variance of the Laplacian over ``mask``'s interior (the whole image without one).

    Args:
        image_bgr: H x W x 3 uint8 image.
        mask: H x W bool; only pixels at least 2 px inside it count (the silhouette edge is no texture).
            None counts every pixel at least 2 px inside the image.

    Returns:
        The variance of the grey-level Laplacian; 0 when fewer than 16 pixels count.
    """
    inner = _inner(mask, image_bgr.shape[:2], 2)
    if np.count_nonzero(inner) < 16:
        return 0.0
    return float(np.var(cv2.Laplacian(_gray(image_bgr), cv2.CV_32F, borderType=cv2.BORDER_REFLECT)[inner]))


def _masked_blur(image_bgr: np.ndarray, mask: np.ndarray | None, sigma: float) -> np.ndarray:
    """Gaussian blur that, with a mask, averages only object pixels (no background colour bleeds in)."""
    if sigma <= 0:
        return image_bgr.copy()
    colour = image_bgr.astype(np.float32)
    if mask is None:
        return np.clip(cv2.GaussianBlur(colour, (0, 0), sigma) + 0.5, 0, 255).astype(np.uint8)
    weight = mask.astype(np.float32)
    blurred = cv2.GaussianBlur(colour * weight[:, :, None], (0, 0), sigma)
    norm = cv2.GaussianBlur(weight, (0, 0), sigma)[:, :, None]
    out = np.where(mask[:, :, None], blurred / np.maximum(norm, 1e-6), colour)
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def estimate_blur_sigma(object_bgr: np.ndarray, background_window: np.ndarray,
                        object_mask: np.ndarray | None = None) -> float:
    """Gaussian sigma that brings the object's Laplacian variance down to the background's; 0 when
    the object is already as soft (it is never sharpened).

    The ratio of Laplacian variances mixes blur with texture: a flat object reads as soft and is
    left alone, which errs on the side of not blurring.

    Args:
        object_bgr: h x w x 3 uint8 object crop.
        background_window: any h2 x w2 x 3 uint8 patch of the background around the paste.
        object_mask: h x w bool, the object's pixels in ``object_bgr``; None: the whole crop.

    Returns:
        The sigma in pixels, found by bisection in [0, 8].
    """
    target = laplacian_variance(background_window)
    if laplacian_variance(object_bgr, object_mask) <= target:
        return 0.0
    low, high = 0.0, _MAX_BLUR_SIGMA
    for _ in range(_BLUR_SEARCH_STEPS):  # sharpness falls monotonically with sigma: bisect
        mid = (low + high) / 2
        if laplacian_variance(_masked_blur(object_bgr, object_mask, mid), object_mask) > target:
            low = mid
        else:
            high = mid
    return high


def match_blur(object_bgr: np.ndarray, background_window: np.ndarray,
               object_mask: np.ndarray | None = None) -> np.ndarray:
    """The object blurred to the background's defocus (``estimate_blur_sigma``); never sharper.

    Args:
        object_bgr: h x w x 3 uint8 object crop.
        background_window: any h2 x w2 x 3 uint8 patch of the background around the paste.
        object_mask: h x w bool, the object's pixels; with it only object pixels are blurred and averaged
            (no background colour bleeds in). None: the whole crop.

    Returns:
        A new h x w x 3 uint8 array.
    """
    return _masked_blur(object_bgr, object_mask, estimate_blur_sigma(object_bgr, background_window, object_mask))


def noise_sigma(image_bgr: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Per-channel sensor noise std, robustly: MAD of the diagonal 2 x 2 high-pass
    ``(a - b - c + d) / 2``, which keeps white noise's variance and cancels smooth shading.

    Args:
        image_bgr: H x W x 3 uint8 image.
        mask: H x W bool; only pixels at least 1 px inside it are measured. None (or a mask with no
            interior) measures the whole image.

    Returns:
        float32 array of 3 standard deviations (B, G, R), in 0-255 grey levels.
    """
    colour = image_bgr.astype(np.float32)
    high_pass = (colour[:-1, :-1] - colour[:-1, 1:] - colour[1:, :-1] + colour[1:, 1:]) / 2
    inner = _inner(mask, image_bgr.shape[:2], 1)[:-1, :-1]
    values = high_pass[inner] if inner.any() else high_pass.reshape(-1, 3)
    if values.shape[0] == 0:
        return np.zeros(3, dtype=np.float32)
    return (_MAD_TO_SIGMA * np.median(np.abs(values - np.median(values, axis=0)), axis=0)).astype(np.float32)


def match_noise(object_bgr: np.ndarray, background_window: np.ndarray, rng: np.random.Generator,
                object_mask: np.ndarray | None = None) -> np.ndarray:
    """The object with Gaussian noise adding the variance it lacks against the background.

    Args:
        object_bgr: h x w x 3 uint8 object crop.
        background_window: any h2 x w2 x 3 uint8 patch of the background around the paste.
        rng: draws the noise.
        object_mask: h x w bool, where the object's own noise is measured; None: the whole crop. The noise
            is added to every pixel of the crop.

    Returns:
        A new h x w x 3 uint8 array (a plain copy when the object is already as noisy).
    """
    missing = np.sqrt(np.maximum(noise_sigma(background_window) ** 2 - noise_sigma(object_bgr, object_mask) ** 2, 0))
    if not missing.any():
        return object_bgr.copy()
    noise = rng.standard_normal(object_bgr.shape, dtype=np.float32) * missing
    return np.clip(object_bgr.astype(np.float32) + noise + 0.5, 0, 255).astype(np.uint8)


_JPEG_CANDIDATES = tuple(range(30, 100, 5))
_GHOST_RATIO = 0.3  # recompression at the original quality changes the image this much less than its neighbours


def _jpeg_round_trip(image_bgr: np.ndarray, quality: int) -> np.ndarray:
    ok, data = cv2.imencode(".jpg", image_bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return cv2.imdecode(data, cv2.IMREAD_COLOR)


def estimate_jpeg_quality(image_bgr: np.ndarray) -> int:
    """The JPEG quality an image was saved at, by its "JPEG ghost" (Farid 2009): recompressing at the
    original quality barely changes it. 100 when there is no ghost: never compressed, or resized or
    cropped off the 8 x 8 grid since, or compressed by another codec (video frames), or above 95.
    Uses a 256 x 256 crop from the centre, on the 16 x 16 grid of 4:2:0 chroma blocks."""
    height, width = image_bgr.shape[:2]
    size_y, size_x = min(256, height) // 16 * 16, min(256, width) // 16 * 16
    y0, x0 = (height - size_y) // 32 * 16, (width - size_x) // 32 * 16
    crop = image_bgr[y0:y0 + size_y, x0:x0 + size_x]
    if crop.size == 0:
        return 100
    original = crop.astype(np.float32)
    errors = [float(np.mean((_jpeg_round_trip(crop, q).astype(np.float32) - original) ** 2))
              for q in _JPEG_CANDIDATES]
    for i, quality in enumerate(_JPEG_CANDIDATES):
        neighbours = errors[max(i - 1, 0):i] + errors[i + 1:i + 2]
        if errors[i] < _GHOST_RATIO * min(neighbours):
            return quality
    return 100


def match_jpeg(object_bgr: np.ndarray, quality: int, origin: tuple[int, int] = (0, 0)) -> np.ndarray:
    """The object round-tripped through JPEG at ``quality``, its blocks on the image's 16 x 16 grid
    (8 x 8 luma, subsampled chroma) when ``origin`` (its top-left image pixel) is given; unchanged
    at quality 100.

    Args:
        object_bgr: h x w x 3 uint8 object crop.
        quality: the JPEG quality, 1-100.
        origin: (row, column) of the crop's top-left pixel in the image, which aligns the JPEG blocks.

    Returns:
        A new h x w x 3 uint8 array.
    """
    if quality >= 100:
        return object_bgr.copy()
    pad_y, pad_x = origin[0] % 16, origin[1] % 16
    padded = cv2.copyMakeBorder(object_bgr, pad_y, 0, pad_x, 0, cv2.BORDER_REPLICATE)
    return _jpeg_round_trip(padded, quality)[pad_y:, pad_x:]

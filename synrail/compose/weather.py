"""Weather and light on the finished composite: fog, rain, snow, dark (night) and glare.

Every effect runs on the WHOLE composite, after all obstacles are pasted, so obstacle and
background share one atmosphere, one sensor and one lens. Effects are pixel-only (albumentations
``ImageOnlyTransform``s, checked before each run), so boxes and masks never change.

Randomness: each call draws its parameters and an albumentations seed from the numpy generator it
is given, so the same generator state gives identical bytes.

Condition tags: ``choose_condition`` returns the tag the image records; ``weather_effect`` turns
that tag and the background's own tag into the effect to apply (never a second dose of the
weather a background already shows).

Speed (issue 18, profiled at 1280x720 on one core): albumentations' physics-based sun flare
blurred a full-resolution float layer three times (~140 ms an image); its Gaussian noise drew 2.7
million normals with numpy's sampler (~55 ms). The flare layer here is blurred at a quarter of the
resolution (it is smooth at that scale: its narrowest blur is 15 px) and the noise comes from an
inverse-CDF table indexed by random 16-bit integers: the same effects at ~10 ms and ~8 ms. The
headlight's per-pixel power is an exp of a looked-up logarithm, and its cone a product of two rows
of exps (~25 ms to ~10 ms). Then, with the same bytes (speed3): albumentations' exposure
(``MultiplicativeNoise``), rain's darkening and snow's bleach are look-up tables of their own
arithmetic, translated by stringzilla (``Exposure``, ``Rain``, ``Snow``: ~7 ms less each); the
noise's 16-bit indices are PCG64's raw outputs (``uniform_uint16``), and the headlight's product
runs in OpenCV rather than numpy's broadcast (a night image ~26 to ~15 ms).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Protocol

import cv2
import numpy as np

from synrail.compose.weather_config import ADVERSE_BACKGROUNDS, WEATHER_CONDITIONS, WeatherConfig
from synrail.rail.geometry import CameraGeometry
from synrail.randomness import normal_quantiles

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # else its import asks PyPI for a newer version
import albumentations as A  # noqa: E402

try:  # stringzilla's byte translation, which albumentations' own look-up tables use
    from albucore.functions import sz_lut
except ImportError:  # an albucore without it: OpenCV's LUT, the same bytes
    sz_lut = None

_KOSCHMIEDER = 3.912  # beta = 3.912 / meteorological visibility (5 % contrast threshold)


# -- conditions ---------------------------------------------------------------------------------
def choose_condition(cfg: WeatherConfig, rng: np.random.Generator, background_condition: str) -> str:
    """The condition tag the image records.

    A draw from ``cfg.mix`` (the target mix, so rare conditions can be over-sampled); a background
    that already shows adverse weather keeps its own tag (a foggy scene stays "fog"), and a "none"
    draw keeps the background's tag ("normal", "dusk", ...). One draw either way, so later draws
    from ``rng`` do not depend on the background.

    Args:
        cfg: gives the mix, condition -> weight (weights need not sum to 1).
        rng: makes the one draw.
        background_condition: the background's own tag, from its procedural spec or video sidecar.

    Returns:
        The condition tag: one of the mix's conditions other than "none", or ``background_condition``.
    """
    names = list(cfg.mix)
    weights = np.array([cfg.mix[n] for n in names], dtype=np.float64)
    drawn = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    if background_condition in ADVERSE_BACKGROUNDS or drawn == "none":
        return background_condition
    return drawn


def weather_effect(condition: str, background_condition: str) -> str:
    """The effect to apply for a recorded ``condition``: "none" when the background already shows it.

    Args:
        condition: the tag the image records (``choose_condition``).
        background_condition: the background's own tag.

    Returns:
        ``condition`` when it is a weather effect the background does not already show, else "none".
    """
    if condition not in WEATHER_CONDITIONS or condition == background_condition:
        return "none"
    return condition


# -- our own pixel-only transforms --------------------------------------------------------------
class AirlightVeil(A.ImageOnlyTransform):
    """Koschmieder's fog: ``I * (1 - veil) + airlight * veil``, veil = 1 - transmission per pixel."""

    def __init__(self, veil: np.ndarray, airlight: float, p: float = 1.0):
        super().__init__(p=p)
        self.veil = veil.astype(np.float32)
        self.airlight = float(airlight)

    def apply(self, img: np.ndarray, **params: object) -> np.ndarray:
        """The image under the veil (albumentations calls this; ``params`` are unused).

        Args:
            img: H x W x 3 uint8 image, the veil's shape.
            **params: albumentations' per-call parameters, ignored.

        Returns:
            A new H x W x 3 uint8 image.
        """
        veil = self.veil[:, :, None]
        out = img.astype(np.float32) * (1 - veil) + np.float32(self.airlight) * veil
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)


class HeadlightCone(A.ImageOnlyTransform):
    """The train's headlights: a radial brightening centred low in the image.

    A local gamma lift ``x ** (1 / (1 + gain * cone))`` on [0, 1] values: where the cone is full it
    undoes about a night gamma of ``1 + gain``, so the lit track looks exposed rather than just
    scaled up from black (a multiplicative gain would leave a near-black ground near-black).
    """

    def __init__(self, centre: tuple[float, float], sigma: tuple[float, float], gain: float, p: float = 1.0):
        super().__init__(p=p)
        self.centre, self.sigma, self.gain = centre, sigma, float(gain)

    def apply(self, img: np.ndarray, **params: object) -> np.ndarray:
        """The image with the cone's gamma lift (albumentations calls this; ``params`` are unused).

        Args:
            img: H x W x 3 uint8 image.
            **params: albumentations' per-call parameters, ignored.

        Returns:
            A new H x W x 3 uint8 image.
        """
        exponent = headlight_cone(img.shape[:2], self.centre, self.sigma)
        exponent *= np.float32(self.gain)  # 1 / (1 + gain * cone), in place: the same float32 roundings
        exponent += 1
        np.divide(1, exponent, out=exponent)
        return lift_gamma(img, exponent)


_LOG_SHARE = np.log(np.maximum(np.arange(256), 1e-30) / 255).astype(np.float32)  # ln(v / 255); ~-69 for 0


def lift_gamma(img: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """``255 * (img / 255) ** exponent``, rounded, with ``exponent`` (H x W, float32) per pixel: as
    ``exp(exponent * ln(img / 255))``, the logarithm looked up and the exp OpenCV's, about half the
    time of numpy's power and within one grey level of it.

    Args:
        img: H x W x C uint8 image.
        exponent: H x W float32 gamma per pixel.

    Returns:
        The lifted uint8 image.
    """
    height, width, channels = img.shape
    logs = cv2.LUT(img, _LOG_SHARE)
    cv2.multiply(logs, cv2.merge([exponent] * channels), dst=logs)  # numpy's broadcast product, 3x slower
    return cv2.convertScaleAbs(cv2.exp(logs.reshape(height, width * channels)), alpha=255).reshape(img.shape)


class SensorNoise(A.ImageOnlyTransform):
    """Additive Gaussian sensor noise, independent per pixel and channel, of ``std`` (a share of 255).

    Normals come from an inverse-CDF table of 256 quantiles indexed by the high byte of random 16-bit
    integers (:func:`add_gaussian_noise`), several times faster than drawing them; the generator is the
    one albumentations seeds from the pipeline's seed.
    """

    def __init__(self, std: float, p: float = 1.0):
        super().__init__(p=p)
        self.std = float(std)

    def apply(self, img: np.ndarray, **params: object) -> np.ndarray:
        """``img`` with the noise added (albumentations' transform hook).

        Args:
            img: the uint8 image.
            params: albumentations' drawn parameters (unused).

        Returns:
            The noisy uint8 image.
        """
        return add_gaussian_noise(img, self.std * 255, self.random_generator)


_BYTE_QUANTILES = normal_quantiles(256)  # the middle of each 256th of the normal's probability, unit variance


def add_gaussian_noise(img: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``img`` (uint8) plus Gaussian noise of ``sigma`` grey levels, rounded and saturated.

    The draws are the 16-bit integers of :func:`uniform_uint16` (the same generator state after), but
    only their high byte picks the normal's quantile, from a table of 256 rounded to whole grey levels:
    then two byte translations (the positive and the negative part) and two saturating adds replace a
    gather of 2.7 million floats from a 65,536-entry table and a float add (~4.5 of ~6 ms at 1280x720).
    Each pixel's noise is within its 256th of the normal of what the 16-bit table gave (at 1/40 of
    sigma around the middle) and rounded, so a night image keeps its look (tests: below one grey level
    of mean absolute difference); the tails are cut at 2.9 instead of 4.2 standard deviations.

    Args:
        img: the uint8 image.
        sigma: the noise's standard deviation in grey levels.
        rng: the generator albumentations seeded.

    Returns:
        The noisy uint8 image.
    """
    levels = np.rint(_BYTE_QUANTILES * np.float32(sigma))
    up = np.clip(levels, 0, 255).astype(np.uint8)
    down = np.clip(-levels, 0, 255).astype(np.uint8)
    draws = uniform_uint16(rng, img.shape)
    high = cv2.extractChannel(draws.view(np.uint8).reshape(img.shape[0], -1, 2), 1).reshape(img.shape)  # little-endian
    return cv2.subtract(cv2.add(img, translate(high, up)), translate(high, down))


def uniform_uint16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """``rng.integers(0, 65536, shape, dtype=np.uint16)``: the same values and the same generator state after,
    2.5x faster for a PCG64 generator with no buffered 32-bit half and a multiple of 4 values (numpy's
    16-bit draws are then its raw 64-bit outputs cut in four, low bits first).

    Args:
        rng: the generator.
        shape: the array's shape.

    Returns:
        Uniform uint16 values.
    """
    bit_generator, count = rng.bit_generator, math.prod(shape)
    if count % 4 or not isinstance(bit_generator, np.random.PCG64) or bit_generator.state["has_uint32"]:
        return rng.integers(0, 65536, shape, dtype=np.uint16)  # (a whole number of raw outputs: the same state after)
    raw = bit_generator.random_raw(-(-count // 4)).astype("<u8", copy=False)
    return raw.view("<u2")[:count].reshape(shape)


class SunFlare(A.RandomSunFlare):
    """albumentations' physics-based sun flare (the same drawn parameters and layer: source, four
    diffraction spikes, flare circles, a 15 px blur, a radial fade, chromatic aberration, screen
    blending), with the smooth flare layer computed at a quarter of the resolution."""

    def __init__(self, **kwargs: object):
        super().__init__(method="physics_based", **kwargs)

    def apply(self, img: np.ndarray, flare_center: tuple[int, int], circles: list, **params: object) -> np.ndarray:
        """``img`` with the flare drawn (albumentations' transform hook).

        Args:
            img: the uint8 image.
            flare_center: the flare source's pixel, drawn by albumentations.
            circles: the flare circles, drawn by albumentations.
            params: the other drawn parameters (unused).

        Returns:
            The image with the flare.
        """
        return add_sun_flare(img, flare_center, self.src_radius, self.src_color, circles)


_FLARE_SCALE = 4  # the flare layer's resolution divisor


def add_sun_flare(img: np.ndarray, centre: tuple[int, int], radius: int, colour: tuple[int, int, int],
                  circles: list) -> np.ndarray:
    """``albumentations.augmentations.pixel.functional.add_sun_flare_physics_based``, with the blurs,
    the fade and the aberration on a layer of a quarter of the resolution (drawn at full resolution,
    so a 2 px spike keeps its light, then area-averaged), upsampled before the screen blend.

    Args:
        img: the uint8 image.
        centre: the flare source's pixel.
        radius: the source's radius in pixels.
        colour: the flare's colour.
        circles: albumentations' flare circles.

    Returns:
        The image with the flare.
    """
    height, width = img.shape[:2]
    layer = np.zeros((height, width, 3), dtype=np.uint8)  # overlapping draws overwrite: uint8 is exact
    cv2.circle(layer, centre, radius, colour, -1)
    reach = max(width, height)
    for angle in (0, 45, 90, 135):
        end = (int(centre[0] + math.cos(math.radians(angle)) * reach),
               int(centre[1] + math.sin(math.radians(angle)) * reach))
        cv2.line(layer, centre, end, colour, 2)
    for _, circle_centre, size, circle_colour in circles:
        cv2.circle(layer, circle_centre, int(size ** 0.33), circle_colour, -1)
    small_size = (math.ceil(width / _FLARE_SCALE), math.ceil(height / _FLARE_SCALE))
    small = cv2.resize(layer.astype(np.float32), small_size, interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (0, 0), 15 / _FLARE_SCALE)
    # the radial fade, at each small pixel's full-resolution centre
    ys = (np.arange(small_size[1], dtype=np.float32) + 0.5) * height / small_size[1] - 0.5
    xs = (np.arange(small_size[0], dtype=np.float32) + 0.5) * width / small_size[0] - 0.5
    distance = np.sqrt((xs[None, :] - centre[0]) ** 2 + (ys[:, None] - centre[1]) ** 2)
    small *= (1 - np.clip(distance / (reach * 0.7), 0, 1))[:, :, None]
    channels = list(cv2.split(small))  # chromatic aberration: the outer channels blur more
    channels[0] = cv2.GaussianBlur(channels[0], (0, 0), 3 / _FLARE_SCALE)
    channels[2] = cv2.GaussianBlur(channels[2], (0, 0), 5 / _FLARE_SCALE)
    flare = cv2.resize(cv2.merge(channels), (width, height), interpolation=cv2.INTER_LINEAR)
    # screen blend, 255 - (255 - img) * (255 - flare) / 255, in uint8
    return cv2.bitwise_not(cv2.multiply(cv2.bitwise_not(img), cv2.bitwise_not(cv2.convertScaleAbs(flare)),
                                        scale=1 / 255))


def headlight_cone(shape: tuple[int, int], centre: tuple[float, float], sigma: tuple[float, float]) -> np.ndarray:
    """Gaussian cone in [0, 1]; ``centre`` and ``sigma`` are (x, y) shares of the image size.

    Args:
        shape: (height, width) of the image, in pixels.
        centre: (x, y) of the cone's peak, as shares of the width and height.
        sigma: (x, y) Gaussian widths, as shares of the width and height.

    Returns:
        H x W floats (float32 for Python-float ``centre`` and ``sigma``), 1 at the centre.
    """
    height, width = shape
    x = (np.arange(width, dtype=np.float32) / width - centre[0]) / sigma[0]
    y = (np.arange(height, dtype=np.float32) / height - centre[1]) / sigma[1]
    return np.outer(np.exp(-0.5 * y ** 2), np.exp(-0.5 * x ** 2))  # separable: two rows of exps, not H x W


# -- depth for fog -------------------------------------------------------------------------------
class _Window(Protocol):
    top: int
    left: int
    mask: np.ndarray


def scene_depth(geometry: CameraGeometry, objects: Sequence[tuple[_Window, float]] = (),
                far_m: float = 150.0) -> np.ndarray:
    """H x W camera distance in metres for fog: the ground plane, each object's distance over its mask.

    ``objects`` are (mask window, distance) pairs, listed far to near. Everything farther than
    ``far_m`` counts as ``far_m``: the sky, and the scenery standing above the horizon, whose
    distance the ground plane cannot tell (a tree there may be 40 m away; infinity would erase it).

    Args:
        geometry: the camera, which sets the image size and each ground pixel's distance.
        objects: (window with ``top``, ``left`` and a bool ``mask``, distance in metres) per object,
            far to near, so nearer objects overwrite farther ones.
        far_m: the largest distance, in metres.

    Returns:
        H x W float32 distances in metres.
    """
    rows = np.arange(geometry.height, dtype=np.float64)[:, None]
    cols = np.arange(geometry.width, dtype=np.float64)[None, :]
    depth = np.nan_to_num(geometry.distance_m(cols, rows), nan=far_m).astype(np.float32)
    np.minimum(depth, np.float32(far_m), out=depth)
    for window, distance in objects:
        h, w = window.mask.shape
        depth[window.top:window.top + h, window.left:window.left + w][window.mask] = distance
    return depth


def _smooth_field(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Low-frequency noise with unit-ish std, for patchy fog."""
    coarse = rng.standard_normal((6, 10)).astype(np.float32)
    return cv2.resize(coarse, (shape[1], shape[0]), interpolation=cv2.INTER_CUBIC)


# -- albumentations' value maps as look-up tables ----------------------------------------------------
# Every value in every channel: a per-pixel, per-channel op applied to it gives that op's per-channel
# look-up table, so cv2.LUT then reproduces the op's bytes exactly.
_RAMP = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)


def _is_rgb8(img: np.ndarray) -> bool:
    return img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3


def apply_lut(img: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """``cv2.LUT(img, lut)`` for a uint8 image and a 1 x 256 x C uint8 table; one the same in every channel
    goes through stringzilla's byte translation (what albumentations' own tables use), ~10x faster.

    Args:
        img: H x W x C uint8 image (not modified).
        lut: 1 x 256 x C uint8 per-channel tables.

    Returns:
        A new image, each value replaced by its channel's table entry.
    """
    if (lut == lut[:, :, :1]).all():
        return translate(img, lut[0, :, 0])
    return cv2.LUT(img, lut)


def translate(img: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Every byte of ``img`` (uint8, any shape) replaced by its entry in ``table`` (256 uint8 values), in a
    new array.

    Args:
        img: the uint8 array (not modified).
        table: 256 uint8 values.

    Returns:
        The translated copy.
    """
    if sz_lut is None:
        return cv2.LUT(img, table)
    return sz_lut(np.ascontiguousarray(img), np.ascontiguousarray(table), inplace=False)


class Exposure(A.MultiplicativeNoise):
    """albumentations' ``MultiplicativeNoise`` with one multiplier for the whole image (a night exposure), as a
    look-up table: its own multiply splits the channels and translates each (~7 ms at 1280x720; ~1 ms here)."""

    def __init__(self, factor: float, p: float = 1.0):
        super().__init__(multiplier=(factor, factor), per_channel=False, elementwise=False, p=p)

    def apply(self, img: np.ndarray, multiplier: float | np.ndarray, **params: object) -> np.ndarray:
        """``img`` times the drawn multiplier, saturated (albumentations' transform hook).

        Args:
            img: the uint8 RGB image.
            multiplier: albumentations' drawn multiplier (one value per channel, all equal).
            params: the other drawn parameters (unused).

        Returns:
            The exposed image: the bytes albumentations' own multiply gives.
        """
        if not _is_rgb8(img):
            return super().apply(img, multiplier, **params)
        return apply_lut(img, super().apply(_RAMP.copy(), multiplier, **params))


class Rain(A.RandomRain):
    """albumentations' ``RandomRain`` with its darkening (``cv2.multiply`` by a scalar, ~7 ms at 1280x720) done
    as a look-up table of that same multiply: the same drops, blur and bytes."""

    def apply(self, img: np.ndarray, slant: float, drop_length: int, rain_drops: np.ndarray,
              **params: object) -> np.ndarray:
        """``img`` with the drawn drops (albumentations' transform hook).

        Args:
            img: the uint8 RGB image.
            slant: the drops' drawn horizontal drift, in pixels.
            drop_length: a drop's length, in pixels.
            rain_drops: N x 2 drawn (x, y) drop starts.
            params: the other drawn parameters (unused).

        Returns:
            The rainy image.
        """
        if not _is_rgb8(img):
            return super().apply(img, slant, drop_length, rain_drops, **params)
        return add_rain(img, slant, drop_length, self.drop_width, self.drop_color, self.blur_value,
                        self.brightness_coefficient, rain_drops)


def add_rain(img: np.ndarray, slant: float, drop_length: int, drop_width: int, drop_color: tuple[int, int, int],
             blur_value: int, brightness: float, rain_drops: np.ndarray) -> np.ndarray:
    """``albumentations.augmentations.pixel.functional.add_rain``, its darkening as a look-up table.

    Args:
        img: the uint8 RGB image (not modified).
        slant: the drops' horizontal drift, in pixels.
        drop_length: a drop's length, in pixels.
        drop_width: a drop's width, in pixels.
        drop_color: the drops' colour.
        blur_value: the box blur of the drop layer (1: none).
        brightness: the darkening factor under rain clouds.
        rain_drops: N x 2 (x, y) drop starts.

    Returns:
        A new image with the drops drawn, blurred, added and the whole darkened.
    """
    if not rain_drops.size:
        return img.copy()
    layer = np.zeros_like(img)
    lines = np.stack((rain_drops, rain_drops + np.array([[slant, drop_length]])), axis=1)
    cv2.polylines(layer, lines.astype(np.int32), False, drop_color, drop_width, lineType=cv2.LINE_4)
    if blur_value > 1:
        cv2.blur(layer, (blur_value, blur_value), dst=layer)
    out = cv2.add(img, layer, dst=layer)  # into the layer: no copy of the image
    if brightness != 1.0:
        out = apply_lut(out, cv2.multiply(_RAMP, brightness, dtype=cv2.CV_8U))
    return out


class Snow(A.RandomSnow):
    """albumentations' ``RandomSnow`` whose "bleach" method lifts HLS lightness below the snow point through
    a look-up table of its own float arithmetic (the same bytes, without a float copy of the channel)."""

    def apply(self, img: np.ndarray, snow_point: float, snow_texture: np.ndarray, sparkle_mask: np.ndarray,
              **params: object) -> np.ndarray:
        """``img`` bleached (albumentations' transform hook).

        Args:
            img: the uint8 RGB image.
            snow_point: the drawn snow point.
            snow_texture: albumentations' texture (None for "bleach").
            sparkle_mask: albumentations' sparkles (None for "bleach").
            params: the other drawn parameters (unused).

        Returns:
            The snowy image.
        """
        if self.method != "bleach" or not _is_rgb8(img):
            return super().apply(img, snow_point, snow_texture, sparkle_mask, **params)
        return add_snow_bleach(img, snow_point, self.brightness_coeff)


def add_snow_bleach(img: np.ndarray, snow_point: float, brightness: float) -> np.ndarray:
    """``albumentations.augmentations.pixel.functional.add_snow_bleach`` for uint8 RGB: HLS lightness under
    the threshold multiplied by ``brightness``, saturated and truncated, as one look-up table.

    Args:
        img: the uint8 RGB image.
        snow_point: in [0, 1]; the threshold is ``snow_point * 255 / 2 + 255 / 3``.
        brightness: the lightness factor.

    Returns:
        The bleached image.
    """
    lightness = np.arange(256, dtype=np.float32)
    lightness[lightness < snow_point * 255 / 2 + 255 / 3] *= brightness
    hls = cv2.cvtColor(img, cv2.COLOR_RGB2HLS)
    hls[:, :, 1] = translate(hls[:, :, 1], np.clip(lightness, 0, 255).astype(np.uint8))
    return cv2.cvtColor(hls, cv2.COLOR_HLS2RGB)


# -- per-condition transform lists ----------------------------------------------------------------
def _fog(cfg: WeatherConfig, rng: np.random.Generator, shape: tuple[int, int],
         depth_m: np.ndarray | None) -> list[A.BasicTransform]:
    # Not A.RandomFog: it ends with a fixed Gaussian blur of min(H, W) / 30 px over the whole image,
    # which wipes out small obstacles at every distance, and its contrast loss does not grow with depth.
    airlight = rng.uniform(*cfg.fog_airlight)
    if depth_m is not None:
        optical_depth = _KOSCHMIEDER / rng.uniform(*cfg.fog_visibility_m) * depth_m
    else:
        optical_depth = np.full(shape, -np.log(rng.uniform(*cfg.fog_transmission)), dtype=np.float32)
    density = np.maximum(1 + cfg.fog_patchiness * _smooth_field(shape, rng), 0)  # patches: denser, thinner
    return [AirlightVeil(1 - np.exp(-optical_depth * density), airlight)]


def _rain(cfg: WeatherConfig, rng: np.random.Generator, shape: tuple[int, int]) -> list[A.BasicTransform]:
    length = max(1, shape[0] // 8)
    slant = rng.uniform(*cfg.rain_slant) * length
    return [
        A.RandomBrightnessContrast(brightness_limit=(0, 0), contrast_limit=(-0.2, -0.1), p=1),  # rain haze
        Rain(slant_range=(slant, slant), drop_length=length,
                     drop_width=1, drop_color=(200, 200, 200), blur_value=int(rng.choice([3, 5])),
                     brightness_coefficient=rng.uniform(*cfg.rain_darkening),
                     rain_type=str(rng.choice(cfg.rain_types)), p=1),
    ]


def _snow(cfg: WeatherConfig, rng: np.random.Generator, shape: tuple[int, int]) -> list[A.BasicTransform]:
    cover = rng.uniform(*cfg.snow_cover)
    ground = Snow(snow_point_range=(cover, cover), brightness_coeff=rng.uniform(*cfg.snow_brightness),
                          method="bleach", p=1)
    # Falling flakes: short, thick "rain" drops, one layer per flake size (far small, near large).
    layers = int(rng.integers(cfg.snow_flake_layers[0], cfg.snow_flake_layers[1] + 1))
    scale = max(1, shape[0] // 360)
    return [ground, *(_flakes(k, scale, rng.uniform(-1, 1) * scale) for k in range(layers))]


def _flakes(layer: int, scale: int, drift: float) -> Rain:
    size = scale * (1 + layer)
    return Rain(slant_range=(drift, drift), drop_length=size, drop_width=size, drop_color=(235, 235, 235),
                        blur_value=1 if layer == 0 else 3, brightness_coefficient=1.0,
                        rain_type="torrential" if layer == 0 else "heavy", p=1)


def _dark(cfg: WeatherConfig, rng: np.random.Generator) -> list[A.BasicTransform]:
    exposure = rng.uniform(*cfg.dark_exposure)
    gamma = rng.uniform(*cfg.dark_gamma) * 100  # albumentations: out = in ** (gamma / 100)
    noise = rng.uniform(*cfg.dark_noise_std)
    transforms: list[A.BasicTransform] = [
        Exposure(exposure, p=1),
        A.RandomGamma(gamma_limit=(gamma, gamma), p=1)]
    if rng.random() < cfg.headlight_probability:
        transforms.append(HeadlightCone(centre=(0.5 + rng.uniform(-0.05, 0.05), rng.uniform(0.9, 1.0)),
                                        sigma=(rng.uniform(0.2, 0.3), rng.uniform(0.25, 0.4)),
                                        gain=rng.uniform(*cfg.headlight_gain)))
    # Sensor noise last: it is added to the light that reaches the sensor, headlights included.
    transforms.append(SensorNoise(std=noise))
    return transforms


def _glare(cfg: WeatherConfig, rng: np.random.Generator, shape: tuple[int, int]) -> list[A.BasicTransform]:
    radius = int(rng.uniform(*cfg.glare_radius) * shape[1])
    return [
        A.RandomBrightnessContrast(brightness_limit=(0, 0), contrast_limit=(-0.25, -0.1), p=1),  # veiling glare
        # physics_based: a bright source with a soft halo; "overlay" paints ghost disks a third of the image wide
        SunFlare(flare_roi=cfg.glare_roi, src_radius=max(radius, 1), src_color=(255, 244, 224),
                 num_flare_circles_range=(4, 8), p=1),
    ]


def weather_transforms(condition: str, cfg: WeatherConfig, rng: np.random.Generator, shape: tuple[int, int],
                       depth_m: np.ndarray | None = None) -> list[A.BasicTransform]:
    """The transforms of one effect, their parameters drawn from ``rng``; [] for no effect.

    Args:
        condition: "fog", "rain", "snow", "dark" or "glare"; anything else gives [].
        cfg: the ranges the effect's parameters are drawn from.
        rng: draws the parameters.
        shape: (height, width) of the image, in pixels.
        depth_m: H x W distances in metres (``scene_depth``) that thicken fog with distance; None gives fog
            a uniform transmission. Only fog reads it.

    Returns:
        Pixel-only albumentations transforms, to run in order.
    """
    if condition == "fog":
        return _fog(cfg, rng, shape, depth_m)
    if condition == "rain":
        return _rain(cfg, rng, shape)
    if condition == "snow":
        return _snow(cfg, rng, shape)
    if condition == "dark":
        return _dark(cfg, rng)
    if condition == "glare":
        return _glare(cfg, rng, shape)
    return []


def pixel_pipeline(transforms: Sequence[A.BasicTransform], seed: int) -> A.Compose:
    """A seeded Compose that refuses any transform able to move pixels (labels must not change).

    Args:
        transforms: albumentations transforms, run in order.
        seed: the Compose's seed, for albumentations' own draws.

    Returns:
        The Compose.

    Raises:
        TypeError: when a transform is not an ``ImageOnlyTransform``.
    """
    spatial = [type(t).__name__ for t in transforms if not isinstance(t, A.ImageOnlyTransform)]
    if spatial:
        raise TypeError(f"weather transforms must be pixel-only, got {spatial}")
    return A.Compose(list(transforms), seed=seed)


def apply_weather(image_bgr: np.ndarray, condition: str, cfg: WeatherConfig, rng: np.random.Generator,
                  depth_m: np.ndarray | None = None) -> np.ndarray:
    """``image_bgr`` (H x W x 3 uint8) under ``condition``; a copy for "none" or a non-weather tag.

    ``depth_m`` (from ``scene_depth``) makes fog thicken with distance; without it fog is a uniform veil.

    Args:
        image_bgr: H x W x 3 uint8 image (not modified).
        condition: the effect to apply (``weather_effect``).
        cfg: the ranges the effect's parameters are drawn from.
        rng: draws the albumentations seed and the effect's parameters.
        depth_m: H x W camera distances in metres, or None.

    Returns:
        A new H x W x 3 uint8 image.
    """
    if condition not in WEATHER_CONDITIONS:
        return image_bgr.copy()
    seed = int(rng.integers(2**31))
    transforms = weather_transforms(condition, cfg, rng, image_bgr.shape[:2], depth_m)
    rgb = cv2.cvtColor(image_bgr, cv2.COLOR_BGR2RGB)  # albumentations' colour transforms assume RGB
    out = pixel_pipeline(transforms, seed)(image=rgb)["image"]
    return cv2.cvtColor(out, cv2.COLOR_RGB2BGR)


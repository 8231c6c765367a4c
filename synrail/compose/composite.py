"""One composite: obstacles placed on the track, scaled, occluding each other, pasted, labelled.

Every label comes from the pixels that are actually visible in the final image: an obstacle's
mask minus the nearer obstacles drawn over it, cut at the image border. Obstacles that would be
left mostly hidden are removed *before* pasting, so no pixel of an unlabelled obstacle remains.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from synrail.compose.harmonizers import Harmonizer, make_harmonizer
from synrail.compose.placement import GroundPoint, linear_pixel_width, metric_pixel_height, sample_ground_point
from synrail.compose.shadows import contact_shadow, light_from_image, match_blur, match_noise
from synrail.config import ComposeConfig, HarmonizeConfig
from synrail.rail.geometry import CameraGeometry

_CAMERA_RING_SHARE = 0.15  # width of the surroundings the camera's blur and noise are measured in


@dataclass(frozen=True)
class SceneBackground:
    """What the compositor needs to know about one background frame."""

    image: np.ndarray  # H x W x 3 uint8, BGR
    track_mask: np.ndarray  # H x W bool
    track_rows: Mapping[int, np.ndarray]  # row -> track columns (placement.track_rows)
    geometry: CameraGeometry
    fog_beta: float = 0.0  # extinction coefficient (1/m) the background was rendered or seen with
    airlight_bgr: tuple[float, float, float] = (0.0, 0.0, 0.0)
    illumination_bgr: tuple[float, float, float] = (1.0, 1.0, 1.0)  # scene light on an albedo (known for
    # rendered scenes; 1 for photographs, where harmonization does the matching)
    sensor_noise: float = 0.0  # std of the background's sensor noise, 0-255 units
    light_deg: tuple[float, float] | None = None  # sun (azimuth, elevation) when known; else estimated
    shadow_scale: float = 1.0  # how hard shadows are under this light (diffuse light: weak shadows)
    real_frame: bool = False  # a camera frame: match its blur and noise on the pasted obstacles
    monochrome: bool = False  # a grayscale or infrared camera: it sees no colour, so neither may a paste


_HALVING = threading.Lock()


@dataclass(frozen=True)
class GalleryCutout:
    """One decoded gallery cutout: BGRA pixels (alpha 0/255), its class, source and physical height (m)."""

    cutout_id: str
    class_name: str
    source: str
    rgba: np.ndarray  # h x w x 4 uint8, BGRA, alpha 0/255
    height_m: float
    height_m_range: tuple[float, float] | None = None  # the kind's real range (real sources); None: drawn
    # ``rgba`` halved again and again (area-averaged), filled as pastes need them (a third more
    # memory at most); threads composing with one gallery share them.
    _halvings: list[np.ndarray] = field(default_factory=list, init=False, repr=False, compare=False)

    def scaled(self, height_px: float) -> tuple[np.ndarray, np.ndarray]:
        """``resize_cutout`` of the cutout, area-averaged from the smallest of its halvings still at
        least that tall: a paste is usually a tenth of its cutout's height or less, and area
        resampling costs by the source's pixels (same look: at most a few grey levels apart).

        Args:
            height_px: the wanted height in pixels.

        Returns:
            (BGR, mask), as ``resize_cutout``.
        """
        source = self.rgba
        level = 0
        while source.shape[0] >= 2 * max(1, round(height_px)) and min(source.shape[:2]) >= 16:
            if level == len(self._halvings):
                with _HALVING:  # two threads must not both append the same level
                    if level == len(self._halvings):
                        self._halvings.append(cv2.resize(source, (source.shape[1] // 2, source.shape[0] // 2),
                                                         interpolation=cv2.INTER_AREA))
            source, level = self._halvings[level], level + 1
        return resize_cutout(self.rgba, height_px, source)


def jittered_height(cutout: GalleryCutout, factor: float) -> float:
    """The cutout's height times its size jitter, kept within the kind's real range when it has one.

    Args:
        cutout: the cutout (its ``height_m`` and optional ``height_m_range``).
        factor: the drawn jitter factor (1 +- ``size_jitter``).

    Returns:
        The height to paste, in metres.
    """
    height_m = cutout.height_m * factor
    if cutout.height_m_range is None:
        return height_m
    return float(min(max(height_m, cutout.height_m_range[0]), cutout.height_m_range[1]))


@dataclass(frozen=True)
class WindowMask:
    """A mask of an image that is empty outside one window; only the window is stored."""

    top: int
    left: int
    mask: np.ndarray  # bool, the window's contents
    image_shape: tuple[int, int]

    @property
    def area(self) -> int:
        """The mask's pixel count."""
        return int(np.count_nonzero(self.mask))

    def full(self) -> np.ndarray:
        """The whole-image mask, Fortran-ordered as pycocotools wants it."""
        canvas = np.zeros(self.image_shape, dtype=bool, order="F")
        canvas[self.top:self.top + self.mask.shape[0], self.left:self.left + self.mask.shape[1]] = self.mask
        return canvas

    def minus(self, other: WindowMask) -> WindowMask:
        """This mask without the pixels of ``other``."""
        top, left = max(self.top, other.top), max(self.left, other.left)
        bottom = min(self.top + self.mask.shape[0], other.top + other.mask.shape[0])
        right = min(self.left + self.mask.shape[1], other.left + other.mask.shape[1])
        if top >= bottom or left >= right:
            return self
        mask = self.mask.copy()
        mask[top - self.top:bottom - self.top, left - self.left:right - self.left] &= \
            ~other.mask[top - other.top:bottom - other.top, left - other.left:right - other.left]
        return WindowMask(self.top, self.left, mask, self.image_shape)


@dataclass(frozen=True)
class Placement:
    """One obstacle as placed: its resized pixels and mask, its position in the image and what of it is inside."""

    cutout: GalleryCutout
    point: GroundPoint
    height_m: float
    bgr: np.ndarray  # resized cutout colours
    mask: np.ndarray  # resized cutout mask (bool), the whole object
    x0: int  # image column of the cutout's left edge (may be negative)
    y0: int  # image row of its top edge (may be negative)
    in_image: WindowMask  # the part of ``mask`` inside the image
    full_px: int  # pixels of the whole object, inside the image or not


def placement_at(cutout: GalleryCutout, point: GroundPoint, height_m: float, bgr: np.ndarray, mask: np.ndarray,
                 x0: int, y0: int, image_shape: tuple[int, int]) -> Placement | None:
    """A placement with its in-image window; None when the object lies wholly outside the image.

    Args:
        cutout: the gallery cutout being placed.
        point: where the object touches the ground.
        height_m: the object's height as drawn (the cutout's height with its size jitter), in metres.
        bgr: h x w x 3 uint8, the resized cutout's colours.
        mask: h x w bool, the resized cutout's silhouette.
        x0: image column of the cutout's left edge (may be negative).
        y0: image row of the cutout's top edge (may be negative).
        image_shape: (height, width) of the image, in pixels.

    Returns:
        The placement, or None when no pixel of ``mask`` falls inside the image.
    """
    height, width = image_shape
    top, bottom = max(y0, 0), min(y0 + mask.shape[0], height)
    left, right = max(x0, 0), min(x0 + mask.shape[1], width)
    if top >= bottom or left >= right:
        return None
    window = WindowMask(top, left, mask[top - y0:bottom - y0, left - x0:right - x0], image_shape)
    if window.area == 0:
        return None
    return Placement(cutout=cutout, point=point, height_m=height_m, bgr=bgr, mask=mask, x0=x0, y0=y0,
                     in_image=window, full_px=int(np.count_nonzero(mask)))


@dataclass(frozen=True)
class Instance:
    """A labelled obstacle of a finished composite."""

    class_name: str
    cutout_id: str
    source: str
    distance_m: float
    height_m: float
    pixel_height: int  # rows of the whole (unoccluded, untruncated) object as pasted
    ground_uv: tuple[int, int]
    visible_mask: WindowMask
    visibility: float  # visible / full object pixels, in (0, 1]
    truncated: bool  # part of the object lies outside the image
    occluded: bool  # part of the in-image object is hidden by a nearer one


@dataclass(frozen=True)
class Composite:
    """A composed image and the obstacles placed on it."""

    image: np.ndarray
    instances: list[Instance]


def resize_cutout(rgba: np.ndarray, height_px: float, source: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Scale a cutout to ``height_px`` rows, keeping its aspect ratio.

    Args:
        rgba: h x w x 4 uint8 BGRA cutout, alpha 0/255.
        height_px: the wanted height in pixels (rounded; at least 1 row and 1 column).
        source: a reduced copy of ``rgba`` to resample from (``GalleryCutout.scaled``); None: ``rgba``.

    Returns:
        (BGR, mask): the scaled colours (contiguous uint8) and a bool mask where the scaled alpha is >= 128.
    """
    new_h = max(1, int(round(height_px)))
    new_w = max(1, int(round(rgba.shape[1] * new_h / rgba.shape[0])))
    source = rgba if source is None else source
    interpolation = cv2.INTER_AREA if new_h < source.shape[0] else cv2.INTER_LINEAR
    scaled = cv2.resize(source, (new_w, new_h), interpolation=interpolation)
    return np.ascontiguousarray(scaled[:, :, :3]), scaled[:, :, 3] >= 128


def feathered_alpha(mask: np.ndarray, feather_px: float) -> np.ndarray:
    """Alpha that ramps up over ``feather_px`` inside the mask and is zero outside it.

    Args:
        mask: H x W bool silhouette.
        feather_px: width of the ramp in pixels, measured inward from the mask's edge (and the array's
            border); 0 or less gives a hard 0/1 alpha.

    Returns:
        H x W float32 alpha in [0, 1].
    """
    if feather_px <= 0:
        return mask.astype(np.float32)
    inside = cv2.distanceTransform(np.pad(mask, 1).astype(np.uint8), cv2.DIST_L2, 3)[1:-1, 1:-1]
    return np.clip(inside / feather_px, 0.0, 1.0)


def _pixel_height(bg: SceneBackground, cutout: GalleryCutout, point: GroundPoint, height_m: float,
                  cfg: ComposeConfig, rng: np.random.Generator) -> float:
    if cfg.scale == "metric":
        return metric_pixel_height(bg.geometry, point, height_m)
    beta_scale = bg.geometry.width / cfg.linear.reference_width
    width = linear_pixel_width(len(bg.track_rows[point.v]), rng.uniform(*cfg.linear.alpha),
                               rng.uniform(*cfg.linear.beta) * beta_scale)
    return width * cutout.rgba.shape[0] / cutout.rgba.shape[1]


def place_obstacle(bg: SceneBackground, cutout: GalleryCutout, cfg: ComposeConfig,
                   rng: np.random.Generator) -> Placement | None:
    """Try up to ``max_attempts`` ground points; None when none gives a usable obstacle.

    Args:
        bg: the background frame, its track and camera geometry.
        cutout: the gallery cutout to place.
        cfg: placement settings (distance range, size jitter, minimum pixel height, attempts).
        rng: draws the ground point, the size jitter and the pixel height.

    Returns:
        The first placement at least ``min_height_px`` tall with some pixel inside the image, its
        silhouette's bottom-centre on the ground point; None when every attempt fails.
    """
    for _ in range(cfg.max_attempts):
        point = sample_ground_point(bg.geometry, bg.track_rows, cfg.distance_m, rng)
        if point is None:
            continue
        height_m = jittered_height(cutout, rng.uniform(1 - cfg.size_jitter, 1 + cfg.size_jitter))
        height_px = _pixel_height(bg, cutout, point, height_m, cfg, rng)
        if height_px < cfg.min_height_px:
            continue
        bgr, mask = cutout.scaled(height_px)
        if not mask.any():
            continue
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        foot_col = int(round((cols[0] + cols[-1]) / 2))  # bottom-centre of the silhouette
        placement = placement_at(cutout, point, height_m, bgr, mask, x0=point.u - foot_col,
                                 y0=point.v - int(rows[-1]), image_shape=bg.track_mask.shape)
        if placement is not None:
            return placement
    return None


def _visible_masks(ordered: Sequence[Placement]) -> list[WindowMask]:
    """Visible part of each placement, ``ordered`` far to near (nearer ones cover farther ones)."""
    visible = []
    for i, placement in enumerate(ordered):
        mask = placement.in_image
        for nearer in ordered[i + 1:]:
            mask = mask.minus(nearer.in_image)
        visible.append(mask)
    return visible


def drop_hidden(placements: Sequence[Placement], cfg: ComposeConfig) -> tuple[list[Placement], list[WindowMask]]:
    """Sort far to near and remove, worst first, obstacles too hidden to label.

    Args:
        placements: the obstacles placed on one image, in any order.
        cfg: the thresholds: ``min_visibility`` (visible share of the whole object) and ``min_visible_px``.

    Returns:
        (survivors, visible masks): the kept placements ordered far to near and, for each, the part of it
        left visible by the nearer ones; both empty when none survives.
    """
    kept = sorted(placements, key=lambda p: -p.point.distance_m)
    while kept:
        visible = _visible_masks(kept)
        scores = [(m.area, m.area / p.full_px) for p, m in zip(kept, visible, strict=True)]
        failing = [i for i, (px, vis) in enumerate(scores) if vis < cfg.min_visibility or px < cfg.min_visible_px]
        if not failing:
            return kept, visible
        del kept[min(failing, key=lambda i: scores[i][1])]
    return [], []


@functools.lru_cache(maxsize=4)
def _harmonizer(config: HarmonizeConfig) -> Harmonizer:
    """Built once per process and config (a learned model loads once per worker)."""
    return make_harmonizer(config.backend, **config.harmonizer_options())


def _window_around(window: WindowMask, margin: int, shape: tuple[int, int]) -> tuple[slice, slice]:
    """The placement's in-image window grown by ``margin`` and cut at the image border."""
    y0, x0 = window.top, window.left
    y1, x1 = y0 + window.mask.shape[0], x0 + window.mask.shape[1]
    return (slice(max(y0 - margin, 0), min(y1 + margin, shape[0])),
            slice(max(x0 - margin, 0), min(x1 + margin, shape[1])))


def is_monochrome(image_bgr: np.ndarray, tolerance: float = 8.0, share: float = 0.99) -> bool:
    """Whether a frame comes from a camera that sees no colour (grayscale, night infrared).

    JPEG's chroma subsampling and a colour-burnt overlay leave a little colour in such frames, so
    the test is robust: ``share`` of the pixels have all three channels within ``tolerance`` grey
    levels of each other.

    Args:
        image_bgr: H x W x 3 uint8 frame.
        tolerance: the largest channel spread of a grey pixel, in grey levels.
        share: the share of pixels that must be grey.

    Returns:
        True for a grayscale frame.
    """
    spread = image_bgr.max(axis=2).astype(np.int16) - image_bgr.min(axis=2)
    return float(np.mean(spread <= tolerance)) >= share


def harmonize_placement(canvas: np.ndarray, obj: np.ndarray, p: Placement, harmonizer: Harmonizer) -> np.ndarray:
    """The object's colours (``obj``, the in-image crop of the cutout) harmonized to ``canvas`` around it.

    Every backend runs the same way: on a window of the canvas as wide as it reads
    (``context_px`` of the whole object's height), with the object hard-pasted in it, told the
    object's full height (a cut object keeps the ring of a whole one). Only the object's own pixels
    are taken back: Poisson's outer band is not pasted.

    Args:
        canvas: H x W x 3 uint8 image the object goes on (not modified).
        obj: h x w x 3 uint8, the object's colours over its in-image window (h x w is ``p.in_image.mask``'s shape).
        p: the placement, whose in-image window says where ``obj`` sits.
        harmonizer: the backend that matches the object to its surroundings.

    Returns:
        A copy of ``obj`` whose pixels inside the mask are harmonized; those outside keep their values.
    """
    window, mask = p.in_image, p.in_image.mask
    rows, cols = _window_around(window, harmonizer.context_px(p.mask.shape[0]), canvas.shape[:2])
    inner = (slice(window.top - rows.start, window.top - rows.start + mask.shape[0]),
             slice(window.left - cols.start, window.left - cols.start + mask.shape[1]))
    composite = canvas[rows, cols].copy()
    in_composite = np.zeros(composite.shape[:2], dtype=bool)
    in_composite[inner] = mask
    colour_mask = mask[:, :, None]  # copyto with a broadcast mask: a boolean gather and scatter's bytes, faster
    np.copyto(composite[inner], obj, where=colour_mask)
    out = obj.copy()
    out[mask] = harmonizer.harmonized_object(composite, in_composite, object_height=p.mask.shape[0])
    return out


def _paste(canvas: np.ndarray, p: Placement, bg: SceneBackground, cfg: ComposeConfig,
           rng: np.random.Generator) -> None:
    """Light, harmonize, fog, add sensor noise and alpha-blend one placement into ``canvas`` in place
    (the paper's eq. 2)."""
    window = p.in_image
    y0, x0 = window.top, window.left
    y1, x1 = y0 + window.mask.shape[0], x0 + window.mask.shape[1]
    crop = (slice(y0 - p.y0, y1 - p.y0), slice(x0 - p.x0, x1 - p.x0))
    obj, mask = p.bgr[crop], window.mask
    if bg.illumination_bgr != (1.0, 1.0, 1.0):  # the scene's own light falls on the obstacle
        obj = cv2.transform(obj, np.diag(np.asarray(bg.illumination_bgr, dtype=np.float32)))  # saturating
    if cfg.harmonize is not None:
        obj = harmonize_placement(canvas, obj, p, _harmonizer(cfg.harmonize))
    if bg.monochrome:
        obj = cv2.cvtColor(cv2.cvtColor(obj, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    if cfg.match_camera and bg.real_frame:  # the camera's defocus and noise, measured beside the paste
        surroundings = bg.image[_window_around(window, max(2, int(round(_CAMERA_RING_SHARE * p.mask.shape[0]))),
                                               canvas.shape[:2])]
        obj = match_noise(match_blur(obj, surroundings, mask), surroundings, rng, mask)
    colour = obj.astype(np.float32)
    if bg.fog_beta > 0:  # the same atmosphere the background was seen through, at this distance
        t = float(np.exp(-bg.fog_beta * p.point.distance_m))
        colour = colour * t + np.asarray(bg.airlight_bgr, dtype=np.float32) * (1 - t)
    if bg.sensor_noise > 0:  # the same sensor: a pasted obstacle must not be cleaner than its scene
        colour += rng.standard_normal(colour.shape, dtype=np.float32) * np.float32(bg.sensor_noise)
    canvas[y0:y1, x0:x1] = blend(canvas[y0:y1, x0:x1], colour, feathered_alpha(p.mask, cfg.feather_px)[crop])


def blend(background: np.ndarray, colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``alpha * colour + (1 - alpha) * background``, rounded and saturated to uint8 (the paper's eq. 2).

    The alpha is repeated over the channels first: numpy's products with a broadcast last axis of 1
    are several times slower than with a whole array, and give the same float32 values.

    Args:
        background: h x w x 3 uint8 pixels under the object.
        colour: h x w x 3 float32 object colours.
        alpha: h x w float32 alpha in [0, 1].

    Returns:
        h x w x 3 uint8 blended pixels.
    """
    alpha3 = cv2.merge([alpha] * colour.shape[2])
    out = alpha3 * colour
    np.subtract(1, alpha3, out=alpha3)
    alpha3 *= background  # (1 - alpha) * background
    out += alpha3
    out += 0.5
    np.clip(out, 0, 255, out=out)
    return out.astype(np.uint8)


def compose_image(bg: SceneBackground, gallery: Mapping[str, Sequence[GalleryCutout]], classes: Sequence[str],
                  cfg: ComposeConfig, rng: np.random.Generator) -> Composite:
    """Place 1..k obstacles from ``gallery`` on ``bg`` and label what stays visible.

    Args:
        bg: the background frame, its track and camera geometry (not modified).
        gallery: class name -> the cutouts of that class; every name in ``classes`` must have at least one.
        classes: the class names drawn from, uniformly, for each obstacle.
        cfg: composition settings (obstacle count, placement, visibility thresholds, shadow, harmonizer).
        rng: draws the obstacles, their placements and their pasting; shadows draw from a stream spawned from it.

    Returns:
        The composed image and one instance per obstacle kept, each labelled with its visible mask.
    """
    count = int(rng.integers(cfg.obstacles_per_image[0], cfg.obstacles_per_image[1] + 1))
    placements = []
    for _ in range(count):
        class_name = classes[int(rng.integers(len(classes)))]
        options = gallery[class_name]
        placement = place_obstacle(bg, options[int(rng.integers(len(options)))], cfg, rng)
        if placement is not None:
            placements.append(placement)
    kept, visible = drop_hidden(placements, cfg) if placements else ([], [])
    canvas = bg.image.copy()
    effects = rng.spawn(1)[0]  # shadow draws never shift the placement and paste draws
    light = (bg.light_deg or light_from_image(bg.image, cfg.shadow, bg.geometry)
             if kept and cfg.shadow is not None else None)
    for p in kept:
        if light is not None and bg.shadow_scale > 0:
            strength = effects.uniform(*cfg.shadow.strength) * bg.shadow_scale
            contact_shadow(canvas, p.in_image, p.point.v, light[0], light[1], strength, effects,
                           flatten=bg.geometry.height_m / p.point.distance_m, inplace=True)
        _paste(canvas, p, bg, cfg, rng)
    instances = [
        Instance(class_name=p.cutout.class_name, cutout_id=p.cutout.cutout_id, source=p.cutout.source,
                 distance_m=p.point.distance_m, height_m=p.height_m, pixel_height=p.mask.shape[0],
                 ground_uv=(p.point.u, p.point.v),
                 visible_mask=m, visibility=m.area / p.full_px,
                 truncated=p.in_image.area < p.full_px, occluded=m.area < p.in_image.area)
        for p, m in zip(kept, visible, strict=True)
    ]
    return Composite(image=canvas, instances=instances)

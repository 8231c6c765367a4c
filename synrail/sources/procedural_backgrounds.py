"""Procedural railway scenes seen from a train cab, rendered through a ``CameraGeometry``.

Everything on the ground is evaluated at each pixel's ground point (X, Z), so perspective matches
``geometry.track_mask()`` exactly. Fine periodic detail (rails, sleepers, fasteners) is
anti-aliased analytically: each pixel takes the fraction of its footprint an element covers, so
far rails fade into thin lines and far sleepers into their average colour instead of shimmering.
Noise textures drop octaves finer than the local pixel footprint for the same reason.

Colour conventions: albedos are BGR in [0, 1]; colours that appear in the image as such (sky,
fog airlight) are BGR in [0, 255]. The image is ``albedo * illumination_bgr`` for lit surfaces,
then fogged with ``fog_transmission(fog_beta, distance)`` toward ``fog_colour_bgr``, then
vignetted, given sensor noise and quantised.

Vertical clutter (trees, bushes, catenary masts and wires, a distant treeline) never covers the
ego track area: a prop whose outline would touch the mask is dropped, and the mask pixels are
cleared from the clutter layer as a final guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NamedTuple

import cv2
import numpy as np
from numpy.typing import ArrayLike

from synrail.rail.geometry import CameraGeometry, TrackPose
from synrail.randomness import RenderStream, render_rng, table_normals

IntOrArray = int | np.ndarray

TRACK_TYPES = ("ballasted", "ballastless")
CONDITIONS = ("normal", "overcast", "fog", "dusk")

# Nominal extinction per condition; the clear conditions keep a light aerial haze so the far
# ground melts into the horizon sky. Each spec jitters this value into ``fog_beta``.
FOG_DENSITY: Mapping[str, float] = MappingProxyType(
    {"normal": 0.0012, "overcast": 0.003, "fog": 0.03, "dusk": 0.002})

BGR = tuple[float, float, float]

SLEEPER_LENGTH_M = 2.6
SLEEPER_DEPTH_M = 0.25
SLAB_HALF_WIDTH_M = 1.4
FASTENER_SPACING_M = 0.65
SLAB_JOINT_SPACING_M = 6.45
RAIL_VISIBLE_DEPTH_M = 0.15  # rail side height visible above sleepers/ballast
CONTACT_WIRE_HEIGHT_M = 5.5
MESSENGER_WIRE_HEIGHT_M = 6.8

_AA_FILTER = 1.25  # box-filter width in pixels; a bit over one pixel damps moire on sleepers

@dataclass(frozen=True)
class BackgroundSpec:
    """Everything that defines one scene; sampled by ``sample_background_spec``, then rendered."""

    track_type: str                  # "ballasted" | "ballastless"
    condition: str                   # "normal" | "overcast" | "fog" | "dusk"
    geometry: CameraGeometry
    palette_seed: int                # seeds textures, vegetation layout, clouds, sensor noise
    fog_beta: float                  # extinction actually rendered (1/m)
    fog_colour_bgr: BGR              # airlight = sky colour at the horizon, 0-255
    sky_zenith_bgr: BGR              # 0-255
    illumination_bgr: BGR            # albedo -> image multiplier (exposure x light colour)
    sun_azimuth_deg: float           # 0 = straight ahead, positive = to the right
    sun_elevation_deg: float
    cloud_cover: float               # 0 clear .. 1 closed
    grass_albedo_bgr: BGR
    dirt_albedo_bgr: BGR
    dirt_fraction: float             # share of the terrain that is bare soil
    ballast_albedo_bgr: BGR
    foliage_albedo_bgr: BGR
    sleeper_material: str            # "concrete" | "wood" (ballasted only)
    sleeper_spacing_m: float
    bed_half_width_m: float          # ballast bed / slab shoulder half width
    neighbour_side: int              # -1 left, +1 right, 0 no neighbouring track
    neighbour_spacing_m: float
    mast_side: int                   # -1 left, +1 right, 0 not electrified (no masts, no wires)
    mast_spacing_m: float
    mast_lateral_m: float            # mast distance from the ego centreline
    tree_count: int                  # candidates; those that would cover the track are dropped
    treeline_distance_m: float       # 0 = open horizon
    vignette: float                  # relative darkening at the image corners
    sensor_noise: float              # noise std in 0-255 units

    def transmission(self, distance_m: np.ndarray | float) -> np.ndarray:
        """Fog transmission this scene uses; fog obstacles with it and ``fog_colour_bgr``."""
        return fog_transmission(self.fog_beta, distance_m)


def fog_transmission(condition_or_beta: str | float, distance_m: np.ndarray | float) -> np.ndarray:
    """``exp(-beta * d)``; ``condition_or_beta`` is a condition name (nominal density) or beta.

    Args:
        condition_or_beta: a key of ``FOG_DENSITY`` ("normal", "overcast", "fog", "dusk"), or the
            extinction coefficient beta in 1/m.
        distance_m: distances in metres (infinity allowed: the sky).

    Returns:
        float64 transmission in [0, 1], shaped like ``distance_m``; all ones when beta is 0.
    """
    beta = FOG_DENSITY[condition_or_beta] if isinstance(condition_or_beta, str) else float(condition_or_beta)
    distance = np.asarray(distance_m, dtype=np.float64)
    if beta == 0.0:
        return np.ones_like(distance)  # avoids 0 * inf for sky distances
    return np.exp(-beta * distance)


# -- sampling ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Look:
    light_colour: BGR
    exposure: tuple[float, float]
    zenith: BGR
    horizon: BGR
    sun_azimuth: tuple[float, float]
    sun_elevation: tuple[float, float]
    cloud_cover: tuple[float, float]
    sensor_noise: tuple[float, float]


_LOOKS: Mapping[str, _Look] = MappingProxyType({
    "normal": _Look((0.95, 1.0, 1.04), (1.0, 1.2), (215, 140, 75), (235, 222, 205),
                    (-150, 150), (20, 60), (0.0, 0.6), (1.0, 2.0)),
    "overcast": _Look((1.0, 1.0, 0.97), (0.7, 0.85), (150, 146, 140), (200, 198, 194),
                      (-180, 180), (25, 60), (0.85, 1.0), (1.5, 2.5)),
    "fog": _Look((1.0, 1.0, 0.98), (0.7, 0.85), (200, 200, 196), (210, 210, 206),
                 (-180, 180), (15, 50), (0.0, 0.0), (1.5, 2.5)),
    "dusk": _Look((0.6, 0.8, 1.0), (0.3, 0.45), (70, 38, 28), (70, 110, 185),
                  (-70, 70), (-3, 5), (0.1, 0.6), (2.5, 4.0)),
})

_GREEN_GRASS: BGR = (0.10, 0.30, 0.20)
_DRY_GRASS: BGR = (0.22, 0.36, 0.40)
_DIRT: BGR = (0.24, 0.31, 0.38)
_BALLAST: BGR = (0.38, 0.40, 0.42)
_FOLIAGE: BGR = (0.08, 0.22, 0.12)


def sample_background_spec(rng: np.random.Generator, *, width: int, height: int,
                           track_types: Sequence[str], conditions: Mapping[str, float],
                           camera_height_m: tuple[float, float], pitch_deg: tuple[float, float],
                           hfov_deg: tuple[float, float], max_curvature: float,
                           max_offset_m: float) -> BackgroundSpec:
    """Draw one scene. ``conditions`` maps condition name -> relative weight.

    Args:
        rng: makes every draw.
        width: image width in pixels.
        height: image height in pixels.
        track_types: the track types drawn from, uniformly; a non-empty subset of ``TRACK_TYPES``.
        conditions: condition name (from ``CONDITIONS``) -> non-negative weight, not all zero.
        camera_height_m: (low, high) camera height above the rails, in metres.
        pitch_deg: (low, high) downward pitch, in degrees.
        hfov_deg: (low, high) horizontal field of view, in degrees.
        max_curvature: the largest track curvature either way, in 1/m (the centreline is
            ``X = offset + curvature * Z**2 / 2``).
        max_offset_m: the largest sideways offset of the track from the camera, either way, in metres.

    Returns:
        The scene's spec.

    Raises:
        ValueError: on unknown track types or conditions, or unusable weights.
    """
    track_type = _choose_track_type(rng, track_types)
    condition = _choose_condition(rng, conditions)
    geometry = CameraGeometry.from_fov(
        width, height, hfov_deg=rng.uniform(*hfov_deg), height_m=rng.uniform(*camera_height_m),
        pitch_deg=rng.uniform(*pitch_deg), track_offset_m=rng.uniform(-max_offset_m, max_offset_m),
        track_curvature=rng.uniform(-max_curvature, max_curvature))
    look = _LOOKS[condition]
    sky_brightness = rng.uniform(0.9, 1.08)
    horizon = _jitter(rng, look.horizon, 0.03, sky_brightness)
    # Masts on the inside of a curve would stand in front of the far track and get dropped
    # (they may not cover the track area), leaving wires hanging in the air: use the outside.
    curvature = geometry.track_curvature
    outside = -int(np.sign(curvature)) if abs(curvature) > 5e-4 else int(rng.choice([-1, 1]))
    mast_side = outside if rng.random() < 0.8 else 0
    neighbour_side = (-mast_side or int(rng.choice([-1, 1]))) if rng.random() < 0.45 else 0
    has_treeline = rng.random() < 0.7
    return BackgroundSpec(
        track_type=track_type, condition=condition, geometry=geometry,
        palette_seed=int(rng.integers(0, 2**63 - 1)),
        fog_beta=FOG_DENSITY[condition] * rng.uniform(0.6, 1.6),
        fog_colour_bgr=_clip_colour(horizon, 255.0),
        sky_zenith_bgr=_clip_colour(_jitter(rng, look.zenith, 0.04, sky_brightness), 255.0),
        illumination_bgr=_clip_colour(_jitter(rng, look.light_colour, 0.03, rng.uniform(*look.exposure)), 2.0),
        sun_azimuth_deg=rng.uniform(*look.sun_azimuth), sun_elevation_deg=rng.uniform(*look.sun_elevation),
        cloud_cover=rng.uniform(*look.cloud_cover),
        grass_albedo_bgr=_jitter(rng, _mix(_GREEN_GRASS, _DRY_GRASS, rng.uniform(0.0, 0.8)), 0.1),
        dirt_albedo_bgr=_jitter(rng, _DIRT, 0.05, rng.uniform(0.8, 1.2)), dirt_fraction=rng.uniform(0.0, 0.5),
        ballast_albedo_bgr=_jitter(rng, _BALLAST, 0.06, rng.uniform(0.8, 1.15)),
        foliage_albedo_bgr=_jitter(rng, _FOLIAGE, 0.15, rng.uniform(0.8, 1.3)),
        sleeper_material=str(rng.choice(["concrete", "wood"], p=[0.7, 0.3])),
        sleeper_spacing_m=rng.uniform(0.58, 0.66), bed_half_width_m=rng.uniform(1.6, 2.0),
        neighbour_side=neighbour_side, neighbour_spacing_m=rng.uniform(4.2, 4.8),
        mast_side=mast_side, mast_spacing_m=rng.uniform(45.0, 65.0), mast_lateral_m=rng.uniform(3.0, 3.6),
        tree_count=int(rng.integers(0, 60)),
        treeline_distance_m=max(rng.uniform(350.0, 1200.0), geometry.track_max_z_m + 50.0) if has_treeline else 0.0,
        vignette=rng.uniform(0.1, 0.3), sensor_noise=rng.uniform(*look.sensor_noise))


def _choose_track_type(rng: np.random.Generator, track_types: Sequence[str]) -> str:
    unknown = set(track_types) - set(TRACK_TYPES)
    if not track_types or unknown:
        raise ValueError(f"track_types must be a non-empty subset of {TRACK_TYPES}, got {list(track_types)}")
    return str(track_types[int(rng.integers(len(track_types)))])


def _choose_condition(rng: np.random.Generator, conditions: Mapping[str, float]) -> str:
    names = list(conditions)
    weights = np.array([conditions[name] for name in names], dtype=np.float64)
    if not names or set(names) - set(CONDITIONS) or (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(f"conditions must map names from {CONDITIONS} to non-negative weights, got {dict(conditions)}")
    return names[int(rng.choice(len(names), p=weights / weights.sum()))]


def _jitter(rng: np.random.Generator, colour: BGR, per_channel: float, scale: float = 1.0) -> BGR:
    factors = scale * rng.uniform(1 - per_channel, 1 + per_channel, 3)
    return tuple(float(c * f) for c, f in zip(colour, factors, strict=True))


def _mix(a: BGR, b: BGR, t: float) -> BGR:
    return tuple(float(x + (y - x) * t) for x, y in zip(a, b, strict=True))


def _clip_colour(colour: BGR, top: float) -> BGR:
    return tuple(float(min(max(c, 0.0), top)) for c in colour)


# -- rendering -----------------------------------------------------------------------------------
def render_background(spec: BackgroundSpec, pose: TrackPose | None = None, frame: int = 0) -> np.ndarray:
    """H x W x 3 uint8 BGR image of the scene; the same spec always gives the same bytes.

    Args:
        spec: the scene.
        pose: the camera moved along the track (an approach clip's later frame); ground textures,
            sleepers, trees and masts stay where they are in the world. The sky is at infinity and
            keeps its look (the camera's small turn on a curve is not applied to it).
        frame: the clip frame (a new draw of sensor noise per frame, as a real sensor's).

    Returns:
        The image.
    """
    geometry = spec.geometry
    image = np.empty((geometry.height, geometry.width, 3), dtype=np.float32)
    first_ground_row = min(geometry.height, max(0, math.floor(geometry.horizon_v()) + 1))
    if first_ground_row > 0:
        image[:first_ground_row] = _render_sky(spec, first_ground_row, render_rng(spec.palette_seed, RenderStream.SKY))
    if first_ground_row < geometry.height:
        ground_rng = render_rng(spec.palette_seed, RenderStream.GROUND)
        image[first_ground_row:] = _render_ground(spec, first_ground_row, ground_rng, pose)
    clutter = _render_clutter(spec, geometry.track_mask(), render_rng(spec.palette_seed, RenderStream.CLUTTER), pose)
    image = image * (1.0 - clutter[..., 3:] / np.float32(255)) + clutter[..., :3] / np.float32(255)
    sensor = render_rng(spec.palette_seed, RenderStream.SENSOR, *([frame] if frame else []))
    return _finish(image, spec, sensor)


class ClipBackgrounds:
    """One procedural scene seen from a camera moving along its track: a clip's frames, re-projected.

    ``render_background(spec, pose, frame)`` evaluates every pixel analytically; a clip's world does
    not change between frames, only the camera moves along the track, and in the camera's own frame
    the track is the same in every frame (``TrackPose``): a ground pixel keeps its offset from the
    centreline and its camera distance, and only its place along the track moves by the advance.
    So the lit ground is shaded once per clip, as textures in track coordinates (lateral, along):
    one band of image rows per texture, each at the pixel footprint of the band's nearest row
    (times ``along_resolution`` and ``lateral_resolution``), reaching as far along the track as the
    clip's last frame sees. A frame
    samples them through its rows' fixed track coordinates shifted by the advance (``cv2.remap``),
    fogs them with the fixed per-pixel transmission, and composites over the sky (at infinity,
    rendered once) the treeline and wires, drawn from the frame's pose as in ``render_background``,
    and the trees, bushes and masts: each drawn once per clip as a sprite and scaled into place
    per frame (``_PropSprites``). The camera geometry, track mask and sensor noise are those of
    ``render_background``; the ground's filtering differs (the texture's resampling in place of
    per-pixel analytic anti-aliasing), and a prop's sprite is resampled where the analytic render
    draws its shapes anew.
    """

    # Per band: a coarser spacing beyond these (a very long clip; a default one, 20 frames up to
    # 80 km/h, stays near 1.3 million texels); cv2.remap takes sources under 32767 a side.
    _MAX_TEXELS = 3_000_000
    _MAX_SIDE = 32_000
    _INTERPOLATION = cv2.INTER_CUBIC
    _BAND_RATIO = 4.0  # a band spans rows whose footprint along the track grows up to this much
    _NOISE_SHIFT = 32  # the per-clip sensor noise is this much larger than a frame, either way
    _NOISE_POOL_KEY = 2**32 - 1  # its stream key (frames have theirs: 1, 2, ...; the first none)

    def __init__(self, spec: BackgroundSpec, max_advance_m: float, along_resolution: float = 2.5,
                 lateral_resolution: float = 3.0) -> None:
        """Shade the clip's ground textures and sky.

        Args:
            spec: the scene (its geometry is every frame's camera).
            max_advance_m: the furthest the camera moves along the track in the clip, metres.
            along_resolution: texture spacing along the track in units of the pixel footprint of
                each band's nearest row (1 matches the nearest pixel; larger is coarser and faster
                to shade). The defaults keep frames within SSIM 0.9 of the analytic render
                (``tests/unit/sources/test_clip_backgrounds.py``) at about a sixth of its cost.
            lateral_resolution: the same across the track.
        """
        self.spec = spec
        self._noise: np.ndarray | None = None
        self._clutter_cache: dict[str, np.ndarray] = {}
        self._falloff = np.ones((1, 1, 3), dtype=np.float32)
        g = spec.geometry
        self._first_row = min(g.height, max(0, math.floor(g.horizon_v()) + 1))
        self._mask = g.track_mask()
        self._sky = (_render_sky(spec, self._first_row, render_rng(spec.palette_seed, RenderStream.SKY))
                     if self._first_row > 0 else None)
        self._props = _PropSprites(spec, self._mask, max_advance_m, self._clutter_cache)
        self._bands: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, float]] = []
        if self._first_row >= g.height:
            return
        view = _ground_view(g, self._first_row, texel=False)
        transmission = spec.transmission(view.distance).astype(np.float32)[..., None]
        self._transmission = np.repeat(transmission, 3, axis=2)  # OpenCV multiplies channel by channel
        self._airlight = _colour(spec.fog_colour_bgr, 1 / 255) * (1 - transmission)
        lateral_step = view.lateral_filter.min(axis=1) / _AA_FILTER
        along_step = view.along_filter.min(axis=1) / _AA_FILTER
        stop = view.lateral.shape[0]
        while stop > 0:  # bands from the nearest rows up, each spanning a doubling of the footprint
            start = stop - 1
            while start > 0 and along_step[start - 1] <= self._BAND_RATIO * along_step[stop - 1]:
                start -= 1
            self._bands.append(self._band(view, start, stop, lateral_resolution * float(lateral_step[stop - 1]),
                                          along_resolution * float(along_step[stop - 1]), max_advance_m))
            stop = start

    def _band(self, view: _GroundView, start: int, stop: int, lateral_step: float, along_step: float,
              max_advance_m: float) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, float]:
        """Texture of ground rows ``start:stop`` (of the ground view) and its fixed sampling maps."""
        lateral, along = view.lateral[start:stop], view.along[start:stop]
        lateral0 = float(lateral.min()) - 2 * lateral_step
        along0 = float(along.min()) - 2 * along_step
        columns = int(math.ceil((float(lateral.max()) + 2 * lateral_step - lateral0) / lateral_step)) + 1
        rows = int(math.ceil((float(along.max()) + max_advance_m + 2 * along_step - along0) / along_step)) + 1
        if columns * rows > self._MAX_TEXELS or max(columns, rows) > self._MAX_SIDE:
            scale = 1.01 * max(math.sqrt(columns * rows / self._MAX_TEXELS), max(columns, rows) / self._MAX_SIDE)
            return self._band(view, start, stop, lateral_step * scale, along_step * scale, max_advance_m)
        grid = _texture_view(self.spec, lateral0 + lateral_step * np.arange(columns),
                             along0 + along_step * np.arange(rows), lateral_step, along_step, max_advance_m / 2)
        texture = _shade_ground(self.spec, grid, render_rng(self.spec.palette_seed, RenderStream.GROUND))
        map_x = ((lateral - lateral0) / lateral_step).astype(np.float32)
        map_y = ((along - along0) / along_step).astype(np.float32)
        return start, stop, texture, map_x, map_y, along_step

    def render(self, pose: TrackPose, frame: int = 0) -> np.ndarray:
        """The frame seen from ``pose``: H x W x 3 uint8 BGR, as ``render_background(spec, pose, frame)``.

        Args:
            pose: the camera's place along the track (within the clip's ``max_advance_m``).
            frame: the clip frame (its sensor-noise draw).

        Returns:
            The image.
        """
        g = self.spec.geometry
        image = np.empty((g.height, g.width, 3), dtype=np.float32)
        if self._sky is not None:
            image[:self._first_row] = self._sky
        if self._bands:
            ground = image[self._first_row:]
            for start, stop, texture, map_x, map_y, along_step in self._bands:
                shifted = map_y + np.float32(pose.advance_m / along_step)
                cv2.remap(texture, map_x, shifted, self._INTERPOLATION, dst=ground[start:stop],
                          borderMode=cv2.BORDER_REPLICATE)
            cv2.multiply(ground, self._transmission, dst=ground)
            cv2.add(ground, self._airlight, dst=ground)
        painter = _Painter(self.spec, self._mask, pose, self._clutter_cache)
        if self._props.canopy is not None:  # far behind everything: first
            _draw_treeline(painter, canopy=self._props.canopy)
            _composite_layer(image, painter.layer, self._mask)
        self._props.composite(image, painter, self._mask)
        if self._props.mast_z.size:
            wires = np.zeros_like(painter.layer)
            _draw_wires(painter, self._props.mast_z, wires)
            _composite_layer(image, wires, self._mask)
        return self._finish(image, frame)

    def _finish(self, image: np.ndarray, frame: int) -> np.ndarray:
        """``_finish``'s vignette and quantisation; the sensor noise is a window of one per-clip draw.

        Drawing 2.8 million normals costs more than the rest of a frame, so the clip draws them once
        (from a table of quantiles, ``table_normals``), a little larger than a frame, and each frame
        takes a window at an offset of its own draw: within a frame the noise is the same white
        noise, between frames it is shifted.
        """
        h, w = image.shape[:2]
        if self._noise is None:
            v = (np.arange(h, dtype=np.float32) - (h - 1) / 2)[:, None] / np.float32(h / 2)
            u = (np.arange(w, dtype=np.float32) - (w - 1) / 2)[None, :] / np.float32(w / 2)
            falloff = (1 - np.float32(self.spec.vignette / 2) * (u * u + v * v)) * np.float32(255)
            self._falloff = np.repeat(falloff[..., None], 3, axis=2)  # OpenCV multiplies channel by channel
            pool_rng = render_rng(self.spec.palette_seed, RenderStream.SENSOR, self._NOISE_POOL_KEY)
            self._noise = table_normals(pool_rng, (h + self._NOISE_SHIFT, w + self._NOISE_SHIFT, 3))
            self._noise *= np.float32(self.spec.sensor_noise)
        dy, dx = render_rng(self.spec.palette_seed, RenderStream.SENSOR, *([frame] if frame else [])).integers(
            0, self._NOISE_SHIFT + 1, 2)
        # OpenCV's passes: the same values as numpy's (rint, then clip: the saturating cast to uint8
        # rounds half to even too).
        cv2.multiply(image, self._falloff, dst=image)
        return cv2.add(image, self._noise[dy:dy + h, dx:dx + w], dtype=cv2.CV_8U)


def _texture_view(spec: BackgroundSpec, lateral: np.ndarray, along: np.ndarray, lateral_step: float,
                  along_step: float, reference_advance_m: float) -> _GroundView:
    """A ground view over a grid in track coordinates (rows along the track, columns across it).

    World points are where the first frame's track coordinates put them (as ``TrackPose.to_world``
    does); the rails' visible sides follow the camera at ``reference_advance_m``.
    """
    g = spec.geometry
    k = g.track_curvature
    shape = (along.size, lateral.size)
    lateral_grid = np.broadcast_to(lateral[None, :], shape).astype(np.float64)
    along_grid = np.broadcast_to(along[:, None], shape)
    world_z = _arc_inverse(along, k)[:, None] / np.maximum(1 + k * lateral_grid, 0.05)
    world_x = g.track_centre_x(world_z) + lateral_grid
    camera_x = g.track_centre_x(_arc_inverse(np.maximum(along - reference_advance_m, 0.1), k))[:, None] + lateral_grid
    texel = np.float32(min(lateral_step, along_step) ** 0.7 * max(lateral_step, along_step) ** 0.3 + 1e-6)
    return _GroundView(
        x=camera_x.astype(np.float32), z=np.empty(0, dtype=np.float32), distance=np.empty(0, dtype=np.float32),
        texel=np.broadcast_to(texel, shape), lateral=lateral_grid, along=along_grid,
        lateral_filter=np.broadcast_to(_AA_FILTER * lateral_step + 1e-6, shape),
        along_filter=np.broadcast_to(_AA_FILTER * along_step + 1e-6, shape),
        world_x=world_x.astype(np.float32), world_z=world_z.astype(np.float32),
        grid_steps=(along_step, lateral_step))


def _arc_inverse(along: np.ndarray, curvature: float) -> np.ndarray:
    """Forward distance Z whose centreline arc length is ``along`` (inverse of ``_arc_length``)."""
    w = np.asarray(along, dtype=np.float64).copy()
    if abs(curvature) < 1e-12:
        return w
    for _ in range(6):  # Newton, as TrackPose does
        w = w - (_arc_length(w, curvature) - along) / np.sqrt(1 + (curvature * w) ** 2)
    return w


def _colour(bgr: BGR, scale: float = 1.0) -> np.ndarray:
    return np.asarray(bgr, dtype=np.float32) * np.float32(scale)


def _tinted(colour: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """``colour`` (3 channels) times a float32 ``factor`` per texel (H x W, or N): ``factor``'s shape x 3,
    numpy's values (``colour * factor[..., None]``) in OpenCV's channel passes, several times faster
    than the broadcast."""
    tinted = cv2.multiply(cv2.cvtColor(factor.reshape(-1, factor.shape[-1]), cv2.COLOR_GRAY2BGR),
                          (*colour.tolist(), 0.0))
    return tinted.reshape(*factor.shape, 3)


def _smoothstep(edge0: np.ndarray | float, edge1: np.ndarray | float, x: np.ndarray) -> np.ndarray:
    t = np.clip((x - edge0) / (edge1 - edge0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _blend(base: np.ndarray, colour: np.ndarray, weight: np.ndarray) -> None:
    """In place: base <- base + (colour - base) * weight, weight being H x W (or broadcasting to it).

    On an image or a clip texture's block (``base`` rows x columns x 3) only the rows and columns where
    the weight is not zero are blended (elsewhere the blend leaves ``base`` as it is): a rail's or a
    fastener's coverage spans a few columns of a wide block.
    """
    if base.ndim == 3 and weight.ndim == 2:
        block = []
        for axis, size in enumerate(weight.shape):
            reached = np.flatnonzero(weight.any(axis=1 - axis))
            if reached.size == 0:
                return
            # A weight of one row (or column) broadcasts along that axis: all of it is reached.
            block.append(slice(int(reached[0]), int(reached[-1]) + 1) if size > 1 else slice(None))
        base = base[tuple(block)]
        weight = weight[tuple(block)]
        if colour.ndim == 3:
            colour = colour[tuple(part if size > 1 else slice(None)
                                  for part, size in zip(block, colour.shape[:2], strict=True))]
    weight = weight.astype(np.float32, copy=False)
    if (base.ndim == 3 and base.shape[2] == 3 and base.dtype == np.float32
            and (colour.shape == base.shape or colour.size == 3)):
        # OpenCV's passes, channel by channel: numpy's values, without its slow broadcasts.
        weights = cv2.cvtColor(np.ascontiguousarray(np.broadcast_to(weight, base.shape[:2])), cv2.COLOR_GRAY2BGR)
        towards = (cv2.subtract(colour, base) if colour.shape == base.shape
                   else cv2.subtract((*colour.ravel().tolist(), 0.0), base))
        cv2.multiply(towards, weights, dst=towards)
        cv2.add(base, towards, dst=base)
        return
    base += (colour - base) * weight[..., None]


def _interval_coverage(x: np.ndarray, width: np.ndarray, lo: np.ndarray | float,
                       hi: np.ndarray | float) -> np.ndarray:
    """Fraction of the box [x - width/2, x + width/2] inside [lo, hi]."""
    overlap = np.minimum(x + width / 2, hi) - np.maximum(x - width / 2, lo)
    return np.clip(overlap / width, 0.0, 1.0)


def _periodic_coverage(x: np.ndarray, width: np.ndarray, period: float, start: float,
                       length: float) -> np.ndarray:
    """Fraction of the box [x - width/2, x + width/2] inside [start + k*period, +length] for any k."""
    def covered_up_to(t: np.ndarray) -> np.ndarray:
        k = np.floor((t - start) / period)
        return k * length + np.clip(t - start - k * period, 0.0, length)

    return (covered_up_to(x + width / 2) - covered_up_to(x - width / 2)) / width


def _pixel_footprint(field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel |d field / du| and |d field / dv| (central differences)."""
    return np.abs(np.gradient(field, axis=1)), np.abs(np.gradient(field, axis=0))


def _texel_size(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Pixel footprint side on a plane mapped by (x, z), for texture filtering.

    Foreshortening makes the footprint long in v and short in u; filtering with the long side
    would smear everything, so take a mean biased to the short side and accept a little noise
    aliasing along v.
    """
    xu, xv = np.gradient(x, axis=1), np.gradient(x, axis=0)
    zu, zv = np.gradient(z, axis=1), np.gradient(z, axis=0)
    across, up = np.hypot(xu, zu), np.hypot(xv, zv)
    return (np.minimum(across, up) ** 0.7 * np.maximum(across, up) ** 0.3).astype(np.float32) + np.float32(1e-6)


def _resolvable(wavelength: float, texel: np.ndarray) -> np.ndarray:
    """1 where a pattern of this wavelength spans 3+ texels, fading to 0 at 1.5 texels."""
    return np.clip(wavelength / (1.5 * texel) - 1, 0.0, 1.0)


class _SmoothNoise:
    """Multi-octave value noise on a wrapped random lattice, sampled with ``cv2.remap``."""

    _LATTICE = 256
    _UNIT_STD = 1.0 / 0.856  # bicubic interpolation shrinks the lattice's unit variance

    def __init__(self, rng: np.random.Generator, grid_steps: tuple[float, float] | None = None) -> None:
        """A lattice drawn from ``rng``; ``grid_steps`` (metres between rows, between columns) says the
        points sampled form a regular grid, so octaves many grid steps long may be sampled on a
        coarser grid and interpolated (a clip's textures; pixels of a perspective view never)."""
        self._rng = rng
        self._lattice = rng.standard_normal((self._LATTICE, self._LATTICE), dtype=np.float32)
        self._grid_steps = grid_steps

    def fbm(self, x: np.ndarray, y: np.ndarray, wavelength: float, octaves: int,
            texel: np.ndarray | None = None, gain: float = 0.5) -> np.ndarray:
        """Roughly unit-variance noise; octaves under ~3 texels per wavelength fade out."""
        total = np.zeros(x.shape, dtype=np.float32)
        energy = 0.0
        # A clip texture's texels are all one size (broadcast): one weight per octave, not a field.
        uniform = self._grid_steps is not None and texel is not None and not any(texel.strides)
        for octave in range(octaves):
            lam = wavelength / 2**octave
            angle = self._rng.uniform(0, 2 * math.pi)  # rotated octaves hide the lattice axes
            shift = self._rng.uniform(0, self._LATTICE, 2)
            amplitude = gain**octave
            energy += amplitude**2
            if texel is None:
                total += amplitude * self._sample(x, y, lam, angle, shift)
                continue
            if uniform:
                if (weight := amplitude * _resolvable(lam, texel.flat[0])) > 0:
                    total += weight * self._sample_grid(x, y, lam, angle, shift)
                continue
            weight = amplitude * _resolvable(lam, texel)
            active_rows = np.flatnonzero(weight.max(axis=1) > 0)
            if active_rows.size == 0:
                continue
            rows = slice(int(active_rows[0]), None)  # footprint grows up the image: skip far rows
            if self._grid_steps is not None:
                total[rows] += weight[rows] * self._sample_grid(x[rows], y[rows], lam, angle, shift)
            else:
                total[rows] += weight[rows] * self._sample(x[rows], y[rows], lam, angle, shift)
        return total / np.float32(math.sqrt(energy))

    def _sample_grid(self, x: np.ndarray, y: np.ndarray, wavelength: float, angle: float,
                     shift: np.ndarray) -> np.ndarray:
        """``_sample`` on a regular grid: at 4+ points per wavelength on a grid 2^k times coarser,
        then bicubic-interpolated back (a smooth field: the same noise, far fewer lattice lookups;
        8+ points gave the clip test scenes' SSIM at most 0.001 more for 8 % more shading time)."""
        assert self._grid_steps is not None
        steps = [max(1, min(64, 2 ** math.floor(math.log2(max(wavelength / (4 * step), 1.0)))))
                 for step in self._grid_steps]
        if steps == [1, 1]:
            return self._sample(x, y, wavelength, angle, shift)
        h, w = x.shape
        rows = np.minimum(np.arange(-(-h // steps[0])) * steps[0] + steps[0] // 2, h - 1)
        cols = np.minimum(np.arange(-(-w // steps[1])) * steps[1] + steps[1] // 2, w - 1)
        coarse = self._sample(np.ascontiguousarray(x[np.ix_(rows, cols)]),
                              np.ascontiguousarray(y[np.ix_(rows, cols)]), wavelength, angle, shift)
        fine = cv2.resize(coarse, (cols.size * steps[1], rows.size * steps[0]), interpolation=cv2.INTER_CUBIC)
        return fine[:h, :w]

    @classmethod
    def _wrap(cls, coordinate: np.ndarray) -> np.ndarray:
        """Into [0, lattice]: remap's fixed-point maps overflow on large coordinates."""
        size = np.float32(cls._LATTICE)
        return coordinate - size * np.floor(coordinate * (1 / size))  # much faster than np.mod

    def _sample(self, x: np.ndarray, y: np.ndarray, wavelength: float, angle: float,
                shift: np.ndarray) -> np.ndarray:
        c, s = math.cos(angle) / wavelength, math.sin(angle) / wavelength
        map_x = self._wrap(cv2.addWeighted(x, c, y, -s, shift[0]))
        map_y = self._wrap(cv2.addWeighted(x, s, y, c, shift[1]))
        sampled = cv2.remap(self._lattice, map_x, map_y, cv2.INTER_CUBIC, borderMode=cv2.BORDER_WRAP)
        return sampled * np.float32(self._UNIT_STD)


# -- sky -----------------------------------------------------------------------------------------
_SUN_GLOW = MappingProxyType({"normal": 0.25, "overcast": 0.0, "fog": 0.05, "dusk": 0.7})
_SUN_COLOUR: BGR = (0.75, 0.92, 1.0)
_CLOUD_ALTITUDE_M = 1500.0


def _sun_direction(spec: BackgroundSpec) -> np.ndarray:
    azimuth, elevation = math.radians(spec.sun_azimuth_deg), math.radians(spec.sun_elevation_deg)
    return np.array([math.cos(elevation) * math.sin(azimuth), math.sin(elevation),
                     math.cos(elevation) * math.cos(azimuth)], dtype=np.float32)


def _render_sky(spec: BackgroundSpec, rows: int, rng: np.random.Generator) -> np.ndarray:
    g = spec.geometry
    ru = ((np.arange(g.width, dtype=np.float32) - g.cx) / g.focal_px)[None, :]
    rv = ((np.arange(rows, dtype=np.float32) - g.cy) / g.focal_px)[:, None]
    s, c = math.sin(g.pitch_rad), math.cos(g.pitch_rad)
    up, forward = -(rv * c + s), c - rv * s  # world ray components per unit optical depth
    length = np.sqrt(ru * ru + rv * rv + 1)
    sin_elevation = np.clip(up / length, 0.0, 1.0)

    horizon, zenith = _colour(spec.fog_colour_bgr, 1 / 255), _colour(spec.sky_zenith_bgr, 1 / 255)
    gradient = 1 - np.exp(-sin_elevation / 0.3)
    sky = horizon + (zenith - horizon) * gradient[..., None]

    sun = _sun_direction(spec)
    cos_to_sun = (ru * sun[0] + up * sun[1] + forward * sun[2]) / length
    glow = _SUN_GLOW[spec.condition] * (np.exp((cos_to_sun - 1) / 0.002) + 0.35 * np.exp((cos_to_sun - 1) / 0.08))
    sky += _colour(_SUN_COLOUR) * glow[..., None]

    if spec.cloud_cover > 0:
        _add_clouds(sky, spec, ru, up, forward, sin_elevation, glow, rng)
    return np.clip(sky, 0.0, 1.0)


def _add_clouds(sky: np.ndarray, spec: BackgroundSpec, ru: np.ndarray, up: np.ndarray,
                forward: np.ndarray, sin_elevation: np.ndarray, glow: np.ndarray,
                rng: np.random.Generator) -> None:
    """Clouds on a horizontal plane high above, so they shrink and thin toward the horizon."""
    reach = _CLOUD_ALTITUDE_M / np.maximum(up, 1e-3)
    x = np.broadcast_to(reach * ru, sky.shape[:2]).astype(np.float64)
    z = np.broadcast_to(reach * forward, sky.shape[:2]).astype(np.float64)
    texel = _texel_size(x, z)
    noise = _SmoothNoise(rng)
    x, z = x.astype(np.float32), z.astype(np.float32)
    shape = noise.fbm(x, z, 2500.0, 6, texel)
    shading = noise.fbm(x, z, 600.0, 3, texel)
    threshold = 1.0 - 2.2 * spec.cloud_cover
    density = _smoothstep(threshold - 0.2, threshold + 0.6, shape) * _smoothstep(0.0, 0.1, sin_elevation)
    base = {"normal": (0.95, 0.95, 0.95), "overcast": (0.62, 0.62, 0.63),
            "fog": (0.8, 0.8, 0.8), "dusk": (0.30, 0.24, 0.28)}[spec.condition]
    # Thick cores are darker underneath; sunlight near the sun rims them.
    brightness = (0.92 + 0.05 * shading - 0.15 * density)[..., None]
    cloud = _colour(base) * brightness + _colour(_SUN_COLOUR) * glow[..., None] * 0.6
    _blend(sky, cloud, 0.9 * density)


# -- ground --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _GroundView:
    """Per-pixel ground coordinates of the rows below the horizon."""

    x: np.ndarray               # float32 world X
    z: np.ndarray               # float32 world Z
    distance: np.ndarray        # camera distance (m)
    texel: np.ndarray           # footprint side on the ground (m), for texture filtering
    lateral: np.ndarray         # X - X(Z): signed offset from the ego centreline (m)
    along: np.ndarray           # arc length along the ego track of the perpendicular foot (m)
    lateral_filter: np.ndarray  # anti-aliasing box width across the track (m)
    along_filter: np.ndarray    # anti-aliasing box width along the track (m)
    world_x: np.ndarray         # float32 X, Z in the world frame, where textures are evaluated (the
    world_z: np.ndarray         # camera frame unless the camera has moved along the track)
    grid_steps: tuple[float, float] | None = None  # a clip texture's (along, lateral) spacing, metres


def _ground_view(g: CameraGeometry, first_row: int, pose: TrackPose | None = None,
                 texel: bool = True) -> _GroundView:
    """Per-pixel ground coordinates of the rows from ``first_row`` down, seen from ``pose``; ``texel``
    False leaves out the footprint sizes that filter the noise (a clip's frame view samples textures)."""
    rows = np.arange(first_row, g.height, dtype=np.float64)[:, None]
    cols = np.arange(g.width, dtype=np.float64)[None, :]
    x, z = g.ground_point(cols, rows)
    z = np.broadcast_to(z, x.shape)
    lateral = x - g.track_centre_x(z)
    # Sleepers lie perpendicular to the track: follow the normal back to the centreline.
    along = _arc_length(z + g.track_curvature * z * lateral, g.track_curvature)
    lateral_u, lateral_v = _pixel_footprint(lateral)
    along_u, along_v = _pixel_footprint(along)
    x32, z32 = x.astype(np.float32), z.astype(np.float32)
    world_x, world_z = x32, z32
    if pose is not None and pose.advance_m != 0:
        along = along + pose.advance_m
        wx, wz = pose.to_world(x, z)
        world_x, world_z = wx.astype(np.float32), wz.astype(np.float32)
    return _GroundView(
        x=x32, z=z32, world_x=world_x, world_z=world_z,
        distance=np.sqrt(x * x + z * z + g.height_m**2).astype(np.float32),
        texel=_texel_size(x, z) if texel else np.empty(0, dtype=np.float32), lateral=lateral, along=along,
        lateral_filter=_AA_FILTER * (lateral_u + lateral_v) + 1e-6,
        along_filter=_AA_FILTER * (along_u + along_v) + 1e-6)


def _arc_length(z: np.ndarray, curvature: float) -> np.ndarray:
    """Length of the centreline X = 0.5 k Z^2 from Z = 0 to z."""
    if abs(curvature) < 1e-12:
        return z
    q = curvature * z
    return 0.5 * (z * np.sqrt(1 + q * q) + np.arcsinh(q) / curvature)


@dataclass(frozen=True)
class _TrackBand:
    """The pixels near one track, flattened, so track painting skips the rest of the ground; on a clip
    texture's grid a block of columns, where what depends on the column (lateral) or the row (along)
    alone is kept as one row or one column and broadcast."""

    pixels: np.ndarray | tuple[slice, slice]  # boolean selector over the ground rows, or a grid's block
    lateral: np.ndarray         # offset from this track's centreline (m)
    centreline_x: np.ndarray    # world X of this track's centreline at the pixel's Z
    along: np.ndarray
    lateral_filter: np.ndarray
    along_filter: np.ndarray
    ballast: np.ndarray         # noise fields, shared by both tracks
    stones: np.ndarray
    crevices: np.ndarray
    surface: np.ndarray
    bed_edge: np.ndarray
    rail_wear: np.ndarray


def _track_band(view: _GroundView, track_offset_m: float, reach_m: float, textures: Mapping[str, np.ndarray]
                ) -> _TrackBand:
    if view.grid_steps is not None:
        return _grid_track_band(view, track_offset_m, reach_m, textures)
    lateral = view.lateral - track_offset_m
    pixels = np.abs(lateral) < reach_m + view.lateral_filter  # beyond this every coverage is zero
    return _TrackBand(pixels=pixels, lateral=lateral[pixels], centreline_x=view.x[pixels] - lateral[pixels],
                      along=view.along[pixels], lateral_filter=view.lateral_filter[pixels],
                      along_filter=view.along_filter[pixels],
                      **{name: field[pixels] for name, field in textures.items()})


def _grid_track_band(view: _GroundView, track_offset_m: float, reach_m: float, textures: Mapping[str, np.ndarray]
                     ) -> _TrackBand:
    """``_track_band`` on a clip texture's grid: each column keeps one lateral position and each row one
    position along the track, so the band is a block of columns and its coverages by lateral position
    (rails, fasteners, sleeper ends) cost one row, those along the track (sleepers) one column."""
    columns = _band_columns(view, track_offset_m, reach_m)
    lateral = view.lateral[:1, columns] - track_offset_m
    # The world X of the track's centreline on each row: any column's X less its lateral position.
    centreline_x = (view.x[:, :1] - (view.lateral[:, :1] - track_offset_m)).astype(np.float32)
    return _TrackBand(pixels=(slice(None), columns), lateral=lateral, centreline_x=centreline_x,
                      along=view.along[:, :1], lateral_filter=view.lateral_filter[:1, columns],
                      along_filter=view.along_filter[:, :1],
                      **{name: field[:, columns] for name, field in textures.items()})


def _render_ground(spec: BackgroundSpec, first_row: int, rng: np.random.Generator,
                   pose: TrackPose | None = None) -> np.ndarray:
    view = _ground_view(spec.geometry, first_row, pose)
    lit = _shade_ground(spec, view, rng)
    transmission = spec.transmission(view.distance).astype(np.float32)[..., None]
    return lit * transmission + _colour(spec.fog_colour_bgr, 1 / 255) * (1 - transmission)


def _shade_ground(spec: BackgroundSpec, view: _GroundView, rng: np.random.Generator) -> np.ndarray:
    """Lit ground colour (before fog) at every point of ``view``: pixels, or a clip's texture grid."""
    g = spec.geometry
    noise = _SmoothNoise(rng, view.grid_steps)
    albedo = _terrain_albedo(spec, view, noise)
    track_offsets = [0.0] + ([spec.neighbour_side * spec.neighbour_spacing_m] if spec.neighbour_side else [])
    bed_reach = spec.bed_half_width_m + 0.5
    textures = _track_textures(view, noise, _track_columns(view, track_offsets, bed_reach))
    sleeper_shades = rng.uniform(0.8, 1.15, 1024).astype(np.float32)
    phase = float(rng.uniform(0, spec.sleeper_spacing_m))

    for offset in track_offsets:
        band = _track_band(view, offset, bed_reach, textures)
        patch = albedo[band.pixels]
        if spec.track_type == "ballasted":
            _paint_ballasted_bed(patch, spec, band, phase, sleeper_shades)
        else:
            _paint_slab_bed(patch, spec, band, phase)
        albedo[band.pixels] = patch

    lit = albedo * _colour(spec.illumination_bgr) * _cloud_shadow(spec, view, noise)[..., None]
    rail_reach = g.gauge_m / 2 + g.rail_head_m + 0.3
    for offset in track_offsets:
        band = _track_band(view, offset, rail_reach, textures)
        patch = lit[band.pixels]
        _paint_rails(patch, spec, band)
        lit[band.pixels] = patch
    return lit


def _band_columns(view: _GroundView, track_offset_m: float, reach_m: float) -> slice:
    """The columns of a clip texture's grid (each one lateral position) within ``reach_m`` of the
    track at ``track_offset_m``, widened by the anti-aliasing filter (beyond them every coverage is zero)."""
    inside = np.flatnonzero(np.abs(view.lateral[0] - track_offset_m) < reach_m + view.lateral_filter[0])
    return slice(int(inside[0]), int(inside[-1]) + 1) if inside.size else slice(0, 0)


def _track_columns(view: _GroundView, offsets: list[float], reach_m: float) -> slice:
    """A clip texture's columns that the track bands within ``reach_m`` of ``offsets`` take in; all
    columns of a pixel view (its lateral position varies along a row)."""
    if view.grid_steps is None:
        return slice(None)
    bands = [b for b in (_band_columns(view, offset, reach_m) for offset in offsets) if b.stop > b.start]
    return slice(min(b.start for b in bands), max(b.stop for b in bands)) if bands else slice(0, 0)


def _track_textures(view: _GroundView, noise: _SmoothNoise, columns: slice) -> dict[str, np.ndarray]:
    """The noise fields only the track beds and rails use, on ``columns`` of the view (zero beside
    them: no track band reads there). A clip texture is much wider than its tracks; its bands
    shade the fields on the tracks' columns only (their coarse octaves then fall on a grid from
    the first of them: the same noise, resampled from other lattice points)."""
    part = view if columns == slice(None) else replace(
        view, **{name: getattr(view, name)[:, columns] for name in
                 ("x", "texel", "lateral", "along", "lateral_filter", "along_filter", "world_x", "world_z")})
    x, z, texel = part.world_x, part.world_z, part.texel
    fields = {
        "ballast": noise.fbm(x, z, 0.6, 3, texel),
        "stones": noise.fbm(x, z, 0.1, 3, texel, gain=0.6),
        "crevices": _crevices(part, noise),
        "surface": noise.fbm(x, z, 1.5, 4, texel),
        "bed_edge": noise.fbm(x, z, 3.0, 3, texel),
        "rail_wear": noise.fbm(x, z, 4.0, 3, texel),
    }
    if part is view:
        return fields
    full = {}
    for name, field in fields.items():
        full[name] = np.zeros(view.world_x.shape, dtype=np.float32)
        full[name][:, columns] = field
    return full


def _crevices(view: _GroundView, noise: _SmoothNoise, wavelength: float = 0.07) -> np.ndarray:
    """Dark network along the zero crossings of a noise field: the gaps between ballast stones.

    Where the stones are too small to resolve it becomes its mean, keeping the far bed's tone.
    """
    width = 0.4
    crossing = np.exp(-((noise.fbm(view.world_x, view.world_z, wavelength, 1) / width) ** 2))
    mean = 1 / math.sqrt(1 + 2 / width**2)  # E[exp(-(n / width)^2)] for unit normal n
    weight = _resolvable(wavelength, view.texel)
    return weight * crossing + (1 - weight) * np.float32(mean)


def _terrain_albedo(spec: BackgroundSpec, view: _GroundView, noise: _SmoothNoise) -> np.ndarray:
    detail = noise.fbm(view.world_x, view.world_z, 1.2, 7, view.texel, gain=0.75)
    patches = noise.fbm(view.world_x, view.world_z, 30.0, 4, view.texel)
    soil = noise.fbm(view.world_x, view.world_z, 12.0, 3, view.texel)
    grass = _tinted(_colour(spec.grass_albedo_bgr), 1 + 0.4 * np.tanh(detail))
    # Large patches drift between lush and dry grass (less blue, more red).
    drift = _tinted(np.array([-1.0, 0.2, 1.0], dtype=np.float32), 0.12 * patches)
    cv2.multiply(grass, cv2.add(drift, (1.0, 1.0, 1.0, 0.0), dst=drift), dst=grass)
    dirt = _tinted(_colour(spec.dirt_albedo_bgr), 1 + 0.2 * detail)
    threshold = 1.2 - 2.4 * spec.dirt_fraction
    # A trodden cess path runs beside every track bed.
    # A clip texture's columns each keep one lateral position: one row of them is enough.
    lateral = view.lateral if view.grid_steps is None else view.lateral[:1]
    near_track = _smoothstep(spec.bed_half_width_m + 1.8, spec.bed_half_width_m + 0.6, np.abs(lateral))
    dirt_weight = np.maximum(_smoothstep(threshold - 0.3, threshold + 0.3, soil), 0.7 * near_track)
    _blend(grass, dirt, dirt_weight)
    return grass


def _cloud_shadow(spec: BackgroundSpec, view: _GroundView, noise: _SmoothNoise) -> np.ndarray:
    """Broken cloud shadows; only direct sun under a partly clouded sky casts them."""
    if spec.condition != "normal":
        return np.ones(view.x.shape, dtype=np.float32)
    shadow = noise.fbm(view.world_x, view.world_z, 150.0, 2, view.texel)
    threshold = 1.0 - 2.2 * spec.cloud_cover
    return 1 - 0.35 * _smoothstep(threshold - 0.2, threshold + 0.4, shadow)


def _paint_ballasted_bed(albedo: np.ndarray, spec: BackgroundSpec, band: _TrackBand, phase: float,
                         sleeper_shades: np.ndarray) -> None:
    g = spec.geometry
    lateral, lateral_filter = band.lateral, band.lateral_filter
    stones = 0.25 * np.tanh(1.3 * band.stones) + 0.12 * band.ballast - 0.5 * band.crevices
    ballast = _tinted(_colour(spec.ballast_albedo_bgr, 1.1), 1 + stones)
    ballast *= (1 - 0.2 * np.exp(-(lateral / 0.45) ** 2))[..., None].astype(np.float32)  # oil/rust between rails
    edge = spec.bed_half_width_m + 0.15 * band.bed_edge
    softness = np.maximum(0.15, lateral_filter)
    _blend(albedo, ballast, 1 - _smoothstep(edge - softness, edge + softness, np.abs(lateral)))

    sleeper_cover = (_periodic_coverage(band.along, band.along_filter, spec.sleeper_spacing_m, phase, SLEEPER_DEPTH_M)
                     * _interval_coverage(lateral, lateral_filter, -SLEEPER_LENGTH_M / 2, SLEEPER_LENGTH_M / 2))
    base = (0.52, 0.54, 0.55) if spec.sleeper_material == "concrete" else (0.12, 0.17, 0.22)
    # Per-sleeper shading is only resolvable while one sleeper spans several pixels.
    resolvable = np.clip(spec.sleeper_spacing_m / band.along_filter / 3 - 1, 0.0, 1.0).astype(np.float32)
    shade = 1 + (sleeper_shades[_sleeper_shade_index(band.along, phase, spec.sleeper_spacing_m,
                                                     sleeper_shades.size)] - 1) * resolvable
    sleeper = _tinted(_colour(base), shade * (1 + 0.12 * band.surface))
    _blend(albedo, sleeper, sleeper_cover)

    clip_lateral = _rail_side_coverage(lateral, lateral_filter, g, 0.09)
    clip_along = _periodic_coverage(band.along, band.along_filter, spec.sleeper_spacing_m,
                                    phase + SLEEPER_DEPTH_M / 2 - 0.06, 0.12)
    _blend(albedo, _colour((0.16, 0.16, 0.17)), clip_lateral * clip_along)


def _sleeper_shade_index(along: np.ndarray, phase: float, spacing_m: float, shades: int) -> np.ndarray:
    """Which of ``shades`` per-sleeper shades each ground point's sleeper takes (sleepers numbered
    along the track, the numbers wrapping round). Wrapped before the cast to integers: near the
    horizon of a curved track the distance along it runs to 1e20 m and more, past int64's range."""
    return np.mod(np.floor((along - phase) / spacing_m), shades).astype(np.int64)


def _paint_slab_bed(albedo: np.ndarray, spec: BackgroundSpec, band: _TrackBand, phase: float) -> None:
    g = spec.geometry
    lateral, lateral_filter = band.lateral, band.lateral_filter
    grit = 0.2 * band.stones + 0.1 * band.ballast - 0.4 * band.crevices
    gravel = _tinted(_colour(spec.ballast_albedo_bgr, 0.85), 1 + grit)
    edge = spec.bed_half_width_m + 0.1 * band.bed_edge
    softness = np.maximum(0.1, lateral_filter)
    _blend(albedo, gravel, 1 - _smoothstep(edge - softness, edge + softness, np.abs(lateral)))

    slab = _tinted(_colour((0.60, 0.62, 0.63)), 1 + 0.1 * band.surface + 0.05 * band.stones)
    slab_cover = _interval_coverage(lateral, lateral_filter, -SLAB_HALF_WIDTH_M, SLAB_HALF_WIDTH_M)
    _blend(albedo, slab, slab_cover)
    edge_line = (_interval_coverage(lateral, lateral_filter, -SLAB_HALF_WIDTH_M, -SLAB_HALF_WIDTH_M + 0.05)
                 + _interval_coverage(lateral, lateral_filter, SLAB_HALF_WIDTH_M - 0.05, SLAB_HALF_WIDTH_M))
    joints = _periodic_coverage(band.along, band.along_filter, SLAB_JOINT_SPACING_M, phase, 0.03) * slab_cover
    _blend(albedo, _colour((0.30, 0.31, 0.32)), np.maximum(joints, 0.6 * edge_line))

    plate_lateral = _rail_side_coverage(lateral, lateral_filter, g, 0.12)
    plate_along = _periodic_coverage(band.along, band.along_filter, FASTENER_SPACING_M, phase, 0.2)
    _blend(albedo, _colour((0.20, 0.20, 0.21)), plate_lateral * plate_along)


def _rail_side_coverage(lateral: np.ndarray, width: np.ndarray, g: CameraGeometry, reach: float) -> np.ndarray:
    """Coverage of the strips of ``reach`` metres either side of both rail heads (fasteners)."""
    inner, outer = g.gauge_m / 2, g.gauge_m / 2 + g.rail_head_m
    cover = np.zeros_like(lateral)
    for sign in (-1.0, 1.0):
        lo, hi = sorted((sign * (inner - reach), sign * inner))
        cover += _interval_coverage(lateral, width, lo, hi)
        lo, hi = sorted((sign * outer, sign * (outer + reach)))
        cover += _interval_coverage(lateral, width, lo, hi)
    return cover


def _paint_rails(lit: np.ndarray, spec: BackgroundSpec, band: _TrackBand) -> None:
    """Rails in lit colours: rusty side, dark head edges, polished top reflecting the sky."""
    g = spec.geometry
    lateral, lateral_filter = band.lateral, band.lateral_filter
    illumination = _colour(spec.illumination_bgr)
    side_colour = _colour((0.13, 0.16, 0.21)) * illumination
    edge_colour = _colour((0.30, 0.31, 0.33)) * illumination
    top_colour = (_colour((0.55, 0.56, 0.58)) * illumination * (1 + 0.06 * band.rail_wear[..., None])
                  + 0.35 * _colour(spec.fog_colour_bgr, 1 / 255))
    half_head = g.rail_head_m / 2
    for sign in (-1.0, 1.0):
        rail_centre = sign * (g.gauge_m / 2 + half_head)
        rail_x = band.centreline_x + rail_centre
        # The side facing the camera shows as a thin band next to the head, toward X = 0.
        facing = -np.sign(rail_x)
        near_edge = rail_centre + facing * half_head
        far_end = near_edge + facing * np.abs(rail_x) * RAIL_VISIBLE_DEPTH_M / (g.height_m + RAIL_VISIBLE_DEPTH_M)
        side = _interval_coverage(lateral, lateral_filter, np.minimum(near_edge, far_end),
                                  np.maximum(near_edge, far_end))
        _blend(lit, side_colour, side)
        lo, hi = rail_centre - half_head, rail_centre + half_head
        _blend(lit, edge_colour, _interval_coverage(lateral, lateral_filter, lo, hi))
        _blend(lit, top_colour, _interval_coverage(lateral, lateral_filter, lo + 0.014, hi - 0.014))


# -- clutter -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Shape:
    kind: str                 # "poly" (convex, N x 2 pixels) | "ellipse" (centre, semi-axes) | "line"
    points: np.ndarray
    colour: tuple[float, float, float, float]  # premultiplied BGRA, 0-255
    thickness: int = 1
    grain: float = 0.0        # foliage grain strength: the prop's fog transmission, 0 for none

    def bounds(self) -> tuple[float, float, float, float]:
        if self.kind == "ellipse":
            (u, v), (au, av) = self.points
            return u - au, v - av, u + au, v + av
        reach = self.thickness / 2
        return (self.points[:, 0].min() - reach, self.points[:, 1].min() - reach,
                self.points[:, 0].max() + reach, self.points[:, 1].max() + reach)


@dataclass(frozen=True)
class _Prop:
    distance_m: float
    shapes: list[_Shape]
    anchor: tuple[float, float, float]  # world (x, y, z) about which it grows as the camera nears (mid-height)


class _Painter:
    """Projects props, lights and fogs them, and draws those that keep off the track area."""

    _SHIFT = 4  # sub-pixel bits for OpenCV drawing
    _MARGIN = 2  # pixels kept between a prop and the track area (anti-aliasing spill)

    def __init__(self, spec: BackgroundSpec, mask: np.ndarray, pose: TrackPose | None = None,
                 cache: dict[str, np.ndarray] | None = None, fogged: bool = True) -> None:
        self.spec = spec
        self.fogged = fogged  # False: props' colours lit but not fogged (a clip's sprites fog per frame)
        self._cache = {} if cache is None else cache  # pose-independent fields kept across a clip's frames
        self._moved: dict[tuple[float, float], tuple[ArrayLike, ArrayLike]] = {}
        self.g = spec.geometry
        self.pose = pose if pose is not None and pose.advance_m != 0 else None
        self.layer = np.zeros((self.g.height, self.g.width, 4), dtype=np.uint8)
        self.leaves = np.zeros((self.g.height, self.g.width), dtype=np.uint8)  # foliage grain strength
        self._mask_sum = self._cache.get("mask_sum")
        if self._mask_sum is None:  # a clip's frames share the track area
            self._mask_sum = self._cache["mask_sum"] = cv2.integral(mask.astype(np.uint8))
        sun = _sun_direction(spec)
        self.sun_side = float(sun[0] / max(math.hypot(sun[0], sun[2]), 1e-6))

    # The measures below take scalars or arrays of points alike (a clip re-renders its wires' 480
    # segments every frame, so they go through at once); a scalar in, a numpy scalar (or a 2-vector) out.
    def _camera_xz(self, x: ArrayLike, z: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
        """A world ground position in the (possibly advanced) camera's frame."""
        if self.pose is None:
            return x, z
        if np.ndim(x) == 0 and np.ndim(z) == 0:  # a prop's point is asked for its place, distance and scale
            key = (float(x), float(z))
            if key not in self._moved:
                self._moved[key] = self.pose.to_camera(x, z)
            return self._moved[key]
        return self.pose.to_camera(x, z)

    def project(self, x: ArrayLike, y: ArrayLike, z: ArrayLike) -> np.ndarray:
        """World points -> pixels: (u, v) for one point, N x 2 for arrays."""
        x, z = self._camera_xz(x, z)
        return np.stack(self.g.project(x, y, z), axis=-1)

    def distance_m(self, x: ArrayLike, y: ArrayLike, z: ArrayLike) -> ArrayLike:
        """Camera centre -> world point (x, y, z)."""
        x, z = self._camera_xz(x, z)
        return np.sqrt(x * x + z * z + (np.asarray(y) - self.g.height_m) ** 2)

    def pixels_per_m(self, x: ArrayLike, y: ArrayLike, z: ArrayLike) -> ArrayLike:
        """Pixels a metre spans across the view at world point (x, y, z)."""
        x, z = self._camera_xz(x, z)
        return self.g.focal_px / self.g.to_camera(x, y, z)[2]

    def final_colour(self, albedo: BGR, shade: float, distance_m: float, coverage: float = 1.0
                     ) -> tuple[float, float, float, float]:
        transmission = float(self.spec.transmission(distance_m)) if self.fogged else 1.0
        lit = np.asarray(albedo) * np.asarray(self.spec.illumination_bgr) * shade * 255
        fogged = np.clip(lit * transmission + np.asarray(self.spec.fog_colour_bgr) * (1 - transmission), 0, 255)
        return (*(fogged * coverage).tolist(), 255.0 * coverage)

    def final_colours(self, albedo: BGR, shades: np.ndarray, distance_m: np.ndarray | float,
                      coverage: np.ndarray | float = 1.0) -> list[tuple[float, float, float, float]]:
        """``final_colour`` for many shades at one or as many distances (the same arithmetic, element by element)."""
        transmission = np.broadcast_to(self.spec.transmission(distance_m) if self.fogged else 1.0, np.shape(shades))
        lit = np.asarray(albedo) * np.asarray(self.spec.illumination_bgr) * np.asarray(shades)[:, None] * 255
        fog = np.asarray(self.spec.fog_colour_bgr)
        fogged = np.clip(lit * transmission[..., None] + fog * (1 - transmission[..., None]), 0, 255)
        cover = np.broadcast_to(np.asarray(coverage, dtype=np.float64), (lit.shape[0],))
        return [(*row, 255.0 * c) for row, c in zip((fogged * cover[:, None]).tolist(), cover.tolist(), strict=True)]

    def draw(self, prop: _Prop, layer: np.ndarray | None = None) -> None:
        """Draws the prop (onto ``layer``, default the main one) unless part of it would land on
        the track area or behind the camera."""
        if self.touches_track(np.array([shape.bounds() for shape in prop.shapes])).any():
            return
        for shape in prop.shapes:
            fixed = self._fixed(shape)
            self._draw_shape(self.layer if layer is None else layer, shape, shape.colour, fixed)
            self._draw_shape(self.leaves, shape, round(255 * shape.grain), fixed)

    def add_leaf_grain(self, rng: np.random.Generator) -> None:
        """Pixel-scale brightness grain on foliage, so crowns read as leaves, not flat discs.

        The grain modulates the lit share of the colour only, hence its strength is the fog
        transmission (a fogged tree has no visible leaf texture).
        """
        leafy = self.leaves > 0
        h, w = leafy.shape
        grain = cv2.resize(rng.standard_normal((h // 2 + 1, w // 2 + 1), dtype=np.float32), (w, h),
                           interpolation=cv2.INTER_LINEAR)[leafy]
        factor = 1 + 0.35 * grain * (self.leaves[leafy] / np.float32(255))
        self.layer[leafy, :3] = np.clip(self.layer[leafy, :3] * factor[:, None], 0, 255).astype(np.uint8)

    def touches_track(self, boxes: np.ndarray) -> np.ndarray:
        """Which of N boxes (u0, v0, u1, v1) come within ``_MARGIN`` pixels of the track area; a box
        with a non-finite corner (behind the camera) counts as touching."""
        finite = np.isfinite(boxes).all(axis=1)
        safe = np.where(finite[:, None], boxes, 0.0)
        # Clipped to the image before the cast (a prop just ahead of the camera projects far out);
        # a box wholly beside the image ends up empty either way.
        u0 = np.clip(np.floor(safe[:, 0]) - self._MARGIN, 0, self.g.width).astype(np.int64)
        v0 = np.clip(np.floor(safe[:, 1]) - self._MARGIN, 0, self.g.height).astype(np.int64)
        u1 = np.clip(np.ceil(safe[:, 2]) + self._MARGIN + 1, 0, self.g.width).astype(np.int64)
        v1 = np.clip(np.ceil(safe[:, 3]) + self._MARGIN + 1, 0, self.g.height).astype(np.int64)
        return ~finite | ((u0 < u1) & (v0 < v1) & (_box_sum(self._mask_sum, u0, v0, u1, v1) > 0))

    def _fixed(self, shape: _Shape) -> np.ndarray:
        """The shape's points in OpenCV's fixed point (``_SHIFT`` fractional bits)."""
        return np.round(np.clip(shape.points, -1e5, 1e5) * (1 << self._SHIFT)).astype(np.int32)

    def _draw_shape(self, target: np.ndarray, shape: _Shape, colour: tuple[float, ...] | int,
                    fixed: np.ndarray) -> None:
        scale = 1 << self._SHIFT
        if shape.kind == "poly":
            cv2.fillConvexPoly(target, fixed, colour, cv2.LINE_AA, self._SHIFT)
        elif shape.kind == "ellipse":
            axes = (max(int(fixed[1, 0]), scale // 2), max(int(fixed[1, 1]), scale // 2))
            cv2.ellipse(target, (int(fixed[0, 0]), int(fixed[0, 1])), axes, 0, 0, 360,
                        colour, -1, cv2.LINE_AA, self._SHIFT)
        else:
            cv2.line(target, tuple(int(c) for c in fixed[0]), tuple(int(c) for c in fixed[1]),
                     colour, shape.thickness, cv2.LINE_AA, self._SHIFT)


def _render_clutter(spec: BackgroundSpec, mask: np.ndarray, rng: np.random.Generator,
                    pose: TrackPose | None = None) -> np.ndarray:
    """Premultiplied BGRA layer of everything standing on the ground, empty on the track area.

    Props are drawn where they stand in the world; with ``pose`` the camera has moved toward them
    (those behind it are left out by ``_Painter.draw``)."""
    painter = _Painter(spec, mask, pose)
    if spec.treeline_distance_m > 0:
        _draw_treeline(painter, rng)
    mast_z, props = _standing_props(painter, rng)
    for prop in sorted(props, key=lambda p: -p.distance_m):  # painter's order: far to near
        painter.draw(prop)
    painter.add_leaf_grain(rng)
    if mast_z.size:
        # OpenCV's anti-aliasing blends alpha too, so a faint sub-pixel wire drawn straight onto
        # opaque props would punch holes in them; draw the wires apart and composite them over.
        wires = np.zeros_like(painter.layer)
        _draw_wires(painter, mast_z, wires)
        _composite_over(painter.layer, wires)
    painter.layer[mask] = 0
    return painter.layer


def _standing_props(painter: _Painter, rng: np.random.Generator) -> tuple[np.ndarray, list[_Prop]]:
    """The masts' distances along the track and the props (plants, then masts), drawn from the
    clutter stream after the treeline's draws."""
    spec = painter.spec
    mast_z = np.arange(rng.uniform(4.0, 4.0 + spec.mast_spacing_m), spec.geometry.track_max_z_m,
                       spec.mast_spacing_m) if spec.mast_side else np.empty(0)
    return mast_z, _plants(painter, rng) + _masts(painter, mast_z)


def _composite_layer(image: np.ndarray, layer: np.ndarray, mask: np.ndarray) -> None:
    """In place: a premultiplied BGRA uint8 layer over an H x W x 3 float image (0-1), except on ``mask``."""
    left, top, width, height = cv2.boundingRect(cv2.extractChannel(layer, 3))  # clutter covers a part
    if width and height:
        window = (slice(top, top + height), slice(left, left + width))
        part = layer[window]
        part[mask[window]] = 0
        # Channel conversions of the unit-scaled layer: numpy's values (x / 255 in float32), fewer passes.
        unit = _unit_float(part)
        _composite_premultiplied(image[window], unit[..., 3], cv2.cvtColor(unit, cv2.COLOR_BGRA2BGR))


def _composite_premultiplied(region: np.ndarray, alpha: np.ndarray, colour: np.ndarray) -> None:
    """In place: ``region`` (a view of the float frame) <- region * (1 - alpha) + colour, ``colour``
    premultiplied. OpenCV writes into the view, twice as fast as numpy on a strided one."""
    cv2.multiply(region, cv2.cvtColor(1 - alpha, cv2.COLOR_GRAY2BGR), dst=region)
    cv2.add(region, colour, dst=region)


def _composite_over(base: np.ndarray, top: np.ndarray) -> None:
    """In place, premultiplied BGRA: base <- top + base * (1 - top alpha)."""
    covered = top[..., 3] > 0
    keep = 1 - top[covered, 3:] / np.float32(255)
    base[covered] = np.clip(np.rint(top[covered] + base[covered] * keep), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class _Sprite:
    """One prop drawn once for a clip, at a pyramid of scales: premultiplied BGRA (0-255), lit but not
    fogged, and the strength of its foliage grain (``_Painter.leaves``, 0-255). Kept in bytes: a
    sprite drawn at up to three times its first size is large, and a frame resamples it anyway."""

    anchor: tuple[float, float, float]     # the world point it grows about
    pixels_per_m: float                    # at the anchor, in frame 0
    levels: list[_SpriteLevel]
    boxes: np.ndarray                      # its shapes' boxes (u0, v0, u1, v1) about the anchor, frame-0 pixels


class _SpriteLevel(NamedTuple):
    scale: float               # against frame 0
    colour: np.ndarray         # h x w x 4 uint8
    leaves: np.ndarray | None  # h x w uint8, or None (no foliage)
    origin: np.ndarray         # the anchor's pixel in it


class _PropSprites:
    """A clip's plants and masts, drawn once as sprites, then scaled, fogged and placed per frame.

    A prop is upright and flat at one distance (``_plant`` and ``_masts`` project all its shapes at
    one Z), so a camera moving toward it sees it grow about its own point by the ratio of its depths.
    Each prop is drawn once at the largest scale the clip shows it (its nearest frame, at most
    ``_MAX_SCALE`` times frame 0's) with its colours lit but unfogged, and a pyramid of halvings; a
    frame takes the level just above its scale, resamples it into place (``cv2.warpAffine``), fogs it
    for the prop's distance in that frame, gives its foliage the stills' leaf grain (fixed in the
    image, as each still draws it) and composites the props far to near. A prop is left out of a
    frame where one of its shapes' boxes comes near the track area, as ``_Painter.draw`` leaves it
    out, and the track area stays clear.
    """

    _MAX_SCALE = 3.0
    _MAX_SIDE = 1536   # sprite pixels
    _PAD = 2

    def __init__(self, spec: BackgroundSpec, mask: np.ndarray, max_advance_m: float,
                 cache: dict[str, np.ndarray]) -> None:
        self.spec = spec
        painter = _Painter(spec, mask, fogged=False, cache=cache)
        rng = render_rng(spec.palette_seed, RenderStream.CLUTTER)
        # The treeline's draws come first in the stream, as in every still; the clip's frames draw it
        # from this canopy.
        self.canopy = _treeline_canopy(spec, rng) if spec.treeline_distance_m > 0 else None
        self.mast_z, props = _standing_props(painter, rng)
        nearest = _Painter(spec, mask, TrackPose.along(spec.geometry, max_advance_m), cache=cache)
        self.sprites = [sprite for prop in props if (sprite := self._sprite(painter, nearest, prop)) is not None]
        # The leaf grain is the stills' draw, next in the stream (``_Painter.add_leaf_grain``): fixed in the image.
        height, width = mask.shape
        self._grain = np.float32(0.35) * cv2.resize(
            rng.standard_normal((height // 2 + 1, width // 2 + 1), dtype=np.float32), (width, height),
            interpolation=cv2.INTER_LINEAR)
        self._fog = _colour(spec.fog_colour_bgr, 1 / 255)
        if self.sprites:
            self._anchors = np.array([s.anchor for s in self.sprites], dtype=np.float64).T
            self._frame0_scale = np.array([s.pixels_per_m for s in self.sprites])
            self._owners = np.concatenate([np.full(len(s.boxes), i) for i, s in enumerate(self.sprites)])
            self._boxes = np.concatenate([s.boxes for s in self.sprites])

    def _sprite(self, painter: _Painter, nearest: _Painter, prop: _Prop) -> _Sprite | None:
        x, y, z = prop.anchor
        bounds = np.array([shape.bounds() for shape in prop.shapes])
        if not np.isfinite(bounds).all():
            return None
        anchor_px = painter.project(x, y, z)
        frame0 = float(painter.pixels_per_m(x, y, z))
        closest = float(nearest.pixels_per_m(x, y, z))
        grows = closest / frame0 if 0 < closest < painter.g.focal_px / 0.5 else math.inf  # behind: the cap
        low, high = bounds[:, :2].min(axis=0), bounds[:, 2:].max(axis=0)
        extent = float((high - low).max()) + 2 * self._PAD
        scale = max(1.0, min(grows, self._MAX_SCALE, self._MAX_SIDE / extent))
        origin = scale * (anchor_px - low) + self._PAD
        size = np.ceil(scale * (high - low) + 2 * self._PAD).astype(int) + 1
        colour = np.zeros((size[1], size[0], 4), dtype=np.uint8)
        leaves = np.zeros((size[1], size[0]), dtype=np.uint8)
        for shape in prop.shapes:
            moved = _scaled_shape(shape, anchor_px, scale, origin)
            fixed = painter._fixed(moved)
            painter._draw_shape(colour, moved, moved.colour, fixed)
            if shape.grain:
                painter._draw_shape(leaves, moved, round(255 * shape.grain), fixed)
        levels = [_SpriteLevel(scale, colour, leaves if leaves.any() else None, origin)]
        while levels[-1].scale > 1.5 and min(levels[-1].colour.shape[:2]) >= 8:
            last = levels[-1]
            levels.append(_SpriteLevel(last.scale / 2, cv2.pyrDown(last.colour),
                                       None if last.leaves is None else cv2.pyrDown(last.leaves), last.origin / 2))
        boxes = bounds - np.tile(anchor_px, 2)
        return _Sprite(prop.anchor, frame0, levels, boxes)

    def composite(self, image: np.ndarray, painter: _Painter, mask: np.ndarray) -> None:
        """Composites the props seen from ``painter``'s pose onto ``image`` (H x W x 3 float, 0-1), in place."""
        if not self.sprites:
            return
        x, y, z = self._anchors
        place = painter.project(x, y, z)
        pixels_per_m = painter.pixels_per_m(x, y, z)
        grows = pixels_per_m / self._frame0_scale
        distance = painter.distance_m(x, y, z)
        in_front = (pixels_per_m > 0) & (pixels_per_m < painter.g.focal_px / 0.3) & np.isfinite(place).all(axis=1)
        boxes = np.tile(place[self._owners], 2) + grows[self._owners, None] * self._boxes
        touching = np.bincount(self._owners, weights=painter.touches_track(boxes), minlength=len(self.sprites)) > 0
        transmission = self.spec.transmission(distance)
        for index in np.argsort(-distance, kind="stable"):  # painter's order: far to near
            if in_front[index] and not touching[index]:
                self._paste(image, painter, mask, self.sprites[index], place[index], float(grows[index]),
                            float(transmission[index]))

    def _paste(self, image: np.ndarray, painter: _Painter, mask: np.ndarray, sprite: _Sprite, place: np.ndarray,
               grows: float, transmission: float) -> None:
        """One sprite, ``grows`` times its frame-0 size with its anchor at ``place``, fogged by ``transmission``."""
        level = next((lv for lv in reversed(sprite.levels) if lv.scale >= grows), sprite.levels[0])
        factor = grows / level.scale
        top_left = place - factor * level.origin
        height, width = image.shape[:2]
        u0, v0 = (max(0, math.floor(c)) for c in top_left)
        u1 = min(width, math.ceil(top_left[0] + factor * level.colour.shape[1]) + 1)
        v1 = min(height, math.ceil(top_left[1] + factor * level.colour.shape[0]) + 1)
        if u0 >= u1 or v0 >= v1:
            return
        size = (u1 - u0, v1 - v0)
        warp = np.array([[factor, 0, top_left[0] - u0], [0, factor, top_left[1] - v0]])
        placed = cv2.warpAffine(level.colour, warp, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                                borderValue=0)
        if _box_sum(painter._mask_sum, u0, v0, u1, v1):  # the track area stays clear
            placed = cv2.bitwise_and(placed, placed, mask=np.logical_not(mask[v0:v1, u0:u1]).view(np.uint8))
        placed = _unit_float(placed)
        # Fogged as ``_Painter.final_colour`` fogs: t * lit + (1 - t) * fog, premultiplied. Channel
        # conversions and per-channel products, not cv2.transform: several times faster here.
        alpha = placed[..., 3]
        fog = cv2.multiply(cv2.cvtColor(np.ascontiguousarray(alpha), cv2.COLOR_GRAY2BGR),
                           (*((1 - transmission) * self._fog).tolist(), 0.0))
        coloured = cv2.scaleAdd(cv2.cvtColor(placed, cv2.COLOR_BGRA2BGR), transmission, fog)
        if level.leaves is not None:
            grain = _unit_float(cv2.warpAffine(level.leaves, warp, size, flags=cv2.INTER_LINEAR,
                                               borderMode=cv2.BORDER_CONSTANT, borderValue=0))
            cv2.multiply(grain, self._grain[v0:v1, u0:u1], dst=grain)
            cv2.add(grain, 1.0, dst=grain)
            cv2.multiply(coloured, cv2.cvtColor(grain, cv2.COLOR_GRAY2BGR), dst=coloured)
        _composite_premultiplied(image[v0:v1, u0:u1], alpha, coloured)


_UNIT_FLOATS = (np.arange(256) / 255).astype(np.float32)


def _unit_float(image: np.ndarray) -> np.ndarray:
    """A uint8 image as float32 in [0, 1]: a table lookup, the same values as ``k / 255``, four times
    faster than ``cv2.multiply`` with a scale and a float output (numpy's cast and multiply by 1 / 255
    is quicker still, but rounds some values differently)."""
    return cv2.LUT(image, _UNIT_FLOATS)


def _box_sum(integral: np.ndarray, u0: IntOrArray, v0: IntOrArray, u1: IntOrArray, v1: IntOrArray) -> IntOrArray:
    """Sum of the image behind ``integral`` (``cv2.integral``) over columns u0:u1 and rows v0:v1 (one
    box, or arrays of them)."""
    return integral[v1, u1] - integral[v0, u1] - integral[v1, u0] + integral[v0, u0]


def _scaled_shape(shape: _Shape, anchor: np.ndarray, scale: float, origin: np.ndarray) -> _Shape:
    """The shape moved into a sprite: scaled by ``scale`` about ``anchor``, which lands on ``origin``."""
    if shape.kind == "ellipse":
        centre, axes = shape.points
        points = np.array([scale * (centre - anchor) + origin, scale * axes])
    else:
        points = scale * (shape.points - anchor) + origin
    return _Shape(shape.kind, points, shape.colour, max(1, round(shape.thickness * scale)), shape.grain)


def _treeline_canopy(spec: BackgroundSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """The treeline's canopy height per image column (m) and its foliage texture, drawn from ``rng``
    as the first frame sees them; None when the treeline shows no rows.

    The draws follow the first frame's view, so that a clip's later frames draw the same treeline,
    and the same props after it, from the same stream; a moved camera sees it nearer.
    """
    g = spec.geometry
    first_depth = spec.treeline_distance_m
    heights = _treeline_heights(g.width, g.focal_px / first_depth, rng)
    first, last, _, _ = _treeline_rows(g, heights, first_depth, float(g.project(0.0, 0.0, first_depth)[1]))
    if first >= last:
        return None
    return heights, rng.uniform(0.75, 1.05, (max(1, (last - first) // 2), max(1, g.width // 2)))


def _draw_treeline(painter: _Painter, rng: np.random.Generator | None = None,
                   canopy: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """A distant forest edge at constant Z, its canopy a row of round crowns with clearings: drawn
    from ``rng`` (``_treeline_canopy``), or the ``canopy`` a clip drew once."""
    g, spec = painter.g, painter.spec
    if canopy is None:
        assert rng is not None
        canopy = _treeline_canopy(spec, rng)
        if canopy is None:
            return
    heights, texture = canopy
    depth = spec.treeline_distance_m - (painter.pose.advance_m if painter.pose else 0.0)  # far: the turn is ignored
    foot_v = float(painter.project(0.0, 0.0, depth)[1])
    first, last, top_v, foot_v = _treeline_rows(g, heights, depth, foot_v)
    if first >= last:
        return
    rows = np.arange(first, last, dtype=np.float64)[:, None]
    cover = np.clip(rows - top_v[None, :] + 0.5, 0, 1) * np.clip(foot_v - rows + 0.5, 0, 1)
    texture = cv2.resize(texture, (g.width, last - first), interpolation=cv2.INTER_LINEAR)
    lit = np.asarray(spec.foliage_albedo_bgr) * 0.7 * np.asarray(spec.illumination_bgr) * 255
    azimuth = np.arctan((np.arange(g.width) - g.cx) / g.focal_px)
    transmission = spec.transmission(depth / np.cos(azimuth))[None, :, None]
    colour = lit * texture[..., None] * transmission + np.asarray(spec.fog_colour_bgr) * (1 - transmission)
    region = painter.layer[first:last]
    region[..., :3] = np.clip(colour * cover[..., None], 0, 255).astype(np.uint8)
    region[..., 3] = np.round(cover * 255).astype(np.uint8)


def _treeline_rows(g: CameraGeometry, heights: np.ndarray, depth: float, foot_v: float
                   ) -> tuple[int, int, np.ndarray, float]:
    """First and stop row of a treeline ``depth`` metres ahead, its canopy row per column, its foot row."""
    s, c = math.sin(g.pitch_rad), math.cos(g.pitch_rad)
    rise = heights - g.height_m
    top_v = g.cy + g.focal_px * (-rise * c - depth * s) / (-rise * s + depth * c)
    return max(0, math.floor(top_v.min())), min(g.height, math.ceil(foot_v) + 1), top_v, foot_v


def _treeline_heights(width: int, pixels_per_m: float, rng: np.random.Generator) -> np.ndarray:
    """Canopy height (m) per image column: the upper envelope of circular crowns."""
    canopy = rng.uniform(10.0, 22.0)
    radius_m = rng.uniform(3.0, 7.0, min(2000, int(2.5 * width / (5.0 * pixels_per_m)) + 1))
    centres = rng.uniform(-10.0, width + 10.0, radius_m.size)
    top_m = canopy * rng.uniform(0.55, 1.0, radius_m.size) * (1 + 0.25 * _smooth_profile(centres / width, 6, rng))
    kept = _smooth_profile(centres / width, 5, rng) < 0.8  # clearings in the forest
    radius_m, centres, top_m = radius_m[kept], centres[kept], top_m[kept]
    reach = (np.arange(width)[None, :] - centres[:, None]) / (radius_m * pixels_per_m)[:, None]
    cap = radius_m[:, None] * np.sqrt(np.clip(1 - reach * reach, 0.0, None))
    crowns = np.where(np.abs(reach) < 1, top_m[:, None] - radius_m[:, None] + cap, 0.0)
    return crowns.max(axis=0, initial=0.0)


def _smooth_profile(position: np.ndarray, knots: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-variance random curve over position in [0, 1]."""
    return np.interp(position, np.linspace(-0.1, 1.1, knots), rng.standard_normal(knots))


def _plants(painter: _Painter, rng: np.random.Generator) -> list[_Prop]:
    spec, g = painter.spec, painter.g
    far = min(g.track_max_z_m, spec.treeline_distance_m or g.track_max_z_m)
    props = []
    for _ in range(spec.tree_count):
        kind = str(rng.choice(["deciduous", "conifer", "bush"], p=[0.45, 0.2, 0.35]))
        z = 8.0 + (far - 8.0) * rng.random() ** 0.8
        side = int(rng.choice([-1, 1]))
        clearance = 4.5
        if side == spec.neighbour_side:
            clearance += spec.neighbour_spacing_m + 2.0
        if side == spec.mast_side:
            clearance = max(clearance, spec.mast_lateral_m + 1.5)
        x = float(g.track_centre_x(z)) + side * (clearance + rng.exponential(10.0))
        albedo = _jitter(rng, spec.foliage_albedo_bgr, 0.12)
        height = rng.uniform(0.8, 2.5) if kind == "bush" else rng.uniform(5.0, 16.0)
        props.append(_plant(painter, kind, x, z, height, albedo, rng))
    return props


def _plant(painter: _Painter, kind: str, x: float, z: float, height: float, albedo: BGR,
           rng: np.random.Generator) -> _Prop:
    distance = painter.distance_m(x, 0.0, z)
    shapes = []
    if kind != "bush":
        trunk_top = height * (0.35 if kind == "deciduous" else 0.2)
        shapes.append(_upright_box(painter, x, z, 0.25, 0.0, trunk_top, (0.10, 0.14, 0.18), 0.9, distance))
    if kind == "conifer":
        shapes += _conifer_crown(painter, x, z, height, albedo, distance, rng)
    else:
        radius = height * (0.45 if kind == "bush" else rng.uniform(0.25, 0.35))
        shapes += _leafy_crown(painter, x, height - radius, z, radius, albedo, distance, rng)
    return _Prop(distance, shapes, (x, height / 2, z))


def _upright_box(painter: _Painter, x: float, z: float, width: float, bottom: float, top: float,
                 albedo: BGR, shade: float, distance: float) -> _Shape:
    corners = painter.project(x + np.array([-width / 2, width / 2, width / 2, -width / 2]),
                              np.array([bottom, bottom, top, top]), z)  # the four at once
    return _Shape("poly", corners, painter.final_colour(albedo, shade, distance))


def _leafy_crown(painter: _Painter, x: float, y: float, z: float, radius: float, albedo: BGR,
                 distance: float, rng: np.random.Generator) -> list[_Shape]:
    """Overlapping leaf clumps, lit from above and from the sun's side, brightest drawn last."""
    centre = painter.project(x, y, z)
    scale = painter.pixels_per_m(x, y, z)
    count = 18
    offsets = rng.uniform(-1, 1, (count, 2)) * np.array([0.65, 0.55])
    sizes = rng.uniform(0.3, 0.55, count)
    shades = 0.7 + 0.35 * offsets[:, 1] + 0.25 * painter.sun_side * offsets[:, 0] + rng.uniform(-0.1, 0.1, count)
    colours = painter.final_colours(albedo, shades, distance)
    grain = float(painter.spec.transmission(distance))
    shapes = []
    for order in np.argsort(shades):
        (dx, dy), size = offsets[order], sizes[order]
        clump_centre = centre + np.array([dx, -dy]) * radius * scale
        axes = np.array([1.15, 1.0]) * size * radius * scale
        shapes.append(_Shape("ellipse", np.array([clump_centre, axes]), colours[order], grain=grain))
    return shapes


def _conifer_crown(painter: _Painter, x: float, z: float, height: float, albedo: BGR, distance: float,
                   rng: np.random.Generator) -> list[_Shape]:
    """Stacked triangles narrowing to the tip."""
    base_width = height * rng.uniform(0.3, 0.4)
    tiers = 4
    shapes = []
    for tier in range(tiers):
        bottom = height * (0.15 + 0.2 * tier)
        half = base_width / 2 * (1 - tier / (tiers + 0.5))
        corners = painter.project(np.array([x - half, x + half, x]),
                                  np.array([bottom, bottom, min(height, bottom + height * 0.4)]), z)
        shade = 0.7 + 0.08 * tier
        shapes.append(_Shape("poly", np.array(corners), painter.final_colour(albedo, shade * 0.85, distance),
                             grain=float(painter.spec.transmission(distance))))
    return shapes


def _masts(painter: _Painter, mast_z: np.ndarray) -> list[_Prop]:
    """Catenary masts beside the ego track, each with a cantilever reaching over the track."""
    spec, g = painter.spec, painter.g
    props = []
    for z in mast_z:
        centre = float(g.track_centre_x(z))
        x = centre + spec.mast_side * spec.mast_lateral_m
        distance = painter.distance_m(x, 0.0, z)
        albedo = (0.36, 0.36, 0.35)
        pole = _upright_box(painter, x, z, 0.3, 0.0, 7.6, albedo, 1.0, distance)
        arm = _Shape("line", painter.project(np.array([x, centre]), np.array([6.4, 6.1]), z),
                     painter.final_colour(albedo, 0.8, distance), _line_thickness(painter, x, 6.4, z, 0.08))
        stay = _Shape("line", painter.project(np.array([x, centre]), np.array([7.5, 6.15]), z),
                      painter.final_colour(albedo, 0.8, distance), _line_thickness(painter, x, 7.5, z, 0.05))
        props.append(_Prop(distance, [pole, arm, stay], (x, 3.8, z)))
    return props


def _line_thickness(painter: _Painter, x: float, y: float, z: float, width_m: float) -> int:
    return max(1, round(width_m * painter.pixels_per_m(x, y, z)))


def _draw_wires(painter: _Painter, mast_z: np.ndarray, layer: np.ndarray) -> None:
    """Contact wire and messenger wire (sagging between masts) over the ego track, as segments
    drawn onto ``layer``, each lit and fogged at its near end's distance; a segment that would touch
    the track area is left out, as ``_Painter.draw`` leaves out props."""
    g = painter.g
    advance = painter.pose.advance_m if painter.pose else 0.0
    z = np.geomspace(1.0, g.track_max_z_m, 240) + advance  # from just ahead of the (moved) camera
    span_position = np.interp(z, mast_z, np.arange(mast_z.size), left=0.0, right=0.0) % 1.0
    contact = np.full_like(z, CONTACT_WIRE_HEIGHT_M)
    messenger = MESSENGER_WIRE_HEIGHT_M - 0.8 * 4 * span_position * (1 - span_position)
    x = g.track_centre_x(z)
    scale = 1 << painter._SHIFT
    for wire_y in (contact, messenger):
        distances = painter.distance_m(x, wire_y, z)[:-1]  # every point of the wire at once
        widths_px = 0.015 * painter.pixels_per_m(x, wire_y, z)[:-1]
        ends = painter.project(x, wire_y, z)
        thickness = np.maximum(1, np.round(widths_px)).astype(int)
        colours = painter.final_colours((0.08, 0.08, 0.09), np.ones(distances.size), distances,
                                        np.minimum(1.0, widths_px))
        start, stop = ends[:-1], ends[1:]
        reach = thickness / 2
        low = np.minimum(start, stop) - reach[:, None]
        high = np.maximum(start, stop) + reach[:, None]
        # A point behind the camera projects to NaN: its segments' boxes count as touching the track.
        fixed = np.round(np.clip(np.nan_to_num(ends), -1e5, 1e5) * scale).astype(np.int32)
        for i in np.flatnonzero(~painter.touches_track(np.hstack([low, high]))):
            cv2.line(layer, (int(fixed[i, 0]), int(fixed[i, 1])), (int(fixed[i + 1, 0]), int(fixed[i + 1, 1])),
                     colours[i], int(thickness[i]), cv2.LINE_AA, painter._SHIFT)


# -- camera finish -------------------------------------------------------------------------------
def _finish(image: np.ndarray, spec: BackgroundSpec, rng: np.random.Generator) -> np.ndarray:
    """Vignetting, sensor noise and quantisation."""
    h, w = image.shape[:2]
    v = (np.arange(h, dtype=np.float32) - (h - 1) / 2)[:, None] / np.float32(h / 2)
    u = (np.arange(w, dtype=np.float32) - (w - 1) / 2)[None, :] / np.float32(w / 2)
    falloff = 1 - np.float32(spec.vignette / 2) * (u * u + v * v)
    noise = rng.standard_normal((h, w, 3), dtype=np.float32) * np.float32(spec.sensor_noise)
    out = image * falloff[..., None] * np.float32(255) + noise
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)

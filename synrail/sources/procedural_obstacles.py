"""Procedural obstacle cutouts: the offline stand-in for real (SAM-cut) obstacle galleries.

Every kind is drawn with OpenCV primitives on a canvas in object units (x right of the centre,
y up from the ground), shaded so it is never a flat fill, then cropped tight to its silhouette
and rescaled to the requested pixel height. The alpha is the drawn silhouette itself, so it is
an exact, hard (0/255) mask. All randomness comes from the caller's generator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

import cv2
import numpy as np

OBSTACLE_KINDS: tuple[str, ...] = ("person", "animal", "vehicle", "rock", "unseen_obstacle")

SIZE_PRIORS_M: Mapping[str, tuple[float, float]] = MappingProxyType({
    "person": (1.5, 1.95),
    "animal": (0.5, 1.6),  # dog .. cow
    "vehicle": (1.2, 2.2),  # car .. van / compact tractor
    "rock": (0.2, 1.0),
    "unseen_obstacle": (0.3, 1.5),
})

MIN_PIXEL_HEIGHT = 8
_MIN_WORK_HEIGHT = 128  # small cutouts are drawn at this height and shrunk, so thin parts survive

Color = tuple[float, float, float]  # B, G, R
_T = TypeVar("_T")


@dataclass(frozen=True)
class Cutout:
    """One obstacle image with an exact mask, plus the physical height it should be pasted at."""

    kind: str  # one of OBSTACLE_KINDS
    rgba: np.ndarray  # h x w x 4 uint8, B, G, R, A; A in {0, 255}; alpha bbox touches all borders
    height_m: float  # physical height of the object (the full height of ``rgba``)
    variant: str  # short description, e.g. "person/standing-front/red-top"


@dataclass(frozen=True)
class _Drawing:
    bgr: np.ndarray  # float32, 0..255, shaded
    mask: np.ndarray  # bool silhouette
    variant: str
    height_range_m: tuple[float, float]  # where height_m is drawn from (within the kind's prior)


# -- small helpers -------------------------------------------------------------------------------
def _pick(rng: np.random.Generator, options: Sequence[_T]) -> _T:
    return options[int(rng.integers(len(options)))]


def _jitter(color: Color, rng: np.random.Generator, spread: float = 10.0) -> Color:
    """A per-instance variation of a palette colour (brightness and a little hue)."""
    c = np.asarray(color, np.float64) * rng.uniform(0.85, 1.15) + rng.normal(0.0, spread, 3)
    return tuple(float(v) for v in np.clip(c, 0, 255))


def _scaled(color: Color, factor: float) -> Color:
    return tuple(min(255.0, v * factor) for v in color)


def _unit(angle: float, facing: int = 1) -> np.ndarray:
    """Direction ``angle`` radians from straight down, turned towards ``facing`` (+1 right, -1 left)."""
    return np.array([facing * math.sin(angle), -math.cos(angle)])


def _heading(angle_deg: float, facing: int) -> float:
    """Ellipse angle (degrees, counter-clockwise from +x) of an axis at ``angle_deg`` above the
    horizontal, pointing towards ``facing``."""
    return angle_deg if facing > 0 else 180.0 - angle_deg


def _fractal_noise(shape: tuple[int, int], rng: np.random.Generator, cell_px: float,
                   octaves: int = 3) -> np.ndarray:
    """Smooth value noise (about unit variance), summed over octaves of halving cell size."""
    h, w = shape
    out = np.zeros(shape, np.float32)
    amp, power = 1.0, 0.0
    for _ in range(octaves):
        if cell_px < 1.0:
            break
        grid = rng.standard_normal((int(h / cell_px) + 2, int(w / cell_px) + 2)).astype(np.float32)
        out += amp * cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)
        power += amp * amp
        amp, cell_px = amp * 0.5, cell_px * 0.5
    return out / math.sqrt(max(power, 1e-9))


# -- drawing surface -----------------------------------------------------------------------------
class _Canvas:
    """Paint in object units; each filled primitive also writes a part id into ``labels``.

    The ids are the silhouette (alpha) and let the shading round every part on its own, so an
    arm in front of a torso stays visible. ``join=True`` extends the previous part instead;
    ``paint_only=True`` only recolours (markings, windows' frames) and never grows the alpha.
    """

    _SHIFT = 4  # fixed-point bits: sub-pixel accurate outlines

    def __init__(self, px_per_unit: float, x_range: tuple[float, float],
                 y_range: tuple[float, float]) -> None:
        pad = 3
        self.scale = px_per_unit
        w = int(math.ceil((x_range[1] - x_range[0]) * px_per_unit)) + 2 * pad
        h = int(math.ceil((y_range[1] - y_range[0]) * px_per_unit)) + 2 * pad
        self.bgr = np.zeros((h, w, 3), np.uint8)
        self.labels = np.zeros((h, w), np.uint8)
        self._origin = (pad - x_range[0] * px_per_unit, h - pad + y_range[0] * px_per_unit)
        self._part = 0

    def _fixed(self, points: object) -> np.ndarray:
        p = np.asarray(points, np.float64).reshape(-1, 2)
        px = np.stack([self._origin[0] + p[:, 0] * self.scale, self._origin[1] - p[:, 1] * self.scale], 1)
        return np.round(px * (1 << self._SHIFT)).astype(np.int32)

    def _layers(self, color: Color, join: bool, paint_only: bool) -> list[tuple[np.ndarray, object]]:
        if paint_only:
            return [(self.bgr, color)]
        if not join:
            self._part = self._part % 255 + 1
        return [(self.bgr, color), (self.labels, self._part)]

    def polygon(self, points: object, color: Color, *, join: bool = False, paint_only: bool = False) -> None:
        pts = [self._fixed(points)]
        for img, value in self._layers(color, join, paint_only):
            cv2.fillPoly(img, pts, value, cv2.LINE_8, self._SHIFT)

    def ellipse(self, center: object, radii: tuple[float, float], color: Color, *, angle_deg: float = 0.0,
                join: bool = False, paint_only: bool = False) -> None:
        c = tuple(int(v) for v in self._fixed(center)[0])
        axes = tuple(max(1, round(r * self.scale * (1 << self._SHIFT))) for r in radii)
        for img, value in self._layers(color, join, paint_only):
            cv2.ellipse(img, c, axes, -angle_deg, 0, 360, value, -1, cv2.LINE_8, self._SHIFT)

    def limb(self, p0: object, p1: object, r0: float, r1: float, color: Color, *, join: bool = False) -> None:
        """A tapered capsule from p0 (radius r0) to p1 (radius r1), as one part."""
        a, b = np.asarray(p0, np.float64), np.asarray(p1, np.float64)
        d = b - a
        n = np.array([-d[1], d[0]]) / max(float(np.hypot(*d)), 1e-9)
        self.polygon([a + n * r0, b + n * r1, b - n * r1, a - n * r0], color, join=join)
        self.ellipse(a, (r0, r0), color, join=True)
        self.ellipse(b, (r1, r1), color, join=True)

    def trim(self) -> None:
        """Crop to the drawn parts plus a one-pixel frame, so shading only works where needed."""
        x, y, w, h = cv2.boundingRect((self.labels > 0).astype(np.uint8))
        y0, x0 = max(y - 1, 0), max(x - 1, 0)
        self.bgr, self.labels = self.bgr[y0:y + h + 1, x0:x + w + 1], self.labels[y0:y + h + 1, x0:x + w + 1]

    def line(self, points: object, color: Color, width: float) -> None:
        """A paint-only polyline (seams, stripes); ``width`` in object units."""
        thickness = max(1, round(width * self.scale))
        cv2.polylines(self.bgr, [self._fixed(points)], False, color, thickness, cv2.LINE_8, self._SHIFT)


# -- shading -------------------------------------------------------------------------------------
def _vertical_light(mask: np.ndarray, strength: float) -> np.ndarray:
    """Brighter top, darker bottom across the object's own height (light from the sky)."""
    rows = np.flatnonzero(mask.any(axis=1))
    t = np.clip((np.arange(mask.shape[0]) - rows[0]) / max(rows[-1] - rows[0], 1), 0, 1)
    return (1.0 + strength * (0.5 - t)).astype(np.float32)[:, None]


def _lateral_light(mask: np.ndarray, strength: float, side: int) -> np.ndarray:
    cols = np.flatnonzero(mask.any(axis=0))
    t = np.clip((np.arange(mask.shape[1]) - cols[0]) / max(cols[-1] - cols[0], 1), 0, 1)
    return (1.0 + side * strength * (t - 0.5)).astype(np.float32)[None, :]


def _part_shading(labels: np.ndarray, rng: np.random.Generator, *, rim_px: float, rim: float,
                  vertical: float, lateral: float, grain: float, grain_px: float) -> np.ndarray:
    """Darken each part towards its outline (a rounded look), light it from above and one side,
    and add a fine material grain."""
    inside = labels > 0
    border = ~inside
    change_x = labels[:, 1:] != labels[:, :-1]
    change_y = labels[1:, :] != labels[:-1, :]
    border[:, 1:] |= change_x
    border[:, :-1] |= change_x
    border[1:, :] |= change_y
    border[:-1, :] |= change_y
    dist = cv2.distanceTransform((~border).astype(np.uint8), cv2.DIST_L2, 3)
    shade = 1.0 - rim * np.exp(-dist / rim_px)
    shade *= _vertical_light(inside, vertical) * _lateral_light(inside, lateral, _pick(rng, (-1, 1)))
    return shade * (1.0 + grain * _fractal_noise(labels.shape, rng, grain_px, octaves=2))


def _dome_shading(mask: np.ndarray, rng: np.random.Generator, *, bumps: float, ambient: float) -> np.ndarray:
    """Lambert lighting of a height field that bulges from the outline inwards, plus bumps."""
    dist = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    radius = max(float(dist.max()), 1.0)
    relief = 0.8 * radius * np.sqrt(dist / radius)
    relief += bumps * radius * _fractal_noise(mask.shape, rng, radius / 3, octaves=4)
    gx = cv2.Sobel(relief, cv2.CV_32F, 1, 0, ksize=3) / 8
    gy = cv2.Sobel(relief, cv2.CV_32F, 0, 1, ksize=3) / 8
    light = np.array([_pick(rng, (-1, 1)) * rng.uniform(0.3, 0.8), -rng.uniform(0.4, 0.9), 0.7])
    light /= np.linalg.norm(light)
    # normal = (-gx, -gy, 1) / |.|, in image axes (y down)
    lambert = (-gx * light[0] - gy * light[1] + light[2]) / np.sqrt(gx * gx + gy * gy + 1)
    return (ambient + (1.0 - ambient) * 1.25 * np.clip(lambert, 0, 1)).astype(np.float32)


def _shaded(canvas: _Canvas, shade: np.ndarray) -> np.ndarray:
    return canvas.bgr.astype(np.float32) * shade[..., None]


# -- person --------------------------------------------------------------------------------------
_SKIN_TONES: tuple[Color, ...] = ((170, 195, 235), (130, 165, 215), (95, 135, 190), (65, 100, 150),
                                  (45, 65, 100))
_HAIR: tuple[Color, ...] = ((25, 25, 30), (30, 45, 70), (45, 80, 125), (110, 175, 215), (165, 165, 170))
_TOPS: tuple[tuple[str, Color], ...] = (
    ("red", (40, 45, 190)), ("blue", (170, 95, 35)), ("navy", (85, 45, 25)), ("green", (55, 125, 45)),
    ("hi-vis-yellow", (40, 235, 215)), ("hi-vis-orange", (25, 125, 250)), ("grey", (125, 125, 125)),
    ("black", (35, 35, 38)), ("white", (220, 222, 225)), ("brown", (45, 75, 120)), ("purple", (120, 45, 110)),
)
_TROUSERS: tuple[Color, ...] = ((125, 80, 45), (32, 32, 35), (95, 95, 100), (110, 155, 175), (70, 38, 25))
_SHOES: tuple[Color, ...] = ((25, 25, 28), (40, 55, 75), (200, 200, 205))
_REFLECTIVE: Color = (200, 205, 205)


@dataclass(frozen=True)
class _Outfit:
    skin: Color
    hair: Color
    top_name: str
    top: Color
    trousers: Color
    shoes: Color
    short_sleeves: bool
    long_hair: bool


def _sample_outfit(rng: np.random.Generator) -> _Outfit:
    top_name, top = _pick(rng, _TOPS)
    return _Outfit(skin=_jitter(_pick(rng, _SKIN_TONES), rng, 5), hair=_jitter(_pick(rng, _HAIR), rng, 5),
                   top_name=top_name, top=_jitter(top, rng), trousers=_jitter(_pick(rng, _TROUSERS), rng),
                   shoes=_jitter(_pick(rng, _SHOES), rng, 5), short_sleeves=bool(rng.random() < 0.3),
                   long_hair=bool(rng.random() < 0.3))


def _draw_arm(c: _Canvas, shoulder: np.ndarray, upper_angle: float, fore_angle: float, facing: int,
              sleeve: Color, forearm: Color, hand: Color, foreshorten: float = 1.0) -> None:
    elbow = shoulder + 0.165 * foreshorten * _unit(upper_angle, facing)
    wrist = elbow + 0.145 * foreshorten * _unit(fore_angle, facing)
    c.limb(shoulder, elbow, 0.034, 0.028, sleeve)
    c.limb(elbow, wrist, 0.027, 0.022, forearm, join=forearm == sleeve)
    c.ellipse(wrist + 0.025 * _unit(fore_angle, facing), (0.021, 0.03), hand,
              angle_deg=_heading(math.degrees(fore_angle) - 90, facing), join=True)


def _draw_person_front(c: _Canvas, rng: np.random.Generator, o: _Outfit, walking: bool) -> None:
    shoulder = rng.uniform(0.1, 0.125)  # half-widths in body heights
    hip = shoulder * rng.uniform(0.72, 0.85)
    stance = rng.uniform(0.0, 0.04)
    lifted = _pick(rng, (-1, 1)) if walking else 0
    for side in (-1, 1):
        lift = rng.uniform(0.03, 0.07) if side == lifted else 0.0
        top = np.array([side * hip * 0.5, 0.5])
        knee = np.array([side * (hip * 0.55 + stance * 0.5), 0.27 + 0.6 * lift])
        ankle = np.array([side * (hip * 0.55 + stance), 0.05 + lift])
        c.limb(top, knee, 0.048, 0.037, o.trousers)
        c.limb(knee, ankle, 0.037, 0.027, o.trousers, join=True)
        c.ellipse(ankle + (side * 0.006, -0.026), (0.034, 0.022), o.shoes)
    c.polygon([(-shoulder, 0.795), (-shoulder + 0.025, 0.828), (shoulder - 0.025, 0.828), (shoulder, 0.795),
               (hip + 0.012, 0.5), (hip, 0.455), (-hip, 0.455), (-hip - 0.012, 0.5)], o.top)
    if o.top_name.startswith("hi-vis"):
        for y in (0.6, 0.66):
            c.line([(-shoulder, y), (shoulder, y)], _REFLECTIVE, 0.018)
    _draw_head_front(c, rng.uniform(0.058, 0.066), o)
    for side in (-1, 1):
        upper = rng.uniform(0.06, 0.3)
        _draw_arm(c, np.array([side * (shoulder - 0.018), 0.795]), upper, upper + rng.uniform(-0.1, 0.25), side,
                  o.top, o.skin if o.short_sleeves else o.top, o.skin,
                  foreshorten=rng.uniform(0.8, 1.0) if walking else 1.0)


def _draw_head_front(c: _Canvas, r: float, o: _Outfit) -> None:
    if o.long_hair:
        c.ellipse((0, 0.9), (r * 0.98, r * 1.3), o.hair)
    c.limb((0, 0.82), (0, 0.88), 0.027, 0.025, o.skin)
    c.ellipse((0, 0.945), (r * 0.86, r * 0.9), o.hair)
    c.ellipse((0, 0.93), (r * 0.78, r * 0.9), o.skin)


def _draw_person_side(c: _Canvas, rng: np.random.Generator, o: _Outfit, facing: int) -> None:
    f = facing
    stride = rng.uniform(0.25, 0.4)
    hip = np.array([0.0, 0.5])

    def leg(thigh_angle: float, knee_flex: float, trousers: Color, shoes: Color) -> None:
        knee = hip + 0.245 * _unit(thigh_angle, f)
        shin_angle = thigh_angle - knee_flex
        ankle = knee + 0.235 * _unit(shin_angle, f)
        c.limb(hip, knee, 0.055, 0.04, trousers)
        c.limb(knee, ankle, 0.04, 0.028, trousers, join=True)
        toe_down = min(0.0, math.degrees(shin_angle) * 0.6)  # the pushing-off foot tips forward
        c.ellipse(ankle + (f * 0.032, -0.02), (0.05, 0.021), shoes, angle_deg=_heading(toe_down, f))

    shoulder = np.array([f * 0.005, 0.79])
    dim = 0.75  # the far limbs are in shadow
    _draw_arm(c, shoulder, stride * 0.7, stride * 0.7 + rng.uniform(0.2, 0.6), f, _scaled(o.top, dim),
              _scaled(o.skin if o.short_sleeves else o.top, dim), _scaled(o.skin, dim))
    leg(-stride * 0.8, rng.uniform(0.2, 0.45), _scaled(o.trousers, dim), _scaled(o.shoes, dim))
    leg(stride, rng.uniform(0.05, 0.2), o.trousers, o.shoes)
    c.polygon([(f * 0.04, 0.828), (f * 0.07, 0.8), (f * 0.08, 0.7), (f * 0.06, 0.5), (f * 0.06, 0.455),
               (-f * 0.06, 0.455), (-f * 0.065, 0.55), (-f * 0.06, 0.8), (-f * 0.035, 0.828)], o.top)
    if o.top_name.startswith("hi-vis"):
        for y in (0.6, 0.66):
            c.line([(-0.07, y), (0.08, y)], _REFLECTIVE, 0.018)
    if o.long_hair:
        c.ellipse((-f * 0.03, 0.9), (0.045, 0.085), o.hair)
    c.limb((0, 0.82), (f * 0.008, 0.88), 0.027, 0.025, o.skin)
    c.ellipse((f * 0.012, 0.935), (0.058, 0.066), o.skin)
    c.ellipse((f * 0.064, 0.925), (0.012, 0.014), o.skin, join=True)  # nose
    c.ellipse((-f * 0.006, 0.955), (0.06, 0.05), o.hair, paint_only=True)
    _draw_arm(c, shoulder, -stride * 0.6, -stride * 0.6 + rng.uniform(0.1, 0.35), f, o.top,
              o.skin if o.short_sleeves else o.top, o.skin)


def _render_person(rng: np.random.Generator, work_h: int, texture: np.ndarray | None) -> _Drawing:
    outfit = _sample_outfit(rng)
    pose = _pick(rng, ("standing-front", "walking-front", "walking-side"))
    c = _Canvas(work_h, (-0.35, 0.35), (-0.05, 1.05))
    if pose == "walking-side":
        _draw_person_side(c, rng, outfit, _pick(rng, (-1, 1)))
    else:
        _draw_person_front(c, rng, outfit, walking=pose == "walking-front")
    c.trim()
    shade = _part_shading(c.labels, rng, rim_px=0.012 * work_h, rim=0.45, vertical=0.35, lateral=0.2,
                          grain=0.05, grain_px=2.0)
    return _Drawing(_shaded(c, shade), c.labels > 0, f"person/{pose}/{outfit.top_name}-top",
                    SIZE_PRIORS_M["person"])


# -- animal --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Species:
    """Side-view proportions in metres; the drawing is rescaled, so only ratios matter."""

    name: str
    body: tuple[float, float]  # length, depth
    leg: float  # ground to belly
    leg_r: float
    neck: tuple[float, float]  # length, elevation in degrees
    head: tuple[float, float, float]  # length, depth, droop in degrees below the horizontal
    tail: tuple[float, float, float]  # length, min and max angle in degrees above the horizontal
    ears_up: bool
    coats: tuple[tuple[str, Color, Color], ...]  # name, main colour, secondary (face/legs/belly/patches)
    height_range_m: tuple[float, float]  # within SIZE_PRIORS_M["animal"]


_SPECIES: tuple[_Species, ...] = (
    _Species("dog", (0.75, 0.26), 0.34, 0.04, (0.13, 40), (0.25, 0.12, 5), (0.28, 10, 60), True,
             (("brown", (40, 75, 125), (90, 140, 190)), ("black", (42, 42, 46), (60, 70, 90)),
              ("golden", (80, 150, 210), (150, 200, 235)), ("grey", (120, 120, 125), (200, 200, 205))),
             (0.5, 0.8)),
    _Species("sheep", (1.0, 0.5), 0.3, 0.032, (0.14, 30), (0.24, 0.13, 40), (0.1, -70, -50), False,
             (("white-face", (200, 215, 225), (185, 200, 215)), ("black-face", (195, 210, 220), (35, 35, 40)),
              ("brown", (95, 120, 150), (60, 75, 95))),
             (0.75, 1.05)),
    _Species("cow", (1.55, 0.68), 0.55, 0.065, (0.3, 20), (0.48, 0.24, 50), (0.65, -85, -70), False,
             (("holstein", (235, 235, 235), (30, 30, 30)), ("brown", (40, 70, 115), (200, 205, 210)),
              ("black", (42, 42, 46), (230, 230, 230)), ("tan", (90, 140, 190), (220, 225, 230))),
             (1.3, 1.6)),
    _Species("deer", (1.2, 0.38), 0.55, 0.032, (0.36, 45), (0.27, 0.12, 25), (0.1, 0, 20), True,
             (("red-brown", (45, 75, 130), (150, 185, 215)), ("grey-brown", (70, 90, 115), (170, 195, 215))),
             (1.1, 1.6)),
)


def _draw_quadruped(c: _Canvas, rng: np.random.Generator, sp: _Species, main: Color, second: Color,
                    facing: int, pattern: str) -> None:
    f = facing
    length, depth = (v * rng.uniform(0.92, 1.08) for v in sp.body)
    leg_len = sp.leg * rng.uniform(0.92, 1.08)
    y_body = leg_len + depth / 2
    gait, phase = rng.uniform(0.0, 0.35), rng.uniform(0, 2 * math.pi)
    leg_colour = second if sp.name == "sheep" else main
    hoof = (30, 30, 35) if sp.name != "dog" else _scaled(main, 0.8)

    def leg(x: float, swing: float, rear: bool, colour: Color) -> None:
        top = np.array([x, leg_len + depth * 0.3])
        half = 0.5 * (leg_len + depth * 0.3)
        joint = top + half * _unit(swing + (0.25 if rear else 0.0), f)  # hind legs bend at the hock
        foot = joint + half * _unit(swing * 0.5 - (0.2 if rear else 0.0), f)
        c.limb(top, joint, sp.leg_r * 1.7, sp.leg_r, colour)
        c.limb(joint, foot, sp.leg_r, sp.leg_r * 0.8, colour, join=True)
        c.ellipse(foot + (f * sp.leg_r * 0.3, 0), (sp.leg_r * 1.05, sp.leg_r * 0.75), hoof, join=True)

    def leg_pair(phase_offset: float, colour: Color) -> None:
        leg(f * 0.35 * length, gait * math.sin(phase + phase_offset), False, colour)
        leg(-f * 0.33 * length, gait * math.sin(phase + phase_offset + math.pi), True, colour)

    # legs first: the body's outline (chest, haunch) hides their joints, as seen from the side
    leg_pair(math.pi / 2, _scaled(leg_colour, 0.7))  # the far pair, in the body's shadow
    leg_pair(0.0, leg_colour)
    _draw_body(c, rng, sp, main, second, f, length, depth, y_body, pattern)


def _draw_body(c: _Canvas, rng: np.random.Generator, sp: _Species, main: Color, second: Color, f: int,
               length: float, depth: float, y_body: float, pattern: str) -> None:
    tail_len = sp.tail[0] * rng.uniform(0.8, 1.2)
    tail_dir = math.radians(rng.uniform(sp.tail[1], sp.tail[2]))
    tail_base = np.array([-f * 0.47 * length, y_body + 0.25 * depth])
    tail_end = tail_base + tail_len * np.array([-f * math.cos(tail_dir), math.sin(tail_dir)])
    c.limb(tail_base, tail_end, sp.leg_r * 0.8, sp.leg_r * 0.35, main)
    if sp.name == "cow":
        c.ellipse(tail_end, (sp.leg_r * 0.6, sp.leg_r * 1.6), second if pattern == "holstein" else main,
                  join=True)
    c.ellipse((0, y_body), (length / 2, depth / 2), main)
    c.ellipse((f * 0.28 * length, y_body + 0.03 * depth), (0.24 * length, 0.55 * depth), main, join=True)
    c.ellipse((-f * 0.3 * length, y_body + 0.02 * depth), (0.22 * length, 0.52 * depth), main, join=True)
    if sp.name == "sheep":  # wool: a bumpy outline
        for a in np.linspace(0, 2 * math.pi, 20, endpoint=False):
            centre = (0.47 * length * math.cos(a), y_body + 0.47 * depth * math.sin(a))
            c.ellipse(centre, (depth * rng.uniform(0.12, 0.18),) * 2, main, join=True)
    if pattern == "holstein":
        for _ in range(int(rng.integers(4, 9))):
            centre = (rng.uniform(-0.5, 0.5) * length, y_body + rng.uniform(-0.4, 0.4) * depth)
            c.ellipse(centre, (rng.uniform(0.08, 0.2) * length, rng.uniform(0.15, 0.35) * depth), second,
                      angle_deg=rng.uniform(0, 180), paint_only=True)
    if sp.name == "deer":  # paler belly
        belly = tuple((m + s) / 2 for m, s in zip(main, second, strict=True))
        c.ellipse((0, y_body - 0.4 * depth), (0.36 * length, 0.15 * depth), belly, paint_only=True)
    _draw_neck_and_head(c, rng, sp, main, second, f, length, depth, y_body)


def _draw_neck_and_head(c: _Canvas, rng: np.random.Generator, sp: _Species, main: Color, second: Color,
                        f: int, length: float, depth: float, y_body: float) -> None:
    neck_len = sp.neck[0] * rng.uniform(0.85, 1.15)
    elevation = math.radians(sp.neck[1] + rng.uniform(-10, 10))
    base = np.array([f * 0.38 * length, y_body + 0.2 * depth])
    end = base + neck_len * np.array([f * math.cos(elevation), math.sin(elevation)])
    head_len, head_depth, droop = sp.head
    droop = -(droop + rng.uniform(-10, 15))
    axis = np.array([f * math.cos(math.radians(droop)), math.sin(math.radians(droop))])
    head_colour = second if sp.name == "sheep" else main
    c.limb(base, end, 0.36 * depth, 0.42 * head_depth, main, join=True)  # one mass with the body
    ear_root = end + np.array([-f * 0.1 * head_len, 0.35 * head_depth])
    ear_angle = (75 if sp.ears_up else -60) + rng.uniform(-15, 15)
    ear_dir = np.array([-f * math.cos(math.radians(ear_angle)), math.sin(math.radians(ear_angle))])
    ear_size = 0.28 * head_len if sp.name != "cow" else 0.2 * head_len
    c.ellipse(ear_root + ear_dir * ear_size * 0.6, (ear_size * 0.6, ear_size * 0.28), _scaled(head_colour, 0.85),
              angle_deg=math.degrees(math.atan2(ear_dir[1], ear_dir[0])))
    centre = end + axis * head_len * 0.3
    c.ellipse(centre, (head_len / 2, head_depth / 2), head_colour, angle_deg=_heading(droop, f))
    c.ellipse(centre + axis * head_len * 0.32, (head_len * 0.22, head_depth * 0.36),
              _scaled(head_colour, 0.85), angle_deg=_heading(droop, f), join=True)  # muzzle
    c.ellipse(centre + (f * 0.02 * head_len, 0.15 * head_depth), (head_depth * 0.08,) * 2, (15, 15, 15),
              paint_only=True)
    if sp.name in ("deer", "cow") and rng.random() < 0.5:
        _draw_headgear(c, rng, sp, end + np.array([0, 0.4 * head_depth]), f)


def _draw_headgear(c: _Canvas, rng: np.random.Generator, sp: _Species, root: np.ndarray, f: int) -> None:
    """Small antlers (deer) or horns (cow); kept low so the animal stays wider than tall."""
    colour = (150, 175, 190) if sp.name == "cow" else (60, 90, 120)
    r = sp.leg_r * (0.45 if sp.name == "cow" else 0.35)
    tip = root + np.array([f * 0.05, 0.1]) * (1.0 if sp.name == "cow" else 1.6)
    c.limb(root, tip, r, r * 0.5, colour)
    if sp.name == "deer":
        for t in rng.uniform(0.3, 0.8, 2):
            prong = root + t * (tip - root)
            c.limb(prong, prong + np.array([f * 0.07, 0.05]), r * 0.7, r * 0.35, colour, join=True)


def _render_animal(rng: np.random.Generator, work_h: int, texture: np.ndarray | None) -> _Drawing:
    sp = _pick(rng, _SPECIES)
    coat, main, second = _pick(rng, sp.coats)
    main, second = _jitter(main, rng), _jitter(second, rng)
    reach = sp.body[0] / 2 + sp.neck[0] + sp.head[0] + sp.tail[0] + 0.3
    top = sp.leg + sp.body[1] + sp.neck[0] + sp.head[0] + 0.3
    c = _Canvas(work_h / (sp.leg + sp.body[1] + 0.7 * sp.neck[0] + 0.3 * sp.head[0]), (-reach, reach),
                (-0.1, top))
    _draw_quadruped(c, rng, sp, main, second, _pick(rng, (-1, 1)), coat)
    c.trim()
    shade = _part_shading(c.labels, rng, rim_px=0.015 * work_h, rim=0.4, vertical=0.35, lateral=0.15,
                          grain=0.12 if sp.name == "sheep" else 0.07, grain_px=3.0)
    return _Drawing(_shaded(c, shade), c.labels > 0, f"animal/{sp.name}/{coat}", sp.height_range_m)


# -- vehicle -------------------------------------------------------------------------------------
_CAR_PAINTS: tuple[tuple[str, Color], ...] = (
    ("red", (35, 35, 180)), ("blue", (150, 80, 30)), ("white", (225, 228, 230)), ("silver", (180, 180, 185)),
    ("black", (30, 30, 32)), ("green", (50, 100, 40)), ("yellow", (30, 200, 230)), ("dark-grey", (80, 80, 85)),
)
_TRACTOR_PAINTS: tuple[tuple[str, Color], ...] = (
    ("green", (40, 130, 40)), ("red", (30, 30, 190)), ("blue", (160, 90, 30)), ("orange", (20, 110, 235)),
)
_GLASS: Color = (75, 60, 50)
_TYRE: Color = (28, 28, 30)
_RIM: Color = (165, 165, 170)


def _wheel(c: _Canvas, x: float, radius: float, rim_colour: Color = _RIM) -> None:
    c.ellipse((x, radius), (radius, radius), _TYRE)
    c.ellipse((x, radius), (radius * 0.6, radius * 0.6), rim_colour)
    c.ellipse((x, radius), (radius * 0.18, radius * 0.18), _scaled(rim_colour, 0.5), paint_only=True)


def _wheel_arch(c: _Canvas, x: float, radius: float) -> None:
    c.ellipse((x, radius), (radius * 1.15, radius * 1.15), (20, 20, 22), paint_only=True)


def _draw_car(c: _Canvas, rng: np.random.Generator, paint: Color, f: int, length: float, height: float) -> None:
    half = length / 2
    belt = 0.58 * height
    wheel_r = 0.22 * height
    hood = length * rng.uniform(0.22, 0.3)
    trunk = length * rng.uniform(0.04, 0.2)  # small: hatchback, large: saloon
    a_base, c_base = half - hood, -half + trunk
    roof_front = a_base - rng.uniform(0.12, 0.18) * length  # windscreen rake
    roof_rear = c_base + rng.uniform(0.15, 0.3) * height

    def x(v: float) -> float:  # mirrors the drawing to face either way
        return f * v

    c.polygon([(x(-half + 0.1), 0.14 * height), (x(-half), 0.25 * height), (x(-half + 0.02), belt * 0.95),
               (x(-half + 0.2), belt), (x(a_base), belt + 0.03 * height), (x(half - 0.05), belt * 0.82),
               (x(half), 0.42 * height), (x(half - 0.03), 0.22 * height), (x(half - 0.15), 0.14 * height)], paint)
    cabin = [(x(c_base), belt), (x(roof_rear), height), (x(roof_front), height), (x(a_base), belt + 0.03 * height)]
    c.polygon(cabin, paint, join=True)
    pillar = (roof_rear + roof_front) / 2
    inset = 0.05 * height
    c.polygon([(x(c_base + 2.5 * inset), belt + inset), (x(roof_rear + inset), height - inset),
               (x(pillar - inset), height - inset), (x(pillar - inset), belt + inset)], _GLASS)
    c.polygon([(x(pillar + inset), belt + inset), (x(pillar + inset), height - inset),
               (x(roof_front - inset * 0.5), height - inset), (x(a_base - 2.5 * inset), belt + inset)], _GLASS)
    c.line([(x(pillar), belt), (x(pillar * 0.9), 0.2 * height)], _scaled(paint, 0.55), 0.008 * height)
    c.line([(x(-half + 0.05), 0.2 * height), (x(half - 0.05), 0.2 * height)], (40, 40, 42), 0.05 * height)
    c.ellipse((x(half - 0.08), 0.5 * height), (0.06, 0.035 * height), (170, 235, 245), paint_only=True)
    c.ellipse((x(-half + 0.05), 0.52 * height), (0.05, 0.04 * height), (30, 30, 200), paint_only=True)
    for wx in (half - 0.2 * length, -half + 0.2 * length):
        _wheel_arch(c, x(wx), wheel_r)
        _wheel(c, x(wx), wheel_r)


def _draw_van(c: _Canvas, rng: np.random.Generator, paint: Color, f: int, length: float, height: float) -> None:
    half = length / 2
    wheel_r = 0.16 * height
    nose = 0.45 * height  # bonnet height
    screen_top = half - length * rng.uniform(0.18, 0.24)

    def x(v: float) -> float:  # mirrors the drawing to face either way
        return f * v

    c.polygon([(x(-half), 0.12 * height), (x(-half), 0.97 * height), (x(-half + 0.06), height),
               (x(screen_top), height), (x(half - 0.3), nose + 0.1 * height), (x(half - 0.04), nose),
               (x(half), 0.22 * height), (x(half - 0.12), 0.12 * height)], paint)
    win_bottom = nose + 0.12 * height
    c.polygon([(x(screen_top - 0.5), win_bottom), (x(screen_top - 0.5), 0.9 * height),
               (x(screen_top - 0.05), 0.9 * height), (x(half - 0.42), win_bottom)], _GLASS)
    if rng.random() < 0.5:  # minibus: passenger windows along the side
        n = int(rng.integers(2, 4))
        edges = np.linspace(-half + 0.3, screen_top - 0.7, n + 1)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            c.polygon([(x(a + 0.05), win_bottom), (x(a + 0.05), 0.88 * height), (x(b - 0.05), 0.88 * height),
                       (x(b - 0.05), win_bottom)], _GLASS)
    else:
        c.line([(x(-0.1 * length), 0.2 * height), (x(-0.1 * length), 0.92 * height)], _scaled(paint, 0.55),
               0.006 * height)
    c.line([(x(-half + 0.03), 0.17 * height), (x(half - 0.05), 0.17 * height)], (40, 40, 42), 0.06 * height)
    c.ellipse((x(half - 0.06), nose - 0.06 * height), (0.06, 0.03 * height), (170, 235, 245), paint_only=True)
    c.polygon([(x(-half), 0.35 * height), (x(-half), 0.5 * height), (x(-half + 0.05), 0.5 * height),
               (x(-half + 0.05), 0.35 * height)], (30, 30, 200), paint_only=True)
    for wx in (half - 0.17 * length, -half + 0.18 * length):
        _wheel_arch(c, x(wx), wheel_r)
        _wheel(c, x(wx), wheel_r)


def _draw_tractor(c: _Canvas, rng: np.random.Generator, paint: Color, f: int, length: float,
                  height: float) -> None:
    half = length / 2
    rear_r, front_r = height * rng.uniform(0.3, 0.34), height * rng.uniform(0.18, 0.21)
    rear_x, front_x = -half + rear_r, half - front_r - 0.05 * length
    cab_l, cab_r = rear_x - 0.6 * rear_r, rear_x + 0.75 * rear_r
    deck, hood_top = 1.15 * rear_r, 0.62 * height

    def x(v: float) -> float:  # mirrors the drawing to face either way
        return f * v

    c.polygon([(x(cab_r - 0.1), 0.8 * front_r), (x(cab_r - 0.1), hood_top), (x(half - 0.05), hood_top * 0.92),
               (x(half), hood_top * 0.8), (x(half), 1.2 * front_r), (x(front_x), 0.8 * front_r)], paint)
    c.polygon([(x(cab_l), deck), (x(cab_l), height * 0.95), (x(cab_r), height * 0.95), (x(cab_r), deck)],
              _GLASS)
    frame = 0.035 * height
    for a, b in ((cab_l, cab_l + frame), (cab_r - frame, cab_r)):
        c.polygon([(x(a), deck), (x(a), height * 0.95), (x(b), height * 0.95), (x(b), deck)], paint,
                  paint_only=True)
    c.polygon([(x(cab_l - 0.05), height * 0.94), (x(cab_l - 0.05), height), (x(cab_r + 0.05), height),
               (x(cab_r + 0.05), height * 0.94)], _scaled(paint, 0.9))
    exhaust_x = (cab_r + half) / 2
    c.limb((x(exhaust_x), hood_top), (x(exhaust_x), 0.85 * height), 0.03, 0.025, (40, 40, 42))
    angles = np.linspace(0, math.pi, 24)
    outer, inner = rear_r + 0.06 * height, rear_r + 0.01 * height
    arc = np.concatenate([np.stack([rear_x + outer * np.cos(angles), rear_r + outer * np.sin(angles)], 1),
                          np.stack([rear_x + inner * np.cos(angles[::-1]), rear_r + inner * np.sin(angles[::-1])],
                                   1)])
    arc[:, 0] *= f
    c.polygon(arc, paint)  # mudguard
    wheel_rim = (40, 170, 230) if rng.random() < 0.5 else _RIM
    _wheel(c, x(rear_x), rear_r, wheel_rim)
    _wheel(c, x(front_x), front_r, wheel_rim)
    c.ellipse((x(half - 0.03), hood_top * 0.86), (0.04, 0.035 * height), (170, 235, 245), paint_only=True)


_VEHICLES: tuple[tuple[str, Callable[..., None], tuple[float, float], tuple[float, float]], ...] = (
    # name, drawer, length / height, height range (m) within SIZE_PRIORS_M["vehicle"]
    ("car", _draw_car, (2.4, 2.9), (1.2, 1.6)),
    ("van", _draw_van, (2.2, 2.7), (1.8, 2.2)),
    ("tractor", _draw_tractor, (1.55, 1.75), (2.0, 2.2)),
)


def _render_vehicle(rng: np.random.Generator, work_h: int, texture: np.ndarray | None) -> _Drawing:
    name, draw, aspect_range, height_range = _pick(rng, _VEHICLES)
    height = float(np.mean(height_range))
    length = height * rng.uniform(*aspect_range)
    paint_name, paint = _pick(rng, _TRACTOR_PAINTS if name == "tractor" else _CAR_PAINTS)
    c = _Canvas(work_h / height, (-length / 2 - 0.1, length / 2 + 0.1), (-0.05, height + 0.05))
    draw(c, rng, _jitter(paint, rng, 6), _pick(rng, (-1, 1)), length, height)
    c.trim()
    shade = _part_shading(c.labels, rng, rim_px=0.01 * work_h, rim=0.35, vertical=0.3, lateral=0.12,
                          grain=0.03, grain_px=4.0)
    return _Drawing(_shaded(c, shade), c.labels > 0, f"vehicle/{name}/{paint_name}", height_range)


# -- rock ----------------------------------------------------------------------------------------
_STONES: tuple[tuple[str, Color, Color], ...] = (  # name, main, secondary
    ("granite", (125, 125, 130), (170, 168, 165)),
    ("basalt", (65, 68, 72), (95, 95, 100)),
    ("sandstone", (110, 150, 185), (85, 120, 150)),
    ("limestone", (165, 175, 180), (130, 140, 150)),
    ("ironstone", (55, 80, 120), (80, 100, 130)),
)


def _rock_outline(rng: np.random.Generator) -> np.ndarray:
    """A random radial polygon, smoothed into a convex-ish blob that rests on a flat underside."""
    n = int(rng.integers(7, 14))
    corners = np.sort((np.arange(n) + rng.uniform(-0.3, 0.3, n)) * 2 * math.pi / n)
    theta = np.linspace(0, 2 * math.pi, 180, endpoint=False)
    r = np.interp(theta, corners, rng.uniform(0.7, 1.0, n), period=2 * math.pi)
    k = 11
    r = np.convolve(np.concatenate([r[-k:], r, r[:k]]), np.ones(2 * k + 1) / (2 * k + 1), "valid")
    pts = np.stack([r * np.cos(theta) * rng.uniform(1.0, 1.4), r * np.sin(theta) * rng.uniform(0.55, 0.9)], 1)
    floor = pts[:, 1].min() * rng.uniform(0.55, 0.9)
    pts[:, 1] = np.maximum(pts[:, 1], floor)
    return pts


def _stone_colour(mask: np.ndarray, rng: np.random.Generator, main: Color, second: Color) -> np.ndarray:
    """Two minerals mixed by multi-octave noise, with fine grain and dark/light speckles."""
    size = float(max(mask.shape))
    mix = np.clip(0.5 + 0.45 * _fractal_noise(mask.shape, rng, size / 4, octaves=4), 0, 1)[..., None]
    main_c = np.asarray(main, np.float32)
    colour = main_c + (np.asarray(second, np.float32) - main_c) * mix
    speckle = rng.random(mask.shape, dtype=np.float32)
    grain = 1.0 + 0.12 * _fractal_noise(mask.shape, rng, 3.0, octaves=2)
    grain *= np.where(speckle < 0.03, 0.6, np.where(speckle > 0.985, 1.3, 1.0)).astype(np.float32)
    return colour * grain[..., None]


def _render_rock(rng: np.random.Generator, work_h: int, texture: np.ndarray | None) -> _Drawing:
    outline = _rock_outline(rng)
    name, main, second = _pick(rng, _STONES)
    (x0, y0), (x1, y1) = outline.min(0), outline.max(0)
    c = _Canvas(work_h / (y1 - y0), (x0, x1), (y0, y1))
    c.polygon(outline, (0, 0, 0))
    mask = c.labels > 0
    bgr = _stone_colour(mask, rng, _jitter(main, rng, 6), _jitter(second, rng, 6))
    bgr *= _dome_shading(mask, rng, bumps=0.06, ambient=0.3)[..., None]
    return _Drawing(bgr, mask, f"rock/{name}", SIZE_PRIORS_M["rock"])


# -- unseen obstacle -----------------------------------------------------------------------------
def _closed_catmull_rom(ctrl: np.ndarray, samples: int = 16) -> np.ndarray:
    """A smooth closed curve through every control point."""
    p0, p1, p2, p3 = np.roll(ctrl, 1, 0), ctrl, np.roll(ctrl, -1, 0), np.roll(ctrl, -2, 0)
    t = np.linspace(0, 1, samples, endpoint=False)[:, None, None]
    pts = 0.5 * (2 * p1 + (p2 - p0) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t ** 2
                 + (3 * p1 - p0 - 3 * p2 + p3) * t ** 3)
    return pts.transpose(1, 0, 2).reshape(-1, 2)


def _random_outline(rng: np.random.Generator) -> tuple[str, np.ndarray]:
    shape = _pick(rng, ("star", "spline"))
    n = int(rng.integers(5, 13) if shape == "star" else rng.integers(5, 10))
    angles = (np.arange(n) + rng.uniform(-0.35, 0.35, n)) * 2 * math.pi / n
    radii = rng.uniform(0.3 if shape == "star" else 0.45, 1.0, n)
    pts = np.stack([radii * np.cos(angles), radii * np.sin(angles)], 1)
    if shape == "spline":
        pts = _closed_catmull_rom(pts)
    pts[:, 0] *= rng.uniform(0.6, 1.6)
    rot = rng.uniform(0, 2 * math.pi)
    rotation = np.array([[math.cos(rot), -math.sin(rot)], [math.sin(rot), math.cos(rot)]])
    return shape, pts @ rotation.T


def _random_colour(rng: np.random.Generator) -> np.ndarray:
    hsv = np.uint8([[[rng.integers(0, 180), rng.integers(40, 256), rng.integers(50, 256)]]])
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32)


def _procedural_texture(shape: tuple[int, int], rng: np.random.Generator) -> tuple[str, np.ndarray]:
    """Stripes, checker, noise or dots in two random colours, at a random angle and scale."""
    name = _pick(rng, ("stripes", "checker", "noise", "dots"))
    h, w = shape
    period = rng.uniform(0.06, 0.25) * max(h, w)
    a = rng.uniform(0, math.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    u, v = (xx * math.cos(a) + yy * math.sin(a)) / period, (yy * math.cos(a) - xx * math.sin(a)) / period
    if name == "stripes":
        t = (np.sin(2 * math.pi * u) > rng.uniform(-0.5, 0.5)).astype(np.float32)
    elif name == "checker":
        t = ((np.floor(u) + np.floor(v)) % 2).astype(np.float32)
    elif name == "noise":
        t = np.clip(0.5 + 0.4 * _fractal_noise(shape, rng, period, octaves=4), 0, 1)
    else:
        t = ((u - np.round(u)) ** 2 + (v - np.round(v)) ** 2 < rng.uniform(0.05, 0.18)).astype(np.float32)
    c1, c2 = _random_colour(rng), _random_colour(rng)
    return name, c1 * (1 - t[..., None]) + c2 * t[..., None]


def _tiled_texture(texture: np.ndarray, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """``texture`` repeated, rescaled, rotated and shifted at random to cover ``shape``."""
    h, w = shape
    tile_px = rng.uniform(0.35, 1.0) * max(h, w)  # one texture repeat spans this many output pixels
    tex = texture.astype(np.float32)
    shrink = tile_px / max(tex.shape[:2])
    if shrink < 1.0:  # pre-shrink with area averaging so the warp below does not alias
        tex = cv2.resize(tex, (max(1, round(tex.shape[1] * shrink)), max(1, round(tex.shape[0] * shrink))),
                         interpolation=cv2.INTER_AREA)
    s = max(tex.shape[:2]) / tile_px  # texture pixels per output pixel
    a = rng.uniform(0, 2 * math.pi)
    offset = rng.uniform(0, tex.shape[1]), rng.uniform(0, tex.shape[0])
    m = np.float32([[s * math.cos(a), -s * math.sin(a), offset[0]], [s * math.sin(a), s * math.cos(a), offset[1]]])
    return cv2.warpAffine(tex, m, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_WRAP)


def _render_unseen(rng: np.random.Generator, work_h: int, texture: np.ndarray | None) -> _Drawing:
    shape, outline = _random_outline(rng)
    (x0, y0), (x1, y1) = outline.min(0), outline.max(0)
    c = _Canvas(work_h / (y1 - y0), (x0, x1), (y0, y1))
    c.polygon(outline, (0, 0, 0))
    mask = c.labels > 0
    if texture is None:
        fill_name, bgr = _procedural_texture(mask.shape, rng)
    else:
        fill_name, bgr = "texture", _tiled_texture(texture, mask.shape, rng)
    bgr = bgr * _dome_shading(mask, rng, bumps=0.02, ambient=0.55)[..., None]
    return _Drawing(bgr, mask, f"unseen_obstacle/{shape}/{fill_name}", SIZE_PRIORS_M["unseen_obstacle"])


# -- public API ----------------------------------------------------------------------------------
# (rng, working pixel height, texture) -> drawing; only unseen_obstacle uses the texture
_RENDERERS: Mapping[str, Callable[[np.random.Generator, int, np.ndarray | None], _Drawing]] = MappingProxyType({
    "person": _render_person,
    "animal": _render_animal,
    "vehicle": _render_vehicle,
    "rock": _render_rock,
    "unseen_obstacle": _render_unseen,
})


def _tight_crop(bgr: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y, w, h = cv2.boundingRect(mask.astype(np.uint8))
    return bgr[y:y + h, x:x + w], mask[y:y + h, x:x + w]


def _binarise_keeping_bbox(coverage: np.ndarray) -> np.ndarray:
    """Threshold at half coverage, but keep each border line's best-covered pixel: a rescaled
    tight crop covers every border line a little, and keeping them keeps the crop tight and its
    height exact (which the metric scale depends on) even when thin parts fall under 0.5."""
    mask = coverage >= 0.5
    mask[0, np.argmax(coverage[0])] = mask[-1, np.argmax(coverage[-1])] = True
    mask[np.argmax(coverage[:, 0]), 0] = mask[np.argmax(coverage[:, -1]), -1] = True
    return mask


def _finish(drawing: _Drawing, pixel_height: int) -> np.ndarray:
    """Crop tight, rescale to exactly ``pixel_height`` rows, binarise the alpha, pack B, G, R, A."""
    bgr, mask = _tight_crop(drawing.bgr, drawing.mask)
    h, w = mask.shape
    size = (max(1, round(w * pixel_height / h)), pixel_height)
    interp = cv2.INTER_AREA if pixel_height < h else cv2.INTER_LINEAR
    coverage = cv2.resize(mask.astype(np.float32), size, interpolation=interp)
    # resize premultiplied colour so the black background does not bleed into the edges
    bgr = cv2.resize(bgr * mask[..., None], size, interpolation=interp) / np.maximum(coverage, 1e-6)[..., None]
    mask = _binarise_keeping_bbox(coverage)
    alpha = mask.astype(np.uint8) * 255
    bgr = np.clip(bgr, 0, 255).astype(np.uint8) * mask[..., None]
    return np.ascontiguousarray(np.dstack([bgr, alpha]))


def _check_texture(texture: np.ndarray) -> None:
    if not (isinstance(texture, np.ndarray) and texture.dtype == np.uint8 and texture.ndim == 3
            and texture.shape[2] == 3 and min(texture.shape[:2]) > 0):
        shape = getattr(texture, "shape", None)
        raise ValueError(f"texture must be an H x W x 3 uint8 BGR image, got {type(texture).__name__} {shape}")


def render_cutout(kind: str, rng: np.random.Generator, *, pixel_height: int = 256,
                  texture: np.ndarray | None = None) -> Cutout:
    """Draw one random obstacle of ``kind``, about ``pixel_height`` pixels tall.

    ``texture`` (H x W x 3 uint8 BGR, e.g. a DTD image) fills ``unseen_obstacle`` shapes; the other
    kinds ignore it. The same generator state always gives the same cutout.

    Args:
        kind: one of ``OBSTACLE_KINDS``.
        rng: makes every draw (shape, colours, physical height).
        pixel_height: rows of the finished cutout, at least ``MIN_PIXEL_HEIGHT`` (small ones are drawn at
            128 rows and shrunk).
        texture: fills ``unseen_obstacle`` shapes; None fills them with a procedural texture.

    Returns:
        The cutout: a tight BGRA crop with 0/255 alpha, and the physical height (m) to paste it at.

    Raises:
        ValueError: on an unknown kind, a ``pixel_height`` under ``MIN_PIXEL_HEIGHT`` or an unusable texture.
    """
    renderer = _RENDERERS.get(kind)
    if renderer is None:
        raise ValueError(f"unknown obstacle kind {kind!r}; allowed kinds: {', '.join(OBSTACLE_KINDS)}")
    if pixel_height < MIN_PIXEL_HEIGHT:
        raise ValueError(f"pixel_height must be at least {MIN_PIXEL_HEIGHT}, got {pixel_height}")
    if texture is not None:
        _check_texture(texture)
    drawing = renderer(rng, max(int(pixel_height), _MIN_WORK_HEIGHT), texture)
    height_m = float(rng.uniform(*drawing.height_range_m))
    return Cutout(kind=kind, rgba=_finish(drawing, int(pixel_height)), height_m=height_m,
                  variant=drawing.variant)

"""Ego-motion along the track from consecutive frames, and where a placed obstacle stands against the rails.

Each frame's track geometry (``CameraGeometry``, from its own tracked rails) maps a strip of ground
between the rails into a top-down view: rows are distances ``Z`` ahead along the track centre,
columns lateral offsets from it. The ground (ballast, sleepers, rail fastenings) is fixed in the
world, so the next frame's strip is the last one's shifted by the advance: the ground point at ``Z``
now was at ``Z + advance`` one frame ago. The advance is the shift that best correlates the two
strips (normalised cross-correlation of their high-passed texture, searched from 0 to a top speed,
refined to a sub-step by a parabola). Only the near ground is used (``DEFAULT_DISTANCE_M``): far
away a frame's motion is under a pixel and video codecs keep such blocks still, which reads as no
motion. The speed over a stretch of frames is the mean advance of its pairs times the frame rate,
refused when too few pairs correlate or they disagree.

The rails also say where a placed obstacle stands: its footprint's offset from the rails' centre
line at its row, in gauge units (``lateral_gauge``), and its depth from the gauge as a ruler
(``rails_depth_m``). A fixed obstacle keeps both consistent from frame to frame when each frame's
geometry is right; how much they wander is the clip's drift. Where the rails were seen they also
place it (``rails_column``): a frame's parabolic centre line can leave the real rails far away on a
curve, the rails' own midpoint cannot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from synrail.rail.detect import RailFit, track_area
from synrail.rail.geometry import CameraGeometry

DEFAULT_DISTANCE_M = (0.0, 20.0)  # ground ahead searched for motion; the near end is clamped to the frame
STEP_M = 0.02                     # strip resolution along and across the track
HALF_WIDTH_M = 0.5                # strip half-width: between the rails, clear of the rail heads
MIN_SCORE = 0.5                   # a pair's correlation peak below this says nothing
MIN_PAIRS = 3
MAX_RELATIVE_SIGMA = 0.15         # of the speed: the pairs disagree beyond this (a short window of an
                                  # uneven cadence reaches 0.1)
MIN_SPEED_KMH = 2.0               # below this the train stands: no approach to build
FENCES = (0.4, 1.7)               # a pair's advance against its stretch's median: outside, it failed (re-encoded
                                  # footage alternates pairs of 0.66 and 1.0 of their mean)
MIN_ADVANCE_M = 0.05              # a pair that moved less matched still picture parts (or the train stands)

NO_PAIRS = "fewer than 3 consecutive frame pairs with a tracked track"
WEAK_TEXTURE = "the ground between the rails does not correlate between frames"
PAIRS_DISAGREE = "the frame pairs' advances disagree"
STANDING = "the train stands still"


@dataclass(frozen=True)
class GroundStrip:
    """The ground between the rails seen top-down: ``values[i, j]`` at distance ``z_m[i]`` ahead."""

    z_m: np.ndarray
    values: np.ndarray  # len(z_m) x columns, float32, high-passed along the track


@dataclass(frozen=True)
class Advance:
    """How far the camera moved along the track between two frames, and how well the strips agree."""

    advance_m: float
    score: float  # the correlation peak, -1..1


@dataclass(frozen=True)
class SpeedEstimate:
    """The speed image motion along the rails implies, or None and why."""

    speed_kmh: float | None
    sigma_kmh: float | None
    pairs: int  # frame pairs used
    reason: str | None = None
    fences: tuple[float, float] | None = None  # advances (m) outside are failed measurements, not motion


def ground_strip(grey: np.ndarray, geometry: CameraGeometry, distance_m: tuple[float, float] = DEFAULT_DISTANCE_M
                 ) -> GroundStrip | None:
    """The frame's ground between the rails, resampled top-down along the track centre.

    Args:
        grey: H x W greyscale frame (the one ``geometry`` was estimated on).
        geometry: the frame's camera and track.
        distance_m: (near, far) ground distance searched; near is raised to 0.5 m past the bottom row.

    Returns:
        The strip, or None when less than 3 m of track lies in range.
    """
    _, bottom_z = geometry.ground_point(np.array([geometry.cx]), np.array([geometry.height - 1.0]))
    near = max(distance_m[0], float(bottom_z[0]) + 0.5) if math.isfinite(float(bottom_z[0])) else distance_m[0]
    far = min(distance_m[1], geometry.track_max_z_m)
    if far - near < 3.0:
        return None
    z = np.arange(near, far, STEP_M)
    x = np.arange(-HALF_WIDTH_M, HALF_WIDTH_M + 1e-9, STEP_M)
    zz, xx = np.meshgrid(z, x, indexing="ij")
    u, v = geometry.project(geometry.track_centre_x(zz) + xx, np.zeros_like(zz), zz)
    sampled = cv2.remap(grey.astype(np.float32), u.astype(np.float32), v.astype(np.float32), cv2.INTER_LINEAR,
                        borderMode=cv2.BORDER_REPLICATE)
    smooth = cv2.GaussianBlur(sampled, (0, 0), sigmaX=0.25 / STEP_M)  # light falloff, shading: not motion
    return GroundStrip(z_m=z, values=sampled - smooth)


def advance_between(before: GroundStrip, after: GroundStrip, max_advance_m: float) -> Advance | None:
    """The advance that maps ``after`` onto ``before``: ground at ``Z`` in ``after`` was at ``Z + advance``.

    Args:
        before: the earlier frame's strip.
        after: the later frame's strip.
        max_advance_m: the largest advance searched (a top speed over the frame rate).

    Returns:
        The best advance (a sub-step parabola fit) and its correlation, or None when the strips share
        less than 3 m of ground at every shift.
    """
    offset = int(round((after.z_m[0] - before.z_m[0]) / STEP_M))  # after's first row in before's rows
    scores = []
    for shift in range(0, int(max_advance_m / STEP_M) + 1):
        start = offset + shift
        first_after = max(0, -start)
        count = min(len(after.z_m) - first_after, len(before.z_m) - (start + first_after))
        if count < int(3.0 / STEP_M):
            break
        a = after.values[first_after:first_after + count].ravel()
        b = before.values[start + first_after:start + first_after + count].ravel()
        a, b = a - a.mean(), b - b.mean()
        scores.append(float((a * b).sum() / math.sqrt(float((a * a).sum() * (b * b).sum()) + 1e-12)))
    if not scores:
        return None
    best = int(np.argmax(scores))
    shift = float(best)
    if 0 < best < len(scores) - 1:
        curvature = scores[best - 1] - 2 * scores[best] + scores[best + 1]
        if curvature < 0:
            shift += float(np.clip(0.5 * (scores[best - 1] - scores[best + 1]) / curvature, -0.5, 0.5))
    return Advance(advance_m=shift * STEP_M, score=scores[best])


def speed_from_advances(advances: Sequence[Advance | None], fps: float) -> SpeedEstimate:
    """The speed over a stretch of frames: the mean advance of the pairs that correlate, times the frame rate.

    The mean, not the median: re-encoded footage often has an uneven cadence (frames duplicated or
    dropped, so pairs alternate between short and long advances), and only the mean keeps the
    distance covered over the stretch. Pairs outside 0.4 to 1.7 times the median (a partly blurred
    ground matched short, a wrong texture matched far) are left out first, and so
    are pairs that did not move (a ground blurred smooth matches the picture's still parts) unless
    most did not: then the train stands.

    Args:
        advances: one per consecutive frame pair (None: a pair without a strip).
        fps: frames per second of the pairs.

    Returns:
        The speed with its uncertainty (spread of the pairs over the root of their count), or None and why.
    """
    found = [a for a in advances if a is not None]
    if len(found) < MIN_PAIRS:
        return SpeedEstimate(None, None, len(found), NO_PAIRS)
    good = np.array([a.advance_m for a in found if a.score >= MIN_SCORE])
    if good.size < MIN_PAIRS:
        return SpeedEstimate(None, None, int(good.size), WEAK_TEXTURE)
    still = good < MIN_ADVANCE_M
    if still.mean() > 0.5:
        return SpeedEstimate(None, None, int(good.size), STANDING)
    good = good[~still]  # a pair that matched the picture's still parts (a blurred, textureless ground)
    median = float(np.median(good))
    fences = (FENCES[0] * median, FENCES[1] * median)  # an uneven cadence stays inside, a failed match not
    inliers = good[(good >= fences[0]) & (good <= fences[1])]
    mean = float(inliers.mean())
    speed = mean * fps * 3.6
    sigma = float(inliers.std()) / math.sqrt(inliers.size) * fps * 3.6
    if speed < MIN_SPEED_KMH:
        return SpeedEstimate(None, None, int(inliers.size), STANDING, fences)
    if inliers.size < MIN_PAIRS or inliers.size < 0.5 * good.size or sigma > MAX_RELATIVE_SIGMA * speed:
        return SpeedEstimate(None, sigma, int(inliers.size), PAIRS_DISAGREE, fences)
    return SpeedEstimate(speed, sigma, int(inliers.size), fences=fences)


def measured(advance: Advance | None, estimate: SpeedEstimate) -> float | None:
    """The advance a pair measured, or None when it failed: too weak a correlation, no motion (the
    picture's still parts matched: a ground blurred smooth), or outside the fences of its stretch's
    pairs (a sleeper period matched instead).

    Args:
        advance: the pair's advance.
        estimate: the speed estimate over the pair's stretch (its fences).

    Returns:
        The advance in metres, or None.
    """
    if advance is None or advance.score < MIN_SCORE or advance.advance_m < MIN_ADVANCE_M:
        return None
    if estimate.fences is not None and not estimate.fences[0] <= advance.advance_m <= estimate.fences[1]:
        return None
    return advance.advance_m


@dataclass(frozen=True)
class RailPair:
    """A frame's two rail-head centre lines (``detect.RailFit``), kept small for records."""

    left: tuple[float, float, float, float]  # horizon_v, a, b, c
    right: tuple[float, float, float, float]
    rows: tuple[int, int] | None = None  # (first, last) row the rails were seen on; None: every row

    @classmethod
    def of(cls, left: RailFit, right: RailFit, rows: tuple[int, int] | None = None) -> RailPair:
        """The pair of two fits.

        Args:
            left: the left rail's fit.
            right: the right rail's fit.
            rows: the (first, last) row they were seen on (a detection's ``top_row`` and ``bottom_row``).

        Returns:
            The pair.
        """
        return cls(left=(left.horizon_v, left.a, left.b, left.c), right=(right.horizon_v, right.a, right.b, right.c),
                   rows=rows)

    def seen(self, v: float) -> bool:
        """Whether the rails were seen on row ``v`` (the pixel row it falls in)."""
        row = int(round(v))
        return self.rows is None or self.rows[0] <= row <= self.rows[1]

    def area(self, width: int, height: int) -> np.ndarray:
        """The track area they bound: between their outer head edges, on the rows they were seen.

        Args:
            width: the image width.
            height: the image height.

        Returns:
            The H x W boolean area.
        """
        first, last = self.rows if self.rows is not None else (0, height - 1)
        horizon = self.left[0]
        first = max(first, int(math.floor(horizon)) + 1)  # the fits meet on the horizon
        if first > last:
            return np.zeros((height, width), dtype=bool)
        return track_area(RailFit(*self.left), RailFit(*self.right), first, last, width, height)

    def gap_and_centre(self, v: float) -> tuple[float, float]:
        """(rail-centre gap, centre column) at row ``v``, in pixels."""
        left, right = RailFit(*self.left).x(v), RailFit(*self.right).x(v)
        return float(right - left), float(0.5 * (left + right))


def rails_column(rails: RailPair, v: float, lateral_m: float, gauge_m: float, rail_head_m: float) -> float | None:
    """The column ``lateral_m`` right of the rails' centre line at row ``v``, their gap as the ruler.

    Args:
        rails: the frame's rails.
        v: the row (sub-pixel).
        lateral_m: the offset from the centre line, metres (positive right).
        gauge_m: the track gauge.
        rail_head_m: the rail head width (rail centres are gauge + head apart).

    Returns:
        The column, or None where the rails were not seen on that row (or do not reach it).
    """
    if not (math.isfinite(v) and rails.seen(v)):
        return None
    gap, centre = rails.gap_and_centre(v)
    if not (math.isfinite(gap) and math.isfinite(centre) and gap > 0):
        return None
    return centre + lateral_m / (gauge_m + rail_head_m) * gap


def lateral_gauge(rails: RailPair, u: float, v: float, gauge_m: float, rail_head_m: float) -> float:
    """Where the footprint (u, v) stands across the track, measured on the rails: 0 on the centre line,
    ±0.5 on a rail's gauge face, in gauge units.

    Args:
        rails: the frame's rails.
        u: the footprint's column (sub-pixel).
        v: its row.
        gauge_m: the track gauge.
        rail_head_m: the rail head width (rail centres are gauge + head apart).

    Returns:
        The lateral offset in gauges (NaN where the rails do not reach the row).
    """
    gap, centre = rails.gap_and_centre(v)
    if not gap > 0:
        return float("nan")
    return (u - centre) / gap * (gauge_m + rail_head_m) / gauge_m


def rails_depth_m(rails: RailPair, v: float, focal_px: float, gauge_m: float, rail_head_m: float) -> float:
    """Optical depth of row ``v`` from the rails alone: the rail-centre distance is the ruler.

    Args:
        rails: the frame's rails.
        v: the row.
        focal_px: the focal length, pixels.
        gauge_m: the track gauge.
        rail_head_m: the rail head width.

    Returns:
        ``focal * (gauge + head) / gap`` in metres (NaN where the rails do not reach the row).
    """
    gap, _ = rails.gap_and_centre(v)
    return focal_px * (gauge_m + rail_head_m) / gap if gap > 0 else float("nan")

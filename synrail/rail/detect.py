"""Classical ego-track finding on a cab-view frame: where the two rails under the train run.

Method:
1. Ridge maps: rail heads are polished, so by day they show as thin bright stripes; under
   night infrared or on a light bed they show as thin dark bands. Horizontal white and black
   top-hats keep stripes narrower than their kernel and drop wide areas (slabs, sleepers, sky),
   which a plain edge map would keep.
2. Line segments (``cv2.HoughLinesP``) on each thresholded ridge map of the lower image;
   candidate ego pairs are segment pairs that meet above both at a plausible horizon, straddle
   the image centre at the bottom and have a gap-to-row ratio a real camera height gives. Among
   the well supported ones the narrowest at the bottom row is tried first (the ego rails lie
   inside neighbour rails, fastener rows, slab and bed edges).
3. Refinement: per row, the strongest thin line is searched in a window around each rail's
   prediction (the kernel follows the gap), the pair model below is refit robustly, and the
   range grows band by band — down to the bottom of the image, which it must reach unless a
   hood's edge crosses the frame where the rails end, then up toward the horizon while both
   rails are found where the model expects them and stay resolvable. A fit that explains under
   half the rows it grew on is refused. Far rails on a light bed often show only their dark sides; such bands extend the
   range but do not move the fit. At a turnout, blades and check rails beside a rail make each row's
   strongest line hop between them: pairs refused for that are tried again, once no pair is clear,
   with each rail measured on its best-supported straight line (``_line_crests``).
4. A second opinion: pairs centred under the camera whose rails reach the bottom are what the
   lines settle alone. A camera mounted anywhere else across the cab (its offset read from the
   pair itself), and rails that stop short of the bottom in the open (motion blur, a wiper, a
   window's corner), need the learned ego-track area (``synrail.rail.learned``, passed as
   ``track_area``) to agree, and no rail may run a gap beside them (three evenly spaced rails make
   two pairs the area cannot tell apart); where no lines lead to a track, the area proposes the
   pair that the same refinement follows.

Rail model: a level pinhole camera sees a ground curve ``X(Z) = o + k Z^2 / 2`` as
``u = A + B t + C / t`` with ``t = v - v_horizon`` exactly, and the two rails of one track (same Z
on one row) differ only in the ``t`` term: ``u = A + (B -/+ D) t + C / t``. So the gap between the
rails is linear in the row and vanishes on the horizon. A quadratic in the row cannot follow a
curve toward the horizon (the ``C / t`` term); this model can, with no more parameters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import cv2
import numpy as np

from synrail.rail.geometry import RAIL_HEAD_WIDTH_M, STANDARD_GAUGE_M

# The fits follow the rail-head centre lines, so the ruler between them is gauge + one head.
HEAD_TO_CENTRES = RAIL_HEAD_WIDTH_M / (STANDARD_GAUGE_M + RAIL_HEAD_WIDTH_M)

# Why a frame has no detection (TrackResult.reason).
NO_RAIL_EDGES = "no rail edges"
NO_RAIL_PAIR = "no converging rail pair"
PAIR_NOT_SUPPORTED = "rail pair not supported by the image"
RAILS_NOT_AT_BOTTOM = "rails do not reach the bottom of the image"
TRACK_OCCLUDED = "track occluded"
PAIR_OFF_CENTRE = "rail pair not under the camera"
RAIL_INSIDE_PAIR = "a rail runs between the pair"
PAIR_BETWEEN_TRACKS = "rail pair between two tracks"
RAILS_TOO_SHORT = "rails followed over too short a stretch"
PAIR_ONE_RAIL_OVER = "a rail runs a gauge beside the pair"

MIN_GAP_PX = 4.0             # closer than this the two rails are no longer resolvable
GAP_SLOPE_RANGE = (0.28, 1.3)  # d(gap)/d(row) = (gauge + head) cos(pitch) / camera height: 1.15-5.4 m
# Rows the rails' vanishing point can have, as the pitch of the camera over the track's plane: CCTV
# cameras look down steeply; the track's plane tilts against the camera's by the grade ahead (a
# 4 % downgrade is 2.3 degrees, more where a sag follows) and a camera can be mounted looking up
# a little, so the rails can vanish well below the image centre (labelled frames: up to 0.66 of
# the height).
PITCH_RANGE_DEG = (-10.0, 25.0)
# Those rows (share of the image height) when the lens is unknown: a wide CCTV lens pitched down
# puts them near the top edge or above it; the pitch range's upward end through a 60-degree lens
# puts them at three quarters of the height.
UNKNOWN_LENS_HORIZON = (-0.5, 0.75)
_TOPHAT_PER_GAP = 1 / 8      # ridge kernel width per rail gap: ~3 bright rail-head widths
_WINDOW_PER_GAP = 0.2        # search window half-width per rail gap: well clear of the other rail
_FIRST_WINDOW_PER_GAP = 0.35  # ... around straight Hough lines, which cut a curve's chords
_CONTEXT_PER_GAP = 0.45      # half-width of the window that sets the background ridge level
_GROWTH = 0.75               # each refinement step reaches rows with t 25 % smaller (farther)
_PAIR_SUPPORT_SHARE = 0.25   # pairs this well supported, relative to the best, are candidates
_MAX_PAIR_TRIES = 4          # candidate pairs followed before the frame is given up
_MIN_SUPPORT = 0.5           # share of rows in a new band where both rails must be found
_MIN_BAND_ROWS = 8           # ... of at least this many rows for a share to mean something
# A cab camera sees its own track from a few metres ahead to tens of metres: rails followed over less
# than half again the distance of their nearest row are a stub of two lines (a road marking and a kerb,
# a check rail), not evidence of a track. (The distance of a row is proportional to 1 / (row - horizon).)
MIN_REACH_RATIO = 1.5
# A cab camera may sit anywhere across the cab (a driver's-side dashcam, a CCTV camera at one
# corner): its lateral offset from the track centre is at most the half-width of the widest
# vehicles (UIC loading gauge 3.15 m wide: 1.58 m, about one rail gap of 1.5 m). A neighbour
# track's centre lies at least 3.5 m from the ego's, so at least 1.9 m (1.3 gaps) from such a
# camera. The offset is read from the pair's own geometry (``_signed_offset``), so a camera's
# yaw, which moves the whole track in the image, does not count against it. Hough chords cut
# curves, so the candidate search allows ``_CHORD_SLACK`` more.
MAX_LATERAL_GAPS = 1.0
_CHORD_SLACK = 0.15
# A sequence's camera keeps its offset from its track (the vehicle sways a few centimetres): a
# pair within this many gaps of the offset its clear frames showed is under that camera.
_MOUNT_TOLERANCE = 0.2
# Most cab cameras sit within half a metre of the vehicle's centre line, where the ego centre
# lies within this share of the gap from the image centre on the bottom row (a curve or yaw
# moves it by a tenth of a gap at most; chords allow 0.5). Pairs that centred are tried first;
# only where none of them is a track does the search allow any mount the cab permits.
MAX_OFF_CENTRE = 0.4
_CENTRED_CHORDS = 0.5
# ... and by its own geometry (``_signed_offset``) the pair runs within this many gaps of the
# camera: a camera turned toward the six-foot beside its track shows that gap mid-image, but
# 0.8 or more of its width beside the camera (RailSem19's correct centred pairs: up to 0.7).
_CENTRED_OFFSET_GAPS = 0.75
# A pair made of the ego's rail and a neighbour's encloses the ego's other rail: a line that runs
# parallel to the pair (on the ground) between them, a share 0.15-0.6 of the half gap from the
# pair's centre on this many of the rows. A rack (at the centre) and check rails (beside each
# rail) lie outside that band.
_INSIDE_BAND = (0.15, 0.6)
_INSIDE_SUPPORT = 0.6
_INSIDE_STRENGTH = 0.5      # ... standing out at least half as much as the pair's weaker rail
# A pair made of two tracks' facing rails (the six-foot, 2-3 m wide) has each track's other rail a
# gauge beyond it: lines 1.95-2.55 half gaps from its centre, on average over the two sides (as well
# supported and as strong). The average, because an error in the pair's fitted centre moves one side
# in and the other out by as much (so does a narrower gauge on one side): each side alone may lie
# 1.6-2.6 half gaps out. A track's own neighbours lie farther (3.5 m between track centres at least:
# 3.7 half gaps), and on one side as often as two.
_BESIDE_BAND = (1.95, 2.55)
_BESIDE_SIDE = (1.6, 2.6)
_ACROSS_BINS = np.linspace(-2.6, 2.6, 417)  # positions across the pair, in half gaps from its centre
# A line a gap beyond one of a pair's rails (2.7-3.3 half gaps from its centre) pairs with that rail
# as well as the pair's other rail does: three evenly spaced rails, and the lines cannot tell which
# two are the track (a street's two tram tracks, a gap apart, show one between them). A standard
# neighbour's near rail lies farther (3.7 half gaps).
_ONE_OVER_BAND = (2.7, 3.3)
_WIDE_BINS = np.linspace(-3.6, 3.6, 577)  # the same spacing as ``_ACROSS_BINS``, a gap farther out
_PRIOR_SEED_SHARE = 0.3      # a prior is followed from the lowest 30 % of the rows it covered
# Rails followed down to where their gap is this share of the gap on the lowest row that shows
# both are the near track, even where the last rows above the image's bottom cannot be measured.
_NEAR_GAP_SHARE = 0.6
# A finding that needs a second opinion (an off-centre camera, rails stopping short in the open) is
# taken where it and the learned ego-track area overlap on at least this share of their union
# (on the rows it spans).
# (With the 6-epoch model, 0.5 and 0.7 on the even-numbered real frames: as many found, fewer wrong
# at 0.7. The 18-epoch model is surer of itself: at 0.7 it seconded a track beside a camera mounted
# between two (the slab null frame, overlap 0.75); 0.75 and 0.8 found as many correct tracks.)
LEARNED_AGREEMENT = 0.8
# Rails on one ground plane share a horizon: two candidate pairs whose horizons lie apart by more
# than this share of the rows below the higher one cannot both be pairs of parallel rails (one
# pairs a rail with a switch's diverging rail or a neighbour's). A pitch change along the track
# moves a far horizon estimate by less.
_HORIZON_SPLIT = 0.15
# A later candidate is followed only where its Hough chords' own horizon lies at least this share of
# that split away (chords cut curves, so they place the horizon only roughly).
_CHORD_HORIZON_SHARE = 0.5
# Where nothing is found at the frame's width, frames at least _COARSE_FROM times this wide are
# searched once more shrunk to it (``_coarse_look``).
COARSE_WIDTH = 640
_COARSE_FROM = 1.5
# ... and taken there only with the camera this close to the pair's centre line, in rail gaps (the
# centred mount allows 0.75 at full width). On the labelled frames and their degraded copies the
# wrong coarse findings lay 0.54-0.65 gaps off, the right ones within 0.49 but one frame's (0.59-0.70).
_COARSE_MAX_OFFSET_GAPS = 0.5
# Occlusion (gap ratios, i.e. distance ratios): a run of rows without the rail pair counts inside
# the range from this one on; at the top of the range (a shortened reach) from this one.
_OCCLUSION_REACH_RATIO = 1.5
_OCCLUSION_RUN_RATIO = 1.25
_OCCLUSION_MIN_GAP_PX = 10.0  # ... on rows where the rails are at least this far apart
# An object standing between the rails (a person, narrower than the gauge, hides neither rail):
# rows where the bed's middle strip differs in colour from both side strips (a sleeper, ballast
# and a slab are alike across the bed), over a quarter more distance than the run starts at (a
# flat thing on the bed spans less; an upright one's rows reach far beyond its foot).
_BED_MIDDLE = 0.15          # |lateral| under this share of the gap
_BED_SIDES = (0.28, 0.42)   # ... and the side strips, clear of the rail heads
_BED_MIN_GAP_PX = 16.0
_BED_CONTRAST_Z = 4.0       # robust z-score over the rows of the middle's distance to the nearer side
# ... whose scale is at least this many 8-bit Lab units: where most of the bed is crushed black its
# rows differ by nothing, and the few lit far rows (or a zoom blur's streaks) would otherwise stand
# out as an object. (Found real frames flagged over eight degradations: 9 at 1 unit, 4 at 2; persons
# caught on procedural scenes 12-70 m ahead: 154 and 150 of 192.)
_BED_NOISE_LAB = 2.0
_BED_SAMPLES = 48           # samples across the bed per row
_CREST_ELEMENT = np.ones((1, 3), dtype=np.uint8)  # a stripe's crest: the row maximum over 3 columns


@dataclass(frozen=True)
class RailFit:
    """One rail-head centre line in the image: ``x(v) = a + b t + c / t``, ``t = v - horizon_v``."""

    horizon_v: float
    a: float
    b: float
    c: float

    def x(self, v: np.ndarray | float) -> np.ndarray:
        """The rail's image column at rows ``v`` (NaN or inf at the horizon row)."""
        t = np.asarray(v, dtype=np.float64) - self.horizon_v
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.a + self.b * t + self.c / t


@dataclass(frozen=True)
class TrackDetection:
    """The ego track found on a frame: its mask, the two rail fits, the vanishing point and a confidence."""

    mask: np.ndarray                       # H x W bool: between the rails' outer head edges
    left_fit: RailFit
    right_fit: RailFit
    vanishing_point: tuple[float, float]   # (u, v) where the rails' tangents at the bottom meet
    confidence: float                      # share of rows where both rails lie where the fits say
    top_row: int                           # first (farthest) row the mask covers
    bottom_row: int | None = None          # last row it covers, above a hood; None: the image's last
    followed: bool = False                 # found by following a prior (the previous frame's fit)

    @property
    def horizon_v(self) -> float:
        """The horizon row both rail fits share."""
        return self.left_fit.horizon_v

    def gap_px(self, v: np.ndarray | float) -> np.ndarray:
        """Distance between the two rail-head centre lines at row ``v``."""
        return self.right_fit.x(v) - self.left_fit.x(v)

    def centre_x(self, v: np.ndarray | float) -> np.ndarray:
        """The track centre's column at rows ``v``: midway between the rail-head centre lines."""
        return 0.5 * (self.left_fit.x(v) + self.right_fit.x(v))


@dataclass(frozen=True)
class TrackResult:
    """A detection, or None and why (so a frame without a track can be quarantined)."""

    detection: TrackDetection | None
    reason: str | None = None


@dataclass(frozen=True)
class _PairModel:
    """Both rails: ``u = a + (b -/+ d) t + c / t``, ``t = v - horizon_v``."""

    horizon_v: float
    a: float
    b: float
    c: float
    d: float

    def predict(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = v - self.horizon_v
        centre = self.a + self.b * t + self.c / t
        return centre - self.d * t, centre + self.d * t

    def slopes(self, v: np.ndarray) -> np.ndarray:
        """dx/dv of the left and right rail, 2 x len(v)."""
        t = v - self.horizon_v
        centre = self.b - self.c / (t * t)
        return np.stack([centre - self.d, centre + self.d])

    def residual_scale(self, v: np.ndarray) -> np.ndarray:
        """How far (px) a rail sample may sit from the model: wide near rails measure less precisely."""
        return 2.0 + 0.04 * 2 * self.d * np.maximum(v - self.horizon_v, 0.0)

    def inlier_rows(self, samples: _RailSamples) -> np.ndarray:
        """Rows where both rails were found where this model puts them."""
        left, right = self.predict(samples.rows)
        scale = self.residual_scale(samples.rows)
        with np.errstate(invalid="ignore"):
            return (np.abs(samples.left - left) <= scale) & (np.abs(samples.right - right) <= scale)

    def row_at_gap(self, gap_px: float) -> float:
        return self.horizon_v + gap_px / (2 * self.d)


@dataclass(frozen=True)
class _Segments:
    """Line segments as x = m y + q over rows [y_low, y_high]."""

    m: np.ndarray
    q: np.ndarray
    y_low: np.ndarray
    y_high: np.ndarray
    length: np.ndarray


@dataclass(frozen=True)
class _RailSamples:
    rows: np.ndarray      # row of each sample
    left: np.ndarray      # measured rail-centre columns (NaN where not found)
    right: np.ndarray
    dark: np.ndarray      # True where a dark line (the rail's side) stood in for the bright head

    def support(self) -> float:
        """Share of rows where both rails were found."""
        return float((np.isfinite(self.left) & np.isfinite(self.right)).mean()) if self.rows.size else 0.0

    def straightness(self, tolerance_px: float = 2.0) -> float:
        """Share of rows where both rails lie on a straight line through their own samples,
        within ``tolerance_px``.

        Used where no model is trusted yet (around Hough chords): over a short band a rail is
        straight, while peaks picked from ballast grain or a wrong-polarity map scatter.
        """
        if self.rows.size < 4:
            return 0.0
        on_line = np.ones(self.rows.size, dtype=bool)
        for x in (self.left, self.right):
            on_line &= _on_robust_line(self.rows, x, tolerance_px)
        return float(on_line.mean())

    def joined(self, other: _RailSamples) -> _RailSamples:
        return _RailSamples(*(np.concatenate([getattr(self, name), getattr(other, name)])
                              for name in ("rows", "left", "right", "dark")))


def _on_robust_line(rows: np.ndarray, x: np.ndarray, tolerance_px: float = 2.0) -> np.ndarray:
    """Which samples lie within ``tolerance_px`` (or 3 robust sigmas, if less tight) of a
    straight line refit twice on its own inliers; NaN samples never do."""
    found = np.isfinite(x)
    keep = found.copy()
    line = np.zeros_like(rows)
    for _ in range(3):
        if keep.sum() < 3:
            return np.zeros_like(found)
        line = _straight_line(rows[keep], x[keep], rows)
        residual = np.abs(np.where(found, x, np.inf) - line)
        keep = found & (residual <= max(tolerance_px, 3 * 1.4826 * _median(residual[keep])))
    return found & (np.abs(np.where(found, x, np.inf) - line) <= tolerance_px)


def _straight_line(rows: np.ndarray, x: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The least-squares line through (``rows``, ``x``), evaluated on ``at``: ``np.polyfit`` of
    degree 1 in closed form, in under half its time at the finder's sizes."""
    row_mean, x_mean = rows.mean(), x.mean()
    centred = rows - row_mean
    slope = float(centred @ (x - x_mean)) / float(centred @ centred)
    return x_mean + slope * (at - row_mean)


def detect_track(image_bgr: np.ndarray, *, hfov_deg: float | None = None, max_rows_fraction: float = 0.6,
                 bottom_ignore: float = 0.0, ignore_mask: np.ndarray | None = None,
                 prior: TrackDetection | None = None, track_area: np.ndarray | None = None,
                 mount_offset: float | None = None) -> TrackResult:
    """Finds the ego track in a BGR (or grey) cab-view image.

    Pairs centred under the camera whose rails reach the bottom (or a hood) are taken as they are,
    as before a learned model existed, unless the learned area disputes one and seconds a later
    pair whose horizon lies apart from it (``_overrules``: the two cannot both be rail pairs on the
    ground). Findings that need more than the lines (a camera mounted
    off the vehicle's centre line; rails that stop short of the bottom in the open) are taken only
    where the learned ego-track area (``track_area``) agrees; where no pair of lines leads to a
    track, the learned area itself proposes the pair that the classical fit then refines.

    Args:
        image_bgr: the frame, H x W x 3 BGR or H x W grey.
        hfov_deg: the horizontal field of view, when known; it only bounds where the horizon may
            lie (pitch range). None (unknown lens) allows any horizon a cab camera can have.
            Estimating the camera itself is ``estimate.estimate_geometry``'s job.
        max_rows_fraction: the rail pair is first looked for in this lower share of the image
            (the rails are then followed as far up as they can be seen).
        bottom_ignore: share of the image height at the bottom that shows no track (a cab's
            hood or dashboard): the rails must reach the row above it.
        ignore_mask: H x W bool, True where the image shows no scene (burnt-in text, a HUD, a
            hood); nothing there counts as a rail. Rows it covers entirely at the bottom count
            as ``bottom_ignore``.
        prior: the previous frame's detection in the same sequence (same camera and size). The
            rails are then first followed from where it put them, without the line search; if
            that fails, the full search runs as without a prior.
        track_area: H x W probability (0-1) of the ego track area from a learned model
            (``synrail.rail.learned.TrackAreaModel.probability``), or that area as a boolean mask
            (``TrackAreaModel.mask``, the same findings for less work), or None: then only centred
            pairs reaching the bottom (or a hood) are taken.
        mount_offset: the camera's lateral offset from its track, in rail gaps (signed, as
            ``lateral_offset`` gives it), that the frames of its sequence have shown; None when
            not known. Pairs at that offset are looked for first, and need no second opinion:
            the camera rides over its track.

    Returns:
        The detection, or None with the reason. Rails that end above the bottom are accepted
        only where a horizontal occluder edge (a hood) crosses the track there. Where nothing is
        found, a frame at least 1.5 times ``COARSE_WIDTH`` wide is searched once more shrunk to
        that width (``_coarse_look``): its centred findings are drawn back at the frame's size.
    """
    height, width = image_bgr.shape[:2]
    frame, first_row, horizon_limits = _prepared(image_bgr, hfov_deg, max_rows_fraction, bottom_ignore, ignore_mask)
    grey, visible = frame.grey, frame.grey.shape[0]
    if prior is not None:
        followed = _follow_prior(frame, prior, horizon_limits, width, height)
        if followed is not None:
            return TrackResult(followed)
    area = _learned_area(track_area, visible)
    first_failure = segments = None
    try:
        segments = _ridge_segments(grey, max(0, first_row), frame.keep)
    except _NoTrack as failure:
        first_failure = failure
    mounts = ([_Mount(offset=mount_offset)] if mount_offset is not None else []) + [_CENTRED]
    if area is not None:  # a pair under any other mount is taken on the learned area's word only
        mounts.append(_ANYWHERE)
    ambiguous: list[tuple[_PairModel, tuple[int, int], _Mount]] = []
    contested: TrackDetection | None = None
    for mount in mounts if segments is not None else ():
        try:
            candidates = _ego_pair_candidates(segments, width, visible, horizon_limits, mount)
        except _NoTrack as failure:
            first_failure = first_failure or failure
            continue
        for model, seen_rows in candidates:
            if contested is not None and not _horizons_apart(model.horizon_v, contested.left_fit.horizon_v, height,
                                                             share=_CHORD_HORIZON_SHARE):
                continue  # its chords converge where the disputed pair's rails do: it cannot overrule
            try:
                detection = _followed_pair(frame, model, seen_rows, horizon_limits, width, height, mount, area=area)
            except _AmbiguousRails as failure:
                first_failure = first_failure or failure
                if mount.settles:
                    ambiguous.append((model, seen_rows, mount))
                continue
            except _NoTrack as failure:
                first_failure = first_failure or failure
                if str(failure) != RAILS_NOT_AT_BOTTOM:
                    continue
                # Rails followed from straight chords can stop short in the open where a curve or a
                # switch's blades lie in the chords' wide first window: followed again, its fit
                # trusted from the first band on (narrow windows), the pair may reach the bottom.
                try:
                    detection = _followed_pair(frame, model, seen_rows, horizon_limits, width, height, mount,
                                               from_prior=True, area=area)
                except _NoTrack:
                    continue
            if contested is not None:
                if _overrules(detection, contested, area, height):
                    return TrackResult(detection)
                continue
            if mount.settles and area is not None and not _agrees_with_area(detection, area):
                # Taken on the lines' word, unless a later pair of this mount overrules it.
                contested = detection
                continue
            return TrackResult(detection)
        if contested is not None:
            return TrackResult(contested)
    # Pairs whose rails ran beside other lines where they were seen, once no pair was clear (a
    # clear pair comes first: a rack or guard rail in a track's middle pairs with one of its rails),
    # and only under a camera whose mount settles the pair (the learned area, which would second
    # the others, takes a rack for a rail as readily).
    for model, seen_rows, mount in ambiguous:
        try:
            return TrackResult(_followed_pair(frame, model, seen_rows, horizon_limits, width, height, mount,
                                              area=area, best_line=True))
        except _NoTrack:
            continue
    if area is not None and (proposal := _learned_proposal(area, horizon_limits)) is not None:
        try:
            return TrackResult(_proposed_track(frame, proposal, horizon_limits, width, height, area))
        except _NoTrack as failure:
            first_failure = first_failure or failure
    if _gets_a_coarse_look(width):
        coarse = _coarse_look(image_bgr, hfov_deg=hfov_deg, max_rows_fraction=max_rows_fraction,
                              bottom_ignore=bottom_ignore, ignore_mask=ignore_mask, mount_offset=mount_offset)
        if coarse is not None:
            return TrackResult(coarse)
    return TrackResult(None, str(first_failure))


def _learned_area(track_area: np.ndarray | None, visible: int) -> np.ndarray | None:
    """The learned ego-track area of the visible rows as a boolean mask (probability at least 0.5)."""
    if track_area is None:
        return None
    area = np.asarray(track_area)[:visible]
    return area if area.dtype == bool else area.astype(np.float32) >= 0.5


def candidate_tracks(image_bgr: np.ndarray, *, hfov_deg: float | None = None, max_rows_fraction: float = 0.6,
                     track_area: np.ndarray | None = None, pairs_per_mount: int = _MAX_PAIR_TRIES
                     ) -> list[TrackDetection]:
    """Every track the finder's candidates lead to once followed, before any rule judges them: a
    diagnostic of where ``detect_track`` loses a frame (``benchmarks/rail.py --ceiling``).

    Where none of them is the ego track, the proposals failed; where one is but ``detect_track``
    refused the frame or took another, the choice did (its mounts, the learned agreement, the
    rules on lines beside the pair, the order candidates are tried in).

    Args:
        image_bgr: the frame, H x W x 3 BGR or H x W grey.
        hfov_deg: as for ``detect_track``.
        max_rows_fraction: as for ``detect_track``.
        track_area: as for ``detect_track``; it adds the learned area's proposal.
        pairs_per_mount: candidate pairs followed under each mount (centred, anywhere);
            ``detect_track`` follows at most ``_MAX_PAIR_TRIES``.

    Returns:
        The followed tracks at the frame's size: each candidate pair followed both from its Hough
        chords and trusted from its first band (on each rail's best straight line where its rails
        were not single lines), the learned proposal, and (on a frame at least 1.5 times
        ``COARSE_WIDTH`` wide) the same at that width, drawn back.
    """
    height, width = image_bgr.shape[:2]
    frame, first_row, horizon_limits = _prepared(image_bgr, hfov_deg, max_rows_fraction, 0.0, None)
    starts: list[tuple[_PairModel, tuple[int, int], bool]] = []
    try:
        segments = _ridge_segments(frame.grey, max(0, first_row))
    except _NoTrack:
        segments = None
    for mount in (_CENTRED, _ANYWHERE) if segments is not None else ():
        try:
            pairs = _ego_pair_candidates(segments, width, height, horizon_limits, mount, limit=pairs_per_mount)
        except _NoTrack:
            continue
        starts += [(model, seen_rows, trusted) for model, seen_rows in pairs for trusted in (False, True)]
    area = _learned_area(track_area, height)
    if area is not None and (proposal := _learned_proposal(area, horizon_limits)) is not None:
        starts += [(*proposal, trusted) for trusted in (True, False)]
    tracks = []
    for model, seen_rows, trusted in starts:
        try:
            fitted, samples, top_row, bottom_row, _ = _track_rails(frame, model, seen_rows, horizon_limits, trusted)
        except _AmbiguousRails:  # on each rail's best straight line (detect_track: under a mount that settles)
            try:
                fitted, samples, top_row, bottom_row, _ = _track_rails(frame, model, seen_rows, horizon_limits,
                                                                       trusted, best_line=True)
            except _NoTrack:
                continue
        except _NoTrack:
            continue
        tracks.append(_detection(fitted, top_row, bottom_row, width, height,
                                 float(fitted.inlier_rows(samples).mean())))
    if _gets_a_coarse_look(width):
        small, _ = shrunk(image_bgr, None, COARSE_WIDTH)
        tracks += [rescaled(track, width, height) for track in candidate_tracks(
            small, hfov_deg=hfov_deg, max_rows_fraction=max_rows_fraction, pairs_per_mount=pairs_per_mount)]
    return tracks


def _prepared(image_bgr: np.ndarray, hfov_deg: float | None, max_rows_fraction: float, bottom_ignore: float,
              ignore_mask: np.ndarray | None) -> tuple[_Frame, int, tuple[float, float]]:
    """The frame as the search reads it (grey, lightly smoothed, cut above a hood, its ignore mask
    as ``keep``), the first row pairs are looked for on, and the rows the horizon may lie on."""
    height, width = image_bgr.shape[:2]
    grey = image_bgr if image_bgr.ndim == 2 else cv2.cvtColor(image_bgr, cv2.COLOR_BGR2GRAY)
    grey = cv2.GaussianBlur(grey, (3, 3), 0)
    visible = _visible_rows(height, bottom_ignore, ignore_mask)
    keep = None if ignore_mask is None else ~ignore_mask[:visible]
    first_row = int(visible - height * max_rows_fraction)
    return _Frame(grey[:visible], keep, {}), first_row, _horizon_limits(width, height, hfov_deg)


def _gets_a_coarse_look(width: int) -> bool:
    """Whether a frame this wide is searched again at ``COARSE_WIDTH`` where nothing is found."""
    return width >= _COARSE_FROM * COARSE_WIDTH


def _coarse_look(image_bgr: np.ndarray, *, hfov_deg: float | None, max_rows_fraction: float, bottom_ignore: float,
                 ignore_mask: np.ndarray | None, mount_offset: float | None) -> TrackDetection | None:
    """The track found on the frame shrunk to ``COARSE_WIDTH`` columns, drawn back at the frame's
    size, or None.

    The finder's pixel rules (ridge floors, band heights, the fit's residual scale, the Hough
    segments' lengths) are not free of scale: the labelled frames at 640 columns show some tracks
    the search at 1280 misses (rusty near rails, switches) and miss others. So the coarse width
    is a second look where the first found nothing, not a replacement. Only findings the lines
    settle alone are taken there (a pair centred under the camera, or at the sequence's known
    mount, reaching the bottom or a hood) and only within ``_COARSE_MAX_OFFSET_GAPS`` of where the
    camera rides (its known mount, else its centre line). No learned second opinion: at this
    width it seconded neighbour tracks and a null frame.
    """
    height, width = image_bgr.shape[:2]
    small, mask = shrunk(image_bgr, ignore_mask, COARSE_WIDTH)
    found = detect_track(small, hfov_deg=hfov_deg, max_rows_fraction=max_rows_fraction, bottom_ignore=bottom_ignore,
                         ignore_mask=mask, mount_offset=mount_offset).detection
    if found is None or abs(lateral_offset(found) - (mount_offset or 0.0)) > _COARSE_MAX_OFFSET_GAPS:
        return None
    return rescaled(found, width, height)


def shrunk(image_bgr: np.ndarray, ignore_mask: np.ndarray | None, width: int
           ) -> tuple[np.ndarray, np.ndarray | None]:
    """The frame and its ignore mask shrunk to ``width`` columns (aspect kept); unchanged when the
    frame is not wider.

    Args:
        image_bgr: the frame.
        ignore_mask: H x W bool, True where the frame shows no scene, or None.
        width: the width to shrink to.

    Returns:
        The frame and the mask at that width: a shrunk pixel shows no scene where any pixel under
        it showed none.
    """
    height, frame_width = image_bgr.shape[:2]
    if frame_width <= width:
        return image_bgr, ignore_mask
    size = (width, max(1, round(height * width / frame_width)))
    image = cv2.resize(image_bgr, size, interpolation=cv2.INTER_AREA)
    if ignore_mask is not None:
        ignore_mask = cv2.resize(ignore_mask.astype(np.float32), size, interpolation=cv2.INTER_AREA) > 0
    return image, ignore_mask


def _followed_pair(frame: _Frame, model: _PairModel, seen_rows: tuple[int, int], horizon_limits: tuple[float, float],
                   width: int, height: int, mount: _Mount, from_prior: bool = False,
                   area: np.ndarray | None = None, vetted: bool = False, best_line: bool = False) -> TrackDetection:
    """The track a candidate pair leads to, once followed and vetted; ``_NoTrack`` with the reason
    when it is none, or not under a camera mounted as ``mount`` says.

    A finding beyond a centred pair reaching the bottom needs a second opinion: the learned
    ``area`` (boolean, the visible rows) must agree with it (``_agrees_with_area``), unless the caller
    ``vetted`` it already (a sequence's previous frame led to it) or it lies at the offset the
    sequence's camera is known to have. A finding that needs the area's word is refused where a
    rail-like line runs a gap beyond one of its rails (``_rail_one_over``): the area cannot tell it
    from the pair one rail over.
    """
    model, samples, top_row, bottom_row, near_only = _track_rails(frame, model, seen_rows, horizon_limits,
                                                                  from_prior, best_line)
    confidence = float(model.inlier_rows(samples).mean())
    if confidence < _MIN_SUPPORT:
        # The refits drifted: the final model explains too few of the rows it grew on.
        raise _NoTrack(PAIR_NOT_SUPPORTED)
    if not mount.holds(model, bottom_row, width):
        raise _NoTrack(PAIR_OFF_CENTRE)
    if (beside := _rails_beside(frame, model, top_row, bottom_row)) is not None:
        raise _NoTrack(beside)
    if not vetted and (bottom_row - model.horizon_v) < MIN_REACH_RATIO * (top_row - model.horizon_v):
        raise _NoTrack(RAILS_TOO_SHORT)  # before the mask is drawn: nothing of it is needed
    detection = _detection(model, top_row, bottom_row, width, height, confidence)
    if vetted:
        return detection
    if near_only or not mount.settles:
        if not _agrees_with_area(detection, area):
            raise _NoTrack(RAILS_NOT_AT_BOTTOM if near_only else PAIR_OFF_CENTRE)
        if _rail_one_over(frame, model, top_row, bottom_row):
            # Three evenly spaced rails: the area that seconds this pair cannot tell it from the one
            # a rail over. (A settled pair reaching the bottom stands: tram tracks may lie a gap apart.)
            raise _NoTrack(PAIR_ONE_RAIL_OVER)
    return detection


def _agrees_with_area(detection: TrackDetection, area: np.ndarray | None) -> bool:
    """Whether the learned ego-track area covers the detection (``_area_agreement`` at least
    ``LEARNED_AGREEMENT``). No area: no second opinion."""
    return area is not None and _area_agreement(detection, area) >= LEARNED_AGREEMENT


def _overrules(alternative: TrackDetection, contested: TrackDetection, area: np.ndarray, height: int) -> bool:
    """Whether a later pair under a mount that settles takes the place of the first one found
    there, which the learned area did not second: the area seconds the later one, it reaches as far
    down, and the two pairs' horizons lie apart (``_HORIZON_SPLIT``), so they cannot both be
    rail pairs and the area settles which one is.

    A neighbour track shares the ego track's horizon, so the area never trades the one for the other.
    """
    reaches = alternative.bottom_row is None or (
        contested.bottom_row is not None and alternative.bottom_row >= contested.bottom_row)
    return (reaches and _horizons_apart(alternative.left_fit.horizon_v, contested.left_fit.horizon_v, height)
            and _agrees_with_area(alternative, area))


def _horizons_apart(a: float, b: float, height: int, share: float = 1.0) -> bool:
    """Whether two horizon rows lie further apart than ``share`` times ``_HORIZON_SPLIT`` of the image
    rows below the higher one."""
    higher, lower = sorted((a, b))
    return lower - higher > share * _HORIZON_SPLIT * (height - higher)


def _area_agreement(detection: TrackDetection, area: np.ndarray) -> float:
    """The intersection over union of the detection's track area and the learned one, on the rows
    the detection spans."""
    last = area.shape[0] if detection.bottom_row is None else min(area.shape[0], detection.bottom_row + 1)
    rows = slice(detection.top_row, last)
    found, learned = detection.mask[rows], area[rows]
    union = np.count_nonzero(found | learned)
    return np.count_nonzero(found & learned) / union if union else 0.0


def _learned_proposal(area: np.ndarray, horizon_limits: tuple[float, float]
                      ) -> tuple[_PairModel, tuple[int, int]] | None:
    """A pair model fitted to the edges of the learned area's largest blob reaching the lower
    image, and the rows to start following it from (its lower half), or None.

    The area runs between the rails' outer head edges, so its edges lie half a head outside
    the rail centres the pair model follows.
    """
    height, width = area.shape
    # Grana's block-based labelling: the same components, in a third of the default's time here.
    count, labels, stats, _ = cv2.connectedComponentsWithStatsWithAlgorithm(area.astype(np.uint8), 8, cv2.CV_32S,
                                                                            cv2.CCL_GRANA)
    low_enough = [i for i in range(1, count)
                  if stats[i, cv2.CC_STAT_TOP] + stats[i, cv2.CC_STAT_HEIGHT] >= 0.7 * height]
    if not low_enough:
        return None
    blob = labels == max(low_enough, key=lambda i: stats[i, cv2.CC_STAT_AREA])
    rows = np.flatnonzero(blob.any(axis=1))
    first = np.argmax(blob[rows], axis=1).astype(np.float64)
    last = width - 1 - np.argmax(blob[rows, ::-1], axis=1).astype(np.float64)
    inside = (first > 0) & (last < width - 1) & (last - first >= MIN_GAP_PX)  # edges the frame did not cut
    if inside.sum() < 8:
        return None
    rows, first, last = rows[inside].astype(np.float64), first[inside], last[inside]
    inset = 0.5 * HEAD_TO_CENTRES * (last - first)
    gap_fit = np.polyfit(rows, (last - inset) - (first + inset), 1)
    if gap_fit[0] <= 0:
        return None
    horizon = -gap_fit[1] / gap_fit[0]
    centre = np.polyfit(rows - horizon, 0.5 * (first + last), 1)
    start = _PairModel(horizon_v=horizon, a=centre[1], b=centre[0], c=0.0, d=gap_fit[0] / 2)
    samples = _RailSamples(rows, first + inset, last - inset, np.zeros(rows.size, dtype=bool))
    model = _fit_pair(samples, start, horizon_limits, trust_previous=False)
    if model is None:
        return None
    middle = int(rows[rows.size // 2])
    return model, (middle, int(rows[-1]))


def _proposed_track(frame: _Frame, proposal: tuple[_PairModel, tuple[int, int]], horizon_limits: tuple[float, float],
                    width: int, height: int, area: np.ndarray) -> TrackDetection:
    """The track the learned area's proposal leads to, which the area must second; ``_NoTrack`` with
    the reason when there is none.

    The proposal is followed trusted from its first band (narrow windows). Where the area's edges
    put the rails farther off than those windows reach (an area spread past the rails), its first
    band is searched as Hough chords are (the wide window, untrusted).
    """
    try:
        return _followed_pair(frame, *proposal, horizon_limits, width, height, _ANYWHERE, from_prior=True, area=area)
    except _NoTrack:
        return _followed_pair(frame, *proposal, horizon_limits, width, height, _ANYWHERE, area=area)


def follow_track(image_bgr: np.ndarray, prior: TrackDetection, *, hfov_deg: float | None = None,
                 max_rows_fraction: float = 0.6, bottom_ignore: float = 0.0, ignore_mask: np.ndarray | None = None
                 ) -> TrackDetection | None:
    """The track followed from ``prior`` alone, without the full search: where a neighbouring frame
    of the same camera put the rails, the rails are looked for first (``detect_track`` with a
    ``prior`` does this before its search).

    Args:
        image_bgr: the frame, H x W x 3 BGR or H x W grey.
        prior: a detection on a frame of the same camera and size (a later or an earlier one).
        hfov_deg: as for ``detect_track``.
        max_rows_fraction: as for ``detect_track``.
        bottom_ignore: as for ``detect_track``.
        ignore_mask: as for ``detect_track``.

    Returns:
        The detection (``followed``), or None where the rails are not where the prior leads.
    """
    height, width = image_bgr.shape[:2]
    frame, _, horizon_limits = _prepared(image_bgr, hfov_deg, max_rows_fraction, bottom_ignore, ignore_mask)
    return _follow_prior(frame, prior, horizon_limits, width, height)


def _follow_prior(frame: _Frame, prior: TrackDetection, horizon_limits: tuple[float, float], width: int,
                  height: int) -> TrackDetection | None:
    """The track followed from the prior's fit (a cab camera moves little between frames), or
    None when the rails are not where it leads (a turnout taken, a cut in the video)."""
    model = _pair_model(prior)
    visible = frame.grey.shape[0]
    bottom = min(visible - 1, prior.bottom_row if prior.bottom_row is not None else visible - 1)
    low = int(bottom - _PRIOR_SEED_SHARE * (bottom - prior.top_row))
    if not 0 <= low < bottom or model.horizon_v >= low:
        return None
    try:
        detection = _followed_pair(frame, model, (low, bottom), horizon_limits, width, height,
                                   _ANYWHERE, from_prior=True, vetted=True)
    except _NoTrack:
        return None
    return dataclasses.replace(detection, followed=True)


def _off_centre(model: _PairModel, row: int, width: int) -> float:
    """How far the pair's centre lies from the image's centre column on ``row``, in rail gaps."""
    left, right = (float(x[0]) for x in model.predict(np.array([float(row)])))
    return abs(0.5 * (left + right) - (width - 1) / 2) / (right - left)


def _signed_offset(model: _PairModel) -> float:
    """The pair's centre line beside the camera, in rail gaps (positive: to its right).

    A ground line ``X = o + k Z^2 / 2`` seen from height ``h`` is ``u = A + (o / h) f' t + ...``
    and the half gap grows by ``(gap / 2) / h`` per row, so ``b / (2 d)`` is ``o / gap`` whatever
    the curve (the ``c / t`` term) and the camera's yaw (which moves ``a``) are.
    """
    return model.b / (2 * model.d)


def lateral_offset(detection: TrackDetection) -> float:
    """The track centre's offset from the camera, in rail gaps, signed (positive: the track lies
    to the camera's right): ``b / 2d`` of the detection's rail fits (``_signed_offset``).

    Args:
        detection: a found track.

    Returns:
        The offset; a camera rides over its track within ``MAX_LATERAL_GAPS`` of it.
    """
    return _signed_offset(_pair_model(detection))


@dataclass(frozen=True)
class _Mount:
    """Where the camera may sit across the cab, for one search: on the vehicle's centre line
    (``centred``), anywhere the cab permits, or at a sequence's known ``offset`` (rail gaps)."""

    centred: bool = False
    offset: float | None = None

    @property
    def settles(self) -> bool:
        """Whether a pair under such a camera is the ego track on the lines' word alone."""
        return self.centred or self.offset is not None

    def off(self, centre_slope: np.ndarray, gap_slope: np.ndarray, bottom_off_centre: np.ndarray
            ) -> tuple[np.ndarray, float]:
        """How far candidate pairs lie from where this mount puts the ego track, and the limit (Hough
        chords cut curves, so the limits allow more than the fitted pair's)."""
        if self.centred:
            return bottom_off_centre, _CENTRED_CHORDS
        lateral = centre_slope / gap_slope  # ``_signed_offset`` of the chords' straight pair
        if self.offset is None:
            return np.abs(lateral), MAX_LATERAL_GAPS + _CHORD_SLACK
        return np.abs(lateral - self.offset), _MOUNT_TOLERANCE + _CHORD_SLACK

    def holds(self, model: _PairModel, bottom_row: int, width: int) -> bool:
        """Whether a fitted pair lies where this mount puts the ego track."""
        if self.centred:
            return (_off_centre(model, bottom_row, width) <= MAX_OFF_CENTRE
                    and abs(_signed_offset(model)) <= _CENTRED_OFFSET_GAPS)
        if self.offset is None:
            return abs(_signed_offset(model)) <= MAX_LATERAL_GAPS
        return abs(_signed_offset(model) - self.offset) <= _MOUNT_TOLERANCE


_CENTRED, _ANYWHERE = _Mount(centred=True), _Mount()


def _rails_beside(frame: _Frame, model: _PairModel, top_row: int, bottom_row: int) -> str | None:
    """Why rail-like lines parallel to the pair say it is no track, or None: one runs between its
    rails (``_INSIDE_BAND``: the ego's rail paired with a neighbour's), or one runs on each side about
    a gauge beyond its rails (``_BESIDE_BAND``: the six-foot between two tracks, their other rails).
    """
    band = (np.abs(_ACROSS_BINS) >= _INSIDE_BAND[0]) & (np.abs(_ACROSS_BINS) <= _INSIDE_BAND[1])
    beside = (np.abs(_ACROSS_BINS) >= _BESIDE_SIDE[0]) & (np.abs(_ACROSS_BINS) <= _BESIDE_SIDE[1])
    for line in _parallel_lines(frame, model, top_row, bottom_row, _ACROSS_BINS):
        if (band & line).any():
            return RAIL_INSIDE_PAIR
        outer = beside & line
        # Each line on the left paired with each on the right: where the pair's centre puts them.
        average = 0.5 * (-_ACROSS_BINS[outer & (_ACROSS_BINS < 0)][:, None] + _ACROSS_BINS[outer & (_ACROSS_BINS > 0)])
        if ((average >= _BESIDE_BAND[0]) & (average <= _BESIDE_BAND[1])).any():
            return PAIR_BETWEEN_TRACKS
    return None


def _rail_one_over(frame: _Frame, model: _PairModel, top_row: int, bottom_row: int) -> bool:
    """Whether a rail-like line runs parallel to the pair a gap beyond one of its rails
    (``_ONE_OVER_BAND``), in either polarity."""
    one_over = (np.abs(_WIDE_BINS) >= _ONE_OVER_BAND[0]) & (np.abs(_WIDE_BINS) <= _ONE_OVER_BAND[1])
    return any((one_over & line).any() for line in _parallel_lines(frame, model, top_row, bottom_row, _WIDE_BINS))


def _parallel_lines(frame: _Frame, model: _PairModel, top_row: int, bottom_row: int, bins: np.ndarray
                    ) -> Iterator[np.ndarray]:
    """For bright lines, then dark ones: at which of the positions ``bins`` across the pair (half
    gaps from its centre) a rail-like line runs parallel to it; nothing where the pair covers too
    few rows to tell.

    Each row's ridge map is sampled at those positions; a line on the ground parallel to the rails
    keeps its position there from row to row. It counts where it stands out from the pair's own bed
    on most rows and about as much as the pair's weaker rail does.
    """
    # Every other row: a rail's support is a share of rows, and this halves the top-hats.
    rows = np.arange(max(top_row, int(math.ceil(model.row_at_gap(4 * MIN_GAP_PX)))), bottom_row + 1, 2,
                     dtype=np.float64)
    if rows.size < 8:
        return
    t = rows - model.horizon_v
    centre = model.a + model.b * t + model.c / t
    columns = centre[:, None] + bins[None, :] * (model.d * t)[:, None]
    kernels = np.maximum(3, 2 * model.d * t * _TOPHAT_PER_GAP)
    for bright in (True, False):
        ridge = _row_tophat(frame.grey, rows.astype(np.int64), kernels, bright).astype(np.float32)
        if frame.keep is not None:
            ridge = _masked(ridge, frame.keep[rows.astype(np.int64)]).astype(np.float32)
        samples = cv2.remap(ridge, columns.astype(np.float32),
                            np.repeat(np.arange(rows.size, dtype=np.float32)[:, None], columns.shape[1], axis=1),
                            cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        between = samples[:, np.abs(bins) <= 1.05]  # the background level: of the pair's own bed
        level = _row_medians(between)[:, None]
        spread = _row_medians(np.abs(between - level))[:, None]
        crest = samples >= cv2.dilate(samples, np.ones((1, 5), np.uint8))
        peak = crest & (samples - level >= np.maximum(3.0, 4 * spread))
        # A peak within a bin either side counts for the line (the fit is not exact).
        support = cv2.dilate(peak.astype(np.uint8), np.ones((1, 3), np.uint8)).mean(axis=0)
        # ... and it must stand out about as much as the pair's own rails do in this polarity
        # (motion blur streaks the bed along the same lines, but faintly).
        strength = _row_medians((samples - level).T)
        rails = min(float(strength[np.abs(bins + side) <= 0.05].max()) for side in (-1, 1))
        yield (support >= _INSIDE_SUPPORT) & (strength >= _INSIDE_STRENGTH * rails)


def _pair_model(detection: TrackDetection) -> _PairModel:
    """The pair model behind a detection's two rail fits."""
    left, right = detection.left_fit, detection.right_fit
    return _PairModel(horizon_v=left.horizon_v, a=left.a, b=0.5 * (left.b + right.b), c=left.c,
                      d=0.5 * (right.b - left.b))


def rail_pair_rows(image_bgr: np.ndarray, detection: TrackDetection, *, top_row: int | None = None,
                   ignore_mask: np.ndarray | None = None) -> np.ndarray:
    """Rows (length H, bool) where both rails show (in one polarity) where the fit puts them,
    or near there and as far apart as it says, from ``top_row`` (default: the detection's) down to the
    bottom of its range.

    Args:
        image_bgr: the frame (BGR or grey) the detection was made on.
        detection: its detection.
        top_row: the first row to look at (the fit is extended up to it).
        ignore_mask: H x W bool, True where nothing counts as a rail (as for ``detect_track``).

    Returns:
        H bools; False outside the rows looked at.
    """
    model = _pair_model(detection)
    height = image_bgr.shape[0]
    top = max(0, detection.top_row if top_row is None else top_row, int(math.ceil(model.row_at_gap(MIN_GAP_PX))))
    bottom = height - 1 if detection.bottom_row is None else detection.bottom_row
    grey = image_bgr if image_bgr.ndim == 2 else cv2.cvtColor(image_bgr, cv2.COLOR_BGR2GRAY)
    frame = _Frame(cv2.GaussianBlur(grey, (3, 3), 0), None if ignore_mask is None else ~ignore_mask)
    rows = np.arange(top, bottom + 1, dtype=np.float64)
    seen = np.zeros(height, dtype=bool)
    left, right = model.predict(rows)
    for bright in (True, False):
        seen[top:bottom + 1] |= model.inlier_rows(_measure_rails(frame, model, rows, bright, _WINDOW_PER_GAP))
        # In a wide window the pair counts wherever its gap is the fit's: rails bending away
        # from a fit that stopped short of a curve are still rails, not an object.
        band = _measure_rails(frame, model, rows, bright, _FIRST_WINDOW_PER_GAP)
        with np.errstate(invalid="ignore"):
            seen[top:bottom + 1] |= np.abs((band.right - band.left) - (right - left)) <= model.residual_scale(rows)
    return seen


def track_occluded(image_bgr: np.ndarray, detection: TrackDetection, expected_rows: np.ndarray, *,
                   ignore_mask: np.ndarray | None = None) -> bool:
    """Whether both rails vanish behind something where the sequence saw them (an animal, a
    vehicle or a rock on the track: an unlabelled obstacle in a background).

    ``expected_rows`` are the rows where the previous clear frame of the sequence showed the
    rail pair (``rail_pair_rows``): the fit says they are visible there. This frame's fit is
    followed over them, and a run of them without the pair is an object: below it the rails
    run to its foot; above it they reappear (an object lower than the camera) or stay hidden
    (a tall one). It is occluded when such a run spans a quarter of the distance inside the
    rows (gap ratio ``_OCCLUSION_RUN_RATIO``), or, reaching the top, cuts the reach by a third
    (``_OCCLUSION_REACH_RATIO``: a reach fluctuates by a growth band between frames). Texture
    on an object's face often leaves a thin line near one rail's place; rarely near both.

    Args:
        image_bgr: the frame (BGR or grey) the detection was made on.
        detection: its detection.
        expected_rows: H bools, from ``rail_pair_rows`` on the last clear frame.
        ignore_mask: H x W bool, True where nothing counts as a rail (as for ``detect_track``).

    Returns:
        True when the frame shows something on the track.
    """
    # Far rails a few pixels apart come and go with a slightly different fit: not evidence.
    resolved = np.arange(expected_rows.size) >= detection.horizon_v + _OCCLUSION_MIN_GAP_PX / (
        2 * _pair_model(detection).d)
    expected = np.flatnonzero(expected_rows & resolved)
    if expected.size == 0:
        return False
    expected_rows = expected_rows & resolved
    top = int(expected[0])
    seen = rail_pair_rows(image_bgr, detection, top_row=min(top, detection.top_row), ignore_mask=ignore_mask)
    vanished = (expected_rows & ~seen)[top:].astype(np.uint8)
    # Rows the clear frame missed and a row or two of pair found on an object's face do not
    # end the run.
    vanished = cv2.morphologyEx(vanished[:, None], cv2.MORPH_CLOSE, np.ones((5, 1), np.uint8))[:, 0].astype(bool)
    t = np.arange(top, top + vanished.size) - detection.horizon_v
    for first, last in _runs(vanished):
        ratio = _OCCLUSION_REACH_RATIO if first == 0 else _OCCLUSION_RUN_RATIO
        if last - first >= 3 and t[first] > 0 and t[last] >= ratio * t[first]:
            return True
    return False


def object_between_rails(image_bgr: np.ndarray, detection: TrackDetection, *,
                         ignore_mask: np.ndarray | None = None) -> bool:
    """Whether something stands between the rails: a run of rows where the middle of the track
    bed differs in colour from both its sides, spanning a quarter more distance than where it
    starts (an object's rows reach far beyond its foot; a flat thing on the bed does not).

    Sleepers, ballast and slabs look alike across the bed, so the middle's distance to the nearer
    side is small on most rows; an object's own rows stand out against that (robust z-score).
    It misses objects wider than the middle strip is far from the rails at their height, and
    far ones (rows under ``_BED_MIN_GAP_PX`` apart are not looked at).

    Args:
        image_bgr: the frame (BGR or grey) the detection was made on.
        detection: its detection.
        ignore_mask: H x W bool, True where nothing counts (rows it touches near the bed are skipped).

    Returns:
        True when the frame shows something standing between the rails.
    """
    model = _pair_model(detection)
    height, width = image_bgr.shape[:2]
    first = max(detection.top_row, int(math.ceil(model.row_at_gap(_BED_MIN_GAP_PX))))
    bottom = height - 1 if detection.bottom_row is None else detection.bottom_row
    rows = np.arange(first, bottom + 1)
    if rows.size < 8:
        return False
    left, right = model.predict(rows.astype(np.float64))
    centre, gap = 0.5 * (left + right), right - left
    # The bed resampled at fixed shares of the gap across it (rows x samples), in Lab colour.
    first_col = int(max(0, math.floor(float(np.min(left)))))
    last_col = int(min(width - 1, math.ceil(float(np.max(right)))))
    crop = image_bgr[first:bottom + 1, first_col:last_col + 1]
    colour = cv2.cvtColor(crop, cv2.COLOR_BGR2Lab) if crop.ndim == 3 else crop
    lateral = np.linspace(-_BED_SIDES[1], _BED_SIDES[1], _BED_SAMPLES)
    map_x = (centre[:, None] + lateral[None, :] * gap[:, None] - first_col).astype(np.float32)
    map_y = np.repeat(np.arange(rows.size, dtype=np.float32)[:, None], _BED_SAMPLES, axis=1)
    bed = cv2.remap(colour, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
    bed = bed.reshape(rows.size, _BED_SAMPLES, -1)
    middle = np.median(bed[:, np.abs(lateral) < _BED_MIDDLE], axis=1)
    sides = [np.median(bed[:, (side * lateral >= _BED_SIDES[0])], axis=1) for side in (-1, 1)]
    distance = np.minimum(*(np.linalg.norm(middle - side, axis=1) for side in sides))
    level = float(np.median(distance))
    z = (distance - level) / (1.4826 * float(np.median(np.abs(distance - level))) + _BED_NOISE_LAB)
    flagged = z > _BED_CONTRAST_Z
    if ignore_mask is not None:
        flagged &= ~ignore_mask[first:bottom + 1, first_col:last_col + 1].any(axis=1)
    flagged = cv2.morphologyEx(flagged.astype(np.uint8)[:, None], cv2.MORPH_CLOSE,
                               np.ones((3, 1), np.uint8))[:, 0].astype(bool)
    t = rows - model.horizon_v
    return any(last - first_run >= 4 and t[last] >= _OCCLUSION_RUN_RATIO * t[first_run]
               for first_run, last in _runs(flagged))


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True values."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1, strict=True))


def _visible_rows(height: int, bottom_ignore: float, ignore_mask: np.ndarray | None) -> int:
    """How many rows from the top show the scene: above ``bottom_ignore`` and above the rows
    the ignore mask covers (almost) entirely at the bottom."""
    visible = height - int(round(height * min(max(bottom_ignore, 0.0), 0.9)))
    if ignore_mask is not None:
        if ignore_mask.shape[:2] != (height, ignore_mask.shape[1]) or ignore_mask.ndim != 2:
            raise ValueError(f"ignore_mask must be H x W like the image, got {ignore_mask.shape}")
        covered = ignore_mask.mean(axis=1) >= 0.9
        while visible > height // 10 and covered[visible - 1]:
            visible -= 1
    return visible


def _horizon_limits(width: int, height: int, hfov_deg: float | None) -> tuple[float, float]:
    """Rows the horizon may lie on: from the pitch range with a known lens, else wide bounds."""
    if hfov_deg is None:
        return (UNKNOWN_LENS_HORIZON[0] * height, UNKNOWN_LENS_HORIZON[1] * height)
    focal = (width / 2) / math.tan(math.radians(hfov_deg) / 2)
    low, high = ((height - 1) / 2 - focal * math.tan(math.radians(p)) for p in PITCH_RANGE_DEG[::-1])
    return (low, high)


class _NoTrack(Exception):
    """Raised by a stage that rules the track out; the message is the reason."""


class _AmbiguousRails(_NoTrack):
    """A candidate pair's rails were not single lines where it was seen (a turnout's blades,
    check rails): worth a second try on each rail's best line once no pair is clear."""


# -- stage 1: segments and the ego pair --------------------------------------------------------
def _ridge_segments(grey: np.ndarray, first_row: int, keep: np.ndarray | None = None) -> _Segments:
    """Long, steep thin-line segments below ``first_row`` (full-image coordinates), bright
    ridges and dark grooves alike: polished heads show bright by day, but under infrared
    lighting or on a light bed rails often show as dark bands."""
    height, width = grey.shape
    roi = grey[first_row:]
    kernel = max(5, width // 40) | 1  # ~ 3 rail-head widths near the bottom of a cab view
    element = cv2.getStructuringElement(cv2.MORPH_RECT, (kernel, 1))
    roi_keep = None if keep is None else keep[first_row:]
    found = [lines for operation in (cv2.MORPH_TOPHAT, cv2.MORPH_BLACKHAT)
             if (lines := _hough_lines(_masked(cv2.morphologyEx(roi, operation, element), roi_keep), height))
             is not None]
    if not found:
        raise _NoTrack(NO_RAIL_EDGES)
    x1, y1, x2, y2 = np.concatenate(found).reshape(-1, 4).astype(np.float64).T
    y1, y2 = y1 + first_row, y2 + first_row
    # Sleepers, fastener rows and the horizon lie flat; ego rails never within ~14 degrees of it.
    steep = np.abs(y2 - y1) >= 0.25 * np.hypot(x2 - x1, y2 - y1)
    if steep.sum() < 2:
        raise _NoTrack(NO_RAIL_EDGES)
    x1, y1, x2, y2 = x1[steep], y1[steep], x2[steep], y2[steep]
    m = (x2 - x1) / (y2 - y1)
    return _Segments(m, x1 - m * y1, np.minimum(y1, y2), np.maximum(y1, y2), np.hypot(x2 - x1, y2 - y1))


def _masked(ridge: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """The ridge map with ignored pixels (burnt-in text, a HUD) set to no ridge."""
    return ridge if keep is None else np.where(keep, ridge, 0).astype(ridge.dtype)


def _percentile_uint8(image: np.ndarray, q: float) -> float:
    """``np.percentile(image, q)`` of an 8-bit image from its histogram: no sort of every pixel."""
    histogram = cv2.calcHist([image], [0], None, [256], [0, 256]).ravel().astype(np.int64)
    cumulative = np.cumsum(histogram)
    position = q / 100 * (cumulative[-1] - 1)
    below = math.floor(position)
    low, high = np.searchsorted(cumulative, [below, below + 1], side="right")
    return float(low + (position - below) * (high - low))


def _hough_lines(ridge: np.ndarray, height: int) -> np.ndarray | None:
    """Probabilistic Hough segments on a ridge map's strongest 5 %."""
    threshold = max(4.0, _percentile_uint8(ridge, 95))
    # Only each stripe's crest along the row votes: a rail several pixels wide adds no line
    # evidence per extra pixel, but each one costs a full sweep of the accumulator.
    crest = ridge >= cv2.dilate(ridge, _CREST_ELEMENT)
    binary = ((ridge > threshold) & crest).astype(np.uint8) * 255
    return cv2.HoughLinesP(binary, 1, np.pi / 180, threshold=max(15, height // 24),
                           minLineLength=max(12, height // 16), maxLineGap=max(3, height // 70))


def _ego_pair_candidates(segments: _Segments, width: int, height: int, horizon_limits: tuple[float, float],
                         mount: _Mount = _CENTRED, limit: int = _MAX_PAIR_TRIES
                         ) -> list[tuple[_PairModel, tuple[int, int]]]:
    """Segment pairs that can be the ego track's two rails, most likely first, each with the
    rows both segments cover (where the pair's straight lines are right even on a curve).

    Among well-supported pairs the narrowest at the bottom row comes first: the ego rails lie
    inside a neighbour track's rails, slab edges, fastener rows and bed edges, all of which can
    pair with one of them.

    The ``mount`` says where the pair may lie: its centre near the image centre (a camera on the
    vehicle's centre line), anywhere a camera in the cab sees its track (``MAX_LATERAL_GAPS``), or
    at a sequence's known offset.

    Rows of the pair matrix are left-rail candidates, columns right-rail ones. Both rails may
    lean the same way (a tight curve seen through a narrow lens), so sides come from where the
    two lines meet, not from the signs of their slopes.
    """
    ml, mr = segments.m[:, None], segments.m[None, :]
    ql, qr = segments.q[:, None], segments.q[None, :]
    low, high = segments.y_low, segments.y_high
    bottom = height - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):  # parallel pairs: no meeting point
        gap_slope = mr - ml  # below their meeting point the gap grows by this per row
        vp_v = (ql - qr) / gap_slope
        vp_u = ml * vp_v + ql
        bottom_mid = vp_u + 0.5 * (ml + mr) * (bottom - vp_v)
        off, off_limit = mount.off(0.5 * (ml + mr), gap_slope,
                                   np.abs(bottom_mid - (width - 1) / 2) / (gap_slope * (bottom - vp_v)))
        # Support favours pairs where the mount puts the track; off the centre line, a pair at the
        # limit weighs half one under the camera.
        off_weight = 1.0 if mount.centred else 0.5 / off_limit
        # Tangents of both rails at the same rows meet on the horizon even on a curve; tangents
        # at far apart rows of a curve would not.
        overlap = np.minimum(high[:, None], high[None, :]) - np.maximum(low[:, None], low[None, :])
        extent = np.minimum((high - low)[:, None], (high - low)[None, :])
        valid = ((gap_slope >= GAP_SLOPE_RANGE[0]) & (gap_slope <= GAP_SLOPE_RANGE[1])
                 & (vp_v >= horizon_limits[0]) & (vp_v <= horizon_limits[1])
                 & (vp_v < np.minimum(low[:, None], low[None, :]))
                 & (off < off_limit) & (overlap >= 0.5 * extent))
        if not valid.any():
            raise _NoTrack(NO_RAIL_PAIR)
        # Support, favouring pairs the camera rides over and segments reaching low in the image.
        reach = 0.5 + 0.5 * (np.maximum(high[:, None], high[None, :]) - vp_v) / (bottom - vp_v)
        score = np.where(valid, (segments.length[:, None] + segments.length[None, :]) * reach
                         * (1 - off_weight * off), -1.0)
    strong = np.argwhere(score >= _PAIR_SUPPORT_SHARE * score.max())
    # Narrowest at the bottom row, not by gap slope: with a loose horizon prior, two nearly
    # parallel outer lines (fastener rows, slab edges) meet far above and have a small slope.
    with np.errstate(invalid="ignore"):
        bottom_gap = gap_slope * (bottom - vp_v)
    strong = strong[np.argsort(bottom_gap[strong[:, 0], strong[:, 1]], kind="stable")]
    i, j = strong[:, 0], strong[:, 1]
    models = np.stack([vp_v[i, j], vp_u[i, j], 0.5 * (ml[i, 0] + mr[0, j]), 0.5 * gap_slope[i, j]], axis=1)
    # Every strong pair's rails on the bottom row at once: ``_PairModel.predict`` on arrays of the
    # pairs' parameters, the same arithmetic as on one pair's.
    left, right = _PairModel(horizon_v=models[:, 0], a=models[:, 1], b=models[:, 2], c=0.0,
                             d=models[:, 3]).predict(np.full(len(models), bottom))
    candidates: list[tuple[_PairModel, tuple[int, int]]] = []
    kept: list[tuple[float, float]] = []
    bottom_rails = zip(left.tolist(), right.tolist(), strict=True)
    for (i, j), (horizon_v, a, b, d), rails in zip(strong, models.tolist(), bottom_rails, strict=True):
        if any(_same_rails(*rails, *other) for other in kept):
            continue  # another segment of the same two rails
        kept.append(rails)
        candidates.append((_PairModel(horizon_v=horizon_v, a=a, b=b, c=0.0, d=d),
                           (int(math.ceil(max(low[i], low[j]))), int(math.floor(min(high[i], high[j]))))))
        if len(candidates) == limit:
            break
    return candidates


def _same_rails(left: float, right: float, other_left: float, other_right: float) -> bool:
    """Whether two pairs' rails (their columns on one row) lie within a tenth of the first pair's gap
    of each other."""
    tolerance = 0.1 * (right - left)
    return abs(left - other_left) <= tolerance and abs(right - other_right) <= tolerance


# -- stage 2: following the rails -------------------------------------------------------------
class _Frame(NamedTuple):
    grey: np.ndarray
    keep: np.ndarray | None  # False where nothing may count as a rail (ignore mask)
    # ``_track_rails``' outcomes on this frame by their arguments, or None to keep none: the same
    # candidate pair comes up under more than one mount, and following it again gives the same.
    followed: dict | None = None


def _track_rails(frame: _Frame, model: _PairModel, seen_rows: tuple[int, int],
                 horizon_limits: tuple[float, float], from_prior: bool = False, best_line: bool = False
                 ) -> tuple[_PairModel, _RailSamples, int, int, bool]:
    """``_followed_rails``, each pair followed once per frame (``_Frame.followed``)."""
    if frame.followed is None:
        return _followed_rails(frame, model, seen_rows, horizon_limits, from_prior, best_line)
    key = (model, seen_rows, horizon_limits, from_prior, best_line)
    if key not in frame.followed:
        try:
            frame.followed[key] = _followed_rails(frame, model, seen_rows, horizon_limits, from_prior, best_line)
        except _NoTrack as failure:
            frame.followed[key] = failure
    outcome = frame.followed[key]
    if isinstance(outcome, _NoTrack):
        raise outcome
    return outcome


def _followed_rails(frame: _Frame, model: _PairModel, seen_rows: tuple[int, int],
                    horizon_limits: tuple[float, float], from_prior: bool = False, best_line: bool = False
                    ) -> tuple[_PairModel, _RailSamples, int, int, bool]:
    """From the rows the pair was seen on, grows the fitted range band by band: down to the
    bottom of the image (required, unless a hood's edge crosses the track where the rails end),
    then up toward the horizon while both rails keep their support and stay resolvable.

    Returns the refined model, the samples of the accepted rows, the first (top) and last
    (bottom) one, and whether the rails stopped short of the bottom in the open
    (``_reached_the_near_track``: a finding that needs a second opinion). A model ``from_prior``
    (the previous frame's fit, or the learned area's) is trusted from the start: its curve term
    holds, where straight Hough chords would cut a curve, so its first band is searched in the
    narrow window too (a wide one takes a guard rail or a check rail beside the rail).

    ``_AmbiguousRails`` says the rails were not single lines where the pair was seen; with
    ``best_line`` that band is measured on each rail's best-supported straight line.
    """
    height = frame.grey.shape[0]
    low, high = _widened(seen_rows, max(8, height // 20), height)
    samples = _RailSamples(*(np.empty(0),) * 3, np.empty(0, dtype=bool))
    # The second pass measures with the band's own fit, no longer the Hough lines.
    for hough in (True, False):
        window = _FIRST_WINDOW_PER_GAP if hough and not from_prior else _WINDOW_PER_GAP
        grown = _extend(frame, model, samples, np.arange(low, high + 1, dtype=np.float64), horizon_limits,
                        window, trust_model=from_prior or not hough, best_line=best_line)
        if grown is None:
            raise _AmbiguousRails(PAIR_NOT_SUPPORTED) if hough else _NoTrack(PAIR_NOT_SUPPORTED)
        model, first_band = grown
    samples = first_band
    near_only = False
    while high < height - 1:
        below = min(height - 1, int(math.ceil(model.horizon_v + (high - model.horizon_v) / _GROWTH)))
        grown = _extend(frame, model, samples, np.arange(high + 1, below + 1, dtype=np.float64), horizon_limits)
        if grown is None and height - 1 - high < _MIN_BAND_ROWS:
            # The rails reach the last few rows, too few to be measured as a band of their own (a
            # vignette, the frame's edge, a level crossing's road): they reach the bottom.
            high = height - 1
            break
        if grown is None:
            grown, below, near_only = _up_to_occluder(frame, model, samples, high, horizon_limits)
            (model, samples), high = grown, below
            break
        (model, samples), high = grown, below
    while True:
        limit = int(math.ceil(max(0.0, model.row_at_gap(MIN_GAP_PX))))
        above = max(limit, int(math.ceil(model.horizon_v + (low - model.horizon_v) * _GROWTH)))
        if above >= low:
            return model, samples, low, high, near_only
        grown = _extend(frame, model, samples, np.arange(above, low, dtype=np.float64), horizon_limits)
        if grown is None and low - above >= _MIN_BAND_ROWS:
            # A band can fail on a short blur or a sleeper shadow: a band half as tall may pass.
            above = (above + low) // 2
            grown = _extend(frame, model, samples, np.arange(above, low, dtype=np.float64), horizon_limits)
        if grown is None:
            grown = _second_look(frame, model, samples, np.arange(above, low, dtype=np.float64), horizon_limits)
        if grown is None:
            return model, samples, low, high, near_only
        (model, samples), low = grown, above


def _second_look(frame: _Frame, model: _PairModel, samples: _RailSamples, rows: np.ndarray,
                 horizon_limits: tuple[float, float]) -> tuple[_PairModel, _RailSamples] | None:
    """Where the rails above the range are not where the fit expects them: the band measured
    without trusting the fit, and all samples refit from scratch; None unless that explains more.

    The curve term ``c / t`` is poorly determined by the rows fitted so far (over a short range
    of ``t`` it trades off against ``a + b t``, and a wide CCTV lens bends straight rails a
    little), so its extrapolation toward the horizon can miss faint far rails by more than the
    residual scale, and a refit weighted by the current fit would ignore them. The band is
    measured in the wider first window, accepted when both rails are straight lines there
    (``_measure_band`` untrusted), and the refit starts from equal weights. It is kept only when
    it explains the band and more rows in all (old and new) than the current fit does: the
    consensus must grow, so a band that only pulls the fit off the rows below is refused.
    """
    grown = _extend(frame, model, samples, rows, horizon_limits, _FIRST_WINDOW_PER_GAP, trust_model=False)
    if grown is None:
        return None
    refit, joined = grown
    return grown if refit.inlier_rows(joined).sum() > model.inlier_rows(joined).sum() else None


def _up_to_occluder(frame: _Frame, model: _PairModel, samples: _RailSamples, high: int,
                    horizon_limits: tuple[float, float]) -> tuple[tuple[_PairModel, _RailSamples], int, bool]:
    """Where the rails stop being found above the bottom, the fit and the last row the rails
    reach, if a hood's (or dashboard's) edge crosses the track just below them, or if they were
    followed near enough to the camera (then flagged True: near only); else no track.

    Rails ending in the open are a pair of lines that is not a track. An occluder spanning the
    frame leaves a coherent edge across the track and beyond it; ballast, sleepers (shorter
    than three gaps) and fading rails do not.
    """
    edge = _occluder_edge(frame.grey, model, high)
    if edge is None or _rails_seen_below(frame, model, edge + 3):
        if _reached_the_near_track(model, high, frame.grey.shape[0], frame.grey.shape[1]):
            return (model, samples), high, True
        raise _NoTrack(RAILS_NOT_AT_BOTTOM)
    last = edge - 2  # the edge's own blur is no rail
    if last <= high:  # the band that reached the edge took in its blur: cut the range there
        return (model, samples), last, False
    grown = _extend(frame, model, samples, np.arange(high + 1, last + 1, dtype=np.float64), horizon_limits)
    return (grown, last, False) if grown is not None else ((model, samples), high, False)


def _reached_the_near_track(model: _PairModel, high: int, height: int, width: int) -> bool:
    """Whether the rails, found down to row ``high``, were followed near enough to the camera: their
    gap there is at least ``_NEAR_GAP_SHARE`` of the gap on the lowest row where both still lie in
    the image (a wide lens or an off-centre camera sees a near rail leave at the side).

    Below that the near rails often cannot be measured though they are there: motion blur (the near
    ground moves fastest), a wiper, the rounded corner of a cab window, a switch's blades.
    """
    rows = np.arange(high, height, dtype=np.float64)
    left, right = model.predict(rows)
    inside = (left >= 0) & (right <= width - 1)
    lowest = rows[inside][-1] if inside.any() else float(high)
    return high - model.horizon_v >= _NEAR_GAP_SHARE * (lowest - model.horizon_v)  # the gap is linear in t


def _rails_seen_below(frame: _Frame, model: _PairModel, row: int) -> bool:
    """Whether either rail still shows (either polarity, a wide window) on a fifth of the rows
    from ``row`` down: then the edge is something the rails run over (a timber, a crossing)."""
    rows = np.arange(row, frame.grey.shape[0], dtype=np.float64)
    if rows.size < 3:
        return False
    for bright in (True, False):
        band = _measure_rails(frame, model, rows, bright, _FIRST_WINDOW_PER_GAP)
        if (np.isfinite(band.left) | np.isfinite(band.right)).mean() >= 0.2:
            return True
    return False


def _occluder_edge(grey: np.ndarray, model: _PairModel, high: int) -> int | None:
    """The row where a horizontal occluder edge crosses the track below row ``high``, or None.

    Per column over the track and a gap either side (and at least the middle 60 % of the
    frame: a hood spans the frame, a sleeper does not), the first strong vertical-gradient row
    below ``high`` - 2; an occluder's edge gives rows that agree between neighbouring columns.
    """
    height, width = grey.shape
    start = max(0, high - 2)
    if start >= height - 2:
        return None
    left, right = (float(x[0]) for x in model.predict(np.array([float(high)])))
    gap = right - left
    cols = np.arange(max(0, int(min(left - gap, 0.2 * width))), min(width, int(max(right + gap, 0.8 * width)) + 1))
    gradient = np.abs(cv2.Sobel(grey[start:].astype(np.float32), cv2.CV_32F, 0, 1, ksize=3))[:, cols]
    strong = gradient >= max(40.0, 4.0 * float(np.median(gradient)))
    has_edge = strong.any(axis=0)
    if has_edge.mean() < 0.9:
        return None
    rows = np.argmax(strong, axis=0)[has_edge]
    if np.median(np.abs(np.diff(rows))) > 1.0 or np.percentile(np.abs(np.diff(rows)), 90) > 3.0:
        return None
    return start + int(np.median(rows))


def _widened(rows: tuple[int, int], at_least: int, height: int) -> tuple[int, int]:
    """The row range grown about its middle to ``at_least`` rows (within the image)."""
    low, high = rows
    missing = max(0, at_least - (high - low + 1))
    return max(0, low - missing // 2), min(height - 1, high + missing - missing // 2)


def _extend(frame: _Frame, model: _PairModel, samples: _RailSamples, rows: np.ndarray,
            horizon_limits: tuple[float, float], window: float = _WINDOW_PER_GAP, trust_model: bool = True,
            best_line: bool = False) -> tuple[_PairModel, _RailSamples] | None:
    """Measures a new band of rows and refits on everything; None when the band lacks support
    or does not agree with the refit."""
    band = _measure_band(frame, model, rows, window, trust_model,
                         samples_dark=bool(samples.dark.size and samples.dark.mean() > 0.5), best_line=best_line)
    if band is None:
        return None
    grown = samples.joined(band)
    refit = _fit_pair(grown, model, horizon_limits, trust_previous=trust_model)
    if refit is None or refit.inlier_rows(band).mean() < _MIN_SUPPORT:
        return None
    return refit, grown


def _measure_band(frame: _Frame, model: _PairModel, rows: np.ndarray, window: float, trust_model: bool,
                  samples_dark: bool = False, best_line: bool = False) -> _RailSamples | None:
    """The band's rail samples in whichever polarity finds both rails (where a trusted model
    expects them) on more rows; None if neither does on enough. With ``best_line``, an untrusted
    band that fails so is measured again on each rail's best-supported straight line.

    Near rails show bright polished heads; far ones, on a light bed, often only their dark sides.
    """
    def agreement(band: _RailSamples) -> float:
        if trust_model:
            return float(model.inlier_rows(band).mean())
        # Samples anywhere on a rail's head are on the rail (under infrared the peak hops between
        # the head's two dark edges): the pair model's own tolerance, at the band's middle row.
        return band.straightness(_median(model.residual_scale(rows)))

    # A new band mostly shows the rails as the rows measured so far did (``samples_dark``: in
    # dark lines): that polarity first, the other only when the first leaves rows unexplained.
    first = not (samples_dark and trust_model)
    best = _measure_rails(frame, model, rows, first, window)
    best_agreement = agreement(best)
    if best_agreement < 1.0:
        other = _measure_rails(frame, model, rows, not first, window)
        other_agreement = agreement(other)
        if other_agreement > best_agreement or (other_agreement == best_agreement and not first):
            best, best_agreement = other, other_agreement
    if best_line and best_agreement < _MIN_SUPPORT and not trust_model:
        # Beside a rail at a turnout run switch blades, check rails and closure rails: the
        # strongest line of each row hops between them. Each rail's one straight line instead.
        tolerance = _median(model.residual_scale(rows))
        for bright in (first, not first):
            lined = _measure_rails(frame, model, rows, bright, window, line_tolerance=tolerance)
            if (lined_agreement := agreement(lined)) > best_agreement:
                best, best_agreement = lined, lined_agreement
    return best if best_agreement >= _MIN_SUPPORT else None


def _measure_rails(frame: _Frame, model: _PairModel, rows: np.ndarray, bright: bool, window: float,
                   line_tolerance: float | None = None) -> _RailSamples:
    """Per row, the strongest thin line within ``window`` x gap of each rail's prediction (NaN
    where none stands out); with ``line_tolerance``, the crest on each rail's best-supported
    straight line through the band (``_line_crests``)."""
    left_pred, right_pred = model.predict(rows)
    gap = right_pred - left_pred
    # A rail crosses a row over about (1 + |dx/dy|) pixels: on a curve, far rails lie nearly flat.
    crossing = 1 + np.abs(model.slopes(rows)).max(axis=0)
    kernels = np.maximum(np.maximum(3, gap * _TOPHAT_PER_GAP), 3 * crossing)
    ridge = _row_tophat(frame.grey, rows.astype(np.int64), kernels, bright)
    if frame.keep is not None:
        ridge = _masked(ridge, frame.keep[rows.astype(np.int64)])
    left, right = _ridge_peaks(ridge, np.stack([left_pred, right_pred]), window * gap, gap, line_tolerance)
    return _RailSamples(rows, left, right, np.full(rows.size, not bright))


def _row_tophat(grey: np.ndarray, rows: np.ndarray, kernel_px: np.ndarray, bright: bool) -> np.ndarray:
    """White (``bright``) or black top-hat of each row with its own kernel width (rows x width)."""
    kernels = np.round(kernel_px).astype(np.int64) | 1
    operation = cv2.MORPH_TOPHAT if bright else cv2.MORPH_BLACKHAT
    ridge = np.empty((rows.size, grey.shape[1]), dtype=np.uint8)
    for kernel in np.unique(kernels):
        chosen = np.flatnonzero(kernels == kernel)
        element = cv2.getStructuringElement(cv2.MORPH_RECT, (int(kernel), 1))
        ridge[chosen] = cv2.morphologyEx(grey[rows[chosen]], operation, element)
    return ridge


def _ridge_peaks(ridge: np.ndarray, predicted: np.ndarray, half_window: np.ndarray, gap: np.ndarray,
                 line_tolerance: float | None = None) -> np.ndarray:
    """Sub-pixel column of the strongest ridge within the search window of each row, for each
    rail's predicted columns (``predicted``: rails x rows; the result has its shape).

    A peak counts when it clearly exceeds the typical ridge level (ballast grain) of a wider
    context window, wide enough that the rail itself does not set that level.
    """
    rails, rows = predicted.shape
    width, index = ridge.shape[1], np.arange(rails * rows)
    # Both rails' rows in one pass: numpy's cost here is mostly per call.
    predicted, row_of = predicted.ravel(), np.tile(np.arange(rows), rails)
    half = np.tile(np.maximum(1.5, half_window), rails)
    context = np.tile(np.maximum(4.0, _CONTEXT_PER_GAP * gap), rails)
    reach = int(math.ceil(context.max())) + 1
    cols = np.round(predicted).astype(np.int64)[:, None] + np.arange(-reach, reach + 1)[None, :]
    distance = np.abs(cols - predicted[:, None])
    in_image = (cols >= 0) & (cols < width)
    # A flat take: twice as fast as indexing rows and columns (columns off the image are masked below).
    values = np.take(ridge, (row_of * width)[:, None] + np.clip(cols, 0, width - 1)).astype(np.float32)
    around = np.where(in_image & (distance <= context[:, None]), values, np.nan)
    level = _row_medians(around)
    spread = _row_medians(np.abs(around - level[:, None]))
    # The rest looks only inside the search window: its columns and one outside it on each side.
    kept = min(reach, int(math.ceil(half.max())) + 2)
    window = slice(reach - kept, reach + kept + 1)
    cols, distance, in_image, values = cols[:, window], distance[:, window], in_image[:, window], values[:, window]
    searched = np.where(in_image & (distance <= half[:, None]), values, -1.0)
    best = np.argmax(searched, axis=1)
    on_line = np.ones(best.size, dtype=bool)
    if line_tolerance is not None:
        threshold = level + np.maximum(3.0, 4.0 * spread)
        offset = cols - predicted[:, None]
        best = np.concatenate([_line_crests(searched[rail], offset[rail], threshold[rail], line_tolerance)
                               for rail in np.split(index, rails)])
        on_line, best = best >= 0, np.maximum(best, 0)
    peak = searched[index, best]
    # Parabolic sub-pixel refinement of the peak position.
    before = searched[index, np.maximum(best - 1, 0)]
    after = searched[index, np.minimum(best + 1, cols.shape[1] - 1)]
    curvature = before - 2 * peak + after
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.where(curvature < 0, 0.5 * (before - after) / curvature, 0.0)
    column = cols[index, best] + np.clip(shift, -0.5, 0.5)
    column = _wide_stripe_middles(searched, best, 0.5 * (peak + level), cols[:, 0], column)
    found = on_line & (peak >= 4.0) & (peak - level >= np.maximum(3.0, 4.0 * spread))
    return np.where(found, column, np.nan).reshape(rails, rows)


def _line_crests(searched: np.ndarray, offset: np.ndarray, threshold: np.ndarray, tolerance: float
                 ) -> np.ndarray:
    """Per row, the index of the crest on the straight line (in offset from the prediction against
    the row) that the most rows' crests lie on within ``tolerance`` px; -1 where the row has none.

    Crests are a row's local maxima above ``threshold`` and at least half its strongest. Lines are
    voted on a grid of offsets at the band's middle row and of their change over the band (a
    Hough transform in the band's own frame).
    """
    rows = searched.shape[0]
    crest = ((searched >= cv2.dilate(searched, _CREST_ELEMENT)) & (searched >= threshold[:, None])
             & (searched >= 0.5 * searched.max(axis=1, keepdims=True)))
    row_of, col_of = np.nonzero(crest)
    if row_of.size == 0:
        return np.full(rows, -1)
    reach = int(math.ceil(np.abs(offset[crest]).max())) + 1
    position = (np.arange(rows) - 0.5 * (rows - 1)) / max(rows - 1, 1)  # -0.5 (top) to 0.5 (bottom)
    drifts = np.arange(-reach, reach + 1, dtype=np.float64)   # offset change from top to bottom
    at_middle = offset[row_of, col_of][None, :] - drifts[:, None] * position[row_of][None, :]
    bins = np.clip(np.round(at_middle).astype(np.int64) + reach, 0, 2 * reach)
    cells = np.repeat(np.arange(drifts.size), row_of.size) * (2 * reach + 1) + bins.ravel()
    votes = np.bincount(cells, minlength=drifts.size * (2 * reach + 1)).astype(np.float64).reshape(drifts.size, -1)
    spread = max(1, int(round(tolerance)))
    votes = cv2.boxFilter(votes, -1, (2 * spread + 1, 1), normalize=False, borderType=cv2.BORDER_CONSTANT)
    drift_index, middle_bin = np.unravel_index(int(np.argmax(votes)), votes.shape)
    line = (middle_bin - reach) + drifts[drift_index] * position
    miss = np.where(crest, np.abs(offset - line[:, None]), np.inf)
    best = np.argmin(miss, axis=1)
    return np.where(miss[np.arange(rows), best] <= tolerance, best, -1)


def _wide_stripe_middles(searched: np.ndarray, best: np.ndarray, half: np.ndarray, first_col: np.ndarray,
                         column: np.ndarray) -> np.ndarray:
    """Where the stripe around each row's peak is wide (over 4 px above ``half``), its middle
    column instead of the peak's: a wide head's brightest line is often one edge (a sunlit or
    specular side), which would put the fit off the head's centre; thin stripes keep ``column``."""
    width = searched.shape[1]
    at = np.arange(width)[None, :]
    below = searched < half[:, None]
    before, after = below & (at < best[:, None]), below & (at > best[:, None])
    # The stripe runs from after the last column below half before the peak to before the first one
    # after it (the window's edges where there is none).
    first = np.where(before.any(axis=1), width - np.argmax(before[:, ::-1], axis=1), 0)
    last = np.where(after.any(axis=1), np.argmax(after, axis=1), width) - 1
    return np.where(last - first >= 4, first_col + 0.5 * (first + last), column)


def _median(values: np.ndarray) -> float:
    """``np.median`` of a short 1-D array of finite values, without its per-call overhead (a tenth
    of its time at the finder's sizes)."""
    ordered = np.sort(values)
    return float(0.5 * (ordered[(ordered.size - 1) // 2] + ordered[ordered.size // 2]))


def _row_medians(values: np.ndarray) -> np.ndarray:
    """Median of each row's finite values (NaN for none); much faster than ``np.nanmedian``."""
    ordered = np.sort(values, axis=1)  # NaNs sort last
    count = np.isfinite(values).sum(axis=1)
    index = np.arange(values.shape[0])
    return 0.5 * (ordered[index, np.maximum(count - 1, 0) // 2] + ordered[index, count // 2])


def _fit_pair(samples: _RailSamples, previous: _PairModel, horizon_limits: tuple[float, float],
              trust_previous: bool = True, iterations: int = 4) -> _PairModel | None:
    """Robust (Tukey-weighted) least squares of the pair model on the measured rail columns,
    starting from the weights ``previous`` gives the samples (when trusted).

    The model is linear given the horizon row; the horizon comes from where the fitted gap
    vanishes, so a few alternations settle both. Dark-line samples only confirm the rails where
    bright heads are enough to fit: a rail's dark side sits a little inside its head, which would
    narrow the far gap and drag the horizon down.
    """
    # Bright rows must carry the fit, not a short band of them (a reflection at the bottom of an
    # infrared frame whose rails are all dark): they must be a third of the rows.
    bright_rows = int((~samples.dark).sum())
    usable = ~samples.dark if bright_rows >= max(8, samples.rows.size / 3) else np.ones_like(samples.dark)
    rows = np.concatenate([samples.rows[usable]] * 2)
    x = np.concatenate([samples.left[usable], samples.right[usable]])
    side = np.repeat([-1.0, 1.0], int(usable.sum()))
    found = np.isfinite(x)
    if found.sum() < 8 or not np.isfinite(x[side < 0]).any() or not np.isfinite(x[side > 0]).any():
        return None
    rows, x, side = rows[found], x[found], side[found]
    model = previous
    weights = (_tukey(x - np.where(side < 0, *previous.predict(rows)), previous.residual_scale(rows))
               if trust_previous else np.ones_like(x))
    for _ in range(iterations):
        t = rows - model.horizon_v
        if (t <= 0).any():
            return None
        # A short band of rows cannot tell the curve term from the others: keep it straight.
        curve = 1 / t if t.max() >= 1.5 * t.min() else np.zeros_like(t)
        # Columns: a, b, c, d after rewriting d t = d (v - v_h) as gap0 + gap1 v to keep it linear.
        design = np.stack([np.ones_like(t), t, curve, 0.5 * side, 0.5 * side * rows], axis=1)
        sqrt_w = np.sqrt(weights)[:, None]
        coef, *_ = np.linalg.lstsq(design * sqrt_w, x * sqrt_w[:, 0], rcond=None)
        a, b, c, gap0, gap1 = coef
        if gap1 <= 0:
            return None
        horizon = -gap0 / gap1
        # Re-express the t terms about the new horizon (exact for a and b; c keeps its value).
        shift = model.horizon_v - horizon
        model = _PairModel(horizon_v=horizon, a=a - b * shift, b=b, c=c, d=gap1 / 2)
        weights = _tukey(x - design @ coef, model.residual_scale(rows))
        if weights.sum() < 8:
            return None
    if not (GAP_SLOPE_RANGE[0] <= 2 * model.d <= GAP_SLOPE_RANGE[1]
            and horizon_limits[0] <= model.horizon_v <= horizon_limits[1]):
        return None
    return model


def _tukey(residual: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.clip(1 - (residual / scale) ** 2, 0.0, None) ** 2


# -- output --------------------------------------------------------------------------------------
def _detection(model: _PairModel, top_row: int, bottom_row: int, width: int, height: int, confidence: float
               ) -> TrackDetection:
    left = RailFit(model.horizon_v, model.a, model.b - model.d, model.c)
    right = RailFit(model.horizon_v, model.a, model.b + model.d, model.c)
    # Both rails' tangents at the bottom row meet on the horizon (they are parallel on the ground).
    t_bottom = height - 1.0 - model.horizon_v
    centre_slope = model.b - model.c / t_bottom**2
    centre_bottom = model.a + model.b * t_bottom + model.c / t_bottom
    vanishing_point = (float(centre_bottom - centre_slope * t_bottom), float(model.horizon_v))
    return TrackDetection(mask=track_area(left, right, top_row, bottom_row, width, height), left_fit=left,
                          right_fit=right, vanishing_point=vanishing_point, confidence=confidence, top_row=top_row,
                          bottom_row=None if bottom_row >= height - 1 else bottom_row)


def rescaled(detection: TrackDetection, width: int, height: int) -> TrackDetection:
    """The detection on the same frame resized to ``width`` x ``height`` (one scale for both axes).

    Pixel centres map as ``s * x + (s - 1) / 2``: the fits' ``a`` and horizon take that map, ``b``
    (a slope) stays, ``c`` (over ``t``, itself scaled) scales by ``s`` squared.

    Args:
        detection: the detection at its frame's size (its mask's shape).
        width: the resized frame's width.
        height: the resized frame's height.

    Returns:
        The detection at the new size, its mask drawn again there.
    """
    scale = width / detection.mask.shape[1]
    offset = (scale - 1) / 2

    def fit(rail: RailFit) -> RailFit:
        return RailFit(scale * rail.horizon_v + offset, scale * rail.a + offset, rail.b, scale * scale * rail.c)

    def row(v: int) -> int:
        return int(min(height - 1, max(0, round(scale * v + offset))))

    left, right = fit(detection.left_fit), fit(detection.right_fit)
    top = row(detection.top_row)
    bottom = None if detection.bottom_row is None else row(detection.bottom_row)
    vanishing = (scale * detection.vanishing_point[0] + offset, scale * detection.vanishing_point[1] + offset)
    return dataclasses.replace(detection, mask=track_area(left, right, top, height - 1 if bottom is None else bottom,
                                                          width, height),
                               left_fit=left, right_fit=right, vanishing_point=vanishing, top_row=top,
                               bottom_row=bottom)


def track_area(left: RailFit, right: RailFit, top_row: int, bottom_row: int, width: int, height: int
               ) -> np.ndarray:
    """Pixels between the rails' outer head edges, from ``top_row`` to ``bottom_row``.

    Args:
        left: the left rail's fit.
        right: the right rail's fit.
        top_row: the first (farthest) row.
        bottom_row: the last row.
        width: the image width.
        height: the image height.

    Returns:
        The H x W boolean area.
    """
    rows = np.arange(top_row, bottom_row + 1, dtype=np.float64)
    left_x, right_x = left.x(rows), right.x(rows)
    half_head = 0.5 * HEAD_TO_CENTRES * (right_x - left_x)
    cols = np.arange(width, dtype=np.float64)[None, :]
    mask = np.zeros((height, width), dtype=bool)
    mask[top_row:bottom_row + 1] = (cols >= (left_x - half_head)[:, None]) & (cols <= (right_x + half_head)[:, None])
    return mask

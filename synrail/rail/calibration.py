"""One camera for a whole sequence: a cab camera is fixed to its train, so its horizon row, height
above the rails and lateral offset from the track centre are the same in every frame.

Each confident frame gives its own estimate (``frame_camera``); the sequence's value is their median
after rejecting outliers (beyond 3 robust standard deviations, MAD-based); every frame's geometry is
then re-estimated with the sequence horizon and height as priors (``estimate.estimate_geometry``),
and a frame whose rails contradict the sequence camera (a neighbour track, a wrong pair, a frame
from a different camera) is left out with ``CONTRADICTS_SEQUENCE`` and what disagreed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from synrail.rail.detect import TrackDetection
from synrail.rail.estimate import estimate_geometry
from synrail.rail.geometry import RAIL_HEAD_WIDTH_M

CONTRADICTS_SEQUENCE = "rails contradict the sequence camera"
MIN_CONFIDENCE = 0.6       # frames whose rails fit this well vote on the sequence camera
MIN_FRAMES = 3             # fewer confident frames: no sequence camera, each frame keeps its own
_OUTLIER_SIGMAS = 3.0      # votes farther than this from the median are not counted ...
_FLOOR_HORIZON, _FLOOR_HEIGHT, _FLOOR_OFFSET_M = 0.01, 0.03, 0.1  # ... nor within these (rows share, rel., m)
_CONTRADICTION_SIGMAS = 4.0
# Floors of the tolerated disagreement: train pitching on vertical curves moves the horizon by a
# few pixels; the gauge ruler measures height to a few per cent; the train sways sideways.
_HORIZON_TOLERANCE_PER_ROW = 0.03   # of the frame height
_HEIGHT_TOLERANCE = 0.15            # relative
_OFFSET_TOLERANCE_M = 0.6


@dataclass(frozen=True)
class FrameCamera:
    """One frame's own estimate of the camera."""

    horizon_v: float
    height_m: float
    offset_m: float
    confidence: float


@dataclass(frozen=True)
class RobustValue:
    """A median over frames, the robust spread of its inliers and how many there were."""

    value: float
    spread: float   # robust standard deviation (1.4826 MAD) of the inliers
    inliers: int


@dataclass(frozen=True)
class SequenceCalibration:
    """The camera shared by a sequence's frames."""

    horizon_v: RobustValue
    height_m: RobustValue
    offset_m: RobustValue
    frame_height: int
    height_given: bool = False

    @property
    def frames(self) -> int:
        """How many frames agreed on the horizon row (the calibration's support)."""
        return self.horizon_v.inliers


def frame_camera(detection: TrackDetection, width: int, height: int, *, focal_px: float,
                 principal: tuple[float, float], gauge_m: float) -> FrameCamera:
    """The camera this frame's rails alone imply.

    Args:
        detection: the frame's track.
        width: the frame width.
        height: the frame height.
        focal_px: the focal length in pixels.
        principal: the principal point (cx, cy) in pixels.
        gauge_m: the track gauge, the ruler for height and offset.

    Returns:
        The frame's horizon row, camera height, lateral offset and detection confidence.
    """
    geometry = estimate_geometry(detection, width, height, focal_px=focal_px, principal=principal, gauge_m=gauge_m)
    return FrameCamera(horizon_v=detection.horizon_v, height_m=geometry.height_m,
                       offset_m=geometry.track_offset_m, confidence=detection.confidence)


def robust_value(values: Sequence[float], floor: float) -> RobustValue:
    """Median and robust spread of the values within 3 robust standard deviations of the median
    (at least ``floor``: frames of one camera can agree more closely than they can be measured).

    Args:
        values: one value per frame.
        floor: the smallest inlier tolerance, in the values' unit.

    Returns:
        The inliers' median, robust spread and count.
    """
    data = np.asarray(values, dtype=np.float64)
    median = float(np.median(data))
    sigma = 1.4826 * float(np.median(np.abs(data - median)))
    kept = data[np.abs(data - median) <= max(_OUTLIER_SIGMAS * sigma, floor)]
    centre = float(np.median(kept))
    return RobustValue(centre, 1.4826 * float(np.median(np.abs(kept - centre))), int(kept.size))


def calibrate_sequence(cameras: Sequence[FrameCamera | None], frame_height: int, *,
                       known_height_m: float | None = None) -> SequenceCalibration | None:
    """The sequence camera from its confident frames; None with fewer than ``MIN_FRAMES``.

    Args:
        cameras: each frame's own estimate (None for a frame without a track).
        frame_height: rows of the frames (the horizon tolerance scales with it).
        known_height_m: the camera height when the sidecar gives it (then it is not estimated).

    Returns:
        The robust horizon row, height and lateral offset over the confident frames, or None.
    """
    voters = [c for c in cameras if c is not None and c.confidence >= MIN_CONFIDENCE]
    if len(voters) < MIN_FRAMES:
        return None
    heights = [c.height_m for c in voters]
    height = (RobustValue(known_height_m, 0.0, len(voters)) if known_height_m is not None
              else robust_value(heights, _FLOOR_HEIGHT * float(np.median(heights))))
    return SequenceCalibration(horizon_v=robust_value([c.horizon_v for c in voters], _FLOOR_HORIZON * frame_height),
                               height_m=height, offset_m=robust_value([c.offset_m for c in voters], _FLOOR_OFFSET_M),
                               frame_height=frame_height,
                               height_given=known_height_m is not None)


def contradiction(camera: FrameCamera, calibration: SequenceCalibration) -> str | None:
    """Why this frame's rails cannot be seen by the sequence camera, or None when they can.

    Args:
        camera: the camera the frame alone implies.
        calibration: the sequence's camera.

    Returns:
        A reason naming the quantity out of tolerance, or None.
    """
    checks = (
        ("horizon row", camera.horizon_v, calibration.horizon_v,
         _HORIZON_TOLERANCE_PER_ROW * calibration.frame_height, "{:.0f}"),
        ("camera height", camera.height_m, calibration.height_m,
         _HEIGHT_TOLERANCE * calibration.height_m.value, "{:.2f} m"),
        ("lateral offset", camera.offset_m, calibration.offset_m, _OFFSET_TOLERANCE_M, "{:+.2f} m"),
    )
    for name, value, shared, floor, form in checks:
        tolerance = max(floor, _CONTRADICTION_SIGMAS * shared.spread)
        if not math.isfinite(value) or abs(value - shared.value) > tolerance:
            return (f"{CONTRADICTS_SEQUENCE}: {name} {form.format(value)}, sequence "
                    f"{form.format(shared.value)} ± {form.format(tolerance)}")
    return None


def geometry_with_priors(detection: TrackDetection, width: int, height: int, calibration: SequenceCalibration, *,
                         focal_px: float, principal: tuple[float, float], gauge_m: float,
                         rail_head_m: float = RAIL_HEAD_WIDTH_M):
    """The frame's geometry seen by the sequence camera: shared horizon and height, the frame's own
    track offset and curvature.

    Args:
        detection: the frame's track.
        width: the frame width.
        height: the frame height.
        calibration: the sequence's camera.
        focal_px: the focal length in pixels.
        principal: the principal point (cx, cy) in pixels.
        gauge_m: the track gauge.
        rail_head_m: the rail head width.

    Returns:
        The frame's ``CameraGeometry``.
    """
    return estimate_geometry(detection, width, height, focal_px=focal_px, principal=principal, gauge_m=gauge_m,
                             rail_head_m=rail_head_m, horizon_v=calibration.horizon_v.value,
                             camera_height_m=calibration.height_m.value)

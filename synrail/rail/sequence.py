"""The rails followed through a sequence (a video, or a folder of frames), shot by shot, and the
camera of each shot, solved from what its frames show, with each frame's geometry under it.

Order: the focal length (given, from the sleepers, or the fallback), then the shared horizon,
height and offset over the confident frames (``calibration``), then each frame's geometry with
those priors, or the reason its rails contradict them. Stages feed the frames to a
``RailFollower`` in order, call ``frame_evidence`` once per frame found (no frame is kept in
memory), then ``solve_shot_cameras``, then ``frame_geometry`` with each frame's shot's camera.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from synrail.rail.calibration import (
    SequenceCalibration,
    calibrate_sequence,
    contradiction,
    frame_camera,
    geometry_with_priors,
)
from synrail.rail.camera import CameraSettings, PreparedFrame, hfov_from_focal
from synrail.rail.detect import (
    TRACK_OCCLUDED,
    TrackDetection,
    TrackResult,
    detect_track,
    follow_track,
    lateral_offset,
    object_between_rails,
    rail_pair_rows,
    rescaled,
    shrunk,
    track_occluded,
)
from synrail.rail.estimate import estimate_geometry, mask_iou
from synrail.rail.geometry import CameraGeometry
from synrail.rail.learned import TrackAreaModel, default_track_model
from synrail.rail.shots import ShotSignature, same_shot, shot_signature
from synrail.rail.sleepers import FocalEstimate, SleeperProfile, focal_from_profiles, sleeper_profile

HFOV_GIVEN, HFOV_SLEEPERS, HFOV_FALLBACK = "given", "sleepers", "fallback"
_DISAGREEMENT = 0.15  # a given hfov this far (relative focal) from a sleeper estimate is warned about
# A camera's offset from its track is its mount's: known once this many frames found the track at
# offsets this close (median absolute deviation, rail gaps; sway and curves move it a few cm), over
# the last ``MOUNT_WINDOW`` frames found.
MOUNT_FRAMES, MOUNT_SPREAD, MOUNT_WINDOW = 3, 0.08, 25
_SAME_TRACK_IOU = 0.8
# The most columns the track finder sees a frame at: a wider frame is searched at this width, the
# one its rules were developed and measured at (``benchmarks/rail.py --real``: the labelled frames
# searched at 1920 columns give fewer tracks, in 61 ms a frame against 33). A narrower frame is
# searched as it is: enlarged, it gave fewer tracks still.
TRACK_WIDTH = 1280
FOLLOW_BACK_FAILED = "rails not where a later frame of the shot leads"


@dataclass(frozen=True)
class FrameEvidence:
    """What one frame contributes to its sequence's camera (small: no pixels)."""

    detection: TrackDetection
    profile: SleeperProfile | None
    scale: float                 # prepared-frame pixels per source pixel
    principal: tuple[float, float]


@dataclass(frozen=True)
class SequenceCameraSolution:
    """The sequence's camera: focal length and how it was found, and the shared pose."""

    source_width: int
    focal_source_px: float       # in the source frame's pixels (hfov is a property of the source)
    hfov_source: str             # given | sleepers | fallback
    hfov_sigma_deg: float | None
    gauge_m: float
    calibration: SequenceCalibration | None
    focal_estimate: FocalEstimate | None
    pitch_deg: float | None = None   # of the shared horizon (None without a sequence camera)
    notes: tuple[str, ...] = field(default=())

    @property
    def hfov_deg(self) -> float:
        """The solved horizontal field of view of the source frames."""
        return hfov_from_focal(self.source_width, self.focal_source_px)


class RailFollower:
    """Follows the ego rails through the consecutive frames of one sequence (fed in frame order).

    Each frame is searched with the last fit as the prior (``detect_track`` falls back to the
    full search when the rails are not where it leads). After frames without a track, the last
    track the sequence showed is the prior: the camera rides over its track, so the near rails
    sit where they sat (its mount's offset and its horizon are what the sequence taught it).
    With a ``track_model``, each frame's learned ego-track area is the finder's second opinion
    (``detect_track``'s ``track_area``). Once ``MOUNT_FRAMES`` frames have shown the camera at
    the same lateral offset from its track (within ``MOUNT_SPREAD`` gaps), that offset is the
    camera's mount: later frames look for the pair there first, and such a pair needs no second
    opinion (``detect_track``'s ``mount_offset``). A frame where both rails vanish over a
    stretch of the rows where the last clear frame showed them, or where something stands
    between them (``object_between_rails``; that needs no earlier frame), is refused with
    ``TRACK_OCCLUDED``: something stands on the track (unless the frame's own search, without the
    last fit, follows the same track over those rows: a followed fit can drift off far rails). Its
    fit still seeds the next frame, but the rows where the rails are expected stay the clear
    frame's. A frame without a track ends the stretch.

    A frame that does not look like the last one that showed anything (``shots.same_shot``: a
    cut, or unrelated stills in one folder) starts a new shot: nothing learned from the frames
    before leads the search, and ``shot`` counts up, so that callers solve each shot's camera on
    its own.
    """

    def __init__(self, track_model: TrackAreaModel | None = None) -> None:
        self._track_model = track_model
        self._signature: ShotSignature | None = None  # the last frame's, for the cut test
        self.shot = -1  # the shot of the last frame fed in, counted from 0
        self._new_shot()

    def _new_shot(self) -> None:
        """Forgets what the frames before taught: their rails, the mount and the expected rows."""
        self._prior: TrackDetection | None = None
        self._anchor: TrackDetection | None = None  # the last track this shot showed
        self._expected: np.ndarray | None = None  # rows where the last clear frame showed the rails
        self._offsets: list[float] = []  # lateral offsets of the tracks found, in rail gaps
        self.shot += 1

    def detect(self, image_bgr: np.ndarray, *, hfov_deg: float | None = None,
               ignore_mask: np.ndarray | None = None) -> TrackResult:
        """The next frame's track, or None with the reason (``TRACK_OCCLUDED`` among them).

        A frame wider than ``TRACK_WIDTH`` columns is searched at that width, and the detection
        drawn back at the frame's size.

        Args:
            image_bgr: the frame, the same size as the sequence's others.
            hfov_deg: as for ``detect_track``.
            ignore_mask: as for ``detect_track``.

        Returns:
            The detection (``followed`` when the prior led to it), or None and why.
        """
        signature = shot_signature(image_bgr)
        if signature.comparable:  # a black or flat frame says nothing of a cut
            if self._signature is not None and not same_shot(self._signature, signature):
                self._new_shot()
            self._signature = signature
        height, width = image_bgr.shape[:2]
        work_image, work_mask = shrunk(image_bgr, ignore_mask, TRACK_WIDTH)
        area = None if self._track_model is None else self._track_model.mask(work_image)
        search = functools.partial(detect_track, work_image, hfov_deg=hfov_deg, ignore_mask=work_mask,
                                   track_area=area, mount_offset=self.mount_offset)

        def at_frame_size(found: TrackDetection) -> TrackDetection:
            return found if work_image.shape[1] == width else rescaled(found, width, height)

        result = search(prior=self._prior or self._anchor)
        if result.detection is None:
            self._prior = self._expected = None
            return result
        found, detection = result.detection, at_frame_size(result.detection)
        # Objects on the track are judged at the frame's own size.
        occluded = self._occluded(image_bgr, detection, ignore_mask)
        if occluded and found.followed:
            # A fit followed from the last frame can drift off far rails the frame's own search
            # follows: where it finds the same track with its rails in view, nothing hides them.
            own = search().detection
            own_here = None if own is None else at_frame_size(own)
            if own_here is not None and _same_track(own_here, detection) and not self._occluded(
                    image_bgr, own_here, ignore_mask):
                found, detection, occluded = own, own_here, False
        self._prior = self._anchor = found
        self._offsets.append(lateral_offset(found))
        if occluded:
            return TrackResult(None, TRACK_OCCLUDED)
        self._expected = rail_pair_rows(image_bgr, detection, ignore_mask=ignore_mask)
        return TrackResult(detection)

    def _occluded(self, image_bgr: np.ndarray, detection: TrackDetection, ignore_mask: np.ndarray | None) -> bool:
        """Whether something stands between the rails, or hides them where the shot's last clear
        frame showed them."""
        return _hidden(image_bgr, detection, self._expected, ignore_mask)

    @property
    def mount_offset(self) -> float | None:
        """The camera's lateral offset from its track (rail gaps, signed) its frames agree on, or
        None before ``MOUNT_FRAMES`` of them do (their median absolute deviation within ``MOUNT_SPREAD``)."""
        if len(self._offsets) < MOUNT_FRAMES:
            return None
        recent = np.array(self._offsets[-MOUNT_WINDOW:])
        median = float(np.median(recent))
        return median if float(np.median(np.abs(recent - median))) <= MOUNT_SPREAD else None


def follow_back(image_bgr: np.ndarray, later: TrackDetection, later_rows: np.ndarray, *,
                hfov_deg: float | None = None, ignore_mask: np.ndarray | None = None) -> TrackResult:
    """A frame that ``RailFollower`` left without a track, followed from a later frame of its shot.

    ``RailFollower`` learns from the frames before a frame only: the first frames of a shot (a
    station or a tunnel the train is leaving) have none that found the track. Once a later frame
    has, its rails lead the search on the frame before it, as an earlier frame's lead the next:
    the camera rides over the same track. Only the rails where ``later`` put them are followed
    (``follow_track``); the full search has had its turn. A track followed so is refused as
    ``TRACK_OCCLUDED`` where something stands between its rails or hides them on ``later_rows``.

    Args:
        image_bgr: the frame, the size of the shot's others.
        later: the track of a later frame of the same shot, at that size.
        later_rows: the rows where that frame showed both rails (``rail_pair_rows`` on its image).
        hfov_deg: as for ``detect_track``.
        ignore_mask: as for ``detect_track``.

    Returns:
        The detection at the frame's size (``followed``), or None and why (``TRACK_OCCLUDED``, or
        ``FOLLOW_BACK_FAILED`` where the rails are not where ``later`` leads).
    """
    height, width = image_bgr.shape[:2]
    work_image, work_mask = shrunk(image_bgr, ignore_mask, TRACK_WIDTH)
    work_height, work_width = work_image.shape[:2]
    prior = later if work_width == width else rescaled(later, work_width, work_height)
    found = follow_track(work_image, prior, hfov_deg=hfov_deg, ignore_mask=work_mask)
    if found is None:
        return TrackResult(None, FOLLOW_BACK_FAILED)
    detection = found if work_width == width else rescaled(found, width, height)
    if _hidden(image_bgr, detection, later_rows, ignore_mask):
        return TrackResult(None, TRACK_OCCLUDED)
    return TrackResult(detection)


def _hidden(image_bgr: np.ndarray, detection: TrackDetection, expected_rows: np.ndarray | None,
            ignore_mask: np.ndarray | None) -> bool:
    """Whether something stands between the rails, or hides them on ``expected_rows`` (the rows where
    a neighbouring frame of the shot showed both; None: none known)."""
    return object_between_rails(image_bgr, detection, ignore_mask=ignore_mask) or (
        expected_rows is not None and track_occluded(image_bgr, detection, expected_rows, ignore_mask=ignore_mask))


def _same_track(a: TrackDetection, b: TrackDetection) -> bool:
    """Whether two detections of one frame are the same track: their areas overlap (intersection
    over union at least ``_SAME_TRACK_IOU``) on the rows both cover."""
    first = max(a.top_row, b.top_row)
    last = min(*(d.mask.shape[0] - 1 if d.bottom_row is None else d.bottom_row for d in (a, b)))
    if last <= first:
        return False
    rows = slice(first, last + 1)
    return mask_iou(a.mask[rows], b.mask[rows]) >= _SAME_TRACK_IOU


def frame_evidence(prepared: PreparedFrame, detection: TrackDetection, settings: CameraSettings) -> FrameEvidence:
    """The frame's sleeper profile and detection, kept for the sequence solve.

    Args:
        prepared: the frame made ready (its ``detect_image`` is measured).
        detection: the track found on the prepared frame.
        settings: the camera's settings (the gauge is read).

    Returns:
        The evidence, without pixels; its profile is None when too few rows show the track.
    """
    grey = cv2.cvtColor(prepared.detect_image, cv2.COLOR_BGR2GRAY)
    return FrameEvidence(detection=detection, profile=sleeper_profile(grey, detection, gauge_m=settings.gauge_m),
                         scale=prepared.scale, principal=(prepared.cx, prepared.cy))


def solve_sequence_camera(evidence: Sequence[FrameEvidence], settings: CameraSettings, *, source_width: int,
                          frame_width: int, frame_height: int) -> SequenceCameraSolution:
    """The sequence camera from its frames' evidence.

    Args:
        evidence: one entry per frame whose track was found.
        settings: the sequence's camera settings (config defaults + sidecar row).
        source_width: width of the source frames (the field of view refers to it).
        frame_width: width of the prepared frames.
        frame_height: height of the prepared frames.

    Returns:
        The focal length with its source and uncertainty, the shared pose (None with too few
        confident frames) and notes: why the sleepers could not tell, or a given hfov they dispute.
    """
    scale = evidence[0].scale if evidence else frame_width / source_width
    cy = evidence[0].principal[1] if evidence else (frame_height - 1) / 2
    horizon = float(np.median([e.detection.horizon_v for e in evidence])) if evidence else cy
    estimate = focal_from_profiles([e.profile for e in evidence], width=frame_width, cy=cy, horizon_v=horizon,
                                   spacing_m=settings.sleeper_spacing_m) if evidence else None
    focal, source, sigma_deg, notes = _choose_focal(estimate, settings, source_width, scale)
    calibration = None
    if evidence:
        cameras = [frame_camera(e.detection, frame_width, frame_height, focal_px=focal * scale,
                                principal=e.principal, gauge_m=settings.gauge_m) for e in evidence]
        calibration = calibrate_sequence(cameras, frame_height, known_height_m=settings.camera_height_m)
    pitch = None
    if calibration is None:
        notes.append("too few confident frames for a sequence camera: each frame keeps its own")
    else:
        pitch = math.degrees(math.atan2(cy - calibration.horizon_v.value, focal * scale))
    return SequenceCameraSolution(source_width=source_width, focal_source_px=focal, hfov_source=source,
                                  hfov_sigma_deg=sigma_deg, gauge_m=settings.gauge_m, calibration=calibration,
                                  focal_estimate=estimate, pitch_deg=pitch, notes=tuple(notes))


def solve_shot_cameras(evidence: Sequence[tuple[int, FrameEvidence]], shots: int, settings: CameraSettings, *,
                       source_width: int, frame_width: int, frame_height: int
                       ) -> tuple[dict[int, SequenceCameraSolution], SequenceCameraSolution]:
    """One camera per shot of a sequence (``RailFollower.shot``), each from its own frames.

    Args:
        evidence: (shot, evidence) of each frame whose track was found.
        shots: how many shots the sequence has (with or without a track found).
        settings: the sequence's camera settings.
        source_width: width of the source frames.
        frame_width: width of the prepared frames.
        frame_height: height of the prepared frames.

    Returns:
        The cameras by shot, and the one that stands for the sequence (its card row): the longest
        shot's, noting the cut when there are several shots; with no track found, the camera
        ``solve_sequence_camera`` gives without evidence.
    """
    by_shot: dict[int, list[FrameEvidence]] = {}
    for shot, item in evidence:
        by_shot.setdefault(shot, []).append(item)
    solve = functools.partial(solve_sequence_camera, settings=settings, source_width=source_width,
                              frame_width=frame_width, frame_height=frame_height)
    cameras = {shot: solve(items) for shot, items in by_shot.items()}
    if not cameras:
        return {}, solve([])
    longest = max(by_shot, key=lambda shot: len(by_shot[shot]))
    standing = cameras[longest]
    if shots > 1:
        standing = dataclasses.replace(standing, notes=standing.notes + (
            f"{shots} shots (the footage cuts, or holds unrelated stills): each shot's camera is solved "
            f"on its own; this is shot {longest + 1}'s, from {_frames(len(by_shot[longest]))}",))
    return cameras, standing


def _frames(count: int) -> str:
    return f"{count} frame" if count == 1 else f"{count} frames"


def _choose_focal(estimate: FocalEstimate | None, settings: CameraSettings, source_width: int, scale: float
                  ) -> tuple[float, str, float | None, list[str]]:
    """(source focal px, its source, sigma of the hfov in degrees, notes)."""
    found = estimate is not None and estimate.focal_px is not None
    estimated_focal = estimate.focal_px / scale if found else None
    sigma_deg = _hfov_sigma(source_width, estimated_focal, estimate.sigma_px / scale) if found else None
    if settings.hfov_deg is not None:
        given = (source_width / 2) / math.tan(math.radians(settings.hfov_deg) / 2)
        notes = []
        if estimated_focal is not None and abs(estimated_focal - given) > _DISAGREEMENT * given:
            notes.append(f"hfov_deg {settings.hfov_deg:g} given, but the sleepers say "
                         f"{hfov_from_focal(source_width, estimated_focal):.1f} ± {sigma_deg:.1f} deg")
        return given, HFOV_GIVEN, None, notes
    if estimated_focal is not None:
        return estimated_focal, HFOV_SLEEPERS, sigma_deg, []
    reason = estimate.reason if estimate is not None else "no frame with a track"
    fallback = (source_width / 2) / math.tan(math.radians(settings.fallback_hfov_deg) / 2)
    return fallback, HFOV_FALLBACK, None, [
        f"focal length not estimated ({reason}): hfov_deg {settings.fallback_hfov_deg:g} assumed"]


def _hfov_sigma(width: int, focal: float, sigma_focal: float) -> float:
    """Standard deviation of the field of view for a focal length's standard deviation."""
    return abs(hfov_from_focal(width, focal - sigma_focal) - hfov_from_focal(width, focal + sigma_focal)) / 2


def frame_geometry(evidence: FrameEvidence, camera: SequenceCameraSolution, *, frame_width: int,
                   frame_height: int) -> tuple[CameraGeometry | None, str | None]:
    """The frame's geometry under the sequence camera, or (None, why its rails contradict it).

    Args:
        evidence: what ``frame_evidence`` kept of the frame.
        camera: the sequence's solved camera; without a shared calibration the frame's geometry is
            estimated on its own, with the sequence's focal length.
        frame_width: the prepared frame's width, in pixels.
        frame_height: the prepared frame's height, in pixels.

    Returns:
        (geometry, None), or (None, the reason) when the frame's own rails contradict the sequence camera.
    """
    focal = camera.focal_source_px * evidence.scale
    if camera.calibration is None:
        return estimate_geometry(evidence.detection, frame_width, frame_height, focal_px=focal,
                                 principal=evidence.principal, gauge_m=camera.gauge_m), None
    own = frame_camera(evidence.detection, frame_width, frame_height, focal_px=focal, principal=evidence.principal,
                       gauge_m=camera.gauge_m)
    reason = contradiction(own, camera.calibration)
    if reason is not None:
        return None, reason
    return geometry_with_priors(evidence.detection, frame_width, frame_height, camera.calibration, focal_px=focal,
                                principal=evidence.principal, gauge_m=camera.gauge_m), None


def track_area_model(setting: str | None) -> TrackAreaModel | None:
    """The learned track-area model a config names (``backgrounds.<source>.track_area_model``).

    Args:
        setting: "builtin" (the shipped model), a path to an ONNX file with its JSON sidecar, or
            None (the line finder alone).

    Returns:
        The model (loaded once per process), or None for None, or "builtin" on an install
        without the shipped file.

    Raises:
        FileNotFoundError: a path that names no ONNX file or has no sidecar.
    """
    if setting is None:
        return None
    if setting == "builtin":
        return default_track_model()
    return _track_area_model_at(str(Path(setting).expanduser()))


@functools.lru_cache(maxsize=2)
def _track_area_model_at(path: str) -> TrackAreaModel:
    return TrackAreaModel(path)

"""Event accuracy on video test sets, as the paper defines it (§4.3), and on SynRail's approach clips.

Each clip (15 s in the paper) is one event with a label: an obstacle is on the track, or not. Its
frames are sampled at 10 fps; a frame says "obstacle" when any detection scores at or above the
threshold; the clip's decision is the majority vote of its frames, and a tie says "obstacle" (an
alarm is the safe answer when the vote is split). Accuracy = (TP + TN) / all clips.

A SynRail export's ``clips.csv`` is scored from a detector's COCO results on the clip frames instead
of videos (``clip_event_accuracy``), and its clip annotations give per-track figures: frames detected
per track and the first-detection distance (``track_detections``).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict

SAMPLE_FPS = 10.0
FrameDetector = Callable[[np.ndarray], Sequence[float]]  # BGR frame -> detection scores
TRUE_LABELS = {"1", "true", "yes", "obstacle", "positive"}
FALSE_LABELS = {"0", "false", "no", "clear", "negative", "none"}


class Clip(BaseModel):
    """A test clip and whether an obstacle appears in it (with its track type and condition, when known)."""

    model_config = ConfigDict(frozen=True)

    video: Path
    has_obstacle: bool
    track_type: str | None = None
    condition: str | None = None


class ClipResult(BaseModel):
    """A clip's verdict: what was predicted against the truth, from how many frames."""

    model_config = ConfigDict(frozen=True)

    video: str
    has_obstacle: bool
    predicted: bool
    frames: int
    positive_frames: int
    track_type: str | None = None
    condition: str | None = None

    @property
    def correct(self) -> bool:
        """Whether the prediction matches the truth."""
        return self.predicted == self.has_obstacle


class EventReport(BaseModel):
    """Every clip's result with the threshold and sampling rate used."""

    model_config = ConfigDict(frozen=True)

    clips: list[ClipResult]
    score_threshold: float
    sample_fps: float

    def accuracy(self, track_type: str | None = None) -> float | None:
        """(TP + TN) / clips, over all clips or one track type's; None without clips."""
        chosen = [c for c in self.clips if track_type is None or c.track_type == track_type]
        return sum(c.correct for c in chosen) / len(chosen) if chosen else None

    def counts(self) -> dict[str, int]:
        """True/false positives and negatives over the clips."""
        return {"TP": sum(c.predicted and c.has_obstacle for c in self.clips),
                "TN": sum(not c.predicted and not c.has_obstacle for c in self.clips),
                "FP": sum(c.predicted and not c.has_obstacle for c in self.clips),
                "FN": sum(not c.predicted and c.has_obstacle for c in self.clips)}


def sample_frames(video: str | Path, sample_fps: float = SAMPLE_FPS) -> Iterator[np.ndarray]:
    """A clip's frames at ``sample_fps``: the first frame at or after each time k / sample_fps,
    decoded only when kept. A source at or below the sample rate, or of unknown rate, gives every frame.

    Args:
        video: the clip's file path.
        sample_fps: frames per second of video to keep, > 0.

    Yields:
        H x W x 3 uint8 BGR frames, in order.

    Raises:
        ValueError: the video cannot be opened (raised when the first frame is asked for).
    """
    capture = cv2.VideoCapture(str(video))
    if not capture.isOpened():
        raise ValueError(f"video {video} cannot be read")
    try:
        native_fps = capture.get(cv2.CAP_PROP_FPS) or 0.0
        step = native_fps / sample_fps if native_fps > sample_fps else 1.0  # in source frames
        index, next_sample = 0, 0.0
        while capture.grab():
            if index >= next_sample - 1e-9:
                ok, frame = capture.retrieve()
                if ok:
                    yield frame
                next_sample += step
            index += 1
    finally:
        capture.release()


def frame_says_obstacle(scores: Sequence[float], score_threshold: float) -> bool:
    """Whether a frame raises an alarm: any detection at or above the threshold.

    Args:
        scores: the frame's detection scores.
        score_threshold: the alarm threshold.

    Returns:
        True when the frame says obstacle.
    """
    return any(score >= score_threshold for score in scores)


def majority_vote(decisions: Sequence[bool]) -> bool:
    """True when at least half the frames say obstacle (a tie alarms)."""
    if not decisions:
        raise ValueError("a clip needs at least one frame to vote")
    return 2 * sum(decisions) >= len(decisions)


def evaluate_clip(clip: Clip, detector: FrameDetector, score_threshold: float,
                  sample_fps: float = SAMPLE_FPS) -> ClipResult:
    """A clip's verdict: frames sampled at ``sample_fps``, each deciding, the majority voting.

    Args:
        clip: the clip and its truth.
        detector: BGR frame -> detection scores.
        score_threshold: the per-frame alarm threshold.
        sample_fps: frames per second sampled.

    Returns:
        The clip's result.

    Raises:
        ValueError: the video has no readable frame.
    """
    decisions = [frame_says_obstacle(detector(frame), score_threshold)
                 for frame in sample_frames(clip.video, sample_fps)]
    if not decisions:
        raise ValueError(f"video {clip.video} has no readable frame")
    return ClipResult(video=str(clip.video), has_obstacle=clip.has_obstacle, predicted=majority_vote(decisions),
                      frames=len(decisions), positive_frames=sum(decisions), track_type=clip.track_type,
                      condition=clip.condition)


def event_accuracy(clips: Sequence[Clip], detector: FrameDetector, score_threshold: float = 0.25,
                   sample_fps: float = SAMPLE_FPS) -> EventReport:
    """Event accuracy over clips (the paper's Table 3 "Acc"): one majority-vote verdict per clip.

    Args:
        clips: the test clips.
        detector: BGR frame -> detection scores.
        score_threshold: the per-frame alarm threshold.
        sample_fps: frames per second sampled.

    Returns:
        The report of every clip.
    """
    return EventReport(clips=[evaluate_clip(c, detector, score_threshold, sample_fps) for c in clips],
                       score_threshold=score_threshold, sample_fps=sample_fps)


def _label(value: str, manifest: Path) -> bool:
    text = value.strip().lower()
    if text in TRUE_LABELS | FALSE_LABELS:
        return text in TRUE_LABELS
    raise ValueError(f"{manifest}: label {value!r} is not one of {sorted(TRUE_LABELS | FALSE_LABELS)}")


def load_clips(manifest: str | Path) -> list[Clip]:
    """A clip list from CSV with columns video,label[,track_type,condition]; videos relative to the CSV."""
    manifest = Path(manifest)
    if not manifest.is_file():
        raise FileNotFoundError(f"clip manifest {manifest} does not exist")
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if rows and not {"video", "label"} <= set(rows[0]):
        hint = " (a SynRail clips.csv is scored by synrail evaluate --clips)" if "clip_id" in rows[0] else ""
        raise ValueError(f"{manifest} needs the columns video and label{hint}")
    return [Clip(video=manifest.parent / row["video"], has_obstacle=_label(row["label"], manifest),
                 track_type=row.get("track_type") or None, condition=row.get("condition") or None)
            for row in rows]


# --- SynRail approach clips: events and tracks from a detector's COCO results ---------------------

CLIP_ANNOTATIONS = Path("manifest") / "clip_annotations.parquet"  # beside clips.csv in a SynRail export
TRACK_IOU = 0.5


class SyntheticClip(BaseModel):
    """One row of a SynRail export's ``clips.csv``."""

    model_config = ConfigDict(frozen=True)

    clip_id: str
    split: str
    frames: int
    fps: float
    speed_kmh: float
    event: bool


def is_synthetic_manifest(manifest: str | Path) -> bool:
    """Whether a clip CSV is a SynRail export's ``clips.csv`` (a ``clip_id`` column) rather than a
    list of videos (``video,label``)."""
    with Path(manifest).open(newline="") as handle:
        header = next(csv.reader(handle), [])
    return "clip_id" in header


def load_synthetic_clips(manifest: str | Path) -> list[SyntheticClip]:
    """The clips of a SynRail ``clips.csv`` (clip_id,split,frames,fps,speed_kmh,event,first_file).

    Args:
        manifest: the CSV's path.

    Returns:
        One clip per row, in file order.

    Raises:
        FileNotFoundError: no file at the path.
        ValueError: a column is missing or a cell is not a number.
    """
    manifest = Path(manifest)
    if not manifest.is_file():
        raise FileNotFoundError(f"clip manifest {manifest} does not exist")
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    try:
        return [SyntheticClip(clip_id=r["clip_id"], split=r["split"], frames=int(r["frames"]), fps=float(r["fps"]),
                              speed_kmh=float(r["speed_kmh"]), event=_label(r["event"], manifest)) for r in rows]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{manifest} is not a SynRail clips.csv: {err}") from err


def _clip_frames(document: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The ground truth's clip frames by clip, in frame order."""
    frames: dict[str, list[dict[str, Any]]] = {}
    for image in document["images"]:
        if image.get("clip_id") is not None:
            frames.setdefault(image["clip_id"], []).append(image)
    return {clip: sorted(images, key=lambda i: i["frame_in_clip"]) for clip, images in frames.items()}


def _sampled(frames: Sequence[dict[str, Any]], fps: float, sample_fps: float) -> list[dict[str, Any]]:
    """The frames a ``sample_fps`` camera would see, as :func:`sample_frames` picks them from a video."""
    step = fps / sample_fps if fps > sample_fps else 1.0
    chosen, next_sample = [], 0.0
    for frame in frames:
        if frame["frame_in_clip"] >= next_sample - 1e-9:
            chosen.append(frame)
            next_sample += step
    return chosen


def _scores_by_image(results: Sequence[Mapping[str, Any]]) -> dict[int, list[float]]:
    scores: dict[int, list[float]] = {}
    for r in results:
        scores.setdefault(int(r["image_id"]), []).append(float(r["score"]))
    return scores


def clip_event_accuracy(clips: Sequence[SyntheticClip], document: Mapping[str, Any],
                        results: Sequence[Mapping[str, Any]], score_threshold: float = 0.25,
                        sample_fps: float = SAMPLE_FPS) -> EventReport:
    """Event accuracy of SynRail clips from a detector's COCO results on their frames: frames sampled
    at ``sample_fps`` from each clip's ``fps``, a frame saying obstacle when any of its detections
    scores at or above the threshold, the majority voting (a tie alarms), against ``event``.

    Only clips with frames in ``document`` are scored (a test split's COCO holds its own clips).

    Args:
        clips: the rows of ``clips.csv``.
        document: the COCO ground truth whose images carry ``clip_id`` and ``frame_in_clip``.
        results: COCO detection results on those images.
        score_threshold: the per-frame alarm threshold.
        sample_fps: frames per second sampled.

    Returns:
        One verdict per scored clip (``video`` holds the clip id).

    Raises:
        ValueError: no clip of the list has a frame in the ground truth.
    """
    frames_of = _clip_frames(document)
    scores = _scores_by_image(results)
    verdicts = []
    for clip in clips:
        if clip.clip_id not in frames_of:
            continue
        frames = _sampled(frames_of[clip.clip_id], clip.fps, sample_fps)
        decisions = [frame_says_obstacle(scores.get(f["id"], []), score_threshold) for f in frames]
        first = frames[0]
        verdicts.append(ClipResult(video=clip.clip_id, has_obstacle=clip.event, predicted=majority_vote(decisions),
                                   frames=len(decisions), positive_frames=sum(decisions),
                                   track_type=first.get("track_type"), condition=first.get("condition")))
    if not verdicts:
        raise ValueError("no clip of the clip list has frames in the ground truth (another split?)")
    return EventReport(clips=verdicts, score_threshold=score_threshold, sample_fps=sample_fps)


class TrackResult(BaseModel):
    """How a detector followed one obstacle track of a clip."""

    model_config = ConfigDict(frozen=True)

    clip_id: str
    track_id: int
    class_name: str
    frames: int  # frames in which the track is labelled
    detected_frames: int  # of those, frames with a detection over the threshold at IoU >= TRACK_IOU
    first_distance_m: float  # the obstacle's distance in the track's first labelled frame
    first_detection_frame: int | None  # frame_in_clip of the first detection; None: never detected
    first_detection_distance_m: float | None  # how far away the obstacle was then


class TrackReport(BaseModel):
    """Every track's result with the thresholds used."""

    model_config = ConfigDict(frozen=True)

    tracks: list[TrackResult]
    score_threshold: float
    iou_threshold: float

    def detected_share(self) -> float | None:
        """The share of tracks detected in at least one frame; None without tracks."""
        return sum(t.first_detection_frame is not None for t in self.tracks) / len(self.tracks) if self.tracks else None

    def median_first_detection_m(self) -> float | None:
        """The median first-detection distance over the detected tracks; None when none was."""
        distances = [t.first_detection_distance_m for t in self.tracks if t.first_detection_distance_m is not None]
        return float(np.median(distances)) if distances else None


def load_clip_annotations(manifest: str | Path) -> list[dict[str, Any]]:
    """The clip annotation rows of the SynRail export that holds ``clips.csv``
    (``manifest/clip_annotations.parquet`` beside it), with the columns track figures need.

    Raises:
        FileNotFoundError: the export has no clip annotation table.
    """
    import pyarrow.parquet as pq

    path = Path(manifest).parent / CLIP_ANNOTATIONS
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (the clip annotations of the export that holds {manifest})")
    columns = ["image_id", "clip_id", "frame_in_clip", "track_id", "class_name", "distance_m",
               "bbox_x", "bbox_y", "bbox_w", "bbox_h"]
    return pq.read_table(path, columns=columns).to_pylist()


def _detected(box: Sequence[float], detections: Sequence[Mapping[str, Any]], iou_threshold: float) -> bool:
    """Whether any detection overlaps ``box`` (x, y, w, h) at ``iou_threshold`` or more."""
    from pycocotools import mask as mask_utils

    if not detections:
        return False
    ious = mask_utils.iou([list(map(float, d["bbox"])) for d in detections], [list(map(float, box))], [0])
    return bool((np.asarray(ious) >= iou_threshold).any())


def track_detections(annotations: Sequence[Mapping[str, Any]], document: Mapping[str, Any],
                     results: Sequence[Mapping[str, Any]], score_threshold: float = 0.25,
                     iou_threshold: float = TRACK_IOU) -> TrackReport:
    """Per track: frames labelled and detected, and how far away the obstacle was when first detected.

    A track's frame counts as detected when a detection scoring at or above the threshold overlaps
    its box at ``iou_threshold`` or more, whatever class it names (an alarm for the wrong class still
    sees the obstacle). Every labelled frame counts (not only the 10 fps sample of the event vote).

    Args:
        annotations: clip annotation rows (``load_clip_annotations``); those whose frame is not an
            image of ``document`` (another split) are left out.
        document: the COCO ground truth the results refer to (clip frames matched by file name).
        results: COCO detection results.
        score_threshold: the detection score threshold.
        iou_threshold: the box overlap a detection needs.

    Returns:
        One result per track, ordered by clip and track id.
    """
    image_ids = {Path(i["file_name"]).stem: i["id"] for i in document["images"] if i.get("clip_id") is not None}
    detections: dict[int, list[Mapping[str, Any]]] = {}
    for r in results:
        if float(r["score"]) >= score_threshold:
            detections.setdefault(int(r["image_id"]), []).append(r)
    by_track: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in annotations:
        if row["image_id"] in image_ids:
            by_track.setdefault((row["clip_id"], int(row["track_id"])), []).append(row)
    tracks = []
    for (clip, track), rows in sorted(by_track.items()):
        rows = sorted(rows, key=lambda r: r["frame_in_clip"])
        seen = [r for r in rows if _detected((r["bbox_x"], r["bbox_y"], r["bbox_w"], r["bbox_h"]),
                                             detections.get(image_ids[r["image_id"]], []), iou_threshold)]
        tracks.append(TrackResult(
            clip_id=clip, track_id=track, class_name=rows[0]["class_name"], frames=len(rows), detected_frames=len(seen),
            first_distance_m=float(rows[0]["distance_m"]),
            first_detection_frame=int(seen[0]["frame_in_clip"]) if seen else None,
            first_detection_distance_m=float(seen[0]["distance_m"]) if seen else None))
    return TrackReport(tracks=tracks, score_threshold=score_threshold, iou_threshold=iou_threshold)

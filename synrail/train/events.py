"""Event accuracy on video test sets, as the paper defines it (§4.3).

Each clip (15 s in the paper) is one event with a label: an obstacle is on the track, or not. Its
frames are sampled at 10 fps; a frame says "obstacle" when any detection scores at or above the
threshold; the clip's decision is the majority vote of its frames, and a tie says "obstacle" (an
alarm is the safe answer when the vote is split). Accuracy = (TP + TN) / all clips.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

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
        raise ValueError(f"{manifest} needs the columns video and label")
    return [Clip(video=manifest.parent / row["video"], has_obstacle=_label(row["label"], manifest),
                 track_type=row.get("track_type") or None, condition=row.get("condition") or None)
            for row in rows]

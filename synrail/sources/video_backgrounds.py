"""The video background stage: one cab video in, its usable frames written to the cache as PNGs and
small records out (kept frames, rejected frames with reasons, or a quarantine row for a bad video).

A bad video never raises: it becomes a quarantine row, so one broken upload cannot stop a build.
Configuration mistakes (a malformed sidecar, missing detector weights) do raise.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import cv2
from pydantic import BaseModel, ConfigDict, Field, model_validator

from synrail.errors import InputError
from synrail.sources.frame_filters import (
    NO_DETECTOR_NOTE,
    FilterConfig,
    FrameDecision,
    ObstacleDetector,
    detector_from_config,
    filter_frames,
)
from synrail.sources.image_safety import DEFAULT_MAX_IMAGE_PIXELS
from synrail.sources.video import VideoError, VideoRef, read_sidecar, sample_frames, sidecar_metadata
from synrail.storage.store import Store


class VideoSourceConfig(BaseModel):
    """How frames are sampled from cab footage (fps or stride, a cap per video), filtered, and described (sidecar)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fps: float | None = Field(1.0, gt=0)
    stride: int | None = Field(None, ge=1)
    max_frames_per_video: int | None = Field(200, ge=1)
    filters: FilterConfig = FilterConfig()
    sidecar: str | None = None  # URL of a CSV / Parquet table of per-video metadata

    @model_validator(mode="before")
    @classmethod
    def _stride_alone_replaces_the_default_fps(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stride") is not None and "fps" not in data:
            return {**data, "fps": None}
        return data

    @model_validator(mode="after")
    def _exactly_one_rate(self) -> VideoSourceConfig:
        if (self.fps is None) == (self.stride is None):
            raise ValueError(f"set exactly one of fps and stride (got fps={self.fps}, stride={self.stride})")
        return self


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class FrameRecord(_Record):
    """A kept frame written to the cache as PNG, with where it came from and its metadata."""

    frame_id: str  # "<video folder>/<frame index>", unique across videos
    video_name: str
    path: str  # PNG, relative to the cache store
    sha256: str
    frame_index: int
    time_s: float
    width: int
    height: int
    blur: float
    mean_luma: float
    phash: str  # 16 hex digits (a 64-bit int would overflow signed Parquet / JSON number columns)
    # Outside the exposure limits ("underexposed", "overexposed"): left out for it where no track is found.
    exposure: str | None = None


class RejectRecord(_Record):
    """A sampled frame the filters rejected, with the reason and its measurements."""

    frame_index: int
    time_s: float
    reason: str
    blur: float
    mean_luma: float
    phash: str


class QuarantineRecord(_Record):
    """A file that could not be read safely, and why."""

    url: str
    reason: str


class VideoExtraction(_Record):
    """Everything one video yielded: kept and rejected frames, quarantine, sidecar metadata and notes."""

    video: VideoRef
    frames: list[FrameRecord]
    rejected: list[RejectRecord]
    quarantine: QuarantineRecord | None
    metadata: dict[str, str]  # the video's sidecar row (country, weather, track_type, time_of_day)
    notes: list[str]  # what a reader of the run should know: skipped filters, truncation
    frames_expected: int | None  # sampled frames the container's frame count promises
    frames_decoded: int
    truncated: bool


def video_folder(video: VideoRef) -> str:
    """Readable and unique per video version: a re-uploaded video never overwrites the old frames
    that cached records still point at."""
    slug = re.sub(r"[^a-z0-9]+", "-", video.name.lower()).strip("-") or "video"
    digest = hashlib.sha256(f"{video.url}\n{video.version}".encode()).hexdigest()[:10]
    return f"{slug}-{digest}"


def _encode_png(decision: FrameDecision) -> bytes:
    ok, buffer = cv2.imencode(".png", decision.frame.image)
    if not ok:
        raise ValueError(f"OpenCV could not encode frame {decision.frame.frame_index} as PNG")
    return buffer.tobytes()


def _write_frame(decision: FrameDecision, video: VideoRef, folder: str, cache: Store) -> FrameRecord:
    frame = decision.frame
    path = f"frames/{folder}/{frame.frame_index:06d}.png"
    sha = cache.write_bytes(path, _encode_png(decision))
    height, width = frame.image.shape[:2]
    return FrameRecord(frame_id=f"{folder}/{frame.frame_index:06d}", video_name=video.name, path=path,
                       sha256=sha, frame_index=frame.frame_index, time_s=frame.time_s, width=width,
                       height=height, blur=decision.blur, mean_luma=decision.mean_luma,
                       phash=f"{decision.phash:016x}", exposure=decision.exposure)


def _reject_record(decision: FrameDecision) -> RejectRecord:
    return RejectRecord(frame_index=decision.frame.frame_index, time_s=decision.frame.time_s,
                        reason=decision.reason, blur=decision.blur, mean_luma=decision.mean_luma,
                        phash=f"{decision.phash:016x}")


def _metadata(video: VideoRef, cfg: VideoSourceConfig, storage_options: dict | None) -> tuple[dict, list[str]]:
    if cfg.sidecar is None:
        return {}, []
    try:
        table = read_sidecar(cfg.sidecar, storage_options)
    except ValueError as exc:  # a malformed or missing sidecar is the config's mistake, not one video's
        raise InputError(f"backgrounds.video.sampling.sidecar: {exc}") from None
    metadata = sidecar_metadata(table, video)
    return metadata, [] if metadata else [f"no row for {video.name} in sidecar {cfg.sidecar}"]


def extract_video_backgrounds(video: VideoRef, cfg: VideoSourceConfig, cache: Store,
                              detector: ObstacleDetector | None = None, *,
                              storage_options: dict | None = None,
                              max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> VideoExtraction:
    """Sample, filter and store the frames of one video. ``detector`` defaults to the one configured
    in ``cfg.filters`` (none without weights, which is noted); ``storage_options`` reach the video
    and sidecar URLs (credentials stay out of the config and so out of cache keys); a video whose
    frames declare more than ``max_pixels`` is quarantined before any frame is decoded.

    Args:
        video: the video file or image sequence.
        cfg: sampling rate, frame filters and sidecar of the video source.
        cache: the store accepted frames are written to, as ``frames/<video folder>/<index>.png``.
        detector: refuses frames with an obstacle on the track; None uses the configured one, if any.
        storage_options: fsspec options for the video and sidecar URLs; None for none.
        max_pixels: the most pixels a frame may declare.

    Returns:
        The accepted frames, the rejected ones with their reasons, the video's metadata and notes, and
        a quarantine record instead of frames when the video cannot be used.
    """
    metadata, notes = _metadata(video, cfg, storage_options)
    detector = detector if detector is not None else detector_from_config(cfg.filters)
    if detector is None:
        notes.append(NO_DETECTOR_NOTE)
    stream = sample_frames(video, fps=cfg.fps, stride=cfg.stride, max_frames=cfg.max_frames_per_video,
                           storage_options=storage_options, max_pixels=max_pixels)
    folder = video_folder(video)
    frames: list[FrameRecord] = []
    rejected: list[RejectRecord] = []
    try:
        for decision in filter_frames(stream, cfg.filters, detector):
            if decision.accepted:
                frames.append(_write_frame(decision, video, folder, cache))
            else:
                rejected.append(_reject_record(decision))
    except VideoError as exc:
        rejected = []  # a sequence without one readable image is quarantined whole
        return VideoExtraction(video=video, frames=[], rejected=[], quarantine=QuarantineRecord(
            url=exc.url, reason=exc.reason), metadata=metadata, notes=notes, frames_expected=None,
            frames_decoded=0, truncated=False)
    rejected += [RejectRecord(frame_index=position, time_s=float(position), reason=reason, blur=0.0, mean_luma=0.0,
                              phash="0" * 16) for position, reason in stream.unreadable]
    if stream.truncated:
        notes.append(f"truncated: decoded {stream.frames_decoded} of the {stream.frames_expected} sampled "
                     "frames its frame count promises")
    return VideoExtraction(video=video, frames=frames, rejected=rejected, quarantine=None, metadata=metadata,
                           notes=notes, frames_expected=stream.frames_expected,
                           frames_decoded=stream.frames_decoded, truncated=stream.truncated)

"""Train-cab footage as a background source: videos, or folders of frames (image sequences), listed
under a folder or an s3:// prefix, their optional metadata sidecar, and frames sampled from them at
a fixed rate or stride.

An image folder's layout: each subfolder is one camera sequence (its images sorted by name); an
image directly under the root is a sequence of its own. A sequence is handled like a video: one
camera, one split, frames numbered by their position in it.

OpenCV reads only local paths, so a remote video is copied to a temporary file while it is sampled.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import fsspec
import numpy as np
import pyarrow.parquet as pq

from synrail.rail.camera import CAMERA_COLUMNS, check_camera_cells
from synrail.sources.image_safety import DEFAULT_MAX_IMAGE_PIXELS, decode_or_reason, frame_size_problem
from synrail.storage.store import LOCAL_PROTOCOLS

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".mov")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
SIDECAR_COLUMNS = ("country", "weather", "track_type", "time_of_day", "speed_kmh", *CAMERA_COLUMNS)
TRACK_TYPES = ("ballasted", "ballastless")


class VideoError(ValueError):
    """A video that cannot be used at all, with its URL and why."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url, self.reason = url, reason


@dataclass(frozen=True)
class VideoRef:
    """One video file, or one image sequence (``members``: its image names below ``url``, in order)."""

    url: str
    name: str  # path below the listed root, "/"-separated
    size: int
    version: str  # ETag / VersionId on object stores, else size and mtime: a re-upload is a new input
    members: tuple[str, ...] = ()  # an image sequence's files, relative to ``url``; empty for a video

    @property
    def is_sequence(self) -> bool:
        """Whether this is a folder of frames rather than a video file."""
        return bool(self.members)

    def frame_url(self, frame_index: int) -> str:
        """The URL of frame ``frame_index``: the video itself, or the sequence's image at that position."""
        return f"{self.url}/{self.members[frame_index]}" if self.members else self.url


@dataclass(frozen=True)
class SampledFrame:
    """One sampled frame: its index in the source, its time (s) and its BGR pixels."""

    frame_index: int
    time_s: float
    image: np.ndarray  # BGR


# -- listing -------------------------------------------------------------------------------------
def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol
    return bool(LOCAL_PROTOCOLS & set(protocol if isinstance(protocol, tuple) else (protocol,)))


def _as_url(location: str) -> str:
    """A plain path becomes a file:// URL. Not Path.as_uri(): fsspec does not undo its percent-encoding,
    so a folder with a space in its name would not be found."""
    if "://" in location:
        return location.rstrip("/")
    return "file://" + str(Path(location).expanduser().resolve())


def _version(info: dict[str, Any]) -> str:
    for key in ("VersionId", "ETag", "etag"):
        if info.get(key):
            return str(info[key]).strip('"')
    modified = next((info[k] for k in ("mtime", "LastModified", "last_modified", "created") if info.get(k)), "")
    stamp = modified.isoformat() if hasattr(modified, "isoformat") else str(modified)
    return f"{info.get('size', 0)}-{stamp}"


def _is_video_name(name: str) -> bool:
    # Dot-files are skipped: macOS "._clip.mp4" resource forks and half-written temporaries.
    base = posixpath.basename(name)
    return not base.startswith(".") and base.lower().endswith(VIDEO_EXTENSIONS)


def _listing_root(root_url: str, storage_options: dict | None, kind: str
                  ) -> tuple[str, fsspec.AbstractFileSystem, str]:
    """(URL, filesystem, path) of a footage root, its listing cache dropped; FileNotFoundError naming
    the ``kind`` of folder when it does not exist."""
    url = _as_url(root_url)
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    root = root.rstrip("/")
    fs.invalidate_cache(root)  # s3fs caches listings per process; a watcher must see new uploads
    if not fs.exists(root):
        raise FileNotFoundError(f"no such {kind} folder or prefix: {url}")
    return url, fs, root


def _files_under(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, dict[str, Any]]:
    """Every file under ``root`` (recursively) and its info, symbolic links followed on a local disk.

    fsspec lists a link as neither file nor folder and does not descend into a linked folder, but a
    dataset linked into a footage folder is footage; a folder linked into itself is walked once.
    """
    files: dict[str, dict[str, Any]] = {}
    walked: set[str] = set()

    def walk(folder: str) -> None:
        if _is_local(fs):
            real = os.path.realpath(folder)
            if real in walked:
                return
            walked.add(real)
        for path, info in fs.find(folder, detail=True).items():
            if info.get("islink"):
                if fs.isdir(path):
                    walk(path)
                    continue
                if not fs.isfile(path):  # a dangling link
                    continue
                info = fs.info(path)  # the target's size and time
            if info.get("type", "file") == "file":
                files[path] = info

    walk(root)
    return files


def list_videos(root_url: str, storage_options: dict | None = None) -> list[VideoRef]:
    """Every video file under ``root_url`` (recursively), sorted by name.

    Args:
        root_url: a folder or prefix: an fsspec URL (file://, s3://, ...) or a local path.
        storage_options: fsspec options for the URL (credentials, endpoint); None for none.

    Returns:
        One reference per video file (URL, name below the root, size in bytes, version).

    Raises:
        FileNotFoundError: the root does not exist.
    """
    url, fs, root = _listing_root(root_url, storage_options, "video")
    refs = []
    for path, info in _files_under(fs, root).items():
        name = posixpath.relpath(path, root)
        if _is_video_name(name):
            refs.append(VideoRef(url=f"{url}/{name}", name=name, size=int(info.get("size") or 0),
                                 version=_version(info)))
    return sorted(refs, key=lambda ref: ref.name)


def _is_image_name(name: str) -> bool:
    base = posixpath.basename(name)
    return not base.startswith(".") and base.lower().endswith(IMAGE_EXTENSIONS)


def natural_order(name: str) -> tuple[str | int, ...]:
    """A sort key that puts ``frame_9.png`` before ``frame_10.png``: runs of digits compare as
    numbers (ffmpeg's ``%d`` names, and many exporters', are not zero-padded)."""
    return tuple(int(part) if index % 2 else part for index, part in enumerate(re.split(r"(\d+)", name)))


def list_sequences(root_url: str, storage_options: dict | None = None) -> list[VideoRef]:
    """Every image sequence under ``root_url``, sorted by name.

    Each folder holding images is one sequence (its images in name order, numbers in names
    compared as numbers; subfolders of its own are sequences of their own); an image directly
    under the root is a one-frame sequence. A folder that cuts between shots, or holds unrelated
    stills, is split into shots when its frames are read (``synrail.rail.shots``).

    Args:
        root_url: a folder or prefix: an fsspec URL (file://, s3://, ...) or a local path.
        storage_options: fsspec options for the URL; None for none.

    Returns:
        One reference per sequence: its folder URL, its images in name order, their total size in
        bytes, and a version hashed from the images' names and versions.

    Raises:
        FileNotFoundError: the root does not exist.
    """
    url, fs, root = _listing_root(root_url, storage_options, "frames")
    sequences: dict[str, tuple[str, list[tuple[str, dict[str, Any]]]]] = {}  # name -> (url, files)
    for path, info in _files_under(fs, root).items():
        name = posixpath.relpath(path, root)
        if not _is_image_name(name):
            continue
        folder = posixpath.dirname(name)
        key, base = (folder, f"{url}/{folder}") if folder else (name, url)  # a root-level image: its own
        sequences.setdefault(key, (base, []))[1].append((posixpath.basename(name), info))
    refs = []
    for name, (base, files) in sequences.items():
        files.sort(key=lambda item: natural_order(item[0]))
        digest = hashlib.sha256("\n".join(f"{f} {_version(i)}" for f, i in files).encode()).hexdigest()[:16]
        refs.append(VideoRef(url=base, name=name, size=sum(int(i.get("size") or 0) for _, i in files),
                             version=digest, members=tuple(f for f, _ in files)))
    return sorted(refs, key=lambda ref: ref.name)


# -- sidecar metadata ----------------------------------------------------------------------------
def _sidecar_table(url: str, fs: fsspec.AbstractFileSystem, path: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(column names, rows) of a CSV or Parquet file."""
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        table = pq.read_table(io.BytesIO(fs.cat_file(path)))
        return table.column_names, table.to_pylist()
    if lower.endswith(".csv"):
        reader = csv.DictReader(io.StringIO(fs.cat_file(path).decode("utf-8-sig")))
        return list(reader.fieldnames or []), list(reader)
    raise ValueError(f"video sidecar {url}: expected a .csv or .parquet file")


def _sidecar_entry(url: str, row_number: int, row: dict[str, Any]) -> tuple[str, dict[str, str]]:
    if None in row:  # csv.DictReader files cells beyond the header under None
        raise ValueError(f"video sidecar {url}, row {row_number}: more cells than the header has columns")
    video = str(row.get("video") or "").strip()
    if not video:
        raise ValueError(f"video sidecar {url}, row {row_number}: empty 'video' value")
    entry = {k: str(v).strip() for k, v in row.items() if k != "video" and v is not None and str(v).strip()}
    track_type = entry.get("track_type")
    if track_type is not None and track_type not in TRACK_TYPES:
        raise ValueError(f"video sidecar {url}, row {row_number} ({video}): track_type {track_type!r} "
                         f"is not one of {list(TRACK_TYPES)}")
    speed = entry.get("speed_kmh")
    if speed is not None and not _positive_number(speed):
        raise ValueError(f"video sidecar {url}, row {row_number} ({video}): speed_kmh {speed!r} is not a "
                         "positive number (km/h)")
    try:
        check_camera_cells(entry)
    except ValueError as exc:
        raise ValueError(f"video sidecar {url}, row {row_number} ({video}): {exc}") from None
    return video, entry


def _positive_number(text: str) -> bool:
    try:
        return math.isfinite(float(text)) and float(text) > 0
    except ValueError:
        return False


def read_sidecar(url: str, storage_options: dict | None = None) -> dict[str, dict]:
    """Per-video metadata (CSV or Parquet): column ``video`` (file name, or path below the video root)
    and any of ``country, weather, track_type, time_of_day``, ``speed_kmh`` (the train's speed, for
    approach clips) and the camera columns
    (``rail.camera.CAMERA_COLUMNS``); empty cells are left out. Row numbers in errors count data
    rows from 1.

    Args:
        url: the sidecar file: an fsspec URL or a local path.
        storage_options: fsspec options for the URL; None for none.

    Returns:
        ``video`` value -> {column: stripped cell text} of the row's non-empty cells.

    Raises:
        ValueError: the file is missing, lacks the ``video`` column, has unknown columns, an empty
            ``video`` cell, a row with extra cells, or a video listed twice.
    """
    fs, path = fsspec.core.url_to_fs(_as_url(url), **(storage_options or {}))
    try:
        columns, rows = _sidecar_table(url, fs, path)
    except FileNotFoundError:
        raise ValueError(f"video sidecar {url}: file not found") from None
    if "video" not in columns:
        raise ValueError(f"video sidecar {url}: missing column 'video' (columns: {columns})")
    unknown = [c for c in columns if c != "video" and c not in SIDECAR_COLUMNS]
    if unknown:
        raise ValueError(f"video sidecar {url}: unknown column(s) {unknown}; allowed: video, "
                         f"{', '.join(SIDECAR_COLUMNS)}")
    table: dict[str, dict] = {}
    for number, row in enumerate(rows, start=1):
        video, entry = _sidecar_entry(url, number, row)
        if video in table:
            raise ValueError(f"video sidecar {url}, row {number}: video {video!r} is listed twice")
        table[video] = entry
    return table


def sidecar_metadata(table: dict[str, dict], video: VideoRef) -> dict:
    """The sidecar row of ``video``: matched on its path below the root, else on its file name.

    Args:
        table: what ``read_sidecar`` returned.
        video: the video to look up.

    Returns:
        A copy of its row; {} when the sidecar does not list it.
    """
    return dict(table.get(video.name) or table.get(posixpath.basename(video.name)) or {})


# -- sampling ------------------------------------------------------------------------------------
def _copy_to_temp(video: VideoRef, fs: fsspec.AbstractFileSystem, path: str) -> str:
    handle, tmp = tempfile.mkstemp(prefix="synrail-video-", suffix=posixpath.splitext(video.name)[1])
    try:
        with os.fdopen(handle, "wb") as out, fs.open(path, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 22)
    except OSError as exc:
        os.unlink(tmp)
        raise VideoError(video.url, f"cannot read the file ({exc.strerror or exc})") from exc
    return tmp


@contextmanager
def _local_path(video: VideoRef, storage_options: dict | None) -> Iterator[str]:
    """A local path to the video: the file itself on a local disk, else a temporary copy."""
    fs, path = fsspec.core.url_to_fs(video.url, **(storage_options or {}))
    if _is_local(fs):
        if not os.path.isfile(path):
            raise VideoError(video.url, "file not found")
        yield path
        return
    tmp = _copy_to_temp(video, fs, path)
    try:
        yield tmp
    finally:
        os.unlink(tmp)


def _nth_sample_index(k: int, step: float) -> int:
    return math.ceil(k * step - 1e-9)  # the epsilon keeps k * (30 / 10) from rounding up past 3k


class FrameStream(Iterator[SampledFrame]):
    """The sampled frames of one video. Once exhausted, ``truncated`` says whether the stream ended
    before the frame count in the container header promised (``frames_expected`` vs ``frames_decoded``)."""

    def __init__(self, video: VideoRef, fps: float | None, stride: int | None, max_frames: int | None,
                 storage_options: dict | None, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> None:
        self.video = video
        self.max_pixels = max_pixels
        self.fps, self.stride, self.max_frames = fps, stride, max_frames
        self.native_fps: float | None = None
        self.frame_count: int | None = None  # from the container; None when it does not say
        self.frames_expected: int | None = None  # samples that frame count promises (within max_frames)
        self.frames_decoded = 0
        self.unreadable: list[tuple[int, str]] = []  # frames of a video are never skipped one by one
        self.exhausted = False
        self._frames = self._generate(storage_options)

    @property
    def truncated(self) -> bool:
        """Whether the video ended before the frame count its header promised (known once exhausted)."""
        return self.exhausted and self.frames_expected is not None and self.frames_decoded < self.frames_expected

    def __next__(self) -> SampledFrame:
        return next(self._frames)

    def close(self) -> None:
        """Release the decoder."""
        self._frames.close()

    def _open(self, path: str) -> cv2.VideoCapture:
        if os.path.getsize(path) == 0:
            raise VideoError(self.video.url, "empty file")
        capture = cv2.VideoCapture(path)
        if not capture.isOpened():
            capture.release()
            raise VideoError(self.video.url, "OpenCV cannot open it (not a video, or damaged)")
        native_fps = capture.get(cv2.CAP_PROP_FPS)
        if not math.isfinite(native_fps) or native_fps <= 0:
            capture.release()
            raise VideoError(self.video.url, "the stream has no frame rate")
        self.native_fps = native_fps
        problem = frame_size_problem(int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
                                     int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)), self.max_pixels)
        if problem is not None:  # checked from the container before any frame is decoded
            capture.release()
            raise VideoError(self.video.url, f"frames: {problem}")
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        self.frame_count = count if count > 0 else None
        return capture

    def _step(self) -> float:
        """Frames between samples: sample k is frame ceil(k * step)."""
        return float(self.stride) if self.stride is not None else max(1.0, self.native_fps / self.fps)

    def _count_expected(self, step: float) -> None:
        if self.frame_count is not None:
            expected = math.floor((self.frame_count - 1 + 1e-9) / step) + 1
            self.frames_expected = expected if self.max_frames is None else min(expected, self.max_frames)

    def _generate(self, storage_options: dict | None) -> Iterator[SampledFrame]:
        with _local_path(self.video, storage_options) as path:
            capture = self._open(path)
            try:
                step = self._step()
                self._count_expected(step)
                yield from self._decode(capture, step)
            finally:
                capture.release()
        if self.frames_decoded == 0:
            reason = ("the video has zero frames" if not self.frame_count
                      else "the stream fails before its first sampled frame")
            raise VideoError(self.video.url, reason)
        self.exhausted = True

    def _decode(self, capture: cv2.VideoCapture, step: float) -> Iterator[SampledFrame]:
        # Frames are read in order (grab skips the colour conversion of unsampled ones) rather than by
        # seeking: seeks land on keyframes in some containers and misbehave on truncated files.
        index, target = 0, 0
        while self.max_frames is None or self.frames_decoded < self.max_frames:
            if not capture.grab():
                return
            if index == target:
                ok, image = capture.retrieve()
                if not ok or image is None:
                    return
                self.frames_decoded += 1
                yield SampledFrame(frame_index=index, time_s=index / self.native_fps, image=image)
                target = _nth_sample_index(self.frames_decoded, step)
            index += 1


class ImageSequenceStream(Iterator[SampledFrame]):
    """The sampled images of one sequence, every ``stride``-th by name. An image that cannot be
    decoded is skipped and listed in ``unreadable`` (position, reason); a sequence with no readable
    image raises VideoError (for a one-image sequence, with that image's URL and reason). ``time_s``
    is the position (a folder of frames has no clock)."""

    def __init__(self, video: VideoRef, stride: int, max_frames: int | None, storage_options: dict | None,
                 max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> None:
        self.video = video
        self.max_pixels = max_pixels
        self.frames_expected = len(range(0, len(video.members), stride))
        if max_frames is not None:
            self.frames_expected = min(self.frames_expected, max_frames)
        self.frames_decoded = 0
        self.unreadable: list[tuple[int, str]] = []
        self.truncated = False
        self._frames = self._generate(stride, storage_options)

    def __next__(self) -> SampledFrame:
        return next(self._frames)

    def close(self) -> None:
        """Stop reading the sequence."""
        self._frames.close()

    def _generate(self, stride: int, storage_options: dict | None) -> Iterator[SampledFrame]:
        fs, folder = fsspec.core.url_to_fs(self.video.url, **(storage_options or {}))
        for position in range(0, len(self.video.members), stride)[: self.frames_expected]:
            path = f"{folder.rstrip('/')}/{self.video.members[position]}"
            try:
                data = fs.cat_file(path)
            except OSError as exc:
                self.unreadable.append((position, f"unreadable image: {exc.strerror or exc}"))
                continue
            image = decode_or_reason(data, cv2.IMREAD_COLOR, self.max_pixels)
            if isinstance(image, str):  # over the pixel limit, empty or corrupt: left out, with the reason
                self.unreadable.append((position, f"unreadable image: {image}"))
                continue
            self.frames_decoded += 1
            yield SampledFrame(frame_index=position, time_s=float(position), image=image)
        if self.frames_decoded == 0:
            raise self._nothing_readable()

    def _nothing_readable(self) -> VideoError:
        """The error of a sequence without one readable image, naming the image (a root-level image is
        a sequence of its own) or the first image's reason."""
        if not self.unreadable:
            return VideoError(self.video.url, "no readable image in the sequence")
        position, reason = self.unreadable[0]
        if len(self.video.members) == 1:
            return VideoError(self.video.frame_url(position), reason)
        return VideoError(self.video.url, f"no readable image in the sequence (the first, "
                                          f"{self.video.members[position]}: {reason})")


def sample_frames(video: VideoRef, *, fps: float | None = None, stride: int | None = None,
                  max_frames: int | None = None, storage_options: dict | None = None,
                  max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> FrameStream | ImageSequenceStream:
    """Frames of ``video`` at ``fps`` per second of video or every ``stride``-th frame (exactly one).

    Nothing is opened until the first frame is asked for; a video that cannot be used raises
    VideoError then, as does one whose frames declare more than ``max_pixels``. A stream that breaks
    off after some frames just ends (see FrameStream.truncated).

    Args:
        video: a video file or an image sequence (which has no frame rate: sample it with ``stride``).
        fps: frames sampled per second of video, > 0.
        stride: keep every ``stride``-th frame (or image), >= 1.
        max_frames: stop after this many sampled frames; None for all.
        storage_options: fsspec options for the video's URL; None for none.
        max_pixels: the most pixels a frame may declare.

    Returns:
        A lazy stream of sampled frames.

    Raises:
        ValueError: not exactly one of ``fps`` and ``stride``, a value out of range, or ``fps`` for a sequence.
    """
    if (fps is None) == (stride is None):
        raise ValueError("give exactly one of fps and stride")
    if fps is not None and fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if stride is not None and stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, got {max_frames}")
    if video.is_sequence:
        if stride is None:
            raise ValueError(f"{video.url}: an image sequence has no frame rate; sample it with a stride")
        return ImageSequenceStream(video, stride, max_frames, storage_options, max_pixels)
    return FrameStream(video, fps, stride, max_frames, storage_options, max_pixels)

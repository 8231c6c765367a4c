"""Test media written on the fly: cab videos made of procedural scenes."""

from pathlib import Path

import cv2
import numpy as np

from synrail.sources.procedural_backgrounds import render_background, sample_background_spec

W, H = 640, 360


def cab_frames(seed: int, n: int) -> list[np.ndarray]:
    """Frames of different procedural scenes, as a camera-equipped train would film them."""
    frames = []
    for k in range(n):
        spec = sample_background_spec(np.random.default_rng([seed, k]), width=W, height=H,
                                      track_types=["ballasted", "ballastless"], conditions={"normal": 1.0},
                                      camera_height_m=(2.4, 2.7), pitch_deg=(2.5, 3.5), hfov_deg=(60, 60),
                                      max_curvature=0.0015, max_offset_m=0.05)
        frames.append(render_background(spec))
    return frames


def write_video(path: Path, frames: list[np.ndarray], fps: float = 2.0) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (W, H))
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def write_frame_sequences(folder: Path, first_seed: int, sequences: int, frames: int, suffix: str = "jpg") -> Path:
    """A frames folder: ``sequences`` subfolders ``run0``, ``run1``, ... of ``frames`` cab frames each
    (``f000.jpg``, ...), sequence k drawn from seed ``first_seed + k``."""
    for k in range(sequences):
        (folder / f"run{k}").mkdir(parents=True)
        for i, frame in enumerate(cab_frames(first_seed + k, frames)):
            cv2.imwrite(str(folder / f"run{k}" / f"f{i:03d}.{suffix}"), frame)
    return folder


def write_video_folder(folder: Path) -> Path:
    """Three 4-frame cab videos, one that is not a video, and a sidecar metadata table."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(3):
        write_video(folder / f"line{k}.avi", cab_frames(k, 4))
    (folder / "broken.mp4").write_bytes(b"\x00not a video at all" * 50)
    (folder / "meta.csv").write_text("video,weather,track_type\nline0.avi,rain,ballasted\n")
    return folder


def write_bomb_png(path: Path, width: int = 60000, height: int = 60000) -> Path:
    """A valid PNG header declaring ``width`` x ``height`` RGBA pixels, with one tiny zlib stream of
    data: a few hundred bytes that would take width * height * 4 bytes to decode (a decompression bomb)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    rows = zlib.compress(b"\x00" * (1 + 4 * 64), 9)  # the first row's start only
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
    return path


def approach_frames(seed: int, n: int, speed_kmh: float, fps: float, width: int = W, height: int = H):
    """Frames of one procedural scene filmed from a train moving ``speed_kmh`` along its track at
    ``fps``, and the scene's exact camera (the first frame's; every frame shares it, see TrackPose)."""
    from synrail.rail.geometry import TrackPose

    spec = sample_background_spec(np.random.default_rng([seed, 17]), width=width, height=height,
                                  track_types=["ballasted"], conditions={"normal": 1.0},
                                  camera_height_m=(2.5, 2.6), pitch_deg=(2.8, 3.2), hfov_deg=(60, 60),
                                  max_curvature=0.0015, max_offset_m=0.05)
    step = speed_kmh / 3.6 / fps
    return [render_background(spec, TrackPose.along(spec.geometry, k * step), k) for k in range(n)], spec.geometry


def write_mp4(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    """An mp4 (MPEG-4 part 2) of ``frames`` at ``fps``."""
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path

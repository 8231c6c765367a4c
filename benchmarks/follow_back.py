"""Frames of a cab video a build keeps with and without following back from later frames.

    python benchmarks/follow_back.py VIDEO [VIDEO ...] [--step 5] [--width 1280 --height 720]
        [--degrade dark --first 10] [--json OUT.json]

Each video is read every ``--step`` frames into a frames folder and built as a build reads a frames
folder (``stages.videos.prepare_video_backgrounds``, the default config with ``backgrounds.source:
frames`` and the output size given): once with the forward pass alone (``RailFollower``: each frame
learns from the frames before it), once as shipped, where the frames still without a track are
followed back from the next frame of their shot that has one (``sequence.follow_back``). With
``--degrade`` the ``--first`` frames are degraded as ``benchmarks/rail.py --conditions`` degrades
labelled frames (a shot that starts at night, in a tunnel or in the rain). Prints, per video and
mode, the frames kept and the reasons of the others; for each frame only following back kept, the
intersection over union of its track area with the nearest frame the forward pass kept (the camera
moves little between sampled frames, so a track followed onto the right rails overlaps it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import zlib
from collections import Counter
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import synrail.stages.videos as videos  # noqa: E402
from benchmarks.rail import CONDITIONS_REAL  # noqa: E402
from benchmarks.results import new_results, write_results  # noqa: E402
from synrail.config import load_config  # noqa: E402
from synrail.export.coco import decode_rle  # noqa: E402
from synrail.records import VideoBackgrounds  # noqa: E402
from synrail.sources.video import list_sequences  # noqa: E402
from synrail.storage.store import Store  # noqa: E402


def write_frames(video: Path, folder: Path, step: int, degrade: str | None, first: int) -> int:
    """Every ``step``-th frame of ``video`` as a JPEG in ``folder`` (the ``first`` ones degraded);
    returns how many."""
    capture = cv2.VideoCapture(str(video))
    read = written = 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        if read % step == 0:
            if degrade is not None and written < first:
                condition = CONDITIONS_REAL[degrade]
                condition.set_random_seed(zlib.crc32(f"{video.name}/{written}".encode()))
                frame = condition(image=frame)["image"]
            cv2.imwrite(str(folder / f"f{written:05d}.jpg"), frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
            written += 1
        read += 1
    capture.release()
    return written


def build(frames: Path, cache: Path, width: int, height: int, forward_only: bool) -> VideoBackgrounds:
    """The frames folder's backgrounds as a build prepares them; ``forward_only`` switches following back off."""
    cfg = load_config(ROOT / "configs" / "default.yaml", {
        "backgrounds.source": "frames", "backgrounds.frames.url": str(frames),
        "image.width": width, "image.height": height})
    shipped = videos._follow_back
    if forward_only:
        videos._follow_back = lambda cfg, found, missing, settings, store: ([], missing)
    try:
        [sequence] = list_sequences(str(frames))
        return videos.prepare_video_backgrounds(cfg, sequence, "train", Store(str(cache)))
    finally:
        videos._follow_back = shipped


def overlap_with_nearest(index: int, kept: dict[int, np.ndarray]) -> tuple[int, float] | None:
    """The nearest other kept frame to ``index`` and the IoU of its track area with ``kept[index]``'s
    (None when no other frame was kept)."""
    nearest = min((i for i in kept if i != index), key=lambda i: abs(i - index), default=None)
    if nearest is None:
        return None
    a, b = kept[index], kept[nearest]
    return nearest, float((a & b).sum() / max(1, (a | b).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("videos", type=Path, nargs="+")
    parser.add_argument("--step", type=int, default=5, help="read every STEP-th frame")
    parser.add_argument("--width", type=int, default=1280, help="output width (footage aspect: frames whole)")
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--degrade", choices=sorted(CONDITIONS_REAL), default=None)
    parser.add_argument("--first", type=int, default=10, help="frames degraded at the start (with --degrade)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    figures = new_results("benchmarks/follow_back.py")
    for video in args.videos:
        with tempfile.TemporaryDirectory() as scratch:
            frames = Path(scratch) / "frames" / video.stem
            frames.mkdir(parents=True)
            count = write_frames(video, frames, args.step, args.degrade, args.first)
            results = {mode: build(frames.parent, Path(scratch) / f"cache-{mode}", args.width, args.height,
                                   forward_only=mode == "forward")
                       for mode in ("forward", "follow back")}
        areas = {mode: {r.frame_index: decode_rle(r.rail_area).astype(bool) for r in result.records}
                 for mode, result in results.items()}
        figures["runs"][video.name] = {}
        for mode, result in results.items():
            reasons = Counter(u.reason.split(":")[0] for u in result.unused)
            print(f"{video.name} ({count} frames read) {mode}: {len(result.records)} kept; "
                  + ", ".join(f"{reason} {n}" for reason, n in reasons.most_common()))
            figures["runs"][video.name][mode] = {"frames": count, "kept": len(result.records)}
        forward = areas["forward"]
        for index in sorted(set(areas["follow back"]) - set(forward)):
            overlap = overlap_with_nearest(index, {**forward, index: areas["follow back"][index]})
            print(f"  frame {index} kept only by following back" + (
                "" if overlap is None else f": IoU {overlap[1]:.2f} with frame {overlap[0]}"))
        lost = sorted(set(forward) - set(areas["follow back"]))
        if lost:
            print(f"  kept by the forward pass alone: frames {lost} (the camera solve, with more frames, differs)")
    if args.json is not None:
        write_results(args.json, figures)


if __name__ == "__main__":
    main()

"""Frames of a cab video a build keeps with and without following back from later frames.

    python benchmarks/follow_back.py VIDEO [VIDEO ...] [--step 5 ...] [--width 1280]
        [--degrade none dark ... --first 10] [--json OUT.json]

Each video is read every ``--step`` frames (each value a run) into a frames folder and built as a
build reads a frames folder (``stages.videos.prepare_video_backgrounds``, the default config with
``backgrounds.source: frames``, the output ``--width`` wide and of the video's own aspect ratio, so
that no frame is cropped): once with the forward pass alone (``RailFollower``: each frame learns
from the frames before it), once as shipped, where the frames still without a track are followed
back from the next frame of their shot that has one (``sequence.follow_back``). With ``--degrade``
the ``--first`` frames are degraded (each condition a run) as ``benchmarks/rail.py --conditions``
degrades labelled frames: a shot that starts at night, in a tunnel or in the rain. Prints, per run
and mode, the frames kept and the reasons of the others; for each frame only following back kept,
the intersection over union of its track area with the nearest frame the forward pass kept (the
camera moves little between sampled frames, so a track followed onto the right rails overlaps it).
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


def output_size(video: Path, width: int) -> tuple[int, int]:
    """``width`` and the height of the video's aspect ratio at that width (even)."""
    capture = cv2.VideoCapture(str(video))
    source = (capture.get(cv2.CAP_PROP_FRAME_WIDTH), capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
    capture.release()
    if not source[0]:
        raise SystemExit(f"{video}: not a readable video")
    return width, 2 * round(width * source[1] / source[0] / 2)


def compare(video: Path, step: int, degrade: str | None, first: int, width: int) -> dict[str, float]:
    """One run: the video built both ways; its figures (frames read, kept each way, added, lost)."""
    size = output_size(video, width)
    with tempfile.TemporaryDirectory() as scratch:
        frames = Path(scratch) / "frames" / video.stem
        frames.mkdir(parents=True)
        count = write_frames(video, frames, step, degrade, first)
        results = {mode: build(frames.parent, Path(scratch) / f"cache-{mode}", *size, forward_only=mode == "forward")
                   for mode in ("forward", "follow back")}
    areas = {mode: {r.frame_index: decode_rle(r.rail_area).astype(bool) for r in result.records}
             for mode, result in results.items()}
    name = f"{video.name} every {step}" + (f", the first {first} {degrade}" if degrade else "")
    for mode, result in results.items():
        reasons = Counter(u.reason.split(":")[0] for u in result.unused)
        print(f"{name} ({count} frames read, {size[0]}x{size[1]}) {mode}: {len(result.records)} kept; "
              + ", ".join(f"{reason} {n}" for reason, n in reasons.most_common()))
    forward, both = areas["forward"], areas["follow back"]
    for index in sorted(set(both) - set(forward)):
        overlap = overlap_with_nearest(index, {**forward, index: both[index]})
        print(f"  frame {index} kept only by following back" + (
            "" if overlap is None else f": IoU {overlap[1]:.2f} with frame {overlap[0]}"))
    lost = sorted(set(forward) - set(both))
    if lost:
        print(f"  kept by the forward pass alone: frames {lost} (the camera solve, with more frames, differs)")
    return {"frames read": count, "kept, forward pass": len(forward), "kept, following back": len(both),
            "added": len(set(both) - set(forward)), "lost": len(lost)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("videos", type=Path, nargs="+")
    parser.add_argument("--step", type=int, nargs="+", default=[5], help="read every STEP-th frame (each a run)")
    parser.add_argument("--width", type=int, default=1280, help="output width; its height keeps the video's aspect")
    parser.add_argument("--degrade", nargs="+", choices=["none", *sorted(CONDITIONS_REAL)], default=["none"],
                        help="conditions for the first frames (each a run)")
    parser.add_argument("--first", type=int, default=10, help="frames degraded at the start (with --degrade)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    figures = new_results("benchmarks/follow_back.py", "not timed")
    for video in args.videos:
        runs = figures["runs"].setdefault(video.name, {})
        for step in args.step:
            for degrade in args.degrade:
                condition = None if degrade == "none" else degrade
                setting = f"every {step}" + ("" if condition is None else f", first {args.first} {condition}")
                runs[setting] = compare(video, step, condition, args.first, args.width)
    if args.json is not None:
        write_results(args.json, figures)


if __name__ == "__main__":
    main()

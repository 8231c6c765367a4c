"""How far apart frames of one shot and stills of unrelated scenes are, for the cut test.

    python benchmarks/shots.py [--video PATH ...] [--every 1 5 10] [--sequence DIR ...] [--stills DIR ...]
                               [--json OUT.json]

``synrail.rail.shots`` cuts a video or a folder of frames into shots where consecutive frames stop
looking alike. This measures its two correlations (hue-saturation histogram, grey thumbnail) and its
verdict on consecutive frame pairs:

- ``--video``: a cab video read every ``--every`` seconds (each value a run), one shot unless it cuts;
- ``--sequence``: a folder of one shot's frames, in name order (numbers compared as numbers);
- ``--stills``: a folder of unrelated stills (a RailSem19-style dump), where every pair is a cut.

Prints per run the pairs, the lowest and highest of each correlation and of their sum, and how many
pairs the test calls cuts. ``--json`` writes the figures in the benchmark pages' shape.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import new_results, write_results  # noqa: E402
from synrail.rail.shots import same_shot, shot_signature  # noqa: E402
from synrail.sources.video import IMAGE_EXTENSIONS, VideoRef, natural_order, sample_frames  # noqa: E402


def video_frames(path: Path, every_s: float) -> list[np.ndarray]:
    """The video's frames every ``every_s`` seconds, sampled as a build samples them."""
    video = VideoRef(url=str(path), name=path.name, size=path.stat().st_size, version="")
    return [frame.image for frame in sample_frames(video, fps=1.0 / every_s)]


def folder_frames(folder: Path) -> list[np.ndarray]:
    """The folder's images in name order, numbers compared as numbers."""
    paths = sorted((p for p in folder.iterdir() if p.name.lower().endswith(IMAGE_EXTENSIONS)),
                   key=lambda p: natural_order(p.name))
    return [image for p in paths if (image := cv2.imread(str(p), cv2.IMREAD_COLOR)) is not None]


def pair_figures(frames: list[np.ndarray]) -> dict[str, float]:
    """The correlations of consecutive pairs and how many the test calls cuts."""
    signatures = [shot_signature(frame) for frame in frames]
    pairs = list(itertools.pairwise(signatures))
    if not pairs:
        return {"pairs": 0}
    likeness = np.array([a.likeness(b) for a, b in pairs])
    total = likeness.sum(axis=1)
    return {"pairs": len(pairs), "colours min": float(likeness[:, 0].min()), "colours max": float(likeness[:, 0].max()),
            "layout min": float(likeness[:, 1].min()), "layout max": float(likeness[:, 1].max()),
            "sum min": float(total.min()), "sum max": float(total.max()),
            "cuts": sum(not same_shot(a, b) for a, b in pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--video", type=Path, action="append", default=[])
    parser.add_argument("--every", type=float, nargs="+", default=[1.0], help="seconds between a video's frames")
    parser.add_argument("--sequence", type=Path, action="append", default=[], help="a folder of one shot's frames")
    parser.add_argument("--stills", type=Path, action="append", default=[], help="a folder of unrelated stills")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs: dict[str, tuple[str, list[np.ndarray]]] = {}
    for video in args.video:
        for every in args.every:
            runs[f"{video.name} every {every:g} s"] = ("one shot", video_frames(video, every))
    for folder in args.sequence:
        runs[folder.name] = ("one shot", folder_frames(folder))
    for folder in args.stills:
        runs[folder.name] = ("unrelated stills", folder_frames(folder))
    if not runs:
        parser.error("give at least one --video, --sequence or --stills")
    figures = new_results("benchmarks/shots.py")
    print(f"{'run':32s} {'kind':17s} {'pairs':>5s} {'colours':>11s} {'layout':>11s} {'sum':>11s} {'cuts':>5s}")
    for name, (kind, frames) in runs.items():
        row = pair_figures(frames)
        figures["runs"][name] = {kind: row}
        if not row["pairs"]:
            print(f"{name:32s} {kind:17s} {0:5d}")
            continue
        print(f"{name:32s} {kind:17s} {row['pairs']:5d} {row['colours min']:5.2f}-{row['colours max']:4.2f}"
              f" {row['layout min']:5.2f}-{row['layout max']:4.2f} {row['sum min']:5.2f}-{row['sum max']:4.2f}"
              f" {row['cuts']:5d}")
    if args.json:
        write_results(args.json, figures)


if __name__ == "__main__":
    main()

"""CPU time a frame costs before its camera (the frame filters' measures, the learned ego-track area,
the track finder), alone or against another checkout whose findings must be the same.

    python benchmarks/finder_speed.py FRAMES [--width 1280] [--step 1] [--repeats 2] [--against DIR]
        [--json OUT.json]

FRAMES is a frames folder (JPEG or PNG images, as a build reads them; the real frames that
``benchmarks/real/extract.py`` rebuilds, say). Each frame is resized to ``--width`` columns and
measured ``--repeats`` times on one thread (the fastest run counts) in a worker process per
checkout: this one and, with ``--against``, another (a ``git worktree`` of an earlier commit, with
its own shipped model). The checkouts take turns frame by
frame, so a drift in the machine's speed (a third within an hour on a shared machine) falls on both
alike. Prints the median and mean CPU milliseconds of each part and of the whole per checkout and,
with ``--against``, the frames whose findings differ (reason, rail fits, rows, confidence, mask
area): a change meant only for speed must list none. Exits 1 when any differ. ``--json`` writes the
same figures per checkout (its folder and commit) for all frames, the frames where a track was found
and those refused (a refused frame is searched further: every candidate, the learned proposal, the
coarse look).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the benchmarks package beside synrail
PARTS = ("filters", "learned", "finder")


def worker(root: Path, width: int, repeats: int) -> None:
    """Answers each frame path read from stdin with one JSON line: the fastest run's CPU ms per part
    and the finding, with ``root``'s synrail and shipped model."""
    sys.path.insert(0, str(root))
    import synrail

    if not Path(synrail.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{root} holds no synrail package (imported {synrail.__file__})")

    from synrail.rail.detect import detect_track
    from synrail.rail.learned import default_track_model
    from synrail.sources.frame_filters import measure_frame

    cv2.setNumThreads(1)
    model = default_track_model()
    print("ready", flush=True)
    for line in sys.stdin:
        image = cv2.imread(line.strip(), cv2.IMREAD_COLOR)
        if image is None:
            print(json.dumps({"ms": None, "finding": None}), flush=True)
            continue
        scale = width / image.shape[1]
        frame = cv2.resize(image, (width, round(image.shape[0] * scale)),
                           interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        fastest, result = None, None
        for _ in range(repeats):
            start = time.process_time()
            measure_frame(frame)
            filtered = time.process_time()
            area = None if model is None else model.mask(frame)
            learned = time.process_time()
            result = detect_track(frame, track_area=area)
            found = time.process_time()
            ms = [1000 * (filtered - start), 1000 * (learned - filtered), 1000 * (found - learned)]
            fastest = ms if fastest is None or sum(ms) < sum(fastest) else fastest
        print(json.dumps({"ms": fastest, "finding": finding(result)}), flush=True)


def finding(result) -> list:
    """What a ``TrackResult`` says, in a form two checkouts' outputs compare by equality."""
    found = result.detection
    if found is None:
        return [result.reason]
    return [result.reason, repr(found.left_fit), repr(found.right_fit), found.top_row, found.bottom_row,
            found.confidence, int(found.mask.sum())]


def differing(findings: list[list[list]]) -> list[int]:
    """The indices of the frames whose findings are not the same in every checkout (a list each)."""
    return [index for index, per_frame in enumerate(zip(*findings, strict=True))
            if any(other != per_frame[0] for other in per_frame)]


def figures(ms: np.ndarray) -> dict[str, float]:
    """Frame count and median and mean CPU ms of each part and of the whole (frames x parts)."""
    out: dict[str, float] = {"frames": len(ms)}
    for name, values in [*zip(PARTS, ms.T, strict=True), ("total", ms.sum(axis=1))]:
        out[f"{name} median"] = float(np.median(values)) if len(values) else float("nan")
        out[f"{name} mean"] = float(values.mean()) if len(values) else float("nan")
    return out


def checkout_name(root: Path) -> str:
    """The checkout's folder and its commit (``+`` where its tree has changes), as the JSON names it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "no commit"
    return f"{root.name} at {commit}{'+' if git('status', '--porcelain', '--untracked-files=no') else ''}"


def summary(ms: np.ndarray) -> str:
    """Median and mean CPU ms of each part and of the whole (frames x parts)."""
    parts = "  ".join(f"{part} {np.median(ms[:, i]):.1f}/{ms[:, i].mean():.1f}" for i, part in enumerate(PARTS))
    total = ms.sum(axis=1)
    return f"{parts}  total {np.median(total):.1f}/{total.mean():.1f} ms (median/mean)"


def speed_results(roots: list[Path], ms: np.ndarray, findings: list[list[list]], width: int) -> dict:
    """The figures per checkout (``ms``: checkout x frame x part) for all frames, the frames each
    checkout found a track on and those it refused, as ``benchmarks.results`` documents them."""
    from benchmarks.results import new_results

    results = new_results("benchmarks/finder_speed.py", timing="CPU time, one thread")
    for root, per_frame, found in zip(roots, ms, findings, strict=True):
        refused = np.array([len(finding) == 1 for finding in found], dtype=bool)
        results["runs"][f"{checkout_name(root)}, {width} columns"] = {
            "all": figures(per_frame), "found": figures(per_frame[~refused]), "refused": figures(per_frame[refused])}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frames", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--step", type=int, default=1, help="every step-th frame, in name order")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--against", type=Path, help="another checkout, measured in turn with this one")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.width, args.repeats)
        return 0
    # Here, not at the top: a worker must import its own checkout's synrail.
    from synrail.sources.video import IMAGE_EXTENSIONS

    if not args.frames.is_dir():
        print(f"{args.frames}: not a folder of frames", file=sys.stderr)
        return 2
    paths = sorted(p for p in args.frames.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)[::args.step]
    if not paths:
        print(f"no images in {args.frames}", file=sys.stderr)
        return 2
    roots = [ROOT] + ([args.against.resolve()] if args.against else [])
    workers = [subprocess.Popen(
        [sys.executable, __file__, str(args.frames), "--worker", str(root), "--width", str(args.width),
         "--repeats", str(args.repeats)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for root in roots]
    for root, process in zip(roots, workers, strict=True):
        if process.stdout.readline().strip() != "ready":
            print(f"{root}: its worker did not start (see above)", file=sys.stderr)
            return 2
    ms: list[list[list[float]]] = [[] for _ in roots]        # checkout, frame, part
    findings: list[list[list]] = [[] for _ in roots]         # checkout, frame
    measured = []
    for path in paths:
        answers = []
        for process in workers:  # in turns: a drift in the machine's speed falls on each alike
            process.stdin.write(f"{path}\n")
            process.stdin.flush()
            answers.append(json.loads(process.stdout.readline()))
        if answers[0]["ms"] is None:
            print(f"{path}: not a readable image, left out", file=sys.stderr)
            continue
        measured.append(path)
        for index, answer in enumerate(answers):
            ms[index].append(answer["ms"])
            findings[index].append(answer["finding"])
    for process in workers:
        process.stdin.close()
        process.wait()
    if not measured:
        print(f"no readable images in {args.frames}", file=sys.stderr)
        return 2
    for root, per_frame in zip(roots, ms, strict=True):
        print(f"{root}: {len(measured)} frames at {args.width} columns: {summary(np.array(per_frame))}")
    if args.json is not None:
        from benchmarks.results import write_results

        write_results(args.json, speed_results(roots, np.array(ms), findings, args.width))
    if len(roots) == 1:
        return 0
    changed = [measured[index].name for index in differing(findings)]
    for name in changed:
        print(f"differs: {name}")
    print(f"{len(measured) - len(changed)} frames with the same findings, {len(changed)} differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The camera of each sequence of real footage, solved as the video stage solves it.

    python benchmarks/camera.py PATH [PATH ...] [--fps 2] [--max-frames 120] [--width 1280 --height 720]
                                [--hfov DEG] [--gauge-mm 1435] [--sleeper-spacing 0.6]
                                [--ignore-bottom 0.0] [--distortion k1 k2 p1 p2 [k3]] [--per-file]
                                [--json OUT.json]

Each PATH is a video (frames sampled at ``--fps``) or a folder of images (one sequence, sorted by
name; ``--per-file`` makes every image its own sequence). Prints per sequence: frames with a track,
the field of view (given, from the sleepers with its uncertainty, or the fallback), camera height,
pitch and lateral offset shared by the frames, frames left out by reason, notes, and ms per frame.
No ground truth is needed; use it to look at footage before a build. ``--json`` also writes the
figures for the benchmark pages (``{"command", "date", "machine", "runs": {sequence: {group: {figure:
value}}}}``, the shape docs/hooks.py's ``results:`` renders), groups ``camera`` and ``left out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.results import new_results, write_results  # noqa: E402
from synrail.rail.camera import CameraSettings, focal_from_hfov, hfov_from_focal, prepare_frame  # noqa: E402
from synrail.rail.detect import detect_track  # noqa: E402
from synrail.rail.sequence import frame_evidence, frame_geometry, solve_sequence_camera  # noqa: E402

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def video_frames(path: Path, fps: float, max_frames: int) -> Iterator[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    step = max(1.0, (capture.get(cv2.CAP_PROP_FPS) or fps) / fps)
    index, next_pick, taken = 0, 0.0, 0
    while taken < max_frames:
        ok, frame = capture.read()
        if not ok:
            break
        if index >= next_pick:
            yield frame
            taken += 1
            next_pick += step
        index += 1
    capture.release()


def sequences(paths: list[Path], args: argparse.Namespace) -> Iterator[tuple[str, list[np.ndarray]]]:
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:args.max_frames]
            if args.per_file:
                for file in files:
                    yield file.name, [cv2.imread(str(file))]
            else:
                yield path.name, [cv2.imread(str(f)) for f in files]
        else:
            yield path.name, list(video_frames(path, args.fps, args.max_frames))


def solve(name: str, frames: list[np.ndarray], settings: CameraSettings,
          args: argparse.Namespace) -> dict[str, dict[str, float | int | str]]:
    """Solves one sequence's camera, prints it and returns its figures by group."""
    start = time.perf_counter()
    evidence, reasons = [], Counter()
    for image in frames:
        prepared = prepare_frame(image, settings, args.width, args.height)
        lens_focal = focal_from_hfov(image.shape[1], settings.hfov_for_lens) * prepared.scale
        result = detect_track(prepared.detect_image, hfov_deg=hfov_from_focal(args.width, lens_focal))
        if result.detection is None:
            reasons[f"no track: {result.reason}"] += 1
            continue
        evidence.append(frame_evidence(prepared, result.detection, settings))
    camera = solve_sequence_camera(evidence, settings, source_width=frames[0].shape[1], frame_width=args.width,
                                   frame_height=args.height)
    used = 0
    for item in evidence:
        geometry, reason = frame_geometry(item, camera, frame_width=args.width, frame_height=args.height)
        if geometry is None:
            reasons[reason.split(":")[0]] += 1
        else:
            used += 1
    ms = 1000 * (time.perf_counter() - start) / max(len(frames), 1)
    cal = camera.calibration
    sigma = f" ± {camera.hfov_sigma_deg:.1f}" if camera.hfov_sigma_deg is not None else ""
    estimate = camera.focal_estimate
    sleepers = ("" if estimate is None or estimate.focal_px is None else
                f" (sleepers: {hfov_from_focal(args.width, estimate.focal_px):.1f} deg of the prepared frame, "
                f"{estimate.frames} frames agree, prominence {estimate.prominence:.0f})")
    print(f"{name}: {len(frames)} frames, track in {len(evidence)}, used {used}; "
          f"hfov {camera.hfov_deg:.1f}{sigma} deg ({camera.hfov_source}){sleepers}")
    if cal is not None:
        print(f"  height {cal.height_m.value:.2f} ± {cal.height_m.spread:.2f} m, pitch {camera.pitch_deg:.1f} deg, "
              f"horizon row {cal.horizon_v.value:.0f} ± {cal.horizon_v.spread:.0f}, offset {cal.offset_m.value:+.2f} "
              f"± {cal.offset_m.spread:.2f} m, gauge {settings.gauge_mm:g} mm, {cal.frames} frames agree")
    for reason, count in sorted(reasons.items()):
        print(f"  left out: {reason}: {count}")
    for note in camera.notes:
        print(f"  note: {note}")
    print(f"  {ms:.0f} ms per frame")
    figures: dict[str, float | int | str] = {
        "frames": len(frames), "track found": len(evidence), "used": used, "hfov_deg": camera.hfov_deg,
        "hfov_sigma_deg": camera.hfov_sigma_deg if camera.hfov_sigma_deg is not None else float("nan"),
        "hfov_source": camera.hfov_source, "gauge_mm": settings.gauge_mm, "ms_per_frame": ms}
    if cal is not None:
        figures.update({"height_m": cal.height_m.value, "height_spread_m": cal.height_m.spread,
                        "pitch_deg": camera.pitch_deg, "horizon_row": cal.horizon_v.value,
                        "offset_m": cal.offset_m.value, "frames_agree": cal.frames})
    if camera.notes:
        figures["notes"] = "; ".join(camera.notes)
    return {"camera": figures, "left out": dict(sorted(reasons.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--fps", type=float, default=2.0)
    parser.add_argument("--max-frames", type=int, default=120)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--hfov", type=float, default=None)
    parser.add_argument("--gauge-mm", type=float, default=1435.0)
    parser.add_argument("--sleeper-spacing", type=float, default=0.6)
    parser.add_argument("--ignore-bottom", type=float, default=0.0)
    parser.add_argument("--distortion", type=float, nargs="*", default=())
    parser.add_argument("--per-file", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    settings = CameraSettings(hfov_deg=args.hfov, gauge_mm=args.gauge_mm, sleeper_spacing_m=args.sleeper_spacing,
                              ignore_bottom=args.ignore_bottom, distortion=tuple(args.distortion))
    cv2.setNumThreads(1)
    figures = new_results("benchmarks/camera.py")
    for name, frames in sequences(args.paths, args):
        figures["runs"][name] = solve(name, frames, settings, args)
    if args.json is not None:
        write_results(args.json, figures)


if __name__ == "__main__":
    main()

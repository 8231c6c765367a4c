"""Approach clips on one real cab video, as a build makes them, with their speed and drift figures.

    python benchmarks/clips_real.py --video PATH [--speed-kmh X] [--hfov DEG] [--camera-height M]
                                    [--clips 3] [--frames 20] [--fps 10] [--width 640 --height 368]
                                    [--max-source-frames 600] [--first-distance 20 60] [--out DIR]
                                    [--json OUT.json]

Reads the video at the clip rate, follows its rails, solves its camera, measures the ground's motion
along the rails, and composes up to ``--clips`` clips of procedural obstacles with the real-clips
stage (``synrail.stages.real_clips``). ``--speed-kmh`` plays the sidecar's ``speed_kmh``; without it
the speed is the one the image motion gives (or the video is refused, with the reason). Prints the
speed used and the one measured, the clip rate, every clip's drift (advance measured against
``speed * t``, the largest spread of a track's footprint across the rails in gauges and of its
depth against the rails' gap; and how far, in gauges, placing the footprints on the tracked rails
moved them off the frame geometry's centre line), the windows refused, and the time: tracking the frames alone, and
the whole stage per composed clip frame. Frames land in ``--out`` (a temporary folder by default).
``--json`` also writes the figures in the benchmark pages' shape (``benchmarks/results.py``): the run
``video`` (tracking, speed, stage) and the run ``clips`` (one row per clip).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import new_results, write_results  # noqa: E402
from synrail.config import load_config  # noqa: E402
from synrail.records import ClipImageRow  # noqa: E402
from synrail.stages.gallery import prepare_gallery_class  # noqa: E402
from synrail.stages.real_clips import compose_video_clips, track_frames  # noqa: E402
from synrail.stages.videos import source_videos, video_camera_settings  # noqa: E402
from synrail.storage.store import Store  # noqa: E402
from synrail.storage.tables import read_rows  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--video", type=Path, required=True)
    parser.add_argument("--speed-kmh", type=float, default=None, help="the sidecar's speed (default: measure it)")
    parser.add_argument("--hfov", type=float, default=None, help="horizontal field of view (default: sleepers)")
    parser.add_argument("--camera-height", type=float, default=None, help="metres above the rails (default: gauge)")
    parser.add_argument("--clips", type=int, default=3)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--fps", type=float, default=10.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=368)
    parser.add_argument("--max-source-frames", type=int, default=600)
    parser.add_argument("--first-distance", type=float, nargs=2, default=(20.0, 60.0))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args(argv)


def write_footage(args: argparse.Namespace, folder: Path) -> tuple[Path, Path]:
    """A one-video footage folder (a copy of the video: listings do not follow links) and its sidecar row."""
    videos = folder / "videos"
    videos.mkdir(parents=True)
    shutil.copyfile(args.video, videos / args.video.name)
    cells = {"speed_kmh": args.speed_kmh, "hfov_deg": args.hfov, "camera_height_m": args.camera_height}
    given = {k: v for k, v in cells.items() if v is not None}
    sidecar = folder / "meta.csv"
    sidecar.write_text(",".join(["video", *given]) + "\n" + ",".join([args.video.name, *map(str, given.values())])
                       + "\n")
    return videos, sidecar


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="synrail-clips-real-") as work:
        out_url = str(args.out) if args.out else tempfile.mkdtemp(prefix="synrail-clips-real-out-")
        measure_clips(args, argv, Path(work), Store(out_url))


def measure_clips(args: argparse.Namespace, argv: list[str] | None, work: Path, out: Store) -> None:
    """Track the video, compose its clips into ``out`` and print (and optionally write) the figures;
    ``work`` holds the footage copy and the cache, which the caller removes."""
    videos, sidecar = write_footage(args, work)
    cfg = load_config(None, {
        "seed": args.seed, "image": {"width": args.width, "height": args.height},
        "backgrounds": {"source": "video", "video": {"url": str(videos), "sampling": {"stride": 1,
                                                                                      "sidecar": str(sidecar)}}},
        "gallery.per_class": 2, "gallery.render_height_px": 128,
        "sequences": {"clips": args.clips, "frames_per_clip": args.frames, "fps": args.fps,
                      "max_source_frames": args.max_source_frames, "first_distance_m": list(args.first_distance)}})
    cache = Store(str(work / "cache"))
    gallery = [r for c in cfg.classes for r in prepare_gallery_class(cfg, c, cache)]
    (video,) = source_videos(cfg)
    settings = video_camera_settings(cfg.backgrounds.footage, video.name,
                                     {k: str(v) for k, v in [("hfov_deg", args.hfov),
                                                             ("camera_height_m", args.camera_height)] if v})
    started = time.perf_counter()
    frames, fps, step, notes = track_frames(cfg, video, settings)
    tracking_s = time.perf_counter() - started
    started = time.perf_counter()
    made = compose_video_clips(cfg, video, 0, [(0, "train")], gallery, cache, out)
    stage_s = time.perf_counter() - started
    tracked = sum(f.geometry is not None for f in frames)
    print(f"{video.name}: {len(frames)} frames read at {fps:.2f} fps (every {step}), {tracked} with geometry; "
          f"tracking {1000 * tracking_s / max(len(frames), 1):.0f} ms/frame")
    for note in notes:
        print(f"  camera: {note}")
    print(geometry_against_rails(frames))
    measured = ("n/a" if made.estimated_speed_kmh is None
                else f"{made.estimated_speed_kmh:.1f} ± {made.estimated_sigma_kmh:.1f} km/h")
    given = "none" if args.speed_kmh is None else f"{args.speed_kmh:g} km/h"
    used = "none" if made.speed_kmh is None else f"{made.speed_kmh:.1f} km/h ({made.speed_source})"
    print(f"speed: sidecar {given}; image motion along the rails {measured}; used {used}")
    print("clip        frames  video-frame  event  drift_along_m  drift_lateral_gauge  drift_depth_m  "
          "geometry_shift_gauge")
    for c in made.clips:
        first = read_rows(out, c.images_path, ClipImageRow)[0].background_id.rsplit("/", 1)[1]
        print(f"{c.clip_id}  {c.frames:6d}  {int(first):11d}  {int(c.event):5d}  "
              f"{_fmt(c.drift_along_m):>13}  {_fmt(c.drift_lateral_gauge):>19}  {_fmt(c.drift_depth_m):>13}  "
              f"{_fmt(c.geometry_shift_gauge):>20}")
    for r in made.refusals:
        print(f"refused at frame {r.frame_index}: {r.reason}")
    composed = sum(c.frames for c in made.clips)
    print(f"stage: {stage_s:.1f} s for {composed} clip frames ({composed / stage_s:.2f} clip frames/s, reading and "
          f"tracking every source frame included); frames in {out.root_url}/images/train")
    if args.json is not None:
        figures = new_results("benchmarks/clips_real.py", "wall time", argv)
        figures["runs"] = {
            "video": {
                "tracking": {"frames": len(frames), "with geometry": tracked, "fps read": fps,
                             "ms per frame": 1000 * tracking_s / max(len(frames), 1)},
                "speed": {"sidecar km/h": args.speed_kmh, "measured km/h": made.estimated_speed_kmh,
                          "measured sigma km/h": made.estimated_sigma_kmh, "used km/h": made.speed_kmh},
                "stage": {"clip frames": composed, "refused windows": len(made.refusals), "seconds": stage_s,
                          "clip frames/s": composed / stage_s}},
            "clips": {c.clip_id: {"frames": c.frames, "drift along m": c.drift_along_m,
                                  "drift lateral gauge": c.drift_lateral_gauge, "drift depth m": c.drift_depth_m,
                                  "geometry shift gauge": c.geometry_shift_gauge} for c in made.clips}}
        write_results(args.json, figures)


def geometry_against_rails(frames: list) -> str:
    """How far each frame's parabolic centre line lies from its tracked rails' midpoint over the rows
    they were seen (gauges): what placing obstacles on the rails corrects."""
    worst = []
    for f in frames:
        if f.geometry is None or f.rails is None:
            continue
        g, (top, bottom) = f.geometry, f.rails.rows
        rows = np.arange(max(top, int(g.horizon_v()) + 2), bottom + 1, dtype=np.float64)
        x, z = g.ground_point(np.array([f.rails.gap_and_centre(v)[1] for v in rows]), rows)
        off = np.abs(x - g.track_centre_x(z)) / g.gauge_m
        k = int(np.nanargmax(off))
        worst.append((float(off[k]), float(z[k])))
    if not worst:
        return "geometry against rails: no frame"
    values = np.array([w for w, _ in worst])
    far = max(worst)
    return (f"geometry centre line against the tracked rails' midpoint (largest per frame, over the rows they were "
            f"seen): median {np.median(values):.3f}, max {far[0]:.3f} gauge (at {far[1]:.0f} m)")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()

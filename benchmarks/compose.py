"""Composition speed against the JPEG floor, and the Prefect flow's overhead over a plain loop.

    python benchmarks/compose.py [--compose-images 200] [--flow-images 1000] [--clip-frames 200]
                                 [--harmonize NAME] [--clock cpu] [--config FILE] [--json OUT.json]

Prints, from one run:
1. composition images/s on one core at 1280x720, 1-3 obstacles, harmonization on (the default
   backend unless --harmonize names another; the whole per-image job: compose, JPEG encode, RLE
   labels, file writes);
2. the JPEG decode+encode floor on the same images, in the same run;
3. the default config (shadows, the weather mix, quality control) timed the same way, and as build
   chunks; the one-off import of the weather effects (albumentations) is printed apart;
4. wall time of the build flow over a plain loop of the same library calls on the same N images
   (one worker each; the Prefect server is started before timing, and its start is printed apart);
5. approach clips against stills: frames/s of the sequences stage (each frame's scene re-projected
   from the moved camera by ``ClipBackgrounds``, composed, written) against images/s of build chunks,
   both with the default config at the same image size, both after a warm-up (a chunk of stills, a
   clip), and the share of a clip frame spent rendering
   its scene (the clip's ground textures, shaded once, spread over its frames), beside the analytic
   render of one frame.
Composition and the floor are timed by wall time, or with --clock cpu by the process's CPU time.
Targets (issue 2): composition >= 0.5x the floor; flow <= 1.10x the loop at 1,000 images.
Targets: the default config >= 0.30x the floor (issue 18), >= 0.50x (issue 28); clip frames >= 0.5x stills (issue 28).
``--config`` times another config than configs/default.yaml (its image size, backgrounds, gallery,
weather and quality). ``--json`` also writes the figures for the benchmark pages (``{"command",
"date", "machine", "runs": {part: {group: {figure: value}}}}``, the shape docs/hooks.py's ``results:``
renders), one run per part timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402

from benchmarks.results import new_results, write_results  # noqa: E402
from synrail.compose.harmonizers import HARMONIZER_NAMES  # noqa: E402
from synrail.config import load_config  # noqa: E402
from synrail.rail.geometry import TrackPose  # noqa: E402
from synrail.sources.procedural_backgrounds import ClipBackgrounds, render_background  # noqa: E402
from synrail.stages.backgrounds import prepare_background  # noqa: E402
from synrail.stages.compose import annotation_rows, compose_chunk, compose_one, gallery_by_class  # noqa: E402
from synrail.stages.gallery import prepare_gallery  # noqa: E402
from synrail.stages.local import build_in_process  # noqa: E402
from synrail.stages.sequences import clip_scene, compose_clips  # noqa: E402
from synrail.stages.splits import image_splits  # noqa: E402
from synrail.storage.codecs import decode_image, encode_image  # noqa: E402
from synrail.storage.store import Store  # noqa: E402


def pin_to_one_core() -> set[int]:
    """Pin this process to one core; returns the cores it had."""
    cv2.setNumThreads(1)
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    return cores


def prepare_inputs(cfg, cache: Store):
    backgrounds = [prepare_background(cfg, i, cache) for i in range(cfg.backgrounds.count)]
    gallery = prepare_gallery(cfg, cache)
    return backgrounds, gallery


clock = time.perf_counter  # --clock cpu: time.process_time


def in_memory_rate(cfg, backgrounds, gallery, cache: Store) -> float:
    """Images/s of the per-image job without the disk: compose, JPEG encode, RLE labels."""
    cutouts = gallery_by_class(cache, gallery)
    splits = image_splits(cfg)
    params = [cv2.IMWRITE_JPEG_QUALITY, cfg.image.jpeg_quality]
    started = clock()
    for index in range(cfg.num_images):
        composed = compose_one(cfg, index, splits[index], backgrounds, cutouts, cache)
        encode_image(composed.composite.image, ".jpg", params)
        annotation_rows(index, composed.composite, cfg)
    return cfg.num_images / (clock() - started)


def import_weather_effects() -> float:
    """Seconds to import the weather effects (albumentations, which imports torch when installed):
    paid once per worker process, so printed apart rather than spread over the images timed."""
    started = clock()
    from synrail.compose import weather  # noqa: F401
    return clock() - started


def composition_vs_floor(n: int, work: Path, harmonize: str | None, config: Path = ROOT / "configs/default.yaml",
                         figures: dict | None = None) -> None:
    """Prints composition images/s against the JPEG floor; fills ``figures`` (groups) when given."""
    # issue 2's measure: paste + harmonize; then the default config's realism effects (shadows, the
    # weather mix, quality control), timed the same way (issue 18's measure)
    default = load_config(config)
    cfg = load_config(config, {
        "num_images": n, "compose.obstacles_per_image": [1, 3], "compose.shadow": None,
        "weather.mix": {"none": 1.0}, "quality": None,
        **({"compose.harmonize": None if harmonize == "none" else {"backend": harmonize}} if harmonize else {})})
    cache = Store(str(work / "cache"))
    backgrounds, gallery = prepare_inputs(cfg, cache)
    rates = []
    for attempt in ("cold", "warm"):  # cold decodes each background PNG and cutout on first use
        started = clock()
        compose_chunk(cfg, 0, n, backgrounds, gallery, cache, Store(str(work / f"compose-{attempt}")))
        rates.append(n / (clock() - started))
    cold_rate, chunk_rate = rates
    compose_rate = in_memory_rate(cfg, backgrounds, gallery, cache)
    import_s = import_weather_effects()
    full = {"compose": cfg.compose.model_copy(update={"shadows": True}), "weather": default.weather,
            "quality": default.quality}
    effects = {name: in_memory_rate(cfg.model_copy(update=update), backgrounds, gallery, cache) for name, update in [
        ("+ shadows", {"compose": full["compose"]}),
        ("+ shadows, default weather mix and quality control (the default config)", full)]}
    started = clock()
    compose_chunk(cfg.model_copy(update=full), 0, n, backgrounds, gallery, cache,
                           Store(str(work / "compose-default")))
    default_chunk_rate = n / (clock() - started)

    jpegs = [p.read_bytes() for p in sorted((work / "compose-warm" / "images").rglob("*.jpg"))]
    params = [cv2.IMWRITE_JPEG_QUALITY, cfg.image.jpeg_quality]
    started = clock()
    for data in jpegs:
        image = decode_image(data, cv2.IMREAD_COLOR, "benchmark image")
        encode_image(image, ".jpg", params)
    floor_rate = len(jpegs) / (clock() - started)
    backend = cfg.compose.harmonize.backend if cfg.compose.harmonize else "none"
    print(f"timed by {'CPU time' if clock is time.process_time else 'wall time'}")
    print(f"composition, 1 core, {cfg.image.width}x{cfg.image.height}, 1-3 obstacles, harmonize={backend} "
          f"(compose + JPEG encode + RLE labels, in memory): {compose_rate:.1f} images/s")
    print(f"JPEG decode+encode floor, same images, same run: {floor_rate:.1f} images/s")
    print(f"  composition / floor = {compose_rate / floor_rate:.2f}  (target >= 0.50)")
    print(f"the same as build chunks writing JPEGs, labels and Parquet: {chunk_rate:.1f} images/s warm "
          f"({chunk_rate / floor_rate:.2f} of the floor); {cold_rate:.1f} images/s on a cold pass that decodes "
          "each background and cutout PNG on first use")
    for name, rate in effects.items():
        print(f"composition {name}, in memory: {rate:.1f} images/s ({rate / floor_rate:.2f} of the floor)")
    print(f"  the default config / floor = {rate / floor_rate:.2f}  (target >= 0.50); as build chunks writing "
          f"files: {default_chunk_rate:.1f} images/s ({default_chunk_rate / floor_rate:.2f} of the floor); "
          f"importing the weather effects took {import_s:.1f} s once, before timing")
    if figures is not None:
        def group(rate: float) -> dict[str, float]:
            return {"images/s": rate, "of the floor": rate / floor_rate}

        figures.update({
            "settings": {"image": f"{cfg.image.width}x{cfg.image.height}", "images": n, "harmonize": backend,
                         "clock": "CPU time" if clock is time.process_time else "wall time",
                         "weather import s": import_s},
            "JPEG decode+encode floor": group(floor_rate),
            "paste + harmonize, in memory": group(compose_rate),
            "paste + harmonize, build chunks (warm)": group(chunk_rate),
            "paste + harmonize, build chunks (cold)": group(cold_rate),
            **{f"{name}, in memory": group(value) for name, value in effects.items()},
            "the default config, build chunks": group(default_chunk_rate)})


def clips_vs_stills(frames: int, work: Path, config: Path = ROOT / "configs/default.yaml",
                    frames_per_clip: int = 20, figures: dict | None = None) -> tuple[float, float]:
    """Frames/s of approach clips against images/s of stills, same config and image size, as build
    chunks writing JPEGs, labels and Parquet (one core); printed, and returned as (clips, stills);
    ``figures``, when given, is filled with them by group."""
    clips = max(1, frames // frames_per_clip)
    cfg = load_config(config, {
        "num_images": clips * frames_per_clip, "sequences.clips": clips, "sequences.frames_per_clip": frames_per_clip})
    cache = Store(str(work / "clips-cache"))
    backgrounds, gallery = prepare_inputs(cfg, cache)
    import_weather_effects()  # paid once per process; not a clip's cost nor a still's
    compose_chunk(cfg, 0, min(10, cfg.num_images), backgrounds, gallery, cache, Store(str(work / "warm-up")))
    started = clock()
    compose_chunk(cfg, 0, cfg.num_images, backgrounds, gallery, cache, Store(str(work / "stills")))
    stills_rate = cfg.num_images / (clock() - started)
    # Both warm: a process's first clip also pays the kernel's first touch of its large arrays
    # (about 0.4 s of system time for the first two clips), as the stills' warm-up chunk does for them.
    compose_clips(cfg, 0, 1, gallery, cache, Store(str(work / "clips-warm-up")))
    started = clock()
    compose_clips(cfg, 0, clips, gallery, cache, Store(str(work / "clips")))
    clip_rate = clips * frames_per_clip / (clock() - started)
    spec, speed_kmh = clip_scene(cfg, 0)
    step_m = speed_kmh / 3.6 / cfg.sequences.fps
    started = clock()
    scene = ClipBackgrounds(spec, (frames_per_clip - 1) * step_m)  # shaded once per clip: counted
    setup_s = clock() - started
    for frame in range(frames_per_clip):
        scene.render(TrackPose.along(spec.geometry, frame * step_m), frame)
    render_s = (clock() - started) / frames_per_clip
    started = clock()
    render_background(spec, TrackPose.along(spec.geometry, step_m), 1)
    analytic_s = clock() - started
    print(f"clips, 1 core, {cfg.image.width}x{cfg.image.height}, config {cfg.name}, {clips} clips of "
          f"{frames_per_clip} frames (render + compose + JPEG + labels + Parquet): {clip_rate:.1f} frames/s")
    print(f"stills, same config and size, as build chunks: {stills_rate:.1f} images/s")
    print(f"  clips / stills = {clip_rate / stills_rate:.2f}; rendering a clip frame's scene from the moved "
          f"camera takes {1000 * render_s:.0f} ms ({render_s * clip_rate:.0%} of a frame; stills reuse "
          f"rendered backgrounds), of which {1000 * setup_s / frames_per_clip:.0f} ms is the clip's ground "
          f"textures ({1000 * setup_s:.0f} ms once per clip) spread over its frames; the analytic render of one "
          f"frame (render_background with the pose) takes {1000 * analytic_s:.0f} ms")
    if figures is not None:
        figures.update({
            "settings": {"image": f"{cfg.image.width}x{cfg.image.height}", "config": cfg.name, "clips": clips,
                         "frames per clip": frames_per_clip},
            "clips": {"frames/s": clip_rate, "of the stills": clip_rate / stills_rate},
            "stills, build chunks": {"frames/s": stills_rate, "of the stills": 1.0},
            "clip frame's scene": {"ms": 1000 * render_s, "share of a frame": render_s * clip_rate,
                                   "ground textures ms per frame": 1000 * setup_s / frames_per_clip},
            "analytic render of one frame": {"ms": 1000 * analytic_s}})
    return clip_rate, stills_rate


def flow_vs_loop(n: int, work: Path, cores: set[int], config: Path = ROOT / "configs/default.yaml",
                 figures: dict | None = None) -> None:
    """Prints the build flow's wall time over a plain loop's; fills ``figures`` (groups) when given."""
    # one worker each, but the Prefect server process may use the other cores, as a real server would
    os.sched_setaffinity(0, cores)
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect-home"))
    from flows.prefect_env import configure_prefect_environment

    configure_prefect_environment(verbose=False)
    from prefect import flow

    from flows.build_dataset import build_with_runner

    cfg = load_config(config, {"num_images": n, "execution.max_workers": 1})
    started = time.perf_counter()
    build_in_process(cfg, str(work / "loop-out"))
    loop_s = time.perf_counter() - started

    started = time.perf_counter()
    flow(name="warm-up")(lambda: None)()  # starts the ephemeral API server
    server_s = time.perf_counter() - started
    started = time.perf_counter()
    build_with_runner(cfg, str(work / "flow-out"))
    flow_s = time.perf_counter() - started
    print(f"{n} images, 1 worker: plain library loop {loop_s:.1f} s, build flow {flow_s:.1f} s "
          f"(+ {server_s:.1f} s ephemeral server start, paid once per process)")
    print(f"  flow / loop = {flow_s / loop_s:.3f}  (target <= 1.10); with server start "
          f"{(flow_s + server_s) / loop_s:.3f}")
    if figures is not None:
        figures.update({"settings": {"images": n, "workers": 1},
                        "plain library loop": {"s": loop_s, "of the loop": 1.0},
                        "build flow": {"s": flow_s, "of the loop": flow_s / loop_s},
                        "build flow with the server's start": {"s": flow_s + server_s,
                                                               "of the loop": (flow_s + server_s) / loop_s}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compose-images", type=int, default=200)
    parser.add_argument("--flow-images", type=int, default=1000)
    parser.add_argument("--clip-frames", type=int, default=200,
                        help="approach-clip frames timed against as many stills (clips of 20 frames; 0: skip)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time composition and the floor by wall time, or by this process's CPU time (on a "
                             "shared machine, wall time also counts other people's work)")
    parser.add_argument("--harmonize", choices=HARMONIZER_NAMES,
                        help="the backend composition is timed with (default: configs/default.yaml's)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs/default.yaml",
                        help="the config timed (default: configs/default.yaml)")
    parser.add_argument("--frames-per-clip", type=int, default=20, help="frames of each approach clip timed")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    cores = pin_to_one_core()
    figures = new_results("benchmarks/compose.py", "timed on one")
    runs = figures["runs"]
    with tempfile.TemporaryDirectory(prefix="synrail-bench-") as tmp:
        if args.compose_images:
            composition_vs_floor(args.compose_images, Path(tmp), args.harmonize, args.config,
                                 runs.setdefault("composition against the JPEG floor", {}))
        if args.clip_frames:
            clips_vs_stills(args.clip_frames, Path(tmp), args.config, args.frames_per_clip,
                            runs.setdefault("approach clips against stills", {}))
        if args.flow_images:
            flow_vs_loop(args.flow_images, Path(tmp), cores, args.config,
                         runs.setdefault("build flow against a plain loop", {}))
    if args.json is not None:
        write_results(args.json, figures)


if __name__ == "__main__":
    main()

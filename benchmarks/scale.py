"""Scale-out figures (issue 6): Dask with two workers against one, and the flow's overhead over the
plain library loop at 1,000 and 10,000 images.

    python benchmarks/scale.py [--dask-images 400] [--chunk-size 25] [--backgrounds-per-task 1]
                               [--repeats 1] [--overhead-images 1000 10000]

Prints, from one run, on a machine left otherwise idle:
0. the machine's own ceiling: the two parallel stages (backgrounds, then compose chunks) as plain
   library calls in one spawned process, then split over two, without Prefect or Dask; each
   process's CPU time shows how much slower the same work runs when both cores are busy.
1. wall time of the whole build flow (backgrounds, gallery, compose, export) on prefect-dask's
   local cluster of one worker process, then of two, each into a fresh output, so nothing is
   cached; the default config at 1280x720, chunks of 25, one background per task. Target: two
   workers >= 1.8x one.
2. wall time of the build flow (threads runner, one worker) over ``build_in_process`` (the same
   library calls in a plain loop) on the tiny config (320x192), where per-task costs weigh most.
The ephemeral Prefect server is started before any timing; its start is printed apart.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from concurrent.futures import ProcessPoolExecutor  # noqa: E402

from synrail.config import BuildConfig, load_config  # noqa: E402
from synrail.stages.local import build_in_process  # noqa: E402


def start_prefect(work: Path) -> float:
    """Start the ephemeral Prefect server; return how long that took."""
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect-home"))
    from flows.prefect_env import configure_prefect_environment

    configure_prefect_environment(verbose=False)
    from prefect import flow

    started = time.perf_counter()
    flow(name="warm-up")(lambda: None)()
    return time.perf_counter() - started


def timed_flow(cfg: BuildConfig, out: Path) -> float:
    from flows.build_dataset import build_with_runner

    started = time.perf_counter()
    summary = build_with_runner(cfg, str(out))
    seconds = time.perf_counter() - started
    assert sum(summary.images_per_split.values()) == cfg.num_images, summary
    return seconds


def dask_config(n: int, chunk_size: int, backgrounds_per_task: int, workers: int) -> BuildConfig:
    return load_config(ROOT / "configs/default.yaml", {
        "num_images": n, "execution.chunk_size": chunk_size, "execution.task_runner": "dask",
        "execution.backgrounds_per_task": backgrounds_per_task, "execution.max_workers": workers})


def _plain_stage(job: tuple[str, BuildConfig, list[tuple[int, int]], Any]) -> float:
    """One process's share of a stage as plain library calls; returns its CPU seconds."""
    import cv2

    from synrail.stages.backgrounds import prepare_background
    from synrail.stages.compose import compose_chunk
    from synrail.storage.store import Store

    cv2.setNumThreads(1)  # as in the Dask workers (flows/runners.py)
    stage, cfg, ranges, inputs = job
    started = time.process_time()
    if stage == "backgrounds":
        cache = Store(inputs)
        for first, stop in ranges:
            for index in range(first, stop):
                prepare_background(cfg, index, cache)
    elif stage == "compose":
        backgrounds, gallery, cache_url, out_url = inputs
        for first, stop in ranges:
            compose_chunk(cfg, first, stop, backgrounds, gallery, Store(cache_url), Store(out_url))
    return time.process_time() - started


def plain_processes(n: int, work: Path, chunk_size: int) -> float:
    """The ceiling for any task runner: the parallel stages split over 1 and 2 plain processes."""
    from synrail.stages.compose import chunk_ranges
    from synrail.stages.local import gather_inputs
    from synrail.storage.store import Store

    cfg = dask_config(n, chunk_size, 1, 1)
    work.mkdir(parents=True)
    prepared = Store(str(work / "plain-inputs"))
    backgrounds, gallery, _ = gather_inputs(cfg, prepared)  # what compose reads, made once
    bg_ranges = chunk_ranges(cfg.backgrounds.count, 1)
    chunks = chunk_ranges(cfg.num_images, chunk_size)
    for processes in (1, 2):
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_plain_stage, [("warm-up", cfg, [], None)] * processes))  # imports, not timed
            started, cpu = time.perf_counter(), []
            for stage, ranges, inputs in [
                    ("backgrounds", bg_ranges, str(work / f"plain-{processes}-cache")),
                    ("compose", chunks, (backgrounds, gallery, prepared.root_url, str(work / f"plain-{processes}")))]:
                cpu += pool.map(_plain_stage, [(stage, cfg, ranges[k::processes], inputs) for k in range(processes)])
            seconds = time.perf_counter() - started
        print(f"plain library, {processes} process(es): {seconds:.1f} s wall, {sum(cpu):.1f} s CPU "
              f"(backgrounds and compose of {n} images)", flush=True)
        if processes == 1:
            one_s, one_cpu = seconds, sum(cpu)
    print(f"  ceiling, 2 processes over 1 = {one_s / seconds:.2f}x; the same work took "
          f"{100 * (sum(cpu) / one_cpu - 1):+.0f} % CPU time with both cores busy", flush=True)
    return one_s / seconds


def dask_workers(n: int, work: Path, chunk_size: int, backgrounds_per_task: int) -> float:
    seconds = {}
    for workers in (1, 2):
        cfg = dask_config(n, chunk_size, backgrounds_per_task, workers)
        seconds[workers] = timed_flow(cfg, work / f"dask-{workers}")
        print(f"{n} images, default config, Dask local cluster of {workers} worker process(es): "
              f"{seconds[workers]:.1f} s ({n / seconds[workers]:.1f} images/s, cluster start included)", flush=True)
    print(f"  speed-up, 2 workers over 1 = {seconds[1] / seconds[2]:.2f}x  (target >= 1.80x on two cores)",
          flush=True)
    return seconds[1] / seconds[2]


def scale_rounds(args: argparse.Namespace, work: Path) -> None:
    """Ceiling then Dask, ``--repeats`` times in the same order: on a shared machine one round says little."""
    ceilings, speedups = [], []
    for round_ in range(args.repeats):
        ceilings.append(plain_processes(args.dask_images, work / f"plain-{round_}", args.chunk_size))
        speedups.append(dask_workers(args.dask_images, work / f"dask-{round_}", args.chunk_size,
                                     args.backgrounds_per_task))
    if args.repeats > 1:
        print(f"over {args.repeats} rounds: ceiling {' '.join(f'{c:.2f}x' for c in ceilings)} "
              f"(median {statistics.median(ceilings):.2f}x); Dask {' '.join(f'{x:.2f}x' for x in speedups)} "
              f"(median {statistics.median(speedups):.2f}x)")


def overhead(n: int, work: Path) -> None:
    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": n, "execution.chunk_size": 50,
                                                   "execution.max_workers": 1})
    started = time.perf_counter()
    build_in_process(cfg, str(work / f"loop-{n}"))
    loop_s = time.perf_counter() - started
    flow_s = timed_flow(cfg, work / f"flow-{n}")
    from flows.build_dataset import expected_task_runs

    tasks = expected_task_runs(cfg)
    print(f"{n} images, tiny config ({cfg.image.width}x{cfg.image.height}), 1 worker, {tasks} task runs: "
          f"plain loop {loop_s:.1f} s, build flow {flow_s:.1f} s", flush=True)
    print(f"  flow / loop = {flow_s / loop_s:.3f}  ({(flow_s - loop_s) / tasks * 1000:+.0f} ms per task run)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dask-images", type=int, default=400, help="0 to skip")
    parser.add_argument("--chunk-size", type=int, default=25, help="Dask build: images per compose task")
    parser.add_argument("--backgrounds-per-task", type=int, default=1, help="Dask build: backgrounds per task")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of ceiling + Dask, with medians")
    parser.add_argument("--overhead-images", type=int, nargs="*", default=[1000, 10000])
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, {len(os.sched_getaffinity(0))} usable", flush=True)
    with tempfile.TemporaryDirectory(prefix="synrail-scale-") as tmp:
        work = Path(tmp)
        print(f"ephemeral Prefect server start: {start_prefect(work):.1f} s (once per process, not timed below)")
        if args.dask_images:
            scale_rounds(args, work)
        for n in args.overhead_images:
            overhead(n, work)


if __name__ == "__main__":
    main()

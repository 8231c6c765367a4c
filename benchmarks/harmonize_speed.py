"""Composition CPU time per harmonization backend: the cost a backend adds to building images.

    python benchmarks/harmonize_speed.py [--images 60] [--rounds 3] [--backends ring,local]

Composes the same images (the default config at 1280x720, 1-3 obstacles, no shadow, weather or
quality control, as issue 2's measure) with each backend, JPEG-encodes them and builds their labels,
on one core, and prints the CPU seconds per image and each backend's ratio to the last one named.
CPU time, not wall time: the machine is shared. The backends take turns within each round (a warm-up
round first), so drifts in the machine's speed fall on all of them alike.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402

from synrail.config import BuildConfig, load_config  # noqa: E402
from synrail.stages.backgrounds import prepare_background  # noqa: E402
from synrail.stages.compose import annotation_rows, compose_one, gallery_by_class  # noqa: E402
from synrail.stages.gallery import prepare_gallery  # noqa: E402
from synrail.stages.splits import image_splits  # noqa: E402
from synrail.storage.codecs import encode_image  # noqa: E402
from synrail.storage.store import Store  # noqa: E402


def composition_cpu_seconds(backends: list[str], images: int, rounds: int) -> dict[str, float]:
    """CPU seconds per composed image for each backend, over ``rounds`` rounds after a warm-up."""
    cv2.setNumThreads(1)
    configs = {name: load_config(ROOT / "configs/default.yaml", {
        "num_images": images, "compose.obstacles_per_image": [1, 3], "compose.shadow": None,
        "weather.mix": {"none": 1.0}, "quality": None,
        "compose.harmonize": None if name == "none" else {"backend": name}}) for name in backends}
    with tempfile.TemporaryDirectory(prefix="harmonize-speed-") as cache_dir:
        return _cpu_seconds_per_image(configs, images, rounds, Store(cache_dir))


def _cpu_seconds_per_image(configs: dict[str, BuildConfig], images: int, rounds: int, cache: Store) -> dict[str, float]:
    """``composition_cpu_seconds`` with its backgrounds and cutouts prepared in ``cache``."""
    backends = list(configs)
    first = configs[backends[0]]
    backgrounds = [prepare_background(first, i, cache) for i in range(first.backgrounds.count)]
    cutouts = gallery_by_class(cache, prepare_gallery(first, cache))
    splits = image_splits(first)
    params = [cv2.IMWRITE_JPEG_QUALITY, first.image.jpeg_quality]
    totals = dict.fromkeys(backends, 0.0)
    for round_index in range(rounds + 1):
        for name, cfg in configs.items():
            started = time.process_time()
            for index in range(images):
                composed = compose_one(cfg, index, splits[index], backgrounds, cutouts, cache)
                encode_image(composed.composite.image, ".jpg", params)
                annotation_rows(index, composed.composite, cfg)
            if round_index:  # round 0 warms the caches up
                totals[name] += time.process_time() - started
    return {name: total / (rounds * images) for name, total in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="ring,local", help="comma list; ratios are to the last one")
    args = parser.parse_args()
    backends = args.backends.split(",")
    seconds = composition_cpu_seconds(backends, args.images, args.rounds)
    reference = backends[-1]
    for name in backends:
        print(f"{name:>8}: {seconds[name] * 1000:7.2f} ms CPU per image, {seconds[name] / seconds[reference]:.3f}x "
              f"{reference}")


if __name__ == "__main__":
    main()

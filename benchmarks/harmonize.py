"""Harmonization measured as iHarmony4 was built: recolour a real object in a real photograph, harmonize,
compare with the photograph.

    python benchmarks/harmonize.py [--perturbations 30] [--seeds 12-19] [--samples DIR] [--overlays DIR]
                                   [--torchscript MODEL.pt] [--onnx MODEL.onnx] [--device cuda]

Samples: scikit-image's bundled photographs with hand-placed object masks (needs scikit-image), or
with --samples the user's own DIR/images/<stem>.png|jpg + DIR/masks/<stem>.png instead. Each object's
colour, exposure and contrast are perturbed (seeded: gain, colour cast, gamma, contrast), every
backend harmonizes the same perturbed images, and the table gives MSE, foreground MSE (fMSE) and PSNR
against the original, per sample and over all, with the fMSE cut against no harmonization.
Target (issue "Harmonization you can measure"): the best classical backend cuts fMSE by >= 40 %.
One seed's 30 perturbations per object move the cut by several points (the coins, bright on a dark
table, pull every ring-based estimate the wrong way), so the rows of several seeds are pooled.
``local``'s defaults were tuned on seeds 1, 3, 4 and 5; the default seeds 12-19 were never used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402

from synrail.compose.harmonization_benchmark import (  # noqa: E402
    evaluate_harmonizers,
    folder_samples,
    mask_overlay,
    skimage_samples,
    summarize,
)
from synrail.compose.harmonizers import Harmonizer, make_harmonizer  # noqa: E402

_TUNING_SEEDS = {1, 3, 4, 5}  # the seeds local's defaults were tuned on; report others


def seed_list(text: str) -> list[int]:
    """``"0,2,6-8"`` -> [0, 2, 6, 7, 8]."""
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def backends(args: argparse.Namespace) -> dict[str, Harmonizer | None]:
    chosen: dict[str, Harmonizer | None] = {
        "none": None,
        "lab": make_harmonizer("lab"),
        "local": make_harmonizer("local"),
        "local, no prior": make_harmonizer("local", exposure_range=3.0, scene_spread=0.05),
        "poisson normal": make_harmonizer("poisson", mode="normal"),
        "poisson mixed": make_harmonizer("poisson", mode="mixed"),
    }
    if args.torchscript:
        chosen["torchscript"] = make_harmonizer("torchscript", path=args.torchscript, device=args.device)
    if args.onnx:
        chosen["onnx"] = make_harmonizer("onnx", path=args.onnx)
    return chosen


def print_table(table: list[dict], order: list[str]) -> None:
    samples = sorted({row["sample"] for row in table} - {"all"}) + ["all"]
    by_key = {(row["harmonizer"], row["sample"]): row for row in table}
    width = max(len(name) for name in order)
    print(f"{'sample':<18} {'harmonizer':<{width}} {'MSE':>8} {'fMSE':>8} {'PSNR':>7} {'fMSE cut':>9}")
    for sample in samples:
        for name in order:
            row = by_key[(name, sample)]
            print(f"{sample:<18} {name:<{width}} {row['mse']:8.1f} {row['fmse']:8.1f} {row['psnr']:7.2f} "
                  f"{row['fmse_reduction']:+9.1%}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--perturbations", type=int, default=30, help="perturbed copies of each sample")
    parser.add_argument("--seeds", type=seed_list, default=seed_list("12-19"),
                        help="perturbation seeds, pooled: a comma list with ranges, e.g. 0,2,6-11")
    parser.add_argument("--samples", type=Path, help="folder with images/ and masks/ (default: scikit-image's)")
    parser.add_argument("--overlays", type=Path, help="write each sample's mask overlay here, to check by eye")
    parser.add_argument("--torchscript", type=Path, help="a TorchScript harmonizer: (composite, mask) -> image")
    parser.add_argument("--onnx", type=Path, help="an ONNX harmonizer with inputs (composite, mask)")
    parser.add_argument("--device", help="device for --torchscript (default: cuda when available)")
    args = parser.parse_args()

    samples = folder_samples(args.samples) if args.samples else skimage_samples()
    if args.overlays:
        args.overlays.mkdir(parents=True, exist_ok=True)
        for sample in samples:
            cv2.imwrite(str(args.overlays / f"{sample.name}.png"), mask_overlay(sample.image_bgr, sample.mask))
    harmonizers = backends(args)
    rows = [row for seed in args.seeds
            for row in evaluate_harmonizers(samples, harmonizers, n_perturbations=args.perturbations, seed=seed)]
    tuning = sorted(_TUNING_SEEDS.intersection(args.seeds))
    split = f"includes tuning seeds {tuning}" if tuning else "all held out from tuning"
    print(f"{len(samples)} samples x {args.perturbations} perturbations x seeds {args.seeds} ({split})\n")
    print_table(summarize(rows), list(harmonizers))


if __name__ == "__main__":
    main()

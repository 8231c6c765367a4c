"""Classical track finding and camera estimation against procedural scenes' exact geometry.

    python benchmarks/rail.py [--scenes 48] [--width 1280 --height 720] [--seed 0]

Renders scenes cycling through track type x condition x straight/curved (camera height, pitch,
fov, offset drawn like the default config), runs ``detect_track`` + ``estimate_geometry`` with the
true field of view and prints, per group and overall:
- detection rate;
- track-area IoU with ``geometry.track_mask()``: on the rows the detection covers (median, p10)
  and on the whole mask (median);
- how far the detection reaches (median ground distance of its top row);
- distance error |d_est - d_true| / d_true at true track pixels 10-60 m away (median, p90 over
  scenes of each scene's median), and camera-height error (median);
- milliseconds per frame for detection + estimation (one thread).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from synrail.rail.detect import detect_track  # noqa: E402
from synrail.rail.estimate import estimate_geometry  # noqa: E402
from synrail.rail.geometry import CameraGeometry  # noqa: E402
from synrail.sources.procedural_backgrounds import (  # noqa: E402
    CONDITIONS,
    TRACK_TYPES,
    BackgroundSpec,
    render_background,
    sample_background_spec,
)

CURVES = {"straight": (0.0, 0.0003), "curved": (0.0015, 0.003)}  # |curvature| ranges, 1/m
DISTANCE_RANGE_M = (10.0, 60.0)


@dataclass
class Outcome:
    track_type: str
    condition: str
    curve: str
    detected: bool
    reason: str | None = None
    iou_rows: float = math.nan
    iou_full: float = math.nan
    reach_m: float = math.nan
    distance_error: float = math.nan
    height_error: float = math.nan
    ms: float = math.nan


def scene(index: int, seed: int, width: int, height: int) -> tuple[BackgroundSpec, str]:
    track_type, condition, curve = list(itertools.product(TRACK_TYPES, CONDITIONS, CURVES))[index % 16]
    rng = np.random.default_rng([seed, index])
    spec = sample_background_spec(rng, width=width, height=height, track_types=[track_type],
                                  conditions={condition: 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5),
                                  hfov_deg=(50.0, 65.0), max_curvature=0.0, max_offset_m=0.15)
    low, high = CURVES[curve]
    curvature = float(rng.uniform(low, high) * rng.choice([-1, 1]))
    return replace(spec, geometry=spec.geometry.model_copy(update={"track_curvature": curvature})), curve


def evaluate(spec: BackgroundSpec, curve: str) -> Outcome:
    truth = spec.geometry
    image = render_background(spec)
    hfov = math.degrees(2 * math.atan(truth.width / 2 / truth.focal_px))
    start = time.perf_counter()
    result = detect_track(image, hfov_deg=hfov)
    estimate = None if result.detection is None else estimate_geometry(
        result.detection, truth.width, truth.height, hfov_deg=hfov)
    ms = 1000 * (time.perf_counter() - start)
    outcome = Outcome(spec.track_type, spec.condition, curve, detected=estimate is not None,
                      reason=result.reason, ms=ms)
    if estimate is None:
        return outcome
    detection = result.detection
    true_mask = truth.track_mask()
    covered = np.zeros_like(true_mask)
    covered[detection.top_row:] = True
    outcome.iou_rows = iou(detection.mask, true_mask & covered)
    outcome.iou_full = iou(detection.mask, true_mask)
    outcome.reach_m = estimate.track_max_z_m
    outcome.distance_error = distance_error(truth, estimate, true_mask)
    outcome.height_error = abs(estimate.height_m - truth.height_m) / truth.height_m
    return outcome


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def distance_error(truth: CameraGeometry, estimate: CameraGeometry, true_mask: np.ndarray) -> float:
    """Median relative distance error over true track pixels 10-60 m away."""
    v, u = np.nonzero(true_mask)
    d_true = truth.distance_m(u, v)
    near = (d_true >= DISTANCE_RANGE_M[0]) & (d_true <= DISTANCE_RANGE_M[1])
    d_est = estimate.distance_m(u[near], v[near])
    return float(np.median(np.abs(np.nan_to_num(d_est, nan=np.inf) - d_true[near]) / d_true[near]))


def summary_row(name: str, outcomes: list[Outcome]) -> str:
    found = [o for o in outcomes if o.detected]

    def pct(values: list[float], q: float) -> str:
        return f"{np.percentile(values, q):6.3f}" if values else "     -"

    iou_rows = [o.iou_rows for o in found]
    errors = [100 * o.distance_error for o in found]
    return (f"{name:<24}{len(outcomes):>4}{100 * len(found) / len(outcomes):>7.0f}%"
            f"{pct(iou_rows, 50)}{pct(iou_rows, 10)}{pct([o.iou_full for o in found], 50)}"
            f"{pct([o.reach_m for o in found], 50)[:-2]:>7}"
            f"{pct(errors, 50)[:-1]:>7}{pct(errors, 90)[:-1]:>7}"
            f"{pct([100 * o.height_error for o in found], 50)[:-1]:>7}"
            f"{np.median([o.ms for o in outcomes]):>7.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=48)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    outcomes = []
    for index in range(args.scenes):
        spec, curve = scene(index, args.seed, args.width, args.height)
        outcomes.append(evaluate(spec, curve))
        if not outcomes[-1].detected:
            print(f"scene {index} ({spec.track_type}, {spec.condition}, {curve}): {outcomes[-1].reason}")
    print(f"\n{args.scenes} scenes at {args.width}x{args.height}; IoU on covered rows / whole mask; "
          f"reach = ground distance of the top row; distance error at track pixels "
          f"{DISTANCE_RANGE_M[0]:.0f}-{DISTANCE_RANGE_M[1]:.0f} m; h = camera-height error")
    print(f"{'group':<24}{'n':>4}{'found':>8}{'IoU':>6}{'p10':>6}{'full':>6}{'reach m':>8}"
          f"{'d% med':>7}{'d% p90':>7}{'h% med':>7}{'ms':>7}")
    groups = [("all", lambda o: True)]
    groups += [(t, lambda o, t=t: o.track_type == t) for t in TRACK_TYPES]
    groups += [(c, lambda o, c=c: o.condition == c) for c in CONDITIONS]
    groups += [(c, lambda o, c=c: o.curve == c) for c in CURVES]
    for name, keep in groups:
        chosen = [o for o in outcomes if keep(o)]
        if chosen:
            print(summary_row(name, chosen))


if __name__ == "__main__":
    main()

"""Gallery masks measured against ground truth: each mask path from ground-truth boxes.

    python benchmarks/segment.py --coco ANNOTATIONS.json --images DIR [--pennfudan DIR]
                                 [--categories dog,person,...] [--min-area 3000] [--max-objects N]
                                 [--sam CHECKPOINT [--sam-type vit_h] [--device cuda]]
                                 [--min-score 0.5] [--halves] [--threads 1] [--json OUT.json]
    python benchmarks/segment.py --synthetic DIR      # writes a small COCO set with known masks there, then measures it

Objects: a COCO-format folder's annotations of the given categories (default: the kinds of
``synrail/sources/sizes.py`` we paste: people, animals, vehicles) that carry a segmentation, are no
crowd and cover at least ``--min-area`` pixels; PennFudanPed's pedestrians (their label masks). The
ground truth is the annotation's mask; the prompt is the ground-truth box.

Mask paths: ``annotation`` (the annotation's own segmentation as the gallery cuts it: rasterised at
the image's resolution, specks dropped, an object in several parts left out), ``grabcut`` (the
weight-free segmenter) and ``sam`` (when ``--sam`` gives a checkpoint). Per path: mean IoU and boundary
F-score over every object (a failed or left-out mask counts as IoU 0), the share kept at
``--min-score`` and the kept ones' mean IoU (and the share of them under IoU 0.7), the kept-share /
kept-IoU curve over score thresholds, the score-IoU correlation (is the score honest?) and the CPU time per
object (OpenCV on ``--threads`` threads, 1 by default: one core). Edges, for every mask the path gives,
hard (the mask as a 0/1 alpha) and clean (``synrail.segment.edges``: guided-filter alpha, edge colours
from the object): the edge error (mean |alpha - ground truth| within the boundary tolerance of the
ground truth's boundary), the halo opacity (mean alpha on ground-truth background there) and the
colour halo (the share of the cutout's edge pixels coloured more like the source background next to
them than like the object). Text on stdout; ``--json`` writes the same figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import new_results, write_results  # noqa: E402
from synrail.segment.base import Prompt, postprocess_mask  # noqa: E402
from synrail.segment.edges import decontaminate, edge_alpha  # noqa: E402
from synrail.segment.grabcut import GrabCutSegmenter  # noqa: E402
from synrail.sources.cutouts import mask_parts  # noqa: E402
from synrail.sources.gallery_sources import (  # noqa: E402
    decode_labels,
    mask_box,
    rasterise_segmentation,
    read_url_bytes,
)
from synrail.sources.sizes import CATEGORY_HEIGHTS_M, normalise_category  # noqa: E402

THRESHOLDS = tuple(round(0.1 * k, 1) for k in range(10))
BOUNDARY_SHARE = 0.008  # boundary tolerance: this share of the image diagonal (DAVIS's F measure)
MIN_AREA_PX = 64
EDGE_MEASURES = ("edge_error", "halo_opacity", "colour_halo")


@dataclass(frozen=True)
class GroundTruth:
    """One object: its image, ground-truth mask, box and (COCO) segmentation."""

    key: str
    image_path: str
    mask: np.ndarray  # H x W bool at the image's resolution
    box: tuple[float, float, float, float]
    segmentation: Any = None  # the annotation's field (None for PennFudan)
    annotated_size: tuple[int, int] | None = None
    image_id: int | None = None  # the COCO image id (``--halves`` splits by its parity)


# -- ground truth ---------------------------------------------------------------------------------
def coco_objects(annotations: Path, images: Path, categories: Sequence[str] | None, min_area: float,
                 max_objects: int | None = None) -> list[GroundTruth]:
    """Annotated objects of a COCO-format folder (see the module's docstring).

    Args:
        annotations: the COCO JSON.
        images: the folder ``file_name`` is relative to.
        categories: category names kept (normalised); None: every kind of the height table.
        min_area: the least ground-truth mask area in pixels.
        max_objects: keep at most this many (in annotation order).

    Returns:
        The objects.
    """
    data = json.loads(Path(annotations).read_text())
    wanted = {normalise_category(c) for c in categories} if categories else set(CATEGORY_HEIGHTS_M)
    names = {c["id"]: normalise_category(c["name"]) for c in data["categories"]}
    image_of = {i["id"]: i for i in data["images"]}
    shapes: dict[str, tuple[int, int]] = {}
    found = []
    for ann in data["annotations"]:
        if names.get(ann["category_id"]) not in wanted or ann.get("iscrowd") or not ann.get("segmentation"):
            continue
        info = image_of[ann["image_id"]]
        path = str(Path(images) / info["file_name"])
        if path not in shapes:
            image = cv2.imread(path, cv2.IMREAD_COLOR)
            if image is None:
                continue
            shapes[path] = image.shape[:2]
        size = (int(info["height"]), int(info["width"])) if info.get("height") else None
        mask = rasterise_segmentation(ann["segmentation"], shapes[path], size)
        if mask.sum() < min_area:
            continue
        x, y, w, h = (float(v) for v in ann["bbox"])
        if size is not None and size != shapes[path]:
            sx, sy = shapes[path][1] / size[1], shapes[path][0] / size[0]
            x, y, w, h = x * sx, y * sy, w * sx, h * sy
        found.append(GroundTruth(f"coco:{ann['id']}", path, mask, (x, y, x + w, y + h), ann["segmentation"], size,
                                 int(ann["image_id"])))
        if max_objects is not None and len(found) >= max_objects:
            break
    return found


def pennfudan_objects(root: Path, min_area: float, max_objects: int | None = None) -> list[GroundTruth]:
    """PennFudanPed's pedestrians: ``PedMasks/X_mask.png`` labels, their boxes as prompts.

    Args:
        root: the dataset folder.
        min_area: the least mask area in pixels.
        max_objects: keep at most this many.

    Returns:
        The objects.
    """
    found = []
    for image_path in sorted((Path(root) / "PNGImages").glob("*.png")):
        mask_path = Path(root) / "PedMasks" / f"{image_path.stem}_mask.png"
        if not mask_path.is_file():
            continue
        labels = decode_labels(read_url_bytes(str(mask_path)), str(mask_path))
        for value in (int(v) for v in np.unique(labels) if v > 0):
            mask = labels == value
            if mask.sum() >= min_area:
                found.append(GroundTruth(f"pennfudan:{image_path.stem}#{value}", str(image_path), mask,
                                         mask_box(mask)))
            if max_objects is not None and len(found) >= max_objects:
                return found
    return found


# -- measures -------------------------------------------------------------------------------------
def iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two masks (0 when both are empty)."""
    union = np.count_nonzero(a | b)
    return float(np.count_nonzero(a & b) / union) if union else 0.0


def _boundary(mask: np.ndarray) -> np.ndarray:
    m = mask.astype(np.uint8)
    return (m - cv2.erode(m, np.ones((3, 3), np.uint8), borderType=cv2.BORDER_CONSTANT, borderValue=0)) > 0


def boundary_f(pred: np.ndarray, gt: np.ndarray, tolerance_px: float) -> float:
    """The boundary F-score: the shares of each mask's boundary within ``tolerance_px`` of the other's.

    Args:
        pred: the mask measured.
        gt: the ground truth.
        tolerance_px: the distance a boundary pixel may lie from the other boundary.

    Returns:
        2PR / (P + R); 0 when either boundary is empty.
    """
    pb, gb = _boundary(pred), _boundary(gt)
    if not pb.any() or not gb.any():
        return 0.0
    to_gt = cv2.distanceTransform((~gb).astype(np.uint8), cv2.DIST_L2, 3)
    to_pred = cv2.distanceTransform((~pb).astype(np.uint8), cv2.DIST_L2, 3)
    precision = float((to_gt[pb] <= tolerance_px).mean())
    recall = float((to_pred[gb] <= tolerance_px).mean())
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _near_boundary(gt: np.ndarray, tolerance_px: float) -> np.ndarray:
    to_edge = cv2.distanceTransform((~_boundary(gt)).astype(np.uint8), cv2.DIST_L2, 3)
    return to_edge <= tolerance_px


def _local_mean(image: np.ndarray, where: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray]:
    size = (2 * radius + 1, 2 * radius + 1)
    weight = cv2.boxFilter(where.astype(np.float32), -1, size, normalize=False, borderType=cv2.BORDER_CONSTANT)
    summed = cv2.boxFilter(image.astype(np.float32) * where[..., None], -1, size, normalize=False,
                           borderType=cv2.BORDER_CONSTANT)
    return summed / np.maximum(weight, 1e-6)[..., None], weight > 0


def edge_measures(image: np.ndarray, colours: np.ndarray, alpha: np.ndarray, gt: np.ndarray,
                  tolerance_px: float) -> tuple[float, float, float]:
    """How clean a cutout's edge is against the ground truth.

    Args:
        image: the source image, BGR.
        colours: the cutout's colours (the image, or its edge-decontaminated copy).
        alpha: the cutout's alpha in [0, 1] at the image's size.
        gt: the ground-truth mask.
        tolerance_px: the half-width of the band around the ground truth's boundary measured.

    Returns:
        (edge error: mean |alpha - gt| in the band; halo opacity: mean alpha on ground-truth background
        in the band; colour halo: the alpha-weighted share of the cutout's edge pixels, those within 2 px
        of its boundary, whose colour is nearer the source background next to them than the object).
    """
    band = _near_boundary(gt, tolerance_px)
    error = float(np.abs(alpha[band] - gt[band]).mean())
    halo_opacity = float(alpha[band & ~gt].mean()) if (band & ~gt).any() else 0.0
    solid = (alpha >= 0.5).astype(np.uint8)
    ring = (alpha > 0) & ~(cv2.erode(solid, np.ones((5, 5), np.uint8)) > 0)
    fg, has_fg = _local_mean(image, gt, 4)
    bg, has_bg = _local_mean(image, ~gt, 4)
    ring &= has_fg & has_bg
    if not ring.any():
        return error, halo_opacity, 0.0
    c = colours[ring].astype(np.float32)
    nearer_bg = np.linalg.norm(c - bg[ring], axis=1) < np.linalg.norm(c - fg[ring], axis=1)
    weights = alpha[ring]
    return error, halo_opacity, float((weights * nearer_bg).sum() / weights.sum())


def annotation_mask(obj: GroundTruth, shape: tuple[int, int]) -> np.ndarray | None:
    """The mask the gallery cuts an annotated object with (None when it leaves the object out)."""
    if obj.segmentation is None:
        return obj.mask
    parts = mask_parts(rasterise_segmentation(obj.segmentation, shape, obj.annotated_size))
    return parts[0] if len(parts) == 1 else None


NO_EDGES = (float("nan"),) * 6


def _edges(image: np.ndarray, mask: np.ndarray, gt: np.ndarray, tolerance: float) -> tuple[float, ...]:
    """``edge_measures`` of the hard mask, then of the clean edge (``edge_alpha`` + ``decontaminate``)."""
    hard = edge_measures(image, image, mask.astype(np.float32), gt, tolerance)
    alpha = edge_alpha(image, mask)
    return (*hard, *edge_measures(image, decontaminate(image, mask, alpha), alpha, gt, tolerance))


def measure(objects: Sequence[GroundTruth], segmenters: dict[str, Any], with_annotation: bool) -> dict[str, list]:
    """Per path, per object: (IoU, boundary F, score, seconds, then the hard and the clean edge's measures).

    Args:
        objects: the ground-truth objects.
        segmenters: path name -> segmenter (``segment(image, prompts)``).
        with_annotation: also measure the annotation path.

    Returns:
        path -> list of (iou, boundary_f, score, seconds, *hard edge, *clean edge) per object; the edge
        measures (``edge_measures``) are NaN where there is no mask.
    """
    rows: dict[str, list] = {name: [] for name in ([*(["annotation"] if with_annotation else []), *segmenters])}
    by_image: dict[str, list[GroundTruth]] = {}
    for obj in objects:
        by_image.setdefault(obj.image_path, []).append(obj)
    for path, group in by_image.items():
        image = cv2.imread(path, cv2.IMREAD_COLOR)
        tolerance = max(1.0, BOUNDARY_SHARE * float(np.hypot(*image.shape[:2])))
        if with_annotation:
            for obj in group:
                start = time.perf_counter()
                mask = annotation_mask(obj, image.shape[:2])
                seconds = time.perf_counter() - start
                rows["annotation"].append((0.0, 0.0, 0.0, seconds, *NO_EDGES) if mask is None else
                                          (iou(mask, obj.mask), boundary_f(mask, obj.mask, tolerance), 1.0, seconds,
                                           *_edges(image, mask, obj.mask, tolerance)))
        for name, segmenter in segmenters.items():
            start = time.process_time()  # CPU time: what one core spends, whatever else runs on the machine
            results = segmenter.segment(image, [Prompt(box=obj.box) for obj in group])
            seconds = (time.process_time() - start) / len(group)
            for obj, result in zip(group, results, strict=True):
                mask = postprocess_mask(np.asarray(result.mask, bool), MIN_AREA_PX)
                if mask is None:
                    rows[name].append((0.0, 0.0, float(result.score), seconds, *NO_EDGES))
                else:
                    rows[name].append((iou(mask, obj.mask), boundary_f(mask, obj.mask, tolerance),
                                       float(result.score), seconds, *_edges(image, mask, obj.mask, tolerance)))
    return rows


def summarize(rows: Sequence[tuple[float, float, float, float]], min_score: float) -> dict[str, Any]:
    """The figures of one path (see the module's docstring).

    Args:
        rows: (iou, boundary_f, score, seconds) per object.
        min_score: the configured score threshold.

    Returns:
        A JSON-able dict.
    """
    if not rows:
        return {"objects": 0}
    columns = np.array(rows, float)
    ious, fs, scores, seconds = columns[:, 0], columns[:, 1], columns[:, 2], columns[:, 3]
    edges = columns[:, 4:10]
    has_edges = ~np.isnan(edges[:, 0])

    def kept_at(threshold: float) -> dict[str, Any]:
        kept = scores >= threshold
        return {"threshold": threshold, "kept_share": round(float(kept.mean()), 4),
                "kept_iou": round(float(ious[kept].mean()), 4) if kept.any() else None,
                "kept_below_0_7": round(float((ious[kept] < 0.7).mean()), 4) if kept.any() else None}

    varied = scores.std() > 0 and ious.std() > 0
    return {"objects": len(rows), "mean_iou": round(float(ious.mean()), 4),
            "boundary_f": round(float(fs.mean()), 4), "at_min_score": kept_at(min_score),
            "curve": [kept_at(t) for t in THRESHOLDS],
            "score_iou_correlation": round(float(np.corrcoef(scores, ious)[0, 1]), 4) if varied else None,
            "ms_per_object": round(1000 * float(seconds.mean()), 2),
            "edges": {kind: dict(zip(EDGE_MEASURES, (round(float(v), 4) for v in
                                                     edges[has_edges][:, offset:offset + 3].mean(0)), strict=True))
                      for kind, offset in (("hard", 0), ("clean", 3))} if has_edges.any() else None}


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report_text(name: str, figures: dict[str, dict[str, Any]], min_score: float) -> str:
    """The figures as text, one block per path."""
    lines = [f"== {name}"]
    for path, f in figures.items():
        if not f.get("objects"):
            lines.append(f"{path:>10}: no objects")
            continue
        at = f["at_min_score"]
        kept_iou = "-" if at["kept_iou"] is None else f"{at['kept_iou']:.3f}"
        lines.append(f"{path:>10}: {f['objects']} objects, mean IoU {f['mean_iou']:.3f}, boundary F "
                     f"{f['boundary_f']:.3f}; at min_score {min_score}: kept {at['kept_share']:.0%} at IoU "
                     f"{kept_iou}; score-IoU r {f['score_iou_correlation']}; {f['ms_per_object']:.1f} ms/object")
        if f.get("edges"):
            hard, clean = f["edges"]["hard"], f["edges"]["clean"]
            lines.append(" " * 12 + "edges hard -> clean: " + ", ".join(
                f"{m.replace('_', ' ')} {hard[m]:.3f} -> {clean[m]:.3f}" for m in EDGE_MEASURES))
        lines.append(" " * 12 + "curve (score: kept/IoU): " + "  ".join(
            f"{c['threshold']:.1f}: {c['kept_share']:.0%}/{_figure(c['kept_iou'])}" for c in f["curve"]))
    return "\n".join(lines)


# -- a synthetic COCO set with known masks --------------------------------------------------------
def write_synthetic_coco(root: Path, images: int = 6, seed: int = 0, size: tuple[int, int] = (240, 320)) -> Path:
    """A tiny COCO-format set: textured backgrounds, objects of their own colour with known outlines.

    Annotations alternate polygons, compressed and uncompressed RLE; every object is a "dog".

    Args:
        root: the folder written (``images/``, ``instances.json``).
        images: how many images.
        seed: the random seed.
        size: (height, width) of each image.

    Returns:
        The annotation file's path.
    """
    from pycocotools import mask as mask_utils

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    height, width = size
    image_rows, annotations = [], []
    for i in range(1, images + 1):
        base = rng.integers(90, 170, 3)
        image = np.clip(base + rng.normal(0, 12, (height, width, 3)), 0, 255).astype(np.uint8)
        for j in range(2):
            cx, cy = int(width * (0.28 + 0.44 * j)), int(height * rng.uniform(0.45, 0.55))
            angles = np.sort(rng.uniform(0, 2 * np.pi, 9))
            radii = rng.uniform(0.6, 1.0, 9) * np.array([width * 0.16, height * 0.28])[:, None]
            polygon = np.stack([cx + radii[0] * np.cos(angles), cy + radii[1] * np.sin(angles)], 1)
            mask = np.zeros((height, width), np.uint8)
            cv2.fillPoly(mask, [np.round(polygon).astype(np.int32)], 1)
            colour = (base + rng.choice([-1, 1], 3) * rng.integers(50, 80, 3)).clip(0, 255)
            image[mask > 0] = np.clip(colour + rng.normal(0, 10, (int(mask.sum()), 3)), 0, 255).astype(np.uint8)
            ann_id = 10 * i + j
            kind = ann_id % 3
            if kind == 0:
                segmentation: Any = [polygon.flatten().round(2).tolist()]
            else:
                rle = mask_utils.encode(np.asfortranarray(mask))
                segmentation = {"size": [height, width], "counts": rle["counts"].decode("ascii")}
                if kind == 2:
                    flat = mask.flatten(order="F")
                    edges = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
                    counts = ([0] if flat[0] else []) + np.diff(edges).tolist()
                    segmentation = {"size": [height, width], "counts": counts}
            x, y, w, h = cv2.boundingRect(mask)
            annotations.append({"id": ann_id, "image_id": i, "category_id": 18, "bbox": [x, y, w, h],
                                "area": int(mask.sum()), "iscrowd": 0, "segmentation": segmentation})
        cv2.imwrite(str(root / "images" / f"{i:04d}.png"), image)
        image_rows.append({"id": i, "file_name": f"{i:04d}.png", "width": width, "height": height})
    path = root / "instances.json"
    path.write_text(json.dumps({"images": image_rows, "annotations": annotations,
                                "categories": [{"id": 18, "name": "dog"}]}))
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every configured set and path; print the text, write the JSON when asked.

    Args:
        args: the parsed command line.

    Returns:
        set name -> path -> figures.
    """
    cv2.setNumThreads(args.threads)
    segmenters: dict[str, Any] = {"grabcut": GrabCutSegmenter()}
    if args.sam:
        from synrail.segment.sam import SamSegmenter

        segmenters["sam"] = SamSegmenter(args.sam, args.sam_type, args.device)
    sets: dict[str, tuple[list[GroundTruth], bool]] = {}
    coco, images = args.coco, args.images
    if args.synthetic:
        coco, images = write_synthetic_coco(Path(args.synthetic)), Path(args.synthetic) / "images"
    if coco:
        categories = args.categories.split(",") if args.categories else None
        objects = coco_objects(Path(coco), Path(images), categories, args.min_area, args.max_objects)
        sets["coco"] = (objects, True)
        if args.halves:  # settings chosen on one half can be checked on the other
            for parity, half in ((0, "even"), (1, "odd")):
                sets[f"coco, {half} image ids"] = ([o for o in objects if (o.image_id or 0) % 2 == parity], True)
    if args.pennfudan:
        sets["pennfudan"] = (pennfudan_objects(Path(args.pennfudan), args.min_area, args.max_objects), False)
    results: dict[str, Any] = {}
    for name, (objects, with_annotation) in sets.items():
        rows = measure(objects, segmenters, with_annotation)
        results[name] = {path: summarize(r, args.min_score) for path, r in rows.items()}
        print(report_text(name, results[name], args.min_score))
    if args.json:
        figures = new_results("benchmarks/segment.py")
        figures["runs"] = {name: {path: table_row(summary) for path, summary in paths.items()}
                           for name, paths in results.items()}
        figures.update(min_score=args.min_score, min_area=args.min_area, sets=results)
        write_results(Path(args.json), figures)
    return results


def table_row(summary: dict[str, Any]) -> dict[str, Any]:
    """A path's headline figures, flat, for the benchmark page's table (the JSON's ``sets`` keep
    the curve and the edge measures)."""
    kept = summary.get("at_min_score", {})
    return {"objects": summary["objects"], "mean_iou": summary.get("mean_iou"),
            "boundary_f": summary.get("boundary_f"), "kept_share": kept.get("kept_share"),
            "kept_iou": kept.get("kept_iou"), "kept_below_0_7": kept.get("kept_below_0_7"),
            "score_iou_correlation": summary.get("score_iou_correlation"),
            "ms_per_object": summary.get("ms_per_object")}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coco", help="COCO-format annotation JSON with segmentations")
    parser.add_argument("--images", help="the folder the annotations' file_name values are relative to")
    parser.add_argument("--pennfudan", help="a PennFudanPed folder")
    parser.add_argument("--synthetic", help="write a small synthetic COCO set with known masks here and measure it")
    parser.add_argument("--categories", help="comma-separated category names (default: the height table's kinds)")
    parser.add_argument("--min-area", type=float, default=3000)
    parser.add_argument("--max-objects", type=int)
    parser.add_argument("--min-score", type=float, default=0.5)
    parser.add_argument("--sam", help="a SAM checkpoint: adds the sam path")
    parser.add_argument("--sam-type", default="vit_h")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="write the figures here as JSON")
    parser.add_argument("--halves", action="store_true",
                        help="also measure the COCO objects of even and of odd image ids apart")
    parser.add_argument("--threads", type=int, default=1, help="OpenCV threads (default 1: ms per object on one core)")
    args = parser.parse_args(argv)
    if not (args.coco or args.pennfudan or args.synthetic):
        parser.error("give --coco (with --images), --pennfudan or --synthetic")
    if args.coco and not args.images:
        parser.error("--coco needs --images")
    return args


if __name__ == "__main__":
    run(parse_args())

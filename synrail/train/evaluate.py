"""Detection metrics with pycocotools' COCOeval: mAP50 and mAP50:95, overall and by class, distance,
condition, track type and kind of unseen obstacle.

Every number comes from COCOeval's accumulated precision array (101-point interpolated
precision, IoU thresholds 0.50:0.05:0.95, area "all", 100 detections per image), read as
``COCOeval.summarize`` reads it: the mean over the entries that are not -1. mAP is the mean of the
per-class APs over the classes that have ground truth in the evaluated subset.

Two kinds of subsets:
- image subsets (condition, track type): COCOeval restricted to those images (``params.imgIds``);
- annotation subsets (distance bucket, unseen-obstacle kind): every image, with ground truth
  outside the subset marked ignore, so a detection matched to it is neither a TP nor a FP, while a
  detection matched to no ground truth at all counts as a FP in every subset (its own distance is
  unknown). COCOeval's only per-annotation ignore switch is ``iscrowd``, which also changes the
  matching, so the subset is expressed through its area-range filter instead: the evaluated copy
  gives kept ground truth area 1, the rest area 0, and detections area 1, with ``areaRng``
  [0.5, 1.5]. Bounding-box IoU never reads ``area``.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from pydantic import BaseModel, ConfigDict

DISTANCE_BUCKETS_M: tuple[tuple[float, float], ...] = ((0, 15), (15, 30), (30, 45), (45, 60), (60, 75))
# The paper's Table 4 columns from SynRail's condition tags (procedural: normal/overcast/fog/dusk;
# video sidecars add rain, snow, dark). Overcast is normal weather; dusk is the dark end we render.
CONDITION_GROUPS: dict[str, tuple[str, ...]] = {
    "Normal": ("normal", "overcast"), "Rainy": ("rain",), "Foggy": ("fog",), "Dark": ("dusk", "dark")}
UNSEEN_CLASS = "unseen_obstacle"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


class MetricRow(BaseModel):
    """COCO metrics of one subset of the test data (a class, a distance bucket, a condition, ...)."""

    model_config = ConfigDict(frozen=True)

    group: str  # overall, class, distance, condition, condition_group, track_type, unseen_kind
    subset: str
    map50: float | None  # None: no ground truth in the subset
    map50_95: float | None
    images: int
    instances: int


class EvalReport(BaseModel):
    """Every metric row of one evaluation."""

    model_config = ConfigDict(frozen=True)

    rows: list[MetricRow]

    def row(self, group: str, subset: str) -> MetricRow | None:
        """The row of one subset.

        Args:
            group: the grouping (overall, class, distance, ...).
            subset: the subset's name within it.

        Returns:
            The row, or None when the report has none.
        """
        return next((r for r in self.rows if r.group == group and r.subset == subset), None)

    def value(self, group: str, subset: str, metric: str = "map50") -> float | None:
        """One metric of one subset.

        Args:
            group: the grouping (overall, class, distance, ...).
            subset: the subset's name within it.
            metric: a field of ``MetricRow``.

        Returns:
            The value, or None when the row is missing or has no ground truth.
        """
        row = self.row(group, subset)
        return None if row is None else getattr(row, metric)

    def subsets(self, group: str) -> list[str]:
        """The subsets of ``group`` in the report, in row order."""
        return [r.subset for r in self.rows if r.group == group]


class TestSet(BaseModel):
    """A COCO ground-truth file and the folder of its images."""

    model_config = ConfigDict(frozen=True)

    gt_json: Path
    images_dir: Path


def load_coco_document(coco: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A COCO document given as a dict or a file path.

    Raises:
        FileNotFoundError: no file at the path.
    """
    if isinstance(coco, Mapping):
        return dict(coco)
    path = Path(coco)
    if not path.is_file():
        raise FileNotFoundError(f"COCO file {path} does not exist")
    return json.loads(path.read_text())


def load_results(results: Sequence[Mapping[str, Any]] | str | Path) -> list[dict[str, Any]]:
    """COCO detection results given as a list or a JSON file path.

    Raises:
        FileNotFoundError: no file at the path.
    """
    if isinstance(results, (str, Path)):
        path = Path(results)
        if not path.is_file():
            raise FileNotFoundError(f"predictions file {path} does not exist")
        results = json.loads(path.read_text())
    return [dict(r) for r in results]


def bucket_label(low: float, high: float) -> str:
    """The label of a distance bucket, such as "20-40m".

    Args:
        low: the bucket's near edge, metres.
        high: its far edge, metres.

    Returns:
        The label.
    """
    return f"{low:g}-{high:g}m"


def _quiet_coco(document: Mapping[str, Any]) -> COCO:
    coco = COCO()
    coco.dataset = dict(document)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress lines
        coco.createIndex()
    return coco


def _ground_truth(document: Mapping[str, Any], area_of: Callable[[dict[str, Any]], float] | None) -> COCO:
    """The boxes-only ground truth, with areas replaced by ``area_of`` for annotation subsets."""
    annotations = [{k: v for k, v in a.items() if k != "segmentation"} for a in document["annotations"]]
    if area_of is not None:
        annotations = [{**a, "area": area_of(a)} for a in annotations]
    return _quiet_coco({"images": document["images"], "categories": document["categories"],
                        "annotations": annotations})


def _detections(gt: COCO, results: Sequence[Mapping[str, Any]], fixed_area: float | None) -> COCO:
    """What ``COCO.loadRes`` builds for box results, without mutating them and also when empty."""
    annotations = [{"id": i, "image_id": r["image_id"], "category_id": r["category_id"], "bbox": list(r["bbox"]),
                    "score": float(r["score"]), "iscrowd": 0,
                    "area": fixed_area if fixed_area is not None else r["bbox"][2] * r["bbox"][3]}
                   for i, r in enumerate(results, start=1)]
    return _quiet_coco({"images": gt.dataset["images"], "categories": gt.dataset["categories"],
                        "annotations": annotations})


def check_results(document: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> None:
    """Check that the predictions name only images and categories of the ground truth.

    Args:
        document: the ground-truth COCO document.
        results: COCO detection results.

    Raises:
        ValueError: naming the first stray image and category ids.
    """
    image_ids = {i["id"] for i in document["images"]}
    category_ids = {c["id"] for c in document["categories"]}
    stray_images = {r["image_id"] for r in results} - image_ids
    stray_categories = {r["category_id"] for r in results} - category_ids
    if stray_images or stray_categories:
        raise ValueError(f"predictions name images {sorted(stray_images)[:5]} or categories "
                         f"{sorted(stray_categories)[:5]} that the ground truth does not have")


def _precision(gt: COCO, dt: COCO, image_ids: Sequence[int] | None, area_range: tuple[float, float] | None,
               category_ids: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's precision array [T, R, K] (area range and 100 detections fixed) and its IoU thresholds."""
    evaluator = COCOeval(gt, dt, iouType="bbox")
    if image_ids is not None:
        evaluator.params.imgIds = list(image_ids)
    if category_ids is not None:
        evaluator.params.catIds = list(category_ids)
    if area_range is not None:
        evaluator.params.areaRng, evaluator.params.areaRngLbl = [list(area_range)], ["subset"]
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator.evaluate()
        evaluator.accumulate()
    return evaluator.eval["precision"][:, :, :, 0, -1], evaluator.params.iouThrs


def _mean_valid(values: np.ndarray) -> float | None:
    valid = values[values > -1]
    return float(valid.mean()) if valid.size else None


def _maps(precision: np.ndarray, iou_thresholds: np.ndarray) -> tuple[float | None, float | None]:
    """(mAP50, mAP50:95) as COCOeval.summarize computes them."""
    at_50 = np.where(np.isclose(iou_thresholds, 0.5))[0]
    return _mean_valid(precision[at_50]), _mean_valid(precision)


def _image_subset_row(document: Mapping[str, Any], gt: COCO, dt: COCO, group: str, subset: str,
                      image_ids: list[int]) -> MetricRow:
    map50, map50_95 = _maps(*_precision(gt, dt, image_ids, None))
    chosen = set(image_ids)
    instances = sum(1 for a in document["annotations"] if a["image_id"] in chosen)
    return MetricRow(group=group, subset=subset, map50=map50, map50_95=map50_95, images=len(image_ids),
                     instances=instances)


def _annotation_subset_row(document: Mapping[str, Any], results: Sequence[Mapping[str, Any]], group: str,
                           subset: str, keep: Callable[[dict[str, Any]], bool],
                           category_ids: Sequence[int] | None = None) -> MetricRow:
    """Ground truth outside ``keep`` ignored (see the module docstring)."""
    gt = _ground_truth(document, lambda a: 1.0 if keep(a) else 0.0)
    dt = _detections(gt, results, fixed_area=1.0)
    precision, thresholds = _precision(gt, dt, None, (0.5, 1.5), category_ids)
    map50, map50_95 = _maps(precision, thresholds)
    instances = sum(1 for a in document["annotations"] if keep(a)
                    and (category_ids is None or a["category_id"] in category_ids))
    return MetricRow(group=group, subset=subset, map50=map50, map50_95=map50_95,
                     images=len(document["images"]), instances=instances)


def _in_bucket(low: float, high: float, last: bool) -> Callable[[dict[str, Any]], bool]:
    """[low, high) so a distance on a boundary counts once; the last bucket also keeps ``high``."""
    def keep(annotation: dict[str, Any]) -> bool:
        distance = annotation.get("distance_m")
        return distance is not None and low <= distance and (distance < high or (last and distance == high))
    return keep


def unseen_kind(annotation: Mapping[str, Any]) -> str | None:
    """An unseen obstacle's kind: its ``kind`` field (real test sets: "parcel", "branch"), else the
    shape in a SynRail source path "procedural/unseen_obstacle/<shape>/<texture>"."""
    if annotation.get("kind"):
        return str(annotation["kind"])
    parts = str(annotation.get("source", "")).split("/")
    return parts[parts.index(UNSEEN_CLASS) + 1] if UNSEEN_CLASS in parts[:-1] else None


def _images_by(document: Mapping[str, Any], key: str) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for image in document["images"]:
        if image.get(key) is not None:
            groups.setdefault(str(image[key]), []).append(image["id"])
    return groups


def _overall_and_class_rows(document: Mapping[str, Any], gt: COCO, dt: COCO) -> list[MetricRow]:
    precision, thresholds = _precision(gt, dt, None, None)
    map50, map50_95 = _maps(precision, thresholds)
    images = len(document["images"])
    rows = [MetricRow(group="overall", subset="all", map50=map50, map50_95=map50_95, images=images,
                      instances=len(document["annotations"]))]
    category_ids = sorted(gt.getCatIds())  # COCOeval's K axis is in this order
    for k, category_id in enumerate(category_ids):
        map50, map50_95 = _maps(precision[:, :, k:k + 1], thresholds)
        rows.append(MetricRow(group="class", subset=gt.cats[category_id]["name"], map50=map50, map50_95=map50_95,
                              images=images, instances=len(gt.getAnnIds(catIds=[category_id]))))
    return rows


def _image_subset_rows(document: Mapping[str, Any], gt: COCO, dt: COCO) -> list[MetricRow]:
    rows = []
    conditions = _images_by(document, "condition")
    for condition, ids in sorted(conditions.items()):
        rows.append(_image_subset_row(document, gt, dt, "condition", condition, ids))
    for name, tags in CONDITION_GROUPS.items():
        ids = sorted(i for tag in tags for i in conditions.get(tag, []))
        if ids:
            rows.append(_image_subset_row(document, gt, dt, "condition_group", name, ids))
    for track_type, ids in sorted(_images_by(document, "track_type").items()):
        rows.append(_image_subset_row(document, gt, dt, "track_type", track_type, ids))
    return rows


def _distance_rows(document: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> list[MetricRow]:
    if not any("distance_m" in a for a in document["annotations"]):
        return []
    last = len(DISTANCE_BUCKETS_M) - 1
    return [_annotation_subset_row(document, results, "distance", bucket_label(low, high),
                                   _in_bucket(low, high, i == last))
            for i, (low, high) in enumerate(DISTANCE_BUCKETS_M)]


def _unseen_kind_rows(document: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> list[MetricRow]:
    unseen_ids = [c["id"] for c in document["categories"] if c["name"] == UNSEEN_CLASS]
    kinds = sorted({k for a in document["annotations"] if a["category_id"] in unseen_ids
                    and (k := unseen_kind(a)) is not None})
    return [_annotation_subset_row(document, results, "unseen_kind", kind,
                                   lambda a, kind=kind: unseen_kind(a) == kind, unseen_ids)
            for kind in kinds]


def evaluate_coco(gt_json: Mapping[str, Any] | str | Path,
                  results: Sequence[Mapping[str, Any]] | str | Path) -> EvalReport:
    """mAP50 and mAP50:95 of box ``results`` (COCO result dicts or a results.json) against a COCO
    ground truth: overall, per class, per distance bucket, per condition (and the paper's condition
    groups), per track type and per unseen-obstacle kind. Rows whose subset is absent from the data
    are left out; a subset without ground truth has ``None`` metrics. In a distance bucket (or
    unseen kind) a detection of ground truth outside it counts neither way, and a detection of no
    ground truth counts as a false positive in every bucket.

    Args:
        gt_json: the ground-truth COCO document, or its file path.
        results: COCO detection results, or the path of their JSON file.

    Returns:
        The report, one row per subset.

    Raises:
        FileNotFoundError: a path names no file.
        ValueError: a result names an image or category the ground truth lacks.
    """
    document = load_coco_document(gt_json)
    results = load_results(results)
    check_results(document, results)
    gt = _ground_truth(document, None)
    dt = _detections(gt, results, fixed_area=None)
    rows = _overall_and_class_rows(document, gt, dt)
    rows += _distance_rows(document, results)
    rows += _image_subset_rows(document, gt, dt)
    rows += _unseen_kind_rows(document, results)
    return EvalReport(rows=rows)


# --- YOLO-form test sets -------------------------------------------------------------------------

def _read_data_yaml(data_yaml: Path) -> dict[str, Any]:
    if not data_yaml.is_file():
        raise FileNotFoundError(f"data.yaml {data_yaml} does not exist")
    document = yaml.safe_load(data_yaml.read_text())
    if not isinstance(document, dict) or "names" not in document:
        raise ValueError(f"{data_yaml} is not an Ultralytics data.yaml (no 'names')")
    return document


def dataset_root(data_yaml: str | Path) -> Path:
    """The folder split paths are relative to: ``path:`` (itself relative to the yaml), else the yaml's folder."""
    data_yaml = Path(data_yaml)
    root = _read_data_yaml(data_yaml).get("path")
    return (data_yaml.parent / root).resolve() if root else data_yaml.parent.resolve()


def class_names(data_yaml: str | Path) -> list[str]:
    """The class names of a data.yaml, in index order."""
    names = _read_data_yaml(Path(data_yaml))["names"]
    return [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)


def split_images(data_yaml: str | Path, split: str) -> list[Path]:
    """A split's images: a folder, a list of folders, or a .txt list of image paths (Ultralytics' forms).

    Args:
        data_yaml: the dataset's Ultralytics ``data.yaml``.
        split: the split's key in it ("train", "val", "test").

    Returns:
        The image paths: a folder's images sorted (searched recursively), a list file's in its order.

    Raises:
        ValueError: the yaml has no such split.
        FileNotFoundError: an entry of the split does not exist.
    """
    document = _read_data_yaml(Path(data_yaml))
    if split not in document:
        raise ValueError(f"{data_yaml} has no {split!r} split")
    root = dataset_root(data_yaml)
    entries = document[split] if isinstance(document[split], list) else [document[split]]
    images: list[Path] = []
    for entry in entries:
        path = root / entry
        if path.is_dir():
            images += sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.suffix == ".txt" and path.is_file():
            images += [root / line.strip() for line in path.read_text().splitlines() if line.strip()]
        else:
            raise FileNotFoundError(f"split {split!r} of {data_yaml}: {path} does not exist")
    return images


def label_path(image: Path) -> Path:
    """Ultralytics' rule: the last ``images`` folder in the path becomes ``labels``, suffix .txt."""
    parts = list(image.parts)
    index = len(parts) - 1 - parts[::-1].index("images")
    return Path(*parts[:index], "labels", *parts[index + 1:]).with_suffix(".txt")


def _yolo_boxes(label: Path, width: int, height: int) -> Iterable[tuple[int, list[float]]]:
    """(class id, [x, y, w, h] in pixels) per line; polygon lines (segment labels) give their extent."""
    if not label.is_file():
        return
    for line in label.read_text().splitlines():
        values = [float(v) for v in line.split()]
        if len(values) < 5:
            continue
        coords = values[1:]
        if len(coords) == 4:
            cx, cy, w, h = coords
            x1, y1, x2, y2 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
        else:
            xs, ys = coords[0::2], coords[1::2]
            x1, y1, x2, y2 = min(xs), min(ys), max(xs), max(ys)
        yield int(values[0]), [x1 * width, y1 * height, (x2 - x1) * width, (y2 - y1) * height]


def yolo_to_coco(data_yaml: str | Path, split: str) -> dict[str, Any]:
    """A YOLO-form split as a COCO instances document (boxes only; category ids 1-based in ``names``
    order; ``file_name`` relative to :func:`dataset_root`).

    Args:
        data_yaml: the dataset's Ultralytics ``data.yaml``.
        split: the split's key in it.

    Returns:
        The COCO document (images, annotations with pixel xywh boxes, categories); image ids count from 1.
    """
    from PIL import Image

    root = dataset_root(data_yaml)
    names = class_names(data_yaml)
    images, annotations = [], []
    for image_id, path in enumerate(split_images(data_yaml, split), start=1):
        with Image.open(path) as image:
            width, height = image.size
        file_name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height})
        for class_id, box in _yolo_boxes(label_path(path), width, height):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": class_id + 1,
                                "bbox": [round(v, 2) for v in box], "area": box[2] * box[3], "iscrowd": 0})
    return {"images": images, "annotations": annotations,
            "categories": [{"id": i + 1, "name": name} for i, name in enumerate(names)]}


def resolve_test_set(data_yaml: str | Path, split: str, work_dir: str | Path) -> TestSet:
    """A split as COCO ground truth plus its image folder: a SynRail build's own
    ``annotations/instances_{split}.json`` (with distances and conditions) when there is one, else
    the YOLO labels converted, written to ``work_dir``.

    Args:
        data_yaml: the dataset's Ultralytics ``data.yaml``.
        split: the split's key in it.
        work_dir: where a converted ``instances_{split}.json`` is written (created if missing).

    Returns:
        The ground-truth file and the folder its ``file_name`` values are relative to.
    """
    data_yaml = Path(data_yaml)
    built = data_yaml.parent / "annotations" / f"instances_{split}.json"
    if built.is_file():  # its file names are relative to the split's image folder
        return TestSet(gt_json=built, images_dir=dataset_root(data_yaml) / _read_data_yaml(data_yaml)[split])
    out = Path(work_dir) / f"instances_{split}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(yolo_to_coco(data_yaml, split)))
    return TestSet(gt_json=out, images_dir=dataset_root(data_yaml))

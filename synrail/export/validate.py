"""Check an exported dataset against the export contract, reading only what was written to disk."""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath

import cv2
import numpy as np
import yaml
from pycocotools import mask as mask_utils

from synrail.export.yolo import yolo_line
from synrail.storage.store import Store


def _check_annotation(ann: dict, image: dict, rail: np.ndarray, problems: list[str]) -> str:
    """Problems of one COCO annotation; returns its YOLO line as the labels file must hold it."""
    where = f"annotation {ann['id']} (image {image['file_name']})"
    rle = dict(ann["segmentation"], counts=ann["segmentation"]["counts"].encode("ascii"))
    mask = mask_utils.decode(rle).astype(bool)
    if mask.shape != (image["height"], image["width"]):
        problems.append(f"{where}: mask size {mask.shape} is not the image size")
    rows, cols = np.nonzero(mask)
    if rows.size == 0:
        problems.append(f"{where}: empty mask")
        return ""
    box = [int(cols.min()), int(rows.min()), int(cols.max() - cols.min() + 1), int(rows.max() - rows.min() + 1)]
    if [int(v) for v in ann["bbox"]] != box:
        problems.append(f"{where}: bbox {ann['bbox']} is not the mask's tight box {box}")
    if ann["area"] != int(mask.sum()):
        problems.append(f"{where}: area {ann['area']} != mask pixels {int(mask.sum())}")
    if not 0 < ann["visibility"] <= 1:
        problems.append(f"{where}: visibility {ann['visibility']} outside (0, 1]")
    if ann["iscrowd"] != 0 or ann["distance_m"] <= 0:
        problems.append(f"{where}: iscrowd must be 0 and distance_m positive")
    u, v = ann["ground_point"]
    if not (0 <= v < rail.shape[0] and 0 <= u < rail.shape[1] and rail[v, u]):
        problems.append(f"{where}: ground point {ann['ground_point']} is not on the rail area")
    return yolo_line(ann["category_id"] - 1, box, image["width"], image["height"])


def _decoded_size(out: Store, rel: str) -> tuple[int, int] | None:
    """(height, width) of the image at ``rel``, or None when it is missing or unreadable."""
    if not out.exists(rel):
        return None
    decoded = cv2.imdecode(np.frombuffer(out.read_bytes(rel), np.uint8), cv2.IMREAD_COLOR)
    return None if decoded is None else decoded.shape[:2]


def validate_dataset(root: str | os.PathLike[str]) -> list[str]:
    """Every problem found, as readable sentences (empty when the dataset is sound).

    Args:
        root: the export's folder, or its URL (``file://``, ``s3://``: any store ``synrail build`` writes).

    Returns:
        One sentence per problem, naming the file.
    """
    out = Store(os.fspath(root))
    problems: list[str] = []
    data = yaml.safe_load(out.read_text("data.yaml"))
    if "path" in data:
        problems.append("data.yaml has a 'path' key; split folders must resolve against the yaml itself")
    for split in [s for s in ("train", "val", "test") if s in data]:
        coco = json.loads(out.read_text(f"annotations/instances_{split}.json"))
        by_image: dict[int, list[dict]] = {}
        for ann in coco["annotations"]:
            by_image.setdefault(ann["image_id"], []).append(ann)
        for image in coco["images"]:
            jpg = f"{data[split]}/{image['file_name']}"
            if _decoded_size(out, jpg) != (image["height"], image["width"]):
                problems.append(f"{out.url(jpg)}: missing, unreadable or not {image['width']}x{image['height']}")
            rail = mask_utils.decode(dict(image["rail_area"], counts=image["rail_area"]["counts"].encode("ascii")))
            if rail.shape != (image["height"], image["width"]) or not rail.any():
                problems.append(f"{out.url(jpg)}: rail_area missing or of the wrong size")
            expected = sorted(_check_annotation(a, image, rail, problems) for a in by_image.get(image["id"], []))
            label = f"labels/{split}/{PurePosixPath(image['file_name']).stem}.txt"
            found = sorted(out.read_text(label).splitlines()) if out.exists(label) else None
            if found != expected:
                problems.append(f"{out.url(label)}: YOLO lines {found} do not match the COCO masks {expected}")
    return problems

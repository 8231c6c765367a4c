"""Small real-format gallery folders for tests: a PennFudanPed folder and a COCO-format set."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

DOG = [[60, 150], [70, 110], [130, 100], [150, 70], [175, 75], [170, 105], [165, 150], [150, 150], [145, 120],
       [90, 125], [85, 150]]


def person_fixture(root: Path) -> Path:
    """A PennFudanPed folder: two pedestrians (instance ids 1, 2) in one image."""
    (root / "PNGImages").mkdir(parents=True)
    (root / "PedMasks").mkdir()
    image = np.random.default_rng(0).integers(60, 120, (240, 320, 3), dtype=np.uint8)
    mask = np.zeros((240, 320), np.uint8)
    for value, x in [(1, 60), (2, 200)]:
        cv2.ellipse(mask, (x, 120), (22, 70), 0, 0, 360, value, -1)
        image[mask == value] = (40 * value, 90, 200)
    cv2.imwrite(str(root / "PNGImages" / "FudanPed00001.png"), image)
    cv2.imwrite(str(root / "PedMasks" / "FudanPed00001_mask.png"), mask)
    return root


def coco_dogs(root: Path) -> Path:
    """Two images, one dog each, outlined by a polygon (the second one boxes only: the segmenter cuts it)."""
    (root / "images").mkdir(parents=True)
    images, annotations = [], []
    for k in (1, 2):
        image = np.random.default_rng(k).integers(150, 230, (240, 320, 3), dtype=np.uint8)
        cv2.fillPoly(image, [np.array(DOG, np.int32)], (40, 70, 110))
        cv2.imwrite(str(root / "images" / f"{k}.jpg"), image)
        images.append({"id": k, "file_name": f"{k}.jpg", "width": 320, "height": 240})
        ann = {"id": k, "image_id": k, "category_id": 18, "bbox": [60, 70, 115, 80], "area": 6000, "iscrowd": 0}
        if k == 1:
            ann["segmentation"] = [[float(v) for point in DOG for v in point]]
        annotations.append(ann)
    (root / "instances.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                                     "categories": [{"id": 18, "name": "dog"}]}))
    return root

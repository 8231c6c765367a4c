"""Masks as COCO compressed RLE (pycocotools), and the COCO instances document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils


def encode_rle(mask: np.ndarray) -> dict[str, Any]:
    """H x W bool mask -> {"size": [H, W], "counts": str} (JSON-ready compressed RLE)."""
    rle = mask_utils.encode(np.asfortranarray(mask, dtype=np.uint8))
    return {"size": [int(s) for s in rle["size"]], "counts": rle["counts"].decode("ascii")}


def decode_rle(rle: dict[str, Any]) -> np.ndarray:
    """A COCO RLE (counts as str or bytes) decoded to an H x W bool mask."""
    counts = rle["counts"]
    raw = {"size": list(rle["size"]), "counts": counts.encode("ascii") if isinstance(counts, str) else counts}
    return mask_utils.decode(raw).astype(bool)


def rle_box_and_area(rle: dict[str, Any]) -> tuple[list[int], int]:
    """Tight box [x, y, w, h] (pixels covered, so w = right - left + 1) and pixel count of an RLE."""
    raw = {"size": list(rle["size"]), "counts": rle["counts"].encode("ascii")}
    x, y, w, h = mask_utils.toBbox(raw).tolist()
    return [int(x), int(y), int(w), int(h)], int(mask_utils.area(raw))


def coco_document(images: Sequence[dict[str, Any]], annotations: Sequence[dict[str, Any]],
                  classes: Sequence[str], description: str) -> dict[str, Any]:
    """A COCO instances document; category ids are 1-based in ``classes`` order.

    Args:
        images: the COCO image entries.
        annotations: the COCO annotation entries.
        classes: the class names, in category order.
        description: the document's ``info.description``.

    Returns:
        The document, ready for ``json.dumps``.
    """
    return {
        "info": {"description": description, "version": "1.0"},
        "licenses": [],
        "categories": [{"id": i + 1, "name": name, "supercategory": "obstacle"} for i, name in enumerate(classes)],
        "images": list(images),
        "annotations": list(annotations),
    }

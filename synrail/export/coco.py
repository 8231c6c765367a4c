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


def window_runs(top: int, left: int, window: np.ndarray, image_shape: tuple[int, int]) -> list[int]:
    """The uncompressed COCO run lengths of a mask that is empty outside one window.

    Runs go down the columns (Fortran order), alternating zeros and ones, starting with zeros (a
    mask whose first pixel is set starts with an empty run); only the window's columns are scanned.

    Args:
        top: the window's first image row.
        left: the window's first image column.
        window: h x w bool, the mask inside the window, which lies wholly inside the image.
        image_shape: (height, width) of the whole mask.

    Returns:
        The run lengths, which sum to height * width.
    """
    height, width = image_shape
    strip = np.zeros((window.shape[1], height), dtype=bool)  # the window's columns, one per row
    strip[:, top:top + window.shape[0]] = window.T
    flat = strip.reshape(-1)
    starts = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    runs = np.diff(np.concatenate(([0], starts, [flat.size]))).tolist()
    if flat.size and flat[0]:
        runs.insert(0, 0)
    runs[0] += left * height  # the empty columns left of the window join the first run of zeros
    after = (width - left - window.shape[1]) * height
    if len(runs) % 2 == 0:  # the strip ends inside the mask: the empty columns after it are a new run
        runs.append(after)
    else:
        runs[-1] += after
    if len(runs) > 1 and runs[-1] == 0:
        runs.pop()
    return runs


def encode_window_rle(top: int, left: int, window: np.ndarray, image_shape: tuple[int, int]) -> dict[str, Any]:
    """``encode_rle`` of the whole-image mask that is ``window`` at (``top``, ``left``) and empty elsewhere,
    without building that mask (the same counts string).

    Args:
        top: the window's first image row.
        left: the window's first image column.
        window: h x w bool, the mask inside the window, which lies wholly inside the image.
        image_shape: (height, width) of the whole mask.

    Returns:
        {"size": [H, W], "counts": str}, as ``encode_rle`` gives.
    """
    height, width = image_shape
    rle = mask_utils.frPyObjects({"size": [height, width], "counts": window_runs(top, left, window, image_shape)},
                                 height, width)
    return {"size": [int(height), int(width)], "counts": rle["counts"].decode("ascii")}


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

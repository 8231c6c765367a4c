"""What every mask extractor offers: prompts in, masks with a quality score out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np


@dataclass(frozen=True)
class Prompt:
    """A box and/or points on one image, in pixels (x to the right, y down)."""

    box: tuple[float, float, float, float] | None = None  # x0, y0, x1, y1
    points: tuple[tuple[float, float], ...] = ()
    point_labels: tuple[int, ...] = ()  # 1 foreground, 0 background, one per point

    def __post_init__(self) -> None:
        if len(self.points) != len(self.point_labels):
            raise ValueError(f"{len(self.points)} points but {len(self.point_labels)} point labels")
        if self.box is None and not self.points:
            raise ValueError("a prompt needs a box or at least one point")

    def key(self) -> str:
        """Canonical text of the prompt, for cache keys."""
        box = None if self.box is None else [round(float(v), 2) for v in self.box]
        points = [[round(float(x), 2), round(float(y), 2)] for x, y in self.points]
        return json.dumps({"box": box, "points": points, "labels": list(self.point_labels)}, sort_keys=True)


@dataclass(frozen=True)
class MaskResult:
    """One extracted mask and the extractor's own quality estimate of it."""

    mask: np.ndarray  # H x W bool
    score: float  # the extractor's own quality estimate in [0, 1] (SAM: predicted IoU)


class Segmenter(Protocol):
    """Turns prompts on an image into masks; one call per image, all its prompts at once."""

    @property
    def identity(self) -> str:
        """Model and weights identity (e.g. 'sam/vit_h/<sha256 of the checkpoint>'); part of cache keys."""
        ...

    def segment(self, image_bgr: np.ndarray, prompts: Sequence[Prompt]) -> list[MaskResult]:
        """Masks for all of an image's prompts, in one call.

        Args:
            image_bgr: the image, BGR.
            prompts: the prompts on it (boxes and/or points).

        Returns:
            One mask with its score per prompt, in order.
        """
        ...


def postprocess_mask(mask: np.ndarray, min_area_px: int = 64) -> np.ndarray | None:
    """Largest connected component with its holes filled.

    Args:
        mask: H x W bool.
        min_area_px: the smallest component kept.

    Returns:
        H x W bool, or None when the largest component is smaller than ``min_area_px``.
    """
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if count <= 1:
        return None
    largest = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    if stats[largest, cv2.CC_STAT_AREA] < min_area_px:
        return None
    component = (labels == largest).astype(np.uint8)
    # holes = background regions not connected to the border: flood the border, keep the rest
    padded = np.pad(component, 1)
    flood = padded.copy()
    cv2.floodFill(flood, None, (0, 0), 1)
    holes = flood[1:-1, 1:-1] == 0
    return component.astype(bool) | holes


def as_bgr8(image: np.ndarray) -> np.ndarray:
    """cv2.grabCut wants 8-bit, 3-channel images; grey and BGRA inputs are converted."""
    if image.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {image.dtype}")
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    if image.ndim == 3 and image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    if image.ndim == 3 and image.shape[2] == 3:
        return np.ascontiguousarray(image)
    raise ValueError(f"expected an H x W (x 3|4) image, got shape {image.shape}")

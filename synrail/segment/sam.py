"""Segment Anything as a mask extractor, loaded from a user-given checkpoint (nothing is downloaded)."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import cv2
import numpy as np
import torch
from segment_anything import SamPredictor, sam_model_registry
from segment_anything.modeling import Sam

from synrail.segment.base import MaskResult, Prompt, as_bgr8, postprocess_mask

SamModelType = Literal["vit_b", "vit_l", "vit_h"]
HASH_CHUNK_BYTES = 1 << 20
MAX_ERROR_DETAIL_CHARS = 300


class CheckpointError(RuntimeError):
    """A SAM checkpoint that cannot be read, or that does not fit the model type."""


class SamSegmenter:
    """SAM over one image at a time: the image encoder runs once, prompts go through in batches."""

    def __init__(self, checkpoint: str | Path, model_type: SamModelType = "vit_h", device: str = "cpu",
                 batch_size: int = 16, min_area_px: int = 64) -> None:
        path = Path(checkpoint).expanduser()
        sam = load_sam_checkpoint(path, model_type)
        self._attach(sam.to(device), f"sam/{model_type}/{checkpoint_sha256(path)[:16]}", batch_size, min_area_px)

    @classmethod
    def from_model(cls, sam: Sam, identity: str, batch_size: int = 16, min_area_px: int = 64) -> SamSegmenter:
        """Wrap an already built model (tests, custom builds); it stays on the device it is on.

        Args:
            sam: the model.
            identity: its identity for cache keys.
            batch_size: prompts per forward pass.
            min_area_px: masks smaller than this count as failures.

        Returns:
            The segmenter.
        """
        segmenter = cls.__new__(cls)
        segmenter._attach(sam, identity, batch_size, min_area_px)
        return segmenter

    def _attach(self, sam: Sam, identity: str, batch_size: int, min_area_px: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._identity = identity
        self._predictor = SamPredictor(sam.eval())
        self.batch_size = batch_size
        self.min_area_px = min_area_px
        # the predictor holds the current image's features: threads sharing this object take turns
        self._lock = threading.Lock()

    @property
    def identity(self) -> str:
        """The model type and the checkpoint's sha256: what decides SAM's masks."""
        return self._identity

    def segment(self, image_bgr: np.ndarray, prompts: Sequence[Prompt]) -> list[MaskResult]:
        """SAM's best mask per prompt; prompts of one shape run as one batch on the image's features.

        Args:
            image_bgr: the image, BGR.
            prompts: the prompts on it (boxes and/or points).

        Returns:
            One mask with its score per prompt, in order.
        """
        if not prompts:
            return []
        rgb = bgr_to_rgb(image_bgr)
        results: list[MaskResult | None] = [None] * len(prompts)
        with self._lock:
            self._predictor.set_image(rgb, image_format="RGB")
            try:
                for indices in homogeneous_batches(prompts, self.batch_size):
                    masks, scores = self._predict_best([prompts[i] for i in indices], rgb.shape[:2])
                    for i, mask, score in zip(indices, masks, scores, strict=True):
                        results[i] = self._finish(mask, float(score))
            finally:
                self._predictor.reset_image()  # drop the features: they are big and belong to this image
        return results  # type: ignore[return-value]  # every index was filled

    def _predict_best(self, batch: Sequence[Prompt], image_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Masks (B x H x W bool) and predicted IoUs (B) of the best of SAM's three masks per prompt."""
        coords, labels, boxes = self._prompt_tensors(batch, image_size)
        masks, iou_predictions, _ = self._predictor.predict_torch(coords, labels, boxes, multimask_output=True)
        best = iou_predictions.argmax(dim=1)
        rows = torch.arange(len(batch), device=best.device)
        return masks[rows, best].cpu().numpy(), iou_predictions[rows, best].float().cpu().numpy()

    def _prompt_tensors(self, batch: Sequence[Prompt], image_size: tuple[int, int]
                        ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """Points, labels and boxes in the model's input frame (ResizeLongestSide), batch-first."""
        transform, device = self._predictor.transform, self._predictor.device
        coords = labels = boxes = None
        if batch[0].points:
            points = np.array([p.points for p in batch], dtype=np.float64)  # B x N x 2
            coords = torch.as_tensor(transform.apply_coords(points, image_size), dtype=torch.float, device=device)
            labels = torch.as_tensor(np.array([p.point_labels for p in batch]), dtype=torch.int, device=device)
        if batch[0].box is not None:
            xyxy = np.array([p.box for p in batch], dtype=np.float64)  # B x 4
            boxes = torch.as_tensor(transform.apply_boxes(xyxy, image_size), dtype=torch.float, device=device)
        return coords, labels, boxes

    def _finish(self, mask: np.ndarray, score: float) -> MaskResult:
        cleaned = postprocess_mask(mask, self.min_area_px)
        if cleaned is None:
            return MaskResult(np.zeros(mask.shape, bool), 0.0)
        return MaskResult(cleaned, min(1.0, max(0.0, score)))  # predicted IoU is a regression: clip it


def bgr_to_rgb(image: np.ndarray) -> np.ndarray:
    """``image`` as 8-bit RGB, the input SAM expects."""
    return cv2.cvtColor(as_bgr8(image), cv2.COLOR_BGR2RGB)


def homogeneous_batches(prompts: Sequence[Prompt], batch_size: int) -> list[list[int]]:
    """Prompt indices grouped by (has a box, number of points), as SAM batches only same-shaped prompts.

    Args:
        prompts: the image's prompts.
        batch_size: the most prompts per batch.

    Returns:
        Lists of prompt indices, one per batch.
    """
    groups: dict[tuple[bool, int], list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault((prompt.box is not None, len(prompt.points)), []).append(i)
    return [indices[start:start + batch_size] for indices in groups.values()
            for start in range(0, len(indices), batch_size)]


def load_sam_checkpoint(path: Path, model_type: str) -> Sam:
    """Build ``model_type`` from segment-anything's registry with the weights at ``path``.

    Args:
        path: the checkpoint file.
        model_type: a key of segment-anything's ``sam_model_registry``.

    Returns:
        The model, on the CPU.

    Raises:
        ValueError: unknown model type.
        FileNotFoundError: no file at ``path``.
        CheckpointError: the file is not a checkpoint of ``model_type``.
    """
    if model_type not in sam_model_registry:
        known = ", ".join(sorted(sam_model_registry))
        raise ValueError(f"unknown SAM model type {model_type!r} (known: {known})")
    if not path.is_file():
        raise FileNotFoundError(f"SAM checkpoint not found: {path}")
    try:
        return sam_model_registry[model_type](checkpoint=str(path))
    except Exception as exc:  # unpickling errors, missing keys, size mismatches: all mean a wrong file
        detail = " ".join(str(exc).split()) or type(exc).__name__  # state-dict errors span many lines
        raise CheckpointError(f"cannot load SAM checkpoint {path} as {model_type!r}: "
                              f"{detail[:MAX_ERROR_DETAIL_CHARS]}") from exc


def checkpoint_sha256(path: Path) -> str:
    """The checkpoint's sha256, computed once per (path, size, mtime) in a process."""
    stat = path.stat()
    return _sha256_of_file(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256_of_file(path: str, size: int, mtime_ns: int) -> str:
    """Streamed sha256; size and mtime are in the cache key so a replaced file is hashed again."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()

"""Which segmenter a config asks for, built once per process. SAM's module (torch, segment-anything)
is imported only when SAM is chosen: the default build and every Dask or Ray worker then start
without torch (about 9 s of imports on a small machine)."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Literal

from synrail.segment.base import Segmenter
from synrail.segment.grabcut import GrabCutSegmenter


def resolve_backend(backend: str, checkpoint: str | None) -> Literal["sam", "grabcut"]:
    """The backend a config names, with ``auto`` resolved: SAM when a checkpoint is given, else GrabCut.

    Args:
        backend: "auto", "sam" or "grabcut".
        checkpoint: the SAM checkpoint path, if any.

    Returns:
        "sam" or "grabcut".

    Raises:
        ValueError: an unknown backend, or "sam" without a checkpoint.
    """
    if backend == "auto":
        return "sam" if checkpoint else "grabcut"
    if backend == "sam" and not checkpoint:
        raise ValueError("the 'sam' segmenter backend needs a checkpoint path")
    if backend not in ("sam", "grabcut"):
        raise ValueError(f"unknown segmenter backend {backend!r} (expected 'auto', 'sam' or 'grabcut')")
    return backend  # type: ignore[return-value]


_load_lock = threading.Lock()


def load_segmenter(backend: str, checkpoint: str | None, model_type: str = "vit_h", device: str = "cpu") -> Segmenter:
    """The segmenter for these settings, built once per process (a model loads once per worker).

    Args:
        backend: "auto", "sam" or "grabcut".
        checkpoint: the SAM checkpoint path, if any.
        model_type: SAM's model type (vit_h, vit_l, vit_b).
        device: the torch device for SAM.

    Returns:
        The segmenter.

    Raises:
        ValueError: an unknown backend or model type, or "sam" without a checkpoint.
    """
    chosen = resolve_backend(backend, checkpoint)
    if chosen == "grabcut":
        return _cached_segmenter("grabcut", None, "", "")
    resolved = str(Path(checkpoint).expanduser().resolve())  # type: ignore[arg-type]  # checked above
    with _load_lock:  # threads asking at once must not load the same model twice
        return _cached_segmenter("sam", resolved, model_type, device)


@functools.lru_cache(maxsize=4)
def _cached_segmenter(backend: str, checkpoint: str | None, model_type: str, device: str) -> Segmenter:
    if backend == "grabcut":
        return GrabCutSegmenter()
    from synrail.segment.sam import SamSegmenter

    return SamSegmenter(checkpoint, model_type, device)  # type: ignore[arg-type]

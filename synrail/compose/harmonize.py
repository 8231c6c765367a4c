"""Classical harmonization: move a pasted object's colour statistics toward its surroundings.

Colour-statistics transfer in CIE Lab (Reinhard et al. 2001), done partially and locally: the
target statistics come from a ring of background around the paste site, the object keeps most of
its own contrast and colour, and only its luminance level, contrast and colour cast shift toward
the ring's by ``strength``. A full transfer would paint every obstacle the colour of the ballast.
"""

from __future__ import annotations

import cv2
import numpy as np

_EPS = 1e-3
_CHROMA_SHARE = 0.5  # colour cast moves half as far as luminance: objects keep their own colour
_CONTRAST_LIMITS = (0.7, 1.4)
_RING_SAMPLES = 2048


def _lab(pixels_bgr: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(pixels_bgr.reshape(-1, 1, 3).astype(np.float32) / 255.0, cv2.COLOR_BGR2Lab).reshape(-1, 3)


def _mean_std(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = cv2.meanStdDev(pixels.reshape(-1, 1, 3))  # one pass in C; numpy makes two
    return mean.ravel().astype(np.float32), std.ravel().astype(np.float32) + _EPS


def harmonize_lab(object_bgr: np.ndarray, object_mask: np.ndarray, ring_bgr: np.ndarray,
                  strength: float) -> np.ndarray:
    """Return ``object_bgr`` (h x w x 3 uint8) with its masked pixels harmonized to ``ring_bgr`` (N x 3)."""
    if strength <= 0 or ring_bgr.shape[0] < 8 or not object_mask.any():
        return object_bgr
    obj = _lab(object_bgr[object_mask])
    ring = _lab(ring_bgr[::max(1, len(ring_bgr) // _RING_SAMPLES)])  # statistics need no more pixels
    obj_mean, obj_std = _mean_std(obj)
    ring_mean, ring_std = _mean_std(ring)
    share = np.array([1.0, _CHROMA_SHARE, _CHROMA_SHARE], dtype=np.float32) * strength
    contrast = np.clip((ring_std[0] / obj_std[0]) ** share[0], *_CONTRAST_LIMITS)
    scale = np.array([contrast, 1.0, 1.0], dtype=np.float32)
    shifted = (obj - obj_mean) * scale + obj_mean + share * (ring_mean - obj_mean)
    shifted[:, 0] = np.clip(shifted[:, 0], 0.0, 100.0)
    bgr = cv2.cvtColor(shifted.reshape(-1, 1, 3), cv2.COLOR_Lab2BGR).reshape(-1, 3)
    out = object_bgr.copy()
    out[object_mask] = np.clip(bgr * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return out


def ring_pixels(canvas_bgr: np.ndarray, mask: np.ndarray, width_px: int) -> np.ndarray:
    """Background pixels within ``width_px`` of ``mask`` (both the same size), as N x 3."""
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * width_px + 1, 2 * width_px + 1))  # separable: fast
    ring = cv2.dilate(mask.astype(np.uint8), kernel).astype(bool) & ~mask
    return canvas_bgr[ring]

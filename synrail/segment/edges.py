"""Clean cutout edges: an alpha that follows the photo's own edges (a guided filter, written with
cv2.boxFilter since headless OpenCV has no ximgproc) and edge colours taken from the object, not from
the background it was photographed on.

A mask from an annotation or a segmenter is a pixel staircase; pasted larger it shows its steps, and
its outermost pixels mix the object with the source background (a halo on the new one). ``edge_alpha``
replaces the mask by a guided-filtered alpha in a narrow band around its boundary (the steps become
sub-pixel ramps that follow the image's edges; elsewhere the mask is kept as it is), and
``decontaminate`` gives the band's pixels the colour of the object's interior next to them.
"""

from __future__ import annotations

import cv2
import numpy as np

EDGE_RADIUS_PX = 2  # the guided filter's window radius and the band's half-width
EDGE_EPS = 1e-3  # the guided filter's regulariser (grey levels in [0, 1]): edges weaker than ~0.03 are smoothed
OFF_MASK_MAX = 0.49  # the most alpha off the mask: 8-bit alpha there stays under 128
COLOUR_RADIUS_PX = 4  # how far inside the mask the band's colours are taken from


def guided_filter(guide: np.ndarray, source: np.ndarray, radius: int, eps: float) -> np.ndarray:
    """He et al.'s guided filter with a grey guide: ``source`` smoothed, keeping the guide's edges.

    Args:
        guide: H x W float32 guide image (grey levels in [0, 1]).
        source: H x W float32 image filtered (here a 0/1 mask).
        radius: the box window's radius in pixels.
        eps: the regulariser; larger smooths across weaker edges.

    Returns:
        H x W float32, the filtered ``source``.
    """
    size = (2 * radius + 1, 2 * radius + 1)

    def mean(x: np.ndarray) -> np.ndarray:
        return cv2.boxFilter(x, -1, size, borderType=cv2.BORDER_REFLECT)

    mean_guide, mean_source = mean(guide), mean(source)
    variance = mean(guide * guide) - mean_guide * mean_guide
    a = (mean(guide * source) - mean_guide * mean_source) / (variance + eps)
    b = mean_source - a * mean_guide
    return mean(a) * guide + mean(b)


def _crop_around(mask: np.ndarray, pad: int) -> tuple[slice, slice]:
    ys, xs = np.nonzero(mask)
    height, width = mask.shape
    return (slice(max(0, int(ys.min()) - pad), min(height, int(ys.max()) + 1 + pad)),
            slice(max(0, int(xs.min()) - pad), min(width, int(xs.max()) + 1 + pad)))


def _band(mask: np.ndarray, radius: int) -> np.ndarray:
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    m = mask.astype(np.uint8)
    return (cv2.dilate(m, kernel) > 0) & ~(cv2.erode(m, kernel) > 0)


def edge_alpha(image_bgr: np.ndarray, mask: np.ndarray, radius: int = EDGE_RADIUS_PX,
               eps: float = EDGE_EPS) -> np.ndarray:
    """The mask as an alpha whose boundary follows the image: guided-filtered within ``radius`` of the
    mask's edge, the mask itself elsewhere. The alpha keeps the mask's decision: it is at least 0.5 on
    the mask and under 0.5 off it, so thresholding it at 0.5 (as composition does) gives the mask back
    at this resolution, while a resize sees the sub-pixel edge instead of the pixel staircase.

    Args:
        image_bgr: H x W x 3 uint8 image the mask was cut from.
        mask: H x W bool mask (not empty).
        radius: the filter's radius and the band's half-width, in pixels.
        eps: the guided filter's regulariser.

    Returns:
        H x W float32 alpha in [0, 1]; zero farther than ``radius`` outside the mask.

    Raises:
        ValueError: when the mask and the image differ in size.
    """
    mask = np.asarray(mask, bool)
    if mask.shape != image_bgr.shape[:2]:
        raise ValueError(f"mask {mask.shape} and image {image_bgr.shape[:2]} differ in size")
    alpha = mask.astype(np.float32)
    if not mask.any() or radius < 1:
        return alpha
    rows, cols = _crop_around(mask, 3 * radius + 2)
    grey = cv2.cvtColor(np.ascontiguousarray(image_bgr[rows, cols, :3]), cv2.COLOR_BGR2GRAY).astype(np.float32) / 255
    hard = alpha[rows, cols]
    soft = np.clip(guided_filter(grey, hard, radius, eps), 0.0, 1.0)
    inside = mask[rows, cols]
    soft = np.where(inside, np.maximum(soft, 0.5), np.minimum(soft, OFF_MASK_MAX))
    band = _band(inside, radius)
    hard[band] = soft[band]
    return alpha


def decontaminate(image_bgr: np.ndarray, mask: np.ndarray, alpha: np.ndarray,
                  radius: int = COLOUR_RADIUS_PX) -> np.ndarray:
    """The image with the colours of the alpha's soft edge (and the mask's outermost pixel) replaced by
    the mean colour of the object's interior within ``radius``: no source background on the edge.

    Args:
        image_bgr: H x W x 3 uint8 image.
        mask: H x W bool mask the alpha was made from.
        alpha: H x W float alpha (``edge_alpha``).
        radius: the window the interior colours are averaged over.

    Returns:
        H x W x 3 uint8: ``image_bgr`` with the edge's colours replaced where the interior is near.
    """
    mask = np.asarray(mask, bool)
    out = np.array(image_bgr[:, :, :3], copy=True)
    if not mask.any():
        return out
    rows, cols = _crop_around(mask, 2 * radius + 2)
    m = mask[rows, cols].astype(np.uint8)
    interior = cv2.erode(m, np.ones((3, 3), np.uint8)).astype(np.float32)  # pixels with no background next to them
    edge = (alpha[rows, cols] > 0) & ((alpha[rows, cols] < 1) | ((m > 0) & (interior == 0)))
    size = (2 * radius + 1, 2 * radius + 1)
    weight = cv2.boxFilter(interior, -1, size, normalize=False, borderType=cv2.BORDER_CONSTANT)
    crop = out[rows, cols].astype(np.float32)
    summed = cv2.boxFilter(crop * interior[..., None], -1, size, normalize=False, borderType=cv2.BORDER_CONSTANT)
    usable = edge & (weight > 0.5)
    crop[usable] = summed[usable] / weight[usable][:, None]
    out[rows, cols] = np.clip(np.rint(crop), 0, 255).astype(np.uint8)
    return out

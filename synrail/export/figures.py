"""Pictures of the track area: a frame with the area found on it drawn, or the reason it was refused
written on it, and a strip of such tiles. Used by the preflight report (``synrail inspect``) and the
dataset card's strip of real backgrounds."""

from __future__ import annotations

import base64
import textwrap
from collections.abc import Sequence

import cv2
import numpy as np

AREA_BGR = (60, 220, 60)  # the track area: fill and outline
REFUSED_BGR = (40, 40, 230)  # the border of a refused frame
TILE_WIDTH = 480  # pixels of one frame in a report or on the card


def fit_width(image: np.ndarray, width: int = TILE_WIDTH) -> np.ndarray:
    """``image`` scaled to ``width`` columns (area interpolation when shrinking).

    Args:
        image: an OpenCV image (BGR, BGRA or grey).
        width: the width wanted, in pixels.

    Returns:
        The scaled image; the input itself when it is that wide already.
    """
    if image.shape[1] == width:
        return image
    height = max(1, round(image.shape[0] * width / image.shape[1]))
    interpolation = cv2.INTER_AREA if image.shape[1] > width else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interpolation)


def _bgr(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    return image[:, :, :3].copy() if image.shape[2] == 4 else image.copy()


def _label(image: np.ndarray, lines: Sequence[str], top: int = 0) -> None:
    """White text with a dark outline, one line under the other, from ``top`` (in place)."""
    scale = max(0.4, image.shape[1] / 900)
    step = int(26 * scale) + 4
    for k, line in enumerate(lines):
        origin = (8, top + step * (k + 1))
        cv2.putText(image, line, origin, cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 3, cv2.LINE_AA)
        cv2.putText(image, line, origin, cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1, cv2.LINE_AA)


def draw_track_area(image: np.ndarray, mask: np.ndarray, caption: str = "", width: int = TILE_WIDTH) -> np.ndarray:
    """The frame with its track area filled half-transparent and outlined, at ``width`` columns.

    Args:
        image: the frame (BGR or grey), the mask's size.
        mask: H x W bool, the track area.
        caption: a line written in the top-left corner; empty for none.
        width: the tile's width, in pixels.

    Returns:
        The BGR tile.
    """
    tile = _bgr(image)
    area = mask.astype(bool)
    tile[area] = (0.55 * tile[area] + 0.45 * np.array(AREA_BGR)).astype(np.uint8)
    tile = fit_width(tile, width)
    small = fit_width(area.astype(np.uint8) * 255, width) > 127
    contours, _ = cv2.findContours(small.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(tile, contours, -1, AREA_BGR, 2, cv2.LINE_AA)
    if caption:
        _label(tile, [caption])
    return tile


def draw_refusal(image: np.ndarray, reason: str, width: int = TILE_WIDTH) -> np.ndarray:
    """The frame darkened, framed in red, with the reason it was refused written across it.

    Args:
        image: the frame (BGR or grey).
        reason: why no track area is drawn.
        width: the tile's width, in pixels.

    Returns:
        The BGR tile.
    """
    tile = (fit_width(_bgr(image), width) * 0.5).astype(np.uint8)
    cv2.rectangle(tile, (0, 0), (tile.shape[1] - 1, tile.shape[0] - 1), REFUSED_BGR, 4)
    characters = max(16, int(tile.shape[1] / max(0.4, tile.shape[1] / 900) / 19))
    _label(tile, ["refused:", *textwrap.wrap(reason, characters)[:6]])
    return tile


def strip(tiles: Sequence[np.ndarray], gap: int = 6) -> np.ndarray:
    """Tiles of one width side by side on a white ground, top-aligned.

    Args:
        tiles: BGR images.
        gap: white pixels between them.

    Returns:
        The BGR strip (a 1 x 1 white image for no tiles).
    """
    if not tiles:
        return np.full((1, 1, 3), 255, np.uint8)
    height = max(t.shape[0] for t in tiles)
    width = sum(t.shape[1] for t in tiles) + gap * (len(tiles) - 1)
    canvas = np.full((height, width, 3), 255, np.uint8)
    x = 0
    for tile in tiles:
        canvas[:tile.shape[0], x:x + tile.shape[1]] = tile
        x += tile.shape[1] + gap
    return canvas


def data_uri(image: np.ndarray, ext: str = ".jpg", quality: int = 82) -> str:
    """An image as a ``data:`` URI, to inline it in a page.

    Args:
        image: an OpenCV image; BGRA keeps its alpha only as ``.png``.
        ext: ".jpg" or ".png".
        quality: the JPEG quality.

    Returns:
        ``data:image/jpeg;base64,...`` or ``data:image/png;base64,...``.

    Raises:
        ValueError: OpenCV could not encode it.
    """
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if ext == ".jpg" else []
    ok, buffer = cv2.imencode(ext, image, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image.shape} image as {ext}")
    kind = "jpeg" if ext == ".jpg" else "png"
    return f"data:image/{kind};base64,{base64.b64encode(buffer.tobytes()).decode('ascii')}"


def track_area_strip(backgrounds: Sequence, read_image, count: int = 4, width: int = TILE_WIDTH // 2
                     ) -> np.ndarray | None:
    """A few backgrounds from real footage with their stored track area drawn (the dataset card's strip).

    Args:
        backgrounds: background records (``BackgroundRecord``: ``source``, ``path``, ``rail_area``);
            only those from footage (``video:...``, ``frames:...``) are drawn.
        read_image: a record's ``path`` -> its BGR image (the build's cache).
        count: the most frames drawn, spread over the records in their order.
        width: each tile's width, in pixels.

    Returns:
        The strip, or None when no background comes from footage.
    """
    from synrail.export.coco import decode_rle

    real = [b for b in backgrounds if b.source.startswith(("video:", "frames:"))]
    if not real:
        return None
    chosen = real if len(real) <= count else [real[round(k * (len(real) - 1) / (count - 1))] for k in range(count)]
    return strip([draw_track_area(read_image(b.path), decode_rle(b.rail_area).astype(bool),
                                  f"{b.source.split(':', 1)[1]} #{b.frame_index}", width) for b in chosen])

"""PNG figures beside the dataset card: class, distance and condition histograms, a sample grid."""

from __future__ import annotations

import base64
import io
from collections import Counter
from collections.abc import Sequence

import cv2
import numpy as np

from synrail.export.card import DISTANCE_BINS_M, distance_bucket
from synrail.records import ImageRow, ManifestAnnotationRow
from synrail.storage.store import Store

GRID_IMAGES = 6
GRID_TILE_WIDTH = 480


def _bar_chart(counts: dict[str, int], title: str) -> bytes:
    import matplotlib  # imported here: only the export needs it

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3), dpi=100)
    axes.bar(list(counts), list(counts.values()), color="#3b6ea5")
    axes.set_title(title)
    axes.tick_params(axis="x", labelrotation=30)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})  # no version stamp: equal builds, equal bytes
    plt.close(figure)
    return buffer.getvalue()


def sample_grid(out: Store, images: Sequence[ImageRow], annotations: Sequence[ManifestAnnotationRow],
                classes: Sequence[str]) -> bytes:
    """The first images with obstacles, their boxes and class names drawn, as one PNG.

    Args:
        out: the dataset, which holds the images.
        images: the image rows, in order.
        annotations: the annotation rows, whose boxes are drawn.
        classes: the class names.

    Returns:
        The PNG's bytes: two tiles per row (one black tile when no image has an obstacle).
    """
    chosen = [i for i in images if i.num_annotations > 0][:GRID_IMAGES]
    tiles = []
    for image in chosen:
        pixels = cv2.imdecode(np.frombuffer(out.read_bytes(image.file_name), np.uint8), cv2.IMREAD_COLOR)
        for a in (a for a in annotations if a.image_index == image.image_index):
            x, y, w, h = a.bbox_x, a.bbox_y, a.bbox_w, a.bbox_h
            cv2.rectangle(pixels, (x, y), (x + w - 1, y + h - 1), (0, 0, 255), 2)
            cv2.putText(pixels, f"{a.class_name} {a.distance_m:.0f} m", (x, max(12, y - 4)),
                        cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 255), 1, cv2.LINE_AA)
        scale = GRID_TILE_WIDTH / pixels.shape[1]
        tiles.append(cv2.resize(pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA))
    if not tiles:
        tiles = [np.zeros((270, GRID_TILE_WIDTH, 3), np.uint8)]
    while len(tiles) % 2:
        tiles.append(np.zeros_like(tiles[0]))
    grid = np.vstack([np.hstack(tiles[i:i + 2]) for i in range(0, len(tiles), 2)])
    ok, png = cv2.imencode(".png", grid)
    return png.tobytes()


def preview_data_uri(image_bytes: bytes, max_width: int = 960, quality: int = 75) -> str:
    """An encoded image as a ``data:image/jpeg;base64,...`` URI, at most ``max_width`` pixels wide: a
    page (the Prefect UI's markdown artifacts) shows it with no file server, for local and S3 outputs.

    Args:
        image_bytes: a PNG or JPEG file's bytes (the sample grid).
        max_width: the preview's width limit in pixels; larger images are shrunk.
        quality: the preview's JPEG quality.

    Returns:
        The data URI.
    """
    pixels = cv2.imdecode(np.frombuffer(image_bytes, np.uint8), cv2.IMREAD_COLOR)
    if pixels is None:
        raise ValueError("not a decodable image")
    if pixels.shape[1] > max_width:
        scale = max_width / pixels.shape[1]
        pixels = cv2.resize(pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    ok, jpeg = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"OpenCV could not encode a {pixels.shape} preview")
    return "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode("ascii")


def write_card_figures(out: Store, images: Sequence[ImageRow], annotations: Sequence[ManifestAnnotationRow],
                       classes: Sequence[str]) -> list[str]:
    """Write the figures under ``card/``: class, distance and condition histograms and a sample grid.

    Args:
        out: the dataset.
        images: the image rows.
        annotations: the annotation rows.
        classes: the class names, in the order they are plotted.

    Returns:
        The figures' paths in ``out`` (for the card's links).
    """
    per_class = Counter(a.class_name for a in annotations)
    distances = Counter(distance_bucket(a.distance_m) for a in annotations)
    conditions = Counter(i.condition for i in images)
    figures = {
        "card/classes.png": _bar_chart({c: per_class[c] for c in classes}, "obstacles per class"),
        "card/distances.png": _bar_chart({distance_bucket(b): distances[distance_bucket(b)] for b in DISTANCE_BINS_M},
                                         "obstacles per distance"),
        "card/conditions.png": _bar_chart(dict(sorted(conditions.items())), "images per condition"),
        "card/samples.png": sample_grid(out, images, annotations, classes),
    }
    for path, data in figures.items():
        out.write_bytes(path, data)
    return list(figures)

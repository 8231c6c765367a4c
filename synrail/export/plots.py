"""Figures beside the dataset card: class, distance and condition histograms, a sample grid (PNG), and an
animated preview of the approach clips (GIF)."""

from __future__ import annotations

import base64
import io
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np

from synrail.export.card import DISTANCE_BINS_M, distance_bucket
from synrail.records import ClipAnnotationRow, ClipImageRow, ImageRow, ManifestAnnotationRow
from synrail.storage.store import Store

if TYPE_CHECKING:
    from PIL import Image

GRID_IMAGES = 6
GRID_TILE_WIDTH = 480
# The clip preview stays small (a card figure, not a video): a few clips side by side, downscaled,
# at a few frames per second, for at most a few seconds.
PREVIEW_CLIPS = 3
PREVIEW_TILE_WIDTH = 240
PREVIEW_FPS = 5.0
PREVIEW_MAX_FRAMES = 20
PREVIEW_COLOURS = 32  # GIF palette size: 64 makes the file ~1.5x larger
TRACK_COLOURS_BGR = ((0, 0, 255), (0, 200, 255), (255, 128, 0), (255, 0, 255), (0, 255, 0), (255, 255, 0))
LABEL_COLOURS_BGR = (*TRACK_COLOURS_BGR, (255, 255, 255))  # the tracks', then the frame name's


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


def preview_clip_ids(images: Sequence[ClipImageRow]) -> list[str]:
    """The clips the preview shows: the first ``PREVIEW_CLIPS`` with an obstacle in some frame, else the first ones."""
    order = list(dict.fromkeys(i.clip_id for i in images))
    with_obstacles = list(dict.fromkeys(i.clip_id for i in images if i.num_annotations > 0))
    return (with_obstacles + [c for c in order if c not in with_obstacles])[:PREVIEW_CLIPS]


def preview_frame_numbers(frames: int, fps: float) -> list[int]:
    """The frames shown: one every ``fps / PREVIEW_FPS`` (every frame of a slower clip), at most
    ``PREVIEW_MAX_FRAMES``.

    Args:
        frames: the clip's frame count.
        fps: its frame rate.

    Returns:
        The ``frame_in_clip`` values shown, in order.
    """
    stride = max(1, round(fps / PREVIEW_FPS))
    return list(range(0, frames, stride))[:PREVIEW_MAX_FRAMES]


def _preview_tile(out: Store, image: ClipImageRow, boxes: Sequence[ClipAnnotationRow]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """One clip frame, downscaled, and its label layer: each track's box and id, and the frame's name,
    as 1-based indices into ``LABEL_COLOURS_BGR`` (0: the scene shows through).

    The labels stay apart from the picture so the GIF palette cannot merge them into the scene's
    colours (a red box on a dark frame would vanish)."""
    pixels = cv2.imdecode(np.frombuffer(out.read_bytes(image.file_name), np.uint8), cv2.IMREAD_COLOR)
    scale = PREVIEW_TILE_WIDTH / pixels.shape[1]
    tile = cv2.resize(pixels, (PREVIEW_TILE_WIDTH, round(pixels.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    labels = np.zeros(tile.shape[:2], np.uint8)
    # each label is inked on a blank layer first: OpenCV's small text is always anti-aliased, and its
    # faint edge pixels are kept too, which keeps tiny glyphs legible
    for a in boxes:  # drawn after downscaling, so lines and text stay sharp
        layer = np.zeros_like(labels)
        x1, y1 = round(a.bbox_x * scale), round(a.bbox_y * scale)
        x2, y2 = round((a.bbox_x + a.bbox_w) * scale) - 1, round((a.bbox_y + a.bbox_h) * scale) - 1
        cv2.rectangle(layer, (x1, y1), (max(x1, x2), max(y1, y2)), 255, 1)
        cv2.putText(layer, f"id {a.track_id} {a.distance_m:.0f} m", (x1, max(9, y1 - 3)), cv2.FONT_HERSHEY_SIMPLEX,
                    0.3, 255, 1)
        labels[layer > 64] = 1 + a.track_id % len(TRACK_COLOURS_BGR)
    layer = np.zeros_like(labels)
    cv2.putText(layer, f"{image.clip_id} f{image.frame_in_clip}", (3, 10), cv2.FONT_HERSHEY_SIMPLEX, 0.3, 255, 1)
    labels[layer > 64] = len(LABEL_COLOURS_BGR)
    return tile, labels


def _palette_frame(picture_bgr: np.ndarray, labels: np.ndarray) -> Image.Image:
    """A GIF frame: the picture quantized to the palette's free entries, the labels in their reserved ones."""
    from PIL import Image

    rgb = cv2.cvtColor(picture_bgr, cv2.COLOR_BGR2RGB)
    free = PREVIEW_COLOURS - len(LABEL_COLOURS_BGR)
    scene = Image.fromarray(rgb).quantize(free, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    indices = np.asarray(scene).copy()
    indices[labels > 0] = free + labels[labels > 0] - 1
    palette = (scene.getpalette() or [])[:3 * free]
    palette += [0] * (3 * free - len(palette))
    palette += [channel for b, g, r in LABEL_COLOURS_BGR for channel in (r, g, b)]
    frame = Image.fromarray(indices, mode="P")
    frame.putpalette(palette)
    return frame


def clip_preview_gif(out: Store, images: Sequence[ClipImageRow], annotations: Sequence[ClipAnnotationRow],
                     fps: float) -> bytes:
    """An animated GIF of a few clips side by side, boxes and track ids drawn, looping.

    The same frames and labels give the same bytes (a fixed palette size, no dithering, no timestamps).

    Args:
        out: the dataset, which holds the clip frames.
        images: the clip frame rows.
        annotations: the clip annotation rows, whose boxes are drawn.
        fps: the clips' frame rate (every clip of a build has it).

    Returns:
        The GIF's bytes; a clip shorter than the others holds its last frame.
    """
    chosen = preview_clip_ids(images)
    frames = {c: sorted((i for i in images if i.clip_id == c), key=lambda i: i.frame_in_clip) for c in chosen}
    boxes: dict[tuple[str, int], list[ClipAnnotationRow]] = {}
    for a in annotations:
        boxes.setdefault((a.clip_id, a.frame_in_clip), []).append(a)
    shown = preview_frame_numbers(max(len(f) for f in frames.values()), fps)
    pictures = []
    for number in shown:
        tiles = []
        for clip in chosen:
            image = frames[clip][min(number, len(frames[clip]) - 1)]
            tiles.append(_preview_tile(out, image, boxes.get((clip, image.frame_in_clip), [])))
        pictures.append(_palette_frame(np.hstack([t for t, _ in tiles]), np.hstack([m for _, m in tiles])))
    buffer = io.BytesIO()
    pictures[0].save(buffer, format="GIF", save_all=True, append_images=pictures[1:], loop=0,
                     duration=round(1000 / PREVIEW_FPS), optimize=False)
    return buffer.getvalue()

"""Views for labelling a frame's ego rails by eye, in the frame's own pixel coordinates.

    python benchmarks/real/label_tool.py grid FRAME [--out DIR]              the whole frame, a grid every 100 px
    python benchmarks/real/label_tool.py zoom FRAME X0 Y0 X1 Y1 [--out DIR]  a region enlarged, a grid every 20 px
    python benchmarks/real/label_tool.py show FRAME LABELS.json [--out DIR]  the frame's label drawn on it

Each writes PNGs to look at (``DIR``, by default the current folder): read the rails' columns off
the grid, write them into a labels file in ``labels.json``'s format (``{"name": {"left": [[x, y],
...], "right": [[x, y], ...]}}`` from the bottom of the frame up, on the rail heads' centres, or
``null`` where no ego track is visible), and check them with ``show``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np

GRID_COLOUR = (0, 255, 255)
FAINT_COLOUR = (0, 170, 170)
RAIL_COLOURS = {"left": (0, 0, 255), "right": (255, 0, 0)}


def gridded(image: np.ndarray, origin: tuple[int, int], step: int, label_step: int, scale: float) -> np.ndarray:
    """``image`` (a region whose top-left pixel is ``origin`` in the frame) scaled by ``scale``, with a
    grid line every ``step`` frame pixels and the frame coordinate written every ``label_step``."""
    x0, y0 = origin
    out = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
    lines = out.copy()
    height, width = out.shape[:2]
    for value in range(-(-x0 // step) * step, x0 + int(width / scale) + 1, step):
        at = int(round((value - x0) * scale))
        cv2.line(lines, (at, 0), (at, height - 1), GRID_COLOUR if value % label_step == 0 else FAINT_COLOUR, 1)
        if value % label_step == 0:
            cv2.putText(out, str(value), (at + 2, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45, GRID_COLOUR, 1)
    for value in range(-(-y0 // step) * step, y0 + int(height / scale) + 1, step):
        at = int(round((value - y0) * scale))
        cv2.line(lines, (0, at), (width - 1, at), GRID_COLOUR if value % label_step == 0 else FAINT_COLOUR, 1)
        if value % label_step == 0:
            cv2.putText(out, str(value), (2, at - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, GRID_COLOUR, 1)
    return cv2.addWeighted(lines, 0.45, out, 0.55, 0)


def whole_frame(image: np.ndarray) -> np.ndarray:
    """The frame at most 1280 px wide, a grid every 100 frame pixels."""
    return gridded(image, (0, 0), 100, 100, min(1.0, 1280 / image.shape[1]))


def region(image: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """The box (x0, y0, x1, y1, clipped to the frame) enlarged up to 4x, a grid every 20 px."""
    x0, y0 = max(0, box[0]), max(0, box[1])
    x1, y1 = min(image.shape[1], box[2]), min(image.shape[0], box[3])
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"the box {box} holds no pixel of a {image.shape[1]}x{image.shape[0]} frame")
    crop = image[y0:y1, x0:x1]
    return gridded(crop, (x0, y0), 20, 100, min(1280 / crop.shape[1], 900 / crop.shape[0], 4.0))


def drawn_label(image: np.ndarray, label: dict | None) -> np.ndarray:
    """The frame with the label's left rail in red and right rail in blue (points as dots), or
    "null" written on it."""
    canvas = image.copy()
    if label is None:
        cv2.putText(canvas, "null", (40, 80), cv2.FONT_HERSHEY_SIMPLEX, 2, RAIL_COLOURS["left"], 4)
        return canvas
    for side, colour in RAIL_COLOURS.items():
        points = np.round(np.asarray(label[side], dtype=np.float64)).astype(np.int32)
        cv2.polylines(canvas, [points], False, colour, 2)
        for x, y in points:
            cv2.circle(canvas, (int(x), int(y)), 4, colour, -1)
    return canvas


def label_of(labels: dict, frame: Path) -> dict | None:
    """The frame's entry, under its file name (or its stem); KeyError when it has none."""
    for key in (frame.name, frame.stem):
        if key in labels:
            return labels[key]
    raise KeyError(f"{frame.name} has no label in the labels file")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("view", choices=["grid", "zoom", "show"])
    parser.add_argument("frame", type=Path)
    parser.add_argument("rest", nargs="*", help="zoom: X0 Y0 X1 Y1; show: LABELS.json")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    image = cv2.imread(str(args.frame), cv2.IMREAD_COLOR)
    if image is None:
        sys.exit(f"{args.frame}: not a readable image")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / args.frame.stem
    try:
        if args.view == "grid":
            cv2.imwrite(f"{stem}_grid.png", whole_frame(image))
        elif args.view == "zoom":
            cv2.imwrite(f"{stem}_zoom.png", region(image, tuple(int(v) for v in args.rest)))
        else:
            drawn = drawn_label(image, label_of(json.loads(Path(args.rest[0]).read_text()), args.frame))
            cv2.imwrite(f"{stem}_show.png", whole_frame(drawn))
    except (ValueError, KeyError, IndexError, TypeError, json.JSONDecodeError) as error:
        sys.exit(f"{args.frame}: {error}")


if __name__ == "__main__":
    main()

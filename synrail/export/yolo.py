"""Ultralytics detection labels and data.yaml."""

from __future__ import annotations

from collections.abc import Sequence

import yaml


def yolo_line(class_id: int, bbox: Sequence[int], width: int, height: int) -> str:
    """COCO box [x, y, w, h] in pixels -> 'class cx cy w h', normalised to the image size.

    Args:
        class_id: the 0-based class index.
        bbox: the COCO box in pixels.
        width: the image width.
        height: the image height.

    Returns:
        One label line, without newline.
    """
    x, y, w, h = bbox
    return f"{class_id} {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} {w / width:.6f} {h / height:.6f}"


def data_yaml(splits: Sequence[str], classes: Sequence[str]) -> str:
    """data.yaml with split folders relative to the yaml itself.

    No ``path:`` key on purpose: Ultralytics resolves a relative ``path`` against the current
    directory, but without one it uses the yaml's own folder, so the dataset works from anywhere
    and after it is moved.

    Args:
        splits: the splits, each an ``images/<split>`` folder.
        classes: the class names, in index order.

    Returns:
        The YAML text.
    """
    doc = {split: f"images/{split}" for split in splits}
    doc["nc"] = len(classes)
    doc["names"] = {i: name for i, name in enumerate(classes)}
    return yaml.safe_dump(doc, sort_keys=False)

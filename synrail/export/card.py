"""dataset_card.md: what is in a build, how it was made, with which software."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import yaml

DISTANCE_BINS_M = (0, 15, 30, 45, 60, 75)
CARD_PACKAGES = ("synrail", "numpy", "opencv-python-headless", "pycocotools", "pyarrow", "pydantic", "fsspec",
                 "prefect")


def package_versions(names: Sequence[str] = CARD_PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def distance_bucket(distance_m: float) -> str:
    for low, high in zip(DISTANCE_BINS_M, DISTANCE_BINS_M[1:]):
        if low <= distance_m < high:
            return f"{low}-{high} m"
    return f">= {DISTANCE_BINS_M[-1]} m"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _crosstab(counter: Counter, keys: Sequence[str], splits: Sequence[str], label: str) -> str:
    rows = [[k, *(counter[(k, s)] for s in splits), sum(counter[(k, s)] for s in splits)] for k in keys]
    return _table([label, *splits, "total"], rows)


def dataset_card(config: dict[str, Any], images: Sequence[dict[str, Any]], annotations: Sequence[dict[str, Any]],
                 backgrounds: Sequence[dict[str, Any]], classes: Sequence[str], splits: Sequence[str]) -> str:
    """Markdown card; deterministic (no times, no paths) so that equal builds have equal cards."""
    per_class = Counter((a["class_name"], a["split"]) for a in annotations)
    per_condition = Counter((i["condition"], i["split"]) for i in images)
    per_split_images = Counter(i["split"] for i in images)
    buckets = [distance_bucket(low) for low in DISTANCE_BINS_M]
    distances = Counter(distance_bucket(a["distance_m"]) for a in annotations)
    conditions = sorted({i["condition"] for i in images})
    empty = sum(1 for i in images if i["num_annotations"] == 0)
    return "\n\n".join([
        f"# Dataset card: {config['name']}",
        "Synthetic railway-obstacle detection data made by SynRail. The backgrounds and obstacles of this "
        "build are **procedural** (rendered scenes and drawn cutouts that stand in for cab videos and real "
        "galleries so the pipeline runs anywhere); they are not photographs.",
        f"- seed: {config['seed']}\n- images: {len(images)} ({empty} without obstacles)\n"
        f"- annotations: {len(annotations)}\n- backgrounds: {len(backgrounds)} "
        f"(each used by one split only)\n- image size: {config['image']['width']} x {config['image']['height']}",
        "## Images per split\n\n" + _table(["split", "images"], [[s, per_split_images[s]] for s in splits]),
        "## Obstacles per class and split\n\n" + _crosstab(per_class, classes, splits, "class"),
        "## Images per condition and split\n\n" + _crosstab(per_condition, conditions, splits, "condition"),
        "## Obstacle distance (camera to ground-contact point)\n\n"
        + _table(["distance", "obstacles"], [[b, distances[b]] for b in buckets]),
        "## Configuration\n\n```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```",
        "## Software\n\n" + _table(["package", "version"], sorted(package_versions().items())),
    ]) + "\n"

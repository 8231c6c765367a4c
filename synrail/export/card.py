"""dataset_card.md: what is in a build, how it was made, with which software."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import cv2
import numpy as np
import yaml

from synrail.records import GalleryRecord, ImageRow, ManifestAnnotationRow

DISTANCE_BINS_M = (0, 15, 30, 45, 60, 75)
SHEET_CUTOUTS = 24  # cutouts per class on the gallery's contact sheet, spread over the range of scores
SHEET_COLUMNS = 6
SHEET_TILE_PX = 160
SHEET_CAPTION_PX = 34
SHEET_GAP_PX = 6  # white between tiles, so that cutouts filling their tile stay apart
CARD_PACKAGES = ("synrail", "numpy", "opencv-python-headless", "pycocotools", "pyarrow", "pydantic", "fsspec",
                 "prefect")


def package_versions(names: Sequence[str] = CARD_PACKAGES) -> dict[str, str]:
    """The installed version of each package in ``names`` ("not installed" when missing), for the card."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def distance_bucket(distance_m: float) -> str:
    """The card's distance bin of ``distance_m``, as "low-high m" or ">= last m"."""
    for low, high in itertools.pairwise(DISTANCE_BINS_M):
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


def _origin_sentence(config: dict[str, Any]) -> str:
    procedural_backgrounds = config["backgrounds"]["source"] == "procedural"
    procedural_gallery = all(s["type"] == "procedural" for s in config["gallery"]["sources"])
    if procedural_backgrounds and procedural_gallery:
        return ("The backgrounds and obstacles of this build are **procedural** (rendered scenes and drawn "
                "cutouts that stand in for cab videos and real galleries so the pipeline runs anywhere); they "
                "are not photographs.")
    footage = {"procedural": "procedural scenes", "video": "frames of cab videos",
               "frames": "folders of cab frames"}[config["backgrounds"]["source"]]
    return (f"Backgrounds: {footage}; "
            f"obstacles: {', '.join(s['type'] for s in config['gallery']['sources'])}.")


def _quality_section(images: Sequence[ImageRow]) -> str:
    scores = [i.quality for i in images if i.quality is not None]
    if not scores:
        return "## Composite quality\n\nQuality control was off for this build."
    bins = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01)]
    rows = [[f"{low:.2f}-{min(high, 1.0):.2f}", sum(low <= q < high for q in scores)] for low, high in bins]
    redrawn = sum(1 for i in images if i.attempts > 1)
    return ("## Composite quality\n\n" + _table(["score", "images"], rows)
            + f"\n\n{redrawn} image(s) were redrawn at least once; mean score {sum(scores) / len(scores):.3f}.")


_URL_OR_PATH = re.compile(r"""\b[a-z][a-z0-9+.-]*://\S+|(?<![\w.])/[^\s:'"]+""")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def reason_group(reason: str) -> str:
    """A reason without what differs between files (URLs, paths, numbers), so that one line counts
    every file left out for the same reason."""
    text = _NUMBER.sub("N", _URL_OR_PATH.sub("", reason)).replace("''", "").replace('""', "")
    return re.sub(r"\s+([:,)])", r"\1", re.sub(r"\s{2,}", " ", text)).strip(" :") or reason


def left_out_rows(report: Any) -> list[list[Any]]:
    """(what, reason, count, an example) per reason: quarantined files, unused frames, skipped candidates."""
    items = ([("file quarantined", q.reason, q.url) for q in report.quarantine]
             + [("frame not used", f.reason, f"{f.video} frame {f.frame_index}") for f in report.unused_frames]
             + [("obstacle skipped", s.reason, s.instance_key) for s in report.skipped_obstacles])
    groups: dict[tuple[str, str], list[str]] = {}
    for kind, reason, example in items:
        groups.setdefault((kind, reason_group(reason)), []).append(example)
    return [[kind, reason, len(examples), f"`{examples[0]}`"]
            for (kind, reason), examples in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1]))]


def _inputs_section(backgrounds: Sequence[dict[str, Any]], report: Any) -> str:
    sources = Counter(b["source"].split(":")[0].split("/")[0] for b in backgrounds)
    lines = ["## Inputs", "", "Backgrounds by source: " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items()))]
    if report is not None:
        rows = left_out_rows(report)
        lines += ["", f"Inputs left out: {len(report.quarantine)} file(s) quarantined, {len(report.unused_frames)} "
                  f"frame(s) not used, {len(report.skipped_obstacles)} obstacle candidate(s) skipped; each one, "
                  "with its reason, is in manifest/quarantine.parquet, manifest/unused_frames.parquet and "
                  "manifest/skipped_obstacles.parquet."]
        if rows:
            lines += ["", _table(["left out", "reason", "count", "example"], rows)]
        lines += [""] + [f"- note: {note}" for note in report.notes] if report.notes else []
        if getattr(report, "cameras", None):
            lines += ["", _cameras_table(backgrounds, report)]
    return "\n".join(lines)


def _cameras_table(backgrounds: Sequence[dict[str, Any]], report: Any) -> str:
    """One row per video or frame sequence: its camera, and its frames used and left out by reason."""
    used = Counter(b["source"].split(":", 1)[1] for b in backgrounds if ":" in b["source"])
    rows = []
    for camera in report.cameras:
        left_out = Counter(f.reason.split(":")[0] for f in report.unused_frames if f.video == camera.sequence)
        sigma = f" ± {camera.hfov_sigma_deg:.1f}" if camera.hfov_sigma_deg is not None else ""
        given = " (given)" if camera.height_given else ""
        height = "-" if camera.height_m is None else f"{camera.height_m:.2f}{given}"
        rows.append([camera.sequence, f"{camera.hfov_deg:.1f}{sigma} ({camera.hfov_source})", height,
                     "-" if camera.pitch_deg is None else f"{camera.pitch_deg:.1f}", f"{camera.gauge_mm:g}",
                     used[camera.sequence], "; ".join(f"{k} {v}" for k, v in sorted(left_out.items())) or "none"])
    return ("Camera per sequence (hfov given, estimated from the sleepers, or the fallback; height and pitch "
            "shared by the frames):\n\n" + _table(["sequence", "hfov (deg)", "height (m)", "pitch (deg)",
                                                  "gauge (mm)", "frames used", "frames left out"], rows))


def source_category(source: str) -> str | None:
    """The source category a pasted obstacle's height belongs to (``coco:dog``, ``pennfudan``, ``rgba``);
    None for a drawn (procedural) cutout."""
    if source.startswith("procedural"):
        return None
    if source.startswith("diffusion:") or ":" not in source:
        return source.split(":", 1)[0]
    return source


def pasted_heights_section(annotations: Sequence[ManifestAnnotationRow]) -> str | None:
    """Pasted heights (m) per source category of the real cutouts; None when every cutout is drawn.

    Args:
        annotations: every annotation row of the manifest.

    Returns:
        The card's Markdown section, or None.
    """
    groups: dict[tuple[str, str], list[float]] = {}
    for a in annotations:
        category = source_category(a.source)
        if category is not None:
            groups.setdefault((a.class_name, category), []).append(a.height_m)
    if not groups:
        return None
    rows = []
    for (class_name, category), heights in sorted(groups.items()):
        ordered = sorted(heights)
        rows.append([class_name, category, len(ordered), f"{ordered[0]:.2f}", f"{ordered[len(ordered) // 2]:.2f}",
                     f"{ordered[-1]:.2f}"])
    return ("## Pasted heights per source category\n\nHeights (m) the real cutouts were pasted at, within "
            "each category's real range (synrail/sources/sizes.py, or the source's `heights_m`):\n\n"
            + _table(["class", "source category", "obstacles", "min", "median", "max"], rows))


def _sheet_tile(rgba: np.ndarray, caption: Sequence[str]) -> np.ndarray:
    """A cutout on a checkerboard (its alpha, halo and stair-steps visible), captioned below."""
    size = SHEET_TILE_PX
    scale = size / max(rgba.shape[:2])
    small = cv2.resize(rgba, (max(1, round(rgba.shape[1] * scale)), max(1, round(rgba.shape[0] * scale))),
                       interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    if small.ndim == 2:
        small = cv2.cvtColor(small, cv2.COLOR_GRAY2BGR)
    yy, xx = np.mgrid[:size, :size]
    board = np.where(((yy // 10 + xx // 10) % 2)[..., None] == 0, 235.0, 190.0) * np.ones(3)
    h, w = small.shape[:2]
    y0, x0 = (size - h) // 2, (size - w) // 2
    alpha = small[:, :, 3:4] / 255.0 if small.shape[2] == 4 else np.ones((h, w, 1))
    board[y0:y0 + h, x0:x0 + w] = alpha * small[:, :, :3] + (1 - alpha) * board[y0:y0 + h, x0:x0 + w]
    tile = np.full((size + SHEET_CAPTION_PX + SHEET_GAP_PX, size + SHEET_GAP_PX, 3), 255, np.uint8)
    tile[:size, :size] = board.astype(np.uint8)
    for k, line in enumerate(caption):
        cv2.putText(tile, line, (3, size + 13 + 15 * k), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (20, 20, 20), 1, cv2.LINE_AA)
    return tile


def sheet_cutouts(records: Sequence[GalleryRecord], count: int = SHEET_CUTOUTS) -> list[GalleryRecord]:
    """At most ``count`` cutouts spread evenly over the range of mask scores, lowest first: the worst
    ones kept are shown as well as the best.

    Args:
        records: one class's cutouts.
        count: the most shown.

    Returns:
        The cutouts shown, by score then id.
    """
    ordered = sorted(records, key=lambda r: (r.mask_score, r.cutout_id))
    if len(ordered) <= count:
        return ordered
    picks = sorted({round(k * (len(ordered) - 1) / (count - 1)) for k in range(count)})
    return [ordered[k] for k in picks]


def gallery_contact_sheets(gallery: Sequence[GalleryRecord], read_bytes: Callable[[str], bytes],
                           classes: Sequence[str]) -> dict[str, bytes]:
    """One PNG per class of the real cutouts, as a user would inspect them: each on a checkerboard,
    captioned with its mask source, score and source; drawn (procedural) cutouts are not shown.

    Args:
        gallery: every cutout of the build.
        read_bytes: reads a cutout's PNG by its ``path`` (the cache store's ``read_bytes``).
        classes: the class names, in card order.

    Returns:
        ``card/gallery_<class>.png`` -> PNG bytes, for the classes that have real cutouts.
    """
    sheets = {}
    for class_name in classes:
        shown = sheet_cutouts([g for g in gallery if g.class_name == class_name and g.mask_source != "render"])
        if not shown:
            continue
        tiles = []
        for record in shown:
            rgba = cv2.imdecode(np.frombuffer(read_bytes(record.path), np.uint8), cv2.IMREAD_UNCHANGED)
            if rgba is None:
                raise ValueError(f"cutout {record.path} of {record.cutout_id} is not a readable image")
            tiles.append(_sheet_tile(rgba, [f"{record.mask_source} {record.mask_score:.2f}",
                                            record.source[:24]]))
        while len(tiles) % SHEET_COLUMNS and len(tiles) > SHEET_COLUMNS:
            tiles.append(np.full_like(tiles[0], 255))
        rows = [np.hstack(tiles[i:i + SHEET_COLUMNS]) for i in range(0, len(tiles), SHEET_COLUMNS)]
        ok, png = cv2.imencode(".png", np.vstack(rows))
        if not ok:
            raise ValueError(f"OpenCV could not encode the contact sheet of {class_name}")
        sheets[f"card/gallery_{class_name}.png"] = png.tobytes()
    return sheets


def gallery_section(gallery: Sequence[GalleryRecord], sheets: Sequence[str]) -> str | None:
    """The card's section on the real cutouts: per class and mask source, how many and their scores,
    and the contact sheets; None when every cutout is drawn.

    Args:
        gallery: every cutout of the build.
        sheets: the contact sheets' paths (``gallery_contact_sheets``).

    Returns:
        The Markdown section, or None.
    """
    groups: dict[tuple[str, str], list[float]] = {}
    for g in gallery:
        if g.mask_source != "render":
            groups.setdefault((g.class_name, g.mask_source), []).append(g.mask_score)
    if not groups:
        return None
    rows = []
    for (class_name, source), scores in sorted(groups.items()):
        ordered = sorted(scores)
        rows.append([class_name, source, len(ordered), f"{ordered[0]:.2f}", f"{ordered[len(ordered) // 2]:.2f}"])
    links = "\n".join(f"![{p}]({p})" for p in sheets)
    return ("## Gallery cutouts\n\nThe real cutouts per class and mask source (annotation, rgba: shipped; "
            "sam, grabcut: segmented from a box, score = the segmenter's own estimate). Contact sheets: up "
            f"to {SHEET_CUTOUTS} cutouts per class spread over the range of scores, lowest first, each "
            "captioned with its mask source, score and source.\n\n"
            + _table(["class", "mask source", "cutouts", "min score", "median score"], rows)
            + (f"\n\n{links}" if links else ""))


def dataset_card(config: dict[str, Any], images: Sequence[ImageRow], annotations: Sequence[ManifestAnnotationRow],
                 backgrounds: Sequence[dict[str, Any]], classes: Sequence[str], splits: Sequence[str],
                 report: Any = None, gallery: Sequence[GalleryRecord] = (), sheets: Sequence[str] = ()) -> str:
    """Markdown card; deterministic (no times, no paths) so that equal builds have equal cards.

    Args:
        config: the build config as JSON-able dict (``content_dict``).
        images: every image row of the dataset.
        annotations: every annotation row of the manifest.
        backgrounds: the background records as dicts.
        classes: the class names, in category order.
        splits: the splits shown, in order.
        report: the build's ``InputReport``; None leaves out the counts of what was left out.
        gallery: the build's cutouts (their mask sources and scores); none leaves the section out.
        sheets: the gallery's contact sheets' paths, linked from that section.

    Returns:
        The card's Markdown text.
    """
    per_class = Counter((a.class_name, a.split) for a in annotations)
    per_condition = Counter((i.condition, i.split) for i in images)
    per_split_images = Counter(i.split for i in images)
    buckets = [distance_bucket(low) for low in DISTANCE_BINS_M]
    distances = Counter(distance_bucket(a.distance_m) for a in annotations)
    conditions = sorted({i.condition for i in images})
    empty = sum(1 for i in images if i.num_annotations == 0)
    return "\n\n".join([
        f"# Dataset card: {config['name']}",
        "Synthetic railway-obstacle detection data made by SynRail. " + _origin_sentence(config),
        f"- seed: {config['seed']}\n- images: {len(images)} ({empty} without obstacles)\n"
        f"- annotations: {len(annotations)}\n- backgrounds: {len(backgrounds)} "
        f"(each used by one split only)\n- image size: {config['image']['width']} x {config['image']['height']}",
        "## Images per split\n\n" + _table(["split", "images"], [[s, per_split_images[s]] for s in splits]),
        "## Obstacles per class and split\n\n" + _crosstab(per_class, classes, splits, "class"),
        "## Images per condition and split\n\n" + _crosstab(per_condition, conditions, splits, "condition"),
        "## Obstacle distance (camera to ground-contact point)\n\n"
        + _table(["distance", "obstacles"], [[b, distances[b]] for b in buckets]),
        _quality_section(images),
        *([section] if (section := pasted_heights_section(annotations)) else []),
        *([cutouts] if (cutouts := gallery_section(gallery, sheets)) else []),
        _inputs_section(backgrounds, report),
        "## Configuration\n\n```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```",
        "## Software\n\n" + _table(["package", "version"], sorted(package_versions().items())),
    ]) + "\n"

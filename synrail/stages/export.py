"""The export stage: COCO instances per split, Parquet manifests, data.yaml and the dataset card.

Images and YOLO label files are written by the composition stage, one chunk at a time; this stage
gathers the chunks' Parquet rows into the dataset-wide documents.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import cv2
from pydantic import BaseModel

from synrail.config import BuildConfig
from synrail.export.card import dataset_card, gallery_contact_sheets
from synrail.export.coco import coco_document
from synrail.export.figures import track_area_strip
from synrail.export.plots import clip_preview_gif, write_card_figures
from synrail.export.yolo import data_yaml
from synrail.records import (
    SPLITS,
    AnnotationRow,
    BackgroundRecord,
    ChunkRecord,
    ClipAnnotationRow,
    ClipImageRow,
    ClipRecord,
    ClipRefusal,
    GalleryRecord,
    ImageRow,
    InputReport,
    ManifestAnnotationRow,
)
from synrail.storage.codecs import decode_image, encode_image
from synrail.storage.store import Store
from synrail.storage.tables import read_rows, rows_bytes, table_bytes

CONFIG_SECTIONS = None  # the export writes the whole config into the card: every section counts

BUILD_RECORDS = ".synrail/records.json"
CLIP_PREVIEW = "card/clips.gif"
TRACK_STRIP = "card/track_areas.jpg"  # a few real backgrounds with their track area drawn


class BuildRecords(BaseModel):
    """What an export was made from: enough for a later version to extend it (``synrail.versions``)."""

    chunks: list[ChunkRecord]
    backgrounds: list[BackgroundRecord]
    gallery: list[GalleryRecord]
    report: InputReport
    clips: list[ClipRecord] = []  # written only when there are clips (a stills build keeps its bytes)
    clip_refusals: list[ClipRefusal] = []  # likewise, only when some footage gave no clip


def read_build_records(out: Store) -> BuildRecords:
    """The records an export at ``out`` was made from."""
    return BuildRecords.model_validate_json(out.read_text(BUILD_RECORDS))


class ExportSummary(BaseModel):
    """What an export holds: images and annotations per split, annotations per class."""

    out_url: str
    images_per_split: dict[str, int]
    annotations_per_split: dict[str, int]
    annotations_per_class: dict[str, int]


def _coco_image(row: ImageRow, background: BackgroundRecord) -> dict[str, Any]:
    return {"id": row.image_index + 1, "file_name": f"{row.image_id}.jpg", "width": row.width,
            "height": row.height, "condition": row.condition, "track_type": row.track_type,
            "background_id": row.background_id, "rail_area": background.rail_area}


def _coco_annotation(row: ManifestAnnotationRow) -> dict[str, Any]:
    return {"id": row.annotation_id, "image_id": row.image_index + 1, "category_id": row.category_id + 1,
            "segmentation": {"size": [row.rle_height, row.rle_width], "counts": row.rle_counts},
            "bbox": list(row.bbox), "area": row.area,
            "iscrowd": 0, "distance_m": row.distance_m, "visibility": row.visibility,
            "truncated": row.truncated, "occluded": row.occluded, "source": row.source,
            "ground_point": [row.ground_u, row.ground_v], "height_m": row.height_m}


def _clip_image(row: ClipImageRow, clip: ClipRecord) -> dict[str, Any]:
    rail_area = clip.frame_rail_areas[row.frame_in_clip] if clip.frame_rail_areas else clip.rail_area
    return {"id": row.image_index + 1, "file_name": f"{row.image_id}.jpg", "width": row.width,
            "height": row.height, "condition": row.condition, "track_type": row.track_type,
            "background_id": row.background_id, "rail_area": rail_area, "clip_id": row.clip_id,
            "frame_in_clip": row.frame_in_clip}


def _clip_annotation(row: ClipAnnotationRow, annotation_id: int) -> dict[str, Any]:
    manifest = ManifestAnnotationRow(**row.model_dump(include=set(AnnotationRow.model_fields)),
                                     annotation_id=annotation_id, split="")
    return dict(_coco_annotation(manifest), track_id=row.track_id)


def _figure(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def clips_csv(clips: Sequence[ClipRecord]) -> str:
    """``clips.csv``: one line per clip (what ``synrail evaluate --clips`` reads), with its source, where
    its speed came from and, on real footage, its drift figures (empty for procedural clips)."""
    lines = ["clip_id,split,frames,fps,speed_kmh,event,first_file,source,speed_source,drift_along_m,"
             "drift_lateral_gauge,drift_depth_m"]
    for c in sorted(clips, key=lambda c: c.clip_index):
        lines.append(f"{c.clip_id},{c.split},{c.frames},{c.fps:g},{c.speed_kmh:.3f},{int(c.event)},"
                     f"images/{c.split}/{c.clip_id}-0000.jpg,{_csv_cell(c.source)},{c.speed_source},"
                     f"{_figure(c.drift_along_m, 4)},{_figure(c.drift_lateral_gauge, 4)},{_figure(c.drift_depth_m, 4)}")
    return "\n".join(lines) + "\n"


def _csv_cell(text: str) -> str:
    """A CSV cell: quoted when it holds a comma or a quote (a video's name may)."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def mot_gt(rows: Sequence[ClipAnnotationRow]) -> str:
    """MOTChallenge ``gt/gt.txt`` of one clip: frame (1-based), id (1-based), box, 1, class (1-based),
    visibility."""
    return "".join(f"{r.frame_in_clip + 1},{r.track_id + 1},{r.bbox_x},{r.bbox_y},{r.bbox_w},{r.bbox_h},1,"
                   f"{r.category_id + 1},{r.visibility:.4f}\n"
                   for r in sorted(rows, key=lambda r: (r.frame_in_clip, r.track_id)))


class ClipTables(BaseModel):
    """Every clip frame and clip annotation of an export, numbered after the stills."""

    images: list[ClipImageRow]
    annotations: list[ClipAnnotationRow]
    annotation_ids: list[int]


def _read_clips(clips: Sequence[ClipRecord], out: Store, first_annotation_id: int) -> ClipTables:
    ordered = sorted(clips, key=lambda c: c.clip_index)
    images = [r for c in ordered for r in read_rows(out, c.images_path, ClipImageRow)]
    annotations = [r for c in ordered for r in read_rows(out, c.annotations_path, ClipAnnotationRow)]
    ids = list(range(first_annotation_id, first_annotation_id + len(annotations)))
    return ClipTables(images=images, annotations=annotations, annotation_ids=ids)


def _write_clips(clips: Sequence[ClipRecord], tables: ClipTables, out: Store) -> None:
    """clips.csv, MOT ground truth per clip, the clip manifests and the card's animated preview."""
    out.write_text("clips.csv", clips_csv(clips))
    for clip in clips:
        out.write_text(f"clips/{clip.clip_id}/gt/gt.txt",
                       mot_gt([r for r in tables.annotations if r.clip_id == clip.clip_id]))
    out.write_bytes(CLIP_PREVIEW, clip_preview_gif(out, tables.images, tables.annotations, clips[0].fps))
    out.write_bytes("manifest/clip_frames.parquet", rows_bytes(tables.images, ClipImageRow))
    out.write_bytes("manifest/clip_annotations.parquet", table_bytes(
        [dict(r.model_dump(), annotation_id=i) for r, i in zip(tables.annotations, tables.annotation_ids,
                                                                strict=True)]))


def _background_row(record: BackgroundRecord) -> dict[str, Any]:
    row = record.model_dump(mode="json")
    row["geometry"] = json.dumps(row["geometry"], sort_keys=True)
    row["airlight_bgr"] = list(row["airlight_bgr"])
    row["illumination_bgr"] = list(row["illumination_bgr"])
    row["rail_area"] = json.dumps(row["rail_area"])
    return row


def _write_report(report: InputReport, out: Store) -> None:
    """Every input left out, with its reason: quarantined videos, unused frames, skipped obstacles."""
    for name, rows in [("quarantine", report.quarantine), ("unused_frames", report.unused_frames),
                       ("skipped_obstacles", report.skipped_obstacles)]:
        if rows:
            out.write_bytes(f"manifest/{name}.parquet", table_bytes([r.model_dump(mode="json") for r in rows]))


def export_dataset(cfg: BuildConfig, chunks: Sequence[ChunkRecord], backgrounds: Sequence[BackgroundRecord],
                   gallery: Sequence[GalleryRecord], out: Store, report: InputReport | None = None,
                   clips: Sequence[ClipRecord] = (), clip_refusals: Sequence[ClipRefusal] = (),
                   cache: Store | None = None) -> ExportSummary:
    """Gather the chunks into the dataset-wide documents of the export contract.

    Args:
        cfg: the build config (the card shows all of it).
        chunks: every compose chunk of the dataset.
        backgrounds: the backgrounds the images were composed on.
        gallery: the cutouts they drew from.
        out: the output store (the chunks' tables are read from it, the documents written to it).
        report: the inputs left out, for the card and the manifests.
        clips: the approach clips (their frames join COCO per split; clips.csv, MOT gt, clip manifests).
        clip_refusals: stretches of footage that gave no clip, with the reason (manifest and card).
        cache: the store holding the cutouts' PNGs, for the card's contact sheets of the real gallery
            (None: no sheets).

    Returns:
        Image and annotation counts per split and per class.
    """
    report = report or InputReport()
    ordered = sorted(chunks, key=lambda c: c.first)
    images: list[ImageRow] = [row for c in ordered for row in read_rows(out, c.images_path, ImageRow)]
    split_of = {row.image_index: row.split for row in images}
    annotations = [ManifestAnnotationRow(**row.model_dump(), annotation_id=annotation_id,
                                         split=split_of[row.image_index])
                   for annotation_id, row in enumerate(
                       (row for c in ordered for row in read_rows(out, c.annotations_path, AnnotationRow)), start=1)]
    by_id = {b.background_id: b for b in backgrounds}
    clip_tables = _read_clips(clips, out, len(annotations) + 1)
    clip_by_id = {c.clip_id: c for c in clips}
    splits = [s for s in SPLITS if any(r.split == s for r in [*images, *clip_tables.images])]
    for split in splits:
        clip_split = {c.clip_id for c in clips if c.split == split}
        document = coco_document(
            [_coco_image(r, by_id[r.background_id]) for r in images if r.split == split]
            + [_clip_image(r, clip_by_id[r.clip_id]) for r in clip_tables.images if r.split == split],
            [_coco_annotation(r) for r in annotations if r.split == split]
            + [_clip_annotation(r, i) for r, i in zip(clip_tables.annotations, clip_tables.annotation_ids,
                                                      strict=True) if r.clip_id in clip_split],
            cfg.classes, f"SynRail {cfg.name} {split} (seed {cfg.seed})")
        out.write_text(f"annotations/instances_{split}.json", json.dumps(document, separators=(",", ":")))
    out.write_bytes("manifest/backgrounds.parquet", table_bytes([_background_row(b) for b in backgrounds]))
    out.write_bytes("manifest/gallery.parquet", table_bytes([g.model_dump(mode="json") for g in gallery]))
    out.write_bytes("manifest/images.parquet", table_bytes([r.model_dump() for r in images]))
    out.write_bytes("manifest/annotations.parquet", rows_bytes(annotations, ManifestAnnotationRow))
    _write_report(report, out)
    if clips:
        _write_clips(clips, clip_tables, out)
    if clip_refusals:
        out.write_bytes("manifest/refused_clips.parquet", rows_bytes(list(clip_refusals), ClipRefusal))
    out.write_text("data.yaml", data_yaml(splits, cfg.classes))
    figures = write_card_figures(out, images, annotations, cfg.classes)
    sheets = gallery_contact_sheets(gallery, cache.read_bytes, cfg.classes) if cache is not None else {}
    for path, png in sheets.items():
        out.write_bytes(path, png)
    if cache is not None and (strip := track_area_strip(backgrounds, lambda path: decode_image(
            cache.read_bytes(path), cv2.IMREAD_COLOR, cache.url(path)))) is not None:
        out.write_bytes(TRACK_STRIP, encode_image(strip, ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 85]))
        figures.append(TRACK_STRIP)  # real backgrounds with the track area the build found on them
    card = dataset_card(cfg.content_dict(), images, annotations, [b.model_dump() for b in backgrounds],
                        cfg.classes, splits, report, gallery, list(sheets))
    card += clip_card_section(clips, clip_tables) + real_clip_card_section(clips, clip_refusals)
    out.write_text("dataset_card.md", card + "\n## Figures\n\n" + "\n".join(f"![{p}]({p})" for p in figures) + "\n")
    records = BuildRecords(chunks=sorted(chunks, key=lambda c: c.first), backgrounds=list(backgrounds),
                           gallery=list(gallery), report=report, clips=sorted(clips, key=lambda c: c.clip_index),
                           clip_refusals=list(clip_refusals))
    empty = {name for name in ("clips", "clip_refusals") if not getattr(records, name)}
    out.write_text(BUILD_RECORDS, records.model_dump_json(exclude=empty))
    all_annotations = [*annotations, *clip_tables.annotations]
    split_of_clip = {c.clip_id: c.split for c in clips}
    return ExportSummary(
        out_url=out.root_url,
        images_per_split=dict(Counter(r.split for r in [*images, *clip_tables.images])),
        annotations_per_split=dict(Counter([r.split for r in annotations]
                                           + [split_of_clip[r.clip_id] for r in clip_tables.annotations])),
        annotations_per_class={c: sum(1 for r in all_annotations if r.class_name == c) for c in cfg.classes})


def clip_card_section(clips: Sequence[ClipRecord], tables: ClipTables) -> str:
    """The card's clip counts (nothing for a build without clips).

    Args:
        clips: every clip's record.
        tables: the clips' frame and annotation rows.

    Returns:
        A Markdown section, or "" without clips.
    """
    if not clips:
        return ""
    lines = ["", "## Approach clips", "", "| split | clips | frames | event clips | tracks | annotations |",
             "|---|---|---|---|---|---|"]
    for split in SPLITS:
        chosen = [c for c in clips if c.split == split]
        if not chosen:
            continue
        names = {c.clip_id for c in chosen}
        tracks = {(r.clip_id, r.track_id) for r in tables.annotations if r.clip_id in names}
        lines.append(f"| {split} | {len(chosen)} | {sum(c.frames for c in chosen)} | "
                     f"{sum(c.event for c in chosen)} | {len(tracks)} | "
                     f"{sum(1 for r in tables.annotations if r.clip_id in names)} |")
    speeds = [c.speed_kmh for c in clips]
    lines += ["", f"Speed {min(speeds):.0f}-{max(speeds):.0f} km/h at {clips[0].fps:g} fps; obstacles fixed on "
              "the track; per-frame labels carry `track_id`, frames `clip_id` and `frame_in_clip`; "
              "`clips.csv` and MOT `clips/<clip_id>/gt/gt.txt`.", "",
              "Preview (the first clips with obstacles, boxes with track id and distance):", "",
              f"![{CLIP_PREVIEW}]({CLIP_PREVIEW})", ""]
    return "\n".join(lines)


def real_clip_card_section(clips: Sequence[ClipRecord], refusals: Sequence[ClipRefusal]) -> str:
    """The card's table of clips on real footage (speed and its source, drift) and what was refused.

    Args:
        clips: every clip's record (procedural ones are left out here).
        refusals: the footage that gave no clip, with reasons.

    Returns:
        A Markdown section, or "" with neither real clips nor refusals.
    """
    real = [c for c in sorted(clips, key=lambda c: c.clip_index) if c.source != "procedural"]
    if not real and not refusals:
        return ""
    lines = ["", "### Clips on real footage", ""]
    if real:
        lines += ["Each frame's obstacles stand at `d0 - speed * t` along the track: the row from that frame's own "
                  "geometry (its depth), the column on that frame's tracked rails (their midpoint, their gap as the "
                  "gauge), only where the rails were seen. Drift: the image motion's advance against `speed * t` "
                  "(largest gap, m), the largest spread of a track's footprint across the rails (gauges; 0 where "
                  "the rails placed it) and of its depth against the rails' gap (m); geometry shift: the largest "
                  "move (gauges) from the frame geometry's centre line onto the rails'.", "",
                  "| clip | source | split | frames | fps | speed km/h | speed from | drift along m | "
                  "drift lateral gauge | drift depth m | geometry shift gauge |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {c.clip_id} | {c.source} | {c.split} | {c.frames} | {c.fps:.2f} | {c.speed_kmh:.1f} | "
                  f"{c.speed_source} | {_figure(c.drift_along_m, 3) or 'n/a'} | "
                  f"{_figure(c.drift_lateral_gauge, 3) or 'n/a'} | {_figure(c.drift_depth_m, 3) or 'n/a'} | "
                  f"{_figure(c.geometry_shift_gauge, 3) or 'n/a'} |"
                  for c in real]
    if refusals:
        reasons = Counter(r.reason for r in refusals)
        lines += ["", "Refused (`manifest/refused_clips.parquet`):", ""]
        lines += [f"- {count} x {reason}" for reason, count in sorted(reasons.items())]
    return "\n".join(lines) + "\n"

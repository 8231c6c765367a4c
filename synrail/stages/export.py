"""The export stage: COCO instances per split, Parquet manifests, data.yaml and the dataset card.

Images and YOLO label files are written by the composition stage, one chunk at a time; this stage
gathers the chunks' Parquet rows into the dataset-wide documents.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from synrail.config import BuildConfig
from synrail.export.card import dataset_card
from synrail.export.coco import coco_document
from synrail.export.plots import write_card_figures
from synrail.export.yolo import data_yaml
from synrail.records import (
    SPLITS,
    AnnotationRow,
    BackgroundRecord,
    ChunkRecord,
    GalleryRecord,
    ImageRow,
    InputReport,
    ManifestAnnotationRow,
)
from synrail.storage.store import Store
from synrail.storage.tables import read_rows, rows_bytes, table_bytes

CONFIG_SECTIONS = None  # the export writes the whole config into the card: every section counts

BUILD_RECORDS = ".synrail/records.json"


class BuildRecords(BaseModel):
    """What an export was made from: enough for a later version to extend it (``synrail.versions``)."""

    chunks: list[ChunkRecord]
    backgrounds: list[BackgroundRecord]
    gallery: list[GalleryRecord]
    report: InputReport


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
                   gallery: Sequence[GalleryRecord], out: Store, report: InputReport | None = None) -> ExportSummary:
    """Gather the chunks into the dataset-wide documents of the export contract.

    Args:
        cfg: the build config (the card shows all of it).
        chunks: every compose chunk of the dataset.
        backgrounds: the backgrounds the images were composed on.
        gallery: the cutouts they drew from.
        out: the output store (the chunks' tables are read from it, the documents written to it).
        report: the inputs left out, for the card and the manifests.

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
    splits = [s for s in SPLITS if any(r.split == s for r in images)]
    for split in splits:
        document = coco_document(
            [_coco_image(r, by_id[r.background_id]) for r in images if r.split == split],
            [_coco_annotation(r) for r in annotations if r.split == split],
            cfg.classes, f"SynRail {cfg.name} {split} (seed {cfg.seed})")
        out.write_text(f"annotations/instances_{split}.json", json.dumps(document, separators=(",", ":")))
    out.write_bytes("manifest/backgrounds.parquet", table_bytes([_background_row(b) for b in backgrounds]))
    out.write_bytes("manifest/gallery.parquet", table_bytes([g.model_dump(mode="json") for g in gallery]))
    out.write_bytes("manifest/images.parquet", table_bytes([r.model_dump() for r in images]))
    out.write_bytes("manifest/annotations.parquet", rows_bytes(annotations, ManifestAnnotationRow))
    _write_report(report, out)
    out.write_text("data.yaml", data_yaml(splits, cfg.classes))
    figures = write_card_figures(out, images, annotations, cfg.classes)
    card = dataset_card(cfg.content_dict(), images, annotations, [b.model_dump() for b in backgrounds],
                        cfg.classes, splits, report)
    out.write_text("dataset_card.md", card + "\n## Figures\n\n" + "\n".join(f"![{p}]({p})" for p in figures) + "\n")
    records = BuildRecords(chunks=sorted(chunks, key=lambda c: c.first), backgrounds=list(backgrounds),
                           gallery=list(gallery), report=report)
    out.write_text(BUILD_RECORDS, records.model_dump_json())
    return ExportSummary(
        out_url=out.root_url,
        images_per_split=dict(Counter(r.split for r in images)),
        annotations_per_split=dict(Counter(r.split for r in annotations)),
        annotations_per_class={c: sum(1 for r in annotations if r.class_name == c) for c in cfg.classes})

"""Result tables: CSV and Markdown writers, and the layouts of the paper's Tables 3-7.

Metrics are shown in percent with one decimal, as in the paper. A cell with no data behind it
(no model, no test images of that kind, no clips) says "n/a"; nothing is ever filled in.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from synrail.train.evaluate import CONDITION_GROUPS, DISTANCE_BUCKETS_M, UNSEEN_CLASS, EvalReport, bucket_label
from synrail.train.events import EventReport, TrackReport

Cell = str | float | int | None
MISSING = "n/a"
TRACK_TYPES = ("ballastless", "ballasted")  # Table 3's column order
# Table 7's rows: (harmony, rescale, random texture)
PAPER_ABLATIONS: tuple[tuple[bool, bool, bool], ...] = (
    (False, False, False), (True, False, False), (False, True, False), (False, False, True), (True, True, True))


class Table(BaseModel):
    """One of the paper's tables, filled: a key, a title, columns and rows of cells."""

    model_config = ConfigDict(frozen=True)

    key: str  # lowercase-with-dashes: the file stem and the Prefect artifact key
    title: str
    columns: list[str]
    rows: list[list[Cell]]

    @field_validator("key")
    @classmethod
    def _key_is_lowercase_with_dashes(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", value):
            raise ValueError(f"table key {value!r} must be lowercase letters, digits and dashes")
        return value

    def records(self) -> list[dict[str, str]]:
        """Rows as {column: text}, for CSV and Prefect table artifacts."""
        return [dict(zip(self.columns, map(format_cell, row), strict=True)) for row in self.rows]


class ModelResult(BaseModel):
    """What one model scored on the test data a user has; any part may be missing."""

    model_config = ConfigDict(frozen=True)

    name: str
    params_m: float | None = None
    detection: EvalReport | None = None
    events: EventReport | None = None


class AblationResult(BaseModel):
    """The scores of one ablation setting (harmonization, rescaling, random texture on or off)."""

    model_config = ConfigDict(frozen=True)

    harmony: bool
    rescale: bool
    random_texture: bool
    detection: EvalReport | None = None


def artifact_key(text: str) -> str:
    """Any name as a lowercase-with-dashes key."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "table"


def format_cell(cell: Cell) -> str:
    """A cell as text: one decimal for floats, ``MISSING`` for None."""
    if cell is None:
        return MISSING
    if isinstance(cell, float):
        return f"{cell:.1f}"
    return str(cell)


def to_csv(table: Table) -> str:
    """The table as CSV text, cells formatted as in the Markdown."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows([format_cell(c) for c in row] for row in table.rows)
    return buffer.getvalue()


def to_markdown(table: Table) -> str:
    """The table as a Markdown pipe table under its bold title."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    body = [line(table.columns), line(["---"] * len(table.columns))]
    body += [line([format_cell(c) for c in row]) for row in table.rows]
    return f"**{table.title}**\n\n" + "\n".join(body) + "\n"


def write_table(table: Table, out_dir: str | Path) -> tuple[Path, Path]:
    """``{key}.csv`` and ``{key}.md`` under ``out_dir``.

    Args:
        table: the table to write.
        out_dir: the folder (created if missing); files there are overwritten.

    Returns:
        (CSV path, Markdown path).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{table.key}.csv", out_dir / f"{table.key}.md"
    csv_path.write_text(to_csv(table))
    md_path.write_text(to_markdown(table))
    return csv_path, md_path


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _detection_value(model: ModelResult, group: str, subset: str, metric: str = "map50") -> float | None:
    return None if model.detection is None else _pct(model.detection.value(group, subset, metric))


def metrics_table(report: EvalReport, key: str, title: str) -> Table:
    """Every row of one evaluation: overall, per class, distance, condition, track type, unseen kind.

    Args:
        report: the evaluation.
        key: the table's key, which names its files.
        title: the table's title ("(mAP in %)" is added).

    Returns:
        The table: group, subset, images, instances, mAP50 and mAP50:95 in percent (None without ground truth).
    """
    return Table(key=key, title=f"{title} (mAP in %)",
                 columns=["group", "subset", "images", "instances", "mAP50", "mAP50:95"],
                 rows=[[r.group, r.subset, r.images, r.instances, _pct(r.map50), _pct(r.map50_95)]
                       for r in report.rows])


def events_table(report: EventReport, key: str, title: str) -> Table:
    """Clip counts and accuracy, over all clips and per track type.

    Args:
        report: the event evaluation.
        key: the table's key, which names its files.
        title: the table's title (the score threshold, sample rate and unit are added).

    Returns:
        The table: a row for all clips, then one per track type, with TP, TN, FP, FN and accuracy in percent.
    """
    track_types = sorted({c.track_type for c in report.clips if c.track_type})
    rows = []
    for track_type in [None, *track_types]:
        clips = [c for c in report.clips if track_type is None or c.track_type == track_type]
        counts = EventReport(clips=clips, score_threshold=report.score_threshold,
                             sample_fps=report.sample_fps).counts()
        rows.append([track_type or "all", len(clips), *counts.values(), _pct(report.accuracy(track_type))])
    return Table(key=key, title=f"{title} (score >= {report.score_threshold:g}, {report.sample_fps:g} fps, Acc in %)",
                 columns=["track type", "clips", "TP", "TN", "FP", "FN", "Acc"], rows=rows)


def tracks_table(report: TrackReport, key: str, title: str) -> Table:
    """One row per clip track: frames labelled and detected, first and first-detection distances (m).

    Args:
        report: the tracks' results.
        key: the table's key (file stem, artifact key).
        title: its title (the thresholds are appended).

    Returns:
        The table; "n/a" where a track was never detected.
    """
    rows: list[list[Cell]] = [[t.clip_id, t.track_id, t.class_name, t.frames, t.detected_frames,
                               t.first_distance_m, t.first_detection_frame, t.first_detection_distance_m]
                              for t in report.tracks]
    return Table(key=key, title=f"{title} (score >= {report.score_threshold:g}, IoU >= {report.iou_threshold:g})",
                 columns=["clip", "track", "class", "frames", "detected frames", "first distance (m)",
                          "first detection frame", "first detection distance (m)"], rows=rows)


def table3_track_types(models: Sequence[ModelResult]) -> Table:
    """Table 3: mAP50, mAP50:95 and event accuracy per track type, per model."""
    columns = ["Models", "Paras (M)"] + [f"{t} {m}" for t in TRACK_TYPES for m in ("mAP50", "mAP50:95", "Acc")]
    rows = []
    for model in models:
        row: list[Cell] = [model.name, model.params_m]
        for track_type in TRACK_TYPES:
            row += [_detection_value(model, "track_type", track_type),
                    _detection_value(model, "track_type", track_type, "map50_95"),
                    None if model.events is None else _pct(model.events.accuracy(track_type))]
        rows.append(row)
    return Table(key="table-3-track-types", title="Table 3: models on ballastless and ballasted track "
                 "(mAP and event accuracy in %)", columns=columns, rows=rows)


def table4_conditions(models: Sequence[ModelResult]) -> Table:
    """Table 4: mAP50 per condition group, per model."""
    return Table(key="table-4-conditions", title="Table 4: mAP50 (%) across environmental conditions",
                 columns=["Models", *CONDITION_GROUPS],
                 rows=[[m.name, *(_detection_value(m, "condition_group", g) for g in CONDITION_GROUPS)]
                       for m in models])


def table5_distances(models: Sequence[ModelResult]) -> Table:
    """Table 5: mAP50 per distance bucket, per model."""
    buckets = [bucket_label(low, high) for low, high in DISTANCE_BUCKETS_M]
    return Table(key="table-5-distances", title="Table 5: mAP50 (%) across obstacle distances",
                 columns=["Models", *buckets],
                 rows=[[m.name, *(_detection_value(m, "distance", b) for b in buckets)] for m in models])


def table6_unseen(models: Sequence[ModelResult]) -> Table:
    """The unseen_obstacle class, then each kind of unseen obstacle found in any model's test data."""
    kinds = sorted({k for m in models if m.detection for k in m.detection.subsets("unseen_kind")})
    return Table(key="table-6-unseen-obstacles", title="Table 6: mAP50 (%) on unseen obstacles",
                 columns=["Models", UNSEEN_CLASS, *kinds],
                 rows=[[m.name, _detection_value(m, "class", UNSEEN_CLASS),
                        *(_detection_value(m, "unseen_kind", k) for k in kinds)] for m in models])


def table7_ablations(ablations: Sequence[AblationResult]) -> Table:
    """The paper's five rows (n/a where that variant was not trained), then any other variant given."""
    by_flags = {(a.harmony, a.rescale, a.random_texture): a for a in ablations}
    flags = list(PAPER_ABLATIONS) + [f for f in by_flags if f not in PAPER_ABLATIONS]
    rows = []
    for number, (harmony, rescale, texture) in enumerate(flags, start=1):
        result = by_flags.get((harmony, rescale, texture))
        value = None if result is None or result.detection is None else result.detection.value("overall", "all")
        rows.append([number, *("✓" if f else "" for f in (harmony, rescale, texture)), _pct(value)])
    return Table(key="table-7-ablations", title="Table 7: ablation study, overall mAP50 (%)",
                 columns=["#", "Harmony", "rescale", "random-texture", "mAP50"], rows=rows)


def paper_tables(models: Sequence[ModelResult], ablations: Sequence[AblationResult]) -> list[Table]:
    """Tables 3-7 from what the models and ablations scored.

    Args:
        models: one result per model.
        ablations: one result per ablation setting (Table 7).

    Returns:
        The five tables, in order.
    """
    return [table3_track_types(models), table4_conditions(models), table5_distances(models),
            table6_unseen(models), table7_ablations(ablations)]

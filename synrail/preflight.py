"""``synrail inspect``: a look at the footage and the gallery before a build, written as one HTML page.

The preflight runs the build's own stage functions on a sample and writes no dataset: every sampled
frame of every video or frame sequence goes through the frame filters (``extract_video_backgrounds``,
so the counts of frames left out by the filters are exact); ``frames_per_video`` of the frames kept
go through the track finder the build uses (``find_tracks``: ``RailFollower`` with the configured
learned track-area model), the sequence camera is solved from them and each frame's geometry checked
against it; ``gallery_sample`` candidates of each gallery source are cut out by the configured
segmenter (``extract_cutouts``). Frames and cutouts go to a temporary cache that is deleted after.

The times measured on the sample, scaled by the config's counts, give an estimate of the build's time
(one process, this machine).
"""

from __future__ import annotations

import html
import math
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import cv2
import fsspec
import numpy as np

from synrail.config import BuildConfig, DiffusionSource, ProceduralSource
from synrail.export.card import reason_group
from synrail.export.figures import data_uri, draw_refusal, draw_track_area
from synrail.records import BackgroundRecord, GalleryRecord, SequenceCamera
from synrail.segment.cache import MaskCache
from synrail.segment.loader import load_segmenter
from synrail.sources.cutouts import extract_cutouts
from synrail.sources.video import VideoRef, sample_frames
from synrail.sources.video_backgrounds import FrameRecord, VideoExtraction, extract_video_backgrounds
from synrail.stages.backgrounds import prepare_background
from synrail.stages.compose import compose_one, gallery_by_class
from synrail.stages.gallery import (
    dataset_candidates,
    gallery_record,
    prepare_gallery_item,
    procedural_classes,
)
from synrail.stages.videos import (
    _prepared,
    _track_mask,
    crop_notes,
    find_tracks,
    fit_frame,
    sequence_camera_record,
    shot_cameras,
    source_videos,
    unpacked_mask,
    video_camera_settings,
)
from synrail.storage.codecs import decode_image
from synrail.storage.store import Store

T = TypeVar("T")
FILTER_EXAMPLES = 2  # frames shown per reason the frame filters gave
LISTED_SEQUENCES = 12  # more videos or sequences than this are summed up in the text, not listed one by one
COMPOSE_SAMPLE = 3  # composites timed for the estimate


@dataclass
class Figure:
    """One picture of the report: a sampled frame or a cutout, with what it shows."""

    image: str  # data: URI
    title: str  # frame 12 / the candidate's key
    note: str  # track found ... / the reason it was refused / score and mask source
    ok: bool  # a track area drawn, a cutout kept


@dataclass
class FootageReport:
    """What the preflight saw of one video or frame sequence."""

    name: str
    kind: str  # video | frames | procedural
    sampled: int  # frames sampling takes
    kept: int  # of those, what the frame filters keep
    filtered: Counter = field(default_factory=Counter)  # reason -> frames (exact: every sampled frame is judged)
    figures: list[Figure] = field(default_factory=list)  # the frames given to the track finder
    filter_figures: list[Figure] = field(default_factory=list)  # examples of frames the filters refused
    refused: Counter = field(default_factory=Counter)  # reason -> frames of the finder's sample
    camera: SequenceCamera | None = None
    notes: list[str] = field(default_factory=list)
    quarantine: str | None = None
    crop: list[str] = field(default_factory=list)  # the output's aspect ratio cuts much of each frame


@dataclass
class GalleryReport:
    """What the preflight saw of one gallery source."""

    label: str  # gallery.sources[i] (type)
    candidates: int  # what the source lists (a procedural source: the cutouts it renders)
    listed_out: Counter = field(default_factory=Counter)  # reason -> candidates the listing left out (exact)
    sampled: int = 0
    figures: list[Figure] = field(default_factory=list)
    refused: Counter = field(default_factory=Counter)  # reason -> sampled candidates the cutter refused
    note: str = ""


@dataclass
class Inspection:
    """The whole preflight: inputs, pictures, what would be left out, and the time estimate."""

    config_name: str
    footage: list[FootageReport]
    gallery: list[GalleryReport]
    estimate: list[tuple[str, int, float]]  # (stage, count, seconds per item), measured here
    estimate_notes: list[str]
    seconds: float  # what the inspection itself took

    @property
    def estimated_seconds(self) -> float:
        """The build's estimated time: every stage's count times its measured time per item."""
        return sum(count * per_item for _, count, per_item in self.estimate)


def _timed(call: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def _evenly(items: list[T], n: int) -> list[T]:
    """At most ``n`` of ``items``, spread evenly from the first to the last."""
    if len(items) <= n:
        return list(items)
    return [items[round(k * (len(items) - 1) / (n - 1))] for k in range(n)] if n > 1 else items[:1]


# -- footage ----------------------------------------------------------------------------------------


def _filtered_images(video: VideoRef, extraction: VideoExtraction, cfg: BuildConfig, wanted: set[int]
                     ) -> dict[int, np.ndarray]:
    """The raw frames ``wanted`` (refused by the filters, so not in the cache): read back from the
    sequence's images, or from a second pass over the video's samples."""
    images: dict[int, np.ndarray] = {}
    if not wanted:
        return images
    if video.is_sequence:
        for index in wanted:
            try:
                data = fsspec.open(video.frame_url(index), "rb").open().read()
            except OSError:
                continue
            image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if image is not None:
                images[index] = image
        return images
    sampling = cfg.backgrounds.footage.sampling
    stream = sample_frames(video, fps=sampling.fps, stride=sampling.stride, max_frames=sampling.max_frames_per_video,
                           max_pixels=cfg.inputs.max_image_pixels)
    try:
        for frame in stream:
            if frame.frame_index in wanted:
                images[frame.frame_index] = frame.image
            if len(images) == len(wanted) or frame.frame_index > max(wanted):
                break
    finally:
        stream.close()
    return images


def _filter_figures(video: VideoRef, extraction: VideoExtraction, cfg: BuildConfig) -> list[Figure]:
    examples: dict[str, list[int]] = {}
    for reject in extraction.rejected:
        chosen = examples.setdefault(reject.reason, [])
        if len(chosen) < FILTER_EXAMPLES:
            chosen.append(reject.frame_index)
    reasons = {index: reason for reason, indices in examples.items() for index in indices}
    images = _filtered_images(video, extraction, cfg, set(reasons))
    figures = []
    for index, reason in sorted(reasons.items()):
        image = fit_frame(images[index], cfg.image.width, cfg.image.height) if index in images else np.full(
            (cfg.image.height, cfg.image.width, 3), 96, np.uint8)
        figures.append(Figure(data_uri(draw_refusal(image, f"frame filter: {reason}")), f"frame {index}",
                              f"left out by the frame filters: {reason}", False))
    return figures


def _geometry_note(record_geometry, confidence: float) -> str:
    pitch = math.degrees(record_geometry.pitch_rad)
    return (f"track found (confidence {confidence:.2f}); camera {record_geometry.height_m:.2f} m up, "
            f"pitch {pitch:.1f} deg, offset {record_geometry.track_offset_m:+.2f} m")


def inspect_footage(cfg: BuildConfig, video: VideoRef, frames_per_video: int, cache: Store
                    ) -> tuple[FootageReport, float, float, int]:
    """One video or frame sequence through the build's filters, then a sample through its track finder.

    Args:
        cfg: the build config (``backgrounds`` with video or frames as its source).
        video: the video or frame sequence.
        frames_per_video: how many of its kept frames the track finder is run on.
        cache: a temporary store for the frames.

    Returns:
        The report, the seconds the filters took (every sampled frame), the seconds the finder and the
        camera took, and the frames the finder ran on.
    """
    from synrail.rail.sequence import frame_geometry

    footage = cfg.backgrounds.footage
    kind = "frames" if video.is_sequence else "video"
    extraction, filter_s = _timed(lambda: extract_video_backgrounds(
        video, footage.sampling, cache, max_pixels=cfg.inputs.max_image_pixels))
    report = FootageReport(name=video.name, kind=kind, sampled=len(extraction.frames) + len(extraction.rejected),
                           kept=len(extraction.frames), notes=list(extraction.notes),
                           crop=crop_notes(video, extraction, cfg))
    if extraction.quarantine is not None:
        report.quarantine = extraction.quarantine.reason
        report.filtered["unreadable: " + reason_group(extraction.quarantine.reason)] += 1
        return report, filter_s, 0.0, 0
    report.filtered.update(r.reason for r in extraction.rejected)
    report.filter_figures = _filter_figures(video, extraction, cfg)
    settings = video_camera_settings(footage, video.name, extraction.metadata)
    sample: list[FrameRecord] = _evenly(sorted(extraction.frames, key=lambda f: f.frame_index), frames_per_video)
    started = time.perf_counter()
    found, missing, shots = find_tracks(cfg, sample, settings, cache)
    cameras, camera = shot_cameras(cfg, found, shots, settings, sample[0].width if sample else cfg.image.width)
    outcome: dict[int, tuple[np.ndarray | None, str, bool]] = {}
    for _, frame, evidence, packed, shot in found:
        geometry, reason = frame_geometry(evidence, cameras[shot], frame_width=cfg.image.width,
                                          frame_height=cfg.image.height)
        image = _prepared(cache, frame, settings, cfg).image
        if geometry is None:
            outcome[frame.frame_index] = (None, reason, False)
            continue
        # the segmenter's refinement, when configured
        mask = _track_mask(image, cfg, unpacked_mask(packed, image.shape[:2]), frame.frame_index)
        outcome[frame.frame_index] = (mask, _geometry_note(geometry, evidence.detection.confidence), True)
    for index, reason in missing:
        outcome[index] = (None, reason, False)
    finder_s = time.perf_counter() - started
    report.camera = sequence_camera_record(video.name, camera, settings)
    for frame in sample:
        mask, note, ok = outcome[frame.frame_index]
        image = _prepared(cache, frame, settings, cfg).image
        tile = draw_track_area(image, mask) if ok else draw_refusal(image, note)
        report.figures.append(Figure(data_uri(tile), f"frame {frame.frame_index}", note, ok))
        if not ok:
            report.refused[reason_key(note)] += 1
    return report, filter_s, finder_s, len(sample)


def inspect_procedural_backgrounds(cfg: BuildConfig, count: int, cache: Store
                                   ) -> tuple[FootageReport, list[BackgroundRecord], float]:
    """The first ``count`` procedural backgrounds, rendered as the build renders them, with their exact
    track area.

    Args:
        cfg: the build config (procedural backgrounds).
        count: how many to render.
        cache: a temporary store.

    Returns:
        The report, the records, and the seconds per background.
    """
    indices = _evenly(list(range(cfg.backgrounds.count)), count)
    records, seconds = _timed(lambda: [prepare_background(cfg, i, cache) for i in indices])
    report = FootageReport(name="procedural scenes", kind="procedural", sampled=cfg.backgrounds.count,
                           kept=cfg.backgrounds.count)
    for record in records:
        image = decode_image(cache.read_bytes(record.path), cv2.IMREAD_COLOR, record.path)
        g = record.geometry
        note = (f"procedural {record.track_type}, {record.condition}: exact track area; camera {g.height_m:.2f} m "
                f"up, pitch {math.degrees(g.pitch_rad):.1f} deg")
        report.figures.append(Figure(data_uri(draw_track_area(image, g.track_mask())),
                                     f"background {record.index}", note, True))
    return report, records, seconds / max(len(records), 1)


# -- gallery ----------------------------------------------------------------------------------------


def _cutout_tile(rgba: np.ndarray, size: int = 160) -> np.ndarray:
    """A cutout on a checkerboard (its alpha visible), fit into ``size`` x ``size``."""
    scale = size / max(rgba.shape[:2])
    small = cv2.resize(rgba, (max(1, round(rgba.shape[1] * scale)), max(1, round(rgba.shape[0] * scale))),
                       interpolation=cv2.INTER_AREA)
    yy, xx = np.mgrid[:size, :size]
    board = np.where(((yy // 12 + xx // 12) % 2)[..., None] == 0, 235, 200).astype(np.float32) * np.ones(3)
    h, w = small.shape[:2]
    y0, x0 = (size - h) // 2, (size - w) // 2
    alpha = small[:, :, 3:4].astype(np.float32) / 255 if small.shape[2] == 4 else np.ones((h, w, 1), np.float32)
    region = board[y0:y0 + h, x0:x0 + w]
    board[y0:y0 + h, x0:x0 + w] = alpha * small[:, :, :3] + (1 - alpha) * region
    return board.astype(np.uint8)


def _cutout_figure(cache: Store, record: GalleryRecord) -> Figure:
    rgba = decode_image(cache.read_bytes(record.path), cv2.IMREAD_UNCHANGED, record.path)
    note = (f"{record.class_name}; score {record.mask_score:.2f}; mask: {record.mask_source}; "
            f"{record.width_px} x {record.height_px} px")
    return Figure(data_uri(_cutout_tile(rgba), ".png"), record.cutout_id, note, True)


def _refused_tile(reason: str, size: int = 160) -> np.ndarray:
    return draw_refusal(np.full((size, size, 3), 200, np.uint8), reason, width=size)


def inspect_gallery_source(cfg: BuildConfig, index: int, sample_size: int, cache: Store
                           ) -> tuple[GalleryReport, list[GalleryRecord], float]:
    """A sample of one gallery source cut out as the gallery stage cuts it.

    Args:
        cfg: the build config.
        index: the source's position in ``gallery.sources``.
        sample_size: how many candidates (or procedural cutouts) are made.
        cache: a temporary store (cutouts, masks).

    Returns:
        The report, the records of the cutouts made, and the seconds per candidate.
    """
    source = cfg.gallery.sources[index]
    label = f"gallery.sources[{index}] ({source.type})"
    if isinstance(source, ProceduralSource):
        classes = procedural_classes(cfg, source)
        jobs = _evenly([(c, i) for i in range(cfg.gallery.per_class) for c in classes], sample_size)
        records, seconds = _timed(lambda: [prepare_gallery_item(cfg, c, i, cache) for c, i in jobs])
        report = GalleryReport(label, candidates=len(classes) * cfg.gallery.per_class, sampled=len(records),
                               note="drawn cutouts with exact alpha: nothing to segment")
        report.figures = [_cutout_figure(cache, r) for r in records]
        return report, records, seconds / max(len(records), 1)
    if isinstance(source, DiffusionSource):
        templates = source.prompts.all_templates()
        count = source.prompts.per_class * sum(1 for c in cfg.classes if c in templates)
        return GalleryReport(label, candidates=count, note=(
            "diffusion images are generated by the build (a GPU model): not run by inspect")), [], 0.0
    candidates, skipped = dataset_candidates(source, cfg.inputs.max_image_pixels)
    report = GalleryReport(label, candidates=len(candidates))
    report.listed_out.update(reason_group(s.reason) for s in skipped)
    sample = _evenly(candidates, sample_size)
    seg = cfg.segment
    segmenter = load_segmenter(seg.backend, seg.checkpoint, seg.model_type, seg.device)
    (cutouts, rejected), seconds = _timed(lambda: extract_cutouts(
        sample, segmenter, MaskCache(cache), cache, min_score=seg.min_score, min_area_px=seg.min_area_px,
        max_pixels=cfg.inputs.max_image_pixels))
    records = [gallery_record(cfg, c) for c in cutouts]
    report.sampled = len(sample)
    report.figures = [_cutout_figure(cache, r) for r in records]
    for row in rejected:
        report.refused[reason_key(row.reason)] += 1
        report.figures.append(Figure(data_uri(_refused_tile(row.reason)), row.instance_key, row.reason, False))
    return report, records, seconds / max(len(sample), 1)


# -- the estimate -----------------------------------------------------------------------------------


def _compose_seconds(cfg: BuildConfig, backgrounds: list[BackgroundRecord], gallery: list[GalleryRecord],
                     cache: Store) -> float:
    """Seconds per composite, timed on a few images of the sampled backgrounds and cutouts."""
    classes = tuple(c for c in cfg.classes if any(r.class_name == c for r in gallery))
    if not backgrounds or not classes:
        raise ValueError("no background or no cutout in the sample")
    timing_cfg = cfg.model_copy(update={"classes": classes})
    cutouts = gallery_by_class(cache, gallery)
    started = time.perf_counter()
    for index in range(COMPOSE_SAMPLE):
        compose_one(timing_cfg, index, backgrounds[0].split, backgrounds, cutouts, cache)
    return (time.perf_counter() - started) / COMPOSE_SAMPLE


def _stand_in_backgrounds(cfg: BuildConfig, cache: Store) -> list[BackgroundRecord]:
    """Two procedural backgrounds at the build's image size: what composites are timed on for footage."""
    procedural = cfg.model_copy(update={"backgrounds": cfg.backgrounds.model_copy(
        update={"source": "procedural", "count": max(cfg.backgrounds.count, 8)})})
    records = [prepare_background(procedural, i, cache) for i in range(2)]
    return [r.model_copy(update={"split": records[0].split}) for r in records]


def inspect_build(cfg: BuildConfig, frames_per_video: int = 8, gallery_sample: int = 12) -> Inspection:
    """Look at a build's inputs without building it.

    Args:
        cfg: the build config (its paths already checked: ``synrail.path_check.check_paths``).
        frames_per_video: frames of each video or sequence given to the track finder (and drawn).
        gallery_sample: candidates of each gallery source cut out (and shown).

    Returns:
        The inspection: the reports per video and gallery source, and the time estimate.

    Raises:
        InputError: the footage folder or prefix holds no video or sequence.
    """
    started = time.perf_counter()
    footage, gallery = [], []
    estimate: list[tuple[str, int, float]] = []
    notes = ["measured on this machine in one process, on the sample; the build spreads stages over "
             f"execution.max_workers ({cfg.execution.max_workers}) workers"]
    with tempfile.TemporaryDirectory(prefix="synrail-inspect-") as folder:
        cache = Store(folder)
        backgrounds: list[BackgroundRecord] = []
        if cfg.backgrounds.source == "procedural":
            report, backgrounds, per_background = inspect_procedural_backgrounds(cfg, frames_per_video, cache)
            footage.append(report)
            estimate.append(("procedural backgrounds", cfg.backgrounds.count, per_background))
        else:
            filter_s = finder_s = 0.0
            sampled = kept = tried = 0
            for video in source_videos(cfg):
                report, f_s, t_s, n = inspect_footage(cfg, video, frames_per_video, cache)
                footage.append(report)
                filter_s, finder_s, tried = filter_s + f_s, finder_s + t_s, tried + n
                sampled, kept = sampled + report.sampled, kept + report.kept
            estimate.append(("frames sampled and filtered", sampled, filter_s / max(sampled, 1)))
            estimate.append(("kept frames: track and camera", kept, finder_s / max(tried, 1)))
        records: list[GalleryRecord] = []
        for index, source in enumerate(cfg.gallery.sources):
            report, made, per_item = inspect_gallery_source(cfg, index, gallery_sample, cache)
            gallery.append(report)
            records += made
            if not isinstance(source, DiffusionSource):
                estimate.append((f"{report.label}: cutouts", report.candidates, per_item))
            else:
                notes.append(f"{report.label}: image generation not measured")
        try:
            if not backgrounds:
                backgrounds = _stand_in_backgrounds(cfg, cache)
                notes.append("composites timed on procedural backgrounds of the build's image size")
            estimate.append(("composites", cfg.num_images, _compose_seconds(cfg, backgrounds, records, cache)))
        except ValueError as exc:
            notes.append(f"composites not timed: {exc}")
        if cfg.sequences.clips:
            notes.append("approach clips (sequences.clips) not included")
    return Inspection(config_name=cfg.name, footage=footage, gallery=gallery, estimate=estimate,
                      estimate_notes=notes, seconds=time.perf_counter() - started)


# -- what is printed --------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def reason_key(reason: str) -> str:
    """What reasons are counted by: "no track: <why>", else the words before the first colon (the
    rest, a frame's own figures, differs from frame to frame).

    Args:
        reason: why a frame or a candidate was left out.

    Returns:
        The reason without its particulars.
    """
    parts = reason.split(": ")
    return ": ".join(parts[:2]) if parts[0] == "no track" else reason_group(parts[0])


def _counts(counter: Counter) -> str:
    return "; ".join(f"{n} x {reason}" for reason, n in counter.most_common())


def summary_lines(inspection: Inspection) -> list[str]:
    """The lines ``synrail inspect`` prints: inputs found, what would be left out and why, the estimate.

    Args:
        inspection: what ``inspect_build`` returned.

    Returns:
        Plain text lines.
    """
    lines = ["inputs:"]
    real = [f for f in inspection.footage if f.kind != "procedural"]
    listed = len(real) <= LISTED_SEQUENCES
    for f in inspection.footage:
        if f.kind == "procedural":
            lines.append(f"  backgrounds: {f.sampled} procedural scenes (rendered, exact track area)")
        elif f.quarantine:
            lines.append(f"  {f.kind} {f.name}: quarantined: {f.quarantine}")
        elif listed:
            lines.append(f"  {f.kind} {f.name}: {f.sampled} frames sampled, {f.kept} kept")
            lines += [f"    note: {note}" for note in f.crop]
    if not listed:
        lines += [f"  {line}" for line in _footage_totals(real)]
        if cropped := [f for f in real if f.crop]:
            lines.append(f"    note: {len(cropped)} of them lose much of each frame to the output's aspect ratio; "
                         f"{cropped[0].crop[0]}")
    for g in inspection.gallery:
        lines.append(f"  {g.label}: {g.candidates} candidates" + (f" ({g.note})" if g.note else ""))
    lines.append("would be left out:")
    if listed:
        for f in real:
            if f.filtered:
                lines.append(f"  {f.name}: by the frame filters (all {f.sampled} sampled frames): "
                             f"{_counts(f.filtered)}")
            if f.refused:
                share = _finder_share(f.refused, len(f.figures), f.kept)
                lines.append(f"  {f.name}: by the track finder and camera, {share}")
    else:
        filtered, refused = Counter(), Counter()
        for f in real:
            filtered.update(f.filtered)
            refused.update(f.refused)
        if filtered:
            lines.append(f"  by the frame filters: {sum(filtered.values())} of {sum(f.sampled for f in real)} sampled "
                         f"frames: {_counts(filtered)}")
        if refused:
            lines.append("  by the track finder and camera, " + _finder_share(
                refused, sum(len(f.figures) for f in real), sum(f.kept for f in real)))
    for g in inspection.gallery:
        if g.listed_out:
            lines.append(f"  {g.label}: when listed: {_counts(g.listed_out)}")
        if g.refused:
            lines.append(f"  {g.label}: when cut out, {sum(g.refused.values())} of {g.sampled} sampled: "
                         f"{_counts(g.refused)}")
    if len(lines) and lines[-1] == "would be left out:":
        lines.append("  nothing in the sample")
    lines.append(f"estimated build time: about {_duration(inspection.estimated_seconds)} (an estimate: "
                 + "; ".join(f"{stage} {count} x {per * 1000:.0f} ms" for stage, count, per in inspection.estimate)
                 + "; " + "; ".join(inspection.estimate_notes) + ")")
    return lines


def _finder_share(refused: Counter, tried: int, kept: int) -> str:
    """``N of M sampled frames (about K of the kept ones): reasons``."""
    share = sum(refused.values()) / max(tried, 1)
    return (f"{sum(refused.values())} of {tried} sampled frames (about {share * kept:.0f} of the {kept} kept): "
            f"{_counts(refused)}")


def _footage_totals(real: list[FootageReport]) -> list[str]:
    """One line per kind of footage: how many videos or sequences (single images among them), frames."""
    lines = []
    for kind in sorted({f.kind for f in real}):
        members = [f for f in real if f.kind == kind and not f.quarantine]
        noun = "videos" if kind == "video" else "frame sequences"
        singles = sum(f.sampled == 1 for f in members)
        lines.append(f"{kind}: {len(members)} {noun}" + (f" ({singles} single images)" if singles else "")
                     + f": {sum(f.sampled for f in members)} frames sampled, {sum(f.kept for f in members)} kept")
    return lines


# -- the page ---------------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}h3{margin-bottom:.3em}
.strip{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;background:#fff;border:1px solid #ddd;padding:4px;max-width:320px}
figure img{display:block;max-width:100%}
figure.refused{border-color:#d33}figure.ok{border-color:#3a3}
figcaption{font-size:.8em;margin-top:3px}
figure.cutout{max-width:170px}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
.note{color:#666;font-size:.9em}pre{background:#eee;padding:.6em;white-space:pre-wrap}
"""


def _figure_html(figure: Figure, kind: str) -> str:
    state = "ok" if figure.ok else "refused"
    return (f'<figure class="{kind} {state}"><img alt="{html.escape(figure.title)}" src="{figure.image}">'
            f"<figcaption><b>{html.escape(figure.title)}</b>: {html.escape(figure.note)}</figcaption></figure>")


def _camera_html(camera: SequenceCamera) -> str:
    sigma = f" ± {camera.hfov_sigma_deg:.1f}" if camera.hfov_sigma_deg is not None else ""
    rows = [("hfov (deg)", f"{camera.hfov_deg:.1f}{sigma} ({camera.hfov_source})"),
            ("height (m)", "-" if camera.height_m is None else f"{camera.height_m:.2f}"
             + (" (given)" if camera.height_given else "")),
            ("pitch (deg)", "-" if camera.pitch_deg is None else f"{camera.pitch_deg:.1f}"),
            ("offset (m)", "-" if camera.offset_m is None else f"{camera.offset_m:+.2f}"),
            ("gauge (mm)", f"{camera.gauge_mm:g}"), ("frames calibrated", str(camera.frames_calibrated)),
            *(("note", note) for note in camera.notes)]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="camera">{body}</table>'


def _single_image(footage: FootageReport) -> bool:
    """An image under a frames folder's root: a one-frame sequence, shown with the others like it."""
    return footage.kind == "frames" and footage.sampled == 1 and not footage.quarantine


def render_html(inspection: Inspection) -> str:
    """The report as one self-contained HTML page (every image inlined).

    Args:
        inspection: what ``inspect_build`` returned.

    Returns:
        The page's text.
    """
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>SynRail inspect: "
             f"{html.escape(inspection.config_name)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>SynRail inspect: {html.escape(inspection.config_name)}</h1>",
             f"<p class='note'>A preflight: no dataset was written. Inspected in {inspection.seconds:.1f} s.</p>",
             "<pre>" + html.escape("\n".join(summary_lines(inspection))) + "</pre>",
             '<section id="footage"><h2>Backgrounds</h2>']
    singles = [f for f in inspection.footage if _single_image(f)]
    if singles:
        parts.append(f"<h3>single images: {len(singles)}</h3><p>Each image under the folder's root is a sequence "
                     "of its own: one frame, no sequence camera.</p><div class='strip'>"
                     + "".join(_figure_html(replace(x, title=f.name), "frame")
                               for f in singles for x in f.figures + f.filter_figures) + "</div>")
    for f in inspection.footage:
        if _single_image(f):
            continue
        parts.append(f"<h3>{html.escape(f.kind)}: {html.escape(f.name)}</h3>")
        if f.quarantine:
            parts.append(f"<p>Quarantined: {html.escape(f.quarantine)}</p>")
            continue
        if f.kind != "procedural":
            parts.append(f"<p>{f.sampled} frames sampled, {f.kept} kept by the frame filters; "
                         f"{len(f.figures)} of them through the track finder and the camera:</p>")
        parts.append('<div class="strip">' + "".join(_figure_html(x, "frame") for x in f.figures) + "</div>")
        if f.camera is not None:
            parts.append("<p>Camera of the sequence (from the sampled frames):</p>" + _camera_html(f.camera))
        if f.filter_figures:
            parts.append("<p>Examples of frames the frame filters leave out:</p><div class='strip'>"
                         + "".join(_figure_html(x, "filtered") for x in f.filter_figures) + "</div>")
        parts += [f"<p class='note'>{html.escape(note)}</p>" for note in [*f.notes, *f.crop]]
    parts.append('</section><section id="gallery"><h2>Gallery</h2>')
    for g in inspection.gallery:
        parts.append(f"<h3>{html.escape(g.label)}: {g.candidates} candidates</h3>")
        if g.note:
            parts.append(f"<p class='note'>{html.escape(g.note)}</p>")
        if g.figures:
            parts.append('<div class="strip">' + "".join(_figure_html(x, "cutout") for x in g.figures) + "</div>")
    parts.append("</section></body></html>")
    return "\n".join(parts)


def write_report(inspection: Inspection, out_url: str) -> str:
    """Write ``index.html`` into ``out_url`` (a folder or an fsspec URL).

    Args:
        inspection: what ``inspect_build`` returned.
        out_url: where the page goes.

    Returns:
        The page's URL.
    """
    out = Store(out_url)
    out.write_text("index.html", render_html(inspection))
    return out.url("index.html")


__all__ = ["Inspection", "inspect_build", "render_html", "summary_lines", "write_report"]

"""The whole build as one plain loop over the stage functions, without Prefect.

The flow in ``flows/build_dataset.py`` runs the same calls as tasks; this loop is what it is
measured against (benchmarks/compose.py) and what tests use when orchestration is beside the point.
"""

from __future__ import annotations

from synrail.config import BuildConfig, ProceduralSource
from synrail.extras import check_extras
from synrail.records import BackgroundRecord, GalleryRecord, InputReport
from synrail.stages.backgrounds import prepare_background
from synrail.stages.compose import chunk_ranges, compose_chunk
from synrail.stages.export import ExportSummary, export_dataset
from synrail.stages.gallery import prepare_gallery_class, prepare_gallery_source, procedural_classes
from synrail.stages.inputs import check_inputs, input_report, texture_quarantine
from synrail.stages.real_clips import compose_video_clips, video_splits, wants_video_clips
from synrail.stages.sequences import clip_ranges, compose_clips
from synrail.stages.splits import assign_video_splits
from synrail.stages.videos import prepare_video_backgrounds, source_videos
from synrail.storage.lock import build_lock
from synrail.storage.output import cache_url, claim_output
from synrail.storage.store import Store


def gather_inputs(cfg: BuildConfig, cache: Store) -> tuple[list[BackgroundRecord], list[GalleryRecord], InputReport]:
    """Backgrounds and cutouts from every configured source, checked, with the report of what was left out.

    Args:
        cfg: the build config.
        cache: the build's cache, where backgrounds and cutouts are written and found again.

    Returns:
        The background records, the gallery records and the input report.

    Raises:
        InputError: a split in use has no background or a class has no cutout.
    """
    videos = []
    if cfg.backgrounds.source == "procedural":
        backgrounds = [prepare_background(cfg, i, cache) for i in range(cfg.backgrounds.count)]
    else:
        refs = source_videos(cfg)
        videos = assign_video_splits(cfg, [prepare_video_backgrounds(cfg, ref, None, cache) for ref in refs])
        backgrounds = [record for video in videos for record in video.records]
    gallery, sources = [], []
    for index, source in enumerate(cfg.gallery.sources):
        if isinstance(source, ProceduralSource):
            gallery += [r for c in procedural_classes(cfg, source)
                        for r in prepare_gallery_class(cfg, c, cache)]
        else:
            sources.append(prepare_gallery_source(cfg, index, cache))
            gallery += sources[-1].records
    report = input_report(videos, sources, texture_quarantine(cfg))
    check_inputs(cfg, backgrounds, gallery, report)
    return backgrounds, gallery, report


def build_in_process(cfg: BuildConfig, out_url: str, overwrite: bool = False) -> ExportSummary:
    """Build the whole dataset into ``out_url`` in this process, holding the output's lock.

    Args:
        cfg: the build config.
        out_url: the output folder or ``s3://`` prefix.
        overwrite: replace an output made by another build.

    Returns:
        The export's summary (counts per split and class).
    """
    out = Store(out_url)
    with build_lock(out, owner="build_in_process"):
        return _build_into(cfg, out, overwrite)


def _build_into(cfg: BuildConfig, out: Store, overwrite: bool) -> ExportSummary:
    check_extras(cfg)  # before any work: names the config key and the pip command
    claim_output(out, cfg, overwrite)
    cache = Store(cache_url(cfg, out))
    backgrounds, gallery, report = gather_inputs(cfg, cache)
    chunks = [compose_chunk(cfg, first, stop, backgrounds, gallery, cache, out)
              for first, stop in chunk_ranges(cfg.num_images, cfg.execution.chunk_size)]
    clips = [c for first, stop in clip_ranges(cfg) for c in compose_clips(cfg, first, stop, gallery, cache, out)]
    refusals = []
    if wants_video_clips(cfg):
        for position, video in enumerate(source_videos(cfg)):
            made = compose_video_clips(cfg, video, position, video_splits(backgrounds, video), gallery, cache, out)
            clips += made.clips
            refusals += made.refusals
    return export_dataset(cfg, chunks, backgrounds, gallery, out, report, clips, refusals, cache)

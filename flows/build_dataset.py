"""The dataset build as a Prefect flow: backgrounds fan out one task each (or one per video),
obstacles one task per procedural class or real source, compositions run in chunks, export gathers
them. Entry point for ``synrail build`` and for prefect.yaml."""

from __future__ import annotations

from collections.abc import Callable

from prefect import flow, unmapped
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.futures import as_completed
from prefect.runtime import flow_run
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from flows.prefect_env import wait_for_task_runs_recorded
from flows.runners import task_runner_for
from synrail.config import BuildConfig, ProceduralSource
from synrail.export.plots import preview_data_uri
from synrail.extras import check_extras
from synrail.records import (
    BackgroundRecord,
    ChunkRecord,
    ClipRecord,
    ClipRefusal,
    GalleryRecord,
    GallerySourceResult,
    InputReport,
    VideoBackgrounds,
    VideoClips,
)
from synrail.stages.compose import chunk_ranges
from synrail.stages.export import ExportSummary
from synrail.stages.gallery import needs_gpu, procedural_classes
from synrail.stages.inputs import check_inputs, input_report, texture_quarantine
from synrail.stages.real_clips import video_splits, wants_video_clips
from synrail.stages.sequences import clip_ranges
from synrail.stages.splits import assign_video_splits
from synrail.stages.videos import source_videos
from synrail.storage.lock import build_lock
from synrail.storage.output import cache_url as build_cache_url
from synrail.storage.output import claim_output
from synrail.storage.store import Store
from tasks import build as t


@flow(name="build-dataset", log_prints=True)
def build_dataset(config: BuildConfig, out_url: str, overwrite: bool = False,
                  show_progress: bool = False) -> ExportSummary:
    """Build the dataset ``config`` describes into ``out_url``, holding its lock throughout."""
    out = Store(out_url)
    with build_lock(out, owner=f"flow run {flow_run.name} ({flow_run.id})"):
        return _build_into(config, out, overwrite, show_progress)


def _build_into(config: BuildConfig, out: Store, overwrite: bool, show_progress: bool) -> ExportSummary:
    check_extras(config)  # before any work: names the config key and the pip command
    claim_output(out, config, overwrite)
    cache_url = build_cache_url(config, out)
    # both stages are submitted before either is awaited: no worker idles through one stage's last tasks
    collect_backgrounds = submit_backgrounds(config, cache_url)
    collect_gallery = submit_gallery(config, cache_url)
    background_records, videos = collect_backgrounds()
    gallery_records, sources = collect_gallery()
    report = input_report(videos, sources, texture_quarantine(config))
    check_inputs(config, background_records, gallery_records, report)
    plan = [(first, stop, None) for first, stop in chunk_ranges(config.num_images, config.execution.chunk_size)]
    clip_futures = submit_clips(config, gallery_records, cache_url, out)  # beside the stills' chunks
    video_clip_futures = submit_video_clips(config, background_records, gallery_records, cache_url, out)
    chunk_records = compose_chunks(config, plan, background_records, gallery_records, cache_url, out, show_progress)
    clip_records = t.as_records(ClipRecord, [r for f in clip_futures for r in f.result()])
    made = t.as_records(VideoClips, [f.result() for f in video_clip_futures])
    clip_records += [c for m in made for c in m.clips]
    refusals = [r for m in made for r in m.refusals]
    return export(config, chunk_records, background_records, gallery_records, report, cache_url, out, clip_records,
                  refusals)


def submit_clips(config: BuildConfig, gallery: list[GalleryRecord], cache_url: str, out: Store) -> list:
    """One compose-clips task per ``execution.clips_per_task`` approach clips (none without clips)."""
    clip_task = t.cached(t.compose_clips, "sequences", cache_url)
    return [clip_task.submit(config, first, stop, gallery, cache_url, out.root_url)
            for first, stop in clip_ranges(config)]


def submit_video_clips(config: BuildConfig, backgrounds: list[BackgroundRecord], gallery: list[GalleryRecord],
                       cache_url: str, out: Store) -> list:
    """One compose-video-clips task per video or frame sequence (none unless the footage is to give clips)."""
    if not wants_video_clips(config):
        return []
    task = t.cached(t.compose_video_clips, "real-clips", cache_url)
    return [task.submit(config, video, position, video_splits(backgrounds, video), gallery, cache_url, out.root_url)
            for position, video in enumerate(source_videos(config))]


def compose_chunks(config: BuildConfig, plan: list[tuple[int, int, list[str] | None]],
                   backgrounds: list[BackgroundRecord], gallery: list[GalleryRecord], cache_url: str, out: Store,
                   show_progress: bool = False, chunk_backgrounds: list[list[BackgroundRecord]] | None = None
                   ) -> list[ChunkRecord]:
    """One compose task per (first, stop, splits) of ``plan``, with a progress bar and a progress artifact.
    Every chunk draws from ``backgrounds``, or chunk k from ``chunk_backgrounds[k]`` when given (a
    video-sourced version: each video's images from its own frames)."""
    compose_task = t.cached(t.compose_chunk, "compose", cache_url)
    pools = chunk_backgrounds if chunk_backgrounds is not None else [backgrounds] * len(plan)
    chunks = [compose_task.submit(config, first, stop, pool, gallery, cache_url, out.root_url, splits)
              for (first, stop, splits), pool in zip(plan, pools, strict=True)]
    total = sum(stop - first for first, stop, _ in plan)
    progress_id = create_progress_artifact(progress=0.0, description=f"images composed into {out.root_url}")
    with Progress(TextColumn("composing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not show_progress) as bar:
        images = bar.add_task("compose", total=total)
        for future in as_completed(chunks):
            # .result() raises, and so fails the flow, when a chunk has failed for good
            bar.advance(images, ChunkRecord.model_validate(future.result()).num_images)
            update_progress_artifact(artifact_id=progress_id, progress=100.0 * bar.tasks[0].completed / total)
    return t.as_records(ChunkRecord, [c.result() for c in chunks])


def export(config: BuildConfig, chunks: list[ChunkRecord], backgrounds: list[BackgroundRecord],
           gallery: list[GalleryRecord], report: InputReport, cache_url: str, out: Store,
           clips: list[ClipRecord] | None = None, clip_refusals: list[ClipRefusal] | None = None) -> ExportSummary:
    """The export task, then the dataset's statistics, card and sample grid in the Prefect UI."""
    export_task = t.cached(t.export_dataset, "export", cache_url)
    summary = ExportSummary.model_validate(export_task(config, chunks, backgrounds, gallery, report, out.root_url,
                                                       clips or None, clip_refusals or None, cache_url))
    _publish(summary, out)
    return summary


def submit_backgrounds(config: BuildConfig, cache_url: str
                       ) -> Callable[[], tuple[list[BackgroundRecord], list[VideoBackgrounds]]]:
    """Submit one task per ``execution.backgrounds_per_task`` procedural backgrounds (one each by default),
    or one per video; return what waits for their records."""
    if config.backgrounds.source == "procedural":
        task = t.cached(t.prepare_backgrounds, "background", cache_url)
        groups = background_groups(config)
        futures = task.map(unmapped(config), [first for first, _ in groups], [stop for _, stop in groups],
                           unmapped(cache_url))
        return lambda: (t.as_records(BackgroundRecord, [r for group in futures.result() for r in group]), [])
    refs = source_videos(config)
    task = t.cached(t.prepare_video, "video", cache_url)
    # splits are decided once the videos are read (assign_video_splits), over those that yielded frames
    video_futures = task.map(unmapped(config), refs, unmapped(None), unmapped(cache_url))

    def collect() -> tuple[list[BackgroundRecord], list[VideoBackgrounds]]:
        videos = assign_video_splits(config, t.as_records(VideoBackgrounds, video_futures.result()))
        return [record for video in videos for record in video.records], videos
    return collect


def background_groups(config: BuildConfig) -> list[tuple[int, int]]:
    """(first, stop) of the procedural backgrounds each task renders."""
    return chunk_ranges(config.backgrounds.count, config.execution.backgrounds_per_task)


def submit_gallery(config: BuildConfig, cache_url: str
                   ) -> Callable[[], tuple[list[GalleryRecord], list[GallerySourceResult]]]:
    """Submit one task per procedural class, one per real source (tagged ``gpu`` when it runs a model);
    return what waits for their records."""
    procedural_task = t.cached(t.prepare_obstacles, "obstacles", cache_url)
    source_task = t.cached(t.prepare_gallery_source, "gallery-source", cache_url)
    procedural, real = [], []
    for index, source in enumerate(config.gallery.sources):
        if isinstance(source, ProceduralSource):
            procedural += [procedural_task.submit(config, c, cache_url) for c in procedural_classes(config, source)]
        else:
            tags = ["gpu"] if needs_gpu(config, index) else []
            real.append(source_task.with_options(tags=tags).submit(config, index, cache_url))

    def collect() -> tuple[list[GalleryRecord], list[GallerySourceResult]]:
        records = t.as_records(GalleryRecord, [r for f in procedural for r in f.result()])
        sources = t.as_records(GallerySourceResult, [f.result() for f in real])
        return records + [r for s in sources for r in s.records], sources
    return collect


def _publish(summary: ExportSummary, out: Store) -> None:
    """Dataset statistics, the card and the sample grid (embedded as an image) for the Prefect UI."""
    create_table_artifact(key="dataset-counts", description=f"SynRail build at {summary.out_url}", table=[
        {"split": split, "images": n, "annotations": summary.annotations_per_split.get(split, 0)}
        for split, n in summary.images_per_split.items()])
    create_table_artifact(key="dataset-classes", description="annotations per class", table=[
        {"class": name, "annotations": n} for name, n in summary.annotations_per_class.items()])
    create_markdown_artifact(key="dataset-card", markdown=out.read_text("dataset_card.md"))
    if out.exists("card/samples.png"):  # embedded: the UI cannot open an s3:// or file:// link
        create_markdown_artifact(key="dataset-samples", description=f"samples of {summary.out_url}", markdown=(
            f"![sample grid with boxes]({preview_data_uri(out.read_bytes('card/samples.png'))})\n\n"
            f"Full size: {out.url('card/samples.png')}\n"))


def expected_task_runs(config: BuildConfig) -> int:
    """How many task runs one build makes (the flow above, counted)."""
    chunks = len(chunk_ranges(config.num_images, config.execution.chunk_size))
    backgrounds = (len(background_groups(config)) if config.backgrounds.source == "procedural"
                   else len(source_videos(config)))
    gallery = sum(len(procedural_classes(config, s)) if isinstance(s, ProceduralSource) else 1
                  for s in config.gallery.sources)
    video_clips = len(source_videos(config)) if wants_video_clips(config) else 0
    return backgrounds + gallery + chunks + len(clip_ranges(config)) + video_clips + 1


def build_with_runner(config: BuildConfig, out_url: str, overwrite: bool = False,
                      show_progress: bool = False) -> ExportSummary:
    """Run :func:`build_dataset` on the task runner ``execution`` names (``flows.runners``), and return
    only once the server has recorded all its task runs (see ``prefect_env``)."""
    runner = task_runner_for(config)
    state = build_dataset.with_options(task_runner=runner)(config, out_url, overwrite, show_progress,
                                                           return_state=True)
    wait_for_task_runs_recorded(state.state_details.flow_run_id, expected_task_runs(config),
                                timeout_s=60.0 if state.is_completed() else 5.0)
    return state.result()

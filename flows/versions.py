"""Versioned builds as Prefect flows: ``build-version`` (a full rebuild, run on a schedule) and
``ingest-new-videos`` (an incremental version, run by the new-video event; see flows/watch.py).

Both hold the dataset root's lock for the whole run, make a complete version under
``versions/<id>`` and switch ``latest`` to it only at the end (``synrail.versions``). Runs on one
root queue: a run that finds the lock held waits for it (``lock_wait_s``, a day by default) and then
works from the version the other run published.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.build_dataset import build_dataset, compose_chunks, export, submit_gallery
from synrail.config import BuildConfig, load_config
from synrail.errors import InputError
from synrail.records import BackgroundRecord, GalleryRecord, InputReport, VideoBackgrounds, VideoClips
from synrail.sources.video import VideoRef
from synrail.stages.export import BuildRecords, read_build_records
from synrail.stages.inputs import input_report
from synrail.stages.real_clips import video_splits
from synrail.stages.versions import (
    VersionInfo,
    VersionSummary,
    carry_over,
    claim_version_folder,
    clip_plan,
    latest_version,
    merged_records,
    next_image_index,
    next_version,
    per_video_plan,
    prune_unreferenced,
    publish,
    read_info,
    shared_cache_url,
    unchanged_reason,
    version_info,
    version_store,
    video_split,
)
from synrail.stages.videos import source_videos
from synrail.storage.lock import LockHolder, build_lock
from synrail.storage.store import Store
from tasks import build as t

LOCK_WAIT_S = 24 * 3600.0  # how long a run queues behind another run on the same root before failing


def versioned_config(config_path: str | None, overrides: dict[str, Any] | None, root: Store) -> BuildConfig:
    """The config file with its overrides; the caches default to the root's shared cache."""
    config = load_config(config_path, overrides or {})
    if config.execution.cache_url:
        return config
    return config.model_copy(update={"execution": config.execution.model_copy(
        update={"cache_url": shared_cache_url(root)})})


def _say_waiting(holder: LockHolder) -> None:
    print(f"the dataset root is held by {holder.describe()}; waiting for it to finish")


@flow(name="build-version", log_prints=True)
def build_version(config_path: str | None, dataset_url: str, overrides: dict[str, Any] | None = None,
                  force: bool = False, lock_wait_s: float = LOCK_WAIT_S) -> VersionSummary:
    """Rebuild the whole dataset as a new version, unless the latest already is this very build.

    Args:
        config_path: the build config (None: the embedded default).
        dataset_url: the versioned dataset root (a folder or an s3:// prefix).
        overrides: config fields to override, dotted names to values (``{"num_images": 20}``).
        force: build a new version even when config, code version and videos are unchanged.
        lock_wait_s: how long to queue behind another run on this root before failing.

    Returns:
        What the run published (or why it published nothing).
    """
    root = Store(dataset_url)
    config = versioned_config(config_path, overrides, root)
    with build_lock(root, owner="build-version", wait_s=lock_wait_s, on_wait=_say_waiting):
        return _full_version(config, root, force)


@flow(name="ingest-new-videos", log_prints=True)
def ingest_new_videos(config_path: str | None, dataset_url: str, overrides: dict[str, Any] | None = None,
                      video_url: str | None = None, lock_wait_s: float = LOCK_WAIT_S) -> VersionSummary:
    """Add every video under the configured prefix that no version has seen yet.

    Args:
        config_path: the build config (None: the embedded default).
        dataset_url: the versioned dataset root (a folder or an s3:// prefix).
        overrides: config fields to override, dotted names to values.
        video_url: the video whose event started the run, for the record only: the flow lists the
            prefix itself, so one run catches every video that landed, and a repeated event does nothing.
        lock_wait_s: how long to queue behind another run on this root before failing.

    Returns:
        What the run published (or why it published nothing).
    """
    root = Store(dataset_url)
    config = versioned_config(config_path, overrides, root)
    owner = f"ingest-new-videos ({video_url or 'reconcile'})"
    with build_lock(root, owner=owner, wait_s=lock_wait_s, on_wait=_say_waiting):
        latest = latest_version(root)
        if latest is None:
            return _full_version(config, root, force=False)
        parent = read_info(root, latest)
        if parent.build_hash != config.build_hash():
            print(f"{latest} was built from another config ({parent.build_hash}); building a full version")
            return _full_version(config, root, force=False)
        known = set(parent.videos)
        new = [ref for ref in source_videos(config) if ref.name not in known]
        if not new:
            return _summary(root, parent, False, [], "no new video")
        return _video_version(config, root, new, latest)


def _full_version(config: BuildConfig, root: Store, force: bool) -> VersionSummary:
    listed = source_videos(config) if config.backgrounds.source != "procedural" else []
    reason = unchanged_reason(config, root, listed)
    latest = latest_version(root)
    if reason and not force:
        return _summary(root, read_info(root, latest), False, [], reason)
    if config.backgrounds.source != "procedural":  # footage (videos, frame sequences): sized per video,
        # as its incremental versions are
        return _video_version(config, root, listed, None, forced_over=reason)
    version = next_version(root)
    out = version_store(root, version)
    claim_version_folder(out, config)
    build_dataset(config, out.root_url)
    records = read_build_records(out)
    info = version_info(config, root, version, "full", records)
    publish(root, info)
    return _summary(root, info, True, info.videos, "full build" + (f" (forced: {reason})" if reason else ""))


def _video_version(config: BuildConfig, root: Store, videos: list[VideoRef], parent_version: str | None,
                   forced_over: str | None = None) -> VersionSummary:
    """A version holding ``images_per_video`` images of each of ``videos`` with usable frames: on top of
    ``parent_version``'s images (an incremental version), or alone (a full one; ``forced_over`` says
    why it was not needed, when it was forced)."""
    version = next_version(root)
    out = version_store(root, version)
    claim_version_folder(out, config)
    cache_url = config.execution.cache_url
    parent = carry_over(version_store(root, parent_version), out) if parent_version else None
    video_task = t.cached(t.prepare_video, "video", cache_url)
    splits = [video_split(config, ref.name) for ref in videos]
    video_futures = video_task.map(unmapped(config), videos, splits, unmapped(cache_url))
    gallery, sources = submit_gallery(config, cache_url)()  # cached by the parent's build, mostly
    prepared = t.as_records(VideoBackgrounds, video_futures.result())
    new_backgrounds = [record for video in prepared for record in video.records]
    report = input_report(prepared, sources)
    if parent is None and not new_backgrounds:
        raise InputError(f"no usable background in any of the {len(videos)} videos ({len(report.quarantine)} "
                         "quarantined): add videos or loosen backgrounds.video.sampling.filters")
    backgrounds, report = _with_parent(parent, new_backgrounds, report)
    first = next_image_index(config, parent)
    plan = per_video_plan(config, first, new_backgrounds)
    first_position = len(parent.report.videos) if parent else 0
    clip_futures = _submit_clips(config, videos, first_position, first, new_backgrounds, gallery, cache_url, out)
    new_chunks = compose_chunks(config, [(c.first, c.stop, c.splits) for c in plan], new_backgrounds, gallery,
                                cache_url, out, chunk_backgrounds=[c.backgrounds for c in plan])
    made = t.as_records(VideoClips, [f.result() for f in clip_futures])
    new_clips = [c for m in made for c in m.clips]
    chunks = (parent.chunks if parent else []) + new_chunks
    clips = (parent.clips if parent else []) + new_clips
    refusals = (parent.clip_refusals if parent else []) + [r for m in made for r in m.refusals]
    export(config, chunks, backgrounds, gallery, report, cache_url, out, clips, refusals)
    prune_unreferenced(out, chunks, clips)
    info = version_info(config, root, version, "incremental" if parent else "full", read_build_records(out))
    publish(root, info)
    added = sum(c.num_images for c in new_chunks)
    per_video = f"{config.ingest.images_per_video} per video with usable frames"
    with_clips = f" and {len(new_clips)} clip(s)" if new_clips else ""
    reason = (f"{added} images{with_clips} from {len(videos)} new video(s) on {parent_version} ({per_video})"
              if parent_version else f"full build: {added} images{with_clips} from {len(videos)} video(s) "
              f"({per_video})" + (f" (forced: {forced_over})" if forced_over else ""))
    return _summary(root, info, True, [v.video for v in prepared], reason)


def _submit_clips(config: BuildConfig, videos: list[VideoRef], first_position: int, first_index: int,
                  backgrounds: list[BackgroundRecord], gallery: list[GalleryRecord], cache_url: str,
                  out: Store) -> list:
    """One compose-video-clips task per new video (none unless the footage is to give clips): its
    clip slots by its ordinal among every video looked at, its frames numbered after its stills."""
    task = t.cached(t.compose_video_clips, "real-clips", cache_url)
    return [task.submit(config, c.video, c.position, video_splits(backgrounds, c.video), gallery, cache_url,
                        out.root_url, c.first_image_index)
            for c in clip_plan(config, videos, first_position, first_index, backgrounds)]


def _with_parent(parent: BuildRecords | None, backgrounds: list[BackgroundRecord], report: InputReport
                 ) -> tuple[list[BackgroundRecord], InputReport]:
    """The version's backgrounds and input report: the parent's with the new videos' added."""
    return merged_records(parent, backgrounds, report) if parent else (backgrounds, report)


def _summary(root: Store, info: VersionInfo, published: bool, new_videos: list[str], reason: str) -> VersionSummary:
    """What this run did, about the latest version (``info``): returned, shown as artifacts, printed."""
    version = info.version
    summary = VersionSummary(dataset_url=root.root_url, version=version, published=published,
                             new_videos=new_videos, num_images=info.num_images, reason=reason,
                             num_clip_frames=info.num_clip_frames)
    clip_frames = f" and {info.num_clip_frames} clip frames" if info.num_clip_frames else ""
    create_markdown_artifact(key="dataset-version", markdown=(
        f"# SynRail dataset {root.root_url}\n\nlatest: **{version}** ({info.num_images} images{clip_frames})"
        f"{' - new version' if published else ' - unchanged'}\n\n{reason}\n"))
    if new_videos:
        create_table_artifact(key="ingested-videos", table=[{"video": v, "version": version} for v in new_videos],
                              description=f"videos added in {version}")
    print(f"{root.root_url}: {reason}; latest is {version}")
    return summary

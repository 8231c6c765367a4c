"""Versioned builds as Prefect flows: ``build-version`` (a full rebuild, run on a schedule) and
``ingest-new-videos`` (an incremental version, run by the new-video event; see flows/watch.py).

Both hold the dataset root's lock for the whole run, make a complete version under
``versions/<id>`` and switch ``latest`` to it only at the end (``synrail.versions``).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.build_dataset import build_dataset, compose_chunks, export, submit_gallery
from synrail.config import BuildConfig, load_config
from synrail.records import VideoBackgrounds
from synrail.sources.video import VideoRef
from synrail.stages.export import read_build_records
from synrail.stages.inputs import input_report
from synrail.stages.versions import (
    VersionSummary,
    carry_over,
    claim_version_folder,
    incremental_plan,
    latest_version,
    merged_records,
    next_version,
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
from synrail.storage.lock import build_lock
from synrail.storage.store import Store
from tasks import build as t


def versioned_config(config_path: str | None, overrides: dict[str, Any] | None, root: Store) -> BuildConfig:
    """The config file with its overrides; the caches default to the root's shared cache."""
    config = load_config(config_path, overrides or {})
    if config.execution.cache_url:
        return config
    return config.model_copy(update={"execution": config.execution.model_copy(
        update={"cache_url": shared_cache_url(root)})})


@flow(name="build-version", log_prints=True)
def build_version(config_path: str | None, dataset_url: str, overrides: dict[str, Any] | None = None
                  ) -> VersionSummary:
    """Rebuild the whole dataset as a new version, unless the latest already is this very build."""
    root = Store(dataset_url)
    config = versioned_config(config_path, overrides, root)
    with build_lock(root, owner="build-version"):
        return _full_version(config, root)


@flow(name="ingest-new-videos", log_prints=True)
def ingest_new_videos(config_path: str | None, dataset_url: str, overrides: dict[str, Any] | None = None,
                      video_url: str | None = None) -> VersionSummary:
    """Add every video under the configured prefix that no version has seen yet.

    ``video_url`` names the video whose event started the run, for the record only: the flow lists
    the prefix itself, so one run catches every video that landed, and a repeated event does nothing.
    """
    root = Store(dataset_url)
    config = versioned_config(config_path, overrides, root)
    with build_lock(root, owner=f"ingest-new-videos ({video_url or 'reconcile'})"):
        latest = latest_version(root)
        if latest is None:
            return _full_version(config, root)
        parent = read_info(root, latest)
        if parent.build_hash != config.build_hash():
            print(f"{latest} was built from another config ({parent.build_hash}); building a full version")
            return _full_version(config, root)
        known = set(parent.videos)
        new = [ref for ref in source_videos(config) if ref.name not in known]
        if not new:
            return _summary(root, latest, False, [], parent.num_images, "no new video")
        return _incremental_version(config, root, latest, new)


def _full_version(config: BuildConfig, root: Store) -> VersionSummary:
    listed = source_videos(config) if config.backgrounds.source != "procedural" else []
    reason = unchanged_reason(config, root, listed)
    latest = latest_version(root)
    if reason:
        return _summary(root, latest, False, [], read_info(root, latest).num_images, reason)
    version = next_version(root)
    out = version_store(root, version)
    claim_version_folder(out, config)
    build_dataset(config, out.root_url)
    records = read_build_records(out)
    info = version_info(config, root, version, "full", records)
    publish(root, info)
    return _summary(root, version, True, info.videos, info.num_images, "full build")


def _incremental_version(config: BuildConfig, root: Store, parent_version: str, new: list[VideoRef]
                         ) -> VersionSummary:
    version = next_version(root)
    out = version_store(root, version)
    claim_version_folder(out, config)
    cache_url = config.execution.cache_url
    parent = carry_over(version_store(root, parent_version), out)
    video_task = t.cached(t.prepare_video, "video", cache_url)
    splits = [video_split(config, ref.name) for ref in new]
    video_futures = video_task.map(unmapped(config), new, splits, unmapped(cache_url))
    gallery, sources = submit_gallery(config, cache_url)()  # cached by the parent's build, mostly
    videos = t.as_records(VideoBackgrounds, video_futures.result())
    new_backgrounds = [record for video in videos for record in video.records]
    backgrounds, report = merged_records(parent, new_backgrounds, input_report(videos, sources))
    first = sum(c.num_images for c in parent.chunks)
    new_chunks = compose_chunks(config, incremental_plan(config, first, new_backgrounds), new_backgrounds, gallery,
                                cache_url, out)
    chunks = parent.chunks + new_chunks
    export(config, chunks, backgrounds, gallery, report, cache_url, out)
    prune_unreferenced(out, chunks)
    info = version_info(config, root, version, "incremental", read_build_records(out))
    publish(root, info)
    added = sum(c.num_images for c in new_chunks)
    return _summary(root, version, True, [v.video for v in videos], info.num_images,
                    f"{added} images from {len(new)} new video(s) on {parent_version}")


def _summary(root: Store, version: str | None, published: bool, new_videos: list[str], num_images: int,
             reason: str) -> VersionSummary:
    summary = VersionSummary(dataset_url=root.root_url, version=version, published=published,
                             new_videos=new_videos, num_images=num_images, reason=reason)
    create_markdown_artifact(key="dataset-version", markdown=(
        f"# SynRail dataset {root.root_url}\n\nlatest: **{version}** ({num_images} images)"
        f"{' - new version' if published else ' - unchanged'}\n\n{reason}\n"))
    if new_videos:
        create_table_artifact(key="ingested-videos", table=[{"video": v, "version": version} for v in new_videos],
                              description=f"videos added in {version}")
    print(f"{root.root_url}: {reason}; latest is {version}")
    return summary

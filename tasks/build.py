"""Prefect tasks of the dataset build: thin wrappers over ``synrail.stages``, one task per stage call.

Each task takes a config, small records and store URLs, and returns a small record. Its cache key
is computed by :class:`StagePolicy` from the stage name, the library's code version and the
content of its inputs (records carry the sha256 of the files they point to), and the cache lives in
the build's own store, so an unchanged rerun into the same output finds every task ``Cached``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import CachePolicy
from prefect.filesystems import RemoteFileSystem
from pydantic import BaseModel

from synrail.config import BuildConfig
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
from synrail.sources.video import VideoRef
from synrail.stages import backgrounds, compose, export, gallery, real_clips, sequences, videos
from synrail.storage.code_version import code_version
from synrail.storage.store import Store

# The config sections each stage's results depend on, as the stage declares them beside its code
# (None: the whole config). A key holds only those, so builds that differ elsewhere (ablation
# variants, say) share the stage's cached results.
STAGE_SECTIONS: dict[str, tuple[str, ...] | None] = {
    "background": backgrounds.CONFIG_SECTIONS,
    "video": videos.CONFIG_SECTIONS,
    "obstacles": gallery.CONFIG_SECTIONS,
    "gallery-source": gallery.SOURCE_CONFIG_SECTIONS,
    "compose": compose.CONFIG_SECTIONS,
    "sequences": sequences.CONFIG_SECTIONS,
    "real-clips": real_clips.CONFIG_SECTIONS,
    "export": export.CONFIG_SECTIONS,
}


def _jsonable(value: Any, stage: str = "") -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, BuildConfig):
        content = value.content_dict()  # execution settings never change the outputs
        sections = STAGE_SECTIONS[stage]
        # .get: a section left out of content_dict (sequences without clips) keys as None
        return content if sections is None else {k: content.get(k) for k in sections}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@dataclass
class StagePolicy(CachePolicy):
    """Key = stage + code version + every input, serialised as canonical JSON."""

    stage: str = ""

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> str:
        payload = {"stage": self.stage, "code": code_version(),
                   "inputs": {k: _jsonable(v, self.stage) for k, v in sorted(inputs.items())}}
        return f"{self.stage}-" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def result_storage(cache_url: str) -> Path | RemoteFileSystem:
    """Where task results and cache records live: inside the build's cache store.

    Prefect takes a local folder as a ``Path``; a remote one must be a block saved on the server,
    named after the URL so that every run over the same store shares it.
    """
    store = Store(cache_url)
    if store.is_local:
        return store.local_path("prefect")
    block = RemoteFileSystem(basepath=store.url("prefect"), settings=store.storage_options)
    block.save(f"synrail-cache-{hashlib.sha256(store.url('prefect').encode()).hexdigest()[:16]}", overwrite=True)
    return block


def cached(task_fn: Any, stage: str, cache_url: str) -> Any:
    """``task_fn`` with its cache policy and result storage bound to this build's cache store."""
    storage = result_storage(cache_url)
    # no separate key_storage: each record holds its result, so one folder is the whole cache
    return task_fn.with_options(cache_policy=StagePolicy(stage=stage), result_storage=storage)


def as_records(model: type[BaseModel], values: list[Any]) -> list[Any]:
    """Task results as records again: a cached result comes back from its JSON file as a dict."""
    return [model.model_validate(v) for v in values]


_COMMON = {"persist_result": True, "result_serializer": "json"}


@task(name="prepare-backgrounds", retries=1, **_COMMON)
def prepare_backgrounds(cfg: BuildConfig, first: int, stop: int, cache_url: str) -> list[BackgroundRecord]:
    """Procedural backgrounds ``first..stop-1`` (``synrail.stages.backgrounds``)."""
    cache = Store(cache_url)
    return [backgrounds.prepare_background(cfg, index, cache) for index in range(first, stop)]


@task(name="prepare-obstacles", retries=1, **_COMMON)
def prepare_obstacles(cfg: BuildConfig, class_name: str, cache_url: str) -> list[GalleryRecord]:
    """The procedural cutouts of one class (``synrail.stages.gallery``)."""
    return gallery.prepare_gallery_class(cfg, class_name, Store(cache_url))


@task(name="prepare-video", retries=1, **_COMMON)
def prepare_video(cfg: BuildConfig, video: VideoRef, split: str | None, cache_url: str) -> VideoBackgrounds:
    """The backgrounds of one video (``synrail.stages.videos``)."""
    return videos.prepare_video_backgrounds(cfg, video, split, Store(cache_url))


@task(name="prepare-gallery-source", retries=1, **_COMMON)
def prepare_gallery_source(cfg: BuildConfig, source_index: int, cache_url: str) -> GallerySourceResult:
    """The cutouts of one real gallery source (``synrail.stages.gallery``)."""
    return gallery.prepare_gallery_source(cfg, source_index, Store(cache_url))


@task(name="compose-chunk", retries=2, retry_delay_seconds=1, **_COMMON)
def compose_chunk(cfg: BuildConfig, first: int, stop: int, backgrounds: list[BackgroundRecord],
                  gallery: list[GalleryRecord], cache_url: str, out_url: str,
                  splits: list[str] | None = None) -> ChunkRecord:
    """Images ``first..stop-1`` (``synrail.stages.compose``)."""
    return compose.compose_chunk(cfg, first, stop, backgrounds, gallery, Store(cache_url), Store(out_url), splits)


@task(name="compose-clips", retries=2, retry_delay_seconds=1, **_COMMON)
def compose_clips(cfg: BuildConfig, first: int, stop: int, gallery: list[GalleryRecord], cache_url: str,
                  out_url: str) -> list[ClipRecord]:
    """Approach clips ``first..stop-1`` (``synrail.stages.sequences``)."""
    return sequences.compose_clips(cfg, first, stop, gallery, Store(cache_url), Store(out_url))


@task(name="compose-video-clips", retries=2, retry_delay_seconds=1, **_COMMON)
def compose_video_clips(cfg: BuildConfig, video: VideoRef, position: int, splits: list[tuple[int, str]],
                        gallery: list[GalleryRecord], cache_url: str, out_url: str,
                        first_image_index: int | None = None) -> VideoClips:
    """Approach clips on one video's consecutive frames (``synrail.stages.real_clips``)."""
    return real_clips.compose_video_clips(cfg, video, position, splits, gallery, Store(cache_url), Store(out_url),
                                          first_image_index)


@task(name="export-dataset", retries=2, retry_delay_seconds=1, **_COMMON)
def export_dataset(cfg: BuildConfig, chunks: list[ChunkRecord], backgrounds: list[BackgroundRecord],
                   gallery: list[GalleryRecord], report: InputReport, out_url: str,
                   clips: list[ClipRecord] | None = None, clip_refusals: list[ClipRefusal] | None = None,
                   cache_url: str | None = None) -> export.ExportSummary:
    """The dataset-wide documents (``synrail.stages.export``)."""
    return export.export_dataset(cfg, chunks, backgrounds, gallery, Store(out_url), report, clips or [],
                                 clip_refusals or [], Store(cache_url) if cache_url else None)

"""Versioned datasets: every build publishes a complete dataset beside the older ones, then switches
a small pointer to it, so a reader never sees a half-written dataset.

Layout of a dataset root (a folder or an s3:// prefix)::

    latest.json            {"version": "v0003", "path": "versions/v0003", ...}: written in one PUT/rename
    latest -> versions/v0003   (local disks only: a symlink, swapped atomically, for tools that want a path)
    versions/v0001/ ...    each one a complete export (data.yaml, images/, labels/, annotations/, ...)
    .synrail/cache/        the caches every version shares (frames, masks, cutouts, task results)
    .synrail/lock          held while a version is being made

A full version composes every image; an incremental one copies its parent's images (hard links on a
local disk, server-side copies on an object store), composes only the new videos' images, and
exports the union. ``flows/versions.py`` runs these steps as Prefect flows.

Size of a video-sourced version (videos, or folders of frames whose sequences count as videos), full
or incremental: ``ingest.images_per_video`` images per video with usable frames
(``num_images`` applies to procedural backgrounds only), each video whole in one split (a stable
hash of its name) and its images drawn from its own frames, numbered video by video in name order.
With ``sequences.clips`` > 0 each video also gives its approach clips: clip slots by the video's
ordinal among every video the dataset has looked at (as a full build's listing position), frames
numbered in a block right after the video's stills. A full build therefore holds exactly what the
incremental history added, video for video, and when the videos landed in name order it reproduces
that history image for image, clips included.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from synrail.config import BuildConfig
from synrail.records import SPLITS, BackgroundRecord, ChunkRecord, ClipRecord, InputReport, Record
from synrail.sources.video import VideoRef
from synrail.stages.export import BuildRecords, read_build_records
from synrail.stages.real_clips import video_source, wants_video_clips
from synrail.storage.code_version import code_version
from synrail.storage.output import OutputConflict, claim_output
from synrail.storage.store import Store
from synrail.storage.tables import read_table

LATEST = "latest.json"
VERSION_INFO = ".synrail/version.json"
# what an incremental version takes from its parent (its clips' frames are in images/ and labels/ too)
CARRIED_FOLDERS = ("images", "labels", ".synrail/chunks", ".synrail/clips")


class VersionInfo(Record):
    """What one published version is: its parent, kind, config and code identity, images and videos."""

    version: str
    parent: str | None
    kind: str  # "full" or "incremental"
    created: str
    build_hash: str
    code_version: str
    num_images: int  # stills
    videos: list[str]  # every video this version has looked at (used, unused or quarantined)
    num_clip_frames: int = 0  # approach clips' frames, numbered after the stills (0 in versions before clips)


class VersionSummary(Record):
    """What a versioning run did: the latest version afterwards, whether it published one, and why."""

    dataset_url: str
    version: str | None  # the latest version after this run
    published: bool  # False when nothing had changed
    new_videos: list[str]
    num_images: int  # the latest version's stills
    reason: str
    num_clip_frames: int = 0  # and its approach clips' frames


def shared_cache_url(root: Store) -> str:
    """The cache every version of the dataset root shares."""
    return root.url(".synrail/cache")


def version_store(root: Store, version: str) -> Store:
    """The folder of one version.

    Args:
        root: the dataset root.
        version: the version id (``v0003``).

    Returns:
        A store rooted at ``versions/<version>``.
    """
    return root.child(f"versions/{version}")


def latest_version(root: Store) -> str | None:
    """The published version's id from ``latest.json``, or None before the first one."""
    if not root.exists(LATEST):
        return None
    return str(json.loads(root.read_text(LATEST))["version"])


def next_version(root: Store) -> str:
    """The id after the published one. An unpublished folder left by a crash gets the same id, and is reused."""
    latest = latest_version(root)
    return f"v{(int(latest[1:]) if latest else 0) + 1:04d}"


def read_info(root: Store, version: str) -> VersionInfo:
    """The info a published version was written with.

    Args:
        root: the dataset root.
        version: the version id.

    Returns:
        The version's info.

    Raises:
        StoreError: the version has no info file.
    """
    return VersionInfo.model_validate_json(version_store(root, version).read_text(VERSION_INFO))


def resolve_dataset(url: str) -> str:
    """The URL of the dataset a reader should use: the latest version of a versioned root, else ``url``."""
    root = Store(url)
    version = latest_version(root)
    return version_store(root, version).root_url if version else root.root_url


def publish(root: Store, info: VersionInfo) -> None:
    """Write the version's info, then switch ``latest`` to it: the one step readers see.

    Args:
        root: the dataset root.
        info: the new version's info; its folder is complete.
    """
    out = version_store(root, info.version)
    out.write_text(VERSION_INFO, info.model_dump_json())
    root.write_text(LATEST, json.dumps({"version": info.version, "path": f"versions/{info.version}",
                                        "published": info.created, "num_images": info.num_images,
                                        "num_clip_frames": info.num_clip_frames}))
    if root.is_local:
        link = root.local_path("latest")
        tmp = root.local_path(f".latest.{os.getpid()}.tmp")
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(f"versions/{info.version}", tmp)
        os.replace(tmp, link)  # rename over the old link: atomic on POSIX


def claim_version_folder(out: Store, cfg: BuildConfig) -> None:
    """Make ``out`` ready for a new version. It was never published (ids come from the pointer), so
    what a crashed run left there is reused when it is this build, and replaced when it is another.

    Args:
        out: the new version's folder.
        cfg: the build config.

    Raises:
        OutputConflict: the folder holds files SynRail did not write.
    """
    try:
        claim_output(out, cfg, overwrite=False)
    except OutputConflict:
        claim_output(out, cfg, overwrite=True)


def unchanged_reason(cfg: BuildConfig, root: Store, listed: Sequence[VideoRef]) -> str | None:
    """Why a full rebuild would reproduce the latest version (same config, code and videos), or None.

    Args:
        cfg: the build config.
        root: the dataset root.
        listed: the videos the sources list now.

    Returns:
        The reason to skip the rebuild, or None when something changed (or nothing is published).
    """
    latest = latest_version(root)
    if latest is None:
        return None
    info = read_info(root, latest)
    if (info.build_hash, info.code_version) != (cfg.build_hash(), code_version()):
        return None
    if sorted(info.videos) != sorted(v.name for v in listed):
        return None
    return f"{latest} already holds this config, code version and video set"


def video_split(cfg: BuildConfig, name: str) -> str:
    """A new video's split, stable by name: where it falls in [0, 1) against the split fractions.

    Args:
        cfg: the build config (``seed``, ``splits``).
        name: the video's name.

    Returns:
        A split in use (share above 0).
    """
    digest = hashlib.sha256(f"{cfg.seed}:{name}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    edge = 0.0
    for split, share in cfg.splits.fractions().items():
        edge += share
        if share > 0 and position < edge:
            return split
    return next(s for s in reversed(SPLITS) if cfg.splits.fractions()[s] > 0)


class PlannedChunk(NamedTuple):
    """One compose task of a video-sourced version: images ``first..stop-1`` of one video."""

    first: int
    stop: int
    splits: list[str]  # the split of each image: its video's
    backgrounds: list[BackgroundRecord]  # the video's usable frames, the only ones its images draw from


def video_block(cfg: BuildConfig) -> int:
    """Image indices each video with usable frames takes: its stills, then room for its clips' frames.

    Args:
        cfg: the build config (``ingest.images_per_video``, ``sequences``).

    Returns:
        ``images_per_video`` plus ``clips * frames_per_clip`` when the footage gives clips.
    """
    clip_frames = cfg.sequences.clips * cfg.sequences.frames_per_clip if wants_video_clips(cfg) else 0
    return cfg.ingest.images_per_video + clip_frames


def next_image_index(cfg: BuildConfig, parent: BuildRecords | None) -> int:
    """The first image index a version adds on top of ``parent`` (0 without one): past every block
    of the parent's videos with usable frames (a refused clip leaves its room unused), and past every
    index the parent used (a parent made by a plain build, as a frames-sourced full version is,
    numbers its stills to ``num_images`` and its clip frames after them).

    Args:
        cfg: the build config.
        parent: the parent version's records.

    Returns:
        The index.
    """
    if parent is None:
        return 0
    used = [c.stop for c in parent.chunks] + [c.first_image_index + c.frames for c in parent.clips]
    return max([len({b.source for b in parent.backgrounds}) * video_block(cfg), *used])


def _by_video(backgrounds: Sequence[BackgroundRecord]) -> dict[str, list[BackgroundRecord]]:
    by_video: dict[str, list[BackgroundRecord]] = {}
    for record in backgrounds:
        by_video.setdefault(record.source, []).append(record)
    return dict(sorted(by_video.items()))


def per_video_plan(cfg: BuildConfig, first_index: int, backgrounds: Sequence[BackgroundRecord]
                   ) -> list[PlannedChunk]:
    """The chunks of ``ingest.images_per_video`` images for each video with usable frames, videos in
    name order, each video's block (``video_block``) numbered on from ``first_index`` (0 for a full
    version, ``next_image_index`` for an incremental one); a chunk never spans two videos.

    Args:
        cfg: the build config (``ingest.images_per_video``, ``execution.chunk_size``, ``sequences``).
        first_index: the index of the first new image.
        backgrounds: the usable frames of the videos to compose (``source`` names the video).

    Returns:
        The chunks in index order.
    """
    plan = []
    for block, frames in enumerate(_by_video(backgrounds).values()):
        first = first_index + block * video_block(cfg)
        for start in range(0, cfg.ingest.images_per_video, cfg.execution.chunk_size):
            count = min(cfg.execution.chunk_size, cfg.ingest.images_per_video - start)
            plan.append(PlannedChunk(first + start, first + start + count, [frames[0].split] * count, frames))
    return plan


class PlannedClips(NamedTuple):
    """The compose-video-clips call of one video of a version."""

    video: VideoRef
    position: int  # its ordinal among every video the dataset has looked at: it owns these clip slots
    first_image_index: int | None  # its clip frames' block, after its stills (None: no usable frame, no clips)


def clip_plan(cfg: BuildConfig, videos: Sequence[VideoRef], first_position: int, first_index: int,
              backgrounds: Sequence[BackgroundRecord]) -> list[PlannedClips]:
    """The clip calls of a version's new videos (none unless the footage is to give clips).

    Args:
        cfg: the build config.
        videos: the new videos, in name order.
        first_position: how many videos the parent version had looked at (0 for a full version).
        first_index: the index of the first new image (as given to ``per_video_plan``).
        backgrounds: the new videos' usable frames.

    Returns:
        One call per video, in name order.
    """
    if not wants_video_clips(cfg):
        return []
    blocks = {source: k for k, source in enumerate(_by_video(backgrounds))}
    plan = []
    for offset, video in enumerate(videos):
        block = blocks.get(video_source(video))
        start = None if block is None else first_index + block * video_block(cfg) + cfg.ingest.images_per_video
        plan.append(PlannedClips(video, first_position + offset, start))
    return plan


def merged_records(parent: BuildRecords, backgrounds: Sequence[BackgroundRecord], report: InputReport
                   ) -> tuple[list[BackgroundRecord], InputReport]:
    """The parent's backgrounds and report with the new videos' added.

    Args:
        parent: the parent version's records.
        backgrounds: the new videos' background records.
        report: the new run's input report; its skipped obstacles replace the parent's.

    Returns:
        The merged backgrounds and input report.
    """
    merged = InputReport(
        videos=parent.report.videos + report.videos,
        quarantine=parent.report.quarantine + report.quarantine,
        unused_frames=parent.report.unused_frames + report.unused_frames,
        skipped_obstacles=report.skipped_obstacles,
        notes=sorted(set(parent.report.notes) | set(report.notes)),
        cameras=parent.report.cameras + report.cameras)
    return parent.backgrounds + list(backgrounds), merged


def copy_tree(source: Store, target: Store, rel: str) -> int:
    """Copy the files under ``rel`` from one store to another (hidden files excepted).

    On one local disk files are hard-linked (free, and safe: SynRail replaces files by rename and
    never writes into one). On one object store, the store copies them itself.

    Args:
        source: the store copied from.
        target: the store copied to.
        rel: the folder, relative to both roots.

    Returns:
        How many files were copied.
    """
    files = [f for f in source.find(rel) if not posixpath.basename(f).startswith(".")]
    for relative in files:
        path = source.path(relative)
        if source.is_local and target.is_local:
            destination = target.local_path(relative)
            destination.parent.mkdir(parents=True, exist_ok=True)
            if destination.exists():
                destination.unlink()
            try:
                os.link(path, destination)
            except OSError:  # another device, or no hard links here
                target.write_bytes(relative, source.read_bytes(relative))
        elif type(source.fs) is type(target.fs) and source.storage_options == target.storage_options:
            source.with_retries(source.fs.copy, path, target.path(relative))
        else:
            target.write_bytes(relative, source.read_bytes(relative))
    return len(files)


def carry_over(parent: Store, out: Store) -> BuildRecords:
    """Bring the parent version's images, labels and chunk tables into ``out``.

    Args:
        parent: the parent version's folder.
        out: the new version's folder.

    Returns:
        The parent's build records.
    """
    for folder in CARRIED_FOLDERS:
        copy_tree(parent, out, folder)
    return read_build_records(parent)


def prune_unreferenced(out: Store, chunks: Sequence[ChunkRecord], clips: Sequence[ClipRecord] = ()) -> list[str]:
    """Delete image and label files no chunk or clip lists (left by a crashed attempt with other inputs).

    Args:
        out: the version's folder.
        chunks: every chunk of the version.
        clips: every clip of the version.

    Returns:
        The paths removed.
    """
    keep = set()
    for table in [c.images_path for c in chunks] + [c.images_path for c in clips]:
        for row in read_table(out, table):
            keep.add(row["file_name"])
            keep.add(row["file_name"].replace("images/", "labels/", 1).rsplit(".", 1)[0] + ".txt")
    removed = []
    for folder in ("images", "labels"):
        for relative in out.find(folder):
            if relative not in keep:
                out.remove(relative)
                removed.append(relative)
    return removed


def version_info(cfg: BuildConfig, root: Store, version: str, kind: str, records: BuildRecords) -> VersionInfo:
    """The info of a version about to be published on top of the latest one.

    Args:
        cfg: the build config, identified by its build hash.
        root: the dataset root; its latest version becomes the parent.
        version: the new version's id.
        kind: "full" or "incremental".
        records: the new version's build records (chunks and input report).

    Returns:
        The version's info, stamped with the current time and code version.
    """
    return VersionInfo(version=version, parent=latest_version(root), kind=kind,
                       created=datetime.now(UTC).isoformat(timespec="seconds"),
                       build_hash=cfg.build_hash(), code_version=code_version(),
                       num_images=sum(c.num_images for c in records.chunks), videos=sorted(records.report.videos),
                       num_clip_frames=sum(c.frames for c in records.clips))


def local_copy(dataset_url: str, folder: str | Path) -> Path:
    """A local folder holding the latest version of ``dataset_url`` (for trainers that read only local
    files). A local dataset is used where it is; a remote one is downloaded once per version, into a
    temporary folder renamed into place, so a half download is never used.

    Args:
        dataset_url: a dataset or versioned dataset root.
        folder: where a remote dataset is downloaded to.

    Returns:
        The path of the local copy's data.yaml.
    """
    url = resolve_dataset(dataset_url)
    source = Store(url)
    if source.is_local:
        return source.local_path("data.yaml")
    target = Path(folder) / posixpath.basename(url)
    if not (target / "data.yaml").exists():
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        source.with_retries(source.fs.get, source.path("") + "/", str(partial), recursive=True)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target / "data.yaml"

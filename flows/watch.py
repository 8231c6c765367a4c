"""The bucket watcher: a scheduled flow that lists the video prefix, compares it with the videos the
latest dataset version has seen, and emits one ``synrail.video.landed`` event per new video. The
``ingest-new-videos`` deployment's trigger (prefect.yaml) turns each event into an incremental run.

Polling needs no inbound network and no bucket notifications; it also reconciles, so a video whose
event was lost is announced again on the next tick (the ingest run is idempotent). While a run holds
the dataset root, the watcher announces nothing: an event then would only queue another ingest run
behind it, one per tick of a long build; the first tick after that run announces what it left out.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.events import emit_event

from flows.versions import versioned_config
from synrail.stages.versions import latest_version, read_info
from synrail.stages.videos import source_videos
from synrail.storage.lock import current_holder, is_stale
from synrail.storage.store import Store

VIDEO_LANDED = "synrail.video.landed"


def video_resource_id(url: str) -> str:
    return f"synrail.video.{url}"


@flow(name="watch-videos", log_prints=True)
def watch_videos(config_path: str | None, dataset_url: str, overrides: dict[str, Any] | None = None) -> list[str]:
    """Emit an event for every video under the configured prefix that the latest version lacks."""
    root = Store(dataset_url)
    config = versioned_config(config_path, overrides, root)
    if config.backgrounds.source != "video":
        raise ValueError(f"config {config_path} takes procedural backgrounds: there is no video prefix to watch")
    holder = current_holder(root)
    if holder is not None and not is_stale(holder):
        print(f"{root.root_url} is held by {holder.describe()}; announcing new videos once it is done")
        return []
    latest = latest_version(root)
    known = set(read_info(root, latest).videos) if latest else set()
    new = [ref for ref in source_videos(config) if ref.name not in known]
    for ref in new:
        emit_event(event=VIDEO_LANDED,
                   resource={"prefect.resource.id": video_resource_id(ref.url), "synrail.video.name": ref.name,
                             "synrail.video.version": ref.version, "synrail.dataset": dataset_url},
                   payload={"url": ref.url, "size": ref.size})
    print(f"{len(new)} new video(s) under {config.backgrounds.video.url} for {root.root_url}: "
          + (", ".join(ref.name for ref in new) or "none"))
    return [ref.url for ref in new]

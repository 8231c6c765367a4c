"""The background stage for cab videos: sampled, filtered frames whose track is found, each with
the camera geometry estimated from its rails (the 1435 mm gauge as the ruler).

Every frame that is not used says why (filter reason, or "no track: ..."); a video that cannot be
read becomes a quarantine row. Neither stops the build.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import cv2
import numpy as np

from synrail.config import BuildConfig
from synrail.errors import InputError
from synrail.export.coco import encode_rle
from synrail.pipeline import (SPLITS, STREAM_SPLIT, BackgroundRecord, Record, decode_image, encode_image, rng_for,
                              split_counts)
from synrail.rail.detect import detect_track
from synrail.rail.estimate import SegmentationModelTrack, estimate_geometry, refine_with_segmenter
from synrail.segment.loader import load_segmenter
from synrail.sources.video import VideoRef, list_videos
from synrail.sources.video_backgrounds import QuarantineRecord, extract_video_backgrounds
from synrail.store import Store, sha256_bytes

_CONDITION_WORDS = (  # sidecar words -> condition tag, first match wins
    (("night", "dark"), "dark"), (("dusk", "dawn", "twilight"), "dusk"), (("fog", "mist", "haze", "smog"), "fog"),
    (("snow",), "snow"), (("rain", "drizzle", "storm"), "rain"), (("overcast", "cloud"), "overcast"),
    (("sun", "clear", "fair", "day"), "normal"),
)


class UnusedFrame(Record):
    video: str
    frame_index: int
    reason: str


class VideoBackgrounds(Record):
    video: str
    records: list[BackgroundRecord]
    unused: list[UnusedFrame]
    quarantine: QuarantineRecord | None
    notes: list[str]


def condition_from_metadata(metadata: dict[str, str]) -> str:
    text = f"{metadata.get('time_of_day', '')} {metadata.get('weather', '')}".lower()
    for words, condition in _CONDITION_WORDS:
        if any(word in text for word in words):
            return condition
    return "unknown"


def fit_frame(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Centre-crop to the target aspect ratio, then resize: the dataset has one resolution."""
    h, w = image.shape[:2]
    if w * height > h * width:  # too wide
        new_w = round(h * width / height)
        image = image[:, (w - new_w) // 2:(w - new_w) // 2 + new_w]
    elif w * height < h * width:  # too tall
        new_h = round(w * height / width)
        image = image[(h - new_h) // 2:(h - new_h) // 2 + new_h]
    interpolation = cv2.INTER_AREA if image.shape[1] > width else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interpolation)


def source_videos(cfg: BuildConfig) -> list[VideoRef]:
    """Every video under ``backgrounds.video.url``; InputError when the folder or prefix is missing."""
    try:
        return list_videos(cfg.backgrounds.video.url)
    except FileNotFoundError as exc:
        raise InputError(f"backgrounds.video.url: {exc}") from None


def assign_video_splits(cfg: BuildConfig, videos: Sequence[VideoBackgrounds]) -> list[VideoBackgrounds]:
    """``videos`` with every background in its split, decided over the videos that yielded backgrounds
    (after reading, so a corrupt or trackless video never leaves a split empty while a good one exists).

    With at least as many such videos as splits in use, each video feeds one split (counts by largest
    remainder, every split in use at least one, shuffled by seed, videos in name order); with fewer,
    each video is cut into time blocks, one per split, at the price of neighbouring frames.
    """
    productive = sorted((v.video for v in videos if v.records))
    used = sum(1 for share in cfg.splits.fractions().values() if share > 0)
    plan: dict[str, str | None] = dict.fromkeys(productive)
    if productive and len(productive) >= used:
        counts = split_counts(len(productive), cfg.splits.fractions())
        splits = [s for s in SPLITS for _ in range(counts[s])]
        order = rng_for(cfg.seed, STREAM_SPLIT, 100).permutation(len(productive))
        plan = {productive[i]: splits[k] for k, i in enumerate(order)}
    return [v.model_copy(update={"records": _in_split(v.records, plan.get(v.video), cfg)}) for v in videos]


def _in_split(records: list[BackgroundRecord], split: str | None, cfg: BuildConfig) -> list[BackgroundRecord]:
    """The records (in frame order) in ``split``, or in time blocks of the video when None."""
    return [r.model_copy(update={"split": split or _time_block_split(k / len(records), cfg)})
            for k, r in enumerate(records)]


def _time_block_split(position: float, cfg: BuildConfig) -> str:
    edge = 0.0
    for split, share in cfg.splits.fractions().items():
        edge += share
        if position < edge:
            return split
    return "test" if cfg.splits.test > 0 else "train"


@functools.lru_cache(maxsize=2)
def _track_model(path: str, device: str) -> SegmentationModelTrack:
    return SegmentationModelTrack(path, device=device)  # loaded once per process


def _track_mask(image: np.ndarray, cfg: BuildConfig, detection_mask: np.ndarray, frame_index: int) -> np.ndarray:
    """The detected track area, refined by the segmenter when configured (the paper's SAM step)."""
    video_cfg = cfg.backgrounds.video
    mask, logits = detection_mask, None
    if video_cfg.track_model:
        model_mask, logits = _track_model(video_cfg.track_model, cfg.segment.device).coarse_mask(image)
        mask = model_mask if model_mask.any() else mask
    if video_cfg.refine_with_segmenter:
        seg = cfg.segment
        segmenter = load_segmenter(seg.backend, seg.checkpoint, seg.model_type, seg.device)
        mask = refine_with_segmenter(image, mask, segmenter, rng=rng_for(cfg.seed, STREAM_SPLIT, frame_index),
                                     logits=logits)
    return mask


def prepare_video_backgrounds(cfg: BuildConfig, video: VideoRef, split: str | None, cache: Store) -> VideoBackgrounds:
    """All usable backgrounds of one video, in ``split``; with None, in time blocks of the video (a full
    build passes None and then decides with :func:`assign_video_splits`)."""
    video_cfg = cfg.backgrounds.video
    extraction = extract_video_backgrounds(video, video_cfg.sampling, cache, max_pixels=cfg.inputs.max_image_pixels)
    unused = [UnusedFrame(video=video.name, frame_index=r.frame_index, reason=r.reason) for r in extraction.rejected]
    records = []
    for k, frame in enumerate(extraction.frames):
        image = fit_frame(decode_image(cache.read_bytes(frame.path), cv2.IMREAD_COLOR, cache.url(frame.path)),
                          cfg.image.width, cfg.image.height)
        found = detect_track(image, hfov_deg=video_cfg.hfov_deg)
        if found.detection is None:
            unused.append(UnusedFrame(video=video.name, frame_index=frame.frame_index, reason=f"no track: {found.reason}"))
            continue
        mask = _track_mask(image, cfg, found.detection.mask, frame.frame_index)
        geometry = estimate_geometry(found.detection, cfg.image.width, cfg.image.height, hfov_deg=video_cfg.hfov_deg)
        png = encode_image(image, ".png")
        sha = sha256_bytes(png)
        path = f"backgrounds/{sha[:24]}.png"
        cache.write_bytes(path, png)
        records.append(BackgroundRecord(
            background_id=f"video-{frame.frame_id}", index=frame.frame_index,
            split=split or _time_block_split(k / max(len(extraction.frames), 1), cfg), source=f"video:{video.name}",
            path=path, sha256=sha, width=cfg.image.width, height=cfg.image.height,
            track_type=extraction.metadata.get("track_type", "unknown"),
            condition=condition_from_metadata(extraction.metadata), geometry=geometry, fog_beta=0.0,
            airlight_bgr=(0.0, 0.0, 0.0), illumination_bgr=(1.0, 1.0, 1.0), sensor_noise=0.0,
            rail_area=encode_rle(mask), rail_area_px=int(mask.sum())))
    return VideoBackgrounds(video=video.name, records=records, unused=unused, quarantine=extraction.quarantine,
                            notes=extraction.notes)

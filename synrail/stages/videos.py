"""The background stage for cab footage (videos, or folders of frames): sampled, filtered frames
whose track is found, each with the camera geometry estimated from its rails (the gauge as the ruler).

Every frame that is not used says why (filter reason, or "no track: ..."); a video that cannot be
read becomes a quarantine row. Neither stops the build.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

from synrail.config import BuildConfig
from synrail.errors import InputError
from synrail.export.coco import encode_rle
from synrail.rail.detect import detect_track
from synrail.rail.estimate import SegmentationModelTrack, estimate_geometry, refine_with_segmenter
from synrail.randomness import Stream, rng_for
from synrail.records import BackgroundRecord, UnusedFrame, VideoBackgrounds
from synrail.segment.loader import load_segmenter
from synrail.sources.video import VideoRef, list_sequences, list_videos
from synrail.sources.video_backgrounds import extract_video_backgrounds
from synrail.stages.splits import time_block_split
from synrail.storage.codecs import decode_image, encode_image
from synrail.storage.store import Store, sha256_bytes

CONFIG_SECTIONS = ("seed", "image", "splits", "backgrounds", "segment", "inputs")

_CONDITION_WORDS = (  # sidecar words -> condition tag, first match wins
    (("night", "dark"), "dark"), (("dusk", "dawn", "twilight"), "dusk"), (("fog", "mist", "haze", "smog"), "fog"),
    (("snow",), "snow"), (("rain", "drizzle", "storm"), "rain"), (("overcast", "cloud"), "overcast"),
    (("sun", "clear", "fair", "day"), "normal"),
)


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
    """The videos under ``backgrounds.video.url``, or the image sequences under ``backgrounds.frames.url``,
    sorted by name; InputError when the folder or prefix is missing."""
    try:
        if cfg.backgrounds.source == "frames":
            return list_sequences(cfg.backgrounds.frames.url)
        return list_videos(cfg.backgrounds.video.url)
    except FileNotFoundError as exc:
        raise InputError(f"backgrounds.{cfg.backgrounds.source}.url: {exc}") from None


@functools.lru_cache(maxsize=2)
def _track_model(path: str, device: str) -> SegmentationModelTrack:
    return SegmentationModelTrack(path, device=device)  # loaded once per process


def _track_mask(image: np.ndarray, cfg: BuildConfig, detection_mask: np.ndarray, frame_index: int) -> np.ndarray:
    """The detected track area, refined by the segmenter when configured (the paper's SAM step)."""
    video_cfg = cfg.backgrounds.footage
    mask, logits = detection_mask, None
    if video_cfg.track_model:
        model_mask, logits = _track_model(video_cfg.track_model, cfg.segment.device).coarse_mask(image)
        mask = model_mask if model_mask.any() else mask
    if video_cfg.refine_with_segmenter:
        seg = cfg.segment
        segmenter = load_segmenter(seg.backend, seg.checkpoint, seg.model_type, seg.device)
        prompts_rng = rng_for(cfg.seed, Stream.VIDEO_SEGMENTER_PROMPTS, frame_index)
        mask = refine_with_segmenter(image, mask, segmenter, rng=prompts_rng,
                                     logits=logits)
    return mask


def prepare_video_backgrounds(cfg: BuildConfig, video: VideoRef, split: str | None, cache: Store) -> VideoBackgrounds:
    """All usable backgrounds of one video or image sequence, in ``split``; with None, in time blocks
    (a full build passes None and then decides with ``splits.assign_video_splits``).

    Args:
        cfg: the build config (reads ``CONFIG_SECTIONS``).
        video: the video or image sequence to read.
        split: the video's split, or None to cut it into time blocks (fewer videos than splits).
        cache: the build's cache store (frames and background PNGs).

    Returns:
        The video's background records, every sampled frame left out with its reason, and a
        quarantine row when the video cannot be read.
    """
    video_cfg = cfg.backgrounds.footage
    kind = "frames" if video.is_sequence else "video"
    extraction = extract_video_backgrounds(video, video_cfg.sampling, cache,
                                          max_pixels=cfg.inputs.max_image_pixels)
    unused = [UnusedFrame(video=video.name, frame_index=r.frame_index, reason=r.reason,
                          source_url=video.frame_url(r.frame_index)) for r in extraction.rejected]
    records = []
    for k, frame in enumerate(extraction.frames):
        image = fit_frame(decode_image(cache.read_bytes(frame.path), cv2.IMREAD_COLOR, cache.url(frame.path)),
                          cfg.image.width, cfg.image.height)
        found = detect_track(image, hfov_deg=video_cfg.hfov_deg)
        if found.detection is None:
            unused.append(UnusedFrame(video=video.name, frame_index=frame.frame_index,
                                      reason=f"no track: {found.reason}",
                                      source_url=video.frame_url(frame.frame_index)))
            continue
        mask = _track_mask(image, cfg, found.detection.mask, frame.frame_index)
        geometry = estimate_geometry(found.detection, cfg.image.width, cfg.image.height, hfov_deg=video_cfg.hfov_deg)
        png = encode_image(image, ".png")
        sha = sha256_bytes(png)
        path = f"backgrounds/{sha[:24]}.png"
        cache.write_bytes(path, png)
        records.append(BackgroundRecord(
            background_id=f"{kind}-{frame.frame_id}", index=frame.frame_index,
            split=split or time_block_split(k / max(len(extraction.frames), 1), cfg), source=f"{kind}:{video.name}",
            source_url=video.frame_url(frame.frame_index), frame_index=frame.frame_index,
            path=path, sha256=sha, width=cfg.image.width, height=cfg.image.height,
            track_type=extraction.metadata.get("track_type", "unknown"),
            condition=condition_from_metadata(extraction.metadata), geometry=geometry, fog_beta=0.0,
            airlight_bgr=(0.0, 0.0, 0.0), illumination_bgr=(1.0, 1.0, 1.0), sensor_noise=0.0,
            rail_area=encode_rle(mask), rail_area_px=int(mask.sum())))
    return VideoBackgrounds(video=video.name, records=records, unused=unused, quarantine=extraction.quarantine,
                            notes=extraction.notes)

"""The background stage for cab footage (videos, or folders of frames): sampled, filtered frames
whose track is found, each with the camera geometry estimated from its rails under its shot's camera
(``synrail.rail.sequence``: focal length given or from the sleepers, the gauge as the ruler, horizon
and height shared; a video or folder that cuts between shots, or holds unrelated stills, has a
camera per shot: ``synrail.rail.shots``).

Every frame that is not used says why (filter reason, "no track: ...", its exposure where a frame
outside the exposure limits shows no track, or rails that contradict its shot's camera); a video
that cannot be read becomes a quarantine row. Neither stops the build.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import cv2
import numpy as np

from synrail.config import BuildConfig
from synrail.errors import InputError
from synrail.export.coco import encode_rle
from synrail.rail.camera import (
    CameraSettings,
    PreparedFrame,
    fit_box,
    focal_from_hfov,
    hfov_from_focal,
    prepare_frame,
    settings_for,
)
from synrail.rail.detect import TRACK_OCCLUDED, TrackDetection, rail_pair_rows
from synrail.rail.estimate import SegmentationModelTrack, refine_with_segmenter
from synrail.rail.sequence import (
    FrameEvidence,
    RailFollower,
    SequenceCameraSolution,
    follow_back,
    frame_evidence,
    frame_geometry,
    solve_shot_cameras,
    track_area_model,
)
from synrail.randomness import Stream, rng_for
from synrail.records import BackgroundRecord, SequenceCamera, UnusedFrame, VideoBackgrounds
from synrail.segment.loader import load_segmenter
from synrail.sources.video import VideoRef, list_sequences, list_videos
from synrail.sources.video_backgrounds import FrameRecord, VideoExtraction, extract_video_backgrounds
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
    """The condition tag a video's sidecar ``time_of_day`` and ``weather`` words name (first match wins), else
    "unknown".
    """
    text = f"{metadata.get('time_of_day', '')} {metadata.get('weather', '')}".lower()
    for words, condition in _CONDITION_WORDS:
        if any(word in text for word in words):
            return condition
    return "unknown"


# Fitting frames to the output's aspect ratio that keeps less than this share of their rows or
# columns is worth a note: a portrait phone frame fitted to 16:9 keeps a third of its rows, and the
# near track with them is mostly gone.
CROP_NOTE_SHARE = 0.75


def crop_note(name: str, width: int, height: int, cfg: BuildConfig) -> str | None:
    """A note where fitting a video's frames to the output's aspect ratio (a centre crop) drops much
    of each frame, or None.

    Args:
        name: the video's or sequence's name.
        width: its frames' width.
        height: its frames' height.
        cfg: the build config (``image.width``, ``image.height``).

    Returns:
        What the crop keeps and how to keep the frames whole, or None when it keeps most of them.
    """
    _, _, kept_width, kept_height = fit_box(width, height, cfg.image.width, cfg.image.height)
    share, part = min((kept_width / width, "columns"), (kept_height / height, "rows"))
    if share >= CROP_NOTE_SHARE:
        return None
    return (f"frames of {name} are {width}x{height}: fitted to the output's {cfg.image.width}x{cfg.image.height} "
            f"they keep the middle {share:.0%} of their {part} (image.width and image.height of the footage's "
            "aspect ratio keep them whole)")


def fit_frame(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Centre-crop to the target aspect ratio, then resize: the dataset has one resolution.

    Args:
        image: H x W (x C) frame.
        width: the output width, in pixels.
        height: the output height, in pixels.

    Returns:
        height x width (x C) array of the same dtype.
    """
    x0, y0, w, h = fit_box(image.shape[1], image.shape[0], width, height)
    image = image[y0:y0 + h, x0:x0 + w]
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
        The video's background records, every sampled frame left out with its reason, the video's
        camera, and a quarantine row when the video cannot be read.

    Raises:
        ValueError: the video's camera settings (config + sidecar row) are invalid.
    """
    video_cfg = cfg.backgrounds.footage
    kind = "frames" if video.is_sequence else "video"
    extraction = extract_video_backgrounds(video, video_cfg.sampling, cache,
                                          max_pixels=cfg.inputs.max_image_pixels)
    unused = [UnusedFrame(video=video.name, frame_index=r.frame_index, reason=r.reason,
                          source_url=video.frame_url(r.frame_index)) for r in extraction.rejected]
    settings = video_camera_settings(video_cfg, video.name, extraction.metadata)
    found, no_track, shots = find_tracks(cfg, extraction.frames, settings, cache)
    unused += [UnusedFrame(video=video.name, frame_index=i, reason=reason, source_url=video.frame_url(i))
               for i, reason in no_track]
    cameras, camera = shot_cameras(cfg, found, shots, settings,
                                   extraction.frames[0].width if extraction.frames else cfg.image.width)
    records = []
    for k, frame, evidence, packed_mask, shot in found:
        geometry, reason = frame_geometry(evidence, cameras[shot], frame_width=cfg.image.width,
                                          frame_height=cfg.image.height)
        if geometry is None:
            unused.append(UnusedFrame(video=video.name, frame_index=frame.frame_index, reason=reason,
                                      source_url=video.frame_url(frame.frame_index)))
            continue
        image = _prepared(cache, frame, settings, cfg).image
        mask = _track_mask(image, cfg, unpacked_mask(packed_mask, image.shape[:2]), frame.frame_index)
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
                            notes=extraction.notes + crop_notes(video, extraction, cfg)
                            + [f"camera of {video.name}: {note}" for note in camera.notes],
                            camera=sequence_camera_record(video.name, camera, settings))


def crop_notes(video: VideoRef, extraction: VideoExtraction, cfg: BuildConfig) -> list[str]:
    """``crop_note`` for the video's first kept frame, as a list (empty without one, or without a note).

    Args:
        video: the video or frame sequence.
        extraction: what its frame filters kept.
        cfg: the build config (the output's size).

    Returns:
        At most one note.
    """
    first = extraction.frames[0] if extraction.frames else None
    note = None if first is None else crop_note(video.name, first.width, first.height, cfg)
    return [] if note is None else [note]


# -- the video's camera (synrail.rail.camera / sequence) -------------------------------------------------
def video_camera_settings(video_cfg: CameraSettings, video_name: str, metadata: dict[str, str]) -> CameraSettings:
    """The config's camera defaults with the video's sidecar row laid over them.

    Args:
        video_cfg: the config's video background settings, read for their camera fields.
        video_name: the video's name, for the error message.
        metadata: the video's sidecar row (column -> cell text).

    Returns:
        The video's camera settings.

    Raises:
        ValueError: naming the video and the column at fault.
    """
    defaults = CameraSettings(**{name: getattr(video_cfg, name) for name in CameraSettings.model_fields})
    try:
        return settings_for(defaults, metadata)
    except ValueError as exc:
        raise ValueError(f"camera of video {video_name} (config backgrounds.video + sidecar row): {exc}") from None


def _prepared(cache: Store, frame: FrameRecord, settings: CameraSettings, cfg: BuildConfig) -> PreparedFrame:
    image = decode_image(cache.read_bytes(frame.path), cv2.IMREAD_COLOR, cache.url(frame.path))
    return prepare_frame(image, settings, cfg.image.width, cfg.image.height)


class FoundTrack(NamedTuple):
    """A frame whose track was found: its position among the frames given, the frame, what it
    tells the camera solve, its track mask packed to bits, and its shot (``RailFollower.shot``)."""

    position: int
    frame: FrameRecord
    evidence: FrameEvidence
    packed_mask: np.ndarray
    shot: int


def find_tracks(cfg: BuildConfig, frames: list[FrameRecord], settings: CameraSettings, cache: Store
                ) -> tuple[list[FoundTrack], list[tuple[int, str]], int]:
    """Each frame prepared (undistorted, hood cut, regions masked) and searched for the ego track,
    in frame order, each following the last one's rails within a shot (``RailFollower``); then the
    frames left without one, from the last to the first, followed from the next frame of their shot
    that has one (``sequence.follow_back``: the first frames of a shot have no earlier frame to learn
    from). Frames where both rails vanish behind something are left out as ``track occluded``,
    frames the filters kept despite their exposure (``FrameRecord.exposure``) and without a track as
    under- or overexposed.

    Args:
        cfg: the build config (the output image size).
        frames: the video's stored frames, in any order.
        settings: the video's camera settings.
        cache: the store the frames are read from.

    Returns:
        The frames with a track, in frame order (masks packed to bits: a video's worth of full masks
        would not fit a worker), (frame index, reason) of the others, and how many shots the frames make.
    """
    found, missing = [], []
    # One camera per shot: each frame's fit leads the search in the next.
    follower = RailFollower(track_area_model(cfg.backgrounds.footage.track_area_model))
    for k, frame in sorted(enumerate(frames), key=lambda item: item[1].frame_index):
        prepared = _prepared(cache, frame, settings, cfg)
        result = follower.detect(prepared.detect_image, hfov_deg=finder_hfov(settings, frame.width, prepared, cfg))
        if result.detection is None:
            missing.append(_NoTrackYet(k, frame, follower.shot, result.reason))
        else:
            found.append(_found_track(k, frame, prepared, result.detection, settings, follower.shot))
    recovered, missing = _follow_back(cfg, found, missing, settings, cache)
    found = sorted(found + recovered, key=lambda track: track.frame.frame_index)
    return found, [(m.frame.frame_index, _why_no_track(m.frame, m.reason)) for m in missing], follower.shot + 1


class _NoTrackYet(NamedTuple):
    """A frame the forward search left without a track: its position, the frame, its shot, the reason."""

    position: int
    frame: FrameRecord
    shot: int
    reason: str


def _found_track(position: int, frame: FrameRecord, prepared: PreparedFrame, detection: TrackDetection,
                 settings: CameraSettings, shot: int) -> FoundTrack:
    """The frame's track as the later steps keep it: the mask packed to bits, the evidence without it."""
    packed = np.packbits(detection.mask)
    bare = dataclasses.replace(detection, mask=np.zeros((0, 0), dtype=bool))
    return FoundTrack(position, frame, frame_evidence(prepared, bare, settings), packed, shot)


def unpacked_mask(packed: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A ``FoundTrack``'s packed track mask as the H x W boolean mask it was packed from.

    Args:
        packed: ``FoundTrack.packed_mask``.
        shape: the prepared frame's (height, width).

    Returns:
        The boolean mask.
    """
    return np.unpackbits(packed, count=shape[0] * shape[1]).reshape(shape).astype(bool)


def _follow_back(cfg: BuildConfig, found: list[FoundTrack], missing: list[_NoTrackYet], settings: CameraSettings,
                 cache: Store) -> tuple[list[FoundTrack], list[_NoTrackYet]]:
    """The frames without a track followed from the next frame of their shot that has one, walking
    back from the last frame (a frame found so leads the one before it); frames refused for
    something on the track stay refused. Returns the tracks found so and the frames still without."""
    # per shot, the earliest frame seen so far with a track, and (once a frame before it needs them)
    # that track with its mask and the rows where its own image shows both rails
    later: dict[int, FoundTrack] = {}
    lead: dict[int, tuple[TrackDetection, np.ndarray]] = {}
    recovered, still_missing = [], []
    walk = sorted([(t.frame.frame_index, t) for t in found] + [(m.frame.frame_index, m) for m in missing],
                  key=lambda item: item[0], reverse=True)
    for _, item in walk:
        if isinstance(item, FoundTrack):
            later[item.shot] = item
            lead.pop(item.shot, None)
            continue
        if item.reason == TRACK_OCCLUDED or item.shot not in later:
            still_missing.append(item)
            continue
        if item.shot not in lead:
            lead[item.shot] = _lead(later[item.shot], cfg, settings, cache)
        prepared = _prepared(cache, item.frame, settings, cfg)
        result = follow_back(prepared.detect_image, *lead[item.shot],
                             hfov_deg=finder_hfov(settings, item.frame.width, prepared, cfg))
        if result.detection is None:
            still_missing.append(item if result.reason != TRACK_OCCLUDED else item._replace(reason=result.reason))
            continue
        later[item.shot] = _found_track(item.position, item.frame, prepared, result.detection, settings, item.shot)
        recovered.append(later[item.shot])
        lead[item.shot] = (result.detection, rail_pair_rows(prepared.detect_image, result.detection))
    return recovered, still_missing[::-1]


def _lead(track: FoundTrack, cfg: BuildConfig, settings: CameraSettings, cache: Store
          ) -> tuple[TrackDetection, np.ndarray]:
    """A found frame's track with its mask again, and the rows where its image shows both rails."""
    mask = unpacked_mask(track.packed_mask, (cfg.image.height, cfg.image.width))
    detection = dataclasses.replace(track.evidence.detection, mask=mask)
    return detection, rail_pair_rows(_prepared(cache, track.frame, settings, cfg).detect_image, detection)


def finder_hfov(settings: CameraSettings, source_width: int, prepared: PreparedFrame, cfg: BuildConfig
                ) -> float | None:
    """The lens's field of view at the prepared frame's width, where the lens is known
    (``settings.hfov_deg``); None otherwise, so that the finder allows any horizon a cab camera can
    have (``fallback_hfov_deg`` is a guess for the camera matrix, not a bound on the pitch).

    Args:
        settings: the sequence's camera settings.
        source_width: the width of the source frame.
        prepared: the frame as ``prepare_frame`` fitted it to the output size.
        cfg: the build config (the output width).

    Returns:
        The field of view in degrees, or None.
    """
    if settings.hfov_deg is None:
        return None
    return hfov_from_focal(cfg.image.width, focal_from_hfov(source_width, settings.hfov_deg) * prepared.scale)


def _why_no_track(frame: FrameRecord, reason: str) -> str:
    """Why a frame without a track is left out: its exposure where the filters kept it only for the
    track search to settle (too dark or too bright to see the rails in), else the finder's reason."""
    if reason == TRACK_OCCLUDED:
        return reason
    return frame.exposure or f"no track: {reason}"


def shot_cameras(cfg: BuildConfig, found: list[FoundTrack], shots: int, settings: CameraSettings, source_width: int
                 ) -> tuple[dict[int, SequenceCameraSolution], SequenceCameraSolution]:
    """Each shot's camera from its frames' evidence (``sequence.solve_shot_cameras``).

    Args:
        cfg: the build config (the prepared frames' size).
        found: the frames with a track, from ``find_tracks``.
        shots: how many shots ``find_tracks`` saw.
        settings: the sequence's camera settings.
        source_width: width of the source frames.

    Returns:
        The cameras by shot, and the one for the sequence's card row.
    """
    return solve_shot_cameras([(f.shot, f.evidence) for f in found], shots, settings, source_width=source_width,
                              frame_width=cfg.image.width, frame_height=cfg.image.height)


def sequence_camera_record(name: str, camera: SequenceCameraSolution, settings: CameraSettings) -> SequenceCamera:
    """The card's row for one sequence's camera.

    Args:
        name: the sequence's (video's) name.
        camera: its solved camera.
        settings: its camera settings (whether the height was given, the gauge).

    Returns:
        The record, rounded for the card: degrees to 0.01, metres to 0.001; height and offset None
        without a shared calibration.
    """
    calibration = camera.calibration
    return SequenceCamera(
        sequence=name, hfov_deg=round(camera.hfov_deg, 2), hfov_source=camera.hfov_source,
        hfov_sigma_deg=None if camera.hfov_sigma_deg is None else round(camera.hfov_sigma_deg, 2),
        height_m=None if calibration is None else round(calibration.height_m.value, 3),
        height_given=settings.camera_height_m is not None,
        pitch_deg=None if camera.pitch_deg is None else round(camera.pitch_deg, 2),
        offset_m=None if calibration is None else round(calibration.offset_m.value, 3),
        gauge_mm=settings.gauge_mm, frames_calibrated=0 if calibration is None else calibration.frames,
        notes=list(camera.notes))

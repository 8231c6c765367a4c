"""The real-clips stage: approach clips on consecutive frames of a cab video or a folder of frames.

A video is read at the clip rate (every ``round(native fps / sequences.fps)``-th frame; an image
folder's every image, ``1 / sequences.fps`` apart, since a folder has no clock), each frame
prepared like the backgrounds (undistorted, hood cut, fit to ``image``) and its rails followed
from the last frame's (``rail.sequence.RailFollower``). Each shot's camera is solved over its frames
(focal length given or from the sleepers; horizon, height and offset shared), then each frame gets
its own geometry under it. A clip is a window of ``frames_per_clip`` consecutive frames of one shot
whose track is found in every one; a window where it is lost, or the footage cuts, is refused with
the frame and reason.

The train's speed is the sidecar's ``speed_kmh``, else the one the ground's image motion along the
tracked rails implies over the clip's own frames (``rail.motion``: a train speeds up and slows
down); with neither, the clip (or the whole video) is refused with the reason. An
obstacle stands ``d0`` metres along the track (and a drawn lateral offset from its centre) in the
first frame, and at ``d0 - speed * t`` in each later frame: its row (depth) from that frame's own
geometry, its column on that frame's tracked rails (their midpoint, their gap as the gauge), the
geometry placing it only where no rails were seen; it is shown once its footprint lies on the
frame's track area, the area between the rails on the rows they were seen (as a still's).
The rest is as for procedural clips (one cutout, light and weather draw per clip, sensor noise per
frame, tracks that end, the same rows and files). Each clip also reports how far a fixed ground
point would drift: the measured advance against ``speed * t``, and the spread of each track's
footprint across the rails (gauge units) and of its depth against the rails' gap.

Clip numbers are slots: the video at position ``p`` of the sorted listing (in a versioned root, its
ordinal among the videos looked at) owns clips ``p * clips .. (p + 1) * clips - 1`` (refused ones
leave gaps), so a clip's bytes depend on its video, its position and the config only, never on the
chunking.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import cv2
import numpy as np

from synrail.compose.composite import GalleryCutout, SceneBackground, is_monochrome
from synrail.compose.memory import tune_malloc_for_composing
from synrail.compose.sequence import ClipFrame, TrackedObstacle, as_composite, compose_clip_frame
from synrail.config import BuildConfig
from synrail.errors import InputError
from synrail.export.coco import encode_rle
from synrail.export.yolo import yolo_line
from synrail.rail.camera import CameraSettings, PreparedFrame, prepare_frame
from synrail.rail.geometry import CameraGeometry, TrackPose, reproject_ground_point, track_point_xz
from synrail.rail.motion import (
    Advance,
    RailPair,
    advance_between,
    ground_strip,
    lateral_gauge,
    measured,
    rails_column,
    rails_depth_m,
    speed_from_advances,
)
from synrail.rail.sequence import (
    FrameEvidence,
    RailFollower,
    frame_evidence,
    frame_geometry,
    solve_shot_cameras,
    track_area_model,
)
from synrail.randomness import ClipDraw, clip_rng
from synrail.records import (
    BackgroundRecord,
    ClipAnnotationRow,
    ClipImageRow,
    ClipRecord,
    ClipRefusal,
    GalleryRecord,
    VideoClips,
)
from synrail.sources.video import SampledFrame, VideoError, VideoRef, read_sidecar, sample_frames, sidecar_metadata
from synrail.sources.video_backgrounds import video_folder
from synrail.stages.compose import SHADOW_SCALE, annotation_rows, gallery_by_class
from synrail.stages.sequences import ClipWeather, clip_id, clip_obstacles, frame_image_index, frame_stem
from synrail.stages.videos import condition_from_metadata, finder_hfov, video_camera_settings
from synrail.storage.codecs import encode_image
from synrail.storage.store import Store, sha256_bytes
from synrail.storage.tables import rows_bytes

CONFIG_SECTIONS = ("seed", "num_images", "classes", "image", "splits", "backgrounds", "compose", "weather",
                   "sequences", "inputs")

SPEED_SIDECAR, SPEED_ESTIMATED = "sidecar", "estimated"


@dataclass(frozen=True)
class TrackedFrame:
    """One frame read for clips: where it is in the source, its geometry (or why it has none) and its rails."""

    frame_index: int
    geometry: CameraGeometry | None
    reason: str | None
    rails: RailPair | None
    shot: int = 0  # ``RailFollower.shot``: a clip never spans a cut


@dataclass(frozen=True)
class WindowFrame:
    """A frame of a clip, ready to compose."""

    frame_index: int
    time_s: float  # since the clip's first frame
    image: np.ndarray
    geometry: CameraGeometry
    rails: RailPair
    measured_step_m: float | None  # the image motion since the clip's previous frame (None: did not correlate)


@dataclass(frozen=True)
class ClipSource:
    """What every clip of one video shares: its name, kind, rate, speed and sidecar description."""

    video: VideoRef
    fps: float
    speed_kmh: float
    speed_source: str
    condition: str
    track_type: str


def video_clip_slots(cfg: BuildConfig, position: int) -> range:
    """The clip numbers the video at ``position`` of the sorted listing owns.

    Args:
        cfg: the build config (``sequences.clips`` per video).
        position: the video's index in ``stages.videos.source_videos``.

    Returns:
        Its ``sequences.clips`` clip numbers.
    """
    return range(position * cfg.sequences.clips, (position + 1) * cfg.sequences.clips)


def video_source(video: VideoRef) -> str:
    """The ``source`` its background records and clips carry: ``video:<name>`` or ``frames:<name>``."""
    return f"{'frames' if video.is_sequence else 'video'}:{video.name}"


def video_splits(backgrounds: Sequence[BackgroundRecord], video: VideoRef) -> list[tuple[int, str]]:
    """(frame index, split) of the video's background frames, which decide its clips' splits.

    Args:
        backgrounds: every background record of the build.
        video: the video or frame sequence.

    Returns:
        Its frames' indices and splits, in frame order; empty when none of its frames was usable.
    """
    return sorted((b.frame_index, b.split) for b in backgrounds
                  if b.source == video_source(video) and b.frame_index is not None)


def wants_video_clips(cfg: BuildConfig) -> bool:
    """Whether this build makes clips on its footage (footage backgrounds and ``sequences.clips`` > 0)."""
    return cfg.backgrounds.source != "procedural" and cfg.sequences.clips > 0


def clip_step(native_fps: float, fps: float) -> int:
    """Source frames between clip frames: the clip rate as close to ``fps`` as whole frames allow.

    Args:
        native_fps: the video's frame rate.
        fps: the wanted clip rate.

    Returns:
        The step, at least 1.
    """
    return max(1, int(round(native_fps / fps)))


def _metadata(cfg: BuildConfig, video: VideoRef) -> dict[str, str]:
    url = cfg.backgrounds.footage.sampling.sidecar
    if url is None:
        return {}
    try:
        return sidecar_metadata(read_sidecar(url), video)
    except ValueError as exc:
        raise InputError(f"backgrounds.{cfg.backgrounds.source}.sampling.sidecar: {exc}") from None


def _closing(stream: Iterator[SampledFrame], frames: Iterator[SampledFrame], step: int, settings: CameraSettings,
             size: tuple[int, int]) -> Iterator[tuple[SampledFrame, PreparedFrame]]:
    """The clip-rate frames prepared; the decoder is released however the iteration ends."""
    try:
        for frame in frames:
            if frame.frame_index % step == 0:
                yield frame, prepare_frame(frame.image, settings, *size)
    finally:
        stream.close()


def _frames(cfg: BuildConfig, video: VideoRef, settings: CameraSettings
            ) -> tuple[float, int, Iterator[tuple[SampledFrame, PreparedFrame]]]:
    """(clip fps, step, the clip-rate frames prepared) of the source; VideoError when it cannot be read."""
    stream = sample_frames(video, stride=1, max_frames=cfg.sequences.max_source_frames,
                           max_pixels=cfg.inputs.max_image_pixels)
    first = next(stream, None)
    if first is None:
        raise VideoError(video.url, "no frame decoded")
    native = getattr(stream, "native_fps", None)
    step = 1 if video.is_sequence or not native else clip_step(native, cfg.sequences.fps)
    fps = cfg.sequences.fps if video.is_sequence or not native else native / step
    return fps, step, _closing(stream, itertools.chain([first], stream), step, settings,
                               (cfg.image.width, cfg.image.height))


def track_frames(cfg: BuildConfig, video: VideoRef, settings: CameraSettings
                 ) -> tuple[list[TrackedFrame], float, int, list[str]]:
    """The clip-rate frames with their rails followed, each shot's camera solved over its frames
    (``sequence.solve_shot_cameras``), and each frame's geometry under it (or why it has none).

    Args:
        cfg: the build config.
        video: the video or frame sequence.
        settings: its camera settings (config + sidecar).

    Returns:
        The frames in order, the clip rate (fps), the source frames between clip frames, and the
        camera's notes.
    """
    follower = RailFollower(track_area_model(cfg.backgrounds.footage.track_area_model))
    found: list[tuple[int, int, FrameEvidence | None, RailPair | None, str | None]] = []
    source_width = cfg.image.width
    fps, step, frames = _frames(cfg, video, settings)
    for frame, prepared in frames:
        source_width = frame.image.shape[1]
        result = follower.detect(prepared.detect_image, hfov_deg=finder_hfov(settings, source_width, prepared, cfg))
        detection = result.detection
        if detection is None:
            found.append((frame.frame_index, follower.shot, None, None, f"no track: {result.reason}"))
            continue
        evidence = frame_evidence(prepared, replace(detection, mask=np.zeros((0, 0), dtype=bool)), settings)
        seen = (detection.top_row, cfg.image.height - 1 if detection.bottom_row is None else detection.bottom_row)
        found.append((frame.frame_index, follower.shot, evidence, RailPair.of(detection.left_fit, detection.right_fit,
                                                                              seen), None))
    cameras, camera = solve_shot_cameras([(shot, e) for _, shot, e, _, _ in found if e is not None],
                                         follower.shot + 1, settings, source_width=source_width,
                                         frame_width=cfg.image.width, frame_height=cfg.image.height)
    tracked = []
    for index, shot, evidence, rails, reason in found:
        geometry = None
        if evidence is not None:
            geometry, reason = frame_geometry(evidence, cameras[shot], frame_width=cfg.image.width,
                                              frame_height=cfg.image.height)
        tracked.append(TrackedFrame(index, geometry, reason, rails if geometry is not None else None, shot))
    return tracked, fps, step, list(camera.notes)


def choose_windows(frames: Sequence[TrackedFrame], step: int, length: int, count: int
                   ) -> tuple[list[list[int]], list[tuple[int, str]]]:
    """Up to ``count`` windows of ``length`` consecutive frames, each with a track in every frame.

    Windows are taken in order, back to back; a frame without geometry, a gap in the frame numbers
    (an unreadable image) or a cut to another shot refuses the window it falls in, once per
    stretch of such frames.

    Args:
        frames: the tracked frames, in order.
        step: source frames between consecutive clip frames.
        length: frames per clip.
        count: the most windows wanted.

    Returns:
        The windows (positions in ``frames``) and the refusals (frame index where the refused window
        starts, reason).
    """
    windows: list[list[int]] = []
    refusals: list[tuple[int, str]] = []
    start = 0
    while len(windows) < count and start + length <= len(frames):
        bad = next((k for k in range(start, start + length) if _break(frames, k, start, step)), None)
        if bad is None:
            windows.append(list(range(start, start + length)))
            start += length
            continue
        reason = _break(frames, bad, start, step)
        refusals.append((frames[start].frame_index, f"track lost at frame {frames[bad].frame_index}: {reason}"))
        start = bad + 1 if frames[bad].geometry is None else bad
        while start < len(frames) and frames[start].geometry is None:
            start += 1
    return windows, refusals


def _break(frames: Sequence[TrackedFrame], k: int, start: int, step: int) -> str | None:
    """Why frame ``k`` cannot continue a window that starts at ``start``, or None when it can."""
    if frames[k].geometry is None:
        return frames[k].reason or "no geometry"
    if k > start and frames[k].shot != frames[k - 1].shot:
        return f"frame {frames[k].frame_index} starts another shot (the footage cuts)"
    if k > start and frames[k].frame_index - frames[k - 1].frame_index != step:
        return f"frame {frames[k].frame_index} does not follow frame {frames[k - 1].frame_index} (missing frames)"
    return None


def measure_motion(cfg: BuildConfig, video: VideoRef, settings: CameraSettings, frames: Sequence[TrackedFrame],
                   keep: set[int]) -> tuple[list[Advance | None], dict[int, np.ndarray]]:
    """The ground's advance between consecutive frames (read again), and the images of the frames to keep.

    Args:
        cfg: the build config (``sequences.motion_distance_m``, ``max_speed_kmh``, ``fps``).
        video: the source.
        settings: its camera settings.
        frames: the tracked frames (as ``track_frames`` gave them).
        keep: positions whose prepared image is returned.

    Returns:
        One advance per consecutive pair (None where a frame lacks geometry or the strips do not
        overlap), and the kept images by position.
    """
    fps, step, source = _frames(cfg, video, settings)
    max_step = cfg.sequences.max_speed_kmh / 3.6 / fps
    advances: list[Advance | None] = []
    images: dict[int, np.ndarray] = {}
    previous = None
    for k, ((frame, prepared), tracked) in enumerate(zip(source, frames, strict=False)):
        geometry = tracked.geometry
        strip = None if geometry is None else ground_strip(cv2.cvtColor(prepared.image, cv2.COLOR_BGR2GRAY),
                                                           geometry, cfg.sequences.motion_distance_m)
        if k > 0:
            consecutive = frame.frame_index - frames[k - 1].frame_index == step
            advances.append(advance_between(previous, strip, max_step)
                            if consecutive and previous is not None and strip is not None else None)
        previous = strip
        if k in keep:
            images[k] = prepared.image
    return advances, images


def clip_speed(metadata: dict[str, str], advances: Sequence[Advance | None], fps: float, allow_estimate: bool
               ) -> tuple[float | None, str | None, str | None]:
    """The speed of one clip: the sidecar's, else the one its own frames' image motion gives (a train
    speeds up and slows down, so each window is measured on its own).

    Args:
        metadata: the video's sidecar row.
        advances: the advances between the window's consecutive frames.
        fps: the clip rate.
        allow_estimate: ``sequences.estimate_speed``.

    Returns:
        (speed km/h, its source, None), or (None, None, why there is none).
    """
    if metadata.get("speed_kmh"):
        return float(metadata["speed_kmh"]), SPEED_SIDECAR, None
    if not allow_estimate:
        return None, None, "no speed: the sidecar gives no speed_kmh and sequences.estimate_speed is off"
    estimate = speed_from_advances(advances, fps)
    if estimate.speed_kmh is None:
        return None, None, (f"no speed: the sidecar gives no speed_kmh and the image motion along the rails "
                            f"cannot tell ({estimate.reason})")
    return estimate.speed_kmh, SPEED_ESTIMATED, None


def _split_for(splits: Sequence[tuple[int, str]], frame_index: int) -> str:
    """The split of the video's background frame nearest to ``frame_index`` (a video has one split
    unless it was cut into time blocks)."""
    return min(splits, key=lambda item: (abs(item[0] - frame_index), item[0]))[1]


def compose_video_clips(cfg: BuildConfig, video: VideoRef, position: int, splits: Sequence[tuple[int, str]],
                        gallery: Sequence[GalleryRecord], cache: Store, out: Store,
                        first_image_index: int | None = None) -> VideoClips:
    """Every clip of one video or frame sequence, or why it gives none.

    Args:
        cfg: the build config (reads ``CONFIG_SECTIONS``).
        video: the video or frame sequence.
        position: its index in the sorted listing (it owns clips ``video_clip_slots``).
        splits: (frame index, split) of its background frames; a clip goes to its nearest frame's split.
        gallery: the obstacle cutouts (read from ``cache``).
        cache: the build's cache store.
        out: the output store.
        first_image_index: the image index of its first slot's first frame, the slots' frames following
            on (a versioned build numbers each video's clip frames after its stills); None: after the
            build's ``num_images`` stills (``sequences.frame_image_index``).

    Returns:
        The clips, the refused windows with their reasons, and the speed used and measured.
    """
    tune_malloc_for_composing()
    if not splits:
        return VideoClips(video=video.name, clips=[], refusals=[ClipRefusal(
            video=video.name, frame_index=0, reason="no usable background frame: the video has no split")],
            speed_kmh=None, speed_source=None)
    metadata = _metadata(cfg, video)
    settings = video_camera_settings(cfg.backgrounds.footage, video.name, metadata)
    try:
        frames, fps, step, _ = track_frames(cfg, video, settings)
    except VideoError as exc:
        return VideoClips(video=video.name, clips=[], refusals=[
            ClipRefusal(video=video.name, frame_index=0, reason=f"unreadable: {exc.reason}")],
            speed_kmh=None, speed_source=None)
    seq = cfg.sequences
    windows, refused = choose_windows(frames, step, seq.frames_per_clip, seq.clips)
    refusals = [ClipRefusal(video=video.name, frame_index=i, reason=r) for i, r in refused]
    advances, images = measure_motion(cfg, video, settings, frames, {k for w in windows for k in w})
    estimate = speed_from_advances(advances, fps)  # the whole video's, for the report
    sidecar = metadata.get("speed_kmh")
    report = {"estimated_speed_kmh": estimate.speed_kmh, "estimated_sigma_kmh": estimate.sigma_kmh, "fps": fps,
              "speed_kmh": float(sidecar) if sidecar else estimate.speed_kmh,
              "speed_source": SPEED_SIDECAR if sidecar else SPEED_ESTIMATED if seq.estimate_speed else None}
    if not sidecar and not seq.estimate_speed:
        _, _, why = clip_speed(metadata, [], fps, False)
        return VideoClips(video=video.name, clips=[], refusals=refusals + [
            ClipRefusal(video=video.name, frame_index=0, reason=why)], **{**report, "speed_kmh": None})
    cutouts = gallery_by_class(cache, gallery)
    clips = []
    for clip, window in zip(video_clip_slots(cfg, position), windows, strict=False):
        first = frames[window[0]].frame_index
        speed, speed_source, why = clip_speed(metadata, [advances[k - 1] for k in window[1:]], fps,
                                              seq.estimate_speed)
        if speed is None:
            refusals.append(ClipRefusal(video=video.name, frame_index=first, reason=why))
            continue
        source = ClipSource(video=video, fps=fps, speed_kmh=speed, speed_source=speed_source,
                            condition=condition_from_metadata(metadata),
                            track_type=metadata.get("track_type", "unknown"))
        pairs = [advances[k - 1] for k in window[1:]]
        stretch = speed_from_advances(pairs, fps)
        clip_frames = [WindowFrame(frame_index=frames[k].frame_index,
                                   time_s=(frames[k].frame_index - first) / step / fps, image=images[k],
                                   geometry=frames[k].geometry, rails=frames[k].rails,
                                   measured_step_m=None if j == 0 else measured(advances[k - 1], stretch))
                       for j, k in enumerate(window)]
        clips.append(compose_real_clip(cfg, clip, _split_for(splits, first), source, clip_frames, cutouts, out,
                                       _first_image_index(cfg, clip, position, first_image_index)))
    return VideoClips(video=video.name, clips=clips, refusals=refusals, **report)


def _first_image_index(cfg: BuildConfig, clip: int, position: int, first_image_index: int | None) -> int:
    """The image index of the clip's first frame (see ``compose_video_clips``)."""
    if first_image_index is None:
        return frame_image_index(cfg, clip, 0)
    return first_image_index + (clip - video_clip_slots(cfg, position).start) * cfg.sequences.frames_per_clip


def _placed(obstacle: TrackedObstacle, first: CameraGeometry, frame: WindowFrame, advance_m: float
            ) -> tuple[TrackedObstacle, float | None]:
    """The obstacle in a later frame's own ground frame: ``advance_m`` nearer along the track, at the
    same offset from the centre line as in the first frame.

    The row comes from the frame's geometry (its depth), the column from the frame's tracked rails
    where they were seen on that row: their midpoint, their gap as the gauge. A frame's parabolic
    centre line can leave the real rails far away on a curve (0.43 gauge at 50 m on a real video);
    the rails cannot. Where they were not seen the geometry places it (and the rails' area refuses it).

    Returns:
        The moved obstacle, and how far (gauges) the rails moved it off the geometry's place (None:
        placed by the geometry).
    """
    x, along = obstacle.world_xz
    lateral = x - float(first.track_centre_x(along))
    g = frame.geometry
    gx, z = track_point_xz(g, along - advance_m, lateral)
    _, v = g.project(np.array([gx]), np.zeros(1), np.array([z]))
    u = None if frame.rails is None else rails_column(frame.rails, float(v[0]), lateral, g.gauge_m, g.rail_head_m)
    if u is None:
        return replace(obstacle, world_xz=(gx, z)), None
    rx, _ = g.ground_point(np.array([u]), v)  # the same Z: a ground point's row depends on its depth only
    return replace(obstacle, world_xz=(float(rx[0]), z)), abs(float(rx[0]) - gx) / g.gauge_m


def _frame_area(frame: WindowFrame) -> np.ndarray:
    """The frame's track area: between its tracked rails on the rows they were seen (as a still's),
    the geometry's only for a frame without rails."""
    g = frame.geometry
    return g.track_mask() if frame.rails is None else frame.rails.area(g.width, g.height)


def _steady_reach(frames: Sequence[WindowFrame], speed_kmh: float) -> list[float]:
    """How far along the track (from the first frame's camera) each frame may show an obstacle so that
    it stays shown: a real frame's track area ends where its rails were seen, which varies from frame
    to frame; an obstacle starts only once every later frame's area reaches it (no flicker, no track
    that ends because the next frame saw its rails a little less far)."""
    world = [f.geometry.track_max_z_m + speed_kmh / 3.6 * f.time_s for f in frames]
    return [min(world[k:]) for k in range(len(world))]


def _on_track_area(obstacle: TrackedObstacle, geometry: CameraGeometry, mask: np.ndarray) -> bool:
    """Whether the obstacle's footprint (the pixel its label names) lies on the frame's track area: a
    real frame's area ends where its rails were seen, and an obstacle beyond waits until it is nearer."""
    u, v, _ = reproject_ground_point(geometry, TrackPose.along(geometry, 0.0), obstacle.world_xz)
    if not (math.isfinite(u) and math.isfinite(v)):
        return False
    row, col = int(round(v)), int(round(u))
    return 0 <= row < mask.shape[0] and 0 <= col < mask.shape[1] and bool(mask[row, col])


def _background(frame: WindowFrame, condition: str, mask: np.ndarray) -> SceneBackground:
    return SceneBackground(image=frame.image, track_mask=mask, track_rows={},
                           geometry=frame.geometry, fog_beta=0.0, airlight_bgr=(0.0, 0.0, 0.0),
                           illumination_bgr=(1.0, 1.0, 1.0), sensor_noise=0.0, light_deg=None,
                           shadow_scale=SHADOW_SCALE.get(condition, 0.6), real_frame=True,
                           monochrome=is_monochrome(frame.image))


def _rails_measures(frame: WindowFrame, u: float, v: float) -> tuple[float | None, float | None]:
    """(footprint across the rails in gauges, rails' depth minus the geometry's) at pixel (u, v)."""
    g = frame.geometry
    lateral = lateral_gauge(frame.rails, u, v, g.gauge_m, g.rail_head_m)
    x, z = g.ground_point(np.array([u]), np.array([v]))
    _, _, depth = g.to_camera(x, np.zeros(1), z)
    residual = rails_depth_m(frame.rails, v, g.focal_px, g.gauge_m, g.rail_head_m) - float(depth[0])
    return (lateral if math.isfinite(lateral) else None), (residual if math.isfinite(residual) else None)


def _frame_rows(cfg: BuildConfig, clip: int, frame: int, index: int, split: str, out_frame: ClipFrame,
                wf: WindowFrame, source: ClipSource, condition: str, sha: str, world: dict[int, tuple[float, float]],
                measured: float | None) -> tuple[ClipImageRow, list[ClipAnnotationRow]]:
    stem = frame_stem(clip, frame)
    rows = []
    for base, tracked in zip(annotation_rows(index, as_composite(out_frame), cfg), out_frame.instances, strict=True):
        lateral, residual = _rails_measures(wf, *tracked.ground_uv_px)
        rows.append(ClipAnnotationRow(**base.model_dump(exclude={"image_id"}), image_id=stem, clip_id=clip_id(clip),
                                      frame_in_clip=frame, track_id=tracked.track_id,
                                      ground_u_px=tracked.ground_uv_px[0], ground_v_px=tracked.ground_uv_px[1],
                                      world_x_m=world[tracked.track_id][0], world_z_m=world[tracked.track_id][1],
                                      along_m=tracked.along_m, lateral_gauge=lateral, depth_residual_m=residual))
    kind = "frames" if source.video.is_sequence else "video"
    image = ClipImageRow(
        image_id=stem, image_index=index, split=split, file_name=f"images/{split}/{stem}.jpg", width=cfg.image.width,
        height=cfg.image.height, background_id=f"{kind}-{video_folder(source.video)}/{wf.frame_index:06d}",
        condition=condition, background_condition=source.condition, track_type=source.track_type,
        num_annotations=len(rows), sha256=sha, quality=None, attempts=1, clip_id=clip_id(clip), frame_in_clip=frame,
        advance_m=source.speed_kmh / 3.6 * wf.time_s, measured_advance_m=measured)
    return image, rows


def _measured_advances(frames: Sequence[WindowFrame], speed_kmh: float) -> list[float]:
    """Cumulative advance the image motion measured since the first frame (a pair that did not
    correlate counts as the expected step, so it adds no drift)."""
    total, cumulative = 0.0, [0.0]
    for before, after in zip(frames, frames[1:], strict=False):
        expected = speed_kmh / 3.6 * (after.time_s - before.time_s)
        total += expected if after.measured_step_m is None else after.measured_step_m
        cumulative.append(total)
    return cumulative


def _spread(rows: Sequence[ClipAnnotationRow], field: str) -> float | None:
    """The largest spread (max - min) of ``field`` within one track over its frames."""
    by_track: dict[int, list[float]] = {}
    for r in rows:
        value = getattr(r, field)
        if value is not None:
            by_track.setdefault(r.track_id, []).append(value)
    spreads = [max(v) - min(v) for v in by_track.values() if len(v) > 1]
    return max(spreads) if spreads else None


def compose_real_clip(cfg: BuildConfig, clip: int, split: str, source: ClipSource, frames: Sequence[WindowFrame],
                      cutouts: dict[str, list[GalleryCutout]], out: Store, first_image_index: int | None = None
                      ) -> ClipRecord:
    """Compose and write one clip on real frames; return its record with its drift figures.

    Args:
        cfg: the build config.
        clip: the clip's number (a slot of its video).
        split: the clip's split.
        source: what the video's clips share (speed, rate, description).
        frames: the window's frames, in order.
        cutouts: the gallery by class.
        out: the output store.
        first_image_index: its first frame's image index (None: ``sequences.frame_image_index``).

    Returns:
        The clip's record.
    """
    first = frames[0].geometry
    first_index = frame_image_index(cfg, clip, 0) if first_image_index is None else first_image_index
    obstacles = clip_obstacles(cfg, clip, first, cutouts)
    world = {o.track_id: o.world_xz for o in obstacles}
    weather = ClipWeather(cfg, clip, source.condition)
    light = None
    if cfg.compose.shadow is not None:
        from synrail.compose.shadows import light_from_image

        light = light_from_image(frames[0].image, cfg.compose.shadow, first)
    measured = _measured_advances(frames, source.speed_kmh)
    reach = _steady_reach(frames, source.speed_kmh)
    areas = [_frame_area(f) for f in frames]
    shifts: list[float] = []
    jpeg_params = [cv2.IMWRITE_JPEG_QUALITY, cfg.image.jpeg_quality]
    started: set[int] = set()
    ended: set[int] = set()
    image_rows: list[ClipImageRow] = []
    annotations: list[ClipAnnotationRow] = []
    for frame, wf in enumerate(frames):
        advance = source.speed_kmh / 3.6 * wf.time_s
        mask = areas[frame]
        placed = {o.track_id: _placed(o, first, wf, advance) for o in obstacles if o.track_id not in ended}
        live = [o for o, _ in placed.values()
                if world[o.track_id][1] <= reach[frame] and _on_track_area(o, wf.geometry, mask)]
        out_frame = compose_clip_frame(
            _background(wf, source.condition, mask), live, TrackPose.along(wf.geometry, 0.0), cfg.compose, light,
            clip_rng(cfg.seed, clip, ClipDraw.FRAME, frame),
            lambda track: clip_rng(cfg.seed, clip, ClipDraw.EFFECTS, track))
        shown = {t.track_id for t in out_frame.instances}
        ended |= started - shown
        started |= shown
        shifts += [s for track, (_, s) in placed.items() if track in shown and s is not None]
        image = weather.apply(as_composite(out_frame), wf.geometry)
        stem = frame_stem(clip, frame)
        sha = out.write_bytes(f"images/{split}/{stem}.jpg", encode_image(image, ".jpg", jpeg_params))
        row, rows = _frame_rows(cfg, clip, frame, first_index + frame, split, out_frame, wf, source, weather.condition,
                                sha, world,
                                None if frame and wf.measured_step_m is None else measured[frame])
        out.write_text(f"labels/{split}/{stem}.txt", "".join(
            yolo_line(r.category_id, r.bbox, cfg.image.width, cfg.image.height) + "\n" for r in rows))
        image_rows.append(row)
        annotations.extend(rows)
    images_blob, annotations_blob = rows_bytes(image_rows, ClipImageRow), rows_bytes(annotations, ClipAnnotationRow)
    key = sha256_bytes(images_blob + annotations_blob)
    images_path = f".synrail/clips/{clip_id(clip)}-{key[:12]}-images.parquet"
    annotations_path = images_path.replace("-images.", "-annotations.")
    out.write_bytes(images_path, images_blob)
    out.write_bytes(annotations_path, annotations_blob)
    expected = [source.speed_kmh / 3.6 * f.time_s for f in frames]
    return ClipRecord(
        clip_index=clip, clip_id=clip_id(clip), split=split, frames=len(frames), fps=source.fps,
        speed_kmh=source.speed_kmh, event=bool(started), first_image_index=first_index,
        images_path=images_path, annotations_path=annotations_path, sha256=key, num_annotations=len(annotations),
        condition=weather.condition, track_type=source.track_type, geometry=first,
        rail_area=encode_rle(areas[0]), source=video_source(source.video),
        speed_source=source.speed_source, frame_rail_areas=[encode_rle(a) for a in areas],
        geometry_shift_gauge=max(shifts) if shifts else None,
        drift_along_m=max(abs(m - e) for m, e in zip(measured, expected, strict=True)),
        drift_lateral_gauge=_spread(annotations, "lateral_gauge"),
        drift_depth_m=_spread(annotations, "depth_residual_m"))

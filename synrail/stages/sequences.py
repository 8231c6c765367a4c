"""The sequences stage: procedural approach clips, written frame by frame beside the stills.

A clip is one procedural scene seen from a camera that moves ``speed / fps`` metres along the track
per frame (``ClipBackgrounds``: the ground shaded once per clip as textures in track coordinates and
re-projected through each frame's ``TrackPose``, the trees and masts drawn once as sprites and scaled
into place per frame, so ground textures, sleepers, trees and masts stay put in the world; it looks
like ``render_background`` with the pose).
Its obstacles stand at fixed world ground points and are re-projected in every frame
(``synrail.compose.sequence``), through the same ``CameraGeometry`` the frame is rendered with. A clip draws only from
``clip_rng(seed, clip, ...)``, so its bytes never depend on chunking; a clip is one unit of split.

Frames are images ``num_images + clip * frames_per_clip + frame`` (after the stills), named
``clipNNNNN-FFFF``; their rows go into a clip's own Parquet tables (``ClipImageRow``,
``ClipAnnotationRow``), which the export merges into COCO and the clip manifests.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from synrail.compose.composite import Composite, GalleryCutout, SceneBackground, jittered_height
from synrail.compose.memory import tune_malloc_for_composing
from synrail.compose.sequence import ClipFrame, TrackedObstacle, as_composite, compose_clip_frame
from synrail.config import BuildConfig
from synrail.export.coco import encode_rle
from synrail.export.yolo import yolo_line
from synrail.rail.geometry import CameraGeometry, TrackPose, track_point_xz
from synrail.randomness import ClipDraw, clip_rng
from synrail.records import SPLITS, ClipAnnotationRow, ClipImageRow, ClipRecord, GalleryRecord
from synrail.sources.procedural_backgrounds import BackgroundSpec, ClipBackgrounds, sample_background_spec
from synrail.stages.compose import SHADOW_SCALE, annotation_rows, chunk_ranges, gallery_by_class
from synrail.stages.splits import split_counts
from synrail.storage.codecs import encode_image
from synrail.storage.store import Store, sha256_bytes
from synrail.storage.tables import rows_bytes

# The scene comes from the backgrounds section, the obstacles from the gallery records (with their
# hashes), their look from compose and weather, the clips themselves from sequences.
CONFIG_SECTIONS = ("seed", "num_images", "classes", "image", "splits", "backgrounds", "compose", "weather",
                   "sequences")

_LATERAL_SHARE = 0.25  # obstacles stand within this share of the gauge either side of the centreline


def clip_id(clip: int) -> str:
    """The name of clip ``clip`` (and the stem prefix of its frames)."""
    return f"clip{clip:05d}"


def frame_stem(clip: int, frame: int) -> str:
    """The file stem of a clip frame.

    Args:
        clip: the clip's number.
        frame: the frame's position in the clip.

    Returns:
        ``clipNNNNN-FFFF``.
    """
    return f"{clip_id(clip)}-{frame:04d}"


def frame_image_index(cfg: BuildConfig, clip: int, frame: int) -> int:
    """The dataset-wide image index of a clip frame: after every still.

    Args:
        cfg: the build config (``num_images``, ``sequences.frames_per_clip``).
        clip: the clip's number.
        frame: the frame's position in the clip.

    Returns:
        The image index (the COCO image id is one more).
    """
    return cfg.num_images + clip * cfg.sequences.frames_per_clip + frame


def clip_splits(cfg: BuildConfig) -> list[str]:
    """Split of every clip: contiguous blocks train, val, test (whole clips, never straddling)."""
    counts = split_counts(cfg.sequences.clips, cfg.splits.fractions())
    return [s for s in SPLITS for _ in range(counts[s])]


def clip_ranges(cfg: BuildConfig) -> list[tuple[int, int]]:
    """(first, stop) of the procedural clips each task composes (none on footage: its clips come from
    ``synrail.stages.real_clips``, one task per video)."""
    if cfg.backgrounds.source != "procedural":
        return []
    return chunk_ranges(cfg.sequences.clips, cfg.execution.clips_per_task)


def clip_scene(cfg: BuildConfig, clip: int) -> tuple[BackgroundSpec, float]:
    """The clip's scene and the train's speed.

    Args:
        cfg: the build config (``seed``, ``backgrounds``, ``image``, ``sequences``).
        clip: the clip's number.

    Returns:
        The procedural scene spec and the speed in km/h.
    """
    bgc = cfg.backgrounds
    rng = clip_rng(cfg.seed, clip, ClipDraw.SCENE)
    spec = sample_background_spec(
        rng, width=cfg.image.width, height=cfg.image.height, track_types=list(bgc.track_types),
        conditions=dict(bgc.conditions), camera_height_m=bgc.camera.height_m, pitch_deg=bgc.camera.pitch_deg,
        hfov_deg=bgc.camera.hfov_deg, max_curvature=bgc.max_curvature, max_offset_m=bgc.max_offset_m)
    return spec, float(rng.uniform(*cfg.sequences.speed_kmh))


def clip_obstacles(cfg: BuildConfig, clip: int, geometry: CameraGeometry,
                   cutouts: dict[str, list[GalleryCutout]]) -> list[TrackedObstacle]:
    """The clip's obstacles, drawn once: class, cutout, size, world ground point, shadow strength.

    Args:
        cfg: the build config (``seed``, ``classes``, ``sequences``, ``compose``).
        clip: the clip's number.
        geometry: the first frame's camera.
        cutouts: the gallery's cutouts by class.

    Returns:
        The obstacles, fixed in the world for the whole clip.
    """
    rng = clip_rng(cfg.seed, clip, ClipDraw.OBSTACLES)
    low, high = cfg.sequences.obstacles_per_clip
    obstacles = []
    for track in range(int(rng.integers(low, high + 1))):
        class_name = cfg.classes[int(rng.integers(len(cfg.classes)))]
        options = cutouts[class_name]
        cutout = options[int(rng.integers(len(options)))]
        jitter = cfg.compose.size_jitter
        height_m = jittered_height(cutout, rng.uniform(1 - jitter, 1 + jitter))
        along = rng.uniform(*cfg.sequences.first_distance_m)
        lateral = rng.uniform(-_LATERAL_SHARE, _LATERAL_SHARE) * geometry.gauge_m
        strength = rng.uniform(*cfg.compose.shadow.strength) if cfg.compose.shadow is not None else 0.0
        obstacles.append(TrackedObstacle(track_id=track, cutout=cutout, height_m=float(height_m),
                                         world_xz=track_point_xz(geometry, along, lateral),
                                         shadow_strength=float(strength)))
    return obstacles


def _frame_background(scene: ClipBackgrounds, pose: TrackPose, frame: int, mask: np.ndarray) -> SceneBackground:
    spec = scene.spec
    return SceneBackground(image=scene.render(pose, frame), track_mask=mask, track_rows={},
                           geometry=spec.geometry, fog_beta=spec.fog_beta, airlight_bgr=spec.fog_colour_bgr,
                           illumination_bgr=spec.illumination_bgr, sensor_noise=spec.sensor_noise,
                           light_deg=(spec.sun_azimuth_deg, spec.sun_elevation_deg),
                           shadow_scale=SHADOW_SCALE.get(spec.condition, 0.6))


class ClipWeather:
    """The clip's one weather draw, laid over every frame with the same parameters."""

    def __init__(self, cfg: BuildConfig, clip: int, background_condition: str) -> None:
        self.cfg, self.clip, self.effect = cfg, clip, "none"
        self.condition = background_condition
        if cfg.weather.mix.get("none", 0) < sum(cfg.weather.mix.values()):
            from synrail.compose import weather  # imports albumentations (and torch): only when weather is on

            self._weather = weather
            self.condition = weather.choose_condition(cfg.weather, clip_rng(cfg.seed, clip, ClipDraw.WEATHER),
                                                      background_condition)
            self.effect = weather.weather_effect(self.condition, background_condition)

    def apply(self, composite: Composite, geometry: CameraGeometry) -> np.ndarray:
        """The frame with the clip's weather laid over it.

        Args:
            composite: the composed frame.
            geometry: the frame's camera (fog thickens with its depth).

        Returns:
            The image.
        """
        if self.effect == "none":
            return composite.image
        depth = self._weather.scene_depth(geometry, [(i.visible_mask, i.distance_m) for i in composite.instances])
        rng = clip_rng(self.cfg.seed, self.clip, ClipDraw.WEATHER, 1)  # the same draw for every frame
        return self._weather.apply_weather(composite.image, self.effect, self.cfg.weather, rng, depth_m=depth)


def _clip_rows(cfg: BuildConfig, clip: int, frame: int, split: str, frame_out: ClipFrame, advance: float,
               spec: BackgroundSpec, condition: str, sha: str, world: dict[int, tuple[float, float]]
               ) -> tuple[ClipImageRow, list[ClipAnnotationRow]]:
    index, stem = frame_image_index(cfg, clip, frame), frame_stem(clip, frame)
    rows = []
    for base, tracked in zip(annotation_rows(index, as_composite(frame_out), cfg), frame_out.instances, strict=True):
        rows.append(ClipAnnotationRow(**base.model_dump(exclude={"image_id"}), image_id=stem, clip_id=clip_id(clip),
                                      frame_in_clip=frame, track_id=tracked.track_id,
                                      ground_u_px=tracked.ground_uv_px[0], ground_v_px=tracked.ground_uv_px[1],
                                      world_x_m=world[tracked.track_id][0], world_z_m=world[tracked.track_id][1],
                                      along_m=tracked.along_m))
    image = ClipImageRow(
        image_id=stem, image_index=index, split=split, file_name=f"images/{split}/{stem}.jpg", width=cfg.image.width,
        height=cfg.image.height, background_id=clip_id(clip), condition=condition,
        background_condition=spec.condition, track_type=spec.track_type, num_annotations=len(rows), sha256=sha,
        quality=None, attempts=1, clip_id=clip_id(clip), frame_in_clip=frame, advance_m=advance)
    return image, rows


def compose_clip(cfg: BuildConfig, clip: int, split: str, cutouts: dict[str, list[GalleryCutout]],
                 out: Store) -> ClipRecord:
    """Render, compose and write every frame of clip ``clip``; return its record.

    Args:
        cfg: the build config (reads ``CONFIG_SECTIONS``).
        clip: the clip's index, 0 .. ``sequences.clips`` - 1.
        split: the clip's split (every frame goes there).
        cutouts: the gallery by class.
        out: the output store (frames, YOLO labels and the clip's Parquet tables are written there).

    Returns:
        The clip's record.
    """
    seq = cfg.sequences
    spec, speed_kmh = clip_scene(cfg, clip)
    geometry = spec.geometry
    mask = geometry.track_mask()
    obstacles = clip_obstacles(cfg, clip, geometry, cutouts)
    world = {o.track_id: o.world_xz for o in obstacles}
    light = (spec.sun_azimuth_deg, spec.sun_elevation_deg) if cfg.compose.shadow is not None else None
    weather = ClipWeather(cfg, clip, spec.condition)
    step_m = speed_kmh / 3.6 / seq.fps
    scene = ClipBackgrounds(spec, (seq.frames_per_clip - 1) * step_m)
    jpeg_params = [cv2.IMWRITE_JPEG_QUALITY, cfg.image.jpeg_quality]
    started: set[int] = set()
    ended: set[int] = set()
    image_rows: list[ClipImageRow] = []
    annotations: list[ClipAnnotationRow] = []
    for frame in range(seq.frames_per_clip):
        advance = frame * step_m
        pose = TrackPose.along(geometry, advance)
        background = _frame_background(scene, pose, frame, mask)
        frame_out = compose_clip_frame(
            background, [o for o in obstacles if o.track_id not in ended], pose, cfg.compose, light,
            clip_rng(cfg.seed, clip, ClipDraw.FRAME, frame),
            lambda track: clip_rng(cfg.seed, clip, ClipDraw.EFFECTS, track))
        shown = {t.track_id for t in frame_out.instances}
        ended |= started - shown  # a track once seen ends when its obstacle leaves the image or hides
        started |= shown
        image = weather.apply(as_composite(frame_out), geometry)
        stem = frame_stem(clip, frame)
        sha = out.write_bytes(f"images/{split}/{stem}.jpg", encode_image(image, ".jpg", jpeg_params))
        row, rows = _clip_rows(cfg, clip, frame, split, frame_out, advance, spec, weather.condition, sha, world)
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
    return ClipRecord(
        clip_index=clip, clip_id=clip_id(clip), split=split, frames=seq.frames_per_clip, fps=seq.fps,
        speed_kmh=speed_kmh, event=bool(started), first_image_index=frame_image_index(cfg, clip, 0),
        images_path=images_path, annotations_path=annotations_path, sha256=key, num_annotations=len(annotations),
        condition=weather.condition, track_type=spec.track_type, geometry=geometry, rail_area=encode_rle(mask))


def compose_clips(cfg: BuildConfig, first: int, stop: int, gallery: Sequence[GalleryRecord], cache: Store,
                  out: Store) -> list[ClipRecord]:
    """Clips ``first..stop-1`` (one task's share), each in its own split.

    Args:
        cfg: the build config.
        first: the first clip.
        stop: one past the last clip.
        gallery: the obstacle cutouts (read from ``cache``).
        cache: the build's cache store.
        out: the output store.

    Returns:
        One record per clip.
    """
    tune_malloc_for_composing()
    splits = clip_splits(cfg)
    cutouts = gallery_by_class(cache, gallery)
    return [compose_clip(cfg, clip, splits[clip], cutouts, out) for clip in range(first, stop)]

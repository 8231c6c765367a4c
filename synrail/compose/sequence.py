"""Approach clips: obstacles fixed on the track while the camera moves toward them.

Each obstacle of a clip has one world ground point (in the first frame's camera frame); every
frame re-projects it with that frame's pose (``synrail.rail.geometry.TrackPose``), scales its one
cutout to the projected size and pastes it with the compositor's own steps (occlusion, truncation,
visibility drop, shadow, harmonization, fog, sensor noise). What stays fixed along a clip: the
cutout, its size in metres, its shadow strength and the light; what changes per frame: the sensor
noise. Which tracks still run is the caller's (``synrail.stages.sequences``): a track ends for good
once shown when its obstacle's foot leaves the image or it is too hidden to label.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from synrail.compose.composite import (
    Composite,
    GalleryCutout,
    Instance,
    Placement,
    SceneBackground,
    _paste,
    drop_hidden,
    placement_at,
)
from synrail.compose.placement import GroundPoint
from synrail.compose.shadows import contact_shadow
from synrail.config import ComposeConfig
from synrail.rail.geometry import TrackPose, reproject_ground_point


@dataclass(frozen=True)
class TrackedObstacle:
    """One obstacle of a clip: what it is and where it stands in the world, drawn once per clip."""

    track_id: int
    cutout: GalleryCutout
    height_m: float  # after the size jitter
    world_xz: tuple[float, float]  # ground point in the first frame's camera frame
    shadow_strength: float


@dataclass(frozen=True)
class TrackedInstance:
    """A labelled obstacle of one clip frame, with its track and its exact (sub-pixel) ground point."""

    track_id: int
    instance: Instance
    ground_uv_px: tuple[float, float]
    along_m: float  # distance ahead of the camera along the track


@dataclass(frozen=True)
class ClipFrame:
    """One composed frame of a clip: the image and the tracks visible in it."""

    image: np.ndarray
    instances: list[TrackedInstance]


def _placement(bg: SceneBackground, obstacle: TrackedObstacle, pose: TrackPose, cfg: ComposeConfig
               ) -> tuple[Placement, tuple[float, float], float] | None:
    """The obstacle as seen from ``pose``; None when its foot is out of the image or it is too small."""
    g = bg.geometry
    u, v, distance = reproject_ground_point(g, pose, obstacle.world_xz)
    if not (math.isfinite(u) and math.isfinite(v)) or not (-0.5 <= v < g.height - 0.5 and -0.5 <= u < g.width - 0.5):
        return None
    height_px = g.object_pixel_height(u, v, obstacle.height_m)
    if height_px < cfg.min_height_px:
        return None
    bgr, mask = obstacle.cutout.scaled(height_px)
    if not mask.any():
        return None
    point = GroundPoint(u=int(round(u)), v=int(round(v)), distance_m=distance)
    rows, cols = np.nonzero(mask)
    foot_col = int(round((cols.min() + cols.max()) / 2))  # bottom-centre of the silhouette, as for stills
    placement = placement_at(obstacle.cutout, point, obstacle.height_m, bgr, mask, x0=point.u - foot_col,
                             y0=point.v - int(rows.max()), image_shape=bg.track_mask.shape)
    along = pose.ahead_m(*obstacle.world_xz)
    return None if placement is None else (placement, (u, v), along)


def compose_clip_frame(bg: SceneBackground, obstacles: Sequence[TrackedObstacle],
                       pose: TrackPose, cfg: ComposeConfig, light: tuple[float, float] | None,
                       frame_rng: np.random.Generator,
                       shadow_rng: Callable[[int], np.random.Generator]) -> ClipFrame:
    """One frame of a clip: the live tracks' obstacles re-projected from ``pose`` and pasted on ``bg``.

    Args:
        bg: this frame's background (rendered from ``pose``) with the clip's shared geometry.
        obstacles: the obstacles whose tracks still run.
        pose: the camera's place along the track in this frame.
        cfg: the compose settings (metric scale always: a clip's sizes follow its camera).
        light: the clip's one light direction (azimuth, elevation), or None for no shadows.
        frame_rng: this frame's draws (the pasted obstacles' sensor noise).
        shadow_rng: a track's shadow draws, the same every frame (so its shadow keeps its shape).

    Returns:
        The composite and its tracked instances (an obstacle out of view or too hidden has none).
    """
    seen: dict[int, tuple[TrackedObstacle, Placement, tuple[float, float], float]] = {}
    for obstacle in obstacles:
        found = _placement(bg, obstacle, pose, cfg)
        if found is not None:
            seen[obstacle.track_id] = (obstacle, *found)
    by_placement = {id(p): track for track, (_, p, _, _) in seen.items()}
    kept, visible = drop_hidden([p for _, p, _, _ in seen.values()], cfg) if seen else ([], [])
    canvas = bg.image.copy()
    tracked = []
    for p, m in zip(kept, visible, strict=True):
        track = by_placement[id(p)]
        obstacle, _, uv, along = seen[track]
        if light is not None and bg.shadow_scale > 0:
            strength = obstacle.shadow_strength * bg.shadow_scale
            contact_shadow(canvas, p.in_image, p.point.v, light[0], light[1], strength, shadow_rng(track),
                           flatten=bg.geometry.height_m / p.point.distance_m, inplace=True)
        _paste(canvas, p, bg, cfg, frame_rng)
        instance = Instance(class_name=p.cutout.class_name, cutout_id=p.cutout.cutout_id, source=p.cutout.source,
                            distance_m=p.point.distance_m, height_m=p.height_m, pixel_height=p.mask.shape[0],
                            ground_uv=(p.point.u, p.point.v), visible_mask=m, visibility=m.area / p.full_px,
                            truncated=p.in_image.area < p.full_px, occluded=m.area < p.in_image.area)
        tracked.append(TrackedInstance(track_id=track, instance=instance, ground_uv_px=uv, along_m=along))
    return ClipFrame(image=canvas, instances=tracked)


def as_composite(frame: ClipFrame) -> Composite:
    """The frame in the stills' form (for weather and labels)."""
    return Composite(image=frame.image, instances=[t.instance for t in frame.instances])

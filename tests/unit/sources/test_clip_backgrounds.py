"""Tests for ClipBackgrounds: a clip's frames re-projected from textures shaded once per clip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from synrail.rail.geometry import TrackPose
from synrail.sources.procedural_backgrounds import (
    BackgroundSpec,
    ClipBackgrounds,
    render_background,
    sample_background_spec,
)

ADVANCE_M = 30.0  # a 20-frame clip at 54 km/h and 10 frames/s


def scene(seed: int, track_type: str, condition: str, curvature: float, offset: float = 0.0,
          width: int = 1280, height: int = 720) -> BackgroundSpec:
    """A scene without sensor noise, so that the comparison sees the rendering only."""
    spec = sample_background_spec(
        np.random.default_rng(seed), width=width, height=height, track_types=[track_type],
        conditions={condition: 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5),
        hfov_deg=(50.0, 65.0), max_curvature=0.0, max_offset_m=0.0)
    geometry = spec.geometry.model_copy(update={"track_curvature": curvature, "track_offset_m": offset})
    return dataclasses.replace(spec, geometry=geometry, sensor_noise=0.0)


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    return float(structural_similarity(a, b, channel_axis=2))


SCENES = [  # track types x conditions x curves (either way), an offset camera among them
    (1, "ballasted", "normal", 0.0, 0.0),
    (2, "ballasted", "overcast", 0.003, 0.0),
    (3, "ballasted", "dusk", -0.002, 0.4),
    (4, "ballasted", "fog", 0.001, 0.0),
    (5, "ballastless", "normal", -0.003, 0.0),
    (6, "ballastless", "overcast", 0.0, -0.4),
    (7, "ballastless", "fog", 0.002, 0.0),
    (8, "ballastless", "dusk", 0.0, 0.0),
]


@pytest.mark.parametrize(("seed", "track_type", "condition", "curvature", "offset"), SCENES)
def test_clip_frames_look_like_the_analytic_render_of_the_same_pose(seed: int, track_type: str, condition: str,
                                                                   curvature: float, offset: float) -> None:
    """At the default image size (the textures' resolution is set for it), the clip's middle and last frames."""
    spec = scene(seed, track_type, condition, curvature, offset)
    clip = ClipBackgrounds(spec, ADVANCE_M)
    for frame, advance in ((10, ADVANCE_M / 2), (20, ADVANCE_M)):
        pose = TrackPose.along(spec.geometry, advance)
        framed = clip.render(pose, frame)
        assert framed.shape == (spec.geometry.height, spec.geometry.width, 3) and framed.dtype == np.uint8
        assert ssim(framed, render_background(spec, pose, frame)) >= 0.9


def test_clip_frames_at_a_small_size_look_like_the_analytic_render() -> None:
    spec = scene(2, "ballasted", "overcast", 0.002, 0.2, width=320, height=180)
    pose = TrackPose.along(spec.geometry, 25.0)
    assert ssim(ClipBackgrounds(spec, 25.0).render(pose, 3), render_background(spec, pose, 3)) >= 0.9


def test_the_ground_moves_with_the_camera() -> None:
    """A later frame matches the analytic render from the moved camera, not the first frame's."""
    spec = scene(1, "ballasted", "normal", 0.0, width=640, height=360)
    clip = ClipBackgrounds(spec, ADVANCE_M)
    moved = TrackPose.along(spec.geometry, 7.3)
    framed = clip.render(moved, 1)
    assert ssim(framed, render_background(spec, moved, 1)) >= 0.9
    assert ssim(framed, render_background(spec, TrackPose.along(spec.geometry, 0.0), 1)) < 0.7


def test_clip_frames_keep_the_scene_geometry_and_track_area_free_of_clutter() -> None:
    spec = dataclasses.replace(scene(3, "ballasted", "normal", 0.002, width=320, height=180), tree_count=40)
    clip = ClipBackgrounds(spec, ADVANCE_M)
    assert clip.spec.geometry == spec.geometry  # obstacles are placed and measured with it
    bare = ClipBackgrounds(dataclasses.replace(spec, tree_count=0, mast_side=0, treeline_distance_m=0.0), ADVANCE_M)
    pose = TrackPose.along(spec.geometry, 12.0)
    mask = spec.geometry.track_mask()
    assert np.array_equal(clip.render(pose, 2)[mask], bare.render(pose, 2)[mask])


def test_props_grow_and_move_as_the_camera_nears_them() -> None:
    """Trees and masts are sprites drawn once per clip: a later frame shows them where, and as large
    as, the analytic render of its pose draws them (not where a pose 3 m behind would)."""
    from synrail.randomness import RenderStream, render_rng
    from synrail.sources import procedural_backgrounds as pb

    spec = dataclasses.replace(scene(4, "ballasted", "fog", 0.002, width=640, height=360), tree_count=40)
    pose = TrackPose.along(spec.geometry, 20.0)
    framed = ClipBackgrounds(spec, ADVANCE_M).render(pose, 2).astype(np.int16)
    clutter = pb._render_clutter(spec, spec.geometry.track_mask(), render_rng(spec.palette_seed, RenderStream.CLUTTER),
                                 pose)
    props = clutter[..., 3] == 255  # opaque in the analytic render
    assert props.mean() > 0.05

    def error(image: np.ndarray) -> float:
        return float(np.abs(image.astype(np.int16) - framed)[props].mean())

    right = error(render_background(spec, pose, 2))
    assert right < 6.0
    assert error(render_background(spec, TrackPose.along(spec.geometry, 17.0), 2)) > 3 * right


def test_frames_are_deterministic_and_sensor_noise_differs_per_frame() -> None:
    spec = dataclasses.replace(scene(2, "ballastless", "overcast", 0.0, width=320, height=180), sensor_noise=3.0)
    pose = TrackPose.along(spec.geometry, 5.0)
    first = ClipBackgrounds(spec, ADVANCE_M).render(pose, 4)
    assert np.array_equal(first, ClipBackgrounds(spec, ADVANCE_M).render(pose, 4))
    other = ClipBackgrounds(spec, ADVANCE_M).render(pose, 5)
    difference = first.astype(np.int16) - other.astype(np.int16)
    assert 1.0 < difference.std() < 3.0 * 3  # the same scene, another noise draw


def test_props_stay_put_behind_a_treeline_as_the_camera_moves() -> None:
    """The treeline's draws do not depend on the camera's advance, so the trees and masts drawn after
    it from the same stream are the same ones in every frame (they used to be re-drawn)."""
    from synrail.randomness import RenderStream, render_rng
    from synrail.sources import procedural_backgrounds as pb

    spec = dataclasses.replace(scene(4, "ballasted", "normal", 0.001), treeline_distance_m=600.0)
    mask = spec.geometry.track_mask()
    states = []
    for advance in (0.0, 1.7, 13.0, 29.0):
        rng = render_rng(spec.palette_seed, RenderStream.CLUTTER)
        pb._draw_treeline(pb._Painter(spec, mask, TrackPose.along(spec.geometry, advance)), rng)
        states.append(rng.bit_generator.state["state"]["state"])
    assert len(set(states)) == 1


def test_a_very_long_clip_gets_coarser_textures_within_remap_limits() -> None:
    spec = scene(5, "ballastless", "normal", 0.0, width=320, height=180)
    clip = ClipBackgrounds(spec, 20_000.0)  # 1,000 frames at 72 km/h and 1 frame/s
    image = clip.render(TrackPose.along(spec.geometry, 20_000.0), 999)
    assert image.shape == (180, 320, 3) and image.std() > 1.0


def test_the_clip_finish_rounds_and_saturates_as_numpy_does() -> None:
    """The vignette, the sensor-noise window and the cast to uint8 through OpenCV's passes give numpy's
    values: rounded half to even, clipped to 0-255 (the input runs past both ends)."""
    spec = dataclasses.replace(scene(1, "ballasted", "normal", 0.0, width=64, height=36), sensor_noise=0.02)
    clip = ClipBackgrounds(spec, 5.0)
    rng = np.random.default_rng(3)
    image = rng.uniform(-0.1, 1.1, (36, 64, 3)).astype(np.float32)
    image.flat[:40] = (np.arange(40, dtype=np.float32) + 0.5) / 255  # exact halves before the noise
    first = clip._finish(image.copy(), 1)  # draws the clip's noise pool
    shifted = [(dy, dx) for dy in range(clip._NOISE_SHIFT + 1) for dx in range(clip._NOISE_SHIFT + 1)
               if np.array_equal(first, _numpy_finish(clip, image, dy, dx))]
    assert shifted, "no window of the noise pool gives numpy's values"
    assert first.dtype == np.uint8 and first.min() == 0 and first.max() == 255


def _numpy_finish(clip: ClipBackgrounds, image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    h, w = image.shape[:2]
    out = image * clip._falloff + clip._noise[dy:dy + h, dx:dx + w]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)

"""Cuts between shots: a sequence's frames are followed, and its camera learned, within a shot only."""

from __future__ import annotations

import dataclasses
import itertools
from functools import cache

import cv2
import numpy as np
from test_rail_follow import OBSTACLE_Z_M, sequence, with_obstacle
from test_rail_second_opinion import OracleModel, scene

from synrail.rail.detect import TRACK_OCCLUDED
from synrail.rail.sequence import RailFollower
from synrail.rail.shots import same_shot, shot_signature
from synrail.sources.procedural_backgrounds import render_background, sample_background_spec

WIDTH, HEIGHT = 640, 360


@cache
def other_scene(seed: int, condition: str) -> np.ndarray:
    """A still from another camera: another line, in other light."""
    spec = sample_background_spec(
        np.random.default_rng(seed), width=WIDTH, height=HEIGHT, track_types=["ballasted"],
        conditions={condition: 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(50.0, 65.0),
        max_curvature=0.0, max_offset_m=0.0)
    return render_background(spec)


def moments_later(image: np.ndarray, zoom: float, seed: int) -> np.ndarray:
    """The same camera a little further on: the view grows about its centre, and sensor noise is new."""
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D(((width - 1) / 2, (height - 1) / 2), 0.0, zoom)
    moved = cv2.warpAffine(image, matrix, (width, height), borderMode=cv2.BORDER_REFLECT)
    noise = np.random.default_rng(seed).normal(0, 3, moved.shape)
    return np.clip(moved + noise, 0, 255).astype(np.uint8)


def test_frames_of_one_shot_are_one_shot_and_stills_of_other_scenes_are_not() -> None:
    frames = [image for _, image in sequence(0, "ballasted", 0.002)]
    frames += [moments_later(frames[-1], 1.04, seed=1), moments_later(frames[-1], 1.08, seed=2)]
    signatures = [shot_signature(image) for image in frames]
    assert all(same_shot(a, b) for a, b in itertools.pairwise(signatures))
    for seed, condition in ((0, "dusk"), (1, "overcast"), (2, "fog")):
        assert not same_shot(signatures[-1], shot_signature(other_scene(seed, condition))), (seed, condition)


def test_infrared_frames_are_compared_by_their_grey_levels_and_layout() -> None:
    """Colourless frames all share one hue-saturation bin: their colours would always match."""
    def infrared(image: np.ndarray) -> np.ndarray:
        return cv2.cvtColor(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)

    _, image, _ = scene(0, 0.0)
    here = shot_signature(infrared(image))
    assert here.colourless and not shot_signature(image).colourless
    assert same_shot(here, shot_signature(infrared(moments_later(image, 1.04, seed=1))))
    assert not same_shot(here, shot_signature(infrared(other_scene(1, "overcast"))))
    assert not same_shot(here, shot_signature(image))  # the camera switched to infrared, or another camera


def test_a_black_frame_neither_cuts_nor_stands_for_its_shot() -> None:
    """A tunnel's dark or a dropped frame shows nothing to compare: the frame after it is compared
    with the last one that showed something."""
    _, image, _ = scene(0, 0.0)
    black = shot_signature(np.zeros_like(image))
    assert not black.comparable and shot_signature(image).comparable
    follower = RailFollower()
    for frame in (image, np.zeros_like(image), image):
        follower.detect(frame)
    assert follower.shot == 0


def test_a_cut_starts_a_new_shot_that_forgets_the_cameras_mount() -> None:
    """The mount learned from one camera's frames says nothing of the next shot's camera."""
    _, image, truth = scene(0, 1.2)
    follower = RailFollower(OracleModel(truth, frames=3))
    for _ in range(3):
        assert follower.detect(image).detection is not None
    assert follower.mount_offset is not None and follower.shot == 0
    follower.detect(other_scene(0, "dusk"))
    assert follower.shot == 1 and follower.mount_offset is None


def test_rails_seen_in_the_shot_before_a_cut_do_not_judge_occlusion_after_it() -> None:
    """After a cut, as in a first frame, there is no clear frame of this camera to go by. Without
    the cut, the other scene's rows would be where this frame's rails must show."""
    spec, image = sequence(0, "ballasted", 0.0)[-1]
    blocked = with_obstacle(spec, image, "vehicle", OBSTACLE_Z_M, seed=0)
    same_camera = RailFollower()
    same_camera.detect(image)
    assert same_camera.detect(blocked).reason == TRACK_OCCLUDED  # the control: one shot
    after_cut = RailFollower()
    after_cut.detect(other_scene(0, "dusk"))
    assert after_cut.detect(blocked).reason != TRACK_OCCLUDED
    assert after_cut.shot == 1


def test_an_occluded_frame_is_judged_within_its_shot() -> None:
    """An obstacle filling the view changes the frame, but not into another shot."""
    frames = sequence(0, "ballasted", 0.0)
    spec, last = frames[-1]
    blocked = with_obstacle(spec, last, "vehicle", OBSTACLE_Z_M, seed=0)
    assert same_shot(shot_signature(frames[-2][1]), shot_signature(blocked))


def test_shots_of_a_sequence_are_solved_each_with_its_own_camera() -> None:
    from synrail.rail.camera import CameraSettings
    from synrail.rail.sequence import FrameEvidence, solve_shot_cameras

    frames = sequence(0, "ballasted", 0.0)
    follower = RailFollower()
    evidence = []
    for image in [image for _, image in frames] + [other_scene(0, "dusk")]:
        detection = follower.detect(image).detection
        assert detection is not None
        evidence.append((follower.shot, FrameEvidence(detection=dataclasses.replace(detection), profile=None,
                                                      scale=1.0, principal=((WIDTH - 1) / 2, (HEIGHT - 1) / 2))))
    cameras, standing = solve_shot_cameras(evidence, follower.shot + 1, CameraSettings(), source_width=WIDTH,
                                           frame_width=WIDTH, frame_height=HEIGHT)
    assert sorted(cameras) == [0, 1]
    assert any("2 shots" in note and "shot 1's, from 4 frames" in note for note in standing.notes)

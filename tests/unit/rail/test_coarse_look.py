"""The coarse look: a wide frame where the search at its own width finds nothing is searched once
more shrunk to ``COARSE_WIDTH`` columns, and a pair centred under the camera found there is drawn
back at the frame's size."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest
from test_rail_second_opinion import iou_with_truth

from synrail.rail import detect
from synrail.rail.detect import COARSE_WIDTH, NO_RAIL_EDGES, detect_track, lateral_offset
from synrail.rail.sequence import RailFollower
from synrail.sources.procedural_backgrounds import render_background, sample_background_spec


@cache
def wide_scene(offset_m: float, width: int = 1280, height: int = 720) -> tuple[np.ndarray, np.ndarray]:
    """A straight ballasted scene, the camera ``offset_m`` beside the track centre: image and exact track area."""
    spec = sample_background_spec(
        np.random.default_rng(0), width=width, height=height, track_types=["ballasted"],
        conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(50.0, 65.0),
        max_curvature=0.0, max_offset_m=0.0)
    spec = dataclasses.replace(spec, geometry=spec.geometry.model_copy(update={"track_offset_m": offset_m}))
    return render_background(spec), spec.geometry.track_mask()


@pytest.fixture
def blind_above_coarse_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line search finds nothing on frames wider than the coarse width (as on a frame whose
    rails the rules miss at its own width)."""
    original = detect._ridge_segments

    def segments(grey: np.ndarray, *args, **kwargs):
        if grey.shape[1] > COARSE_WIDTH:
            raise detect._NoTrack(NO_RAIL_EDGES)
        return original(grey, *args, **kwargs)

    monkeypatch.setattr(detect, "_ridge_segments", segments)


@pytest.mark.usefixtures("blind_above_coarse_width")
def test_a_wide_frame_refused_at_its_width_is_found_at_the_coarse_width(monkeypatch: pytest.MonkeyPatch) -> None:
    image, truth = wide_scene(0.0)
    found = detect_track(image).detection
    assert found is not None and found.mask.shape == truth.shape
    assert iou_with_truth(truth, found) > 0.95
    monkeypatch.setattr(detect, "_COARSE_FROM", 1e9)  # no coarse look: the frame's own refusal stands
    alone = detect_track(image)
    assert alone.detection is None and alone.reason == NO_RAIL_EDGES


@pytest.mark.usefixtures("blind_above_coarse_width")
def test_the_coarse_look_keeps_a_hood_out_of_the_track() -> None:
    image, truth = wide_scene(0.0)
    hood = np.zeros(truth.shape, dtype=bool)
    hood[-72:] = True
    found = detect_track(image, ignore_mask=hood).detection
    assert found is not None and found.bottom_row is not None and found.bottom_row < truth.shape[0] - 72
    assert not found.mask[-72:].any()


@pytest.mark.usefixtures("blind_above_coarse_width")
def test_the_coarse_look_takes_only_a_pair_the_camera_rides_over(monkeypatch: pytest.MonkeyPatch) -> None:
    image, _ = wide_scene(0.4)
    found = detect_track(image).detection
    assert found is not None
    offset = lateral_offset(found)
    assert 0.15 < abs(offset) < 0.5
    monkeypatch.setattr(detect, "_COARSE_MAX_OFFSET_GAPS", 0.1)
    assert detect_track(image).detection is None
    # A sequence that knows its camera rides there takes the pair at that offset.
    assert detect_track(image, mount_offset=offset).detection is not None


@pytest.mark.usefixtures("blind_above_coarse_width")
def test_a_frame_not_much_wider_than_the_coarse_width_gets_no_coarse_look() -> None:
    image, _ = wide_scene(0.0, width=800, height=450)
    result = detect_track(image)
    assert result.detection is None and result.reason == NO_RAIL_EDGES


def test_a_shrunk_frame_hides_what_any_pixel_under_it_hid() -> None:
    image = np.zeros((90, 1600, 3), dtype=np.uint8)
    mask = np.zeros((90, 1600), dtype=bool)
    mask[:, 801] = True  # one column: a third of a shrunk pixel at 2.5x
    small, small_mask = detect.shrunk(image, mask, 640)
    assert small.shape == (36, 640, 3) and small_mask.shape == (36, 640)
    assert small_mask[:, 320].all() and small_mask.sum() == 36
    same, same_mask = detect.shrunk(image[:, :600], mask[:, :600], 640)
    assert same.shape == (90, 600, 3) and same_mask is not None and same_mask.shape == (90, 600)


@pytest.mark.usefixtures("blind_above_coarse_width")
def test_a_build_s_follower_draws_the_coarse_finding_back_at_the_frame_s_size() -> None:
    """A 1920 frame is searched at the follower's 1280 columns, then at the coarse 640: the finding
    is drawn back twice."""
    image, truth = wide_scene(0.0, width=1920, height=1080)
    found = RailFollower(track_model=None).detect(image).detection
    assert found is not None and found.mask.shape == truth.shape
    assert iou_with_truth(truth, found) > 0.95

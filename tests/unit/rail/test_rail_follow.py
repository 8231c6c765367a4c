"""Following the ego rails from frame to frame, and frames where something hides them."""

from __future__ import annotations

import dataclasses
from functools import cache

import cv2
import numpy as np
import pytest

from synrail.rail.detect import (
    TRACK_OCCLUDED,
    RailFit,
    TrackDetection,
    TrackResult,
    detect_track,
    object_between_rails,
    rail_pair_rows,
    track_occluded,
)
from synrail.rail.sequence import FOLLOW_BACK_FAILED, RailFollower, follow_back
from synrail.sources.procedural_backgrounds import BackgroundSpec, render_background, sample_background_spec
from synrail.sources.procedural_obstacles import render_cutout

WIDTH, HEIGHT = 640, 360
OBSTACLE_Z_M = 30.0


@cache
def sequence(seed: int, track_type: str, curvature: float, frames: int = 4
             ) -> tuple[tuple[BackgroundSpec, np.ndarray], ...]:
    """Consecutive cab frames of one camera: the track bends a little more, the train sways."""
    spec = sample_background_spec(
        np.random.default_rng(seed), width=WIDTH, height=HEIGHT, track_types=[track_type],
        conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(50.0, 65.0),
        max_curvature=0.0, max_offset_m=0.15)
    out = []
    for i in range(frames):
        geometry = spec.geometry.model_copy(update={
            "track_curvature": curvature * (1 + 0.1 * i), "track_offset_m": spec.geometry.track_offset_m + 0.03 * i,
            "pitch_rad": spec.geometry.pitch_rad + 0.002 * i})
        frame_spec = dataclasses.replace(spec, geometry=geometry)
        out.append((frame_spec, render_background(frame_spec)))
    return tuple(out)


def covers_truth(spec: BackgroundSpec, detection: TrackDetection) -> float:
    truth = spec.geometry.track_mask()
    truth[:detection.top_row] = False
    return float((detection.mask & truth).sum() / max(1, (detection.mask | truth).sum()))


def with_obstacle(spec: BackgroundSpec, image: np.ndarray, kind: str, z_m: float, seed: int) -> np.ndarray:
    """A procedural obstacle cutout pasted standing on the track centre ``z_m`` ahead."""
    geometry = spec.geometry
    centre = geometry.track_centre_x(np.array([z_m]))
    u, v = (float(p[0]) for p in geometry.project(centre, np.array([0.0]), np.array([z_m])))
    cutout = render_cutout(kind, np.random.default_rng(seed), pixel_height=64)
    height_px = geometry.object_pixel_height(u, v, cutout.height_m)
    width_px = cutout.rgba.shape[1] * height_px / cutout.rgba.shape[0]
    rgba = cv2.resize(cutout.rgba, (max(1, round(width_px)), max(1, round(height_px))), interpolation=cv2.INTER_AREA)
    h, w = rgba.shape[:2]
    x0, y0 = int(round(u - w / 2)), int(round(v - h))
    out = image.copy()
    region = out[y0:y0 + h, x0:x0 + w]
    region[:] = np.where(rgba[:, :, 3:] > 127, rgba[:, :, :3], region)
    return out


def followed_results(frames: list[np.ndarray]):
    follower = RailFollower()
    return [follower.detect(image) for image in frames]


def test_consecutive_frames_are_followed_from_the_last_fit() -> None:
    frames = sequence(1, "ballastless", 0.0025)
    results = followed_results([image for _, image in frames])
    assert all(r.detection is not None for r in results), [r.reason for r in results]
    assert [r.detection.followed for r in results] == [False, True, True, True]
    for (spec, _), result in zip(frames, results, strict=True):
        assert covers_truth(spec, result.detection) > 0.9


def test_a_prior_that_leads_nowhere_falls_back_to_the_full_search() -> None:
    spec, image = sequence(2, "ballasted", -0.002)[0]
    found = detect_track(image).detection
    assert found is not None
    gap = float(found.gap_px(HEIGHT - 1))
    # The same fit a gap and a half to the right: no rail pair there.
    shifted = dataclasses.replace(found, left_fit=dataclasses.replace(found.left_fit, a=found.left_fit.a + 1.5 * gap),
                                  right_fit=dataclasses.replace(found.right_fit, a=found.right_fit.a + 1.5 * gap))
    assert isinstance(shifted.left_fit, RailFit)
    result = detect_track(image, prior=shifted)
    assert result.detection is not None and not result.detection.followed
    assert covers_truth(spec, result.detection) > 0.9


def test_a_vehicle_on_the_track_is_left_out_as_occluded_and_the_clear_frame_kept() -> None:
    frames = sequence(0, "ballasted", 0.0)
    clear = [image for _, image in frames]
    assert all(r.detection is not None for r in followed_results(clear))  # the control: all kept
    spec, last = frames[-1]
    for kind in ("vehicle", "animal"):
        blocked = followed_results(clear[:-1] + [with_obstacle(spec, last, kind, OBSTACLE_Z_M, seed=0)])
        assert blocked[-1].detection is None and blocked[-1].reason == TRACK_OCCLUDED, kind
        assert all(r.detection is not None for r in blocked[:-1])


def test_a_followed_fit_stopping_short_is_no_occluder_where_the_frame_s_own_search_sees_the_rails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Following from the last fit can give up on the far rails of a frame whose own search
    follows them: the rails are there, so the frame is kept, with the detection that reaches them."""
    import synrail.rail.sequence as sequence_module

    def stops_short(image: np.ndarray, **kwargs) -> TrackResult:
        result = detect_track(image, **kwargs)
        found = result.detection
        if kwargs.get("prior") is None or found is None:
            return result
        # The far half given up, and the fit bent off the far rails (its curve term drifted).
        top = found.top_row + (HEIGHT - found.top_row) // 2
        mask = found.mask.copy()
        mask[:top] = False
        left, right = (dataclasses.replace(fit, c=fit.c + 400.0) for fit in (found.left_fit, found.right_fit))
        return TrackResult(dataclasses.replace(found, mask=mask, top_row=top, left_fit=left, right_fit=right,
                                               followed=True))

    monkeypatch.setattr(sequence_module, "detect_track", stops_short)
    frames = sequence(0, "ballasted", 0.0)
    results = followed_results([image for _, image in frames])
    assert all(r.detection is not None for r in results), [r.reason for r in results]
    assert not any(r.detection.followed for r in results[1:])  # each kept with its own search's rails
    spec, last = frames[-1]
    blocked = followed_results([image for _, image in frames[:-1]] + [with_obstacle(spec, last, "vehicle",
                                                                                    OBSTACLE_Z_M, seed=0)])
    assert blocked[-1].reason == TRACK_OCCLUDED  # an obstacle still hides the rails from both


@pytest.mark.parametrize("width, searched", [(1920, 1280), (640, 640)])
def test_a_frame_wider_than_the_finder_s_width_is_searched_at_that_width(
        width: int, searched: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finder's rules were measured at ``TRACK_WIDTH`` columns: a wider frame is searched there
    and its detection drawn back at the frame's size; a narrower one is searched as it is."""
    import synrail.rail.sequence as sequence_module
    from synrail.rail.detect import rescaled
    from synrail.rail.sequence import TRACK_WIDTH

    searched_widths = []

    def recording(image: np.ndarray, **kwargs) -> TrackResult:
        searched_widths.append(image.shape[1])
        return detect_track(image, **kwargs)

    monkeypatch.setattr(sequence_module, "detect_track", recording)
    _, image = sequence(0, "ballasted", 0.002)[0]
    at_track_width = cv2.resize(image, (TRACK_WIDTH, TRACK_WIDTH * HEIGHT // WIDTH), interpolation=cv2.INTER_LINEAR)
    frame = cv2.resize(at_track_width, (width, width * HEIGHT // WIDTH), interpolation=cv2.INTER_AREA
                       if width < TRACK_WIDTH else cv2.INTER_LINEAR)
    found = RailFollower().detect(frame).detection
    assert found is not None and found.mask.shape == frame.shape[:2]
    assert set(searched_widths) == {searched}
    if searched == TRACK_WIDTH:
        reference = rescaled(RailFollower().detect(at_track_width).detection, frame.shape[1], frame.shape[0])
        assert np.count_nonzero(found.mask & reference.mask) >= 0.97 * np.count_nonzero(found.mask | reference.mask)
        assert abs(found.horizon_v - reference.horizon_v) < 0.01 * frame.shape[0]


def test_a_detection_rescaled_to_another_size_keeps_its_rails_on_the_scene_s() -> None:
    from synrail.rail.detect import rescaled

    spec, image = sequence(0, "ballasted", 0.002)[0]
    found = detect_track(image).detection
    assert found is not None
    double = rescaled(found, 2 * WIDTH, 2 * HEIGHT)
    rows = np.arange(found.top_row, HEIGHT, dtype=np.float64)
    for small, large in ((found.left_fit, double.left_fit), (found.right_fit, double.right_fit)):
        # pixel centres: column x at this size is column 2 x + 0.5 at twice the size
        assert np.allclose(large.x(2 * rows + 0.5), 2 * small.x(rows) + 0.5)
    back = rescaled(double, WIDTH, HEIGHT)
    assert np.count_nonzero(back.mask ^ found.mask) <= 0.01 * np.count_nonzero(found.mask)
    assert back.top_row == found.top_row and back.bottom_row == found.bottom_row


def test_an_obstacle_in_the_first_frame_is_not_judged_without_a_clear_frame() -> None:
    """Occlusion is judged against what the sequence showed: a first frame has nothing to go by."""
    spec, image = sequence(0, "ballasted", 0.0)[0]
    result = followed_results([with_obstacle(spec, image, "vehicle", OBSTACLE_Z_M, seed=0)])[0]
    assert result.reason != TRACK_OCCLUDED


@pytest.mark.parametrize("case", [(0, "ballasted", 0.0), (3, "ballastless", 0.0)], ids=lambda c: f"seed{c[0]}-{c[1]}")
def test_a_person_between_the_rails_is_left_out_as_occluded(case: tuple[int, str, float]) -> None:
    """A person is narrower than the gauge and hides neither rail: the bed's middle, unlike its
    sides, changes over the rows the person spans. No clear frame is needed for that."""
    frames = sequence(*case)
    clear = [image for _, image in frames]
    spec, last = frames[-1]
    person = with_obstacle(spec, last, "person", 15.0, seed=0)
    found = detect_track(person).detection
    assert found is not None
    # The rails do not vanish: the check on rails seen before does not see the person.
    assert not track_occluded(person, found, rail_pair_rows(clear[-2], detect_track(clear[-2]).detection))
    assert object_between_rails(person, found)
    results = followed_results(clear[:-1] + [person])
    assert [r.reason for r in results] == [None, None, None, TRACK_OCCLUDED]
    assert followed_results([person])[0].reason == TRACK_OCCLUDED


@pytest.mark.parametrize("seed", [0, 1])
def test_a_bed_crushed_black_below_its_lit_far_rows_shows_nothing_between_the_rails(seed: int) -> None:
    """At night or in a tunnel mouth most of the bed is black, its rows alike to the last unit: the
    lit far rows differ from them, but their middle does not differ from their sides."""
    spec, image = sequence(seed, "ballasted", 0.0)[-1]
    found = detect_track(image).detection
    dark = image.copy()
    near = int(found.horizon_v + 0.25 * (HEIGHT - found.horizon_v))
    dark[near:] = (dark[near:] * 0.03).astype(np.uint8)
    assert not object_between_rails(dark, found)


@pytest.mark.parametrize("case", [(seed, track_type, curvature) for seed in range(4)
                                  for track_type in ("ballasted", "ballastless") for curvature in (0.0, 0.0025)],
                         ids=lambda c: f"seed{c[0]}-{c[1]}-k{c[2]}")
def test_a_clear_track_shows_nothing_between_the_rails(case: tuple[int, str, float]) -> None:
    spec, image = sequence(*case)[-1]
    found = detect_track(image).detection
    assert found is not None
    assert not object_between_rails(image, found)


def test_a_frame_is_followed_back_from_a_later_frame_of_its_shot() -> None:
    """The first frames of a shot have no earlier one to learn from: a later frame's rails lead the
    search on them, as an earlier frame's lead the next."""
    frames = sequence(1, "ballastless", 0.0025)
    later = detect_track(frames[1][1]).detection
    assert later is not None
    spec, first = frames[0]
    result = follow_back(first, later, rail_pair_rows(frames[1][1], later))
    assert result.detection is not None and result.detection.followed, result.reason
    assert covers_truth(spec, result.detection) > 0.9


def test_a_frame_followed_back_with_a_vehicle_on_the_track_is_occluded() -> None:
    frames = sequence(0, "ballasted", 0.0)
    later = detect_track(frames[1][1]).detection
    rows = rail_pair_rows(frames[1][1], later)
    spec, first = frames[0]
    assert follow_back(first, later, rows).detection is not None  # the control: clear, it is followed
    blocked = with_obstacle(spec, first, "vehicle", OBSTACLE_Z_M, seed=0)
    assert follow_back(blocked, later, rows).reason == TRACK_OCCLUDED


def test_following_back_from_rails_that_lead_nowhere_finds_nothing() -> None:
    frames = sequence(2, "ballasted", -0.002)
    later = detect_track(frames[1][1]).detection
    gap = float(later.gap_px(HEIGHT - 1))
    shifted = dataclasses.replace(later, left_fit=dataclasses.replace(later.left_fit, a=later.left_fit.a + 1.5 * gap),
                                  right_fit=dataclasses.replace(later.right_fit, a=later.right_fit.a + 1.5 * gap))
    result = follow_back(frames[0][1], shifted, rail_pair_rows(frames[1][1], later))
    assert result.detection is None and result.reason == FOLLOW_BACK_FAILED

"""``candidate_tracks``: every track the finder's candidates lead to, before its rules judge them
(the diagnostic behind ``benchmarks/rail.py --ceiling``)."""

from __future__ import annotations

import numpy as np
import pytest
from test_coarse_look import blind_above_coarse_width, wide_scene  # noqa: F401 (a fixture)
from test_rail_second_opinion import iou_with_truth

from synrail.rail import detect
from synrail.rail.detect import PAIR_NOT_SUPPORTED, PAIR_OFF_CENTRE, candidate_tracks, detect_track


def test_the_track_the_finder_takes_is_among_its_candidates() -> None:
    image, truth = wide_scene(0.0)
    found = detect_track(image).detection
    candidates = candidate_tracks(image)
    assert found is not None and candidates
    assert all(track.mask.shape == truth.shape for track in candidates)
    assert max(iou_with_truth(track.mask, found) for track in candidates) > 0.95


def test_a_pair_the_finder_refuses_is_still_a_candidate() -> None:
    image, truth = wide_scene(0.7)  # half a gauge beside the camera: without a learned area, refused
    assert detect_track(image).reason == PAIR_OFF_CENTRE
    assert max(iou_with_truth(truth, track) for track in candidate_tracks(image)) > 0.9


@pytest.mark.usefixtures("blind_above_coarse_width")
def test_a_wide_frames_candidates_include_the_coarse_looks_drawn_back(monkeypatch: pytest.MonkeyPatch) -> None:
    image, truth = wide_scene(0.0)
    candidates = candidate_tracks(image)
    assert candidates and all(track.mask.shape == truth.shape for track in candidates)
    assert max(iou_with_truth(truth, track) for track in candidates) > 0.9
    monkeypatch.setattr(detect, "_COARSE_FROM", 1e9)
    assert candidate_tracks(image) == []


def test_a_blank_frame_has_no_candidates() -> None:
    assert candidate_tracks(np.full((720, 1280, 3), 90, np.uint8)) == []


def test_a_pair_whose_rails_are_not_single_lines_is_followed_on_its_best_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    image, truth = wide_scene(0.0)
    original = detect._track_rails

    def at_a_turnout(*args, best_line: bool = False, **kwargs):
        if not best_line:  # every band hops between a rail and a blade beside it
            raise detect._AmbiguousRails(detect.PAIR_NOT_SUPPORTED)
        return original(*args, best_line=True, **kwargs)

    monkeypatch.setattr(detect, "_track_rails", at_a_turnout)
    assert max(iou_with_truth(truth, track) for track in candidate_tracks(image)) > 0.9


def test_a_candidate_pair_that_comes_up_under_two_mounts_is_followed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    image, _ = wide_scene(1.0)  # a gauge beside the camera: a pair under the centred mount comes up again
    asked, followed = [], []
    track_rails, followed_rails = detect._track_rails, detect._followed_rails

    def counted_track_rails(frame, model, seen_rows, *args):
        asked.append((model, seen_rows, *args))
        return track_rails(frame, model, seen_rows, *args)

    def counted_followed_rails(frame, model, seen_rows, *args):
        followed.append((model, seen_rows, *args))
        return followed_rails(frame, model, seen_rows, *args)

    monkeypatch.setattr(detect, "_track_rails", counted_track_rails)
    monkeypatch.setattr(detect, "_followed_rails", counted_followed_rails)
    nowhere = np.zeros(image.shape[:2], dtype=bool)  # a learned area, so that every mount is searched
    assert detect_track(image, track_area=nowhere).reason == PAIR_NOT_SUPPORTED
    assert len(followed) == len(set(followed)) < len(asked)
    assert set(followed) == set(asked)


def test_without_a_learned_area_only_the_mounts_that_settle_a_pair_are_searched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    image, _ = wide_scene(1.0)  # a gauge beside the camera: only the off-centre mount has pairs to follow
    mounts = []
    followed_pair = detect._followed_pair

    def recorded(frame, model, seen_rows, horizon_limits, width, height, mount, **kwargs):
        mounts.append(mount)
        return followed_pair(frame, model, seen_rows, horizon_limits, width, height, mount, **kwargs)

    monkeypatch.setattr(detect, "_followed_pair", recorded)
    nowhere = np.zeros(image.shape[:2], dtype=bool)
    with_area = detect_track(image, track_area=nowhere).reason
    assert any(not mount.settles for mount in mounts)
    mounts.clear()
    assert detect_track(image).reason == with_area  # nothing there could be taken without the area's word
    assert mounts and all(mount.settles for mount in mounts)

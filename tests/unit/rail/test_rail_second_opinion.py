"""The track finder with a learned ego-track area as its second opinion: off-centre cameras, rails
that stop short of the bottom, the six-foot between two tracks, the area's own proposal, and a
sequence's memory of its camera.

The area here is the scene's exact track mask (an oracle), so these tests pin the finder's logic;
``tests/test_track_model.py`` checks the shipped model itself.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import cv2
import numpy as np
import pytest

from synrail.rail import detect
from synrail.rail.detect import detect_track
from synrail.rail.sequence import RailFollower
from synrail.sources.procedural_backgrounds import BackgroundSpec, render_background, sample_background_spec

WIDTH, HEIGHT = 640, 360


@cache
def scene(seed: int, offset_m: float) -> tuple[BackgroundSpec, np.ndarray, np.ndarray]:
    """A straight ballasted scene seen from a camera ``offset_m`` beside the track centre: the
    spec, the image and the exact track area."""
    spec = sample_background_spec(
        np.random.default_rng(seed), width=WIDTH, height=HEIGHT, track_types=["ballasted"],
        conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(50.0, 65.0),
        max_curvature=0.0, max_offset_m=0.0)
    spec = dataclasses.replace(spec, geometry=spec.geometry.model_copy(update={"track_offset_m": offset_m}))
    return spec, render_background(spec), spec.geometry.track_mask()


def iou_with_truth(truth: np.ndarray, detection: detect.TrackDetection) -> float:
    """On the rows the detection spans."""
    covered = truth.copy()
    covered[:detection.top_row] = False
    if detection.bottom_row is not None:
        covered[detection.bottom_row + 1:] = False
    return float((detection.mask & covered).sum() / max(1, (detection.mask | covered).sum()))


@pytest.mark.parametrize("seed, offset_m", [(0, 0.8), (0, 1.2), (1, -1.2), (5, 0.8)])
def test_an_off_centre_camera_is_found_where_the_learned_area_agrees(seed: int, offset_m: float) -> None:
    _, image, truth = scene(seed, offset_m)
    alone = detect_track(image)
    assert alone.detection is None  # the lines alone do not settle a camera this far off the centre line
    result = detect_track(image, track_area=truth.astype(np.float32))
    assert result.detection is not None, result.reason
    assert iou_with_truth(truth, result.detection) > 0.95


def test_the_six_foot_between_two_tracks_is_settled_by_the_sequences_mount() -> None:
    """A camera 1.2 m right of its track with a neighbour on the right: the ego's right rail and
    the neighbour's left rail make a centred 'track' a lower camera would see. A single still
    refuses it where both tracks' other rails show beside it, but cannot find the ego track off
    the centre line without a second opinion. The mount its sequence has shown looks where the
    camera rides."""
    spec, image, truth = scene(2, -1.2)
    alone = detect_track(image)
    assert alone.detection is None and alone.reason == detect.PAIR_BETWEEN_TRACKS
    result = detect_track(image, mount_offset=true_offset_gaps(spec))
    assert result.detection is not None and iou_with_truth(truth, result.detection) > 0.95


@pytest.mark.parametrize("seed", [0, 3])
def test_rails_hidden_by_motion_blur_near_the_bottom_need_the_learned_area(seed: int) -> None:
    """The near ground moves fastest: its rails smear sideways. Rails followed down to most of
    the near gap are the near track where the learned area agrees; the lines alone refuse."""
    _, image, truth = scene(seed, 0.0)
    smeared = image.copy()
    first = int(0.85 * HEIGHT)
    smeared[first:] = cv2.blur(image, (61, 1))[first:]
    assert detect_track(smeared).detection is None
    result = detect_track(smeared, track_area=truth.astype(np.float32))
    assert result.detection is not None, result.reason
    assert iou_with_truth(truth, result.detection) > 0.85


def rail_columns(spec: BackgroundSpec, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ego rails' head-centre columns on ``rows`` (a straight track)."""
    geometry = spec.geometry
    z = geometry.ground_point(np.full_like(rows, WIDTH / 2), rows)[1]
    half = geometry.gauge_m / 2 + geometry.rail_head_m / 2
    return tuple(geometry.project(np.full_like(z, geometry.track_offset_m + side * half), np.zeros_like(z), z)[0]
                 for side in (-1, 1))


def test_the_learned_area_proposes_the_rails_it_runs_between() -> None:
    spec, _, truth = scene(0, 0.8)
    proposal = detect._learned_proposal(truth, detect._horizon_limits(WIDTH, HEIGHT, None))
    assert proposal is not None
    model, (low, high) = proposal
    rows = np.linspace(low, high, 10)
    left_u, right_u = rail_columns(spec, rows)
    left, right = model.predict(rows)
    assert np.abs(left - left_u).max() < 3 and np.abs(right - right_u).max() < 3


def test_a_sequence_remembers_its_track_across_frames_without_one() -> None:
    """The camera rides over its track: after a dark frame, the last track seen leads the search."""
    _, image, truth = scene(0, 0.0)
    follower = RailFollower()
    first = follower.detect(image)
    dark = follower.detect(np.zeros_like(image))
    after = follower.detect(image)
    assert first.detection is not None and dark.detection is None
    assert after.detection is not None and after.detection.followed
    assert iou_with_truth(truth, after.detection) > 0.95


def true_offset_gaps(spec: BackgroundSpec) -> float:
    """The track centre's offset from the camera in rail gaps (rail-head centres apart)."""
    geometry = spec.geometry
    return geometry.track_offset_m / (geometry.gauge_m + geometry.rail_head_m)


@pytest.mark.parametrize("seed, offset_m", [(0, 1.2), (1, -1.2)])
def test_a_known_mount_settles_a_pair_at_its_offset(seed: int, offset_m: float) -> None:
    spec, image, truth = scene(seed, offset_m)
    offset = true_offset_gaps(spec)
    result = detect_track(image, mount_offset=offset)
    assert result.detection is not None, result.reason
    assert iou_with_truth(truth, result.detection) > 0.95
    assert abs(detect.lateral_offset(result.detection) - offset) < 0.05
    assert detect_track(image, mount_offset=-offset).detection is None  # a mount on the other side sees no track


class OracleModel:
    """Stands in for the learned model: the scene's exact area, for the first ``frames`` calls."""

    def __init__(self, truth: np.ndarray, frames: int) -> None:
        self.truth, self.frames = truth.astype(np.float32), frames

    def mask(self, image: np.ndarray) -> np.ndarray:
        """At the image's own size, as the learned model's (probability at least 0.5)."""
        self.frames -= 1
        area = cv2.resize(self.truth, image.shape[1::-1], interpolation=cv2.INTER_LINEAR) >= 0.5
        return area if self.frames >= 0 else np.zeros_like(area)


def test_a_sequence_learns_its_cameras_mount_from_the_frames_it_is_sure_of() -> None:
    spec, image, truth = scene(0, 1.2)
    follower = RailFollower(OracleModel(truth, frames=3))
    assert follower.mount_offset is None
    results = [follower.detect(image) for _ in range(3)]
    assert all(r.detection is not None for r in results)
    assert abs(follower.mount_offset - true_offset_gaps(spec)) < 0.05
    follower.detect(np.zeros_like(image))  # no track: the prior is dropped, the mount stays
    after = follower.detect(image)  # and the model has no opinion any more
    assert after.detection is not None and iou_with_truth(truth, after.detection) > 0.95


@pytest.mark.parametrize("seed, offset_m", [(0, 1.2), (1, -1.2), (5, 0.8)])
def test_the_shipped_model_finds_an_off_centre_camera_s_track(seed: int, offset_m: float) -> None:
    """The same scenes with the learned model SynRail ships instead of the exact area."""
    from synrail.rail.learned import default_track_model

    model = default_track_model()
    assert model is not None
    _, image, truth = scene(seed, offset_m)
    result = detect_track(image, track_area=model.probability(image))
    assert result.detection is not None, result.reason
    assert iou_with_truth(truth, result.detection) > 0.95


@pytest.mark.parametrize("seed", [0, 1])
def test_rails_seen_over_a_short_stretch_are_a_stub_not_a_track(seed: int) -> None:
    """Two lines followed from the bottom over less than half again their nearest distance (a road
    marking and a kerb, a check rail) are refused; the same rails seen over twice that distance are
    the track."""
    spec, image, _ = scene(seed, 0.0)
    horizon = spec.geometry.horizon_v()
    t_bottom = HEIGHT - 1 - horizon

    def seen_up_to(distance_ratio: float) -> np.ndarray:
        """The frame with everything beyond ``distance_ratio`` x the bottom row's distance made flat."""
        flat = image.copy()
        flat[:int(horizon + t_bottom / distance_ratio)] = 110
        return flat

    stub = detect_track(seen_up_to(1.3))
    assert stub.detection is None and stub.reason == detect.RAILS_TOO_SHORT
    track = detect_track(seen_up_to(2.5))
    assert track.detection is not None, track.reason


def test_a_pair_whose_chords_stop_short_is_followed_again_trusting_its_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rails followed from straight Hough chords that stop in the open are followed once more with the
    pair's fit trusted from the first band (as a prior is), which may reach the bottom."""
    _, image, truth = scene(0, 0.0)
    original = detect._followed_pair
    tries = []

    def chords_stop_short(*args, from_prior: bool = False, **kwargs) -> detect.TrackDetection:
        tries.append(from_prior)
        if not from_prior:
            raise detect._NoTrack(detect.RAILS_NOT_AT_BOTTOM)
        return original(*args, from_prior=from_prior, **kwargs)

    monkeypatch.setattr(detect, "_followed_pair", chords_stop_short)
    found = detect_track(image).detection
    assert found is not None and iou_with_truth(truth, found) > 0.95
    assert tries[:2] == [False, True]


def straight_pair(horizon_v: float, centre: float, bottom_row: int = HEIGHT - 1) -> detect.TrackDetection:
    """A straight pair ``0.4 WIDTH`` apart at the bottom, meeting at ``(centre, horizon_v)``."""
    model = detect._PairModel(horizon_v=horizon_v, a=centre, b=0.0, c=0.0,
                              d=0.2 * WIDTH / (HEIGHT - 1 - horizon_v))
    return detect._detection(model, int(horizon_v) + 20, bottom_row, WIDTH, HEIGHT, 1.0)


def settled_choice(monkeypatch: pytest.MonkeyPatch, found: list[detect.TrackDetection],
                   area: np.ndarray | None) -> tuple[detect.TrackDetection | None, int]:
    """What ``detect_track`` takes when the centred mount's candidates lead, in order, to ``found``,
    and how many of them it followed."""
    followed: list[detect.TrackDetection] = []

    def candidates(segments, width, height, horizon_limits, mount, limit=detect._MAX_PAIR_TRIES):
        if not mount.centred:
            raise detect._NoTrack(detect.NO_RAIL_PAIR)
        return [(detect._pair_model(track), (HEIGHT // 2, HEIGHT - 1)) for track in found]

    def followed_pair(frame, model, *args, **kwargs):
        track = next(track for track in found if detect._pair_model(track) == model)
        followed.append(track)
        return track

    monkeypatch.setattr(detect, "_ridge_segments", lambda *args: object())
    monkeypatch.setattr(detect, "_ego_pair_candidates", candidates)
    monkeypatch.setattr(detect, "_followed_pair", followed_pair)
    image = np.full((HEIGHT, WIDTH, 3), 128, dtype=np.uint8)
    area_map = None if area is None else area.astype(np.float32)
    return detect_track(image, track_area=area_map).detection, len(followed)


def test_a_centred_pair_the_learned_area_disputes_gives_way_to_one_it_seconds_on_another_horizon(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rail paired with a switch's diverging rail converges on another horizon than the ego rails:
    the two cannot both be pairs of parallel rails, and the learned area settles which one is."""
    ego, frog = straight_pair(100.0, WIDTH / 2), straight_pair(190.0, WIDTH / 2)
    assert not detect._agrees_with_area(frog, ego.mask)
    taken, followed = settled_choice(monkeypatch, [frog, ego], ego.mask)
    assert taken is ego and followed == 2
    assert settled_choice(monkeypatch, [frog, ego], None)[0] is frog  # no area: the lines' word


def test_a_centred_pair_the_learned_area_seconds_is_taken_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ego, frog = straight_pair(100.0, WIDTH / 2), straight_pair(190.0, WIDTH / 2)
    assert settled_choice(monkeypatch, [ego, frog], ego.mask) == (ego, 1)


@pytest.mark.parametrize("later", ["neighbour on the same horizon", "stops short of the first"])
def test_a_disputed_centred_pair_stays_where_the_later_one_cannot_overrule_it(
        monkeypatch: pytest.MonkeyPatch, later: str) -> None:
    """A neighbour track shares the ego track's horizon: the learned area, which may mark the
    neighbour, never trades one for the other. Nor does a pair that reaches less far down."""
    first = straight_pair(104.0, WIDTH / 2) if later.startswith("neighbour") else straight_pair(190.0, WIDTH / 2)
    other = (straight_pair(100.0, WIDTH / 2 + 0.4 * WIDTH) if later.startswith("neighbour")
             else straight_pair(100.0, WIDTH / 2, bottom_row=HEIGHT - 60))
    assert not detect._agrees_with_area(first, other.mask) and detect._agrees_with_area(other, other.mask)
    taken, followed = settled_choice(monkeypatch, [first, other], other.mask)
    assert taken is first
    assert followed == (1 if later.startswith("neighbour") else 2)  # chords on the same horizon: not followed


def widened_area(spec: BackgroundSpec, factor: float) -> np.ndarray:
    """The scene's track area drawn for a gauge ``factor`` times as wide: a learned area whose
    edges lie beyond the rails."""
    geometry = spec.geometry
    return geometry.model_copy(update={"gauge_m": geometry.gauge_m * factor}).track_mask()


def with_a_rail_one_over(spec: BackgroundSpec, image: np.ndarray) -> np.ndarray:
    """The image with its right rail (and the ground around it) copied a gap further right on
    every row below the horizon: three evenly spaced rails."""
    copied = image.copy()
    rows = np.arange(int(spec.geometry.horizon_v()) + 20, HEIGHT, dtype=np.float64)
    left, right = rail_columns(spec, rows)
    for row, x_left, x_right in zip(rows.astype(int), left, right, strict=True):
        gap = x_right - x_left
        source = np.arange(int(x_right - 0.15 * gap), int(x_right + 0.15 * gap) + 1)
        target = source + int(round(gap))
        keep = (source >= 0) & (target < WIDTH)
        copied[row, target[keep]] = image[row, source[keep]]
    return copied


def proposed(image: np.ndarray, area: np.ndarray) -> tuple:
    """The frame as the finder reads it, the area's proposal and the horizon limits: the first
    arguments of ``detect._proposed_track``."""
    frame, _, limits = detect._prepared(image, None, 0.6, 0.0, None)
    proposal = detect._learned_proposal(area, limits)
    assert proposal is not None
    return frame, proposal, limits


def test_a_proposal_whose_edges_lie_beyond_the_rails_is_searched_as_hough_chords_are() -> None:
    """The learned area can spread past the rails (a wide bed, a platform's edge): its proposal
    then puts the rails beyond the narrow window it is first trusted with. Searched in the wide
    window, the rails are found, and the area (here the true one) seconds them."""
    spec, image, truth = scene(0, 0.8)
    frame, proposal, limits = proposed(image, widened_area(spec, 1.6))
    with pytest.raises(detect._NoTrack):
        detect._followed_pair(frame, *proposal, limits, WIDTH, HEIGHT, detect._ANYWHERE, from_prior=True, area=truth)
    found = detect._proposed_track(frame, proposal, limits, WIDTH, HEIGHT, truth)
    assert iou_with_truth(truth, found) > 0.95


def test_a_rail_a_gap_beyond_a_proposed_pair_leaves_it_refused() -> None:
    """Three evenly spaced rails: the pair found from a loose proposal has a line a gap beyond its
    right rail that pairs with that rail as well, so the lines cannot tell which two are the track."""
    spec, image, truth = scene(0, 0.8)
    three = with_a_rail_one_over(spec, image)
    with pytest.raises(detect._NoTrack, match=detect.PAIR_ONE_RAIL_OVER):
        detect._proposed_track(*proposed(three, widened_area(spec, 1.6)), WIDTH, HEIGHT, truth)
    found = detect._proposed_track(*proposed(image, widened_area(spec, 1.6)), WIDTH, HEIGHT, truth)
    model = detect._pair_model(found)
    assert not detect._rail_one_over(proposed(image, truth)[0], model, found.top_row, HEIGHT - 1)
    assert detect._rail_one_over(proposed(three, truth)[0], model, found.top_row, HEIGHT - 1)


@pytest.mark.parametrize("offset_m", [0.8, 1.2])
def test_an_off_centre_pair_with_a_rail_a_gap_beside_it_is_refused_though_the_area_agrees(offset_m: float) -> None:
    spec, image, truth = scene(0, offset_m)
    area = truth.astype(np.float32)
    assert detect_track(image, track_area=area).detection is not None
    assert detect_track(with_a_rail_one_over(spec, image), track_area=area).detection is None


def test_a_centred_pair_stands_beside_a_rail_a_gap_away() -> None:
    """Street tram tracks may lie a gap apart: the lines settle a centred pair on their own."""
    spec, image, truth = scene(0, 0.0)
    result = detect_track(with_a_rail_one_over(spec, image), track_area=truth.astype(np.float32))
    assert result.detection is not None and iou_with_truth(truth, result.detection) > 0.95


def test_rails_that_stop_short_with_a_rail_a_gap_beside_them_are_refused_though_the_area_agrees() -> None:
    """Rails followed short of the bottom need the area's word too, and it cannot tell them from
    the pair one rail over."""
    spec, image, truth = scene(3, 0.0)
    first = int(0.85 * HEIGHT)
    results = []
    for frame in (image, with_a_rail_one_over(spec, image)):
        smeared = frame.copy()
        smeared[first:] = cv2.blur(frame, (61, 1))[first:]
        results.append(detect_track(smeared, track_area=truth.astype(np.float32)))
    assert results[0].detection is not None and results[0].detection.bottom_row is not None
    assert results[1].detection is None and results[1].reason == detect.PAIR_ONE_RAIL_OVER

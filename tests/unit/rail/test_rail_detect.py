"""Classical track finding, camera estimation and mask refinement, against procedural scenes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from functools import cache

import cv2
import numpy as np
import pytest

from synrail.rail import detect
from synrail.rail.detect import TrackDetection, detect_track
from synrail.rail.estimate import SegmentationModelTrack, estimate_geometry, refine_with_segmenter, track_prompt
from synrail.rail.geometry import CameraGeometry
from synrail.segment.base import MaskResult, Prompt
from synrail.sources.procedural_backgrounds import BackgroundSpec, render_background, sample_background_spec

WIDTH, HEIGHT = 640, 360
REASONS = {detect.NO_RAIL_EDGES, detect.NO_RAIL_PAIR, detect.PAIR_NOT_SUPPORTED, detect.RAILS_NOT_AT_BOTTOM}
SCENES = [(seed, track_type, curvature) for seed in (0, 1, 2)
          for track_type in ("ballasted", "ballastless") for curvature in (0.0, 0.0025)]


@cache
def scene(seed: int, track_type: str, curvature: float) -> tuple[BackgroundSpec, np.ndarray]:
    spec = sample_background_spec(
        np.random.default_rng(seed), width=WIDTH, height=HEIGHT, track_types=[track_type],
        conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(50.0, 65.0),
        max_curvature=0.0, max_offset_m=0.15)
    signed = curvature * (1 if seed % 2 == 0 else -1)
    spec = dataclasses.replace(spec, geometry=spec.geometry.model_copy(update={"track_curvature": signed}))
    return spec, render_background(spec)


def hfov_of(spec: BackgroundSpec) -> float:
    return math.degrees(2 * math.atan(spec.geometry.width / 2 / spec.geometry.focal_px))


@cache
def detected(seed: int, track_type: str, curvature: float) -> TrackDetection:
    spec, image = scene(seed, track_type, curvature)
    result = detect_track(image, hfov_deg=hfov_of(spec))
    assert result.detection is not None, result.reason
    return result.detection


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


@pytest.mark.parametrize("case", SCENES, ids=lambda c: f"seed{c[0]}-{c[1]}-k{c[2]}")
def test_detection_covers_the_true_track_area(case: tuple[int, str, float]) -> None:
    spec, _ = scene(*case)
    detection = detected(*case)
    truth = spec.geometry.track_mask()
    assert detection.mask.shape == truth.shape and detection.mask.dtype == bool
    assert not detection.mask[:detection.top_row].any()
    covered = np.zeros_like(truth)
    covered[detection.top_row:] = True
    assert iou(detection.mask, truth & covered) > 0.9
    # It reaches well past the near field (the top row's ground distance).
    _, z_top = spec.geometry.ground_point(np.array([spec.geometry.cx]), np.array([float(detection.top_row)]))
    assert z_top[0] > 30.0
    assert 0.5 < detection.confidence <= 1.0


@pytest.mark.parametrize("case", SCENES, ids=lambda c: f"seed{c[0]}-{c[1]}-k{c[2]}")
def test_vanishing_point_lies_on_the_true_horizon(case: tuple[int, str, float]) -> None:
    spec, _ = scene(*case)
    detection = detected(*case)
    assert abs(detection.vanishing_point[1] - spec.geometry.horizon_v()) < 0.03 * HEIGHT
    assert 0 <= detection.vanishing_point[0] < WIDTH


@pytest.mark.parametrize("case", SCENES, ids=lambda c: f"seed{c[0]}-{c[1]}-k{c[2]}")
def test_estimated_camera_gives_metric_distances(case: tuple[int, str, float]) -> None:
    spec, _ = scene(*case)
    truth = spec.geometry
    estimate = estimate_geometry(detected(*case), WIDTH, HEIGHT, hfov_deg=hfov_of(spec))
    assert estimate.focal_px == pytest.approx(truth.focal_px)
    assert estimate.height_m == pytest.approx(truth.height_m, rel=0.10)
    assert math.degrees(abs(estimate.pitch_rad - truth.pitch_rad)) < 0.5
    v, u = np.nonzero(truth.track_mask())
    d_true = truth.distance_m(u, v)
    near = (d_true >= 15) & (d_true <= 40)
    error = np.abs(estimate.distance_m(u[near], v[near]) - d_true[near]) / d_true[near]
    assert error.max() < 0.10
    assert estimate.track_curvature == pytest.approx(truth.track_curvature, abs=3e-4)
    assert estimate.track_offset_m == pytest.approx(truth.track_offset_m, abs=0.05)
    assert 30.0 < estimate.track_max_z_m <= truth.track_max_z_m


def test_estimated_track_mask_matches_the_detection() -> None:
    spec, _ = scene(0, "ballasted", 0.0025)
    detection = detected(0, "ballasted", 0.0025)
    estimate = estimate_geometry(detection, WIDTH, HEIGHT, hfov_deg=hfov_of(spec))
    assert iou(estimate.track_mask(), detection.mask) > 0.9


def grass(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    blotches = cv2.resize(rng.normal(0, 1, (HEIGHT // 8, WIDTH // 8)).astype(np.float32), (WIDTH, HEIGHT))
    grain = rng.normal(0, 1, (HEIGHT, WIDTH)).astype(np.float32)
    bgr = np.stack([60 + 10 * blotches + 8 * grain, 110 + 20 * blotches + 10 * grain,
                    70 + 10 * blotches + 8 * grain], axis=-1)
    return np.clip(bgr, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("image", [grass(0), grass(1), np.full((HEIGHT, WIDTH, 3), 128, np.uint8),
                                   np.random.default_rng(2).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)],
                         ids=["grass0", "grass1", "flat", "noise"])
def test_no_track_gives_no_detection_and_a_reason(image: np.ndarray) -> None:
    result = detect_track(image)
    assert result.detection is None
    assert result.reason in REASONS


def test_a_scene_with_its_track_painted_over_gives_no_detection() -> None:
    _, image = scene(1, "ballasted", 0.0)
    covered = image.copy()
    covered[HEIGHT // 2:] = grass(3)[HEIGHT // 2:]
    result = detect_track(covered)
    assert result.detection is None and result.reason in REASONS


HOOD_ROW = int(0.8 * HEIGHT)


def with_hood(image: np.ndarray) -> np.ndarray:
    hood = image.copy()
    hood[HOOD_ROW:] = (30, 30, 35)  # a cab's hood across the bottom of the frame
    return hood


def assert_covers_truth(geometry: CameraGeometry, detection: TrackDetection, last_row: int = HEIGHT - 1,
                        min_reach_m: float = 30.0) -> None:
    """The detection's mask matches the true track area on the rows it covers, far enough."""
    truth = geometry.track_mask()
    covered = np.zeros_like(truth)
    covered[detection.top_row:last_row + 1] = True
    assert iou(detection.mask, truth & covered) > 0.9
    _, z_top = geometry.ground_point(np.array([geometry.cx]), np.array([float(detection.top_row)]))
    assert z_top[0] > min_reach_m


def test_rails_ending_above_a_hood_are_found_down_to_its_edge() -> None:
    spec, image = scene(0, "ballasted", 0.0)
    result = detect_track(with_hood(image), hfov_deg=hfov_of(spec))
    assert result.detection is not None, result.reason
    assert HOOD_ROW - 6 <= result.detection.bottom_row < HOOD_ROW
    assert not result.detection.mask[HOOD_ROW:].any()
    assert_covers_truth(spec.geometry, result.detection, result.detection.bottom_row)


@pytest.mark.parametrize("how", ["bottom_ignore", "ignore_mask"])
def test_a_declared_hood_region_is_left_out(how: str) -> None:
    spec, image = scene(1, "ballastless", 0.0025)
    ignored = np.zeros((HEIGHT, WIDTH), bool)
    ignored[HOOD_ROW:] = True
    options = {"bottom_ignore": 0.2} if how == "bottom_ignore" else {"ignore_mask": ignored}
    result = detect_track(with_hood(image), **options)
    assert result.detection is not None, result.reason
    assert result.detection.bottom_row == HOOD_ROW - 1
    assert_covers_truth(spec.geometry, result.detection, HOOD_ROW - 1)


def test_rails_fading_out_above_the_bottom_are_refused() -> None:
    """Rails that end in the open, with no occluder edge, are not a track."""
    spec, image = scene(0, "ballasted", 0.0)
    ramp = np.clip((np.arange(HEIGHT) - 0.7 * HEIGHT) / (0.15 * HEIGHT), 0, 1)[:, None, None]
    faded = (image * (1 - ramp) + grass(4) * ramp).astype(np.uint8)
    result = detect_track(faded, hfov_deg=hfov_of(spec))
    assert result.detection is None and result.reason == detect.RAILS_NOT_AT_BOTTOM


def test_rails_followed_to_within_a_few_rows_of_the_bottom_reach_it(monkeypatch) -> None:
    """The downward bands end with whatever rows are left; fewer than a band's minimum that show no
    rail (a vignette, the frame's edge, a level crossing's road) do not make the rails end in the open."""
    spec, image = scene(1, "ballasted", 0.0)
    bands = []
    original = detect._extend
    monkeypatch.setattr(detect, "_extend", lambda frame, model, samples, rows, *args, **kwargs: (
        bands.append((int(rows[0]), int(rows[-1]))) or original(frame, model, samples, rows, *args, **kwargs)))
    assert detect_track(image, hfov_deg=hfov_of(spec)).detection is not None
    last = max(first for first, last in bands if last == HEIGHT - 1)  # the last band down to the bottom
    assert HEIGHT - last < detect._MIN_BAND_ROWS  # the premise: a band too short to measure on its own
    flat = image.copy()
    flat[last:] = cv2.blur(image[last:], (61, 1))  # those rows show no rail (smeared along the row), and no edge
    result = detect_track(flat, hfov_deg=hfov_of(spec))
    assert result.detection is not None, result.reason
    assert result.detection.bottom_row is None  # it reaches the bottom
    assert_covers_truth(spec.geometry, result.detection)


def night_infrared(image: np.ndarray, seed: int) -> np.ndarray:
    """Grey, inverted (rail heads become dark bands on a light bed, as under IR lighting),
    low contrast and grainy."""
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
    ir = 150 - 0.35 * (grey - grey.mean()) + np.random.default_rng(seed).normal(0, 3, grey.shape)
    return cv2.cvtColor(np.clip(ir, 0, 255).astype(np.uint8), cv2.COLOR_GRAY2BGR)


@pytest.mark.parametrize("case", SCENES[:4], ids=lambda c: f"seed{c[0]}-{c[1]}-k{c[2]}")
def test_dark_low_contrast_rails_are_found(case: tuple[int, str, float]) -> None:
    spec, image = scene(*case)
    result = detect_track(night_infrared(image, case[0]))
    assert result.detection is not None, result.reason
    assert_covers_truth(spec.geometry, result.detection, min_reach_m=20.0)  # grain hides the farthest rails


def double_edged_infrared(geometry: CameraGeometry, seed: int) -> np.ndarray:
    """A light, grainy infrared frame whose rail heads show as dark bands with one edge darker
    still, which edge changing from row to row at random (as on loco CCTV at night)."""
    rng = np.random.default_rng(seed)
    grey = rng.normal(150, 4, (HEIGHT, WIDTH))
    rows = np.arange(math.ceil(geometry.horizon_v()) + 2, HEIGHT, dtype=np.float64)
    _, z = geometry.ground_point(np.full(rows.size, geometry.cx), rows)
    centre = geometry.track_centre_x(z)
    darker = rng.integers(0, 2, rows.size)  # which edge of each head is the darker one on a row
    for side in (-1, 1):
        edges = [np.round(geometry.project(centre + side * geometry.gauge_m / 2 + edge * geometry.rail_head_m / 2,
                                           np.zeros(rows.size), z)[0]).astype(int) for edge in (-1, 1)]
        for i, row in enumerate(rows.astype(int)):
            first, last = np.clip([edges[0][i], edges[1][i]], 0, WIDTH - 2)
            grey[row, first:last + 2] -= 40  # the head: a dark band
            grey[row, (first, last)[darker[i]]] -= 30  # ... one of its edges darker still
    return np.clip(grey, 0, 255).astype(np.uint8)


def test_rails_whose_darkest_edge_hops_are_found() -> None:
    """Under infrared a head often shows as a dark band whose darkest line changes sides from
    row to row: the samples hop by a head width, which must not count against the rail."""
    # A narrow lens looking down: near heads over ten pixels wide, as on a 1280 px CCTV frame.
    geometry = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=35.0, height_m=2.2, pitch_deg=8.0)
    result = detect_track(double_edged_infrared(geometry, 0))
    assert result.detection is not None, result.reason
    assert_covers_truth(geometry, result.detection, min_reach_m=20.0)


def painted_lines(geometry: CameraGeometry, lateral_m: Sequence[float], seed: int, sheen: int = 0,
                  faint: Sequence[float] = ()) -> np.ndarray:
    """A grainy grey frame with a bright rail-head-wide line at each lateral position (metres
    from the track centre) along the ego track of ``geometry``; ``sheen`` brightens the outer
    two pixels of each head by that much more (a sunlit side); lines at ``faint`` positions are
    a seventh as bright (a streak of motion blur)."""
    rng = np.random.default_rng(seed)
    grey = rng.normal(90, 4, (HEIGHT, WIDTH))
    rows = np.arange(math.ceil(geometry.horizon_v()) + 2, HEIGHT, dtype=np.float64)
    _, z = geometry.ground_point(np.full(rows.size, geometry.cx), rows)
    centre = geometry.track_centre_x(z)
    for lateral in (*lateral_m, *faint):
        edges = [np.round(geometry.project(centre + lateral + edge * geometry.rail_head_m / 2, np.zeros(rows.size),
                                           z)[0]).astype(int) for edge in (-1, 1)]
        for i, row in enumerate(rows.astype(int)):
            first, last = np.clip([edges[0][i], edges[1][i]], 0, WIDTH - 1)
            grey[row, first:last + 1] += 12 if lateral in faint else 80
            outer = slice(first, first + 2) if lateral < 0 else slice(last - 1, last + 1)
            grey[row, outer] += sheen
    return np.clip(grey, 0, 255).astype(np.uint8)


RACK_CAMERA = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=60.0, height_m=2.0, pitch_deg=3.0,
                                      track_offset_m=-0.05)


def test_a_rack_railway_is_found_on_its_running_rails() -> None:
    """A rack (or a centre guard rail) between the running rails pairs with either of them into a
    narrower 'track' half a gap off the camera's line: the running rails are the ego pair."""
    gauge = RACK_CAMERA.gauge_m
    result = detect_track(painted_lines(RACK_CAMERA, (-gauge / 2, 0.0, gauge / 2), 0))
    assert result.detection is not None, result.reason
    assert_covers_truth(RACK_CAMERA, result.detection)


def test_a_rail_and_a_rack_without_the_other_rail_are_refused() -> None:
    """With one running rail hidden, the rack and the other rail are no track: refused, never
    taken for a narrow track beside the camera."""
    result = detect_track(painted_lines(RACK_CAMERA, (0.0, RACK_CAMERA.gauge_m / 2), 0))
    assert result.detection is None and result.reason == detect.PAIR_OFF_CENTRE


def test_a_pair_enclosing_a_rail_is_not_taken_for_the_ego_track() -> None:
    """A high CCTV camera: the ego's left rail and the near rail of the next track make a pair
    that passes every other check (the next frame of a sequence is led to it when the ego's right
    rail hid in the last one). It encloses a rail running parallel between its rails: no track."""
    camera = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=60.0, height_m=3.4, pitch_deg=10.0)
    half = camera.gauge_m / 2
    neighbour = (half + 2.2, 3 * half + 2.2)
    wrong = detect_track(painted_lines(camera, (-half, neighbour[0]), 0)).detection
    assert wrong is not None  # without the ego's right rail, the outer pair is taken
    result = detect_track(painted_lines(camera, (-half, half, *neighbour), 0), prior=wrong)
    assert result.detection is not None, result.reason
    assert not result.detection.followed
    assert_covers_truth(camera, result.detection)


def test_a_six_foot_a_yawed_camera_shows_centred_is_not_its_track() -> None:
    """The ego's right rail and the next track's left rail, 2 m apart, seen by a camera over the ego
    track but turned so that the six-foot between them lies mid-image at the bottom: centred in the
    image, but 1.75 m (0.86 of its gap) beside the camera by its own geometry; neither the lines
    alone nor, with the ego track in view, a pair the image shows off-centre settle it."""
    camera = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=60.0, height_m=2.4, pitch_deg=4.0)
    half, six_foot = camera.gauge_m / 2, 2.0
    _, z = camera.ground_point(np.array([camera.cx]), np.array([HEIGHT - 1.0]))
    bottom = camera.project(camera.track_centre_x(z) + half + six_foot / 2, np.zeros(1), z)[0][0]
    turned = camera.model_copy(update={"cx": camera.cx + (WIDTH - 1) / 2 - bottom})  # a yaw, to first order
    for rails in ((half, half + six_foot), (-half, half, half + six_foot, 3 * half + six_foot)):
        result = detect_track(painted_lines(turned, rails, 0))
        assert result.detection is None and result.reason == detect.PAIR_OFF_CENTRE


@pytest.mark.parametrize("six_foot", [2.0, 3.0])
def test_the_six_foot_between_two_tracks_is_refused_where_both_tracks_show(six_foot: float) -> None:
    """A camera over the gap between two tracks: their facing rails make a centred pair, and each
    track's other rail runs a gauge beyond it on either side. That pair is no track; a track with
    neighbours 3.5 m away on both sides is still found."""
    camera = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=60.0, height_m=2.6, pitch_deg=5.0)
    gauge, half = camera.gauge_m, camera.gauge_m / 2
    result = detect_track(painted_lines(camera, (-six_foot / 2 - gauge, -six_foot / 2, six_foot / 2,
                                                 six_foot / 2 + gauge), 0))
    assert result.detection is None and result.reason == detect.PAIR_BETWEEN_TRACKS
    neighbours = (-3.5 - half, -3.5 + half, 3.5 - half, 3.5 + half)
    result = detect_track(painted_lines(camera, (-half, half, *neighbours), 0))
    assert result.detection is not None, result.reason
    assert_covers_truth(camera, result.detection)


def test_a_pair_seen_over_too_few_rows_to_judge_its_neighbours_has_no_reason_against_it() -> None:
    """Under 8 sampled rows nothing beside the pair is judged: no reason (None), not a falsy one that
    the caller would raise as the reason "False"."""
    model = detect._PairModel(horizon_v=100.0, a=320.0, b=0.0, c=0.0, d=0.5)
    frame = detect._Frame(np.full((HEIGHT, WIDTH), 90, np.uint8), None)
    assert detect._rails_beside(frame, model, 300, 310) is None


def test_the_six_foot_is_judged_by_both_tracks_together() -> None:
    """Beside a metre-gauge track the six-foot's outer rails lie unevenly, one 2.2 half gaps out, the
    other 1.8 (as an error in the pair's fitted centre would also put them): their average, 2.0, is
    what the six-foot fixes."""
    camera = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=60.0, height_m=2.6, pitch_deg=5.0)
    six_foot, standard, metre = 2.5, camera.gauge_m, 1.0 + camera.rail_head_m
    lines = (-six_foot / 2 - standard, -six_foot / 2, six_foot / 2, six_foot / 2 + metre)
    assert (six_foot / 2 + metre) / (six_foot / 2) < detect._BESIDE_BAND[0]  # one side alone is too close
    result = detect_track(painted_lines(camera, lines, 0))
    assert result.detection is None and result.reason == detect.PAIR_BETWEEN_TRACKS


def test_a_faint_streak_between_the_rails_is_no_rail() -> None:
    """Motion blur streaks the bed along lines parallel to the rails, but faintly: no reason to
    refuse the pair."""
    camera = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=60.0, height_m=3.4, pitch_deg=10.0)
    half = camera.gauge_m / 2
    result = detect_track(painted_lines(camera, (-half, half), 0, faint=(0.5 * half,)))
    assert result.detection is not None, result.reason
    assert_covers_truth(camera, result.detection)


def test_a_camera_half_a_metre_off_the_centre_line_still_finds_its_track() -> None:
    camera = RACK_CAMERA.model_copy(update={"track_offset_m": 0.45})
    result = detect_track(painted_lines(camera, (-camera.gauge_m / 2, camera.gauge_m / 2), 0))
    assert result.detection is not None, result.reason
    assert_covers_truth(camera, result.detection)


def test_wide_heads_are_fitted_on_their_middle_not_their_brightest_side() -> None:
    """Near rails of a high-resolution frame are many pixels wide and often brightest on one side:
    the fit follows the head's middle (the gauge is measured between head centres)."""
    camera = CameraGeometry.from_fov(WIDTH, HEIGHT, hfov_deg=35.0, height_m=2.2, pitch_deg=8.0)
    result = detect_track(painted_lines(camera, (-camera.gauge_m / 2, camera.gauge_m / 2), 0, sheen=60))
    assert result.detection is not None, result.reason
    rows = np.arange(HEIGHT - 60, HEIGHT, dtype=np.float64)
    _, z = camera.ground_point(np.full(rows.size, camera.cx), rows)
    for side, fit in ((-1, result.detection.left_fit), (1, result.detection.right_fit)):
        true_x, _ = camera.project(camera.track_centre_x(z) + side * camera.gauge_m / 2, np.zeros(rows.size), z)
        head_px = float(np.median(camera.project(np.full(rows.size, camera.rail_head_m), np.zeros(rows.size), z)[0]
                                  - camera.cx))
        assert head_px > 8  # wide enough that its sides are far from its middle
        assert np.median(np.abs(fit.x(rows) - true_x)) < 0.2 * head_px


def test_a_grey_frame_with_burnt_in_text_is_found() -> None:
    spec, image = scene(2, "ballasted", 0.0025)
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    for row, text in ((HEIGHT - 30, "2023-07-15 01:02:28"), (HEIGHT - 8, "CAM7:TRACK 2"), (20, "LOCO 1874")):
        cv2.putText(grey, text, (8, row), cv2.FONT_HERSHEY_SIMPLEX, 0.8, 255, 2, cv2.LINE_AA)
    result = detect_track(grey)
    assert result.detection is not None, result.reason
    assert_covers_truth(spec.geometry, result.detection)


def test_a_wide_lens_looking_down_is_found_without_its_field_of_view() -> None:
    spec = sample_background_spec(
        np.random.default_rng(5), width=WIDTH, height=HEIGHT, track_types=["ballasted"],
        conditions={"normal": 1.0}, camera_height_m=(2.4, 2.6), pitch_deg=(29.0, 30.0), hfov_deg=(95.0, 100.0),
        max_curvature=0.0, max_offset_m=0.1)
    # Above the highest horizon a 60 degree lens pitched down 15 degrees (the former limit) has.
    former_limit = (HEIGHT - 1) / 2 - (WIDTH / 2) / math.tan(math.radians(30)) * math.tan(math.radians(15))
    assert spec.geometry.horizon_v() < former_limit
    result = detect_track(render_background(spec))
    assert result.detection is not None, result.reason
    assert abs(result.detection.horizon_v - spec.geometry.horizon_v()) < 0.03 * HEIGHT
    assert_covers_truth(spec.geometry, result.detection)


# A curving pair in the image: u = a + (b -/+ d) t + c / t exactly (the detector's own model).
CURVING_PAIR = detect._PairModel(horizon_v=60.0, a=300.0, b=0.0, c=1500.0, d=0.5)


def model_rails(model, first_row: int, seed: int = 0) -> np.ndarray:
    """A grainy grey frame with bright head-wide lines where ``model`` puts both rails, from
    ``first_row`` down."""
    grey = np.random.default_rng(seed).normal(90, 4, (HEIGHT, WIDTH))
    rows = np.arange(first_row, HEIGHT)
    half = np.maximum(1.0, 0.02 * 2 * model.d * (rows - model.horizon_v))
    for x in model.predict(rows.astype(np.float64)):
        for row, centre, w in zip(rows, x, half, strict=True):
            grey[row, int(round(centre - w)):int(round(centre + w)) + 1] += 80
    return np.clip(grey, 0, 255).astype(np.uint8)


def test_far_rails_off_a_fits_extrapolation_are_taken_by_a_refit_that_explains_more() -> None:
    """Near rows hardly tell the curve term c / t from a + b t: a fit on them that is straight
    explains them as well as the true one, but leads the search for farther rails off them. A
    second look refits everything from scratch and keeps the band when that explains more rows;
    where no rails show above, nothing is taken."""
    near = np.arange(200, HEIGHT, dtype=np.float64)
    t = near - CURVING_PAIR.horizon_v
    centre = np.mean(CURVING_PAIR.predict(near), axis=0)
    a, b = np.linalg.lstsq(np.stack([np.ones_like(t), t], axis=1), centre, rcond=None)[0]
    straight = dataclasses.replace(CURVING_PAIR, a=float(a), b=float(b), c=0.0)
    frame = detect._Frame(cv2.GaussianBlur(model_rails(CURVING_PAIR, 70), (3, 3), 0), None)
    samples = detect._measure_rails(frame, straight, near, True, detect._WINDOW_PER_GAP)
    assert straight.inlier_rows(samples).mean() == 1.0
    far = np.arange(110, 150, dtype=np.float64)
    limits = (-HEIGHT / 2, 0.65 * HEIGHT)
    assert detect._extend(frame, straight, samples, far, limits) is None  # the rails lie off the window
    grown = detect._second_look(frame, straight, samples, far, limits)
    assert grown is not None
    refit, joined = grown
    assert refit.inlier_rows(joined).mean() > 0.95
    assert np.abs(np.array(refit.predict(far)) - np.array(CURVING_PAIR.predict(far))).max() < 1.0
    bare = detect._Frame(cv2.GaussianBlur(model_rails(CURVING_PAIR, 160), (3, 3), 0), None)
    assert detect._second_look(bare, straight, samples, far, limits) is None



def test_rails_beside_brighter_lines_on_most_rows_are_measured_on_their_own_line() -> None:
    """At a turnout a switch blade or closure rail runs a few centimetres beside each rail and
    often shines brighter: the strongest line of each row hops between the two, so the first
    band, measured without a trusted fit, is refused. Measured on each rail's best-supported
    straight line, it is the rail: the line every row shows, not the one most rows show brightest."""
    rng = np.random.default_rng(0)
    pair = detect._PairModel(horizon_v=100.0, a=320.0, b=0.0, c=0.0, d=0.5)
    rows = np.arange(220, 280, dtype=np.float64)
    grey = rng.normal(90, 4, (HEIGHT, WIDTH))
    rails = pair.predict(rows)
    beside = rng.random((rows.size, 2)) < 0.6  # the brighter line shows on these rows of each rail
    for i, row in enumerate(rows.astype(int)):
        for side, outward in enumerate((-1, 1)):
            column = int(round(rails[side][i]))
            grey[row, column - 1:column + 2] += 80
            if beside[i, side]:
                grey[row, column + outward * 19:column + outward * 22] += 100
    frame = detect._Frame(np.clip(grey, 0, 255).astype(np.uint8), None)
    window = detect._FIRST_WINDOW_PER_GAP
    assert detect._measure_band(frame, pair, rows, window, trust_model=False) is None
    band = detect._measure_band(frame, pair, rows, window, trust_model=False, best_line=True)
    assert band is not None
    for measured, rail in zip((band.left, band.right), rails, strict=True):
        assert np.isfinite(measured).mean() > 0.95
        assert np.nanmax(np.abs(measured - rail)) < 1.5

# -- refinement with a promptable segmenter ------------------------------------------------------
class FakeSegmenter:
    """Returns a fixed mask and records the prompts it was given."""

    identity = "fake"

    def __init__(self, mask: np.ndarray | None) -> None:
        self.mask = mask
        self.prompts: list[Prompt] = []

    def segment(self, image_bgr: np.ndarray, prompts: Sequence[Prompt]) -> list[MaskResult]:
        self.prompts.extend(prompts)
        return [] if self.mask is None else [MaskResult(self.mask, 0.9)]


def trapezoid(top: int = 150, spread: float = 1.0) -> np.ndarray:
    mask = np.zeros((HEIGHT, WIDTH), dtype=bool)
    rows = np.arange(top, HEIGHT)
    half = (10 + 0.9 * (rows - top)) * spread
    cols = np.arange(WIDTH)[None, :]
    mask[top:] = np.abs(cols - WIDTH / 2) <= half[:, None]
    return mask


def test_refinement_prompts_from_the_coarse_mask_and_keeps_the_segmenters_mask() -> None:
    coarse, refined_truth = trapezoid(), trapezoid(spread=1.1)
    segmenter = FakeSegmenter(refined_truth)
    image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    refined = refine_with_segmenter(image, coarse, segmenter, n_points=8, rng=np.random.default_rng(0))
    assert np.array_equal(refined, refined_truth)
    (prompt,) = segmenter.prompts
    rows, cols = np.nonzero(coarse)
    assert prompt.box == (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
    points = np.array(prompt.points)
    labels = np.array(prompt.point_labels)
    positives, negatives = points[labels == 1].astype(int), points[labels == 0].astype(int)
    assert len(positives) == 8 and len(negatives) >= 2
    assert coarse[positives[:, 1], positives[:, 0]].all()
    assert not coarse[negatives[:, 1], negatives[:, 0]].any()
    # Spread along the mask's height: one positive per eighth of its rows.
    bands = np.floor((positives[:, 1] - rows.min()) / ((rows.max() - rows.min() + 1) / 8))
    assert len(set(bands.tolist())) == 8


def test_refinement_keeps_the_coarse_mask_when_the_segmenter_disagrees_or_fails() -> None:
    coarse = trapezoid()
    image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    elsewhere = np.zeros_like(coarse)
    elsewhere[:100, :200] = True
    for mask in (elsewhere, None, np.zeros_like(coarse)):
        refined = refine_with_segmenter(image, coarse, FakeSegmenter(mask), rng=np.random.default_rng(0))
        assert np.array_equal(refined, coarse)


def test_positive_points_follow_the_logits() -> None:
    coarse = trapezoid()
    logits = np.where(coarse, 0.0, -5.0).astype(np.float32)
    logits[:, WIDTH // 2 - 2:WIDTH // 2 + 3] += 5.0  # most confident along the centre line
    prompt = track_prompt(coarse, n_points=6, rng=np.random.default_rng(1), logits=logits)
    positives = np.array(prompt.points)[np.array(prompt.point_labels) == 1]
    assert np.all(np.abs(positives[:, 0] - WIDTH / 2) <= 3)


# -- a learned coarse mask -----------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")  # TorchScript is what users hand in
def test_torchscript_coarse_mask(tmp_path) -> None:
    torch = pytest.importorskip("torch")

    class GreenIsTrack(torch.nn.Module):
        def forward(self, rgb: torch.Tensor) -> torch.Tensor:
            return 20.0 * (rgb[:, 1:2] - 0.5)  # logit > 0 where green > 0.5

    path = tmp_path / "rail_seg.pt"
    torch.jit.save(torch.jit.script(GreenIsTrack()), str(path))
    image = np.zeros((48, 64, 3), np.uint8)
    image[20:, 16:40, 1] = 200  # BGR: green channel
    image[:, 50:, 2] = 200      # red only: not track
    mask, logits = SegmentationModelTrack(path).coarse_mask(image)
    expected = np.zeros((48, 64), bool)
    expected[20:, 16:40] = True
    assert logits.shape == (48, 64) and logits.dtype == np.float32
    assert np.array_equal(mask, expected)
    # A strict threshold keeps only confident pixels: green 200/255 gives sigmoid(5.7) ~ 0.997.
    assert not SegmentationModelTrack(path, threshold=0.999).coarse_mask(image)[0].any()


@pytest.mark.parametrize("hfov_deg", [60.0, None], ids=["lens-known", "lens-unknown"])
def test_a_camera_looking_up_at_the_track_is_found_and_estimated_with_its_upward_pitch(hfov_deg):
    # Rails that vanish well below the image centre (here at 0.69 of the height): a camera looking
    # up over the track's plane, as on a downgrade. Its geometry keeps the upward pitch.
    spec, _ = scene(0, "ballasted", 0.0)
    truth = CameraGeometry.from_fov(WIDTH, HEIGHT, 60.0, 2.5, -7.0)
    assert truth.horizon_v() > 0.66 * HEIGHT
    spec = dataclasses.replace(spec, geometry=truth)
    result = detect_track(render_background(spec), hfov_deg=hfov_deg)
    assert result.detection is not None, result.reason
    assert abs(result.detection.vanishing_point[1] - truth.horizon_v()) < 0.03 * HEIGHT
    estimate = estimate_geometry(result.detection, WIDTH, HEIGHT, hfov_deg=60.0)
    assert math.degrees(estimate.pitch_rad) == pytest.approx(-7.0, abs=0.7)
    assert estimate.height_m == pytest.approx(2.5, rel=0.10)


def test_the_finder_s_fast_percentile_and_median_are_numpy_s():
    rng = np.random.default_rng(4)
    for shape in ((300, 640), (5, 3), (1, 1)):
        for skew in (0.3, 1.0, 5.0):
            image = (rng.random(shape) ** skew * 255).astype(np.uint8)
            for q in (0, 37.5, 50, 95, 100):
                assert detect._percentile_uint8(image, q) == pytest.approx(np.percentile(image, q), abs=1e-9)
    for size in (1, 2, 7, 60):
        values = rng.normal(0, 3, size)
        assert detect._median(values) == np.median(values)
    for rows, columns in ((40, 169), (7, 4), (1, 577)):
        samples = np.round(rng.random((rows, columns)) * 20).astype(np.float32)  # ties, as top-hats have
        assert np.array_equal(detect._row_medians(samples), np.median(samples, axis=1))


def test_the_finder_s_straight_line_is_numpy_s_polyfit():
    rng = np.random.default_rng(5)
    for size in (3, 12, 80):
        rows = np.sort(rng.uniform(300, 720, size))
        x = rng.uniform(0, 1280) + rng.uniform(-2, 2) * rows + rng.normal(0, 2, size)
        at = np.arange(300.0, 720.0)
        np.testing.assert_allclose(detect._straight_line(rows, x, at), np.polyval(np.polyfit(rows, x, 1), at),
                                   rtol=0, atol=1e-9)

"""A sequence's camera: lens undistortion, the prepared frame, calibration across frames, the focal
length from the sleepers and the gauge as the ruler, against procedural scenes' exact cameras."""

from __future__ import annotations

import dataclasses
import math
import warnings
from functools import cache

import cv2
import numpy as np
import pytest

from synrail.rail.calibration import CONTRADICTS_SEQUENCE, FrameCamera, calibrate_sequence, contradiction
from synrail.rail.camera import CameraSettings, distort, focal_from_hfov, prepare_frame, undistort
from synrail.rail.detect import detect_track
from synrail.rail.estimate import estimate_geometry
from synrail.rail.sequence import (
    HFOV_FALLBACK,
    HFOV_GIVEN,
    HFOV_SLEEPERS,
    frame_evidence,
    frame_geometry,
    solve_sequence_camera,
)
from synrail.rail.sleepers import estimate_focal_from_sleepers
from synrail.sources.procedural_backgrounds import BackgroundSpec, render_background, sample_background_spec

WIDTH, HEIGHT = 640, 360
BARREL = (-0.28, 0.08, 0.0, 0.0)  # a wide CCTV lens


@cache
def scene(seed: int, hfov: float, spacing: float = 0.6, frame: int = 0, gauge_m: float = 1.435
          ) -> tuple[BackgroundSpec, np.ndarray]:
    """A straight ballasted scene; ``frame`` re-renders the same camera with other textures."""
    spec = sample_background_spec(
        np.random.default_rng(seed), width=WIDTH, height=HEIGHT, track_types=["ballasted"],
        conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(hfov, hfov),
        max_curvature=0.0, max_offset_m=0.15)
    spec = dataclasses.replace(spec, palette_seed=spec.palette_seed + frame, sleeper_spacing_m=spacing,
                               geometry=spec.geometry.model_copy(update={"gauge_m": gauge_m}))
    return spec, render_background(spec)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


# -- lens ---------------------------------------------------------------------------------------------
def test_undistortion_inverts_the_lens() -> None:
    _, image = scene(0, 60.0)
    restored = undistort(distort(image, 60.0, BARREL), 60.0, BARREL)
    # The corners leave the distorted frame; compare the middle, where both maps are defined.
    inner = (slice(60, HEIGHT - 60), slice(100, WIDTH - 100))
    error = np.abs(restored[inner].astype(np.float64) - image[inner].astype(np.float64))
    assert np.median(error) < 3.0
    # ... and the lens really moved things: without undistortion the middle does not match.
    moved = np.abs(distort(image, 60.0, BARREL)[inner].astype(np.float64) - image[inner].astype(np.float64))
    assert np.median(moved) > 2 * np.median(error)


def test_undistortion_moves_points_as_opencv_says() -> None:
    k = np.array([[focal_from_hfov(WIDTH, 70.0), 0, (WIDTH - 1) / 2], [0, focal_from_hfov(WIDTH, 70.0),
                  (HEIGHT - 1) / 2], [0, 0, 1]])
    image = np.zeros((HEIGHT, WIDTH), np.uint8)
    cv2.circle(image, (80, 60), 3, 255, -1)  # a dot near a corner, where the lens bends most
    ideal = cv2.undistortPoints(np.array([[[80.0, 60.0]]]), k, np.array(BARREL), None, k)[0, 0]
    ys, xs = np.nonzero(undistort(image, 70.0, BARREL) > 128)
    assert abs(xs.mean() - ideal[0]) < 1.0 and abs(ys.mean() - ideal[1]) < 1.0
    assert math.hypot(ideal[0] - 80, ideal[1] - 60) > 10  # the test means something


def test_a_distorted_scene_is_found_after_undistortion_and_measured_right_only_then() -> None:
    spec, image = scene(1, 75.0)
    strong = (-0.42, 0.15, 0.0, 0.0)
    distorted = distort(image, 75.0, strong)
    before = detect_track(distorted, hfov_deg=75.0)
    settings = CameraSettings(hfov_deg=75.0, distortion=strong)
    prepared = prepare_frame(distorted, settings, WIDTH, HEIGHT)
    after = detect_track(prepared.detect_image, hfov_deg=75.0)
    assert after.detection is not None, after.reason
    truth = spec.geometry.track_mask()
    overlap = iou(after.detection.mask[after.detection.top_row:], truth[after.detection.top_row:])
    assert overlap > 0.7
    height_after = estimate_geometry(after.detection, WIDTH, HEIGHT, hfov_deg=75.0).height_m
    assert height_after == pytest.approx(spec.geometry.height_m, rel=0.1)
    if before.detection is not None:  # the detector may follow bent rails, but the pinhole camera misreads them
        assert before.detection.confidence < after.detection.confidence
        height_before = estimate_geometry(before.detection, WIDTH, HEIGHT, hfov_deg=75.0).height_m
        assert abs(height_before / spec.geometry.height_m - 1) > 2 * abs(height_after / spec.geometry.height_m - 1)


def test_the_hood_is_cut_off_and_the_principal_point_follows() -> None:
    image = np.full((400, 800, 3), 90, np.uint8)
    image[300:] = 0  # a dark dashboard
    prepared = prepare_frame(image, CameraSettings(ignore_bottom=0.25), 400, 150)
    assert prepared.image.shape == (150, 400, 3) and prepared.image.min() == 90
    assert prepared.scale == pytest.approx(0.5)
    assert prepared.cx == pytest.approx(199.5, abs=0.3)
    assert prepared.cy == pytest.approx(99.75, abs=0.3)  # the source centre, now below the frame's middle


def test_ignore_regions_are_hidden_from_the_detector_only() -> None:
    image = np.full((200, 400, 3), 100, np.uint8)
    image[150:190, 20:120] = 255  # a HUD box
    prepared = prepare_frame(image, CameraSettings(ignore_regions=(((0.05, 0.75), (0.3, 0.95)),)), 400, 200)
    assert prepared.image[170, 60, 0] == 255
    assert abs(int(prepared.detect_image[170, 60, 0]) - 100) < 10


# -- gauge ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gauge_m", [1.0, 1.676])
def test_the_gauge_is_the_ruler(gauge_m: float) -> None:
    spec, image = scene(2, 60.0, gauge_m=gauge_m)
    detection = detect_track(image, hfov_deg=60.0).detection
    assert detection is not None
    right = estimate_geometry(detection, WIDTH, HEIGHT, hfov_deg=60.0, gauge_m=gauge_m)
    standard = estimate_geometry(detection, WIDTH, HEIGHT, hfov_deg=60.0)
    assert right.gauge_m == gauge_m
    assert right.height_m == pytest.approx(spec.geometry.height_m, rel=0.06)
    assert abs(standard.height_m / spec.geometry.height_m - 1) > 0.1  # 1435 mm would be off


# -- calibration across frames ---------------------------------------------------------------------------
def sequence(seed: int, hfov: float, frames: int = 5, spacing: float = 0.6):
    evidence, settings = [], CameraSettings(hfov_deg=None, sleeper_spacing_m=spacing)
    for k in range(frames):
        spec, image = scene(seed, hfov, spacing, k)
        prepared = prepare_frame(image, settings, WIDTH, HEIGHT)
        result = detect_track(prepared.detect_image, hfov_deg=60.0)
        assert result.detection is not None, result.reason
        evidence.append(frame_evidence(prepared, result.detection, settings))
    return spec, evidence, settings


@pytest.mark.parametrize("seed", [0, 3])
def test_calibration_across_frames_recovers_the_procedural_camera(seed: int) -> None:
    spec, evidence, settings = sequence(seed, 60.0)
    given = settings.model_copy(update={"hfov_deg": 60.0})
    camera = solve_sequence_camera(evidence, given, source_width=WIDTH, frame_width=WIDTH, frame_height=HEIGHT)
    assert camera.hfov_source == HFOV_GIVEN and camera.calibration is not None
    truth = spec.geometry
    assert camera.calibration.frames >= 4
    assert camera.calibration.height_m.value == pytest.approx(truth.height_m, rel=0.1)
    assert camera.calibration.horizon_v.value == pytest.approx(truth.horizon_v(), abs=0.02 * HEIGHT)
    assert camera.pitch_deg == pytest.approx(math.degrees(truth.pitch_rad), abs=1.0)
    for item in evidence:
        geometry, reason = frame_geometry(item, camera, frame_width=WIDTH, frame_height=HEIGHT)
        assert reason is None and geometry is not None
        assert geometry.height_m == camera.calibration.height_m.value  # the shared prior


def test_rails_that_contradict_the_sequence_camera_are_left_out() -> None:
    cameras = [FrameCamera(horizon_v=100 + d, height_m=2.5 + 0.01 * d, offset_m=0.02 * d, confidence=0.9)
               for d in (-1, 0, 1, 0, 2, -2)]
    calibration = calibrate_sequence(cameras, 360)
    assert calibration is not None and calibration.height_m.value == pytest.approx(2.5, abs=0.02)
    assert contradiction(cameras[0], calibration) is None
    neighbour = FrameCamera(horizon_v=100, height_m=2.5, offset_m=4.5, confidence=0.9)  # the next track
    wrong = FrameCamera(horizon_v=160, height_m=2.5, offset_m=0.0, confidence=0.9)
    for frame, word in ((neighbour, "lateral offset"), (wrong, "horizon row")):
        reason = contradiction(frame, calibration)
        assert reason is not None and reason.startswith(CONTRADICTS_SEQUENCE) and word in reason
    # An outlier among the votes does not move the sequence camera.
    robust = calibrate_sequence([*cameras, wrong, wrong.__class__(100, 7.0, 0.0, 0.9)], 360)
    assert robust is not None and robust.horizon_v.value == pytest.approx(100, abs=1)
    assert robust.height_m.value == pytest.approx(2.5, abs=0.02)
    assert calibrate_sequence(cameras[:2], 360) is None  # too few frames to share a camera
    unsure = [dataclasses.replace(c, confidence=0.3) for c in cameras]
    assert calibrate_sequence(unsure, 360) is None


# -- focal length from the sleepers -------------------------------------------------------------------------
@pytest.mark.parametrize(("hfov", "spacing"), [(45.0, 0.6), (60.0, 0.65), (80.0, 0.6), (100.0, 0.6)])
def test_sleepers_give_the_focal_length(hfov: float, spacing: float) -> None:
    spec, evidence, settings = sequence(1, hfov, frames=4, spacing=spacing)
    camera = solve_sequence_camera(evidence, settings, source_width=WIDTH, frame_width=WIDTH, frame_height=HEIGHT)
    assert camera.hfov_source == HFOV_SLEEPERS, camera.notes
    assert camera.focal_source_px == pytest.approx(spec.geometry.focal_px, rel=0.15)
    assert camera.hfov_sigma_deg is not None and 0 < camera.hfov_sigma_deg < 0.1 * hfov
    assert camera.calibration is not None
    assert camera.calibration.height_m.value == pytest.approx(spec.geometry.height_m, rel=0.1)


def test_one_frame_is_enough_for_the_sleepers() -> None:
    spec, image = scene(2, 70.0)
    detection = detect_track(image, hfov_deg=60.0).detection
    assert detection is not None
    estimate = estimate_focal_from_sleepers([(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), detection)], width=WIDTH,
                                            cy=(HEIGHT - 1) / 2, gauge_m=1.435, spacing_m=0.6)
    assert estimate.focal_px == pytest.approx(spec.geometry.focal_px, rel=0.15)
    assert estimate.sigma_px is not None and estimate.sigma_px > 0


def test_a_wrong_given_hfov_is_warned_about_and_slab_track_falls_back() -> None:
    _, evidence, settings = sequence(1, 80.0, frames=3)
    given = settings.model_copy(update={"hfov_deg": 50.0})
    camera = solve_sequence_camera(evidence, given, source_width=WIDTH, frame_width=WIDTH, frame_height=HEIGHT)
    assert camera.hfov_source == HFOV_GIVEN and camera.hfov_deg == pytest.approx(50.0)
    assert any("hfov_deg 50 given, but the sleepers say" in note for note in camera.notes)
    # Without sleepers (a featureless bed between the rails) the configured value is used, and said.
    flat = [dataclasses.replace(e, profile=None) for e in evidence]
    fallback = solve_sequence_camera(flat, settings, source_width=WIDTH, frame_width=WIDTH, frame_height=HEIGHT)
    assert fallback.hfov_source == HFOV_FALLBACK and fallback.hfov_deg == pytest.approx(60.0)
    assert any("not estimated" in note for note in fallback.notes)


def test_a_period_that_no_frame_shows_on_its_own_is_not_an_estimate() -> None:
    spec, image = scene(2, 70.0)
    detection = detect_track(image, hfov_deg=60.0).detection
    assert detection is not None
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    # The same frame with its rows shuffled: no sleeper period is left.
    shuffled = grey[np.random.default_rng(0).permutation(HEIGHT)]
    estimate = estimate_focal_from_sleepers([(shuffled, detection)], width=WIDTH, cy=(HEIGHT - 1) / 2,
                                            gauge_m=1.435, spacing_m=0.6)
    assert estimate.focal_px is None and estimate.reason is not None


def test_a_bed_crushed_black_tells_no_sleeper_period_and_raises_no_warning() -> None:
    """Night or a tunnel: the brightness between the rails is flat, nothing to normalise a spectrum by."""
    spec, image = scene(2, 70.0)
    detection = detect_track(image, hfov_deg=60.0).detection
    black = np.zeros((HEIGHT, WIDTH), np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        estimate = estimate_focal_from_sleepers([(black, detection)], width=WIDTH, cy=(HEIGHT - 1) / 2,
                                                gauge_m=1.435, spacing_m=0.6)
    assert estimate.focal_px is None and estimate.reason is not None

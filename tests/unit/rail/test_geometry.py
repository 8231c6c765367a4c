import math

import numpy as np
import pytest

from synrail.rail.geometry import STANDARD_GAUGE_M, CameraGeometry


@pytest.fixture(params=[(0.0, 0.0), (0.003, 0.1), (-0.002, -0.12)], ids=["straight", "left", "right"])
def geometry(request) -> CameraGeometry:
    curvature, offset = request.param
    return CameraGeometry.from_fov(1280, 720, hfov_deg=60, height_m=2.6, pitch_deg=3.0,
                                   track_curvature=curvature, track_offset_m=offset)


def test_pixel_ground_pixel_round_trip(geometry):
    rng = np.random.default_rng(0)
    u = rng.uniform(0, geometry.width - 1, 500)
    v = rng.uniform(geometry.horizon_v() + 5, geometry.height - 1, 500)
    x, z = geometry.ground_point(u, v)
    u2, v2 = geometry.project(x, np.zeros_like(x), z)
    assert np.allclose(u2, u, atol=1e-6) and np.allclose(v2, v, atol=1e-6)


def test_distance_of_known_ground_points_within_one_percent(geometry):
    for x_m, z_m in [(0.0, 5.0), (0.7, 15.0), (-0.7, 40.0), (0.3, 75.0)]:
        u, v = geometry.project(np.array([x_m]), np.array([0.0]), np.array([z_m]))
        # the pixel grid rounds the point: go through the nearest pixel centre, as placement does
        d = geometry.distance_m(np.rint(u), np.rint(v))[0]
        truth = math.sqrt(x_m**2 + z_m**2 + geometry.height_m**2)
        assert abs(d - truth) / truth < 0.01, (x_m, z_m, d, truth)


def test_above_horizon_has_no_ground_point(geometry):
    x, z = geometry.ground_point(np.array([640.0]), np.array([geometry.horizon_v() - 10]))
    assert np.isnan(x).all() and np.isnan(z).all()


def test_object_height_matches_focal_over_distance(geometry):
    u, v = geometry.project(np.array([0.0]), np.array([0.0]), np.array([30.0]))
    height_px = geometry.object_pixel_height(float(u[0]), float(v[0]), 1.8)
    d = geometry.distance_m(u, v)[0]
    assert height_px == pytest.approx(1.8 * geometry.focal_px / d, rel=0.02)
    far = geometry.object_pixel_height(*[float(a[0]) for a in geometry.project(
        np.array([0.0]), np.array([0.0]), np.array([60.0]))], 1.8)
    assert far == pytest.approx(height_px / 2, rel=0.05)  # twice as far, half as tall


def test_track_mask_spans_the_rails_exactly(geometry):
    mask = geometry.track_mask()
    assert mask.dtype == bool and mask.shape == (720, 1280)
    assert not mask[: int(geometry.horizon_v())].any()
    z = 20.0
    centre = geometry.track_centre_x(z)
    half = STANDARD_GAUGE_M / 2 + geometry.rail_head_m
    inside = [centre, centre + half * 0.95, centre - half * 0.95]
    outside = [centre + half * 1.3, centre - half * 1.3]
    for x, expected in [(x, True) for x in inside] + [(x, False) for x in outside]:
        u, v = geometry.project(np.array([x]), np.array([0.0]), np.array([z]))
        assert mask[int(np.rint(v[0])), int(np.rint(u[0]))] == expected, (x, expected)


def test_curvature_bends_the_track_sideways():
    straight = CameraGeometry.from_fov(640, 360, 60, 2.5, 3.0)
    curved = CameraGeometry.from_fov(640, 360, 60, 2.5, 3.0, track_curvature=0.004)
    cols = lambda g, row: np.flatnonzero(g.track_mask()[row]).mean()  # noqa: E731
    far_row = int(straight.horizon_v()) + 8
    assert cols(curved, far_row) > cols(straight, far_row) + 5

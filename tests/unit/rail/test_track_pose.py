"""The camera advanced along the track: world <-> camera ground coordinates and re-projection."""

import math

import numpy as np
import pytest

from synrail.rail.geometry import (
    CameraGeometry,
    TrackPose,
    back_project_to_world,
    reproject_ground_point,
    track_point_xz,
)


def geometry(curvature: float = 0.0) -> CameraGeometry:
    return CameraGeometry.from_fov(640, 384, hfov_deg=60, height_m=2.5, pitch_deg=2.0, track_offset_m=0.1,
                                   track_curvature=curvature)


@pytest.mark.parametrize("curvature", [0.0, 0.003, -0.002])
def test_to_camera_and_to_world_invert_each_other(curvature):
    pose = TrackPose(advance_m=17.3, curvature=curvature, offset_m=0.1)
    x, z = np.array([-3.0, 0.4, 5.0]), np.array([20.0, 55.0, 90.0])
    back = pose.to_world(*pose.to_camera(x, z))
    np.testing.assert_allclose(back, (x, z), atol=1e-9)


def test_on_a_straight_track_the_camera_only_slides_forward():
    pose = TrackPose(advance_m=12.0, curvature=0.0)
    x, z = pose.to_camera(np.array([0.7]), np.array([50.0]))
    assert (x[0], z[0]) == pytest.approx((0.7, 38.0))


@pytest.mark.parametrize("curvature", [0.0, 0.003])
def test_the_track_stays_where_the_moved_camera_expects_it(curvature):
    # the centreline seen from the advanced camera is the same parabola (so every frame shares a mask)
    g = geometry(curvature)
    pose = TrackPose.along(g, 25.0)
    z_world = np.linspace(30.0, 150.0, 9)
    x_cam, z_cam = pose.to_camera(g.track_centre_x(z_world), z_world)
    np.testing.assert_allclose(x_cam, g.track_centre_x(z_cam), atol=1e-9)


def test_reprojection_and_back_projection_agree_and_distance_falls_with_the_advance():
    g = geometry(0.002)
    world = track_point_xz(g, 60.0, 0.3)
    previous = None
    for advance in np.arange(0.0, 40.0, 2.5):
        pose = TrackPose.along(g, float(advance))
        u, v, distance = reproject_ground_point(g, pose, world)
        assert back_project_to_world(g, pose, u, v) == pytest.approx(world, abs=1e-6)
        if previous is not None:
            assert 0.9 * 2.5 < previous - distance <= 2.5 + 1e-6
        previous = distance
    behind = reproject_ground_point(g, TrackPose.along(g, 70.0), world)
    assert math.isnan(behind[0]) and math.isnan(behind[1])

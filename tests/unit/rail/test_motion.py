"""Ego-motion from the ground between the tracked rails, and the rails as a ruler for a footprint."""

import numpy as np
import pytest

from synrail.rail.detect import RailFit
from synrail.rail.geometry import CameraGeometry
from synrail.rail.motion import (
    NO_PAIRS,
    PAIRS_DISAGREE,
    STANDING,
    STEP_M,
    WEAK_TEXTURE,
    Advance,
    GroundStrip,
    RailPair,
    advance_between,
    ground_strip,
    lateral_gauge,
    measured,
    rails_column,
    rails_depth_m,
    speed_from_advances,
)


def _strip(texture: np.ndarray, start: int, rows: int) -> GroundStrip:
    return GroundStrip(z_m=(start + np.arange(rows)) * STEP_M, values=texture[start:start + rows])


def test_the_advance_is_the_shift_that_maps_the_later_strip_onto_the_earlier():
    texture = np.random.default_rng(0).normal(size=(1500, 20)).astype(np.float32)
    world = np.cumsum(texture, axis=0)  # ground fixed in the world, rows 2 cm apart
    world -= np.convolve(world[:, 0], np.ones(25) / 25, mode="same")[:, None]
    before = GroundStrip(z_m=np.arange(500, 1400) * STEP_M, values=world[500:1400])
    after = GroundStrip(z_m=np.arange(500, 1400) * STEP_M, values=world[583:1483])  # moved 1.66 m
    found = advance_between(before, after, max_advance_m=5.0)
    assert found.advance_m == pytest.approx(83 * STEP_M, abs=0.5 * STEP_M) and found.score > 0.99


def test_speed_from_pairs_and_its_refusals():
    pairs = [Advance(1.667, 0.9), Advance(1.66, 0.95), Advance(1.67, 0.8), None]
    estimate = speed_from_advances(pairs, 10.0)
    assert estimate.speed_kmh == pytest.approx(60.0, rel=0.01) and estimate.pairs == 3
    assert speed_from_advances(pairs[:2], 10.0).reason == NO_PAIRS
    assert speed_from_advances([Advance(1.6, 0.2)] * 4, 10.0).reason == WEAK_TEXTURE
    assert speed_from_advances([Advance(0.0, 0.99)] * 4, 10.0).reason == STANDING
    assert speed_from_advances([Advance(a, 0.9) for a in (0.5, 1.0, 1.6, 0.45, 1.5)], 10.0).reason == PAIRS_DISAGREE
    # an uneven cadence (short and long pairs in turn) keeps the distance covered: the mean, not the median
    uneven = speed_from_advances([Advance(a, 0.9) for a in (0.7, 1.1) * 5 + (0.7,)], 12.0)
    assert uneven.speed_kmh == pytest.approx((0.7 * 6 + 1.1 * 5) / 11 * 12 * 3.6)
    failed = [Advance(a, 0.9) for a in (1.0, 1.02, 0.98, 1.0, 1.8, 0.3, 0.0)]  # matched far, blurred, no motion
    with_failures = speed_from_advances(failed, 10.0)
    assert with_failures.speed_kmh == pytest.approx(36.0) and with_failures.pairs == 4
    assert [measured(a, with_failures) for a in failed] == [1.0, 1.02, 0.98, 1.0, None, None, None]
    assert measured(Advance(1.0, 0.3), with_failures) is None  # too weak a correlation


def test_a_ground_strip_covers_the_near_track():
    g = CameraGeometry.from_fov(640, 360, 60, 2.5, 3.0)
    strip = ground_strip(np.random.default_rng(1).integers(0, 255, (360, 640)).astype(np.uint8), g)
    _, bottom = g.ground_point(np.array([g.cx]), np.array([359.0]))
    assert strip.z_m[0] == pytest.approx(bottom[0] + 0.5) and strip.z_m[-1] < 20.0
    assert strip.values.shape == (strip.z_m.size, 51)
    assert ground_strip(np.zeros((360, 640), np.uint8), g, (0.0, 8.0)) is None  # under 3 m of track in range


def test_the_rails_measure_a_footprint_in_gauges_and_its_depth():
    g = CameraGeometry.from_fov(640, 360, 60, 2.5, 0.0)  # level camera: depth = Z
    half = (g.gauge_m + g.rail_head_m) / 2
    horizon = g.horizon_v()
    # a straight track seen level: x = cx ± f * half * t / (f * h) = cx ± (half / h) * t
    rails = RailPair.of(RailFit(horizon, g.cx, -half / g.height_m, 0.0), RailFit(horizon, g.cx, half / g.height_m, 0.0))
    z = 20.0
    v = float(g.project(np.array([0.0]), np.array([0.0]), np.array([z]))[1][0])
    u = float(g.project(np.array([0.25 * g.gauge_m]), np.array([0.0]), np.array([z]))[0][0])
    assert lateral_gauge(rails, u, v, g.gauge_m, g.rail_head_m) == pytest.approx(0.25, abs=1e-6)
    assert rails_depth_m(rails, v, g.focal_px, g.gauge_m, g.rail_head_m) == pytest.approx(z, rel=1e-6)


def test_the_rails_place_a_footprint_only_on_the_rows_they_were_seen():
    g = CameraGeometry.from_fov(640, 360, 60, 2.5, 0.0)
    half = (g.gauge_m + g.rail_head_m) / 2
    horizon = g.horizon_v()
    fits = (RailFit(horizon, g.cx, -half / g.height_m, 0.0), RailFit(horizon, g.cx, half / g.height_m, 0.0))
    rails = RailPair.of(*fits, rows=(200, 359))
    v = float(g.project(np.array([0.0]), np.array([0.0]), np.array([10.0]))[1][0])
    assert v > 200
    u = float(g.project(np.array([0.25 * g.gauge_m]), np.array([0.0]), np.array([10.0]))[0][0])
    assert rails_column(rails, v, 0.25 * g.gauge_m, g.gauge_m, g.rail_head_m) == pytest.approx(u, abs=1e-6)
    assert rails_column(rails, 190.0, 0.0, g.gauge_m, g.rail_head_m) is None  # beyond where they were seen
    area = rails.area(640, 360)
    assert not area[:200].any() and area[int(round(v)), int(round(u))] and not area[int(round(v)), 0]
    assert RailPair.of(*fits).area(640, 360)[181:].any()  # no rows given: every row below the horizon

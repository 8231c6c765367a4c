"""Tests for the procedural railway backgrounds."""

from __future__ import annotations

import dataclasses
import math

import cv2
import numpy as np
import pytest

from synrail.rail.geometry import CameraGeometry
from synrail.sources import procedural_backgrounds as pb
from synrail.sources.procedural_backgrounds import (
    CONDITIONS,
    FOG_DENSITY,
    TRACK_TYPES,
    BackgroundSpec,
    fog_transmission,
    render_background,
    sample_background_spec,
)

WIDTH, HEIGHT = 320, 180


def make_spec(seed: int = 0, track_type: str = "ballasted", condition: str = "normal",
              curvature: float = 0.0, offset: float = 0.0, **overrides: object) -> BackgroundSpec:
    spec = sample_background_spec(
        np.random.default_rng(seed), width=WIDTH, height=HEIGHT, track_types=[track_type],
        conditions={condition: 1.0}, camera_height_m=(2.5, 2.5), pitch_deg=(3.0, 3.0),
        hfov_deg=(60.0, 60.0), max_curvature=0.0, max_offset_m=0.0)
    geometry = spec.geometry.model_copy(update={"track_curvature": curvature, "track_offset_m": offset})
    return dataclasses.replace(spec, geometry=geometry, **overrides)


def luminance(image: np.ndarray) -> np.ndarray:
    return image.astype(np.float64).mean(axis=2)


def ground_lateral(geometry: CameraGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Offset from the ego centreline and Z at every pixel centre (NaN above the horizon)."""
    cols = np.arange(geometry.width, dtype=np.float64)[None, :]
    rows = np.arange(geometry.height, dtype=np.float64)[:, None]
    x, z = geometry.ground_point(cols, rows)
    z = np.broadcast_to(z, x.shape)
    return x - geometry.track_centre_x(z), z


def test_same_spec_gives_identical_bytes_and_leaves_global_rng_alone() -> None:
    spec = make_spec(seed=3)
    state = np.random.get_state()[1].copy()
    first, second = render_background(spec), render_background(spec)
    assert first.tobytes() == second.tobytes()
    assert np.array_equal(np.random.get_state()[1], state)
    other = render_background(dataclasses.replace(spec, palette_seed=spec.palette_seed + 1))
    assert np.abs(other.astype(int) - first.astype(int)).mean() > 1.0


@pytest.mark.parametrize("track_type", TRACK_TYPES)
@pytest.mark.parametrize("condition", CONDITIONS)
def test_every_track_type_and_condition_renders(track_type: str, condition: str) -> None:
    spec = make_spec(seed=1, track_type=track_type, condition=condition, curvature=0.002)
    image = render_background(spec)
    assert image.shape == (HEIGHT, WIDTH, 3) and image.dtype == np.uint8
    assert image.std() > 3.0  # not a flat fill


def test_conditions_change_the_look() -> None:
    means = {c: luminance(render_background(make_spec(seed=2, condition=c))).mean() for c in CONDITIONS}
    assert means["dusk"] < 0.7 * means["normal"]
    fog = render_background(make_spec(seed=2, condition="fog"))
    normal = render_background(make_spec(seed=2, condition="normal"))
    assert luminance(fog).std() < luminance(normal).std()


@pytest.mark.parametrize("track_type", TRACK_TYPES)
@pytest.mark.parametrize(("curvature", "offset"), [(0.0, 0.0), (0.004, 0.3), (-0.003, -0.4)])
def test_rails_are_drawn_where_the_geometry_puts_them(track_type: str, curvature: float, offset: float) -> None:
    spec = make_spec(seed=4, track_type=track_type, curvature=curvature, offset=offset, sensor_noise=0.0)
    g = spec.geometry
    image = luminance(render_background(spec))
    lateral, z = ground_lateral(g)
    near = np.isfinite(z) & (z < 12.0)
    inner, outer = g.gauge_m / 2, g.gauge_m / 2 + g.rail_head_m
    on_head = near & (np.abs(lateral) > inner + 0.015) & (np.abs(lateral) < outer - 0.015)
    between = near & (np.abs(lateral) < inner - 0.2)
    beside = near & (np.abs(lateral) > outer + 0.2) & (np.abs(lateral) < 1.2)
    assert on_head.sum() > 50
    assert image[on_head].mean() > image[between].mean() + 10
    assert image[on_head].mean() > image[beside].mean() + 10


def test_sleepers_repeat_along_the_track() -> None:
    spec = make_spec(seed=5, sensor_noise=0.0, sleeper_material="wood")
    image = luminance(render_background(spec))
    column = WIDTH // 2  # straight track ahead: this column runs between the rails
    rows = np.arange(HEIGHT - 40, HEIGHT)
    profile = image[rows, column]
    # Dark wooden sleepers on lighter ballast: a strong light/dark alternation near the camera.
    assert profile.max() - profile.min() > 40
    assert np.count_nonzero(np.diff(np.sign(profile - profile.mean()))) >= 4


def test_sleeper_shades_wrap_round_even_at_distances_past_int64() -> None:
    # Near the horizon of a curved track the distance along it reaches 1e20 m (a render at 256x144
    # went there); numbering the sleepers must not overflow the integer cast.
    along = np.array([0.0, 0.3, 0.61, 59.9, -1.2, 4.06e20, 1e30])
    with np.errstate(all="raise"):
        index = pb._sleeper_shade_index(along, phase=0.1, spacing_m=0.6, shades=7)
    assert index.dtype == np.int64 and ((index >= 0) & (index < 7)).all()
    assert list(index[:5]) == [6, 0, 0, int(np.floor((59.9 - 0.1) / 0.6)) % 7, int(np.floor((-1.2 - 0.1) / 0.6)) % 7]


def test_sky_is_above_the_horizon_and_brighter_than_the_ground() -> None:
    spec = make_spec(seed=6, treeline_distance_m=0.0, tree_count=0)
    image = luminance(render_background(spec))
    horizon = spec.geometry.horizon_v()
    sky, ground = image[: math.floor(horizon) - 2], image[math.ceil(horizon) + 15:]
    assert sky.mean() > ground.mean() + 40


@pytest.mark.parametrize("seed", range(4))
def test_clutter_never_covers_the_track_area(seed: int) -> None:
    # Tight curves and dense vegetation make trees and masts line up behind the track.
    spec = make_spec(seed=seed, curvature=(-1) ** seed * 0.004, tree_count=80, mast_side=1,
                     mast_spacing_m=30.0, treeline_distance_m=400.0)
    bare = dataclasses.replace(spec, tree_count=0, mast_side=0, treeline_distance_m=0.0)
    mask = spec.geometry.track_mask()
    cluttered, plain = render_background(spec), render_background(bare)
    assert np.array_equal(cluttered[mask], plain[mask])
    assert np.abs(cluttered[~mask].astype(int) - plain[~mask].astype(int)).mean() > 2.0  # clutter was drawn


def test_fog_pulls_far_track_pixels_toward_the_airlight() -> None:
    spec = make_spec(seed=7, condition="fog", fog_beta=0.03, sensor_noise=0.0)
    image = render_background(spec).astype(np.float64)
    airlight = np.asarray(spec.fog_colour_bgr)
    mask = spec.geometry.track_mask()
    _, z = ground_lateral(spec.geometry)
    gap = np.abs(image - airlight).mean(axis=2)
    near, far = mask & (z < 10.0), mask & (z > 50.0) & (z < 100.0)
    assert near.any() and far.any()
    assert gap[far].mean() < 0.5 * gap[near].mean()
    clear = render_background(dataclasses.replace(spec, fog_beta=0.0)).astype(np.float64)
    assert gap[far].mean() < np.abs(clear - airlight).mean(axis=2)[far].mean()


def test_fog_transmission_matches_beer_lambert() -> None:
    assert fog_transmission(0.01, 100.0) == pytest.approx(math.exp(-1.0))
    assert fog_transmission("fog", 50.0) == pytest.approx(math.exp(-FOG_DENSITY["fog"] * 50.0))
    assert np.all(fog_transmission(0.0, np.array([1.0, np.inf])) == 1.0)
    assert fog_transmission(0.02, np.inf) == 0.0
    spec = make_spec(condition="fog")
    assert spec.transmission(40.0) == pytest.approx(math.exp(-spec.fog_beta * 40.0))


def test_ballasted_and_ballastless_tracks_differ_on_the_track_area() -> None:
    ballasted = make_spec(seed=8, track_type="ballasted")
    slab = dataclasses.replace(ballasted, track_type="ballastless")
    mask = ballasted.geometry.track_mask()
    a, b = render_background(ballasted), render_background(slab)
    assert np.abs(a[mask].astype(int) - b[mask].astype(int)).mean() > 10


def test_fine_track_detail_is_antialiased(monkeypatch: pytest.MonkeyPatch) -> None:
    """A render should match a 4x supersampled one; point sampling (no filtering) should not."""
    spec = make_spec(seed=9, sensor_noise=0.0, tree_count=0, mast_side=0, sleeper_material="wood")
    g = spec.geometry
    fine_geometry = CameraGeometry.from_fov(4 * WIDTH, 4 * HEIGHT, 60.0, g.height_m, math.degrees(g.pitch_rad))
    fine = render_background(dataclasses.replace(spec, geometry=fine_geometry))
    reference = cv2.resize(fine, (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA).astype(np.float64)
    _, z = ground_lateral(g)
    far_track = g.track_mask() & (z > 20.0)

    def error_against_reference() -> float:
        return float(np.abs(render_background(spec).astype(np.float64) - reference)[far_track].mean())

    filtered = error_against_reference()
    monkeypatch.setattr(pb, "_AA_FILTER", 1e-3)
    point_sampled = error_against_reference()
    assert filtered < 0.6 * point_sampled


def test_sampler_respects_ranges_and_weights() -> None:
    rng = np.random.default_rng(10)
    seen = set()
    for _ in range(40):
        spec = sample_background_spec(
            rng, width=WIDTH, height=HEIGHT, track_types=["ballastless"],
            conditions={"fog": 1.0, "dusk": 3.0, "normal": 0.0}, camera_height_m=(2.0, 3.0),
            pitch_deg=(1.0, 4.0), hfov_deg=(50.0, 70.0), max_curvature=0.003, max_offset_m=0.5)
        g = spec.geometry
        seen.add(spec.condition)
        assert spec.track_type == "ballastless"
        assert (g.width, g.height) == (WIDTH, HEIGHT)
        assert 2.0 <= g.height_m <= 3.0 and abs(g.track_curvature) <= 0.003 and abs(g.track_offset_m) <= 0.5
        assert math.radians(1.0) <= g.pitch_rad <= math.radians(4.0)
        assert spec.fog_beta > 0 and all(0 <= c <= 255 for c in spec.fog_colour_bgr)
    assert seen == {"fog", "dusk"}


@pytest.mark.parametrize("bad", [{"track_types": ["gravel"]}, {"track_types": []},
                                 {"conditions": {"snow": 1.0}}, {"conditions": {"fog": 0.0}}])
def test_sampler_rejects_unknown_or_empty_choices(bad: dict) -> None:
    kwargs = dict(width=WIDTH, height=HEIGHT, track_types=["ballasted"], conditions={"normal": 1.0},
                  camera_height_m=(2.0, 3.0), pitch_deg=(1.0, 4.0), hfov_deg=(50.0, 70.0),
                  max_curvature=0.003, max_offset_m=0.5)
    with pytest.raises(ValueError):
        sample_background_spec(np.random.default_rng(0), **{**kwargs, **bad})

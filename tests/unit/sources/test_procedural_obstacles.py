"""Procedural obstacle cutouts: exact masks, determinism, size priors and shapes per kind."""

from __future__ import annotations

import numpy as np
import pytest

from synrail.sources.procedural_obstacles import (
    OBSTACLE_KINDS,
    SIZE_PRIORS_M,
    Cutout,
    render_cutout,
)

SEEDS = range(6)


def _render(kind: str, seed: int, **kwargs: object) -> Cutout:
    return render_cutout(kind, np.random.default_rng(seed), **kwargs)


def _aspect(cutout: Cutout) -> float:
    h, w = cutout.rgba.shape[:2]
    return w / h


@pytest.mark.parametrize("kind", OBSTACLE_KINDS)
def test_every_kind_renders_an_exact_tight_mask(kind: str) -> None:
    for seed in SEEDS:
        cutout = _render(kind, seed)
        rgba = cutout.rgba
        assert cutout.kind == kind
        assert cutout.variant.startswith(f"{kind}/")
        assert rgba.dtype == np.uint8 and rgba.ndim == 3 and rgba.shape[2] == 4
        assert rgba.shape[0] == 256
        alpha = rgba[..., 3]
        assert set(np.unique(alpha)) <= {0, 255}
        assert alpha[0].any() and alpha[-1].any() and alpha[:, 0].any() and alpha[:, -1].any()
        assert 0.25 < (alpha > 0).mean() < 0.95
        assert not rgba[alpha == 0, :3].any(), "colour outside the mask must be zero"


@pytest.mark.parametrize("kind", OBSTACLE_KINDS)
def test_objects_are_shaded_not_flat(kind: str) -> None:
    rgba = _render(kind, 0).rgba
    inside = rgba[rgba[..., 3] > 0, :3].astype(np.float64)
    assert inside.std(axis=0).max() > 8
    assert len(np.unique(inside.sum(axis=1))) > 50


@pytest.mark.parametrize("kind", OBSTACLE_KINDS)
def test_same_seed_same_bytes_other_seed_differs(kind: str) -> None:
    a, b, other = _render(kind, 7), _render(kind, 7), _render(kind, 8)
    assert a.rgba.tobytes() == b.rgba.tobytes()
    assert (a.height_m, a.variant) == (b.height_m, b.variant)
    assert a.rgba.shape != other.rgba.shape or a.rgba.tobytes() != other.rgba.tobytes()


@pytest.mark.parametrize("kind", OBSTACLE_KINDS)
def test_height_m_is_within_the_kind_prior(kind: str) -> None:
    low, high = SIZE_PRIORS_M[kind]
    heights = [_render(kind, seed).height_m for seed in SEEDS]
    assert all(low <= h <= high for h in heights)
    assert len(set(heights)) == len(heights)


def test_size_priors_cover_every_kind() -> None:
    assert set(SIZE_PRIORS_M) == set(OBSTACLE_KINDS)
    assert all(0 < low < high for low, high in SIZE_PRIORS_M.values())


def test_unknown_kind_names_the_allowed_kinds() -> None:
    with pytest.raises(ValueError, match="dragon") as info:
        render_cutout("dragon", np.random.default_rng(0))
    assert all(kind in str(info.value) for kind in OBSTACLE_KINDS)


@pytest.mark.parametrize("texture", [np.zeros((4, 4)), np.zeros((8, 8, 3), np.float32),
                                     np.zeros((0, 5, 3), np.uint8)])
def test_malformed_texture_is_rejected(texture: np.ndarray) -> None:
    with pytest.raises(ValueError, match="texture"):
        render_cutout("unseen_obstacle", np.random.default_rng(0), texture=texture)


def test_texture_fills_unseen_obstacles() -> None:
    rng = np.random.default_rng(123)
    noise = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    red = np.zeros((32, 32, 3), np.uint8)
    red[..., 2] = 220
    procedural = _render("unseen_obstacle", 3)
    with_noise = _render("unseen_obstacle", 3, texture=noise)
    with_red = _render("unseen_obstacle", 3, texture=red)
    assert with_noise.variant.endswith("/texture")
    # the outline does not depend on the fill; the colours do
    assert np.array_equal(with_noise.rgba[..., 3], with_red.rgba[..., 3])
    assert not np.array_equal(with_noise.rgba, with_red.rgba)
    assert not np.array_equal(with_noise.rgba, procedural.rgba)
    inside = with_red.rgba[with_red.rgba[..., 3] > 0, :3].astype(np.float64)
    assert inside[:, 2].mean() > 3 * inside[:, :2].mean(), "a red texture must give a red object"


def test_aspect_ratios_follow_the_object() -> None:
    person = [_aspect(_render("person", s)) for s in range(12)]
    animal = [_aspect(_render("animal", s)) for s in range(12)]
    vehicle = [_aspect(_render("vehicle", s)) for s in range(12)]
    assert all(0.25 < a < 0.6 for a in person)
    assert all(a > 1.0 for a in animal)
    assert all(1.5 <= a <= 3.0 for a in vehicle)


@pytest.mark.parametrize("pixel_height", [8, 37, 400])
def test_pixel_height_is_exact_at_any_size(pixel_height: int) -> None:
    for kind in OBSTACLE_KINDS:
        rgba = _render(kind, 1, pixel_height=pixel_height).rgba
        alpha = rgba[..., 3]
        assert rgba.shape[0] == pixel_height
        assert alpha[0].any() and alpha[-1].any() and alpha[:, 0].any() and alpha[:, -1].any()


def test_too_small_pixel_height_is_rejected() -> None:
    with pytest.raises(ValueError, match="pixel_height"):
        render_cutout("rock", np.random.default_rng(0), pixel_height=4)

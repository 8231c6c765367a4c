import dataclasses

import cv2
import numpy as np
import pytest

from synrail.compose.composite import (
    GalleryCutout,
    Placement,
    SceneBackground,
    blend,
    compose_image,
    drop_hidden,
    feathered_alpha,
    is_monochrome,
    place_obstacle,
    placement_at,
    resize_cutout,
)
from synrail.compose.harmony_kernels import harmonize_lab
from synrail.compose.placement import GroundPoint, track_rows
from synrail.config import ComposeConfig
from synrail.rail.geometry import CameraGeometry

W, H = 640, 360


def scene(curvature: float = 0.0, colour=(90, 110, 120)) -> SceneBackground:
    geometry = CameraGeometry.from_fov(W, H, 60, 2.5, 3.0, track_curvature=curvature)
    mask = geometry.track_mask()
    image = np.full((H, W, 3), colour, dtype=np.uint8)
    return SceneBackground(image=image, track_mask=mask, track_rows=track_rows(mask), geometry=geometry)


def box_cutout(cutout_id: str = "box", colour=(20, 200, 240), height_m: float = 1.7, size=(120, 40)) -> GalleryCutout:
    rgba = np.zeros((*size, 4), dtype=np.uint8)
    rgba[:, :, :3] = colour
    rgba[:, :, 3] = 255
    return GalleryCutout(cutout_id=cutout_id, class_name="person", source="test", rgba=rgba, height_m=height_m)


def box_at(x0: int, y0: int, h: int, w: int, distance: float) -> Placement:
    cut = box_cutout(size=(h, w))
    return placement_at(cut, GroundPoint(u=x0 + w // 2, v=y0 + h - 1, distance_m=distance), 1.0,
                        cut.rgba[:, :, :3].copy(), np.ones((h, w), bool), x0, y0, (H, W))


@pytest.mark.parametrize("curvature", [0.0, 0.004, -0.004])
def test_every_ground_point_lies_on_the_track_area(curvature):
    bg = scene(curvature)
    cfg = ComposeConfig(size_jitter=0.0)
    for seed in range(200):
        p = place_obstacle(bg, box_cutout(), cfg, np.random.default_rng(seed))
        assert p is not None
        assert bg.track_mask[p.point.v, p.point.u]
        assert cfg.distance_m[0] * 0.97 <= p.point.distance_m <= cfg.distance_m[1] * 1.03


def test_metric_scale_follows_the_camera_model():
    bg = scene()
    cfg = ComposeConfig(size_jitter=0.0, distance_m=(20.0, 20.0))
    p = place_obstacle(bg, box_cutout(height_m=1.8), cfg, np.random.default_rng(1))
    expected = 1.8 * bg.geometry.focal_px / p.point.distance_m
    assert abs(p.mask.shape[0] - expected) <= max(1.0, 0.03 * expected)
    assert p.y0 + p.mask.shape[0] - 1 == p.point.v  # the object stands on its ground point


def test_linear_scale_is_the_papers_rule():
    bg = scene()
    cfg = ComposeConfig(scale="linear", linear={"alpha": (0.5, 0.5), "beta": (40, 40), "reference_width": W})
    p = place_obstacle(bg, box_cutout(size=(120, 40)), cfg, np.random.default_rng(2))
    track_width = len(bg.track_rows[p.point.v])
    assert abs(p.mask.shape[1] - (0.5 * track_width + 40)) <= 1.5


def test_nearer_obstacle_occludes_the_farther_one():
    far = box_at(100, 100, 60, 40, distance=50)
    near = box_at(120, 110, 60, 40, distance=20)
    kept, visible = drop_hidden([near, far], ComposeConfig(min_visibility=0.1))
    assert [p.point.distance_m for p in kept] == [50, 20]  # far first: pasted under the near one
    far_full, near_full = far.in_image.full(), near.in_image.full()
    assert not (visible[0].full() & near_full).any()
    assert (visible[1].full() == near_full).all()
    assert visible[0].area == far_full.sum() - (far_full & near_full).sum() == 60 * 40 - 50 * 20


def test_mostly_hidden_obstacle_is_dropped_not_pasted():
    far = box_at(100, 100, 60, 40, distance=50)
    near = box_at(102, 102, 60, 40, distance=20)
    kept, _ = drop_hidden([far, near], ComposeConfig(min_visibility=0.3))
    assert [p.point.distance_m for p in kept] == [20]


def test_truncated_obstacle_counts_pixels_outside_the_image():
    edge = box_at(-20, 100, 60, 40, distance=30)
    kept, visible = drop_hidden([edge], ComposeConfig(min_visibility=0.3))
    assert visible[0].area == 60 * 20 and visible[0].area / kept[0].full_px == pytest.approx(0.5)
    assert box_at(-50, 100, 60, 40, distance=30) is None  # wholly outside the image


def textured_cutout(seed: int = 0) -> GalleryCutout:
    """A 400 x 260 cutout: a noisy, shaded ellipse (alpha 0/255) with fine stripes."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:400, 0:260]
    inside = ((rows - 200) / 190) ** 2 + ((cols - 130) / 120) ** 2 <= 1
    bgr = np.stack([80 + 60 * np.sin(cols / 7.0), 120 + 0.2 * rows, 90 + 40 * np.cos(rows / 11.0)], axis=-1)
    bgr = np.clip(bgr + rng.normal(0, 12, bgr.shape), 0, 255)
    rgba = np.dstack([bgr, 255 * inside]).astype(np.uint8)
    return GalleryCutout(cutout_id="blob", class_name="rock", source="test", rgba=rgba, height_m=1.0)


@pytest.mark.parametrize("height_px", [12.4, 31.0, 57.6, 130.2, 260.0, 520.0])
def test_a_cutout_scaled_from_its_halvings_looks_as_scaled_from_itself(height_px):
    """Pastes are mostly a tenth of their cutout's height: they are area-averaged from the smallest
    halving still at least as tall, at the size and with the look of a direct area resampling."""
    cutout = textured_cutout()
    bgr, mask = cutout.scaled(height_px)
    direct_bgr, direct_mask = resize_cutout(cutout.rgba, height_px)
    assert bgr.shape == direct_bgr.shape and mask.shape == direct_mask.shape
    assert (mask & direct_mask).sum() >= 0.95 * (mask | direct_mask).sum()
    both = mask & direct_mask
    assert np.abs(bgr[both].astype(int) - direct_bgr[both]).mean() <= 3.0
    assert len(cutout._halvings) == (0 if height_px > 200 else int(np.log2(400 / height_px)))


def test_threads_sharing_a_cutout_build_each_halving_once():
    from concurrent.futures import ThreadPoolExecutor

    cutout = textured_cutout(1)
    with ThreadPoolExecutor(8) as pool:
        scaled = list(pool.map(lambda _: cutout.scaled(12.0), range(32)))
    assert [level.shape[0] for level in cutout._halvings] == [200, 100, 50, 25, 12]
    assert all(np.array_equal(bgr, scaled[0][0]) for bgr, _ in scaled)


def test_feathered_alpha_stays_inside_the_mask():
    mask = np.zeros((30, 30), bool)
    mask[5:25, 8:20] = True
    alpha = feathered_alpha(mask, 2.0)
    assert (alpha[~mask] == 0).all() and alpha[mask].min() > 0 and alpha[15, 14] == 1.0


def test_blend_is_the_papers_alpha_blend_rounded():
    rng = np.random.default_rng(0)
    background = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    colour = rng.uniform(-20, 280, (40, 30, 3)).astype(np.float32)  # noise may leave [0, 255]
    alpha = feathered_alpha(rng.random((40, 30)) < 0.7, 1.5)[2:38, 1:29]  # a crop, as pasting takes it
    background, colour = background[2:38, 1:29], colour[2:38, 1:29]
    a = alpha[:, :, None]
    expected = np.clip(a * colour + (1 - a) * background.astype(np.float32) + 0.5, 0, 255).astype(np.uint8)
    assert blend(background, colour, alpha).tobytes() == expected.tobytes()


def test_labels_are_exactly_the_visible_pixels_and_harmonize_none_pastes_the_cutout():
    bg = scene()
    cfg = ComposeConfig(harmonize=None, feather_px=0.0, obstacles_per_image=(3, 3), shadow=None)
    gallery = {"person": [box_cutout(colour=(20, 200, 240))]}
    composite = compose_image(bg, gallery, ["person"], cfg, np.random.default_rng(5))
    assert composite.instances
    covered = np.zeros((H, W), bool)
    for inst in composite.instances:
        mask = inst.visible_mask.full()
        assert not (mask & covered).any()  # visible masks never overlap
        covered |= mask
        assert 0 < inst.visibility <= 1
    changed = (composite.image != bg.image).any(axis=2)
    assert (changed == covered).all()  # every changed pixel is labelled, every label pixel changed
    assert (composite.image[covered] == (20, 200, 240)).all()


def test_lab_harmonization_moves_the_object_toward_its_surroundings():
    obj = np.full((40, 20, 3), (40, 220, 250), np.uint8)
    mask = np.ones((40, 20), bool)
    ring = np.full((500, 3), (90, 100, 110), np.uint8)
    out = harmonize_lab(obj, mask, ring, strength=0.6)
    lab = lambda a: cv2.cvtColor(a.reshape(-1, 1, 3), cv2.COLOR_BGR2Lab).reshape(-1, 3).astype(float).mean(0)  # noqa: E731
    before, after, target = lab(obj), lab(out), lab(ring)
    assert abs(after[0] - target[0]) < abs(before[0] - target[0]) * 0.6
    assert np.linalg.norm(after[1:] - target[1:]) < np.linalg.norm(before[1:] - target[1:])
    assert (harmonize_lab(obj, mask, ring, strength=0.0) == obj).all()


def test_fog_pulls_distant_obstacles_toward_the_airlight():
    geometry_scene = scene()
    foggy = SceneBackground(image=geometry_scene.image, track_mask=geometry_scene.track_mask,
                            track_rows=geometry_scene.track_rows, geometry=geometry_scene.geometry,
                            fog_beta=0.05, airlight_bgr=(200.0, 200.0, 200.0))
    cfg = ComposeConfig(harmonize=None, feather_px=0.0, obstacles_per_image=(1, 1), distance_m=(40, 40))
    gallery = {"person": [box_cutout(colour=(0, 0, 0))]}
    composite = compose_image(foggy, gallery, ["person"], cfg, np.random.default_rng(0))
    pixels = composite.image[composite.instances[0].visible_mask.full()].astype(float)
    expected = 200 * (1 - np.exp(-0.05 * composite.instances[0].distance_m))
    assert np.abs(pixels - expected).max() <= 1.0


def test_same_generator_same_composite():
    bg = scene(0.002)
    gallery = {"person": [box_cutout("a"), box_cutout("b", colour=(200, 20, 20), size=(80, 50))]}
    runs = [compose_image(bg, gallery, ["person"], ComposeConfig(), np.random.default_rng(42)) for _ in range(2)]
    assert (runs[0].image == runs[1].image).all()
    assert [i.ground_uv for i in runs[0].instances] == [i.ground_uv for i in runs[1].instances]


def test_scene_light_and_sensor_noise_reach_the_obstacle():
    base = scene()
    dusk = SceneBackground(image=base.image, track_mask=base.track_mask, track_rows=base.track_rows,
                           geometry=base.geometry, illumination_bgr=(0.3, 0.3, 0.3))
    cfg = ComposeConfig(harmonize=None, feather_px=0.0, obstacles_per_image=(1, 1))
    gallery = {"person": [box_cutout(colour=(100, 200, 250))]}
    lit = compose_image(dusk, gallery, ["person"], cfg, np.random.default_rng(0))
    pixels = lit.image[lit.instances[0].visible_mask.full()]
    assert (pixels == (30, 60, 75)).all()

    noisy = SceneBackground(image=base.image, track_mask=base.track_mask, track_rows=base.track_rows,
                            geometry=base.geometry, sensor_noise=4.0)
    grainy = compose_image(noisy, gallery, ["person"], cfg.model_copy(update={"distance_m": (12.0, 12.0)}),
                           np.random.default_rng(0))
    values = grainy.image[grainy.instances[0].visible_mask.full()].astype(float)
    assert 3.0 < values[:, 0].std() < 5.0


def test_shadows_only_darken_unlabelled_ground_and_leave_placement_alone():
    bg = scene()
    gallery = {"person": [box_cutout(colour=(20, 200, 240))]}
    cfg = ComposeConfig(harmonize=None, feather_px=0.0, obstacles_per_image=(2, 2), distance_m=(10, 20))
    lit = compose_image(bg, gallery, ["person"], cfg, np.random.default_rng(3))
    flat = compose_image(bg, gallery, ["person"], cfg.model_copy(update={"shadow": None}), np.random.default_rng(3))
    assert [i.ground_uv for i in lit.instances] == [i.ground_uv for i in flat.instances]
    labelled = np.zeros((H, W), bool)
    for inst in lit.instances:
        labelled |= inst.visible_mask.full()
    outside = (lit.image != flat.image).any(axis=2) & ~labelled
    assert outside.sum() > 50  # shadows are there
    assert (lit.image[outside].astype(int) <= flat.image[outside].astype(int)).all()  # and only darken
    lowest_top = min(i.visible_mask.top for i in lit.instances)
    assert not outside[:lowest_top].any()  # nothing above the obstacles changes


@pytest.mark.parametrize("backend", ["ring", "lab", "local", "poisson"])
def test_every_harmonizer_changes_only_the_obstacle(backend):
    bg = scene()
    gallery = {"person": [box_cutout(colour=(20, 200, 240))]}
    cfg = ComposeConfig(harmonize={"backend": backend}, feather_px=0.0, obstacles_per_image=(2, 2), shadow=None)
    plain = compose_image(bg, gallery, ["person"], cfg.model_copy(update={"harmonize": None}),
                          np.random.default_rng(4))
    harmonized = compose_image(bg, gallery, ["person"], cfg, np.random.default_rng(4))
    labelled = np.zeros((H, W), bool)
    for inst in harmonized.instances:
        labelled |= inst.visible_mask.full()
    changed = (harmonized.image != plain.image).any(axis=2)
    assert changed.any() and not (changed & ~labelled).any()


def test_learned_harmonizer_needs_a_model_file():
    with pytest.raises(ValueError, match="model"):
        ComposeConfig(harmonize={"backend": "torchscript"})


def test_a_grayscale_frame_gets_grey_obstacles_and_a_colour_frame_keeps_colour():
    colour = scene()
    grey_image = cv2.cvtColor(cv2.cvtColor(colour.image, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    assert not is_monochrome(colour.image) and is_monochrome(grey_image)
    gallery = {"person": [box_cutout(colour=(20, 40, 230))]}  # a red obstacle
    cfg = ComposeConfig(obstacles_per_image=(1, 1), harmonize=None, shadow=None)
    for bg, monochrome in [(dataclasses.replace(colour, image=grey_image, real_frame=True, monochrome=True), True),
                           (dataclasses.replace(colour, real_frame=True), False)]:
        out = compose_image(bg, gallery, ["person"], cfg, np.random.default_rng(0))
        assert out.instances
        pasted = out.image[out.instances[0].visible_mask.full()]
        spread = pasted.max(axis=1).astype(int) - pasted.min(axis=1)
        assert (spread.max() <= 2) == monochrome  # grey pixels on the grey frame only

"""Shadows, blur/noise/JPEG matching, weather and the composite quality score: each test fails
when its effect is switched off or goes the wrong way."""

import cv2
import numpy as np
import pytest

from synrail.compose.composite import WindowMask
from synrail.compose.quality import QualityConfig, composite_quality
from synrail.compose.shadows import (
    _blur_near_content,
    contact_shadow,
    estimate_jpeg_quality,
    laplacian_variance,
    light_from_image,
    match_blur,
    match_jpeg,
    match_noise,
    noise_sigma,
)
from synrail.compose.weather import (
    WEATHER_CONDITIONS,
    A,  # albumentations, imported without its online version check
    Exposure,
    Rain,
    SensorNoise,
    Snow,
    SunFlare,
    WeatherConfig,
    apply_weather,
    choose_condition,
    lift_gamma,
    pixel_pipeline,
    scene_depth,
    uniform_uint16,
    weather_effect,
    weather_transforms,
)
from synrail.rail.geometry import CameraGeometry

H, W = 180, 320


def texture(shape: tuple[int, int], seed: int, sigma: float = 1.0, mean: float = 120.0,
            spread: float = 40.0) -> np.ndarray:
    """A sharp random texture (BGR uint8), blurred by ``sigma``."""
    rng = np.random.default_rng(seed)
    base = cv2.GaussianBlur(rng.standard_normal((*shape, 3)).astype(np.float32), (0, 0), 1.0)
    base = base / base.std() * spread + mean
    if sigma > 0:
        base = cv2.GaussianBlur(base, (0, 0), sigma)
    return np.clip(base, 0, 255).astype(np.uint8)


def scene() -> np.ndarray:
    """Sky above, a textured ground with stripes below: contrast at every scale."""
    image = texture((H, W), 0, sigma=0.0, mean=110)
    image[: H // 3] = (200, 170, 140)
    image[H // 2::12] = (40, 40, 40)
    return image


def luminance(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)


def high_pass_energy(image: np.ndarray) -> float:
    gray = luminance(image)
    return float(np.mean((gray - cv2.GaussianBlur(gray, (0, 0), 2.0)) ** 2))


def smooth() -> np.ndarray:
    ramp = np.linspace(60, 180, W, dtype=np.float32)[None, :].repeat(H, 0)
    return np.clip(np.dstack([ramp, ramp * 0.9, ramp * 0.8]), 0, 255).astype(np.uint8)


# -- weather --------------------------------------------------------------------------------------
def test_fog_lowers_contrast():
    image = scene()
    fogged = apply_weather(image, "fog", WeatherConfig(fog_transmission=(0.5, 0.5)), np.random.default_rng(0))
    assert luminance(fogged).std() <= 0.65 * luminance(image).std()  # RMS contrast at least 35 % down


def test_fog_with_depth_thickens_with_distance():
    geometry = CameraGeometry.from_fov(W, H, 60, 2.5, 4.0)
    image = scene()
    image[:] = texture((H, W), 3, sigma=0.0)  # texture everywhere, so every row has contrast to lose
    fogged = apply_weather(image, "fog", WeatherConfig(fog_patchiness=0.0, fog_visibility_m=(100, 100)),
                           np.random.default_rng(0), depth_m=scene_depth(geometry))
    near, far = slice(H - 20, H), slice(int(geometry.horizon_v()) + 2, int(geometry.horizon_v()) + 12)
    kept = luminance(fogged).std(axis=1) / luminance(image).std(axis=1)
    assert kept[near].mean() > 0.7 > 0.3 > kept[far].mean()


@pytest.mark.parametrize("condition", ["rain", "snow"])
def test_rain_and_snow_add_streaks_and_flakes(condition):
    image = smooth()
    out = apply_weather(image, condition, WeatherConfig(), np.random.default_rng(1))
    assert high_pass_energy(out) > 5 * high_pass_energy(image) + 1.0


def test_dark_lowers_luminance_and_adds_noise():
    image = smooth()
    out = apply_weather(image, "dark", WeatherConfig(headlight_probability=0.0), np.random.default_rng(2))
    assert luminance(out).mean() < 0.6 * luminance(image).mean()
    assert noise_sigma(out).mean() > noise_sigma(image).mean() + 1.5


def test_headlight_cone_brightens_the_lower_centre():
    image = np.full((H, W, 3), 150, np.uint8)

    def centre_over_corners(probability: float) -> float:
        out = luminance(apply_weather(image, "dark", WeatherConfig(headlight_probability=probability),
                                      np.random.default_rng(3)))
        corners = np.concatenate([out[:30, :40].ravel(), out[:30, -40:].ravel()])
        return float(out[-40:, W // 2 - 30:W // 2 + 30].mean() / corners.mean())

    assert centre_over_corners(0.0) == pytest.approx(1.0, abs=0.1)
    assert centre_over_corners(1.0) > 1.8


def test_glare_brightens_near_its_source():
    image = np.full((H, W, 3), 90, np.uint8)
    cfg = WeatherConfig(glare_roi=(0.69, 0.19, 0.71, 0.21))
    out = luminance(apply_weather(image, "glare", cfg, np.random.default_rng(4)))
    x, y = int(0.7 * W), int(0.2 * H)
    assert out[y - 3:y + 4, x - 3:x + 4].mean() > luminance(image).mean() + 60
    assert out[y - 3:y + 4, x - 3:x + 4].mean() > out[-20:, :20].mean() + 60


def test_the_fast_sun_flare_matches_albumentations_physics_based_one():
    # the same drawn parameters (one seed), the flare layer blurred at a quarter of the resolution
    image = cv2.cvtColor(scene_720p(), cv2.COLOR_BGR2RGB)
    args = dict(flare_roi=(0.1, 0.0, 0.9, 0.35), src_radius=60, src_color=(255, 244, 224),
                num_flare_circles_range=(4, 8), p=1)
    for seed in range(3):
        reference = A.Compose([A.RandomSunFlare(method="physics_based", **args)], seed=seed)(image=image)["image"]
        fast = pixel_pipeline([SunFlare(**args)], seed)(image=image)["image"]
        difference, effect = np.abs(reference.astype(int) - fast), reference.astype(int) - image
        assert effect.max() > 100  # the flare is there at all
        assert difference.mean() < 0.2 * np.abs(effect).mean() and np.percentile(difference, 99.9) <= 2


@pytest.mark.parametrize("fast, reference", [
    (lambda: Exposure(0.45), lambda: A.MultiplicativeNoise(multiplier=(0.45, 0.45), per_channel=False,
                                                           elementwise=False, p=1)),
    (lambda: Rain(slant_range=(5, 5), drop_length=90, drop_width=1, drop_color=(200, 200, 200), blur_value=3,
                  brightness_coefficient=0.77, rain_type="heavy", p=1),
     lambda: A.RandomRain(slant_range=(5, 5), drop_length=90, drop_width=1, drop_color=(200, 200, 200),
                          blur_value=3, brightness_coefficient=0.77, rain_type="heavy", p=1)),
    (lambda: Snow(snow_point_range=(0.12, 0.12), brightness_coeff=1.7, method="bleach", p=1),
     lambda: A.RandomSnow(snow_point_range=(0.12, 0.12), brightness_coeff=1.7, method="bleach", p=1)),
])
def test_look_up_table_weather_gives_albumentations_bytes(fast, reference):
    # exposure, rain's darkening and snow's bleach as look-up tables: the same draws, the same bytes
    image = cv2.cvtColor(scene_720p(), cv2.COLOR_BGR2RGB)
    for seed in range(3):
        expected = A.Compose([reference()], seed=seed)(image=image)["image"]
        assert np.abs(expected.astype(int) - image).max() > 20  # the effect is there at all
        assert pixel_pipeline([fast()], seed)(image=image)["image"].tobytes() == expected.tobytes()


@pytest.mark.parametrize("shape", [(720, 1280, 3), (5, 7, 3), (3, 5)])
@pytest.mark.parametrize("before", ["nothing", "float", "int32"])
def test_fast_uniform_uint16_is_numpys_draw(shape, before):
    # the same values and the same state after, whatever was drawn before (an int32 draw buffers a half)
    fast, numpy = np.random.default_rng(11), np.random.default_rng(11)
    for rng in (fast, numpy):
        if before == "float":
            rng.uniform()
        elif before == "int32":
            rng.integers(0, 2**31, dtype=np.int32)
    values = uniform_uint16(fast, shape)
    assert values.dtype == np.uint16 and values.shape == shape
    assert values.tobytes() == numpy.integers(0, 65536, shape, dtype=np.uint16).tobytes()
    states = [rng.bit_generator.state for rng in (fast, numpy)]
    for state in states:  # a stale 32-bit half is no state: numpy leaves it when none is buffered
        state["uinteger"] *= state["has_uint32"]
    assert states[0] == states[1]


def test_lift_gamma_is_the_per_pixel_power():
    image = scene_720p()
    exponent = (1 / (1 + np.float32(2.0) * np.random.default_rng(0).random((720, 1280), dtype=np.float32)))
    logs = np.log(np.maximum(image, 1e-30).astype(np.float32) / 255)
    exact = np.clip(255 * np.exp(logs * exponent[:, :, None]) + 0.5, 0, 255).astype(np.uint8)
    lifted = lift_gamma(image, exponent)
    assert np.abs(lifted.astype(int) - exact).max() <= 1 and (lifted > image).mean() > 0.5


def test_look_up_tables_agree_with_opencv(monkeypatch):
    from synrail.compose import weather

    image = scene_720p()
    same = np.repeat((np.arange(256) * 0.6).astype(np.uint8)[None, :, None], 3, axis=2)
    per_channel = same.copy()
    per_channel[0, :, 2] = 255 - np.arange(256)
    for lut in (same, per_channel):
        expected = cv2.LUT(image, lut)
        assert weather.apply_lut(image, lut).tobytes() == expected.tobytes()
        monkeypatch.setattr(weather, "sz_lut", None)  # an albucore without stringzilla's translation
        assert weather.apply_lut(image, lut).tobytes() == expected.tobytes()
        monkeypatch.undo()


def test_sensor_noise_has_the_configured_spread_and_no_bias():
    flat = np.full((720, 1280, 3), 100, np.uint8)
    for std in (0.015, 0.04):
        out = pixel_pipeline([SensorNoise(std=std)], 3)(image=flat)["image"].astype(np.float64)
        assert out.std() == pytest.approx(std * 255, rel=0.02) and out.mean() == pytest.approx(100, abs=0.05)
        channels = out.reshape(-1, 3) - 100
        assert abs(np.corrcoef(channels.T)[0, 1]) < 0.01  # independent per channel


def test_sensor_noise_looks_like_the_former_16_bit_gather():
    # the byte-table noise (issue 28) against the float gather it replaced, on the same draws: the
    # same image within a fraction of a grey level, the same spread, the generator left where it was
    from scipy.special import ndtri
    from skimage.metrics import structural_similarity

    from synrail.compose.weather import add_gaussian_noise

    image = (scene_720p() * 0.35).astype(np.uint8)  # a night exposure
    table = ndtri((np.arange(65536) + 0.5) / 65536).astype(np.float32)
    for sigma in (0.015 * 255, 0.04 * 255):
        before, after = np.random.default_rng(4), np.random.default_rng(4)
        former = cv2.add(image, np.take(table * np.float32(sigma), uniform_uint16(before, image.shape)),
                         dtype=cv2.CV_8U)
        noisy = add_gaussian_noise(image, sigma, after)
        assert before.bit_generator.state == after.bit_generator.state
        assert np.abs(noisy.astype(int) - former).mean() < 0.1
        assert structural_similarity(noisy, former, channel_axis=2) > 0.99
        assert (noisy.astype(float) - image).std() == pytest.approx((former.astype(float) - image).std(), rel=0.02)
        assert not np.array_equal(noisy, image)


def test_weather_keeps_large_frame_buffers_in_the_heap(monkeypatch):
    # glibc's mallopt takes both thresholds; switched off, nothing is set
    import platform

    from synrail.compose import memory

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    assert memory.retain_large_buffers()
    monkeypatch.setenv("SYNRAIL_MALLOC_TUNING", "0")
    assert not memory.retain_large_buffers()


def test_malloc_is_tuned_by_the_composing_stages_not_by_importing_synrail(monkeypatch):
    import subprocess
    import sys

    # importing every module leaves malloc alone ...
    probe = ("import synrail.compose.memory as m, synrail.compose.weather, synrail.stages.compose, "
             "synrail.stages.sequences, synrail.stages.real_clips; "
             "print(m.tune_malloc_for_composing.cache_info().currsize)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "0"
    # ... each stage that composes images tunes it before its work
    from types import SimpleNamespace

    from synrail.stages import compose, real_clips, sequences

    calls = []
    for module in (compose, sequences, real_clips):
        monkeypatch.setattr(module, "tune_malloc_for_composing", lambda: calls.append(1))
    with pytest.raises(ValueError, match="splits for"):
        compose.compose_chunk(None, 0, 2, [], [], None, None, splits=["train"])
    with pytest.raises(AttributeError):
        sequences.compose_clips(None, 0, 1, [], None, None)  # no config: fails after the call
    assert real_clips.compose_video_clips(None, SimpleNamespace(name="v.mp4"), 0, [], [], None, None).refusals
    assert calls == [1, 1, 1]


def scene_720p() -> np.ndarray:
    return cv2.resize(scene(), (1280, 720), interpolation=cv2.INTER_LINEAR)


@pytest.mark.parametrize("condition", WEATHER_CONDITIONS)
def test_weather_is_deterministic_per_generator(condition):
    image, cfg = scene(), WeatherConfig()
    first = apply_weather(image, condition, cfg, np.random.default_rng(7))
    again = apply_weather(image, condition, cfg, np.random.default_rng(7))
    other = apply_weather(image, condition, cfg, np.random.default_rng(8))
    assert first.tobytes() == again.tobytes()
    assert first.tobytes() != other.tobytes()
    assert first.shape == image.shape and first.dtype == np.uint8


@pytest.mark.parametrize("condition", WEATHER_CONDITIONS)
def test_weather_transforms_are_pixel_only(condition):
    for seed in range(5):  # optional parts (the headlight) included
        transforms = weather_transforms(condition, WeatherConfig(headlight_probability=0.5),
                                        np.random.default_rng(seed), (H, W))
        assert transforms and all(isinstance(t, A.ImageOnlyTransform) for t in transforms)
    with pytest.raises(TypeError, match="pixel-only"):
        pixel_pipeline([A.HorizontalFlip(p=1)], seed=0)


def test_condition_choice_and_effect():
    rng = np.random.default_rng(0)
    only_dark = WeatherConfig(mix={"none": 0.0, "dark": 1.0})
    assert choose_condition(only_dark, rng, "normal") == "dark"
    assert choose_condition(only_dark, rng, "fog") == "fog"  # an adverse scene keeps its own weather
    assert choose_condition(WeatherConfig(mix={"none": 1.0}), rng, "dusk") == "dusk"
    assert weather_effect("dark", "normal") == "dark"
    assert weather_effect("fog", "fog") == "none"  # no second dose
    assert weather_effect("dusk", "dusk") == "none"
    balanced = WeatherConfig(mix={"none": 1.0, "fog": 1.0})
    draws = [choose_condition(balanced, rng, "normal") for _ in range(400)]
    assert 0.4 < draws.count("fog") / len(draws) < 0.6
    assert np.array_equal(apply_weather(scene(), "none", WeatherConfig(), rng), scene())


# -- shadows --------------------------------------------------------------------------------------
def obstacle_window() -> tuple[WindowMask, int]:
    mask = np.zeros((80, 30), bool)
    mask[:, 8:22] = True
    mask[:25, 2:28] = True
    return WindowMask(top=80, left=150, mask=mask, image_shape=(H, W)), 80 + 79


@pytest.mark.parametrize("azimuth", [0.0, 60.0, 90.0, 180.0, 270.0, 315.0])
def test_shadow_darkens_only_ground_outside_the_object(azimuth):
    canvas = np.full((H, W, 3), 160, np.uint8)
    window, ground_row = obstacle_window()
    out = contact_shadow(canvas, window, ground_row, azimuth, 35.0, 0.6, np.random.default_rng(0), flatten=0.3)
    change = canvas.astype(int) - out.astype(int)
    assert change.min() >= 0  # only darker
    rise = max(1, round(0.03 * 80))
    assert not change[:ground_row - rise].any()  # nothing above the contact row
    assert not change[window.full()].any()  # never the object itself
    assert (change.max(axis=2) >= 30).sum() >= 20  # and some ground really is in shadow


@pytest.mark.parametrize("azimuth, side", [(90.0, -1), (270.0, 1), (60.0, -1), (300.0, 1)])
def test_shadow_falls_away_from_the_light(azimuth, side):
    canvas = np.full((H, W, 3), 160, np.uint8)
    window, ground_row = obstacle_window()
    out = contact_shadow(canvas, window, ground_row, azimuth, 35.0, 0.6, np.random.default_rng(0), flatten=0.3)
    darkness = (canvas.astype(np.float32) - out).mean(axis=2)
    cols = np.arange(W, dtype=np.float32)[None, :]
    centroid = float((darkness * cols).sum() / darkness.sum())
    assert side * (centroid - (window.left + 15)) > 5


def test_shadow_from_ahead_falls_toward_the_camera():
    canvas = np.full((H, W, 3), 160, np.uint8)
    window, ground_row = obstacle_window()
    out = contact_shadow(canvas, window, ground_row, 0.0, 30.0, 0.6, np.random.default_rng(0), flatten=0.3)
    darkness = (canvas.astype(np.float32) - out).mean(axis=2)
    rows = np.arange(H, dtype=np.float32)[:, None]
    assert (darkness * rows).sum() / darkness.sum() > ground_row + 5


def test_shadow_blurs_near_the_shadow_equal_a_whole_frame_blur():
    rng = np.random.default_rng(0)
    for _ in range(30):
        field = np.zeros((200, 600), np.float32)  # a wide shadow frame, mostly empty
        y, x = int(rng.integers(70, 120)), int(rng.integers(150, 400))
        field[y:y + int(rng.integers(1, 20)), x:x + int(rng.integers(1, 60))] = rng.uniform(0.2, 1)
        sigma_x, sigma_y = rng.uniform(0.5, 8, size=2)
        whole = cv2.GaussianBlur(field, (0, 0), sigmaX=sigma_x, sigmaY=sigma_y)
        assert np.abs(_blur_near_content(field, sigma_x, sigma_y) - whole).max() < 1e-6
    assert not _blur_near_content(np.zeros((5, 5), np.float32), 1.0, 1.0).any()


def test_light_from_image_finds_a_visible_sun_and_falls_back_otherwise():
    sky = np.full((360, 640, 3), 170, np.uint8)
    cv2.circle(sky, (480, 80), 10, (255, 255, 255), -1)  # right of centre, above the horizon
    azimuth, elevation = light_from_image(sky)
    assert 10 < azimuth < 30 and 5 < elevation < 25
    assert light_from_image(np.full((360, 640, 3), 170, np.uint8)) == (30.0, 50.0)


# -- blur, noise, JPEG ----------------------------------------------------------------------------
def test_match_blur_reaches_the_background_blur_and_never_sharpens():
    background = texture((120, 120), 5, sigma=2.0)
    sharp = texture((60, 40), 6, sigma=0.0)
    matched = match_blur(sharp, background)
    target = laplacian_variance(background)
    assert laplacian_variance(sharp) > 3 * target
    assert laplacian_variance(matched) == pytest.approx(target, rel=0.3)
    soft = texture((60, 40), 6, sigma=3.0)
    assert np.array_equal(match_blur(soft, texture((120, 120), 5, sigma=0.0)), soft)


def test_match_blur_with_a_mask_keeps_background_colour_out():
    sharp = texture((60, 40), 6, sigma=0.0)
    mask = np.zeros((60, 40), bool)
    mask[10:50, 10:30] = True
    sharp[~mask] = 0  # a black surround would bleed into the edge with a plain blur
    matched = match_blur(sharp, texture((120, 120), 5, sigma=2.0), object_mask=mask)
    assert matched[mask].mean() == pytest.approx(sharp[mask].mean(), abs=3)
    assert np.array_equal(matched[~mask], sharp[~mask])


def test_match_noise_brings_a_clean_object_to_the_background_noise():
    rng = np.random.default_rng(9)
    background = np.clip(smooth().astype(np.float32) + rng.normal(0, 8, (H, W, 3)), 0, 255).astype(np.uint8)
    clean = smooth()[:80, :60]
    assert noise_sigma(clean).max() < 1.0
    matched = match_noise(clean, background, np.random.default_rng(10))
    assert noise_sigma(matched) == pytest.approx(noise_sigma(background), rel=0.3)


def test_jpeg_quality_estimate_and_round_trip():
    image = texture((256, 256), 11, sigma=2.0, spread=30)  # photo-like: no saturated pixel noise
    saved = cv2.imdecode(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 70])[1], cv2.IMREAD_COLOR)
    assert estimate_jpeg_quality(saved) == 70
    assert estimate_jpeg_quality(image) == 100
    obj = image[:40, :40]
    assert not np.array_equal(match_jpeg(obj, 60, origin=(5, 9)), obj)
    assert match_jpeg(obj, 60, origin=(5, 9)).shape == obj.shape
    assert np.array_equal(match_jpeg(obj, 100), obj)


# -- quality --------------------------------------------------------------------------------------
def test_quality_ranks_a_matched_composite_above_a_mismatched_one():
    background = texture((H, W), 12, sigma=1.5, spread=25)
    mask = np.zeros((60, 24), bool)
    mask[:, 4:20] = True
    mask[:15, :] = True
    window = WindowMask(top=70, left=140, mask=mask, image_shape=(H, W))
    region = (slice(70, 130), slice(140, 164))

    good = background.copy()
    matched_object = texture((60, 24), 13, sigma=1.5, mean=105, spread=25)  # like the ground, a little darker
    alpha = cv2.GaussianBlur(mask.astype(np.float32), (0, 0), 1.0)[:, :, None] * mask[:, :, None]
    good[region] = (alpha * matched_object + (1 - alpha) * good[region]).astype(np.uint8)

    bad = background.copy()
    bad[region][mask] = (255, 0, 255)  # wrong colour, hard seam

    good_score = composite_quality(good, [window], background, [0.95], [60.0], [60.0])
    bad_score = composite_quality(bad, [window], background, [0.35], [120.0], [60.0])  # twice too tall
    for component in ("boundary", "colour", "visibility", "scale", "total"):
        assert getattr(good_score, component) > getattr(bad_score, component), component
    assert good_score.total >= QualityConfig().threshold > bad_score.total
    empty = composite_quality(background, [], background, [], [], [])
    assert empty.total == 1.0




def test_quality_gradient_is_the_float_sobel_rms_over_channels():
    # the fast form (Sobel straight from uint8, channel sums without numpy's axis reduction, only the
    # pixels asked for) gives the float32 values of the plain formula, so scores do not move
    from synrail.compose.quality import _gradient

    image = texture((H, W), 5, sigma=0.5)
    colour = image.astype(np.float32)
    gx = cv2.Sobel(colour, cv2.CV_32F, 1, 0, ksize=3, borderType=cv2.BORDER_REFLECT) / 4
    gy = cv2.Sobel(colour, cv2.CV_32F, 0, 1, ksize=3, borderType=cv2.BORDER_REFLECT) / 4
    expected = np.sqrt((gx * gx + gy * gy).mean(axis=2))
    assert expected.max() > 10
    assert _gradient(image).tobytes() == expected.tobytes()
    where = np.random.default_rng(0).random((H, W)) < 0.1
    assert _gradient(image, where).tobytes() == expected[where].tobytes()


def test_quality_pixels_are_the_boolean_index_in_its_order():
    from synrail.compose.quality import _pixels, _site

    image = texture((H, W), 6)
    mask = np.random.default_rng(1).random((40, 30)) < 0.5
    site = _site(WindowMask(50, 60, mask, (H, W)), (H, W))
    ring = np.random.default_rng(2).random(site.mask.shape) < 0.3
    assert _pixels(image, site, ring).tobytes() == image[site.rows, site.cols][ring].tobytes()


def test_a_large_obstacles_colour_score_from_every_kth_pixel_is_the_full_ones(monkeypatch):
    """A large obstacle's interior and ring (tens of thousands of pixels) give their mean colour from
    about ``_COLOUR_SAMPLES`` of them: the colour score within 0.01 of the one from every pixel."""
    from synrail.compose import quality

    background = texture((H, W), 21, sigma=1.5, spread=30)
    image = background.copy()
    mask = np.zeros((150, 120), bool)
    cv2.ellipse(mask.view(np.uint8), (60, 75), (58, 74), 0, 0, 360, 1, thickness=-1)
    image[20:170, 100:220][mask] = texture((150, 120), 22, sigma=1.5, mean=80, spread=30)[mask]
    site = quality._site(WindowMask(20, 100, mask, (H, W)), (H, W))
    assert mask.sum() > 3 * quality._COLOUR_SAMPLES
    assert len(quality._pixels(image, site, site.mask)) <= 2 * quality._COLOUR_SAMPLES
    sampled = quality.colour_score(image, background, site, QualityConfig().colour_scale)
    monkeypatch.setattr(quality, "_COLOUR_SAMPLES", 10**9)
    full = quality.colour_score(image, background, site, QualityConfig().colour_scale)
    assert 0.05 < full < 0.95 and abs(sampled - full) < 0.01

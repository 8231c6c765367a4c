"""Harmonization backends: what each may change, the first default (lab) kept, the ring guard, the plug-ins
and their contract, the config union and its deprecated keys, the measures of both benchmarks."""

import functools
import inspect
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from benchmarks.harmonization_benchmark import (
    HELD_OUT_HALF,
    PSNR_CAP_DB,
    TUNING_HALF,
    Sample,
    cut_interval,
    evaluate_harmonizers,
    evaluate_triplets,
    folder_samples,
    harmonization_scores,
    iharmony_triplets,
    parse_composite_name,
    perturb_object,
    split_halves,
    summarize,
    two_fold_cut,
)
from synrail.compose.harmonizers import (
    HARMONIZER_NAMES,
    GlobalLabHarmonizer,
    LocalStatsHarmonizer,
    PoissonHarmonizer,
    RingHarmonizer,
    TorchScriptHarmonizer,
    make_harmonizer,
)
from synrail.compose.harmony_kernels import (
    apply_affine_8bit,
    apply_lab_lut_8bit,
    edge_cast_shift,
    edge_differences,
    edge_lightness_shift,
    edge_log_ratio,
    edge_pairs,
    exposure_correction,
    harmonize_lab,
    mask_window,
    posterior_shift,
    ring_pixels,
    ring_pixels_on_grid,
    ring_statistics_lut,
    to_lab,
    to_lab_8bit,
    tone_curve,
    white_point_correction,
    white_point_transform,
)
from synrail.config import (
    DEFAULT_HARMONIZE,
    ComposeConfig,
    DeprecatedConfigKey,
    LabHarmonizeConfig,
    LocalHarmonizeConfig,
    PoissonHarmonizeConfig,
    RingHarmonizeConfig,
)

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "harmonize.py"
SPEED_SCRIPT = SCRIPT.with_name("harmonize_speed.py")

GAIN_RGB = (1.3, 0.8, 1.1)


def _scene(seed: int = 0, height: int = 90, width: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """A textured background, lit from the left, and an elliptical object that touches the bottom edge."""
    rng = np.random.default_rng(seed)
    columns = np.linspace(60, 200, width, dtype=np.float32)
    image = np.clip(columns[None, :, None] * np.array([0.8, 1.0, 0.9]) + rng.normal(0, 12, (height, width, 3)),
                    0, 255).astype(np.uint8)
    mask = np.zeros((height, width), dtype=np.uint8)
    cv2.ellipse(mask, (60, 70), (30, 25), 0, 0, 360, 1, thickness=-1)
    return image, mask.astype(bool)


def _pasted(image: np.ndarray, mask: np.ndarray, colour=(40, 160, 220)) -> np.ndarray:
    composite = image.copy()
    composite[mask] = np.clip(np.array(colour) + np.random.default_rng(1).normal(0, 10, (mask.sum(), 3)),
                              0, 255).astype(np.uint8)
    return composite


class _MaskedGain(torch.nn.Module):
    """A stand-in learned harmonizer: a per-channel gain inside the mask."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.tensor(GAIN_RGB).view(1, 3, 1, 1))

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return image * (1 + (self.gain - 1) * mask)


def _expected_gain(composite: np.ndarray, mask: np.ndarray) -> np.ndarray:
    expected = composite.copy()
    gained = composite[mask].astype(np.float32) * np.array(GAIN_RGB[::-1], dtype=np.float32)
    expected[mask] = np.clip(gained + 0.5, 0, 255).astype(np.uint8)
    return expected


@pytest.fixture(scope="module")
def scripted_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("models") / "masked_gain.pt"
    torch.jit.script(_MaskedGain()).save(str(path))
    return str(path)


@pytest.mark.parametrize("harmonizer", [GlobalLabHarmonizer(), LocalStatsHarmonizer(),
                                        LocalStatsHarmonizer(exposure_range=3.0, scene_spread=0.05, contrast_share=0),
                                        RingHarmonizer()],
                         ids=["lab", "local", "local-no-prior", "ring"])
def test_classical_backends_change_only_the_object(harmonizer):
    image, mask = _scene()
    composite = _pasted(image, mask)
    out = harmonizer.harmonize(composite, mask)
    assert out.shape == composite.shape and out.dtype == np.uint8
    assert (out[~mask] == composite[~mask]).all()
    assert (out[mask] != composite[mask]).any()


@pytest.mark.parametrize("mode", ["normal", "mixed"])
def test_poisson_changes_only_the_object_and_its_band_even_at_the_border(mode):
    image, mask = _scene()
    composite = _pasted(image, mask)
    harmonizer = PoissonHarmonizer(mode=mode, band_px=2)
    out = harmonizer.harmonize(composite, mask)
    band = cv2.dilate(mask.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
    assert (out[~band] == composite[~band]).all()
    assert np.abs(out[mask].astype(int) - composite[mask]).mean() > 5  # moved toward the background
    with pytest.raises(ValueError, match="mixed"):
        PoissonHarmonizer(mode="nonsense")


def test_global_lab_reproduces_the_lab_paste():
    """The computation ``composite._paste`` does: harmonize_lab on the cutout's window with the ring
    taken from the canvas around it (the cutout's box is larger than its mask)."""
    canvas, mask = _scene()
    composite = _pasted(canvas, mask)
    y0, y1, x0, x1, ring = 40, 90, 25, 95, 7  # the cutout's box, cut by the bottom edge
    obj, obj_mask = composite[y0:y1, x0:x1], mask[y0:y1, x0:x1]
    ring_window = (slice(y0 - ring, y1), slice(x0 - ring, x1 + ring))
    ring_mask = mask[ring_window]
    expected = composite.copy()
    expected[y0:y1, x0:x1] = harmonize_lab(obj, obj_mask, ring_pixels(canvas[ring_window], ring_mask, ring), 0.6)
    assert np.array_equal(GlobalLabHarmonizer(strength=0.6, ring_px=ring).harmonize(composite, mask), expected)
    assert make_harmonizer("none") is None  # "none": the cutout is pasted as it is


def test_local_undoes_most_of_a_known_exposure_and_cast_mismatch():
    """An object lit like its surroundings (same texture statistics, same white point), then
    darkened by 0.3 in log and given a cast: ``local`` must cut its fMSE by a clear margin."""
    rng = np.random.default_rng(3)
    height, width = 80, 100
    smooth = cv2.GaussianBlur(rng.uniform(60, 200, (height, width, 3)).astype(np.float32), (0, 0), 3)
    image = np.clip((smooth - smooth.mean()) * 3 + 120, 0, 255).astype(np.uint8)  # object continues its scene
    mask = np.zeros((height, width), dtype=bool)
    mask[25:60, 30:70] = True
    perturbed = image.copy()
    cast = np.exp(-0.3 + np.array([0.1, 0.0, -0.1]))  # BGR: darker, bluer
    perturbed[mask] = np.clip(image[mask] * cast + 0.5, 0, 255).astype(np.uint8)
    before = harmonization_scores(image, perturbed, mask)["fmse"]
    local = harmonization_scores(image, LocalStatsHarmonizer().harmonize(perturbed, mask), mask)["fmse"]
    assert local < 0.3 * before


def test_exposure_correction_trusts_a_plausible_mismatch_and_discounts_an_implausible_one():
    correct = functools.partial(exposure_correction, exposure_range=0.6, scene_spread=0.3)
    assert abs(correct(0.0, clipped=False)) < 0.05  # matching white points: (almost) nothing to undo
    brighter, darker = correct(0.3, clipped=False), correct(-0.3, clipped=False)
    assert -0.3 < brighter < -0.1 and 0.1 < darker < 0.3  # most of a plausible mismatch undone
    assert darker > -brighter  # the least-squares gain is E[exp(-x)]: brightening weighs more
    far, edge = correct(3.0, clipped=False), correct(0.6, clipped=False)
    assert edge < far < 0  # a ratio far beyond the prior is mostly the scene's: the correction falls back
    assert all(-0.6 - 1e-9 <= correct(r, clipped=False) <= 0.6 + 1e-9 for r in np.linspace(-5, 5, 21))
    # Clipped highlights only bound the ratio from below: the object may be brighter still.
    assert correct(0.0, clipped=True) < correct(0.0, clipped=False) - 0.1


def test_exposure_correction_falls_back_when_the_edge_points_the_other_way():
    """The edge's reading of the mismatch (log luminance across the edge, by CIE's cube law) vets the
    white points': of one sign it changes nothing, however large; against them it widens the scene's
    scale by the disagreement, and the correction falls back toward none."""
    lightness = lambda y: 116.0 * np.cbrt(y) - 16.0  # noqa: E731 - CIE L of a luminance above 0.009
    assert abs(edge_log_ratio(np.full(20, lightness(0.4)), np.full(20, lightness(0.2))) - np.log(0.5)) < 1e-4
    assert edge_log_ratio(np.full(5, 60.0), np.full(5, 40.0)) is None  # too few pairs: no reading
    correct = functools.partial(exposure_correction, clipped=False, exposure_range=0.6, scene_spread=0.3)
    alone = correct(-0.37)  # the ring's white point is a bright sky: the object looks 0.37 too dark
    assert alone > 0.15
    assert correct(-0.37, edge_check=(-1.5, 2.0)) == alone  # the edge agrees (brighten): no change
    assert correct(-0.37, edge_check=(0.3, 0.0)) == alone  # no weight on the disagreement: no change
    checked = correct(-0.37, edge_check=(0.3, 2.0))  # the edge says the object is too bright
    assert 0.0 < checked < 0.5 * alone
    assert correct(-0.37, edge_check=(0.05, 2.0)) > checked  # a slighter disagreement keeps more


def test_ring_does_not_brighten_an_object_after_a_bright_minority_of_its_ring():
    """A grey object a little brighter than the dark ground it stands on, with a patch of bright sky in
    the ring's outer part: the ring's white point is the sky, the white points say brighten, the
    edge says the object is already the brighter. With the edge's check the white-point step (the
    edge's lightness step switched off to see it alone) brightens it far less."""
    rng = np.random.default_rng(8)
    image = np.clip(rng.normal(90, 4, (120, 120, 3)), 0, 255).astype(np.uint8)
    image[:14, 30:90] = 245  # sky, beyond the edge band but inside the 30 % ring
    mask = np.zeros((120, 120), dtype=bool)
    mask[30:100, 40:80] = True
    image[mask] = np.clip(rng.normal(120, 6, (mask.sum(), 3)), 0, 255).astype(np.uint8)
    before = image[mask].astype(float).mean()
    white_points_only = {"lightness": (0.0, 2.25)}
    unchecked = RingHarmonizer(edge_disagreement=0.0, **white_points_only).harmonize(image, mask)[mask].mean()
    checked = RingHarmonizer(**white_points_only).harmonize(image, mask)[mask].mean()
    assert unchecked > before + 30  # the white points alone brighten it by the sky
    assert checked < before + 0.3 * (unchecked - before)


def test_local_does_not_drag_an_object_unlike_its_surroundings_down_to_them():
    """A bright object on a dark table (white points 190 against 50, a log ratio of 1.3, far beyond
    the exposure prior): darkened far less than the ring's white point would say."""
    rng = np.random.default_rng(4)
    image = np.clip(rng.normal(50, 10, (80, 100, 3)), 0, 255).astype(np.uint8)
    mask = np.zeros((80, 100), dtype=bool)
    mask[25:60, 30:70] = True
    image[mask] = np.clip(rng.normal(190, 10, (mask.sum(), 3)), 0, 255).astype(np.uint8)
    out = LocalStatsHarmonizer(contrast_share=0).harmonize(image, mask)
    ratio = out[mask].astype(float).mean() / image[mask].astype(float).mean()
    no_prior = LocalStatsHarmonizer(exposure_range=3.0, scene_spread=0.05, contrast_share=0).harmonize(image, mask)
    assert no_prior[mask].astype(float).mean() / image[mask].astype(float).mean() < 0.45  # the full white patch
    assert math.exp(-0.6) < ratio < 1.0


def test_perturbation_touches_only_the_object_and_is_seeded():
    image, mask = _scene()
    out = perturb_object(image, mask, np.random.default_rng(7))
    assert (out[~mask] == image[~mask]).all()
    assert (out[mask] != image[mask]).any()
    assert np.array_equal(out, perturb_object(image, mask, np.random.default_rng(7)))


def test_scores_on_hand_made_inputs():
    image = np.full((10, 10, 3), 100, dtype=np.uint8)
    mask = np.zeros((10, 10), dtype=bool)
    mask[:5] = True
    assert harmonization_scores(image, image, mask) == {"mse": 0.0, "fmse": 0.0, "psnr": math.inf}
    shifted = image.copy()
    shifted[mask] += 10  # half the image off by 10 in every channel
    scores = harmonization_scores(image, shifted, mask)
    assert scores["fmse"] == pytest.approx(100.0) and scores["mse"] == pytest.approx(50.0)
    assert scores["psnr"] == pytest.approx(10 * math.log10(255 ** 2 / 50.0))


def test_evaluation_rows_and_summary():
    image, mask = _scene()
    rows = evaluate_harmonizers([Sample("scene", image, mask)], {"none": None, "lab": GlobalLabHarmonizer()},
                                n_perturbations=3, seed=0)
    assert len(rows) == 6 and {r["harmonizer"] for r in rows} == {"none", "lab"}
    table = {(r["harmonizer"], r["group"]): r for r in summarize(rows)}
    assert table[("none", "all")]["fmse_reduction"] == 0.0
    lab_fmse = [r["fmse"] for r in rows if r["harmonizer"] == "lab"]
    assert table[("lab", "scene")]["fmse"] == pytest.approx(np.mean(lab_fmse))


def test_cut_interval_is_the_bootstrap_spread_of_the_cut():
    """A backend that halves every case's fMSE has no spread; one that wins big on one case and loses
    on the others spans the draws' range, holds its own cut, and prints the same interval twice."""
    def rows(fmses: dict[str, tuple[float, float]]) -> list[dict]:
        return [{"case": case, "harmonizer": label, "fmse": value}
                for case, pair in fmses.items() for label, value in zip(("none", "x"), pair, strict=True)]

    halved = rows({f"c{i}": (100.0 * (i + 1), 50.0 * (i + 1)) for i in range(6)})
    assert cut_interval(halved, "x") == pytest.approx((0.5, 0.5))
    mixed = rows({"big": (1000.0, 100.0), **{f"c{i}": (100.0, 150.0) for i in range(5)}})
    low, high = cut_interval(mixed, "x")
    overall = 1.0 - (100.0 + 5 * 150.0) / (1000.0 + 5 * 100.0)
    assert -0.5 <= low < overall < high <= 0.9 and high - low > 0.3
    assert cut_interval(mixed, "x") == (low, high)
    assert all(math.isnan(v) for v in cut_interval(rows({}), "x"))


def test_two_fold_cut_tunes_on_each_half_and_scores_the_other():
    """x wins on half A, y on half B: each pick is scored on the half it was not picked on, and the
    pooled cut sums those held-out fMSEs against the baseline's."""
    fmse = {"a1": (100.0, 10.0, 50.0), "a2": (100.0, 20.0, 60.0), "b1": (200.0, 180.0, 20.0)}  # none, x, y
    rows = [{"case": case, "harmonizer": label, "fmse": value}
            for case, values in fmse.items() for label, value in zip(("none", "x", "y"), values, strict=True)]
    result = two_fold_cut(rows, ["x", "y"], {"a1": "A", "a2": "A", "b1": "B"})
    assert result["picked"] == {"A": "x", "B": "y"}
    assert result["held_out"] == pytest.approx({"A": 1 - 180 / 200, "B": 1 - 110 / 200})
    assert result["pooled"] == pytest.approx(1 - (180 + 110) / (200 + 200))


def test_folder_samples_pair_images_with_masks(tmp_path):
    image, mask = _scene()
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    cv2.imwrite(str(tmp_path / "images" / "a.png"), image)
    cv2.imwrite(str(tmp_path / "masks" / "a.png"), mask.astype(np.uint8) * 255)
    [sample] = folder_samples(tmp_path)
    assert sample.name == "a" and np.array_equal(sample.mask, mask) and np.array_equal(sample.image_bgr, image)
    cv2.imwrite(str(tmp_path / "images" / "b.jpg"), image)
    with pytest.raises(FileNotFoundError, match="b.jpg"):
        folder_samples(tmp_path)


def test_skimage_samples_hold_real_objects():
    pytest.importorskip("skimage")
    from benchmarks.harmonization_benchmark import skimage_samples

    samples = skimage_samples()
    assert len({s.name for s in samples}) == len(samples) == 7
    for sample in samples:
        assert sample.image_bgr.dtype == np.uint8 and sample.mask.shape == sample.image_bgr.shape[:2]
        assert 0.01 < sample.mask.mean() < 0.5, sample.name


def test_torchscript_plugin_runs_batched_on_cpu(scripted_model):
    harmonizer = TorchScriptHarmonizer(scripted_model, device="cpu", batch_size=2)
    batches = []
    run = harmonizer._run
    harmonizer._run = lambda images, masks: batches.append(images.shape) or run(images, masks)
    scenes = [_scene(seed) for seed in range(3)] + [(_scene(3)[0][:60, :80], _scene(3)[1][:60, :80])]
    composites, masks = [_pasted(image, mask) for image, mask in scenes], [mask for _, mask in scenes]
    outputs = harmonizer.harmonize_batch(composites, masks)
    assert sorted(batches) == [(1, 3, 60, 80), (1, 3, 90, 120), (2, 3, 90, 120)]  # same sizes batched
    for composite, mask, out in zip(composites, masks, outputs, strict=True):
        assert (out[~mask] == composite[~mask]).all()
        assert np.abs(out.astype(int) - _expected_gain(composite, mask)).max() <= 1


def test_torchscript_plugin_resizes_to_the_models_input(scripted_model):
    image, mask = _scene()
    composite = _pasted(image, mask)
    out = TorchScriptHarmonizer(scripted_model, device="cpu", input_size=(64, 64)).harmonize(composite, mask)
    assert (out[~mask] == composite[~mask]).all()
    inner = cv2.erode(mask.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)  # away from resampled edges
    assert np.abs(out[inner].astype(int) - _expected_gain(composite, mask)[inner]).mean() < 12


def test_onnx_plugin_matches_the_model(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")  # torch.onnx.export needs it
    from synrail.compose.harmonizers import OnnxHarmonizer

    image, mask = _scene()
    composite = _pasted(image, mask)
    dynamic, static = tmp_path / "dynamic.onnx", tmp_path / "static.onnx"
    names = {"input_names": ["composite", "mask"], "output_names": ["harmonized"], "dynamo": False}
    torch.onnx.export(_MaskedGain(), (torch.rand(1, 3, 90, 120), torch.ones(1, 1, 90, 120)), str(dynamic),
                      dynamic_axes={name: {0: "batch"} for name in names["input_names"] + names["output_names"]},
                      **names)
    [out, _] = OnnxHarmonizer(dynamic, providers=["CPUExecutionProvider"]).harmonize_batch([composite] * 2, [mask] * 2)
    assert np.abs(out.astype(int) - _expected_gain(composite, mask)).max() <= 1

    # A model fixed to batches of 2 at 64 x 64: resized in, padded up to the batch, resized out.
    torch.onnx.export(_MaskedGain(), (torch.rand(2, 3, 64, 64), torch.ones(2, 1, 64, 64)), str(static), **names)
    outputs = OnnxHarmonizer(static, providers=["CPUExecutionProvider"]).harmonize_batch([composite] * 3, [mask] * 3)
    inner = cv2.erode(mask.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)
    for out in outputs:
        assert (out[~mask] == composite[~mask]).all()
        assert np.abs(out[inner].astype(int) - _expected_gain(composite, mask)[inner]).mean() < 12


def test_make_harmonizer_builds_by_name_and_names_the_choices():
    assert isinstance(make_harmonizer("local", exposure_range=0.3), LocalStatsHarmonizer)
    assert isinstance(make_harmonizer("poisson", mode="normal"), PoissonHarmonizer)
    with pytest.raises(ValueError) as error:
        make_harmonizer("reinhard")
    assert all(name in str(error.value) for name in HARMONIZER_NAMES)


def test_the_benchmark_script_pools_seeds_into_one_table(tmp_path):
    image, mask = _scene()
    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    cv2.imwrite(str(tmp_path / "images" / "scene.png"), image)
    cv2.imwrite(str(tmp_path / "masks" / "scene.png"), mask.astype(np.uint8) * 255)
    result = subprocess.run([sys.executable, str(SCRIPT), "--samples", str(tmp_path), "--perturbations", "2",
                             "--seeds", "0,2-3", "--json", str(tmp_path / "figures.json")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "1 samples x 2 perturbations x seeds [0, 2, 3] (includes tuning seeds [3])" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("scene ", "all "))]
    assert [row[1] for row in rows if row[0] == "all"] == ["none", "ring", "lab", "local", "local,", "poisson",
                                                            "poisson"]
    assert all(row[-3].endswith("%") and row[-2].endswith("/6") for row in rows)  # cut, cases made worse
    # the same figures for the benchmark page: one row per group and backend
    (table,) = json.loads((tmp_path / "figures.json").read_text())["runs"].values()
    assert len(table) == len(rows) and table["all: ring"]["cases"] == 6
    ring_cut = next(row[-3] for row in rows if row[:2] == ["all", "ring"])
    assert f"{table['all: ring']['fmse_cut_pct']:+.1f}%" == ring_cut


# --- the ring backend and its guard ----------------------------------------------------------------

def test_posterior_shift_undoes_a_small_difference_and_keeps_a_large_one():
    shifts = posterior_shift(np.array([0.0, 5.0, 10.0, 80.0]), prior_range=10.0, scene_spread=8.0)
    assert abs(shifts[0]) < 1e-9
    assert 0 < shifts[1] < shifts[2] <= 10.0  # within the prior, more difference, more shift
    assert shifts[3] < shifts[2]  # far beyond the prior: the scene's own, the shift falls back
    assert np.allclose(posterior_shift(-np.array([5.0, 80.0]), 10.0, 8.0), -shifts[[1, 3]])  # symmetric


def _flat_object_on_grey(object_bgr: tuple[int, int, int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    image = np.clip(rng.normal(128, 6, (80, 100, 3)), 0, 255).astype(np.uint8)
    mask = np.zeros((80, 100), dtype=bool)
    mask[20:60, 30:70] = True
    image[mask] = np.clip(np.array(object_bgr) + rng.normal(0, 6, (mask.sum(), 3)), 0, 255).astype(np.uint8)
    return image, mask


def _chroma(pixels_bgr: np.ndarray) -> float:
    return float(np.hypot(*to_lab(pixels_bgr)[:, 1:].mean(axis=0)))


def test_ring_keeps_a_saturated_object_saturated_and_removes_a_slight_cast():
    """A red car on grey ballast: its colour is its own, far beyond any plausible cast, and stays red;
    lab, with a fixed share, bleaches it. A slightly tinted grey object loses most of its tint."""
    red, mask = _flat_object_on_grey((30, 30, 200))
    ring_out, lab_out = RingHarmonizer().harmonize(red, mask), GlobalLabHarmonizer().harmonize(red, mask)
    before = _chroma(red[mask])
    assert _chroma(ring_out[mask]) > 0.85 * before
    assert _chroma(lab_out[mask]) < 0.8 * before  # what the guard prevents
    tinted, mask = _flat_object_on_grey((118, 128, 142))  # grey with a slight warm cast
    assert _chroma(RingHarmonizer().harmonize(tinted, mask)[mask]) < 0.6 * _chroma(tinted[mask])


def test_ring_takes_the_cast_from_the_step_across_the_edge():
    """With the white points' cast switched off, the slight tint is still undone, by the colour step
    across the edge alone (and not without it); a red object still keeps its colour."""
    tinted, mask = _flat_object_on_grey((118, 128, 142))
    edge_only, neither = RingHarmonizer(cast_strength=0.0), RingHarmonizer(cast_strength=0.0, chroma=(1e-4, 2.25))
    assert _chroma(edge_only.harmonize(tinted, mask)[mask]) < 0.65 * _chroma(tinted[mask])
    assert _chroma(neither.harmonize(tinted, mask)[mask]) > 0.9 * _chroma(tinted[mask])
    red, mask = _flat_object_on_grey((30, 30, 200))
    assert _chroma(edge_only.harmonize(red, mask)[mask]) > 0.85 * _chroma(red[mask])


def test_a_wide_ring_is_sampled_on_a_grid():
    """In the object's window, a small ring is taken whole; a large one on a grid that leaves about
    the pixels asked for or more, every one of them a ring pixel."""
    image, mask = _scene()
    window = mask_window(mask, 5)
    assert np.array_equal(ring_pixels_on_grid(image[window], mask[window], 5, 16384),
                          ring_pixels(image[window], mask[window], 5))
    image = np.arange(400 * 500 * 3, dtype=np.int64).reshape(400, 500, 3)  # every pixel its own colour
    big = np.zeros((400, 500), dtype=bool)
    big[100:300, 150:350] = True
    window = mask_window(big, 60)
    full = ring_pixels(image[window], big[window], 60)  # 62,400 pixels
    sampled = ring_pixels_on_grid(image[window], big[window], 60, 4096)
    assert 4096 <= len(sampled) < len(full) // 8  # every 3rd row and column: about 1/9 of the ring
    assert set(map(tuple, sampled)) <= set(map(tuple, full))


def test_ring_reads_only_its_ring():
    assert RingHarmonizer().context_px(100) == 30  # ring's white points come from a 30 % ring
    assert RingHarmonizer(ring_share=0.15).context_px(100) == 15 == GlobalLabHarmonizer().context_px(100)
    image, mask = _scene()
    composite = _pasted(image, mask)
    full = RingHarmonizer().harmonize(composite, mask)
    window = (slice(31, 90), slice(16, 105))  # the object's box plus its 30 % ring (14 px), cut at the border
    assert np.array_equal(RingHarmonizer().harmonize(composite[window], mask[window]), full[window])


def _lab_region(mean_l: float, std_l: float, seed: int, count: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.normal(mean_l, std_l, count), rng.normal(0, 2, count), rng.normal(0, 2, count)],
                    axis=1).astype(np.float32)


def test_tone_curve_reaches_the_mean_and_keeps_black_and_white():
    lightness = np.linspace(0.0, 100.0, 501, dtype=np.float32)
    for target in (30.0, 70.0):
        out = tone_curve(lightness, target)
        assert abs(float(out.mean()) - target) < 0.5
        assert out[0] < 0.5 and out[-1] == pytest.approx(100.0)  # black and white stay
        assert np.all(np.diff(out) >= 0)  # a tone curve: the order of the pixels is kept
    assert np.allclose(tone_curve(lightness, float(lightness.mean())), lightness, atol=0.1)  # no change asked


def _lut_lightness(lut: np.ndarray, lightness: np.ndarray) -> np.ndarray:
    """L values through the L column of an 8-bit Lab table (codes L * 255 / 100)."""
    codes = np.clip(np.round(lightness * 2.55), 0, 255).astype(int)
    return lut[codes, 0, 0].astype(np.float32) / 2.55


def test_edge_differences_pair_each_outer_pixel_with_the_nearest_inner_one():
    image = np.full((60, 80, 3), 100, dtype=np.uint8)
    mask = np.zeros((60, 80), dtype=bool)
    mask[20:40, 25:55] = True
    image[mask] = 60
    image[mask & (np.arange(80) >= 40)[None, :]] = 140  # the right half of the object is brighter
    steps = edge_differences(image, mask, 3)
    outer = int((cv2.dilate(mask.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (7, 7)))
                 .astype(bool) & ~mask).sum())
    assert steps.shape == (outer, 3)  # L, a, b per pair
    dark, bright = [float(to_lab_8bit(np.array([[v, v, v]], dtype=np.uint8))[0, 0]) for v in (60, 140)]
    grey = float(to_lab_8bit(np.array([[100, 100, 100]], dtype=np.uint8))[0, 0])
    lightness = steps[:, 0]
    assert np.isclose(lightness.max(), grey - dark, atol=0.5) and np.isclose(lightness.min(), grey - bright, atol=0.5)
    assert np.abs(steps[:, 1:]).max() <= 1.0  # grey against grey: no colour step
    image[mask] = (60, 60, 140)  # a reddish object: outside minus inside goes down in a
    assert float(np.median(edge_differences(image, mask, 3)[:, 1])) < -20.0
    assert edge_differences(image, np.zeros_like(mask), 3).shape == (0, 3)


def test_edge_lightness_shift_undoes_a_consistent_step_and_keeps_a_varied_one():
    """The same median step of 20 L: all around the edge (a mismatch), it is mostly undone; stepping
    up here and down there (the object's own light and dark parts), most of it is kept."""
    rng = np.random.default_rng(0)
    consistent = 20.0 + rng.normal(0, 1.0, 400)
    varied = 20.0 + rng.normal(0, 25.0, 400)
    assert edge_lightness_shift(consistent, 40.0, 2.0) > 17.0
    assert 0.0 < edge_lightness_shift(varied, 40.0, 2.0) < 10.0
    assert edge_lightness_shift(-consistent, 40.0, 2.0) < -17.0  # either way
    assert edge_lightness_shift(consistent[:5], 40.0, 2.0) == 0.0  # too few pairs: no evidence


def test_edge_cast_shift_undoes_a_consistent_tint_and_keeps_an_objects_own_colour():
    """A slight tint all around the edge (a cast) is mostly undone; a large consistent colour step
    (a red car on grey ballast), or one that varies around the edge (the object's own colours), is
    mostly kept."""
    rng = np.random.default_rng(1)
    tint = np.array([-6.0, 4.0]) + rng.normal(0, 1.0, (400, 2))
    shift = edge_cast_shift(tint, 30.0, 2.25)
    assert np.allclose(shift, [-6.0, 4.0], atol=1.5)  # mostly undone, along the tint's direction
    red_car = np.array([-60.0, -40.0]) + rng.normal(0, 2.0, (400, 2))  # grey outside minus red inside
    assert np.hypot(*edge_cast_shift(red_car, 30.0, 2.25)) < 0.3 * np.hypot(60.0, 40.0)
    varied = np.array([-6.0, 4.0]) + rng.normal(0, 25.0, (400, 2))
    assert np.hypot(*edge_cast_shift(varied, 30.0, 2.25)) < 0.5 * np.hypot(6.0, 4.0)
    assert np.array_equal(edge_cast_shift(tint[:5], 30.0, 2.25), np.zeros(2))  # too few pairs: no evidence


def test_ring_measures_edge_steps_at_a_bounded_scale():
    """The edge is measured on the window shrunk to 512 px at most: the same scene at twice the size
    gives fewer pairs than twice as many (a bounded cost), and still the step across the edge (a
    little softer: shrinking mixes the edge's pixels)."""
    rng = np.random.default_rng(5)
    image = np.clip(rng.normal(110, 6, (300, 330, 3)), 0, 255).astype(np.uint8)
    mask = np.zeros((300, 330), dtype=np.uint8)
    cv2.ellipse(mask, (165, 150), (90, 105), 0, 0, 360, 1, thickness=-1)
    mask = mask.astype(bool)
    image[mask] = np.clip(image[mask].astype(int) - 35, 0, 255).astype(np.uint8)  # one consistent step down
    big_image = cv2.resize(image, (660, 600), interpolation=cv2.INTER_NEAREST)  # its window: over 512 px
    big_mask = cv2.resize(mask.astype(np.uint8), (660, 600), interpolation=cv2.INTER_NEAREST).astype(bool)
    identity = np.hstack([np.eye(3), np.zeros((3, 1))]).astype(np.float32)
    def edge_steps(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        outside, inside = RingHarmonizer._edge_pixels(image, mask)
        return RingHarmonizer._edge_steps(to_lab_8bit(outside), inside, identity)

    steps = edge_steps(image, mask)[:, 0]
    big_steps = edge_steps(big_image, big_mask)[:, 0]
    assert steps.size < big_steps.size < 1.7 * steps.size  # shrunk to 512: about 1.55x the edge, not 2x
    assert float(np.median(steps)) > 12.0 and float(np.median(big_steps)) > 8.0  # outside minus a darker inside
    out = RingHarmonizer().harmonize(image, mask)
    assert out[mask].mean() > image[mask].mean() + 10  # and mostly undone


def test_ring_lab_table_moves_lightness_and_cast_and_keeps_black_and_white():
    """The table is the transfer: the lightness shift asked for lifts the object's mean, the cast
    asked for is added to its a, b codes, and L 0 and 100 stay where they are."""
    obj, ring = _lab_region(40.0, 3.0, 0), _lab_region(60.0, 3.0, 1)
    lut = ring_statistics_lut(obj, ring, 20.0, np.array([4.0, 0.0]), (0.0, 0.3))
    assert lut.shape == (256, 1, 3) and lut.dtype == np.uint8
    assert lut[0, 0, 0] == 0 and lut[255, 0, 0] == 255
    assert abs(float(_lut_lightness(lut, obj[:, 0]).mean() - obj[:, 0].mean()) - 20.0) < 1.0
    assert np.all(lut[:252, 0, 1].astype(int) - np.arange(252) == 4)  # a: the 4-unit cast, every code below the top
    assert np.all(lut[:, 0, 2] == np.arange(256))  # b: no cast to move
    pixels = cv2.cvtColor(np.full((1, 1, 3), (90, 100, 110), dtype=np.uint8), cv2.COLOR_BGR2Lab)
    out = apply_lab_lut_8bit(np.full((5, 3), (90, 100, 110), dtype=np.uint8), lut)
    back = cv2.cvtColor(cv2.LUT(pixels, lut), cv2.COLOR_Lab2BGR).reshape(3)
    assert np.array_equal(out, np.tile(back, (5, 1)))


def test_white_point_transform_is_the_correction_as_one_affine_map():
    """``local`` applies the map in float, ``ring`` on uint8 in one pass: the same correction, to rounding."""
    rng = np.random.default_rng(3)
    obj = rng.integers(20, 200, (500, 3)).astype(np.uint8)
    ring = rng.integers(60, 250, (800, 3)).astype(np.uint8)
    args = (obj.astype(np.float32) / 255.0, ring.astype(np.float32) / 255.0, 99.0, 0.6, 0.3, 1.0, 0.3, (0.4, 0.2))
    transform = white_point_transform(*args)
    reference = np.clip(white_point_correction(*args) * 255.0, 0, 255)
    assert transform.shape == (3, 4)
    assert not np.allclose(transform[:, :3], np.eye(3))  # it does correct something here
    assert np.abs(apply_affine_8bit(obj, transform).astype(float) - reference).max() <= 1.0


def test_ring_on_samples_matches_the_transfer_on_every_pixel():
    """Statistics from samples, pixels through the affine map and the Lab table: on a large object
    the result is within a level or so of the same transfer computed on every pixel in float."""
    image, mask = _scene(height=240, width=250)
    mask = np.zeros(mask.shape, dtype=np.uint8)
    cv2.ellipse(mask, (125, 120), (95, 100), 0, 0, 360, 1, thickness=-1)
    mask = mask.astype(bool)  # ~30,000 pixels: more than the 16,384 the statistics are sampled from
    composite = _pasted(image, mask, colour=(120, 140, 170))
    harmonizer = RingHarmonizer()
    out = harmonizer.harmonize(composite, mask)
    ring = ring_pixels(composite, mask, harmonizer.context_px(int(mask.any(axis=1).sum())))
    obj = composite[mask]
    outside, inside = edge_pairs(mask, 3)
    pixels = composite.reshape(-1, 3)
    edge_check = (edge_log_ratio(to_lab_8bit(pixels[outside])[:, 0], to_lab_8bit(pixels[inside])[:, 0]),
                  harmonizer.edge_disagreement)
    lit = np.clip(white_point_correction(obj / 255.0, ring / 255.0, 99.0, 0.6, 0.3, 1.0, 0.3, (0.4, 0.2),
                                         edge_check) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    lit_image = composite.copy()
    lit_image[mask] = lit
    steps = edge_differences(lit_image, mask, 3)
    lut = ring_statistics_lut(to_lab_8bit(lit), to_lab_8bit(ring),
                              edge_lightness_shift(steps[:, 0], *harmonizer.lightness),
                              edge_cast_shift(steps[:, 1:], *harmonizer.chroma), (0.0, 0.3))
    reference = apply_lab_lut_8bit(lit, lut)
    assert np.abs(out[mask].astype(int) - reference).mean() < 1.5  # a level or so of rounding and sampling
    assert np.abs(out[mask].mean(axis=0) - reference.mean(axis=0)).max() < 2.0  # no drift in the mean
    assert np.abs(out[mask].astype(int) - composite[mask]).mean() > 5.0  # and it did change the object


# --- the config union and its deprecated flat keys ---------------------------------------------------

@pytest.mark.parametrize("config_class,backend", [(RingHarmonizeConfig, RingHarmonizer),
                                                  (LocalHarmonizeConfig, LocalStatsHarmonizer),
                                                  (LabHarmonizeConfig, GlobalLabHarmonizer),
                                                  (PoissonHarmonizeConfig, PoissonHarmonizer)])
def test_config_defaults_are_the_backends_defaults(config_class, backend):
    config = config_class(backend=backend.name)
    parameters = inspect.signature(backend.__init__).parameters
    for key, value in config.harmonizer_options().items():
        assert parameters[key].default == value, key
    assert isinstance(make_harmonizer(config.backend, **config.harmonizer_options()), backend)


def test_compose_config_is_one_union_with_null_for_none():
    assert ComposeConfig().harmonize == DEFAULT_HARMONIZE and DEFAULT_HARMONIZE.backend == "ring"
    lab = ComposeConfig(harmonize={"backend": "lab", "strength": 0.3}).harmonize
    assert isinstance(lab, LabHarmonizeConfig) and lab.strength == 0.3
    assert ComposeConfig(harmonize=None).harmonize is None and ComposeConfig(shadow=None).shadow is None
    learned = ComposeConfig(harmonize={"backend": "torchscript", "model": "m.pt", "device": "cpu"}).harmonize
    assert learned.harmonizer_options() == {"path": "m.pt", "device": "cpu", "batch_size": 8, "input_size": None}
    with pytest.raises(ValueError, match="strength"):
        ComposeConfig(harmonize={"backend": "local", "strength": 0.3})  # lab's option on another backend
    with pytest.raises(ValueError, match="model"):
        ComposeConfig(harmonize={"backend": "onnx"})


@pytest.mark.parametrize("old,new", [
    ({"harmonize": "lab", "harmonize_strength": 0.4}, {"backend": "lab", "strength": 0.4}),
    ({"harmonize": "local", "harmonize_strength": 0.6}, {"backend": "local"}),  # strength was lab's only
    ({"harmonize": "onnx", "harmonize_model": "m.onnx"}, {"backend": "onnx", "model": "m.onnx"}),
    ({"harmonize": "none"}, None),
])
def test_old_flat_harmonize_keys_load_with_a_warning_naming_the_new_form(old, new):
    with pytest.warns(DeprecatedConfigKey, match=r"write compose\.harmonize: (\{backend|null)"):
        config = ComposeConfig(**old)
    assert config == ComposeConfig(harmonize=new)


def test_old_shadows_flag_folds_into_shadow():
    with pytest.warns(DeprecatedConfigKey, match=r"compose\.shadow: null"):
        assert ComposeConfig(shadows=False).shadow is None
    with pytest.warns(DeprecatedConfigKey, match="compose.shadows"):
        assert ComposeConfig(shadows=True, shadow={"strength": (0.2, 0.3)}).shadow.strength == (0.2, 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new form warns about nothing
        ComposeConfig(harmonize={"backend": "lab"}, shadow=None)


# --- iHarmony4: names, layout, protocol ----------------------------------------------------------------

def test_iharmony_names_map_composites_to_their_mask_and_real_image():
    assert parse_composite_name("a0041_1_3") == ("a0041", "a0041_1")
    assert parse_composite_name("d17664-20120114-145839_2_10") == ("d17664-20120114-145839", "d17664-20120114-145839_2")
    assert parse_composite_name("c_odd_name_3_1") == ("c_odd_name", "c_odd_name_3")
    for bad in ("a0041", "a0041_x_1", "_1_2"):
        with pytest.raises(ValueError, match="NAME_k_j"):
            parse_composite_name(bad)


def _write_triplets(root: Path, names: dict[str, list[str]], size: tuple[int, int] = (40, 60),
                    offset: int = 0) -> None:
    """real name -> composite stems; the composite is the real image with the mask's object shifted by ``offset``."""
    for folder in ("composite_images", "masks", "real_images"):
        (root / folder).mkdir(parents=True)
    rng = np.random.default_rng(0)
    for real_name, composites in names.items():
        real = rng.integers(0, 200, (*size, 3), dtype=np.uint8)
        cv2.imwrite(str(root / "real_images" / f"{real_name}.png"), real)  # lossless: the known answers hold
        for stem in composites:
            _, mask_name = parse_composite_name(stem)
            mask = np.zeros(size, dtype=np.uint8)
            mask[10:30, 15:45] = 255
            cv2.imwrite(str(root / "masks" / f"{mask_name}.png"), mask)
            composite = real.copy()
            composite[mask > 0] += np.uint8(offset)
            cv2.imwrite(str(root / "composite_images" / f"{stem}.png"), composite)


def test_iharmony_layouts_flat_and_per_subset(tmp_path):
    names = {"a0001": ["a0001_1_1", "a0001_1_2", "a0001_2_1"], "f9": ["f9_1_4"]}
    _write_triplets(tmp_path / "flat", names)
    triplets = iharmony_triplets(tmp_path / "flat")
    assert [(t.name, t.subset, t.mask.stem, t.real.stem) for t in triplets] == [
        ("a0001_1_1", "HAdobe5k", "a0001_1", "a0001"), ("a0001_1_2", "HAdobe5k", "a0001_1", "a0001"),
        ("a0001_2_1", "HAdobe5k", "a0001_2", "a0001"), ("f9_1_4", "HFlickr", "f9_1", "f9")]
    _write_triplets(tmp_path / "split" / "HCOCO", {"c5": ["c5_1_1", "c5_1_2"]})
    _write_triplets(tmp_path / "split" / "Hday2night", {"d7-2": ["d7-2_1_1"]})
    assert [(t.subset, t.real.stem) for t in iharmony_triplets(tmp_path / "split")] == [
        ("HCOCO", "c5"), ("HCOCO", "c5"), ("Hday2night", "d7-2")]
    (tmp_path / "flat" / "real_images" / "f9.png").unlink()
    with pytest.raises(FileNotFoundError, match="f9"):
        iharmony_triplets(tmp_path / "flat")
    with pytest.raises(FileNotFoundError, match="composite_images"):
        iharmony_triplets(tmp_path / "nothing")


def test_halves_keep_every_composite_of_a_real_image_together(tmp_path):
    names = {"a0001": ["a0001_1_1", "a0001_1_2"], "a0002": ["a0002_1_1"], "f9": ["f9_1_4", "f9_2_1"]}
    _write_triplets(tmp_path, names)
    half = split_halves(iharmony_triplets(tmp_path))
    assert half == {"a0001_1_1": TUNING_HALF, "a0001_1_2": TUNING_HALF, "a0002_1_1": HELD_OUT_HALF,
                    "f9_1_4": TUNING_HALF, "f9_2_1": TUNING_HALF}  # real images a0001, a0002, f9: even, odd, even
    result = subprocess.run([sys.executable, str(SCRIPT), "--iharmony", str(tmp_path), "--halves"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("tuning ", "held-out "))]
    assert [row[2] for row in rows if row[0] == "tuning"] == [row[2] for row in rows if row[0] == "held-out"]
    assert len(rows) == 14 and rows[0][2] == "none"  # every backend, in each half
    assert all(row[-2].endswith("/4" if row[0] == "tuning" else "/1") for row in rows)  # cases per half


def test_the_speed_benchmark_prints_cpu_time_per_backend_against_the_last(tmp_path):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = subprocess.run([sys.executable, str(SPEED_SCRIPT), "--images", "2", "--rounds", "1",
                             "--backends", "none,local"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TMPDIR": str(temporary)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["none", "local"]
    assert lines[1].endswith("ms CPU per image, 1.000x local") and "x local" in lines[0]
    assert not any(temporary.iterdir())  # its cache is removed: one left per run filled CI's disk


class _Worse:
    """A backend that adds 20 to every object pixel: always worse than a composite equal to the real image."""

    name = "worse"

    def harmonize_batch(self, composites, masks):
        outputs = []
        for image, mask in zip(composites, masks, strict=True):
            out = image.copy()
            out[mask] = np.clip(out[mask].astype(int) + 20, 0, 255).astype(np.uint8)
            outputs.append(out)
        return outputs


def test_protocol_on_triplets_with_known_answers(tmp_path):
    """A composite equal to its real image: fMSE 0 and infinite PSNR (capped in the means, never NaN);
    one off by 10 in the object: fMSE 100; a backend adding 20 loses on both."""
    _write_triplets(tmp_path / "same" / "HCOCO", {"c1": ["c1_1_1"]})
    _write_triplets(tmp_path / "off" / "HFlickr", {"f1": ["f1_1_1"]}, offset=10)
    triplets = iharmony_triplets(tmp_path / "same") + iharmony_triplets(tmp_path / "off")
    rows = evaluate_triplets(triplets, {"none": None, "worse": _Worse()}, size=32)
    same = {r["harmonizer"]: r for r in rows if r["group"] == "HCOCO"}
    assert same["none"]["fmse"] == 0.0 and same["none"]["mse"] == 0.0 and same["none"]["psnr"] == math.inf
    assert same["worse"]["fmse"] == pytest.approx(400.0)
    off = {r["harmonizer"]: r for r in rows if r["group"] == "HFlickr"}
    assert off["none"]["fmse"] == pytest.approx(100.0, abs=2.0)  # resizing moves the mask edge a little
    table = {(r["harmonizer"], r["group"]): r for r in summarize(rows)}
    assert table[("none", "HCOCO")]["psnr"] == PSNR_CAP_DB and math.isnan(table[("none", "HCOCO")]["fmse_reduction"])
    assert table[("worse", "all")]["losses"] == 2 and table[("none", "all")]["losses"] == 0
    assert table[("worse", "all")]["cases"] == 2 and table[("worse", "HFlickr")]["fmse_reduction"] < 0
    assert math.isfinite(table[("none", "all")]["psnr"])


def test_the_benchmark_script_tunes_on_each_half_and_scores_the_other(tmp_path):
    _write_triplets(tmp_path, {"a1": ["a1_1_1"], "a2": ["a2_1_1"], "f3": ["f3_1_1"]}, offset=30)
    result = subprocess.run([sys.executable, str(SCRIPT), "--iharmony", str(tmp_path), "--crossfit",
                             "--json", str(tmp_path / "figures.json")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    pooled = json.loads((tmp_path / "figures.json").read_text())["runs"]["two-fold tuning"]["pooled"]
    assert f"pooled over both held-out halves: {pooled['tuned_cut_pct']:+.1f}%" in result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "3 iHarmony4 triplets, 72 ring settings; tuned on one half, scored on the other"
    picks = [line for line in lines if line.startswith("tuned on the ")]
    assert [line.split(":")[0] for line in picks] == ["tuned on the held-out half", "tuned on the tuning half"]
    assert all("ring exposure_range=" in line for line in picks)
    assert any(line.startswith("pooled over both held-out halves: ") for line in lines)


class _RgbContractProbe(torch.nn.Module):
    """Checks the contract a published network is exported to: RGB order, [0, 1], a hard 0/1 mask of
    one channel, the image's size; answers by painting the object its own mean colour."""

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        torch._assert(image.shape[1] == 3 and mask.shape[1] == 1, "N x 3 and N x 1 inputs")
        torch._assert(image.shape[2:] == mask.shape[2:], "image and mask of one size")
        torch._assert(bool((image >= 0).all()) and bool((image <= 1).all()), "values in [0, 1]")
        torch._assert(bool(((mask == 0) | (mask == 1)).all()), "a hard mask")
        mean = (image * mask).sum(dim=(2, 3), keepdim=True) / mask.sum(dim=(2, 3), keepdim=True)
        return image * (1 - mask) + mean * mask


def test_learned_plugins_follow_the_contract_in_the_real_benchmark(tmp_path):
    """A tiny network exported with torch.jit and torch.onnx runs through both plug-ins inside
    ``benchmarks/harmonize.py --iharmony``: red stays in the model's first channel (RGB in, RGB out)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    _write_triplets(tmp_path / "data", {"a1": ["a1_1_1", "a1_1_2"]}, offset=10)
    probe = _RgbContractProbe()
    scripted, exported = tmp_path / "probe.pt", tmp_path / "probe.onnx"
    torch.jit.script(probe).save(str(scripted))
    names = {"input_names": ["composite", "mask"], "output_names": ["harmonized"], "dynamo": False}
    torch.onnx.export(probe, (torch.rand(1, 3, 32, 32), torch.ones(1, 1, 32, 32)), str(exported),
                      dynamic_axes={n: {0: "batch", 2: "height", 3: "width"}
                                    for n in ["composite", "mask", "harmonized"]},
                      **names)
    red, mask = _flat_object_on_grey((0, 0, 255))  # BGR red
    for plugin in (TorchScriptHarmonizer(scripted, device="cpu"), make_harmonizer("onnx", path=exported)):
        out = plugin.harmonize(red, mask)
        assert (out[~mask] == red[~mask]).all()
        assert np.abs(out[mask].astype(int) - red[mask].mean(axis=0)).max() <= 1  # still red, in BGR
    result = subprocess.run([sys.executable, str(SCRIPT), "--iharmony", str(tmp_path / "data"),
                             "--torchscript", str(scripted), "--onnx", str(exported), "--device", "cpu"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "2 iHarmony4 triplets at 256x256 (HAdobe5k 2)" in result.stdout
    rows = {tuple(line.split()[:2]) for line in result.stdout.splitlines() if line.startswith(("HAdobe5k ", "all "))}
    assert {("all", "torchscript"), ("all", "onnx"), ("HAdobe5k", "ring"), ("all", "none")} <= rows

"""Measuring harmonization against a real photograph, two ways, with one protocol.

- **iHarmony4** (the judge): real composites made by the dataset's authors, each with the real
  photograph as ground truth (``composite_images/NAME_k_j.jpg``, ``masks/NAME_k.png``,
  ``real_images/NAME.jpg``), scored as the dataset's papers do: everything resized to 256 x 256, MSE
  over the image, fMSE over the foreground, PSNR.
- **Synthetic** (a second opinion): real photographs with a real object mask, the object's colour,
  exposure and contrast perturbed by a model we wrote (nothing else), harmonized, compared with the
  untouched photograph. Samples come from scikit-image's bundled photographs (masks drawn here as
  polygons and ellipses, checked on overlays; the coins by watershed) or from a folder of the
  user's own image + mask pairs.

Both produce rows of one shape (``case``, ``group``, ``harmonizer``, ``mse``, ``fmse``, ``psnr``,
``seconds``) that :func:`summarize` turns into the table: mean scores per group and overall, the
fMSE cut against the unharmonized input, and the count of cases a backend made worse;
:func:`cut_interval` says how far the cut could move on another sample of as many cases.
Benchmark code: it needs scikit-image for its bundled samples, a test-only dependency, so it lives
outside the library.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from synrail.compose.harmonizers import Harmonizer

BASELINE = "none"  # the harmonizer label of the unharmonized input
PSNR_CAP_DB = 100.0  # an exact output (MSE 0, PSNR infinite) counts as this in a mean: 8-bit
# images of up to 256 x 256 x 3 cannot be closer than ~101 dB without being equal


# --- the protocol both benchmarks share ------------------------------------------------------------

def harmonization_scores(original: np.ndarray, harmonized: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """iHarmony4's measures on 0-255 values: MSE over the image, fMSE over the object, PSNR (dB) of the MSE.

    Args:
        original: the real photograph, H x W x 3 uint8.
        harmonized: the output to score, the same shape.
        mask: H x W bool, the object (the foreground of fMSE).

    Returns:
        ``{"mse", "fmse", "psnr"}``; PSNR is ``math.inf`` for an exact output, fMSE 0 for an empty mask.
    """
    squared = (original.astype(np.float64) - harmonized.astype(np.float64)) ** 2
    mse = float(squared.mean())
    fmse = float(squared[mask].mean()) if mask.any() else 0.0
    psnr = math.inf if mse == 0 else 10.0 * math.log10(255.0 ** 2 / mse)
    return {"mse": mse, "fmse": fmse, "psnr": psnr}


def score_rows(case: str, group: str, original: np.ndarray, mask: np.ndarray,
               outputs: Mapping[str, tuple[np.ndarray, float]]) -> list[dict]:
    """One row per harmonizer for one input: its scores against ``original`` and its seconds."""
    return [{"case": case, "group": group, "harmonizer": label, "seconds": seconds,
             **harmonization_scores(original, output, mask)}
            for label, (output, seconds) in outputs.items()]


def run_harmonizers(harmonizers: Mapping[str, Harmonizer | None], composites: Sequence[np.ndarray],
                    masks: Sequence[np.ndarray]) -> dict[str, tuple[list[np.ndarray], float]]:
    """Each harmonizer's outputs for a batch and its seconds per image; None returns the inputs as they are."""
    results = {}
    for label, harmonizer in harmonizers.items():
        started = time.perf_counter()
        outputs = list(composites) if harmonizer is None else harmonizer.harmonize_batch(composites, masks)
        results[label] = (outputs, (time.perf_counter() - started) / max(1, len(composites)))
    return results


def summarize(rows: Sequence[dict], baseline: str = BASELINE) -> list[dict]:
    """Mean scores per (harmonizer, group) and per harmonizer over all rows (group ``"all"``), with the
    fMSE cut against ``baseline`` on the same cases and the cases made worse than it.

    Args:
        rows: rows of :func:`score_rows` (``case`` names one input; every harmonizer has a row for it).
        baseline: the label of the unharmonized input.

    Returns:
        One dict per (harmonizer, group): ``mse``, ``fmse``, ``psnr`` (infinite values counted as
        ``PSNR_CAP_DB``), ``seconds`` per image, ``fmse_reduction`` (NaN without a baseline), ``losses``
        (cases whose fMSE is above the baseline's) and ``cases``.
    """
    base_fmse = {(row["group"], row["case"]): row["fmse"] for row in rows if row["harmonizer"] == baseline}
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["harmonizer"], row["group"]), []).append(row)
        groups.setdefault((row["harmonizer"], "all"), []).append(row)
    means = {key: {"mse": float(np.mean([r["mse"] for r in group])),
                   "fmse": float(np.mean([r["fmse"] for r in group])),
                   "psnr": float(np.mean([min(r["psnr"], PSNR_CAP_DB) for r in group])),
                   "seconds": float(np.mean([r["seconds"] for r in group])),
                   "losses": sum(r["fmse"] > base_fmse.get((r["group"], r["case"]), math.inf) for r in group),
                   "cases": len(group)}
             for key, group in groups.items()}
    table = []
    for (harmonizer, group), scores in means.items():
        base = means.get((baseline, group))
        reduction = _cut(scores["fmse"], base["fmse"]) if base else math.nan
        table.append({"harmonizer": harmonizer, "group": group, **scores, "fmse_reduction": reduction})
    return table


def cut_interval(rows: Sequence[dict], harmonizer: str, baseline: str = BASELINE, draws: int = 4000,
                 coverage: float = 0.9, seed: int = 0) -> tuple[float, float]:
    """How far the fMSE cut of ``harmonizer`` could move on another sample of cases like these: the
    percentile bootstrap interval over cases (the cases drawn again with replacement ``draws`` times,
    the cut of each draw computed as :func:`summarize` does, as one minus the ratio of mean fMSEs).

    Args:
        rows: rows of :func:`score_rows` for one group of cases (every case has a ``baseline`` row).
        harmonizer: the label whose cut is resampled.
        baseline: the label of the unharmonized input.
        draws: bootstrap draws.
        coverage: the share of draws inside the interval (0.9: the 5th to the 95th percentile).
        seed: the draws' seed, so a table prints the same interval twice.

    Returns:
        (low, high) cuts; (nan, nan) without cases or with a baseline fMSE of 0.
    """
    base = {row["case"]: row["fmse"] for row in rows if row["harmonizer"] == baseline}
    pairs = np.array([(base[row["case"]], row["fmse"]) for row in rows
                      if row["harmonizer"] == harmonizer and row["case"] in base], dtype=np.float64)
    if not len(pairs) or pairs[:, 0].sum() <= 0:
        return math.nan, math.nan
    picks = np.random.default_rng(seed).integers(0, len(pairs), size=(draws, len(pairs)))
    drawn_base = pairs[picks, 0].sum(axis=1)
    cuts = 1.0 - pairs[picks, 1].sum(axis=1) / np.where(drawn_base > 0, drawn_base, np.nan)
    tail = 50.0 * (1.0 - coverage)
    low, high = np.nanpercentile(cuts, [tail, 100.0 - tail])
    return float(low), float(high)


# --- iHarmony4: real composites --------------------------------------------------------------------

IHARMONY_SIZE = 256  # the protocol's resolution (DoveNet, Harmonizer, ...)
IHARMONY_SUBSETS = {"a": "HAdobe5k", "c": "HCOCO", "d": "Hday2night", "f": "HFlickr"}  # by name prefix
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


class Triplet(NamedTuple):
    """One iHarmony4 composite with its mask and the real photograph it was made from."""

    name: str  # the composite's stem, NAME_k_j
    subset: str  # HAdobe5k, HCOCO, Hday2night, HFlickr (or the folder's name)
    composite: Path
    mask: Path
    real: Path


def parse_composite_name(stem: str) -> tuple[str, str]:
    """``NAME_k_j`` -> (``NAME`` the real image, ``NAME_k`` the mask): composite j of object k.

    NAME may itself hold underscores and dashes (Hday2night's ``d17664-20120114-145839``), so the
    two indices are split off the right.
    """
    name, k, j = (stem.rsplit("_", 2) + ["", ""])[:3]
    if not (name and k.isdigit() and j.isdigit()):
        raise ValueError(f"{stem!r} is not an iHarmony4 composite name (NAME_k_j)")
    return name, f"{name}_{k}"


def _find_image(folder: Path, stem: str) -> Path:
    for suffix in _IMAGE_SUFFIXES:
        if (path := folder / f"{stem}{suffix}").is_file():
            return path
    raise FileNotFoundError(f"no {stem}.jpg/.png in {folder}")


def _triplets_in(folder: Path, subset: str | None) -> list[Triplet]:
    triplets = []
    for path in sorted((folder / "composite_images").iterdir()):
        if path.suffix.lower() not in _IMAGE_SUFFIXES:
            continue
        real_name, mask_name = parse_composite_name(path.stem)
        triplets.append(Triplet(path.stem, subset or IHARMONY_SUBSETS.get(path.stem[0], "other"), path,
                                _find_image(folder / "masks", mask_name),
                                _find_image(folder / "real_images", real_name)))
    return triplets


def iharmony_triplets(root: str | Path) -> list[Triplet]:
    """The triplets under ``root``: one flat folder (``root/composite_images``, ``masks``,
    ``real_images``; the sub-dataset from the name's prefix, a/c/d/f) or a folder per sub-dataset
    (``root/HAdobe5k/composite_images`` ...; the sub-dataset is the folder's name).

    Raises:
        FileNotFoundError: no such layout under ``root``, or a composite without its mask or real image.
    """
    root = Path(root)
    if (root / "composite_images").is_dir():
        return _triplets_in(root, None)
    folders = sorted(p for p in root.iterdir() if (p / "composite_images").is_dir()) if root.is_dir() else []
    if not folders:
        raise FileNotFoundError(f"{root} holds no composite_images/ folder, nor sub-dataset folders with one")
    return [t for folder in folders for t in _triplets_in(folder, folder.name)]


TUNING_HALF, HELD_OUT_HALF = "tuning half", "held-out half"


def split_halves(triplets: Sequence[Triplet]) -> dict[str, str]:
    """Composite name -> ``TUNING_HALF`` when its real image's name sorts into an even position among
    the real images (0, 2, ...), else ``HELD_OUT_HALF``: every composite of one real image falls in
    one half, so a backend tuned on one half is judged on photographs it never saw.

    Args:
        triplets: from :func:`iharmony_triplets`.

    Returns:
        The half of each triplet, by its ``name``.
    """
    reals = sorted({t.real.stem for t in triplets})
    position = {name: index for index, name in enumerate(reals)}
    return {t.name: TUNING_HALF if position[t.real.stem] % 2 == 0 else HELD_OUT_HALF for t in triplets}


def _fmse_sum(rows: Sequence[dict], harmonizer: str, cases: set[str]) -> float:
    """The summed fMSE of ``harmonizer`` over ``cases``."""
    return sum(row["fmse"] for row in rows if row["harmonizer"] == harmonizer and row["case"] in cases)


def _cut(fmse: float, base_fmse: float) -> float:
    """A cut: one minus the ratio of fMSEs (sums, or means over the same cases); NaN without a baseline."""
    return 1.0 - fmse / base_fmse if base_fmse > 0 else math.nan


def group_cut(rows: Sequence[dict], harmonizer: str, cases: Iterable[str], baseline: str = BASELINE) -> float:
    """The fMSE cut of ``harmonizer`` over ``cases`` alone (as :func:`summarize` computes it)."""
    chosen = set(cases)
    return _cut(_fmse_sum(rows, harmonizer, chosen), _fmse_sum(rows, baseline, chosen))


def two_fold_cut(rows: Sequence[dict], candidates: Sequence[str], halves: Mapping[str, str],
                 baseline: str = BASELINE) -> dict:
    """What tuning on half the triplets buys on the other half: for each half, the candidate with the
    best cut there, scored on the other half; and the two scores pooled into one cut over every
    triplet (the held-out fMSEs summed against the baseline's), an estimate of the tuned backend's
    cut on triplets it never saw that uses every triplet once as held out.

    Args:
        rows: rows of :func:`score_rows` for every candidate and the baseline on every triplet.
        candidates: the harmonizer labels tuning chooses among.
        halves: triplet name -> half (:func:`split_halves`).
        baseline: the label of the unharmonized input.

    Returns:
        ``{"picked": {half: label}, "held_out": {half: the pick's cut on the other half},
        "pooled": cut}``.
    """
    names = {half: {case for case, h in halves.items() if h == half} for half in sorted(set(halves.values()))}
    picked, held_out, held_fmse, base_fmse = {}, {}, 0.0, 0.0
    for half, cases in names.items():
        other = set(halves) - cases
        picked[half] = max(candidates, key=lambda label: group_cut(rows, label, cases, baseline))
        fmse, base = _fmse_sum(rows, picked[half], other), _fmse_sum(rows, baseline, other)
        held_out[half] = _cut(fmse, base)
        held_fmse, base_fmse = held_fmse + fmse, base_fmse + base
    return {"picked": picked, "held_out": held_out, "pooled": _cut(held_fmse, base_fmse)}


def load_triplet(triplet: Triplet, size: int = IHARMONY_SIZE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(composite, mask, real) at ``size`` x ``size`` as the protocol scores them: the images resized
    with pixel-area averaging, the mask resized the same way and kept where it is at least half on."""
    composite, real = (cv2.imread(str(path), cv2.IMREAD_COLOR) for path in (triplet.composite, triplet.real))
    mask = cv2.imread(str(triplet.mask), cv2.IMREAD_GRAYSCALE)
    if composite is None or real is None or mask is None:
        raise ValueError(f"cannot read the images of {triplet.name}")
    composite, real, mask = (cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
                             for image in (composite, real, mask))
    return composite, mask >= 128, real


def evaluate_triplets(triplets: Iterable[Triplet], harmonizers: Mapping[str, Harmonizer | None],
                      size: int = IHARMONY_SIZE) -> list[dict]:
    """Rows of :func:`score_rows` for every triplet and harmonizer (``group``: the sub-dataset).

    Args:
        triplets: from :func:`iharmony_triplets`.
        harmonizers: label -> backend; include ``BASELINE: None`` for the composite as it is.
        size: the side the protocol resizes to.

    Returns:
        One row per (triplet, harmonizer) with ``seconds`` the harmonizer's time on that image.
    """
    rows = []
    for triplet in triplets:
        composite, mask, real = load_triplet(triplet, size)
        outputs = run_harmonizers(harmonizers, [composite], [mask])
        rows += score_rows(triplet.name, triplet.subset, real, mask,
                           {label: (images[0], seconds) for label, (images, seconds) in outputs.items()})
    return rows


# --- synthetic: perturbed photographs --------------------------------------------------------------

class Sample(NamedTuple):
    name: str
    image_bgr: np.ndarray  # H x W x 3 uint8
    mask: np.ndarray  # H x W bool, the object


@dataclass(frozen=True)
class PerturbationRanges:
    """Log-uniform ranges of the object's perturbation. Their width puts the unharmonized fMSE on
    the scikit-image samples (about 1,100) near iHarmony4's composites (about 1,000-1,400)."""

    gain: tuple[float, float] = (0.6, 1.6)  # exposure
    cast: float = 1.25  # per-channel factor up to x1.25 or /1.25 (geometric mean kept 1: no extra gain)
    gamma: tuple[float, float] = (0.7, 1.4)
    contrast: tuple[float, float] = (0.7, 1.4)  # about the object's mean


def _log_uniform(rng: np.random.Generator, low: float, high: float, size: int | None = None) -> np.ndarray:
    return np.exp(rng.uniform(math.log(low), math.log(high), size))


def perturb_object(image: np.ndarray, mask: np.ndarray, rng: np.random.Generator,
                   ranges: PerturbationRanges = PerturbationRanges()) -> np.ndarray:
    """``image`` with only the ``mask`` pixels recoloured: gain, colour cast, gamma, contrast."""
    out = image.copy()
    if not mask.any():
        return out
    gain = _log_uniform(rng, *ranges.gain)
    cast = _log_uniform(rng, 1 / ranges.cast, ranges.cast, 3)
    cast /= np.exp(np.log(cast).mean())
    gamma = _log_uniform(rng, *ranges.gamma)
    contrast = _log_uniform(rng, *ranges.contrast)
    pixels = np.clip(image[mask].astype(np.float32) / 255.0 * (gain * cast), 0.0, 1.0) ** gamma
    mean = pixels.mean(axis=0)
    pixels = (pixels - mean) * contrast + mean
    out[mask] = np.clip(pixels * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return out


def perturbation_rng(seed: int, sample_name: str, index: int) -> np.random.Generator:
    """One stream per (seed, sample, perturbation): adding a sample changes no other's perturbations."""
    return np.random.default_rng([seed, zlib.crc32(sample_name.encode()), index])


def evaluate_harmonizers(samples: Sequence[Sample], harmonizers: Mapping[str, Harmonizer | None],
                         n_perturbations: int = 10, seed: int = 0,
                         ranges: PerturbationRanges = PerturbationRanges()) -> list[dict]:
    """Rows of :func:`score_rows` for every (sample, perturbation, harmonizer): the output against the
    original photograph (``group``: the sample; ``case``: sample, seed and perturbation)."""
    rows = []
    for name, image, mask in samples:
        perturbed = [perturb_object(image, mask, perturbation_rng(seed, name, k), ranges)
                     for k in range(n_perturbations)]
        outputs = run_harmonizers(harmonizers, perturbed, [mask] * len(perturbed))
        for k in range(n_perturbations):
            rows += score_rows(f"{name}/{seed}/{k}", name, image, mask,
                               {label: (images[k], seconds) for label, (images, seconds) in outputs.items()})
    return rows


# --- samples ---------------------------------------------------------------------------------------

def _polygon(shape: tuple[int, int], points: Sequence[tuple[int, int]]) -> np.ndarray:
    mask = np.zeros(shape, dtype=np.uint8)
    cv2.fillPoly(mask, [np.array(points, dtype=np.int32)], 1)
    return mask.astype(bool)


def _ellipse(shape: tuple[int, int], centre: tuple[int, int], axes: tuple[int, int]) -> np.ndarray:
    mask = np.zeros(shape, dtype=np.uint8)
    cv2.ellipse(mask, centre, axes, 0, 0, 360, 1, thickness=-1)
    return mask.astype(bool)


def _rgb_to_bgr(image: np.ndarray) -> np.ndarray:
    rgb = np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[:, :, :3]
    return cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR)


def _coins_mask(gray: np.ndarray) -> np.ndarray:
    """All the coins: watershed on the Sobel elevation from sure-background / sure-coin markers
    (scikit-image's own recipe for this photograph), holes filled, specks dropped."""
    from skimage import filters, segmentation

    markers = np.zeros(gray.shape, dtype=np.int32)
    markers[gray < 30], markers[gray > 150] = 1, 2
    coins = (segmentation.watershed(filters.sobel(gray), markers) == 2).astype(np.uint8)
    contours, _ = cv2.findContours(coins, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    filled = np.zeros_like(coins)
    cv2.drawContours(filled, [c for c in contours if cv2.contourArea(c) >= 200], -1, 1, thickness=-1)
    return filled.astype(bool)


def skimage_samples() -> list[Sample]:
    """Seven objects in six of scikit-image's bundled photographs, with hand-placed masks (needs
    scikit-image). The helmet is cut by the image's bottom edge."""
    from skimage import data

    astronaut, chelsea, coffee = (_rgb_to_bgr(f()) for f in (data.astronaut, data.chelsea, data.coffee))
    rocket, motorcycle = _rgb_to_bgr(data.rocket()), _rgb_to_bgr(data.stereo_motorcycle()[0])
    coins = data.coins()
    return [
        Sample("astronaut_head", astronaut, _polygon(astronaut.shape[:2], [
            (160, 50), (185, 25), (225, 15), (265, 20), (292, 45), (302, 80), (298, 115), (285, 130),
            (270, 150), (250, 165), (225, 170), (200, 163), (180, 145), (163, 125), (153, 95)])),
        Sample("astronaut_helmet", astronaut, _ellipse(astronaut.shape[:2], (392, 455), (113, 110))),
        Sample("chelsea_eye", chelsea, _ellipse(chelsea.shape[:2], (170, 115), (33, 30))),
        Sample("coffee_cup", coffee, _ellipse(coffee.shape[:2], (289, 100), (114, 80)) | _polygon(coffee.shape[:2], [
            (175, 110), (403, 110), (385, 200), (345, 250), (290, 270), (235, 255), (190, 210)])),
        Sample("rocket", rocket, _polygon(rocket.shape[:2], [
            (322, 125), (312, 140), (308, 180), (308, 405), (334, 405), (334, 180), (330, 140)])),
        Sample("motorcycle_tank", motorcycle, _polygon(motorcycle.shape[:2], [
            (330, 205), (360, 180), (420, 160), (465, 160), (480, 180), (478, 205), (440, 230), (350, 245)])),
        Sample("coins", _rgb_to_bgr(coins), _coins_mask(coins)),
    ]


def folder_samples(root: str | Path) -> list[Sample]:
    """The user's own pairs: ``root/images/<stem>.png|.jpg|.jpeg`` with ``root/masks/<stem>.png``
    (object where the mask is > 127). Every image needs its mask."""
    root = Path(root)
    images = sorted(p for p in (root / "images").iterdir() if p.suffix.lower() in {".png", ".jpg", ".jpeg"})
    samples = []
    for path in images:
        mask_path = root / "masks" / f"{path.stem}.png"
        if not mask_path.is_file():
            raise FileNotFoundError(f"{path.name} has no mask at {mask_path}")
        image, mask = cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.imread(str(mask_path), cv2.IMREAD_GRAYSCALE)
        if image is None or mask is None:
            raise ValueError(f"cannot read {path} or {mask_path}")
        if mask.shape != image.shape[:2]:
            raise ValueError(f"{mask_path.name} is {mask.shape}, its image {image.shape[:2]}")
        samples.append(Sample(path.stem, image, mask > 127))
    return samples


def mask_overlay(image_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The image with the mask tinted red and outlined green, for checking a mask by eye."""
    out = image_bgr.copy()
    out[mask] = (0.5 * out[mask] + np.array([0, 0, 127])).astype(np.uint8)
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    cv2.drawContours(out, contours, -1, (0, 255, 0), 1)
    return out

"""Measuring harmonization the way iHarmony4 was built: real photographs with a real object mask,
the object's colour, exposure and contrast perturbed (nothing else), harmonized, and compared with
the untouched photograph (MSE, foreground MSE, PSNR), against no harmonization at all.

Samples come from scikit-image's bundled photographs (masks drawn here as polygons and ellipses,
checked on overlays; the coins by watershed) or from a folder of the user's own image + mask pairs.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from synrail.compose.harmonizers import Harmonizer


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


def harmonization_scores(original: np.ndarray, harmonized: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """iHarmony4's measures on 0-255 values: MSE over the image, fMSE over the object, PSNR (dB) of the MSE."""
    squared = (original.astype(np.float64) - harmonized.astype(np.float64)) ** 2
    mse = float(squared.mean())
    fmse = float(squared[mask].mean()) if mask.any() else 0.0
    psnr = math.inf if mse == 0 else 10.0 * math.log10(255.0 ** 2 / mse)
    return {"mse": mse, "fmse": fmse, "psnr": psnr}


def perturbation_rng(seed: int, sample_name: str, index: int) -> np.random.Generator:
    """One stream per (seed, sample, perturbation): adding a sample changes no other's perturbations."""
    return np.random.default_rng([seed, zlib.crc32(sample_name.encode()), index])


def evaluate_harmonizers(samples: Sequence[Sample], harmonizers: Mapping[str, Harmonizer | None],
                         n_perturbations: int = 10, seed: int = 0,
                         ranges: PerturbationRanges = PerturbationRanges()) -> list[dict]:
    """One row per (sample, perturbation, harmonizer): the scores of its output against the original;
    a harmonizer of None scores the perturbed image as it is."""
    rows = []
    for name, image, mask in samples:
        perturbed = [perturb_object(image, mask, perturbation_rng(seed, name, k), ranges)
                     for k in range(n_perturbations)]
        for label, harmonizer in harmonizers.items():
            masks = [mask] * len(perturbed)
            outputs = perturbed if harmonizer is None else harmonizer.harmonize_batch(perturbed, masks)
            for k, output in enumerate(outputs):
                rows.append({"sample": name, "perturbation": k, "harmonizer": label,
                             **harmonization_scores(image, output, mask)})
    return rows


def summarize(rows: Sequence[dict], baseline: str = "none") -> list[dict]:
    """Mean scores per (harmonizer, sample) and per harmonizer over all samples (sample ``"all"``),
    with the fMSE reduction against ``baseline`` on the same images (when the rows hold it)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["harmonizer"], row["sample"]), []).append(row)
        groups.setdefault((row["harmonizer"], "all"), []).append(row)
    means = {key: {m: float(np.mean([r[m] for r in group])) for m in ("mse", "fmse", "psnr")}
             for key, group in groups.items()}
    table = []
    for (harmonizer, sample), scores in means.items():
        base = means.get((baseline, sample))
        reduction = 1.0 - scores["fmse"] / base["fmse"] if base and base["fmse"] > 0 else math.nan
        table.append({"harmonizer": harmonizer, "sample": sample, **scores, "fmse_reduction": reduction})
    return table


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

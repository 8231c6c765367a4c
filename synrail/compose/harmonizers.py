"""Harmonization backends behind one interface: a pasted object in, the same image with its colours matched out.

A harmonizer gets a composite (the whole image, or a window of it) and the bool mask of the pasted
object's pixels, and returns a new image in which only masked pixels differ — except
``PoissonHarmonizer``, which also fades its solution into a band of ``band_px`` pixels around the
mask so that no step remains at the object's edge. Backends:

- ``GlobalLabHarmonizer``: the first default (``harmonize.harmonize_lab`` from a ring of background).
- ``LocalStatsHarmonizer`` (the default): exposure and colour cast matched to the ring's white point
  (von Kries; the exposure from a posterior that discounts a scene unlike its object), contrast
  partly to the ring's.
- ``PoissonHarmonizer``: gradient-domain blending (``cv2.seamlessClone``).
- ``TorchScriptHarmonizer`` / ``OnnxHarmonizer``: a user-supplied learned model (none is bundled).

``make_harmonizer`` builds one by name; ``"none"`` gives None (paste as is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np
from scipy import special

from synrail.compose.harmonize import harmonize_lab, ring_pixels

_RING_SHARE = 0.15  # default ring width as a share of the object's height, as composite._paste uses
_MIN_RING_PX = 8  # fewer background pixels than this are no statistics
_EPS = 1e-3
_CONTRAST_LIMITS = (0.7, 1.4)  # as harmonize.py: never flatten or blow up an object's own texture
_SEAMLESS_CLONE_ERODES_PX = 3  # seamlessClone erodes its mask 3 px before using the source's gradients
_POISSON_FILL_CELLS = 16  # resolution of the background guessed behind an object (mixed mode's guidance)
_CLIPPED_WHITE = 0.97  # an object white point this close to 1 may be clipped: it bounds the exposure only
_EXPOSURE_GRID = 241  # points of the exposure posterior
_SCENE_TAIL_DOF = 3.0


class Harmonizer(Protocol):
    """Matches a pasted object to its surroundings. Inherit from it to get the looping batch."""

    name: str

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``composite_bgr`` (H x W x 3 uint8) with the object ``mask`` (H x W bool) harmonized, as a new
        array; pixels outside ``mask`` keep their values (Poisson: outside mask and band)."""
        ...

    def harmonize_batch(self, composites: Sequence[np.ndarray], masks: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [self.harmonize(image, mask) for image, mask in zip(composites, masks, strict=True)]


# --- shared geometry -------------------------------------------------------------------------------

def default_ring_px(mask: np.ndarray) -> int:
    """Ring width for an object: a share of its height in the image, at least 2 px."""
    rows = np.flatnonzero(mask.any(axis=1))
    return max(2, int(round(_RING_SHARE * (rows[-1] - rows[0] + 1)))) if rows.size else 2


def mask_window(mask: np.ndarray, margin: int) -> tuple[slice, slice]:
    """The mask's bounding box grown by ``margin`` and cut at the image border."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    height, width = mask.shape
    return (slice(max(rows[0] - margin, 0), min(rows[-1] + 1 + margin, height)),
            slice(max(cols[0] - margin, 0), min(cols[-1] + 1 + margin, width)))


def ring_mask(mask: np.ndarray, width_px: int) -> np.ndarray:
    """Background pixels within ``width_px`` of ``mask`` (the same pixels ``harmonize.ring_pixels`` returns)."""
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * width_px + 1, 2 * width_px + 1))
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(bool) & ~mask


# --- classical -------------------------------------------------------------------------------------

class GlobalLabHarmonizer(Harmonizer):
    """Lab statistics transfer: ``harmonize_lab`` toward the statistics of a ring of background.

    Gives exactly what ``composite._paste`` gives when called with the same ring width (``_paste``
    uses 15 % of the whole cutout's height; ``ring_px=None`` uses 15 % of the mask's height in view).
    """

    name = "lab"

    def __init__(self, strength: float = 0.6, ring_px: int | None = None) -> None:
        self.strength = strength
        self.ring_px = ring_px

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = composite_bgr.copy()
        if not mask.any():
            return out
        ring_px = self.ring_px or default_ring_px(mask)
        window = mask_window(mask, ring_px)
        image, object_mask = composite_bgr[window], mask[window]
        out[window] = harmonize_lab(image, object_mask, ring_pixels(image, object_mask, ring_px), self.strength)
        return out


class LocalStatsHarmonizer(Harmonizer):
    """Von Kries correction toward the light of the paste site: the object's exposure and colour cast
    are matched to the ring of background around it by their white points.

    A white point is the ``percentile`` of a region's luminance (for exposure) and of each channel
    (for the cast) — the "white patch" of Retinex: surfaces under one light have similar highlights
    whatever their own colour, which the region's *mean* confuses with the object's albedo (on the
    bundled photographs the white points of object and ring differ by 0.23 in log, their means by 0.50).

    The log ratio of the object's white point to the ring's measures the object's exposure mismatch
    plus the scene's own difference between the two (bright coins on a dark table). The exposure
    correction undoes the mismatch's posterior (:func:`exposure_correction`): a flat prior over
    ``exposure_range`` either way, the scene's difference a heavy-tailed Student-t of scale
    ``scene_spread``, so a ratio far beyond the prior counts mostly as the scene's; a clipped object
    highlight only bounds the mismatch from below. The colour cast moves ``cast_strength`` of the way
    to the ring's, and the luminance contrast ``contrast_share`` of the way (in log) toward the ring's.

    The defaults were tuned on ``benchmarks/harmonize.py --seeds 1,3-5``; its default seeds are held out.
    """

    name = "local"

    def __init__(self, exposure_range: float = 0.6, scene_spread: float = 0.3, cast_strength: float = 0.5,
                 contrast_share: float = 0.3, percentile: float = 99.0, ring_px: int | None = None) -> None:
        self.exposure_range = exposure_range
        self.scene_spread = scene_spread
        self.cast_strength = cast_strength
        self.contrast_share = contrast_share
        self.percentile = percentile
        self.ring_px = ring_px

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = composite_bgr.copy()
        if not mask.any():
            return out
        ring_px = self.ring_px or default_ring_px(mask)
        window = mask_window(mask, ring_px)
        image, object_mask = composite_bgr[window], mask[window]
        ring = image[ring_mask(object_mask, ring_px)].astype(np.float32) / 255.0
        if len(ring) < _MIN_RING_PX:
            return out
        obj = image[object_mask].astype(np.float32) / 255.0
        out[window][object_mask] = np.clip(self._corrected(obj, ring) * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return out

    def _corrected(self, obj: np.ndarray, ring: np.ndarray) -> np.ndarray:
        """``obj`` (N x 3 BGR in [0, 1]) matched to ``ring``'s light."""
        ring_luminance = _luminance(ring)
        object_white = self._white(_luminance(obj))
        log_gain = exposure_correction(float(np.log(object_white / self._white(ring_luminance))),
                                       clipped=object_white >= _CLIPPED_WHITE,
                                       exposure_range=self.exposure_range, scene_spread=self.scene_spread)
        log_cast = np.log(self._white(ring) / self._white(obj))
        log_cast -= log_cast.mean()  # the cast alone: its exposure part is log_gain's
        corrected = obj * np.exp(log_gain + self.cast_strength * log_cast)
        luminance = _luminance(corrected)
        contrast = (ring_luminance.std() + _EPS) / (luminance.std() + _EPS)
        contrast = np.clip(contrast ** self.contrast_share, *_CONTRAST_LIMITS)
        return corrected + ((luminance - luminance.mean()) * (contrast - 1.0))[:, None]

    def _white(self, values: np.ndarray) -> np.ndarray:
        return np.percentile(values, self.percentile, axis=0) + _EPS


def exposure_correction(log_ratio: float, clipped: bool, exposure_range: float, scene_spread: float) -> float:
    """The log gain that best undoes an object's exposure mismatch x, given the log ratio of its white
    point to its surroundings' = x + the scene's own difference.

    x has a flat prior on [-exposure_range, exposure_range]; the scene's difference is Student-t
    (3 degrees of freedom, scale ``scene_spread``): heavy tails, so a ratio far outside the prior is
    put down to the scene and the correction falls back toward none. A ``clipped`` white point (the
    object's highlights at the top of the range) says only that the true ratio is at least
    ``log_ratio`` (a censored measurement). The gain is the posterior mean of exp(-x), the one factor
    with the least expected squared error in the pixels, not exp of the mean of -x.
    """
    grid = np.linspace(-exposure_range, exposure_range, _EXPOSURE_GRID)
    z = (log_ratio - grid) / scene_spread  # the scene's difference if the mismatch were each grid value
    if clipped:
        likelihood = special.stdtr(_SCENE_TAIL_DOF, -z)  # P(difference >= z): the t's survival function
    else:
        likelihood = (1.0 + z * z / _SCENE_TAIL_DOF) ** (-(_SCENE_TAIL_DOF + 1.0) / 2.0)  # t density, up to a factor
    return float(np.log((likelihood * np.exp(-grid)).sum() / likelihood.sum()))


def _luminance(bgr: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of N x 3 BGR values."""
    return bgr @ np.array([0.114, 0.587, 0.299], dtype=np.float32)


def smooth_fill(values: np.ndarray, known: np.ndarray, cells: int) -> np.ndarray:
    """A smooth field through the ``known`` pixels of ``values`` (H x W x C float): their Gaussian-
    weighted mean over 1/``cells`` of the window's longer side (normalized convolution), leaning on
    their global mean where almost none is near."""
    global_mean = values[known].mean(axis=0)
    # Work on a coarse copy, 8 px per cell: a blur this wide is smooth at that resolution anyway.
    height, width = known.shape
    scale = min(1.0, 8.0 * cells / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    weight = cv2.resize(known.astype(np.float32), size, interpolation=cv2.INTER_AREA)
    weighted = cv2.resize(np.ascontiguousarray(values * known[:, :, None], dtype=np.float32), size,
                          interpolation=cv2.INTER_AREA).reshape(size[1], size[0], -1)
    sigma = scale * max(height, width) / cells  # one cell, in coarse pixels
    weight = cv2.GaussianBlur(weight, (0, 0), sigma, borderType=cv2.BORDER_CONSTANT)
    weighted = cv2.GaussianBlur(weighted, (0, 0), sigma, borderType=cv2.BORDER_CONSTANT).reshape(weighted.shape)
    prior = 1e-3
    coarse = (weighted + prior * global_mean) / (weight[:, :, None] + prior)
    return cv2.resize(coarse, (width, height), interpolation=cv2.INTER_LINEAR).reshape(values.shape)


class PoissonHarmonizer(Harmonizer):
    """Gradient-domain blending with ``cv2.seamlessClone``: the object keeps its gradients and meets
    the background's values at its edge.

    The guidance field must not contain the step between object and background (with the composite
    as both source and destination, Poisson blending would return it unchanged), so the source is the
    object extended outward by its own edge colours and, for ``"mixed"``, the destination the
    composite with the object replaced by a smooth guess of the background. ``"normal"`` (the default)
    keeps the object's own gradients, right for an opaque object; ``"mixed"`` keeps whichever of the
    object's and background's gradients is stronger (for holey or thin objects). Changes the mask and
    a ``band_px`` band around it, where the solution fades out into the untouched background.
    """

    name = "poisson"

    def __init__(self, mode: str = "normal", band_px: int = 2) -> None:
        flags = {"mixed": cv2.MIXED_CLONE, "normal": cv2.NORMAL_CLONE}
        if mode not in flags:
            raise ValueError(f"Poisson mode must be one of {sorted(flags)}, got {mode!r}")
        self.mode = mode
        self.flag = flags[mode]
        self.band_px = max(1, band_px)

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = composite_bgr.copy()
        if not mask.any():
            return out
        # seamlessClone clears the mask's outermost rows and columns and fixes the bounding box's edge
        # to the destination: pad (mirroring) so the clone region never reaches the image border.
        margin = self.band_px + _SEAMLESS_CLONE_ERODES_PX + 2
        window = mask_window(mask, margin)
        image = cv2.copyMakeBorder(composite_bgr[window], margin, margin, margin, margin, cv2.BORDER_REFLECT)
        object_mask = np.pad(mask[window], margin)
        blended = self._blend(image, object_mask)
        unpad = (slice(margin, -margin), slice(margin, -margin))
        out[window] = blended[unpad]
        return out

    def _blend(self, image: np.ndarray, object_mask: np.ndarray) -> np.ndarray:
        guided = _dilate(object_mask, self.band_px)  # the object and its band: the solution we keep
        clone_mask = _dilate(object_mask, self.band_px + _SEAMLESS_CLONE_ERODES_PX)
        source = fill_from_nearest(image, clone_mask & ~object_mask, object_mask)
        destination = image.copy()
        if self.flag == cv2.MIXED_CLONE:  # only mixed reads the destination's gradients inside the object
            background = smooth_fill(image.astype(np.float32), ~guided, _POISSON_FILL_CELLS)
            destination[object_mask] = np.clip(background[object_mask] + 0.5, 0, 255).astype(np.uint8)
        x, y, w, h = cv2.boundingRect(clone_mask.astype(np.uint8))
        solved = cv2.seamlessClone(source, destination, clone_mask.astype(np.uint8) * 255,
                                   (x + w // 2, y + h // 2), self.flag)
        # Outside the object the solution fades out across the band; beyond it the image is untouched.
        outside = cv2.distanceTransform((~object_mask).astype(np.uint8), cv2.DIST_L2, 3)
        weight = np.where(guided, np.clip(1.0 - outside / (self.band_px + 1), 0.0, 1.0), 0.0)
        blended = image + weight[:, :, None] * (solved.astype(np.float32) - image)
        return np.clip(blended + 0.5, 0, 255).astype(np.uint8)


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(bool)


def fill_from_nearest(image: np.ndarray, region: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``image`` with each ``region`` pixel replaced by the nearest ``source`` pixel's colour."""
    _, labels = cv2.distanceTransformWithLabels((~source).astype(np.uint8), cv2.DIST_L2, 5,
                                                labelType=cv2.DIST_LABEL_PIXEL)
    colour_of_label = np.zeros((labels.max() + 1, 3), dtype=image.dtype)
    colour_of_label[labels[source]] = image[source]
    filled = image.copy()
    filled[region] = colour_of_label[labels[region]]
    return filled


# --- learned plug-ins ------------------------------------------------------------------------------

class _LearnedHarmonizer(Harmonizer):
    """A model taking (composite RGB float [0, 1] N x 3 x H x W, mask N x 1 x H x W) and returning the
    harmonized N x 3 x H x W; only the masked pixels of its output are used."""

    def __init__(self, input_size: tuple[int, int] | None, batch_size: int) -> None:
        self.input_size = tuple(input_size) if input_size else None  # (height, width) the model expects
        self.batch_size = max(1, batch_size)

    def _run(self, images: np.ndarray, masks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self.harmonize_batch([composite_bgr], [mask])[0]

    def harmonize_batch(self, composites: Sequence[np.ndarray], masks: Sequence[np.ndarray]) -> list[np.ndarray]:
        inputs = [self._model_input(image, mask) for image, mask in zip(composites, masks, strict=True)]
        outputs: list[np.ndarray | None] = [None] * len(inputs)
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for index, (image, _) in enumerate(inputs):  # a batch needs one size: group images by theirs
            by_shape.setdefault(image.shape, []).append(index)
        for indices in by_shape.values():
            for start in range(0, len(indices), self.batch_size):
                chunk = indices[start:start + self.batch_size]
                result = self._run(np.stack([inputs[i][0] for i in chunk]), np.stack([inputs[i][1] for i in chunk]))
                if result.shape != (len(chunk), *inputs[chunk[0]][0].shape):
                    raise ValueError(f"{self.name} model returned shape {result.shape}, "
                                     f"expected {(len(chunk), *inputs[chunk[0]][0].shape)}")
                for i, harmonized in zip(chunk, result, strict=True):
                    outputs[i] = harmonized
        return [take_masked(image, mask, output)
                for image, mask, output in zip(composites, masks, outputs, strict=True)]

    def _model_input(self, composite_bgr: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rgb = cv2.cvtColor(composite_bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0
        weight = mask.astype(np.float32)
        if self.input_size and self.input_size != mask.shape:
            size = (self.input_size[1], self.input_size[0])
            rgb = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
            weight = (cv2.resize(weight, size, interpolation=cv2.INTER_AREA) >= 0.5).astype(np.float32)
        return np.ascontiguousarray(rgb.transpose(2, 0, 1)), weight[None]


def take_masked(composite_bgr: np.ndarray, mask: np.ndarray, harmonized_rgb_chw: np.ndarray) -> np.ndarray:
    """The composite with its masked pixels taken from a model's output, resized back to the composite."""
    harmonized = np.ascontiguousarray(harmonized_rgb_chw.transpose(1, 2, 0), dtype=np.float32)
    if harmonized.shape[:2] != mask.shape:
        harmonized = cv2.resize(harmonized, (mask.shape[1], mask.shape[0]), interpolation=cv2.INTER_LINEAR)
    bgr = np.clip(cv2.cvtColor(harmonized, cv2.COLOR_RGB2BGR) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    out = composite_bgr.copy()
    out[mask] = bgr[mask]
    return out


class TorchScriptHarmonizer(_LearnedHarmonizer):
    """A TorchScript model ``forward(composite, mask) -> harmonized`` on ``device`` (default: CUDA when
    available, else CPU), ``batch_size`` images at a time."""

    name = "torchscript"

    def __init__(self, path: str | Path, device: str | None = None, batch_size: int = 8,
                 input_size: tuple[int, int] | None = None) -> None:
        import torch  # heavy: only when a learned backend is asked for

        super().__init__(input_size, batch_size)
        self._torch = torch
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = torch.jit.load(str(path), map_location=self.device).eval()

    def _run(self, images: np.ndarray, masks: np.ndarray) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            result = self.model(torch.from_numpy(images).to(self.device), torch.from_numpy(masks).to(self.device))
        return result.float().cpu().numpy()


class OnnxHarmonizer(_LearnedHarmonizer):
    """An ONNX model with inputs (composite, mask) in that order, run by onnxruntime with ``providers``
    (default: CUDA when onnxruntime has it, else CPU). A static input size or batch in the model is
    honoured (a short last batch is padded)."""

    name = "onnx"

    def __init__(self, path: str | Path, providers: Sequence[str] | None = None, batch_size: int = 8,
                 input_size: tuple[int, int] | None = None) -> None:
        try:
            import onnxruntime
        except ImportError:
            raise ImportError("OnnxHarmonizer needs onnxruntime: pip install onnxruntime "
                              "(or onnxruntime-gpu for CUDA)") from None
        available = onnxruntime.get_available_providers()
        chosen = list(providers) if providers else [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                                                     if p in available]
        self.session = onnxruntime.InferenceSession(str(path), providers=chosen)
        image_input, mask_input = self.session.get_inputs()[:2]
        self._input_names = (image_input.name, mask_input.name)
        batch, _, height, width = image_input.shape
        self._static_batch = batch if isinstance(batch, int) else None
        static_size = (height, width) if isinstance(height, int) and isinstance(width, int) else None
        super().__init__(input_size or static_size, self._static_batch or batch_size)

    def _run(self, images: np.ndarray, masks: np.ndarray) -> np.ndarray:
        count = len(images)
        if self._static_batch and count < self._static_batch:  # repeat the last image up to the fixed batch
            images, masks = (np.concatenate([a, np.repeat(a[-1:], self._static_batch - count, axis=0)])
                             for a in (images, masks))
        feed = dict(zip(self._input_names, (images, masks), strict=True))
        return np.asarray(self.session.run(None, feed)[0])[:count]


# --- by name ---------------------------------------------------------------------------------------

_BACKENDS: dict[str, Callable[..., Harmonizer]] = {
    "lab": GlobalLabHarmonizer,
    "local": LocalStatsHarmonizer,
    "poisson": PoissonHarmonizer,
    "torchscript": TorchScriptHarmonizer,
    "onnx": OnnxHarmonizer,
}
HARMONIZER_NAMES = (*_BACKENDS, "none")


def make_harmonizer(name: str, **options: Any) -> Harmonizer | None:
    """The backend called ``name`` built with ``options``; None for ``"none"`` (paste unchanged)."""
    if name == "none":
        return None
    if name not in _BACKENDS:
        raise ValueError(f"unknown harmonizer {name!r}; choose one of: {', '.join(HARMONIZER_NAMES)}")
    return _BACKENDS[name](**options)

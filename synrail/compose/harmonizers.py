"""Harmonization backends behind one interface: a pasted object in, the same image with its colours matched out.

A harmonizer gets a composite (the whole image, or a window of it), the bool mask of the pasted
object's pixels and, optionally, the object's full height in pixels (its scale when the mask is cut
by the image border), and returns a new image in which only masked pixels differ — except
``PoissonHarmonizer``, which also fades its solution into a band of ``band_px`` pixels around the
mask so that no step remains at the object's edge. ``context_px`` says how much of the surroundings
a backend reads, so a caller can hand it a window instead of the whole image. Backends (the
computations are the pure functions of ``harmony_kernels``):

- ``RingHarmonizer`` (the default): ``local``'s white-point correction, then the lightness and
  colour steps across the object's edge undone in Lab, each by how plausible it is as a mismatch
  (an object whose colour is its own keeps it).
- ``GlobalLabHarmonizer``: the first default (``harmonize_lab`` from a ring of background).
- ``LocalStatsHarmonizer``: exposure and colour cast matched to the ring's white point (von Kries;
  the exposure from a posterior that discounts a scene unlike its object), contrast partly to the ring's.
- ``PoissonHarmonizer``: gradient-domain blending (``cv2.seamlessClone``).
- ``TorchScriptHarmonizer`` / ``OnnxHarmonizer``: a user-supplied learned model (none is bundled);
  the contract it must be exported to is ``LEARNED_CONTRACT`` (and the README).

``make_harmonizer`` builds one by name; ``"none"`` gives None (paste as is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from synrail.compose.harmony_kernels import (
    apply_affine_8bit,
    apply_lab_lut_8bit,
    dilate,
    edge_cast_shift,
    edge_lightness_shift,
    edge_log_ratio,
    edge_pairs,
    fill_from_nearest,
    harmonize_lab,
    mask_height,
    mask_window,
    ring_mask,
    ring_pixels,
    ring_pixels_on_grid,
    ring_statistics_lut,
    ring_width,
    smooth_fill,
    subsample,
    to_lab_8bit,
    white_point_correction,
    white_point_transform,
)

RING_SHARE = 0.15  # ring width as a share of the object's height (lab, local; poisson's context)
RING_BACKEND_SHARE = 0.3  # ring's: its white points from a wider ring (real and synthetic benchmarks, README)
_WHITE_POINT_SAMPLES = 16384  # ring: a 99th percentile of object or ring needs no more pixels (its sort is the cost)
_MIN_RING_PX = 8  # fewer background pixels than this are no statistics
_EDGE_SIDE_PX = 512  # ring: edge steps are measured on a window shrunk to this side at most (a bounded cost)
_EDGE_BAND_PX = 3  # ring: depth of the bands paired across the object's edge, at that scale
_SEAMLESS_CLONE_ERODES_PX = 3  # seamlessClone erodes its mask 3 px before using the source's gradients
_POISSON_FILL_CELLS = 16  # resolution of the background guessed behind an object (mixed mode's guidance)


class Harmonizer:
    """Matches a pasted object to its surroundings. Subclasses implement ``harmonize``; the batch loops."""

    name: str = "harmonizer"
    ring_share: float = RING_SHARE

    def context_px(self, object_height: int) -> int:
        """How far beyond the object's bounding box this backend reads the surroundings, for an
        object ``object_height`` pixels tall."""
        return ring_width(object_height, self.ring_share)

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray, object_height: int | None = None) -> np.ndarray:
        """``composite_bgr`` with the object ``mask`` harmonized.

        Args:
            composite_bgr: H x W x 3 uint8, the object already pasted.
            mask: H x W bool, the object's pixels.
            object_height: the whole object's height in pixels, which sets the ring width (default: the mask's).

        Returns:
            A new array; pixels outside ``mask`` (Poisson: outside mask and band) keep their values.
        """
        raise NotImplementedError

    def harmonized_object(self, composite_bgr: np.ndarray, mask: np.ndarray,
                          object_height: int | None = None) -> np.ndarray:
        """The object's pixels of :meth:`harmonize`'s result, ``harmonize(...)[mask]``: what a caller
        that pastes only the object takes back (backends that can skip the whole output say so).

        Args:
            composite_bgr: H x W x 3 uint8, the object already pasted.
            mask: H x W bool, the object's pixels.
            object_height: the whole object's height in pixels (default: the mask's).

        Returns:
            N x 3 uint8, one row per ``mask`` pixel in row-major order.
        """
        return self.harmonize(composite_bgr, mask, object_height)[mask]

    def harmonize_batch(self, composites: Sequence[np.ndarray], masks: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``harmonize`` on each (composite, mask) pair.

        Args:
            composites: H x W x 3 uint8 images, the objects already pasted.
            masks: one H x W bool object mask per composite.

        Returns:
            The harmonized images, in order.
        """
        return [self.harmonize(image, mask) for image, mask in zip(composites, masks, strict=True)]

    def _ring_px(self, mask: np.ndarray, object_height: int | None) -> int:
        return ring_width(object_height or mask_height(mask), self.ring_share)


def default_ring_px(mask: np.ndarray) -> int:
    """Ring width for an object: ``RING_SHARE`` of its height in the image, at least 2 px."""
    return ring_width(mask_height(mask), RING_SHARE)


# --- classical -------------------------------------------------------------------------------------

class _RingStatistics(Harmonizer):
    """A backend that corrects the object's pixels from those of a ring of background around it."""

    def __init__(self, ring_px: int | None) -> None:
        self.ring_px = ring_px

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray, object_height: int | None = None) -> np.ndarray:
        out = composite_bgr.copy()
        corrected = self._corrected_window(composite_bgr, mask, object_height)
        if corrected is not None:
            window, object_mask, pixels = corrected
            out[window][object_mask] = pixels
        return out

    def harmonized_object(self, composite_bgr: np.ndarray, mask: np.ndarray,
                          object_height: int | None = None) -> np.ndarray:
        # the corrected pixels themselves: no copy of the composite to scatter them into and gather back
        corrected = self._corrected_window(composite_bgr, mask, object_height)
        return composite_bgr[mask] if corrected is None else corrected[2]

    def _corrected_window(self, composite_bgr: np.ndarray, mask: np.ndarray, object_height: int | None
                          ) -> tuple[tuple[slice, slice], np.ndarray, np.ndarray] | None:
        """(window, the object's mask in it, its corrected N x 3 pixels), or None when nothing changes."""
        if not mask.any():
            return None
        ring_px = self.ring_px or self._ring_px(mask, object_height)
        window = mask_window(mask, ring_px)
        image, object_mask = composite_bgr[window], mask[window]
        ring = self._ring_of(image, object_mask, ring_px)
        if len(ring) < _MIN_RING_PX:
            return None
        return window, object_mask, self._corrected_in(image, object_mask, ring)

    def _ring_of(self, image: np.ndarray, object_mask: np.ndarray, ring_px: int) -> np.ndarray:
        """The M x 3 ring pixels the statistics are computed from."""
        return image[ring_mask(object_mask, ring_px)]

    def _corrected_in(self, image: np.ndarray, object_mask: np.ndarray, ring: np.ndarray) -> np.ndarray:
        """The object's pixels (``image[object_mask]``) corrected, from the window and its ring's M x 3 pixels."""
        return self._corrected(image[object_mask], ring)

    def _corrected(self, obj: np.ndarray, ring: np.ndarray) -> np.ndarray:
        """The object's N x 3 uint8 BGR pixels corrected from the ring's M x 3."""
        raise NotImplementedError


class GlobalLabHarmonizer(Harmonizer):
    """Lab statistics transfer: ``harmonize_lab`` toward the statistics of a ring of background.

    The ring is ``RING_SHARE`` of the object's height wide (of ``object_height`` when given: the
    compositor passes the whole cutout's, so a cut object keeps its ring), or ``ring_px``.
    """

    name = "lab"

    def __init__(self, strength: float = 0.6, ring_px: int | None = None) -> None:
        self.strength = strength
        self.ring_px = ring_px

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray, object_height: int | None = None) -> np.ndarray:
        """``composite_bgr`` with the object's Lab statistics moved ``strength`` of the way to its ring's.

        Args:
            composite_bgr: H x W x 3 uint8, the object already pasted.
            mask: H x W bool, the object's pixels.
            object_height: the whole object's height in pixels, which sets the ring width (default: the mask's).

        Returns:
            A new array; pixels outside ``mask`` keep their values.
        """
        out = composite_bgr.copy()
        if not mask.any():
            return out
        ring_px = self.ring_px or self._ring_px(mask, object_height)
        window = mask_window(mask, ring_px)
        image, object_mask = composite_bgr[window], mask[window]
        out[window] = harmonize_lab(image, object_mask, ring_pixels(image, object_mask, ring_px), self.strength)
        return out


class LocalStatsHarmonizer(_RingStatistics):
    """Von Kries correction toward the light of the paste site (``white_point_correction``): the
    object's exposure and colour cast are matched to the ring of background around it by their
    white points.

    A white point is the ``percentile`` of a region's luminance (for exposure) and of each channel
    (for the cast) — the "white patch" of Retinex: surfaces under one light have similar highlights
    whatever their own colour, which the region's *mean* confuses with the object's albedo (on the
    bundled photographs the white points of object and ring differ by 0.23 in log, their means by 0.50).

    The log ratio of the object's white point to the ring's measures the object's exposure mismatch
    plus the scene's own difference between the two (bright coins on a dark table). The exposure
    correction undoes the mismatch's posterior (``exposure_correction``): a flat prior over
    ``exposure_range`` either way, the scene's difference a heavy-tailed Student-t of scale
    ``scene_spread``, so a ratio far beyond the prior counts mostly as the scene's; a clipped object
    highlight only bounds the mismatch from below. The colour cast moves ``cast_strength`` of the way
    to the ring's, and the luminance contrast ``contrast_share`` of the way (in log) toward the ring's.

    The defaults were tuned on ``benchmarks/harmonize.py --seeds 1,3-5``; its default seeds are held out.
    """

    name = "local"

    def __init__(self, exposure_range: float = 0.6, scene_spread: float = 0.3, cast_strength: float = 0.5,
                 contrast_share: float = 0.3, percentile: float = 99.0, ring_px: int | None = None) -> None:
        super().__init__(ring_px)
        self.exposure_range = exposure_range
        self.scene_spread = scene_spread
        self.cast_strength = cast_strength
        self.contrast_share = contrast_share
        self.percentile = percentile

    cast_prior: tuple[float, float] | None = None  # local: the cast moves by cast_strength, unguarded

    def _corrected(self, obj: np.ndarray, ring: np.ndarray) -> np.ndarray:
        corrected = white_point_correction(obj.astype(np.float32) / 255.0, ring.astype(np.float32) / 255.0,
                                           self.percentile, self.exposure_range, self.scene_spread,
                                           self.cast_strength, self.contrast_share, self.cast_prior)
        return np.clip(corrected * 255.0 + 0.5, 0, 255).astype(np.uint8)


class RingHarmonizer(LocalStatsHarmonizer):
    """``local``'s white-point correction (exposure posterior in the luminance, cast by white
    points, from a ring ``ring_share`` of the object's height wide), then the lightness and colour
    steps across the object's edge undone in CIE Lab (``ring_statistics_lut``), each by the
    posterior share of the observed step.

    The evidence is the step across the object's edge (``edge_differences``): each background pixel
    within 3 px of the object against the nearest object pixel within 3 px inside it. A mismatch adds
    one offset to the step all around the edge; an object's own light and dark parts, or its own
    colours, make it step up here and down there. So the observation is the median step and the
    scene spread a share of the steps' robust spread: ``lightness`` (prior range in L, spread share;
    ``edge_lightness_shift``) for L, ``chroma`` (prior range of the cast's length in a-b units,
    spread share; ``edge_cast_shift``) for a and b. A consistent step is mostly undone, a varied one
    mostly kept, and a colour step far beyond its prior range (a red car on grey ballast) is the
    object's own, so it stays saturated. (Object against ring means, which this replaced for both,
    cannot tell a bright object on a dark table, or a red car on grey ballast, from a mismatch.)
    The spreads are left alone by default (``spread``: prior range 0; on both benchmarks ``local``'s
    contrast step does as well, and it is cheaper).

    The edge also vets the white points' exposure: the median log-luminance step across the
    uncorrected edge (``edge_log_ratio``) is a second reading of the same mismatch. When the two point
    opposite ways (the white points say brighten, the edge says the object is already the brighter:
    a bright sky in the ring, or the object's own specular highlights setting its white point), the
    exposure posterior's scene spread widens by ``edge_disagreement`` times their difference and the
    correction falls back toward none (``exposure_correction``'s ``edge_check``; 0: off).

    Statistics come from samples; the pixels go through one affine map (the white-point
    correction) and one table on 8-bit Lab codes, so it composes about as fast as ``local``.
    Chosen on iHarmony4 composites (``benchmarks/harmonize.py --iharmony``; tuned on the half whose
    real image sorts into even positions) with the synthetic benchmark as the second opinion (README).
    """

    name = "ring"

    def __init__(self, lightness: tuple[float, float] = (40.0, 2.25), chroma: tuple[float, float] = (30.0, 2.25),
                 spread: tuple[float, float] = (0.0, 0.3), ring_share: float = RING_BACKEND_SHARE,
                 cast_prior: tuple[float, float] = (0.4, 0.2),
                 exposure_range: float = 0.6, scene_spread: float = 0.3, cast_strength: float = 1.0,
                 contrast_share: float = 0.3, percentile: float = 99.0, ring_px: int | None = None,
                 edge_disagreement: float = 2.0) -> None:
        super().__init__(exposure_range, scene_spread, cast_strength, contrast_share, percentile, ring_px)
        self.cast_prior = tuple(cast_prior)
        self.edge_disagreement = edge_disagreement
        self.lightness, self.chroma, self.spread = tuple(lightness), tuple(chroma), tuple(spread)
        self.ring_share = ring_share

    def _ring_of(self, image: np.ndarray, object_mask: np.ndarray, ring_px: int) -> np.ndarray:
        # A 30 % ring around a large object is wide: sample it on a grid (the statistics take at most
        # _WHITE_POINT_SAMPLES pixels anyway), so its cost does not grow with its area.
        return ring_pixels_on_grid(image, object_mask, ring_px, _WHITE_POINT_SAMPLES)

    def _corrected_in(self, image: np.ndarray, object_mask: np.ndarray, ring: np.ndarray) -> np.ndarray:
        # Statistics from samples, the pixels through two cheap maps: the white-point correction is
        # affine in BGR, the Lab transfer per channel in 8-bit Lab (a table), so a large object
        # costs a few table-driven C passes instead of float colour conversions and a sort.
        obj = image[object_mask]
        ring = subsample(ring, _WHITE_POINT_SAMPLES)
        sample = subsample(obj, _WHITE_POINT_SAMPLES)
        outside, inside = self._edge_pixels(image, object_mask)
        outside_lab = to_lab_8bit(outside) if len(outside) else np.zeros((0, 3), dtype=np.float32)
        edge_check = None
        if self.edge_disagreement > 0 and len(outside):  # the uncorrected edge vets the white points' exposure
            edge_ratio = edge_log_ratio(outside_lab[:, 0], to_lab_8bit(inside)[:, 0])
            edge_check = None if edge_ratio is None else (edge_ratio, self.edge_disagreement)
        transform = white_point_transform(sample.astype(np.float32) / 255.0, ring.astype(np.float32) / 255.0,
                                          self.percentile, self.exposure_range, self.scene_spread,
                                          self.cast_strength, self.contrast_share, self.cast_prior, edge_check)
        steps = self._edge_steps(outside_lab, inside, transform)
        lut = ring_statistics_lut(to_lab_8bit(apply_affine_8bit(sample, transform)), to_lab_8bit(subsample(ring)),
                                  edge_lightness_shift(steps[:, 0], *self.lightness),
                                  edge_cast_shift(steps[:, 1:], *self.chroma), self.spread)
        return apply_lab_lut_8bit(apply_affine_8bit(obj, transform), lut)

    @staticmethod
    def _edge_steps(outside_lab: np.ndarray, inside: np.ndarray, transform: np.ndarray) -> np.ndarray:
        """The (L, a, b) steps across the edge of the object corrected by ``transform`` (N x 3): the
        outer pixels' Lab minus the corrected inner pixels', over the pairs of :meth:`_edge_pixels`."""
        if not len(inside):
            return outside_lab
        return outside_lab - to_lab_8bit(apply_affine_8bit(inside, transform))

    @staticmethod
    def _edge_pixels(image: np.ndarray, object_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The BGR pixels paired across the object's edge (outer, inner; N x 3 uint8 each), on the
        window shrunk to ``_EDGE_SIDE_PX`` at most: the distance transform that pairs the pixels
        costs in proportion to the window (shrinking to 256 px instead cost the synthetic benchmark
        4 points: a shrink mixes the edge's pixels and softens the step)."""
        scale = _EDGE_SIDE_PX / max(image.shape[:2])
        if scale < 1.0:
            size = (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale)))
            image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
            object_mask = cv2.resize(object_mask.astype(np.float32), size, interpolation=cv2.INTER_AREA) >= 0.5
        outside, inside = edge_pairs(object_mask, _EDGE_BAND_PX)
        pixels = image.reshape(-1, 3)  # only the paired object pixels go through the correction
        return pixels[outside], pixels[inside]


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

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray, object_height: int | None = None) -> np.ndarray:
        """``composite_bgr`` with the object Poisson-blended into its surroundings.

        Args:
            composite_bgr: H x W x 3 uint8, the object already pasted.
            mask: H x W bool, the object's pixels.
            object_height: the whole object's height in pixels, which sets the ring width (default: the mask's).

        Returns:
            A new array; pixels outside the mask and its band keep their values.
        """
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
        guided = dilate(object_mask, self.band_px)  # the object and its band: the solution we keep
        clone_mask = dilate(object_mask, self.band_px + _SEAMLESS_CLONE_ERODES_PX)
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


# --- learned plug-ins ------------------------------------------------------------------------------

LEARNED_CONTRACT = """\
inputs, in this order:
  composite  float32 N x 3 x H x W, RGB channel order, values in [0, 1] (not mean/std normalised)
  mask       float32 N x 1 x H x W, 1.0 on the pasted object, 0.0 elsewhere (hard, not feathered)
output, the first one:
  harmonized float32 N x 3 x H x W, RGB, [0, 1] (values outside are clipped), the same H x W
H x W: the model's static input size if it has one (the composite and mask are resized to it and
the output back), else the composite's own size; N: any, or the model's static batch.
Only the masked pixels of the output are used; the rest of the image keeps its values.
"""


class _LearnedHarmonizer(Harmonizer):
    """A model following ``LEARNED_CONTRACT``: (composite RGB [0, 1] N x 3 x H x W, mask N x 1 x H x W)
    -> harmonized RGB [0, 1] N x 3 x H x W; only the masked pixels of its output are used."""

    def __init__(self, input_size: tuple[int, int] | None, batch_size: int) -> None:
        self.input_size = tuple(input_size) if input_size else None  # (height, width) the model expects
        self.batch_size = max(1, batch_size)

    def _run(self, images: np.ndarray, masks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def harmonize(self, composite_bgr: np.ndarray, mask: np.ndarray, object_height: int | None = None) -> np.ndarray:
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
    """The composite with its masked pixels taken from a model's output, resized back to the composite.

    Args:
        composite_bgr: H x W x 3 uint8.
        mask: H x W bool, the object's pixels.
        harmonized_rgb_chw: the model's output, 3 x h x w RGB in [0, 1].

    Returns:
        A new array; pixels outside ``mask`` keep their values.
    """
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
    "ring": RingHarmonizer,
    "lab": GlobalLabHarmonizer,
    "local": LocalStatsHarmonizer,
    "poisson": PoissonHarmonizer,
    "torchscript": TorchScriptHarmonizer,
    "onnx": OnnxHarmonizer,
}
HARMONIZER_NAMES = (*_BACKENDS, "none")


def make_harmonizer(name: str, **options: Any) -> Harmonizer | None:
    """The backend called ``name`` built with ``options``.

    Args:
        name: one of ``HARMONIZER_NAMES``.
        **options: the backend's constructor arguments.

    Returns:
        The backend, or None for ``"none"`` (paste unchanged).

    Raises:
        ValueError: unknown name.
    """
    if name == "none":
        return None
    if name not in _BACKENDS:
        raise ValueError(f"unknown harmonizer {name!r}; choose one of: {', '.join(HARMONIZER_NAMES)}")
    return _BACKENDS[name](**options)

"""The one registry of random streams: every generator in SynRail is made here.

A generator is ``default_rng([seed, stream, *keys])``: what an image looks like depends only on the
build seed, its stream and its index, never on chunking, scheduling or worker count. Each stage has
its own stream, so adding draws to one stage never shifts another. The numbers are part of every
dataset's bytes: never renumber a stream; add a new one instead.
"""

from __future__ import annotations

import functools
from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    """Stream numbers: the second entry of every seed sequence."""

    BACKGROUND = 1  # procedural background specs, key: background index
    GALLERY = 2  # real-source cutouts, key: a number from the cutout's sha256
    IMAGE = 3  # composition, keys: image index[, resample attempt]
    SPLIT = 4  # split plans, key: a SplitPlan
    DIFFUSION_PROMPTS = 5  # diffusion prompt expansion, key: class index
    WEATHER = 6  # weather over a finished composite, key: image index
    VIDEO_SEGMENTER_PROMPTS = 7  # SAM point prompts on a video frame, key: frame index
    CLIP = 8  # approach sequences, keys: clip index, ClipDraw[, frame or track]
    PROCEDURAL_OBSTACLE = 2000  # + the class's index in cfg.classes (kept for bytes), key: cutout index


class SplitPlan(IntEnum):
    """Keys of the split stream (the values predate the registry and are kept for bytes)."""

    BACKGROUNDS = 0  # which split each procedural background belongs to
    # 1, 2, 3: conditions and track types inside the splits train, val, test (``split_plan_rng``)
    VIDEOS = 100  # which split each video belongs to


class ClipDraw(IntEnum):
    """Keys inside the clip stream: each part of a clip draws apart, so adding draws to one never
    shifts another."""

    SCENE = 0  # the background spec, speed and fps-independent setup
    OBSTACLES = 1  # cutouts, sizes and world positions of the clip's obstacles
    EFFECTS = 2  # shadow strengths (one per track, kept along the clip)
    WEATHER = 3  # the clip's one weather draw, replayed on every frame
    FRAME = 4  # per-frame draws (pasted obstacles' sensor noise), key: frame index


class RenderStream(IntEnum):
    """Independent layers inside one procedural scene, keyed by the scene's palette seed: toggling
    clutter must not shift the sensor noise."""

    GROUND = 0
    SKY = 1
    CLUTTER = 2
    SENSOR = 3


def rng_for(seed: int, stream: Stream, *keys: int) -> np.random.Generator:
    """The generator of ``stream`` for ``keys`` (an image index, a frame index, ...) under ``seed``.

    Args:
        seed: the build's seed (``cfg.seed``).
        stream: the stage's stream.
        keys: what the draw is for, most significant first.

    Returns:
        A fresh ``numpy.random.Generator``.
    """
    return np.random.default_rng([seed, int(stream), *keys])


def split_plan_rng(seed: int, split_number: int) -> np.random.Generator:
    """Conditions and track types inside split number ``split_number`` (1 train, 2 val, 3 test)."""
    return rng_for(seed, Stream.SPLIT, split_number)


def procedural_obstacle_rng(seed: int, class_index: int, index: int) -> np.random.Generator:
    """Procedural cutout ``index`` of the class at ``class_index`` in ``cfg.classes``."""
    return np.random.default_rng([seed, int(Stream.PROCEDURAL_OBSTACLE) + class_index, index])


def image_rng(seed: int, index: int, attempt: int = 0) -> np.random.Generator:
    """Attempt ``attempt`` of composite ``index``; attempt 0 is the image's usual draw, so turning
    quality control on never changes images that pass at once."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    return rng_for(seed, Stream.IMAGE, index) if attempt == 0 else rng_for(seed, Stream.IMAGE, index, attempt)


def render_rng(palette_seed: int, layer: RenderStream, *keys: int) -> np.random.Generator:
    """One layer of a procedural scene (its palette seed comes from the background stream); ``keys``
    tell frames of one clip apart (a still, and a clip's first frame, have none)."""
    return np.random.default_rng([palette_seed, int(layer), *keys])


def clip_rng(seed: int, clip: int, draw: ClipDraw, *keys: int) -> np.random.Generator:
    """Draw ``draw`` of approach clip ``clip`` (frame or track index in ``keys``)."""
    return rng_for(seed, Stream.CLIP, clip, int(draw), *keys)


def normal_quantiles(levels: int) -> np.ndarray:
    """The middles of the standard normal's ``levels`` equal-probability slices, float32, scaled to unit
    variance (the cut tails take a little of it: 1 % at 256 levels)."""
    from scipy.special import ndtri  # here: most importers of this module draw no normals

    quantiles = ndtri((np.arange(levels) + 0.5) / levels).astype(np.float32)
    quantiles /= quantiles.std()
    return quantiles


@functools.cache
def _normal_table() -> np.ndarray:
    return normal_quantiles(65536)


def table_normals(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 standard normals looked up from 65,536 quantiles by uniform 16-bit draws: about three
    times faster than ``rng.standard_normal`` (the tails are cut at 4.2 standard deviations).

    Args:
        rng: the generator.
        shape: the array's shape.

    Returns:
        The normals.
    """
    return _normal_table()[rng.integers(0, 65536, shape, dtype=np.uint16)]

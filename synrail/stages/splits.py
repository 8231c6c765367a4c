"""Who goes where: backgrounds, videos and images assigned to train / val / test.

Backgrounds are assigned to splits (largest-remainder counts, shuffled by seed), so no scene is seen
in training and testing both; images are contiguous index blocks per split and draw their
background from their split only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from synrail.config import BuildConfig
from synrail.randomness import SplitPlan, Stream, rng_for, split_plan_rng
from synrail.records import SPLITS, BackgroundRecord, VideoBackgrounds

CONFIG_SECTIONS = ("seed", "num_images", "splits", "backgrounds")


def largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split ``total`` in proportion to ``weights``; every key with weight gets at least one when possible.

    Args:
        total: the number of items to count out.
        weights: non-negative weight per key.

    Returns:
        The count per key, summing to ``total``.
    """
    keys = list(weights)
    scale = total / sum(weights.values())
    wanted = {k: weights[k] * scale for k in keys}
    counts = {k: math.floor(v) for k, v in wanted.items()}
    for k in sorted(keys, key=lambda k: counts[k] - wanted[k])[: total - sum(counts.values())]:
        counts[k] += 1
    for k in keys:
        donor = max(keys, key=lambda d: counts[d])
        if weights[k] > 0 and counts[k] == 0 and counts[donor] > 1:
            counts[donor] -= 1
            counts[k] += 1
    return counts


def split_counts(total: int, fractions: Mapping[str, float]) -> dict[str, int]:
    """``total`` items counted out to the splits in proportion to ``fractions``.

    Args:
        total: the number of items.
        fractions: the share of each split in ``SPLITS``.

    Returns:
        The count per split, summing to ``total``.
    """
    return largest_remainder(total, {s: fractions[s] for s in SPLITS})


def image_splits(cfg: BuildConfig) -> list[str]:
    """Split of every image index: contiguous blocks train, val, test."""
    counts = split_counts(cfg.num_images, cfg.splits.fractions())
    return [s for s in SPLITS for _ in range(counts[s])]


def _shuffled_quota(counts: Mapping[str, int], rng: np.random.Generator) -> list[str]:
    ordered = [key for key, n in counts.items() for _ in range(n)]
    return [ordered[i] for i in rng.permutation(len(ordered))]


def background_plan(cfg: BuildConfig) -> list[tuple[str, str, str]]:
    """(split, condition, track type) of every procedural background.

    Each background belongs to one split, so no scene is seen in training and testing both, and
    every split gets its own share of each condition and track type (drawn independently, a small
    validation split could end up all clear weather, and per-condition scores would be undefined).

    Args:
        cfg: the build config (``seed``, ``splits``, ``backgrounds``).

    Returns:
        One ``(split, condition, track_type)`` per background index.
    """
    bgc = cfg.backgrounds
    splits = _shuffled_quota(split_counts(bgc.count, cfg.splits.fractions()),
                             rng_for(cfg.seed, Stream.SPLIT, SplitPlan.BACKGROUNDS))
    plan: list[tuple[str, str, str]] = [("", "", "")] * bgc.count
    for k, split in enumerate(SPLITS, start=1):
        members = [i for i, s in enumerate(splits) if s == split]
        rng = split_plan_rng(cfg.seed, k)
        conditions = _shuffled_quota(largest_remainder(len(members), bgc.conditions), rng)
        tracks = _shuffled_quota(largest_remainder(len(members), {t: 1.0 for t in bgc.track_types}), rng)
        for i, condition, track in zip(members, conditions, tracks, strict=True):
            plan[i] = (split, condition, track)
    return plan


def assign_video_splits(cfg: BuildConfig, videos: Sequence[VideoBackgrounds]) -> list[VideoBackgrounds]:
    """``videos`` with every background in its split, decided over the videos that yielded backgrounds
    (after reading, so a corrupt or trackless video never leaves a split empty while a good one exists).

    With at least as many such videos as splits in use, each video feeds one split (counts by largest
    remainder, every split in use at least one, shuffled by seed, videos in name order); with fewer,
    each video is cut into time blocks, one per split, at the price of neighbouring frames.

    Args:
        cfg: the build config (``seed``, ``splits``).
        videos: what the video stage made of each video or image sequence.

    Returns:
        The same videos, their records' ``split`` set.
    """
    productive = sorted(v.video for v in videos if v.records)
    used = sum(1 for share in cfg.splits.fractions().values() if share > 0)
    plan: dict[str, str | None] = dict.fromkeys(productive)
    if productive and len(productive) >= used:
        counts = split_counts(len(productive), cfg.splits.fractions())
        splits = [s for s in SPLITS for _ in range(counts[s])]
        order = rng_for(cfg.seed, Stream.SPLIT, SplitPlan.VIDEOS).permutation(len(productive))
        plan = {productive[i]: splits[k] for k, i in enumerate(order)}
    return [v.model_copy(update={"records": _in_split(v.records, plan.get(v.video), cfg)}) for v in videos]


def _in_split(records: list[BackgroundRecord], split: str | None, cfg: BuildConfig) -> list[BackgroundRecord]:
    """The records (in frame order) in ``split``, or in time blocks of the video when None."""
    return [r.model_copy(update={"split": split or time_block_split(k / len(records), cfg)})
            for k, r in enumerate(records)]


def time_block_split(position: float, cfg: BuildConfig) -> str:
    """The split of a frame at ``position`` (0..1) through a video that is cut into time blocks.

    Args:
        position: the frame's place in the video, 0 at the start, below 1 at the end.
        cfg: the build config (``splits``).

    Returns:
        The split whose block holds ``position``: blocks follow in the order train, val, test.
    """
    edge = 0.0
    for split, share in cfg.splits.fractions().items():
        edge += share
        if position < edge:
            return split
    return "test" if cfg.splits.test > 0 else "train"

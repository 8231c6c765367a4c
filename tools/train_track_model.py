"""Trains the learned ego-track-area model on SynRail's own procedural renders and exports it as ONNX.

    python tools/train_track_model.py --out synrail/rail/models/track_area.onnx [--renders 3000]
        [--epochs N] [--seed 0] [--size 256x144] [--paved 0.12] [--real DIR ...] [--threads 2] [--device cpu|cuda]
        [--train-real DIR ... [--train-split even|odd] [--real-repeats 8]] [--randconv SHARE] [--init ONNX]

Sim-to-real by strong domain randomisation: procedural scenes over wide camera ranges (height, pitch,
field of view, curvature, off-centre cab cameras) are rendered once and kept in memory; every epoch
draws new photometric, weather, night, texture, distractor-track, street-running (``--paved``), hood,
HUD, roll, crop and flip randomisations of them (``--randconv``: random convolutions of the batch
too). The target is ``spec.geometry.track_mask()`` (the ego area between the rails), carried
through every geometric step with the image.

The network is a compact U-Net of depthwise-separable convolutions (a few hundred thousand
parameters); it takes 1x3xHxW RGB in [0, 1] (normalised inside) and returns 1x1xHxW logits. It is
exported with an opset and operators OpenCV's DNN module reads (checked: ``cv2.dnn.readNetFromONNX``
and its output against torch's), with a JSON sidecar (``<out>.json``) of its input size and figures.

``--real DIR`` (repeatable): a folder of real frames with ``labels.json`` (frame name ->
``{"left": [[x, y], ...], "right": [[x, y], ...]}`` rail-head polylines in the frame's pixels, or
``null`` when no ego track is visible). After each epoch the IoU of the predicted area against the
polygon between the polylines (on the rows both cover) is printed, averaged over labelled frames,
with the mean predicted-area fraction on the null frames. Real frames are not trained on unless
``--train-real DIR`` names them (the sidecar then says which): each labelled frame of its split is
drawn ``--real-repeats`` times an epoch through the same photometric, geometric, hood, night and HUD
randomisation (no pastes from renders), with no loss on the rows its label does not cover; ``--real``
then checks only the frames of the other split.

``--init ONNX`` fine-tunes a model this script exported (the shipped one, or your own) instead of
starting from random weights: its convolutions are read back from the ONNX file, where the batch
norms are folded into them, and those norms stay fixed while the weights move (a few hundred steps
take minutes on a CPU: ``--init synrail/rail/models/track_area.onnx --train-real DIR --renders 2400
--real-repeats 48 --epochs 1 --lr 1e-3``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import shlex
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import albumentations as A
import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rail import in_split, label_area  # noqa: E402
from synrail.sources.procedural_backgrounds import (  # noqa: E402
    CONDITIONS,
    TRACK_TYPES,
    render_background,
    sample_background_spec,
)

ONNX_OPSET = 13  # OpenCV 4.9+ DNN reads it; Conv/BN folded, Relu, Add, Concat, Resize, Sub/Div
IMAGE_MEAN, IMAGE_STD = 0.45, 0.25
SCENE_RANGES = {
    "camera_height_m": (1.5, 3.6),
    # up to 6 degrees up: a grade ahead or a camera looking up puts the rails' vanishing point below
    # the image centre (labelled frames: up to 0.66 of the height); crops shift the horizon further
    "pitch_deg": (-6.0, 12.0),
    "hfov_deg": (35.0, 110.0),
    "max_curvature": 0.008,
    "max_offset_m": 1.4,
}
GENTLE_CURVATURE = 0.0025


# -- renders ---------------------------------------------------------------------------------------
def _render_one(job: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    seed, index, width, height = job
    ranges = dict(SCENE_RANGES)
    if index % 2:  # half the scenes on gentle curves, as most real lines are
        ranges["max_curvature"] = GENTLE_CURVATURE
    for attempt in range(20):
        rng = np.random.default_rng([seed, 1, index, attempt])
        spec = sample_background_spec(rng, width=width, height=height, track_types=TRACK_TYPES,
                                      conditions={c: 1.0 for c in CONDITIONS}, **ranges)
        try:
            image = render_background(spec)
        except (ValueError, cv2.error):  # the renderer fails on a few extreme cameras (a one-row sky at the
            continue                     # top edge, an overhead wire too thick to draw): draw again
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB), spec.geometry.track_mask().astype(np.uint8)
    raise RuntimeError(f"render {index}: no renderable scene in 20 draws")


def render_set(seed: int, count: int, width: int, height: int, processes: int,
               cache: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``count`` procedural scenes (RGB uint8 N x H x W x 3) and their ego masks (uint8 N x H x W)."""
    # the scene ranges are part of the key: renders drawn from other ranges are other renders
    ranges = zlib.crc32(json.dumps(SCENE_RANGES, sort_keys=True).encode())
    path = cache / f"renders_s{seed}_n{count}_{width}x{height}_r{ranges:08x}.npz" if cache else None
    if path is not None and path.exists():
        data = np.load(path)
        return data["images"], data["masks"]
    jobs = [(seed, i, width, height) for i in range(count)]
    if processes > 1 and count > 8:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            results = pool.map(_render_one, jobs, chunksize=16)
    else:
        results = [_render_one(job) for job in jobs]
    images = np.stack([r[0] for r in results])
    masks = np.stack([r[1] for r in results])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, images=images, masks=masks)
    return images, masks


# -- domain randomisation ------------------------------------------------------------------------
def _photometric(width: int) -> A.Compose:
    flare_radius = max(8, width // 3)
    return A.Compose([
        A.ColorJitter(brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=(0.3, 1.6), hue=(-0.08, 0.08), p=0.8),
        A.HueSaturationValue(hue_shift_limit=15, sat_shift_limit=30, val_shift_limit=20, p=0.3),
        A.RandomGamma(gamma_limit=(60, 160), p=0.4),
        A.OneOf([
            A.RandomRain(slant_range=(-15, 15), drop_length=max(2, width // 25), blur_value=3,
                         brightness_coefficient=0.8, p=1.0),
            A.RandomSnow(snow_point_range=(0.05, 0.25), brightness_coeff=1.8, p=1.0),
            A.RandomFog(fog_coef_range=(0.2, 0.6), alpha_coef=0.08, p=1.0),
            A.RandomShadow(shadow_roi=(0, 0.4, 1, 1), num_shadows_limit=(1, 3), shadow_dimension=5,
                           shadow_intensity_range=(0.3, 0.7), p=1.0),
            A.RandomSunFlare(flare_roi=(0, 0, 1, 0.5), src_radius=flare_radius, num_flare_circles_range=(3, 6),
                             p=1.0),
        ], p=0.35),
        A.ToGray(p=0.12),
        A.OneOf([
            A.GaussianBlur(sigma_limit=(0.3, 1.6), p=1.0),
            A.MotionBlur(blur_limit=(3, 7), p=1.0),
            A.Defocus(radius=(1, 3), alias_blur=(0.1, 0.3), p=1.0),
        ], p=0.35),
        A.OneOf([
            A.GaussNoise(std_range=(0.01, 0.06), p=1.0),
            A.ISONoise(color_shift=(0.01, 0.05), intensity=(0.1, 0.5), p=1.0),
        ], p=0.4),
        A.ImageCompression(quality_range=(25, 95), p=0.4),
    ])


def _ego_rows(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows where the ego area is at least 2 px wide, its width and its centre column there."""
    widths = mask.sum(axis=1)
    rows = np.flatnonzero(widths >= 2)
    centre = (mask[rows] * np.arange(mask.shape[1], dtype=np.float32)).sum(axis=1) / widths[rows]
    return rows, widths[rows].astype(np.float32), centre.astype(np.float32)


def _ground_rows(mask: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray] | None:
    """The ego area's horizon (where its width, fitted as a line over the rows, falls to 0), every
    row below it, and the ego centre and width on each, extrapolated where the mask ends; None where
    the area is too small or too flat to tell."""
    rows, widths, centre = _ego_rows(mask)
    if rows.size < 6:
        return None
    width_fit = np.polyfit(rows, widths, 1)
    if width_fit[0] <= 0:
        return None
    horizon = max(0.0, -width_fit[1] / width_fit[0])
    below = np.arange(int(math.ceil(horizon)), mask.shape[0])
    if below.size < 4:
        return None
    row_width = np.maximum(np.polyval(width_fit, below), 0.5).astype(np.float32)
    row_centre = np.interp(below, rows, centre).astype(np.float32)
    return horizon, below, row_width, row_centre


def _paving(rng: np.random.Generator, size: tuple[int, int], tone: tuple[float, float], spread: float,
            grain: float) -> tuple[np.ndarray, np.ndarray]:
    """A paved surface's colour (RGB) and its rows x columns x 3 texture: a tone drawn from ``tone``,
    slightly tinted, times coarse blotches within ``1 -/+ spread`` and a fine grain of up to
    ``grain`` (standard deviation)."""
    rows, columns = size
    colour = rng.uniform(*tone) * np.array(rng.uniform(0.9, 1.1, 3), np.float32)
    cells = (int(rng.integers(2, 8)), int(rng.integers(3, 12)))
    blotches = cv2.resize(rng.uniform(1 - spread, 1 + spread, (*cells, 1)).astype(np.float32), (columns, rows),
                          interpolation=cv2.INTER_CUBIC)[..., None]
    fine = rng.normal(1.0, rng.uniform(0.02, grain), (rows, columns, 1)).astype(np.float32)
    return colour, colour[None, None, :] * blotches * fine


class Randomiser:
    """Draws one randomised (image, target) from a cached render; deterministic per (seed, epoch, index)."""

    def __init__(self, images: np.ndarray, masks: np.ndarray, seed: int, neighbour_copies: float = 0.0,
                 pastes: bool = True, paved: float = 0.0, platforms: float = 0.0) -> None:
        self.images, self.masks, self.seed = images, masks, seed
        self.neighbour_copies = neighbour_copies
        self.paved = paved  # share of renders turned into street running (renders only)
        self.platforms = platforms  # share of renders given a station platform beside the track
        self.pastes = pastes  # distractor tracks and textures from other renders (renders only)
        self.height, self.width = images.shape[1:3]
        self.photometric = _photometric(self.width)

    def __call__(self, index: int, epoch: int, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """RGB uint8 H x W x 3 and a float32 H x W target in [0, 1] (negative: not labelled, no loss).

        ``count``: the number of images, when ``index`` runs over several repeats of them.
        """
        rng = np.random.default_rng([self.seed, 2, epoch, index])
        if count is not None:
            index %= count
        image = self.images[index].copy()
        mask = self.masks[index].astype(np.float32)
        if self.neighbour_copies and rng.random() < self.neighbour_copies:  # no draw when off: same stream
            self._neighbours(image, mask, rng)
        if self.pastes and rng.random() < 0.3:
            self._distractor(image, mask, rng)
        if self.pastes and rng.random() < 0.45:
            self._texture(image, mask, rng)
        if self.pastes and rng.random() < self.paved:
            self._pave(image, mask, rng)
        # Its own stream: the draws above and below stay those of a run without platforms.
        platform_rng = np.random.default_rng([self.seed, 3, epoch, index])
        if self.pastes and self.platforms and platform_rng.random() < self.platforms:
            self._platform(image, mask, platform_rng)
        image, mask = self._geometric(image, mask, rng)
        if rng.random() < 0.3:
            self._hood(image, mask, rng)
        self.photometric.set_random_seed(int(rng.integers(2**31)))
        image = self.photometric(image=image)["image"]
        if rng.random() < 0.15:
            image = self._night(image, rng)
        if rng.random() < 0.3:
            self._hud(image, rng)
        return image, mask

    def _other(self, rng: np.random.Generator, index_not: int = -1) -> int:
        return int(rng.integers(len(self.images)))

    def _neighbours(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
        """Copies of the ego track beside it, in perspective, mask 0: the cue must be where, not what.

        On a flat ground a lateral shift of D metres moves a row's pixels by D / W times the ego
        area's width on that row (W its width in metres), so a parallel track at ~4.5 m spacing is
        the ego band shifted by ~2.85 widths per row; curves are carried along row by row.
        """
        rows, widths, centre = _ego_rows(mask)
        if rows.size < 4:
            return
        w = self.width
        cols = np.arange(w, dtype=np.float32)
        source = image.copy()
        ego = cv2.dilate((mask > 0).astype(np.uint8), np.ones((3, 5), np.uint8)) > 0
        sides = [[-1], [1], [-1, 1]][int(rng.integers(3))]
        half_bed = np.float32(rng.uniform(0.9, 1.3)) * widths
        for side in sides:
            for order in range(1, int(rng.integers(1, 3)) + 1):
                shift = side * order * rng.uniform(2.65, 3.1) * widths
                map_x = np.broadcast_to(cols, (rows.size, w)) - shift[:, None]
                map_y = np.broadcast_to(rows[:, None].astype(np.float32), (rows.size, w))
                moved = cv2.remap(source, np.ascontiguousarray(map_x, dtype=np.float32),
                                  np.ascontiguousarray(map_y, dtype=np.float32), cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_REFLECT_101)
                band = np.abs(cols[None, :] - (centre + shift)[:, None]) <= half_bed[:, None]
                band &= ~ego[rows]
                target = image[rows]
                target[band] = moved[band]
                image[rows] = target

    def _pave(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
        """Street running: the ground around and between the ego rails paved (asphalt or setts), the
        rails left as thin heads, often grooved, with a second tram track and lane markings beside
        them (mask 0). The renderer only draws ballast and slabs; a tram's rails lie flush in a road.
        """
        ground = _ground_rows(mask)
        if ground is None:
            return
        horizon, below, row_width, row_centre = ground
        first, h, w = int(below[0]), self.height, self.width
        cols = np.arange(w, dtype=np.float32)
        reach = rng.uniform(2.5, 9.0) if rng.random() < 0.6 else 1e3  # the road's half-width, in track widths
        road = np.abs(cols[None, :] - row_centre[:, None]) <= reach * row_width[:, None]
        tone, paving = _paving(rng, (below.size, w), (50, 170), 0.25, 0.12)
        if rng.random() < 0.4:  # setts: rows of stones that shrink with distance (depth ~ 1 / (row - horizon))
            depth = 1.0 / np.maximum(below - horizon, 0.5)
            courses = np.cos(depth * rng.uniform(150, 400) * h / 144)[:, None, None]
            paving *= 1.0 + 0.12 * (courses > 0.6)
        region = image[first:]  # a view: the lines below draw into the image itself
        region[road] = np.clip(paving, 0, 255).astype(np.uint8)[road]
        head = np.maximum(1.0, 0.045 * row_width)
        steel = rng.uniform(130, 235) if rng.random() < 0.7 else rng.uniform(20, 60)
        if abs(steel - float(tone.mean())) < 40:  # rails a person can see on the paving
            steel = float(tone.mean()) + (40 if steel >= tone.mean() else -40)
        grooved = rng.random() < 0.6
        tracks = [0.0]
        if rng.random() < 0.5:  # a second tram track, 2.9-3.3 m between centres (1.9-2.2 track widths)
            tracks.append(float(rng.choice([-1, 1]) * rng.uniform(1.9, 2.2)))
        for shift in tracks:
            for side in (-1, 1):
                rail = row_centre + (shift + side * 0.5) * row_width - side * head / 2
                self._line(region, rail, head, steel)
                if grooved:
                    self._line(region, rail - side * head * 1.1, 0.7 * head, steel * 0.25)
        for _ in range(int(rng.integers(0, 3))):  # lane markings
            at = row_centre + float(rng.choice([-1, 1]) * rng.uniform(1.4, 5.0)) * row_width
            self._line(region, at, np.maximum(1.0, 0.07 * row_width), rng.uniform(190, 250))

    def _platform(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
        """A station platform on one side of the ego track (mask 0): a flat paved surface from its
        edge, 1.6-2 m from the track centre (1.05-1.35 track widths), outward, a dark strip at the
        edge (its face, in shadow) and a white or yellow safety line a little way in. The renderer
        draws none; next to one, a model that has not seen one takes the smooth surface for the bed.
        """
        ground = _ground_rows(mask)
        if ground is None:
            return
        horizon, below, row_width, row_centre = ground
        first, h, w = int(below[0]), self.height, self.width
        side = float(rng.choice([-1, 1]))
        edge = rng.uniform(1.05, 1.35)
        far = edge + (rng.uniform(2.0, 10.0) if rng.random() < 0.7 else 1e3)
        across = side * (np.arange(w, dtype=np.float32)[None, :] - row_centre[:, None]) / row_width[:, None]
        surface = (across >= edge) & (across <= far)
        start = int(rng.uniform(0.0, 0.6) * below.size) if rng.random() < 0.5 else 0  # it may end some way ahead
        surface[:start] = False
        _, paving = _paving(rng, (below.size, w), (70, 210), 0.2, 0.1)
        if rng.random() < 0.4:  # slabs or tiles: courses that shrink with distance
            depth = 1.0 / np.maximum(below - horizon, 0.5)
            courses = np.cos(depth * rng.uniform(100, 300) * h / 144)[:, None, None]
            paving *= 1.0 - 0.1 * (courses > 0.8)
        region = image[first:]  # a view: the lines below draw into the image itself
        region[surface] = np.clip(paving, 0, 255).astype(np.uint8)[surface]
        region, row_centre, row_width = region[start:], row_centre[start:], row_width[start:]
        face = rng.uniform(0.05, 0.15)
        self._line(region, row_centre + side * (edge - face / 2) * row_width, np.maximum(1.0, face * row_width),
                   rng.uniform(15, 70))
        if rng.random() < 0.75:
            line_at = edge + rng.uniform(0.25, 0.6)
            colour = rng.uniform(200, 250) if rng.random() < 0.5 else None
            thickness = np.maximum(1.0, rng.uniform(0.04, 0.1) * row_width)
            if colour is None:  # yellow (RGB)
                colour = np.array([rng.uniform(200, 250), rng.uniform(170, 220), rng.uniform(20, 80)], np.float32)
            self._line(region, row_centre + side * line_at * row_width, thickness, colour)

    @staticmethod
    def _line(region: np.ndarray, x: np.ndarray, thickness: np.ndarray, value: float | np.ndarray) -> None:
        """A line on the ground: on each row, the pixels within thickness / 2 of column ``x``, drawn
        in ``value`` (a grey level, or one per channel)."""
        cols = np.arange(region.shape[1], dtype=np.float32)[None, :]
        near = np.clip(thickness[:, None] / 2 + 0.5 - np.abs(cols - x[:, None]), 0.0, 1.0)[..., None]
        region[:] = np.clip(region * (1 - near) + value * near, 0, 255).astype(np.uint8)

    def _distractor(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
        """Another render's track (its area widened to a bed) pasted beside the ego track, mask 0."""
        other = self._other(rng)
        area = self.masks[other]
        rows = np.flatnonzero(area.any(axis=1))
        if rows.size < 2 or not mask.any():
            return
        widths = area.sum(axis=1).astype(np.float32)
        bed = cv2.dilate(area, cv2.getStructuringElement(cv2.MORPH_RECT, (max(3, int(widths.max() * 0.5)) | 1, 1)))
        bottom = mask[-1] if mask[-1].any() else mask[np.flatnonzero(mask.any(axis=1))[-1]]
        ego_cols = np.flatnonzero(bottom > 0.5)
        ego_width = max(4, ego_cols.size)
        ego_centre = ego_cols.mean()
        other_cols = np.flatnonzero(area[rows[-1]])
        other_centre = other_cols.mean()
        shift = ego_centre + rng.choice([-1, 1]) * ego_width * rng.uniform(1.4, 3.0) - other_centre
        matrix = np.float32([[1, 0, shift], [0, 1, 0]])
        size = (self.width, self.height)
        paste = cv2.warpAffine(bed, matrix, size, flags=cv2.INTER_NEAREST) > 0
        source = cv2.warpAffine(self.images[other], matrix, size, flags=cv2.INTER_LINEAR)
        keep = cv2.dilate((mask > 0).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
        paste &= ~keep
        image[paste] = source[paste]

    def _texture(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
        """Low-frequency colour noise or a crop of another render blended in outside the ego area."""
        h, w = self.height, self.width
        outside = 1.0 - cv2.GaussianBlur(mask, (0, 0), max(1.0, w / 200))
        if rng.random() < 0.5:
            cells = (int(rng.integers(2, 9)), int(rng.integers(3, 15)))
            noise = rng.uniform(0.5, 1.5, (*cells, 3)).astype(np.float32)
            noise = cv2.resize(noise, (w, h), interpolation=cv2.INTER_CUBIC)
            if rng.random() < 0.5:  # finer grain on top
                fine = rng.uniform(0.8, 1.2, (h // 4 + 1, w // 4 + 1, 1)).astype(np.float32)
                noise = noise * cv2.resize(fine, (w, h), interpolation=cv2.INTER_LINEAR)[..., None]
            strength = rng.uniform(0.4, 1.0) * outside[..., None]
            factor = 1.0 + (noise - 1.0) * strength
            image[:] = np.clip(image.astype(np.float32) * factor, 0, 255).astype(np.uint8)
        else:
            other = self.images[self._other(rng)]
            scale = rng.uniform(1.0, 3.0)
            crop_w, crop_h = max(2, int(w / scale)), max(2, int(h / scale))
            x0, y0 = int(rng.integers(0, w - crop_w + 1)), int(rng.integers(0, h - crop_h + 1))
            patch = cv2.resize(other[y0:y0 + crop_h, x0:x0 + crop_w], (w, h), interpolation=cv2.INTER_LINEAR)
            if rng.random() < 0.5:
                patch = patch[:, ::-1]
            alpha = (rng.uniform(0.25, 0.7) * outside)[..., None]
            image[:] = np.clip(image * (1 - alpha) + patch * alpha, 0, 255).astype(np.uint8)

    def _geometric(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Random scale/crop (other aspect ratios and fields of view), camera roll and horizontal flip."""
        h, w = self.height, self.width
        crop_w, crop_h = float(w), float(h)
        if rng.random() < 0.6:
            scale = rng.uniform(0.55, 1.0)
            crop_w = w * scale
            crop_h = h * float(np.clip(scale * rng.uniform(0.75, 1.35), 0.45, 1.0))
        centre_x = w / 2 + rng.uniform(-1, 1) * (w - crop_w) / 2 * 0.8
        centre_y = h - crop_h / 2 - rng.uniform(0, 1) * (h - crop_h)
        angle = math.radians(rng.uniform(-8, 8)) if rng.random() < 0.6 else 0.0
        flip = rng.random() < 0.5
        sx, sy = crop_w / w, crop_h / h
        c, s = math.cos(angle), math.sin(angle)
        # source = centre + R(angle) @ diag(sx, sy) @ (dest - dest_centre)
        linear = np.array([[c * sx, -s * sy], [s * sx, c * sy]])
        if flip:
            linear = linear @ np.diag([-1.0, 1.0])
        dest_centre = np.array([(w - 1) / 2, (h - 1) / 2])
        offset = np.array([centre_x - 0.5, centre_y - 0.5]) - linear @ dest_centre
        matrix = np.hstack([linear, offset[:, None]]).astype(np.float32)
        if not flip and angle == 0.0 and crop_w == w and crop_h == h:
            return image, mask
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        image = cv2.warpAffine(image, matrix, (w, h), flags=flags, borderMode=cv2.BORDER_REFLECT_101)
        mask = cv2.warpAffine(mask, matrix, (w, h), flags=flags, borderMode=cv2.BORDER_REFLECT_101)
        return image, mask

    def _hood(self, image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
        """A cab hood or dashboard: a dark polygon over the bottom 0-20 %; the target is 0 there."""
        h, w = self.height, self.width
        depth = rng.uniform(0.02, 0.2) * h
        top = h - depth
        xs = np.linspace(0, w - 1, 7)
        bulge = rng.uniform(-0.6, 0.6) * depth
        ys = top + bulge * (1 - (2 * xs / (w - 1) - 1) ** 2) + rng.uniform(-0.1, 0.1, xs.size) * depth
        polygon = np.concatenate([np.stack([xs, ys], 1), [[w - 1, h + 1], [0, h + 1]]]).astype(np.int32)
        hood = np.zeros((h, w), np.uint8)
        cv2.fillPoly(hood, [polygon], 1)
        base = rng.uniform(5, 70, 3)
        shade = base[None, None, :] * (1 + rng.normal(0, 0.08, (h, w, 1)))
        shade *= np.linspace(1.2, 0.7, h)[:, None, None]
        inside = hood > 0
        image[inside] = np.clip(shade, 0, 255).astype(np.uint8)[inside]
        mask[inside] = 0.0

    def _night(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Night: dark, gamma, blue or infrared (grey) tint, a headlight pool, sensor noise."""
        h, w = self.height, self.width
        img = image.astype(np.float32) / 255
        infrared = rng.random() < 0.4
        if infrared:
            grey = img.mean(axis=2, keepdims=True)
            img = np.repeat(grey, 3, axis=2) * np.array(rng.uniform(0.9, 1.1, 3), np.float32)
        img = img ** rng.uniform(1.2, 2.2) * rng.uniform(0.15, 0.5)
        if not infrared:
            img *= np.array([rng.uniform(0.6, 0.9), rng.uniform(0.7, 1.0), rng.uniform(0.9, 1.3)], np.float32)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        cx, cy = w / 2 + rng.uniform(-0.1, 0.1) * w, h * rng.uniform(0.75, 1.05)
        rx, ry = w * rng.uniform(0.15, 0.4), h * rng.uniform(0.2, 0.45)
        pool = np.exp(-(((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2))
        img *= 1 + rng.uniform(1.0, 4.0) * pool[..., None]
        img += rng.normal(0, rng.uniform(0.01, 0.04), img.shape).astype(np.float32)
        return np.clip(img * 255, 0, 255).astype(np.uint8)

    def _hud(self, image: np.ndarray, rng: np.random.Generator) -> None:
        """Burnt-in text (time stamps, speeds, camera names) in one or two corners."""
        h, w = self.height, self.width
        scale = h / 400 * rng.uniform(0.6, 1.4)
        colour = tuple(int(v) for v in (rng.choice([[255, 255, 255], [255, 255, 0], [0, 255, 0], [230, 230, 230]])))
        for _ in range(int(rng.integers(1, 3))):
            text = rng.choice([
                f"20{rng.integers(10, 25)}-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d} "
                f"{rng.integers(0, 24):02d}:{rng.integers(0, 60):02d}:{rng.integers(0, 60):02d}",
                f"{rng.integers(0, 160)} km/h", f"CAM {rng.integers(1, 9)}", f"KM {rng.uniform(0, 400):.3f}"])
            thickness = max(1, int(round(scale * 2)))
            (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
            x = int(rng.integers(2, 8)) if rng.random() < 0.5 else max(0, w - tw - int(rng.integers(2, 8)))
            y = th + int(rng.integers(2, 8)) if rng.random() < 0.6 else h - int(rng.integers(2, 8))
            cv2.putText(image, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


class _TrainSet(torch.utils.data.Dataset):
    """The renders' training indices, then (when given) each labelled real frame ``real_repeats`` times."""

    def __init__(self, randomiser: Randomiser, indices: np.ndarray, real: Randomiser | None = None,
                 real_repeats: int = 0) -> None:
        self.randomiser, self.indices, self.epoch = randomiser, indices, 0
        self.real, self.real_count = real, (len(real.images) * real_repeats if real is not None else 0)

    def __len__(self) -> int:
        return len(self.indices) + self.real_count

    def __getitem__(self, item: int) -> tuple[torch.Tensor, torch.Tensor]:
        if item < len(self.indices):
            image, mask = self.randomiser(int(self.indices[item]), self.epoch)
        else:  # each repeat draws its own randomisation (the stream is keyed by the item)
            assert self.real is not None
            image, mask = self.real(item - len(self.indices), self.epoch, len(self.real.images))
        return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1), torch.from_numpy(mask)[None]


# -- the network -----------------------------------------------------------------------------------
def _half(size: tuple[int, int]) -> tuple[int, int]:
    return (size[0] + 1) // 2, (size[1] + 1) // 2  # a 3x3, stride-2, pad-1 convolution


class _SeparableBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cin, 3, stride, dilation, dilation=dilation, groups=cin, bias=False),
            nn.BatchNorm2d(cin), nn.ReLU(inplace=True),
            nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class TrackAreaNet(nn.Module):
    """Compact U-Net of depthwise-separable blocks for a fixed input size; 3xHxW RGB [0,1] -> 1xHxW logits."""

    CHANNELS = (16, 32, 64, 96, 160)

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        c = self.CHANNELS
        self.sizes = [(height, width)]
        for _ in range(len(c)):
            self.sizes.append(_half(self.sizes[-1]))
        # sizes[k] is the resolution after k stride-2 steps; the stem is step 1
        self.stem = nn.Sequential(nn.Conv2d(3, c[0], 3, 2, 1, bias=False), nn.BatchNorm2d(c[0]), nn.ReLU(inplace=True),
                                  _SeparableBlock(c[0], c[0]))
        self.down = nn.ModuleList([
            nn.Sequential(_SeparableBlock(c[i], c[i + 1], stride=2), _SeparableBlock(c[i + 1], c[i + 1]))
            for i in range(len(c) - 1)])
        self.context = nn.Sequential(_SeparableBlock(c[-1], c[-1], dilation=2),
                                     _SeparableBlock(c[-1], c[-1], dilation=4))
        self.up = nn.ModuleList([
            nn.Sequential(_SeparableBlock(c[i + 1] + c[i], c[i]), _SeparableBlock(c[i], c[i]))
            for i in reversed(range(len(c) - 1))])
        self.head = nn.Conv2d(c[0], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """1x3xHxW RGB in [0, 1] -> 1x1xHxW logits."""
        x = (x - IMAGE_MEAN) / IMAGE_STD
        x = self.stem(x)
        skips = [x]
        for block in self.down:
            x = block(x)
            skips.append(x)
        x = self.context(x)
        skips.pop()
        for level, block in zip(range(len(self.up), 0, -1), self.up, strict=True):
            skip = skips.pop()
            x = F.interpolate(x, size=self.sizes[level], mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], dim=1))
        x = self.head(x)
        return F.interpolate(x, size=self.sizes[0], mode="bilinear", align_corners=False)


def dice_bce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """BCE plus soft Dice (per image, averaged); target pixels below 0 (a real frame's rows its label
    does not cover) take no part."""
    if bool((target < 0).any()):
        valid = (target >= 0).float()
        target = target.clamp(min=0)
        bce = F.binary_cross_entropy_with_logits(logits, target, weight=valid, reduction="sum") / valid.sum()
        prob = torch.sigmoid(logits) * valid
    else:
        bce = F.binary_cross_entropy_with_logits(logits, target)
        prob = torch.sigmoid(logits)
    inter = (prob * target).sum(dim=(1, 2, 3))
    total = prob.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3))
    dice = 1 - (2 * inter + 1) / (total + 1)
    return bce + dice.mean()


def random_convolution(images: torch.Tensor, share: float, generator: torch.Generator) -> torch.Tensor:
    """RandConv (Xu et al., ICLR 2021): a ``share`` of the batch's images (N x 3 x H x W in [0, 1])
    passed through one random convolution (kernel 1, 3, 5 or 7; weights drawn anew for each
    batch), rescaled to each image's own per-channel mean and spread and blended with the image
    by a random weight. Local texture and colour change, the shapes stay: the renders' textures
    are what the real frames do not share."""
    chosen = torch.rand(images.shape[0], generator=generator) < share
    if not bool(chosen.any()):
        return images
    picked = images[chosen]
    size = int((1, 3, 5, 7)[int(torch.randint(4, (1,), generator=generator))])
    weight = torch.randn(3, 3, size, size, generator=generator) / math.sqrt(3 * size * size)
    filtered = F.conv2d(picked, weight.to(picked.device), padding=size // 2)
    mean, spread = picked.mean(dim=(2, 3), keepdim=True), picked.std(dim=(2, 3), keepdim=True)
    filtered = (filtered - filtered.mean(dim=(2, 3), keepdim=True)) / (filtered.std(dim=(2, 3), keepdim=True) + 1e-6)
    filtered = filtered * spread + mean
    blend = torch.rand(picked.shape[0], 1, 1, 1, generator=generator).to(picked.device)
    out = images.clone()
    out[chosen] = (blend * picked + (1 - blend) * filtered).clamp(0, 1)
    return out


# -- evaluation ------------------------------------------------------------------------------------
def _iou(pred: np.ndarray, truth: np.ndarray) -> float:
    union = np.logical_or(pred, truth).sum()
    return float(np.logical_and(pred, truth).sum() / union) if union else 1.0


def predict(model: nn.Module, images_rgb: np.ndarray, device: str, batch: int = 32) -> np.ndarray:
    """Probabilities (N x H x W float32) for RGB uint8 images already at the model's input size."""
    model.eval()
    out = []
    with torch.no_grad():
        for first in range(0, len(images_rgb), batch):
            x = torch.from_numpy(images_rgb[first:first + batch]).permute(0, 3, 1, 2).float().div(255).to(device)
            out.append(torch.sigmoid(model(x))[:, 0].cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0,), np.float32)


def labelled_frames(folders: list[Path], width: int, height: int, keep: Callable[[str], bool] = lambda name: True
                    ) -> Iterator[tuple[Path, str, dict | None, tuple[int, int], np.ndarray]]:
    """Each frame of ``folders``' labels.json whose name ``keep`` accepts and that reads, in name order:
    its folder, name, label (None: a null frame), original (height, width) and RGB uint8 at the model's
    input size."""
    for folder in folders:
        for name, label in sorted(json.loads((folder / "labels.json").read_text()).items()):
            if not keep(name):
                continue
            frame = cv2.imread(str(folder / name), cv2.IMREAD_COLOR)
            if frame is None:
                continue
            small = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
            yield folder, name, label, frame.shape[:2], cv2.cvtColor(small, cv2.COLOR_BGR2RGB)


def real_training_frames(folders: list[Path], width: int, height: int, split: str | None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The labelled real frames of ``split`` (``benchmarks/rail.py``'s: the last number of the name even or
    odd; None: all) at the model's input size: RGB uint8 N x H x W x 3 and float32 targets, 1 between the
    rails and 0 beside them on the rows the label covers, -1 (no loss) on the rows it does not; a null
    frame's target is 0 everywhere."""
    images, targets = [], []
    for _, _, label, (frame_h, frame_w), image in labelled_frames(folders, width, height,
                                                                   lambda name: in_split(name, split)):
        images.append(image)
        target = np.zeros((height, width), np.float32)
        if label is not None:
            sx, sy = width / frame_w, height / frame_h
            scaled = {side: [[x * sx, y * sy] for x, y in label[side]] for side in ("left", "right")}
            area, rows = label_area(scaled, height, width)
            target[area] = 1.0
            target[~rows.any(axis=1)] = -1.0
        targets.append(target)
    if not images:
        return np.zeros((0, height, width, 3), np.uint8), np.zeros((0, height, width), np.float32)
    return np.stack(images), np.stack(targets)


class RealCheck:
    """Real labelled frames, preloaded at the model's input size; IoU on labelled rows, area on null frames."""

    def __init__(self, folders: list[Path], width: int, height: int, skip_split: str | None = None) -> None:
        """``skip_split``: frames of this split are left out (they were trained on); None: none."""
        self.names, self.inputs, self.labels, self.shapes = [], [], [], []
        keep = (lambda name: True) if skip_split is None else (lambda name: not in_split(name, skip_split))
        for folder, name, label, shape, image in labelled_frames(folders, width, height, keep):
            self.names.append(f"{folder.name}/{name}")
            self.shapes.append(shape)
            self.inputs.append(image)
            self.labels.append(label)
        self.inputs = np.stack(self.inputs) if self.inputs else np.zeros((0, height, width, 3), np.uint8)

    def __len__(self) -> int:
        return len(self.names)

    def evaluate(self, model: nn.Module, device: str) -> dict:
        """``{"iou": mean IoU on labelled frames, "null_area": mean predicted share on null frames, ...}``."""
        probs = predict(model, self.inputs, device)
        ious, null_areas, per_frame = [], [], {}
        for name, prob, label, (h, w) in zip(self.names, probs, self.labels, self.shapes, strict=True):
            full = cv2.resize(prob, (w, h), interpolation=cv2.INTER_LINEAR) > 0.5
            if label is None:
                null_areas.append(float(full.mean()))
                per_frame[name] = {"null_area": null_areas[-1]}
                continue
            area, rows = label_area(label, h, w)
            if not rows.any():
                continue
            ious.append(_iou(full[rows], area[rows]))
            per_frame[name] = {"iou": ious[-1]}
        return {"iou": float(np.mean(ious)) if ious else None, "frames": len(ious),
                "null_area": float(np.mean(null_areas)) if null_areas else None, "null_frames": len(null_areas),
                "per_frame": per_frame}


# -- export ----------------------------------------------------------------------------------------
def export_onnx(model: nn.Module, path: Path, height: int, width: int) -> float:
    """Writes the ONNX file; returns the largest |cv2.dnn - torch| logit difference on random inputs."""
    model = model.cpu().eval()
    dummy = torch.rand(1, 3, height, width, generator=torch.Generator().manual_seed(0))
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # the TorchScript exporter: its graphs are the ones cv2.dnn reads
        warnings.simplefilter("ignore")
        torch.onnx.export(model, dummy, str(path), opset_version=ONNX_OPSET, input_names=["image"],
                          output_names=["logits"], do_constant_folding=True, dynamo=False)
    net = cv2.dnn.readNetFromONNX(str(path))
    worst = 0.0
    for probe in (dummy, torch.zeros_like(dummy), torch.ones_like(dummy)):
        net.setInput(probe.numpy())
        ours = net.forward()
        with torch.no_grad():
            theirs = model(probe).numpy()
        if ours.shape != theirs.shape:
            raise RuntimeError(f"cv2.dnn output shape {ours.shape} != torch {theirs.shape}")
        worst = max(worst, float(np.abs(ours - theirs).max()))
    return worst


def load_exported_weights(model: nn.Module, path: Path) -> None:
    """Sets ``model``'s weights to those of an ONNX file ``export_onnx`` wrote for the same network.

    The exporter folds each batch norm into the convolution before it (a weight and a bias); here
    each convolution takes the folded weight and its batch norm becomes the identity plus that bias,
    so the model in eval mode computes what the file does. Keep the norms in eval mode while
    training (``fix_batch_norms``): their batch statistics would undo the folding. The weights do not
    depend on the input size, so a model may be fine-tuned at another ``--size``. ValueError names the
    file where it is not such a model.
    """
    import onnx  # the `onnx` extra; only this option needs it
    from onnx import numpy_helper

    try:
        graph = onnx.load(str(path)).graph
    except Exception as error:  # a missing, truncated or foreign file: one line naming it
        raise ValueError(f"{path}: not an ONNX model ({error})") from None
    weights = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    exported = [node for node in graph.node if node.op_type == "Conv"]
    modules = list(model.modules())
    convolutions = [(module, modules[i + 1] if i + 1 < len(modules) and isinstance(modules[i + 1], nn.BatchNorm2d)
                     else None) for i, module in enumerate(modules) if isinstance(module, nn.Conv2d)]
    if len(exported) != len(convolutions):
        raise ValueError(f"{path}: {len(exported)} convolutions, this network has {len(convolutions)} "
                         "(exported by another network)")
    for (conv, norm), node in zip(convolutions, exported, strict=True):
        weight = weights[node.input[1]]
        bias = weights[node.input[2]] if len(node.input) > 2 else np.zeros(weight.shape[0], np.float32)
        if tuple(conv.weight.shape) != weight.shape:
            raise ValueError(f"{path}: a convolution of shape {weight.shape} where this network has "
                             f"{tuple(conv.weight.shape)} (exported by another network)")
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(weight.copy()))
            if norm is None:
                conv.bias.copy_(torch.from_numpy(bias.copy()))
            else:
                norm.weight.fill_(1.0)
                norm.bias.copy_(torch.from_numpy(bias.copy()))
                norm.running_mean.zero_()
                norm.running_var.fill_(1.0 - norm.eps)


def fix_batch_norms(model: nn.Module) -> None:
    """Batch norms to eval mode (their running statistics used and kept), the rest left training."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eval()


# -- training --------------------------------------------------------------------------------------
def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - third-party code (albumentations' fallbacks) may use the global state
    torch.manual_seed(seed)


def _parse_size(text: str) -> tuple[int, int]:
    width, height = (int(v) for v in text.lower().split("x"))
    return width, height


def main(argv: list[str] | None = None) -> dict:
    """Trains, exports and writes the sidecar; returns the sidecar's contents."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="ONNX file to write (sidecar: same name, .json)")
    parser.add_argument("--renders", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=18)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", default="256x144", help="model input WIDTHxHEIGHT")
    parser.add_argument("--real", type=Path, action="append", default=[],
                        help="folder of real frames + labels.json, checked after each epoch (repeatable)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--neighbour-copies", type=float, default=0.0,
                        help="share of samples given perspective copies of the ego track beside it (0.5 gave real "
                             "IoU 0.628 against 0.656 without, 18 epochs: off by default)")
    parser.add_argument("--paved", type=float, default=0.12,
                        help="share of samples turned into street running (paved ground, grooved rails, a second "
                             "tram track, lane markings)")
    parser.add_argument("--platforms", type=float, default=0.0,
                        help="share of samples given a station platform beside the ego track (off by default)")
    parser.add_argument("--randconv", type=float, default=0.0,
                        help="share of training samples passed through a random convolution (RandConv; off by "
                             "default: measured on docs/benchmarks/real-footage.md)")
    parser.add_argument("--train-real", type=Path, action="append", default=[],
                        help="folder of labelled real frames (labels.json) to train on beside the renders "
                             "(repeatable; off by default: the shipped model is trained on renders only)")
    parser.add_argument("--train-split", choices=["even", "odd"], default=None,
                        help="train only on the --train-real frames of this split (benchmarks/rail.py --split); "
                             "--real then checks the frames of the other split only")
    parser.add_argument("--real-repeats", type=int, default=8,
                        help="times each --train-real frame is drawn per epoch (each with its own randomisation)")
    parser.add_argument("--init", type=Path, default=None,
                        help="fine-tune this exported model instead of training from random weights")
    parser.add_argument("--cache", type=Path, default=None, help="folder for an npz of the renders")
    parser.add_argument("--workers", type=int, default=None, help="augmentation processes (default: 1 if threads > 1)")
    args = parser.parse_args(argv)
    started = time.time()
    torch.set_num_threads(max(1, args.threads))
    cv2.setNumThreads(1)
    _seed_everything(args.seed)
    width, height = _parse_size(args.size)
    model = TrackAreaNet(height, width)  # before the renders: a bad --init is told in seconds
    if args.init is not None:
        try:
            load_exported_weights(model, args.init)
        except ValueError as error:
            parser.error(f"--init {error}")
        print(f"fine-tuning {args.init}", flush=True)

    images, masks = render_set(args.seed, args.renders, width, height, args.threads, args.cache)
    rendered = time.time() - started
    val_count = max(1, int(round(args.renders * 0.05))) if args.renders > 1 else 0
    train_indices = np.arange(args.renders - val_count)
    val_indices = np.arange(args.renders - val_count, args.renders)
    print(f"rendered {args.renders} scenes at {width}x{height} in {rendered:.0f} s "
          f"({len(train_indices)} train, {val_count} val)", flush=True)

    trained_split = (args.train_split or "all") if args.train_real else None
    skip = None if trained_split is None else args.train_split
    if trained_split == "all" and set(args.real) & set(args.train_real):
        print("warning: --real checks frames that --train-real trains on", flush=True)
    real = RealCheck(args.real, width, height, skip_split=skip) if args.real else None
    if real is not None:
        print(f"real check: {len(real)} frames from {', '.join(map(str, args.real))}", flush=True)

    model = model.to(args.device)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters", flush=True)
    real_images, real_targets = real_training_frames(args.train_real, width, height, args.train_split)
    if args.train_real:
        print(f"training on {len(real_images)} labelled real frames ({trained_split}) x {args.real_repeats} "
              f"beside the renders", flush=True)
    real_set = Randomiser(real_images, real_targets, args.seed + 1, pastes=False) if len(real_images) else None
    dataset = _TrainSet(Randomiser(images, masks, args.seed, args.neighbour_copies, paved=args.paved,
                                    platforms=args.platforms), train_indices,
                        real_set, args.real_repeats)
    workers = args.workers if args.workers is not None else (1 if args.threads > 1 and len(train_indices) > 64 else 0)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch, shuffle=True, drop_last=len(train_indices) >= args.batch,
        num_workers=workers, generator=torch.Generator().manual_seed(args.seed),
        worker_init_fn=lambda _: (torch.set_num_threads(1), cv2.setNumThreads(1)),
        multiprocessing_context="fork" if workers else None, persistent_workers=False)
    steps = max(1, args.epochs * len(loader))
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-5)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=args.lr, total_steps=steps, pct_start=0.05,
                                                   anneal_strategy="cos", div_factor=10, final_div_factor=100)
    randconv_generator = torch.Generator().manual_seed(args.seed + 2)
    history = []
    val_iou = _synthetic_iou(model, images, masks, val_indices, args.device) if args.epochs == 0 else None
    real_result = None
    interrupted = False
    for epoch in range(args.epochs):
        t0 = time.time()
        dataset.epoch = epoch
        model.train()
        if args.init is not None:
            fix_batch_norms(model)
        losses = []
        try:
            for x, y in loader:
                x = x.to(args.device).float().div_(255)
                if args.randconv > 0:
                    x = random_convolution(x, args.randconv, randconv_generator)
                y = y.to(args.device)
                loss = dice_bce(model(x), y)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                schedule.step()
                losses.append(float(loss.detach()))
        except KeyboardInterrupt:  # Ctrl-C (SIGINT): stop here and still evaluate and export what was learned
            interrupted = True
            print(f"interrupted in epoch {epoch + 1}: exporting the model as it is", flush=True)
        val_iou = _synthetic_iou(model, images, masks, val_indices, args.device)
        entry = {"epoch": epoch + 1, "loss": float(np.mean(losses)) if losses else None, "val_iou": val_iou,
                 "seconds": time.time() - t0, "complete": not interrupted}
        line = f"epoch {epoch + 1}/{args.epochs}: loss {_fmt(entry['loss'])}, synthetic val IoU {val_iou:.3f}"
        if real is not None and len(real):
            real_result = real.evaluate(model, args.device)
            entry["real_iou"], entry["real_null_area"] = real_result["iou"], real_result["null_area"]
            line += f", real IoU {_fmt(real_result['iou'])} ({real_result['frames']} frames), " \
                    f"null-frame area {_fmt(real_result['null_area'])} ({real_result['null_frames']} frames)"
        print(f"{line}, {entry['seconds']:.0f} s", flush=True)
        history.append(entry)
        if interrupted:
            break

    train_seconds = time.time() - started
    max_diff = export_onnx(model, args.out, height, width)
    if max_diff >= 1e-3:
        raise SystemExit(f"cv2.dnn output differs from torch by {max_diff:.2e} (>= 1e-3)")
    sidecar = {
        "input_width": width, "input_height": height,
        "input": "1x3xHxW float32 RGB in [0, 1] (image / 255), normalised inside the model",
        "output": "1x1xHxW logits of the ego track area (sigmoid -> probability)",
        "seed": args.seed, "renders": args.renders, "neighbour_copies": args.neighbour_copies, "paved": args.paved,
        "platforms": args.platforms, "randconv": args.randconv,
        "init": str(args.init) if args.init is not None else None,
        "epochs": args.epochs,
        "epochs_done": len(history) - int(interrupted), "interrupted": interrupted, "parameters": params,
        "onnx_opset": ONNX_OPSET, "cv2_vs_torch_max_abs_diff": max_diff,
        "synthetic_val_iou": val_iou, "synthetic_val_frames": int(val_count),
        "real_iou": real_result["iou"] if real_result else None,
        "real_frames": real_result["frames"] if real_result else None,
        "real_null_area": real_result["null_area"] if real_result else None,
        "real_null_frames": real_result["null_frames"] if real_result else None,
        "real_dirs": [str(p) for p in args.real],
        "trained_on_real": {"dirs": [str(p) for p in args.train_real], "split": trained_split,
                            "frames": int(len(real_images)), "repeats": args.real_repeats} if args.train_real else None,
        "render_seconds": round(rendered, 1), "training_seconds": round(train_seconds, 1),
        "threads": args.threads, "device": args.device,
        "history": history,
        "command": "python tools/train_track_model.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
    }
    args.out.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n")
    size_kb = os.path.getsize(args.out) / 1024
    print(f"wrote {args.out} ({size_kb:.0f} KB, cv2.dnn vs torch {max_diff:.1e}) and its sidecar; "
          f"{train_seconds:.0f} s in all", flush=True)
    return sidecar


def _synthetic_iou(model: nn.Module, images: np.ndarray, masks: np.ndarray, indices: np.ndarray,
                   device: str) -> float:
    probs = predict(model, images[indices], device)
    return float(np.mean([_iou(p > 0.5, masks[i] > 0) for p, i in zip(probs, indices, strict=True)]))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()

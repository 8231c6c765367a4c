"""The speed-ups of issue 28 that promise the same bytes: each fails when its shortcut stops giving
what the slower original gives."""

import cv2
import numpy as np
import pytest

from synrail.compose.harmony_kernels import (
    apply_affine_8bit,
    apply_lab_lut_8bit,
    median,
    percentile_linear,
    to_lab,
    to_lab_8bit,
)
from synrail.compose.quality import _mean_lab


@pytest.mark.parametrize("kind", ["codes", "normal", "ties"])
def test_percentile_and_median_are_numpys_to_the_bit(kind):
    rng = np.random.default_rng(0)
    sizes = [*range(1, 120), 511, 512, 1867, 2048, 16384]
    for n in sizes:
        if kind == "codes":
            values = rng.integers(0, 256, (n, 3)).astype(np.float32) / 255.0
        elif kind == "normal":
            values = rng.standard_normal((n, 3)).astype(np.float32) * 30
        else:
            values = rng.integers(0, 3, (n, 3)).astype(np.float32)
        for q in (99.0, 95, 50.0, 1.0):
            for x in (values, values[:, 0]):
                expected, got = np.percentile(x, q, axis=0), percentile_linear(x, q)
                assert np.array_equal(expected, got) and np.asarray(got).dtype == np.asarray(expected).dtype, (n, q)
        for x in (values[:, :2], values[:, 0]):
            expected, got = np.median(x, axis=0), median(x)
            assert np.array_equal(expected, got) and np.asarray(got).dtype == np.asarray(expected).dtype, n


def every_colour() -> np.ndarray:
    codes = np.arange(1 << 24, dtype=np.uint32)
    return np.stack([codes & 255, (codes >> 8) & 255, codes >> 16], axis=1).astype(np.uint8)


def test_colour_conversions_as_one_row_are_the_per_pixel_ones():
    # OpenCV converts row by row: N x 1 x 3 pays its per-row cost per pixel, 1 x N x 3 once. The
    # kernels now pass one row; every 8-bit colour must convert as it did one pixel at a time.
    pixels = every_colour()
    column = pixels.reshape(-1, 1, 3)
    lab = cv2.cvtColor(column, cv2.COLOR_BGR2Lab).reshape(-1, 3)
    assert np.array_equal(to_lab_8bit(pixels), lab.astype(np.float32) * np.float32([100 / 255, 1, 1])
                          - np.float32([0, 128, 128]))
    identity = np.full((256, 1, 3), np.arange(256, dtype=np.uint8)[:, None, None])
    assert np.array_equal(apply_lab_lut_8bit(pixels, identity),
                          cv2.cvtColor(lab.reshape(-1, 1, 3), cv2.COLOR_Lab2BGR).reshape(-1, 3))
    transform = np.float32([[1.1, 0.05, 0.02, 0.01], [0.01, 0.95, 0.03, -0.01], [0.0, 0.1, 1.2, 0.005]])
    scaled = np.hstack([transform[:, :3], transform[:, 3:] * 255.0]).astype(np.float32)
    assert np.array_equal(apply_affine_8bit(pixels, transform), cv2.transform(column, scaled).reshape(-1, 3))
    sample = pixels[::97]
    float_lab = cv2.cvtColor(sample.reshape(-1, 1, 3).astype(np.float32) / 255.0, cv2.COLOR_BGR2Lab).reshape(-1, 3)
    assert np.array_equal(to_lab(sample), float_lab)
    assert np.array_equal(_mean_lab(sample), float_lab.mean(axis=0))


def test_harmonized_object_is_the_object_of_the_harmonized_image():
    # the paste takes back only the object's pixels: the ring backend hands them over without
    # building the whole output; they must be exactly those of harmonize's output
    from synrail.compose.harmonizers import GlobalLabHarmonizer, PoissonHarmonizer, RingHarmonizer

    rng = np.random.default_rng(2)
    image = cv2.GaussianBlur(rng.integers(0, 256, (120, 160, 3)).astype(np.uint8), (0, 0), 2.0)
    mask = np.zeros((120, 160), dtype=bool)
    cv2.ellipse(mask.view(np.uint8), (80, 70), (25, 40), 0, 0, 360, 1, -1)
    image[mask] = (image[mask] * 0.5 + (10, 60, 140)).astype(np.uint8)  # a tinted, darker object
    for harmonizer in (RingHarmonizer(), GlobalLabHarmonizer(), PoissonHarmonizer()):
        expected = harmonizer.harmonize(image, mask, object_height=90)[mask]
        assert np.array_equal(harmonizer.harmonized_object(image, mask, object_height=90), expected)
        if isinstance(harmonizer, RingHarmonizer):
            assert not np.array_equal(expected, image[mask])  # it does correct something
    tiny = np.zeros_like(mask)
    assert RingHarmonizer().harmonized_object(image, tiny).shape == (0, 3)

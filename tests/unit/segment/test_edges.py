"""Clean cutout edges: a guided-filter alpha without stair-steps, edge colours without the source background."""

import cv2
import numpy as np
import pytest

from synrail.segment.edges import decontaminate, edge_alpha, guided_filter
from synrail.sources.cutouts import cutout_from_mask

SCALE = 4
OBJECT_BGR, BACKGROUND_BGR = np.array([60.0, 170.0, 200.0]), np.array([140.0, 120.0, 100.0])


def _photo(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A lumpy object photographed at 1/4 of the resolution it is drawn at (so its edge pixels are mixed):
    the photo, its hard mask and the true outline at four times the resolution."""
    rng = np.random.default_rng(seed)
    height, width = 120, 160
    angles = np.sort(rng.uniform(0, 2 * np.pi, 7))
    radii = rng.uniform(0.6, 1.0, 7) * np.array([[40.0], [45.0]])
    polygon = np.stack([80 + radii[0] * np.cos(angles), 60 + radii[1] * np.sin(angles)], 1)
    fine = np.zeros((height * SCALE, width * SCALE), np.uint8)
    cv2.fillPoly(fine, [np.round(polygon * SCALE * 16).astype(np.int32)], 1, shift=4)
    drawn = np.where(fine[..., None] > 0, OBJECT_BGR, BACKGROUND_BGR) + rng.normal(0, 6, (*fine.shape, 3))
    photo = cv2.resize(drawn.astype(np.float32), (width, height), interpolation=cv2.INTER_AREA)
    mask = cv2.resize(fine.astype(np.float32), (width, height), interpolation=cv2.INTER_AREA) >= 0.5
    return np.clip(photo, 0, 255).astype(np.uint8), mask, fine > 0


def _staircase_error(alpha: np.ndarray, truth: np.ndarray) -> float:
    """The share of pixels near the true outline wrong once the alpha is pasted four times larger."""
    up = cv2.resize(alpha.astype(np.float32), truth.shape[::-1], interpolation=cv2.INTER_LINEAR) >= 0.5
    outline = truth ^ (cv2.erode(truth.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)
    near = cv2.dilate(outline.astype(np.uint8), np.ones((2 * SCALE + 1, 2 * SCALE + 1), np.uint8)) > 0
    return float((up[near] != truth[near]).mean())


def test_guided_filter_keeps_a_step_the_guide_has_and_smooths_one_it_has_not():
    guide = np.zeros((20, 40), np.float32)
    guide[:, 20:] = 1.0
    step = np.zeros((20, 40), np.float32)
    step[:, 20:] = 1.0
    assert np.allclose(guided_filter(guide, step, 2, 1e-3), step, atol=0.01)  # the edge is in the guide: kept
    flat = np.full((20, 40), 0.5, np.float32)
    smoothed = guided_filter(flat, step, 2, 1e-3)
    assert 0.3 < smoothed[10, 20] < 0.7 and 0.3 < smoothed[10, 19] < 0.7  # no edge in the guide: a ramp


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_edge_alpha_reads_as_the_mask_and_removes_the_stair_steps(seed):
    photo, mask, truth = _photo(seed)
    alpha = edge_alpha(photo, mask)
    assert alpha.dtype == np.float32 and 0.0 <= alpha.min() and alpha.max() <= 1.0
    assert np.array_equal(alpha >= 0.5, mask)  # thresholded, it is the mask
    assert np.array_equal(np.rint(alpha * 255) >= 128, mask)  # also as 8-bit alpha
    far = cv2.dilate(mask.astype(np.uint8), np.ones((7, 7), np.uint8)) == 0
    assert not alpha[far].any()  # no opacity away from the object
    hard, clean = _staircase_error(mask, truth), _staircase_error(alpha, truth)
    assert clean < 0.7 * hard, (clean, hard)


def test_decontaminate_takes_the_edge_colour_from_the_object():
    photo, mask, _ = _photo(0)
    alpha = edge_alpha(photo, mask)
    clean = decontaminate(photo, mask, alpha)
    outer = mask & ~(cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)  # the mask's outer pixels
    edge = outer | ((alpha > 0) & (alpha < 1))  # and the soft ramp: what a paste shows at the edge

    def from_object(colours: np.ndarray) -> float:
        return float(np.linalg.norm(colours.astype(float) - OBJECT_BGR, axis=1).mean())

    # the photo's edge pixels mix in the background; the clean ones are the object's colour (up to noise)
    assert from_object(photo[edge]) > 40
    assert from_object(clean[edge]) < 10
    inner = cv2.erode(mask.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    assert np.array_equal(clean[inner], photo[inner])  # the interior is untouched
    assert np.array_equal(clean[~mask & (alpha == 0)], photo[~mask & (alpha == 0)])


def test_cutout_with_clean_edges_keeps_the_mask_box_and_mask():
    photo, mask, _ = _photo(1)
    hard = cutout_from_mask(photo, mask)
    clean = cutout_from_mask(photo, mask, clean_edges=True)
    assert clean.shape == hard.shape
    assert np.array_equal(clean[..., 3] >= 128, hard[..., 3] == 255)
    assert ((clean[..., 3] > 0) & (clean[..., 3] < 255)).any()  # a soft edge
    assert not clean[clean[..., 3] == 0, :3].any()
    with pytest.raises(ValueError, match="differ in size"):
        edge_alpha(photo, mask[1:])

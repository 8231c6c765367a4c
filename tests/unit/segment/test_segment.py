from functools import partial
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from segment_anything import sam_model_registry
from tiny_models import build_tiny_sam

from synrail.segment.base import MaskResult, Prompt
from synrail.segment.cache import MaskCache
from synrail.segment.grabcut import GrabCutSegmenter
from synrail.segment.loader import load_segmenter
from synrail.segment.sam import CheckpointError, SamSegmenter, checkpoint_sha256
from synrail.storage.store import Store

H, W = 96, 128

MIXED_PROMPTS = [
    Prompt(box=(10, 12, 60, 70)),
    Prompt(points=((80.0, 40.0),), point_labels=(1,)),
    Prompt(box=(30, 20, 110, 90), points=((70.0, 50.0), (35.0, 25.0)), point_labels=(1, 0)),
    Prompt(box=(0, 0, W, H)),
    Prompt(points=((20.0, 20.0), (100.0, 80.0)), point_labels=(1, 1)),
    Prompt(box=(64, 10, 120, 50)),
]


def textured_image(seed: int = 0, height: int = H, width: int = W) -> np.ndarray:
    """Noisy grey-green stripes: a background GrabCut cannot separate by one flat colour."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    stripes = 40 * np.sin((xx + 0.5 * yy) / 5.0)
    base = np.stack([90 + stripes, 120 + stripes, 80 - 0.5 * stripes], axis=-1)
    return np.clip(base + rng.normal(0, 12, (height, width, 3)), 0, 255).astype(np.uint8)


def with_object(image: np.ndarray, shape: str, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Draw a filled, slightly noisy red object; returns the image and the object's true mask."""
    truth = np.zeros(image.shape[:2], np.uint8)
    if shape == "ellipse":
        cv2.ellipse(truth, (64, 48), (30, 20), 15, 0, 360, 1, thickness=-1)
    else:
        cv2.rectangle(truth, (40, 25), (90, 70), 1, thickness=-1)
    noise = np.random.default_rng(seed).normal(0, 8, image.shape)
    red = np.clip(np.array([40, 40, 200]) + noise, 0, 255).astype(np.uint8)
    out = image.copy()
    out[truth.astype(bool)] = red[truth.astype(bool)]
    return out, truth.astype(bool)


def loose_box(truth: np.ndarray, pad: int = 6) -> tuple[float, float, float, float]:
    ys, xs = np.nonzero(truth)
    return (float(xs.min() - pad), float(ys.min() - pad), float(xs.max() + 1 + pad), float(ys.max() + 1 + pad))


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


@pytest.fixture
def tiny_registered(monkeypatch):
    """A tiny architecture in segment-anything's registry, the way vit_b/l/h are."""
    monkeypatch.setitem(sam_model_registry, "tiny", build_tiny_sam)
    monkeypatch.setitem(sam_model_registry, "tiny_wide", partial(build_tiny_sam, embed_dim=48))


@pytest.fixture
def tiny_checkpoint(tmp_path) -> Path:
    path = tmp_path / "tiny_sam.pth"
    torch.save(build_tiny_sam(seed=3).state_dict(), path)
    return path


# -- SAM ------------------------------------------------------------------------------------------
def test_sam_gives_one_image_sized_mask_per_prompt_with_one_encoder_pass():
    sam = build_tiny_sam()
    encoder_calls = []
    sam.image_encoder.register_forward_hook(lambda *_: encoder_calls.append(1))
    segmenter = SamSegmenter.from_model(sam, "sam/tiny/test", batch_size=2, min_area_px=1)
    results = segmenter.segment(textured_image(), MIXED_PROMPTS)
    assert encoder_calls == [1]  # six prompts in four batches, one image embedding
    assert len(results) == len(MIXED_PROMPTS)
    for result in results:
        assert isinstance(result, MaskResult)
        assert result.mask.shape == (H, W) and result.mask.dtype == bool
        assert 0.0 <= result.score <= 1.0
    assert any(result.mask.any() for result in results)  # the real path ran end to end


def test_sam_batched_results_come_back_in_prompt_order():
    segmenter = SamSegmenter.from_model(build_tiny_sam(), "sam/tiny/test", batch_size=4, min_area_px=1)
    image = textured_image()
    batched = segmenter.segment(image, MIXED_PROMPTS)
    for prompt, together in zip(MIXED_PROMPTS, batched, strict=True):
        alone = segmenter.segment(image, [prompt])[0]
        assert together.score == pytest.approx(alone.score, abs=1e-4)
        assert (together.mask == alone.mask).mean() > 0.99


def test_sam_empty_prompts_and_removed_masks():
    segmenter = SamSegmenter.from_model(build_tiny_sam(), "sam/tiny/test", min_area_px=H * W + 1)
    assert segmenter.segment(textured_image(), []) == []
    result = segmenter.segment(textured_image(), [Prompt(box=(10, 10, 50, 50))])[0]
    assert not result.mask.any() and result.score == 0.0


def test_sam_loads_a_checkpoint_through_the_registry(tiny_registered, tiny_checkpoint):
    segmenter = SamSegmenter(tiny_checkpoint, "tiny", batch_size=3, min_area_px=1)
    assert segmenter.identity == f"sam/tiny/{checkpoint_sha256(tiny_checkpoint)[:16]}"
    assert len(segmenter.identity.split("/")[-1]) == 16
    loaded = segmenter.segment(textured_image(), MIXED_PROMPTS)
    injected = SamSegmenter.from_model(build_tiny_sam(seed=3), "x", batch_size=3, min_area_px=1)
    for a, b in zip(loaded, injected.segment(textured_image(), MIXED_PROMPTS), strict=True):
        assert np.array_equal(a.mask, b.mask) and a.score == pytest.approx(b.score)


def test_missing_checkpoint_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "sam_vit_b.pth"
    with pytest.raises(FileNotFoundError, match="nowhere/sam_vit_b.pth"):
        SamSegmenter(missing, "vit_b")
    with pytest.raises(FileNotFoundError, match="nowhere/sam_vit_b.pth"):
        load_segmenter("sam", str(missing), "vit_b", "cpu")


def test_checkpoint_of_another_model_type_names_the_path(tiny_registered, tiny_checkpoint, tmp_path):
    with pytest.raises(CheckpointError, match=rf"{tiny_checkpoint.name}.*'tiny_wide'"):
        SamSegmenter(tiny_checkpoint, "tiny_wide")
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="garbage.pth"):
        SamSegmenter(garbage, "tiny")
    with pytest.raises(ValueError, match="unknown SAM model type"):
        SamSegmenter(tiny_checkpoint, "vit_q")


def test_load_segmenter_picks_and_memoizes(tiny_registered, tiny_checkpoint):
    grabcut = load_segmenter("auto", None, "vit_h", "cpu")
    assert isinstance(grabcut, GrabCutSegmenter)
    assert load_segmenter("grabcut", None, "vit_h", "cpu") is grabcut
    sam = load_segmenter("auto", str(tiny_checkpoint), "tiny", "cpu")
    assert isinstance(sam, SamSegmenter)
    assert load_segmenter("sam", str(tiny_checkpoint), "tiny", "cpu") is sam  # loaded once per process
    with pytest.raises(ValueError, match="needs a checkpoint"):
        load_segmenter("sam", None, "vit_h", "cpu")
    with pytest.raises(ValueError, match="unknown segmenter backend"):
        load_segmenter("magic", None, "vit_h", "cpu")


# -- GrabCut --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["ellipse", "rectangle"])
def test_grabcut_finds_a_filled_shape_from_its_box(shape):
    image, truth = with_object(textured_image(), shape)
    segmenter = GrabCutSegmenter()
    result = segmenter.segment(image, [Prompt(box=loose_box(truth))])[0]
    assert result.mask.shape == truth.shape and result.mask.dtype == bool
    assert iou(result.mask, truth) > 0.8
    assert 0.0 < result.score <= 1.0
    again = GrabCutSegmenter().segment(image, [Prompt(box=loose_box(truth))])[0]
    assert np.array_equal(result.mask, again.mask) and result.score == again.score  # deterministic


def test_grabcut_points_seed_and_point_only_prompts():
    image, truth = with_object(textured_image(), "ellipse")
    segmenter = GrabCutSegmenter()
    inner = ((64.0, 48.0), (45.0, 42.0), (83.0, 54.0))
    with_seeds = Prompt(box=loose_box(truth), points=inner + ((20.0, 20.0),), point_labels=(1, 1, 1, 0))
    point_only = Prompt(points=inner, point_labels=(1, 1, 1))
    for result in segmenter.segment(image, [with_seeds, point_only]):
        assert all(result.mask[int(y), int(x)] for x, y in inner)
        assert iou(result.mask, truth) > 0.6
        assert 0.0 <= result.score <= 1.0
    assert segmenter.identity == f"grabcut/opencv-{cv2.__version__}/it3/c200-f400-fb0.6-ctx0.4-band3"


def test_grabcut_degenerate_boxes_give_empty_masks():
    image = textured_image()
    results = GrabCutSegmenter().segment(image, [Prompt(box=(200, 200, 300, 300)), Prompt(box=(5, 5, 6, 6)),
                                                 Prompt(box=(0, 0, W, H))])
    assert not results[0].mask.any() and results[0].score == 0.0
    assert not results[1].mask.any() and results[1].score == 0.0
    assert results[2].mask.shape == (H, W)  # a full-image box still runs


# -- MaskCache ------------------------------------------------------------------------------------
class CountingSegmenter:
    def __init__(self, inner, identity: str | None = None) -> None:
        self.inner = inner
        self._identity = identity or inner.identity
        self.calls: list[int] = []  # number of prompts per call

    @property
    def identity(self) -> str:
        return self._identity

    def segment(self, image_bgr, prompts):
        self.calls.append(len(prompts))
        return self.inner.segment(image_bgr, prompts)


def test_mask_cache_computes_each_prompt_once(tmp_path):
    store = Store(str(tmp_path / "cache"))
    image, truth = with_object(textured_image(), "ellipse")
    prompts = [Prompt(box=loose_box(truth)), Prompt(box=(5, 5, 40, 40)), Prompt(box=(5, 5, 6, 6))]
    counting = CountingSegmenter(GrabCutSegmenter())
    cache = MaskCache(store)

    first = cache.segment_cached(counting, image, "img-a", prompts)
    assert counting.calls == [3]
    second = cache.segment_cached(counting, image, "img-a", prompts)
    assert counting.calls == [3]  # all hits: no call at all
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(a.mask, b.mask) and b.mask.dtype == bool and a.score == b.score

    new_prompt = Prompt(box=(60, 30, 120, 90))
    third = cache.segment_cached(counting, image, "img-a", [prompts[1], new_prompt, prompts[0]])
    assert counting.calls == [3, 1]  # only the new prompt
    assert np.array_equal(third[2].mask, first[0].mask)

    other = CountingSegmenter(GrabCutSegmenter(), identity="grabcut/other")
    cache.segment_cached(other, image, "img-a", prompts)
    assert other.calls == [3]  # another identity misses
    cache.segment_cached(counting, image, "img-b", prompts[:1])
    assert counting.calls == [3, 1, 1]  # another image misses

    fresh = CountingSegmenter(GrabCutSegmenter())
    again = MaskCache(store).segment_cached(fresh, image, "img-a", prompts + [new_prompt])
    assert fresh.calls == []  # a second process sees every shard
    assert all(np.array_equal(a.mask, b.mask) for a, b in zip(again[:len(first)], first, strict=True))


def test_mask_cache_rows_and_compaction(tmp_path):
    import pyarrow.parquet as pq

    store = Store(str(tmp_path / "cache"))
    image, truth = with_object(textured_image(), "rectangle")
    segmenter = CountingSegmenter(GrabCutSegmenter())
    writers = [MaskCache(store), MaskCache(store)]  # two processes appending side by side
    writers[0].segment_cached(segmenter, image, "img", [Prompt(box=loose_box(truth))])
    writers[1].segment_cached(segmenter, image, "img", [Prompt(box=(0, 0, 50, 50))])
    folder = writers[0].folder(segmenter.identity)
    shards = store.list(folder)
    assert len(shards) == 2 and all(name.endswith(".parquet") for name in shards)
    table = pq.read_table(store.local_path(f"{folder}/{shards[0]}"))
    assert table.column_names == ["image_sha256", "prompt_key", "identity", "rle_counts", "height", "width", "score"]

    assert MaskCache(store).compact() == 2  # both merged into a third shard
    assert len(store.list(folder)) == 1
    reader = CountingSegmenter(GrabCutSegmenter())
    MaskCache(store).segment_cached(reader, image, "img", [Prompt(box=(0, 0, 50, 50)), Prompt(box=loose_box(truth))])
    assert reader.calls == []


def test_the_default_build_starts_without_torch():
    """Every Dask or Ray worker imports the task module; torch and SAM cost it ~9 s and the default
    build never uses them, so they are imported only when a config chooses SAM."""
    import subprocess
    import sys

    heavy = ("torch", "segment_anything", "diffusers", "ultralytics")
    probe = ("import sys, tasks.build, flows.build_dataset; "
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[3],
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout

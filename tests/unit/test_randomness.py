import numpy as np
import pytest

from synrail.randomness import (
    RenderStream,
    SplitPlan,
    Stream,
    image_rng,
    procedural_obstacle_rng,
    render_rng,
    rng_for,
    table_normals,
)


def draws(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(rng.integers(0, 2**31, 4))


def test_stream_numbers_are_unique_and_keep_the_values_datasets_were_built_with():
    # renumbering a stream would change every existing dataset's bytes
    assert {s.name: s.value for s in Stream} == {
        "BACKGROUND": 1, "GALLERY": 2, "IMAGE": 3, "SPLIT": 4, "DIFFUSION_PROMPTS": 5, "WEATHER": 6,
        "VIDEO_SEGMENTER_PROMPTS": 7, "CLIP": 8, "PROCEDURAL_OBSTACLE": 2000}
    assert (SplitPlan.BACKGROUNDS, SplitPlan.VIDEOS) == (0, 100)
    assert [r.value for r in RenderStream] == [0, 1, 2, 3]


def test_generators_are_the_seed_sequences_the_streams_name():
    assert draws(rng_for(7, Stream.WEATHER, 12)) == draws(np.random.default_rng([7, 6, 12]))
    assert draws(procedural_obstacle_rng(7, 3, 5)) == draws(np.random.default_rng([7, 2003, 5]))
    assert draws(render_rng(99, RenderStream.SENSOR)) == draws(np.random.default_rng([99, 3]))


def test_image_attempts_differ_and_attempt_zero_is_the_image_usual_draw():
    assert draws(image_rng(7, 12)) == draws(np.random.default_rng([7, 3, 12]))
    assert draws(image_rng(7, 12, 2)) == draws(np.random.default_rng([7, 3, 12, 2]))
    assert len({draws(image_rng(7, 12, k)) for k in range(4)}) == 4
    with pytest.raises(ValueError):
        image_rng(7, 12, -1)


def test_video_segmenter_prompts_no_longer_share_the_split_plans_keys():
    split_keys = {draws(rng_for(0, Stream.SPLIT, k)) for k in (0, 1, 2, 3, 100)}
    prompt_keys = {draws(rng_for(0, Stream.VIDEO_SEGMENTER_PROMPTS, frame)) for frame in (0, 1, 2, 3, 100)}
    assert not split_keys & prompt_keys


def test_table_normals_are_standard_normal_and_repeatable():
    draws = table_normals(np.random.default_rng(5), (400, 500))
    assert draws.dtype == np.float32 and draws.shape == (400, 500)
    assert abs(float(draws.mean())) < 0.01 and abs(float(draws.std()) - 1) < 0.01
    # The normal's shape, not just its moments: the share within one and two standard deviations.
    assert abs(float(np.mean(np.abs(draws) < 1)) - 0.6827) < 0.005
    assert abs(float(np.mean(np.abs(draws) < 2)) - 0.9545) < 0.003
    assert np.array_equal(draws, table_normals(np.random.default_rng(5), (400, 500)))

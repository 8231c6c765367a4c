import io
import shutil
import string

import cv2
import numpy as np
import pyarrow.parquet as pq
import pydantic
import pytest
from tiny_models import build_tiny_sd_pipeline

from synrail.sources.diffusion import (
    DEFAULT_VOCABULARY,
    PROMPT_TEMPLATES,
    DiffusionCache,
    DiffusionConfig,
    DiffusionGenerator,
    DiffusionModelError,
    DiffusionPromptConfig,
    PromptSpec,
    expand_prompts,
    load_generator,
    subject_prompt,
)
from synrail.storage.store import Store, sha256_bytes

SIZE = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_sd_pipeline(tmp_path_factory.mktemp("models") / "tiny-sd")


def tiny_config(model_dir, **overrides) -> DiffusionConfig:
    return DiffusionConfig(**{"model_dir": model_dir, "device": "cpu", "steps": 2, "width": SIZE, "height": SIZE,
                              "batch_size": 4, **overrides})


@pytest.fixture(scope="module")
def generator(model_dir):
    return DiffusionGenerator(tiny_config(model_dir))


def spec(text: str, seed: int) -> PromptSpec:
    return PromptSpec(class_name="rock", text=text, seed=seed)


class CountingPipeline:
    """Stands in for the diffusers pipeline, counting calls and passing them on."""

    def __init__(self, pipeline) -> None:
        self.pipeline, self.calls = pipeline, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.pipeline(*args, **kwargs)


# -- prompts ------------------------------------------------------------------------------------
def test_every_class_template_is_filled_completely_and_deterministically():
    cfg = DiffusionPromptConfig()
    for class_name in PROMPT_TEMPLATES:
        first = expand_prompts(class_name, 20, cfg, np.random.default_rng(7))
        again = expand_prompts(class_name, 20, cfg, np.random.default_rng(7))
        assert first == again
        assert len(first) == 20 and all(s.class_name == class_name for s in first)
        for prompt in first:
            assert "{" not in prompt.text and "}" not in prompt.text
            assert prompt.text.endswith(cfg.suffix)
        assert len({s.seed for s in first}) == 20
        assert first != expand_prompts(class_name, 20, cfg, np.random.default_rng(8))


def test_default_vocabulary_covers_the_paper_templates():
    used = {name for template in PROMPT_TEMPLATES.values()
            for _, name, _, _ in string.Formatter().parse(template) if name}
    assert used <= set(DEFAULT_VOCABULARY)


def test_user_templates_and_vocabulary_override_the_defaults():
    cfg = DiffusionPromptConfig(templates={"person": "{num} {crowd} on {place}"},
                                vocabulary={"crowd": ("track workers",), "place": ("a bridge",)}, suffix="")
    [prompt] = expand_prompts("person", 1, cfg, np.random.default_rng(0))
    assert prompt.text.endswith("track workers on a bridge")


def test_unknown_placeholder_in_a_user_template_fails_naming_it():
    with pytest.raises(ValueError, match=r"\{crowd\}"):
        DiffusionPromptConfig(templates={"person": "{num} {crowd} on {place}"})


def test_unknown_class_fails_clearly():
    with pytest.raises(ValueError, match="no diffusion prompt template for class 'tree'"):
        expand_prompts("tree", 1, DiffusionPromptConfig(), np.random.default_rng(0))


def test_diffusion_config_is_strict():
    with pytest.raises(pydantic.ValidationError):
        DiffusionConfig(model_dir="m", step=3)
    with pytest.raises(pydantic.ValidationError, match="multiple of 8"):
        DiffusionConfig(model_dir="m", width=500)


# -- the model ----------------------------------------------------------------------------------
def test_generator_loads_the_folder_and_generates_bgr_images(generator):
    images = generator.generate([spec("a rock on a railway track", 1), spec("one person", 2)])
    assert len(images) == 2
    for image in images:
        assert image.shape == (SIZE, SIZE, 3) and image.dtype == np.uint8
        assert image.std() > 1  # random weights still give a non-flat picture
    assert not np.array_equal(images[0], images[1])


def test_same_spec_gives_identical_bytes_whatever_the_batch(generator):
    target = spec("a single rock in 10 meters far away", 42)
    alone = generator.generate([target])[0]
    assert generator.generate([target])[0].tobytes() == alone.tobytes()
    in_batch = generator.generate([spec("one cow", 1), target, spec("one car", 3)])[1]
    # float reductions may differ by an ulp across batch shapes; the rounded pixels must not move more than 1
    assert np.abs(in_batch.astype(int) - alone.astype(int)).max() <= 1
    assert not np.array_equal(generator.generate([spec(target.text, 43)])[0], alone)


def test_load_generator_loads_once_per_config(model_dir):
    assert load_generator(tiny_config(model_dir)) is load_generator(tiny_config(model_dir))


def test_missing_model_folder_fails_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(DiffusionModelError, match="no-such-model"):
        DiffusionGenerator(tiny_config(missing))
    missing.mkdir()
    with pytest.raises(DiffusionModelError, match=r"no-such-model is not a diffusers model folder"):
        DiffusionGenerator(tiny_config(missing))
    (missing / "model_index.json").write_text("{not json")
    with pytest.raises(DiffusionModelError, match=r"no-such-model/model_index.json is not valid JSON"):
        DiffusionGenerator(tiny_config(missing))


def test_scheduler_can_be_swapped_by_name(model_dir):
    euler = DiffusionGenerator(tiny_config(model_dir, scheduler="EulerDiscreteScheduler"))
    assert type(euler.pipeline.scheduler).__name__ == "EulerDiscreteScheduler"
    assert euler.generate([spec("a rock", 1)])[0].shape == (SIZE, SIZE, 3)
    with pytest.raises(DiffusionModelError, match="unknown diffusers scheduler 'NoSuchScheduler'"):
        DiffusionGenerator(tiny_config(model_dir, scheduler="NoSuchScheduler"))


def test_identity_follows_the_weights_not_the_folder_location(model_dir, tmp_path, generator):
    copy = shutil.copytree(model_dir, tmp_path / "elsewhere" / model_dir.name)
    copied = DiffusionGenerator(tiny_config(copy))
    assert copied.identity == generator.identity
    assert copied.identity.startswith(f"diffusers/{model_dir.name}/")

    weights = copy / "unet" / "diffusion_pytorch_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a fine-tune in place: same size, different values
    weights.write_bytes(bytes(data))
    assert DiffusionGenerator(tiny_config(copy)).identity != generator.identity


# -- the cache ----------------------------------------------------------------------------------
def test_cache_generates_misses_only_and_indexes_each_batch(model_dir, tmp_path):
    generator = DiffusionGenerator(tiny_config(model_dir, batch_size=2))
    counter = CountingPipeline(generator.pipeline)
    generator.pipeline = counter
    cache = DiffusionCache(Store(str(tmp_path / "cache")))
    specs = expand_prompts("animal", 3, DiffusionPromptConfig(), np.random.default_rng(3))

    first = cache.generate_cached(generator, specs + specs[:1], generator.cfg)
    assert counter.calls == 2  # 3 distinct specs in batches of 2; the repeat is generated once
    assert first[3] == first[0]
    for item, prompt in zip(first[:len(specs)], specs, strict=True):
        assert item.spec == prompt and item.path == f"diffusion/{item.key}.png"
        data = cache.store.read_bytes(item.path)
        assert sha256_bytes(data) == item.sha256
        assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape == (SIZE, SIZE, 3)
    index_files = cache.store.list("diffusion/index")
    assert len(index_files) == 2
    rows = [row for name in index_files
            for row in pq.read_table(io.BytesIO(cache.store.read_bytes(f"diffusion/index/{name}"))).to_pylist()]
    assert sorted(r["key"] for r in rows) == sorted({i.key for i in first})
    assert {r["model"] for r in rows} == {generator.identity}

    second = cache.generate_cached(generator, specs)
    assert counter.calls == 2  # all hits: no model call at all
    assert second == first[:3]

    more = cache.generate_cached(generator, specs[:1] + expand_prompts("rock", 1, DiffusionPromptConfig(),
                                                                        np.random.default_rng(4)))
    assert counter.calls == 3 and more[0] == first[0]


def test_cache_key_follows_the_sampling_settings(model_dir, generator):
    cache = DiffusionCache(Store("unused"))
    other_steps = DiffusionGenerator(tiny_config(model_dir, steps=3))
    assert cache.key(generator, spec("a rock", 1)) != cache.key(other_steps, spec("a rock", 1))
    assert cache.key(generator, spec("a rock", 1)) != cache.key(generator, spec("a rock", 2))


def test_cache_refuses_a_config_the_generator_was_not_loaded_with(model_dir, tmp_path, generator):
    with pytest.raises(ValueError, match="differs"):
        DiffusionCache(Store(str(tmp_path))).generate_cached(generator, [], tiny_config(model_dir, steps=9))


# -- the subject's box --------------------------------------------------------------------------
def blob_on(background: np.ndarray, centre=(150, 90), axes=(30, 45)) -> np.ndarray:
    image = background.copy()
    cv2.ellipse(image, centre, axes, 0, 0, 360, (40, 60, 200), -1)
    cv2.ellipse(image, (centre[0], centre[1] - axes[1] // 2), (axes[0] // 2, axes[1] // 3), 0, 0, 360,
                (200, 200, 40), -1)  # a differently coloured part, which must stay in the same box
    return image


def assert_box_around_blob(box, centre=(150, 90), axes=(30, 45)):
    x0, y0, x1, y1 = box
    cx, cy = centre
    ax, ay = axes
    assert x0 <= cx - ax and y0 <= cy - ay and x1 >= cx + ax and y1 >= cy + ay  # holds the blob
    assert x0 >= cx - 1.3 * ax and y0 >= cy - 1.3 * ay and x1 <= cx + 1.3 * ax and y1 <= cy + 1.3 * ay  # tightly


def test_subject_prompt_boxes_a_blob_on_a_flat_noisy_background():
    rng = np.random.default_rng(0)
    background = np.clip(np.full((240, 320, 3), (180, 175, 170), float) + rng.normal(0, 4, (240, 320, 3)), 0, 255)
    assert_box_around_blob(subject_prompt(blob_on(background.astype(np.uint8))).box)


def test_subject_prompt_boxes_a_blob_on_a_sky_and_ground_background():
    background = np.zeros((240, 320, 3), np.uint8)
    background[:120] = (230, 190, 150)  # sky
    background[120:] = (60, 110, 90)  # ground
    assert_box_around_blob(subject_prompt(blob_on(background)).box)


def test_subject_prompt_falls_back_to_the_whole_image_when_nothing_stands_out():
    assert subject_prompt(np.full((64, 96, 3), 128, np.uint8)).box == (0.0, 0.0, 96.0, 64.0)


class Box:
    def __init__(self, box, score):
        self.box, self.score = box, score


class FakeDetector:
    def __init__(self, detections):
        self.detections = detections

    def detect(self, image):
        return self.detections


def test_subject_prompt_prefers_the_detectors_best_box():
    image = blob_on(np.full((240, 320, 3), 180, np.uint8))
    detector = FakeDetector([Box((1, 2, 30, 40), 0.3), Box((100, 40, 200, 140), 0.9)])
    assert subject_prompt(image, detector).box == (100.0, 40.0, 200.0, 140.0)
    assert_box_around_blob(subject_prompt(image, FakeDetector([])).box)

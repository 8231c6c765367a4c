"""Rare obstacles from Stable Diffusion: prompts from the paper's templates (SynRailObs, Table 2),
a local diffusers model, a store cache of its outputs, and the box that SAM is prompted with.

Nothing is downloaded: the model loads from a folder the user configures (``local_files_only``).
torch and diffusers are imported only when a model is loaded, so prompt expansion stays light.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from synrail.segment.base import Prompt
from synrail.storage.store import Store, sha256_bytes

if TYPE_CHECKING:
    import torch

# SynRailObs Table 2, keyed by our class names.
PROMPT_TEMPLATES: Mapping[str, str] = {
    "person": "In {weather} days, {num} pedestrians {motion} through {place}",
    "rock": "{num} rocks in {distance} meters far away in the {pos} on {place}",
    "animal": "{num} of {species} {motion} in {place} in {weather} at {time}",
    "vehicle": "{num} of {vehicle_type} {motion} in {place} in {weather} days at {time}",
}

# Repeated entries weight the draw: one object per image is what SAM cuts out best.
DEFAULT_VOCABULARY: Mapping[str, tuple[str, ...]] = {
    "weather": ("sunny", "cloudy", "overcast", "rainy", "foggy", "snowy"),
    "num": ("one", "one", "a single", "a single", "one", "two"),
    "motion": ("standing", "crossing", "moving", "waiting", "stopped"),  # fit people, animals and vehicles alike
    "species": ("cows", "deer", "horses", "sheep", "dogs", "wild boars", "goats", "foxes"),
    "vehicle_type": ("cars", "vans", "pickup trucks", "trucks", "tractors", "motorcycles", "buses"),
    "place": ("a railway track", "a railway level crossing", "a rural railway line", "a railway bridge",
              "the ballast of a railway line", "a railway line through a forest", "a railway station"),
    "time": ("morning", "noon", "afternoon", "dusk", "dawn"),
    "distance": ("5", "10", "20", "30", "50", "80"),
    "pos": ("middle", "centre", "left side", "right side"),
}

DEFAULT_SUFFIX = ", photo, full body, plain background"


def template_placeholders(template: str) -> list[str]:
    """Placeholder names in order of first use; positional ``{}`` is refused (it cannot be filled by name)."""
    names: list[str] = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if not name:
            raise ValueError(f"template {template!r} has an empty placeholder {{}}; name it, e.g. {{place}}")
        if name not in names:
            names.append(name)
    return names


class DiffusionPromptConfig(BaseModel):
    """Prompt templates and the words their placeholders draw from; both override the defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    templates: dict[str, str] = Field(default_factory=dict)  # class name -> template
    vocabulary: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # placeholder -> choices
    per_class: int = Field(default=50, ge=1)
    suffix: str = DEFAULT_SUFFIX  # appended to every prompt: a plain background eases cutting out

    @model_validator(mode="after")
    def _placeholders_known(self) -> DiffusionPromptConfig:
        for name, choices in self.vocabulary.items():
            if not choices:
                raise ValueError(f"vocabulary for placeholder {{{name}}} is empty")
        known = self.all_vocabulary()
        for class_name, template in self.all_templates().items():
            unknown = [name for name in template_placeholders(template) if name not in known]
            if unknown:
                raise ValueError(f"template for class {class_name!r} uses unknown placeholder "
                                 f"{', '.join('{' + u + '}' for u in unknown)}; known placeholders: "
                                 f"{', '.join(sorted(known))} (add words for it under vocabulary)")
        return self

    def all_templates(self) -> dict[str, str]:
        """The built-in prompt templates per class with the configured ones laid over them."""
        return {**PROMPT_TEMPLATES, **self.templates}

    def all_vocabulary(self) -> dict[str, tuple[str, ...]]:
        """The built-in placeholder words with the configured ones laid over them."""
        return {**DEFAULT_VOCABULARY, **self.vocabulary}

    def template_for(self, class_name: str) -> str:
        """The prompt template of ``class_name``.

        Raises:
            ValueError: no template exists for the class.
        """
        templates = self.all_templates()
        if class_name not in templates:
            raise ValueError(f"no diffusion prompt template for class {class_name!r}; "
                             f"templates exist for: {', '.join(sorted(templates))}")
        return templates[class_name]


class PromptSpec(BaseModel):
    """One image to generate: its class, prompt text and noise seed."""

    model_config = ConfigDict(frozen=True)

    class_name: str
    text: str
    seed: int  # the image's own noise seed


class GeneratedImage(BaseModel):
    """A generated image in the cache: its spec, PNG path, content hash and cache key."""

    model_config = ConfigDict(frozen=True)

    spec: PromptSpec
    path: str  # PNG, relative to the cache store
    sha256: str
    key: str


def expand_prompts(class_name: str, n: int, cfg: DiffusionPromptConfig, rng: np.random.Generator) -> list[PromptSpec]:
    """``n`` prompts for one class: each placeholder filled by a draw from its words, plus a seed.

    Args:
        class_name: the class whose template is filled.
        n: how many prompts.
        cfg: the templates, the placeholder words and the suffix added to every prompt.
        rng: draws the words and each image's noise seed (0 to 2**32 - 1).

    Returns:
        ``n`` prompt specs, in draw order.
    """
    template = cfg.template_for(class_name)
    vocabulary = cfg.all_vocabulary()
    names = template_placeholders(template)
    specs = []
    for _ in range(n):
        words = {name: vocabulary[name][int(rng.integers(len(vocabulary[name])))] for name in names}
        specs.append(PromptSpec(class_name=class_name, text=template.format(**words) + cfg.suffix,
                                seed=int(rng.integers(0, 2**32))))
    return specs


# -- the model ----------------------------------------------------------------------------------
class DiffusionModelError(OSError):
    """A diffusion model that cannot be loaded; the message names its folder."""


class DiffusionConfig(BaseModel):
    """A local diffusers text-to-image model and its sampling settings (steps, guidance, size, scheduler)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: Path  # a local diffusers folder (model_index.json + component folders)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"  # auto: fp16 on CUDA, fp32 on CPU
    steps: int = Field(default=25, ge=1)
    guidance: float = Field(default=7.5, ge=0)
    width: int = Field(default=512, ge=8)
    height: int = Field(default=512, ge=8)
    batch_size: int = Field(default=4, ge=1)
    scheduler: str | None = None  # a diffusers scheduler class name, e.g. "DPMSolverMultistepScheduler"

    @field_validator("width", "height")
    @classmethod
    def _multiple_of_8(cls, value: int) -> int:
        if value % 8:
            raise ValueError(f"must be a multiple of 8 (the VAE's downsampling), got {value}")
        return value

    def resolved_device(self) -> str:
        """The torch device to run on: CUDA when ``auto`` finds it, else CPU.

        Raises:
            DiffusionModelError: ``cuda`` was asked for and torch sees none.
        """
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise DiffusionModelError("diffusion.device is 'cuda' but torch sees no CUDA device")
        return self.device

    def resolved_dtype(self) -> str:
        """The torch dtype name: ``auto`` is float16 on CUDA and float32 on the CPU."""
        if self.dtype == "auto":
            return "float16" if self.resolved_device() == "cuda" else "float32"
        return self.dtype


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pt", ".pth", ".msgpack", ".onnx")
CONFIG_SUFFIXES = (".json", ".txt", ".model")  # configs, tokenizer vocabularies and merges
WEIGHT_SAMPLE_BYTES = 1 << 16


def _weight_fingerprint(path: Path) -> bytes:
    """Size plus three sampled blocks: cheap on multi-GB files, and unlike the size alone it changes
    when a fine-tune rewrites the weights in place (same shapes, same size)."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        for offset in sorted({0, max(0, size // 2 - WEIGHT_SAMPLE_BYTES // 2), max(0, size - WEIGHT_SAMPLE_BYTES)}):
            fh.seek(offset)
            digest.update(fh.read(WEIGHT_SAMPLE_BYTES))
    return digest.digest()


def model_folder_identity(model_dir: Path) -> str:
    """'diffusers/<folder name>/<hash>' over its config and tokenizer files and its weight fingerprints."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.rglob("*")):
        rel = path.relative_to(model_dir)
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue  # hidden: e.g. .cache/huggingface download metadata, which changes nothing
        if path.suffix in WEIGHT_SUFFIXES:
            digest.update(rel.as_posix().encode() + b"\0" + _weight_fingerprint(path))
        elif path.suffix in CONFIG_SUFFIXES:
            digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes())
    return f"diffusers/{model_dir.name}/{digest.hexdigest()[:16]}"


def _read_model_index(folder: Path) -> dict[str, Any]:
    """The folder's model_index.json, or an error saying why the folder is not a diffusers model."""
    if not folder.is_dir():
        raise DiffusionModelError(f"diffusion model folder {folder} does not exist; set model_dir to a local "
                                  "diffusers folder (one with model_index.json)")
    index = folder / "model_index.json"
    if not index.is_file():
        raise DiffusionModelError(f"{folder} is not a diffusers model folder: model_index.json is missing "
                                  "(convert a single-file checkpoint with diffusers' save_pretrained first)")
    try:
        return json.loads(index.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DiffusionModelError(f"{index} is not valid JSON: {exc}") from exc


def _scheduler_class(name: str) -> Any:
    import diffusers

    scheduler = getattr(diffusers, name, None)
    if not (isinstance(scheduler, type) and issubclass(scheduler, diffusers.SchedulerMixin)):
        raise DiffusionModelError(f"unknown diffusers scheduler {name!r} (e.g. DDIMScheduler, "
                                  "DPMSolverMultistepScheduler, EulerDiscreteScheduler)")
    return scheduler


def bgr_uint8(image_rgb: np.ndarray) -> np.ndarray:
    """A float RGB image in [0, 1] (diffusers' "np" output) as 8-bit BGR, rounded like diffusers' PIL path."""
    rgb = np.clip(np.round(image_rgb * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(rgb[..., ::-1])


class DiffusionGenerator:
    """A text-to-image diffusers pipeline loaded from a local folder (SD 1.x, 2.x, XL, ...)."""

    def __init__(self, cfg: DiffusionConfig) -> None:
        import torch
        from diffusers import AutoPipelineForText2Image

        self.cfg = cfg
        self.model_dir = Path(cfg.model_dir).expanduser().resolve()
        model_index = _read_model_index(self.model_dir)
        self.device = cfg.resolved_device()
        self.dtype = cfg.resolved_dtype()
        # Only pipelines that declare a safety checker accept the argument; off, because it swaps
        # any image it flags for a black one, and it needs weights of its own.
        extra = {"safety_checker": None, "requires_safety_checker": False} if "safety_checker" in model_index else {}
        try:
            pipeline = AutoPipelineForText2Image.from_pretrained(
                self.model_dir, local_files_only=True, dtype=getattr(torch, self.dtype), **extra)
        except (OSError, ValueError, KeyError) as exc:
            raise DiffusionModelError(f"cannot load a text-to-image pipeline from {self.model_dir}: {exc}") from exc
        if cfg.scheduler:
            pipeline.scheduler = _scheduler_class(cfg.scheduler).from_config(pipeline.scheduler.config)
        pipeline.set_progress_bar_config(disable=True)
        self.pipeline = pipeline.to(self.device)

    @functools.cached_property
    def identity(self) -> str:
        """A hash of the model folder's files: part of every cache key."""
        return model_folder_identity(self.model_dir)

    @property
    def precision(self) -> str:
        """Device type and dtype: both change the output pixels, so both go into cache keys."""
        return f"{self.device}/{self.dtype}"

    def _noise(self, seed: int) -> torch.Generator:
        import torch

        # A CPU generator draws the same initial noise whatever device denoises it; diffusers moves it over.
        return torch.Generator("cpu").manual_seed(seed)

    def generate(self, specs: Sequence[PromptSpec]) -> list[np.ndarray]:
        """One BGR uint8 image per spec; each depends only on its own prompt and seed, not on its batch."""
        images: list[np.ndarray] = []
        for start in range(0, len(specs), self.cfg.batch_size):
            batch = specs[start:start + self.cfg.batch_size]
            result = self.pipeline(
                prompt=[spec.text for spec in batch], generator=[self._noise(spec.seed) for spec in batch],
                num_inference_steps=self.cfg.steps, guidance_scale=self.cfg.guidance,
                width=self.cfg.width, height=self.cfg.height, output_type="np")
            images.extend(bgr_uint8(image) for image in result.images)
        return images


@functools.cache
def load_generator(cfg: DiffusionConfig) -> DiffusionGenerator:
    """One pipeline per config per process: loading costs seconds to minutes and GBs of memory."""
    return DiffusionGenerator(cfg)


# -- the cache ----------------------------------------------------------------------------------
INDEX_SCHEMA = pa.schema([
    ("key", pa.string()), ("path", pa.string()), ("sha256", pa.string()), ("class_name", pa.string()),
    ("text", pa.string()), ("seed", pa.int64()), ("model", pa.string()), ("precision", pa.string()),
    ("scheduler", pa.string()), ("steps", pa.int64()), ("guidance", pa.float64()), ("width", pa.int64()),
    ("height", pa.int64()),
])


class DiffusionCache:
    """Generated images in a store, one PNG per (model, prompt, seed, sampling settings), plus one
    index Parquet per generated batch; a PNG's presence is the hit (writes are atomic)."""

    def __init__(self, store: Store, prefix: str = "diffusion") -> None:
        self.store = store
        self.prefix = prefix.strip("/")

    def key_fields(self, generator: DiffusionGenerator, spec: PromptSpec) -> dict[str, Any]:
        """Everything that decides a generated image's pixels.

        Args:
            generator: the loaded model and its settings.
            spec: the prompt and seed.

        Returns:
            The key's fields, JSON-able.
        """
        cfg = generator.cfg
        return {"model": generator.identity, "text": spec.text, "seed": spec.seed, "steps": cfg.steps,
                "guidance": cfg.guidance, "width": cfg.width, "height": cfg.height,
                "scheduler": cfg.scheduler or "", "precision": generator.precision}

    def key(self, generator: DiffusionGenerator, spec: PromptSpec) -> str:
        """The cache key of one image: the sha256 of its ``key_fields``.

        Args:
            generator: the loaded model and its settings.
            spec: the prompt and seed.

        Returns:
            The key (64 hex digits).
        """
        return sha256_bytes(json.dumps(self.key_fields(generator, spec), sort_keys=True).encode())

    def image_path(self, key: str) -> str:
        """The PNG path of the image with cache key ``key``."""
        return f"{self.prefix}/{key}.png"

    def generate_cached(self, generator: DiffusionGenerator, specs: Sequence[PromptSpec],
                        cfg: DiffusionConfig | None = None) -> list[GeneratedImage]:
        """The images for ``specs`` in order; the model runs only on misses, in batches of batch_size.

        Args:
            generator: the loaded model, which also gives the batch size.
            specs: the prompts and seeds; a repeated spec is generated once.
            cfg: the config the caller expects the generator to run with; None skips the check.

        Returns:
            One generated image (path in the store, sha256, cache key) per spec, in order.

        Raises:
            ValueError: when ``cfg`` differs from the generator's config.
        """
        if cfg is not None and cfg != generator.cfg:
            raise ValueError("generate_cached: cfg differs from the config the generator was loaded with")
        keys = [self.key(generator, spec) for spec in specs]
        found: dict[str, str] = {}  # key -> sha256
        misses: dict[str, PromptSpec] = {}  # one per key, even when a spec repeats
        for key, spec in zip(keys, specs, strict=True):
            if key in found or key in misses:
                continue
            if self.store.exists(self.image_path(key)):
                found[key] = sha256_bytes(self.store.read_bytes(self.image_path(key)))
            else:
                misses[key] = spec
        pending = list(misses.items())
        for start in range(0, len(pending), generator.cfg.batch_size):
            found.update(self._generate_batch(generator, pending[start:start + generator.cfg.batch_size]))
        return [GeneratedImage(spec=spec, path=self.image_path(key), sha256=found[key], key=key)
                for key, spec in zip(keys, specs, strict=True)]

    def _generate_batch(self, generator: DiffusionGenerator,
                        batch: Sequence[tuple[str, PromptSpec]]) -> dict[str, str]:
        images = generator.generate([spec for _, spec in batch])
        rows = []
        for (key, spec), image in zip(batch, images, strict=True):
            ok, png = cv2.imencode(".png", image)
            if not ok:
                raise ValueError(f"cannot encode the generated image for {spec.text!r} as PNG")
            sha = self.store.write_bytes(self.image_path(key), png.tobytes())
            fields = self.key_fields(generator, spec)
            rows.append({**fields, "key": key, "path": self.image_path(key), "sha256": sha,
                         "class_name": spec.class_name})
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=INDEX_SCHEMA), buffer)
        batch_key = sha256_bytes("".join(key for key, _ in batch).encode())
        self.store.write_bytes(f"{self.prefix}/index/{batch_key[:16]}.parquet", buffer.getvalue())
        return {row["key"]: row["sha256"] for row in rows}


# -- where the subject is -----------------------------------------------------------------------
class Detection(Protocol):
    """A detector's box (x0, y0, x1, y1) and score."""

    box: Sequence[float]  # x0, y0, x1, y1
    score: float


class Detector(Protocol):
    """Anything that boxes the subject of a generated image."""

    def detect(self, image: np.ndarray) -> Sequence[Detection]:
        """Detections on one BGR image."""
        ...


BORDER_FRACTION = 0.05  # of the shorter side: the strip whose colours count as background
BORDER_PATCHES_PER_SIDE = 4  # background colour prototypes per side, so gradients (sky/ground) pass
MIN_COLOUR_DISTANCE = 12.0  # Lab units: below this a pixel is background however flat the border is
MIN_REGION_FRACTION = 0.002  # of the image area: smaller regions are noise
BOX_PADDING = 0.08  # of the box's own size on each side: SAM cuts better with some context


def _border_prototypes(lab: np.ndarray) -> np.ndarray:
    """Median colours of patches along the four borders (P x 3)."""
    h, w = lab.shape[:2]
    strip = max(1, round(min(h, w) * BORDER_FRACTION))
    sides = [lab[:strip], lab[-strip:], lab[:, :strip].transpose(1, 0, 2), lab[:, -strip:].transpose(1, 0, 2)]
    prototypes = []
    for side in sides:
        for patch in np.array_split(side, BORDER_PATCHES_PER_SIDE, axis=1):
            prototypes.append(np.median(patch.reshape(-1, 3), axis=0))
    return np.asarray(prototypes, dtype=np.float32)


def _background_distance(lab: np.ndarray, prototypes: np.ndarray) -> np.ndarray:
    """Per pixel, the Lab distance to the nearest border colour."""
    nearest = np.full(lab.shape[:2], np.inf, dtype=np.float32)
    for colour in prototypes:  # one at a time: an H x W x P x 3 array would cost GBs at 1024 px
        np.minimum(nearest, np.linalg.norm(lab - colour, axis=-1), out=nearest)
    return nearest


def salient_box(image_bgr: np.ndarray) -> tuple[float, float, float, float] | None:
    """Padded box of the largest region unlike the border's colours; None when there is none."""
    h, w = image_bgr.shape[:2]
    lab = cv2.cvtColor(image_bgr, cv2.COLOR_BGR2LAB).astype(np.float32)
    distance = _background_distance(lab, _border_prototypes(lab))
    strip = max(1, round(min(h, w) * BORDER_FRACTION))
    border = np.concatenate([distance[:strip].ravel(), distance[-strip:].ravel(),
                             distance[:, :strip].ravel(), distance[:, -strip:].ravel()])
    # the border's own spread sets the bar, so texture or noise in the background is not "subject"
    threshold = max(MIN_COLOUR_DISTANCE, 2.0 * float(np.quantile(border, 0.95)))
    mask = (distance > threshold).astype(np.uint8)
    mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    join = max(3, round(min(h, w) * 0.02)) | 1  # closes gaps between an object's differently coloured parts
    mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (join, join)))
    count, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    if count <= 1:
        return None
    largest = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    if stats[largest, cv2.CC_STAT_AREA] < MIN_REGION_FRACTION * h * w:
        return None
    x, y, bw, bh = (int(v) for v in stats[largest, :4])
    pad_x, pad_y = BOX_PADDING * bw, BOX_PADDING * bh
    return (max(0.0, x - pad_x), max(0.0, y - pad_y), min(float(w), x + bw + pad_x), min(float(h), y + bh + pad_y))


def subject_prompt(image_bgr: np.ndarray, detector: Detector | None = None) -> Prompt:
    """The box to prompt SAM with on a generated image: the detector's best box if it finds one,
    else the salient region, else (nothing stands out) the whole image.

    Args:
        image_bgr: H x W x 3 uint8 generated image.
        detector: finds the subject; None goes straight to the salient region.

    Returns:
        A box-only prompt (x0, y0, x1, y1) in pixels, within the image.
    """
    h, w = image_bgr.shape[:2]
    detections = list(detector.detect(image_bgr)) if detector is not None else []
    if detections:
        x0, y0, x1, y1 = (float(v) for v in max(detections, key=lambda d: float(d.score)).box)
        return Prompt(box=(max(0.0, x0), max(0.0, y0), min(float(w), x1), min(float(h), y1)))
    return Prompt(box=salient_box(image_bgr) or (0.0, 0.0, float(w), float(h)))

"""One validated model tree for a whole build, loaded from YAML plus command-line overrides."""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from synrail.compose.quality import QualityConfig
from synrail.compose.shadows import ShadowConfig
from synrail.compose.weather_config import WeatherConfig
from synrail.rail.camera import CameraSettings
from synrail.sources.diffusion import DiffusionConfig, DiffusionPromptConfig
from synrail.sources.image_safety import DEFAULT_MAX_IMAGE_PIXELS
from synrail.sources.procedural_obstacles import OBSTACLE_KINDS
from synrail.sources.video_backgrounds import VideoSourceConfig

Range = tuple[float, float]
CONDITIONS = ("normal", "overcast", "fog", "dusk")
TRACK_TYPES = ("ballasted", "ballastless")


class ConfigError(ValueError):
    """A config that cannot be loaded or validated; the message names the file and field."""


class Section(BaseModel):
    """A config section: unknown keys are errors and values are frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _ordered(value: Range, name: str) -> Range:
    low, high = value
    if low > high:
        raise ValueError(f"{name} range must be [low, high], got [{low}, {high}]")
    return value


class ImageConfig(Section):
    """Size (pixels) and JPEG quality of every composed image."""

    width: int = Field(default=1280, ge=64, le=8192)
    height: int = Field(default=720, ge=64, le=8192)
    jpeg_quality: int = Field(default=92, ge=50, le=100)


class SplitConfig(Section):
    """Shares of the images in the train, val and test splits (they sum to 1)."""

    train: float = Field(default=0.8, ge=0, le=1)
    val: float = Field(default=0.1, ge=0, le=1)
    test: float = Field(default=0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitConfig:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must sum to 1, got {total:g}")
        return self

    def fractions(self) -> dict[str, float]:
        """The three shares keyed by split name."""
        return {"train": self.train, "val": self.val, "test": self.test}


class CameraConfig(Section):
    """Ranges that procedural backgrounds draw the cab camera from: height (m), pitch and horizontal FOV (degrees)."""

    height_m: Range = (2.2, 2.9)
    pitch_deg: Range = (1.5, 4.5)
    hfov_deg: Range = (50.0, 65.0)

    @field_validator("height_m", "pitch_deg", "hfov_deg")
    @classmethod
    def _low_high(cls, value: Range, info: ValidationInfo) -> Range:
        return _ordered(value, info.field_name)


class VideoBackgroundConfig(Section, CameraSettings):
    """Backgrounds from cab footage: a folder or an s3:// prefix of mp4/avi/mkv/mov files
    (``backgrounds.video``), or of jpg/png frames, one camera sequence per subfolder
    (``backgrounds.frames``; sampled by ``sampling.stride``, every frame by default). The camera
    fields (``CameraSettings``: hfov_deg, gauge_mm, distortion, ...) are every video's or sequence's
    defaults, which sidecar columns of the same names override."""

    url: str
    sampling: VideoSourceConfig = VideoSourceConfig()  # frame rate or stride, filters, sidecar metadata
    track_model: str | None = Field(default=None, description="TorchScript coarse track-area model (optional)")
    track_area_model: str | None = Field(default="builtin", description=(
        "the learned ego-track-area model (ONNX, run by OpenCV) that the track finder asks for a second opinion: "
        "it vets findings the rail lines alone cannot settle (a camera mounted off the vehicle's centre line, "
        "rails hidden near the bottom by blur, a wiper or a window corner) and proposes the pair where no lines "
        "lead to one. 'builtin': the model SynRail trains on its own renders (tools/train_track_model.py) and "
        "ships; a path: another ONNX file with its JSON sidecar; null: the line finder alone"))
    refine_with_segmenter: bool = Field(default=False, description="refine the track area with SAM prompts")


class BackgroundConfig(Section):
    """Where backgrounds come from (procedural, video or frame folders) and how procedural scenes are drawn."""

    source: Literal["procedural", "video", "frames"] = "procedural"
    count: int = Field(default=40, ge=1, description="procedural backgrounds to render")
    video: VideoBackgroundConfig | None = None
    frames: VideoBackgroundConfig | None = None
    track_types: tuple[Literal["ballasted", "ballastless"], ...] = TRACK_TYPES
    conditions: dict[Literal["normal", "overcast", "fog", "dusk"], float] = Field(
        default_factory=lambda: {"normal": 0.55, "overcast": 0.2, "fog": 0.125, "dusk": 0.125})
    max_curvature: float = Field(default=0.003, ge=0, le=0.02, description="1 / curve radius, in 1/m")
    max_offset_m: float = Field(default=0.15, ge=0, le=1.0)
    camera: CameraConfig = CameraConfig()

    @field_validator("conditions")
    @classmethod
    def _positive_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        if not weights or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise ValueError("conditions need non-negative weights with a positive sum")
        return weights

    @field_validator("track_types")
    @classmethod
    def _non_empty(cls, types: tuple[str, ...]) -> tuple[str, ...]:
        if not types:
            raise ValueError(f"track_types needs at least one of {list(TRACK_TYPES)}")
        return types

    @field_validator("frames", mode="before")
    @classmethod
    def _frames_default_to_every_image(cls, data: Any) -> Any:
        sampling = data.get("sampling") if isinstance(data, dict) else None
        if isinstance(data, dict) and (sampling is None or "stride" not in sampling):
            if sampling and sampling.get("fps") is not None:
                raise ValueError("an image folder has no frame rate: sample it with sampling.stride, not fps")
            return {**data, "sampling": {**(sampling or {}), "stride": 1}}
        return data

    @model_validator(mode="after")
    def _footage_needs_its_section(self) -> BackgroundConfig:
        if self.source in ("video", "frames") and self.footage is None:
            raise ValueError(f"backgrounds.source is {self.source!r}: set backgrounds.{self.source}.url")
        return self

    @property
    def footage(self) -> VideoBackgroundConfig | None:
        """The section of the footage in use (``video`` or ``frames``); None for procedural scenes."""
        return {"video": self.video, "frames": self.frames}.get(self.source)


class ProceduralSource(Section):
    """Drawn cutouts (the offline default); ``gallery.per_class`` of each class."""

    type: Literal["procedural"] = "procedural"
    classes: tuple[str, ...] | None = Field(default=None, description="a subset of the build's classes")


class CocoSource(Section):
    """COCO-format instances (COCO, LVIS, Objects365): an annotation's own segmentation is the mask, its box
    the segmenter's prompt where it has none (``mask``); heights per category (``heights_m`` over the
    built-in table of category names)."""

    type: Literal["coco"]
    annotations: str
    images: str
    class_map: dict[str, str] = Field(description="dataset category name -> our class")
    name: str = "objects365"
    min_area_px: int = Field(default=1024, ge=1)
    max_overlap: float = Field(default=0.3, ge=0, le=1)
    max_items: int | None = Field(default=None, ge=1)
    mask: Literal["auto", "annotation", "segmenter"] = Field(
        default="auto", description="auto: the annotation's segmentation where it has one, else the segmenter; "
                                    "annotation: only annotations with one; segmenter: every box segmented")
    heights_m: dict[str, Range] = Field(default_factory=dict, description="dataset category name -> real height "
                                        "range (m), over the built-in table (synrail/sources/sizes.py)")

    @field_validator("heights_m")
    @classmethod
    def _ordered_heights(cls, value: dict[str, Range]) -> dict[str, Range]:
        for name, (low, high) in value.items():
            if not 0 < low <= high:
                raise ValueError(f"heights_m[{name!r}] must be 0 < low <= high, got {(low, high)}")
        return value


class PennFudanSource(Section):
    """Pedestrians of PennFudanPed, whose masks come with the dataset."""

    type: Literal["pennfudan"]
    root: str
    max_items: int | None = Field(default=None, ge=1)


class RockFolderSource(Section):
    """Rock photos in class subfolders, no annotations: a detector's box, or the whole photo, is the prompt."""

    type: Literal["rocks"]
    root: str
    class_name: str = "rock"
    detector_weights: str | None = Field(default=None, description="Ultralytics weights that box the rock")
    detector_classes: tuple[str, ...] = ("rock", "stone", "boulder")
    max_items: int | None = Field(default=None, ge=1)


class RgbaFolderSource(Section):
    """Cutouts that already carry an alpha mask, all of one class, with the class's real height range (m)."""

    type: Literal["rgba"]
    root: str
    class_name: str
    height_m: Range | None = Field(default=None, description=(
        "real height range (low, high) in metres; unset: the class's built-in size prior, as for every "
        "other source (person 1.5-1.95, animal 0.5-1.6, vehicle 1.2-2.2, rock 0.2-1.0, unseen_obstacle "
        "0.3-1.5)"))


class DiffusionSource(Section):
    """Stable Diffusion images from the paper's prompt templates, then cut out."""

    type: Literal["diffusion"]
    model: DiffusionConfig
    prompts: DiffusionPromptConfig = DiffusionPromptConfig()


GallerySource = Annotated[
    ProceduralSource | CocoSource | PennFudanSource | RockFolderSource | RgbaFolderSource | DiffusionSource,
    Field(discriminator="type")]


class GalleryConfig(Section):
    """The obstacle gallery: its sources, procedural cutouts per class and their render height."""

    sources: tuple[GallerySource, ...] = (ProceduralSource(),)
    per_class: int = Field(default=12, ge=1, description="procedural cutouts per class")
    render_height_px: int = Field(default=256, ge=32, le=2048)
    dtd_root: str | None = Field(default=None, description="DTD folder: textures for unseen_obstacle polygons")
    random_texture: bool = Field(default=True, description="textured unseen obstacles (off: flat colour; "
                                                           "the paper's Table 7 switch)")


class SegmentConfig(Section):
    """Mask extraction: SAM from a checkpoint, or GrabCut when none is given."""

    backend: Literal["auto", "sam", "grabcut"] = "auto"
    checkpoint: str | None = None
    model_type: Literal["vit_b", "vit_l", "vit_h"] = "vit_h"
    device: str = "cpu"
    min_score: float = Field(default=0.5, ge=0, le=1)
    min_area_px: int = Field(default=256, ge=1)


class LinearScaleConfig(Section):
    """The paper's eq. 1: pasted width W = alpha * w + beta, w the track width in pixels there."""

    alpha: Range = (0.4, 0.6)
    beta: Range = (30.0, 45.0)
    reference_width: int = Field(default=1280, ge=1, description="image width beta is given for")

    @field_validator("alpha", "beta")
    @classmethod
    def _low_high(cls, value: Range, info: ValidationInfo) -> Range:
        return _ordered(value, info.field_name)


class DeprecatedConfigKey(FutureWarning):
    """A config key that still works for one release; the message names the form that replaces it.
    A FutureWarning, so Python shows it to whoever runs a build, not only to developers."""


def _deprecated(message: str) -> None:
    logging.getLogger(__name__).warning(message)
    warnings.warn(message, DeprecatedConfigKey, stacklevel=2)


class _HarmonizeBackend(Section):
    """One harmonization backend and its options (``synrail.compose.harmonizers``' constructor arguments)."""

    def harmonizer_options(self) -> dict[str, Any]:
        """The keyword arguments of ``make_harmonizer(self.backend, ...)``."""
        return self.model_dump(exclude={"backend"})


class LocalHarmonizeConfig(_HarmonizeBackend):
    """``local``: white points (exposure posterior, colour cast, part of the contrast)."""

    backend: Literal["local"]
    exposure_range: float = Field(default=0.6, gt=0, description="half-width of the exposure prior (log)")
    scene_spread: float = Field(default=0.3, gt=0, description="scale of the scene's own difference (log)")
    cast_strength: float = Field(default=0.5, ge=0, le=1)
    contrast_share: float = Field(default=0.3, ge=0, le=1)
    percentile: float = Field(default=99.0, gt=50, le=100, description="white point percentile")


class RingHarmonizeConfig(LocalHarmonizeConfig):
    """``ring``: ``local``, then the lightness and colour steps across the object's edge by posterior share."""

    backend: Literal["ring"]
    cast_strength: float = Field(default=1.0, ge=0, le=1)
    cast_prior: tuple[float, float] = (0.4, 0.2)
    lightness: tuple[float, float] = Field(default=(40.0, 2.25),
                                           description="(prior range in L, scene spread per robust spread of "
                                                       "the lightness steps across the object's edge)")
    chroma: tuple[float, float] = Field(default=(30.0, 2.25),
                                        description="(prior range of the cast's length in a-b units, scene spread "
                                                    "per robust spread of the colour steps across the object's edge)")
    spread: tuple[float, float] = Field(default=(0.0, 0.3), description="(prior range, scene spread); 0: off")
    ring_share: float = Field(default=0.3, gt=0, le=2, description="ring width / object height")
    edge_disagreement: float = Field(default=2.0, ge=0,
                                     description="the exposure's scene spread widens by this share of the white "
                                                 "points' and the edge's disagreement when they point opposite "
                                                 "ways; 0: off")


class LabHarmonizeConfig(_HarmonizeBackend):
    """``lab``: partial Reinhard transfer from the ring (the first default)."""

    backend: Literal["lab"]
    strength: float = Field(default=0.6, ge=0, le=1)


class PoissonHarmonizeConfig(_HarmonizeBackend):
    """``poisson``: gradient-domain blending (``cv2.seamlessClone``) faded into a band around the object."""

    backend: Literal["poisson"]
    mode: Literal["normal", "mixed"] = "normal"
    band_px: int = Field(default=2, ge=1)


class _LearnedHarmonizeConfig(_HarmonizeBackend):
    """A learned model of yours, exported to ``harmonizers.LEARNED_CONTRACT`` (README, "Learned harmonization")."""

    model: str = Field(description="the model file")
    batch_size: int = Field(default=8, ge=1)
    input_size: tuple[int, int] | None = Field(default=None, description="(height, width) the model expects")

    def harmonizer_options(self) -> dict[str, Any]:
        options = super().harmonizer_options()
        return {"path": options.pop("model"), **options}


class TorchScriptHarmonizeConfig(_LearnedHarmonizeConfig):
    """``torchscript``: a learned harmonizer exported with TorchScript."""

    backend: Literal["torchscript"]
    device: str | None = Field(default=None, description="default: cuda when available, else cpu")


class OnnxHarmonizeConfig(_LearnedHarmonizeConfig):
    """``onnx``: a learned harmonizer exported to ONNX, run with onnxruntime."""

    backend: Literal["onnx"]
    providers: tuple[str, ...] | None = Field(default=None, description="default: CUDA when onnxruntime has it")


HarmonizeConfig = Annotated[RingHarmonizeConfig | LocalHarmonizeConfig | LabHarmonizeConfig
                            | PoissonHarmonizeConfig | TorchScriptHarmonizeConfig | OnnxHarmonizeConfig,
                            Field(discriminator="backend")]
DEFAULT_HARMONIZE = RingHarmonizeConfig(backend="ring")  # chosen by benchmarks/harmonize.py --iharmony
_OLD_LEARNED = ("torchscript", "onnx")


def _upgrade_flat_harmonize(data: dict[str, Any]) -> None:
    """Old flat keys (``harmonize: lab``, ``harmonize_strength``, ``harmonize_model``) -> the union, in place."""
    strength, model = data.pop("harmonize_strength", None), data.pop("harmonize_model", None)
    name = data.get("harmonize")
    if not isinstance(name, str):
        if strength is not None or model is not None:
            _deprecated("compose.harmonize_strength and compose.harmonize_model are deprecated and ignored beside "
                        "compose.harmonize: {backend: ...}; give the options inside it (strength: for lab, "
                        "model: for torchscript/onnx)")
        return
    new: dict[str, Any] | None = None if name == "none" else {"backend": name}
    if new is not None and name == "lab" and strength is not None:
        new["strength"] = strength
    if new is not None and name in _OLD_LEARNED and model is not None:
        new["model"] = model
    replacement = "null" if new is None else "{" + ", ".join(f"{k}: {v}" for k, v in new.items()) + "}"
    _deprecated(f"compose.harmonize: {name} (with compose.harmonize_strength / harmonize_model) is deprecated "
                f"and will be removed in the next release; write compose.harmonize: {replacement}")
    data["harmonize"] = new


def _upgrade_shadows_flag(data: dict[str, Any]) -> None:
    """Old ``shadows: bool`` beside ``shadow:`` -> ``shadow: null`` (off) or ``shadow:`` as given (on), in place."""
    if "shadows" not in data:
        return
    on = data.pop("shadows")
    _deprecated(f"compose.shadows: {str(on).lower()} is deprecated and will be removed in the next release; "
                + ("shadows are on while compose.shadow is set (drop the key)" if on else "write compose.shadow: null"))
    if not on:
        data["shadow"] = None


class ComposeConfig(Section):
    """How obstacles are placed, scaled, blended, harmonized and shadowed on a background."""

    obstacles_per_image: tuple[int, int] = (1, 3)
    distance_m: Range = (5.0, 75.0)
    scale: Literal["metric", "linear"] = "metric"
    size_jitter: float = Field(default=0.1, ge=0, le=0.5, description="relative jitter of physical size")
    linear: LinearScaleConfig = LinearScaleConfig()
    min_visibility: float = Field(default=0.3, gt=0, le=1)
    min_visible_px: int = Field(default=24, ge=1)
    min_height_px: int = Field(default=6, ge=1)
    feather_px: float = Field(default=1.5, ge=0, le=10)
    harmonize: HarmonizeConfig | None = Field(default=DEFAULT_HARMONIZE, description=(
        "{backend: ring|local|lab|poisson|torchscript|onnx, ...its options}, or null for none"))
    shadow: ShadowConfig | None = Field(default=ShadowConfig(), description="contact shadows; null for none")
    match_camera: bool = Field(default=True, description="match blur and noise to real frames")
    max_attempts: int = Field(default=20, ge=1, description="placement tries per obstacle")

    @model_validator(mode="before")
    @classmethod
    def _accept_old_keys(cls, data: Any) -> Any:
        """Old flat keys still load, for one release, with a ``DeprecatedConfigKey`` warning naming the new form."""
        if isinstance(data, dict) and ({"harmonize_strength", "harmonize_model", "shadows"} & data.keys()
                                       or isinstance(data.get("harmonize"), str)):
            data = dict(data)
            _upgrade_flat_harmonize(data)
            _upgrade_shadows_flag(data)
        return data

    @field_validator("obstacles_per_image")
    @classmethod
    def _count_range(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 0 <= v[0] <= v[1] <= 50:
            raise ValueError(f"obstacles_per_image must be [low, high] with 0 <= low <= high <= 50, got {list(v)}")
        return v

    @field_validator("distance_m")
    @classmethod
    def _distance_range(cls, v: Range) -> Range:
        if not 0 < v[0] <= v[1]:
            raise ValueError(f"distance_m must be [low, high] with 0 < low <= high, got {list(v)}")
        return v


class SequencesConfig(Section):
    """Approach clips built beside the stills: obstacles fixed on the track while the camera approaches
    (``synrail.stages.sequences``). None by default; a config without clips builds what it always did."""

    clips: int = Field(default=0, ge=0, description="procedural approach clips (0: none)")
    frames_per_clip: int = Field(default=20, ge=2, le=1000)
    fps: float = Field(default=10.0, gt=0, le=120, description="frame rate; the camera moves speed / fps per frame")
    speed_kmh: Range = Field(default=(20.0, 80.0), description="the train's speed, drawn once per clip")
    obstacles_per_clip: tuple[int, int] = (1, 2)
    first_distance_m: Range = Field(default=(30.0, 90.0), description=(
        "an obstacle's distance along the track in the clip's first frame"))
    # Clips on footage (backgrounds.source video or frames): ``clips`` per video or frame sequence, from
    # consecutive frames (a video read every round(native fps / fps) frames, an image folder's every image,
    # ``fps`` apart); the speed from the sidecar's speed_kmh, else measured from the ground moving along the rails.
    max_source_frames: int = Field(default=600, ge=2, description="frames of a video or sequence read for clips")
    estimate_speed: bool = Field(default=True, description=(
        "without a sidecar speed_kmh, measure it from the image motion along the tracked rails; "
        "off: such videos get no clips"))
    motion_distance_m: Range = Field(default=(0.0, 20.0), description=(
        "ground ahead (m) where the motion is measured: the near ground moves pixels per frame, the far "
        "ground under one"))
    max_speed_kmh: float = Field(default=250.0, gt=0, description="the fastest train the motion search considers")

    @field_validator("speed_kmh", "first_distance_m", "obstacles_per_clip", "motion_distance_m")
    @classmethod
    def _ordered_positive(cls, value: tuple[float, float], info: ValidationInfo) -> tuple[float, float]:
        zero_ok = info.field_name in ("obstacles_per_clip", "motion_distance_m")
        if value[0] < 0 or (not zero_ok and value[0] <= 0):
            raise ValueError(f"{info.field_name} must be positive, got {list(value)}")
        return _ordered(value, info.field_name)


class ExecutionConfig(Section):
    """How the build runs. Never changes what it produces, so it is left out of the build hash."""

    chunk_size: int = Field(default=50, ge=1, description="images composed per task run")
    clips_per_task: int = Field(default=1, ge=1, description="approach clips composed per task run")
    backgrounds_per_task: int = Field(default=1, ge=1, description=(
        "procedural backgrounds rendered per task run: one shows each in the UI; more make fewer task runs, "
        "each of which costs Prefect and Dask a few tenths of a second of CPU"))
    max_workers: int = Field(default=2, ge=1, le=256, description="threads runner: threads; dask or ray without "
                                                                  "an address: local worker processes / CPUs")
    cache_url: str | None = Field(default=None, description="task cache location; default OUT/.synrail/cache")
    task_runner: Literal["threads", "dask", "ray"] = Field(
        default="threads", description="threads in the flow's process, Dask worker processes, or Ray")
    dask_address: str | None = Field(default=None, description="dask: an existing scheduler, tcp://host:8786")
    ray_address: str | None = Field(default=None, description="ray: an existing cluster, auto or ray://host:10001")

    @field_validator("dask_address", "ray_address")
    @classmethod
    def _an_address(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ValueError(f"{info.field_name} must be an address like tcp://host:8786, got {value!r}")
        return value

    @model_validator(mode="after")
    def _settings_of_the_chosen_runner(self) -> ExecutionConfig:
        misplaced = [name for name, runner in [("dask_address", "dask"), ("ray_address", "ray")]
                     if getattr(self, name) is not None and self.task_runner != runner]
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)} applies only to another task_runner; task_runner is "
                             f"{self.task_runner!r}")
        return self


class InputsConfig(Section):
    """How input files are read: gallery images, masks, textures and video frames."""

    max_image_pixels: int = Field(default=DEFAULT_MAX_IMAGE_PIXELS, ge=1, description=(
        "largest width x height an input image or video frame may declare; checked from the header "
        "before decoding, so a decompression bomb becomes a quarantine row instead of stopping the build"))


class IngestConfig(Section):
    """Incremental versions (``synrail.versions``): what each newly landed video adds."""

    images_per_video: int = Field(default=50, ge=1, description="composites drawn on each new video's frames")


class BuildConfig(Section):
    """The whole build: the root of the validated config tree."""

    name: str = "synrail-demo"
    seed: int = Field(default=0, ge=0)
    num_images: int = Field(default=200, ge=1)
    classes: tuple[str, ...] = OBSTACLE_KINDS
    image: ImageConfig = ImageConfig()
    splits: SplitConfig = SplitConfig()
    backgrounds: BackgroundConfig = BackgroundConfig()
    gallery: GalleryConfig = GalleryConfig()
    segment: SegmentConfig = SegmentConfig()
    compose: ComposeConfig = ComposeConfig()
    weather: WeatherConfig = WeatherConfig(mix={"none": 1.0})  # off unless a mix is configured
    quality: QualityConfig | None = None  # composite quality control: off unless configured
    inputs: InputsConfig = InputsConfig()
    ingest: IngestConfig = IngestConfig()
    sequences: SequencesConfig = SequencesConfig()
    execution: ExecutionConfig = ExecutionConfig()

    @field_validator("classes")
    @classmethod
    def _known_classes(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in OBSTACLE_KINDS]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"classes must be distinct names from {list(OBSTACLE_KINDS)}, got {list(names)}")
        return names

    @model_validator(mode="after")
    def _sources_fit_the_classes(self) -> BuildConfig:
        for source in self.gallery.sources:
            targets = (set(source.class_map.values()) if isinstance(source, CocoSource)
                       else {source.class_name} if isinstance(source, (RockFolderSource, RgbaFolderSource)) else set())
            unknown = targets - set(self.classes)
            if unknown:
                raise ValueError(f"gallery source {source.type} maps to {sorted(unknown)}, which are not in "
                                 f"classes {list(self.classes)}")
        return self

    @model_validator(mode="after")
    def _enough_backgrounds(self) -> BuildConfig:
        used = sum(1 for share in self.splits.fractions().values() if share > 0)
        if self.backgrounds.source == "procedural" and self.backgrounds.count < used:
            raise ValueError(f"backgrounds.count must be at least {used} (one per split in use, so that "
                             f"splits never share a scene), got {self.backgrounds.count}")
        if self.splits.train <= 0:
            raise ValueError("splits.train must be > 0")
        return self

    def content_dict(self) -> dict[str, Any]:
        """Everything that decides the dataset's bytes (execution settings excluded; the sequences
        section only when it asks for clips, so builds without clips keep their hash and card)."""
        left_out = {"execution"} | ({"sequences"} if not self.sequences.clips else set())
        return self.model_dump(mode="json", exclude=left_out)

    def build_hash(self) -> str:
        """A 16-hex-digit hash of ``content_dict()``: equal for every config that gives the same bytes."""
        return hashlib.sha256(json.dumps(self.content_dict(), sort_keys=True).encode()).hexdigest()[:16]


def _format_errors(err: ValidationError, origin: str) -> str:
    lines = [f"invalid config {origin}:"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {field}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested dict, creating levels as needed."""
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {dotted!r}: {key!r} is not a section")
    node[leaf] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``compose.scale=linear`` -> ("compose.scale", "linear"); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.field=value")
    key, raw = text.split("=", 1)
    return key.strip(), yaml.safe_load(raw)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> BuildConfig:
    """Read a YAML config (or the defaults), apply dotted overrides, validate."""
    origin = str(path) if path else "(defaults)"
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        data = loaded or {}
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    try:
        return BuildConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, origin)) from None

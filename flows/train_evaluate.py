"""Training and evaluation as Prefect flows: ``train-and-evaluate`` (one detector on one built
dataset) and ``reproduce`` (the paper's Tables 3-7 for the models and data a user has).

Tasks are thin wrappers over ``synrail.train``; they pass paths and small reports, never images.
Training, prediction and event scoring carry the tag ``gpu`` when they run on CUDA, so
``prefect concurrency-limit create gpu 1`` keeps them from sharing a device. None is cached: they
write run folders, and a rerun is meant to rerun. Tables are written as CSV and Markdown and
published as table artifacts plus one Markdown artifact.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, model_validator

from synrail.stages.versions import local_copy
from synrail.train.detector import (
    TrainConfig,
    TrainResult,
    frame_scorer,
    load_model,
    parameter_count_m,
    predict_coco,
    train_detector,
    uses_gpu,
)
from synrail.train.evaluate import EvalReport, TestSet, evaluate_coco, resolve_test_set, split_images
from synrail.train.events import EventReport, event_accuracy, load_clips
from synrail.train.tables import (
    AblationResult,
    ModelResult,
    Table,
    artifact_key,
    events_table,
    metrics_table,
    paper_tables,
    to_markdown,
    write_table,
)


def _device_tags(device: str) -> list[str]:
    return ["gpu"] if uses_gpu(device) else []


# a retry helps with what fails on its own (a lost CUDA context, a worker killed for memory by a
# neighbour); a retry of a pure computation would fail the same way, so those have none
@task(name="train-detector", retries=1, retry_delay_seconds=30, cache_policy=NO_CACHE)
def train_task(data_yaml: str, cfg: TrainConfig) -> TrainResult:
    return train_detector(data_yaml, cfg)


@task(name="resolve-test-set", cache_policy=NO_CACHE)
def test_set_task(data_yaml: str, split: str, work_dir: str) -> TestSet:
    return resolve_test_set(data_yaml, split, work_dir)


@task(name="predict", retries=1, retry_delay_seconds=10, cache_policy=NO_CACHE)
def predict_task(weights: str, test_set: TestSet, imgsz: int, device: str, out_json: str) -> str:
    """COCO results of ``weights`` on the test set, written to ``out_json`` (its path is returned)."""
    results = predict_coco(weights, test_set.gt_json, test_set.images_dir, imgsz=imgsz, device=device)
    Path(out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(out_json).write_text(json.dumps(results))
    return out_json


@task(name="model-size", cache_policy=NO_CACHE)
def model_size_task(weights: str) -> float:
    return parameter_count_m(load_model(weights))


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_task(gt_json: str, predictions_json: str) -> EvalReport:
    return evaluate_coco(gt_json, predictions_json)


@task(name="event-accuracy", retries=1, retry_delay_seconds=10, cache_policy=NO_CACHE)
def events_task(weights: str, clips_csv: str, threshold: float, imgsz: int, device: str) -> EventReport:
    detector = frame_scorer(weights, conf=threshold, imgsz=imgsz, device=device)
    return event_accuracy(load_clips(clips_csv), detector, score_threshold=threshold)


def publish(tables: list[Table], out_dir: Path, report_key: str, description: str) -> None:
    """CSV + Markdown files, one table artifact per table, and one Markdown artifact of them all."""
    markdown = []
    for table in tables:
        write_table(table, out_dir)
        create_table_artifact(key=table.key, table=table.records(), description=table.title)
        markdown.append(to_markdown(table))
    create_markdown_artifact(key=report_key, markdown=f"# {description}\n\n" + "\n".join(markdown),
                             description=description)


class TrainEvaluateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    train: TrainResult
    detection: EvalReport | None
    events: EventReport | None
    out_dir: Path


def has_split(data_yaml: str, split: str) -> bool:
    try:
        split_images(data_yaml, split)
    except (ValueError, FileNotFoundError):
        return False
    return True


def expected_task_runs(data_yaml: str, eval_split: str | None, clips: str | None) -> int:
    """How many task runs one ``train_and_evaluate`` makes (the flow below, counted)."""
    evaluates = eval_split is not None and has_split(data_yaml, eval_split)
    return 1 + (3 if evaluates else 0) + (1 if clips else 0)


@flow(name="train-and-evaluate", log_prints=True)
def train_and_evaluate(data_yaml: str, train: TrainConfig, eval_split: str | None = "test",
                       out_dir: str | None = None, clips: str | None = None,
                       event_threshold: float = 0.25) -> TrainEvaluateResult:
    """Train ``train.model`` on ``data_yaml``, then evaluate it on ``eval_split`` (when data.yaml
    has that split) and, given a clip manifest, on events. Tables go to ``out_dir`` (default: the
    run folder's ``eval/``)."""
    tags = _device_tags(train.device)
    trained = train_task.with_options(tags=tags)(data_yaml, train)
    out = Path(out_dir) if out_dir else trained.save_dir / "eval"
    key = artifact_key(train.run_name)
    tables: list[Table] = []
    detection = events = None
    if eval_split is not None and has_split(data_yaml, eval_split):
        test_set = test_set_task(data_yaml, eval_split, str(out))
        predictions = predict_task.with_options(tags=tags)(str(trained.weights), test_set, train.imgsz, train.device,
                                                           str(out / f"predictions_{eval_split}.json"))
        detection = evaluate_task(str(test_set.gt_json), predictions)
        tables.append(metrics_table(detection, f"{key}-{artifact_key(eval_split)}-metrics",
                                    f"{train.run_name} on {eval_split}"))
    if clips:
        events = events_task.with_options(tags=tags)(str(trained.weights), clips, event_threshold, train.imgsz,
                                                     train.device)
        tables.append(events_table(events, f"{key}-events", f"{train.run_name} event accuracy"))
    publish(tables, out, f"{key}-report", f"{train.run_name} trained on {data_yaml}")
    return TrainEvaluateResult(train=trained, detection=detection, events=events, out_dir=out)


@flow(name="train-latest-version", log_prints=True)
def train_latest_version(dataset_url: str, train: TrainConfig, eval_split: str | None = "test",
                         local_dir: str = "data/synrail") -> TrainEvaluateResult:
    """Train and evaluate on the latest version of a versioned dataset (or on a plain export),
    downloaded into ``local_dir`` first when it lives on an object store."""
    data_yaml = local_copy(dataset_url, local_dir)
    print(f"training on {data_yaml}")
    return train_and_evaluate(str(data_yaml), train, eval_split)


class ModelSpec(BaseModel):
    """One row of Tables 3-6: a model to train, trained weights, or another framework's COCO
    results on the test split (e.g. Faster R-CNN, nanodet)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    train: TrainConfig | None = None
    weights: str | None = None
    predictions: str | None = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> ModelSpec:
        if sum(x is not None for x in (self.train, self.weights, self.predictions)) != 1:
            raise ValueError(f"model {self.name!r} needs exactly one of train, weights, predictions")
        return self


class AblationSpec(BaseModel):
    """One row of Table 7: a training set built with these switches on or off (harmonization,
    rescaling, random textures: one variant of a Table 7 build) to train
    ``ReproduceSpec.ablation_train`` on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    harmony: bool
    rescale: bool
    random_texture: bool
    data_yaml: str


class ReproduceSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    test_data: str  # a data.yaml (SynRail build or YOLO form) whose test_split is the test set
    test_split: str = "test"
    train_data: str | None = None  # what models with ``train`` are trained on
    clips: str | None = None  # clip manifest CSV (video,label[,track_type,condition]) for event accuracy
    event_threshold: float = 0.25
    imgsz: int = 640
    device: str = "cpu"
    models: list[ModelSpec] = []
    ablation_train: TrainConfig | None = None
    ablations: list[AblationSpec] = []

    @model_validator(mode="after")
    def _training_has_data(self) -> ReproduceSpec:
        if any(m.train for m in self.models) and self.train_data is None:
            raise ValueError("models with train need train_data")
        if self.ablations and self.ablation_train is None:
            raise ValueError("ablations need ablation_train")
        return self


def _model_result(spec: ReproduceSpec, model: ModelSpec, test_set: TestSet, out: Path) -> ModelResult:
    weights = model.weights
    if model.train is not None:
        cfg = model.train.model_copy(update={"name": model.train.name or artifact_key(model.name)})
        weights = str(train_task.with_options(tags=_device_tags(cfg.device))(spec.train_data, cfg).weights)
    if weights is None:
        return ModelResult(name=model.name, detection=evaluate_task(str(test_set.gt_json), model.predictions))
    tags = _device_tags(spec.device)
    predictions = predict_task.with_options(tags=tags)(weights, test_set, spec.imgsz, spec.device,
                                                       str(out / "predictions" / f"{artifact_key(model.name)}.json"))
    events = (events_task.with_options(tags=tags)(weights, spec.clips, spec.event_threshold, spec.imgsz, spec.device)
              if spec.clips else None)
    return ModelResult(name=model.name, params_m=model_size_task(weights),
                       detection=evaluate_task(str(test_set.gt_json), predictions), events=events)


def _ablation_result(spec: ReproduceSpec, ablation: AblationSpec, test_set: TestSet, out: Path) -> AblationResult:
    switches = (ablation.harmony, ablation.rescale, ablation.random_texture)
    flags = "".join(letter for letter, on in zip("hrt", switches, strict=True)
                    if on) or "base"
    cfg = spec.ablation_train.model_copy(update={"name": f"ablation-{flags}"})
    weights = str(train_task.with_options(tags=_device_tags(cfg.device))(ablation.data_yaml, cfg).weights)
    predictions = predict_task.with_options(tags=_device_tags(spec.device))(
        weights, test_set, spec.imgsz, spec.device, str(out / "predictions" / f"ablation-{flags}.json"))
    return AblationResult(harmony=ablation.harmony, rescale=ablation.rescale, random_texture=ablation.random_texture,
                          detection=evaluate_task(str(test_set.gt_json), predictions))


@flow(name="reproduce", log_prints=True)
def reproduce(spec: ReproduceSpec, out_dir: str = "runs/reproduce") -> list[Table]:
    """The paper's Tables 3-7 for ``spec``'s models and data; cells without data say n/a.

    Models run one after another: each training takes the whole device."""
    out = Path(out_dir)
    test_set = test_set_task(spec.test_data, spec.test_split, str(out))
    models = [_model_result(spec, m, test_set, out) for m in spec.models]
    ablations = [_ablation_result(spec, a, test_set, out) for a in spec.ablations]
    tables = paper_tables(models, ablations)
    tables += [metrics_table(m.detection, f"{artifact_key(m.name)}-metrics", m.name) for m in models if m.detection]
    publish(tables, out, "reproduce-report", f"SynRailObs Tables 3-7 on {spec.test_data} ({spec.test_split})")
    return tables

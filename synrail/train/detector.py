"""Training and inference of Ultralytics detectors (YOLOv5/v8/11, RT-DETR), offline.

Offline means no font, weight or telemetry download, ever. Ultralytics would otherwise:
- send usage events and pip-update checks when it thinks it is online: ``YOLO_OFFLINE=1`` (read
  once, when ``ultralytics`` is first imported, so it is set before that) and the ``sync`` setting
  off stop both; should ultralytics have been imported before us, its event sender is switched off;
- fetch ``Arial.ttf`` on every dataset check (``check_font`` sends a HEAD request even with
  ``YOLO_OFFLINE=1``); we hand it a font that ships with matplotlib instead;
- download ``yolo26n.pt`` for its AMP self-test on CUDA; without that file locally we skip the
  test and keep AMP on, as Ultralytics does itself when the download fails;
- download any bare ``*.pt`` name it knows: a ``.pt`` here must be an existing file;
- replace Pillow's ``Image.open``, for every caller in the process, with one that tries to pip-install
  ``pi-heif`` when it meets an image it cannot identify, and raises ``ModuleNotFoundError`` where
  Pillow raised ``UnidentifiedImageError``: Pillow's own is put back, so a corrupt image stays a
  quarantine record after a detector was loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from synrail.train.evaluate import load_coco_document

MODEL_CONFIG_SUFFIXES = (".yaml", ".yml")


class TrainConfig(BaseModel):
    """One detector training run. Defaults follow the paper's §4.1 (50 epochs, 640 px, batch 32,
    Adam at lr 0.001)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field("yolov8n.yaml", description="an Ultralytics model *.yaml (from scratch) or an existing .pt file")
    epochs: int = Field(50, ge=1)
    hours: float | None = Field(None, gt=0, description="a time budget: as many epochs as fit (Ultralytics' time)")
    imgsz: int = Field(640, ge=32)
    batch: int = Field(32, ge=1)
    device: str = Field("cpu", description="'cpu', '0', '0,1', 'cuda:0', 'mps'")
    workers: int = Field(4, ge=0)
    seed: int = 0
    project: str = "runs/train"
    name: str | None = Field(None, description="run folder under project; default: the model's file stem")
    plots: bool = False
    pretrained: str | None = Field(None, description="an existing .pt whose weights initialise the model")
    optimizer: str = "Adam"
    lr0: float = Field(0.001, gt=0)
    amp: bool = True

    @field_validator("model")
    @classmethod
    def _model_is_a_config_or_a_local_file(cls, value: str) -> str:
        if value.lower().endswith(MODEL_CONFIG_SUFFIXES):
            return value
        if value.lower().endswith(".pt") and Path(value).is_file():
            return value
        raise ValueError(f"model {value!r} must be an Ultralytics *.yaml or an existing .pt file "
                         "(a bare .pt name would be downloaded)")

    @field_validator("pretrained")
    @classmethod
    def _pretrained_is_a_local_file(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"pretrained weights {value!r} are not a file")
        return value

    @property
    def run_name(self) -> str:
        """The run's name: ``name``, else the model file's stem."""
        return self.name or Path(self.model).stem

    @property
    def save_dir(self) -> Path:
        """The absolute folder Ultralytics writes this run to."""
        return Path(self.project).resolve() / self.run_name


class TrainResult(BaseModel):
    """A finished training run: its best weights, its folder and its final validation metrics."""

    model_config = ConfigDict(frozen=True)

    weights: Path
    save_dir: Path
    metrics: dict[str, float]


def uses_gpu(device: str) -> bool:
    """True for CUDA devices ('0', '0,1', 'cuda:0'), False for 'cpu' and 'mps'."""
    return not device.strip().lower().startswith(("cpu", "mps"))


@cache
def offline_ultralytics() -> ModuleType:
    """Import ``ultralytics`` with every network path closed (see the module docstring)."""
    os.environ["YOLO_OFFLINE"] = "1"
    from PIL import Image

    pillow_open = Image.open
    from ultralytics.utils import SETTINGS  # settings only: models are not imported yet

    if SETTINGS.get("sync"):
        SETTINGS.update(sync=False)
    import ultralytics
    from ultralytics.data import utils as data_utils
    from ultralytics.engine import trainer
    from ultralytics.utils import events, plotting

    events.events.enabled = False  # in case ultralytics was imported, online, before we were
    data_utils.check_font = plotting.check_font = _local_font
    trainer.check_amp = _amp_check_without_download(trainer.check_amp)
    Image.open = pillow_open
    return ultralytics


def _local_font(font: str = "Arial.ttf") -> Path:
    from matplotlib import get_data_path
    from ultralytics.utils import USER_CONFIG_DIR

    user_font = USER_CONFIG_DIR / Path(font).name
    return user_font if user_font.is_file() else Path(get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"


def _amp_check_without_download(check_amp: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """Ultralytics' AMP check, except on CUDA without its check model at hand: AMP on, no download."""
    def amp_check(model: Any) -> bool:
        from ultralytics.utils import WEIGHTS_DIR

        on_cuda = next(model.parameters()).device.type == "cuda"
        return True if on_cuda and not (WEIGHTS_DIR / "yolo26n.pt").is_file() else check_amp(model)
    return amp_check


def _is_rtdetr_config(model: str) -> bool:
    return Path(model).stem.lower().startswith("rtdetr")


def load_model(model: str) -> Any:
    """An Ultralytics model from a *.yaml (RT-DETR configs get the RTDETR class) or a local .pt."""
    ultralytics = offline_ultralytics()
    if model.lower().endswith(MODEL_CONFIG_SUFFIXES):
        return ultralytics.RTDETR(model) if _is_rtdetr_config(model) else ultralytics.YOLO(model)
    if not Path(model).is_file():
        raise FileNotFoundError(f"weights file {model} does not exist")
    loaded = ultralytics.YOLO(model)
    # YOLO() loads an RT-DETR checkpoint but would train and predict it with YOLO's heads' logic
    if type(loaded.model).__name__ == "RTDETRDetectionModel":
        return ultralytics.RTDETR(model)
    return loaded


def parameter_count_m(model: Any) -> float:
    """Parameters of a loaded Ultralytics model, in millions (the tables' 'Paras (M)')."""
    return sum(p.numel() for p in model.model.parameters()) / 1e6


def train_detector(data_yaml: str | Path, cfg: TrainConfig) -> TrainResult:
    """Train ``cfg.model`` on a built ``data.yaml``; the run goes to ``cfg.project/run_name``.

    Args:
        data_yaml: the dataset's Ultralytics ``data.yaml``.
        cfg: the model, training settings and output folder.

    Returns:
        The best weights (the last ones when no best was saved), the run folder and the final
        validation metrics.

    Raises:
        FileNotFoundError: no file at ``data_yaml``.
    """
    data_yaml = Path(data_yaml)
    if not data_yaml.is_file():
        raise FileNotFoundError(f"data.yaml {data_yaml} does not exist")
    model = load_model(cfg.model)
    # project is absolute (save_dir): Ultralytics puts a relative one under its own runs_dir setting
    train_args: dict[str, Any] = dict(
        data=str(data_yaml.resolve()), epochs=cfg.epochs, imgsz=cfg.imgsz, batch=cfg.batch, device=cfg.device,
        workers=cfg.workers, seed=cfg.seed, project=str(cfg.save_dir.parent), name=cfg.run_name, exist_ok=True,
        plots=cfg.plots, optimizer=cfg.optimizer, lr0=cfg.lr0, amp=cfg.amp, verbose=False)
    if cfg.hours is not None:
        train_args["time"] = cfg.hours
    if cfg.pretrained:
        train_args["pretrained"] = str(Path(cfg.pretrained).resolve())
    model.train(**train_args)
    trainer = model.trainer
    weights = Path(trainer.best if Path(trainer.best).is_file() else trainer.last)
    metrics = {key: float(value) for key, value in (trainer.metrics or {}).items()}
    return TrainResult(weights=weights, save_dir=Path(trainer.save_dir), metrics=metrics)


def _image_index(coco: dict[str, Any], images_dir: Path) -> list[tuple[int, Path]]:
    return [(image["id"], images_dir / image["file_name"]) for image in coco["images"]]


def category_ids_by_model_class(model_names: dict[int, str], categories: Sequence[dict[str, Any]]) -> dict[int, int]:
    """Model class index -> COCO category id, matched by name; model classes the test set lacks drop out.

    Args:
        model_names: the model's class index -> name.
        categories: the COCO document's categories (``id``, ``name``).

    Returns:
        Model class index -> category id, for the names both share.
    """
    by_name = {c["name"]: c["id"] for c in categories}
    return {index: by_name[name] for index, name in model_names.items() if name in by_name}


def predict_coco(weights: str | Path, coco: dict[str, Any] | str | Path, images_dir: str | Path,
                 conf: float = 0.001, imgsz: int = 640, device: str = "cpu", batch: int = 8) -> list[dict[str, Any]]:
    """COCO result dicts (image_id, category_id, bbox xywh, score) for every image of a COCO test set.

    ``conf=0.001`` keeps the low-score tail, so the precision/recall curve that mAP integrates is
    complete (as Ultralytics' own validation does).

    Args:
        weights: the detector's weights file.
        coco: the ground-truth COCO document, or its file path.
        images_dir: the folder the documents' ``file_name`` values are relative to.
        conf: the lowest score kept.
        imgsz: the inference size, in pixels.
        device: the Ultralytics device ("cpu", "0", ...).
        batch: images per prediction call.

    Returns:
        One dict per detection, bbox in pixels of the original image; classes the test set lacks are left out.
    """
    coco = load_coco_document(coco)
    model = load_model(str(weights))
    categories = category_ids_by_model_class(model.names, coco["categories"])
    images = _image_index(coco, Path(images_dir))
    results: list[dict[str, Any]] = []
    for start in range(0, len(images), batch):
        chunk = images[start:start + batch]
        predictions = model.predict([str(path) for _, path in chunk], conf=conf, imgsz=imgsz, device=device,
                                    batch=batch, verbose=False)
        for (image_id, _), prediction in zip(chunk, predictions, strict=True):
            results += _coco_results(image_id, prediction, categories)
    return results


def _coco_results(image_id: int, prediction: Any, categories: dict[int, int]) -> list[dict[str, Any]]:
    boxes = prediction.boxes
    rows = []
    for (x1, y1, x2, y2), score, cls in zip(boxes.xyxy.tolist(), boxes.conf.tolist(), boxes.cls.tolist(), strict=True):
        if int(cls) in categories:
            rows.append({"image_id": image_id, "category_id": categories[int(cls)],
                         "bbox": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
                         "score": round(float(score), 5)})
    return rows


def frame_scorer(weights: str | Path, conf: float = 0.05, imgsz: int = 640,
                 device: str = "cpu") -> Callable[[np.ndarray], list[float]]:
    """A per-frame detector for event evaluation: BGR frame -> scores of its detections.

    Args:
        weights: the detector's weights file (loaded once, here).
        conf: the lowest score kept.
        imgsz: the inference size, in pixels.
        device: the Ultralytics device ("cpu", "0", ...).

    Returns:
        ``scores(frame)``: the scores of the detections in one H x W x 3 uint8 BGR frame.
    """
    model = load_model(str(weights))

    def scores(frame: np.ndarray) -> list[float]:
        prediction = model.predict(frame, conf=conf, imgsz=imgsz, device=device, verbose=False)[0]
        return [float(s) for s in prediction.boxes.conf.tolist()]
    return scores

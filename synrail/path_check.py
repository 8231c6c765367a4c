"""Every path a config names, checked before any work: a bad one is one line naming the key and the path.

The command line (``flows/cli.py``) calls :func:`check_paths` right after loading the config and before
Prefect starts, so a missing folder, a file where a folder belongs, an empty video folder, a broken COCO
JSON or a PennFudan folder without ``PedMasks/`` is reported in seconds (exit 2) instead of minutes
into a build.

Which keys are paths is written down once, in :data:`PATH_KEYS`; every other text-valued key of the
config models is listed in :data:`NOT_PATHS`. :func:`text_keys` enumerates the text-valued keys of the
pydantic models themselves, and a test asserts the two lists cover them exactly, so a new path key
cannot be added without saying how it is checked.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from synrail.config import BuildConfig, ConfigError

Kind = Literal["folder", "file", "output"]
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov")  # synrail.sources.video.VIDEO_EXTENSIONS
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")  # synrail.sources.video.IMAGE_EXTENSIONS
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")  # gallery_sources.PHOTO_SUFFIXES
RGBA_SUFFIXES = (".png", ".webp")  # gallery_sources.RGBA_SUFFIXES
FULL_JSON_BYTES = 64 * 2**20  # COCO files up to this size are parsed whole; larger ones only opened


class PathProblem(ConfigError):
    """A configured path that cannot serve its key; the message is one line naming the key and the path."""


@dataclass(frozen=True)
class PathKey:
    """How one path-valued key is checked: what must exist there, then what it must hold."""

    kind: Kind  # folder: an existing folder; file: an existing readable file; output: created when missing
    content: Callable[[str], str | None] | None = None  # the value -> a problem, or None when it will do
    meaning: str = ""  # what the key names (for the documentation)
    words: tuple[str, ...] = ()  # values that name no path (``builtin``)


# -- content checks: each takes the configured value (a local path or a URL) --------------------------


def _is_url(value: str) -> bool:
    return "://" in value and not value.startswith("file://")


def _local(value: str) -> str:
    return str(Path(value.removeprefix("file://")).expanduser())


def _entries(value: str) -> Iterator[os.DirEntry[str]]:
    with os.scandir(_local(value)) as entries:
        for entry in entries:
            if not entry.name.startswith("."):
                yield entry


def _has_file(value: str, suffixes: tuple[str, ...]) -> bool:
    return any(e.is_file() and e.name.lower().endswith(suffixes) for e in _entries(value))


def _names(suffixes: tuple[str, ...]) -> str:
    return ", ".join(s.lstrip(".") for s in suffixes)


def _videos(value: str) -> str | None:
    from synrail.sources.video import list_videos

    return None if list_videos(value) else f"no video ({_names(VIDEO_SUFFIXES)}) in {value}"


def _frames(value: str) -> str | None:
    from synrail.sources.video import list_sequences

    return None if list_sequences(value) else f"no image ({_names(FRAME_SUFFIXES)}) in {value}"


def _sidecar(value: str) -> str | None:
    from synrail.sources.video import read_sidecar

    try:
        read_sidecar(value)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        return str(err).splitlines()[0] if str(err) else f"video sidecar {value} cannot be read"
    return None


def _head(value: str, size: int = 4) -> bytes:
    import fsspec

    with fsspec.open(value if _is_url(value) else _local(value), "rb") as handle:
        return handle.read(size)


def _torch_file(value: str) -> str | None:
    head = _head(value)
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":  # torch.save / TorchScript zip, or a legacy pickle
        return None
    return f"{value} is not a PyTorch or TorchScript file (neither a zip archive nor a pickle)"


def _detector_weights(value: str) -> str | None:
    # Ultralytics also loads .onnx, .engine, .torchscript ... files: only .pt / .pth are looked into
    return _torch_file(value) if value.lower().endswith((".pt", ".pth")) else None


def _onnx_file(value: str) -> str | None:
    # An ONNX ModelProto starts with field 1 (ir_version, a varint): the byte 0x08
    return None if _head(value, 1) == b"\x08" else f"{value} is not an ONNX model"


def _coco_json(value: str) -> str | None:
    if _is_url(value):
        return None
    path = Path(_local(value))
    if path.stat().st_size > FULL_JSON_BYTES:  # Objects365's train file: parsed by the build, not here
        return None if _head(value, 64).lstrip()[:1] == b"{" else f"COCO annotations {value} are not JSON"
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError) as err:
        return f"COCO annotations {value} are not valid JSON: {err}"
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list)
                                             for k in ("images", "annotations", "categories")):
        return f"COCO annotations {value} need 'images', 'annotations' and 'categories' lists"
    return None


def _not_empty(value: str) -> str | None:
    if _is_url(value):
        return None
    return None if next(_entries(value), None) is not None else f"{value} is an empty folder"


def _pennfudan(value: str) -> str | None:
    if _is_url(value):
        return None
    layout = "(PennFudanPed: PNGImages/ and PedMasks/)"
    for sub in ("PNGImages", "PedMasks"):
        if not os.path.isdir(os.path.join(_local(value), sub)):
            return f"{value} has no {sub}/ folder {layout}"
    if not _has_file(os.path.join(_local(value), "PNGImages"), (".png",)):
        return f"no png image in {value}/PNGImages {layout}"
    return None


def _rocks(value: str) -> str | None:
    if _is_url(value):
        return None
    if any(e.is_dir() and _has_file(e.path, PHOTO_SUFFIXES) for e in _entries(value)):
        return None
    return f"no class subfolder with photos ({_names(PHOTO_SUFFIXES)}) in {value}"


def _rgba(value: str) -> str | None:
    if _is_url(value) or _has_file(value, RGBA_SUFFIXES):
        return None
    return f"no cutout ({_names(RGBA_SUFFIXES)}) in {value}"


def _diffusers(value: str) -> str | None:
    if os.path.isfile(os.path.join(_local(value), "model_index.json")):
        return None
    return f"{value} has no model_index.json (not a diffusers model folder)"


def _dtd(value: str) -> str | None:
    if _is_url(value):
        return None
    images = os.path.join(_local(value), "images")
    if not os.path.isdir(images):
        return f"{value} has no images/ folder (DTD: images/<category>/*.jpg)"
    if any(e.is_dir() and _has_file(e.path, (".jpg", ".jpeg")) for e in _entries(images)):
        return None
    return f"no texture (images/<category>/*.jpg) in {value}"


def _track_area_model(value: str) -> str | None:
    problem = _onnx_file(value)
    if problem is None and not _is_url(value) and not os.path.isfile(str(Path(_local(value)).with_suffix(".json"))):
        problem = f"{value} has no JSON sidecar beside it ({Path(value).with_suffix('.json').name})"
    return problem


def _footage(kind: str, url_check: Callable[[str], str | None]) -> dict[str, PathKey]:
    base = f"backgrounds.{kind}"
    return {
        f"{base}.url": PathKey("folder", url_check, "the footage: a folder or s3:// prefix of "
                               + ("videos" if kind == "video" else "image sequences")),
        f"{base}.track_model": PathKey("file", _torch_file, "a TorchScript coarse track-area model"),
        f"{base}.track_area_model": PathKey("file", _track_area_model, "an ONNX ego-track-area model and its "
                                            "JSON sidecar", words=("builtin",)),
        f"{base}.sampling.sidecar": PathKey("file", _sidecar, "per-video metadata (CSV or Parquet)"),
        f"{base}.sampling.filters.detector_weights": PathKey("file", _detector_weights,
                                                             "Ultralytics weights of the obstacle filter"),
    }


# Schema keys: dotted field names; a field holding one of several models (a discriminated union) adds
# [<its type or backend>], so ``gallery.sources[pennfudan].root`` is PennFudan's root in any position.
PATH_KEYS: dict[str, PathKey] = {
    **_footage("video", _videos),
    **_footage("frames", _frames),
    "gallery.sources[coco].annotations": PathKey("file", _coco_json, "a COCO instances JSON"),
    "gallery.sources[coco].images": PathKey("folder", _not_empty, "the COCO images' folder"),
    "gallery.sources[pennfudan].root": PathKey("folder", _pennfudan, "PennFudanPed (PNGImages/, PedMasks/)"),
    "gallery.sources[rocks].root": PathKey("folder", _rocks, "photos in class subfolders"),
    "gallery.sources[rocks].detector_weights": PathKey("file", _detector_weights, "Ultralytics weights"),
    "gallery.sources[rgba].root": PathKey("folder", _rgba, "PNG/WebP cutouts with alpha"),
    "gallery.sources[diffusion].model.model_dir": PathKey("folder", _diffusers, "a diffusers model folder"),
    "gallery.dtd_root": PathKey("folder", _dtd, "the Describable Textures Dataset (images/<category>/)"),
    "segment.checkpoint": PathKey("file", _torch_file, "a SAM checkpoint"),
    "compose.harmonize[torchscript].model": PathKey("file", _torch_file, "a TorchScript harmonizer"),
    "compose.harmonize[onnx].model": PathKey("file", _onnx_file, "an ONNX harmonizer"),
    "execution.cache_url": PathKey("output", None, "the task cache (created when missing)"),
}

# Text-valued keys that are not paths (names, devices, addresses).
NOT_PATHS: frozenset[str] = frozenset({
    "name", "classes",
    *(f"backgrounds.{kind}.sampling.filters.{key}" for kind in ("video", "frames")
      for key in ("detector_classes", "detector_device")),
    "gallery.sources[procedural].classes",
    "gallery.sources[coco].class_map", "gallery.sources[coco].name",
    "gallery.sources[rocks].class_name", "gallery.sources[rocks].detector_classes",
    "gallery.sources[rgba].class_name",
    "gallery.sources[diffusion].model.scheduler",
    "gallery.sources[diffusion].prompts.templates", "gallery.sources[diffusion].prompts.vocabulary",
    "gallery.sources[diffusion].prompts.suffix",
    "segment.device",
    "compose.harmonize[torchscript].device", "compose.harmonize[onnx].providers",
    "execution.dask_address", "execution.ray_address",
})


# -- walking the models --------------------------------------------------------------------------------


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, Annotated, tuples, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _holds_text(annotation: Any) -> bool:
    """Whether the annotation can hold free text or a path (str or Path, alone, in a tuple or as dict values)."""
    if annotation in (str, Path):
        return True
    if typing.get_origin(annotation) is Literal:
        return False
    if typing.get_origin(annotation) is dict:  # keys name things (classes, categories); values may be paths
        return _holds_text(typing.get_args(annotation)[1])
    return any(_holds_text(arg) for arg in typing.get_args(annotation) if arg is not Ellipsis)


def _discriminator(model: type[BaseModel] | BaseModel) -> str:
    for name in ("type", "backend"):
        field = type(model).model_fields.get(name) if isinstance(model, BaseModel) else model.model_fields.get(name)
        if field is not None and typing.get_origin(field.annotation) is Literal:
            return str(typing.get_args(field.annotation)[0])
    raise TypeError(f"{model} is one of several models but has no type/backend literal")


def text_keys(model: type[BaseModel] = BuildConfig, prefix: str = "") -> list[str]:
    """Every text-valued key of the config models, dotted as :data:`PATH_KEYS` spells them.

    Args:
        model: the model to walk (the whole config by default).
        prefix: the dotted key of ``model`` itself ("" for the root).

    Returns:
        The keys, in model order.
    """
    keys: list[str] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        members = _models(field.annotation)
        for member in members:
            keys += text_keys(member, f"{key}[{_discriminator(member)}]." if len(members) > 1 else f"{key}.")
        if not members and _holds_text(field.annotation):
            keys.append(key)
    return list(dict.fromkeys(keys))


def _section_in_use(cfg: BuildConfig, key: str) -> bool:
    """Footage sections are read only when ``backgrounds.source`` names them."""
    for kind in ("video", "frames"):
        if key.startswith(f"backgrounds.{kind}.") and cfg.backgrounds.source != kind:
            return False
    return True


def configured_paths(cfg: BuildConfig) -> list[tuple[str, str, str]]:
    """The paths a config sets and will read: (key as written, schema key of :data:`PATH_KEYS`, value).

    Args:
        cfg: a loaded config.

    Returns:
        One entry per path-valued key that is set, in config order (``gallery.sources[1].root`` as written).
    """
    found: list[tuple[str, str, str]] = []

    def walk(model: BaseModel, written: str, schema: str) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            several = len(_models(field.annotation)) > 1
            items = list(enumerate(value)) if isinstance(value, tuple) else [(None, value)]
            for index, item in items:
                where = f"{written}{name}" + (f"[{index}]" if index is not None else "")
                kind = f"{schema}{name}" + (f"[{_discriminator(item)}]" if several and isinstance(item, BaseModel)
                                            else "")
                if isinstance(item, BaseModel):
                    walk(item, f"{where}.", f"{kind}.")
                elif (kind in PATH_KEYS and item is not None and _section_in_use(cfg, kind)
                      and item not in PATH_KEYS[kind].words):
                    found.append((where, kind, os.fspath(item)))

    walk(cfg, "", "")
    return found


# -- the checks ------------------------------------------------------------------------------------------


def _unreadable(path: str) -> bool:
    # The mode bits too: a file no one may read is refused even when root, who could, runs the check
    return not os.access(path, os.R_OK) or not os.stat(path).st_mode & 0o444


def _local_problem(value: str, spec: PathKey) -> str | None:
    path = _local(value)
    if not os.path.exists(path):
        if spec.kind == "output":
            return None
        return f"no such {'file' if spec.kind == 'file' else 'folder'}: {value}"
    if spec.kind == "file" and os.path.isdir(path):
        return f"{value} is a folder, not a file"
    if spec.kind != "file" and not os.path.isdir(path):
        return f"{value} is a file, not a folder"
    if _unreadable(path) or (os.path.isdir(path) and not os.access(path, os.X_OK)):
        return f"{value} cannot be read (permission denied)"
    if spec.kind == "file" and os.path.getsize(path) == 0:
        return f"{value} is an empty file"
    return None


def _remote_problem(value: str, spec: PathKey) -> str | None:
    import fsspec

    fs, path = fsspec.core.url_to_fs(value)
    if not fs.exists(path):
        return None if spec.kind == "output" else f"no such {'file' if spec.kind == 'file' else 'prefix'}: {value}"
    if spec.kind == "file" and fs.isdir(path):
        return f"{value} is a prefix, not a file"
    if spec.kind != "file" and fs.isfile(path):
        return f"{value} is a file, not a folder or prefix"
    return None


def path_problem(value: str, spec: PathKey) -> str | None:
    """Why ``value`` cannot serve a key checked as ``spec``, in one line naming the path; or None.

    Args:
        value: the configured path or URL.
        spec: how the key is checked.

    Returns:
        The problem, or None when the path will do.
    """
    try:
        problem = (_remote_problem if _is_url(value) else _local_problem)(value, spec)
        if problem is None and spec.content is not None and (spec.kind != "output"):
            problem = spec.content(value)
    except PermissionError:
        return f"{value} cannot be read (permission denied)"
    except Exception as err:  # a remote store's own errors (credentials, network): said in one line
        text = " ".join(str(err).split()) or type(err).__name__
        return f"{value} cannot be read: {text}"
    return " ".join(problem.split()) if problem else None


def path_problems(cfg: BuildConfig) -> list[str]:
    """One line per configured path that cannot serve its key: ``key: problem`` (the problem names the path).

    Args:
        cfg: a loaded config.

    Returns:
        The lines, in config order; empty when every path will do.
    """
    lines = []
    for written, kind, value in configured_paths(cfg):
        problem = path_problem(value, PATH_KEYS[kind])
        if problem:
            lines.append(f"{written}: {problem}")
    return lines


def check_paths(cfg: BuildConfig) -> None:
    """Raise :class:`PathProblem` (one line: the first bad key and its path) before any work.

    Args:
        cfg: a loaded config.

    Raises:
        PathProblem: a configured path is missing, of the wrong kind, unreadable or does not hold what
            its key needs.
    """
    lines = path_problems(cfg)
    if lines:
        more = f" (and {len(lines) - 1} more path problem(s))" if len(lines) > 1 else ""
        raise PathProblem(lines[0] + more)


"""Which optional install extras a config needs, checked before any work starts.

The core install (``pip install synrail``) runs the procedural demo, video backgrounds, GrabCut
cutouts and every CPU composition path. The model stacks are extras (pyproject.toml): ``torch``,
``sam``, ``diffusion``, ``train`` (Ultralytics, AGPL-3.0), ``onnx``, ``ray``, and ``all``. This module
only looks the modules up (``importlib.util.find_spec``); it never imports them.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from synrail.config import BuildConfig, ConfigError, DiffusionSource, RockFolderSource

# The modules each extra provides that SynRail imports (its top-level import names).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "sam": ("torch", "segment_anything"),
    "diffusion": ("torch", "diffusers", "transformers", "accelerate"),
    "train": ("ultralytics", "torch"),
    "onnx": ("onnxruntime",),
    "ray": ("ray", "prefect_ray"),
}


@dataclass(frozen=True)
class ExtraNeed:
    """One config setting and the extra it needs."""

    key: str  # the config key, dotted (gallery.sources[2].type)
    extra: str  # a key of EXTRA_MODULES


class MissingExtra(ConfigError):
    """The config asks for something whose optional dependencies are not installed."""


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed (empty when the extra is complete)."""
    return [m for m in EXTRA_MODULES[extra] if not is_installed(m)]


def pip_command(extra: str) -> str:
    """The pip command that installs ``extra``."""
    return f"pip install 'synrail[{extra}]'"


def config_needs(cfg: BuildConfig) -> list[ExtraNeed]:
    """Every setting of ``cfg`` that needs an extra, in config order."""
    needs: list[ExtraNeed] = []
    seg = cfg.segment
    if seg.backend == "sam" or (seg.backend == "auto" and seg.checkpoint):
        needs.append(ExtraNeed("segment.checkpoint", "sam"))
    video = cfg.backgrounds.video if cfg.backgrounds.source == "video" else None
    if video is not None and video.track_model:
        needs.append(ExtraNeed("backgrounds.video.track_model", "torch"))
    if video is not None and video.sampling.filters.detector_weights:
        needs.append(ExtraNeed("backgrounds.video.sampling.filters.detector_weights", "train"))
    for index, source in enumerate(cfg.gallery.sources):
        if isinstance(source, DiffusionSource):
            needs.append(ExtraNeed(f"gallery.sources[{index}].type", "diffusion"))
        if isinstance(source, RockFolderSource) and source.detector_weights:
            needs.append(ExtraNeed(f"gallery.sources[{index}].detector_weights", "train"))
    backend = cfg.compose.harmonize.backend if cfg.compose.harmonize else None
    if backend == "torchscript":
        needs.append(ExtraNeed("compose.harmonize.backend", "torch"))
    if backend == "onnx":
        needs.append(ExtraNeed("compose.harmonize.backend", "onnx"))
    if cfg.execution.task_runner == "ray":
        needs.append(ExtraNeed("execution.task_runner", "ray"))
    return needs


def missing_extra_messages(cfg: BuildConfig) -> list[str]:
    """One line per setting whose extra is not installed: the key, what is missing, the pip command."""
    lines = []
    for need in config_needs(cfg):
        missing = missing_modules(need.extra)
        if missing:
            lines.append(f"{need.key} needs {', '.join(missing)}, which is not installed: "
                         f"{pip_command(need.extra)}")
    return lines


def check_extras(cfg: BuildConfig) -> None:
    """Raise :class:`MissingExtra` naming every setting whose extra is missing (before any work)."""
    lines = missing_extra_messages(cfg)
    if lines:
        raise MissingExtra("this config needs optional dependencies that are not installed:\n  "
                           + "\n  ".join(lines))


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` when ``extra`` is not installed; ``what`` names the command or option."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(f"{what} needs {', '.join(missing)}, which is not installed: {pip_command(extra)}")

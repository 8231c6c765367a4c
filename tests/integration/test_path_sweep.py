"""Every path-valued config key is checked before any work: a missing folder, a file, an empty folder
and an unreadable file each end the CLI with exit 2 and one line naming the key and the path.

The keys come from the pydantic models (``path_check.text_keys``), so a new text-valued key fails
``test_every_text_key_is_classified`` until it is declared a path (with its check and a setup below)
or not one."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

from flows import cli
from flows.cli import main
from synrail.config import load_config
from synrail.path_check import NOT_PATHS, PATH_KEYS, configured_paths, path_problems, text_keys

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs/tiny.yaml")


# -- valid inputs for the keys beside the one under test ----------------------------------------------------


def _video_folder(tmp: Path) -> Path:
    folder = tmp / "ok-videos"
    folder.mkdir(exist_ok=True)
    (folder / "a.mp4").write_bytes(b"\x00" * 64)  # listed by name; decoded only by a build
    return folder


def _frames_folder(tmp: Path) -> Path:
    folder = tmp / "ok-frames"
    folder.mkdir(exist_ok=True)
    cv2.imwrite(str(folder / "0001.png"), np.zeros((8, 8, 3), np.uint8))
    return folder


def _coco_files(tmp: Path) -> tuple[Path, Path]:
    images = tmp / "ok-coco-images"
    images.mkdir(exist_ok=True)
    cv2.imwrite(str(images / "1.jpg"), np.zeros((8, 8, 3), np.uint8))
    annotations = tmp / "ok-coco.json"
    annotations.write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    return annotations, images


def _rock_folder(tmp: Path) -> Path:
    folder = tmp / "ok-rocks"
    (folder / "granite").mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(folder / "granite" / "a.jpg"), np.zeros((8, 8, 3), np.uint8))
    return folder


def _footage(kind: str, key: str) -> Callable[[Path, str], dict]:
    ok = _video_folder if kind == "video" else _frames_folder

    def setup(tmp: Path, path: str) -> dict:
        section: dict = {"url": path} if key == "url" else {"url": str(ok(tmp))}
        if key in ("track_model", "track_area_model"):
            section[key] = path
        elif key == "sidecar":
            section["sampling"] = {"sidecar": path}
        elif key == "detector_weights":
            section["sampling"] = {"filters": {"detector_weights": path}}
        return {"backgrounds.source": kind, f"backgrounds.{kind}": section}
    return setup


def _source(**fields) -> dict:
    return {"gallery.sources": [fields], "classes": ["person", "rock"]}


SETUPS: dict[str, Callable[[Path, str], dict]] = {
    **{f"backgrounds.{kind}.{name}": _footage(kind, key)
       for kind in ("video", "frames")
       for name, key in [("url", "url"), ("track_model", "track_model"), ("track_area_model", "track_area_model"),
                         ("sampling.sidecar", "sidecar"),
                         ("sampling.filters.detector_weights", "detector_weights")]},
    "gallery.sources[coco].annotations": lambda tmp, p: _source(
        type="coco", annotations=p, images=str(_coco_files(tmp)[1]), class_map={"Person": "person"}),
    "gallery.sources[coco].images": lambda tmp, p: _source(
        type="coco", annotations=str(_coco_files(tmp)[0]), images=p, class_map={"Person": "person"}),
    "gallery.sources[pennfudan].root": lambda tmp, p: _source(type="pennfudan", root=p),
    "gallery.sources[rocks].root": lambda tmp, p: _source(type="rocks", root=p),
    "gallery.sources[rocks].detector_weights": lambda tmp, p: _source(
        type="rocks", root=str(_rock_folder(tmp)), detector_weights=p),
    "gallery.sources[rgba].root": lambda tmp, p: _source(type="rgba", root=p, class_name="rock"),
    "gallery.sources[diffusion].model.model_dir": lambda tmp, p: _source(type="diffusion", model={"model_dir": p}),
    "gallery.dtd_root": lambda tmp, p: {"gallery.dtd_root": p},
    "segment.checkpoint": lambda tmp, p: {"segment.checkpoint": p},
    "compose.harmonize[torchscript].model": lambda tmp, p: {"compose.harmonize": {"backend": "torchscript",
                                                                                  "model": p}},
    "compose.harmonize[onnx].model": lambda tmp, p: {"compose.harmonize": {"backend": "onnx", "model": p}},
    "execution.cache_url": lambda tmp, p: {"execution.cache_url": p},
}
SUFFIX = {"sidecar": ".csv", "annotations": ".json", "harmonize[onnx].model": ".onnx", "track_area_model": ".onnx"}
VARIANTS = ("missing", "file", "empty folder", "unreadable file")


def _make(tmp: Path, key: str, variant: str) -> Path:
    suffix = next((s for k, s in SUFFIX.items() if k in key), ".pt")
    path = tmp / f"input{suffix}" if "file" in variant else tmp / "input"
    if variant == "empty folder":
        path.mkdir()
    elif variant != "missing":
        path.write_text("not a dataset, a model or a table\n")
        if variant == "unreadable file":
            path.chmod(0)
    return path


def _prefect_must_not_start(**_) -> None:
    raise AssertionError("Prefect was configured before the bad path was named")


def test_every_text_key_is_classified():
    keys = set(text_keys())
    assert not set(PATH_KEYS) & NOT_PATHS
    assert keys - set(PATH_KEYS) - NOT_PATHS == set(), "a new text key: declare it in PATH_KEYS or NOT_PATHS"
    assert set(PATH_KEYS) | NOT_PATHS == keys, "a declared key the models no longer have"
    assert set(SETUPS) == set(PATH_KEYS), "every path key needs a setup in this sweep"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("key", sorted(PATH_KEYS))
def test_every_path_key_refuses_each_bad_kind_of_path(tmp_path, capsys, monkeypatch, key, variant):
    path = _make(tmp_path, key, variant)
    overrides = SETUPS[key](tmp_path, str(path))
    cfg = load_config(TINY, overrides)
    entries = [e for e in configured_paths(cfg) if e[2] == str(path)]
    assert [kind for _, kind, _ in entries] == [key]
    written = entries[0][0]
    others = [line for line in path_problems(cfg) if str(path) not in line]
    assert others == [], "the setup's other paths must be valid"
    if PATH_KEYS[key].kind == "output" and variant in ("missing", "empty folder"):
        assert path_problems(cfg) == []  # an output is made when missing
        return
    args = ["build", "--config", TINY, "--out", str(tmp_path / "out"), "--no-progress"]
    for name, value in overrides.items():
        args += ["--set", f"{name}={json.dumps(value)}"]
    # Refused before any work: Prefect is never configured (timings live in benchmarks, not tests).
    monkeypatch.setattr(cli, "configure_command_line", _prefect_must_not_start)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {written}: ") and str(path) in err, err
    assert not (tmp_path / "out").exists()  # refused before any work


@pytest.mark.parametrize("case", ["coco json", "pennfudan", "empty videos", "frames file", "dtd", "unreadable"])
def test_the_issues_slips_are_named_in_one_line_before_prefect_starts(tmp_path, case):
    """Through the command line (a fresh interpreter): one line, exit 2, no traceback, and Prefect
    never imported (the slip is named before any work: seconds, where it took 14-37 s)."""
    data = tmp_path / "data"
    data.mkdir()
    if case == "coco json":
        (data / "broken.json").write_text('{"images": [')
        overrides = SETUPS["gallery.sources[coco].annotations"](tmp_path, str(data / "broken.json"))
        expected = "gallery.sources[0].annotations: COCO annotations"
    elif case == "pennfudan":
        (data / "PNGImages").mkdir()
        overrides = SETUPS["gallery.sources[pennfudan].root"](tmp_path, str(data))
        expected = f"gallery.sources[0].root: {data} has no PedMasks/ folder"
    elif case == "empty videos":
        (data / "notes.txt").write_text("no video here")
        overrides = SETUPS["backgrounds.video.url"](tmp_path, str(data))
        expected = f"backgrounds.video.url: no video (mp4, avi, mkv, mov) in {data}"
    elif case == "frames file":
        cv2.imwrite(str(data / "one.png"), np.zeros((8, 8, 3), np.uint8))
        overrides = SETUPS["backgrounds.frames.url"](tmp_path, str(data / "one.png"))
        expected = f"backgrounds.frames.url: {data / 'one.png'} is a file, not a folder"
    elif case == "dtd":
        overrides = {"gallery.dtd_root": str(data)}
        expected = f"gallery.dtd_root: {data} has no images/ folder"
    else:
        weights = data / "sam.pth"
        weights.write_bytes(b"PK\x03\x04")
        weights.chmod(0)
        overrides = {"segment.checkpoint": str(weights)}
        expected = f"segment.checkpoint: {weights} cannot be read (permission denied)"
    argv = ["build", "--config", TINY, "--out", str(tmp_path / "out")]
    for name, value in overrides.items():
        argv += ["--set", f"{name}={json.dumps(value)}"]
    script = ("import sys, flows.cli; code = flows.cli.main(sys.argv[1:]); "
              "sys.exit(99 if 'prefect' in sys.modules else code)")
    result = subprocess.run([sys.executable, "-c", script, *argv], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 2, result.stdout + result.stderr  # 99: Prefect was imported
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith(f"error: {expected}"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists()


def test_an_rgba_source_without_height_uses_the_class_prior(tmp_path):
    from synrail.sources.procedural_obstacles import SIZE_PRIORS_M
    from synrail.stages.gallery import dataset_candidates

    cutout = np.zeros((16, 16, 4), np.uint8)
    cutout[4:12, 4:12] = 255
    cv2.imwrite(str(tmp_path / "stone.png"), cutout)
    cfg = load_config(TINY, {"gallery.sources": [{"type": "rgba", "root": str(tmp_path), "class_name": "rock"}],
                             "classes": ["rock"]})
    source = cfg.gallery.sources[0]
    assert source.height_m is None
    found, _ = dataset_candidates(source, max_pixels=10**6)  # the gallery stage's own call
    assert [c.height_m_range for c in found] == [SIZE_PRIORS_M["rock"]]


def test_a_track_area_model_needs_its_json_sidecar(tmp_path):
    model = tmp_path / "rails.onnx"
    model.write_bytes(b"\x08\x07")
    cfg = load_config(TINY, SETUPS["backgrounds.video.track_area_model"](tmp_path, str(model)))
    assert path_problems(cfg) == [f"backgrounds.video.track_area_model: {model} has no JSON sidecar beside it "
                                  "(rails.json)"]
    model.with_suffix(".json").write_text("{}")
    assert path_problems(cfg) == []
    builtin = load_config(TINY, SETUPS["backgrounds.video.track_area_model"](tmp_path, "builtin"))
    assert [kind for _, kind, _ in configured_paths(builtin)] == ["backgrounds.video.url"]  # not a path


def test_unreadable_means_no_read_permission_even_for_root(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"PK\x03\x04")
    path.chmod(stat.S_IWUSR)
    cfg = load_config(TINY, {"segment.checkpoint": str(path)})
    assert path_problems(cfg) == [f"segment.checkpoint: {path} cannot be read (permission denied)"]
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert path_problems(cfg) == []

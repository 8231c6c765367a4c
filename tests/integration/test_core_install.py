"""The core install: ``synrail`` without the model extras (torch, SAM, diffusers, Ultralytics) builds
the tiny config; a config or command that needs a missing extra stops at once with the pip command;
bad input exits 2 with one message and no traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.extras import config_needs, missing_extra_messages

ROOT = Path(__file__).resolve().parents[2]
MODEL_STACKS = ("torch", "torchvision", "ultralytics", "diffusers", "segment_anything", "transformers",
                "accelerate", "onnxruntime")

# Runs the CLI with a finder in front of sys.meta_path that makes every model stack unimportable, as
# in an environment where only the core is installed; at exit it asserts none of them was loaded.
WITHOUT_EXTRAS = f"""
import atexit, importlib.abc, sys
BLOCKED = {MODEL_STACKS!r}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
def _check():
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
    if loaded:
        sys.stderr.write(f"LOADED {{loaded}}\\n")
        sys.stderr.flush()
        import os; os._exit(3)
atexit.register(_check)
sys.argv = ["synrail", *sys.argv[1:]]
from flows.cli import main
sys.exit(main())
"""


def synrail_without_extras(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "prefect-home"), PYTHONPATH=str(ROOT))
    for name in ("PREFECT_API_URL", "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "OPENCV_FFMPEG_LOGLEVEL"):
        env.pop(name, None)  # as a user's shell has them (conftest sets the console level for pytest)
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_blocker_really_blocks(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = WITHOUT_EXTRAS.split("sys.argv =")[0] + "import torch\n"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "No module named 'torch'" in result.stderr


def test_core_install_builds_the_tiny_config_without_any_model_stack(tmp_path):
    out = tmp_path / "tiny"
    result = synrail_without_extras(tmp_path, "build", "--config", "configs/tiny.yaml", "--out", str(out),
                                    "--no-progress")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "LOADED" not in result.stderr
    assert validate_dataset(out) == []


def test_a_config_needing_a_missing_extra_fails_up_front_with_the_pip_command(tmp_path):
    checkpoint = tmp_path / "sam_vit_b.pth"
    checkpoint.write_bytes(b"weights")
    out = tmp_path / "never"
    result = synrail_without_extras(tmp_path, "build", "--config", "configs/tiny.yaml", "--out", str(out),
                                    "--set", f"segment.checkpoint={checkpoint}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "segment.checkpoint" in result.stderr and "pip install 'synrail[sam]'" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()  # nothing was started


def test_train_without_ultralytics_names_the_train_extra(tmp_path):
    data = tmp_path / "data.yaml"
    data.write_text("train: images/train\nnames: {0: person}\n")
    result = synrail_without_extras(tmp_path, "train", "--data", str(data), "--epochs", "1")
    assert result.returncode == 2 and "pip install 'synrail[train]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_needs_names_each_key_and_its_extra(tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml", {
        "segment.checkpoint": "/models/sam.pth", "compose.harmonize": {"backend": "onnx", "model": "m.onnx"},
        "gallery.sources": [{"type": "procedural"}, {"type": "rocks", "root": "/r", "detector_weights": "y.pt"}]})
    needs = {(n.key, n.extra) for n in config_needs(cfg)}
    assert needs == {("segment.checkpoint", "sam"), ("compose.harmonize.backend", "onnx"),
                     ("gallery.sources[1].detector_weights", "train")}
    assert config_needs(load_config(ROOT / "configs/default.yaml")) == []  # make demo needs only the core
    assert missing_extra_messages(cfg) == []  # everything is installed in the test environment


def test_bad_input_exits_2_with_one_message_and_no_traceback(tmp_path):
    """A split without a usable background (the only video is corrupt) is the user's to fix."""
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "broken.mp4").write_bytes(b"\x00not a video at all" * 50)
    result = synrail_without_extras(tmp_path, "build", "--config", "configs/tiny.yaml", "--out",
                                    str(tmp_path / "out"), "--no-progress", "--set", "backgrounds.source=video",
                                    "--set", f"backgrounds.video={{url: {videos}}}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no usable background for split" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout and "moov atom" not in result.stderr


@pytest.mark.parametrize("missing", ["backgrounds.video.url", "gallery.sources[0]"])
def test_a_missing_source_folder_exits_2(tmp_path, missing):
    setting = (["--set", "backgrounds.source=video", "--set", f"backgrounds.video={{url: {tmp_path / 'nothing'}}}"]
               if missing.startswith("backgrounds") else
               ["--set", f"gallery.sources=[{{type: rgba, root: {tmp_path / 'nothing'}, class_name: rock, "
                         "height_m: [0.2, 0.5]}]", "--set", "classes=[rock]"])
    result = synrail_without_extras(tmp_path, "build", "--config", "configs/tiny.yaml", "--out",
                                    str(tmp_path / "out"), "--no-progress", *setting)
    assert result.returncode == 2, result.stdout + result.stderr
    assert missing in result.stderr and "Traceback" not in result.stderr

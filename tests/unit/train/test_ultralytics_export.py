"""The export trains Ultralytics offline: one epoch of yolov8n.yaml, from another folder, after a move."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from synrail.config import load_config
from synrail.stages.local import build_in_process

ROOT = Path(__file__).resolve().parents[3]

TRAIN = """
from ultralytics import YOLO
YOLO("yolov8n.yaml").train(data={data!r}, epochs=1, imgsz=192, batch=8, device="cpu", workers=0,
                           project={runs!r}, name="smoke", exist_ok=True, plots=False)
"""


def test_one_epoch_from_a_moved_dataset_without_network(tmp_path):
    built = tmp_path / "built"
    build_in_process(load_config(ROOT / "configs/tiny.yaml"), str(built))
    moved = tmp_path / "elsewhere" / "dataset"
    moved.parent.mkdir()
    shutil.move(str(built), str(moved))  # data.yaml must not remember where it was written
    code = TRAIN.format(data=str(moved / "data.yaml"), runs=str(tmp_path / "runs"))
    command = [sys.executable, "-c", code]
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0:
        command = ["unshare", "-n", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\"", *command]
    env = dict(os.environ, HOME=str(tmp_path), YOLO_CONFIG_DIR=str(tmp_path / "ultralytics"))
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "runs" / "smoke" / "weights" / "last.pt").is_file()
    assert "Downloading" not in result.stdout + result.stderr

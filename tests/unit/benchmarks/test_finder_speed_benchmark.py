"""benchmarks/finder_speed.py: per-part CPU figures for each checkout measured in turn, and the frames
whose findings differ between them."""

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np

from benchmarks.finder_speed import differing
from synrail.sources.procedural_backgrounds import render_background, sample_background_spec

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "finder_speed.py"
ROOT = SCRIPT.parents[1]


def test_two_turns_of_one_checkout_give_figures_and_the_same_findings(tmp_path):
    rng = np.random.default_rng(3)
    for index in range(2):
        spec = sample_background_spec(rng, width=480, height=270, track_types=["ballasted"],
                                      conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5),
                                      hfov_deg=(50.0, 65.0), max_curvature=0.0, max_offset_m=0.0)
        cv2.imwrite(str(tmp_path / f"frame{index}.png"), render_background(spec))
    cv2.imwrite(str(tmp_path / "blank.jpg"), np.full((270, 480, 3), 120, np.uint8))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "out" / "speed.json"
    out.parent.mkdir()
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--width", "480", "--repeats", "1",
                             "--against", str(ROOT), "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    for line in lines[:2]:
        assert line.startswith(f"{ROOT}: 3 frames at 480 columns: filters ")
        assert " learned " in line and " finder " in line and line.endswith("ms (median/mean)")
    assert lines[2] == "3 frames with the same findings, 0 differ"
    assert "broken.png: not a readable image, left out" in result.stderr
    written = json.loads(out.read_text())
    assert written["command"].startswith("python benchmarks/finder_speed.py ")
    assert len(written["runs"]) == 1  # one checkout twice: one name
    (run, groups), = written["runs"].items()
    assert run.startswith(f"{ROOT.name} at ") and run.endswith(", 480 columns")
    assert groups["all"]["frames"] == 3 and groups["refused"]["frames"] >= 1  # the blank frame
    assert groups["found"]["frames"] + groups["refused"]["frames"] == 3
    assert groups["all"]["total mean"] > 0 and groups["all"]["total median"] > 0


def test_frames_whose_findings_differ_are_named():
    found = ["", "left", "right", 300, None, 0.9, 1000]
    assert differing([[found, ["no converging rail pair"]], [found, ["no converging rail pair"]]]) == []
    assert differing([[found, ["no converging rail pair"]], [found[:-1] + [999], ["no converging rail pair"]]]) == [0]


def test_a_folder_without_images_a_missing_folder_and_a_checkout_without_synrail_are_refused(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                              timeout=120)

    result = run(tmp_path)
    assert result.returncode == 2 and f"no images in {tmp_path}" in result.stderr
    result = run(tmp_path / "missing")
    assert result.returncode == 2 and f"{tmp_path / 'missing'}: not a folder of frames" in result.stderr
    cv2.imwrite(str(tmp_path / "frame.png"), np.zeros((20, 30, 3), np.uint8))
    result = run(tmp_path, "--against", tmp_path)
    assert result.returncode == 2 and f"{tmp_path}: its worker did not start" in result.stderr
    assert "holds no synrail package" in result.stderr and "Traceback" not in result.stderr

"""benchmarks/shots.py: a video read every N seconds is one shot, a folder of unrelated stills cuts
at every pair, and the figures land in the benchmark pages' JSON."""

import json
import sys

import cv2
import numpy as np

from benchmarks import shots
from synrail.sources.procedural_backgrounds import render_background, sample_background_spec


def scene(seed: int) -> np.ndarray:
    spec = sample_background_spec(
        np.random.default_rng(seed), width=160, height=90, track_types=["ballasted"],
        conditions={"normal": 1.0, "dusk": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5),
        hfov_deg=(50.0, 65.0), max_curvature=0.0, max_offset_m=0.0)
    return render_background(spec)


def test_a_video_is_one_shot_and_unrelated_stills_cut(tmp_path, monkeypatch, capsys):
    still = scene(0)
    video = tmp_path / "ride.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (160, 90))
    for k in range(30):  # three seconds of a camera creeping forward
        writer.write(np.roll(still, k // 3, axis=0))
    writer.release()
    stills = tmp_path / "stills"
    stills.mkdir()
    for seed in (1, 2, 3):
        cv2.imwrite(str(stills / f"s{seed}.png"), scene(seed) if seed != 2 else 255 - scene(seed))
    out = tmp_path / "shots.json"
    monkeypatch.setattr(sys, "argv", ["shots.py", "--video", str(video), "--every", "1",
                                      "--stills", str(stills), "--json", str(out)])
    shots.main()
    runs = json.loads(out.read_text())["runs"]
    ride = runs["ride.mp4 every 1 s"]["one shot"]
    assert ride["pairs"] == 2 and ride["cuts"] == 0
    assert runs["stills"]["unrelated stills"]["pairs"] == 2
    assert runs["stills"]["unrelated stills"]["cuts"] >= 1
    assert "ride.mp4 every 1 s" in capsys.readouterr().out

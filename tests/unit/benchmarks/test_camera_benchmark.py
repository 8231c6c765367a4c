"""benchmarks/camera.py --json on a tiny video: the figures it prints, written in the shape the
benchmark pages render (docs/hooks.py's ``results:``)."""

import importlib.util
import json
import sys
from pathlib import Path

from media import cab_frames, write_video

from benchmarks import camera

ROOT = Path(__file__).resolve().parents[3]


def test_camera_json_holds_each_sequences_camera_and_renders_as_a_table(tmp_path, monkeypatch, capsys):
    video = write_video(tmp_path / "line0.avi", cab_frames(0, 4))
    out = tmp_path / "camera.json"
    monkeypatch.setattr(sys, "argv", ["camera.py", str(video), "--hfov", "60", "--width", "640", "--height", "360",
                                      "--json", str(out)])
    camera.main()
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert figures["command"].startswith("python benchmarks/camera.py ") and "--json" in figures["command"]
    assert figures["date"] and figures["machine"]
    run = figures["runs"]["line0.avi"]
    assert set(run) == {"camera", "left out"}
    cam = run["camera"]
    assert cam["frames"] == 4 and cam["hfov_source"] == "given" and abs(cam["hfov_deg"] - 60) < 1e-6
    assert cam["track found"] + sum(run["left out"].values()) >= cam["frames"]
    assert f"line0.avi: 4 frames, track in {cam['track found']}, used {cam['used']}" in printed
    assert cam["track found"] > 0  # the procedural scenes have a track: the solved camera is there too
    assert 1.5 < cam["height_m"] < 4.0 and f"height {cam['height_m']:.2f}" in printed

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.results(str(out))
    assert "**line0.avi**" in page and "| camera | " in page and "hfov_deg" in page

"""benchmarks/follow_back.py: a video built as a frames folder with the forward pass alone and with
following back, the figures in the benchmark pages' JSON."""

import json
import sys

from media import approach_frames, write_mp4

from benchmarks import follow_back


def test_a_video_is_built_both_ways_and_the_figures_are_written(tmp_path, monkeypatch, capsys):
    frames, _ = approach_frames(4, 4, speed_kmh=60, fps=1)
    video = write_mp4(tmp_path / "ride.mp4", frames, fps=1)
    out = tmp_path / "follow_back.json"
    monkeypatch.setattr(sys, "argv", ["follow_back.py", str(video), "--step", "1", "--width", "640",
                                      "--height", "360", "--degrade", "dark", "--first", "1", "--json", str(out)])
    follow_back.main()
    runs = json.loads(out.read_text())["runs"]["ride.mp4"]
    assert set(runs) == {"forward", "follow back"}
    assert all(run["frames"] == 4 for run in runs.values())
    assert runs["forward"]["kept"] >= 3 and runs["follow back"]["kept"] >= runs["forward"]["kept"]
    assert "ride.mp4 (4 frames read) follow back" in capsys.readouterr().out

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
    monkeypatch.setattr(sys, "argv", ["follow_back.py", str(video), "--step", "1", "2", "--width", "640",
                                      "--degrade", "none", "dark", "--first", "1", "--json", str(out)])
    follow_back.main()
    runs = json.loads(out.read_text())["runs"]["ride.mp4"]
    assert set(runs) == {"every 1", "every 1, first 1 dark", "every 2", "every 2, first 1 dark"}
    assert runs["every 1"]["frames read"] == 4 and runs["every 2"]["frames read"] == 2
    for figures in runs.values():
        assert figures["kept, forward pass"] >= 1
        assert figures["kept, following back"] == figures["kept, forward pass"] + figures["added"] - figures["lost"]
    assert "ride.mp4 every 1, the first 1 dark (4 frames read, 640x360) follow back" in capsys.readouterr().out

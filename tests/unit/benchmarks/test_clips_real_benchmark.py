"""benchmarks/clips_real.py on a synthetic cab video (procedural frames along the track at a known
speed): it builds the clips, prints their drift and writes the same figures as JSON for the pages."""

import json
import tempfile

from media import approach_frames, write_mp4

from benchmarks import clips_real


def test_the_clips_benchmark_measures_a_video_and_writes_json(tmp_path, capsys, monkeypatch):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    frames, _ = approach_frames(0, 12, 60.0, 10.0)
    video = write_mp4(tmp_path / "approach.mp4", frames, 10.0)
    out = tmp_path / "figures.json"
    clips_real.main(["--video", str(video), "--speed-kmh", "60", "--hfov", "60", "--clips", "1", "--frames", "5",
                     "--fps", "10", "--width", "640", "--height", "360", "--first-distance", "15", "30",
                     "--out", str(tmp_path / "out"), "--json", str(out)])
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert figures["command"].startswith("python benchmarks/clips_real.py --video")
    video_runs, clips = figures["runs"]["video"], figures["runs"]["clips"]
    assert video_runs["tracking"]["frames"] == 12 and video_runs["speed"]["used km/h"] == 60.0
    assert video_runs["stage"]["clip frames"] == sum(c["frames"] for c in clips.values()) == 5
    (clip_id,) = clips
    assert clip_id in printed and clips[clip_id]["drift lateral gauge"] < 0.05  # the obstacle stays on its track
    assert not any(temporary.iterdir())  # the footage copy and cache are removed; the frames are in --out

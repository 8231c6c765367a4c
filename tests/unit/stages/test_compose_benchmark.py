"""benchmarks/compose.py's clip line runs and prints frames/s for clips against stills (tiny sizes;
the figures themselves are the benchmark's, not a test's)."""

import re
from pathlib import Path

from benchmarks.compose import clips_vs_stills

ROOT = Path(__file__).resolve().parents[3]


def test_the_clip_line_prints_clip_frames_and_stills_per_second(tmp_path, capsys):
    clip_rate, stills_rate = clips_vs_stills(4, tmp_path, ROOT / "configs" / "tiny.yaml", frames_per_clip=2)
    printed = capsys.readouterr().out
    assert clip_rate > 0 and stills_rate > 0
    assert re.search(r"clips, 1 core, 320x192, .*2 clips of 2 frames.*: [\d.]+ frames/s", printed)
    assert f"{stills_rate:.1f} images/s" in printed and f"clips / stills = {clip_rate / stills_rate:.2f}" in printed
    assert len(list((tmp_path / "clips" / "images").rglob("clip*.jpg"))) == 4  # the clips were really composed

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


def test_json_holds_every_part_timed_in_the_shape_the_pages_render(tmp_path, monkeypatch):
    import importlib.util
    import json
    import os
    import sys

    from benchmarks import compose

    out = tmp_path / "compose.json"
    monkeypatch.setattr(sys, "argv", ["compose.py", "--config", str(ROOT / "configs/tiny.yaml"),
                                      "--compose-images", "3", "--clip-frames", "4", "--frames-per-clip", "2",
                                      "--flow-images", "0",
                                      "--clock", "cpu", "--json", str(out)])
    cores = os.sched_getaffinity(0)
    try:
        compose.main()
    finally:  # main pins the process to one core
        os.sched_setaffinity(0, cores)
        compose.clock = compose.time.perf_counter
    figures = json.loads(out.read_text())
    assert figures["command"].startswith("python benchmarks/compose.py --config") and figures["date"]
    runs = figures["runs"]
    assert set(runs) == {"composition against the JPEG floor", "approach clips against stills"}
    composition = runs["composition against the JPEG floor"]
    assert composition["settings"]["image"] == "320x192" and composition["settings"]["clock"] == "CPU time"
    assert composition["JPEG decode+encode floor"]["of the floor"] == 1.0
    for name in ("paste + harmonize, in memory", "the default config, build chunks"):
        group = composition[name]
        assert group["images/s"] > 0 and abs(group["of the floor"] * composition["JPEG decode+encode floor"]
                                              ["images/s"] - group["images/s"]) < 1e-6 * group["images/s"]
    clips = runs["approach clips against stills"]
    assert clips["settings"]["clips"] == 2 and clips["settings"]["frames per clip"] == 2
    assert clips["clips"]["frames/s"] > 0 and clips["stills, build chunks"]["frames/s"] > 0

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.results(str(out))
    assert "**composition against the JPEG floor**" in page and "| paste + harmonize, in memory |" in page
    assert "**approach clips against stills**" in page

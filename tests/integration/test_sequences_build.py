"""`synrail build` on the tiny sequences config: clips beside the stills, through the Prefect flow."""

import os
import subprocess
import sys
from pathlib import Path

from synrail.export.validate import validate_dataset

ROOT = Path(__file__).resolve().parents[2]
SYNRAIL = Path(sys.executable).with_name("synrail")


def test_cli_builds_the_tiny_sequences_config(tmp_path):
    out = tmp_path / "clips"
    env = dict(os.environ, PREFECT_HOME=str(tmp_path), HOME=str(tmp_path))
    result = subprocess.run([str(SYNRAIL), "build", "--config", "configs/tiny-sequences.yaml", "--out", str(out)],
                            capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert validate_dataset(out) == []
    lines = (out / "clips.csv").read_text().splitlines()
    assert lines[0].startswith("clip_id,split,frames,fps") and len(lines) == 5
    assert len(list(out.glob("clips/*/gt/gt.txt"))) == 4

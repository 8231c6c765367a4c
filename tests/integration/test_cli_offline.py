"""`synrail build` as a user runs it: a subprocess, its own ephemeral Prefect server, no network."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synrail.export.validate import validate_dataset

ROOT = Path(__file__).resolve().parents[2]
SYNRAIL = Path(sys.executable).with_name("synrail")
NOISE = ["Traceback", "ERROR", "database is locked", "Error flushing", "Failed to send telemetry"]


def can_cut_network() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def offline(command: list[str]) -> list[str]:
    """The command inside a new network namespace with only loopback up (skipped where not allowed)."""
    if not can_cut_network():
        pytest.skip("unshare -n is not permitted here")
    quoted = " ".join(f"'{c}'" for c in command)
    return ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {quoted}"]


def run(command: list[str], home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PREFECT_HOME=str(home), HOME=str(home))
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_build_runs_offline_ends_clean_and_refuses_a_different_build(tmp_path):
    out = tmp_path / "tiny"
    result = run(offline([str(SYNRAIL), "build", "--config", "configs/tiny.yaml", "--out", str(out)]), tmp_path)
    assert result.returncode == 0, result.stderr
    for noise in NOISE:
        assert noise not in result.stderr + result.stdout, noise
    assert "train" in result.stderr and str(out) in result.stderr  # the summary names splits and the output
    assert validate_dataset(out) == []

    refused = run([str(SYNRAIL), "build", "--config", "configs/tiny.yaml", "--out", str(out), "--seed", "7"], tmp_path)
    assert refused.returncode == 2 and "--overwrite" in refused.stderr and "Traceback" not in refused.stderr


def test_a_prefect_database_from_a_newer_prefect_is_refused_before_any_work(tmp_path):
    """Without the look first, the temporary server dies on the unknown schema and the client only
    reports a timeout two minutes later."""
    import sqlite3

    with sqlite3.connect(tmp_path / "prefect.db") as connection:
        connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        connection.execute("INSERT INTO alembic_version VALUES ('ffffffffffff')")
    out = tmp_path / "tiny"
    result = run([str(SYNRAIL), "build", "--config", "configs/tiny.yaml", "--out", str(out)], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "newer Prefect" in result.stderr and "ffffffffffff" in result.stderr and "PREFECT_HOME" in result.stderr
    assert not out.exists()


def test_validate_command_reports_a_broken_label(tmp_path):
    from synrail.config import load_config
    from synrail.stages.local import build_in_process

    out = tmp_path / "ds"
    build_in_process(load_config(ROOT / "configs/tiny.yaml", {"num_images": 4}), str(out))
    ok = subprocess.run([str(SYNRAIL), "validate", "--out", str(out)], capture_output=True, text=True)
    assert ok.returncode == 0 and "0 problem(s)" in ok.stderr
    label = next(p for p in sorted((out / "labels" / "train").glob("*.txt")) if p.read_text())
    label.write_text("0 0.5 0.5 0.1 0.1\n")
    broken = subprocess.run([str(SYNRAIL), "validate", "--out", str(out)], capture_output=True, text=True)
    assert broken.returncode == 1 and label.name in broken.stderr

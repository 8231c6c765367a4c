import os
import subprocess
import sys
from pathlib import Path

import pytest

from synrail.config import ConfigError, load_config
from synrail.storage.output import OutputConflict, claim_output
from synrail.storage.store import Store, StoreError, sha256_bytes

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_configs_load():
    default = load_config(ROOT / "configs/default.yaml")
    tiny = load_config(ROOT / "configs/tiny.yaml")
    assert default.image.width == 1280 and tiny.num_images < default.num_images


def test_overrides_apply_and_change_the_build_hash():
    base = load_config(ROOT / "configs/tiny.yaml")
    other = load_config(ROOT / "configs/tiny.yaml", {"compose.scale": "linear", "seed": 3})
    assert other.compose.scale == "linear" and other.seed == 3
    assert other.build_hash() != base.build_hash()
    assert load_config(ROOT / "configs/tiny.yaml", {"execution.chunk_size": 3}).build_hash() == base.build_hash()


@pytest.mark.parametrize("overrides, names", [
    ({"compose.scale": "cubic"}, ["compose.scale", "'metric'", "'linear'"]),
    ({"classes": ["person", "ufo"]}, ["classes", "unseen_obstacle"]),
    ({"splits.train": 0.9}, ["sum to 1"]),
    ({"compose.distance_m": [50, 10]}, ["compose.distance_m"]),
    ({"compose.colour": 1}, ["compose.colour", "Extra inputs"]),
])
def test_invalid_config_names_the_field_and_allowed_values(overrides, names):
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs/tiny.yaml", overrides)
    for name in names:
        assert name in str(err.value)


def test_missing_or_broken_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1,\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(bad)


def test_cli_exits_2_on_invalid_config(tmp_path):
    result = subprocess.run([sys.executable, "-m", "flows.cli", "build", "--config", str(ROOT / "configs/tiny.yaml"),
                             "--out", str(tmp_path / "o"), "--set", "compose.harmonize=magic"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "compose.harmonize" in result.stderr and "'lab'" in result.stderr and "Traceback" not in result.stderr


def test_store_writes_atomically_and_hashes(tmp_path):
    store = Store(str(tmp_path / "s"))
    digest = store.write_bytes("a/b/c.bin", b"hello")
    assert digest == sha256_bytes(b"hello") and store.read_bytes("a/b/c.bin") == b"hello"
    assert os.listdir(tmp_path / "s" / "a" / "b") == ["c.bin"]  # no temporary file left behind
    assert Store(f"file://{tmp_path}/s").read_bytes("a/b/c.bin") == b"hello"


def test_paths_with_spaces_work(tmp_path):
    store = Store(str(tmp_path / "with space"))
    store.write_text("a.txt", "x")
    assert (tmp_path / "with space" / "a.txt").read_text() == "x" and store.list("") == ["a.txt"]


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    store = Store(str(tmp_path))

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StoreError, match="x.bin"):
        store.write_bytes("x.bin", b"data")
    assert os.listdir(tmp_path) == []


def test_unwritable_output_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # a folder cannot be made below a file, even by root
    with pytest.raises(StoreError, match="a-file/out"):
        claim_output(Store(str(blocker / "out")), load_config(ROOT / "configs/tiny.yaml"), overwrite=False)


def test_output_is_claimed_refused_and_overwritten(tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml")
    out = Store(str(tmp_path / "out"))
    assert claim_output(out, cfg, overwrite=False) is False
    assert claim_output(out, cfg, overwrite=False) is True  # the same build again
    other = load_config(ROOT / "configs/tiny.yaml", {"seed": 9})
    with pytest.raises(OutputConflict, match="--overwrite"):
        claim_output(out, other, overwrite=False)
    out.write_text("stray.txt", "x")
    assert claim_output(out, other, overwrite=True) is False
    assert not out.exists("stray.txt")
    foreign = Store(str(tmp_path / "foreign"))
    foreign.write_text("notes.txt", "mine")
    for overwrite in (False, True):  # never deletes what SynRail did not write
        with pytest.raises(OutputConflict, match="holds no SynRail build"):
            claim_output(foreign, cfg, overwrite=overwrite)
    assert foreign.read_text("notes.txt") == "mine"


def test_the_same_code_builds_into_a_non_local_store():
    """fsspec's in-memory filesystem stands in for s3:// here: no local paths, direct PUTs."""
    from synrail.stages.local import build_in_process

    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": 6})
    summary = build_in_process(cfg, "memory://synrail-test/out")
    store = Store("memory://synrail-test/out")
    assert not store.is_local and summary.out_url == "memory://synrail-test/out"
    assert sum(summary.images_per_split.values()) == 6
    assert store.exists("data.yaml") and store.exists("annotations/instances_train.json")
    assert len(store.list("images/train")) == summary.images_per_split["train"]
    with pytest.raises(StoreError, match="not on a local disk"):
        store.local_path()


def test_the_real_sources_example_config_is_valid():
    cfg = load_config(ROOT / "configs/real-sources.example.yaml")
    assert cfg.backgrounds.source == "video" and cfg.backgrounds.video.sampling.fps == 1.0
    assert [s.type for s in cfg.gallery.sources] == ["coco", "pennfudan", "rocks", "diffusion", "procedural"]
    assert cfg.segment.backend == "sam"


def test_video_source_without_its_section_is_refused():
    with pytest.raises(ConfigError, match="backgrounds.video.url"):
        load_config(ROOT / "configs/tiny.yaml", {"backgrounds.source": "video"})


def test_a_rerun_sweeps_up_the_temporaries_a_killed_build_left(tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml")
    out = Store(str(tmp_path / "out"))
    claim_output(out, cfg, overwrite=False)
    partial = tmp_path / "out" / "manifest" / f".images.parquet.{'ab' * 16}.tmp"
    partial.parent.mkdir()
    partial.write_bytes(b"half")
    keep = tmp_path / "out" / "manifest" / ".notes.tmp"  # not a name SynRail writes
    keep.write_text("mine")
    assert claim_output(out, cfg, overwrite=False) is True
    assert not partial.exists() and keep.exists()
    foreign = tmp_path / "foreign" / f".a.{'cd' * 16}.tmp"
    foreign.parent.mkdir()
    foreign.write_bytes(b"x")
    with pytest.raises(OutputConflict):
        claim_output(Store(str(tmp_path / "foreign")), cfg, overwrite=False)
    assert foreign.exists()  # nothing is deleted from a folder SynRail did not write


def test_a_claim_killed_before_its_marker_does_not_block_the_rerun(tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml")
    out = tmp_path / "out"
    (out / ".synrail").mkdir(parents=True)
    (out / f".synrail-write-probe-{'0' * 32}").write_bytes(b"")
    (out / f"..synrail-write-probe-{'1' * 32}.{'2' * 32}.tmp").write_bytes(b"")  # killed mid-probe
    (out / ".synrail" / f".build.json.{'ef' * 16}.tmp").write_bytes(b'{"build_')
    assert claim_output(Store(str(out)), cfg, overwrite=False) is False
    assert sorted(p.name for p in out.rglob("*")) == [".synrail", "build.json"]

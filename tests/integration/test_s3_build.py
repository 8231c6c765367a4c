"""A build that reads cab videos from a bucket and writes the dataset, and its caches, to a bucket, on
a real S3 protocol endpoint (moto_server on 127.0.0.1), through the ``synrail`` command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import s3fs
import yaml
from media import H, W, write_video_folder
from services import moto_s3

from synrail.config import load_config
from synrail.export.validate import validate_dataset

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "synrail-build"


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory):
    with moto_s3(tmp_path_factory.mktemp("logs") / "moto.log") as env:
        yield env


def synrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_build_from_a_video_bucket_into_a_dataset_bucket(s3_env, tmp_path):
    fs = s3fs.S3FileSystem(key=s3_env["AWS_ACCESS_KEY_ID"], secret=s3_env["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": s3_env["AWS_ENDPOINT_URL"]})
    fs.mkdir(BUCKET)
    fs.put(str(write_video_folder(tmp_path / "videos")) + "/", f"{BUCKET}/videos/", recursive=True)
    config = load_config(ROOT / "configs/tiny.yaml", {
        "num_images": 10, "image.width": W, "image.height": H, "backgrounds.source": "video",
        "backgrounds.video": {"url": f"s3://{BUCKET}/videos", "hfov_deg": 60,
                              "sampling": {"fps": 2.0, "sidecar": f"s3://{BUCKET}/videos/meta.csv"}}})
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = {**os.environ, **s3_env, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)

    out = f"s3://{BUCKET}/datasets/tiny"
    first = synrail(env, "build", "--config", str(config_path), "--out", out, "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    checked = synrail(env, "validate", "--out", out)  # every command takes the same URLs as build
    assert checked.returncode == 0 and "0 problem(s)" in checked.stderr, checked.stdout + checked.stderr
    stamps = {p: fs.info(p)["LastModified"] for p in fs.find(f"{BUCKET}/datasets/tiny/images")}
    assert len(stamps) == 10
    assert fs.exists(f"{BUCKET}/datasets/tiny/.synrail/cache/prefect")  # task results live in the bucket too
    assert fs.exists(f"{BUCKET}/datasets/tiny/manifest/quarantine.parquet")  # the broken video, with its reason

    local = tmp_path / "download"
    fs.get(f"{BUCKET}/datasets/tiny/", str(local), recursive=True)
    assert validate_dataset(local) == []
    counts = sum(len(json.loads((local / f"annotations/instances_{s}.json").read_text())["images"])
                 for s in ("train", "val", "test"))
    assert counts == 10

    again = synrail(env, "build", "--config", str(config_path), "--out", out, "--no-progress")
    assert again.returncode == 0, again.stdout + again.stderr
    fs.invalidate_cache()
    assert {p: fs.info(p)["LastModified"] for p in fs.find(f"{BUCKET}/datasets/tiny/images")} == stamps
    assert not fs.exists(f"{BUCKET}/datasets/tiny/.synrail/lock")  # each build let go of the lock


def test_the_build_lock_is_a_conditional_put_on_s3(s3_env, monkeypatch):
    from synrail.storage.lock import OutputLocked, build_lock
    from synrail.storage.store import Store

    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    out = Store(f"s3://{BUCKET}-lock/ds")
    out.fs.mkdir(f"{BUCKET}-lock")
    assert out.create_exclusive("probe", b"1") and not out.create_exclusive("probe", b"2")
    assert out.read_bytes("probe") == b"1"
    with build_lock(out, owner="first build"):
        with pytest.raises(OutputLocked, match="first build"):
            with build_lock(Store(out.root_url), owner="second build"):
                pass
    assert not out.exists(".synrail/lock")

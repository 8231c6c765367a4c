"""Versioned datasets: the pointer switch, the incremental version made only from new videos, and
the watcher that finds them (flows under Prefect's test harness, one server for this module)."""

import csv
import filecmp
import json
import os
import threading
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from media import H, W, cab_frames, write_frame_sequences, write_video
from prefect.testing.utilities import prefect_test_harness

from flows import versions as versions_flow
from flows.versions import build_version, ingest_new_videos
from flows.watch import watch_videos
from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.rail.geometry import CameraGeometry
from synrail.records import BackgroundRecord, ChunkRecord, InputReport
from synrail.stages.export import BuildRecords
from synrail.stages.versions import (
    LATEST,
    VersionInfo,
    copy_tree,
    latest_version,
    local_copy,
    per_video_plan,
    prune_unreferenced,
    publish,
    resolve_dataset,
    version_store,
    video_split,
)
from synrail.storage.lock import build_lock
from synrail.storage.store import Store

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "configs" / "tiny.yaml")


def video_overrides(videos: Path) -> dict:
    return {"num_images": 12, "image.width": W, "image.height": H, "backgrounds.source": "video",
            "backgrounds.video": {"url": str(videos), "hfov_deg": 60, "sampling": {"fps": 2.0}},
            "ingest.images_per_video": 6, "execution.chunk_size": 4}


def info(version: str, videos: list[str], n: int = 3) -> VersionInfo:
    return VersionInfo(version=version, parent=None, kind="full", created="2026-12-02T00:00:00+00:00",
                       build_hash="h", code_version="c", num_images=n, videos=videos)


def test_video_split_is_stable_and_follows_the_fractions():
    cfg = load_config(TINY)
    names = [f"cab/{k:04d}.mp4" for k in range(3000)]
    splits = [video_split(cfg, n) for n in names]
    assert splits == [video_split(cfg, n) for n in names]
    fractions = cfg.splits.fractions()
    for split, share in fractions.items():
        assert abs(splits.count(split) / len(names) - share) < 0.03
    only_train = load_config(TINY, {"splits": {"train": 1.0, "val": 0.0, "test": 0.0}})
    assert {video_split(only_train, n) for n in names[:200]} == {"train"}


def test_per_video_plan_numbers_on_and_draws_each_video_from_its_own_frames():
    cfg = load_config(TINY, {"ingest.images_per_video": 5, "execution.chunk_size": 4})
    geometry = CameraGeometry(width=64, height=48, focal_px=50.0, cx=32.0, cy=24.0, height_m=2.5, pitch_rad=0.05)
    backgrounds = [BackgroundRecord(background_id=f"{v}-{k}", index=k, split=split, source=f"video:{v}",
                                    path="p.png", sha256="s", width=64, height=48, track_type="ballasted",
                                    condition="normal", geometry=geometry, fog_beta=0.0,
                                    airlight_bgr=(0, 0, 0), illumination_bgr=(1, 1, 1), sensor_noise=0.0,
                                    rail_area={}, rail_area_px=1)
                   for v, split in [("b.avi", "val"), ("a.avi", "train")] for k in range(2)]
    plan = per_video_plan(cfg, 100, backgrounds)
    assert [(c.first, c.stop) for c in plan] == [(100, 104), (104, 105), (105, 109), (109, 110)]  # per video
    assert [s for c in plan for s in c.splits] == ["train"] * 5 + ["val"] * 5
    assert [{b.source for b in c.backgrounds} for c in plan] == [{"video:a.avi"}] * 2 + [{"video:b.avi"}] * 2
    assert sum(c.stop - c.first for c in per_video_plan(cfg, 0, backgrounds[:2])) == 5  # one video: 5 images


def test_clip_frames_take_a_block_after_each_videos_stills():
    from synrail.sources.video import VideoRef
    from synrail.stages.versions import clip_plan, next_image_index, video_block

    cfg = load_config(TINY, {"backgrounds.source": "video", "backgrounds.video.url": "videos/",
                             "ingest.images_per_video": 5, "execution.chunk_size": 4,
                             "sequences.clips": 2, "sequences.frames_per_clip": 3})
    assert video_block(cfg) == 5 + 2 * 3
    geometry = CameraGeometry(width=64, height=48, focal_px=50.0, cx=32.0, cy=24.0, height_m=2.5, pitch_rad=0.05)
    backgrounds = [BackgroundRecord(background_id=f"{v}-0", index=0, split="train", source=f"video:{v}",
                                    path="p.png", sha256="s", width=64, height=48, track_type="ballasted",
                                    condition="normal", geometry=geometry, fog_beta=0.0,
                                    airlight_bgr=(0, 0, 0), illumination_bgr=(1, 1, 1), sensor_noise=0.0,
                                    rail_area={}, rail_area_px=1) for v in ("a.avi", "c.avi")]
    plan = per_video_plan(cfg, 22, backgrounds)
    assert [(c.first, c.stop) for c in plan] == [(22, 26), (26, 27), (33, 37), (37, 38)]
    videos = [VideoRef(url=n, name=n, size=1, version="1") for n in ("a.avi", "b.avi", "c.avi")]
    calls = clip_plan(cfg, videos, 4, 22, backgrounds)
    assert [(c.position, c.first_image_index) for c in calls] == [(4, 27), (5, None), (6, 38)]  # b: no frames
    parent = BuildRecords(chunks=[], backgrounds=backgrounds, gallery=[], report=InputReport())
    assert next_image_index(cfg, parent) == 2 * 11 and next_image_index(cfg, None) == 0
    plain = parent.model_copy(update={"chunks": [ChunkRecord(first=0, stop=100, images_path="", annotations_path="",
                                                             sha256="", num_images=100, num_annotations=0)]})
    assert next_image_index(cfg, plain) == 100  # a plain build's parent: past its num_images stills
    assert clip_plan(load_config(TINY, {"sequences.clips": 2}), videos, 0, 0, backgrounds) == []  # procedural


def test_publish_switches_the_pointer_and_the_link(tmp_path):
    root = Store(str(tmp_path / "ds"))
    assert latest_version(root) is None and resolve_dataset(root.root_url) == root.root_url
    for version in ("v0001", "v0002"):
        version_store(root, version).write_text("data.yaml", version)
        publish(root, info(version, []))
    assert latest_version(root) == "v0002"
    assert json.loads(root.read_text(LATEST))["path"] == "versions/v0002"
    assert resolve_dataset(root.root_url).endswith("/versions/v0002")
    assert os.readlink(tmp_path / "ds" / "latest") == "versions/v0002"
    assert (tmp_path / "ds" / "latest" / "data.yaml").read_text() == "v0002"
    assert not list((tmp_path / "ds").glob(".latest*"))


def test_copy_tree_hard_links_local_files_and_skips_temporaries(tmp_path):
    source, target = Store(str(tmp_path / "a")), Store(str(tmp_path / "b"))
    source.write_text("images/train/000001.jpg", "x")
    (tmp_path / "a/images/train/.000002.jpg.1234.tmp").write_text("partial")
    assert copy_tree(source, target, "images") == 1
    copied = tmp_path / "b/images/train/000001.jpg"
    assert copied.read_text() == "x" and copied.stat().st_ino == (tmp_path / "a/images/train/000001.jpg").stat().st_ino
    assert copy_tree(source, target, "images") == 1  # again, over the existing link
    assert copy_tree(source, target, "nothing-here") == 0


def test_prune_removes_only_files_no_chunk_lists(tmp_path):
    from synrail.records import ChunkRecord
    from synrail.storage.tables import table_bytes
    out = Store(str(tmp_path))
    out.write_bytes("c.parquet", table_bytes([{"file_name": "images/train/000000.jpg"}]))
    for rel in ("images/train/000000.jpg", "labels/train/000000.txt", "images/val/000001.jpg",
                "labels/val/000001.txt"):
        out.write_text(rel, "")
    chunk = ChunkRecord(first=0, stop=1, images_path="c.parquet", annotations_path="", sha256="", num_images=1,
                        num_annotations=0)
    assert sorted(prune_unreferenced(out, [chunk])) == ["images/val/000001.jpg", "labels/val/000001.txt"]
    assert out.exists("images/train/000000.jpg") and out.exists("labels/train/000000.txt")


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_new_video_makes_an_incremental_version_beside_the_old(harness, tmp_path, monkeypatch):
    videos = tmp_path / "videos"
    videos.mkdir()
    for k in range(2):
        write_video(videos / f"line{k}.avi", cab_frames(k, 4))
    dataset = str(tmp_path / "dataset")
    overrides = video_overrides(videos)

    assert sorted(Path(u).name for u in watch_videos(TINY, dataset, overrides)) == ["line0.avi", "line1.avi"]
    first = ingest_new_videos(TINY, dataset, overrides)  # no version yet: a full one
    assert (first.version, first.published, first.num_images) == ("v0001", True, 12)
    v1 = tmp_path / "dataset/versions/v0001"
    v1_files = {p: p.read_bytes() for p in v1.rglob("*") if p.is_file() and ".synrail" not in p.parts}
    assert watch_videos(TINY, dataset, overrides) == []
    assert not ingest_new_videos(TINY, dataset, overrides).published
    assert not build_version(TINY, dataset, overrides).published  # the schedule finds nothing to do

    write_video(videos / "line2.avi", cab_frames(2, 4))
    with build_lock(Store(dataset), owner="a long build"):
        assert watch_videos(TINY, dataset, overrides) == []  # nothing announced while a run holds the root
    assert [Path(u).name for u in watch_videos(TINY, dataset, overrides)] == ["line2.avi"]
    def crash(*args):
        raise RuntimeError("crashed just before publishing")
    monkeypatch.setattr(versions_flow, "prune_unreferenced", crash)
    with pytest.raises(RuntimeError, match="crashed"):
        ingest_new_videos(TINY, dataset, overrides)
    assert resolve_dataset(dataset).endswith("versions/v0001")  # readers still see the complete v0001
    assert (tmp_path / "dataset/versions/v0002/manifest/images.parquet").exists()  # half-made, unpublished
    monkeypatch.undo()
    second = ingest_new_videos(TINY, dataset, overrides, video_url=str(videos / "line2.avi"))
    assert (second.version, second.published, second.new_videos) == ("v0002", True, ["line2.avi"])
    assert second.num_images == 12 + 6

    v2 = tmp_path / "dataset/versions/v0002"
    assert resolve_dataset(dataset).endswith("versions/v0002")
    assert {p: p.read_bytes() for p in v1_files} == v1_files  # the old version is untouched
    assert validate_dataset(v2) == [] and validate_dataset(v1) == []
    images = pq.read_table(v2 / "manifest/images.parquet").to_pylist()
    assert len(images) == 18 and len({r["image_id"] for r in images}) == 18
    backgrounds = {b["background_id"]: b for b in pq.read_table(v2 / "manifest/backgrounds.parquet").to_pylist()}
    new_images = [r for r in images if r["image_index"] >= 12]
    assert {backgrounds[r["background_id"]]["source"] for r in new_images} == {"video:line2.avi"}
    assert len({r["split"] for r in new_images}) == 1  # a new video feeds one split
    for rel in [r["file_name"] for r in images if r["image_index"] < 12]:  # carried over, not recomposed
        assert filecmp.cmp(v1 / rel, v2 / rel, shallow=False)
    annotated = sum(len(json.loads((v2 / f"annotations/instances_{s}.json").read_text())["images"])
                    for s in ("train", "val", "test") if (v2 / f"annotations/instances_{s}.json").exists())
    assert annotated == 18
    assert sorted(json.loads((v2 / ".synrail/version.json").read_text())["videos"]) == [
        "line0.avi", "line1.avi", "line2.avi"]


def test_local_copy_downloads_the_latest_version_once(tmp_path):
    root = Store("memory://synrail-test-local-copy")
    for version in ("v0001", "v0002"):
        version_store(root, version).write_text("data.yaml", f"path: {version}\n")
        version_store(root, version).write_text("images/train/000000.jpg", version)
        publish(root, info(version, []))
    data_yaml = local_copy(root.root_url, tmp_path / "local")
    assert data_yaml == tmp_path / "local/v0002/data.yaml" and data_yaml.read_text() == "path: v0002\n"
    assert (tmp_path / "local/v0002/images/train/000000.jpg").read_text() == "v0002"
    assert not list((tmp_path / "local").glob(".*partial"))
    version_store(root, "v0002").write_text("data.yaml", "changed")
    assert local_copy(root.root_url, tmp_path / "local").read_text() == "path: v0002\n"  # not fetched again
    local_root = Store(str(tmp_path / "ds"))
    version_store(local_root, "v0001").write_text("data.yaml", "x")
    publish(local_root, info("v0001", []))
    assert local_copy(local_root.root_url, tmp_path / "unused") == tmp_path / "ds/versions/v0001/data.yaml"


def test_an_unpublished_folder_is_reused_for_this_build_and_replaced_for_another(tmp_path):
    from synrail.stages.versions import claim_version_folder
    from synrail.storage.output import BUILD_MARKER
    out = Store(str(tmp_path / "versions/v0002"))
    cfg = load_config(TINY)
    claim_version_folder(out, cfg)
    out.write_text("images/train/000000.jpg", "left by a crash")
    claim_version_folder(out, cfg)
    assert out.exists("images/train/000000.jpg")  # the same build: kept, the rerun reuses it
    claim_version_folder(out, load_config(TINY, {"seed": 7}))
    assert not out.exists("images/train/000000.jpg") and out.exists(BUILD_MARKER)


def images_per_video(version: Path) -> Counter:
    backgrounds = {b["background_id"]: b["source"] for b in pq.read_table(version / "manifest/backgrounds.parquet")
                   .to_pylist()}
    return Counter(backgrounds[r["background_id"]] for r in pq.read_table(version / "manifest/images.parquet")
                   .to_pylist())


def test_overlapping_runs_queue_and_a_full_build_keeps_the_per_video_size(harness, tmp_path, monkeypatch):
    """An ingest run and a full build on one root overlap: the build waits for the ingest's lock, then
    both complete; the full build, forced, holds images_per_video images of every video, exactly the
    incremental history's images (the videos landed in name order)."""
    videos = tmp_path / "videos"
    videos.mkdir()
    for k in range(2):
        write_video(videos / f"line{k}.avi", cab_frames(k, 4))
    dataset = str(tmp_path / "dataset")
    overrides = {**video_overrides(videos), "num_images": 5}  # num_images does not size a video dataset
    first = ingest_new_videos(TINY, dataset, overrides)
    assert (first.version, first.num_images) == ("v0001", 12)
    write_video(videos / "line2.avi", cab_frames(2, 4))

    full_build_waiting = threading.Event()
    waited = []
    carry_over = versions_flow.carry_over

    def record_waiting(holder):
        waited.append(holder.owner)
        full_build_waiting.set()

    def carry_over_once_the_full_build_waits(*args):
        assert full_build_waiting.wait(120), "the full build never queued behind the ingest run"
        return carry_over(*args)

    monkeypatch.setattr(versions_flow, "_say_waiting", record_waiting)
    monkeypatch.setattr(versions_flow, "carry_over", carry_over_once_the_full_build_waits)
    ingested = {}
    ingest = threading.Thread(target=lambda: ingested.update(summary=ingest_new_videos(TINY, dataset, overrides)))
    ingest.start()
    lock = tmp_path / "dataset/.synrail/lock"
    while not lock.exists() and ingest.is_alive():
        ingest.join(0.05)
    full = build_version(TINY, dataset, overrides, force=True)
    ingest.join(120)
    assert waited and waited[0].startswith("ingest-new-videos")
    second = ingested["summary"]
    assert (second.version, second.published, second.num_images) == ("v0002", True, 18)
    assert (full.version, full.published, full.num_images) == ("v0003", True, 18)
    assert not lock.exists()

    v2, v3 = tmp_path / "dataset/versions/v0002", tmp_path / "dataset/versions/v0003"
    assert images_per_video(v3) == images_per_video(v2) == {f"video:line{k}.avi": 6 for k in range(3)}
    assert json.loads((v3 / ".synrail/version.json").read_text())["kind"] == "full"
    assert validate_dataset(v3) == []
    history = sorted(p.relative_to(v2) for p in v2.glob("images/*/*.jpg"))
    assert history == sorted(p.relative_to(v3) for p in v3.glob("images/*/*.jpg"))
    for rel in history:
        assert filecmp.cmp(v2 / rel, v3 / rel, shallow=False)
        label = Path(str(rel).replace("images", "labels", 1)).with_suffix(".txt")
        assert filecmp.cmp(v2 / label, v3 / label, shallow=False)
    unchanged = build_version(TINY, dataset, overrides)  # not forced: nothing changed
    assert (unchanged.published, unchanged.version) == (False, "v0003")


SEQUENCES = str(ROOT / "configs" / "tiny-sequences.yaml")


def clip_overrides(videos: Path, sidecar: Path) -> dict:
    return {"backgrounds.source": "video", "image.width": W, "image.height": H,
            "backgrounds.video": {"url": str(videos), "hfov_deg": 60,
                                  "sampling": {"stride": 2, "sidecar": str(sidecar)}},
            "splits": {"train": 1.0, "val": 0.0, "test": 0.0}, "gallery.per_class": 1,
            "ingest.images_per_video": 2, "execution.chunk_size": 2, "sequences.clips": 1,
            "sequences.frames_per_clip": 5, "sequences.first_distance_m": [12, 25]}


def clip_files(version: Path) -> dict[str, bytes]:
    """Every clip file of a version: frames, labels, clips.csv and MOT ground truth."""
    found = [*version.glob("images/*/clip*.jpg"), *version.glob("labels/*/clip*.txt"), version / "clips.csv",
             *version.glob("clips/*/gt/gt.txt")]
    return {str(p.relative_to(version)): p.read_bytes() for p in found}


def test_a_frames_folder_full_version_is_sized_per_sequence_like_its_history(harness, tmp_path):
    """An image-folder source's scheduled full version holds images_per_video images of each sequence,
    as its incremental versions do, whatever num_images says (it sized the full build before)."""
    frames = write_frame_sequences(tmp_path / "frames", 0, 2, 4, "png")
    overrides = {"num_images": 5, "image.width": W, "image.height": H, "backgrounds.source": "frames",
                 "backgrounds.frames": {"url": str(frames), "hfov_deg": 60},
                 "ingest.images_per_video": 6, "execution.chunk_size": 4}
    dataset = str(tmp_path / "dataset")
    first = ingest_new_videos(TINY, dataset, overrides)
    assert (first.version, first.num_images) == ("v0001", 12)
    full = build_version(TINY, dataset, overrides, force=True)
    assert (full.version, full.published, full.num_images) == ("v0002", True, 12)
    v1, v2 = tmp_path / "dataset/versions/v0001", tmp_path / "dataset/versions/v0002"
    assert images_per_video(v2) == images_per_video(v1) == {f"frames:run{k}": 6 for k in range(2)}
    assert validate_dataset(v2) == []


def test_versions_make_each_videos_approach_clips_and_a_full_build_equals_the_history(harness, tmp_path):
    """A video-sourced config with sequences.clips > 0: each version adds its new videos' clips (clips.csv,
    gt, frames after each video's stills), keeps its parent's, and a forced full build reproduces the
    history file for file; a video's clip frames are the bytes the plain build makes of that video."""
    from media import approach_frames, write_mp4

    from synrail.stages.local import build_in_process

    videos = tmp_path / "videos"
    videos.mkdir()
    sidecar = tmp_path / "meta.csv"
    sidecar.write_text("video,speed_kmh\nrun0.mp4,50\nrun1.mp4,50\n")
    write_mp4(videos / "run0.mp4", approach_frames(1, 8, 50.0, 10.0)[0], 10.0)
    (videos / "broken.mp4").write_bytes(b"\x00not a video" * 50)  # owns slot 0, gives no clip
    dataset = str(tmp_path / "dataset")
    overrides = clip_overrides(videos, sidecar)
    first = ingest_new_videos(SEQUENCES, dataset, overrides)
    assert (first.version, first.num_images) == ("v0001", 2) and "1 clip(s)" in first.reason
    v1 = tmp_path / "dataset/versions/v0001"
    assert validate_dataset(v1) == []
    (row,) = list(csv.DictReader((v1 / "clips.csv").open()))
    assert row["source"] == "video:run0.mp4" and (v1 / f"clips/{row['clip_id']}/gt/gt.txt").exists()
    assert row["clip_id"] == "clip00001"  # the slot of the second video looked at, as in a plain build's listing
    frames = pq.read_table(v1 / "manifest/clip_frames.parquet").to_pylist()
    assert [r["image_index"] for r in frames] == [2, 3, 4, 5, 6]  # after the video's 2 stills
    assert first.num_clip_frames == 5 and json.loads((tmp_path / "dataset/latest.json").read_text())[
        "num_clip_frames"] == 5  # counted beside the stills, not in them

    alone = tmp_path / "plain"  # the plain build of this one video: the same clip frames
    build_in_process(load_config(SEQUENCES, {**overrides, "num_images": 2}), str(alone))
    assert {k: v for k, v in clip_files(alone).items() if k.endswith(".jpg")} == {
        k: v for k, v in clip_files(v1).items() if k.endswith(".jpg")}

    write_mp4(videos / "run1.mp4", approach_frames(2, 8, 50.0, 10.0)[0], 10.0)
    second = ingest_new_videos(SEQUENCES, dataset, overrides)
    assert (second.version, second.new_videos) == ("v0002", ["run1.mp4"])
    assert second.num_clip_frames == 2 * first.num_clip_frames  # the parent's clip kept, the new video's added
    v2 = tmp_path / "dataset/versions/v0002"
    assert validate_dataset(v2) == []
    rows = list(csv.DictReader((v2 / "clips.csv").open()))
    assert [r["source"] for r in rows] == ["video:run0.mp4", "video:run1.mp4"]
    assert {k: v for k, v in clip_files(v2).items() if "clip00001" in k} == {
        k: v for k, v in clip_files(v1).items() if "clip00001" in k}  # carried over, not recomposed
    refused = pq.read_table(v2 / "manifest/refused_clips.parquet").to_pylist()
    assert [r["video"] for r in refused] == ["broken.mp4"]  # the parent's refusal is kept
    frames = pq.read_table(v2 / "manifest/clip_frames.parquet").to_pylist()
    assert [r["image_index"] for r in frames] == [2, 3, 4, 5, 6, 9, 10, 11, 12, 13]

    full = build_version(SEQUENCES, dataset, overrides, force=True)
    v3 = tmp_path / "dataset/versions/v0003"
    assert full.version == "v0003" and validate_dataset(v3) == []
    assert clip_files(v3) == clip_files(v2)
    for rel in ("manifest/clip_frames.parquet", "manifest/clip_annotations.parquet", "manifest/refused_clips.parquet",
                *(str(p.relative_to(v2)) for p in v2.glob("images/*/*.jpg"))):
        assert filecmp.cmp(v2 / rel, v3 / rel, shallow=False), rel

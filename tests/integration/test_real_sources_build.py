"""Whole builds from real-source layouts: cab videos, PennFudan, RGBA folders, diffusion; reruns
make no model calls."""

import json
from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest
from galleries import person_fixture
from media import H, W, cab_frames, write_bomb_png, write_video, write_video_folder

from synrail.config import load_config
from synrail.export.validate import validate_dataset
from synrail.segment.grabcut import GrabCutSegmenter
from synrail.stages import gallery as gallery_stage
from synrail.stages.local import build_in_process
from synrail.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def video_folder(tmp_path_factory) -> Path:
    return write_video_folder(tmp_path_factory.mktemp("videos"))


def rgba_fixture(root: Path) -> Path:
    root.mkdir(parents=True)
    for k in range(2):
        rgba = np.zeros((80, 120, 4), np.uint8)
        cv2.rectangle(rgba, (10, 20), (110, 70), (30 + 60 * k, 60, 160, 255), -1)
        cv2.imwrite(str(root / f"cart{k}.png"), rgba)
    return root


def test_video_backgrounds_build_a_valid_dataset_and_quarantine_the_bad_video(video_folder, tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml", {
        "num_images": 12, "image.width": W, "image.height": H, "backgrounds.source": "video",
        "backgrounds.video": {"url": str(video_folder), "hfov_deg": 60,
                              "sampling": {"fps": 2.0, "sidecar": str(video_folder / "meta.csv")}}})
    summary = build_in_process(cfg, str(tmp_path / "out"))
    out = tmp_path / "out"
    assert validate_dataset(out) == []
    assert sum(summary.images_per_split.values()) == 12
    backgrounds = pq.read_table(out / "manifest/backgrounds.parquet").to_pylist()
    assert backgrounds and all(b["source"].startswith("video:line") for b in backgrounds)
    assert {b["split"] for b in backgrounds} == {"train", "val", "test"}  # one video per split
    assert len({(b["source"], b["split"]) for b in backgrounds}) == 3
    rainy = [b for b in backgrounds if b["source"] == "video:line0.avi"]
    assert rainy and all(b["condition"] == "rain" and b["track_type"] == "ballasted" for b in rainy)
    quarantine = pq.read_table(out / "manifest/quarantine.parquet").to_pylist()
    assert [Path(q["url"]).name for q in quarantine] == ["broken.mp4"] and quarantine[0]["reason"]
    card = (out / "dataset_card.md").read_text()
    assert "1 file(s) quarantined" in card and "broken.mp4" in card and "frames of cab videos" in card


def test_dataset_galleries_build_and_rerun_without_segmenter_calls(tmp_path, monkeypatch):
    calls = []

    class CountingGrabCut(GrabCutSegmenter):
        def segment(self, image_bgr, prompts):
            calls.append(len(prompts))
            return super().segment(image_bgr, prompts)

    monkeypatch.setattr(gallery_stage, "load_segmenter", lambda *a, **k: CountingGrabCut())
    people = person_fixture(tmp_path / "PennFudanPed")
    carts = rgba_fixture(tmp_path / "carts")
    rocks = tmp_path / "rocks" / "granite"
    rocks.mkdir(parents=True)
    photo = np.full((200, 200, 3), (200, 210, 215), np.uint8)
    cv2.circle(photo, (100, 110), 60, (70, 80, 90), -1)
    cv2.imwrite(str(rocks / "r1.jpg"), photo)
    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": 8, "segment.min_score": 0.2, "gallery.sources": [
        {"type": "pennfudan", "root": str(people)},
        {"type": "rgba", "root": str(carts), "class_name": "vehicle", "height_m": [1.2, 1.5]},
        {"type": "rocks", "root": str(tmp_path / "rocks")},
        {"type": "procedural", "classes": ["animal", "unseen_obstacle"]}]})
    build_in_process(cfg, str(tmp_path / "out"))
    out = tmp_path / "out"
    assert validate_dataset(out) == []
    gallery = pq.read_table(out / "manifest/gallery.parquet").to_pylist()
    by_class = {c: {g["source"].split(":")[0].split("/")[0] for g in gallery if g["class_name"] == c}
                for c in cfg.classes}
    assert by_class == {"person": {"pennfudan"}, "vehicle": {"rgba"}, "rock": {"rocks"},
                        "animal": {"procedural"}, "unseen_obstacle": {"procedural"}}
    assert calls == [1]  # the rock photo; shipped masks (PennFudan, RGBA) need no segmenter

    build_in_process(cfg, str(tmp_path / "again"))  # same cache store? no: a new output has a new cache
    assert calls == [1, 1]
    calls.clear()
    shared = cfg.model_copy(update={"execution": cfg.execution.model_copy(
        update={"cache_url": str(tmp_path / "shared-cache")})})
    build_in_process(shared, str(tmp_path / "shared1"))
    build_in_process(shared, str(tmp_path / "shared2"))
    assert calls == [1]  # the second build found every mask in the shared cache


def test_diffusion_gallery_generates_once_and_keeps_provenance(tmp_path, monkeypatch):
    from tiny_models import build_tiny_sd_pipeline

    from synrail.sources import diffusion

    model = build_tiny_sd_pipeline(tmp_path / "tiny-sd")
    calls = []
    real_generate = diffusion.DiffusionGenerator.generate

    def counting(self, specs):
        calls.append(len(specs))
        return real_generate(self, specs)

    monkeypatch.setattr(diffusion.DiffusionGenerator, "generate", counting)
    cfg = load_config(ROOT / "configs/tiny.yaml", {
        "num_images": 6, "classes": ["person", "rock"],
        "segment": {"backend": "grabcut", "min_score": 0.0, "min_area_px": 16},
        "execution.cache_url": str(tmp_path / "cache"),
        "gallery.sources": [
            {"type": "diffusion", "model": {"model_dir": str(model), "steps": 2, "width": 64, "height": 64,
                                           "batch_size": 2}, "prompts": {"per_class": 2}},
            {"type": "procedural"}]})
    result = gallery_stage.prepare_gallery_source(cfg, 0, Store(str(tmp_path / "cache")))
    assert sum(calls) == 4  # 2 prompts x 2 classes
    provenance = [json.loads(r.source.split(":", 1)[1]) for r in result.records]
    assert all({"model", "prompt", "seed"} <= p.keys() for p in provenance)
    assert len(result.records) + len(result.skipped) == 4
    gallery_stage.prepare_gallery_source(cfg, 0, Store(str(tmp_path / "cache")))
    assert sum(calls) == 4  # the rerun found every image in the diffusion cache


def test_a_corrupt_video_leaves_no_split_empty_when_a_good_one_exists(tmp_path):
    """Splits are assigned over the videos that yielded frames: with one good video for two splits,
    time blocks of it feed both (before, the corrupt video got a split of its own, which stayed empty)."""
    videos = tmp_path / "videos"
    write_video(videos.mkdir() or videos / "good.avi", cab_frames(7, 6))
    (videos / "bad.mp4").write_bytes(b"\x00not a video at all" * 50)
    cfg = load_config(ROOT / "configs/tiny.yaml", {
        "num_images": 6, "image.width": W, "image.height": H, "splits": {"train": 0.5, "val": 0.5, "test": 0.0},
        "backgrounds.source": "video", "backgrounds.video": {"url": str(videos), "sampling": {"fps": 2.0}}})
    build_in_process(cfg, str(tmp_path / "out"))
    backgrounds = pq.read_table(tmp_path / "out/manifest/backgrounds.parquet").to_pylist()
    assert {b["split"] for b in backgrounds} == {"train", "val"}
    assert {b["source"] for b in backgrounds} == {"video:good.avi"}


def test_bombs_and_oversized_frames_are_quarantined_and_the_card_groups_them(video_folder, tmp_path):
    carts = rgba_fixture(tmp_path / "carts")
    for k in range(3):
        write_bomb_png(carts / f"bomb{k}.png")
    cfg = load_config(ROOT / "configs/tiny.yaml", {
        "num_images": 6, "classes": ["vehicle"], "image.width": W, "image.height": H,
        "gallery.sources": [{"type": "rgba", "root": str(carts), "class_name": "vehicle", "height_m": [1.2, 1.8]}],
        "backgrounds.source": "video", "backgrounds.video": {"url": str(video_folder), "sampling": {"fps": 2.0}},
        "inputs.max_image_pixels": W * H})
    build_in_process(cfg, str(tmp_path / "out"))
    rows = pq.read_table(tmp_path / "out/manifest/quarantine.parquet").to_pylist()
    assert sorted(Path(r["url"]).name for r in rows if "over inputs.max_image_pixels" in r["reason"]) == [
        "bomb0.png", "bomb1.png", "bomb2.png"]
    card = (tmp_path / "out/dataset_card.md").read_text()
    lines = [line for line in card.splitlines() if "over inputs.max_image_pixels" in line]
    reason = "unreadable image: declares N pixels = N MP, over inputs.max_image_pixels (N MP)"
    # one line per kind for the three bombs (the files, and the candidates they held), a count, one example
    assert [line.split(" | ")[:3] for line in lines] == [["| file quarantined", reason, "3"],
                                                         ["| obstacle skipped", reason, "3"]]
    assert "bomb0.png" in lines[0] and "bomb1.png" not in card

    small = cfg.model_copy(update={"inputs": cfg.inputs.model_copy(update={"max_image_pixels": W * H - 1})})
    with pytest.raises(ValueError, match="no usable background"):  # every video's frames are over the limit now
        build_in_process(small, str(tmp_path / "out-small"))

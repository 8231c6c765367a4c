"""Approach clips on procedural scenes: obstacles fixed in the world, exact labels per frame, whole clips
per split, the same bytes whatever the chunking, and stills untouched."""

import csv
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from synrail.config import load_config
from synrail.export.plots import (
    PREVIEW_CLIPS,
    PREVIEW_FPS,
    PREVIEW_TILE_WIDTH,
    TRACK_COLOURS_BGR,
    _preview_tile,
    preview_clip_ids,
    preview_frame_numbers,
)
from synrail.export.validate import validate_dataset
from synrail.rail.geometry import TrackPose, back_project_to_world
from synrail.records import ClipAnnotationRow, ClipImageRow
from synrail.stages.export import read_build_records
from synrail.stages.local import build_in_process, gather_inputs
from synrail.stages.sequences import compose_clips
from synrail.storage.store import Store
from synrail.storage.tables import read_rows

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "configs" / "tiny-sequences.yaml"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("clips") / "out"
    build_in_process(load_config(CONFIG), str(out))
    store = Store(str(out))
    clips = read_build_records(store).clips
    rows = {c.clip_id: read_rows(store, c.annotations_path, ClipAnnotationRow) for c in clips}
    frames = {c.clip_id: read_rows(store, c.images_path, ClipImageRow) for c in clips}
    return out, clips, rows, frames


def test_labels_are_valid_in_every_frame_and_clips_have_tracks(built):
    out, clips, rows, _ = built
    assert validate_dataset(out) == []
    assert len(clips) == 4 and sum(len(r) for r in rows.values()) > 0


def test_each_track_back_projects_to_its_fixed_world_point_in_every_frame(built):
    out, clips, rows, _ = built
    listed = {r["clip_id"]: r for r in csv.DictReader((out / "clips.csv").open())}
    for clip in clips:
        step = float(listed[clip.clip_id]["speed_kmh"]) / 3.6 / float(listed[clip.clip_id]["fps"])
        for r in rows[clip.clip_id]:
            pose = TrackPose.along(clip.geometry, r.frame_in_clip * step)  # the motion clips.csv states
            x, z = back_project_to_world(clip.geometry, pose, r.ground_u_px, r.ground_v_px)
            error = ((x - r.world_x_m) ** 2 + (z - r.world_z_m) ** 2) ** 0.5
            assert error <= max(0.05, 0.005 * r.distance_m), (clip.clip_id, r.frame_in_clip, error)
            assert (r.ground_u, r.ground_v) == (round(r.ground_u_px), round(r.ground_v_px))
            if not (r.truncated or r.occluded):  # the pasted silhouette stands on that point
                assert r.bbox_y + r.bbox_h - 1 == r.ground_v


def test_distance_falls_by_speed_over_fps_per_frame(built):
    _, clips, rows, _ = built
    checked = 0
    for clip in clips:
        step = clip.speed_kmh / 3.6 / clip.fps
        by_track: dict[int, list[ClipAnnotationRow]] = {}
        for r in rows[clip.clip_id]:
            by_track.setdefault(r.track_id, []).append(r)
        for track in by_track.values():
            track.sort(key=lambda r: r.frame_in_clip)
            for a, b in zip(track, track[1:], strict=False):
                frames = b.frame_in_clip - a.frame_in_clip
                assert frames == 1, "a track that ended came back"
                assert a.along_m - b.along_m == pytest.approx(step, abs=1e-6)
                if b.along_m > 10:  # Euclidean distance: the camera height and offset shorten the drop a little
                    assert 0.9 * step < a.distance_m - b.distance_m <= step + 1e-6
                checked += 1
    assert checked > 0


def test_a_clip_never_straddles_splits(built):
    out, clips, _, frames = built
    for clip in clips:
        assert {f.split for f in frames[clip.clip_id]} == {clip.split}
        assert [f.frame_in_clip for f in frames[clip.clip_id]] == list(range(clip.frames))
        for split in ("train", "val", "test"):
            coco = json.loads((out / f"annotations/instances_{split}.json").read_text())
            inside = [i for i in coco["images"] if i.get("clip_id") == clip.clip_id]
            assert len(inside) == (clip.frames if split == clip.split else 0)


def test_mot_ground_truth_and_clips_csv_list_every_clip(built):
    out, clips, rows, _ = built
    listed = list(csv.DictReader((out / "clips.csv").open()))
    assert [r["clip_id"] for r in listed] == [c.clip_id for c in clips]
    for clip in clips:
        gt = (out / "clips" / clip.clip_id / "gt" / "gt.txt").read_text().splitlines()
        assert len(gt) == len(rows[clip.clip_id])
        assert bool(int(next(r for r in listed if r["clip_id"] == clip.clip_id)["event"])) == bool(rows[clip.clip_id])


def test_clip_bytes_do_not_depend_on_the_chunking(built, tmp_path):
    _, clips, _, _ = built
    cfg = load_config(CONFIG)
    cache = Store(str(tmp_path / "cache"))
    _, gallery, _ = gather_inputs(cfg, cache)
    alone = compose_clips(cfg, 1, 2, gallery, cache, Store(str(tmp_path / "one")))
    assert alone[0].sha256 == clips[1].sha256


def test_a_config_without_clips_keeps_its_content_and_hash():
    plain = load_config(ROOT / "configs" / "tiny.yaml")
    explicit = load_config(ROOT / "configs" / "tiny.yaml", {"sequences.clips": 0})
    assert "sequences" not in plain.content_dict() and plain.build_hash() == explicit.build_hash()


def test_the_card_previews_clips_with_boxes_and_track_ids(built):
    out, clips, rows, frames = built
    assert "![card/clips.gif](card/clips.gif)" in (out / "dataset_card.md").read_text()
    gif = Image.open(out / "card" / "clips.gif")
    shown = preview_frame_numbers(clips[0].frames, clips[0].fps)
    assert gif.format == "GIF" and gif.n_frames == len(shown) and gif.info["duration"] == 1000 / PREVIEW_FPS
    chosen = preview_clip_ids([f for c in clips for f in frames[c.clip_id]])
    assert gif.size[0] == PREVIEW_TILE_WIDTH * len(chosen) and len(chosen) == min(PREVIEW_CLIPS, len(clips))
    store = Store(str(out))
    for k, number in enumerate(shown):  # each box's outline is drawn in its track's colour, exactly
        gif.seek(k)
        picture = cv2.cvtColor(np.asarray(gif.convert("RGB")), cv2.COLOR_RGB2BGR)
        for slot, clip in enumerate(chosen):
            tile = picture[:, slot * PREVIEW_TILE_WIDTH:(slot + 1) * PREVIEW_TILE_WIDTH]
            plain, _ = _preview_tile(store, frames[clip][number], [])
            scale = PREVIEW_TILE_WIDTH / frames[clip][number].width
            for r in (r for r in rows[clip] if r.frame_in_clip == number):
                x1, x2 = round(r.bbox_x * scale), round((r.bbox_x + r.bbox_w) * scale) - 1
                y = round((r.bbox_y + r.bbox_h) * scale) - 1  # the bottom edge: no label text there
                colour = TRACK_COLOURS_BGR[r.track_id % len(TRACK_COLOURS_BGR)]
                assert (tile[y, x1:x2 + 1] == colour).all(axis=1).mean() >= 0.8, (clip, number, r.track_id)
                assert (plain[y, x1:x2 + 1] == colour).all(axis=1).mean() < 0.5  # not the scene's own colour
    assert len((out / "card" / "clips.gif").read_bytes()) < 200_000 * len(shown)


def test_the_clip_preview_has_the_same_bytes_whatever_the_chunking(built, tmp_path):
    out, _, _, _ = built
    again = tmp_path / "again"
    build_in_process(load_config(CONFIG, {"execution.clips_per_task": 1, "execution.chunk_size": 2}), str(again))
    assert (again / "card" / "clips.gif").read_bytes() == (out / "card" / "clips.gif").read_bytes()

"""Approach clips on real footage, checked on a synthetic cab video: procedural frames rendered along
the track at a known speed, written to an mp4 with a sidecar. The obstacles must stay on their world
ground point, approach by speed / fps per frame, validate, keep their bytes whatever the chunking,
and a video without a known speed or with the track lost mid-window must be refused with a reason."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from media import approach_frames, write_mp4

from synrail.config import BuildConfig, load_config
from synrail.export.validate import validate_dataset
from synrail.rail.geometry import TrackPose, back_project_to_world
from synrail.records import ClipAnnotationRow, ClipImageRow
from synrail.stages.export import read_build_records
from synrail.stages.local import build_in_process
from synrail.stages.real_clips import TrackedFrame, choose_windows, compose_video_clips
from synrail.stages.videos import source_videos
from synrail.storage.store import Store
from synrail.storage.tables import read_rows

ROOT = Path(__file__).resolve().parents[3]
SPEED_KMH, FPS, FRAMES = 60.0, 10.0, 10
STEP_M = SPEED_KMH / 3.6 / FPS
LOST_FRAME = 6


def footage_config(folder: Path, sidecar: Path | None, **extra: object) -> BuildConfig:
    sampling = {"stride": 1, **({"sidecar": str(sidecar)} if sidecar else {})}
    return load_config(ROOT / "configs" / "tiny-sequences.yaml", {
        "backgrounds.source": "video", "backgrounds.video": {"url": str(folder), "hfov_deg": 60, "sampling": sampling},
        "image.width": 640, "image.height": 360, "num_images": 4, "splits": {"train": 1.0, "val": 0.0, "test": 0.0},
        "gallery.per_class": 1, "sequences.clips": 2, "sequences.frames_per_clip": 5,
        "sequences.first_distance_m": [15, 30], **extra})


@pytest.fixture(scope="module")
def footage(tmp_path_factory):
    """Two videos of one approach at 60 km/h, 10 fps: one clean, one whose frame 6 shows no track."""
    root = tmp_path_factory.mktemp("footage")
    folder = root / "videos"
    folder.mkdir()
    frames, geometry = approach_frames(0, FRAMES, SPEED_KMH, FPS)
    write_mp4(folder / "approach.mp4", frames, FPS)
    lost = list(frames)
    lost[LOST_FRAME] = np.full_like(frames[LOST_FRAME], 128)
    write_mp4(folder / "lost.mp4", lost, FPS)
    sidecar = root / "meta.csv"
    sidecar.write_text(f"video,speed_kmh\napproach.mp4,{SPEED_KMH:g}\nlost.mp4,{SPEED_KMH:g}\n")
    return root, folder, sidecar, geometry


@pytest.fixture(scope="module")
def built(footage):
    root, folder, sidecar, geometry = footage
    out = root / "out"
    build_in_process(footage_config(folder, sidecar), str(out))
    store = Store(str(out))
    clips = read_build_records(store).clips
    rows = {c.clip_id: read_rows(store, c.annotations_path, ClipAnnotationRow) for c in clips}
    frames = {c.clip_id: read_rows(store, c.images_path, ClipImageRow) for c in clips}
    return out, clips, rows, frames, geometry


def _video_frame(row: ClipImageRow) -> int:
    return int(row.background_id.rsplit("/", 1)[1])


def test_real_clips_validate_and_report_speed_and_drift(built):
    out, clips, rows, _, _ = built
    assert validate_dataset(out) == []
    assert [c.source for c in clips] == ["video:approach.mp4"] * 2 + ["video:lost.mp4"]
    listed = {r["clip_id"]: r for r in csv.DictReader((out / "clips.csv").open())}
    for clip in clips:
        assert clip.speed_source == "sidecar" and clip.fps == FPS and rows[clip.clip_id]
        assert listed[clip.clip_id]["speed_source"] == "sidecar"
        # the ground's image motion agrees with the stated speed to a few cm over the clip
        assert 0 <= float(listed[clip.clip_id]["drift_along_m"]) < 0.1
        assert 0 <= float(listed[clip.clip_id]["drift_lateral_gauge"]) < 0.02
    assert "### Clips on real footage" in (out / "dataset_card.md").read_text()


def test_each_obstacle_stays_on_its_world_ground_point(built):
    """Back-projected with the scene's true camera and the true motion, every frame's footprint lands
    where the clip's first frame put the obstacle."""
    _, clips, rows, frames, truth = built
    checked = 0
    for clip in clips:
        by_frame = {f.frame_in_clip: _video_frame(f) for f in frames[clip.clip_id]}
        first: dict[int, tuple[float, float]] = {}
        for r in sorted(rows[clip.clip_id], key=lambda r: r.frame_in_clip):
            pose = TrackPose.along(truth, by_frame[r.frame_in_clip] * STEP_M)
            x, z = back_project_to_world(truth, pose, r.ground_u_px, r.ground_v_px)
            x0, z0 = first.setdefault(r.track_id, (x, z))
            error = float(np.hypot(x - x0, z - z0))
            assert error <= max(0.1, 0.005 * r.distance_m), (clip.clip_id, r.track_id, r.frame_in_clip, error)
            checked += 1
    assert checked >= 10


def test_distance_falls_by_speed_over_fps_per_frame(built):
    _, clips, rows, frames, _ = built
    checked = 0
    for clip in clips:
        assert [f.advance_m for f in frames[clip.clip_id]] == pytest.approx([k * STEP_M for k in range(5)])
        by_track: dict[int, list[ClipAnnotationRow]] = {}
        for r in rows[clip.clip_id]:
            by_track.setdefault(r.track_id, []).append(r)
        for track in by_track.values():
            track.sort(key=lambda r: r.frame_in_clip)
            for a, b in zip(track, track[1:], strict=False):
                assert b.frame_in_clip - a.frame_in_clip == 1
                assert a.along_m - b.along_m == pytest.approx(STEP_M, abs=2e-3)
                assert a.distance_m - b.distance_m == pytest.approx(STEP_M, rel=0.05)
                checked += 1
    assert checked > 0


def test_a_window_where_the_track_is_lost_is_refused(built):
    out, clips, _, frames, _ = built
    refused = pq.read_table(out / "manifest" / "refused_clips.parquet").to_pylist()
    assert refused == [{"video": "lost.mp4", "frame_index": 5,
                        "reason": f"track lost at frame {LOST_FRAME}: no track: no rail edges"}]
    used = {_video_frame(f) for c in clips if c.source == "video:lost.mp4" for f in frames[c.clip_id]}
    assert used == {0, 1, 2, 3, 4}
    assert "track lost at frame 6" in (out / "dataset_card.md").read_text()


def test_clip_bytes_do_not_depend_on_the_chunking(built, footage, tmp_path):
    _, clips, _, _, _ = built
    _, folder, sidecar, _ = footage
    cfg = footage_config(folder, sidecar, **{"execution.chunk_size": 1, "execution.clips_per_task": 1})
    gallery = read_build_records(Store(str(built[0]))).gallery
    cache = Store(str(Path(built[0]) / ".synrail" / "cache"))
    video = source_videos(cfg)[0]
    again = compose_video_clips(cfg, video, 0, [(0, "train")], gallery, cache, Store(str(tmp_path / "again")))
    assert [c.sha256 for c in again.clips] == [c.sha256 for c in clips[:2]]


def test_speed_is_estimated_from_the_rails_without_a_sidecar(built, footage, tmp_path):
    _, folder, _, _ = footage
    cfg = footage_config(folder, None, **{"sequences.clips": 1})
    gallery = read_build_records(Store(str(built[0]))).gallery
    cache = Store(str(Path(built[0]) / ".synrail" / "cache"))
    made = compose_video_clips(cfg, source_videos(cfg)[0], 0, [(0, "train")], gallery, cache,
                               Store(str(tmp_path / "out")))
    assert made.speed_source == "estimated" and made.speed_kmh == pytest.approx(SPEED_KMH, rel=0.02)
    assert made.clips[0].speed_source == "estimated"


def test_no_speed_known_refuses_the_video(built, footage, tmp_path):
    _, folder, _, _ = footage
    cfg = footage_config(folder, None, **{"sequences.estimate_speed": False})
    gallery = read_build_records(Store(str(built[0]))).gallery
    cache = Store(str(Path(built[0]) / ".synrail" / "cache"))
    made = compose_video_clips(cfg, source_videos(cfg)[0], 0, [(0, "train")], gallery, cache,
                               Store(str(tmp_path / "out")))
    assert made.clips == [] and made.speed_kmh is None
    assert [r.reason for r in made.refusals] == [
        "no speed: the sidecar gives no speed_kmh and sequences.estimate_speed is off"]


def test_windows_are_back_to_back_and_skip_lost_stretches():
    ok = [TrackedFrame(i, object(), None, None) for i in range(0, 20, 2)]  # type: ignore[arg-type]
    lost = [TrackedFrame(f.frame_index, None, "no track: x", None) if f.frame_index in (6, 8) else f for f in ok]
    windows, refused = choose_windows(lost, 2, 3, 5)
    assert windows == [[0, 1, 2], [5, 6, 7]] and refused == [(6, "track lost at frame 6: no track: x")]
    gap = [f for f in ok if f.frame_index != 4]  # an unreadable frame: the numbers jump
    windows, refused = choose_windows(gap, 2, 3, 1)
    assert windows == [[2, 3, 4]] and "does not follow frame 2" in refused[0][1]


def test_a_window_never_spans_a_cut_between_shots():
    frames = [TrackedFrame(i, object(), None, None, shot=0 if i < 4 else 1)  # type: ignore[arg-type]
              for i in range(0, 20, 2)]
    windows, refused = choose_windows(frames, 2, 3, 5)
    assert windows == [[2, 3, 4], [5, 6, 7]]
    assert refused == [(0, "track lost at frame 4: frame 4 starts another shot (the footage cuts)")]


def test_a_folder_of_frames_gives_clips_at_the_configured_rate(built, footage, tmp_path):
    """An image sequence has no clock: its consecutive images are ``sequences.fps`` apart."""
    import cv2

    _, folder, _, _ = footage
    sequence = tmp_path / "frames" / "run0"
    sequence.mkdir(parents=True)
    capture = cv2.VideoCapture(str(folder / "approach.mp4"))
    for i in range(FRAMES):
        ok, image = capture.read()
        assert ok
        cv2.imwrite(str(sequence / f"f{i:03d}.png"), image)
    sidecar = tmp_path / "meta.csv"
    sidecar.write_text(f"video,speed_kmh\nrun0,{SPEED_KMH:g}\n")
    cfg = footage_config(folder, None, **{
        "backgrounds.source": "frames", "backgrounds.frames": {"url": str(tmp_path / "frames"), "hfov_deg": 60,
                                                               "sampling": {"sidecar": str(sidecar)}}})
    gallery = read_build_records(Store(str(built[0]))).gallery
    cache = Store(str(Path(built[0]) / ".synrail" / "cache"))
    (run,) = source_videos(cfg)
    made = compose_video_clips(cfg, run, 0, [(0, "train")], gallery, cache, Store(str(tmp_path / "out")))
    assert [c.source for c in made.clips] == ["frames:run0"] * 2 and made.fps == FPS
    assert made.clips[0].speed_source == "sidecar" and made.clips[0].drift_along_m < 0.1


def test_an_obstacle_beyond_the_tracked_rails_waits_until_it_is_nearer():
    from synrail.compose.sequence import TrackedObstacle
    from synrail.rail.geometry import CameraGeometry, track_point_xz
    from synrail.stages.real_clips import _on_track_area

    g = CameraGeometry.from_fov(640, 360, 60, 2.5, 3.0, track_max_z_m=30.0)  # the rails were seen to 30 m
    mask = g.track_mask()

    def at(along: float) -> TrackedObstacle:
        return TrackedObstacle(track_id=0, cutout=None, height_m=1.0, world_xz=track_point_xz(g, along, 0.2),
                               shadow_strength=0.0)  # type: ignore[arg-type]
    assert _on_track_area(at(20.0), g, mask) and not _on_track_area(at(40.0), g, mask)


def test_an_obstacle_starts_only_where_every_later_frame_still_reaches_it():
    from types import SimpleNamespace

    from synrail.stages.real_clips import _steady_reach

    frames = [SimpleNamespace(geometry=SimpleNamespace(track_max_z_m=z), time_s=t)
              for z, t in [(60.0, 0.0), (50.0, 0.1), (55.0, 0.2)]]
    # at 36 km/h the frames reach 60, 51 and 57 m past the first camera: an obstacle at 55 m waits for frame 2
    assert _steady_reach(frames, 36.0) == pytest.approx([51.0, 51.0, 57.0])  # type: ignore[arg-type]


def test_obstacles_stand_on_the_tracked_rails_where_the_geometry_leaves_them(built, footage, tmp_path):
    """Every frame's geometry given a wrong curve (its parabola leaves the rails farther away, as a real
    frame's may on a curve): the footprints still stand on the tracked rails, at the drawn offset from
    the true centre line in every frame (measured with the scene's true camera)."""
    from synrail.rail.motion import RailPair
    from synrail.rail.sequence import RailFollower
    from synrail.sources.video import VideoRef
    from synrail.stages.compose import gallery_by_class
    from synrail.stages.real_clips import ClipSource, WindowFrame, compose_real_clip

    images, truth = approach_frames(0, 5, SPEED_KMH, FPS)
    wrong = truth.model_copy(update={"track_curvature": truth.track_curvature + 0.001})
    follower, window = RailFollower(), []
    for k, image in enumerate(images):
        found = follower.detect(image, hfov_deg=60).detection
        rails = RailPair.of(found.left_fit, found.right_fit, (found.top_row, found.bottom_row or truth.height - 1))
        window.append(WindowFrame(frame_index=k, time_s=k / FPS, image=image, geometry=wrong, rails=rails,
                                  measured_step_m=None))
    source = ClipSource(video=VideoRef(url="x", name="x.mp4", size=0, version=""), fps=FPS, speed_kmh=SPEED_KMH,
                        speed_source="sidecar", condition="normal", track_type="ballasted")
    cfg = footage_config(footage[1], None)
    gallery = read_build_records(Store(str(built[0]))).gallery
    cutouts = gallery_by_class(Store(str(Path(built[0]) / ".synrail" / "cache")), gallery)
    out = Store(str(tmp_path / "out"))
    rows = [r for clip in range(3) for r in read_rows(out, compose_real_clip(
        cfg, clip, "train", source, window, cutouts, out).annotations_path, ClipAnnotationRow)]
    assert len(rows) >= 8
    worst_shift = 0.0
    for r in rows:
        x, z = truth.ground_point(np.array([r.ground_u_px]), np.array([r.ground_v_px]))
        true_lateral = float(x[0] - truth.track_centre_x(z[0]))
        drawn = r.world_x_m - float(wrong.track_centre_x(r.world_z_m))
        assert abs(true_lateral - drawn) < 0.03, (r.clip_id, r.track_id, r.frame_in_clip, true_lateral, drawn)
        worst_shift = max(worst_shift, abs(float(wrong.track_centre_x(z[0]) - truth.track_centre_x(z[0]))))
    assert worst_shift > 0.1  # the geometry alone would have put them this far off the rails

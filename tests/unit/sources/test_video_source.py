"""The video background source: listing, sidecar metadata, frame sampling, frame filters, the stage,
bad videos as quarantine rows, a memory:// store, and the obstacle detector path."""

from __future__ import annotations

import uuid
from pathlib import Path

import cv2
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from synrail.sources.frame_filters import (
    NO_DETECTOR_NOTE,
    Detection,
    FilterConfig,
    UltralyticsDetector,
    blur_score,
    detector_from_config,
    exposure_stats,
    filter_frames,
    hamming,
    measure_frame,
    phash,
)
from synrail.sources.image_safety import declared_size
from synrail.sources.video import SampledFrame, VideoError, list_videos, read_sidecar, sample_frames
from synrail.sources.video_backgrounds import VideoSourceConfig, extract_video_backgrounds
from synrail.storage.store import Store

W, H, FPS = 160, 96, 10.0


def textured_frame(shift: int, seed: int = 0) -> np.ndarray:
    """A blocky random texture scrolled by ``shift`` pixels: sharp, mid-grey, and changing with shift."""
    blocks = (np.random.default_rng(seed).random((12, 60)) * 200 + 28).astype(np.uint8)
    texture = cv2.resize(blocks, (480, H), interpolation=cv2.INTER_NEAREST)
    return cv2.cvtColor(np.roll(texture, -shift, axis=1)[:, :W], cv2.COLOR_GRAY2BGR)


def write_video(path: Path, frames: list[np.ndarray], codec: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*codec), FPS, (W, H))
    assert writer.isOpened(), path
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def moving(n: int = 30) -> list[np.ndarray]:
    return [textured_frame(8 * i) for i in range(n)]


def mixed() -> list[np.ndarray]:
    """10 sharp, 10 blurred, 10 black, 10 white frames."""
    sharp = moving(10)
    blurred = [cv2.GaussianBlur(textured_frame(8 * i, seed=1), (0, 0), 6) for i in range(10)]
    return sharp + blurred + [np.zeros((H, W, 3), np.uint8)] * 10 + [np.full((H, W, 3), 255, np.uint8)] * 10


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("videos")
    write_video(root / "moving.mp4", moving(), "mp4v")
    write_video(root / "line2" / "Moving.AVI", moving(), "MJPG")
    write_video(root / "static.mp4", [textured_frame(0)] * 30, "mp4v")
    write_video(root / "mixed.avi", mixed(), "MJPG")
    write_video(root / "noframes.avi", [], "MJPG")
    (root / "random.mp4").write_bytes(np.random.default_rng(3).bytes(5000))
    for name in ("moving.mp4", "mixed.avi"):
        data = (root / name).read_bytes()
        (root / f"truncated_{name}").write_bytes(data[: int(len(data) * 0.4)])
    (root / "empty.mkv").write_bytes(b"")
    (root / "notes.txt").write_text("not a video")
    (root / "._moving.mp4").write_bytes(b"macOS resource fork")
    return root


def ref(root: Path, name: str):
    return next(v for v in list_videos(str(root)) if v.name == name)


def test_a_linked_video_is_listed_with_its_targets_size(videos, tmp_path):
    (tmp_path / "cab.mp4").symlink_to(videos / "moving.mp4")
    (tmp_path / "line2").symlink_to(videos / "line2", target_is_directory=True)
    refs = list_videos(str(tmp_path))
    assert [v.name for v in refs] == ["cab.mp4", "line2/Moving.AVI"]
    assert refs[0].size == (videos / "moving.mp4").stat().st_size


def decided(root: Path, name: str, cfg: FilterConfig = FilterConfig(), detector=None, **sampling):
    return list(filter_frames(sample_frames(ref(root, name), **sampling), cfg, detector))


# -- listing -------------------------------------------------------------------------------------
def test_listing_is_recursive_sorted_and_filtered_by_extension(videos):
    refs = list_videos(str(videos))
    assert [v.name for v in refs] == [
        "empty.mkv", "line2/Moving.AVI", "mixed.avi", "moving.mp4", "noframes.avi", "random.mp4", "static.mp4",
        "truncated_mixed.avi", "truncated_moving.mp4"]
    moving_ref = refs[3]
    assert moving_ref.url == f"file://{videos / 'moving.mp4'}"
    assert moving_ref.size == (videos / "moving.mp4").stat().st_size
    assert moving_ref.version.startswith(f"{moving_ref.size}-")


def test_a_folder_with_a_space_in_its_name(tmp_path):
    write_video(tmp_path / "cab videos" / "run 1.mp4", moving(10), "mp4v")
    (video,) = list_videos(str(tmp_path / "cab videos"))
    assert video.name == "run 1.mp4" and len(list(sample_frames(video, fps=1.0))) == 1


def test_a_reuploaded_video_is_a_new_version(tmp_path):
    write_video(tmp_path / "a.mp4", moving(10), "mp4v")
    before = list_videos(str(tmp_path))[0]
    write_video(tmp_path / "a.mp4", moving(20), "mp4v")
    assert list_videos(str(tmp_path))[0].version != before.version


def test_listing_a_missing_root_fails_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        list_videos(str(tmp_path / "nowhere"))


# -- sampling ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["moving.mp4", "line2/Moving.AVI"])
def test_fps_sampling_picks_frames_at_the_requested_rate(videos, name):
    frames = list(sample_frames(ref(videos, name), fps=1.0))
    assert [f.frame_index for f in frames] == [0, 10, 20]
    assert [f.time_s for f in frames] == pytest.approx([0.0, 1.0, 2.0])
    assert frames[0].image.shape == (H, W, 3)
    stream = sample_frames(ref(videos, name), fps=4.0)
    assert [f.frame_index for f in stream] == [0, 3, 5, 8, 10, 13, 15, 18, 20, 23, 25, 28]
    assert stream.frames_expected == stream.frames_decoded == 12 and not stream.truncated


def test_stride_max_frames_and_a_rate_above_the_native_one(videos):
    video = ref(videos, "moving.mp4")
    assert [f.frame_index for f in sample_frames(video, stride=7)] == [0, 7, 14, 21, 28]
    capped = sample_frames(video, stride=1, max_frames=4)
    assert [f.frame_index for f in capped] == [0, 1, 2, 3] and not capped.truncated
    assert len(list(sample_frames(video, fps=100.0))) == 30
    for bad in ({}, {"fps": 1.0, "stride": 2}, {"fps": 0.0}, {"stride": 0}):
        with pytest.raises(ValueError):
            sample_frames(video, **bad)


@pytest.mark.parametrize("name, reason", [
    ("random.mp4", "OpenCV cannot open"),
    ("truncated_moving.mp4", "OpenCV cannot open"),  # an mp4's index (moov) is at its end
    ("empty.mkv", "empty file"),
    ("noframes.avi", "zero frames"),
])
def test_unusable_videos_raise_video_error_naming_url_and_reason(videos, name, reason):
    video = ref(videos, name)
    with pytest.raises(VideoError, match=reason) as caught:
        next(sample_frames(video, fps=1.0))
    assert isinstance(caught.value, ValueError) and video.url in str(caught.value)


def test_a_truncated_video_yields_the_frames_it_has(videos):
    stream = sample_frames(ref(videos, "truncated_mixed.avi"), stride=1)
    frames = list(stream)
    assert 0 < len(frames) < 40
    assert stream.frames_expected == 40 and stream.frames_decoded == len(frames) and stream.truncated


# -- filters -------------------------------------------------------------------------------------
def test_image_measures():
    sharp, black = textured_frame(0), np.zeros((H, W, 3), np.uint8)
    assert blur_score(sharp) < FilterConfig().max_blur < blur_score(cv2.GaussianBlur(sharp, (0, 0), 6))
    assert exposure_stats(black) == (0.0, 1.0, 0.0)
    assert exposure_stats(np.full((H, W, 3), 255, np.uint8)) == (255.0, 0.0, 1.0)
    assert phash(sharp) < 2 ** 64 and hamming(phash(sharp), phash(sharp)) == 0
    assert hamming(phash(sharp), phash(textured_frame(40))) > FilterConfig().duplicate_hamming
    assert hamming(phash(sharp), phash(cv2.GaussianBlur(sharp, (3, 3), 0.5))) <= FilterConfig().duplicate_hamming


def test_every_rejection_has_its_reason(videos):
    decisions = decided(videos, "mixed.avi", stride=5)
    assert [(d.frame.frame_index, d.reason) for d in decisions] == [
        (0, None), (5, None), (10, "blurred"), (15, "blurred"), (20, "underexposed"), (25, "underexposed"),
        (30, "overexposed"), (35, "overexposed")]
    assert all(d.accepted == (d.reason is None) for d in decisions)


def test_a_sharp_frame_outside_the_exposure_limits_is_kept_for_the_track_search_to_settle():
    night = (textured_frame(0) // 20).astype(np.uint8)  # crushed black, its texture still sharp
    images = [night, np.full_like(night, 4)]  # ... and a black frame: nothing sharp in it
    frames = [SampledFrame(frame_index=k, time_s=float(k), image=image) for k, image in enumerate(images)]
    kept, black = filter_frames(frames, FilterConfig(), None)
    assert kept.accepted and kept.reason is None and kept.exposure == "underexposed"
    assert not black.accepted and black.reason == "underexposed" and black.exposure is None
    refused, _ = filter_frames(frames, FilterConfig(refuse_exposure_first=True), None)
    assert refused.reason == "underexposed" and refused.exposure is None
    snowfield = (255 - textured_frame(0) // 20).astype(np.uint8)  # clipped white, its texture still sharp
    (bright,) = filter_frames([SampledFrame(frame_index=0, time_s=0.0, image=snowfield)], FilterConfig(), None)
    assert bright.accepted and bright.exposure == "overexposed"


def test_near_duplicates_collapse_to_one_frame(videos):
    decisions = decided(videos, "static.mp4", fps=2.0)
    assert [d.reason for d in decisions] == [None] + ["near-duplicate"] * 5
    assert [d.reason for d in decided(videos, "moving.mp4", fps=2.0)] == [None] * 6


class FakeDetector:
    def __init__(self, box: tuple[float, float, float, float]) -> None:
        self.box = box

    def detect(self, image: np.ndarray) -> list[Detection]:
        return [Detection("person", 0.9, self.box)]


def test_an_obstacle_standing_on_the_track_rejects_the_frame(videos):
    on_track = decided(videos, "moving.mp4", detector=FakeDetector((70, 50, 90, 90)), fps=1.0)
    assert [d.reason for d in on_track] == ["obstacle-on-track"] * 3
    off_track = decided(videos, "moving.mp4", detector=FakeDetector((0, 0, 20, 20)), fps=1.0)
    assert [d.reason for d in off_track] == [None] * 3


def test_the_blur_verdict_does_not_depend_on_the_resolution_or_the_sky():
    rng = np.random.default_rng(0)
    sharp = np.full((1080, 1920, 3), 90, np.uint8)
    for _ in range(400):  # edges of every orientation and contrast, as in a cab view's ground half
        x, y = rng.integers(0, 1920), rng.integers(0, 1080)
        cv2.line(sharp, (int(x), int(y)), (int(x + rng.integers(-300, 300)), int(y + rng.integers(-300, 300))),
                 tuple(int(v) for v in rng.integers(0, 255, 3)), int(rng.integers(1, 12)), cv2.LINE_AA)
    sharp = cv2.GaussianBlur(sharp, (0, 0), 1.0)  # a sharp HD frame's own softness
    blurred = cv2.GaussianBlur(sharp, (0, 0), 9.0)
    limit = FilterConfig().max_blur
    for frame, is_blurred in ((sharp, False), (blurred, True)):
        for width in (1920, 640):
            small = cv2.resize(frame, (width, width * 9 // 16), interpolation=cv2.INTER_AREA)
            assert (blur_score(small) > limit) == is_blurred, (width, blur_score(small))
    at_640 = blur_score(cv2.resize(sharp, (640, 360), interpolation=cv2.INTER_AREA))
    for width in (480, 320, 200):  # a smaller copy is no blurrier: it is measured as it is, not enlarged
        small = cv2.resize(sharp, (width, width * 9 // 16), interpolation=cv2.INTER_AREA)
        assert blur_score(small) <= at_640 + 0.01, (width, blur_score(small), at_640)
    with_sky = sharp.copy()
    with_sky[:700] = (200, 180, 160)  # two thirds flat sky: the verdict stays "sharp"
    assert blur_score(with_sky) < limit


def test_the_blur_measure_is_scikit_image_s_blur_effect():
    from skimage.measure import blur_effect

    rng = np.random.default_rng(2)
    scenes = [textured_frame(7), cv2.GaussianBlur(textured_frame(7), (0, 0), 3),
              rng.integers(0, 256, (90, 130, 3), dtype=np.uint8), np.full((40, 50, 3), 77, np.uint8)]
    for scene in scenes:
        grey = cv2.cvtColor(scene, cv2.COLOR_BGR2GRAY)
        assert blur_score(scene) == pytest.approx(blur_effect(grey, h_size=11), abs=1e-6)


def test_exposure_is_judged_on_the_ground_half():
    tunnel = np.zeros((H, W, 3), np.uint8)
    tunnel[H // 2:] = 60  # a dark tunnel mouth over a lit track
    assert exposure_stats(tunnel) == (60.0, 0.0, 0.0)


def test_a_frame_s_measures_are_the_filters_own():
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    measures = measure_frame(frame)
    assert (measures.mean_luma, measures.dark, measures.bright) == exposure_stats(frame)
    assert measures.blur == blur_score(frame) and measures.phash == phash(frame)


def test_filter_config_is_strict():
    with pytest.raises(ValueError):
        FilterConfig(min_blurr=3)
    with pytest.raises(ValueError, match="replaced by max_blur"):
        FilterConfig(min_blur=60)
    with pytest.raises(ValueError, match="at least 3 points"):
        FilterConfig(track_region=((0, 0), (1, 1)))


# -- the stage -----------------------------------------------------------------------------------
def test_extraction_writes_accepted_frames_and_records_rejections(videos, tmp_path):
    cache = Store(str(tmp_path / "cache"))
    result = extract_video_backgrounds(ref(videos, "mixed.avi"), VideoSourceConfig(stride=5), cache)
    assert result.quarantine is None and not result.truncated
    assert [f.frame_index for f in result.frames] == [0, 5]
    assert [(r.frame_index, r.reason) for r in result.rejected] == [
        (10, "blurred"), (15, "blurred"), (20, "underexposed"), (25, "underexposed"),
        (30, "overexposed"), (35, "overexposed")]
    assert NO_DETECTOR_NOTE in result.notes
    first = result.frames[0]
    assert first.path.startswith("frames/mixed-avi-") and first.path.endswith("/000000.png")
    image = cv2.imdecode(np.frombuffer(cache.read_bytes(first.path), np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (H, W, 3) and (first.width, first.height) == (W, H)
    assert len(first.phash) == 16 and len(first.sha256) == 64
    assert type(result).model_validate_json(result.model_dump_json()) == result


def test_extraction_with_a_detector_rejects_frames_with_an_obstacle(videos, tmp_path):
    result = extract_video_backgrounds(ref(videos, "moving.mp4"), VideoSourceConfig(), Store(str(tmp_path)),
                                       detector=FakeDetector((70, 50, 90, 95)))
    assert result.frames == [] and {r.reason for r in result.rejected} == {"obstacle-on-track"}
    assert NO_DETECTOR_NOTE not in result.notes


@pytest.mark.parametrize("name, reason", [
    ("random.mp4", "OpenCV cannot open"), ("truncated_moving.mp4", "OpenCV cannot open"),
    ("empty.mkv", "empty file"), ("noframes.avi", "zero frames")])
def test_bad_videos_become_quarantine_rows(videos, tmp_path, name, reason):
    video = ref(videos, name)
    result = extract_video_backgrounds(video, VideoSourceConfig(), Store(str(tmp_path)))
    assert result.quarantine is not None and result.quarantine.url == video.url
    assert reason in result.quarantine.reason
    assert result.frames == [] and result.rejected == []
    assert not (tmp_path / "frames").exists()


def test_a_truncated_video_is_kept_with_a_note(videos, tmp_path):
    result = extract_video_backgrounds(ref(videos, "truncated_mixed.avi"),
                                       VideoSourceConfig(stride=1, max_frames_per_video=None), Store(str(tmp_path)))
    assert result.quarantine is None and result.truncated and result.frames
    assert result.frames_decoded < result.frames_expected == 40
    assert any(note.startswith("truncated") for note in result.notes)


def test_sidecar_metadata_lands_on_the_extraction(videos, tmp_path):
    sidecar = tmp_path / "videos.csv"
    sidecar.write_text("video,country,weather,track_type,time_of_day\n"
                       "moving.mp4,DE,rain,ballastless,night\nstatic.mp4,FR,,ballasted,\n")
    cfg = VideoSourceConfig(sidecar=str(sidecar))
    result = extract_video_backgrounds(ref(videos, "moving.mp4"), cfg, Store(str(tmp_path / "cache")))
    assert result.metadata == {"country": "DE", "weather": "rain", "track_type": "ballastless",
                               "time_of_day": "night"}
    assert read_sidecar(str(sidecar))["static.mp4"] == {"country": "FR", "track_type": "ballasted"}
    unlisted = extract_video_backgrounds(ref(videos, "mixed.avi"), cfg, Store(str(tmp_path / "cache")))
    assert unlisted.metadata == {} and any("no row" in note for note in unlisted.notes)


def test_parquet_sidecar_and_bad_sidecars(tmp_path):
    parquet = tmp_path / "meta.parquet"
    pq.write_table(pa.table({"video": ["a.mp4"], "country": ["CH"]}), parquet)
    assert read_sidecar(str(parquet)) == {"a.mp4": {"country": "CH"}}
    bad_value = tmp_path / "bad_value.csv"
    bad_value.write_text("video,track_type\na.mp4,gravel\n")
    with pytest.raises(ValueError, match=r"bad_value\.csv.*track_type 'gravel'"):
        read_sidecar(str(bad_value))
    bad_column = tmp_path / "bad_column.csv"
    bad_column.write_text("video,speed\na.mp4,80\n")
    with pytest.raises(ValueError, match=r"bad_column\.csv.*\['speed'\]"):
        read_sidecar(str(bad_column))
    speed = tmp_path / "speed.csv"
    speed.write_text("video,speed_kmh\na.mp4,72.5\nb.mp4,fast\n")
    with pytest.raises(ValueError, match=r"speed\.csv, row 2 \(b\.mp4\): speed_kmh 'fast' is not a positive number"):
        read_sidecar(str(speed))
    speed.write_text("video,speed_kmh\na.mp4,72.5\n")
    assert read_sidecar(str(speed)) == {"a.mp4": {"speed_kmh": "72.5"}}
    no_video = tmp_path / "no_video.csv"
    no_video.write_text("file,country\na.mp4,DE\n")
    with pytest.raises(ValueError, match=r"no_video\.csv.*missing column 'video'"):
        read_sidecar(str(no_video))
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("video,country\na.mp4,DE,extra\n")
    with pytest.raises(ValueError, match=r"ragged\.csv, row 1: more cells"):
        read_sidecar(str(ragged))
    with pytest.raises(ValueError, match=r"missing\.csv: file not found"):
        read_sidecar(str(tmp_path / "missing.csv"))


def test_video_source_config():
    assert (VideoSourceConfig().fps, VideoSourceConfig(stride=3).fps) == (1.0, None)
    with pytest.raises(ValueError, match="exactly one"):
        VideoSourceConfig(fps=2.0, stride=3)
    with pytest.raises(ValueError):
        VideoSourceConfig(frames=3)


# -- remote store --------------------------------------------------------------------------------
def test_memory_store_listing_and_sampling_use_a_temporary_copy(videos, tmp_path, monkeypatch):
    import tempfile

    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_dir))
    root = f"memory://videos-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    try:
        fs.pipe_file(f"{root}/cab/moving.mp4", (videos / "moving.mp4").read_bytes())
        fs.pipe_file(f"{root}/cab/readme.txt", b"ignored")
        (video,) = list_videos(root)
        assert (video.url, video.name) == (f"{root}/cab/moving.mp4", "cab/moving.mp4")
        assert [f.frame_index for f in sample_frames(video, fps=1.0)] == [0, 10, 20]
        assert list(temp_dir.iterdir()) == []
        result = extract_video_backgrounds(video, VideoSourceConfig(), Store(f"{root}-cache"))
        assert len(result.frames) == 3 and Store(f"{root}-cache").exists(result.frames[0].path)
        fs.pipe_file(f"{root}/cab/zz-broken.mp4", (videos / "random.mp4").read_bytes())
        broken = list_videos(root)[-1]
        quarantined = extract_video_backgrounds(broken, VideoSourceConfig(), Store(f"{root}-cache"))
        assert "OpenCV cannot open" in quarantined.quarantine.reason
        assert list(temp_dir.iterdir()) == []
    finally:
        for path in (root, f"{root}-cache"):
            if fs.exists(path):
                fs.rm(path, recursive=True)


# -- a real detector -----------------------------------------------------------------------------
def test_ultralytics_detector_loads_a_local_weights_file_and_detects(tmp_path):
    from synrail.train.detector import offline_ultralytics

    model = offline_ultralytics().YOLO("yolov8n.yaml")  # from the architecture file: random weights
    model.model.names = {i: "person" if i == 0 else f"class{i}" for i in range(80)}
    weights = tmp_path / "tiny.pt"
    model.save(str(weights))
    # A tiny confidence makes the untrained model report boxes, so the conversion path runs too.
    detector = UltralyticsDetector(weights, conf=1e-6)
    detections = detector.detect(textured_frame(0))
    assert detections and all(d.class_name == "person" and len(d.box) == 4 for d in detections)
    # Ultralytics replaces Pillow's Image.open process-wide with one that would pip-install pi-heif on
    # an unknown image; with Pillow's put back, a corrupt file is still just not a decodable image.
    assert declared_size(b"\xff\xd8 not really a jpeg") == "not a decodable image"
    assert detector.identity.startswith("ultralytics/")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        UltralyticsDetector("yolov8n.pt")
    with pytest.raises(ValueError, match="none of the classes"):
        UltralyticsDetector(weights, classes_to_reject=("rail-obstacle",))
    cfg = FilterConfig(detector_weights=str(weights), detector_classes=("class3",), detector_conf=1e-6)
    assert detector_from_config(cfg) is detector_from_config(cfg)  # loaded once per process
    assert detector_from_config(FilterConfig()) is None

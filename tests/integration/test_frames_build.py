"""Folders of frames as backgrounds: each subfolder one camera sequence, a root-level image its own."""

from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest
from media import cab_frames, write_frame_sequences

from synrail.config import load_config
from synrail.sources.video import list_sequences, sample_frames
from synrail.stages.local import build_in_process
from synrail.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]


def write_frame_folder(root: Path) -> Path:
    """Three sequences of 3 frames (one with an undecodable image), one root-level still, one non-image."""
    for k in range(3):
        folder = root / f"run{k}"
        folder.mkdir(parents=True)
        for i, frame in enumerate(cab_frames(10 + k, 3)):
            cv2.imwrite(str(folder / f"f{i:03d}.{'jpg' if k else 'png'}"), frame)
    (root / "run1" / "f001b.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    cv2.imwrite(str(root / "still.jpg"), cab_frames(20, 1)[0])
    (root / "notes.txt").write_text("not an image")
    return root


def test_sequences_are_subfolders_sorted_by_name_and_root_images_stand_alone(tmp_path):
    sequences = list_sequences(str(write_frame_folder(tmp_path / "frames")))
    assert [s.name for s in sequences] == ["run0", "run1", "run2", "still.jpg"]
    assert sequences[1].members == ("f000.jpg", "f001.jpg", "f001b.jpg", "f002.jpg")
    assert sequences[3].members == ("still.jpg",) and sequences[3].frame_url(0).endswith("/frames/still.jpg")
    assert sequences[0].frame_url(2).endswith("/frames/run0/f002.png")


def test_frames_numbered_without_leading_zeros_are_in_number_order(tmp_path):
    """ffmpeg's ``%d`` pattern writes 1.png, 2.png, ... 10.png: name order would put 10 before 2."""
    folder = tmp_path / "frames" / "run"
    folder.mkdir(parents=True)
    for number in (1, 2, 10, 9, 100):
        cv2.imwrite(str(folder / f"frame_{number}.png"), np.zeros((8, 8, 3), np.uint8))
    (sequence,) = list_sequences(str(tmp_path / "frames"))
    assert sequence.members == ("frame_1.png", "frame_2.png", "frame_9.png", "frame_10.png", "frame_100.png")


def test_linked_images_and_folders_are_footage_and_a_link_loop_is_walked_once(tmp_path):
    """fsspec types a symbolic link neither file nor folder: a dataset linked into a footage folder
    must still be found, a dangling link skipped, a folder linked into itself walked once."""
    data = write_frame_folder(tmp_path / "data")
    root = tmp_path / "frames"
    root.mkdir()
    (root / "still.jpg").symlink_to(data / "still.jpg")
    (root / "run1").symlink_to(data / "run1", target_is_directory=True)
    (root / "gone.jpg").symlink_to(tmp_path / "missing.jpg")
    (data / "run1" / "loop").symlink_to(data / "run1", target_is_directory=True)
    sequences = list_sequences(str(root))
    assert [s.name for s in sequences] == ["run1", "still.jpg"]
    assert sequences[0].members == ("f000.jpg", "f001.jpg", "f001b.jpg", "f002.jpg")
    assert sequences[1].size == (data / "still.jpg").stat().st_size
    assert [f.frame_index for f in sample_frames(sequences[1], stride=1)] == [0]


def test_a_sequence_samples_by_stride_and_lists_undecodable_images(tmp_path):
    run1 = list_sequences(str(write_frame_folder(tmp_path / "frames")))[1]
    stream = sample_frames(run1, stride=1)
    assert [f.frame_index for f in stream] == [0, 1, 3]
    assert stream.unreadable == [(2, "unreadable image: not a decodable image")]
    assert [f.frame_index for f in sample_frames(run1, stride=2)] == [0]  # position 2 is the bad one
    with pytest.raises(ValueError, match="no frame rate"):
        sample_frames(run1, fps=1.0)


def test_a_sequence_without_a_readable_image_is_quarantined_naming_the_image(tmp_path):
    """A root-level image is a sequence of its own: its quarantine row names the image, not the folder;
    a folder of broken images names its first one."""
    from synrail.sources.video_backgrounds import VideoSourceConfig, extract_video_backgrounds
    from synrail.storage.store import Store

    root = tmp_path / "frames"
    (root / "broken").mkdir(parents=True)
    (root / "broken.jpg").write_bytes(b"not an image")
    for name in ("a.jpg", "b.jpg"):
        (root / "broken" / name).write_bytes(b"\xff\xd8 not really a jpeg")
    folder, still = list_sequences(str(root))
    cache = Store(str(tmp_path / "cache"))
    quarantine = extract_video_backgrounds(still, VideoSourceConfig(stride=1), cache).quarantine
    assert quarantine.url == still.frame_url(0) and quarantine.url.endswith("/frames/broken.jpg")
    assert quarantine.reason == "unreadable image: not a decodable image"
    quarantine = extract_video_backgrounds(folder, VideoSourceConfig(stride=1), cache).quarantine
    assert quarantine.url == folder.url
    assert quarantine.reason == ("no readable image in the sequence (the first, a.jpg: unreadable image: "
                                 "not a decodable image)")


def test_fps_is_refused_for_image_folders():
    with pytest.raises(Exception, match="no frame rate"):
        load_config(ROOT / "configs" / "tiny.yaml", {"backgrounds.source": "frames", "backgrounds.frames.url": "x",
                                                    "backgrounds.frames.sampling.fps": 2.0})


def test_frame_folder_build_keeps_sequences_whole_and_names_every_source(tmp_path):
    folder = write_frame_folder(tmp_path / "frames")
    cfg = load_config(ROOT / "configs" / "tiny.yaml", {
        "num_images": 8, "backgrounds.source": "frames", "backgrounds.frames.url": str(folder),
        "backgrounds.frames.sampling.filters.duplicate_hamming": 0, "splits.train": 0.5, "splits.val": 0.25,
        "splits.test": 0.25})
    build_in_process(cfg, str(tmp_path / "out"))
    backgrounds = pd.read_parquet(tmp_path / "out/manifest/backgrounds.parquet")
    assert len(backgrounds) >= 4
    assert backgrounds.source.str.startswith("frames:").all()
    for url, index in zip(backgrounds.source_url, backgrounds.frame_index, strict=True):
        name = url.rsplit("/frames/", 1)[1]
        sequence = list_sequences(str(folder))[[s.name for s in list_sequences(str(folder))].index(
            name.split("/")[0])]
        assert sequence.members[index] == name.split("/")[-1]  # frame_index: the position in its sequence
    per_sequence = backgrounds.groupby(backgrounds.source.str.split(":").str[1]).split.nunique()
    assert (per_sequence == 1).all()  # a sequence never straddles splits
    unused = pd.read_parquet(tmp_path / "out/manifest/unused_frames.parquet")
    bad = unused[unused.source_url.str.endswith("run1/f001b.jpg")]
    assert list(bad.reason) == ["unreadable image: not a decodable image"] and list(bad.frame_index) == [2]
    assert "folders of cab frames" in (tmp_path / "out/dataset_card.md").read_text()


def test_too_few_sequences_for_the_splits_name_the_time_blocks_and_the_way_out(tmp_path):
    """Two short sequences for three splits are cut into time blocks; one that leaves a split empty
    says so and how to fix it, instead of asking for looser filters."""
    from synrail.stages.inputs import InputError

    folder = write_frame_sequences(tmp_path / "frames", 30, 2, 3)
    cfg = load_config(ROOT / "configs" / "tiny.yaml", {
        "num_images": 4, "backgrounds.source": "frames", "backgrounds.frames.url": str(folder),
        "backgrounds.frames.sampling.filters.duplicate_hamming": 0})
    with pytest.raises(InputError, match=r"fewer frame sequences than splits in use .* time blocks .* "
                                         r"set splits\.test to 0"):
        build_in_process(cfg, str(tmp_path / "out"))


def _darkened(frame: np.ndarray) -> np.ndarray:
    """The frame as at night or in a tunnel: most of its ground crushed black, the rails still lit."""
    return (255 * 0.35 * (frame / 255.0) ** 3).astype(np.uint8)


@pytest.mark.parametrize("refuse_first", [False, True])
def test_a_dark_frame_is_kept_where_its_track_is_found_and_left_out_as_underexposed_where_not(tmp_path, refuse_first):
    """The exposure limits refuse a frame only where the track search, which sees lit rails on a
    crushed-black ground, finds none there (``refuse_exposure_first`` refuses it outright)."""
    from synrail.sources.frame_filters import measure_frame
    from synrail.stages.videos import prepare_video_backgrounds

    folder = tmp_path / "frames"
    folder.mkdir()
    night = _darkened(cab_frames(30, 1)[0])
    blocks = (np.random.default_rng(0).random((36, 64)) * 160).astype(np.uint8)
    no_track = cv2.cvtColor(_darkened(cv2.resize(blocks, (night.shape[1], night.shape[0]),
                                                  interpolation=cv2.INTER_NEAREST)), cv2.COLOR_GRAY2BGR)
    for name, frame in (("night.png", night), ("dark_wall.png", no_track)):
        measures = measure_frame(frame)
        assert measures.dark > 0.6 and measures.blur < 0.5, name  # outside the limits, and sharp
        cv2.imwrite(str(folder / name), frame)
    cfg = load_config(ROOT / "configs" / "tiny.yaml", {
        "backgrounds.source": "frames", "backgrounds.frames.url": str(folder),
        "backgrounds.frames.sampling.filters.refuse_exposure_first": refuse_first})
    results = {s.name: prepare_video_backgrounds(cfg, s, "train", Store(str(tmp_path / "cache")))
               for s in list_sequences(str(folder))}
    assert [u.reason for u in results["dark_wall.png"].unused] == ["underexposed"]
    if refuse_first:
        assert [u.reason for u in results["night.png"].unused] == ["underexposed"]
        assert results["night.png"].records == []
    else:
        assert results["night.png"].unused == [] and len(results["night.png"].records) == 1


def test_the_finder_bounds_the_horizon_only_by_a_lens_the_settings_know():
    """An unset field of view leaves the finder every horizon a cab camera can have: the fallback
    is a guess for the camera matrix, not a bound on the pitch; a known lens is carried through
    the fit to the output size."""
    from synrail.rail.camera import CameraSettings, prepare_frame
    from synrail.stages.videos import finder_hfov

    cfg = load_config(ROOT / "configs" / "tiny.yaml")
    frame = np.zeros((6 * cfg.image.height, 6 * cfg.image.width, 3), np.uint8)  # the output's shape
    for settings, expected in ((CameraSettings(), None), (CameraSettings(hfov_deg=90.0), pytest.approx(90.0))):
        prepared = prepare_frame(frame, settings, cfg.image.width, cfg.image.height)
        assert finder_hfov(settings, frame.shape[1], prepared, cfg) == expected
    wide = np.zeros((6 * cfg.image.height, 9 * cfg.image.width, 3), np.uint8)  # cut at the sides to fit
    prepared = prepare_frame(wide, CameraSettings(hfov_deg=90.0), cfg.image.width, cfg.image.height)
    assert finder_hfov(CameraSettings(hfov_deg=90.0), wide.shape[1], prepared, cfg) < 80.0


def test_frames_the_output_s_aspect_ratio_cuts_hard_carry_a_note_saying_how_to_keep_them_whole(tmp_path):
    """A portrait phone frame fitted to a landscape output keeps a third of its rows, and most of
    the near track with them: the sequence says so (card notes), a landscape one does not."""
    from synrail.stages.videos import crop_note, prepare_video_backgrounds

    cfg = load_config(ROOT / "configs" / "tiny.yaml")  # a 320x192 output
    assert crop_note("run", 640, 384, cfg) is None and crop_note("run", 640, 360, cfg) is None
    note = crop_note("phone", 360, 640, cfg)
    assert note.startswith("frames of phone are 360x640") and "middle 34% of their rows" in note
    assert "middle 43% of their columns" in crop_note("pano", 1400, 360, cfg)
    folder = tmp_path / "frames"
    folder.mkdir()
    cv2.imwrite(str(folder / "phone.jpg"), cv2.rotate(cab_frames(30, 1)[0], cv2.ROTATE_90_CLOCKWISE))
    cv2.imwrite(str(folder / "cab.jpg"), cab_frames(31, 1)[0])
    cfg = load_config(ROOT / "configs" / "tiny.yaml", {"backgrounds.source": "frames",
                                                       "backgrounds.frames.url": str(folder)})
    notes = {s.name: prepare_video_backgrounds(cfg, s, "train", Store(str(tmp_path / "cache"))).notes
             for s in list_sequences(str(folder))}
    assert any(n.startswith("frames of phone.jpg are 360x640") for n in notes["phone.jpg"])
    assert not any(n.startswith("frames of") for n in notes["cab.jpg"])


@pytest.mark.parametrize("follow_back", [True, False])
def test_frames_before_the_first_found_one_of_a_shot_are_followed_back_from_it(tmp_path, monkeypatch, follow_back):
    """The first frames of a shot (a station, a tunnel the train leaves) have no earlier frame to
    learn from: once a later frame has found the track, the frames before it are followed from it."""
    from media import approach_frames

    import synrail.stages.videos as videos
    from synrail.rail.detect import NO_RAIL_PAIR, TrackResult
    from synrail.rail.sequence import RailFollower

    folder = tmp_path / "frames" / "departure"
    folder.mkdir(parents=True)
    frames, _ = approach_frames(5, 5, speed_kmh=60, fps=1)
    for i, frame in enumerate(frames):
        cv2.imwrite(str(folder / f"f{i:03d}.png"), frame)
    search, calls = RailFollower.detect, []

    def blind_on_the_first_two(self, image, **kwargs):  # as the full search on a hard start
        calls.append(image.shape)
        return TrackResult(None, NO_RAIL_PAIR) if len(calls) <= 2 else search(self, image, **kwargs)

    monkeypatch.setattr(RailFollower, "detect", blind_on_the_first_two)
    if not follow_back:
        monkeypatch.setattr(videos, "_follow_back", lambda cfg, found, missing, settings, cache: ([], missing))
    cfg = load_config(ROOT / "configs" / "tiny.yaml", {
        "backgrounds.source": "frames", "backgrounds.frames.url": str(tmp_path / "frames")})
    [sequence] = list_sequences(str(tmp_path / "frames"))
    result = videos.prepare_video_backgrounds(cfg, sequence, "train", Store(str(tmp_path / "cache")))
    kept = sorted(r.frame_index for r in result.records)
    if follow_back:
        assert kept == [0, 1, 2, 3, 4] and result.unused == []
    else:
        assert kept == [2, 3, 4]
        assert [(u.frame_index, u.reason) for u in result.unused] == [(0, f"no track: {NO_RAIL_PAIR}"),
                                                                      (1, f"no track: {NO_RAIL_PAIR}")]

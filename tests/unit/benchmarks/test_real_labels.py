"""The committed real-frame labels are well formed and name frames extract.py knows how to rebuild;
extract.py rebuilds stills and video frames from a bare git snapshot."""

import json
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from benchmarks.real import extract

LABELS = Path(extract.__file__).with_name("labels.json")


def test_every_label_names_a_known_source_and_holds_two_rails_or_null():
    labels = json.loads(LABELS.read_text())
    assert len(labels) >= 60
    for name, label in labels.items():
        prefix, stem = Path(name).stem.split("_", 1)
        assert prefix in extract.SOURCES, name
        if extract.SOURCES[prefix][2].endswith(".mp4"):
            assert extract.VIDEO_FRAME.match(stem), name
        if label is None:
            continue
        assert set(label) == {"left", "right"}, name
        for side in ("left", "right"):
            points = np.asarray(label[side], dtype=np.float64)
            assert points.ndim == 2 and points.shape[1] == 2 and len(points) >= 2, (name, side)
            assert np.all(points >= 0), (name, side)
        # the left rail lies left of the right one where both are labelled
        rows = np.linspace(max(min(p[1] for p in label[s]) for s in ("left", "right")),
                           min(max(p[1] for p in label[s]) for s in ("left", "right")), 5)
        columns = {s: np.interp(rows, *zip(*sorted((p[1], p[0]) for p in label[s]), strict=True))
                   for s in ("left", "right")}
        assert np.all(columns["left"] < columns["right"]), name


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _snapshot(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, str]:
    """A bare repository holding ``files`` in one commit, laid out like the fetch tool's mirror."""
    work = tmp_path / "work"
    for path, data in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(data)
    _git("init", "-q", cwd=work)
    _git("add", ".", cwd=work)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "frames", cwd=work)
    mirror = tmp_path / "mirror"
    _git("clone", "-q", "--bare", str(work), str(mirror / "owner+frames" / "repo"), cwd=tmp_path)
    return mirror, _git("rev-parse", "HEAD", cwd=work)


def _video(path: Path, frames: list[np.ndarray]) -> bytes:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, frames[0].shape[1::-1])
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path.read_bytes()


def test_extract_writes_stills_and_the_named_video_frames(tmp_path, monkeypatch):
    still = cv2.imencode(".jpg", np.full((32, 48, 3), 90, np.uint8))[1].tobytes()
    frames = [np.full((64, 64, 3), 40 * i, np.uint8) for i in range(5)]
    mirror, commit = _snapshot(tmp_path, {"stills/frame_7.jpg": still,
                                          "clip.mp4": _video(tmp_path / "clip.mp4", frames)})
    monkeypatch.setattr(extract, "SOURCES", {"rtd": ("owner/frames", commit, "stills/{name}.jpg"),
                                             "eu": ("owner/frames", commit, "clip.mp4")})
    labels = {"rtd_frame_7.jpg": None, "eu_f000003.jpg": {"left": [[1, 60], [20, 10]],
                                                          "right": [[60, 60], [40, 10]]}}
    out = tmp_path / "bench"
    extract.extract(mirror, out, labels)
    assert (out / "rtd_frame_7.jpg").read_bytes() == still
    fourth = cv2.imread(str(out / "eu_f000003.jpg"))
    assert abs(float(fourth.mean()) - 120) < 6  # the fourth frame (0-based 3), not another one
    assert json.loads((out / "labels.json").read_text()) == labels
    assert sorted(p.name for p in out.iterdir()) == ["eu_f000003.jpg", "labels.json", "rtd_frame_7.jpg"]


def test_extract_refuses_a_frame_past_the_video_end(tmp_path, monkeypatch):
    frames = [np.zeros((64, 64, 3), np.uint8)] * 2
    mirror, commit = _snapshot(tmp_path, {"clip.mp4": _video(tmp_path / "clip.mp4", frames)})
    monkeypatch.setattr(extract, "SOURCES", {"eu": ("owner/frames", commit, "clip.mp4")})
    with pytest.raises(SystemExit, match="past its end"):
        extract.extract(mirror, tmp_path / "bench", {"eu_f000009.jpg": None})


def test_extract_takes_the_first_panel_of_the_first_folder_the_snapshot_holds(tmp_path, monkeypatch):
    frame = np.random.default_rng(0).integers(0, 255, (24, 40, 3), dtype=np.uint8)
    others = [np.full((24, 40, 3), 200, np.uint8)] * 3
    quad = cv2.imencode(".png", np.hstack([frame, *others]))[1].tobytes()
    decoy = cv2.imencode(".png", np.zeros((24, 160, 3), np.uint8))[1].tobytes()
    mirror, commit = _snapshot(tmp_path, {"outputs/b_good/rs00042.png": quad,
                                          "outputs/c_more/rs00042.png": decoy,
                                          "outputs/b_good/rs00043.png": decoy})
    monkeypatch.setattr(extract, "SOURCES", {"rs19seg": ("owner/frames", commit, "outputs/*/{name}.png")})
    out = tmp_path / "bench"
    extract.extract(mirror, out, {"rs19seg_rs00042.png": None})
    assert np.array_equal(cv2.imread(str(out / "rs19seg_rs00042.png")), frame)  # lossless, first panel only
    with pytest.raises(SystemExit, match="no file"):
        extract.extract(mirror, out, {"rs19seg_rs00099.png": None})

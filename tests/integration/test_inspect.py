"""``synrail inspect``: the preflight report on the tiny config, a frames folder and a video folder."""

import base64
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from media import cab_frames, write_frame_sequences, write_video

from flows.cli import main
from synrail.export.figures import AREA_BGR

ROOT = Path(__file__).resolve().parents[2]
SYNRAIL = Path(sys.executable).parent / "synrail"
FIGURE = re.compile(r'<figure class="(frame|filtered|cutout) (ok|refused)"><img alt="[^"]*" '
                    r'src="data:image/(?:jpeg|png);base64,([^"]+)"><figcaption><b>([^<]*)</b>: ([^<]*)</figcaption>')


def figures(page: str, kind: str) -> list[tuple[str, str, str, str]]:
    """(state, base64 image, title, note) of each figure of one kind."""
    return [(state, data, title, note) for k, state, data, title, note in FIGURE.findall(page) if k == kind]


def decode(data: str) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(base64.b64decode(data), np.uint8), cv2.IMREAD_COLOR)


def area_pixels(image: np.ndarray) -> int:
    """Pixels of the track area's outline colour."""
    return int((np.abs(image.astype(int) - AREA_BGR).max(axis=2) < 40).sum())


def frames_config(tmp_path: Path, folder: Path, source: str = "frames") -> Path:
    """The tiny config with its backgrounds from ``folder`` (a frames folder, or videos sampled at 2 fps)."""
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    sampling = {"filters": {"duplicate_hamming": 0}} | ({"fps": 2.0} if source == "video" else {})
    config["backgrounds"] = {"source": source, source: {"url": str(folder), "sampling": sampling}}
    path = tmp_path / "footage.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_tiny_config_report_is_one_page_with_a_track_on_every_background(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["inspect", "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out),
                 "--frames-per-video", "4", "--gallery-sample", "5"]) == 0
    assert [p.name for p in out.rglob("*")] == ["index.html"]  # nothing else written
    page = (out / "index.html").read_text()
    frames = figures(page, "frame")
    assert len(frames) == 4 and all(state == "ok" and "exact track area" in note for state, _, _, note in frames)
    assert all(area_pixels(decode(data)) > 50 for _, data, _, _ in frames)
    assert '<section id="gallery">' in page and len(figures(page, "cutout")) == 5
    assert "src=\"http" not in page and "<link" not in page  # self-contained
    printed = capsys.readouterr().out
    assert "estimated build time: about" in printed and "an estimate" in printed
    assert "composites 24 x" in printed  # scaled by num_images


def test_frames_folder_every_sampled_frame_shows_its_track_or_why_not(tmp_path, capsys):
    folder = write_frame_sequences(tmp_path / "frames", 30, 2, 4)
    cv2.imwrite(str(folder / "run1" / "f009.jpg"), np.zeros((360, 640, 3), np.uint8))  # refused: underexposed
    cv2.imwrite(str(folder / "run1" / "f010.jpg"), cv2.GaussianBlur(cab_frames(31, 1)[0], (0, 0), 6))  # blurred
    out = tmp_path / "report"
    assert main(["inspect", "--config", str(frames_config(tmp_path, folder)), "--out", str(out),
                 "--frames-per-video", "3"]) == 0
    assert [p.name for p in out.rglob("*")] == ["index.html"]
    page = (out / "index.html").read_text()
    frames = figures(page, "frame")
    assert len(frames) == 6  # 3 of each sequence's kept frames
    for state, data, title, note in frames:
        assert title.startswith("frame ")
        if state == "ok":
            assert note.startswith("track found") and area_pixels(decode(data)) > 50
        else:
            assert note  # the reason, also written on the frame
    assert sum(state == "ok" for state, *_ in frames) >= 4  # procedural cab frames: the finder finds most
    filtered = figures(page, "filtered")
    assert sorted(note.split(": ")[-1] for _, _, _, note in filtered) == ["blurred", "underexposed"]
    assert page.count('<table class="camera">') == 2 and '<section id="gallery">' in page
    printed = capsys.readouterr().out
    assert "run1: by the frame filters (all 6 sampled frames): 1 x underexposed; 1 x blurred" in printed \
        or "run1: by the frame filters (all 6 sampled frames): 1 x blurred; 1 x underexposed" in printed
    assert "kept frames: track and camera 8 x" in printed  # 4 + 4 kept frames, timed on the sample of 6


def test_a_folder_of_loose_images_is_summed_up_and_shown_in_one_strip(tmp_path, capsys, monkeypatch):
    """RailSem19-style dumps are loose images, each a sequence of its own: more of them than the
    text lists one by one are summed up (reasons together), and the page shows them in one strip
    captioned with their names, without a one-frame camera table each."""
    from synrail import preflight

    monkeypatch.setattr(preflight, "LISTED_SEQUENCES", 3)
    folder = tmp_path / "frames"
    folder.mkdir()
    for k, frame in enumerate(cab_frames(40, 4)):
        cv2.imwrite(str(folder / f"still{k}.jpg"), frame)
    cv2.imwrite(str(folder / "still9.jpg"), np.zeros((360, 640, 3), np.uint8))  # refused: underexposed
    out = tmp_path / "report"
    assert main(["inspect", "--config", str(frames_config(tmp_path, folder)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "frames: 5 frame sequences (5 single images): 5 frames sampled, 4 kept" in printed
    assert "by the frame filters: 1 of 5 sampled frames: 1 x underexposed" in printed
    assert "still0.jpg" not in printed  # not listed one by one
    page = (out / "index.html").read_text()
    assert "single images: 5" in page and '<table class="camera">' not in page
    titles = [title for _, _, title, _ in figures(page, "frame") + figures(page, "filtered")]
    assert sorted(titles) == ["still0.jpg", "still1.jpg", "still2.jpg", "still3.jpg", "still9.jpg"]


def test_video_folder_shows_a_filtered_frame_read_back_from_the_video(tmp_path, capsys):
    folder = tmp_path / "videos"
    folder.mkdir()
    write_video(folder / "line.avi", [*cab_frames(40, 3), np.zeros((360, 640, 3), np.uint8)])
    (folder / "broken.mp4").write_bytes(b"\x00not a video" * 50)
    out = tmp_path / "report"
    assert main(["inspect", "--config", str(frames_config(tmp_path, folder, "video")), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert len(figures(page, "frame")) == 3
    [(state, data, title, note)] = figures(page, "filtered")
    assert title == "frame 3" and note.endswith("underexposed")
    assert decode(data).mean() < 60  # the black frame itself, darkened
    assert "Quarantined:" in page
    assert "video broken.mp4: quarantined" in capsys.readouterr().out


def test_a_bad_path_exits_2_with_one_line_in_seconds(tmp_path):
    started = time.perf_counter()
    result = subprocess.run([str(SYNRAIL), "inspect", "--config", str(ROOT / "configs" / "tiny.yaml"),
                             "--out", str(tmp_path / "report"), "--set", "backgrounds.source=frames",
                             "--set", f"backgrounds.frames.url={tmp_path / 'missing'}"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and "backgrounds.frames.url" in lines[0] and "missing" in lines[0], lines
    assert time.perf_counter() - started < 10
    assert not (tmp_path / "report").exists()


def test_an_output_that_is_a_file_exits_2(tmp_path, capsys):
    (tmp_path / "report").write_text("a file")
    assert main(["inspect", "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(tmp_path / "report")]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_renders_in_a_headless_browser(tmp_path):
    out = tmp_path / "report"
    assert main(["inspect", "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out),
                 "--frames-per-video", "3", "--gallery-sample", "4"]) == 0
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,1600", f"--screenshot={shot}", (out / "index.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    image = cv2.imread(str(shot))
    assert image is not None and image.shape[:2] == (1600, 1200)
    assert image.std() > 20  # not blank
    assert area_pixels(image) > 200  # the drawn track areas are on screen


def test_footage_the_output_s_aspect_ratio_cuts_hard_is_noted_with_the_way_out(tmp_path, capsys, monkeypatch):
    """A portrait phone frame fitted to a landscape output loses most of its track before the finder
    looks: the preflight says so beside the footage, listed one by one or summed up."""
    from synrail import preflight

    folder = tmp_path / "frames"
    folder.mkdir()
    cv2.imwrite(str(folder / "phone.jpg"), cv2.rotate(cab_frames(40, 1)[0], cv2.ROTATE_90_CLOCKWISE))
    cv2.imwrite(str(folder / "cab.jpg"), cab_frames(41, 1)[0])
    config = str(frames_config(tmp_path, folder))
    assert main(["inspect", "--config", config, "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "frames phone.jpg: 1 frames sampled, 1 kept\n    note: frames of phone.jpg are 360x640" in printed
    assert printed.count("note: frames of") == 1
    assert "frames of phone.jpg are 360x640" in (tmp_path / "report" / "index.html").read_text()
    monkeypatch.setattr(preflight, "LISTED_SEQUENCES", 1)
    assert main(["inspect", "--config", config, "--out", str(tmp_path / "report2")]) == 0
    assert "note: 1 of them lose much of each frame to the output's aspect ratio; frames of phone.jpg" \
        in capsys.readouterr().out

"""Camera columns of the video sidecar: read, laid over the config defaults, and refused with errors
that name the file, the row and the column."""

from __future__ import annotations

import pytest

from synrail.config import VideoBackgroundConfig
from synrail.rail.camera import CameraSettings, parse_regions
from synrail.sources.video import read_sidecar
from synrail.stages.videos import video_camera_settings

HEADER = "video,hfov_deg,gauge_mm,k1,k2,p1,p2,k3,camera_height_m,ignore_bottom,ignore_regions,sleeper_spacing_m\n"


def test_camera_columns_are_read_and_override_the_config(tmp_path) -> None:
    sidecar = tmp_path / "meta.csv"
    sidecar.write_text(HEADER + "cctv.mp4,110,1676,-0.3,0.09,0.001,0,0.01,3.9,0.1,0 0.9 0.4 1; 0.6 0 1 0.05,0.65\n"
                                "cab.mp4,,,,,,,,,,,\n")
    table = read_sidecar(str(sidecar))
    cfg = VideoBackgroundConfig(url="videos", gauge_mm=1520, hfov_deg=60)
    cctv = video_camera_settings(cfg, "cctv.mp4", table["cctv.mp4"])
    assert (cctv.hfov_deg, cctv.gauge_m, cctv.camera_height_m, cctv.ignore_bottom, cctv.sleeper_spacing_m) == (
        110.0, 1.676, 3.9, 0.1, 0.65)
    assert cctv.distortion == (-0.3, 0.09, 0.001, 0.0, 0.01)
    assert cctv.ignore_regions == (((0.0, 0.9), (0.4, 1.0)), ((0.6, 0.0), (1.0, 0.05)))
    cab = video_camera_settings(cfg, "cab.mp4", table["cab.mp4"])  # empty cells: the config's values
    assert (cab.hfov_deg, cab.gauge_mm, cab.distortion) == (60.0, 1520.0, ())


def test_config_defaults() -> None:
    cfg = VideoBackgroundConfig(url="videos")
    assert (cfg.hfov_deg, cfg.fallback_hfov_deg, cfg.gauge_mm, cfg.sleeper_spacing_m) == (None, 60.0, 1435.0, 0.6)
    with pytest.raises(ValueError, match="gauge_mm 1453 is not a track gauge"):
        VideoBackgroundConfig(url="videos", gauge_mm=1453)
    with pytest.raises(ValueError, match="4 or 5 numbers"):
        VideoBackgroundConfig(url="videos", distortion=(0.1, 0.2))


@pytest.mark.parametrize(("cells", "error"), [
    ("a.mp4,sixty,,,,,,,,,,", r"row 1 \(a\.mp4\): column 'hfov_deg': 'sixty' is not a number"),
    ("a.mp4,200,,,,,,,,,,", r"row 1 \(a\.mp4\): column 'hfov_deg': .*less than 170"),
    ("a.mp4,,1450,,,,,,,,,", r"row 1 \(a\.mp4\): column 'gauge_mm': .*1450 is not a track gauge"),
    ("a.mp4,90,,-0.2,0.05,,,,,,,", r"row 1 \(a\.mp4\): columns \['p1', 'p2'\]: lens distortion needs"),
    ("a.mp4,,,,,,,,,0.9,,", r"row 1 \(a\.mp4\): column 'ignore_bottom'"),
    ("a.mp4,,,,,,,,,,0 0.9 0.4,", r"row 1 \(a\.mp4\): column 'ignore_regions': odd count"),
    ("a.mp4,,,,,,,,,,0 0.9 1.4 1,", r"row 1 \(a\.mp4\): column 'ignore_regions'"),
    ("a.mp4,,,,,,,,-2,,,", r"row 1 \(a\.mp4\): column 'camera_height_m'"),
])
def test_bad_camera_cells_name_file_row_and_column(tmp_path, cells: str, error: str) -> None:
    sidecar = tmp_path / "cameras.csv"
    sidecar.write_text(HEADER + cells + "\n")
    with pytest.raises(ValueError, match=r"cameras\.csv, " + error):
        read_sidecar(str(sidecar))


def test_distortion_without_a_field_of_view_is_refused_naming_the_video(tmp_path) -> None:
    sidecar = tmp_path / "meta.csv"
    sidecar.write_text("video,k1,k2,p1,p2\nwide.mp4,-0.3,0.1,0,0\n")
    table = read_sidecar(str(sidecar))  # fine on its own: the config could give hfov_deg
    with pytest.raises(ValueError, match=r"camera of video wide\.mp4.*needs hfov_deg"):
        video_camera_settings(VideoBackgroundConfig(url="v"), "wide.mp4", table["wide.mp4"])
    settings = video_camera_settings(VideoBackgroundConfig(url="v", hfov_deg=100), "wide.mp4", table["wide.mp4"])
    assert settings.distortion == (-0.3, 0.1, 0.0, 0.0)


def test_regions_parse_boxes_and_polygons() -> None:
    assert parse_regions("0 0 0.5 0.1;0.2 0.8 0.3 0.9 0.25 1") == (((0.0, 0.0), (0.5, 0.1)),
                                                                   ((0.2, 0.8), (0.3, 0.9), (0.25, 1.0)))
    with pytest.raises(ValueError):
        CameraSettings(ignore_regions=(((0.5, 0.5),),))

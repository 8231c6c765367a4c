"""benchmarks/real/label_tool.py: the views a person labels rails with, in the frame's own pixels."""

import json

import cv2
import numpy as np
import pytest

from benchmarks.real import label_tool


@pytest.fixture
def frame(tmp_path):
    path = tmp_path / "rs19seg_rs00001.png"
    cv2.imwrite(str(path), np.full((540, 960, 3), 60, np.uint8))
    return path


def test_the_grid_marks_frame_coordinates(frame, tmp_path):
    label_tool.main(["grid", str(frame), "--out", str(tmp_path / "views")])
    view = cv2.imread(str(tmp_path / "views" / "rs19seg_rs00001_grid.png")).astype(int)
    assert view.shape == (540, 960, 3)  # no wider than 1280: not scaled
    assert view[350, 100, 1] > view[350, 150, 1] + 40  # a grid line on column 100, none on 150


def test_a_zoom_is_enlarged_with_its_own_coordinates(frame, tmp_path):
    label_tool.main(["zoom", str(frame), "400", "300", "600", "500", "--out", str(tmp_path)])
    view = cv2.imread(str(tmp_path / "rs19seg_rs00001_zoom.png")).astype(int)
    assert view.shape[:2] == (800, 800)  # 200 px enlarged 4x
    assert view[50, (420 - 400) * 4, 1] > view[50, (430 - 400) * 4, 1] + 40  # a line every 20 frame px
    with pytest.raises(SystemExit, match="rs19seg_rs00001.png: the box"):
        label_tool.main(["zoom", str(frame), "2000", "0", "2100", "50", "--out", str(tmp_path)])


def test_show_draws_the_label_found_by_name_or_stem(frame, tmp_path):
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"rs19seg_rs00001": {"left": [[300, 539], [450, 300]],
                                                      "right": [[700, 539], [520, 300]]}}))
    label_tool.main(["show", str(frame), str(labels), "--out", str(tmp_path)])
    view = cv2.imread(str(tmp_path / "rs19seg_rs00001_show.png")).astype(int)
    on_left = view[420, 374]  # the left rail passes (375, 419.5)
    assert on_left[2] > 150 and on_left[0] < 100
    labels.write_text(json.dumps({"other.png": None}))
    with pytest.raises(SystemExit, match="rs19seg_rs00001.png: .*no label"):
        label_tool.main(["show", str(frame), str(labels), "--out", str(tmp_path)])

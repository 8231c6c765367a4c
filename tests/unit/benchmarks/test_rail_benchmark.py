"""benchmarks/rail.py --real on a tiny labelled folder made from procedural scenes: it scores a
found track as correct, a blank frame's silence as no false detection, and writes its figures."""

import argparse
import json
import sys
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from benchmarks import rail
from synrail.rail.detect import RailFit
from synrail.rail.detect import TrackResult as DetectResult
from synrail.sources.procedural_backgrounds import render_background, sample_background_spec


def rail_label(geometry, rows: np.ndarray) -> dict[str, list[list[float]]]:
    """The rails' head centres on ``rows`` as a labels.json entry."""
    z = geometry.ground_point(np.full_like(rows, geometry.width / 2), rows)[1]
    half = geometry.gauge_m / 2 + geometry.rail_head_m / 2
    label = {}
    for side, sign in (("left", -1), ("right", 1)):
        u = geometry.project(np.full_like(z, geometry.track_offset_m + sign * half), np.zeros_like(z), z)[0]
        label[side] = [[float(x), float(y)] for x, y in zip(u, rows, strict=True)]
    return label


def write_labelled_frames(folder) -> None:
    """Two procedural frames with their rails labelled, and a blank null frame."""
    labels = {}
    for seed in range(2):
        spec = sample_background_spec(
            np.random.default_rng(seed), width=640, height=360, track_types=["ballasted"],
            conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5), hfov_deg=(50.0, 65.0),
            max_curvature=0.0, max_offset_m=0.0)
        name = f"proc_f{seed:06d}.png"
        cv2.imwrite(str(folder / name), render_background(spec))
        geometry = spec.geometry
        labels[name] = rail_label(geometry, np.linspace(geometry.horizon_v() + 40, 359, 8))
    cv2.imwrite(str(folder / "null_blank.png"), np.full((360, 640, 3), 90, np.uint8))
    labels["null_blank.png"] = None
    (folder / "labels.json").write_text(json.dumps(labels))


def run_on_labelled_frames(folder, monkeypatch, *options: str, edit=None):
    """benchmarks/rail.py --real on ``write_labelled_frames``' folder (``edit``ed, when given), learned
    model off; the JSON path."""
    write_labelled_frames(folder)
    if edit is not None:
        edit(folder)
    out = folder / "figures.json"
    monkeypatch.setattr(sys, "argv", ["rail.py", "--real", str(folder), "--width", "640", "--learned", "off",
                                      "--json", str(out), *options])
    rail.main()
    return out


def test_the_real_benchmark_scores_labelled_frames_and_writes_json(tmp_path, monkeypatch, capsys):
    out = run_on_labelled_frames(tmp_path, monkeypatch, "--conditions", "soft,jpeg")
    printed = capsys.readouterr().out
    assert "learned model off" in printed and "proc_f000000.png      correct" in printed
    figures = json.loads(out.read_text())["runs"]["learned model off"]
    assert figures["all"]["track"] == 2 and figures["all"]["correct"] == 2 and figures["all"]["false"] == 0
    assert figures["all"]["on_track"] == 2
    # "null" is an issue-16 group, "proc" a family the finder has not seen: both families are reported.
    assert figures["unseen"]["track"] == 2 and figures["issue-16"]["track"] == 0
    assert figures["proc"]["correct_pct"] == 100.0
    assert figures["frames"]["null_blank.png"]["verdict"] == "none"
    found = figures["frames"]["proc_f000000.png"]
    assert found["verdict"] == "correct" and abs(found["gap_ratio"] - 1) < 0.05
    # The frames again under each degradation, the undegraded run first; a null frame stays silent.
    degraded = json.loads(out.read_text())["runs"]["learned model off, degraded frames"]
    assert list(degraded) == [f"{c} {f}" for c in ("none", "soft", "jpeg") for f in ("issue-16", "unseen")]
    assert degraded["none unseen"]["on_track"] == 2 and degraded["none issue-16"]["false"] == 0
    assert all(degraded[f"{c} unseen"]["track"] == 2 and degraded[f"{c} issue-16"]["false"] == 0
               for c in ("soft", "jpeg"))
    assert "soft        unseen" in printed


def blur_one_darken_the_other(folder) -> None:
    first, second = (folder / f"proc_f{seed:06d}.png" for seed in range(2))
    cv2.imwrite(str(first), cv2.GaussianBlur(cv2.imread(str(first)), (0, 0), 4))
    cv2.imwrite(str(second), (255 * 0.35 * (cv2.imread(str(second)) / 255.0) ** 3).astype(np.uint8))


def test_as_built_a_frame_the_filters_refuse_is_not_searched_and_a_dark_one_is(tmp_path, monkeypatch):
    """As in a build: a blurred frame is refused before the finder sees it, a sharp one outside the
    exposure limits is searched (and kept where its track is found)."""
    out = run_on_labelled_frames(tmp_path, monkeypatch, "--as-built", edit=blur_one_darken_the_other)
    frames = json.loads(out.read_text())["runs"]["learned model off, as built"]["frames"]
    assert frames["proc_f000000.png"]["verdict"] == "none" and frames["proc_f000000.png"]["reason"] == "blurred"
    assert frames["proc_f000001.png"]["verdict"] == "correct"
    assert frames["null_blank.png"]["reason"] == "blurred"  # a flat frame: nothing sharp in it
    unfiltered = json.loads(run_on_labelled_frames(tmp_path, monkeypatch, edit=blur_one_darken_the_other)
                            .read_text())["runs"]["learned model off"]["frames"]
    assert unfiltered["null_blank.png"]["reason"] != "blurred"


def test_as_built_a_track_with_something_between_its_rails_is_refused_as_occluded(tmp_path, monkeypatch):
    monkeypatch.setattr(rail, "object_between_rails", lambda image, detection: True)

    def first_frame(*options: str) -> dict:
        out = run_on_labelled_frames(tmp_path, monkeypatch, *options)
        run = "learned model off, as built" if options else "learned model off"
        return json.loads(out.read_text())["runs"][run]["frames"]["proc_f000000.png"]

    assert first_frame("--as-built")["verdict"] == "none" and first_frame("--as-built")["reason"] == "track occluded"
    assert first_frame()["verdict"] == "correct"  # the finder's own verdict


def test_the_ceiling_counts_frames_where_a_candidate_lies_on_the_track(tmp_path, monkeypatch, capsys):
    out = run_on_labelled_frames(tmp_path, monkeypatch, "--ceiling", "4")
    assert "ceiling: 4 candidate pairs per mount" in capsys.readouterr().out
    figures = json.loads(out.read_text())["runs"]["learned model off"]
    assert figures["all"]["reachable"] == 2 and figures["proc"]["reachable"] == 2
    assert figures["frames"]["proc_f000000.png"]["reachable"] is True
    assert "reachable" not in figures["frames"]["null_blank.png"]


def test_a_candidate_off_the_labelled_track_does_not_reach_it(tmp_path, monkeypatch):
    write_labelled_frames(tmp_path)
    labels = json.loads((tmp_path / "labels.json").read_text())
    label = labels["proc_f000000.png"]
    gap = label["right"][-1][0] - label["left"][-1][0]
    # The same frame labelled a track further right (a neighbour): none of its candidates lies on that one.
    labels["proc_f000000.png"] = {side: [[x + 1.5 * gap, y] for x, y in points] for side, points in label.items()}
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    figures, _ = rail.run_real_benchmark(tmp_path, width=640, split=None, overlays=None, ceiling=4)
    assert figures["frames"]["proc_f000000.png"]["reachable"] is False
    assert figures["frames"]["proc_f000001.png"]["reachable"] is True


def test_the_labels_run_gives_the_finder_each_frames_labelled_area_as_the_learned_one(tmp_path, monkeypatch):
    write_labelled_frames(tmp_path)
    labels = json.loads((tmp_path / "labels.json").read_text())
    given = {}
    real_detect = rail.detect_track

    def detect(image, track_area=None, **kwargs):
        given[image.tobytes()] = track_area
        return real_detect(image, track_area=track_area, **kwargs)

    monkeypatch.setattr(rail, "detect_track", detect)
    out = tmp_path / "figures.json"
    monkeypatch.setattr(sys, "argv", ["rail.py", "--real", str(tmp_path), "--width", "320", "--learned", "labels",
                                      "--json", str(out)])
    rail.main()
    figures = json.loads(out.read_text())["runs"]
    assert list(figures) == ["labelled area as the learned area (a perfect model)"]
    assert figures["labelled area as the learned area (a perfect model)"]["all"]["correct"] == 2
    blank = cv2.resize(cv2.imread(str(tmp_path / "null_blank.png")), (320, 180))
    assert not given.pop(blank.tobytes()).any()  # a null frame: no area at all
    assert len(given) == 2
    for name in ("proc_f000000.png", "proc_f000001.png"):
        frame = cv2.resize(cv2.imread(str(tmp_path / name)), (320, 180), interpolation=cv2.INTER_AREA)
        area = given[frame.tobytes()]
        (left_x, y), (right_x, _) = labels[name]["left"][-1], labels[name]["right"][-1]
        row = int(y / 2) - 1  # the label at half the frame's size, a row above its last
        assert area.dtype == np.float32 and area.shape == (180, 320)
        assert area[row, int((left_x + right_x) / 4)] == 1.0  # between the labelled rails
        assert area[row, int(left_x / 2) - 4] == 0.0 and area[row, int(right_x / 2) + 4] == 0.0  # beside them
        assert not area[: int(labels[name]["left"][0][1] / 2) - 1].any()  # nothing above the label


def test_the_labels_run_needs_real_frames(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["rail.py", "--learned", "labels"])
    with pytest.raises(SystemExit) as stopped:
        rail.main()
    assert stopped.value.code == 2 and "--learned labels needs --real" in capsys.readouterr().err


def test_a_degraded_frame_is_the_same_on_every_run_and_differs_from_the_original(tmp_path, monkeypatch):
    spec = sample_background_spec(np.random.default_rng(0), width=320, height=180, track_types=["ballasted"],
                                  conditions={"normal": 1.0}, camera_height_m=(2.2, 2.9), pitch_deg=(1.5, 4.5),
                                  hfov_deg=(50.0, 65.0), max_curvature=0.0, max_offset_m=0.0)
    cv2.imwrite(str(tmp_path / "proc_1.png"), render_background(spec))
    seen = []
    monkeypatch.setattr(rail, "detect_track", lambda image, **_: seen.append(image) or DetectResult(None, "x"))
    original = cv2.imread(str(tmp_path / "proc_1.png"))
    for name, transform in rail.CONDITIONS_REAL.items():
        for _ in range(2):
            rail.evaluate_real(tmp_path / "proc_1.png", None, 320, None, None, transform)
        assert np.array_equal(seen[-1], seen[-2]), name
        assert not np.array_equal(seen[-1], original), name


def test_unknown_conditions_are_refused_naming_the_known_ones():
    with pytest.raises(argparse.ArgumentTypeError, match="unknown condition.*rainbow.*known: dark"):
        rail._condition_names("rain,rainbow")
    assert rail._condition_names("all") == list(rail.CONDITIONS_REAL)


def test_a_detection_short_of_the_labels_far_end_is_on_track_but_not_correct():
    rows = np.linspace(100.0, 400.0, 7)
    label = {"left": [[300 - 0.5 * (r - 80), r] for r in rows], "right": [[340 + 0.5 * (r - 80), r] for r in rows]}

    class Detection:  # the label's own rails, found only on the lower half of its rows
        top_row = 250
        left_fit = type("Fit", (), {"x": staticmethod(lambda v: 300 - 0.5 * (v - 80))})
        right_fit = type("Fit", (), {"x": staticmethod(lambda v: 340 + 0.5 * (v - 80))})

    outcome = rail.RealOutcome("x_1.jpg", "x", labelled=True, detected=True)
    rail.score_detection(outcome, Detection, 1.0, label)
    assert outcome.on_track and not outcome.correct
    assert outcome.right_covered == 1.0 and 0.4 < outcome.right_rows < 0.6


def test_held_back_frames_are_their_own_family_not_the_unseen_one():
    outcomes = [rail.RealOutcome(name, rail.frame_group(name), labelled=True, detected=False)
                for name in ("rtd_frame_1.jpg", "rs19sw_rs00001.jpg", "rs19seg_rs07650.png", "mine_f000001.jpg")]
    families = {family: [o.name for o in members] for family, members in rail.by_family(outcomes).items()}
    assert families == {"issue-16": ["rtd_frame_1.jpg"], "unseen": ["rs19sw_rs00001.jpg", "mine_f000001.jpg"],
                        "held-back": ["rs19seg_rs07650.png"]}


# A straight ego track in a 640x360 frame (horizon row 100): rails at 320 -+ (20 + 0.8 t), t = v - 100.
HORIZON = 100.0
TRACK_LABEL = {side: [[320 + sign * (20 + 0.8 * (v - HORIZON)), v] for v in (200.0, 280.0, 359.0)]
               for side, sign in (("left", -1), ("right", 1))}


def straight_pair(left: tuple[float, float], right: tuple[float, float]) -> SimpleNamespace:
    """A detection whose rails run x = a + b t from row 150 down, for ``score_detection``."""
    return SimpleNamespace(left_fit=RailFit(HORIZON, *left, 0.0), right_fit=RailFit(HORIZON, *right, 0.0),
                           top_row=150)


@pytest.mark.parametrize(("left", "right", "verdict", "gap_ratio"), [
    ((300.0, -0.8), (340.0, 0.8), "correct", 1.0),
    ((300.0, -0.8), (320.0, 0.0), "wrong", 0.5),             # a rail paired with a line down the middle
    ((340.0, 0.8), (380.0, 2.4), "neighbour track", 1.0),    # the pair one gap to the right
    ((280.0, -1.6), (360.0, 1.6), "wrong", 2.0),             # lines a gap beyond each rail
])
def test_a_finding_is_judged_with_its_rail_gap_against_the_label(left, right, verdict, gap_ratio):
    outcome = rail.RealOutcome("f.png", "f", labelled=True, detected=True)
    rail.score_detection(outcome, straight_pair(left, right), 1.0, TRACK_LABEL)
    assert outcome.verdict == verdict and outcome.gap_ratio == pytest.approx(gap_ratio)


def test_a_finding_on_a_null_frame_is_a_false_detection_and_no_finding_is_none():
    assert rail.RealOutcome("n.png", "null", labelled=False, detected=True).verdict == "false detection"
    assert rail.RealOutcome("f.png", "f", labelled=True, detected=False).verdict == "none"

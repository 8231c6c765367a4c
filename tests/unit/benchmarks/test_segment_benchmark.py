"""benchmarks/segment.py on a tiny synthetic COCO set with known masks (and a PennFudan folder)."""

import json

import cv2
import numpy as np

from benchmarks import segment


def test_the_benchmark_measures_every_path_on_a_synthetic_coco_set(tmp_path, capsys):
    out = tmp_path / "figures.json"
    results = segment.run(segment.parse_args(["--synthetic", str(tmp_path / "coco"), "--min-area", "500",
                                              "--json", str(out)]))
    assert set(results["coco"]) == {"annotation", "grabcut"}
    annotation, grabcut = results["coco"]["annotation"], results["coco"]["grabcut"]
    assert annotation["objects"] == grabcut["objects"] == 12
    # the annotation path reproduces the ground truth; GrabCut on flat, contrasting objects comes close
    assert annotation["mean_iou"] == 1.0 and annotation["boundary_f"] == 1.0
    assert 0.9 < grabcut["mean_iou"] < 1.0 and grabcut["boundary_f"] > 0.9
    assert [c["threshold"] for c in grabcut["curve"]] == list(segment.THRESHOLDS)
    shares = [c["kept_share"] for c in grabcut["curve"]]
    assert shares == sorted(shares, reverse=True) and shares[0] == 1.0
    assert grabcut["at_min_score"]["threshold"] == 0.5 and grabcut["ms_per_object"] > 0
    written = json.loads(out.read_text())
    assert written["sets"] == results and written["command"].startswith("python benchmarks/segment.py")
    assert written["runs"]["coco"]["grabcut"]["mean_iou"] == grabcut["mean_iou"]  # the page's table
    assert "grabcut: 12 objects, mean IoU" in capsys.readouterr().out
    # edges: the hard mask against the clean edge, per path
    assert set(grabcut["edges"]) == {"hard", "clean"} and set(grabcut["edges"]["clean"]) == set(segment.EDGE_MEASURES)
    assert annotation["edges"]["hard"]["edge_error"] == 0.0  # the annotation is the ground truth
    assert grabcut["edges"]["clean"]["colour_halo"] < 0.01  # no background colour on the clean edge


def test_halves_split_the_coco_objects_by_image_id_parity(tmp_path):
    results = segment.run(segment.parse_args(["--synthetic", str(tmp_path / "coco"), "--min-area", "500",
                                              "--halves"]))
    assert set(results) == {"coco", "coco, even image ids", "coco, odd image ids"}
    assert results["coco, even image ids"]["grabcut"]["objects"] == results["coco, odd image ids"]["grabcut"][
        "objects"] == 6  # images 1-6, two objects each


def test_measures_iou_boundary_f_and_left_out_annotations():
    a = np.zeros((100, 100), bool)
    a[20:60, 20:60] = True
    shifted = np.roll(a, 6, axis=1)
    assert segment.iou(a, a) == 1.0 and segment.boundary_f(a, a, 1.0) == 1.0
    assert segment.iou(a, shifted) == 34 / 46
    assert segment.boundary_f(a, shifted, 1.0) < 0.6 < segment.boundary_f(a, shifted, 7.0)
    two = [[10, 10, 30, 10, 30, 30, 10, 30], [60, 60, 90, 60, 90, 90, 60, 90]]
    obj = segment.GroundTruth("coco:1", "x.png", a, (0, 0, 1, 1), two, (100, 100))
    assert segment.annotation_mask(obj, (100, 100)) is None  # an object in two parts is left out


def test_pennfudan_pedestrians_are_read_from_their_label_masks(tmp_path):
    root = tmp_path / "PennFudanPed"
    (root / "PNGImages").mkdir(parents=True)
    (root / "PedMasks").mkdir()
    image = np.full((200, 240, 3), 120, np.uint8)
    labels = np.zeros((200, 240), np.uint8)
    cv2.ellipse(labels, (70, 100), (25, 70), 0, 0, 360, 1, -1)
    cv2.ellipse(labels, (170, 100), (25, 70), 0, 0, 360, 2, -1)
    image[labels > 0] = (30, 60, 200)
    cv2.imwrite(str(root / "PNGImages" / "FudanPed00001.png"), image)
    cv2.imwrite(str(root / "PedMasks" / "FudanPed00001_mask.png"), labels)
    results = segment.run(segment.parse_args(["--pennfudan", str(root), "--min-area", "1000"]))
    assert set(results["pennfudan"]) == {"grabcut"} and results["pennfudan"]["grabcut"]["objects"] == 2
    assert results["pennfudan"]["grabcut"]["mean_iou"] > 0.85

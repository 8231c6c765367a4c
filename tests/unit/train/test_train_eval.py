"""Train and evaluate: COCOeval metrics on hand-made predictions whose answer is known, event
accuracy on synthetic clips, the tables, and a CPU smoke run (tiny build, two epochs of YOLOv8n
offline through the CLI and its flow, evaluation end to end, the reproduce flow)."""

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from synrail.config import load_config
from synrail.stages.local import build_in_process
from synrail.train.evaluate import EvalReport, MetricRow, evaluate_coco, resolve_test_set, yolo_to_coco
from synrail.train.events import Clip, event_accuracy, load_clips, majority_vote, sample_frames
from synrail.train.tables import AblationResult, ModelResult, Table, paper_tables, to_csv, to_markdown

ROOT = Path(__file__).resolve().parents[3]
CLASSES = ("person", "rock", "unseen_obstacle")


# --- hand-made ground truth and detections -------------------------------------------------------

def gt_image(image_id: int, condition: str = "normal", track_type: str = "ballasted") -> dict:
    return {"id": image_id, "file_name": f"{image_id}.jpg", "width": 640, "height": 480, "condition": condition,
            "track_type": track_type}


def gt_box(annotation_id: int, image_id: int, bbox: list[float], category: str = "person",
           distance_m: float = 10.0, **extra) -> dict:
    return {"id": annotation_id, "image_id": image_id, "category_id": CLASSES.index(category) + 1, "bbox": bbox,
            "area": bbox[2] * bbox[3], "iscrowd": 0, "distance_m": distance_m, **extra}


def document(images: list[dict], annotations: list[dict]) -> dict:
    return {"images": images, "annotations": annotations,
            "categories": [{"id": i + 1, "name": n} for i, n in enumerate(CLASSES)]}


def detect(annotation: dict, score: float = 0.9, bbox: list[float] | None = None) -> dict:
    return {"image_id": annotation["image_id"], "category_id": annotation["category_id"],
            "bbox": bbox or annotation["bbox"], "score": score}


def box_at(index: int) -> list[float]:
    """Boxes that never overlap one another."""
    return [10.0 + 120 * (index % 5), 10.0 + 120 * (index // 5), 80.0, 60.0]


def test_a_perfect_detector_scores_one_in_every_row_with_ground_truth():
    images = [gt_image(1, "normal", "ballasted"), gt_image(2, "fog", "ballastless"), gt_image(3, "dusk")]
    annotations = [gt_box(i + 1, 1 + i % 3, box_at(i), CLASSES[i % 3], distance_m=5.0 + 7 * i,
                          source="procedural/unseen_obstacle/star/dots")
                   for i in range(10)]
    report = evaluate_coco(document(images, annotations), [detect(a) for a in annotations])
    groups = {r.group for r in report.rows}
    assert {"overall", "class", "distance", "condition", "condition_group", "track_type", "unseen_kind"} <= groups
    for row in report.rows:
        assert row.map50 == pytest.approx(1.0) and row.map50_95 == pytest.approx(1.0), row


def test_a_box_at_iou_0_6_counts_at_0_5_not_at_0_75_and_map50_95_follows_cocoeval_thresholds():
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    truth = gt_box(1, 1, [100.0, 100.0, 100.0, 100.0])
    shifted = detect(truth, bbox=[125.0, 100.0, 100.0, 100.0])  # overlap 75 x 100 over union 125 x 100
    iou = float(mask_utils.iou([shifted["bbox"]], [truth["bbox"]], [0])[0, 0])
    assert iou == pytest.approx(0.6)
    doc = document([gt_image(1)], [truth])
    report = evaluate_coco(doc, [shifted])

    gt = COCO()
    gt.dataset = doc
    gt.createIndex()
    evaluator = COCOeval(gt, gt.loadRes([dict(shifted)]), "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    ap, ap50, ap75 = evaluator.stats[:3]
    expected = float(np.mean([iou >= min(t, 1 - 1e-10) for t in evaluator.params.iouThrs]))
    assert ap50 == pytest.approx(1.0) and ap75 == 0.0
    assert report.value("overall", "all") == pytest.approx(1.0)
    assert report.value("overall", "all", "map50_95") == pytest.approx(expected) == pytest.approx(ap)
    assert 0.2 <= expected <= 0.3  # 0.50, 0.55 (and 0.60 at the boundary) of ten thresholds


def test_distance_buckets_ignore_other_buckets_and_count_stray_detections_everywhere():
    near, middle, far, boundary = (gt_box(1, 1, box_at(0), distance_m=10), gt_box(2, 1, box_at(1), distance_m=20),
                                   gt_box(3, 1, box_at(2), distance_m=50), gt_box(4, 1, box_at(3), distance_m=15.0))
    doc = document([gt_image(1)], [near, middle, far, boundary])
    # the far detection scores highest: were it a FP in the near bucket, that bucket's AP would halve
    detections = [detect(far, 0.95), detect(near, 0.9), detect(middle, 0.8), detect(boundary, 0.7)]
    report = evaluate_coco(doc, detections)
    assert [report.row("distance", b).instances for b in ["0-15m", "15-30m", "30-45m", "45-60m", "60-75m"]] == \
        [1, 2, 0, 1, 0]  # 15.0 m belongs to 15-30 only
    assert report.value("distance", "0-15m") == pytest.approx(1.0)
    assert report.value("distance", "45-60m") == pytest.approx(1.0)
    assert report.value("distance", "30-45m") is None and report.value("distance", "60-75m") is None

    without_middle = [d for d in detections if d["bbox"] != middle["bbox"]]
    report = evaluate_coco(doc, without_middle)
    assert report.value("distance", "15-30m") == pytest.approx(0.5, abs=0.01)  # 1 of 2 found
    assert report.value("distance", "0-15m") == pytest.approx(1.0)

    stray = {"image_id": 1, "category_id": 1, "bbox": [600.0, 400.0, 30.0, 30.0], "score": 0.99}
    report = evaluate_coco(doc, [stray, *detections])
    assert report.value("distance", "0-15m") == pytest.approx(0.5)  # precision 1/2 at full recall
    assert report.value("distance", "45-60m") == pytest.approx(0.5)


def test_conditions_are_image_subsets_and_the_paper_groups_join_tags():
    images = [gt_image(1, "normal"), gt_image(2, "overcast"), gt_image(3, "fog")]
    annotations = [gt_box(1, 1, box_at(0)), gt_box(2, 2, box_at(1)), gt_box(3, 3, box_at(2))]
    report = evaluate_coco(document(images, annotations), [detect(annotations[0]), detect(annotations[1])])
    assert report.value("condition", "normal") == pytest.approx(1.0)
    assert report.value("condition", "overcast") == pytest.approx(1.0)
    assert report.value("condition", "fog") == 0.0
    normal = report.row("condition_group", "Normal")
    assert (normal.images, normal.instances) == (2, 2) and normal.map50 == pytest.approx(1.0)
    assert report.value("condition_group", "Foggy") == 0.0
    assert report.row("condition_group", "Rainy") is None  # no rainy image: no row, an n/a cell
    assert report.value("overall", "all") < 1.0


def test_a_false_positive_above_the_true_one_lowers_precision_and_one_below_does_not():
    truth = gt_box(1, 1, box_at(0))
    false = {"image_id": 1, "category_id": 1, "bbox": box_at(4), "score": 0.9}
    doc = document([gt_image(1)], [truth])
    assert evaluate_coco(doc, [false, detect(truth, 0.8)]).value("overall", "all") == pytest.approx(0.5)
    assert evaluate_coco(doc, [{**false, "score": 0.1}, detect(truth, 0.8)]).value("overall", "all") == \
        pytest.approx(1.0)


def test_per_class_rows_and_unseen_obstacle_kinds():
    person, rock = gt_box(1, 1, box_at(0), "person"), gt_box(2, 1, box_at(1), "rock")
    star = gt_box(3, 1, box_at(2), "unseen_obstacle", source="procedural/unseen_obstacle/star/dots")
    spline = gt_box(4, 1, box_at(3), "unseen_obstacle", source="procedural/unseen_obstacle/spline/noise")
    parcel = gt_box(5, 1, box_at(4), "unseen_obstacle", kind="parcel", source="site/cam1")
    report = evaluate_coco(document([gt_image(1)], [person, rock, star, spline, parcel]),
                           [detect(person), detect(star), detect(parcel)])
    assert report.value("class", "person") == pytest.approx(1.0) and report.value("class", "rock") == 0.0
    assert report.value("class", "unseen_obstacle") == pytest.approx(2 / 3, abs=0.01)
    assert report.subsets("unseen_kind") == ["parcel", "spline", "star"]
    assert report.value("unseen_kind", "star") == pytest.approx(1.0)
    assert report.value("unseen_kind", "parcel") == pytest.approx(1.0)
    assert report.value("unseen_kind", "spline") == 0.0
    assert report.value("overall", "all") == pytest.approx((1 + 0 + 2 / 3) / 3, abs=0.01)


def test_no_detections_score_zero_and_foreign_image_ids_are_refused():
    doc = document([gt_image(1)], [gt_box(1, 1, box_at(0))])
    assert evaluate_coco(doc, []).value("overall", "all") == 0.0
    with pytest.raises(ValueError, match="ground truth does not have"):
        evaluate_coco(doc, [{"image_id": 7, "category_id": 1, "bbox": box_at(0), "score": 0.5}])


def test_a_yolo_form_test_set_converts_to_coco(tmp_path):
    (tmp_path / "images" / "test").mkdir(parents=True)
    (tmp_path / "labels" / "test").mkdir(parents=True)
    cv2.imwrite(str(tmp_path / "images" / "test" / "a.jpg"), np.zeros((100, 200, 3), np.uint8))
    (tmp_path / "labels" / "test" / "a.txt").write_text("1 0.5 0.5 0.2 0.4\n0 0.1 0.1 0.1 0.1 0.2 0.1 0.2 0.3\n")
    (tmp_path / "data.yaml").write_text("test: images/test\nnames: {0: person, 1: rock}\n")
    coco = yolo_to_coco(tmp_path / "data.yaml", "test")
    assert coco["images"] == [{"id": 1, "file_name": "images/test/a.jpg", "width": 200, "height": 100}]
    assert [(a["category_id"], a["bbox"]) for a in coco["annotations"]] == \
        [(2, [80.0, 30.0, 40.0, 40.0]), (1, [20.0, 10.0, 20.0, 20.0])]  # a polygon line gives its extent
    assert evaluate_coco(coco, [detect(a) for a in coco["annotations"]]).value("overall", "all") == pytest.approx(1.0)


# --- event accuracy ------------------------------------------------------------------------------

def write_clip(path: Path, bright: list[bool], fps: float = 25.0) -> Path:
    """A clip whose frames are bright (an "obstacle" for the fake detector) or dark."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (64, 48))
    for on in bright:
        writer.write(np.full((48, 64, 3), 220 if on else 20, np.uint8))
    writer.release()
    return path


def fake_detector(frame: np.ndarray) -> list[float]:
    return [0.9] if frame.mean() > 128 else [0.1]  # the dark frames' score stays under the threshold


def test_clips_are_sampled_at_10_fps(tmp_path):
    assert len(list(sample_frames(write_clip(tmp_path / "a.avi", [False] * 50, fps=25)))) == 20  # 2 s
    assert len(list(sample_frames(write_clip(tmp_path / "b.avi", [False] * 30, fps=30)))) == 10  # 1 s
    assert len(list(sample_frames(write_clip(tmp_path / "c.avi", [False] * 10, fps=5)))) == 10  # every frame
    with pytest.raises(ValueError, match="missing.avi"):
        list(sample_frames(tmp_path / "missing.avi"))


def test_event_accuracy_is_the_majority_vote_against_the_clip_label(tmp_path):
    frames = 50  # 2 s at 25 fps: 20 votes
    clips = {"always.avi": ([True] * frames, "1", "ballasted"),  # TP
             "never.avi": ([False] * frames, "0", "ballasted"),  # TN
             "rarely.avi": ([i % 10 < 3 for i in range(frames)], "obstacle", "ballastless"),  # FN
             "mostly.avi": ([i % 10 < 7 for i in range(frames)], "clear", "ballastless")}  # FP
    rows = ["video,label,track_type"]
    for name, (bright, label, track_type) in clips.items():
        write_clip(tmp_path / name, bright)
        rows.append(f"{name},{label},{track_type}")
    (tmp_path / "clips.csv").write_text("\n".join(rows) + "\n")
    report = event_accuracy(load_clips(tmp_path / "clips.csv"), fake_detector, score_threshold=0.5)
    assert report.counts() == {"TP": 1, "TN": 1, "FP": 1, "FN": 1}
    assert report.accuracy() == 0.5
    assert report.accuracy("ballasted") == 1.0 and report.accuracy("ballastless") == 0.0
    assert all(c.frames == 20 for c in report.clips)
    assert majority_vote([True, False]) is True and majority_vote([True, False, False]) is False  # a tie alarms
    lenient = event_accuracy([Clip(video=tmp_path / "never.avi", has_obstacle=False)], fake_detector, 0.05)
    assert lenient.accuracy() == 0.0  # every dark frame's 0.1 now passes the threshold


# --- tables --------------------------------------------------------------------------------------

def report_of(rows: list[tuple[str, str, float | None]]) -> EvalReport:
    return EvalReport(rows=[MetricRow(group=g, subset=s, map50=v, map50_95=None if v is None else v / 2, images=1,
                                      instances=1) for g, s, v in rows])


def test_paper_tables_fill_what_there_is_and_say_n_a_elsewhere(tmp_path):
    from synrail.train.events import ClipResult, EventReport

    events = EventReport(clips=[ClipResult(video="a", has_obstacle=True, predicted=True, frames=150,
                                           positive_frames=90, track_type="ballasted")],
                         score_threshold=0.25, sample_fps=10)
    detection = report_of([("overall", "all", 0.5), ("track_type", "ballasted", 0.573),
                           ("condition_group", "Normal", 0.587), ("distance", "0-15m", 0.724),
                           ("class", "unseen_obstacle", 0.4), ("unseen_kind", "star", 0.3)])
    models = [ModelResult(name="YOLOv8n", params_m=3.0, detection=detection, events=events),
              ModelResult(name="Faster-RCNN")]
    ablations = [AblationResult(harmony=True, rescale=False, random_texture=False, detection=detection)]
    table3, table4, table5, table6, table7 = paper_tables(models, ablations)

    rows = list(csv.reader(io.StringIO(to_csv(table3))))
    assert rows[0] == ["Models", "Paras (M)", "ballastless mAP50", "ballastless mAP50:95", "ballastless Acc",
                       "ballasted mAP50", "ballasted mAP50:95", "ballasted Acc"]
    assert rows[1] == ["YOLOv8n", "3.0", "n/a", "n/a", "n/a", "57.3", "28.6", "100.0"]
    assert rows[2] == ["Faster-RCNN"] + ["n/a"] * 7
    assert table4.records()[0] == {"Models": "YOLOv8n", "Normal": "58.7", "Rainy": "n/a", "Foggy": "n/a",
                                   "Dark": "n/a"}
    assert table5.columns[1:] == ["0-15m", "15-30m", "30-45m", "45-60m", "60-75m"]
    assert table5.records()[0]["0-15m"] == "72.4" and table5.records()[0]["60-75m"] == "n/a"
    assert table6.columns == ["Models", "unseen_obstacle", "star"] and table6.records()[0]["star"] == "30.0"
    assert [r["mAP50"] for r in table7.records()] == ["n/a", "50.0", "n/a", "n/a", "n/a"]
    assert [r["Harmony"] for r in table7.records()] == ["", "✓", "", "", "✓"]

    markdown = to_markdown(table3)
    assert markdown.startswith("**Table 3") and "| --- |" in markdown and "| Faster-RCNN | n/a |" in markdown
    with pytest.raises(ValueError, match="lowercase"):
        Table(key="Table 3", title="t", columns=["a"], rows=[])


# --- models, CLI and the CPU smoke run -----------------------------------------------------------

def test_train_config_refuses_a_bare_weights_name_and_rtdetr_configs_get_the_rtdetr_class(tmp_path):
    from pydantic import ValidationError

    from synrail.train.detector import TrainConfig, load_model

    with pytest.raises(ValidationError, match="existing .pt"):
        TrainConfig(model="yolov8n.pt")  # Ultralytics would download it
    with pytest.raises(ValidationError, match="extra"):
        TrainConfig(epoch=3)
    assert type(load_model("rtdetr-l.yaml")).__name__ == "RTDETR"


def cli_args(command: str, argv: list[str]) -> argparse.Namespace:
    from flows.train_cli import add_commands

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args([command, *argv])


def test_cli_handlers_exit_2_naming_a_missing_input(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "data.yaml"
    args = cli_args("train", ["--data", str(missing), "--out", str(tmp_path / "runs")])
    assert args.handler(args) == 2
    assert str(missing) in capsys.readouterr().err
    args = cli_args("evaluate", ["--data", str(missing), "--weights", str(tmp_path / "w.pt"), "--out", str(tmp_path)])
    assert args.handler(args) == 2
    assert str(missing) in capsys.readouterr().err
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(document([gt_image(1)], [])))
    args = cli_args("evaluate", ["--gt", str(gt), "--predictions", str(tmp_path / "r.json"), "--out", str(tmp_path)])
    assert args.handler(args) == 2
    assert "r.json" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "dataset"
    build_in_process(load_config(ROOT / "configs/tiny.yaml"), str(out))
    return out


def offline(command: list[str]) -> list[str]:
    """The command in a network namespace with only loopback up, where that is permitted."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode:
        return command
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *command]


@pytest.fixture(scope="module")
def trained(tiny, tmp_path_factory) -> Path:
    """``synrail train`` as a user runs it, offline: two epochs of yolov8n.yaml at 160 px, then the test split."""
    home = tmp_path_factory.mktemp("home")
    command = offline([sys.executable, "-m", "flows.train_cli", "train", "--data", str(tiny / "data.yaml"),
                       "--model", "yolov8n.yaml", "--epochs", "2", "--imgsz", "160", "--batch", "8",
                       "--device", "cpu", "--workers", "0", "--out", str(home / "runs")])
    env = dict(os.environ, HOME=str(home), PREFECT_HOME=str(home / "prefect"),
               YOLO_CONFIG_DIR=str(home / "ultralytics"))
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Downloading" not in output and "Traceback" not in output
    return home / "runs" / "yolov8n"


def read_metrics(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def assert_metric_cells(rows: list[dict[str, str]]) -> None:
    for row in rows:
        for column in ("mAP50", "mAP50:95"):
            assert row[column] == "n/a" or 0.0 <= float(row[column]) <= 100.0, row


def test_training_offline_writes_weights_and_the_test_split_metrics(trained):
    assert (trained / "weights" / "best.pt").is_file()
    rows = read_metrics(trained / "eval" / "yolov8n-test-metrics.csv")
    assert {r["group"] for r in rows} >= {"overall", "class", "distance", "condition", "track_type"}
    assert [r["subset"] for r in rows if r["group"] == "class"] == list(load_config(ROOT / "configs/tiny.yaml").classes)
    assert [r["subset"] for r in rows if r["group"] == "distance"] == ["0-15m", "15-30m", "30-45m", "45-60m", "60-75m"]
    assert_metric_cells(rows)
    assert (trained / "eval" / "yolov8n-test-metrics.md").read_text().startswith("**yolov8n on test")


def test_evaluate_end_to_end_on_the_test_split(trained, tiny, tmp_path):
    from synrail.train.detector import predict_coco

    test_set = resolve_test_set(tiny / "data.yaml", "test", tmp_path)
    ground_truth = json.loads(test_set.gt_json.read_text())
    results = predict_coco(trained / "weights" / "best.pt", ground_truth, test_set.images_dir, imgsz=160)
    image_ids, category_ids = {i["id"] for i in ground_truth["images"]}, {c["id"] for c in ground_truth["categories"]}
    for result in results:
        assert result["image_id"] in image_ids and result["category_id"] in category_ids
        assert 0.001 <= result["score"] <= 1.0 and len(result["bbox"]) == 4
    report = evaluate_coco(ground_truth, results)
    for row in report.rows:
        assert row.map50 is None or 0.0 <= row.map50_95 <= row.map50 + 1e-9 <= 1.0 + 1e-9
    assert report.row("overall", "all").instances == len(ground_truth["annotations"])

    out = tmp_path / "eval"
    args = cli_args("evaluate", ["--data", str(tiny / "data.yaml"), "--weights", str(trained / "weights" / "best.pt"),
                                 "--split", "test", "--imgsz", "160", "--out", str(out)])
    assert args.handler(args) == 0
    assert_metric_cells(read_metrics(out / "metrics.csv"))
    args = cli_args("evaluate", ["--gt", str(test_set.gt_json), "--predictions", str(out / "predictions.json"),
                                 "--out", str(tmp_path / "again")])
    assert args.handler(args) == 0
    assert (tmp_path / "again" / "metrics.csv").read_text() == (out / "metrics.csv").read_text()


def test_reproduce_lays_out_tables_3_to_7_for_what_there_is(trained, tiny, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from flows.train_evaluate import ModelSpec, ReproduceSpec, reproduce

    test_set = resolve_test_set(tiny / "data.yaml", "test", tmp_path)
    ground_truth = json.loads(test_set.gt_json.read_text())
    perfect = tmp_path / "perfect.json"
    perfect.write_text(json.dumps([detect(a, 1.0) for a in ground_truth["annotations"]]))
    frames = [cv2.imread(str(test_set.images_dir / i["file_name"])) for i in ground_truth["images"][:2]]
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(tmp_path / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 10, (width, height))
    for frame in frames * 3:
        writer.write(frame)
    writer.release()
    (tmp_path / "clips.csv").write_text("video,label,track_type\nclip.avi,1,ballasted\n")
    spec = ReproduceSpec(test_data=str(tiny / "data.yaml"), clips=str(tmp_path / "clips.csv"), imgsz=160,
                         models=[ModelSpec(name="YOLOv8n", weights=str(trained / "weights" / "best.pt")),
                                 ModelSpec(name="oracle", predictions=str(perfect))])
    with prefect_test_harness(server_startup_timeout=120):
        tables = reproduce(spec, out_dir=str(tmp_path / "reproduce"))
        with get_client(sync_client=True) as client:
            keys = {a.key for a in client.read_artifacts()}
    by_key = {t.key: t for t in tables}
    assert {"table-3-track-types", "table-4-conditions", "table-5-distances", "table-6-unseen-obstacles",
            "table-7-ablations", "reproduce-report"} <= keys
    yolo, oracle = by_key["table-3-track-types"].records()
    assert yolo["Paras (M)"] == "3.0" and yolo["ballasted Acc"] in ("0.0", "100.0")
    assert yolo["ballastless Acc"] == "n/a" and oracle["ballasted Acc"] == "n/a"  # no clips for those
    assert oracle["ballasted mAP50"] == "100.0" and oracle["ballasted mAP50:95"] == "100.0"
    assert all(r["mAP50"] == "n/a" for r in by_key["table-7-ablations"].records())
    assert (tmp_path / "reproduce" / "table-4-conditions.csv").is_file()
    assert (tmp_path / "reproduce" / "table-5-distances.md").is_file()

"""Train Ultralytics detectors on a built dataset and evaluate them the way the paper's Tables 3-7 do.

detector.py  offline Ultralytics: TrainConfig, train_detector, predict_coco, frame_scorer
evaluate.py  COCOeval metrics by class, distance, condition, track type, unseen kind; YOLO -> COCO
events.py    event accuracy on clips (10 fps sampling, majority vote)
tables.py    CSV / Markdown tables and the Tables 3-7 layouts
"""

from synrail.train.detector import TrainConfig, TrainResult, predict_coco, train_detector
from synrail.train.evaluate import EvalReport, MetricRow, evaluate_coco, resolve_test_set, yolo_to_coco
from synrail.train.events import Clip, EventReport, event_accuracy, load_clips
from synrail.train.tables import AblationResult, ModelResult, Table, paper_tables, write_table

__all__ = ["AblationResult", "Clip", "EvalReport", "EventReport", "MetricRow", "ModelResult", "Table", "TrainConfig",
           "TrainResult", "event_accuracy", "evaluate_coco", "load_clips", "paper_tables", "predict_coco",
           "resolve_test_set", "train_detector", "write_table", "yolo_to_coco"]

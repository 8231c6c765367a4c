"""``synrail train`` and ``synrail evaluate``: subcommands the main CLI adds with :func:`add_commands`.

- ``train`` runs the ``train-and-evaluate`` flow (Prefect's ephemeral server unless
  ``PREFECT_API_URL`` is set): training, then the metrics of the test split when data.yaml has one.
- ``evaluate`` calls the library directly: it takes seconds, is often scripted over many results
  files, and needs no server. It scores a weights file on a split of a data.yaml (a SynRail build
  or any YOLO-form dataset) or on a COCO file, or scores another framework's COCO results.

Exit codes: 0 done, 1 training or evaluation failed, 2 bad input (with a message naming the file
or field). Also runnable alone: ``python -m flows.train_cli train --data OUT/data.yaml ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from flows.prefect_env import configure_command_line, local_database_problem
from synrail.extras import MissingExtra, require_extra
from synrail.train.detector import TrainConfig
from synrail.train.evaluate import (
    EvalReport,
    TestSet,
    check_results,
    load_coco_document,
    load_results,
    resolve_test_set,
)
from synrail.train.events import is_synthetic_manifest

console = Console(stderr=True)
SHOWN_GROUPS = ("overall", "class", "distance", "condition_group", "track_type")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train", help="train a detector on a built dataset, then evaluate it (a Prefect flow)")
    train.add_argument("--data", required=True, help="the dataset's data.yaml")
    train.add_argument("--model", default="yolov8n.yaml",
                       help="Ultralytics model *.yaml (yolov5s.yaml, yolov8n.yaml, yolo11n.yaml, rtdetr-l.yaml) "
                            "or an existing .pt file")
    train.add_argument("--epochs", type=int, default=50)
    train.add_argument("--hours", type=float, help="a time budget instead of --epochs: as many epochs as fit")
    train.add_argument("--imgsz", type=int, default=640)
    train.add_argument("--batch", type=int, default=32)
    train.add_argument("--device", default="cpu", help="cpu, 0, 0,1, cuda:0, mps")
    train.add_argument("--workers", type=int, default=4, help="data-loading worker processes")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", default="runs", help="runs folder; the run goes to OUT/NAME")
    train.add_argument("--name", help="run name (default: the model's file stem)")
    train.add_argument("--pretrained", help="an existing .pt whose weights initialise the model")
    train.add_argument("--split", default="test", help="split evaluated after training, when data.yaml has it")
    train.add_argument("--no-eval", action="store_true", help="train only")
    train.add_argument("--clips", help="clip manifest CSV (video,label[,track_type,condition]) for event accuracy")
    train.add_argument("--verbose", action="store_true", help="show Prefect's own log lines on the console")
    train.set_defaults(handler=train_command)

    evaluate = subparsers.add_parser("evaluate", help="mAP by class, distance, condition, track type; event accuracy")
    evaluate.add_argument("--data", help="data.yaml whose --split is the test set")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--gt", help="COCO ground truth (instead of --data)")
    evaluate.add_argument("--images", help="image folder of --gt's file names (with --weights)")
    evaluate.add_argument("--weights", help="an Ultralytics .pt to run on the test set")
    evaluate.add_argument("--predictions", help="COCO results JSON to score instead of running --weights")
    evaluate.add_argument("--out", required=True, help="folder for metrics.csv / metrics.md (and predictions.json)")
    evaluate.add_argument("--imgsz", type=int, default=640)
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--clips", help="clip manifest CSV for event accuracy: a SynRail export's clips.csv "
                                          "(scored from the predictions on its clip frames, with per-track "
                                          "figures) or video,label[,track_type,condition] (with --weights)")
    evaluate.add_argument("--event-threshold", type=float, default=0.25, help="per-frame detection score threshold")
    evaluate.set_defaults(handler=evaluate_command)


def _error(message: str) -> int:
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)  # [train] is no markup
    return 2


def _missing_file(**paths: str | None) -> str | None:
    """A message naming the first given path that is not a file."""
    for option, path in paths.items():
        if path is not None and not Path(path).is_file():
            return f"--{option.replace('_', '-')} {path} does not exist"
    return None


def _validation_message(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())


def _metrics_view(report: EvalReport, title: str) -> RichTable:
    view = RichTable(title=title)
    for column in ["group", "subset", "instances", "mAP50", "mAP50:95"]:
        view.add_column(column, justify="left" if column in ("group", "subset") else "right")
    for row in report.rows:
        if row.group in SHOWN_GROUPS:
            view.add_row(row.group, row.subset, str(row.instances),
                         *("n/a" if v is None else f"{100 * v:.1f}" for v in (row.map50, row.map50_95)))
    return view


def train_command(args: argparse.Namespace) -> int:
    try:
        require_extra("train", "synrail train")
    except MissingExtra as err:
        return _error(str(err))
    if not Path(args.data).is_file():
        return _error(f"data.yaml {args.data} does not exist")
    if problem := _missing_file(clips=args.clips):
        return _error(problem)
    try:
        cfg = TrainConfig(model=args.model, epochs=args.epochs, hours=args.hours, imgsz=args.imgsz, batch=args.batch,
                          device=args.device, workers=args.workers, seed=args.seed, project=args.out, name=args.name,
                          pretrained=args.pretrained)
    except ValidationError as err:
        return _error(_validation_message(err))
    configure_command_line(verbose=args.verbose)
    if problem := local_database_problem():
        return _error(problem)
    from flows.prefect_env import wait_for_task_runs_recorded
    from flows.train_evaluate import expected_task_runs, train_and_evaluate  # Prefect reads settings on import

    eval_split = None if args.no_eval else args.split
    state = train_and_evaluate(args.data, cfg, eval_split=eval_split, clips=args.clips, return_state=True)
    wait_for_task_runs_recorded(state.state_details.flow_run_id, expected_task_runs(args.data, eval_split, args.clips),
                                timeout_s=60.0 if state.is_completed() else 5.0)
    try:
        result = state.result()
    except Exception as err:  # the flow run's log has the traceback
        console.print(f"[red]training failed:[/red] {type(err).__name__}: {err}", highlight=False)
        return 1
    if result.detection is not None:
        console.print(_metrics_view(result.detection, f"{cfg.run_name} on {eval_split} (%)"))
    if result.events is not None:
        console.print(f"event accuracy: {100 * result.events.accuracy():.1f}% over {len(result.events.clips)} clips")
    console.print(f"weights: {result.train.weights}\ntables: {result.out_dir}", highlight=False, soft_wrap=True)
    return 0


def _test_set(args: argparse.Namespace, out: Path) -> TestSet:
    if args.gt:
        return TestSet(gt_json=Path(args.gt), images_dir=Path(args.images or Path(args.gt).parent))
    return resolve_test_set(args.data, args.split, out)


def _evaluate_input_problem(args: argparse.Namespace) -> str | None:
    if not (args.weights or args.predictions):
        return "give --weights (to run a model) or --predictions (COCO results to score)"
    if not (args.data or args.gt):
        return "give --data (a data.yaml) or --gt (COCO ground truth)"
    if args.data and not Path(args.data).is_file():
        return f"data.yaml {args.data} does not exist"
    if problem := _missing_file(clips=args.clips):
        return problem
    if args.clips and not args.weights and not is_synthetic_manifest(args.clips):
        return "--clips with videos needs --weights (a SynRail clips.csv is scored from --predictions too)"
    if args.weights:
        try:
            require_extra("train", "--weights (an Ultralytics model)")
        except MissingExtra as err:
            return str(err)
    return _missing_file(gt=args.gt, weights=args.weights, predictions=args.predictions, clips=args.clips)


def _score_synthetic_clips(args: argparse.Namespace, ground_truth: dict, predictions: list[dict], out: Path) -> None:
    """Event accuracy and per-track figures of a SynRail clips.csv from the predictions on its frames."""
    from synrail.train.events import clip_event_accuracy, load_clip_annotations, load_synthetic_clips, track_detections
    from synrail.train.tables import events_table, tracks_table, write_table

    events = clip_event_accuracy(load_synthetic_clips(args.clips), ground_truth, predictions,
                                 score_threshold=args.event_threshold)
    tracks = track_detections(load_clip_annotations(args.clips), ground_truth, predictions,
                              score_threshold=args.event_threshold)
    write_table(events_table(events, "events", str(args.clips)), out)
    write_table(tracks_table(tracks, "tracks", f"clip tracks of {args.clips}"), out)
    console.print(f"event accuracy: {100 * events.accuracy():.1f}% over {len(events.clips)} clips", highlight=False)
    share, median = tracks.detected_share(), tracks.median_first_detection_m()
    console.print(f"tracks: {len(tracks.tracks)}, detected {'n/a' if share is None else f'{100 * share:.1f}%'}, "
                  f"median first-detection distance {'n/a' if median is None else f'{median:.1f} m'}",
                  highlight=False)


def evaluate_command(args: argparse.Namespace) -> int:
    from synrail.train.evaluate import evaluate_coco
    from synrail.train.tables import events_table, metrics_table, write_table

    if problem := _evaluate_input_problem(args):
        return _error(problem)
    out = Path(args.out)
    try:  # reading the inputs: what fails here is the user's file
        test_set = _test_set(args, out)
        ground_truth = load_coco_document(test_set.gt_json)
        predictions = load_results(args.predictions) if args.predictions else None
        if predictions is not None:
            check_results(ground_truth, predictions)
    except (OSError, ValueError) as err:
        return _error(str(err))
    try:
        if predictions is None:
            from synrail.train.detector import predict_coco

            predictions = predict_coco(args.weights, ground_truth, test_set.images_dir, imgsz=args.imgsz,
                                       device=args.device)
            out.mkdir(parents=True, exist_ok=True)
            (out / "predictions.json").write_text(json.dumps(predictions))
        report = evaluate_coco(ground_truth, predictions)
        write_table(metrics_table(report, "metrics", str(test_set.gt_json)), out)
        console.print(_metrics_view(report, f"{test_set.gt_json.name} (%)"))
        if args.clips and is_synthetic_manifest(args.clips):
            _score_synthetic_clips(args, ground_truth, predictions, out)
        elif args.clips:
            from synrail.train.detector import frame_scorer
            from synrail.train.events import event_accuracy, load_clips

            detector = frame_scorer(args.weights, conf=args.event_threshold, imgsz=args.imgsz, device=args.device)
            events = event_accuracy(load_clips(args.clips), detector, score_threshold=args.event_threshold)
            write_table(events_table(events, "events", str(args.clips)), out)
            console.print(f"event accuracy: {100 * events.accuracy():.1f}% over {len(events.clips)} clips")
    except Exception as err:
        console.print(f"[red]evaluation failed:[/red] {type(err).__name__}: {err}", highlight=False)
        return 1
    console.print(f"tables: {out}", highlight=False, soft_wrap=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="synrail", description="Train and evaluate detectors on SynRail datasets.")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

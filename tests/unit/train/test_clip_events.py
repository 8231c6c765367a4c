"""`synrail evaluate --clips` on SynRail approach clips: event accuracy per clip from a detector's COCO
results on the clip frames (10 fps majority vote), and per-track figures (frames detected, first-
detection distance) from the export's clip annotations. Fake predictions, no detector."""

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.train_cli import main
from synrail.config import load_config
from synrail.stages.local import build_in_process
from synrail.train.events import SyntheticClip, clip_event_accuracy, load_clips, track_detections

ROOT = Path(__file__).resolve().parents[3]


# --- hand-made clips ------------------------------------------------------------------------------

def clip_document(frames_per_clip: dict[str, int]) -> dict:
    images, next_id = [], 1
    for clip, frames in frames_per_clip.items():
        for frame in range(frames):
            images.append({"id": next_id, "file_name": f"{clip}-{frame:04d}.jpg", "width": 320, "height": 192,
                           "clip_id": clip, "frame_in_clip": frame, "track_type": "ballasted", "condition": "normal"})
            next_id += 1
    return {"images": images, "annotations": [], "categories": [{"id": 1, "name": "person"}]}


def detections_on(document: dict, clip: str, frames: set[int], score: float = 0.9) -> list[dict]:
    return [{"image_id": i["id"], "category_id": 1, "bbox": [10, 10, 20, 40], "score": score}
            for i in document["images"] if i["clip_id"] == clip and i["frame_in_clip"] in frames]


def test_each_clip_is_the_majority_vote_of_its_frames_sampled_at_10_fps():
    doc = clip_document({"tp": 4, "fn": 4, "tn": 4, "fp": 4, "fast": 8, "absent_from_split": 0})
    clips = [SyntheticClip(clip_id=c, split="test", frames=f, fps=fps, speed_kmh=50.0, event=event)
             for c, f, fps, event in [("tp", 4, 10, True), ("fn", 4, 10, True), ("tn", 4, 10, False),
                                      ("fp", 4, 10, False), ("fast", 8, 20, True), ("elsewhere", 4, 10, True)]]
    results = (detections_on(doc, "tp", {0, 1}) + detections_on(doc, "fn", {0})  # a tie alarms; one in four does not
               + detections_on(doc, "tn", {0, 1, 2, 3}, score=0.1)  # under the threshold
               + detections_on(doc, "fp", {1, 2, 3})
               + detections_on(doc, "fast", {1, 3, 5, 7}))  # 20 fps sampled at 10: frames 0, 2, 4, 6 vote
    report = clip_event_accuracy(clips, doc, results, score_threshold=0.25)
    verdicts = {c.video: c for c in report.clips}
    assert set(verdicts) == {"tp", "fn", "tn", "fp", "fast"}  # a clip without frames in the split is not scored
    assert report.counts() == {"TP": 1, "TN": 1, "FP": 1, "FN": 2}
    assert verdicts["fast"].frames == 4 and verdicts["fast"].positive_frames == 0
    assert report.accuracy() == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="no clip"):
        clip_event_accuracy(clips[-1:], clip_document({"tp": 4}), results)


def test_a_track_is_detected_where_a_box_over_the_threshold_overlaps_it():
    doc = clip_document({"c": 3})
    rows = [{"image_id": f"c-{f:04d}", "clip_id": "c", "frame_in_clip": f, "track_id": 0, "class_name": "person",
             "distance_m": 30.0 - 5 * f, "bbox_x": 10, "bbox_y": 10, "bbox_w": 20, "bbox_h": 40} for f in range(3)]
    rows.append({**rows[0], "image_id": "other-0000", "clip_id": "other"})  # a frame of another split
    results = [{"image_id": 1, "category_id": 1, "bbox": [40, 10, 20, 40], "score": 0.9},  # beside it: IoU 0
               {"image_id": 2, "category_id": 1, "bbox": [10, 10, 20, 40], "score": 0.1},  # under the threshold
               {"image_id": 2, "category_id": 1, "bbox": [12, 10, 20, 40], "score": 0.8},  # IoU 0.82, any class
               {"image_id": 3, "category_id": 1, "bbox": [10, 10, 20, 40], "score": 0.5}]
    report = track_detections(rows, doc, results, score_threshold=0.25)
    [track] = report.tracks
    assert (track.frames, track.detected_frames, track.first_detection_frame) == (3, 2, 1)
    assert (track.first_distance_m, track.first_detection_distance_m) == (30.0, 25.0)
    assert report.detected_share() == 1.0 and report.median_first_detection_m() == 25.0
    never = track_detections(rows, doc, results[:2], score_threshold=0.25)
    assert never.tracks[0].first_detection_frame is None and never.median_first_detection_m() is None


# --- a tiny sequences build through the CLI -------------------------------------------------------

@pytest.fixture(scope="module")
def clips_build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clips") / "dataset"
    build_in_process(load_config(ROOT / "configs/tiny-sequences.yaml"), str(out))
    return out


def fake_predictions(out: Path, split: str, seen_from: dict[str, int]) -> tuple[list[dict], list[dict]]:
    """A detector that sees each clip's boxes from frame ``seen_from[clip]`` on (exactly), plus one
    high-scoring miss beside the first box of every clip; returns the results and the split's rows."""
    document = json.loads((out / "annotations" / f"instances_{split}.json").read_text())
    image_of = {Path(i["file_name"]).stem: i["id"] for i in document["images"]}
    rows = [r for r in pq.read_table(out / "manifest" / "clip_annotations.parquet").to_pylist()
            if r["image_id"] in image_of]
    results = []
    for r in rows:
        image_id, box = image_of[r["image_id"]], [r["bbox_x"], r["bbox_y"], r["bbox_w"], r["bbox_h"]]
        if r["frame_in_clip"] >= seen_from[r["clip_id"]]:
            results.append({"image_id": image_id, "category_id": r["category_id"] + 1, "bbox": box, "score": 0.9})
        if r["frame_in_clip"] == 0:  # counts for the frame's vote, not for the track (no overlap)
            results.append({"image_id": image_id, "category_id": 1, "score": 0.9,
                            "bbox": [box[0] + box[2] + 5, box[1], box[2], box[3]]})
    return results, rows


def test_cli_scores_synthetic_clips_and_tracks_from_predictions(clips_build, tmp_path, capsys):
    listed = {r["clip_id"]: r for r in csv.DictReader((clips_build / "clips.csv").open())}
    train_clips = sorted(c for c, r in listed.items() if r["split"] == "train")
    seen_from = {train_clips[0]: 0, train_clips[1]: 4}
    results, rows = fake_predictions(clips_build, "train", seen_from)
    (tmp_path / "predictions.json").write_text(json.dumps(results))
    code = main(["evaluate", "--data", str(clips_build / "data.yaml"), "--split", "train", "--predictions",
                 str(tmp_path / "predictions.json"), "--clips", str(clips_build / "clips.csv"),
                 "--out", str(tmp_path / "eval")])
    assert code == 0, capsys.readouterr().err
    events = list(csv.DictReader((tmp_path / "eval" / "events.csv").open()))
    overall = next(r for r in events if r["track type"] == "all")
    document = json.loads((clips_build / "annotations" / "instances_train.json").read_text())
    alarmed = {r["image_id"] for r in results}  # every fake detection scores 0.9; the clips run at 10 fps
    expected = {"TP": 0, "TN": 0, "FP": 0, "FN": 0}
    for clip in train_clips:
        frames = [i["id"] for i in document["images"] if i.get("clip_id") == clip]
        predicted, truth = 2 * len(alarmed.intersection(frames)) >= len(frames), listed[clip]["event"] == "1"
        expected[("T" if predicted == truth else "F") + ("P" if predicted else "N")] += 1
    assert expected["TP"] + expected["FP"] >= 1  # some clip alarms (the first is seen in every labelled frame)
    assert overall["clips"] == "2" and {k: int(overall[k]) for k in expected} == expected
    tracks = list(csv.DictReader((tmp_path / "eval" / "tracks.csv").open()))
    assert {t["clip"] for t in tracks} == set(train_clips)
    for track in tracks:
        mine = sorted((r for r in rows if r["clip_id"] == track["clip"] and r["track_id"] == int(track["track"])),
                      key=lambda r: r["frame_in_clip"])
        seen = [r for r in mine if r["frame_in_clip"] >= seen_from[track["clip"]]]
        assert track["frames"] == str(len(mine)) and track["detected frames"] == str(len(seen))
        assert track["first detection frame"] == str(seen[0]["frame_in_clip"])
        assert track["first detection distance (m)"] == f"{seen[0]['distance_m']:.1f}"
        assert track["first distance (m)"] == f"{mine[0]['distance_m']:.1f}"
    late = next(t for t in tracks if t["clip"] == train_clips[1])
    assert float(late["first detection distance (m)"]) < float(late["first distance (m)"])  # seen on approach
    accuracy = 100 * (expected["TP"] + expected["TN"]) / 2
    assert f"event accuracy: {accuracy:.1f}% over 2 clips" in capsys.readouterr().err


def test_cli_refuses_video_clips_without_weights_but_not_synthetic_ones(clips_build, tmp_path, capsys):
    videos = tmp_path / "videos.csv"
    videos.write_text("video,label\nclip.avi,1\n")
    (tmp_path / "p.json").write_text("[]")
    common = ["evaluate", "--data", str(clips_build / "data.yaml"), "--predictions", str(tmp_path / "p.json"),
              "--out", str(tmp_path / "eval")]
    assert main([*common, "--clips", str(videos)]) == 2
    assert "--weights" in capsys.readouterr().err
    assert main([*common, "--clips", str(clips_build / "clips.csv")]) == 0
    with pytest.raises(ValueError, match="synrail evaluate --clips"):
        load_clips(clips_build / "clips.csv")

"""Writes the labelled real-frame benchmark folder from the public snapshots it was labelled on.

    python benchmarks/real/extract.py --mirror /work/.mirror --out data/real/bench

The frames themselves carry no licence for reuse, so only our labels are kept here
(``labels.json``: the ego rails as polylines in each frame's own pixels, ``null`` where no ego track
is visible). Each label's name says where its frame comes from:

- ``rtd_frame_N.jpg``: ``RTD_USING_YOLO/data/train/images/frame_N.jpg`` of
  MANASNANDMOHAN/Railway_Track_Detection (Indian loco CCTV);
- ``eu_fNNNNNN.jpg``: frame NNNNNN (0-based, read in order) of ``utils/example.mp4`` of
  Sampson-Lee/Rail-Detection (a European cab video); ``slab_example.jpg``: its ``utils/example.jpg``;
- ``elephant_fNNNNNN.jpg``: frame NNNNNN of ``input_video/sample2.mp4``, ``animal_NAME.jpg``:
  ``input_images/NAME.jpg`` of anurag-singh12219/Deep-Learning-Based-Technique-for-Animal-Detection-on-Railway-Track;
- ``tram_NAME.jpg``: ``assets/img/NAME.jpg`` of ifs-rwth-aachen/smarttram;
- ``null_NAME.jpg``: ``images/real_images/NAME.jpg`` of 1960675737/MFCM-for-Image-Harmonization
  (photographs without any track: a detection there is a false one).

Frames of camera families not seen in development (issue 25; RailSem19's own terms apply to its
frames):

- ``rs19sw_rsNNNNN.jpg``: ``data/weichenEvalImages_test_val_filtered_74_switches/rsNNNNN.jpg`` of
  SebiGoebel/improved-train-ego-path-detection (RailSem19 frames with switches: fog, dusk, snow,
  trams, yards, platforms);
- ``rs19yolo_rsNNNNN.jpg``: ``ultralytics/assets/imgs/rsNNNNN.jpg`` (branch light_version) and
  ``rs19yolomain_rsNNNNN.jpg``: ``yolov8-optimization/images/rsNNNNN.jpg`` (main) of
  ccl-1/light-yolov8-seg-quantization-tensorrt (RailSem19: a tunnel portal, snow, dusk);
- ``rs19val_rsNNNNN.jpg`` and ``pilsen_frame_N.png``: RailSem19's validation frame and a Pilsen
  tram frame (rain on the windscreen) of oValach/RailSafeNet_DT;
- ``sweden_TestImage.png``: ``Images/TestImage.png`` of
  Jespjon/VisionSystemForAnAutonomousRailwayMaintenanceVehicle (a level crossing);
- ``synrailobs_NNNNNN.jpg``: ``images/bg/NNNNNN.jpg`` of guoqiushi/SynRailObs (the paper's own
  background, an Alpine main line);
- ``lowview_NAME.jpg``: ``NAME.jpg`` of yfL-fengzifei/my_railway_detection (a low viewpoint);
- ``rs19seg_rsNNNNN.png``: the left panel (the input frame) of ``outputs/*/rsNNNNN.png`` of
  LucPle/Railsem19-segmentation-with-DeepLabV3Plus, four 1920x1080 panels side by side (frame,
  ground truth, prediction, overlay); RailSem19 frames of every kind (street trams, tunnels, rain
  on the windscreen, snow, fog, night, stations), labelled after development had ended: a held-back
  family, never used to tune the finder.

``--mirror`` is the folder the search tool's ``fetch`` fills (``owner+name/repo`` bare git folders).
Every frame is written as it is decoded (OpenCV, JPEG quality 95 for video frames; stills copied, or
their first panel written as PNG).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent

# prefix -> (repository, commit, path template of a still, or of the video for "_fNNNNNN" names)
SOURCES = {
    "rtd": ("MANASNANDMOHAN/Railway_Track_Detection", "2f12e84b8d7784bd9ace43741110983a0e3468d0",
            "RTD_USING_YOLO/data/train/images/{name}.jpg"),
    "eu": ("Sampson-Lee/Rail-Detection", "e7ce9280411f4abf0aa5d06be8cd10a318f67e6d", "utils/example.mp4"),
    "slab": ("Sampson-Lee/Rail-Detection", "e7ce9280411f4abf0aa5d06be8cd10a318f67e6d", "utils/{name}.jpg"),
    "elephant": ("anurag-singh12219/Deep-Learning-Based-Technique-for-Animal-Detection-on-Railway-Track",
                 "d420205db3e4bf86fb60540c6896030536497e06", "input_video/sample2.mp4"),
    "animal": ("anurag-singh12219/Deep-Learning-Based-Technique-for-Animal-Detection-on-Railway-Track",
               "d420205db3e4bf86fb60540c6896030536497e06", "input_images/{name}.jpg"),
    "tram": ("ifs-rwth-aachen/smarttram", "9242dc6c285d2d2075edc75d638107f9cfd9629e", "assets/img/{name}.jpg"),
    "null": ("1960675737/MFCM-for-Image-Harmonization", "fb29373a553af88f96e21355a1e537e6fe43241b",
             "images/real_images/{name}.jpg"),
    "rs19sw": ("SebiGoebel/improved-train-ego-path-detection", "379709f87b32ef71b32d2e2735b790da78401331",
               "data/weichenEvalImages_test_val_filtered_74_switches/{name}.jpg"),
    "rs19yolo": ("ccl-1/light-yolov8-seg-quantization-tensorrt", "2e36aec71402687ee07225e3410e0848fcbed54e",
                 "ultralytics/assets/imgs/{name}.jpg"),
    "rs19yolomain": ("ccl-1/light-yolov8-seg-quantization-tensorrt", "7b08e689835c26582cf7b5b73e1aea553f7bb55c",
                     "yolov8-optimization/images/{name}.jpg"),
    "rs19val": ("oValach/RailSafeNet_DT", "f3a9349d80697a453a910b0ac2fd76585325dda7",
                "assets/rs19val/jpgs/rs19val/{name}.jpg"),
    "pilsen": ("oValach/RailSafeNet_DT", "f3a9349d80697a453a910b0ac2fd76585325dda7",
               "assets/pilsen_railway_dataset/media/images/00b1c77ac95acac4f383/{name}.png"),
    "sweden": ("Jespjon/VisionSystemForAnAutonomousRailwayMaintenanceVehicle",
               "d25895bcb42d730578aae583150be5783034d75c", "Images/{name}.png"),
    "synrailobs": ("guoqiushi/SynRailObs", "928fba0ed0728f54d2a552202da4dbd91371b3c4", "images/bg/{name}.jpg"),
    "lowview": ("yfL-fengzifei/my_railway_detection", "f9693bc9125c00f641152cb618f9c24c3b2f013d", "{name}.jpg"),
    "rs19seg": ("LucPle/Railsem19-segmentation-with-DeepLabV3Plus", "ff07958151544cfd7eb1fa81f74a40b8641afe8b",
                "outputs/*/{name}.png"),
}
# Sources whose still is several equal panels side by side, the frame being the first (left) one.
PANELS = {"rs19seg": 4}
VIDEO_FRAME = re.compile(r"^f(\d+)$")


def git_show(mirror: Path, repo: str, commit: str, path: str) -> bytes:
    """One file of a fetched snapshot (``mirror/owner+name/repo`` is a bare git folder)."""
    git_dir = mirror / repo.replace("/", "+") / "repo"
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
                          check=True, capture_output=True).stdout


def resolved_still(mirror: Path, repo: str, commit: str, template: str, stem: str) -> bytes:
    """The still a template names; a ``*`` folder is matched against the snapshot's files in name
    order, taking the first the snapshot holds (it lacks its largest files)."""
    wanted = template.format(name=stem)
    if "*" not in wanted:
        return git_show(mirror, repo, commit, wanted)
    git_dir = mirror / repo.replace("/", "+") / "repo"
    listed = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", commit,
                             wanted.split("*")[0]], check=True, capture_output=True, text=True).stdout.split()
    for path in sorted(p for p in listed if fnmatch.fnmatch(p, wanted)):
        try:
            return git_show(mirror, repo, commit, path)
        except subprocess.CalledProcessError:
            continue
    raise SystemExit(f"{repo}@{commit[:7]}: no file {wanted} in the snapshot")


def first_panel(data: bytes, panels: int) -> bytes:
    """The left one of ``panels`` equal side-by-side panels of an image, as a PNG."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return cv2.imencode(".png", image[:, : image.shape[1] // panels])[1].tobytes()


def video_frames(video: Path, indices: set[int]) -> dict[int, object]:
    """The frames at ``indices``, read in order (seeking is not exact on every codec)."""
    capture, frames, index = cv2.VideoCapture(str(video)), {}, 0
    while indices - frames.keys():
        ok, frame = capture.read()
        if not ok:
            break
        if index in indices:
            frames[index] = frame
        index += 1
    capture.release()
    missing = sorted(indices - frames.keys())
    if missing:
        raise SystemExit(f"{video}: frames {missing} are past its end")
    return frames


def extract(mirror: Path, out: Path, labels: dict) -> None:
    """Writes every labelled frame and ``labels.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    by_video: dict[str, dict[int, str]] = {}
    for name in sorted(labels):
        prefix, stem = Path(name).stem.split("_", 1)
        repo, commit, template = SOURCES[prefix]
        match = VIDEO_FRAME.match(stem)
        if template.endswith(".mp4") and match:
            by_video.setdefault(prefix, {})[int(match.group(1))] = name
        else:
            still = resolved_still(mirror, repo, commit, template, stem)
            (out / name).write_bytes(first_panel(still, PANELS[prefix]) if prefix in PANELS else still)
    for prefix, wanted in by_video.items():
        repo, commit, template = SOURCES[prefix]
        video = out / f".{prefix}.mp4"
        video.write_bytes(git_show(mirror, repo, commit, template))
        for index, frame in video_frames(video, set(wanted)).items():
            cv2.imwrite(str(out / wanted[index]), frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
        video.unlink()
    (out / "labels.json").write_text(json.dumps(labels, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, required=True, help="folder of fetched snapshots")
    parser.add_argument("--out", type=Path, required=True, help="benchmark folder to write")
    parser.add_argument("--labels", type=Path, default=HERE / "labels.json")
    args = parser.parse_args()
    try:
        extract(args.mirror, args.out, json.loads(args.labels.read_text()))
    except subprocess.CalledProcessError as error:
        sys.exit(f"cannot read a snapshot: {error.stderr.decode().strip()}")


if __name__ == "__main__":
    main()

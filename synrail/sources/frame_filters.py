"""Which sampled video frames make usable backgrounds: sharp, well exposed, not a near-copy of a frame
already kept, and with nothing on the track already (a pasted obstacle must be the only one there,
or the labels would miss the real one).

Every rejection carries one short fixed reason, so a run can report why frames were dropped.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from synrail.sources.video import SampledFrame

REASON_BLURRED = "blurred"
REASON_UNDEREXPOSED = "underexposed"
REASON_OVEREXPOSED = "overexposed"
REASON_DUPLICATE = "near-duplicate"
REASON_OBSTACLE = "obstacle-on-track"
NO_DETECTOR_NOTE = "obstacle-free filter skipped (no detector weights)"

# Luma at or below / at or above which a pixel counts as crushed black / clipped white.
DARK_LEVEL, BRIGHT_LEVEL = 10, 245

# COCO classes that would be an unlabelled obstacle if already on the track. "train" is left out:
# trains on neighbouring tracks (and the ego train's own parts) are in many good cab frames.
DEFAULT_REJECT_CLASSES = (
    "person", "bicycle", "car", "motorcycle", "bus", "truck", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "suitcase",
)

# Columns at which sharpness is judged: the same footage gets the same verdict at any resolution.
BLUR_WIDTH = 640

# Bottom-centre trapezoid (x, y as fractions of width, height) where the ego track runs in a cab view.
DEFAULT_TRACK_REGION = ((0.44, 0.45), (0.56, 0.45), (0.80, 1.0), (0.20, 1.0))


# -- image measures ------------------------------------------------------------------------------
def _grey(image: np.ndarray) -> np.ndarray:
    return image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)


def blur_score(image: np.ndarray) -> float:
    """How blurred the frame is, 0 (sharp) to 1: the no-reference blur effect of Crete-Roffet et al.
    (2007: how little the image changes when blurred once more), on the grey frame resized to
    ``BLUR_WIDTH`` columns.

    A ratio of intensity variations, so it does not depend on the scene's contrast (fog, dusk) nor on
    how much flat sky the frame holds (flat areas add to neither side); measured at one working width,
    so the same footage gives the same verdict at any resolution. Ordinary cab frames measure 0.2-0.4
    there, the same frames blurred by a 2 px Gaussian 0.5-0.65. A frame narrower than that is measured
    as it is: enlarging it would add the very blur the measure looks for (RailSem19 frames shrunk to
    360 columns measure 0.31 as they are, 0.39 enlarged, against 0.30 at 640).
    """
    return _blur_effect(_at_working_width(_grey(image)).astype(np.float32))


def _at_working_width(grey: np.ndarray) -> np.ndarray:
    """The grey frame shrunk to ``BLUR_WIDTH`` columns (aspect kept); as it is when not wider."""
    if grey.shape[1] <= BLUR_WIDTH:
        return grey
    rows = max(8, round(grey.shape[0] * BLUR_WIDTH / grey.shape[1]))
    return cv2.resize(grey, (BLUR_WIDTH, rows), interpolation=cv2.INTER_AREA)


def _blur_effect(grey: np.ndarray, h_size: int = 11) -> float:
    """scikit-image's ``measure.blur_effect(grey, h_size)`` (the same formula, borders and crop)
    with OpenCV's filters in single precision: a quarter of its time on a 640-column frame; the
    tests hold the two within 1e-6."""
    inner = (slice(2, grey.shape[0] - 1), slice(2, grey.shape[1] - 1))
    effects = []
    for dx, dy, box in ((0, 1, (1, h_size)), (1, 0, (h_size, 1))):  # down the columns, along the rows
        smoothed = cv2.blur(grey, box, borderType=cv2.BORDER_REFLECT)
        sharp = np.abs(cv2.Sobel(grey, cv2.CV_32F, dx, dy, ksize=3, borderType=cv2.BORDER_REFLECT))[inner]
        soft = np.abs(cv2.Sobel(smoothed, cv2.CV_32F, dx, dy, ksize=3, borderType=cv2.BORDER_REFLECT))[inner]
        total = float(sharp.sum(dtype=np.float64))
        if total == 0:  # a flat frame: nothing to blur
            effects.append(1.0)
            continue
        kept = float(np.maximum(sharp - soft, 0).sum(dtype=np.float64))
        effects.append((total - kept) / total)
    return max(effects)


def exposure_stats(image: np.ndarray) -> tuple[float, float, float]:
    """(mean luma, fraction of crushed-black pixels, fraction of clipped-white pixels) of the 8-bit
    frame's lower half: the ground, where the track runs and obstacles are pasted. A bright sky or a dark
    tunnel mouth around a lit track does not make a frame unusable; a dark or blown-out track does."""
    grey = _grey(image)
    ground = np.ascontiguousarray(grey[grey.shape[0] // 2:])
    # From the histogram: the same figures as the pixels' mean and shares, in half their time.
    histogram = cv2.calcHist([ground], [0], None, [256], [0, 256]).ravel().astype(np.float64)
    pixels = histogram.sum()
    return (float(histogram @ np.arange(256) / pixels), float(histogram[:DARK_LEVEL + 1].sum() / pixels),
            float(histogram[BRIGHT_LEVEL:].sum() / pixels))


def phash(image: np.ndarray) -> int:
    """64-bit perceptual hash: signs of the lowest 8x8 DCT frequencies of a 32x32 grey thumbnail,
    thresholded at the median of the AC terms (the DC term is the mean brightness, not structure).
    The thumbnail is shrunk from the frame at the blur's working width: a quarter of the time of
    shrinking a 1280-column frame at once, and the same hash but for a bit or two."""
    return _dct_hash(_at_working_width(_grey(image)))


def _dct_hash(grey: np.ndarray) -> int:
    thumb = cv2.resize(grey, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)
    low = cv2.dct(thumb)[:8, :8].ravel()
    bits = low > np.median(low[1:])
    return int("".join("1" if b else "0" for b in bits), 2)


def hamming(a: int, b: int) -> int:
    """The number of bits in which two perceptual hashes differ.

    Args:
        a: a 64-bit hash (``phash``).
        b: another.

    Returns:
        The Hamming distance, 0-64.
    """
    return (a ^ b).bit_count()


@dataclass(frozen=True)
class FrameMeasures:
    """What the filters measure on every sampled frame."""

    mean_luma: float  # of the lower half (``exposure_stats``)
    dark: float       # share of crushed-black pixels there
    bright: float     # share of clipped-white pixels there
    blur: float       # ``blur_score``
    phash: int        # ``phash``


def measure_frame(image: np.ndarray) -> FrameMeasures:
    """The exposure, blur and perceptual hash of a frame: all the filters measure before deciding.

    Args:
        image: the frame (BGR or grey).

    Returns:
        The measures.
    """
    grey = _grey(image)  # once: each measure works on the grey frame, blur and hash on it shrunk
    working = _at_working_width(grey)
    return FrameMeasures(*exposure_stats(grey), blur=_blur_effect(working.astype(np.float32)),
                         phash=_dct_hash(working))


# -- obstacle detectors --------------------------------------------------------------------------
@dataclass(frozen=True)
class Detection:
    """One detected object: its class, score and pixel box (x0, y0, x1, y1)."""

    class_name: str
    score: float
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


class ObstacleDetector(Protocol):
    """Anything that finds obstacles on a frame (frames with one on the track are rejected)."""

    def detect(self, image: np.ndarray) -> list[Detection]:
        """Detections on one BGR image."""
        ...


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class UltralyticsDetector:
    """An Ultralytics YOLO model loaded from a weights file the user supplies (never a model name,
    which Ultralytics would download); reports only the classes in ``classes_to_reject``."""

    def __init__(self, weights_path: str | Path, classes_to_reject: Sequence[str] = DEFAULT_REJECT_CLASSES,
                 conf: float = 0.35, device: str = "cpu") -> None:
        path = Path(weights_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"detector weights not found: {weights_path} (give the path of a weights "
                                    "file; SynRail never downloads models)")
        from synrail.train.detector import offline_ultralytics  # slow to import: only this class needs it

        self.model = offline_ultralytics().YOLO(str(path))
        self.names: dict[int, str] = dict(self.model.names)
        wanted = set(classes_to_reject)
        self.class_ids = sorted(i for i, name in self.names.items() if name in wanted)
        if not self.class_ids:
            raise ValueError(f"{path} knows none of the classes to reject {sorted(wanted)}; "
                             f"its classes are {sorted(set(self.names.values()))[:20]}")
        self.conf, self.device = conf, device
        self.identity = f"ultralytics/{_file_sha256(path)}"
        self._lock = threading.Lock()  # one model shared by worker threads; predict keeps per-call state

    def detect(self, image: np.ndarray) -> list[Detection]:
        """The model's detections of the configured classes on one BGR image (thread-safe)."""
        with self._lock:
            result = self.model.predict(image, conf=self.conf, device=self.device, classes=self.class_ids,
                                        verbose=False)[0]
        boxes = result.boxes
        return [Detection(class_name=self.names[int(c)], score=float(s), box=tuple(float(v) for v in xyxy))
                for c, s, xyxy in zip(boxes.cls.tolist(), boxes.conf.tolist(), boxes.xyxy.tolist(), strict=True)]


# -- configuration -------------------------------------------------------------------------------
class FilterConfig(BaseModel):
    """Thresholds of the frame filters: blur, exposure, near-duplicates and obstacles already on the track."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_blur: float = Field(0.5, ge=0, le=1, description=(
        "frames whose blur effect (0 sharp - 1 flat, measured at 640 columns, a smaller frame as it is; "
        "ordinary cab frames 0.2-0.4) is above this are left out as blurred"))
    # Dusk and tunnel frames whose rails a person sees have a ground half at mean luma 15-30 with a
    # third of it crushed black: only a ground with nothing left to see is underexposed.
    min_mean_luma: float = Field(10, ge=0, le=255, description="mean luma of the frame's lower half (the ground)")
    max_mean_luma: float = Field(235, ge=0, le=255, description="mean luma of the frame's lower half (the ground)")
    max_clipped_fraction: float = Field(0.6, ge=0, le=1, description=(
        "share of crushed-black or of clipped-white pixels allowed in the frame's lower half"))
    refuse_exposure_first: bool = Field(False, description=(
        "refuse frames outside the exposure limits before the track search; by default such a frame is "
        "searched like any other and left out as underexposed or overexposed only where no track is found "
        "there (a night frame, a tunnel mouth or a sunlit snowfield whose rails a person sees is kept). "
        "A frame with nothing sharp in it (blur over max_blur) is refused for its exposure either way"))
    duplicate_hamming: int = Field(6, ge=0, le=64)  # phash distance at or under which frames are copies
    detector_weights: str | None = None  # a local weights file; without one no detector runs
    detector_classes: tuple[str, ...] = DEFAULT_REJECT_CLASSES  # class names (the model's own) that reject
    detector_conf: float = Field(0.35, gt=0, lt=1)
    detector_device: str = "cpu"
    # Polygon (x, y fractions of width, height): a detection whose box bottom-centre (where it stands)
    # falls inside disqualifies the frame.
    track_region: tuple[tuple[float, float], ...] = DEFAULT_TRACK_REGION

    @model_validator(mode="before")
    @classmethod
    def _min_blur_was_replaced(cls, data):
        if isinstance(data, dict) and "min_blur" in data:
            raise ValueError("min_blur (a Laplacian variance that changed with the resolution) was replaced by "
                             "max_blur, a blur effect from 0 (sharp) to 1 (default 0.5)")
        return data

    @field_validator("track_region")
    @classmethod
    def _region_is_a_polygon_in_the_image(cls, region: tuple[tuple[float, float], ...]):
        if len(region) < 3:
            raise ValueError(f"track_region needs at least 3 points, got {len(region)}")
        if any(not (0 <= v <= 1) for point in region for v in point):
            raise ValueError(f"track_region points must be fractions in [0, 1], got {region}")
        return region


@lru_cache(maxsize=4)
def _cached_ultralytics(weights: str, classes: tuple[str, ...], conf: float, device: str) -> UltralyticsDetector:
    return UltralyticsDetector(weights, classes_to_reject=classes, conf=conf, device=device)


def detector_from_config(cfg: FilterConfig) -> ObstacleDetector | None:
    """The configured detector (loaded once per process), or None when no weights are configured."""
    if cfg.detector_weights is None:
        return None
    return _cached_ultralytics(cfg.detector_weights, cfg.detector_classes, cfg.detector_conf, cfg.detector_device)


# -- filtering -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FrameDecision:
    """Whether a sampled frame was kept, why not, and the measurements that decided it."""

    frame: SampledFrame
    accepted: bool
    reason: str | None
    blur: float  # blur effect, 0 sharp - 1 flat (frame_filters.blur_score)
    mean_luma: float
    phash: int
    # A kept frame outside the exposure limits: the reason it is left out if no track is found there.
    exposure: str | None = None


def track_polygon(region: Sequence[tuple[float, float]], width: int, height: int) -> np.ndarray:
    """The track region as a pixel polygon in OpenCV's contour layout.

    Args:
        region: (x, y) vertices as shares of the width and height.
        width: the frame width.
        height: the frame height.

    Returns:
        N x 1 x 2 float32 vertices.
    """
    return np.array([(x * width, y * height) for x, y in region], dtype=np.float32).reshape(-1, 1, 2)


def stands_on_track(detection: Detection, polygon: np.ndarray) -> bool:
    """Whether the detection's bottom-centre point (where it touches the ground) lies in ``polygon``.

    Args:
        detection: the detected object.
        polygon: the track region (``track_polygon``).

    Returns:
        True inside or on the edge.
    """
    x0, _, x1, y1 = detection.box
    return cv2.pointPolygonTest(polygon, ((x0 + x1) / 2, y1), False) >= 0


def _exposure_reason(mean_luma: float, dark: float, bright: float, cfg: FilterConfig) -> str | None:
    if mean_luma < cfg.min_mean_luma or dark > cfg.max_clipped_fraction:
        return REASON_UNDEREXPOSED
    if mean_luma > cfg.max_mean_luma or bright > cfg.max_clipped_fraction:
        return REASON_OVEREXPOSED
    return None


def filter_frames(frames: Iterable[SampledFrame], cfg: FilterConfig,
                  detector: ObstacleDetector | None) -> Iterator[FrameDecision]:
    """Decide on each frame of one video, in order. A frame outside the exposure limits is kept for the
    track search to settle (``FrameDecision.exposure``), unless ``cfg.refuse_exposure_first``; one
    that is also blurred is refused for its exposure (a black frame has no edges, but "underexposed"
    is its real fault). The detector runs last, on survivors only.

    Args:
        frames: the sampled frames of one video, in order (a near-duplicate of an earlier kept frame is refused).
        cfg: the exposure, sharpness, duplicate and track-region thresholds.
        detector: refuses frames with an obstacle standing on the track region; None skips that check.

    Yields:
        One decision per frame, in order: accepted, or the reason it is refused, with its measurements.
    """
    kept_hashes: list[int] = []
    for frame in frames:
        measures = measure_frame(frame.image)
        blur, digest = measures.blur, measures.phash
        exposure = _exposure_reason(measures.mean_luma, measures.dark, measures.bright, cfg)
        reason = exposure if cfg.refuse_exposure_first else None
        if reason is None and blur > cfg.max_blur:
            reason = exposure or REASON_BLURRED
        if reason is None and any(hamming(digest, h) <= cfg.duplicate_hamming for h in kept_hashes):
            reason = REASON_DUPLICATE
        if reason is None and detector is not None:
            height, width = frame.image.shape[:2]
            polygon = track_polygon(cfg.track_region, width, height)
            if any(stands_on_track(d, polygon) for d in detector.detect(frame.image)):
                reason = REASON_OBSTACLE
        if reason is None:
            kept_hashes.append(digest)
        yield FrameDecision(frame=frame, accepted=reason is None, reason=reason, blur=blur,
                            mean_luma=measures.mean_luma, phash=digest, exposure=exposure if reason is None else None)

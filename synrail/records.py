"""Every record that one stage hands to another, and the rows of the dataset's tables.

Records are small frozen pydantic models that hold store paths and content hashes, never pixel
arrays: tasks pass them between workers and cache them as JSON. Rows are the typed form of the
Parquet tables: their Arrow schema is derived from the fields (``synrail.storage.tables``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from synrail.rail.geometry import CameraGeometry
from synrail.sources.video_backgrounds import QuarantineRecord

SPLITS = ("train", "val", "test")

__all__ = ["SPLITS", "AnnotationRow", "BackgroundRecord", "ChunkRecord", "ClipAnnotationRow", "ClipImageRow",
           "ClipRecord", "GalleryRecord", "GallerySourceResult",
           "ImageRow", "InputReport", "ManifestAnnotationRow", "QuarantineRecord", "Record", "SequenceCamera",
           "SkipRow", "UnusedFrame", "VideoBackgrounds"]


class Record(BaseModel):
    """Base of every inter-stage record: frozen, so a cached result cannot be changed in place."""

    model_config = ConfigDict(frozen=True)


# -- backgrounds ------------------------------------------------------------------------------------
class BackgroundRecord(Record):
    """One background frame with its track area and camera, as the compose stage reads it."""

    background_id: str
    index: int
    split: str
    source: str
    path: str  # PNG, relative to the cache store
    sha256: str
    width: int
    height: int
    track_type: str
    condition: str
    geometry: CameraGeometry
    fog_beta: float
    airlight_bgr: tuple[float, float, float]
    illumination_bgr: tuple[float, float, float]
    sensor_noise: float
    rail_area: dict[str, Any]  # compressed RLE of the track area
    rail_area_px: int
    light_deg: tuple[float, float] | None = None  # sun azimuth, elevation when known (rendered scenes)
    source_url: str | None = None  # the video or image file a real frame came from
    frame_index: int | None = None  # the frame of that video, or the image's position in its sequence


class UnusedFrame(Record):
    """A sampled frame left out of the backgrounds, with the reason."""

    video: str  # the video's or image sequence's name below the footage root
    frame_index: int
    reason: str
    source_url: str = ""  # the video or image file


class SequenceCamera(Record):
    """The camera of one video or frame sequence, as solved from its frames (the card's table)."""

    sequence: str
    hfov_deg: float
    hfov_source: str  # "given", "sleepers" (estimated), "fallback" (configured, not estimable)
    hfov_sigma_deg: float | None = None  # uncertainty of a sleeper estimate
    height_m: float | None = None  # shared camera height (None: too few confident frames)
    height_given: bool = False
    pitch_deg: float | None = None
    offset_m: float | None = None
    gauge_mm: float = 1435.0
    frames_calibrated: int = 0  # confident frames that agreed on the shared camera
    notes: list[str] = []


class VideoBackgrounds(Record):
    """What the video stage made of one video: backgrounds, frames left out, or a quarantine row."""

    video: str
    records: list[BackgroundRecord]
    unused: list[UnusedFrame]
    quarantine: QuarantineRecord | None
    notes: list[str]
    camera: SequenceCamera | None = None


# -- gallery ----------------------------------------------------------------------------------------
class GalleryRecord(Record):
    """One obstacle cutout (RGBA PNG in the cache store) with its physical height."""

    cutout_id: str
    class_name: str
    source: str
    path: str  # RGBA PNG, relative to the cache store
    sha256: str
    height_m: float
    width_px: int
    height_px: int
    mask_px: int
    mask_score: float = 1.0  # the segmenter's quality estimate; 1.0 for drawn or shipped masks
    # provenance: the source image, the box (x0 y0 x1 y1, its pixels) cut from it, where the mask came from
    source_image: str = ""  # "" for a drawn (procedural) cutout
    source_box: tuple[float, float, float, float] | None = None
    mask_source: str = "render"  # render (drawn), annotation, rgba, sam, grabcut, ...
    height_m_range: tuple[float, float] | None = None  # the kind's real range; pasted heights stay in it


class SkipRow(Record):
    """An obstacle candidate of a real gallery source that was left out, with the reason."""

    source: str
    instance_key: str
    reason: str


class GallerySourceResult(Record):
    """What the gallery stage made of one real source."""

    records: list[GalleryRecord]
    skipped: list[SkipRow]
    quarantine: list[QuarantineRecord] = []  # image and mask files that cannot be decoded safely


class InputReport(Record):
    """Every input a build looked at and left out, with its reason (the card and manifests show it)."""

    videos: list[str] = []  # every video the build looked at, used or not
    quarantine: list[QuarantineRecord] = []
    unused_frames: list[UnusedFrame] = []
    skipped_obstacles: list[SkipRow] = []
    notes: list[str] = []
    cameras: list[SequenceCamera] = []  # one per video or frame sequence


# -- composition ------------------------------------------------------------------------------------
class ChunkRecord(Record):
    """Images ``first..stop-1`` as written by the compose stage: their two Parquet tables."""

    first: int
    stop: int
    images_path: str  # Parquet, relative to the output store
    annotations_path: str
    sha256: str  # of both tables together
    num_images: int
    num_annotations: int


class ImageRow(Record):
    """One composite image: a row of a chunk's images table and of ``manifest/images.parquet``."""

    image_id: str
    image_index: int
    split: str
    file_name: str
    width: int
    height: int
    background_id: str
    condition: str  # the background's condition, or the weather laid over it
    background_condition: str
    track_type: str
    num_annotations: int
    sha256: str
    quality: float | None
    attempts: int


class AnnotationRow(Record):
    """One obstacle instance: a row of a chunk's annotations table (the export contract's columns)."""

    image_id: str
    image_index: int
    instance: int
    class_name: str
    category_id: int  # 0-based index in cfg.classes (COCO adds 1)
    rle_counts: str
    rle_height: int
    rle_width: int
    bbox_x: int
    bbox_y: int
    bbox_w: int
    bbox_h: int
    area: int
    distance_m: float
    visibility: float
    truncated: bool
    occluded: bool
    height_m: float
    ground_u: int
    ground_v: int
    source: str
    cutout_id: str

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        """``(x, y, w, h)`` in pixels."""
        return self.bbox_x, self.bbox_y, self.bbox_w, self.bbox_h


class ManifestAnnotationRow(AnnotationRow):
    """An annotation row of ``manifest/annotations.parquet``: numbered across the dataset, with its split."""

    annotation_id: int
    split: str


# -- approach clips ---------------------------------------------------------------------------------
# Clip frames have tables of their own (subclasses of the stills' rows with the clip columns), so the
# stills' Parquet contract is unchanged; the export merges both into COCO, YOLO and the manifests.
class ClipImageRow(ImageRow):
    """One frame of an approach clip."""

    clip_id: str
    frame_in_clip: int
    advance_m: float  # how far the camera has moved along the track since the clip's first frame
    measured_advance_m: float | None = None  # real footage: the advance the ground's image motion says (None:
    # procedural clips, or a frame pair that did not correlate)


class ClipAnnotationRow(AnnotationRow):
    """One obstacle in one clip frame; ``track_id`` is the obstacle's id inside its clip."""

    clip_id: str
    frame_in_clip: int
    track_id: int
    ground_u_px: float  # the world point's exact projection (ground_u, ground_v round it)
    ground_v_px: float
    world_x_m: float  # the obstacle's fixed ground point, in the first frame's camera frame
    world_z_m: float
    along_m: float  # distance ahead of the camera along the track in this frame (falls by speed / fps)
    lateral_gauge: float | None = None  # real footage: the footprint across the tracked rails, gauges from the centre
    depth_residual_m: float | None = None  # real footage: depth from the rails' gap minus the frame geometry's


class ClipRecord(Record):
    """One approach clip as written by the sequences stage: its frames' two Parquet tables."""

    clip_index: int
    clip_id: str
    split: str
    frames: int
    fps: float
    speed_kmh: float
    event: bool  # an obstacle is on the track in the clip (the paper's clip event)
    first_image_index: int
    images_path: str  # Parquet of ClipImageRow, relative to the output store
    annotations_path: str  # Parquet of ClipAnnotationRow
    sha256: str
    num_annotations: int
    condition: str
    track_type: str
    geometry: CameraGeometry  # shared by every frame (see TrackPose); real footage: the first frame's
    rail_area: dict[str, Any]  # compressed RLE of the track area, the same in every frame (procedural)
    source: str = "procedural"  # or "video:<name>" / "frames:<name>"
    speed_source: str = "drawn"  # drawn (procedural), sidecar, or estimated (image motion along the rails)
    frame_rail_areas: list[dict[str, Any]] = []  # real footage: each frame's own track area (RLE)
    drift_along_m: float | None = None  # real footage: largest |measured - expected advance| over the frames
    drift_lateral_gauge: float | None = None  # largest spread of a track's footprint across the rails (gauges)
    drift_depth_m: float | None = None  # largest spread of a track's depth residual (rails' gap vs geometry)
    geometry_shift_gauge: float | None = None  # real footage: largest move (gauges) from the geometry's centre
                                               # line onto the tracked rails' of a shown footprint


class ClipRefusal(Record):
    """A stretch of a video that gave no clip (no speed, the track lost), with the reason."""

    video: str
    frame_index: int  # where the refused window starts (0 when the whole video is refused)
    reason: str


class VideoClips(Record):
    """What the real-clips stage made of one video or frame sequence."""

    video: str
    clips: list[ClipRecord]
    refusals: list[ClipRefusal]
    speed_kmh: float | None  # the sidecar's, or the whole video's estimate (each clip has its own window's)
    speed_source: str | None  # sidecar | estimated (None: no speed, the video refused)
    estimated_speed_kmh: float | None = None  # what the image motion says over the video (also beside a sidecar)
    estimated_sigma_kmh: float | None = None
    fps: float | None = None  # of its clips

"""The camera of one video or image sequence: lens, gauge, regions to ignore, and the frame as the
detector sees it.

A cab camera is fixed to its train, so these settings belong to a sequence, not a frame. They come
from config defaults (``backgrounds.video.*``) overridden per video by sidecar columns of the same
names. The order of operations on a frame is fixed:

1. undistort (OpenCV's ``k1 k2 p1 p2 [k3]`` model with the camera matrix ``hfov_deg`` gives: focal
   ``(W / 2) / tan(hfov / 2)``, principal point at the centre); the camera matrix is kept, so the
   undistorted frame has the same focal length and principal point;
2. crop ``ignore_bottom`` (a cab hood or dashboard) off the bottom;
3. centre-crop and resize to the dataset's image size;
4. for detection only, inpaint the ``ignore_regions`` (burnt-in HUD boxes), whose straight edges
   would otherwise pass for rails.

``FrameView`` follows the focal length and principal point through steps 2-3.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Track gauges in service (mm): metre, Cape, standard, Russian, Irish, Iberian, Indian broad gauge.
KNOWN_GAUGES_MM = (1000.0, 1067.0, 1435.0, 1520.0, 1524.0, 1600.0, 1668.0, 1676.0)
DISTORTION_COLUMNS = ("k1", "k2", "p1", "p2", "k3")
# Sidecar columns that set the camera (the names of ``CameraSettings`` fields, the distortion split up).
CAMERA_COLUMNS = ("hfov_deg", "gauge_mm", *DISTORTION_COLUMNS, "camera_height_m", "ignore_bottom",
                  "ignore_regions", "sleeper_spacing_m")

Polygon = tuple[tuple[float, float], ...]


class CameraSettings(BaseModel):
    """What is known about a sequence's camera and track (config defaults or one sidecar row)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hfov_deg: float | None = Field(default=None, gt=10, lt=170, description=(
        "horizontal field of view; unset: estimated from the sleepers, else fallback_hfov_deg"))
    fallback_hfov_deg: float = Field(default=60.0, gt=10, lt=170,
                                     description="used when hfov_deg is unset and the sleepers cannot tell")
    gauge_mm: float = Field(default=1435.0, description="track gauge, the ruler of every distance")
    distortion: tuple[float, ...] = Field(default=(), description="OpenCV k1 k2 p1 p2 [k3]; empty: none")
    camera_height_m: float | None = Field(default=None, gt=0.5, lt=10,
                                          description="height above the rail tops, when known")
    ignore_bottom: float = Field(default=0.0, ge=0, lt=0.6, description="share of the frame height (hood) cut off")
    ignore_regions: tuple[Polygon, ...] = Field(default=(), description=(
        "polygons (x, y in fractions of the frame) the detector must not look at, e.g. HUD boxes; "
        "two points make a box"))
    sleeper_spacing_m: float = Field(default=0.6, gt=0.3, lt=1.5,
                                     description="sleeper (or fastener) spacing; 0.65 on Indian broad gauge")

    @field_validator("gauge_mm")
    @classmethod
    def _known_gauge(cls, gauge: float) -> float:
        if not any(abs(gauge - known) < 0.5 for known in KNOWN_GAUGES_MM):
            raise ValueError(f"gauge_mm {gauge:g} is not a track gauge in service; "
                             f"one of {[int(g) for g in KNOWN_GAUGES_MM]}")
        return gauge

    @field_validator("distortion")
    @classmethod
    def _four_or_five(cls, coefficients: tuple[float, ...]) -> tuple[float, ...]:
        if len(coefficients) not in (0, 4, 5):
            raise ValueError(f"distortion takes k1 k2 p1 p2 [k3] (4 or 5 numbers), got {len(coefficients)}")
        return coefficients

    @field_validator("ignore_regions")
    @classmethod
    def _polygons_in_the_frame(cls, regions: tuple[Polygon, ...]) -> tuple[Polygon, ...]:
        for polygon in regions:
            if len(polygon) == 1 or not all(0 <= x <= 1 and 0 <= y <= 1 for x, y in polygon):
                raise ValueError("each ignore region is a box (2 points) or polygon (3+) with x, y in [0, 1]")
        return regions

    @property
    def gauge_m(self) -> float:
        """The gauge in metres."""
        return self.gauge_mm / 1000.0

    @property
    def hfov_for_lens(self) -> float:
        """The field of view that defines the camera matrix when nothing better is known."""
        return self.hfov_deg if self.hfov_deg is not None else self.fallback_hfov_deg


# -- sidecar cells ---------------------------------------------------------------------------------
def parse_regions(text: str) -> tuple[Polygon, ...]:
    """``"x y x y ...; x y x y ..."`` (fractions of the frame) -> polygons."""
    polygons = []
    for part in text.split(";"):
        numbers = [float(n) for n in part.replace(",", " ").split()]
        if not numbers:
            continue
        if len(numbers) % 2:
            raise ValueError(f"odd count of numbers in region {part.strip()!r}: expected x y pairs")
        polygons.append(tuple(zip(numbers[0::2], numbers[1::2], strict=True)))
    return tuple(polygons)


def _cell_number(column: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"column {column!r}: {text!r} is not a number") from None


def camera_overrides(cells: Mapping[str, str]) -> dict[str, Any]:
    """The ``CameraSettings`` fields a sidecar row sets (only the camera columns it fills in).

    Raises:
        ValueError: naming the column whose cell cannot be read.
    """
    overrides: dict[str, Any] = {}
    for column in ("hfov_deg", "gauge_mm", "camera_height_m", "ignore_bottom", "sleeper_spacing_m"):
        if cells.get(column):
            overrides[column] = _cell_number(column, cells[column])
    given = [c for c in DISTORTION_COLUMNS if cells.get(c)]
    if given:
        missing = [c for c in DISTORTION_COLUMNS[:4] if c not in given]
        if missing:
            raise ValueError(f"columns {missing}: lens distortion needs k1 k2 p1 p2 (k3 optional) together")
        overrides["distortion"] = tuple(_cell_number(c, cells[c]) for c in given)
    if cells.get("ignore_regions"):
        try:
            overrides["ignore_regions"] = parse_regions(cells["ignore_regions"])
        except ValueError as exc:
            raise ValueError(f"column 'ignore_regions': {exc}") from None
    return overrides


def settings_for(defaults: CameraSettings, cells: Mapping[str, str]) -> CameraSettings:
    """The defaults with a sidecar row's camera columns laid over them.

    Args:
        defaults: the config's camera settings.
        cells: one sidecar row, column name -> text.

    Returns:
        The validated settings.

    Raises:
        ValueError: naming the column that is unreadable or out of range.
    """
    overrides = camera_overrides(cells)
    try:
        settings = CameraSettings(**{**defaults.model_dump(), **overrides})
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "?"
        column = "k1..k3" if field == "distortion" else field
        raise ValueError(f"column {column!r}: {error['msg']}") from None
    if settings.distortion and settings.hfov_deg is None:
        raise ValueError("columns k1..k3: lens distortion needs hfov_deg (it defines the camera matrix), "
                         "in the same row or in the config")
    return settings


def check_camera_cells(cells: Mapping[str, str]) -> None:
    """Checks a sidecar row's camera cells on their own (what the config adds is checked later).

    Raises:
        ValueError: naming the column that is unreadable or out of range.
    """
    settings_for(CameraSettings(hfov_deg=60.0), cells)


# -- lens --------------------------------------------------------------------------------------------
def focal_from_hfov(width: int, hfov_deg: float) -> float:
    """The pinhole focal length, in pixels, for a horizontal field of view.

    Args:
        width: the image width in pixels.
        hfov_deg: the horizontal field of view.

    Returns:
        The focal length in pixels.
    """
    return (width / 2) / math.tan(math.radians(hfov_deg) / 2)


def hfov_from_focal(width: int, focal_px: float) -> float:
    """The horizontal field of view of a pinhole focal length (the inverse of ``focal_from_hfov``).

    Args:
        width: the image width in pixels.
        focal_px: the focal length in pixels.

    Returns:
        The horizontal field of view in degrees.
    """
    return math.degrees(2 * math.atan(width / 2 / focal_px))


def camera_matrix(width: int, height: int, hfov_deg: float) -> np.ndarray:
    """3x3 pinhole matrix: square pixels, principal point at the centre (OpenCV's pixel centres).

    Args:
        width: the image width.
        height: the image height.
        hfov_deg: the horizontal field of view.

    Returns:
        The float64 camera matrix.
    """
    f = focal_from_hfov(width, hfov_deg)
    return np.array([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1]], dtype=np.float64)


@functools.lru_cache(maxsize=8)
def _undistort_maps(width: int, height: int, hfov_deg: float, distortion: tuple[float, ...]
                    ) -> tuple[np.ndarray, np.ndarray]:
    k = camera_matrix(width, height, hfov_deg)
    return cv2.initUndistortRectifyMap(k, np.array(distortion), None, k, (width, height), cv2.CV_32FC2)


def undistort(image: np.ndarray, hfov_deg: float, distortion: tuple[float, ...]) -> np.ndarray:
    """The frame as an ideal pinhole with the same camera matrix would see it (maps cached per lens).

    Args:
        image: the frame.
        hfov_deg: the lens's horizontal field of view.
        distortion: OpenCV coefficients (k1, k2, p1, p2, k3 or a prefix); empty: returned unchanged.

    Returns:
        The undistorted frame, the same size.
    """
    if not distortion:
        return image
    height, width = image.shape[:2]
    map1, map2 = _undistort_maps(width, height, float(hfov_deg), tuple(float(d) for d in distortion))
    return cv2.remap(image, map1, map2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)


def distort(image: np.ndarray, hfov_deg: float, distortion: tuple[float, ...]) -> np.ndarray:
    """The inverse of ``undistort``: what a lens with these coefficients makes of a pinhole image
    (for synthetic test footage and checks).

    Args:
        image: the pinhole image.
        hfov_deg: the lens's horizontal field of view.
        distortion: OpenCV coefficients; empty: returned unchanged.

    Returns:
        The distorted image, the same size.
    """
    if not distortion:
        return image
    height, width = image.shape[:2]
    k = camera_matrix(width, height, hfov_deg)
    grid = np.stack(np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64)), axis=-1)
    # Each distorted pixel shows the pinhole pixel its undistorted position names.
    ideal = cv2.undistortPoints(grid.reshape(-1, 1, 2), k, np.array(distortion), R=None, P=k,
                                criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 40, 1e-6))
    maps = ideal.reshape(height, width, 2).astype(np.float32)
    return cv2.remap(image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)


# -- the frame the detector sees ------------------------------------------------------------------------
@dataclass(frozen=True)
class FrameView:
    """Intrinsics of a prepared frame, in its own pixels."""

    width: int
    height: int
    focal_px: float
    cx: float
    cy: float

    @property
    def hfov_deg(self) -> float:
        """The horizontal field of view this focal length gives at this width."""
        return hfov_from_focal(self.width, self.focal_px)


def fit_box(width: int, height: int, out_width: int, out_height: int) -> tuple[int, int, int, int]:
    """(x0, y0, w, h) of the centre crop with the output's aspect ratio.

    Args:
        width: the source width.
        height: the source height.
        out_width: the output width.
        out_height: the output height.

    Returns:
        The crop box in source pixels.
    """
    if width * out_height > height * out_width:  # too wide
        new_w = round(height * out_width / out_height)
        return (width - new_w) // 2, 0, new_w, height
    if width * out_height < height * out_width:  # too tall
        new_h = round(width * out_height / out_width)
        return 0, (height - new_h) // 2, width, new_h
    return 0, 0, width, height


@dataclass(frozen=True)
class PreparedFrame:
    """A source frame made ready: the background, what the detector sees, and the principal point after the crop."""

    image: np.ndarray          # the background: undistorted, hood cropped, fit to the output size
    detect_image: np.ndarray   # the same with the ignore regions inpainted (what the detector sees)
    scale: float               # output pixels per source pixel
    cx: float                  # principal point in output pixels
    cy: float

    def view(self, source_focal_px: float) -> FrameView:
        """Intrinsics of the prepared frame for a focal length of the source frame."""
        height, width = self.image.shape[:2]
        return FrameView(width, height, source_focal_px * self.scale, self.cx, self.cy)


def prepare_frame(image: np.ndarray, settings: CameraSettings, out_width: int, out_height: int) -> PreparedFrame:
    """Undistort, cut the hood off, fit to the output size, and mask the ignore regions.

    The source's principal point (its centre) is followed through the crop and resize, so a frame
    whose bottom was cut keeps its true horizon geometry.

    Args:
        image: the source frame.
        settings: the video's camera: lens, hood share, ignore regions.
        out_width: the dataset's image width.
        out_height: the dataset's image height.

    Returns:
        The prepared frame.
    """
    height, width = image.shape[:2]
    image = undistort(image, settings.hfov_for_lens, settings.distortion)
    kept_rows = max(1, round(height * (1 - settings.ignore_bottom)))
    x0, y0, w, h = fit_box(width, kept_rows, out_width, out_height)
    crop = image[y0:y0 + h, x0:x0 + w]
    interpolation = cv2.INTER_AREA if w > out_width else cv2.INTER_LINEAR
    fitted = cv2.resize(crop, (out_width, out_height), interpolation=interpolation)
    scale = out_width / w
    # Pixel centres: source coordinate s maps to (s - x0 + 0.5) * scale - 0.5.
    cx = ((width - 1) / 2 - x0 + 0.5) * scale - 0.5
    cy = ((height - 1) / 2 - y0 + 0.5) * scale - 0.5
    regions = _region_mask(settings.ignore_regions, width, height, x0, y0, scale, out_width, out_height)
    detect_image = cv2.inpaint(fitted, regions, 5, cv2.INPAINT_TELEA) if regions.any() else fitted
    return PreparedFrame(fitted, detect_image, scale, cx, cy)


def _region_mask(regions: tuple[Polygon, ...], width: int, height: int, x0: int, y0: int, scale: float,
                 out_width: int, out_height: int) -> np.ndarray:
    """uint8 mask of the ignore regions in output pixels (slightly grown: edges must vanish too)."""
    mask = np.zeros((out_height, out_width), dtype=np.uint8)
    for polygon in regions:
        points = np.array(polygon, dtype=np.float64)
        if len(points) == 2:  # a box from two corners
            (xa, ya), (xb, yb) = points
            points = np.array([[xa, ya], [xb, ya], [xb, yb], [xa, yb]])
        pixels = ((points * [width, height] - [x0, y0]) * scale).round().astype(np.int32)
        cv2.fillPoly(mask, [pixels], 255)
    return cv2.dilate(mask, np.ones((5, 5), np.uint8)) if mask.any() else mask

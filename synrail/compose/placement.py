"""Where an obstacle stands on the track, and how big it is there (the paper's section 3.4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synrail.rail.geometry import CameraGeometry


@dataclass(frozen=True)
class GroundPoint:
    """Where an obstacle touches the ground: its pixel and its distance from the camera (m)."""

    u: int  # column of the ground-contact pixel
    v: int  # row of the ground-contact pixel
    distance_m: float


def track_rows(track_mask: np.ndarray) -> dict[int, np.ndarray]:
    """Row -> the columns of the track area in that row (rows without track left out)."""
    rows, cols = np.nonzero(track_mask)
    if rows.size == 0:
        return {}
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    return {int(rows[s]): cols[s:e] for s, e in zip(starts, np.r_[starts[1:], rows.size], strict=True)}


def sample_ground_point(geometry: CameraGeometry, rows: dict[int, np.ndarray], distance_range: tuple[float, float],
                        rng: np.random.Generator) -> GroundPoint | None:
    """A pixel inside the track area at a distance drawn uniformly from ``distance_range``.

    Drawing the distance, not the pixel, keeps far obstacles as common as near ones (the paper's
    Table 5 suffers from too few distant obstacles).

    Args:
        geometry: the background's camera and track.
        rows: the track area's columns per image row (``track_rows``).
        distance_range: (near, far) in metres.
        rng: the image's placement stream.

    Returns:
        The ground point, or None when the drawn distance has no track row in view (beyond the image or the mask).
    """
    distance = rng.uniform(*distance_range)
    z = float(geometry.ground_distance_to_z(distance))
    _, v = geometry.project(geometry.track_centre_x(z), 0.0, z)
    if not np.isfinite(v):
        return None
    row = int(np.rint(v))
    cols = rows.get(row)
    if cols is None:
        return None
    col = int(cols[rng.integers(cols.size)])
    return GroundPoint(u=col, v=row, distance_m=float(geometry.distance_m(col, row)))


def metric_pixel_height(geometry: CameraGeometry, point: GroundPoint, height_m: float) -> float:
    """Pixel height from the camera model: the object's foot and head projected exactly.

    Args:
        geometry: the background's camera.
        point: where the object stands.
        height_m: the object's physical height.

    Returns:
        The object's height in pixels.
    """
    return geometry.object_pixel_height(point.u, point.v, height_m)


def linear_pixel_width(track_width_px: int, alpha: float, beta: float) -> float:
    """The paper's eq. 1, W = alpha * w + beta, with w the track area's width in that row.

    Args:
        track_width_px: the track area's width in the row of the ground point.
        alpha: the slope.
        beta: the offset, in pixels.

    Returns:
        The object's width in pixels.
    """
    return alpha * track_width_px + beta

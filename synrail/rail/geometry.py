"""Pinhole camera above a ground plane, and the ego track on that plane.

Conventions (used by every stage):
- World: X to the right, Y up, Z forward along the track; the ground (rail-top) plane is Y = 0 and
  the camera sits at (0, height_m, 0), pitched down by ``pitch_rad`` (up where negative), with no roll or yaw.
- Image: ``u`` is the column, ``v`` the row; integer (u, v) is a pixel centre (OpenCV's convention).
- The ego track's centreline is ``X(Z) = track_offset_m + 0.5 * track_curvature * Z**2`` (the
  small-angle form of a circular curve of radius 1 / curvature). Its area (the paper's "railway
  area") spans both rails, heads included: ``|X - X(Z)| <= gauge_m / 2 + rail_head_m``.
- Distance of a ground point is the Euclidean distance from the camera centre to it.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

STANDARD_GAUGE_M = 1.435
RAIL_HEAD_WIDTH_M = 0.072


class CameraGeometry(BaseModel):
    """Camera intrinsics and pose, plus the ego track it looks along."""

    model_config = ConfigDict(frozen=True)

    width: int = Field(gt=0)
    height: int = Field(gt=0)
    focal_px: float = Field(gt=0)
    cx: float
    cy: float
    height_m: float = Field(gt=0, description="camera height above the rail-top plane")
    pitch_rad: float = Field(gt=-math.pi / 2, lt=math.pi / 2,
                             description="downward tilt of the optical axis over the rail-top plane (negative: up)")
    track_offset_m: float = 0.0
    track_curvature: float = 0.0
    gauge_m: float = STANDARD_GAUGE_M
    rail_head_m: float = RAIL_HEAD_WIDTH_M
    track_max_z_m: float = Field(default=300.0, gt=0, description="how far the track area runs")

    @classmethod
    def from_fov(cls, width: int, height: int, hfov_deg: float, height_m: float, pitch_deg: float,
                 **track: float) -> CameraGeometry:
        """A camera with a centred principal point, from its horizontal field of view.

        Args:
            width: the image width.
            height: the image height.
            hfov_deg: the horizontal field of view.
            height_m: the camera's height above the rails.
            pitch_deg: the downward pitch.
            **track: the track fields (``track_offset_m``, ``track_curvature``, ``gauge_m``, ...).

        Returns:
            The geometry.
        """
        focal = (width / 2) / math.tan(math.radians(hfov_deg) / 2)
        return cls(width=width, height=height, focal_px=focal, cx=(width - 1) / 2, cy=(height - 1) / 2,
                   height_m=height_m, pitch_rad=math.radians(pitch_deg), **track)

    # -- projection -------------------------------------------------------------------------
    def to_camera(self, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, ...]:
        """World points -> camera coordinates (x right, y down, z along the optical axis).

        Args:
            x: world X (right), metres.
            y: world Y (up from the ground), metres.
            z: world Z (ahead), metres.

        Returns:
            (x, y, z) in camera coordinates.
        """
        s, c = math.sin(self.pitch_rad), math.cos(self.pitch_rad)
        dy = np.asarray(y, dtype=np.float64) - self.height_m
        z = np.asarray(z, dtype=np.float64)
        return np.asarray(x, dtype=np.float64), -dy * c - z * s, -dy * s + z * c

    def project(self, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World points -> pixel coordinates (u, v). Points behind the camera give NaN.

        Args:
            x: world X, metres.
            y: world Y, metres.
            z: world Z, metres.

        Returns:
            (u, v) in pixels.
        """
        xc, yc, zc = self.to_camera(x, y, z)
        with np.errstate(divide="ignore", invalid="ignore"):
            zc = np.where(zc > 1e-9, zc, np.nan)
            return self.cx + self.focal_px * xc / zc, self.cy + self.focal_px * yc / zc

    def ground_point(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pixels -> (X, Z) on the ground plane; NaN at or above the horizon.

        Args:
            u: pixel columns.
            v: pixel rows.

        Returns:
            (X, Z) in metres.
        """
        s, c = math.sin(self.pitch_rad), math.cos(self.pitch_rad)
        ru = (np.asarray(u, dtype=np.float64) - self.cx) / self.focal_px
        rv = (np.asarray(v, dtype=np.float64) - self.cy) / self.focal_px
        descent = rv * c + s  # downward component of the ray per unit optical depth
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(descent > 1e-9, self.height_m / descent, np.nan)
        return t * ru, t * (c - rv * s)

    def distance_m(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Camera centre -> ground point seen at pixel (u, v), in metres.

        Args:
            u: pixel columns.
            v: pixel rows.

        Returns:
            The distances; NaN at or above the horizon.
        """
        x, z = self.ground_point(u, v)
        return np.sqrt(x * x + z * z + self.height_m**2)

    def horizon_v(self) -> float:
        """Row of the horizon line (ground points infinitely far away)."""
        return self.cy - self.focal_px * math.tan(self.pitch_rad)

    def ground_distance_to_z(self, distance_m: np.ndarray) -> np.ndarray:
        """Forward coordinate Z of a point on the track centreline at a given camera distance."""
        d = np.asarray(distance_m, dtype=np.float64)
        return np.sqrt(np.maximum(d * d - self.height_m**2, 0.0))

    def object_pixel_height(self, u: float, v: float, height_m: float) -> float:
        """Image height in pixels of an upright object of ``height_m`` standing at pixel (u, v).

        Projects the object's foot and head exactly; for small pitch this is the familiar
        ``height_m * focal_px / distance``.

        Args:
            u: the ground-contact column.
            v: the ground-contact row.
            height_m: the object's height.

        Returns:
            The height in pixels.
        """
        x, z = self.ground_point(np.array([u]), np.array([v]))
        _, v_top = self.project(x, np.array([height_m]), z)
        return float(v - v_top[0])

    # -- the ego track ----------------------------------------------------------------------
    def track_centre_x(self, z: np.ndarray) -> np.ndarray:
        """The track centre's lateral position X (m) at distances ``z``: offset plus the parabolic curve."""
        z = np.asarray(z, dtype=np.float64)
        return self.track_offset_m + 0.5 * self.track_curvature * z * z

    @property
    def track_half_width_m(self) -> float:
        """Half the track area's width: half the gauge plus one rail head."""
        return self.gauge_m / 2 + self.rail_head_m

    def track_mask(self) -> np.ndarray:
        """Boolean H x W mask of the ego track area, tested at pixel centres."""
        rows = np.arange(self.height, dtype=np.float64)[:, None]
        cols = np.arange(self.width, dtype=np.float64)[None, :]
        first_row = max(0, int(math.floor(self.horizon_v())) + 1)
        mask = np.zeros((self.height, self.width), dtype=bool)
        if first_row >= self.height:
            return mask
        x, z = self.ground_point(cols, rows[first_row:])
        with np.errstate(invalid="ignore"):
            inside = (np.abs(x - self.track_centre_x(z)) <= self.track_half_width_m) & (z > 0)
            inside &= z <= self.track_max_z_m
        mask[first_row:] = inside
        return mask


# -- a camera advanced along the track ---------------------------------------------------------------
class TrackPose(BaseModel):
    """The camera moved ``advance_m`` metres along the ego track from where ``geometry`` was set up.

    The world frame is the first frame's camera frame (X right, Z forward on the ground). Points are
    carried in track-aligned coordinates, the same ones the procedural renderer paints sleepers
    with: ``lateral = X - X(Z)`` and ``along`` = arc length of the centreline to the foot of the
    normal. The camera keeps its offset from the centreline, so in its own frame the track is again
    ``X(Z) = offset + curvature * Z**2 / 2``: every frame of a clip shares one ``CameraGeometry`` and
    one track mask, and a world point only changes its ``along`` by ``-advance_m``.
    """

    model_config = ConfigDict(frozen=True)

    advance_m: float = 0.0
    curvature: float = 0.0
    offset_m: float = 0.0  # the geometry's track_offset_m

    def _centre_x(self, z: np.ndarray) -> np.ndarray:
        return self.offset_m + 0.5 * self.curvature * z * z

    def _arc(self, w: np.ndarray) -> np.ndarray:
        k = self.curvature
        if abs(k) < 1e-12:
            return w
        q = k * w
        return 0.5 * (w * np.sqrt(1 + q * q) + np.arcsinh(q) / k)

    def _arc_inverse(self, along: np.ndarray) -> np.ndarray:
        w = np.asarray(along, dtype=np.float64).copy()
        if abs(self.curvature) < 1e-12:
            return w
        for _ in range(6):  # Newton on a smooth monotone function: converged to 1e-12 m in 3-4 steps
            w = w - (self._arc(w) - along) / np.sqrt(1 + (self.curvature * w) ** 2)
        return w

    def _to_track(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lateral = x - self._centre_x(z)
        return self._arc(z + self.curvature * z * lateral), lateral

    def _from_track(self, along: np.ndarray, lateral: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = self._arc_inverse(along) / (1 + self.curvature * lateral)
        return self._centre_x(z) + lateral, z

    def to_camera(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World ground coordinates -> this camera's ground coordinates (x right, z forward).

        Args:
            x: world lateral coordinates, metres.
            z: world forward coordinates, metres.

        Returns:
            ``(x, z)`` in this camera's ground frame.
        """
        along, lateral = self._to_track(np.asarray(x, dtype=np.float64), np.asarray(z, dtype=np.float64))
        return self._from_track(along - self.advance_m, lateral)

    def to_world(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This camera's ground coordinates -> world ground coordinates.

        Args:
            x: lateral coordinates in this camera's ground frame, metres.
            z: forward coordinates in this camera's ground frame, metres.

        Returns:
            ``(x, z)`` in the world (the first frame's camera) ground frame.
        """
        along, lateral = self._to_track(np.asarray(x, dtype=np.float64), np.asarray(z, dtype=np.float64))
        return self._from_track(along + self.advance_m, lateral)

    def ahead_m(self, x: float, z: float) -> float:
        """How far along the track the world ground point (x, z) lies ahead of this camera.

        Args:
            x: world lateral coordinate, metres.
            z: world forward coordinate, metres.

        Returns:
            The distance along the track, metres (negative behind the camera).
        """
        along, _ = self._to_track(np.float64(x), np.float64(z))
        return float(along) - self.advance_m

    @classmethod
    def along(cls, geometry: CameraGeometry, advance_m: float) -> TrackPose:
        """The pose ``advance_m`` metres along ``geometry``'s track.

        Args:
            geometry: the first frame's camera.
            advance_m: how far the train has moved along the track, metres.

        Returns:
            The moved camera's pose.
        """
        return cls(advance_m=advance_m, curvature=geometry.track_curvature, offset_m=geometry.track_offset_m)


def track_point_xz(geometry: CameraGeometry, along_m: float, lateral_m: float) -> tuple[float, float]:
    """World ground coordinates of a point beside the track centreline.

    Args:
        geometry: the first frame's camera (its track defines the centreline).
        along_m: how far ahead of the first frame's camera, metres.
        lateral_m: offset from the centreline, metres (positive right).

    Returns:
        ``(x, z)`` in the world ground frame.
    """
    return float(geometry.track_centre_x(along_m)) + lateral_m, along_m


def reproject_ground_point(geometry: CameraGeometry, pose: TrackPose, world_xz: tuple[float, float]
                           ) -> tuple[float, float, float]:
    """Where a world ground point appears from a moved camera.

    Args:
        geometry: the camera's intrinsics and mounting (shared by every frame of a clip).
        pose: the moved camera.
        world_xz: the world ground point, metres.

    Returns:
        Sub-pixel ``(u, v)`` and the camera distance; NaN pixels when it is behind the camera.
    """
    x, z = pose.to_camera(world_xz[0], world_xz[1])
    u, v = geometry.project(np.array([x]), np.array([0.0]), np.array([z]))
    return float(u[0]), float(v[0]), float(math.sqrt(x * x + z * z + geometry.height_m**2))


def back_project_to_world(geometry: CameraGeometry, pose: TrackPose, u: float, v: float) -> tuple[float, float]:
    """The world ground point seen at a pixel from a moved camera (the inverse of ``reproject_ground_point``).

    Args:
        geometry: the camera's intrinsics and mounting.
        pose: the moved camera.
        u: pixel column.
        v: pixel row (below the horizon).

    Returns:
        ``(x, z)`` in the world ground frame, metres.
    """
    x, z = geometry.ground_point(np.array([u]), np.array([v]))
    wx, wz = pose.to_world(x, z)
    return float(wx[0]), float(wz[0])

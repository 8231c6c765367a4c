"""Focal length from the sleepers: the track is its own calibration target.

Sleepers lie at a regular spacing ``s`` along the track. For a camera at height ``h`` pitched down
by ``p``, a ground point at distance ``Z`` is seen ``t = v - v_horizon`` rows below the horizon with

    Z = h f / (t cos^2 p) - h tan p,

so ``1 / t`` is linear in ``Z``: the sleepers are evenly spaced in ``1 / t``, with period
``s cos^2 p / (h f)``. The gauge fixes the height without the focal length (the rail gap grows by
``g = G cos p / h`` pixels per row, ``G`` the rail-centre distance), so in the unit
``w = (G / g) / t`` the sleepers repeat every ``s cos p / f``: the dominant frequency of the
brightness profile along the track centre, as a function of ``w``, is ``f / (s cos p)``.

The profile is the mean of a strip between the rails on each row (a Lomb-Scargle periodogram takes
the uneven spacing of rows in ``w``); the spectra of a sequence's frames are averaged, so the
sleepers add up while ballast texture does not. The estimate's uncertainty is the spread of the
frames' own peaks (robust, over the root of their count), or the width of the peak for one frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from scipy.signal import lombscargle

from synrail.rail.detect import TrackDetection
from synrail.rail.geometry import RAIL_HEAD_WIDTH_M

HFOV_SEARCH_DEG = (25.0, 140.0)   # fields of view the search considers
MIN_GAP_PX = 10.0                 # rows where the rails are closer carry too few pixels per sleeper
MIN_ROWS = 40
STRIP_SHARE = 0.6                 # of the rail gap, centred between the rails (clear of the rails)
MIN_PROMINENCE = 6.0              # averaged peak power / median power of the band
FRAME_PROMINENCE = 15.0           # one frame's own peak: noise alone reaches ~10 among 1500 frequencies
MAX_RELATIVE_SIGMA = 0.1
MIN_AGREEING_SHARE = 0.25         # of the frames with a profile, whose own peak must match the sequence's
_FREQUENCIES = 1500

NOT_ENOUGH_TRACK = "too little track seen to count sleepers"
NO_SLEEPER_PERIOD = "no regular sleeper pattern along the track"
FRAMES_DISAGREE = "the frames' sleeper periods disagree"
IMPLAUSIBLE_FOCAL = "the sleeper period implies a field of view out of range"


@dataclass(frozen=True)
class FocalEstimate:
    """The focal length (pixels of the frames) from the sleepers, or why there is none."""

    focal_px: float | None
    sigma_px: float | None
    frames: int                 # frames whose own peak agreed with the sequence's
    prominence: float
    reason: str | None = None


@dataclass(frozen=True)
class SleeperProfile:
    """Brightness between the rails per row against ``w`` = (G / g) / t, where sleepers repeat with a period."""

    w: np.ndarray       # (G / g) / t of each row
    value: np.ndarray   # detrended, normalised brightness between the rails


def sleeper_profile(grey: np.ndarray, detection: TrackDetection, *, gauge_m: float,
                    rail_head_m: float = RAIL_HEAD_WIDTH_M) -> SleeperProfile | None:
    """Brightness along the track centre between the rails, against ``w``; None for too few rows.

    Args:
        grey: H x W greyscale frame, prepared (undistorted, cropped) like the detection.
        detection: the rails found on it.
        gauge_m: the track gauge, in metres.
        rail_head_m: the rail head's width, in metres (gauge + head = distance between rail centres).

    Returns:
        The profile over the rows at least 10 px between the rails, or None when fewer than 40 rows are.
    """
    height = grey.shape[0]
    rows = np.arange(detection.top_row, height, dtype=np.float64)
    gap = detection.gap_px(rows)
    rows = rows[gap >= MIN_GAP_PX]
    if rows.size < MIN_ROWS:
        return None
    gap_slope = detection.right_fit.b - detection.left_fit.b  # rail gap growth per row
    t = rows - detection.horizon_v
    offsets = np.linspace(-STRIP_SHARE / 2, STRIP_SHARE / 2, 15)
    map_x = (detection.centre_x(rows)[:, None] + offsets[None, :] * detection.gap_px(rows)[:, None]).astype(np.float32)
    map_y = np.repeat(rows[:, None], offsets.size, axis=1).astype(np.float32)
    strip = cv2.remap(grey.astype(np.float32), map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    # The median across the strip ignores a stray stone or a rail edge the strip grazes.
    value = np.median(strip, axis=1)
    w = (gauge_m + rail_head_m) / gap_slope / t
    return SleeperProfile(w, _detrended(w, value))


def _detrended(w: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Profile minus its slow trend (light falloff, fog), scaled to unit spread."""
    span = w.max() - w.min()
    basis = np.polynomial.chebyshev.chebvander((w - w.min()) / max(span, 1e-12) * 2 - 1, 3)
    coef, *_ = np.linalg.lstsq(basis, value, rcond=None)
    residual = value - basis @ coef
    spread = float(np.std(residual))
    return residual / spread if spread > 0 else residual


def _spectrum(profile: SleeperProfile, frequencies: np.ndarray) -> np.ndarray:
    """Normalised Lomb-Scargle power at ``frequencies`` (cycles per unit ``w``); none where the
    profile is flat (a bed crushed black: nothing to normalise by)."""
    if not np.ptp(profile.value) > 0:
        return np.zeros_like(frequencies, dtype=np.float64)
    return lombscargle(profile.w, profile.value - profile.value.mean(), 2 * np.pi * frequencies, normalize=True)


def estimate_focal_from_sleepers(frames: Sequence[tuple[np.ndarray, TrackDetection]], *, width: int, cy: float,
                                 gauge_m: float, spacing_m: float) -> FocalEstimate:
    """The focal length the sleepers of a sequence's frames imply.

    Args:
        frames: (greyscale frame, its detection) of one camera, prepared (undistorted, cropped).
        width: frame width in pixels (bounds the search by ``HFOV_SEARCH_DEG``).
        cy: principal point row (the pitch follows from it, the horizon and the focal length).
        gauge_m: the track gauge.
        spacing_m: the sleeper spacing.

    Returns:
        The estimate with its uncertainty, or a reason when the sleepers cannot tell.
    """
    profiles = [sleeper_profile(grey, detection, gauge_m=gauge_m) for grey, detection in frames]
    horizon = float(np.median([d.horizon_v for _, d in frames])) if frames else cy
    return focal_from_profiles(profiles, width=width, cy=cy, horizon_v=horizon, spacing_m=spacing_m)


def focal_from_profiles(profiles: Sequence[SleeperProfile | None], *, width: int, cy: float, horizon_v: float,
                        spacing_m: float) -> FocalEstimate:
    """``estimate_focal_from_sleepers`` on profiles measured beforehand (``sleeper_profile``), so a
    stage need not keep its frames; ``horizon_v`` is the sequence's (it sets the pitch).

    Args:
        profiles: one per frame of one camera; None (too few rows) is skipped.
        width: frame width in pixels (bounds the search by ``HFOV_SEARCH_DEG``).
        cy: principal point row.
        horizon_v: the sequence's horizon row.
        spacing_m: the sleeper spacing, in metres.

    Returns:
        The focal length in pixels with its uncertainty, or None and the reason the sleepers cannot tell.
    """
    profiles = [p for p in profiles if p is not None]
    if not profiles:
        return FocalEstimate(None, None, 0, 0.0, NOT_ENOUGH_TRACK)
    f_low, f_high = (width / 2 / math.tan(math.radians(h) / 2) for h in HFOV_SEARCH_DEG[::-1])
    # Frequencies in the w unit: f / (s cos p); cos p >= 0.9 for any cab camera, searched in full.
    frequencies = np.geomspace(f_low / spacing_m, f_high / spacing_m / 0.9, _FREQUENCIES)
    spectra = np.array([_spectrum(p, frequencies) for p in profiles])
    mean = spectra.mean(axis=0)
    peak = int(np.argmax(mean))
    prominence = float(mean[peak] / max(np.median(mean), 1e-12))
    if prominence < MIN_PROMINENCE:
        return FocalEstimate(None, None, 0, prominence, NO_SLEEPER_PERIOD)
    to_focal = _focal_from_frequency(spacing_m, cy, horizon_v)
    own = _own_peaks(spectra, frequencies, peak)
    focal = to_focal(_refined_peak(mean, frequencies, peak))
    resolution = _peak_halfwidth(mean, frequencies, peak) / frequencies[peak] * focal
    if len(own) >= 3:
        focals = np.array([to_focal(f) for f in own])
        spread = 1.4826 * float(np.median(np.abs(focals - np.median(focals))))
        sigma = max(spread, resolution) / math.sqrt(len(own))
    else:
        sigma = resolution
    if len(own) < MIN_AGREEING_SHARE * len(profiles) or sigma > MAX_RELATIVE_SIGMA * focal:
        return FocalEstimate(None, sigma, len(own), prominence, FRAMES_DISAGREE)
    if not f_low <= focal <= f_high:  # a steep pitch from a wrong horizon can take it out of range
        return FocalEstimate(None, sigma, len(own), prominence, IMPLAUSIBLE_FOCAL)
    return FocalEstimate(focal, sigma, len(own), prominence)


def _focal_from_frequency(spacing_m: float, cy: float, horizon_v: float):
    """frequency (cycles per w) -> focal length, solving ``f = nu s cos(atan((cy - v_h) / f))``."""
    def focal(frequency: float) -> float:
        f = frequency * spacing_m
        for _ in range(5):  # converges in a couple of steps: cos p barely depends on f
            f = frequency * spacing_m * math.cos(math.atan2(cy - horizon_v, f))
        return f
    return focal


def _refined_peak(power: np.ndarray, frequencies: np.ndarray, peak: int) -> float:
    """Parabolic interpolation of the peak on the log-frequency grid."""
    if 0 < peak < power.size - 1:
        before, at, after = power[peak - 1:peak + 2]
        curvature = before - 2 * at + after
        if curvature < 0:
            shift = float(np.clip(0.5 * (before - after) / curvature, -0.5, 0.5))
            step = math.log(frequencies[1] / frequencies[0])
            return float(frequencies[peak] * math.exp(shift * step))
    return float(frequencies[peak])


def _own_peaks(spectra: np.ndarray, frequencies: np.ndarray, peak: int) -> list[float]:
    """Each frame's strongest frequency within 10 % of the sequence peak, if it stands out there."""
    near = np.abs(np.log(frequencies / frequencies[peak])) <= math.log(1.1)
    own = []
    for spectrum in spectra:
        local = np.where(near, spectrum, -1.0)
        best = int(np.argmax(local))
        if spectrum[best] >= FRAME_PROMINENCE * np.median(spectrum) and 0 < best < len(spectrum) - 1 \
                and local[best] >= local[best - 1] and local[best] >= local[best + 1]:
            own.append(_refined_peak(spectrum, frequencies, best))
    return own


def _peak_halfwidth(power: np.ndarray, frequencies: np.ndarray, peak: int) -> float:
    """Half width at half maximum of the peak (in frequency units)."""
    half = power[peak] / 2
    low = peak
    while low > 0 and power[low] > half:
        low -= 1
    high = peak
    while high < power.size - 1 and power[high] > half:
        high += 1
    return 0.5 * float(frequencies[high] - frequencies[low])

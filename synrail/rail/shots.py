"""Where a sequence of frames cuts from one shot to another.

A video or a folder of frames is read as one camera's sequence: each frame's rails lead the search
in the next, the camera's mount is learned from its frames, and one camera is solved for them all.
That holds within a shot. Footage often cuts (a cab-ride compilation, a recording stopped and
started, day clips between night ones), and a folder may hold unrelated stills (a RailSem19-style
dump): there the last frame's rails say nothing about this frame's, and rails "vanishing" where the
previous still showed them are no obstacle. The sequence is therefore cut into shots where
consecutive frames stop looking alike, and each shot is followed and solved on its own.

Frames of one shot, taken seconds apart by a camera fixed to the vehicle, keep their colours (the
same line, light and weather) and their coarse layout (sky, hood, the track's place): a small
thumbnail's hue-saturation histogram and its grey levels correlate closely between them. Measured
on cab footage sampled 0.5-10 s apart: histogram correlation 0.72 and up, both correlations
together 1.56 and up (a stationary camera watching moving animals 1.43, with its colours at 0.92);
between unrelated RailSem19 stills at most 0.73 and 1.38 (``benchmarks/shots.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

_THUMBNAIL = (64, 36)      # width, height: coarse layout, free of texture and noise
_HISTOGRAM_BINS = (16, 16)  # hue, saturation
# A thumbnail whose mean saturation is below this (of 255) has no colours to compare (infrared,
# greyscale footage): its grey levels stand in for them, and a grey frame never matches a coloured one.
_MIN_SATURATION = 12.0
_GREY_BINS = 32
# Same shot: colours alike (histogram correlation) and, unless the colours alone match closely,
# the layout too (the two correlations together).
SAME_COLOURS = 0.85
SAME_COLOURS_AND_LAYOUT = 1.5
# A frame flatter than this (grey-level standard deviation of the thumbnail: a black frame, a
# tunnel's dark, a lens cap) shows nothing to compare; it neither cuts nor stands for its shot.
_MIN_CONTRAST = 4.0


@dataclass(frozen=True)
class ShotSignature:
    """What a frame is compared by: its thumbnail's hue-saturation histogram and grey levels."""

    histogram: np.ndarray  # float32, normalised: hue-saturation, or grey levels for a colourless frame
    grey: np.ndarray       # float32 thumbnail
    colourless: bool       # infrared or greyscale: ``histogram`` holds grey levels

    @property
    def comparable(self) -> bool:
        """Whether the frame shows enough to be compared (not black or flat)."""
        return float(self.grey.std()) >= _MIN_CONTRAST

    def likeness(self, other: ShotSignature) -> tuple[float, float]:
        """(histogram correlation, grey-level correlation) with another frame's signature, each -1 to 1;
        a colourless frame's colours correlate 0 with a coloured one's."""
        colours = (float(cv2.compareHist(self.histogram, other.histogram, cv2.HISTCMP_CORREL))
                   if self.colourless == other.colourless else 0.0)
        a, b = self.grey - self.grey.mean(), other.grey - other.grey.mean()
        layout = float((a * b).sum() / max(np.sqrt((a * a).sum() * (b * b).sum()), 1e-6))
        return colours, layout


def shot_signature(image_bgr: np.ndarray) -> ShotSignature:
    """The frame's signature for ``same_shot``.

    Args:
        image_bgr: the frame, H x W x 3 BGR (or H x W grey).

    Returns:
        Its signature (a few kB).
    """
    image = image_bgr if image_bgr.ndim == 3 else cv2.cvtColor(image_bgr, cv2.COLOR_GRAY2BGR)
    small = cv2.resize(image, _THUMBNAIL, interpolation=cv2.INTER_AREA)
    hsv = cv2.cvtColor(small, cv2.COLOR_BGR2HSV)
    grey_u8 = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
    colourless = float(hsv[..., 1].mean()) < _MIN_SATURATION
    histogram = (cv2.calcHist([grey_u8], [0], None, [_GREY_BINS], [0, 256]) if colourless
                 else cv2.calcHist([hsv], [0, 1], None, list(_HISTOGRAM_BINS), [0, 180, 0, 256]))
    cv2.normalize(histogram, histogram)
    grey = cv2.GaussianBlur(grey_u8.astype(np.float32), (3, 3), 0)
    return ShotSignature(histogram, grey, colourless)


def same_shot(previous: ShotSignature, current: ShotSignature) -> bool:
    """Whether two consecutive frames belong to one shot (the same camera, moments apart).

    Args:
        previous: the earlier frame's signature.
        current: the later frame's.

    Returns:
        True when their colours match closely, or their colours and layout together do.
    """
    colours, layout = previous.likeness(current)
    return colours >= SAME_COLOURS or colours + layout >= SAME_COLOURS_AND_LAYOUT

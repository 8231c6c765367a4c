"""The learned ego-track-area model: a small ONNX network run through OpenCV's DNN module.

The network is trained by ``tools/train_track_model.py`` on SynRail's own procedural renders with
strong domain randomisation (sim-to-real) and shipped as ``synrail/rail/models/track_area.onnx``
with a JSON sidecar (``track_area.json``: its input size and the figures of its training run). It
takes 1x3xHxW RGB in [0, 1] and returns 1x1xHxW logits of the ego track area (the area between
the rails under the camera). Inference needs only OpenCV: this module never imports torch.
"""

from __future__ import annotations

import json
import math
import threading
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

MODELS_DIR = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = MODELS_DIR / "track_area.onnx"


class TrackAreaModel:
    """An ONNX ego-track-area network loaded with ``cv2.dnn``, with its sidecar's input size.

    Attributes:
        path: the ONNX file.
        input_width: the network's input width in pixels.
        input_height: the network's input height in pixels.
        info: the sidecar's contents (input size, seed, renders, epochs, IoUs, ...).
    """

    def __init__(self, path: str | Path, sidecar: str | Path | None = None) -> None:
        """Loads the network and reads its sidecar.

        Args:
            path: the ONNX file.
            sidecar: the JSON sidecar; by default the ONNX path with a ``.json`` suffix.

        Raises:
            FileNotFoundError: when the ONNX file or its sidecar is missing.
        """
        self.path = Path(path)
        sidecar_path = Path(sidecar) if sidecar is not None else self.path.with_suffix(".json")
        if not self.path.is_file():
            raise FileNotFoundError(f"no track model at {self.path}")
        if not sidecar_path.is_file():
            raise FileNotFoundError(f"no sidecar for the track model at {sidecar_path}")
        self.info: dict = json.loads(sidecar_path.read_text())
        self.input_width = int(self.info["input_width"])
        self.input_height = int(self.info["input_height"])
        self._net = cv2.dnn.readNetFromONNX(str(self.path))
        self._lock = threading.Lock()

    def logits(self, image_bgr: np.ndarray) -> np.ndarray:
        """The network's logits at its own input size.

        Args:
            image_bgr: an H x W x 3 uint8 BGR image (OpenCV's order) of any size; a greyscale
                H x W image is accepted as well.

        Returns:
            float32 ``input_height`` x ``input_width`` logits (positive: ego track area).
        """
        image = np.asarray(image_bgr)
        if image.ndim == 2:
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        elif image.shape[2] == 4:
            image = cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
        size = (self.input_width, self.input_height)
        small = cv2.resize(image, size, interpolation=cv2.INTER_AREA) if image.shape[1::-1] != size else image
        blob = cv2.dnn.blobFromImage(small, scalefactor=1.0 / 255, swapRB=True, ddepth=cv2.CV_32F)
        with self._lock:
            self._net.setInput(blob)
            out = self._net.forward()
        return np.asarray(out, dtype=np.float32).reshape(self.input_height, self.input_width)

    def probability(self, image_bgr: np.ndarray) -> np.ndarray:
        """Per-pixel probability of the ego track area, at the image's own size.

        Args:
            image_bgr: an H x W x 3 uint8 BGR image of any size (or a greyscale H x W image).

        Returns:
            float32 H x W probabilities in [0, 1].
        """
        # The sigmoid in place with OpenCV's exp: a third of NumPy's time on a full frame.
        values = np.clip(self._logits_at_image_size(image_bgr), -30.0, 30.0)
        np.negative(values, out=values)
        cv2.exp(values, values)
        values += 1.0
        return np.reciprocal(values, out=values)

    def mask(self, image_bgr: np.ndarray, threshold: float = 0.5) -> np.ndarray:
        """Boolean ego-track-area mask at the image's own size: where the probability is at least
        ``threshold``.

        The logits are compared with the threshold's logit instead (the sigmoid is monotonic): no
        sigmoid over every pixel of a full frame, a few ms a frame. ``detect_track`` takes this
        mask as its ``track_area`` as it takes the probability.

        Args:
            image_bgr: an H x W x 3 uint8 BGR image of any size (or a greyscale H x W image).
            threshold: the probability, strictly between 0 and 1, from which a pixel is in the area.

        Returns:
            A boolean H x W mask.

        Raises:
            ValueError: when ``threshold`` is not strictly between 0 and 1.
        """
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must lie strictly between 0 and 1, not {threshold}")
        return self._logits_at_image_size(image_bgr) >= math.log(threshold / (1.0 - threshold))

    def _logits_at_image_size(self, image_bgr: np.ndarray) -> np.ndarray:
        """``logits`` resized (bilinear) to the image's own size."""
        height, width = np.asarray(image_bgr).shape[:2]
        logits = self.logits(image_bgr)
        if (width, height) != (self.input_width, self.input_height):
            logits = cv2.resize(logits, (width, height), interpolation=cv2.INTER_LINEAR)
        return logits


@lru_cache(maxsize=1)
def default_track_model() -> TrackAreaModel | None:
    """The shipped model (``synrail/rail/models/track_area.onnx``), loaded once per process.

    Returns:
        The model, or None when the file is absent (an install without it).
    """
    if not DEFAULT_MODEL.is_file() or not DEFAULT_MODEL.with_suffix(".json").is_file():
        return None
    return TrackAreaModel(DEFAULT_MODEL)

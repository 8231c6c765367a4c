"""Image bytes to arrays and back (OpenCV), with errors that name the file."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from synrail.storage.store import StoreError


def encode_image(image: np.ndarray, ext: str, params: Sequence[int] = ()) -> bytes:
    """``image`` encoded by OpenCV as ``ext`` (".png", ".jpg") with ``params`` (``cv2.IMWRITE_*`` pairs).

    Raises:
        ValueError: OpenCV could not encode it.
    """
    ok, buffer = cv2.imencode(ext, image, list(params))
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image.shape} image as {ext}")
    return buffer.tobytes()


def decode_image(data: bytes, flags: int, origin: str) -> np.ndarray:
    """``data`` decoded with ``cv2.imdecode(flags)``.

    Raises:
        StoreError: not a readable image; the message names ``origin`` (the file's URL).
    """
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    if image is None:
        raise StoreError(f"{origin} is not a readable image")
    return image

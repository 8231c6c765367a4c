"""Image bytes to arrays and back (OpenCV), with errors that name the file."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from synrail.storage.store import StoreError


def encode_image(image: np.ndarray, ext: str, params: Sequence[int] = ()) -> bytes:
    """``image`` encoded by OpenCV as ``ext``.

    Args:
        image: an OpenCV image (BGR, BGRA or grey).
        ext: the format, ".png" or ".jpg".
        params: ``cv2.IMWRITE_*`` flag and value pairs, flattened.

    Returns:
        The encoded file's bytes.

    Raises:
        ValueError: OpenCV could not encode it.
    """
    ok, buffer = cv2.imencode(ext, image, list(params))
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image.shape} image as {ext}")
    return buffer.tobytes()


def decode_image(data: bytes, flags: int, origin: str) -> np.ndarray:
    """``data`` decoded with ``cv2.imdecode``.

    Args:
        data: the file's bytes.
        flags: ``cv2.IMREAD_*`` flags.
        origin: the file's URL, named in the error.

    Returns:
        The decoded image.

    Raises:
        StoreError: not a readable image.
    """
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    if image is None:
        raise StoreError(f"{origin} is not a readable image")
    return image

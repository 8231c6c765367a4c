"""Decoding input images safely: the size an image declares is checked before any pixel is decoded.

A PNG can declare 60000 x 60000 pixels in a few hundred bytes (a decompression bomb): decoding it
would take gigabytes, and OpenCV refuses it with an assertion (``pixels <= CV_IO_MAX_IMAGE_PIXELS``)
that would stop a whole build. Every input image (gallery folders, COCO / Objects365, PennFudan,
rocks, DTD textures) goes through :func:`decode_or_reason`: Pillow reads the header only
(``Image.open`` is lazy), the declared pixel count is compared with ``inputs.max_image_pixels``,
and only then does OpenCV decode. What cannot be decoded safely comes back as a reason string,
which the callers turn into quarantine rows; nothing here raises for a bad file.
"""

from __future__ import annotations

import io
import re
import warnings
from typing import BinaryIO

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

DEFAULT_MAX_IMAGE_PIXELS = 100_000_000  # 100 MP: far above any photo or frame this pipeline reads


class _OverPillowLimit(Exception):
    def __init__(self, pixels: int | None, message: str) -> None:
        super().__init__(message)
        self.pixels = pixels


def declared_size(source: bytes | BinaryIO) -> tuple[int, int] | str:
    """(width, height) from the image header (bytes, or a file opened for reading), without decoding
    the pixels; else why not."""
    try:
        return _header_size(source)
    except _OverPillowLimit as exc:
        return f"decompression bomb: {exc}"


def _header_size(source: bytes | BinaryIO) -> tuple[int, int] | str:
    """The declared size, or why it cannot be had; _OverPillowLimit when Pillow itself refuses the
    header: it does so above twice its ``Image.MAX_IMAGE_PIXELS`` (about 179 MP), and then gives only
    the pixel count."""
    if isinstance(source, bytes):
        if not source:
            return "empty file"
        source = io.BytesIO(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit applies
        try:
            with Image.open(source) as image:  # parses the header only
                return image.size
        except Image.DecompressionBombError as exc:
            found = re.search(r"\((\d+) pixels\)", str(exc))
            raise _OverPillowLimit(int(found.group(1)) if found else None, str(exc)) from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError):  # SyntaxError: Pillow's parse errors
            return "not a decodable image"


def _over_limit(what: str, pixels: int, max_pixels: int) -> str:
    return f"declares {what} = {pixels / 1e6:.0f} MP, over inputs.max_image_pixels ({max_pixels / 1e6:g} MP)"


def size_problem(size: tuple[int, int], max_pixels: int) -> str | None:
    """Why an image of ``size`` is not decoded (empty, or over the limit), or None.

    Args:
        size: (width, height) in pixels, as declared.
        max_pixels: the most pixels allowed.

    Returns:
        The reason, or None when the size is acceptable.
    """
    width, height = size
    if width <= 0 or height <= 0:
        return f"declares an empty size {width}x{height}"
    if width * height > max_pixels:
        return _over_limit(f"{width}x{height}", width * height, max_pixels)
    return None


def header_problem(source: bytes | BinaryIO, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> str | None:
    """Why the image cannot be decoded safely, judged from its header alone; None when it can.

    Args:
        source: the file's bytes, or the file opened for reading in binary mode.
        max_pixels: the most pixels the header may declare.

    Returns:
        The reason (empty file, not an image, empty size, over the limit, a decompression bomb), or None.
    """
    try:
        size = _header_size(source)
    except _OverPillowLimit as exc:
        if exc.pixels is not None and exc.pixels > max_pixels:
            return _over_limit(f"{exc.pixels} pixels", exc.pixels, max_pixels)
        return f"decompression bomb (over Pillow's limit, which applies above inputs.max_image_pixels): {exc}"
    return size if isinstance(size, str) else size_problem(size, max_pixels)


def decode_or_reason(data: bytes, flags: int = cv2.IMREAD_COLOR,
                     max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> np.ndarray | str:
    """The decoded image, or the reason it is not decoded (header unreadable, over the limit, corrupt).

    Args:
        data: the file's bytes.
        flags: OpenCV ``imdecode`` flags.
        max_pixels: the most pixels the header may declare.

    Returns:
        The decoded array, or the reason.
    """
    problem = header_problem(data, max_pixels)
    if problem is not None:
        return problem
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error as exc:  # OpenCV asserts rather than returning None on some malformed files
        return f"not a decodable image ({str(exc).strip().splitlines()[-1]})"
    return "not a decodable image" if image is None else image


def frame_size_problem(width: int, height: int, max_pixels: int) -> str | None:
    """Why a video whose frames are ``width`` x ``height`` is not decoded, or None (sizes from the container).

    Args:
        width: the frame width the container declares, in pixels (0 or less: unknown).
        height: the frame height the container declares, in pixels (0 or less: unknown).
        max_pixels: the most pixels a frame may have.

    Returns:
        The reason, or None when the size is acceptable or unknown (the decoder's own checks then apply).
    """
    if width <= 0 or height <= 0:
        return None  # the container does not say: the decoder's own checks apply
    return size_problem((width, height), max_pixels)

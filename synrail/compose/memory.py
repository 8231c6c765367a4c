"""Process-wide memory settings for the stages that compose images.

The composing stages make several full-frame temporaries per image; ``tune_malloc_for_composing``
keeps them in glibc's heap. It lives apart from the weather effects so that importing it costs
nothing (those import albumentations, and with it torch).
"""

from __future__ import annotations

import ctypes
import functools
import os

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def retain_large_buffers(mmap_threshold: int = 64 << 20, trim_threshold: int = 128 << 20) -> bool:
    """Let glibc's malloc serve and keep blocks up to ``mmap_threshold`` bytes from its heap.

    The weather effects make full-frame temporaries (2.7 MB per uint8 copy at 1280x720, 11 MB per
    float32 one), several per image. By default glibc hands blocks that large out as fresh memory
    maps and unmaps them when freed, so each image pays page faults (and the kernel's zeroing) on
    every one: ~2 ms of system time an image of the default config, a fifth of its CPU (issue 28).
    Raising both thresholds once keeps that memory in the heap for the next image; a worker holds on
    to at most ``trim_threshold`` bytes it does not use. The composing stages call it, once per process,
    through ``tune_malloc_for_composing``: importing SynRail changes nothing in the process.
    ``SYNRAIL_MALLOC_TUNING=0`` leaves malloc alone.

    Args:
        mmap_threshold: blocks at least this large still get a memory map of their own.
        trim_threshold: free memory at the heap's top beyond this goes back to the system.

    Returns:
        True when both settings took (glibc), False otherwise (another C library, or switched off).
    """
    if os.environ.get("SYNRAIL_MALLOC_TUNING", "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))


@functools.cache
def tune_malloc_for_composing() -> bool:
    """``retain_large_buffers`` with its defaults, once per process (the stages that compose images
    call it first); True when the settings took."""
    return retain_large_buffers()

"""The benchmarks' JSON figures: one shape for every benchmark, written whole or not at all.

``{"command", "date", "machine", "runs": {run: {group: {figure: value}}}}`` is what the benchmark
pages render (docs/hooks.py, the marker ``<!-- generated: results:FILE -->``); a benchmark may add
top-level keys of its own (settings), which the pages leave out.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def new_results(script: str, timing: str = "one thread", argv: Sequence[str] | None = None) -> dict[str, Any]:
    """An empty results document for the benchmark's command line.

    Args:
        script: the benchmark's path from the repository root, e.g. ``benchmarks/rail.py``.
        timing: how the figures were timed, for the machine line (``one thread``, ``timed on one``).
        argv: the arguments it was given (default: this process's).

    Returns:
        The document, with ``runs`` empty for the benchmark to fill.
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    return {"command": " ".join(["python", script, *arguments]), "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {timing}", "runs": {}}


def write_results(path: Path, figures: dict[str, Any]) -> None:
    """Writes the document to ``path`` through a temporary file beside it (no half-written file
    for a page to render when the benchmark is stopped)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(figures, indent=1, default=float) + "\n")
    temporary.replace(path)

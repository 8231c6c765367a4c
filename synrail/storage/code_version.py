"""The code version that cache keys carry: the release plus a hash of the library's own source.

A release number alone misses edits made between releases, and Prefect's TASK_SOURCE policy only
hashes a task's own body, not the library code it calls.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from synrail import __version__


@functools.cache
def code_version() -> str:
    """The package version plus a hash of every ``synrail/*.py`` file: changes with any edit to the library's code."""
    digest = hashlib.sha256()
    package = Path(__file__).parents[1]  # synrail/
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:12]}"

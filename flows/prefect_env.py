"""Prefect settings for a local, offline run; set before Prefect is imported.

Placeholder values; refined from the SQLite investigation.
"""

from __future__ import annotations

import os

OFFLINE_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


def configure_prefect_environment(verbose: bool = False) -> None:
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

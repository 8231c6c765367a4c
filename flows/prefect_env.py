"""Prefect settings for local and offline runs, and a clean shutdown of the ephemeral server.

Why each setting (measured with Prefect 3.9.1; see the README's "Prefect notes"):
- ``PREFECT_SERVER_ANALYTICS_ENABLED=false``: the server's telemetry heartbeat reads, then inserts,
  its session row in a deferred SQLite transaction; on a fresh database a concurrent commit makes
  that insert fail at once with "database is locked" (the busy timeout does not apply), and offline
  it also logs a DNS failure on every run. ``DO_NOT_TRACK=1`` turns off the client's side.
- ``PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE`` / ``..._FLUSH_INTERVAL``: task runs reach
  the database only through events that the TaskRunRecorder writes, by default one event per
  transaction; it falls behind a few hundred tasks, and at exit the server is stopped while it is
  still flushing ("Error flushing N events", task runs missing from the UI). Batches keep it up.
- ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120``: the first start on a new Prefect home
  runs the SQLite migrations; on a busy two-core machine that overran the 20 s default ("Timed out
  while attempting to connect to ephemeral Prefect API server").
- ``PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL=WARNING``: a quiet console under our own progress bar,
  while every log line still goes to the API (``PREFECT_LOGGING_LEVEL`` would cut those too).
All are defaults only: a value the user has set wins.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path
from uuid import UUID

OFFLINE_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",  # whole seconds: Prefect applies int()
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}
FINAL_STATE_TYPES = ["COMPLETED", "FAILED", "CANCELLED", "CRASHED"]
_SQLITE_URL = re.compile(r"^sqlite(\+\w+)?:///(?P<path>.+)$")
_REVISION_LINE = re.compile(r'^revision\s*=\s*["\'](?P<id>\w+)["\']', re.MULTILINE)


def configure_prefect_environment(verbose: bool = False) -> None:
    """Apply the defaults above; call before ``import prefect``."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")


def configure_command_line(verbose: bool) -> None:
    """Console settings of the ``synrail`` commands, which print their own summary and error line:
    without ``--verbose`` Prefect's console shows nothing below CRITICAL (a failed flow run's traceback
    stays in its run log, in the UI) and FFmpeg's own log lines (``moov atom not found`` for a corrupt
    video, which becomes a quarantine row) are off. Call before ``import prefect``; user settings win."""
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET; read when FFmpeg is first used
    configure_prefect_environment(verbose)


def wait_for_task_runs_recorded(flow_run_id: UUID, expected: int, timeout_s: float = 60.0) -> int:
    """Block until the server has recorded ``expected`` finished task runs of a flow run.

    The ephemeral server is stopped by an exit hook without draining its services; waiting here
    first means no event is cut off mid-flush and the UI shows every task run.
    """
    from prefect.client.orchestration import get_client
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout_s)
    body = {"flow_runs": {"id": {"any_": [str(flow_run_id)]}},
            "task_runs": {"state": {"type": {"any_": FINAL_STATE_TYPES}}}}
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            recorded = int(client.request("POST", "/task_runs/count", json=body).json())
            if recorded >= expected or time.monotonic() > deadline:
                return recorded
            time.sleep(0.25)


def local_database_problem() -> str | None:
    """Why the local Prefect server could not start on this machine's Prefect database, or None.

    Without ``PREFECT_API_URL`` every run starts a temporary server on the SQLite database of the
    Prefect home (``~/.prefect/prefect.db``). When a newer Prefect has migrated that file (another
    environment, an upgrade rolled back), the server's start-up fails on a schema revision it does
    not know, and the client only says, after the whole start-up timeout, that it timed out. So the
    file is checked first: it must be readable and its revision one of the installed Prefect's.
    Call after :func:`configure_prefect_environment`.
    """
    from prefect import __version__
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url:
        return None  # a server of the user's: its database is its own business
    url = settings.server.database.connection_url
    match = _SQLITE_URL.match(url.get_secret_value() if url else "")
    if not match or match["path"] == ":memory:" or not Path(match["path"]).is_file():
        return None  # another database, or a first run: the server creates it
    path = Path(match["path"])
    remedy = "give this project a Prefect home of its own (PREFECT_HOME=DIR), or point PREFECT_API_URL at a server"
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as connection:
            rows = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return None  # created but never migrated: the server migrates it
        return f"the Prefect database {path} cannot be read ({err}): {remedy}."
    except sqlite3.DatabaseError as err:
        return f"the Prefect database {path} cannot be read ({err}): {remedy}."
    known = known_database_revisions()
    unknown = sorted({row[0] for row in rows} - known)
    if not known or not unknown:
        return None  # nothing to judge by (migrations laid out otherwise), or a revision this Prefect has
    return (f"the Prefect database {path} was migrated by a newer Prefect than the {__version__} installed here "
            f"(its schema revision {', '.join(unknown)} is unknown to this one), so the local Prefect server "
            f"cannot start on it: upgrade Prefect in this environment, or {remedy}.")


def known_database_revisions() -> set[str]:
    """The SQLite schema revisions the installed Prefect's migrations define (none found: an empty set)."""
    import prefect.server.database as database

    folder = Path(database.__file__).parent / "_migrations" / "versions" / "sqlite"
    return {match["id"] for script in folder.glob("*.py")
            for match in [_REVISION_LINE.search(script.read_text(encoding="utf-8"))] if match}

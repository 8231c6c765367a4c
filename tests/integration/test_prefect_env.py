"""The look at the local Prefect database before a command starts a temporary server on it."""

import sqlite3
from pathlib import Path

from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

from flows.prefect_env import known_database_revisions, local_database_problem


def _database(home: Path, revision: str | None) -> Path:
    """A Prefect home whose database holds ``revision`` (None: a database never migrated)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "prefect.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE flow (id TEXT)")
        if revision is not None:
            connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
            connection.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    return path


def _problem(home: Path, api_url: str | None = None) -> str | None:
    with temporary_settings(updates={PREFECT_HOME: str(home), PREFECT_API_URL: api_url}):
        return local_database_problem()


def test_the_installed_prefect_defines_its_revisions():
    assert len(known_database_revisions()) > 50


def test_a_first_run_or_a_database_of_this_prefect_is_fine(tmp_path):
    assert _problem(tmp_path / "fresh") is None  # no database yet: the server creates it
    _database(tmp_path / "unmigrated", None)
    assert _problem(tmp_path / "unmigrated") is None
    _database(tmp_path / "current", sorted(known_database_revisions())[0])
    assert _problem(tmp_path / "current") is None
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "prefect.db").write_bytes(b"")  # an empty file is a new SQLite database
    assert _problem(tmp_path / "empty") is None


def test_a_database_a_newer_prefect_migrated_is_refused_with_the_file_and_the_way_out(tmp_path):
    path = _database(tmp_path / "newer", "ffffffffffff")
    problem = _problem(tmp_path / "newer")
    assert problem is not None and str(path) in problem and "ffffffffffff" in problem
    assert "newer Prefect" in problem and "PREFECT_HOME" in problem
    assert _problem(tmp_path / "newer", api_url="http://127.0.0.1:4200/api") is None  # a server of the user's


def test_an_unreadable_database_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "prefect.db").write_bytes(b"not a database at all" * 100)
    problem = _problem(home)
    assert problem is not None and "cannot be read" in problem and str(home / "prefect.db") in problem


def test_nothing_is_refused_when_the_installed_prefects_revisions_cannot_be_read(tmp_path, monkeypatch):
    """A Prefect that lays its migrations out otherwise gives no revisions to judge by: no refusal."""
    import flows.prefect_env as prefect_env

    _database(tmp_path / "home", "ffffffffffff")
    monkeypatch.setattr(prefect_env, "known_database_revisions", set)
    assert _problem(tmp_path / "home") is None

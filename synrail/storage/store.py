"""A URL-addressed store over fsspec: a local folder (plain path or file://) or an s3:// prefix.

Writes are atomic: on a local disk a file is written under a temporary name in the same folder and
renamed into place; an object store's PUT is already all-or-nothing, so objects are written directly.
A process killed between the two steps leaves a hidden ``.NAME.<hex>.tmp``; builds sweep them up
(:meth:`Store.remove_partial_writes`) while they hold the output's lock.

Transient errors (a reset connection, a timeout, S3's SlowDown, which s3fs raises as EBUSY) are
retried with exponential backoff (tenacity); errors that will not go away (a missing file, a
refused permission) are raised at once.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import fsspec
import numpy as np
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, wait_exponential

LOCAL_PROTOCOLS = {"file", "local"}
TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.EBUSY, errno.ETIMEDOUT, errno.ECONNRESET,
                              errno.ECONNABORTED, errno.EPIPE})
PERMANENT_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)
RETRY_ATTEMPTS = 6
RETRY_WAIT_S = 0.25  # first wait; doubles up to RETRY_MAX_WAIT_S: about 8 s in all before giving up
RETRY_MAX_WAIT_S = 4.0
WRITE_PROBE = ".synrail-write-probe-"
PARTIAL_WRITE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")
log = logging.getLogger(__name__)
T = TypeVar("T")


def sha256_bytes(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def normalise_url(url: str) -> str:
    """A plain path becomes an absolute file:// URL; other URLs are kept as they are."""
    if "://" in url:
        return url.rstrip("/")
    # not Path.as_uri(): it percent-encodes (a space becomes %20) and fsspec does not decode it back
    return "file://" + Path(url).expanduser().resolve().as_posix()


def is_transient(exc: BaseException) -> bool:
    """Whether trying the same call again may succeed."""
    if isinstance(exc, PERMANENT_ERRORS):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS


class StoreError(OSError):
    """An I/O problem, with the URL it happened at."""


class Store:
    """Files under one root URL; every method takes a path relative to that root."""

    def __init__(self, root_url: str, storage_options: dict[str, Any] | None = None,
                 retry_attempts: int = RETRY_ATTEMPTS) -> None:
        self.root_url = normalise_url(root_url)
        self.storage_options = dict(storage_options or {})
        self.retry_attempts = retry_attempts
        self.fs, self.root_path = fsspec.core.url_to_fs(self.root_url, **self.storage_options)
        protocol = self.fs.protocol
        self.is_local = bool(LOCAL_PROTOCOLS & set(protocol if isinstance(protocol, tuple) else (protocol,)))

    def __repr__(self) -> str:
        return f"Store({self.root_url!r})"

    def path(self, rel: str) -> str:
        """``rel`` as a path of the filesystem (the root's path when empty)."""
        return f"{self.root_path}/{rel}" if rel else self.root_path

    def url(self, rel: str) -> str:
        """``rel`` as a full URL (the root URL when empty)."""
        return f"{self.root_url}/{rel}" if rel else self.root_url

    def local_path(self, rel: str = "") -> Path:
        """``rel`` as a local ``Path``.

        Raises:
            StoreError: the store is not on a local disk.
        """
        if not self.is_local:
            raise StoreError(f"{self.url(rel)} is not on a local disk")
        return Path(self.path(rel))

    def child(self, rel: str) -> Store:
        """A store rooted at ``rel``, with the same options."""
        return Store(self.url(rel), self.storage_options, self.retry_attempts)

    def with_retries(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)``, tried again with exponential backoff after transient errors.

        Args:
            call: the filesystem call.
            *args: its positional arguments.
            **kwargs: its keyword arguments.

        Returns:
            What ``call`` returns; the last error is raised once ``retry_attempts`` are spent.
        """
        retrying = Retrying(stop=stop_after_attempt(self.retry_attempts), reraise=True,
                            wait=wait_exponential(multiplier=RETRY_WAIT_S, max=RETRY_MAX_WAIT_S),
                            retry=retry_if_exception(is_transient), before_sleep=before_sleep_log(log, logging.WARNING))
        return retrying(call, *args, **kwargs)

    # -- reading ----------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        """Whether a file or folder exists at ``rel``."""
        return self.with_retries(self.fs.exists, self.path(rel))

    def read_bytes(self, rel: str) -> bytes:
        """The contents of the file ``rel``.

        Raises:
            StoreError: there is no such file.
        """
        try:
            return self.with_retries(self.fs.cat_file, self.path(rel))
        except FileNotFoundError:
            raise StoreError(f"missing file: {self.url(rel)}") from None

    def read_text(self, rel: str) -> str:
        """The contents of the file ``rel`` as UTF-8 text."""
        return self.read_bytes(rel).decode("utf-8")

    def list(self, rel: str = "") -> list[str]:
        """Names directly under ``rel`` (empty when it does not exist)."""
        try:
            entries = self.with_retries(self.fs.ls, self.path(rel), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(os.path.basename(str(e).rstrip("/")) for e in entries)

    def find(self, rel: str) -> list[str]:
        """Every file below ``rel``, as paths relative to the root (empty when ``rel`` does not exist)."""
        if not self.exists(rel):
            return []
        found = self.with_retries(self.fs.find, self.path(rel))
        return sorted(posixpath.relpath(str(p), self.root_path) for p in found)

    # -- writing ----------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> str:
        """Write ``data`` at ``rel`` atomically (a temporary renamed into place on a local disk).

        Args:
            rel: the path below the root.
            data: the file's contents.

        Returns:
            The sha256 hex digest of ``data``.

        Raises:
            StoreError: the write failed after retries.
        """
        target = self.path(rel)
        try:
            if self.is_local:
                self.with_retries(_write_local, target, data, os.replace)
            else:
                self.with_retries(self.fs.pipe_file, target, data)
        except OSError as exc:
            raise StoreError(f"cannot write {self.url(rel)}: {exc.strerror or exc}") from exc
        return sha256_bytes(data)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Write ``data`` at ``rel`` only if nothing is there.

        Atomic on a local disk (a hard link fails if the name exists) and on S3 (a conditional PUT);
        other filesystems get a check-then-write.

        Args:
            rel: the path below the root.
            data: the file's contents.

        Returns:
            True when written, False when something was already there.

        Raises:
            StoreError: the write failed for another reason.
        """
        target = self.path(rel)
        try:
            if self.is_local:
                self.with_retries(_write_local, target, data, os.link)
            else:
                self.with_retries(self._pipe_new, target, data)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StoreError(f"cannot create {self.url(rel)}: {exc.strerror or exc}") from exc
        return True

    def _pipe_new(self, target: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(target, data, mode="create")
        except TypeError:  # a filesystem without conditional writes
            if self.fs.exists(target):
                raise FileExistsError(target) from None
            self.fs.pipe_file(target, data)

    def write_text(self, rel: str, text: str) -> str:
        """Write ``text`` as UTF-8 at ``rel`` atomically.

        Args:
            rel: the path below the root.
            text: the file's contents.

        Returns:
            The sha256 hex digest of the bytes written.
        """
        return self.write_bytes(rel, text.encode("utf-8"))

    def write_npz(self, rel: str, **arrays: np.ndarray) -> str:
        """Write ``arrays`` as one compressed ``.npz`` file at ``rel`` atomically.

        Args:
            rel: the path below the root.
            **arrays: the arrays, by the names ``np.load`` gives them back under.

        Returns:
            The sha256 hex digest of the bytes written.
        """
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return self.write_bytes(rel, buffer.getvalue())

    def remove(self, rel: str) -> None:
        """Delete the file or folder ``rel`` (recursively); nothing happens when it is absent."""
        if self.exists(rel):
            try:
                self.with_retries(self.fs.rm, self.path(rel), recursive=True)
            except FileNotFoundError:
                pass  # gone between the check and the delete

    def remove_partial_writes(self) -> int:
        """Delete the temporary files of local writes a killed process left; return how many."""
        if not self.is_local or not self.local_path().is_dir():
            return 0
        partial = [p for p in self.local_path().rglob(".*.tmp") if PARTIAL_WRITE.match(p.name)]
        for path in partial:
            path.unlink(missing_ok=True)
        return len(partial)

    def check_writable(self) -> None:
        """Fail early, naming the URL, when the root cannot be written."""
        probe = f"{WRITE_PROBE}{uuid.uuid4().hex}"
        self.write_bytes(probe, b"")
        self.remove(probe)


def _write_local(target: str, data: bytes, place: Callable[[str, str], None]) -> None:
    """Write ``data`` beside ``target`` under a temporary name, then ``place`` it (replace or link)."""
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        place(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

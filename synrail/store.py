"""A URL-addressed store over fsspec: a local folder (plain path or file://) or an s3:// prefix.

Writes are atomic: on a local disk a file is written under a temporary name in the same folder and
renamed into place; an object store's PUT is already all-or-nothing, so objects are written directly.
"""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec
import numpy as np

LOCAL_PROTOCOLS = {"file", "local"}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalise_url(url: str) -> str:
    """A plain path becomes an absolute file:// URL; other URLs are kept as they are."""
    if "://" in url:
        return url.rstrip("/")
    # not Path.as_uri(): it percent-encodes (a space becomes %20) and fsspec does not decode it back
    return "file://" + Path(url).expanduser().resolve().as_posix()


class StoreError(OSError):
    """An I/O problem, with the URL it happened at."""


class Store:
    """Files under one root URL; every method takes a path relative to that root."""

    def __init__(self, root_url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.root_url = normalise_url(root_url)
        self.storage_options = dict(storage_options or {})
        self.fs, self.root_path = fsspec.core.url_to_fs(self.root_url, **self.storage_options)
        protocol = self.fs.protocol
        self.is_local = bool(LOCAL_PROTOCOLS & set(protocol if isinstance(protocol, tuple) else (protocol,)))

    def __repr__(self) -> str:
        return f"Store({self.root_url!r})"

    def path(self, rel: str) -> str:
        return f"{self.root_path}/{rel}" if rel else self.root_path

    def url(self, rel: str) -> str:
        return f"{self.root_url}/{rel}" if rel else self.root_url

    def local_path(self, rel: str = "") -> Path:
        if not self.is_local:
            raise StoreError(f"{self.url(rel)} is not on a local disk")
        return Path(self.path(rel))

    def child(self, rel: str) -> "Store":
        return Store(self.url(rel), self.storage_options)

    # -- reading ----------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel))

    def read_bytes(self, rel: str) -> bytes:
        try:
            return self.fs.cat_file(self.path(rel))
        except FileNotFoundError:
            raise StoreError(f"missing file: {self.url(rel)}") from None

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def list(self, rel: str = "") -> list[str]:
        """Names directly under ``rel`` (empty when it does not exist)."""
        try:
            entries = self.fs.ls(self.path(rel), detail=False)
        except FileNotFoundError:
            return []
        return sorted(os.path.basename(str(e).rstrip("/")) for e in entries)

    def is_empty(self) -> bool:
        return not self.fs.exists(self.root_path) or not self.list("")

    # -- writing ----------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> str:
        """Write atomically and return the sha256 of ``data``."""
        target = self.path(rel)
        try:
            if self.is_local:
                folder = os.path.dirname(target)
                os.makedirs(folder, exist_ok=True)
                tmp = os.path.join(folder, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
                try:
                    with open(tmp, "wb") as fh:
                        fh.write(data)
                    os.replace(tmp, target)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
            else:
                self.fs.pipe_file(target, data)
        except OSError as exc:
            raise StoreError(f"cannot write {self.url(rel)}: {exc.strerror or exc}") from exc
        return sha256_bytes(data)

    def write_text(self, rel: str, text: str) -> str:
        return self.write_bytes(rel, text.encode("utf-8"))

    def write_npz(self, rel: str, **arrays: np.ndarray) -> str:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return self.write_bytes(rel, buffer.getvalue())

    def remove(self, rel: str) -> None:
        path = self.path(rel)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def check_writable(self) -> None:
        """Fail early, naming the URL, when the root cannot be written."""
        probe = f".synrail-write-probe-{uuid.uuid4().hex}"
        self.write_bytes(probe, b"")
        self.remove(probe)

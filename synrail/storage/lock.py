"""One build at a time per output: a lock file at ``OUT/.synrail/lock``.

The file is created exclusively (``O_EXCL`` on a local disk, a conditional PUT, ``If-None-Match: *``,
on S3), so of two builds starting together exactly one gets it. The other is refused with
:class:`OutputLocked`, naming the holder, or, given ``wait_s``, waits for it: it polls the file
every ``poll_s`` seconds and takes the lock once the holder releases it (or once it goes stale),
giving up with :class:`OutputLocked` after ``wait_s``. While held, a thread rewrites the file's
heartbeat.

A lock outlives a build killed with ``kill -9``. It counts as stale, and is taken over, when its
holder ran on this host and that process is gone, or when its heartbeat is older than ``ttl_s``
(a holder on another machine, or a reused pid). Taking over is not atomic: two builds finding the
same stale lock in the same instant may both proceed, a window of a few milliseconds after a crash.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from synrail.storage.store import Store, StoreError

LOCK_FILE = ".synrail/lock"
HEARTBEAT_S = 15.0
TTL_S = 120.0  # eight missed heartbeats; also covers moderate clock skew between hosts
POLL_S = 5.0  # how often a waiting run looks at the lock again


class OutputLocked(RuntimeError):
    """Another build holds the output's lock."""


@dataclass(frozen=True)
class LockHolder:
    """The contents of a lock file: who holds it, where, since when, and its last heartbeat (epoch seconds)."""

    token: str
    owner: str
    host: str
    pid: int
    started: float
    heartbeat: float

    def describe(self) -> str:
        """The holder in words, for the message that refuses a second build."""
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"{self.owner or 'a build'} (pid {self.pid} on {self.host}, since {started})"


@contextmanager
def build_lock(store: Store, owner: str = "", ttl_s: float = TTL_S, heartbeat_s: float = HEARTBEAT_S,
               wait_s: float = 0.0, poll_s: float = POLL_S,
               on_wait: Callable[[LockHolder], None] | None = None) -> Iterator[LockHolder]:
    """Hold ``store``'s build lock for the ``with`` block.

    Args:
        store: the output (or dataset root) to lock.
        owner: who holds it, shown to anyone refused or waiting.
        ttl_s: a heartbeat older than this makes a lock stale (taken over).
        heartbeat_s: how often the holder refreshes its heartbeat.
        wait_s: how long to wait for another holder to finish; 0 refuses at once.
        poll_s: how often a waiting run looks at the lock again.
        on_wait: called once with the holder when this run starts waiting (for a log line).

    Returns:
        The context manager; ``with`` gives the :class:`LockHolder` written into the lock.

    Raises:
        OutputLocked: another build holds the lock (and still held it after ``wait_s``).
    """
    started = time.time()
    holder = LockHolder(uuid.uuid4().hex, owner, socket.gethostname(), os.getpid(), started, started)
    holder = _acquire_waiting(store, holder, ttl_s, wait_s, poll_s, on_wait)
    stop = threading.Event()
    beating = threading.Thread(target=_beat, args=(store, holder, heartbeat_s, stop), daemon=True,
                               name="synrail-lock-heartbeat")
    beating.start()
    try:
        yield holder
    finally:
        stop.set()
        beating.join()
        if _holder(store) == holder.token:
            store.remove(LOCK_FILE)


def current_holder(store: Store) -> LockHolder | None:
    """Who holds the lock now (None when nobody, or when the file is unreadable)."""
    try:
        return LockHolder(**json.loads(store.read_text(LOCK_FILE)))
    except (StoreError, ValueError, TypeError):
        return None


def is_stale(holder: LockHolder, ttl_s: float = TTL_S) -> bool:
    """Whether ``holder``'s lock may be taken over: its heartbeat is too old, or its process on this host is gone.

    Args:
        holder: the lock file's contents.
        ttl_s: the heartbeat age (seconds) beyond which the lock is stale.

    Returns:
        True when the lock may be taken over.
    """
    if time.time() - holder.heartbeat > ttl_s:
        return True
    return holder.host == socket.gethostname() and not _process_alive(holder.pid)


def _acquire_waiting(store: Store, holder: LockHolder, ttl_s: float, wait_s: float, poll_s: float,
                     on_wait: Callable[[LockHolder], None] | None) -> LockHolder:
    """Take the lock, polling while another build holds it, for up to ``wait_s`` seconds; returns the
    holder as written (its times are those of the moment the lock was taken)."""
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        now = time.time()
        taking = LockHolder(**{**asdict(holder), "started": now, "heartbeat": now})
        try:
            _acquire(store, taking, ttl_s)
            return taking
        except OutputLocked:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            found = current_holder(store)
            if not told and found is not None and on_wait is not None:
                on_wait(found)
                told = True
            time.sleep(min(poll_s, remaining))


def _acquire(store: Store, holder: LockHolder, ttl_s: float) -> None:
    data = _encode(holder)
    if store.create_exclusive(LOCK_FILE, data):
        return
    found = current_holder(store)
    if found is None:
        # Gone (its holder released it between our two looks) or unreadable: try once more before
        # calling it broken, or a build that took it in between would lose it to us.
        if store.create_exclusive(LOCK_FILE, data):
            return
        found = current_holder(store)
    if found is not None and found.token == holder.token:  # our create succeeded, its reply was lost
        return
    if found is not None and not is_stale(found, ttl_s):
        raise OutputLocked(f"{store.root_url} is being built by {found.describe()}; wait for that build to "
                           f"finish, or delete {store.url(LOCK_FILE)} if it is no longer running")
    store.remove(LOCK_FILE)  # stale, or left unreadable by a crash mid-write
    if not store.create_exclusive(LOCK_FILE, data):
        raise OutputLocked(f"{store.root_url}: another build took over the stale lock at the same moment")


def _beat(store: Store, holder: LockHolder, every_s: float, stop: threading.Event) -> None:
    while not stop.wait(every_s):
        try:
            if _holder(store) != holder.token:
                return  # taken over after we looked stale: do not overwrite the new holder
            store.write_bytes(LOCK_FILE, _encode(LockHolder(**{**asdict(holder), "heartbeat": time.time()})))
        except OSError:
            pass  # a missed beat is harmless; a lost lock shows as stale to the next build


def _holder(store: Store) -> str | None:
    found = current_holder(store)
    return found.token if found else None


def _encode(holder: LockHolder) -> bytes:
    return json.dumps(asdict(holder), sort_keys=True).encode()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        return True
    return True

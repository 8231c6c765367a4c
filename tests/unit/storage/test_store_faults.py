"""Transient object-store errors are retried, permanent ones are not, and a build through a store that
keeps failing now and then comes out identical to a clean one."""

import errno
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import synrail.storage.store
from synrail.config import load_config
from synrail.stages.local import build_in_process
from synrail.storage.store import Store, StoreError, is_transient

ROOT = Path(__file__).resolve().parents[3]
TRANSIENT = [ConnectionResetError("connection reset by peer"), TimeoutError("read timed out"),
             OSError(errno.EBUSY, "SlowDown: please reduce your request rate")]  # s3fs's SlowDown


class FlakyFileSystem(MemoryFileSystem):
    """An in-memory filesystem whose every ``fail_every``-th call fails with a transient error."""

    protocol = "flaky"
    store: dict = {}
    pseudo_dirs = [""]
    fail_every = 3
    calls = 0
    failures = 0
    depth = 0

    def _flaky(self, call, *args, **kwargs):
        """``call``, failing first when it is the ``fail_every``-th outermost call (calls made from
        inside another one do not count, so each call's schedule does not depend on fsspec's internals)."""
        cls = type(self)
        if cls.depth == 0:
            cls.calls += 1
            if cls.fail_every and cls.calls % cls.fail_every == 0:
                cls.failures += 1
                raise TRANSIENT[cls.failures % len(TRANSIENT)]
        cls.depth += 1
        try:
            return call(*args, **kwargs)
        finally:
            cls.depth -= 1

    def cat_file(self, path, *args, **kwargs):
        return self._flaky(super().cat_file, path, *args, **kwargs)

    def pipe_file(self, path, value, *args, **kwargs):
        return self._flaky(super().pipe_file, path, value, *args, **kwargs)

    def ls(self, path, detail=True, **kwargs):
        return self._flaky(super().ls, path, detail=detail, **kwargs)

    def exists(self, path, **kwargs):
        return self._flaky(super().exists, path, **kwargs)


def dataset_files(store: Store) -> set[str]:
    """Every file's path under ``store``, relative to it, but SynRail's own state (caches, markers)."""
    paths = {p.removeprefix(store.root_path + "/") for p in store.fs.find(store.root_path)}
    return {p for p in paths if not p.startswith(".synrail/")}


@pytest.fixture
def flaky(monkeypatch):
    fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
    monkeypatch.setattr(synrail.storage.store, "RETRY_WAIT_S", 0.001)  # the schedule, not the waiting, is tested
    FlakyFileSystem.store.clear()
    FlakyFileSystem.calls = FlakyFileSystem.failures = FlakyFileSystem.depth = 0
    FlakyFileSystem.fail_every = 3
    yield FlakyFileSystem
    FlakyFileSystem.store.clear()


def test_transient_and_permanent_errors_are_told_apart():
    assert all(is_transient(e) for e in TRANSIENT)
    for permanent in (FileNotFoundError("x"), PermissionError("x"), FileExistsError("x"), ValueError("x"),
                      OSError(errno.ENOSPC, "No space left on device")):
        assert not is_transient(permanent)


def test_each_store_call_survives_transient_errors(flaky):
    flaky.fail_every = 2  # every other call fails
    store = Store("flaky://bucket/ds")
    store.write_text("a/b.txt", "hello")
    assert store.read_text("a/b.txt") == "hello" and store.exists("a/b.txt") and store.list("a") == ["b.txt"]
    assert store.create_exclusive("a/c.txt", b"1") and not store.create_exclusive("a/c.txt", b"2")
    assert flaky.failures >= 3


def test_an_error_that_does_not_go_away_is_raised_after_the_last_attempt(flaky):
    flaky.fail_every = 1  # every call fails
    store = Store("flaky://bucket/ds", retry_attempts=3)
    with pytest.raises(StoreError, match="flaky://bucket/ds/x.txt"):
        store.write_text("x.txt", "never")
    assert flaky.calls == 3


def test_a_missing_file_is_not_retried(flaky, monkeypatch):
    flaky.fail_every = 0
    store = Store("flaky://bucket/ds")
    with pytest.raises(StoreError, match="missing file: flaky://bucket/ds/nope.txt"):
        store.read_bytes("nope.txt")
    assert flaky.calls == 1


def test_a_build_through_a_flaky_store_equals_a_clean_build(flaky):
    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": 8, "execution.chunk_size": 4})
    build_in_process(cfg, "memory://synrail-clean/out")
    build_in_process(cfg, "flaky://bucket/out")
    assert flaky.failures > 20  # the build really went through failures

    clean, flaky_out = Store("memory://synrail-clean/out"), Store("flaky://bucket/out")
    flaky.fail_every = 0
    dataset = dataset_files(clean)
    assert dataset == dataset_files(flaky_out)
    assert any(p.startswith("images/") for p in dataset)
    differing = [p for p in sorted(dataset) if clean.read_bytes(p) != flaky_out.read_bytes(p).replace(
        b"flaky://bucket/out", b"memory://synrail-clean/out")]  # the card and summaries name the output
    assert differing == []
    assert not flaky_out.exists(".synrail/lock")

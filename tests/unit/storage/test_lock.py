"""One build at a time per output: a second is refused naming the first; a crashed build's lock is
taken over; the lock goes when the build ends."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from synrail.config import load_config
from synrail.stages.local import build_in_process
from synrail.storage.lock import LOCK_FILE, LockHolder, OutputLocked, build_lock, current_holder, is_stale
from synrail.storage.store import Store

ROOT = Path(__file__).resolve().parents[3]
SYNRAIL = Path(sys.executable).with_name("synrail")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_lock(store: Store, **fields) -> LockHolder:
    now = time.time()
    holder = LockHolder(**{"token": "t" * 32, "owner": "an old build", "host": socket.gethostname(),
                           "pid": os.getpid(), "started": now, "heartbeat": now, **fields})
    store.write_text(LOCK_FILE, json.dumps(asdict(holder)))
    return holder


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    store = Store(str(tmp_path / "out"))
    with build_lock(store, owner="first build") as first:
        assert current_holder(store) == first
        with pytest.raises(OutputLocked, match=rf"first build \(pid {os.getpid()} on "):
            with build_lock(store, owner="second build"):
                pass
        assert current_holder(store) == first  # the refused one left the lock alone
    assert not store.exists(LOCK_FILE)


def test_of_builds_racing_for_the_lock_exactly_one_wins(tmp_path):
    store = Store(str(tmp_path / "out"))
    start, release = threading.Barrier(8), threading.Event()
    winners, refused = [], []

    def contend(index: int) -> None:
        start.wait()
        try:
            with build_lock(store, owner=f"build {index}"):
                winners.append(index)
                release.wait(10)
        except OutputLocked:
            refused.append(index)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(refused) < 7 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join()
    assert len(winners) == 1 and len(refused) == 7


def test_waiting_builds_queue_and_each_holds_the_lock_alone(tmp_path):
    store = Store(str(tmp_path / "out"))
    inside, overlaps, waited = [], [], []

    def run(index: int) -> None:
        with build_lock(store, owner=f"build {index}", wait_s=30, poll_s=0.02, on_wait=waited.append):
            inside.append(index)
            if len(inside) > 1:
                overlaps.append(list(inside))
            time.sleep(0.2)
            inside.remove(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [] and len(waited) >= 3  # all four ran, one at a time, three after waiting
    assert all(holder.owner.startswith("build ") for holder in waited)
    assert not store.exists(LOCK_FILE)


def test_a_waiting_build_gives_up_after_its_timeout_naming_the_holder(tmp_path):
    store = Store(str(tmp_path / "out"))
    with build_lock(store, owner="long build"):
        started = time.monotonic()
        with pytest.raises(OutputLocked, match="long build"):
            with build_lock(store, owner="patient build", wait_s=0.3, poll_s=0.05):
                pass
        assert 0.3 <= time.monotonic() - started < 5


def test_a_lock_left_by_a_killed_build_is_taken_over(tmp_path):
    store = Store(str(tmp_path / "out"))
    write_lock(store, pid=dead_pid())
    with build_lock(store, owner="rerun") as holder:
        assert current_holder(store) == holder and holder.owner == "rerun"
    assert not store.exists(LOCK_FILE)


def test_a_lock_from_another_host_counts_until_its_heartbeat_stops(tmp_path):
    store = Store(str(tmp_path / "out"))
    alive = write_lock(store, host="gpu-worker-7", pid=1)
    assert not is_stale(alive)
    with pytest.raises(OutputLocked, match="gpu-worker-7"):
        with build_lock(store):
            pass
    silent = write_lock(store, host="gpu-worker-7", pid=1, heartbeat=time.time() - 600)
    assert is_stale(silent) and not is_stale(replace(silent, heartbeat=time.time()))
    with build_lock(store, owner="rerun"):
        assert current_holder(store).owner == "rerun"


def test_an_unreadable_lock_is_taken_over(tmp_path):
    store = Store(str(tmp_path / "out"))
    store.write_text(LOCK_FILE, '{"token": "half-writ')
    with build_lock(store, owner="rerun"):
        assert current_holder(store).owner == "rerun"


def test_a_lock_released_and_taken_between_two_looks_is_left_to_its_new_holder(tmp_path, monkeypatch):
    """A waiting build's create fails while another holds the lock; before it reads who holds it, the
    holder releases and a third build takes it. Reading nothing, the waiting build must not take the
    file for broken and remove the third build's lock."""
    from synrail.storage import lock

    store = Store(str(tmp_path / "out"))
    write_lock(store, owner="releasing build")
    real_holder, looks = lock.current_holder, []

    def released_and_taken(store_: Store) -> LockHolder | None:
        looks.append(1)
        if len(looks) == 1:
            store_.remove(LOCK_FILE)
            write_lock(store_, token="n" * 32, owner="third build")
            return None  # the read fell between the release and the take
        return real_holder(store_)

    monkeypatch.setattr(lock, "current_holder", released_and_taken)
    with pytest.raises(OutputLocked, match="third build"):
        with build_lock(store, owner="waiting build"):
            pass
    assert real_holder(store).owner == "third build"


def test_the_heartbeat_keeps_the_lock_fresh(tmp_path):
    store = Store(str(tmp_path / "out"))
    with build_lock(store, heartbeat_s=0.05) as holder:
        deadline = time.monotonic() + 5
        while current_holder(store).heartbeat == holder.heartbeat and time.monotonic() < deadline:
            time.sleep(0.02)
        assert current_holder(store).heartbeat > holder.heartbeat
        assert current_holder(store).token == holder.token


def test_a_build_into_a_locked_output_is_refused_and_leaves_it_untouched(tmp_path):
    cfg = load_config(ROOT / "configs/tiny.yaml", {"num_images": 2})
    out = Store(str(tmp_path / "out"))
    with build_lock(out, owner="the other build"):
        with pytest.raises(OutputLocked, match="the other build"):
            build_in_process(cfg, out.root_url)
        assert out.list("") == [".synrail"] and out.list(".synrail") == ["lock"]
    summary = build_in_process(cfg, out.root_url)  # and builds once the other is done
    assert sum(summary.images_per_split.values()) == 2 and not out.exists(LOCK_FILE)


def test_the_cli_refuses_a_locked_output_with_exit_code_2(tmp_path):
    out = Store(str(tmp_path / "out"))
    with build_lock(out, owner="flow run brave-otter"):
        result = subprocess.run([str(SYNRAIL), "build", "--config", "configs/tiny.yaml",
                                 "--out", str(tmp_path / "out")],
                                capture_output=True, text=True, cwd=ROOT, timeout=300,
                                env=dict(os.environ, PREFECT_HOME=str(tmp_path / "home")))
    assert result.returncode == 2, result.stderr
    assert "is being built by flow run brave-otter" in result.stderr and "Traceback" not in result.stderr

"""Claiming an output folder: a fresh one, the same build again, or (with overwrite) a replacement."""

from __future__ import annotations

import json

from synrail import __version__
from synrail.config import BuildConfig
from synrail.storage.lock import LOCK_FILE
from synrail.storage.store import PARTIAL_WRITE, WRITE_PROBE, Store

BUILD_MARKER = ".synrail/build.json"


def cache_url(cfg: BuildConfig, out: Store) -> str:
    """Where a build's caches live: ``execution.cache_url``, else inside the output.

    Args:
        cfg: the build config.
        out: the build's output.

    Returns:
        The cache's root URL.
    """
    return cfg.execution.cache_url or out.url(".synrail/cache")


def _is_write_probe(name: str) -> bool:
    """A write probe, or the temporary of one a build was killed while writing."""
    return name.startswith(WRITE_PROBE) or (name.startswith(f".{WRITE_PROBE}") and bool(PARTIAL_WRITE.match(name)))


def _contents(out: Store) -> list[str]:
    """What the output holds besides the build lock (held while claiming) and what a build killed
    before writing its marker may have left: a write probe, half-written temporaries."""
    names = [n for n in out.list("") if n != ".synrail" and not _is_write_probe(n)]
    return names + [f".synrail/{n}" for n in out.list(".synrail")
                    if f".synrail/{n}" != LOCK_FILE and not PARTIAL_WRITE.match(n)]


def _remove_leftovers(out: Store) -> None:
    """What a killed build left in an output that is SynRail's: write probes, half-written files
    (the caller holds the lock, so no live build is writing them)."""
    for name in out.list(""):
        if _is_write_probe(name):
            out.remove(name)
    out.remove_partial_writes()


class OutputConflict(RuntimeError):
    """The output already holds something other than this build."""


def claim_output(out: Store, cfg: BuildConfig, overwrite: bool) -> bool:
    """Make ``out`` ready for ``cfg``, writing its build marker.

    A folder holding a different build is refused unless ``overwrite`` is set, in which case its
    contents are deleted first. A non-empty folder that is not a SynRail build is always refused:
    overwrite never deletes files SynRail did not write.

    Args:
        out: the output folder; the caller holds its build lock.
        cfg: the build config, identified by its build hash.
        overwrite: replace a different build found there.

    Returns:
        True when ``out`` already holds this very build (a rerun), False when it was claimed afresh.

    Raises:
        OutputConflict: ``out`` holds something else and may not be replaced.
        StoreError: ``out`` is not writable.
    """
    marker = {"build_hash": cfg.build_hash(), "name": cfg.name, "synrail_version": __version__}
    contents = _contents(out)
    if contents and not out.exists(BUILD_MARKER):
        raise OutputConflict(f"{out.root_url} is not empty and holds no SynRail build (it has "
                             f"{', '.join(sorted(contents)[:5])}); choose an empty or new folder for --out")
    _remove_leftovers(out)
    if contents:
        previous = json.loads(out.read_text(BUILD_MARKER))
        if previous.get("build_hash") == marker["build_hash"] and not overwrite:
            return True
        if not overwrite:
            raise OutputConflict(f"{out.root_url} holds a different build ({previous.get('name')}, build hash "
                                 f"{previous.get('build_hash')}; this config's is {marker['build_hash']}). "
                                 "Pass --overwrite to replace it, or choose another --out.")
        for name in contents:
            out.remove(name)
    out.check_writable()
    out.write_text(BUILD_MARKER, json.dumps(marker, sort_keys=True))
    return False

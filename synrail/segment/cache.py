"""Masks cached in a Store as Parquet shards, keyed by (image sha256, prompt key, segmenter identity).

Layout: ``<prefix>/<sha256(identity)[:16]>/<sha256 of the shard's bytes[:32]>.parquet``. Every write
is a new shard, written atomically, so several processes can append at once without coordination;
readers take the union of the shards. Shards are listed and read lazily, only when a lookup misses
in memory, so rows other processes add are picked up without rereading what is already known.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from synrail.export.coco import decode_rle, encode_rle
from synrail.segment.base import MaskResult, Prompt, Segmenter
from synrail.storage.store import Store, StoreError, sha256_bytes

SCHEMA = pa.schema([
    ("image_sha256", pa.string()),
    ("prompt_key", pa.string()),
    ("identity", pa.string()),
    ("rle_counts", pa.string()),
    ("height", pa.int32()),
    ("width", pa.int32()),
    ("score", pa.float64()),
])

RowKey = tuple[str, str]  # image sha256, prompt key


@dataclass(frozen=True)
class CachedMask:
    """One cached mask as a row: COCO RLE counts, its size and the segmenter's score."""

    rle_counts: str
    height: int
    width: int
    score: float

    @classmethod
    def from_result(cls, result: MaskResult) -> CachedMask:
        """The row of a segmenter's result."""
        height, width = result.mask.shape
        return cls(encode_rle(result.mask)["counts"], height, width, float(result.score))

    def result(self) -> MaskResult:
        """The mask decoded back, with its score."""
        return MaskResult(decode_rle({"size": [self.height, self.width], "counts": self.rle_counts}), self.score)


class MaskCache:
    """Masks in ``store`` under ``prefix``: one folder per segmenter identity, Parquet shards in it."""

    def __init__(self, store: Store, prefix: str = "masks") -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self._masks: dict[str, dict[RowKey, CachedMask]] = {}  # identity -> rows
        self._read_shards: dict[str, set[str]] = {}  # folder -> shard names already indexed
        self._lock = threading.Lock()

    def folder(self, identity: str) -> str:
        """The folder of one segmenter identity (a hash of it: identities hold slashes)."""
        return f"{self.prefix}/{sha256_bytes(identity.encode('utf-8'))[:16]}"

    def segment_cached(self, segmenter: Segmenter, image_bgr: np.ndarray, image_sha256: str,
                       prompts: Sequence[Prompt]) -> list[MaskResult]:
        """Masks for ``prompts`` in order; the segmenter runs once, on the prompts never seen before.

        Args:
            segmenter: the segmenter, whose identity keys the cache.
            image_bgr: the image, BGR.
            image_sha256: the image's content hash, part of the key.
            prompts: the prompts on it.

        Returns:
            One mask with its score per prompt.

        Raises:
            RuntimeError: the segmenter returned a different number of masks than prompts.
        """
        identity = segmenter.identity
        keys = [prompt.key() for prompt in prompts]
        found = self._lookup(identity, image_sha256, keys)
        if len(found) < len(set(keys)):
            self._read_new_shards(identity)
            found = self._lookup(identity, image_sha256, keys)
        missing = {key: prompt for key, prompt in zip(keys, prompts, strict=True) if key not in found}
        if missing:
            computed = segmenter.segment(image_bgr, list(missing.values()))
            if len(computed) != len(missing):
                raise RuntimeError(f"segmenter {identity} returned {len(computed)} masks for {len(missing)} prompts")
            self._write_shard(identity, image_sha256, dict(zip(missing, computed, strict=True)))
            found.update({key: MaskResult(r.mask.astype(bool, copy=False), float(r.score))
                          for key, r in zip(missing, computed, strict=True)})
        return [found[key] for key in keys]

    def compact(self, identity: str | None = None) -> int:
        """Merge each identity folder's shards into one (all folders when ``identity`` is None).

        Returns the number of shards removed. The merged shard is written before the old ones are
        removed, so a concurrent reader never loses rows (at worst it recomputes a few); shards
        written by others while this runs are left alone. Run one compaction at a time.
        """
        folders = [self.folder(identity)] if identity is not None else \
            [f"{self.prefix}/{name}" for name in self.store.list(self.prefix)]
        removed = 0
        for folder in folders:
            removed += self._compact_folder(folder)
        with self._lock:  # shard names changed: index again lazily
            self._masks.clear()
            self._read_shards.clear()
        return removed

    # -- internals ----------------------------------------------------------------------------
    def _lookup(self, identity: str, image_sha256: str, keys: Iterable[str]) -> dict[str, MaskResult]:
        with self._lock:
            rows = self._masks.get(identity, {})
            hits = {key: rows[(image_sha256, key)] for key in keys if (image_sha256, key) in rows}
        return {key: cached.result() for key, cached in hits.items()}

    def _read_new_shards(self, identity: str) -> None:
        folder = self.folder(identity)
        with self._lock:
            known = set(self._read_shards.get(folder, set()))
        for name in shard_names(self.store, folder):
            if name in known:
                continue
            table = read_shard(self.store, f"{folder}/{name}")
            with self._lock:
                self._read_shards.setdefault(folder, set()).add(name)
                if table is not None:
                    self._index_rows(table)

    def _index_rows(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            cached = CachedMask(row["rle_counts"], row["height"], row["width"], row["score"])
            self._masks.setdefault(row["identity"], {})[(row["image_sha256"], row["prompt_key"])] = cached

    def _write_shard(self, identity: str, image_sha256: str, results: dict[str, MaskResult]) -> None:
        rows = {(image_sha256, key): CachedMask.from_result(result) for key, result in results.items()}
        data = parquet_bytes(rows_table(identity, rows))
        folder = self.folder(identity)
        name = f"{sha256_bytes(data)[:32]}.parquet"  # content-named: identical writes land on one file
        self.store.write_bytes(f"{folder}/{name}", data)
        with self._lock:
            self._read_shards.setdefault(folder, set()).add(name)
            self._masks.setdefault(identity, {}).update(rows)

    def _compact_folder(self, folder: str) -> int:
        names = shard_names(self.store, folder)
        if len(names) < 2:
            return 0
        merged: dict[tuple[str, str, str], dict] = {}
        for name in names:
            table = read_shard(self.store, f"{folder}/{name}")
            for row in [] if table is None else table.to_pylist():
                merged.setdefault((row["identity"], row["image_sha256"], row["prompt_key"]), row)
        data = parquet_bytes(pa.Table.from_pylist([merged[k] for k in sorted(merged)], schema=SCHEMA))
        merged_name = f"{sha256_bytes(data)[:32]}.parquet"
        self.store.write_bytes(f"{folder}/{merged_name}", data)
        stale = [name for name in names if name != merged_name]
        for name in stale:
            self.store.remove(f"{folder}/{name}")
        return len(stale)


def shard_names(store: Store, folder: str) -> list[str]:
    """Finished shards only: atomic writes leave hidden temporary files while in progress.

    Args:
        store: the cache's store.
        folder: one identity's folder.

    Returns:
        The shards' file names.
    """
    return [name for name in store.list(folder) if name.endswith(".parquet") and not name.startswith(".")]


def read_shard(store: Store, rel: str) -> pa.Table | None:
    """The shard's rows, or None when a concurrent compaction removed it after it was listed.

    Args:
        store: the cache's store.
        rel: the shard's path.

    Returns:
        The shard's table, or None.

    Raises:
        StoreError: the shard exists but cannot be read.
    """
    try:
        return pq.read_table(pa.BufferReader(store.read_bytes(rel)), schema=SCHEMA)
    except StoreError:
        if store.exists(rel):
            raise
        return None


def rows_table(identity: str, rows: dict[RowKey, CachedMask]) -> pa.Table:
    """The cache rows of one identity as an Arrow table in ``SCHEMA``, sorted by (image, prompt key).

    Args:
        identity: the segmenter identity.
        rows: the masks by (image sha256, prompt key).

    Returns:
        The table.
    """
    keys = sorted(rows)
    return pa.Table.from_pydict({
        "image_sha256": [image for image, _ in keys],
        "prompt_key": [prompt for _, prompt in keys],
        "identity": [identity] * len(keys),
        "rle_counts": [rows[k].rle_counts for k in keys],
        "height": [rows[k].height for k in keys],
        "width": [rows[k].width for k in keys],
        "score": [rows[k].score for k in keys],
    }, schema=SCHEMA)


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as one Parquet file's bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()

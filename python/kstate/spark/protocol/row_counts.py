"""How many live entries each key-value store of a partition holds, exactly, after each commit
(Spark's ``numRowsTotal``), and what the commit changed (``numRowsUpdated``, ``numRowsRemoved``).

RocksDB only estimates its entries, and counting them is a scan of the store. So the count is kept
incrementally: the commit already reads the committed value of every key the batch wrote (for the
undo file); reading the staged values of those same keys (one native call on the overlay) tells,
per key, whether it appeared, stayed or went. The counts are written after each commit to
``<task dir>/.kstate-row-counts.json`` beside each store's committed changelog offset; a task
that opens the store at another offset (restored from the changelog, rolled back, or the file
lost) counts the store once by a scan. Offsets a batch log entry covers are never rewritten, so a
store at a recorded offset holds the state that was counted.

Stores with a TTL drop expired entries without a write, so they are counted by a scan at every
commit. Window and session stores drop whole segments by retention: they report no row counts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstate.key_value_store import KeyValueStore
from kstate.store_lifecycle import StoreLifecycle, native_store

ROW_COUNTS_FILE = ".kstate-row-counts.json"


@dataclass
class StoreWrites:
    """What one commit did to a store's keys: ``updated`` keys now hold a value, ``removed``
    keys held one and hold none now, ``added`` of the updated held none before; ``bytes``: the
    keys and values the changelog records carry."""

    updated: int = 0
    removed: int = 0
    added: int = 0
    bytes: int = 0


def staged_writes(native: Any, previous: Any) -> StoreWrites:
    """The writes a key-value store has staged, from ``previous`` (the undo batch: each written
    key and its committed value) and the staged values of those keys."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, before = previous.column(0), previous.column(1)
    count = len(keys)
    if count == 0:
        return StoreWrites()
    validity, offsets, data = keys.buffers()
    packed = native.get_many_packed(
        offsets.to_pybytes(),
        data.to_pybytes() if data is not None else b"",
        validity.to_pybytes() if validity is not None else None,
        keys.offset,
        count,
        False,
    )
    now_validity, now_offsets, now_data, now_nulls = packed
    now = pa.Array.from_buffers(
        pa.binary(), count, [pa.py_buffer(now_validity), pa.py_buffer(now_offsets), pa.py_buffer(now_data)], now_nulls
    )
    went = pc.sum(pc.and_(now.is_null(), before.is_valid())).as_py() or 0
    came = pc.sum(pc.and_(now.is_valid(), before.is_null())).as_py() or 0
    key_bytes = pc.sum(pc.binary_length(keys)).as_py() or 0
    value_bytes = pc.sum(pc.binary_length(now)).as_py() or 0
    return StoreWrites(updated=count - now_nulls, removed=went, added=came, bytes=key_bytes + value_bytes)


def scan_count(store: StoreLifecycle) -> int:
    """The store's live entries, counted by a scan of its committed and staged state."""
    rows = native_store(store).range(None, None)
    total = 0
    try:
        while (chunk := rows.next_chunk()) is not None:
            total += sum(1 for _ in chunk)
    finally:
        rows.close()
    return total


class RowCounts:
    """The live entries of one partition's key-value stores, as of their committed offsets."""

    def __init__(self, task_dir: Path, expiring: set[str]):
        self.path = task_dir / ROW_COUNTS_FILE
        self.expiring = expiring
        """The stores with a TTL, counted by a scan at every commit."""
        self.totals: dict[str, int] = {}
        self.writes: dict[str, StoreWrites] = {}

    @staticmethod
    def counted(stores: dict[str, StoreLifecycle]) -> dict[str, StoreLifecycle]:
        return {name: store for name, store in stores.items() if isinstance(store, KeyValueStore)}

    def opened(self, stores: dict[str, StoreLifecycle]) -> None:
        """Takes each store's count from the file if the store is at the offset it was counted
        at, else counts it."""
        try:
            recorded = json.loads(self.path.read_text())
        except (OSError, ValueError):
            recorded = {}
        self.writes = {}
        self.totals = {}
        for name, store in self.counted(stores).items():
            offset, total = recorded.get(name, (None, None))
            if total is not None and offset == store.committed_offset() and name not in self.expiring:
                self.totals[name] = total
            else:
                self.totals[name] = scan_count(store)

    def staged(self, name: str, store: StoreLifecycle, previous: Any) -> None:
        """Before a store publishes: what its staged writes (``previous``: their undo) change."""
        if isinstance(store, KeyValueStore):
            self.writes[name] = staged_writes(native_store(store), previous)

    def committed(self, stores: dict[str, StoreLifecycle]) -> None:
        """After the commit: the new counts, recorded with the stores' offsets."""
        recorded = {}
        for name, store in self.counted(stores).items():
            writes = self.writes.get(name, StoreWrites())
            if name in self.expiring:
                self.totals[name] = scan_count(store)
            else:
                self.totals[name] = self.totals.get(name, 0) + writes.added - writes.removed
            recorded[name] = [store.committed_offset(), self.totals[name]]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(recorded))
        os.replace(tmp, self.path)  # no fsync: a lost or stale file only costs a scan

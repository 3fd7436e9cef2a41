"""How many live entries each store of a partition holds, exactly, after each commit (Spark's
``numRowsTotal``), and what the commit changed (``numRowsUpdated``, ``numRowsRemoved``, the
changelog's bytes).

RocksDB only estimates its entries, and counting them is a scan of the store. So the count is kept
incrementally: the commit already reads the committed value of every key the batch wrote (for the
undo file); reading the staged values of those same keys (one native call) tells, per key,
whether it appeared, stayed or went. The counts are written after each commit to
``<task dir>/.kstate-row-counts.json`` beside each store's committed changelog offset, and a
key-value store's count also goes into the batch log entry (``BatchEntry.rows``), as Spark keeps
``numRowsTotal`` in its checkpoint: a partition restored on a new executor (from a snapshot and
the changelog) takes it from there. A task that opens a store at an offset neither names (rolled
back, or both lost) counts the store once by a scan. Offsets a batch log entry covers are never
rewritten, so a store at a recorded offset holds the state that was counted.

Window and session stores hide what is older than ``stream time - retention + 1`` (window start,
session end) at once, without a write, and drop whole segments later. So their count is kept per
segment time (the live entries of each window start or session end, a file per store beside the
counts, ``.kstate-row-counts-<store>.arrow``): a commit adds its writes at their times and drops
the times reads no longer show; the total is the sum. A write older than what reads show (a
late row into the oldest live segment) is published and stored but hidden at once: it counts as
an update and in the changelog's bytes, not in the entries.

Stores with a TTL drop expired entries without a write, so they are counted by a scan at every
commit.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kstate.key_value_store import KeyValueStore
from kstate.segmented_store import SegmentedStore
from kstate.session_store import SessionStore
from kstate.store_lifecycle import StoreLifecycle, native_store
from kstate.windowed import MAX_TIME, MIN_TIME

if TYPE_CHECKING:
    from kstate.spark.protocol.batch_log import BatchEntry

ROW_COUNTS_FILE = ".kstate-row-counts.json"
TIMES_FILE = ".kstate-row-counts-{store}.arrow"
"""A window or session store's live entries per segment time, with the offset they are counted at."""


@dataclass
class StoreWrites:
    """What one commit did to a store's keys: ``updated`` keys now hold a value, ``removed``
    keys held one and hold none now, ``added`` of the updated held none before; ``bytes``: the
    keys and values the changelog records carry."""

    updated: int = 0
    removed: int = 0
    added: int = 0
    bytes: int = 0


def _packed_keys(keys: Any) -> tuple:
    """The buffers of the Arrow binary array ``keys`` as the native packed calls take them."""
    validity, offsets, data = keys.buffers()
    return (
        offsets.to_pybytes(),
        data.to_pybytes() if data is not None else b"",
        validity.to_pybytes() if validity is not None else None,
        keys.offset,
        len(keys),
        False,
    )


def _binary(packed: tuple, count: int) -> Any:
    import pyarrow as pa

    validity, offsets, data, nulls = packed
    buffers = [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), count, buffers, nulls)


def record_bytes(keys: Any, values: Any) -> int:
    """The bytes of changelog records of ``keys`` and ``values`` (Arrow binary arrays; a null
    value is a tombstone)."""
    import pyarrow.compute as pc

    return (pc.sum(pc.binary_length(keys)).as_py() or 0) + (pc.sum(pc.binary_length(values)).as_py() or 0)


def staged_writes(native: Any, previous: Any) -> StoreWrites:
    """The writes a key-value store has staged, from ``previous`` (the undo batch: each written
    key and its committed value) and the staged values of those keys."""
    import pyarrow.compute as pc

    keys, before = previous.column(0), previous.column(1)
    count = len(keys)
    if count == 0:
        return StoreWrites()
    now = _binary(native.get_many_packed(*_packed_keys(keys)), count)
    went = pc.sum(pc.and_(now.is_null(), before.is_valid())).as_py() or 0
    came = pc.sum(pc.and_(now.is_valid(), before.is_null())).as_py() or 0
    return StoreWrites(updated=count - now.null_count, removed=went, added=came, bytes=record_bytes(keys, now))


def min_live_time(store: SegmentedStore) -> int:
    """The earliest segment time reads of a window or session store show now."""
    return native_store(store).stream_time - store.retention_period + 1


def staged_segment_writes(store: SegmentedStore, previous: Any) -> tuple[StoreWrites, Any]:
    """The writes a window or session store has staged (``previous``: their undo, store keys and
    committed values), as the changelog will carry them, and how they change its live entries
    per segment time: a table of ``time`` and ``rows`` (+1 a key appears, -1 it goes) at the
    times reads show."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, before = previous.column(0), previous.column(1)
    count = len(keys)
    if count == 0:
        return StoreWrites(), _times_table([], [])
    times_bytes, packed = native_store(store).staged_values_packed(*_packed_keys(keys))
    now = _binary(packed, count)
    times = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(times_bytes)])
    went = pc.and_(now.is_null(), before.is_valid())
    came = pc.and_(now.is_valid(), before.is_null())
    writes = StoreWrites(
        updated=count - now.null_count,
        removed=pc.sum(went).as_py() or 0,
        added=pc.sum(came).as_py() or 0,
        bytes=record_bytes(keys, now),
    )
    delta = pc.subtract(pc.cast(came, pa.int64()), pc.cast(went, pa.int64()))
    changed = pc.and_(pc.not_equal(delta, 0), pc.greater_equal(times, min_live_time(store)))
    return writes, _times_table(times.filter(changed), delta.filter(changed))


def _times_table(times: Any, rows: Any) -> Any:
    import pyarrow as pa

    schema = pa.schema([("time", pa.int64()), ("rows", pa.int64())])
    return pa.table({"time": times, "rows": rows}, schema=schema)


def scan_count(store: StoreLifecycle) -> int:
    """A key-value store's live entries, counted by a scan of its committed and staged state."""
    rows = native_store(store).range(None, None)
    total = 0
    try:
        while (chunk := rows.next_chunk()) is not None:
            total += sum(1 for _ in chunk)
    finally:
        rows.close()
    return total


def scan_segment_times(store: SegmentedStore) -> Any:
    """A window or session store's live entries per segment time (window start, session end),
    counted by a scan."""
    import pyarrow as pa
    import pyarrow.compute as pc

    native = native_store(store)
    if isinstance(store, SessionStore):
        rows, at = native.find_sessions(None, None, MIN_TIME, MAX_TIME), 2  # (key, start, end, value)
    else:
        rows, at = native.fetch_range(None, None, MIN_TIME, MAX_TIME), 1
    times: list[int] = []
    try:
        while (chunk := rows.next_chunk()) is not None:
            times.extend(row[at] for row in chunk)
    finally:
        rows.close()
    counted = pc.value_counts(pa.array(times, pa.int64()))
    return _times_table(counted.field("values"), counted.field("counts"))


class RowCounts:
    """The live entries of one partition's stores, as of their committed offsets."""

    def __init__(self, task_dir: Path, expiring: set[str]):
        self.task_dir = task_dir
        self.path = task_dir / ROW_COUNTS_FILE
        self.expiring = expiring
        """The stores with a TTL, counted by a scan at every commit."""
        self.totals: dict[str, int] = {}
        self.writes: dict[str, StoreWrites] = {}
        self.times: dict[str, Any] = {}
        """Window and session stores: live entries per segment time (``time``, ``rows``)."""
        self._deltas: dict[str, Any] = {}
        self.rolled_back_bytes: dict[str, int] = {}
        """Per store, the changelog bytes this task's rollbacks published."""

    @staticmethod
    def counted(stores: dict[str, StoreLifecycle]) -> dict[str, StoreLifecycle]:
        return {name: store for name, store in stores.items() if isinstance(store, (KeyValueStore, SegmentedStore))}

    def opened(self, stores: dict[str, StoreLifecycle], published: BatchEntry | None) -> None:
        """Takes each store's count from the files or from ``published`` (the batch log's head)
        if the store is at the offset it was counted at, else counts it."""
        try:
            recorded = json.loads(self.path.read_text())
        except (OSError, ValueError):
            recorded = {}
        if published is not None:
            for name, total in published.rows.items():
                if name in published.offsets and recorded.get(name, (None,))[0] != published.offsets[name]:
                    recorded[name] = (published.offsets[name], total)
        self.writes, self._deltas, self.totals, self.times = {}, {}, {}, {}
        for name, store in self.counted(stores).items():
            offset, total = recorded.get(name, (None, None))
            current = total is not None and offset == store.committed_offset() and name not in self.expiring
            if isinstance(store, SegmentedStore):
                times = self._read_times(name, offset) if current else None
                if times is None or _sum(times) != total:
                    times = scan_segment_times(store)
                self.times[name] = times
                self.totals[name] = _sum(times)
            else:
                self.totals[name] = total if current else scan_count(store)

    def published_rows(self, stores: dict[str, StoreLifecycle]) -> dict[str, int]:
        """Before the batch log entry: the key-value stores' counts once the staged writes
        commit (those with a TTL, counted by a scan, are left out)."""
        rows = {}
        for name, store in self.counted(stores).items():
            if isinstance(store, KeyValueStore) and name not in self.expiring:
                writes = self.writes.get(name, StoreWrites())
                rows[name] = self.totals.get(name, 0) + writes.added - writes.removed
        return rows

    def staged(self, name: str, store: StoreLifecycle, previous: Any) -> None:
        """Before a store publishes: what its staged writes (``previous``: their undo) change."""
        if isinstance(store, KeyValueStore):
            self.writes[name] = staged_writes(native_store(store), previous)
        elif isinstance(store, SegmentedStore):
            self.writes[name], self._deltas[name] = staged_segment_writes(store, previous)

    def rolled_back(self, name: str, undo: Any) -> None:
        """A rollback staged ``undo`` (store keys and the values they get back) on store ``name``."""
        keys, values = undo.column("key"), undo.column("value")
        self.rolled_back_bytes[name] = self.rolled_back_bytes.get(name, 0) + record_bytes(keys, values)

    def committed(self, stores: dict[str, StoreLifecycle]) -> None:
        """After the commit: the new counts, recorded with the stores' offsets."""
        recorded = {}
        kept = self.published_rows(stores)
        for name, store in self.counted(stores).items():
            if isinstance(store, SegmentedStore):
                if name in self.expiring:
                    times = scan_segment_times(store)
                else:
                    times = _live(self.times.get(name), self._deltas.get(name), min_live_time(store))
                self.times[name] = times
                self.totals[name] = _sum(times)
                self._write_times(name, store.committed_offset(), times)
            elif name in self.expiring:
                self.totals[name] = scan_count(store)
            else:
                self.totals[name] = kept[name]
            recorded[name] = [store.committed_offset(), self.totals[name]]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(recorded))
        os.replace(tmp, self.path)  # no fsync: a lost or stale file only costs a scan

    def _times_path(self, name: str) -> Path:
        return self.task_dir / TIMES_FILE.format(store=name)

    def _read_times(self, name: str, offset: int | None) -> Any:
        """The recorded times of store ``name`` if they were counted at ``offset``, else ``None``."""
        import pyarrow as pa

        try:
            with pa.memory_map(str(self._times_path(name))) as source:
                table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid):
            return None
        counted_at = json.loads((table.schema.metadata or {}).get(b"offset", b"false"))
        return table if counted_at == offset else None

    def _write_times(self, name: str, offset: int | None, times: Any) -> None:
        import pyarrow as pa

        path = self._times_path(name)
        tmp = path.with_suffix(".tmp")
        table = times.replace_schema_metadata({"offset": json.dumps(offset)})
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)  # written before the counts file that names its offset


def _sum(times: Any) -> int:
    import pyarrow.compute as pc

    return pc.sum(times.column("rows")).as_py() or 0


def _live(times: Any, deltas: Any, shown_from: int) -> Any:
    """``times`` (live entries per segment time) plus ``deltas``, without the times before
    ``shown_from`` and those left without entries."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [t for t in (times, deltas) if t is not None and t.num_rows]
    if not parts:
        return _times_table([], [])
    summed = pa.concat_tables(parts).group_by("time").aggregate([("rows", "sum")])
    merged = _times_table(summed.column("time"), summed.column("rows_sum"))
    kept = pc.and_(pc.greater_equal(merged.column("time"), shown_from), pc.greater(merged.column("rows"), 0))
    return merged.filter(kept)

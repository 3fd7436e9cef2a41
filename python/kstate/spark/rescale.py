"""Rescaling an application's state to another partition count, offline, from its changelogs.

Spark routes a key to ``pmod(hash(keys), n)``, so a new ``n`` moves most keys to another
partition. ``rescale`` rebuilds every store of the application for the new count: it reads each
old partition's state as of what its batch log records (the newest usable snapshot at or below
that offset, then the changelog after it: ``kstate.log.history``), computes every stored key's new
partition exactly as Spark will route it (the key columns come back out of the store key: the
serde's value for a single key column, the pickled key of ``transform_with_state``'s state
variables and timers), and publishes them as the state of a new *generation*
(``<application_id>-gen<g>``: its own changelogs, batch logs and undo files). The undo files of the
batches the old partitions can still roll back are re-routed too, so a batch Spark replays after
the restart rolls back as it would have. Writing the partitioning record of the new generation
is the switch: a rescale killed before it leaves the old state as it was (running it again starts
the new generation over), one killed after it only left old files to delete (running it again
deletes them). The query must be stopped while it runs.
"""

from __future__ import annotations

import logging
import pickle
import re
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kstate import _core
from kstate.errors import InvalidArgumentError, PartitioningChangedError, ProcessorStateError
from kstate.log.history import StoreHistory, snapshot_entries
from kstate.log.object_store import ObjectStore, is_url
from kstate.spark.protocol.batch_log import EMPTY_STATE, BatchEntry, BatchLog, RemoteBatchLog
from kstate.spark.protocol.exactly_once import PartitionState, StateLayout, stage_raw
from kstate.spark.protocol.locking import FileLock
from kstate.spark.protocol.published_changelog import stored_entries
from kstate.spark.protocol.task import TaskInfo
from kstate.spark.protocol.undo import UNDO_SCHEMA, RemoteUndoFiles, UndoFiles
from kstate.spark.routing.hashing import partition_ids
from kstate.spark.routing.partitioning import (
    SNAPSHOT_KINDS,
    Partitioning,
    PartitioningLog,
    arrow_type_of,
    generation_application_id,
    store_builder,
)
from kstate.store_lifecycle import native_store
from kstate.stores import StoreBuilder

log = logging.getLogger("kstate.spark.rescale")

KeyFunction = Callable[[bytes], tuple]
"""A store key's bytes (for window and session stores the record key) -> its key column values."""

_SUFFIX = {"key_value": 0, "window": 12, "session": 16}
"""Window store keys end in start (8) + seq (4), session keys in end (8) + start (8)."""
_MAX_HISTORY = 1000


@dataclass
class RescaleReport:
    """What a rescale did."""

    from_partitions: int
    to_partitions: int
    generation: int
    records: int = 0
    """Changelog records read from the old partitions."""
    snapshots: int = 0
    """Old store partitions read from a snapshot (and the changelog after it only)."""
    snapshot_entries: int = 0
    """Entries read from those snapshots."""
    batch: int = EMPTY_STATE
    """The batch the new partitions' state is at (the latest of the old partitions)."""


class _Router:
    """New partitions of stored keys, as Spark routes their key columns."""

    def __init__(self, record: Partitioning, num_partitions: int, key_functions: Mapping[str, KeyFunction]):
        self.record = record
        self.n = num_partitions
        self.types = [arrow_type_of(kind) for _, kind in record.keys]
        self.key_functions = key_functions

    def _values(self, store: str, codec: str, keys: list[bytes]) -> list[tuple]:
        if store in self.key_functions:
            return [tuple(self.key_functions[store](k)) for k in keys]
        if codec == "serde:string":
            return [(k.decode("utf-8"),) for k in keys]
        if codec == "serde:int64":
            return [(int.from_bytes(k, "big", signed=True),) for k in keys]
        if codec == "serde:bytes":
            return [(k,) for k in keys]
        if codec == "pickle":
            return [pickle.loads(k) for k in keys]
        if codec == "pickle-prefixed":
            return [pickle.loads(_core.state_split_prefixed(k)[0]) for k in keys]
        if codec == "pickle-after-expiry":
            return [pickle.loads(_core.state_split_timer_by_time(k)[1]) for k in keys]
        if codec == "ttl-index":
            return [pickle.loads(_core.state_split_ttl_entry(k)[2]) for k in keys]
        raise InvalidArgumentError(
            f"store {store!r}: kstate cannot tell its key columns from its keys ({codec}); pass "
            f"key_functions={{{store!r}: fn}} with fn(key bytes) -> tuple of key column values"
        )

    def partitions(self, store: str, description: Mapping[str, Any], keys: pa.Array) -> np.ndarray:
        """The new partition of each store key in ``keys`` (binary)."""
        suffix = _SUFFIX[description["kind"]]
        raw = keys.to_pylist()
        if suffix:
            raw = [k[:-suffix] for k in raw]
        rows = self._values(store, description["key"], raw)
        if any(len(r) != len(self.types) for r in rows):
            raise InvalidArgumentError(f"store {store!r}: a key does not give {len(self.types)} key column values")
        try:
            columns = [pa.array([r[i] for r in rows], type=t) for i, t in enumerate(self.types)]
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
            raise InvalidArgumentError(
                f"store {store!r}: its keys do not convert to the key columns ({self.record.describe_keys()}): {error}"
            ) from None
        return partition_ids(columns, self.n)


class _Location:
    """The changelog location of the application: a directory or an object store URL."""

    def __init__(self, changelog_dir: str, storage_options: Mapping[str, Any] | None):
        self.url = changelog_dir if is_url(changelog_dir) else None
        self.directory = Path() if self.url else Path(changelog_dir).absolute()
        self.options = dict(storage_options or {})
        self._objects = ObjectStore(self.url, self.options) if self.url else None

    def layout(self, application_id: str, state_dir: Path) -> StateLayout:
        return StateLayout(state_dir, self.directory, application_id, self.url, self.options)

    def delete(self, name: str) -> None:
        """Deletes the partition directory (or the objects under the prefix) ``name``."""
        if self._objects is None:
            shutil.rmtree(self.directory / name, ignore_errors=True)
        else:
            self._objects.delete_directory(name)

    def exists(self, name: str) -> bool:
        if self._objects is None:
            return (self.directory / name).is_dir()
        return name in self._objects.directories()

    def names(self, application_id: str, stores: list[str], partitions: int) -> list[str]:
        """Every partition directory of ``application_id``'s state: changelogs, batch logs, undo."""
        out = [f"{application_id}-{s}-changelog-{p}" for s in stores for p in range(partitions)]
        out += [f"{application_id}-kstate-{kind}-{p}" for kind in ("batches", "undo") for p in range(partitions)]
        return out

    def existing_partitions(self, application_id: str) -> int:
        """One past the highest partition number with a batch log of ``application_id``."""
        pattern = re.compile(rf"^{re.escape(application_id)}-kstate-batches-(\d+)$")
        if self._objects is None:
            names = [p.name for p in self.directory.glob(f"{application_id}-kstate-batches-*")]
        else:
            names = self._objects.directories()
        return max((int(m.group(1)) + 1 for m in map(pattern.match, names) if m), default=0)


def _history(
    location: _Location, layout: StateLayout, partition: int, head: BatchEntry, entries: Any
) -> tuple[list[tuple[int, dict[str, pa.Table]]], bool]:
    """``(batch id, undo table per store)`` of ``head`` and the entries before it whose undo
    files still exist, newest first, and whether that reaches back to the empty state."""
    undo = (
        RemoteUndoFiles(location.url, layout.undo_name(partition), [], location.options)
        if location.url
        else UndoFiles(layout.undo_dir(partition))
    )
    out: list[tuple[int, dict[str, pa.Table]]] = []
    entry: BatchEntry | None = head
    while entry is not None and len(out) < _MAX_HISTORY:
        try:
            tables = {store: undo.read(name) for store, name in entry.undo.items()}
        except ProcessorStateError:
            return out, False
        if entry.batch_id != EMPTY_STATE:
            out.append((entry.batch_id, tables))
        try:
            entry = None if entry.previous is None else entries.entry(entry.previous)
        except ProcessorStateError:
            return out, False  # the entries before were trimmed with their undo files
    return out, entry is None


def rescale(
    changelog_dir: str | Path,
    application_id: str,
    num_partitions: int,
    *,
    storage_options: Mapping[str, Any] | None = None,
    key_functions: Mapping[str, KeyFunction] | None = None,
    lock_timeout: float = 60.0,
) -> RescaleReport:
    """Rebuilds the state of ``application_id`` at ``changelog_dir`` (a directory or an object
    store URL) for ``num_partitions`` partitions; see the module docstring. ``key_functions``:
    for stores whose keys kstate cannot map to key columns by itself. Stop the query first."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
        raise InvalidArgumentError(f"num_partitions must be a positive int, got {num_partitions!r}")
    location = _Location(str(changelog_dir), storage_options)
    records = PartitioningLog(location.directory, application_id, location.url, location.options)
    record = records.current()
    if record is None:
        raise InvalidArgumentError(
            f"no partitioning record at {records.location}: the application {application_id!r} has not run "
            "with kstate's routing (StateBackend.partition, transform_with_state, apply_in_*) there yet"
        )
    key_functions = dict(key_functions or {})
    stores = sorted(record.stores)
    if record.num_partitions == num_partitions:
        _delete_older_generations(location, application_id, record, stores)
        log.info("%s already has %d partitions (generation %d)", application_id, num_partitions, record.generation)
        return RescaleReport(record.num_partitions, num_partitions, record.generation)
    unroutable = [s for s in stores if record.stores[s]["key"] == "opaque" and s not in key_functions]
    if unroutable:
        raise InvalidArgumentError(
            f"kstate cannot tell the key columns ({record.describe_keys()}) from the keys of stores {unroutable}: "
            "pass key_functions={name: fn} (fn(key bytes) -> tuple of key column values) to kstate.spark.rescale"
        )
    generation = record.generation + 1
    old_app = generation_application_id(application_id, record.generation)
    new_app = generation_application_id(application_id, generation)
    for name in location.names(new_app, stores, max(num_partitions, location.existing_partitions(new_app))):
        location.delete(name)  # what a rescale killed before its switch left
    report = RescaleReport(record.num_partitions, num_partitions, generation)
    builders = [store_builder(s, record.stores[s]) for s in stores]
    router = _Router(record, num_partitions, key_functions)
    log.info(
        "rescaling %s from %d to %d partitions by (%s): generation %d at %s",
        application_id,
        record.num_partitions,
        num_partitions,
        record.describe_keys(),
        generation,
        records.location,
    )
    with tempfile.TemporaryDirectory(prefix="kstate-rescale-") as scratch:
        new_layout = location.layout(new_app, Path(scratch) / "new")
        targets = [PartitionState(builders, new_layout, TaskInfo(p, 0), lock_timeout, 1) for p in range(num_partitions)]
        opened = [t.open() for t in targets]
        try:
            history, batch_ids, floor = _move_partitions(
                location, record, old_app, builders, router, opened, report, lock_timeout
            )
            for state, stores_of in zip(targets, opened):
                _finish_partition(state, stores_of, history.get(state.task.partition, {}), batch_ids, floor, report)
        except BaseException:
            for state in targets:
                state.abort()
            raise
    try:
        records.append(replace(record, num_partitions=num_partitions, generation=generation))
    except FileExistsError:
        raise PartitioningChangedError(
            f"the partitioning record at {records.location} changed while rescaling; nothing was switched"
        ) from None
    log.info("switched %s to generation %d (%d partitions)", application_id, generation, num_partitions)
    _delete_older_generations(location, application_id, replace(record, generation=generation), stores)
    return report


def _move_partitions(
    location: _Location,
    record: Partitioning,
    old_app: str,
    builders: list[StoreBuilder],
    router: _Router,
    opened: list[Any],
    report: RescaleReport,
    lock_timeout: float,
) -> tuple[dict[int, dict[int, dict[str, list[pa.Table]]]], list[int], int | None]:
    """Stages every old partition's published state into the new partitions' stores; returns the
    re-routed undo history (new partition -> batch -> store -> tables), the batch ids every new
    partition's log gets, and the floor batch (the state before the oldest batch every old
    partition can still roll back; ``None`` when all histories reach the empty state)."""
    from tqdm import tqdm

    old_layout = location.layout(old_app, Path(tempfile.gettempdir()))
    history: dict[int, dict[int, dict[str, list[pa.Table]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    oldest_complete: list[int] = []
    batch_ids: set[int] = set()
    event_times: dict[int, int] = {}
    bar = tqdm(total=record.num_partitions, desc=f"rescaling {old_app}", unit="partition", disable=None)
    try:
        for p in range(record.num_partitions):
            if not location.exists(old_layout.batch_log_name(p)):
                bar.update(1)
                continue  # the partition never published
            lock = None
            if location.url is None:
                lock = FileLock(
                    old_layout.batch_log_dir(p) / ".lock", f"publication lock of partition {p}", lock_timeout
                )
                lock.acquire()
            try:
                entries = (
                    RemoteBatchLog(location.url, old_layout.batch_log_name(p), location.options)
                    if location.url
                    else BatchLog(old_layout.batch_log_dir(p))
                )
                head = entries.head()
                if head is None:
                    continue
                walked, complete = _history(location, old_layout, p, head, entries)
                if not complete:
                    oldest_complete.append(walked[-1][0] if walked else head.batch_id + 1)
                for builder in builders:
                    end = head.offsets.get(builder.name)
                    if end is None:
                        continue
                    description = record.stores[builder.name]
                    if description["key"] == "event-time":
                        stage: Callable[[pa.Table], None] = partial(_collect_event_times, event_times=event_times)
                    else:
                        stage = partial(_stage_routed, builder.name, description, router=router, opened=opened)
                    _read_state(location, old_app, builder.name, p, end, description, stage, report)
                for batch_id, tables in walked:
                    batch_ids.add(batch_id)
                    for store, table in tables.items():
                        if record.stores[store]["key"] == "event-time" or table.num_rows == 0:
                            continue
                        ids = router.partitions(store, record.stores[store], table.column("key").combine_chunks())
                        for target in np.unique(ids):
                            history[int(target)][batch_id][store].append(table.filter(pa.array(ids == target)))
                entries.close()
                log.info("partition %d: head batch %d, %d batches of history", p, head.batch_id, len(walked))
            finally:
                if lock is not None:
                    lock.release()
            bar.update(1)
    finally:
        bar.close()
    if event_times:
        _stage_event_times(event_times, builders, record, opened)
    floor = None
    if oldest_complete:
        cutoff = max(oldest_complete)
        batch_ids = {b for b in batch_ids if b >= cutoff}
        floor = cutoff - 1
    return history, sorted(batch_ids), floor


def _read_state(
    location: _Location,
    app: str,
    store: str,
    partition: int,
    end: int,
    description: Mapping[str, Any],
    stage: Callable[[pa.Table], None],
    report: RescaleReport,
) -> None:
    """Hands ``stage`` the state of ``store`` in old ``partition`` at changelog offset ``end``
    as stored entries (``key``, ``value``; ``None`` deletes), in order: the entries of the
    newest usable snapshot at or below ``end``, then the changelog records after it
    (``kstate.log.history``; the changelog before the snapshot is not read, and may be gone)."""
    timestamped = description["supplier"]["timestamped"]
    history = StoreHistory(
        location.url or str(location.directory), f"{app}-{store}-changelog", partition, location.options
    )
    if description["key"] == "event-time":
        # Its records, not its state: one per batch, which the watermarks of the batches a
        # replay redoes read (a snapshot holds only the latest). Whatever the changelog still
        # has: each record is the running maximum of the ones before it.
        for batch in history.records(None, end):
            report.records += batch.num_rows
            stage(batch)
        return
    with tempfile.TemporaryDirectory(prefix="kstate-rescale-") as scratch:
        files = str(Path(scratch) / store)
        loaded = history.load_snapshot(end, files, SNAPSHOT_KINDS[description["kind"]])
        if loaded is not None:
            for entries in snapshot_entries(files, loaded, history.offset_key, timestamped):
                report.snapshot_entries += entries.num_rows
                stage(entries)
            report.snapshots += 1
    for batch in history.records(None if loaded is None else loaded.offset, end):
        report.records += batch.num_rows
        stage(stored_entries(batch, timestamped))


def _stage_routed(
    store: str, description: Mapping[str, Any], batch: pa.Table, router: _Router, opened: list[Any]
) -> None:
    if batch.num_rows == 0:
        return
    table = batch
    ids = router.partitions(store, description, table.column("key").combine_chunks())
    for target in np.unique(ids):
        stage_raw(opened[int(target)][store], table.filter(pa.array(ids == target)))


def _collect_event_times(batch: Any, event_times: dict[int, int]) -> None:
    """transform_with_state's event-time store: the largest event time per batch id."""
    for value in batch.column("value").to_pylist():
        if value is not None:
            batch_id, time_ms = _core.split_event_time_record(value)
            event_times[batch_id] = max(time_ms, event_times.get(batch_id, time_ms))


def _stage_event_times(
    event_times: dict[int, int], builders: list[StoreBuilder], record: Partitioning, opened: list[Any]
) -> None:
    """The event-time history into new partition 0 (the watermark reads every partition's
    records of earlier batches): one entry per batch, and the latest under the usual key."""

    name = next(b.name for b in builders if record.stores[b.name]["key"] == "event-time")
    latest = max(event_times.items(), key=lambda item: (item[1], item[0]))
    batches = sorted(event_times)
    keys = [_core.event_time_history_key(b) for b in batches] + [_core.LATEST_EVENT_TIME_KEY]
    values = [_core.event_time_record(b, event_times[b]) for b in batches] + [_core.event_time_record(*latest)]
    stage_raw(opened[0][name], pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}))


def _finish_partition(
    state: PartitionState,
    stores_of: Any,
    history: dict[int, dict[str, list[pa.Table]]],
    batch_ids: list[int],
    floor: int | None,
    report: RescaleReport,
) -> None:
    """Publishes a new partition's staged state with its batch log (see ``PartitionState.install``)."""

    chain = []
    for batch_id in batch_ids:
        undo = {}
        for store, tables in history.get(batch_id, {}).items():
            table = pa.concat_tables([t.cast(UNDO_SCHEMA) for t in tables]).combine_chunks()
            undo[store] = pa.RecordBatch.from_arrays(
                [table.column(0).chunk(0), table.column(1).chunk(0)], schema=UNDO_SCHEMA
            )
        chain.append((batch_id, undo))
    staged = any(native_store(stores_of[name]).uncommitted()[0] for name in stores_of)
    if not chain and staged:
        chain = [(EMPTY_STATE, {})]
    if not chain:
        state.close()
        return
    entry = state.install(chain, floor)
    report.batch = max(report.batch, chain[-1][0])
    log.info("new partition %d: at batch %d, batch log entry %s", state.task.partition, chain[-1][0], entry.position)


def _delete_older_generations(
    location: _Location, application_id: str, record: Partitioning, stores: list[str]
) -> None:
    """Deletes the files of generations before ``record``'s (a finished rescale's leftovers)."""
    for generation in range(record.generation):
        app = generation_application_id(application_id, generation)
        partitions = location.existing_partitions(app)
        if partitions == 0:
            continue
        log.info("deleting the state of %s (generation %d, superseded)", app, generation)
        for name in location.names(app, stores, partitions):
            location.delete(name)

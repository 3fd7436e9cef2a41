"""A store partition's state as of a changelog offset, read from where its history is kept: the
newest usable snapshot at or below the offset (``kstate.log.snapshots``), then the changelog
records after the snapshot, up to the offset. The tools that read a store's history without
opening the store (``kstate rescale``, ``kstate inspect --history``) start here, so they need
no record a snapshot holds.

Which snapshot: the newest at or below the offset that the changelog continues, i.e. at or past
the changelog's start - 1 (the records right after it are there) and, on an object store, not
inside an object a compaction wrote (it may have dropped tombstones of keys the snapshot holds;
a store restoring from there is wiped too, ``kstate.log.remote.StoreBehindCompaction``). Up to
``SNAPSHOTS_TRIED`` such snapshots are tried, newest first; one is used only once every file
was fetched and checked (size and content hash) and its files open at its offset.

Without a usable snapshot the changelog replays from its start, as before snapshots, unless its
history was deleted because snapshots hold it (``kstate.log.snapshot_retention``: a local
changelog records the offset, Kafka's DeleteRecords, ``kstate.log.files.records_deleted_before``;
an object store's starts past 0, which its compaction never does): then a state the changelog
alone cannot give is ``ChangelogTruncatedError``, naming the partition, the offsets and the
snapshots tried, never a partial state. A local changelog whose start compaction moved (a first
segment whose every record had a later one, deleted) lost nothing of the state.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.config import DEFAULT_CACHE_MAX_BYTES, DEFAULT_UNCOMMITTED_MAX_BYTES, DURABILITY_CHANGELOG
from kstate.errors import ChangelogTruncatedError, CorruptedDataError, RemoteStorageError
from kstate.log.files import end_offset, read_log, records_deleted_before, start_offset
from kstate.log.object_store import is_url
from kstate.log.records import decode_arrow
from kstate.log.remote import Link, RemoteChangelog, resolve
from kstate.log.snapshots import open_snapshots, remove_tree

log = logging.getLogger("kstate.log.history")

SNAPSHOTS_TRIED = 3
"""Snapshots a read of history tries, newest first, as a store's restore does."""
CHUNK_ROWS = 65_536
"""Entries per Arrow batch read out of a snapshot's store."""


@dataclass(frozen=True)
class Loaded:
    """The snapshot a read of history starts from, fetched and checked into a directory."""

    offset: int
    batch_id: int | None
    kind: str
    """The store kind: ``key-value`` (the directory is its RocksDB store), ``window`` or
    ``session`` (the directory holds its segments, ``<store>.<start ms>``)."""
    files: int
    bytes: int
    seconds: float


class StoreHistory:
    """The history of one store partition where the store keeps it: the changelog partition
    ``<changelog_dir>/<topic>-<partition>`` (a directory, or objects under a URL) and the
    snapshots beside it. Nothing here writes there; the changelog's objects are listed once
    (a tool's read, the query stopped or racing it as any reader does)."""

    def __init__(
        self, changelog_dir: str, topic: str, partition: int, storage_options: Mapping[str, Any] | None = None
    ):
        self.topic = topic
        self.partition = partition
        self.offset_key = f"{topic}-{partition}"
        """The name a store of this changelog partition records its offset under."""
        self._remote = (
            RemoteChangelog(changelog_dir, topic, partition, storage_options) if is_url(changelog_dir) else None
        )
        self._directory = Path(changelog_dir) / self.offset_key
        self.location = self._remote.location if self._remote is not None else str(self._directory)
        self.snapshots = open_snapshots(changelog_dir, topic, partition, storage_options)
        self._links: list[Link] | None = None

    @property
    def remote(self) -> bool:
        """Whether the changelog is on an object store."""
        return self._remote is not None

    def _chain(self) -> list[Link]:
        if self._links is None:
            assert self._remote is not None
            self._links = resolve(self._remote.list())
        return self._links

    def log_start_offset(self) -> int | None:
        """The first offset the changelog holds (Kafka's log start offset); ``None`` without any
        segment or object."""
        if self._remote is None:
            first = start_offset(self._directory)
            # Records deleted before an offset may still lie in the segment that spans it.
            return None if first is None else max(first, records_deleted_before(self._directory))
        chain = self._chain()
        return chain[0].first if chain else None

    def deleted_before(self) -> int:
        """The offset the changelog's history was deleted before, because snapshots hold it (0:
        never): what a local changelog records, or where an object store's starts."""
        if self._remote is None:
            return records_deleted_before(self._directory) if self._directory.is_dir() else 0
        return self.log_start_offset() or 0

    def log_end_offset(self) -> int:
        """One past the last published offset (0 when empty); on an object store the newest
        commit object is read for it."""
        if self._remote is None:
            return end_offset(self._directory)
        chain = self._chain()
        if not chain:
            return 0
        newest = chain[-1]
        if newest.last is not None:
            return newest.last + 1
        last = newest.first - 1
        for batch in self.records(newest.first - 1, None):
            last = batch.column("offset")[-1].as_py() if batch.num_rows else last
        return last + 1

    def records(self, after: int | None, until: int | None) -> Iterator[Any]:
        """Record batches (``kstate.log.records.arrow_schema``) of the offsets after ``after``
        (``None``: from the start) up to ``until`` (``None``: the end), in offset order."""
        low = 0 if after is None else after + 1
        if self._remote is None:
            yield from read_log(self._directory, low, None if until is None else until + 1)
            return
        import pyarrow.compute as pc

        wanted = [
            link
            for link in self._chain()
            if (until is None or link.first <= until) and (link.last is None or link.last >= low)
        ]
        with tempfile.TemporaryDirectory(prefix="kstate-history-") as scratch:
            fetched = os.path.join(scratch, "object.log")
            for link in wanted:
                self._remote.store.fetch(self._remote.object_key(link.object.name), fetched)
                with open(fetched, "rb") as file:
                    batch = decode_arrow(file.read())
                offsets = batch.column("offset")
                keep = pc.greater_equal(offsets, max(low, link.first))
                if until is not None:
                    keep = pc.and_(keep, pc.less_equal(offsets, until))
                yield batch.filter(keep)

    def _inside_compacted(self, offset: int) -> str | None:
        """The compacted object of an object-store changelog that ``offset`` lies inside, if any."""
        if self._remote is None:
            return None
        for link in self._chain():
            if link.compacted_over(offset):
                return link.object.name
        return None

    def load_snapshot(self, until: int | None, into: str, kind: str | None = None) -> Loaded | None:
        """Fetches into the new directory ``into``, checked, the newest usable snapshot at or
        below ``until`` (``None``: the newest) that the changelog continues (see the module
        docstring), of a store of ``kind`` (``None``: any), and returns it; ``None`` when the
        changelog alone gives the state (replay it from its start). Raises
        ``ChangelogTruncatedError`` when neither does. Logs the snapshot used or why one was not."""
        log_start = self.log_start_offset()
        listed = self.snapshots.offsets()
        candidates = [
            offset
            for offset in listed
            if (until is None or offset <= until) and (log_start is None or offset >= log_start - 1)
        ]
        tries = candidates[::-1][:SNAPSHOTS_TRIED]
        tried = []
        for offset in tries:
            remove_tree(into)
            try:
                compacted = self._inside_compacted(offset)
                if compacted is not None:
                    raise CorruptedDataError(
                        f"it lies inside the compacted object {compacted}, which may have dropped deletes of its keys"
                    )
                manifest = self.snapshots.read(offset)
                if kind is not None and manifest.kind != kind:
                    raise CorruptedDataError(f"it holds a {manifest.kind} store, not a {kind} store")
                from tqdm import tqdm

                desc = f"loading snapshot of {self.offset_key}"
                with tqdm(total=manifest.total_bytes, desc=desc, unit="B", unit_scale=True, disable=None) as bar:
                    fetched = self.snapshots.fetch(manifest, into, bar.update)
            except (CorruptedDataError, RemoteStorageError, OSError) as error:
                remove_tree(into)
                tried.append(f"{offset}: {type(error).__name__}: {error}")
                log.warning(
                    "History of %s: the snapshot at offset %d in %s cannot be used (%s: %s)",
                    self.offset_key,
                    offset,
                    self.snapshots.location,
                    type(error).__name__,
                    error,
                )
                continue
            log.info(
                "History of %s: loaded the snapshot at offset %d%s from %s: %d files, %.1f MiB in %.2f s "
                "(%.0f MiB/s); the changelog replays from offset %d",
                self.offset_key,
                offset,
                "" if manifest.batch_id is None else f" (batch {manifest.batch_id})",
                self.snapshots.location,
                fetched.files,
                fetched.bytes / 2**20,
                fetched.seconds,
                fetched.bytes / 2**20 / max(fetched.seconds, 1e-9),
                offset + 1,
            )
            return Loaded(offset, manifest.batch_id, manifest.kind, fetched.files, fetched.bytes, fetched.seconds)
        deleted = self.deleted_before()
        if deleted > 0:
            shown = ", ".join(map(str, listed[-5:])) or "none"
            raise ChangelogTruncatedError(
                f"changelog {self.location}: the state needs its records from offset 0, but its history before "
                f"offset {deleted} was deleted because snapshots hold it, and no usable snapshot at or past offset "
                f"{deleted - 1} covers the gap (snapshots at offsets: {shown}{'; ' if tried else ''}{'; '.join(tried)})"
            )
        return None


def open_snapshot_store(
    directory: str, offset_key: str, timestamped: bool, offset: int | None, checked: bool = True
) -> Any:
    """The native key-value store on a fetched snapshot's files in ``directory`` (a scratch
    copy: what it writes stays there; an empty directory for none), checked to stand at
    ``offset`` (not ``checked``: a segment's). The files were captured from an open store, so
    they open with ``"changelog"`` durability (they say the store was not closed, which tells
    nothing here, and keep their offset)."""
    store, _ = _core.KeyValueStore.open_rocksdb(
        os.path.basename(directory),
        directory,
        f"{directory}.uncommitted",
        timestamped,
        True,
        DEFAULT_UNCOMMITTED_MAX_BYTES,
        DEFAULT_CACHE_MAX_BYTES,
        offset_key,
        durability=DURABILITY_CHANGELOG,
    )
    found = store.committed_offset()
    if checked and found != offset:
        store.close()
        raise CorruptedDataError(f"the snapshot at offset {offset} opened at offset {found}")
    return store


def snapshot_entries(directory: str, snapshot: Loaded, offset_key: str, timestamped: bool) -> Iterator[Any]:
    """Every entry of the snapshot fetched into ``directory`` as ``store_entries`` gives them: a
    key-value store's (checked to stand at the snapshot's offset), or each segment's of a window
    or session store, oldest first (their keys are the store keys: key, then times)."""
    if snapshot.kind == "key-value":
        stores = [directory]
    else:
        names = [n for n in os.listdir(directory) if os.path.isdir(os.path.join(directory, n))]
        stores = [os.path.join(directory, n) for n in sorted(names, key=lambda n: int(n.rsplit(".", 1)[1]))]
    for path in stores:
        # A segment records the offset of the last commit that wrote it, not the snapshot's.
        store = open_snapshot_store(path, offset_key, timestamped, snapshot.offset, snapshot.kind == "key-value")
        try:
            yield from store_entries(store)
        finally:
            store.close()


def store_entries(store: Any) -> Iterator[Any]:
    """Every committed entry of a native key-value store as Arrow tables of ``key`` and
    ``value`` (the stored bytes: a timestamped store's carry their timestamp first), in key
    order, ``CHUNK_ROWS`` at a time."""
    import pyarrow as pa

    keys: list[bytes] = []
    values: list[bytes] = []
    entries = store.range(None, None)
    try:
        while (chunk := entries.next_chunk()) is not None:
            for key, value in chunk:
                keys.append(key)
                values.append(value)
            if len(keys) >= CHUNK_ROWS:
                yield pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
                keys, values = [], []
    finally:
        entries.close()
    if keys:
        yield pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def stored_values(records: Any, timestamped: bool) -> list[bytes | None]:
    """Changelog records' values as a store holds them (``None``: deleted): a timestamped
    store keeps the record's timestamp in front of the value."""
    values = records.column("value").to_pylist()
    if not timestamped:
        return values  # type: ignore[no-any-return]
    times = records.column("timestamp").to_pylist()
    return [None if v is None else _core.encode_value_and_timestamp(t, v) for t, v in zip(times, values)]


@dataclass(frozen=True)
class Rebuilt:
    """What :func:`rebuild_state` built: the state at ``offset`` (the last offset it read),
    from ``snapshot`` (``None``: the changelog from its start) and ``replayed`` records."""

    directory: str
    offset: int | None
    snapshot: Loaded | None
    replayed: int
    seconds: float


def rebuild_state(
    history: StoreHistory, directory: str, timestamped: bool | None = None, until: int | None = None
) -> Rebuilt:
    """Builds in the new directory ``directory`` a RocksDB key-value store holding the state of
    ``history``'s store partition as of offset ``until`` (``None``: the changelog's end): its
    newest usable snapshot, then the changelog after it, committed at the last offset read. A
    window or session store's state is its store keys' entries (what its changelog holds, with
    no retention applied). ``timestamped``: the store's format (``None``: the snapshot's, plain
    without one). Raises ``ChangelogTruncatedError`` when its history cannot give that state."""
    started = time.monotonic()
    if os.path.exists(directory):
        raise FileExistsError(directory)
    fetched = f"{directory}.snapshot"
    snapshot = history.load_snapshot(until, fetched)
    key_value = snapshot is not None and snapshot.kind == "key-value"
    if timestamped is None:
        timestamped = snapshot is not None and _snapshot_format(fetched, snapshot) != "plain"
    if key_value:
        os.rename(fetched, directory)
    else:
        os.makedirs(directory)
    offset = snapshot.offset if key_value else None  # type: ignore[union-attr]
    store = open_snapshot_store(directory, history.offset_key, timestamped, offset)
    replayed = 0
    from tqdm import tqdm

    try:
        if snapshot is not None and not key_value:
            for entries in snapshot_entries(fetched, snapshot, history.offset_key, timestamped):
                store.put_all(entries.column("key").to_pylist(), entries.column("value").to_pylist())
            offset = snapshot.offset
            store.commit(offset, time.time_ns() // 1_000_000)
        with tqdm(desc=f"replaying {history.offset_key}", unit=" records", unit_scale=True, disable=None) as bar:
            for batch in history.records(offset, until):
                if not batch.num_rows:
                    continue
                store.put_all(batch.column("key").to_pylist(), stored_values(batch, timestamped))
                offset = batch.column("offset")[-1].as_py()
                store.commit(offset, time.time_ns() // 1_000_000)
                replayed += batch.num_rows
                bar.update(batch.num_rows)
    finally:
        store.close()
        for leftover in (fetched, f"{directory}.uncommitted"):
            shutil.rmtree(leftover, ignore_errors=True)
    seconds = time.monotonic() - started
    log.info(
        "History of %s: rebuilt the state at offset %s from %s and %d changelog records in %.2f s",
        history.offset_key,
        offset,
        "its changelog" if snapshot is None else f"the snapshot at offset {snapshot.offset}",
        replayed,
        seconds,
    )
    return Rebuilt(directory, offset, snapshot, replayed, seconds)


def _snapshot_format(directory: str, snapshot: Loaded) -> str:
    """``plain`` or ``timestamped`` (or ``upgrading``): the format of a fetched snapshot's store,
    or of its first segment's."""
    if snapshot.kind != "key-value":
        segments = sorted(n for n in os.listdir(directory) if os.path.isdir(os.path.join(directory, n)))
        if not segments:
            return "plain"
        directory = os.path.join(directory, segments[0])
    return str(_core.inspect_store(directory)[0])

"""Spark's two watermarks of an event-time micro-batch, read from every partition's
``tws.event-time`` changelog, on a file system or on an object store.

Each partition keeps ``(batch id, largest event time so far)`` under one key of its event-time
store, rewritten every batch (``kstate.spark.processor.processor``), so its changelog holds the
running maximum batch by batch (a rescale adds, once, one record per earlier batch under keys of
their own, and the latest record is their maximum). A task of batch ``N`` takes, over all
partitions' published records, the largest time of the records of batches before ``N`` (the
timers' watermark) and before ``N - 1`` (the late rows' watermark), less the delay: a replayed
batch sees what it saw before.

On a file system, "published" is what a changelog's ``.kstate-published`` marker covers, and
every record of every partition directory is read (``kstate.log.files.read_log``).

On an object store (``changelog_dir`` a URL), published means recorded by the partition's batch
log: commit objects past the offsets its head names may be a crashed or losing attempt's, which
the next attempt voids and deletes (``kstate.spark.protocol.exactly_once``), and one of the same
name may then hold other records. So per partition a task lists the batch log, reads its head
entry (once per new head: entries are immutable by position) and takes only records at or
below the head's event-time offset. Objects up to that offset are immutable (nothing retracts a
recorded commit; compaction writes other names), so each process keeps what it read
(``RemoteEventTimes``, by state and partition): after the first read, a batch costs one listing per
partition, its new head entry and its new event-time commit object, fetched by name (a commit
object is named by its first offset, one past the last offset of the commit before it). A process's
first read fetches objects from the head backwards only until it has a record of the latest key
of a batch before ``N - 1``: being the running maximum, it bounds every record before it (a
rolled-back batch is redone on the same input, so its records held the same values), and the
records before it are dropped from memory the same way after each batch.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.errors import RemoteStorageError
from kstate.log.files import read_log
from kstate.log.records import decode
from kstate.log.remote import RemoteChangelog, object_name, resolve
from kstate.spark.protocol.batch_log import RemoteBatchLog
from kstate.spark.protocol.exactly_once import StateLayout
from kstate.spark.routing.partitioning import Partitioning, PartitioningLog

EVENT_TIME = "tws.event-time"
"""The store of the largest event time seen (one entry), next to the processor's state variables."""

_THREADS = 8
"""Partitions read at once (each read waits on the object store)."""
_LISTING_ATTEMPTS = 3
"""A compaction may delete objects listed a moment ago: list again (as ``RemoteChangelog.sync``)."""


def query_watermarks(
    layout: StateLayout, batch_id: int, delay_ms: int, partitioning: Partitioning | None = None
) -> tuple[int, int]:
    """Spark's two watermarks of batch ``batch_id``: for late rows (the previous batch's
    watermark) and for timers (the largest event time of every partition's earlier batches,
    minus ``delay_ms``; never below 0 and never going back), from the partitions' published
    event-time records. ``partitioning``: the state's record (an object store's partitions are
    its ``num_partitions``; read from the changelog location when not given)."""
    if layout.changelog_url is None:
        times: Iterator[tuple[int, int]] = local_event_times(layout)
    else:
        times = iter(RemoteEventTimes.of(layout, partitioning).event_times(batch_id))
    before_previous = before = None
    for recorded_batch, time in times:
        if recorded_batch < batch_id and (before is None or time > before):
            before = time
        if recorded_batch < batch_id - 1 and (before_previous is None or time > before_previous):
            before_previous = time

    def watermark(largest: int | None) -> int:
        return 0 if largest is None else max(0, largest - delay_ms)

    return watermark(before_previous), watermark(before)


def local_event_times(layout: StateLayout) -> Iterator[tuple[int, int]]:
    """``(batch id, event time)`` of every published record of every partition's event-time
    changelog directory."""
    for directory in layout.changelog_dir.glob(f"{layout.application_id}-{EVENT_TIME}-changelog-*"):
        for batch in read_log(directory):
            for value in batch.column("value").to_pylist():
                if value is not None:
                    yield _core.split_event_time_record(value)


@dataclass
class _Record:
    offset: int
    batch_id: int
    time: int
    latest: bool
    """Under the latest key (the running maximum), not a rescale's record of one batch."""


@dataclass
class _Partition:
    """What this process read of one partition's event-time changelog: ``records`` hold every
    published record at offsets ``<= read_to`` from some offset on (from the log's first when
    ``from_start``), in offset order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    head_position: int = -1
    head_offset: int | None = None
    read_to: int = -1
    from_start: bool = False
    records: list[_Record] = field(default_factory=list)

    def forget(self) -> None:
        self.read_to, self.from_start, self.records = -1, False, []

    def bounded(self, batch_id: int) -> bool:
        """Whether the records cover every published one of the batches before ``batch_id``
        (those before ``batch_id - 1`` through a latest record of one of them)."""
        return self.from_start or any(r.latest and r.batch_id < batch_id - 1 for r in self.records)

    def drop_bounded(self, batch_id: int) -> None:
        """Drops the records before the last latest record of a batch before ``batch_id - 1``."""
        for index in range(len(self.records) - 1, 0, -1):
            record = self.records[index]
            if record.latest and record.batch_id < batch_id - 1:
                del self.records[:index]
                self.from_start = False
                return


_KNOWN: dict[tuple[Any, ...], _Partition] = {}
_KNOWN_LOCK = threading.Lock()


class RemoteEventTimes:
    """The published event-time records of every partition of a state on an object store, read
    through what this process read before (see the module docstring)."""

    def __init__(self, layout: StateLayout, partitioning: Partitioning):
        assert layout.changelog_url is not None
        self.layout = layout
        self.url: str = layout.changelog_url
        self.partitions = partitioning.num_partitions
        # A state deleted and started again at the same place is another state: its records
        # of the same names say other things. Its partitioning record is new.
        options = json.dumps(layout.storage_options, sort_keys=True, default=repr)
        self._identity = (self.url, options, layout.application_id, partitioning.seq, partitioning.time_ms)

    @classmethod
    def of(cls, layout: StateLayout, partitioning: Partitioning | None) -> RemoteEventTimes:
        if partitioning is None:
            assert layout.changelog_url is not None
            partitioning = PartitioningLog(
                layout.changelog_dir, layout.application_id, layout.changelog_url, layout.storage_options
            ).current()
            if partitioning is None:
                partitioning = Partitioning(0, ())
        return cls(layout, partitioning)

    def event_times(self, batch_id: int) -> list[tuple[int, int]]:
        """``(batch id, event time)`` of the published records that bound the watermarks of
        batch ``batch_id`` (and of the batches after it)."""
        partitions = range(self.partitions)
        if self.partitions <= 1:
            found = [self._partition_times(p, batch_id) for p in partitions]
        else:
            with ThreadPoolExecutor(min(_THREADS, self.partitions), thread_name_prefix="kstate-watermark") as pool:
                found = list(pool.map(lambda p: self._partition_times(p, batch_id), partitions))
        return [times for each in found for times in each]

    def _known(self, partition: int) -> _Partition:
        with _KNOWN_LOCK:
            return _KNOWN.setdefault((*self._identity, partition), _Partition())

    def _partition_times(self, partition: int, batch_id: int) -> list[tuple[int, int]]:
        known = self._known(partition)
        with known.lock:
            batches = RemoteBatchLog(self.url, self.layout.batch_log_name(partition), self.layout.storage_options)
            head = batches.next_position - 1
            if head < 0:
                return []
            if head != known.head_position:
                known.head_position, known.head_offset = head, batches.entry(head).offsets.get(EVENT_TIME)
            end = known.head_offset
            if end is None:
                return []  # no event time published yet
            changelog = RemoteChangelog(
                self.url, f"{self.layout.application_id}-{EVENT_TIME}-changelog", partition, self.layout.storage_options
            )
            if known.read_to > end or (known.read_to >= 0 and not self._read_forward(changelog, known, end)):
                known.forget()  # the head went back (not one state's history) or the objects were compacted
            if known.read_to != end or not known.bounded(batch_id):
                self._read_backward(changelog, known, end, batch_id)
            known.drop_bounded(batch_id)
            return [(r.batch_id, r.time) for r in known.records]

    def _read_forward(self, changelog: RemoteChangelog, known: _Partition, end: int) -> bool:
        """Adds the commit objects after ``known.read_to`` up to ``end``, each fetched by its
        name (one past the last offset of the one before); ``False`` if one is not there
        (compacted away: the caller reads by listing instead)."""
        with tempfile.TemporaryDirectory(prefix="kstate-watermark-") as scratch:
            while known.read_to < end:
                try:
                    records, last = _fetch(changelog, object_name(known.read_to + 1), Path(scratch))
                except FileNotFoundError:
                    return False
                if last is None or last > end:
                    return False  # not one recorded commit: read by listing
                known.records.extend(records)
                known.read_to = last
        return True

    def _read_backward(self, changelog: RemoteChangelog, known: _Partition, end: int, batch_id: int) -> None:
        """Reads the objects holding offsets up to ``end`` from the newest back, until the records
        bound batch ``batch_id``'s watermarks (or the log's first object is read)."""
        known.forget()
        for _ in range(_LISTING_ATTEMPTS):
            links = [link for link in resolve(changelog.list()) if link.first <= end]
            found: list[_Record] = []
            try:
                with tempfile.TemporaryDirectory(prefix="kstate-watermark-") as scratch:
                    for index in range(len(links) - 1, -1, -1):
                        link = links[index]
                        last = end if link.last is None else min(end, link.last)
                        records = _fetch(changelog, link.object.name, Path(scratch))[0]
                        found[:0] = [r for r in records if link.first <= r.offset <= last]
                        known.records, known.read_to, known.from_start = found, end, index == 0
                        if known.bounded(batch_id):
                            return
                known.records, known.read_to, known.from_start = found, end, True
                return
            except FileNotFoundError:
                known.forget()
        raise RemoteStorageError(f"changelog {changelog.location}: objects kept disappearing while reading them")


def _fetch(changelog: RemoteChangelog, name: str, scratch: Path) -> tuple[list[_Record], int | None]:
    """The event-time records of one object and its last offset (``None`` if it holds no
    record); ``FileNotFoundError`` if it is not there."""
    path = scratch / name
    changelog.store.fetch(changelog.object_key(name), str(path))
    try:
        data = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    out, last = [], None
    for record in decode(data):
        last = record.offset
        if record.value is not None:
            recorded_batch, time = _core.split_event_time_record(record.value)
            out.append(_Record(record.offset, recorded_batch, time, record.key == _core.LATEST_EVENT_TIME_KEY))
    return out, last

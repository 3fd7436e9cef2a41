"""A store's changelog read beside the query: the records of one partition's store between two
offsets its batch log recorded, from the changelog's directory (its files, without opening the
log: ``kstate.log.files``) or from its object store (``kstate.log.remote``), and those records
as the store holds them (``stored_entries``).

Such a reader (a replica, a rescale) races the query, which keeps publishing and compacting, and
may come back after a long while. What it reads gives exactly the state at the offset it reads to
when

- every offset after the one its copy stands on is there: a gap means compaction or retention
  removed records since, tombstones of keys the copy holds among them, so the copy cannot catch
  up record by record (``BehindHistory``: restore it from scratch);
- a read from scratch starts at the changelog's real start, or right after the snapshot it
  starts from (``store_history``: ``kstate.log.history`` picks the newest usable one): once the
  history below the oldest kept snapshot was deleted (``kstate.log.snapshot_retention``), the
  records alone no longer give the state (``ChangelogTruncatedError``), and history deleted past
  the snapshot since it was picked, or compacted over it, means reading again
  (``ChangelogMoved``: a newer one is picked);
- no compaction ran while it read (one may remove a key's tombstone after the reader took the
  key's older value) or reached past the offset it reads to (one may have dropped a record of
  that state for a later record of its key): it reads again, up to a newer batch log head
  (``ChangelogMoved``). In a directory a compaction replaces segment files: ``watch()``, called
  before the batch log head is read, names them, and reading ends by comparing. On an object
  store it writes compacted objects, merged as of every object there was then: compacted
  objects read while objects past the bound exist, or an object gone while fetching, say so.

A compaction keeps each key's latest record as of when it ran, so records read from scratch give
the state at the head it ran after, not at an older entry's offsets: such reads go up to a head
read after ``watch()``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kstate import _core
from kstate.errors import ChangelogTruncatedError, ProcessorStateError
from kstate.log.files import read_log, records_deleted_before
from kstate.log.records import decode_arrow

if TYPE_CHECKING:
    import pyarrow as pa

    from kstate.log.history import StoreHistory
    from kstate.spark.protocol.exactly_once import StateLayout


class BehindHistory(ProcessorStateError):
    """The records after the offset a copy stands on are no longer all there (compacted or
    deleted by retention): it cannot catch up record by record, only be restored from scratch."""


class ChangelogMoved(ProcessorStateError):
    """The changelog was compacted while it was read, or past the offset it was read to: read
    again, up to a newer batch log head."""


def stored_entries(records: pa.RecordBatch, timestamped: bool) -> pa.Table:
    """Changelog records as the store holds them, ``key`` / ``value`` (``None``: deleted): a
    timestamped store (``timestamped``: its supplier's format) keeps the record's timestamp in
    front of the value (8 bytes, big-endian), its changelog in the record."""
    import pyarrow as pa

    if not timestamped:
        return pa.Table.from_batches([records.select(["key", "value"])])
    values = [
        None if v is None else _core.encode_value_and_timestamp(t, v)
        for t, v in zip(records.column("timestamp").to_pylist(), records.column("value").to_pylist())
    ]
    return pa.table({"key": records.column("key"), "value": pa.array(values, pa.binary())})


def published_changelog(layout: StateLayout, store: str, partition: int) -> ChangelogFiles | ChangelogObjects:
    """The changelog of ``store`` in ``partition`` where ``layout`` keeps it."""
    if layout.changelog_url is None:
        return ChangelogFiles(layout.changelog_partition_dir(store, partition))
    return ChangelogObjects(
        layout.changelog_url, f"{layout.application_id}-{store}-changelog", partition, layout.storage_options
    )


def store_history(layout: StateLayout, store: str, partition: int) -> StoreHistory:
    """The history of ``store`` in ``partition`` where ``layout`` keeps it: its changelog and the
    snapshots beside it, for a copy built from scratch to start from the newest usable one."""
    from kstate.log.history import StoreHistory

    topic = f"{layout.application_id}-{store}-changelog"
    if layout.changelog_url is None:
        return StoreHistory(str(layout.changelog_dir), topic, partition)
    return StoreHistory(layout.changelog_url, topic, partition, layout.storage_options)


def _floor(after: int | None, snapshot: int | None) -> int:
    """The offset a read starts after: the copy's, else the snapshot's a copy built from scratch
    starts from (-1: the changelog's start)."""
    return after if after is not None else -1 if snapshot is None else snapshot


def _checked(batches: Iterator[pa.RecordBatch], after: int | None, until: int, floor: int) -> Iterator[pa.RecordBatch]:
    """``batches`` (records after ``floor``, up to ``until``), checked: offsets rise, and with a
    copy standing on ``after`` every offset up to ``until`` is there."""
    import numpy as np

    last = floor
    for batch in batches:
        if not batch.num_rows:
            continue
        offsets = batch.column("offset").to_numpy()
        if offsets[0] <= last or (len(offsets) > 1 and not (np.diff(offsets) > 0).all()):
            raise ChangelogMoved("records came out of order (the files changed while read)")
        if after is not None and (offsets[0] != last + 1 or offsets[-1] - offsets[0] != len(offsets) - 1):
            raise BehindHistory(f"offsets after {last} are missing (compacted or deleted)")
        last = int(offsets[-1])
        yield batch
    if after is not None and last != until:
        raise BehindHistory(f"offsets {last + 1} to {until} are missing (compacted or deleted)")


def _check_start(location: str, start: int, snapshot: int | None) -> None:
    """A read from scratch, from the changelog's start or after ``snapshot``, needs the records
    from there on: ``start`` (where the changelog starts now, or the offset its history was
    deleted before) must not be past them."""
    if snapshot is None and start > 0:
        raise ChangelogTruncatedError(
            f"{location}: the history before offset {start} was deleted because snapshots hold it; a read from "
            "scratch would miss it"
        )
    if snapshot is not None and start > snapshot + 1:
        raise ChangelogMoved(
            f"{location}: its history before offset {start} was deleted since the snapshot at offset {snapshot} "
            "was picked"
        )


class ChangelogFiles:
    """A changelog partition directory, read from its segment files."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.location = str(directory)

    def watch(self) -> dict[str, int]:
        """The segment files now (name -> inode): compaction and retention replace or delete
        them, appending leaves them."""
        found = {}
        for path in self.directory.glob("*.log"):
            try:
                found[path.name] = path.stat().st_ino
            except FileNotFoundError:
                continue  # deleted as it was listed
        return found

    def records(
        self, after: int | None, until: int, watched: Any, snapshot: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Record batches (``kstate.log.records.arrow_schema``) of the offsets after ``after``
        (``None``: from scratch, for a copy built from scratch: from the start, or after the
        offset of the ``snapshot`` it starts from) up to ``until``; ``watched``: ``watch()``
        taken before the batch log head naming ``until`` was read. Raises ``BehindHistory`` or
        ``ChangelogMoved`` (see the module docstring), possibly after yielding: drop what was
        read then."""
        if after is None:
            _check_start(self.location, records_deleted_before(self.directory), snapshot)
        floor = _floor(after, snapshot)
        try:
            yield from _checked(read_log(self.directory, floor + 1, until + 1), after, until, floor)
        except FileNotFoundError:
            raise ChangelogMoved(f"{self.location}: a segment went while it was read") from None
        if self._read_segments(self.watch(), until) != self._read_segments(watched, until):
            raise ChangelogMoved(f"{self.location}: segments were replaced while it was read (a compaction)")

    @staticmethod
    def _read_segments(segments: dict[str, int], until: int) -> dict[str, int]:
        """The segments holding offsets up to ``until`` (a segment is named by its first offset)."""
        return {name: inode for name, inode in segments.items() if int(name.split(".")[0]) <= until}


class ChangelogObjects:
    """A changelog partition on an object store, read object by object."""

    def __init__(self, url: str, topic: str, partition: int, storage_options: dict[str, Any]):
        from kstate.log.remote import RemoteChangelog

        self._remote = RemoteChangelog(url, topic, partition, storage_options)
        self.location = self._remote.location

    def watch(self) -> None:
        """Nothing to note: compacted objects name what they replace."""

    def records(
        self, after: int | None, until: int, watched: Any = None, snapshot: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """As ``ChangelogFiles.records``."""
        import pyarrow.compute as pc

        from kstate.log.remote import resolve

        chain = resolve(self._remote.list())
        if after is None and chain:
            _check_start(self.location, chain[0].first, snapshot)
        over = [link.object.name for link in chain if snapshot is not None and link.compacted_over(snapshot)]
        if over:
            raise ChangelogMoved(f"{self.location}: {over[0]} compacted over the snapshot at offset {snapshot} since")
        floor = _floor(after, snapshot)
        wanted = [link for link in chain if link.first <= until and (link.last is None or link.last > floor)]
        compacted = [link.object.name for link in wanted if link.object.last is not None]
        if compacted and after is not None:
            raise BehindHistory(f"{self.location}: offsets after {after} were compacted ({compacted[0]})")
        if compacted and chain[-1].first > until:
            # A compaction keeps each key's latest record counting every object there was: run
            # since the bound's head was read, it may have dropped records for later ones.
            raise ChangelogMoved(f"{self.location}: compacted, and published past offset {until} since")
        with tempfile.TemporaryDirectory(prefix="kstate-changelog-") as scratch:
            fetched = Path(scratch) / "object.log"

            def batches() -> Iterator[pa.RecordBatch]:
                for link in wanted:
                    try:
                        self._remote.store.fetch(self._remote.object_key(link.object.name), os.fspath(fetched))
                    except FileNotFoundError:
                        raise ChangelogMoved(f"{self.location}: {link.object.name} went while it was read") from None
                    batch = decode_arrow(fetched.read_bytes())
                    offsets = batch.column("offset")
                    low = max(link.first, floor + 1)
                    high = until if link.last is None else min(until, link.last)
                    yield batch.filter(pc.and_(pc.greater_equal(offsets, low), pc.less_equal(offsets, high)))

            yield from _checked(batches(), after, until, floor)

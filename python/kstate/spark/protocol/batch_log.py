"""The batch log of a partition: one record per micro-batch whose state was published.

It is a Kafka log (``<changelog.dir>/<application.id>-kstate-batches-<partition>/``) next to the
stores' changelogs. Each record says which micro-batch produced the state, the changelog offset
of every store at that point, and the undo files that take the state back to the entry before.
Appending an entry (flushed) is the publication point of a micro-batch: a batch counts once its
entry is in this log, whatever its changelogs hold beyond it.

Only the holder of the partition's publication lock opens the log (opening a log cuts a torn
tail, which must never be a concurrent writer's append); readers beside the query read its files
without opening it (``BatchLogReader``). ``.head``, a small file replaced atomically after each
append, lets an attempt note the head before it waits for that lock.

On an object store (``RemoteBatchLog``) there is no lock: each entry is an object
``<20-digit position>.json`` created exclusively, so of two attempts appending at one position
the first wins and the other gets ``BatchConflictError``.

Only the last few states are ever read (rollback reads the one before the head, ``show_as_of``
as far back as undo files are kept), so ``trim`` deletes the entries below them: a query that
runs for weeks keeps a log of a few entries, not one per micro-batch it ever ran.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from kstate.errors import BatchConflictError, CorruptedDataError, ProcessorStateError
from kstate.log.files import end_offset, read_log
from kstate.log.object_store import ObjectStore
from kstate.log.partition import Partition

EMPTY_STATE = -1
"""The batch id of the state before any batch: every store empty."""

_HEAD_FILE = ".head"
SEGMENT_BYTES = 1024 * 1024
"""Opening a log scans its last segment: entries are small, so keep segments small too."""
TRIM_SLACK = 32
"""An object-store log deletes entries it no longer needs once this many have gathered: one
bulk delete per so many micro-batches, not a request per batch."""


@dataclass(frozen=True)
class BatchEntry:
    """One published state of a partition's stores.

    ``offsets``: changelog offset per store (stores whose changelog is empty are absent).
    ``undo``: per store, the undo file of the step from the ``previous`` entry's state to this
    one (stores the step left alone are absent). ``previous``: the log position of the entry of
    the state before (``None``: the empty state). ``restates``: set on an entry written by a
    rollback; the position of the entry it rolled back. ``rows``: the live entries of the
    key-value stores counted incrementally (Spark's ``numRowsTotal``), so a partition restored on
    a new executor takes its counts from here, not from a scan (absent: count by a scan).
    ``position``: where this entry is.
    """

    batch_id: int
    offsets: dict[str, int]
    undo: dict[str, str] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    previous: int | None = None
    restates: int | None = None
    attempt: int = 0
    run_id: str | None = None
    query_id: str | None = None
    time_ms: int = 0
    position: int = -1

    def to_bytes(self) -> bytes:
        fields = asdict(self)
        del fields["position"]
        return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()

    @property
    def holds_state(self) -> bool:
        """Whether the changelogs up to ``offsets`` hold this entry's state. Not so for the
        entries a rescale writes for the history before the state it installs (no offsets): the
        new partitions never published those states, their undo files only lead back to them."""
        return self.batch_id == EMPTY_STATE or bool(self.offsets)

    @classmethod
    def from_bytes(cls, raw: bytes | None, position: int) -> BatchEntry:
        try:
            decoded = json.loads(raw or b"")
            # A field a newer kstate added is left out: the log stays readable after a downgrade.
            return cls(**{k: v for k, v in decoded.items() if k in _ENTRY_FIELDS}, position=position)
        except (ValueError, TypeError, AttributeError) as error:
            raise CorruptedDataError(f"batch log entry at offset {position} is not an entry: {error}") from None


_ENTRY_FIELDS = {f.name for f in fields(BatchEntry)} - {"position"}


class _EntryChain:
    """Walking a batch log's entries back from its head."""

    directory: str | Path

    def head(self) -> BatchEntry | None:
        raise NotImplementedError

    def entry(self, position: int) -> BatchEntry:
        """The entry at ``position``; ``ProcessorStateError`` if it was trimmed."""
        raise NotImplementedError

    def trim(self, keep_from: int) -> bool:
        """Deletes entries below position ``keep_from`` (or some of them, when few have gathered);
        whether it deleted any."""
        raise NotImplementedError

    def _trimmed(self, position: int) -> ProcessorStateError:
        return ProcessorStateError(
            f"batch log {self.directory}: the entry at {position} is no longer kept (entries below the "
            "states that undo files reach are deleted)"
        )

    def history(self, count: int) -> list[BatchEntry]:
        """The head and the entries of the states before it, newest first, at most ``count`` and
        as far back as the log keeps."""
        out: list[BatchEntry] = []
        entry = self.head()
        while entry is not None and len(out) < count:
            out.append(entry)
            if entry.previous is None or len(out) == count:
                break
            try:
                entry = self.entry(entry.previous)
            except ProcessorStateError:
                break  # trimmed
        return out


class BatchLog(_EntryChain):
    """The batch log of one partition. Open it only while holding the publication lock."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._log = Partition.open(self.directory, {"segment.bytes": SEGMENT_BYTES})

    def head(self) -> BatchEntry | None:
        """The last entry: the partition's published state; ``None`` before the first batch."""
        end = self._log.log_end_offset
        return None if end <= self._log.log_start_offset else self.entry(end - 1)

    def entry(self, position: int) -> BatchEntry:
        if position < self._log.log_start_offset:
            raise self._trimmed(position)
        records = self._log.read(position, 1)
        if not records or records[0].offset != position:
            raise CorruptedDataError(f"batch log {self.directory} has no entry at offset {position}")
        return BatchEntry.from_bytes(records[0].value, position)

    @property
    def next_position(self) -> int:
        """The position the next appended entry gets."""
        return self._log.log_end_offset

    def append(self, entry: BatchEntry) -> BatchEntry:
        """Appends ``entry`` durably (the publication point) and returns it with its position."""
        info = self._log.append([(str(entry.batch_id).encode(), entry.to_bytes())], time.time_ns() // 1_000_000)
        self._log.sync_appended()
        written = BatchEntry.from_bytes(entry.to_bytes(), info.last_offset)
        self.write_head_hint(written)
        return written

    def trim(self, keep_from: int) -> bool:
        """Deletes whole segments below ``keep_from``, never the active one."""
        start = self._log.log_start_offset
        return self._log.delete_segments_below(keep_from) > start

    def write_head_hint(self, head: BatchEntry | None) -> None:
        """Records where the head is in ``.head`` (temporary file, rename). Not synced: after a
        machine crash a stale hint costs one attempt a ``BatchConflictError``, and that attempt
        corrects the hint."""
        hint = self.directory / _HEAD_FILE
        tmp = hint.with_suffix(".tmp")
        tmp.write_text(json.dumps(None if head is None else [head.position, head.batch_id]))
        os.replace(tmp, hint)

    def close(self) -> None:
        self._log.close()


class BatchLogReader(_EntryChain):
    """A partition's batch log read without its lock, from its segment files (``kstate.log.files``):
    for readers beside the query (a replica), which must never open the log (opening cuts a torn
    tail, which may be the writer's append in progress). It sees the entries published when it
    reads; an entry being appended is not one yet."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def head(self) -> BatchEntry | None:
        end = end_offset(self.directory) if self.directory.is_dir() else 0
        return None if end == 0 else self.entry(end - 1)

    def entry(self, position: int) -> BatchEntry:
        for batch in read_log(self.directory, position, position + 1):
            if batch.num_rows:
                return BatchEntry.from_bytes(batch.column("value")[0].as_py(), position)
        raise self._trimmed(position)


def peek_head(directory: str | os.PathLike) -> tuple[int, int] | None:
    """``(position, batch_id)`` of the head as last recorded, read without the lock (a hint)."""
    try:
        value = json.loads((Path(directory) / _HEAD_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return None if value is None else (int(value[0]), int(value[1]))


_ENTRY_NAME = re.compile(r"^(\d{20})\.json$")


class RemoteBatchLog(_EntryChain):
    """The batch log of one partition on an object store: entries are objects
    ``<url>/<name>/<20-digit position>.json``, each created exclusively (the publication
    point), read by listing. The same methods as ``BatchLog``."""

    def __init__(self, url: str, name: str, storage_options: dict | None = None):
        self.directory = name
        self._store = ObjectStore(url, storage_options)
        self._positions = self._list()
        self._entries: dict[int, BatchEntry] = {}
        """Entries read or appended by this instance: an entry object never changes once created."""

    def _list(self) -> list[int]:
        found = (_ENTRY_NAME.match(n) for n in self._store.list(self.directory))
        return sorted(int(m.group(1)) for m in found if m)

    def _key(self, position: int) -> str:
        return f"{self.directory}/{position:020d}.json"

    def head(self) -> BatchEntry | None:
        return self.entry(self._positions[-1]) if self._positions else None

    def entry(self, position: int) -> BatchEntry:
        known = self._entries.get(position)
        if known is not None:
            return known
        with tempfile.TemporaryDirectory(prefix="kstate-entry-") as scratch:
            path = Path(scratch) / "entry.json"
            try:
                self._store.fetch(self._key(position), str(path))
            except FileNotFoundError:
                # Listed or pointed to, then gone: a newer attempt's trim took it.
                raise self._trimmed(position) from None
            entry = BatchEntry.from_bytes(path.read_bytes(), position)
        self._entries[position] = entry
        return entry

    @property
    def next_position(self) -> int:
        return self._positions[-1] + 1 if self._positions else 0

    def append(self, entry: BatchEntry) -> BatchEntry:
        """Creates ``entry`` at the next position; ``BatchConflictError`` if another attempt
        created one there first."""
        position = self.next_position
        with tempfile.TemporaryDirectory(prefix="kstate-entry-") as scratch:
            path = Path(scratch) / "entry.json"
            path.write_bytes(entry.to_bytes())
            try:
                self._store.create(self._key(position), str(path))
            except FileExistsError:
                raise BatchConflictError(
                    f"batch log {self.directory}: another attempt published position {position} first"
                ) from None
        self._positions.append(position)
        written = BatchEntry.from_bytes(entry.to_bytes(), position)
        self._entries[position] = written
        return written

    def trim(self, keep_from: int) -> bool:
        """Deletes the listed entries below ``keep_from`` in one request, once ``TRIM_SLACK`` have
        gathered. An interrupted delete leaves some of them listed: the next trim takes those."""
        below = [p for p in self._positions if p < keep_from]
        if len(below) < TRIM_SLACK:
            return False
        self._store.delete_many([self._key(p) for p in below])
        self._positions = self._positions[len(below) :]
        return True

    def write_head_hint(self, head: BatchEntry | None) -> None:
        """No hint file on an object store: listing is the truth."""

    def close(self) -> None:
        """Nothing to release."""

"""``Partition`` and ``Topic``: Kafka logs on disk, in a broker's files and layout.

A topic is a directory of partitions ``<log_dir>/<topic>-<partition>/``; a partition is a directory
of segments ``<20-digit base offset>.log`` (message format v1, v0 readable) with KIP-33
``.index`` / ``.timeindex`` files. Topic configs use Kafka's names (``segment.bytes``,
``segment.ms``, ``message.timestamp.type``, ``message.timestamp.before.max.ms`` /
``.after.max.ms``, ``retention.ms``, ``retention.bytes``, ``cleanup.policy``,
``delete.retention.ms``, ``index.interval.bytes``, ``compression.type``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.log.records import Record, iter_decode

log = logging.getLogger("kstate.log")

DEFAULT_READ_BYTES = 1024 * 1024


class AppendInfo(NamedTuple):
    """What an append did: the offsets it assigned and the timestamps it wrote."""

    first_offset: int
    last_offset: int
    log_append_time: int
    """The time stamped on every record when the topic uses LogAppendTime, else -1."""
    max_timestamp: int


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int


class SegmentInfo(NamedTuple):
    base_offset: int
    size_bytes: int
    max_timestamp: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _topic_config(config: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (config or {}).items()}


def _record_tuple(record: Any, now_ms: int) -> tuple[int, bytes | None, bytes | None]:
    if isinstance(record, Record):
        return record.timestamp, record.key, record.value
    if not isinstance(record, tuple) or len(record) not in (2, 3):
        raise InvalidArgumentError(f"a record to append is (key, value) or (key, value, timestamp), got {record!r}")
    key, value, *timestamp = record
    return (timestamp[0] if timestamp else now_ms), key, value


class Partition:
    """One partition's log. Open with ``Partition.open(directory, config)``; a context manager.

    Opening recovers from a crash as a broker does: a torn or corrupt tail is cut back to the last
    CRC-valid entry and indexes that disagree with their log are rebuilt (both logged). Appends are
    durable after ``flush()``.
    """

    def __init__(self, native: _core.Partition, directory: Path):
        self._native = native
        self.directory = directory

    @classmethod
    def open(cls, directory: str | os.PathLike, config: Mapping[str, Any] | None = None) -> Partition:
        directory = Path(directory)
        native, found = _core.Partition.open(str(directory), _topic_config(config))
        if found["truncated_tail"] is not None:
            removed, problem = found["truncated_tail"]
            log.warning("Partition %s: cut a torn tail of %d bytes (%s)", directory, removed, problem)
        for base_offset, why in found["rebuilt_indexes"]:
            log.info("Partition %s: rebuilt the indexes of segment %d (%s)", directory, base_offset, why)
        return cls(native, directory)

    def append(self, records: Iterable[Any], now_ms: int | None = None) -> AppendInfo:
        """Append records, each ``(key, value)``, ``(key, value, timestamp)`` or a ``Record`` (its
        offset is ignored: the log assigns offsets). Timestamps default to now. A batch with a
        timestamp out of the topic's allowed range is rejected whole
        (``InvalidTimestampError``)."""
        now = _now_ms() if now_ms is None else now_ms
        rows = [_record_tuple(r, now) for r in records]
        return AppendInfo(*self._native.append(rows, now))

    def flush(self) -> None:
        """Make every appended record durable (fsync of the log and its indexes)."""
        self._native.flush()

    def sync_appended(self) -> None:
        """Make every appended record durable without fsyncing the active segment's indexes
        (rebuilt by the scan that follows any crash; ``close`` fsyncs them)."""
        self._native.sync_appended()

    def read_bytes(self, from_offset: int, max_bytes: int = DEFAULT_READ_BYTES) -> bytes:
        """The message-set bytes from the entry holding ``from_offset`` (whole entries, at least
        one), as a fetch returns them."""
        return self._native.read(from_offset, max_bytes)

    def read(self, from_offset: int = 0, max_records: int | None = None) -> list[Record]:
        """Records with offset >= ``from_offset``, in order, up to ``max_records``."""
        out = []
        for record in self.records(from_offset):
            if max_records is not None and len(out) >= max_records:
                break
            out.append(record)
        return out

    def records(self, from_offset: int | None = None) -> Iterator[Record]:
        """Every record from ``from_offset`` (default: the log start) to the current end."""
        next_offset = self.log_start_offset if from_offset is None else max(from_offset, self.log_start_offset)
        while next_offset < self.log_end_offset:
            last = None
            for record in iter_decode(self.read_bytes(next_offset)):
                if record.offset >= next_offset:
                    last = record.offset
                    yield record
            if last is None:
                return
            next_offset = last + 1

    def offsets_for_times(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp``, through the time index (Kafka's
        ``ListOffsets``); ``None`` when there is none."""
        found = self._native.offsets_for_times(timestamp)
        return None if found is None else TimestampAndOffset(*found)

    def truncate_to(self, offset: int) -> None:
        """Drop every record with an offset >= ``offset``."""
        self._native.truncate_to(offset)

    def delete_expired(self, now_ms: int | None = None) -> dict[str, int]:
        """Apply ``retention.ms`` / ``retention.bytes`` (cleanup policy ``delete``)."""
        report = self._native.delete_expired(_now_ms() if now_ms is None else now_ms)
        log.info("Partition %s: retention %s", self.directory, report)
        return report

    def delete_segments_below(self, offset: int, now_ms: int | None = None) -> int:
        """Deletes the oldest segments whose records all have offsets below ``offset`` (never the
        active one), as a cache of a log kept elsewhere drops what its reader consumed; returns
        the new log start offset (the first segment left's base)."""
        return self._native.delete_segments_below(offset, _now_ms() if now_ms is None else now_ms)

    def delete_records_before(self, offset: int, now_ms: int | None = None) -> int:
        """Kafka's DeleteRecords: the log start offset becomes ``offset`` (not past the log end
        offset; a lower one changes nothing), kept across reopening, reads below it fail, and the
        segments wholly below it are deleted. Returns the log start offset."""
        deleted, start = self._native.delete_records_before(offset, _now_ms() if now_ms is None else now_ms)
        log.info("Partition %s: deleted records before offset %d (%d segments)", self.directory, start, deleted)
        return start

    def compact(self, now_ms: int | None = None) -> dict[str, int]:
        """Keep the latest record per key (cleanup policy ``compact``); tombstones go after
        ``delete.retention.ms``."""
        report = self._native.compact(_now_ms() if now_ms is None else now_ms)
        log.info("Partition %s: compaction %s", self.directory, report)
        return report

    @property
    def log_start_offset(self) -> int:
        return self._native.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next record gets."""
        return self._native.log_end_offset

    @property
    def size_bytes(self) -> int:
        return self._native.size_bytes

    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(*s) for s in self._native.segments()]

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> Partition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._native.is_open else "closed"
        return f"<Partition {str(self.directory)!r} {state}>"


def partition_dir(log_dir: str | os.PathLike, topic: str, partition: int) -> Path:
    """``<log_dir>/<topic>-<partition>``: Kafka's directory of a topic partition."""
    return Path(log_dir) / f"{topic}-{partition}"


class Topic:
    """The partitions of one topic under a log directory, opened on first use with the topic's
    config. A context manager that closes what it opened."""

    def __init__(self, log_dir: str | os.PathLike, name: str, config: Mapping[str, Any] | None = None):
        self.log_dir = Path(log_dir)
        self.name = name
        self.config = dict(config or {})
        self._open: dict[int, Partition] = {}

    def partitions(self) -> list[int]:
        """The partition numbers that exist on disk."""
        prefix = f"{self.name}-"
        found = []
        for entry in self.log_dir.glob(f"{self.name}-*"):
            suffix = entry.name[len(prefix) :]
            if entry.is_dir() and suffix.isdigit():
                found.append(int(suffix))
        return sorted(found)

    def partition(self, number: int) -> Partition:
        if number not in self._open:
            self._open[number] = Partition.open(partition_dir(self.log_dir, self.name, number), self.config)
        return self._open[number]

    def close(self) -> None:
        for partition in self._open.values():
            partition.close()
        self._open.clear()

    def __enter__(self) -> Topic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

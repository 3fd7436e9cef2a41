"""Reading a partition directory's files without opening it as a log: no lock and no recovery
(opening cuts a torn tail, which must not race the writer that owns the log). A trailing partial
entry (an append in progress) is left for the next read, and in a store's changelog only
published records count (up to ``.kstate-published``). Used by the Spark data source, the
Spark event-time watermark and standby stores built beside a serving one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.log.records import decode_arrow, shallow_entries

_PUBLISHED_MARKER = ".kstate-published"
_CHUNK_BYTES = 16 * 1024 * 1024


def _published_end(partition_dir: Path) -> int | None:
    """One past the last published offset of a kstate changelog; ``None`` for other logs."""
    try:
        return int((partition_dir / _PUBLISHED_MARKER).read_text().strip()) + 1
    except (FileNotFoundError, ValueError):
        return None


def records_deleted_before(partition_dir: Path) -> int:
    """The offset records were deleted before in a partition directory (Kafka's DeleteRecords: a
    kstate changelog's history that snapshots hold, ``kstate.log.snapshot_retention``); 0 if none
    were. ``read_log`` from below it would miss what was deleted."""
    return _core.records_deleted_before(str(partition_dir))


def read_log(partition_dir: Path, start: int = 0, end: int | None = None) -> Iterator[Any]:
    """Record batches (``kstate.log.records.arrow_schema``) of the records with ``start <= offset
    < end`` in a partition directory, read from its segment files."""

    published = _published_end(partition_dir)
    if published is not None:
        end = published if end is None else min(end, published)
    segments = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))
    for i, segment in enumerate(segments):
        following = int(segments[i + 1].stem) if i + 1 < len(segments) else None
        if following is not None and following <= start:
            continue  # the whole segment is before start
        if end is not None and int(segment.stem) >= end:
            return
        with open(segment, "rb") as file:
            if int(segment.stem) < start:
                file.seek(_indexed_position(file, segment, start))
            chunk_bytes = _CHUNK_BYTES
            while True:
                position = file.tell()
                data = file.read(chunk_bytes)
                if not data:
                    break
                entries = shallow_entries(data)
                if not entries:
                    if len(data) < chunk_bytes:
                        break  # a partial entry at the end: an append in progress
                    chunk_bytes *= 2  # one entry larger than the chunk
                    file.seek(position)
                    continue
                consumed = entries[-1].position + entries[-1].size
                file.seek(position + consumed)
                batch = decode_arrow(data[:consumed])
                yield _between(batch, start, end)


_INDEX_ENTRY = struct.Struct(">ii")
_ENTRY_HEADER = struct.Struct(">qi")


def _indexed_position(file: Any, segment: Path, offset: int) -> int:
    """Where reading ``segment`` for the records from ``offset`` on can start: the position of
    the last entry its offset index (``.index``, spec 3.7: an entry's offset relative to the
    base and its position, one per ``index.interval.bytes`` of log) names at or below
    ``offset``, if the entry there has that offset (an index written before a truncation could
    name another); else 0."""
    base = int(segment.stem)
    try:
        data = segment.with_suffix(".index").read_bytes()
    except FileNotFoundError:
        return 0
    indexed, position = base, 0
    for at in range(0, len(data) - len(data) % _INDEX_ENTRY.size, _INDEX_ENTRY.size):
        relative, physical = _INDEX_ENTRY.unpack_from(data, at)
        if (at and relative == 0 and physical == 0) or base + relative > offset:
            break  # Kafka's zero-filled tail, or past the offset
        indexed, position = base + relative, physical
    if position == 0:
        return 0
    file.seek(position)
    header = file.read(_ENTRY_HEADER.size)
    found = _ENTRY_HEADER.unpack(header)[0] if len(header) == _ENTRY_HEADER.size else None
    return position if found == indexed else 0


def _between(batch: Any, start: int, end: int | None) -> Any:
    import pyarrow.compute as pc

    offsets = batch.column("offset")
    keep = pc.greater_equal(offsets, start)
    if end is not None:
        keep = pc.and_(keep, pc.less(offsets, end))
    return batch.filter(keep)


def _segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))


def start_offset(partition_dir: Path) -> int | None:
    """The first offset a partition directory holds (Kafka's log start offset: the oldest
    segment's base offset); ``None`` when it has no segment."""
    segments = _segments(partition_dir)
    return int(segments[0].stem) if segments else None


def end_offset(partition_dir: Path) -> int:
    """One past the last readable record of a partition directory (0 when empty). Only the
    newest segment is read: a segment is named by its first offset, which is where the one
    before it ended."""
    segments = _segments(partition_dir)
    if not segments:
        return 0
    end = int(segments[-1].stem)
    for batch in read_log(partition_dir, end):
        if batch.num_rows:
            end = batch.column("offset")[-1].as_py() + 1
    published = _published_end(partition_dir)
    return end if published is None else min(end, published)


_TIME_ENTRY = struct.Struct(">qi")


def _time_index(segment: Path) -> list[tuple[int, int]]:
    """``(largest timestamp so far, its absolute offset)`` entries of a segment's time index
    (spec 3.8), stopping at Kafka's zero-filled tail."""
    base = int(segment.stem)
    try:
        data = segment.with_suffix(".timeindex").read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for position in range(0, len(data) - len(data) % _TIME_ENTRY.size, _TIME_ENTRY.size):
        timestamp, relative = _TIME_ENTRY.unpack_from(data, position)
        if position and timestamp == 0 and relative == 0:
            break
        entries.append((timestamp, base + relative))
    return entries


def first_offset_at(partition_dir: Path, timestamp: int) -> int:
    """The first offset whose record's timestamp is at or after ``timestamp`` (the end offset
    when there is none), as Kafka's ``offsetsForTimes``: the time indexes of sealed segments
    skip whole segments and narrow the scan to what follows the last entry before the time."""
    import pyarrow.compute as pc

    segments = _segments(partition_dir)
    scan_from = 0
    for i, segment in enumerate(segments):
        scan_from = int(segment.stem)
        entries = _time_index(segment)
        sealed = i + 1 < len(segments)
        if sealed and (not entries or entries[-1][0] < timestamp):
            continue  # a sealed segment's last entry is its largest timestamp: all before the time
        before = [offset for ts, offset in entries if ts < timestamp]
        scan_from = max(scan_from, before[-1]) if before else scan_from
        break
    for batch in read_log(partition_dir, scan_from):
        at_or_after = pc.greater_equal(batch.column("timestamp"), timestamp)
        if pc.any(at_or_after).as_py():
            return batch.column("offset")[pc.index(at_or_after, True).as_py()].as_py()
    return end_offset(partition_dir)

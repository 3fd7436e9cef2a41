"""``kstate.log.files.read_log`` from an offset inside a segment starts where the segment's
offset index points (a tail of a large segment is read without the rest), and gives exactly
what a read from the segment's start does; an index that names another entry there (written
before a truncation) is not trusted."""

from __future__ import annotations

import struct

import pytest

from kstate.errors import CorruptedDataError
from kstate.log import Partition
from kstate.log.files import read_log

RECORDS = 2_000


@pytest.fixture
def segment(tmp_path):
    """One segment of ``RECORDS`` records appended ten at a time, indexed every 512 bytes."""
    with Partition.open(tmp_path, {"index.interval.bytes": 512}) as log:
        for first in range(0, RECORDS, 10):
            log.append([(b"k%d" % i, b"v%d" % i, 1_000 + i) for i in range(first, first + 10)])
        log.flush()
    return tmp_path


def offsets(directory, start):
    return [o for batch in read_log(directory, start) for o in batch.column("offset").to_pylist()]


def values(directory, start):
    return [v for batch in read_log(directory, start) for v in batch.column("value").to_pylist()]


def test_a_read_from_an_offset_gives_what_a_read_from_the_start_gives(segment):
    for start in (0, 1, 37, 999, 1_500, RECORDS - 1, RECORDS):
        assert offsets(segment, start) == list(range(start, RECORDS))
        assert values(segment, start) == [b"v%d" % i for i in range(start, RECORDS)]


def test_the_read_starts_at_the_index_entry_not_at_the_segment_start(segment):
    log_file = next(segment.glob("*.log"))
    data = bytearray(log_file.read_bytes())
    data[12:20] = b"\xff" * 8  # the first entry's CRC and header: damaged
    log_file.write_bytes(bytes(data))
    with pytest.raises(CorruptedDataError):
        offsets(segment, 0)
    assert offsets(segment, 1_500) == list(range(1_500, RECORDS)), "the damaged start was never read"


def test_an_index_naming_another_entry_is_not_trusted(segment):
    index = next(segment.glob("*.index"))
    entries = index.read_bytes()
    relative, position = struct.unpack_from(">ii", entries, len(entries) - 8)
    # The last entry's offset moved by one: the entry at its position holds another offset.
    index.write_bytes(entries[:-8] + struct.pack(">ii", relative - 1, position))
    start = relative - 1  # the segment's base is 0; starting at that position would miss it
    assert offsets(segment, start) == list(range(start, RECORDS))

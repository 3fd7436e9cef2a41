"""Reading kstate logs from their files, as the Spark data source does, without Spark."""

import pytest

pytest.importorskip("pyspark")

from kstate.errors import InvalidArgumentError  # noqa: E402
from kstate.log.files import first_offset_at, read_log  # noqa: E402
from kstate.log.partition import Partition  # noqa: E402
from kstate.log.records import Record, encode  # noqa: E402
from kstate.spark.engine.source import _options  # noqa: E402


def offsets(directory, start=0, end=None):
    return [o for batch in read_log(directory, start, end) for o in batch.column("offset").to_pylist()]


def test_segments_ranges_partial_tails_and_the_published_marker(tmp_path):
    directory = tmp_path / "t-0"
    with Partition.open(directory, {"segment.bytes": 2048}) as log:
        for i in range(100):
            log.append([(b"k%d" % i, b"v" * 20)])
        log.flush()
    assert len(list(directory.glob("*.log"))) > 2, "several segments"
    assert offsets(directory) == list(range(100))
    assert offsets(directory, 37, 64) == list(range(37, 64))
    last = max(directory.glob("*.log"), key=lambda p: int(p.stem))
    entry = encode([Record(100, 0, key=b"k", value=b"v" * 50)])
    with open(last, "ab") as tail:
        tail.write(entry[: len(entry) // 2])  # an append in progress
    assert offsets(directory) == list(range(100))
    (directory / ".kstate-published").write_text("89\n")
    assert offsets(directory) == list(range(90)), "a changelog's unpublished records stay unread"


def test_first_offset_at_a_time_uses_the_time_index_and_scans_the_rest(tmp_path):
    directory = tmp_path / "t-0"
    # Timestamps 1000 + 10 * i, except a late record (offset 50, time 400); small segments and
    # a time index entry every few records.
    times = [1000 + 10 * i for i in range(120)]
    times[50] = 400
    with Partition.open(directory, {"segment.bytes": 1024, "index.interval.bytes": 100}) as log:
        for i, ts in enumerate(times):
            log.append([(b"k%d" % i, b"v" * 20, ts)])
        log.flush()
    assert any(p.stat().st_size for p in directory.glob("*.timeindex")), "the time index has entries"

    def expected(target):
        return next((i for i, ts in enumerate(times) if ts >= target), len(times))

    for target in (0, 400, 401, 1000, 1001, 1495, 1500, 2190, 2191, 10**12):
        assert first_offset_at(directory, target) == expected(target), target


def test_starting_offsets_options(tmp_path):
    for p in (0, 1):
        with Partition.open(tmp_path / f"t-{p}") as log:
            for i in range(10):
                log.append([(b"k", b"v", 100 * i)])
            log.flush()

    def starts(**options):
        return _options({"path": str(tmp_path), "topic": "t", **options}).start_offsets()

    assert starts() == {0: 0, 1: 0}
    assert starts(startingOffsets="latest") == {0: 10, 1: 10}
    assert starts(startingOffsets='{"t": {"0": 4, "1": -1}}') == {0: 4, 1: 10}
    assert starts(startingTimestamp="350") == {0: 4, 1: 4}
    with pytest.raises(InvalidArgumentError, match="startingOffsets"):
        starts(startingOffsets='{"t": {"0": 4}}')

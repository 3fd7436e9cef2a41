"""Reading kstate logs from their files, as the Spark data source does, without Spark."""

import pytest

pytest.importorskip("pyspark")

from kstate.log.partition import Partition  # noqa: E402
from kstate.log.records import Record, encode  # noqa: E402
from kstate.spark.source import read_log  # noqa: E402


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

"""``kstate.log.Partition``: Kafka's log files on disk, checked against kafka-python's reader."""

import logging

import pytest
from kafka.record.memory_records import MemoryRecords

from kstate.errors import InvalidTimestampError, StoreClosedError
from kstate.log import Partition, Record, TimestampType, Topic, partition_dir

NOW = 1_700_000_000_000


def kafka_python_records(segment_file):
    """Every record of a segment file as kafka-python's consumer reads it."""
    records = MemoryRecords(segment_file.read_bytes())
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.extend((r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in batch)
    return out


def test_appended_records_are_a_kafka_segment_that_kafka_python_reads(tmp_path):
    directory = partition_dir(tmp_path, "clicks", 0)
    with Partition.open(directory, {"compression.type": "gzip"}) as log:
        first = log.append([(b"a", b"1", NOW), (None, b"2", NOW + 1)], now_ms=NOW)
        second = log.append([(b"c", None, NOW + 5)], now_ms=NOW)
        log.flush()
        assert (first.first_offset, first.last_offset, second.last_offset) == (0, 1, 2)
        assert log.read(1) == [
            Record(1, NOW + 1, TimestampType.CREATE_TIME, None, b"2"),
            Record(2, NOW + 5, TimestampType.CREATE_TIME, b"c", None),
        ]
    assert kafka_python_records(directory / "00000000000000000000.log") == [
        (0, NOW, 0, b"a", b"1"),
        (1, NOW + 1, 0, None, b"2"),
        (2, NOW + 5, 0, b"c", None),
    ]
    with Partition.open(directory) as log:
        assert log.log_end_offset == 3, "reopening keeps every record and the next offset"


def test_offsets_for_times_through_the_time_index(tmp_path):
    with Partition.open(tmp_path / "t-0", {"segment.bytes": 2048, "index.interval.bytes": 128}) as log:
        for i in range(200):
            log.append([(b"k%d" % i, b"v" * 20, NOW + 10 * i)], now_ms=NOW)
        assert len(log.segments()) > 1
        assert log.offsets_for_times(NOW + 995) == (NOW + 1000, 100)
        assert log.offsets_for_times(NOW) == (NOW, 0)
        assert log.offsets_for_times(NOW + 10_000) is None


def test_out_of_range_timestamps_reject_the_whole_batch(tmp_path):
    config = {"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 1000}
    with Partition.open(tmp_path / "t-0", config) as log:
        with pytest.raises(InvalidTimestampError, match="INVALID_TIMESTAMP"):
            log.append([(b"ok", b"1", NOW), (b"late", b"2", NOW - 5000)], now_ms=NOW)
        assert log.log_end_offset == 0, "nothing of the batch was written"
    with Partition.open(tmp_path / "s-0", {"max.message.time.difference.ms": 1000}) as log:
        with pytest.raises(InvalidTimestampError):
            log.append([(b"early", b"1", NOW + 5000)], now_ms=NOW)
        log.append([(b"ok", b"1", NOW + 500)], now_ms=NOW)
    with Partition.open(tmp_path / "u-0", {"message.timestamp.type": "LogAppendTime"}) as log:
        info = log.append([(b"k", b"v", 5)], now_ms=NOW)
        assert info.log_append_time == NOW
        assert log.read(0)[0].timestamp_type == TimestampType.LOG_APPEND_TIME


def test_a_torn_tail_is_cut_on_open_and_everything_before_it_kept(tmp_path, caplog):
    directory = tmp_path / "t-0"
    with Partition.open(directory) as log:
        log.append([(b"k%d" % i, b"v", NOW) for i in range(10)], now_ms=NOW)
        log.flush()
    with open(directory / "00000000000000000000.log", "ab") as segment:
        segment.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x00\x40half an entry")
    with caplog.at_level(logging.WARNING, logger="kstate.log"), Partition.open(directory) as log:
        assert [r.key for r in log.records()] == [b"k%d" % i for i in range(10)]
        log.append([(b"after", b"v", NOW)], now_ms=NOW)
        assert log.log_end_offset == 11
    assert "torn tail" in caplog.text


def test_truncate_compact_and_retention(tmp_path):
    config = {"segment.bytes": 256, "cleanup.policy": "compact,delete", "retention.ms": 60_000}
    with Partition.open(tmp_path / "t-0", config) as log:
        for i in range(60):
            log.append([(b"k%d" % (i % 3), b"%d" % i, NOW + i)], now_ms=NOW)
        log.truncate_to(50)
        assert log.log_end_offset == 50
        report = log.compact(now_ms=NOW + 100)
        assert report["superseded_removed"] > 0
        latest = {r.key: r.value for r in log.records()}
        assert latest == {b"k0": b"48", b"k1": b"49", b"k2": b"47"}
        log.delete_expired(now_ms=NOW + 10 * 60_000)
        assert log.log_start_offset > 0


def test_topics_open_partitions_by_number_and_closed_logs_raise(tmp_path):
    with Topic(tmp_path, "events", {"segment.bytes": 4096}) as topic:
        topic.partition(2).append([(b"k", b"v")])
        topic.partition(0).append([(b"k", b"v")])
        assert topic.partitions() == [0, 2]
        log = topic.partition(0)
    with pytest.raises(StoreClosedError):
        log.append([(b"k", b"v")])

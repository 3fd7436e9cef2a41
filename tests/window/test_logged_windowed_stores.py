"""Window and session stores backed by a changelog: the records are Kafka Streams' (store key,
raw value, spec 1.3 and 1.6-1.7), read back with kafka-python's parser; a lost state dir is
restored with retention applied; each crash window of a commit reopens at exactly the published
commits (SIGKILL of a real writer)."""

import logging
import shutil
import struct
import time

import pytest
from kafka.record.memory_records import MemoryRecords

from kstate import Stores, Windowed

APP = "app"
MINUTE = 60_000


KEEP_FOREVER = {"retention.ms": -1}
"""These tests use timestamps near 1970; the default windowed-changelog retention (the store's
+ 1 day, on the records' timestamps, as Kafka's) would delete their records at the first commit."""


def window_store(timestamped=False, dups=False, retention=10 * MINUTE, logging_config=None):
    factory = Stores.persistent_timestamped_window_store if timestamped else Stores.persistent_window_store
    builder = Stores.timestamped_window_store_builder if timestamped else Stores.window_store_builder
    supplier = factory("w", retention, MINUTE, dups)
    config = KEEP_FOREVER if logging_config is None else logging_config
    return builder(supplier, "string", "string").with_logging_enabled(config).build()


def session_store(retention=10 * MINUTE):
    supplier = Stores.persistent_session_store("s", retention)
    return Stores.session_store_builder(supplier, "string", "int64").with_logging_enabled(KEEP_FOREVER).build()


def changelog_records(state_dir, store_name, partition=0):
    """``(offset, timestamp, key, value)`` of every changelog record, parsed by kafka-python."""
    directory = state_dir / "changelog" / f"{APP}-{store_name}-changelog-{partition}"
    rows = []
    for segment in sorted(directory.glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            rows += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return rows


def window_key(key, start, seq=0):
    return key.encode() + struct.pack(">qi", start, seq)


def session_key(key, start, end):
    return key.encode() + struct.pack(">qq", end, start)


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


def test_window_changelog_records_are_kafka_streams(state_dir):
    task = state_dir / APP / "0_0"
    with window_store(timestamped=True).init(task) as store:
        store.put("a", "x", 0, timestamp=15)
        store.put("b", "y", MINUTE, timestamp=MINUTE + 7)
        assert store.commit() == 1
        store.put("a", None, 0)
        assert store.commit() == 2
        assert store.fetch("a", 0) is None and store.fetch_with_timestamp("b", MINUTE).timestamp == MINUTE + 7
    records = changelog_records(state_dir, "w")
    assert records[:2] == [(0, 15, window_key("a", 0), b"x"), (1, MINUTE + 7, window_key("b", MINUTE), b"y")]
    offset, _, key, value = records[2]
    assert (offset, key, value) == (2, window_key("a", 0), None), "a delete is a tombstone"


def test_plain_windows_get_their_start_as_record_time_and_duplicates_their_seqnum(state_dir):
    with window_store(dups=True).init(state_dir / APP / "0_0") as store:
        store.put("k", "first", 2 * MINUTE)
        store.put("k", "second", 2 * MINUTE)
        store.commit()
    assert changelog_records(state_dir, "w") == [
        (0, 2 * MINUTE, window_key("k", 2 * MINUTE, 1), b"first"),
        (1, 2 * MINUTE, window_key("k", 2 * MINUTE, 2), b"second"),
    ]


def test_session_changelog_records_are_kafka_streams(state_dir):
    with session_store().init(state_dir / APP / "0_0") as store:
        store.put(Windowed("u", 10, 500), 3)
        store.remove(Windowed("u", 10, 500))
        store.put(Windowed("v", 1000, 1000), 1)
        store.commit()
    rows = sorted(changelog_records(state_dir, "s"), key=lambda r: r[2])
    assert [(ts, key, value) for _, ts, key, value in rows] == [
        (500, session_key("u", 10, 500), None),
        (1000, session_key("v", 1000, 1000), struct.pack(">q", 1)),
    ]


def test_the_changelog_drops_windows_older_than_its_retention(state_dir, caplog):
    """Kafka's windowed changelog: compact,delete with retention.ms = the store's + 1 day, on the
    records' timestamps by the clock; the cleaner runs after each commit. The store, which keeps
    windows by stream time, says once that its changelog deletes what it still holds."""
    day = 24 * 60 * MINUTE
    with caplog.at_level(logging.WARNING, logger="kstate.store"):
        with window_store(logging_config={"segment.bytes": 1024}).init(state_dir / APP / "0_0") as store:
            for i in range(40):
                store.put(f"old{i}", "x", 0)  # 1970: far past retention
            store.commit()
            store.put("later", "y", MINUTE)
            store.commit()
            assert store.fetch("old0", 0) == "x", "the store keeps what its own retention keeps"
    assert changelog_records(state_dir, "w") == []
    said = [r.getMessage() for r in caplog.records if "deletes records the store still holds" in r.getMessage()]
    assert len(said) == 1 and "Store w" in said[0], said
    config = window_store(logging_config={})._logging.topic_config
    assert config["cleanup.policy"] == "compact,delete"
    assert config["retention.ms"] == str(10 * MINUTE + day)


def test_current_windows_or_a_changelog_kept_forever_are_not_warned_about(state_dir, caplog):
    now = time.time_ns() // 1_000_000
    with caplog.at_level(logging.WARNING, logger="kstate.store"):
        with window_store(logging_config={}).init(state_dir / APP / "0_0") as store:
            store.put("a", "x", now - 5 * MINUTE)
            store.commit()
        with window_store().init(state_dir / APP / "0_1") as store:  # retention.ms -1, old times
            store.put("a", "x", 0)
            store.commit()
    assert [r for r in caplog.records if "changelog deletes records" in r.getMessage()] == []
    assert len(changelog_records(state_dir, "w")) == 1


def test_a_lost_window_store_is_restored_with_retention_applied(state_dir):
    task = state_dir / APP / "0_0"
    with window_store(timestamped=True, logging_config={"segment.bytes": 4096, **KEEP_FOREVER}).init(task) as store:
        for minute in range(30):  # 30 minutes of windows through a 10-minute retention
            for key in range(20):
                store.put(f"k{key:02d}", f"{minute}", minute * MINUTE, timestamp=minute * MINUTE + key)
            store.commit()
        expected = list(store.all_with_timestamp())
        segments = store.segment_ids()
    assert len(expected) == 20 * 10, "the windows of the last 10 minutes"
    shutil.rmtree(task)
    with window_store(timestamped=True).init(task) as store:
        assert store.restored_records == 600
        assert list(store.all_with_timestamp()) == expected
        assert store.segment_ids() == segments, "expired segments are not recreated"
        assert store.committed_offset() == 599
    with window_store(timestamped=True).init(task) as store:
        assert store.restored_records == 0, "a current store restores nothing"


def test_a_lost_session_store_is_restored(state_dir):
    task = state_dir / APP / "0_3"
    with session_store().init(task) as store:
        for n in range(50):
            store.put(Windowed(f"u{n % 7}", n * 1000, n * 1000 + 500), n)
            if n % 10 == 9:
                store.commit()
        expected = list(store.find_sessions("u0", "u6", 0, 10**9))
    shutil.rmtree(task)
    with session_store().init(task) as store:
        assert store.restored_records == 50
        assert list(store.find_sessions("u0", "u6", 0, 10**9)) == expected


def test_recover_discards_staged_windows_and_keeps_the_committed(state_dir):
    with window_store().init(state_dir / APP / "0_0") as store:
        store.put("a", "committed", 0)
        store.commit()
        store.put("a", "staged", 0)
        store.put("b", "staged", MINUTE)
        assert store.recover() is True
        assert store.fetch("a", 0) == "committed" and store.fetch("b", MINUTE) is None
        assert store.commit() == 0, "nothing left to publish"


KEYS = 50
OPENING = f"""
    supplier = Stores.persistent_window_store("w", 600_000, 60_000)
    store = Stores.window_store_builder(supplier, "string", "int64").with_logging_enabled().build().init(task_dir)
    keys = [f"k{{i:02d}}" for i in range({KEYS})]

    def count_once():
        # One window per key in each of two segments, so a commit spans two segment databases.
        for key in keys:
            for start in (0, 300_000):
                store.put(key, (store.fetch(key, start) or 0) + 1, start)
"""


def reopen_counts(task_dir):
    supplier = Stores.persistent_window_store("w", 600_000, 60_000)
    return Stores.window_store_builder(supplier, "string", "int64").with_logging_enabled().build().init(task_dir)


@pytest.mark.parametrize(
    "window, pause_at, commits, restored",
    [
        ("1: staged, not published", "staged", 1, 0),
        ("2: published, not in the store", "published", 2, 2 * KEYS),
        ("3: in the store, not checkpointed", "store-committed", 2, 0),
        ("4: checkpointed", "checkpointed", 2, 0),
    ],
    ids=lambda v: v.split(":")[0] if isinstance(v, str) and ":" in v else None,
)
def test_each_crash_window_reopens_at_exactly_the_published_commits(
    kill_writer, counting_writer, task_dir, window, pause_at, commits, restored
):
    kill_writer(counting_writer(OPENING), [task_dir, pause_at], wait_for=pause_at)
    with reopen_counts(task_dir) as store:
        assert store.restored_records == restored, window
        assert {kv.value for kv in store.all()} == {commits}, window
        assert len(list(store.all())) == 2 * KEYS
        assert store.committed_offset() == commits * 2 * KEYS - 1

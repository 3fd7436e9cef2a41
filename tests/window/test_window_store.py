"""Window stores through the Python API: Kafka's fetch forms and bounds, retention at its exact
boundaries, duplicates, timestamped forms, views, the on-disk layout and argument errors."""

import struct
import threading

import pytest

from kstate import KeyValue, Stores, TimestampedWindowStore, ValueAndTimestamp, Window, Windowed, WindowStore
from kstate.errors import InvalidArgumentError, InvalidStateStoreError, SerializationError, StoreClosedError

MINUTE = 60_000


@pytest.fixture
def open_window(task_dir):
    opened = []

    def make(retention=10 * MINUTE, size=MINUTE, dups=False, timestamped=False, persistent=True, **kw):
        name = "w"
        if persistent:
            factory = Stores.persistent_timestamped_window_store if timestamped else Stores.persistent_window_store
        else:
            factory = Stores.in_memory_timestamped_window_store if timestamped else Stores.in_memory_window_store
        builder = Stores.timestamped_window_store_builder if timestamped else Stores.window_store_builder
        store = builder(factory(name, retention, size, dups, **kw), "string", "string").build().init(task_dir)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_fetch_forms_bounds_and_order(open_window, persistent):
    store = open_window(persistent=persistent)
    assert isinstance(store, WindowStore) and not isinstance(store, TimestampedWindowStore)
    for key, start in [("a", 0), ("a", MINUTE), ("b", MINUTE), ("a", 6 * MINUTE), ("ab", MINUTE), ("c", 2 * MINUTE)]:
        assert store.put(key, f"{key}@{start // MINUTE}", start)
    assert store.fetch("a", MINUTE) == "a@1"
    assert store.fetch("a", MINUTE + 1) is None
    assert list(store.fetch("a", MINUTE, 6 * MINUTE)) == [KeyValue(MINUTE, "a@1"), KeyValue(6 * MINUTE, "a@6")]
    assert [kv.key for kv in store.backward_fetch("a", 0, 6 * MINUTE)] == [6 * MINUTE, MINUTE, 0]
    ranged = list(store.fetch("a", "b", MINUTE, MINUTE))
    assert ranged == [
        KeyValue(Windowed("a", MINUTE, 2 * MINUTE), "a@1"),
        KeyValue(Windowed("ab", MINUTE, 2 * MINUTE), "ab@1"),
        KeyValue(Windowed("b", MINUTE, 2 * MINUTE), "b@1"),
    ]
    assert ranged[0].key.window == Window(MINUTE, 2 * MINUTE)
    assert list(store.fetch(None, "a", 0, MINUTE)) == [
        KeyValue(Windowed("a", 0, MINUTE), "a@0"),
        KeyValue(Windowed("a", MINUTE, 2 * MINUTE), "a@1"),
    ]
    # Segments of 5 minutes: the 6-minute window comes after every key of the first segment.
    assert [kv.value for kv in store.all()] == ["a@0", "a@1", "ab@1", "b@1", "c@2", "a@6"]
    assert [kv.value for kv in store.backward_all()] == ["a@6", "c@2", "b@1", "ab@1", "a@1", "a@0"]
    assert [kv.value for kv in store.fetch_all(MINUTE, 2 * MINUTE)] == ["a@1", "ab@1", "b@1", "c@2"]
    assert [kv.value for kv in store.backward_fetch_all(MINUTE, 2 * MINUTE)] == ["c@2", "b@1", "ab@1", "a@1"]
    assert list(store.fetch("b", "a", 0, MINUTE)) == [], "key_from > key_to finds nothing, as in Kafka"
    assert list(store.fetch("a", 5, 4)) == []


@pytest.mark.parametrize("dups", [False, True], ids=["unique", "duplicates"])
def test_window_tables_carry_bloom_filters_where_fetch_reads_a_point(open_window, task_dir, filter_entries, dups):
    """``fetch(key, time)``, a windowed aggregation's read of each record's window, is a point
    read: a filter lets one of a window not there skip the table. With duplicates (Kafka's
    stream-stream joins) it reads the window's first duplicate, a range, as every other read
    does, so those tables carry none (nor do session tables)."""
    store = open_window(dups=dups)
    for i in range(300):
        store.put(f"k{i}", str(i), 0)
    store.put("k7", "again", 0)
    store.commit(changelog_offset=0)
    assert store.fetch("k7", 0) == ("7" if dups else "again")
    assert store.fetch("k7", 60_000) is None
    store.close()
    assert filter_entries(task_dir / "w" / "w.0") == (0 if dups else 300)


def test_retention_boundary_late_puts_and_segment_deletion(open_window, task_dir):
    store = open_window(retention=3 * MINUTE)  # segment interval: 90 s
    store.put("k", "first", 1)
    store.put("k", "edge", 0)
    assert store.stream_time == 1
    store.put("k", "now", 3 * MINUTE)  # visible from 3 min - retention + 1 = 1 ms on
    assert store.fetch("k", 1) == "first" and store.fetch("k", 0) is None
    assert [kv.key for kv in store.fetch("k", 0, 10**9)] == [1, 3 * MINUTE]
    store.put("k", "later", 3 * MINUTE + 1)
    assert store.fetch("k", 1) is None, "expired at once"
    # The segment of 0..90 s is still live (its id is not below segment_id(stream time - retention)):
    # a late put there is stored but stays invisible; one a segment further back is dropped.
    assert store.put("k", "late but live", 1)
    assert store.fetch("k", 1) is None
    store.put("k", "far", 20 * MINUTE)
    assert not store.put("k", "too late", 16 * MINUTE)
    assert store.dropped_records == 1
    assert store.segment_ids() == [0, 2, 13], "deleted only when a commit makes the stream time durable"
    store.commit(1)
    assert store.segment_ids() == [13]
    # Only segments in the store directory: Kafka's openExisting skips every segment after a name
    # it cannot parse, so kstate's commit file lives in the task directory.
    assert sorted(p.name for p in (task_dir / "w").iterdir()) == ["w.1170000"]
    assert (task_dir / ".w.commit").is_file()


def test_duplicates_keep_every_put_with_sequence_numbers(open_window, task_dir, column_families):
    store = open_window(dups=True)
    for value in ["x", "y", "z"]:
        store.put("k", value, MINUTE)
    store.put("k", None, MINUTE)  # ignored with duplicates
    assert [kv.value for kv in store.fetch("k", 0, MINUTE)] == ["x", "y", "z"]
    assert [kv.value for kv in store.backward_fetch("k", 0, MINUTE)] == ["z", "y", "x"]
    assert store.fetch("k", MINUTE) == "x"
    store.commit(3)
    store.close()
    keys = list(column_families(task_dir / "w" / "w.0")["default"])
    assert keys == [b"k" + struct.pack(">qi", MINUTE, seq) for seq in (1, 2, 3)]


def test_timestamped_forms_and_on_disk_values(open_window, task_dir, column_families):
    store = open_window(timestamped=True)
    store.put("a", "v1", MINUTE)  # stamped with the window start
    store.put("b", ValueAndTimestamp("v2", 65_000), MINUTE)
    store.put_with_timestamp("c", "v3", 70_000)  # window starts at the timestamp
    store.put_with_timestamp("d", ValueAndTimestamp("v4", 71_000), window_start=MINUTE)
    store.put_with_timestamp("e", "v5", 72_000, MINUTE)
    assert store.fetch_with_timestamp("a", MINUTE) == ValueAndTimestamp("v1", MINUTE)
    assert store.fetch("b", MINUTE) == "v2"
    assert store.fetch_with_timestamp("c", 70_000) == ValueAndTimestamp("v3", 70_000)
    assert list(store.fetch_with_timestamp("e", 0, MINUTE)) == [KeyValue(MINUTE, ValueAndTimestamp("v5", 72_000))]
    assert [kv.value.timestamp for kv in store.fetch_all_with_timestamp(0, MINUTE)] == [
        MINUTE,
        65_000,
        71_000,
        72_000,
    ]
    assert [kv.key.key for kv in store.backward_all_with_timestamp()] == ["e", "d", "c", "b", "a"]
    assert [kv.key.key for kv in store.backward_fetch_with_timestamp("a", "b", 0, MINUTE)] == ["b", "a"]
    with pytest.raises(InvalidArgumentError):
        store.put_with_timestamp("x", "no time")
    store.commit(7)
    store.close()
    cfs = column_families(task_dir / "w" / "w.0")
    assert sorted(cfs) == ["default", "keyValueWithTimestamp", "offsets"]
    assert cfs["keyValueWithTimestamp"][b"b" + struct.pack(">qi", MINUTE, 0)] == struct.pack(">q", 65_000) + b"v2"
    assert cfs["offsets"][b"app-w-changelog-3"] == struct.pack(">q", 7)


def test_views_see_committed_state_from_another_thread(open_window):
    store = open_window()
    store.put("k", "committed", 0)
    store.commit(1)
    view = store.read_only()
    store.put("k", "staged", 0)
    store.put("k", "far ahead", 100 * MINUTE)
    results = []
    thread = threading.Thread(target=lambda: results.extend([view.fetch("k", 0), list(view.all())]))
    thread.start()
    thread.join()
    assert results == ["committed", [KeyValue(Windowed("k", 0, MINUTE), "committed")]]
    assert store.fetch("k", 0) is None, "the writer sees its own stream time"
    assert store.read_only(read_committed=False).fetch("k", 100 * MINUTE) == "far ahead"
    store.close()
    with pytest.raises(StoreClosedError):
        view.fetch("k", 0)


def test_commit_recover_reopen(open_window, task_dir):
    store = open_window()
    store.put("k", "v1", 0)
    store.commit(10)
    store.put("k", "v2", 0)
    store.put("j", "v", 9 * MINUTE)
    assert store.uncommitted_bytes > 0
    assert store.recover(10)
    assert not store.recover(11)
    assert store.fetch("k", 0) == "v1" and store.fetch("j", 9 * MINUTE) is None
    store.put("k", "v3", 0)
    store.close()
    store = open_window()
    assert store.committed_offset() == 10
    assert store.fetch("k", 0) == "v1"


def test_iterators_raise_once_the_store_is_closed(open_window):
    store = open_window()
    for i in range(100):
        store.put(f"k{i:03d}", "v", 0)
    it = store.all()
    next(it)
    store.close()
    with pytest.raises(StoreClosedError):
        list(it)
    with pytest.raises(StoreClosedError):
        store.fetch("k", 0)


def test_argument_errors():
    with pytest.raises(InvalidArgumentError, match="no smaller than its window size"):
        Stores.persistent_window_store("w", 1_000, 2_000)
    with pytest.raises(InvalidArgumentError):
        Stores.persistent_window_store("w", -1, 0)
    with pytest.raises(InvalidArgumentError):
        Stores.window_store_builder(Stores.persistent_timestamped_window_store("w", 1, 1))
    with pytest.raises(InvalidArgumentError):
        Stores.window_store_builder(Stores.persistent_key_value_store("kv"))
    with pytest.raises(InvalidArgumentError):
        Stores.persistent_timestamped_window_store("w", 1, 1, ttl_ms=0)
    with pytest.raises(InvalidArgumentError):
        Stores.persistent_timestamped_window_store("w", 1, 1, ttl_ms=5, ttl_clock="sundial")


def test_bad_calls_raise_typed_errors(open_window):
    store = open_window()
    with pytest.raises(InvalidArgumentError):
        store.put("k", "v", -1)
    with pytest.raises(InvalidArgumentError):
        store.put("k", "v", "soon")
    with pytest.raises(InvalidArgumentError):
        store.fetch("k")
    with pytest.raises(InvalidArgumentError):
        store.put(None, "v", 0)


def test_legacy_segment_directories_are_renamed_and_read(open_window, task_dir):
    store = open_window()
    store.put("k", "v", 5 * MINUTE)
    store.commit(1)
    store.close()
    (task_dir / "w" / "w.300000").rename(task_dir / "w" / "w:300000")
    store = open_window()
    assert (task_dir / "w" / "w.300000").is_dir()
    assert store.fetch("k", 5 * MINUTE) == "v"


def test_reopening_with_another_retention_is_refused_and_loses_nothing(task_dir):
    """Segments are named by start on the retention's segment interval: reopened with another
    retention, a segment that is not one of the new interval's is an error that says why, not
    a directory left unread (its windows gone without a word). The store opens whole again with
    the retention it was written with."""

    def window_store(retention_ms):
        supplier = Stores.persistent_window_store("w", retention_ms, MINUTE)
        return Stores.window_store_builder(supplier, "string", "string").build()

    t0 = 1_700_000_000_000 // MINUTE * MINUTE
    with window_store(60 * MINUTE).init(task_dir) as store:
        for i in range(50):
            store.put(f"k{i}", "v", t0 + i * MINUTE)
        store.commit(1)
    written = sorted(p.name for p in (task_dir / "w").iterdir())
    with pytest.raises(InvalidStateStoreError, match="written with another retention"):
        window_store(3 * 60 * MINUTE).init(task_dir)
    # 10-minute segments start wherever 30-minute ones do: each segment says what it was made with.
    with pytest.raises(InvalidStateStoreError, match="created with a segment interval of 1800000 ms"):
        window_store(20 * MINUTE).init(task_dir)
    assert sorted(p.name for p in (task_dir / "w").iterdir()) == written
    with window_store(60 * MINUTE).init(task_dir) as store:
        assert len(list(store.all())) == 50


def test_non_transactional_store_writes_through(task_dir):
    supplier = Stores.persistent_window_store("w", 10 * MINUTE, MINUTE, transactional=False)
    store = Stores.window_store_builder(supplier, "string", "string").build().init(task_dir)
    assert not store.transactional
    store.put("k", "v", 0)
    assert store.read_only().fetch("k", 0) == "v", "written through: committed at once"
    store.commit(3)
    assert not store.recover(3), "a store written through cannot tell what it holds"
    store.close()
    with Stores.window_store_builder(supplier, "string", "string").build().init(task_dir) as store:
        assert store.committed_offset() == 3
        assert store.fetch("k", 0) == "v"


def test_bytes_serde_fast_path_raises_the_same_typed_errors(task_dir):
    store = Stores.window_store_builder(Stores.persistent_window_store("w", MINUTE, MINUTE)).build().init(task_dir)
    with store:
        for bad in ["soon", True, 2**64, None]:
            with pytest.raises(InvalidArgumentError):
                store.put(b"k", b"v", bad)
        with pytest.raises(InvalidArgumentError):
            store.put(None, b"v", 0)
        with pytest.raises(SerializationError):
            store.put("text", b"v", 0)
        with pytest.raises(InvalidArgumentError):
            store.fetch(b"k", 1.5)
        assert store.put(b"k", b"v", 0) and store.fetch(b"k", 0) == b"v"


def test_plain_segments_open_in_upgrade_mode_as_timestamped(task_dir, column_families, caplog):
    """Each timestamped segment is a timestamped key-value store: a plain segment upgrades lazily."""
    plain = Stores.window_store_builder(Stores.persistent_window_store("w", 10 * MINUTE, MINUTE), "string", "string")
    with plain.build().init(task_dir) as store:
        store.put("old", "legacy", 0)
        store.commit(1)
    timestamped = Stores.timestamped_window_store_builder(
        Stores.persistent_timestamped_window_store("w", 10 * MINUTE, MINUTE), "string", "string"
    )
    with caplog.at_level("INFO", logger="kstate.store"), timestamped.build().init(task_dir) as store:
        assert "upgrade mode" in caplog.text
        assert [kv.value for kv in store.all_with_timestamp()] == [ValueAndTimestamp("legacy", -1)]
        assert store.fetch_with_timestamp("old", 0) == ValueAndTimestamp("legacy", -1)  # migrates
        store.put("new", "v", 0, timestamp=5)
        store.commit(2)
    cfs = column_families(task_dir / "w" / "w.0")
    key = struct.pack(">qi", 0, 0)
    assert cfs["default"] == {}
    assert cfs["keyValueWithTimestamp"] == {
        b"old" + key: b"\xff" * 8 + b"legacy",
        b"new" + key: struct.pack(">q", 5) + b"v",
    }


@pytest.mark.parametrize("serdes", [("bytes", "bytes"), ("string", "string")], ids=["bytes", "string"])
def test_put_all_is_put_of_each_window(task_dir, serdes):
    supplier = Stores.persistent_window_store("w", 3 * MINUTE, MINUTE)
    with Stores.window_store_builder(supplier, *serdes).build().init(task_dir) as store:
        k = (lambda s: s.encode()) if serdes[0] == "bytes" else str
        triples = [(k("a"), k("a0"), 0), (k("b"), k("b1"), MINUTE), (k("a"), k("a1"), MINUTE)]
        assert store.put_all(triples) == 0
        assert store.put_all([k("b")], [None], [MINUTE]) == 0, "None deletes"
        assert store.put_all(iter([(k("c"), k("c20"), 20 * MINUTE)])) == 0
        # Dropped as expired, counted as put counts them; three sequences are the other form.
        assert store.put_all([k("a"), k("c")], [k("late"), k("c21")], [MINUTE, 21 * MINUTE]) == 1
        assert store.dropped_records == 1
        assert list(store.fetch(k("c"), 0, 30 * MINUTE)) == [
            KeyValue(20 * MINUTE, k("c20")),
            KeyValue(21 * MINUTE, k("c21")),
        ]
        store.commit(1)
    with Stores.window_store_builder(supplier, *serdes).build().init(task_dir) as store:
        assert [kv.value for kv in store.all()] == [k("c20"), k("c21")]


def test_put_all_checks_every_entry_before_writing(task_dir):
    store = Stores.window_store_builder(Stores.persistent_window_store("w", MINUTE, MINUTE)).build().init(task_dir)
    with store:
        bad_calls = [
            (([b"k", b"k"], [b"v", b"v"], [0, -1]), InvalidArgumentError),
            (([b"k", b"k"], [b"v", b"v"], [0, "soon"]), InvalidArgumentError),
            (([b"k", None], [b"v", b"v"], [0, 0]), InvalidArgumentError),
            (([b"k", "text"], [b"v", b"v"], [0, 0]), SerializationError),
            (([b"k", b"k"], [b"v", "text"], [0, 0]), SerializationError),
            (([b"k", b"k"], [b"v"], [0, 0]), InvalidArgumentError),
            (([b"k"], [b"v"], None), InvalidArgumentError),
        ]
        for args, error in bad_calls:
            with pytest.raises(error):
                store.put_all(*args)
        assert list(store.all()) == [], "nothing written by a call that raised"
        assert store.put_all([(b"k", b"v", 0)]) == 0 and store.fetch(b"k", 0) == b"v"


@pytest.mark.parametrize("serdes", [("bytes", "bytes"), ("string", "string")], ids=["bytes", "string"])
def test_put_all_refuses_sequences_of_different_lengths(task_dir, serdes):
    supplier = Stores.persistent_window_store("w", MINUTE, MINUTE)
    with Stores.window_store_builder(supplier, *serdes).build().init(task_dir) as store:
        k, v = (b"k", b"v") if serdes[0] == "bytes" else ("k", "v")
        for keys, values, starts in [([k], [v, v], [0]), ([k], [v], [0, 0]), ([k, k], [v], [0, 0])]:
            with pytest.raises(InvalidArgumentError, match="put_all got"):
                store.put_all(keys, values, starts)
        assert list(store.all()) == [], "nothing written by a call that raised"


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_bytes_serde_range_reads_match_the_checked_path(task_dir, persistent):
    """``fetch(key, from, to)`` with bytes serdes goes straight to the native store: the same rows
    as the checked path (a ``bytearray`` key takes it), the same typed errors, across chunks of
    rows of very different sizes (the first row small, later ones far larger, and the reverse)."""
    factory = Stores.persistent_window_store if persistent else Stores.in_memory_window_store
    store = Stores.window_store_builder(factory("w", 10_000 * MINUTE, MINUTE)).build().init(task_dir)
    with store:
        sizes = [1, 7, 3000, 0, 100_000] + [n % 977 for n in range(400)]
        for i, size in enumerate(sizes):
            store.put(b"k", bytes([i % 251]) * size, i * MINUTE)
            store.put(b"big-first", bytes([i % 251]) * sizes[-1 - i], i * MINUTE)
        store.put(b"k\x00", b"other key", 0)
        store.commit(1)
        last = (len(sizes) - 1) * MINUTE
        for key in (b"k", b"big-first"):
            fast = list(store.fetch(key, 0, last))
            assert fast == list(store.fetch(bytearray(key), 0, last))
            assert [r.key for r in fast] == [i * MINUTE for i in range(len(sizes))]
            expected = sizes if key == b"k" else sizes[::-1]
            assert [len(r.value) for r in fast] == expected
            assert [r.key for r in store.backward_fetch(key, 0, last)] == [r.key for r in fast][::-1]
        assert [r.key for r in store.fetch(b"k", 3 * MINUTE, 5 * MINUTE)] == [3 * MINUTE, 4 * MINUTE, 5 * MINUTE]
        for bad in ["soon", True, 2**64, 1.5, None]:
            with pytest.raises(InvalidArgumentError):
                store.fetch(b"k", bad, last)
            with pytest.raises(InvalidArgumentError):
                store.fetch(b"k", 0, bad)
        with pytest.raises(InvalidArgumentError):
            store.fetch(None, 0, last)
        with pytest.raises(SerializationError):
            store.fetch("text", 0, last)


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_one_key_fetch_of_bytes_checks_its_times_as_other_serdes_do(task_dir, persistent):
    factory = Stores.persistent_window_store if persistent else Stores.in_memory_window_store
    store = Stores.window_store_builder(factory("wb", 10 * MINUTE, MINUTE), "bytes", "bytes").build().init(task_dir)
    store.put(b"k", b"v", MINUTE)
    assert list(store.fetch(b"k", 0, MINUTE)) == [KeyValue(MINUTE, b"v")]
    assert list(store.fetch(bytearray(b"k"), 0, MINUTE)) == [KeyValue(MINUTE, b"v")]
    store.commit(1)
    view = store.read_only()
    assert list(view.fetch(b"k", 0, MINUTE)) == list(view.backward_fetch(b"k", 0, MINUTE)) == [KeyValue(MINUTE, b"v")]
    for time_from, time_to in [(True, MINUTE), (0, "soon"), (0.5, MINUTE), (0, 2**63), (-(2**63) - 1, 0)]:
        for reader in (store, view):
            with pytest.raises(InvalidArgumentError, match="time_"):
                reader.fetch(b"k", time_from, time_to)
    store.close()


def test_a_chunk_whose_rows_the_time_filter_drops_does_not_end_the_read(open_window):
    store = open_window()
    for i in range(200):
        store.put(f"a{i:03d}", "early", 0)
    store.put("z", "late", MINUTE)
    assert [kv.key.key for kv in store.fetch_all(MINUTE, MINUTE)] == ["z"]
    assert [kv.key.key for kv in store.backward_fetch_all(0, 0)][:2] == ["a199", "a198"]

"""Session stores through the Python API: Kafka's find_sessions conditions, key layout on disk,
timestamped aggregates, views and argument errors."""

import struct

import pytest

from kstate import KeyValue, Stores, TimestampedSessionStore, ValueAndTimestamp, Windowed
from kstate.errors import InvalidArgumentError, SerializationError, StoreClosedError

MINUTE = 60_000


@pytest.fixture
def open_session(task_dir):
    opened = []

    def make(retention=10 * MINUTE, timestamped=False, persistent=True):
        if persistent:
            factory = Stores.persistent_timestamped_session_store if timestamped else Stores.persistent_session_store
        else:
            factory = Stores.in_memory_timestamped_session_store if timestamped else Stores.in_memory_session_store
        builder = Stores.timestamped_session_store_builder if timestamped else Stores.session_store_builder
        store = builder(factory("s", retention), "string", "int64").build().init(task_dir)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_find_sessions_as_a_session_window_aggregation_uses_it(open_session, persistent):
    store = open_session(persistent=persistent)
    store.put(Windowed("k", 0, 10), 1)
    store.put(Windowed("k", 100, 200), 2)
    store.put(Windowed("k", 6 * MINUTE, 7 * MINUTE), 3)
    store.put(Windowed("j", 100, 150), 4)
    # A record at t=205 with an inactivity gap of 10 merges with sessions ending >= 195, starting <= 215.
    assert list(store.find_sessions("k", 195, 215)) == [KeyValue(Windowed("k", 100, 200), 2)]
    assert [kv.value for kv in store.find_sessions("k", 10, 100)] == [1, 2], "both ends inclusive"
    assert [kv.value for kv in store.backward_find_sessions("k", 0, 2**63 - 1)] == [3, 2, 1]
    assert [kv.value for kv in store.find_sessions("a", "z", 0, 2**63 - 1)] == [4, 1, 2, 3]
    assert [kv.value for kv in store.fetch("k")] == [1, 2, 3]
    assert [kv.value for kv in store.backward_fetch("j", "k")] == [3, 2, 1, 4]
    assert store.fetch_session("k", 100, 200) == 2
    store.remove(Windowed("k", 100, 200))
    assert store.fetch_session("k", 100, 200) is None
    store.put(("k", 0, 10), None)
    assert [kv.value for kv in store.fetch("k")] == [3]


def test_session_tables_carry_no_bloom_filter_and_read_the_same_across_a_change(task_dir, filter_entries):
    """Session reads are ranges, which Bloom filters do not serve, so session segments write
    none (issue 21). A store whose tables have filters (an older kstate, or a user's
    rocksdb.config.setter) reads the same without them, and back."""
    with_filters = {"rocksdb.config.setter": {"block_based_table_factory": {"filter_policy": "bloomfilter:10:false"}}}
    segment = task_dir / "s" / "s.0"
    expected = {}

    def reopen(config, first):
        store = Stores.session_store_builder(Stores.persistent_session_store("s", 10 * MINUTE), "string", "int64")
        store = store.with_config(config).build().init(task_dir)
        for key, sessions in expected.items():
            assert [(kv.key.start, kv.key.end, kv.value) for kv in store.fetch(key)] == sessions
            start, end, value = sessions[0]
            assert list(store.find_sessions(key, end, end)) == [KeyValue(Windowed(key, start, end), value)]
            assert store.fetch_session(key, start, end) == value
            assert store.fetch_session(key, start, end + 1) is None
        for i in range(first, first + 200):
            sessions = expected.setdefault(f"k{i % 250}", [])
            sessions.append((i * 100, i * 100 + 50, i))
            store.put(Windowed(f"k{i % 250}", i * 100, i * 100 + 50), i)
        store.commit(changelog_offset=first)
        store.close()

    reopen(with_filters, 0)
    assert filter_entries(segment) == 200
    reopen({}, 200)
    assert filter_entries(segment) == 200, "the new table has no filter; the old one keeps its own"
    reopen(with_filters, 400)
    assert filter_entries(segment) == 400
    reopen({}, 600)


def test_keys_on_disk_are_key_end_start(open_session, task_dir, column_families):
    store = open_session()
    store.put(Windowed("a", 10, 20), 5)
    store.commit(0)
    store.close()
    data = column_families(task_dir / "s" / "s.0")["default"]
    assert data == {b"a" + struct.pack(">qq", 20, 10): struct.pack(">q", 5)}


def test_retention_is_by_session_end(open_session):
    store = open_session(retention=3 * MINUTE)
    store.put(Windowed("k", 0, MINUTE), 1)
    store.put(Windowed("k", 0, 6 * MINUTE), 2)
    assert store.fetch_session("k", 0, MINUTE) is None, "ended before 6 min - retention + 1"
    assert [kv.value for kv in store.fetch("k")] == [2]
    assert not store.put(Windowed("k", 0, 10), 3), "a session in an expired segment is dropped"
    assert store.dropped_records == 1


def test_timestamped_aggregates(open_session):
    store = open_session(timestamped=True)
    assert isinstance(store, TimestampedSessionStore)
    store.put(Windowed("k", 0, 10), 1)  # stamped with the session end
    store.put_with_timestamp(Windowed("k", 20, 30), 2, 25)
    store.put_with_timestamp(Windowed("j", 20, 30), ValueAndTimestamp(3, 29))
    assert store.fetch_session_with_timestamp("k", 0, 10) == ValueAndTimestamp(1, 10)
    assert [kv.value for kv in store.find_sessions_with_timestamp("k", 0, 100)] == [
        ValueAndTimestamp(1, 10),
        ValueAndTimestamp(2, 25),
    ]
    assert [kv.value.timestamp for kv in store.backward_fetch_with_timestamp("j", "k")] == [25, 10, 29]
    assert [kv.value for kv in store.fetch_with_timestamp("j")] == [ValueAndTimestamp(3, 29)]
    assert [kv.value.value for kv in store.backward_find_sessions_with_timestamp("a", "z", 0, 100)] == [2, 1, 3]
    assert store.fetch("k").__next__().value == 1


def test_views_and_transactions(open_session):
    store = open_session()
    store.put(Windowed("k", 0, 10), 1)
    store.commit(4)
    view = store.read_only()
    store.put(Windowed("k", 0, 10), 2)
    assert view.fetch_session("k", 0, 10) == 1
    assert [kv.value for kv in view.find_sessions("k", 0, 100)] == [1]
    assert store.fetch_session("k", 0, 10) == 2
    assert store.recover(4)
    assert store.fetch_session("k", 0, 10) == 1
    store.close()
    with pytest.raises(StoreClosedError):
        view.fetch_session("k", 0, 10)


def test_argument_errors(open_session):
    store = open_session()
    with pytest.raises(InvalidArgumentError):
        store.put(Windowed("k", 10, 5), 1)
    with pytest.raises(InvalidArgumentError):
        store.put("not a session key", 1)
    with pytest.raises(InvalidArgumentError):
        store.find_sessions("k", 0)
    with pytest.raises(InvalidArgumentError):
        store.put(Windowed("k", -1, 1), 1)
    with pytest.raises(InvalidArgumentError):
        open_session(timestamped=True, persistent=False).put_with_timestamp(Windowed("k", 0, 1), 1)
    with pytest.raises(InvalidArgumentError):
        Stores.session_store_builder(Stores.persistent_timestamped_session_store("s", 1))


@pytest.mark.parametrize("serdes", [("bytes", "bytes"), ("string", "int64")], ids=["bytes", "string"])
def test_put_all_is_put_of_each_session(task_dir, serdes):
    supplier = Stores.persistent_session_store("s", 3 * MINUTE)
    k, v = (str.encode, lambda n: b"%d" % n) if serdes[0] == "bytes" else (str, int)
    with Stores.session_store_builder(supplier, *serdes).build().init(task_dir) as store:
        assert store.put_all([(Windowed(k("a"), 0, 10), v(1)), (Windowed(k("b"), 5, 20), v(2))]) == 0
        assert store.put_all({Windowed(k("a"), 30, 40): v(3)}) == 0
        assert store.put_all([Windowed(k("b"), 5, 20)], [None]) == 0, "None removes"
        with pytest.raises(InvalidArgumentError):
            store.put_all([Windowed(k("b"), 5, "late")], [v(1)])
        # Past retention a session is dropped and counted, as put does.
        assert store.put_all([Windowed(k("c"), 0, 6 * MINUTE), Windowed(k("a"), 0, 10)], [v(4), v(5)]) == 1
        assert store.dropped_records == 1
        store.commit(1)
    with Stores.session_store_builder(supplier, *serdes).build().init(task_dir) as store:
        assert [(kv.key, kv.value) for kv in store.fetch(k("a"), k("c"))] == [(Windowed(k("c"), 0, 6 * MINUTE), v(4))]


@pytest.mark.parametrize("serdes", [("bytes", "bytes"), ("string", "int64")], ids=["bytes", "string"])
def test_put_all_of_columns_is_put_all_of_sessions(tmp_path, serdes):
    k, v = (str.encode, lambda n: b"%d" % n) if serdes[0] == "bytes" else (str, int)
    sessions = [(k("a"), 0, 10, v(1)), (k("b"), 5, 20, v(2)), (k("a"), 30, 40, v(3)), (k("b"), 5, 20, None)]
    # Past retention a session is dropped and counted, in either form: the second of these.
    late = [(k("c"), 0, 6 * MINUTE, v(4)), (k("a"), 50, 60, v(5))]

    def put_all(store, form, rows):
        if form == "sessions":
            return store.put_all([Windowed(key, s, e) for key, s, e, _ in rows], [a for *_, a in rows])
        keys, starts, ends, aggregates = (list(column) for column in zip(*rows))
        return store.put_all(keys, aggregates, starts, ends)

    contents = []
    for form in ("sessions", "columns"):
        supplier = Stores.persistent_session_store("s", 3 * MINUTE)
        with Stores.session_store_builder(supplier, *serdes).build().init(str(tmp_path / form)) as store:
            assert put_all(store, form, sessions) == 0
            fetched = [(kv.key, kv.value) for kv in store.fetch(k("a"), k("z"))]
            assert put_all(store, form, late) == 1 and store.dropped_records == 1
            store.commit(1)
        with Stores.session_store_builder(supplier, *serdes).build().init(str(tmp_path / form)) as store:
            contents.append((fetched, [(kv.key, kv.value) for kv in store.fetch(k("a"), k("z"))]))
    assert contents[0] == contents[1]
    assert contents[0] == (
        [(Windowed(k("a"), 0, 10), v(1)), (Windowed(k("a"), 30, 40), v(3))],
        [(Windowed(k("c"), 0, 6 * MINUTE), v(4))],
    )


@pytest.mark.parametrize("serdes", [("bytes", "bytes"), ("string", "int64")], ids=["bytes", "string"])
def test_put_all_of_columns_checks_every_entry_before_writing(task_dir, serdes):
    supplier = Stores.persistent_session_store("s", 3 * MINUTE)
    key, aggregate = (b"k", b"1") if serdes[0] == "bytes" else ("k", 1)
    with Stores.session_store_builder(supplier, *serdes).build().init(task_dir) as store:
        for args, match in [
            (([key, key], [aggregate, aggregate], [0, 10], [10, 0]), None),  # ends before it starts
            (([key, key], [aggregate, aggregate], [0, "late"], [10, 20]), "session start"),
            (([key, key], [aggregate, aggregate], [0, 5], [10, True]), "session end"),
            (([key, key], [aggregate], [0, 5], [10, 20]), "put_all got 2 keys, 1 aggregates"),
            (([key], [aggregate], [0], [10, 20]), "1 session starts and 2 session ends"),
            (([key], [aggregate], [0], None), "both session_starts and session_ends"),
            (([key], None, [0], [10]), "needs aggregates"),
        ]:
            with pytest.raises(InvalidArgumentError, match=match):
                store.put_all(*args)
        assert list(store.fetch(key)) == [], "nothing written by a call that raised"


def test_session_put_all_checks_every_entry_before_writing(task_dir):
    supplier = Stores.persistent_session_store("s", 3 * MINUTE)
    with Stores.session_store_builder(supplier).build().init(task_dir) as store:
        good = Windowed(b"k", 0, 10)
        for entries, aggregates, error in [
            ([good, Windowed(b"k", 10, 0)], [b"v", b"v"], InvalidArgumentError),  # ends before it starts
            ([good, (b"k", 0)], [b"v", b"v"], InvalidArgumentError),
            ([good, Windowed(b"k", 0, "late")], [b"v", b"v"], InvalidArgumentError),
            ([good, Windowed(b"k", True, 10)], [b"v", b"v"], InvalidArgumentError),
            ([good, Windowed(None, 0, 10)], [b"v", b"v"], InvalidArgumentError),
            ([good, Windowed("text", 0, 10)], [b"v", b"v"], SerializationError),
            ([good, good], [b"v", "text"], SerializationError),
            ([good, good], [b"v"], InvalidArgumentError),
        ]:
            with pytest.raises(error):
                store.put_all(entries, aggregates)
        with pytest.raises(InvalidArgumentError, match=r"Windowed\(key, start, end\), got \(b'k', 0\)"):
            store.put_all([good, (b"k", 0)], [b"v", b"v"])  # bytes serdes: checked natively, same message
        assert list(store.fetch(b"k")) == [], "nothing written by a call that raised"


@pytest.mark.parametrize("serdes", [("bytes", "bytes"), ("string", "int64")], ids=["bytes", "string"])
def test_put_all_refuses_more_aggregates_than_sessions(task_dir, serdes):
    supplier = Stores.persistent_session_store("s", 3 * MINUTE)
    with Stores.session_store_builder(supplier, *serdes).build().init(task_dir) as store:
        key, aggregate = (b"k", b"1") if serdes[0] == "bytes" else ("k", 1)
        with pytest.raises(InvalidArgumentError, match="put_all got"):
            store.put_all([Windowed(key, 0, 10)], [aggregate, aggregate])
        assert list(store.fetch(key)) == [], "nothing written by a call that raised"


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_bytes_serde_session_reads_match_the_checked_path(task_dir, persistent):
    """``fetch(key)`` and ``find_sessions(key, earliest_end, latest_start)`` with bytes serdes go
    straight to the native store: the same rows as the checked path (a ``bytearray`` key takes
    it) and the same typed errors, over more sessions than one chunk holds."""
    factory = Stores.persistent_session_store if persistent else Stores.in_memory_session_store
    store = Stores.session_store_builder(factory("s", 10_000 * MINUTE)).build().init(task_dir)
    with store:
        for i in range(300):
            store.put(Windowed(b"k", i * MINUTE, i * MINUTE + 30_000), bytes([i % 251]) * (i * 37 % 5000))
        store.put(Windowed(b"k\x00", 0, 10), b"other key")
        store.commit(1)
        fetched = list(store.fetch(b"k"))
        assert fetched == list(store.fetch(bytearray(b"k")))
        assert [(r.key.key, r.key.start) for r in fetched] == [(b"k", i * MINUTE) for i in range(300)]
        assert [len(r.value) for r in fetched] == [i * 37 % 5000 for i in range(300)]
        # Both bounds inclusive: session 99 ends exactly at the earliest end, 102 starts at the latest start.
        found = list(store.find_sessions(b"k", 99 * MINUTE + 30_000, 102 * MINUTE))
        assert found == list(store.find_sessions(bytearray(b"k"), 99 * MINUTE + 30_000, 102 * MINUTE))
        assert [r.key.start for r in found] == [99 * MINUTE, 100 * MINUTE, 101 * MINUTE, 102 * MINUTE]
        for bad in ["soon", True, 2**64, 1.5, None]:
            with pytest.raises(InvalidArgumentError):
                store.find_sessions(b"k", bad, 0)
            with pytest.raises(InvalidArgumentError):
                store.find_sessions(b"k", 0, bad)
        for call in (lambda key: store.fetch(key), lambda key: store.find_sessions(key, 0, 1)):
            with pytest.raises(InvalidArgumentError):
                call(None)
            with pytest.raises(SerializationError):
                call("text")


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_find_sessions_of_bytes_checks_its_times_as_other_serdes_do(task_dir, persistent):
    factory = Stores.persistent_session_store if persistent else Stores.in_memory_session_store
    store = Stores.session_store_builder(factory("sb", 10 * MINUTE), "bytes", "bytes").build().init(task_dir)
    store.put(Windowed(b"k", 0, 10), b"v")
    assert list(store.find_sessions(b"k", 0, 100)) == [KeyValue(Windowed(b"k", 0, 10), b"v")]
    store.commit(1)
    view = store.read_only()
    assert list(view.find_sessions(b"k", 0, 100)) == [KeyValue(Windowed(b"k", 0, 10), b"v")]
    for earliest_end, latest_start in [(True, 100), (0, "soon"), (0.5, 100), (0, 2**63)]:
        for reader in (store, view):
            with pytest.raises(InvalidArgumentError, match="session_"):
                reader.find_sessions(b"k", earliest_end, latest_start)
    store.close()

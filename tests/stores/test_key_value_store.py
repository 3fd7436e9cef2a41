import logging
import threading

import pyarrow as pa
import pytest
from rocksdict import AccessType, Options, Rdict

from kstate import KeyValue, Stores, ValueAndTimestamp
from kstate.errors import (
    CorruptedDataError,
    InvalidArgumentError,
    InvalidStateStoreError,
    ProcessorStateError,
    SerializationError,
    StoreClosedError,
    StoreCorruptedError,
)
from kstate.store_lifecycle import native_store

KINDS = [("persistent", True), ("persistent", False), ("memory", True), ("memory", False)]


def read_cf(path, cf):
    """Reads one column family with rocksdict, an independent RocksDB binding."""
    opts = Options(raw_mode=True)
    db = Rdict(
        str(path),
        opts,
        column_families={name: opts for name in Rdict.list_cf(str(path), opts)},
        access_type=AccessType.read_only(),
    )
    try:
        return dict(db.get_column_family(cf).items())
    finally:
        db.close()


@pytest.mark.parametrize("kind,transactional", KINDS)
def test_reads_writes_and_scans(open_store, kind, transactional):
    store = open_store(kind, config={"enable.transactional.statestores": transactional})
    store.put_all([(b"b", b"2"), (b"d", b"4")])
    store.put_all({b"a": b"1", b"c": b"3"})
    assert store.put_if_absent(b"a", b"x") == b"1"
    assert store.put_if_absent(b"e", b"5") is None
    assert store.delete(b"e") == b"5"
    assert store.get(b"e") is None
    assert list(store.range(b"b", b"c")) == [(b"b", b"2"), (b"c", b"3")]
    assert [k for k, _ in store.reverse_range(b"a", b"c")] == [b"c", b"b", b"a"]
    assert [k for k, _ in store.reverse_all()] == [b"d", b"c", b"b", b"a"]
    assert list(store.range(b"c", b"a")) == []
    assert list(store.range(None, b"a")) == [(b"a", b"1")]
    store.put(b"bb", b"22")
    assert [k for k, _ in store.prefix_scan(b"b")] == [b"b", b"bb"]
    assert store.get_many([b"a", b"zz", b"d"]) == [b"1", None, b"4"]
    assert store.approximate_num_entries() >= 1
    store.commit(5)
    assert store.committed_offset() == 5
    assert dict(store.all()) == {b"a": b"1", b"b": b"2", b"bb": b"22", b"c": b"3", b"d": b"4"}


@pytest.mark.parametrize("kind", ["persistent", "memory"])
def test_iterators_over_many_entries_in_both_directions(open_store, kind):
    store = open_store(kind, key="int64", value="string")
    store.put_all((i, str(i)) for i in range(0, 20_000, 2))
    store.commit(1)
    for i in range(0, 20_000, 6):
        store.delete(i)
    store.put(3, "three")
    expected = sorted({i for i in range(0, 20_000, 2) if i % 6} | {3})
    assert [k for k, _ in store.all()] == expected
    assert [k for k, _ in store.reverse_all()] == expected[::-1]
    with store.range(100, 120) as it:
        assert it.peek_next_key() == 100
        assert next(it) == (100, "100")
        assert it.peek_next_key() == 104


@pytest.mark.parametrize("kind", ["persistent", "memory"])
def test_iterators_over_values_larger_than_a_chunk(open_store, kind):
    """Chunks end at ~1 MiB of rows: rows of 0 to 2.5 MiB, committed and staged over, come out
    whole and in order in both directions, and ``peek_next_key`` looks across chunk ends."""
    store = open_store(kind)
    sizes = [(i * 104_729) % (5 << 19) for i in range(40)]
    store.put_all((b"k%02d" % i, bytes([i]) * size) for i, size in enumerate(sizes))
    store.commit(1)
    for i in range(0, 40, 5):
        store.delete(b"k%02d" % i)
    store.put(b"k07", b"small")
    expected = {b"k%02d" % i: bytes([i]) * size for i, size in enumerate(sizes) if i % 5}
    expected[b"k07"] = b"small"
    assert list(store.all()) == sorted(expected.items())
    assert list(store.reverse_all()) == sorted(expected.items(), reverse=True)
    assert list(store.range(b"k11", b"k29")) == [(k, v) for k, v in sorted(expected.items()) if b"k11" <= k <= b"k29"]
    with store.all() as rows:
        for key in sorted(expected):
            assert rows.peek_next_key() == key
            assert next(rows)[0] == key
        assert rows.peek_next_key() is None


def test_staged_deletes_hide_committed_values_until_recover(open_store):
    store = open_store()
    store.put(b"k", b"v")
    store.commit(1)
    store.delete(b"k")
    assert store.get(b"k") is None and list(store.all()) == []
    assert store.recover(1) is True
    assert store.get(b"k") == b"v"
    assert store.recover(2) is False


def test_close_warns_only_when_it_discards_writes(open_store, caplog):
    store = open_store()
    store.put(b"k", b"v")
    assert store.uncommitted_bytes > 0
    store.commit(1)
    assert store.uncommitted_bytes == 0
    with caplog.at_level(logging.WARNING, logger="kstate.store"):
        store.close()
        assert "discards" not in caplog.text
        store = open_store()
        store.put(b"k", b"v2")
        store.close()
        assert "discards its uncommitted writes" in caplog.text


def test_read_committed_view_from_another_thread(open_store):
    store = open_store()
    view = store.read_only(read_committed=True)
    store.put(b"k", b"uncommitted")
    seen = []
    thread = threading.Thread(target=lambda: seen.append((view.get(b"k"), list(view.all()))))
    thread.start()
    thread.join()
    assert seen == [(None, [])]
    store.commit(3)
    assert view.get(b"k") == b"uncommitted"
    store.close()
    with pytest.raises(StoreClosedError):
        view.get(b"k")


def test_timestamped_values(open_store):
    store = open_store(timestamped=True, key="string", value="string")
    store.put("a", "abc", timestamp=23)
    store.put("b", ValueAndTimestamp("x", 7))
    store.put_with_timestamp("c", "y", 9)
    assert store.get("a") == "abc"
    assert store.get_with_timestamp("a") == ValueAndTimestamp("abc", 23)
    assert store.put_if_absent_with_timestamp("a", "zzz", 1) == ValueAndTimestamp("abc", 23)
    store.put_all_with_timestamp([("d", ValueAndTimestamp("w", 4))])
    assert store.delete_with_timestamp("d") == ValueAndTimestamp("w", 4)
    assert [kv.value for kv in store.all_with_timestamp()] == [("abc", 23), ("x", 7), ("y", 9)]
    assert list(store.range("b", "c")) == [("b", "x"), ("c", "y")]


def test_on_disk_bytes_match_kafka_streams(open_store, task_dir):
    timestamped = open_store(timestamped=True, key="string", value="string")
    timestamped.put("abc", "abc", timestamp=23)
    timestamped.commit(1234)
    timestamped.close()
    path = task_dir / "rocksdb" / "store"
    assert read_cf(path, "keyValueWithTimestamp") == {b"abc": bytes.fromhex("0000000000000017616263")}
    assert read_cf(path, "offsets")[b"app-store-changelog-3"] == bytes.fromhex("00000000000004d2")
    assert read_cf(path, "default") == {}


def test_plain_supplier_under_timestamped_builder_reports_minus_one(tmp_path):
    from kstate import Stores

    store = Stores.timestamped_key_value_store_builder(Stores.persistent_key_value_store("p"), "string", "string")
    store = store.build().init(tmp_path / "app" / "0_0")
    store.put("k", "v", timestamp=99)
    assert store.get_with_timestamp("k") == ValueAndTimestamp("v", -1)
    store.commit(None)
    store.close()
    assert read_cf(tmp_path / "app" / "0_0" / "rocksdb" / "p", "default") == {b"k": b"v"}


def test_arrow_batches(open_store):
    store = open_store(value="string", key="string")
    store.put_all(pa.array(["a", "b", "c"]), pa.array(["1", None, "3"]))
    got = store.get_many(pa.array(["x", "a", "b", "c"]).slice(1))
    assert got.type == pa.string()
    assert got.to_pylist() == ["1", None, "3"]
    with pytest.raises(InvalidArgumentError):
        store.get_many(pa.array(["a", None]))
    raw = open_store("memory", key="bytes", value="bytes")
    raw.put_all(pa.array([b"k1", b"k2"], pa.binary()), pa.array([b"v1", b"v2"], pa.binary()))
    assert raw.get_many(pa.array([b"k2", b"k3"], pa.large_binary())).to_pylist() == [b"v2", None]


def test_arrow_numbers_pass_as_big_endian_values(open_store):
    longs = open_store(key="string", value="int64")
    assert longs.get_many(pa.array(["a", "b"])).type == pa.int64(), "all absent: still int64"
    longs.put("a", 1)
    longs.put_all(pa.array(["b", "c", "a"]), pa.array([2, -(2**63), None], pa.int64()))
    got = longs.get_many(pa.array(["a", "b", "c", "d"], pa.large_string()))
    assert got.type == pa.int64() and got.to_pylist() == [None, 2, -(2**63), None], "a null value deletes"
    assert longs.get("c") == -(2**63), "the bytes are LongSerde's"
    longs.put_all(pa.array(["small"]), pa.array([7], pa.int8()))
    assert longs.get("small") == 7
    with pytest.raises(InvalidArgumentError):
        longs.put_all(pa.array(["a"]), pa.array([1.5]))
    native_store(longs).put(b"bad", b"abc")
    with pytest.raises(SerializationError):
        longs.get_many(pa.array(["bad"]))
    doubles = open_store("memory", key="string", value="float64")
    doubles.put_all(pa.array(["x", "y"]), pa.array([0.5, float("inf")]))
    assert doubles.get_many(pa.array(["y", "x"])).to_pylist() == [float("inf"), 0.5]
    assert doubles.get("x") == 0.5


def test_errors_are_typed(open_store, task_dir):
    store = open_store(key="string", value="int64")
    with pytest.raises(InvalidArgumentError):
        store.put(None, 1)
    with pytest.raises(SerializationError):
        store.put(b"not a str", 1)
    raw = open_store("memory")
    with pytest.raises(InvalidArgumentError):
        raw.get(None)
    with pytest.raises(SerializationError):
        raw.put("str", b"v")
    it = store.all()
    store.close()
    with pytest.raises(StoreClosedError):
        next(it)
    with pytest.raises(StoreClosedError):
        store.get("a")
    from kstate import Stores

    unopened = Stores.key_value_store_builder(Stores.in_memory_key_value_store("u")).build()
    with pytest.raises(StoreClosedError):
        unopened.get(b"k")
    with pytest.raises(InvalidArgumentError):
        Stores.persistent_key_value_store("bad/name")


def test_corrupted_and_foreign_layouts_raise(tmp_path):
    from kstate import Stores

    task = tmp_path / "app" / "0_0"
    store = Stores.timestamped_key_value_store_builder(Stores.persistent_timestamped_key_value_store("s")).build()
    store.init(task).put(b"k", b"v", timestamp=1)
    store.commit(1)
    store.close()
    path = str(task / "rocksdb" / "s")
    opts = Options(raw_mode=True)
    db = Rdict(path, opts, column_families={n: opts for n in Rdict.list_cf(path, opts)})
    db.get_column_family("keyValueWithTimestamp")[b"short"] = b"abc"
    db.close()
    store.init(task)
    with pytest.raises(CorruptedDataError):
        store.get_with_timestamp(b"short")
    store.close()
    plain = Stores.key_value_store_builder(Stores.persistent_key_value_store("s")).build()
    with pytest.raises(InvalidStateStoreError):
        plain.init(task)


def test_iterators_yield_key_value_rows_for_every_serde(open_store):
    raw = open_store()
    raw.put_all([(b"a", b"1"), (b"ab", b"2")])
    raw.commit(1)
    text = open_store(kind="memory", key="string", value="string")
    text.put_all([("a", "1"), ("ab", "2")])
    for rows in (raw.all(), raw.prefix_scan(b"a"), raw.read_only(read_committed=True).all(), text.all()):
        first = next(rows)
        assert isinstance(first, KeyValue)
        assert (first.key, first.value) == tuple(first) and len(first) == 2
        assert first == (b"a", b"1") or first == ("a", "1")
    with raw.reverse_all() as rows:
        assert rows.peek_next_key() == b"ab"
        assert [kv.key for kv in rows] == [b"ab", b"a"]


def test_a_damaged_store_file_is_a_store_corrupted_error(task_dir):
    """RocksDB's Corruption status reaches Python as its own class, still a ProcessorStateError
    (kstate.spark rebuilds such a store from its changelog: chosen by class, not by message);
    other storage failures stay plain ProcessorStateErrors."""
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("store"), "bytes", "bytes")
    store = builder.build().init(task_dir)
    store.put(b"k", b"v")
    store.commit()
    store.close()
    (manifest,) = task_dir.glob("rocksdb/store/MANIFEST-*")
    data = bytearray(manifest.read_bytes())
    data[10:] = bytes(b ^ 0xFF for b in data[10:])
    manifest.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptedError, match="Corruption") as raised:
        builder.build().init(task_dir)
    assert isinstance(raised.value, ProcessorStateError)


def test_an_open_store_holds_no_preallocated_disk(tmp_path):
    # RocksDB would fallocate each live WAL to 1.1 write buffers (~18 MB) for a few KB of
    # writes: gigabytes with many open stores per executor.
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("kv"), "bytes", "bytes").build()
    store.init(tmp_path / "app" / "0_0")
    store.put_all([b"k%d" % i for i in range(100)], [b"v" * 100] * 100)
    store.commit(changelog_offset=0)
    wals = list((tmp_path / "app" / "0_0").rglob("*.log"))
    assert wals, "the open store has a WAL"
    for wal in wals:
        stat = wal.stat()
        assert stat.st_blocks * 512 <= stat.st_size + (1 << 20), (wal, stat.st_size, stat.st_blocks)
    store.close()

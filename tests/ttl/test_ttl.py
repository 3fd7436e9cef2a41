"""TTL: expired values are invisible to every read at once, and a forced RocksDB compaction
removes them from disk (read back with rocksdict, an independent RocksDB binding)."""

import shutil
import struct
import time

import pytest

from kstate import KeyValue, Stores, ValueAndTimestamp, Windowed

TTL = 1_000


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


def kv_store(task_dir, persistent=True, clock="stream_time", ttl=TTL):
    factory = (
        Stores.persistent_timestamped_key_value_store if persistent else Stores.in_memory_timestamped_key_value_store
    )
    supplier = factory("kv", ttl_ms=ttl, ttl_clock=clock)
    return Stores.timestamped_key_value_store_builder(supplier, "string", "string").build().init(task_dir)


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "memory"])
def test_expired_values_are_invisible_to_every_read(task_dir, persistent):
    with kv_store(task_dir, persistent) as store:
        store.put("old", "o", timestamp=100)
        store.put("edge", "e", timestamp=1_001)
        store.put("legacy", "l", timestamp=-1)  # no known timestamp: never expires
        store.commit(1)
        view = store.read_only()
        assert store.get("old") == "o", "stream time 1001: 100 is not yet 1000 behind"
        store.put("new", "n", timestamp=2_001)  # stream time 2001: everything <= 1001 expires
        assert store.get("old") is None and store.get("edge") is None
        assert store.get_with_timestamp("new") == ValueAndTimestamp("n", 2_001)
        assert store.get_many(["old", "new", "legacy"]) == [None, "n", "l"]
        assert list(store.all()) == [KeyValue("legacy", "l"), KeyValue("new", "n")]
        assert [kv.key for kv in store.reverse_all()] == ["new", "legacy"]
        assert list(store.range("a", "f")) == []
        assert view.get("old") is None, "views share the clock"
        assert store.delete("old") is None
        assert store.put_if_absent("edge", "again") is None, "an expired key counts as absent"
        assert store.get("edge") == "again"


def test_compaction_removes_expired_values_from_disk(task_dir, column_families):
    path = task_dir / "rocksdb" / "kv"
    with kv_store(task_dir) as store:
        for i in range(100):
            store.put(f"old{i:03d}", "o", timestamp=i)
        store.put("new", "n", timestamp=5_000)
        store.commit(1)
        on_disk = column_families(path)["keyValueWithTimestamp"]
        assert len(on_disk) == 101, "expired but not yet compacted away"
        store.compact()
        on_disk = column_families(path)["keyValueWithTimestamp"]
        assert on_disk == {b"new": struct.pack(">q", 5_000) + b"n"}
        assert column_families(path)["offsets"], "the offsets family is never filtered"
        assert store.committed_offset() == 1


def test_wall_clock_ttl(task_dir, column_families):
    now = time.time_ns() // 1_000_000
    with kv_store(task_dir, clock="wall_clock", ttl=60_000) as store:
        store.put("old", "o", timestamp=now - 120_000)
        store.put("fresh", "f", timestamp=now)
        assert store.get("old") is None and store.get("fresh") == "f"
        store.commit(1)
        store.compact()
        assert set(column_families(task_dir / "rocksdb" / "kv")["keyValueWithTimestamp"]) == {b"fresh"}


def test_stream_time_survives_a_reopen_and_a_restore(state_dir, column_families):
    """A commit records stream time with the offset (kstate's own key in the offsets family),
    so a reopened store still hides what had expired; a restore advances it as puts do."""
    task = state_dir / "app" / "0_0"
    supplier = Stores.persistent_timestamped_key_value_store("kv", ttl_ms=TTL)

    def logged():
        return Stores.timestamped_key_value_store_builder(supplier, "string", "string").with_logging_enabled()

    with logged().build().init(task) as store:
        store.put("old", "o", timestamp=100)
        store.put("new", "n", timestamp=5_000)
        store.commit()
    offsets = column_families(task / "rocksdb" / "kv")["offsets"]
    assert offsets[b"kstate.ttl.stream-time"] == struct.pack(">q", 5_000)
    with logged().build().init(task) as store:
        assert store.restored_records == 0
        assert store.get("old") is None and store.get("new") == "n"
    shutil.rmtree(task)
    with logged().build().init(task) as store:
        assert store.restored_records == 2
        assert store.get("old") is None and store.get("new") == "n"


def test_window_store_ttl_hides_and_purges_per_segment(task_dir, column_families):
    supplier = Stores.persistent_timestamped_window_store("w", 600_000, 60_000, ttl_ms=TTL)
    builder = Stores.timestamped_window_store_builder(supplier, "string", "string")
    with builder.build().init(task_dir) as store:
        store.put("a", ValueAndTimestamp("old", 10), 0)
        store.put("b", ValueAndTimestamp("new", 5_000), 0)
        assert store.fetch("a", 0) is None
        assert list(store.all()) == [KeyValue(Windowed("b", 0, 60_000), "new")]
        assert list(store.fetch("a", 0, 10)) == []
        store.commit(1)
        store.compact()
        keys = set(column_families(task_dir / "w" / "w.0")["keyValueWithTimestamp"])
        assert keys == {b"b" + struct.pack(">qi", 0, 0)}


def test_ttl_needs_a_timestamped_supplier():
    # Plain factories take no TTL at all: plain values carry no timestamp to expire by.
    with pytest.raises(TypeError):
        Stores.persistent_key_value_store("kv", ttl_ms=5)


def test_read_only_views_return_timestamps_too(task_dir):
    with kv_store(task_dir) as store:
        store.put("k", "v", timestamp=7)
        store.commit(1)
        view = store.read_only()
        assert view.get_with_timestamp("k") == ValueAndTimestamp("v", 7)
        assert list(view.reverse_all_with_timestamp()) == [KeyValue("k", ValueAndTimestamp("v", 7))]
        assert view.get_many_with_timestamp(["k", "x"]) == [ValueAndTimestamp("v", 7), None]

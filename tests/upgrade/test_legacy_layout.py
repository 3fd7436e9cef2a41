"""A RocksDB directory in Kafka's legacy layout, written by another binding (rocksdict), opens as a
timestamped store in upgrade mode and migrates as spec 1.4 says."""

import logging

from rocksdict import Options, Rdict

from kstate import Stores, ValueAndTimestamp

LEGACY = {b"k1": b"1", b"k2": b"4444", b"k3": b"33", b"k4": b"x"}


def write_legacy(path):
    db = Rdict(str(path), Options(raw_mode=True))
    for k, v in LEGACY.items():
        db[k] = v
    db.close()


def open_timestamped(task_dir):
    supplier = Stores.persistent_timestamped_key_value_store("legacy")
    return Stores.timestamped_key_value_store_builder(supplier).build().init(task_dir)


def test_legacy_values_read_with_minus_one_and_migrate_on_point_access(task_dir, caplog, column_families):
    path = task_dir / "rocksdb" / "legacy"
    path.parent.mkdir(parents=True)
    write_legacy(path)
    caplog.set_level(logging.INFO, logger="kstate.store")

    store = open_timestamped(task_dir)
    assert "upgrade mode" in caplog.text
    # Iterators convert on the fly and migrate nothing.
    assert [(k, tuple(v)) for k, v in store.all_with_timestamp()] == [(k, (v, -1)) for k, v in sorted(LEGACY.items())]
    assert [k for k, _ in store.reverse_all()] == sorted(LEGACY, reverse=True)
    store.close()
    cfs = column_families(path)
    assert cfs["default"] == LEGACY and cfs["keyValueWithTimestamp"] == {}

    store = open_timestamped(task_dir)
    assert store.get_with_timestamp(b"k1") == ValueAndTimestamp(b"1", -1)  # get migrates
    store.put(b"k2", b"new", timestamp=5)  # put replaces
    assert store.put_if_absent(b"k3", b"zz") == b"33"  # put_if_absent migrates
    assert store.delete(b"k4") == b"x"  # delete removes
    store.commit(7)
    store.close()
    cfs = column_families(path)
    assert cfs["default"] == {}
    assert cfs["keyValueWithTimestamp"] == {
        b"k1": bytes.fromhex("ffffffffffffffff31"),
        b"k2": bytes.fromhex("0000000000000005") + b"new",
        b"k3": bytes.fromhex("ffffffffffffffff3333"),
    }
    assert cfs["offsets"][b"app-legacy-changelog-3"] == (7).to_bytes(8, "big")

    caplog.clear()
    store = open_timestamped(task_dir)
    assert "upgrade mode" not in caplog.text
    assert store.get(b"k1") == b"1"
    store.close()


def test_kstate_plain_store_upgrades_to_timestamped(task_dir):
    plain = Stores.key_value_store_builder(Stores.persistent_key_value_store("legacy")).build().init(task_dir)
    plain.put_all(LEGACY)
    plain.commit(1)
    plain.close()
    store = open_timestamped(task_dir)
    assert dict(store.all()) == LEGACY
    assert store.committed_offset() == 1
    store.close()

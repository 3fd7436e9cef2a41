"""Snapshots beside the changelog: a store with ``minDeltasForSnapshot`` publishes its RocksDB
files after every so many commits (in the background), a later snapshot copies only the table
files the earlier one lacks, and a store on a machine without local state (or with local state
older than the newest snapshot) loads the snapshot and replays only the changelog after it.
Local state that is current is used as it is; a snapshot that fails its check is not used.
Every test runs on a local changelog directory and on moto's S3."""

from __future__ import annotations

import logging
import os

import pytest

from kstate import Stores, ValueAndTimestamp
from kstate.errors import InvalidArgumentError
from kstate.log.snapshots import open_snapshots

APP = "app"
TOPIC = f"{APP}-counts-changelog"
KEYS = 300


def builder(location, **config):
    """The string -> int64 store ``counts`` logged to ``location``, with snapshots on (as every
    executor of a query has them: a store with a remote changelog looks for snapshots only
    then); ``config`` adds logging configs. By default only ``snapshot()`` takes one."""
    config.setdefault("minDeltasForSnapshot", 1_000)
    supplier = Stores.persistent_key_value_store("counts")
    return Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
        location.logging_config(**config)
    )


def task(root, machine):
    """The task directory of partition 0 on ``machine`` (a state dir of its own)."""
    return root / machine / "state" / APP / "0_0"


def write_round(store, value, keys=KEYS):
    """Every key takes ``value``; committed. Returns the offset."""
    store.put_all((f"k{i:05d}", value) for i in range(keys))
    return store.commit()


def snapshots(location):
    return open_snapshots(location.url, TOPIC, 0, location.storage_options)


def values(store):
    return {value for _, value in store.all()}


def test_a_new_machine_loads_the_newest_snapshot_and_replays_only_the_tail(location, tmp_path, caplog):
    with builder(location, minDeltasForSnapshot=4).build().init(task(tmp_path, "a")) as store:
        for value in range(10):
            last = write_round(store, value)
    assert last == 10 * KEYS - 1
    taken = snapshots(location).offsets()
    # The fourth commit starts the first; it holds the commit that is the last when it runs.
    assert taken and taken[0] >= 4 * KEYS - 1
    assert all((offset + 1) % KEYS == 0 for offset in taken), "snapshots hold whole commits"
    newest = taken[-1]
    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == last - newest
        assert values(elsewhere) == {9}
        assert elsewhere.committed_offset() == last
    assert f"loaded the snapshot at offset {newest}" in caplog.text


def test_a_store_without_its_wal_restores_from_a_snapshot_alike(location, tmp_path, caplog):
    def durable(machine):
        without_wal = builder(location).with_config({"statestore.durability": "changelog"})
        return without_wal.build().init(task(tmp_path, machine))

    with durable("a") as store:
        write_round(store, 1)
        write_round(store, 2)
        published = store.snapshot()
        last = write_round(store, 3)
    caplog.set_level(logging.INFO, logger="kstate.store")
    with durable("b") as elsewhere:
        assert elsewhere.restored_records == last - published.offset
        assert values(elsewhere) == {3}
    assert f"loaded the snapshot at offset {published.offset}" in caplog.text
    assert "not closed cleanly" not in caplog.text, "a snapshot's files come from an open store"


def test_a_timestamped_store_with_a_ttl_keeps_its_timestamps_and_stream_time(location, tmp_path):
    supplier = Stores.persistent_timestamped_key_value_store("counts", ttl_ms=1_000)
    timestamped = Stores.timestamped_key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
        location.logging_config(minDeltasForSnapshot=1_000)
    )
    with timestamped.build().init(task(tmp_path, "a")) as store:
        store.put("old", 1, timestamp=4_000)
        store.put("new", 2, timestamp=5_000)
        store.commit()
        published = store.snapshot()
        store.put("late", 3, timestamp=4_500)
        store.commit()
    with timestamped.build().init(task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == 1, "the snapshot, then one record"
        # Stream time 5,000 expires "old" (4,000); the late record alone (4,500) would not.
        assert elsewhere.get("old") is None, "the snapshot holds the stream time"
        assert elsewhere.get_with_timestamp("new") == ValueAndTimestamp(2, 5_000)
        assert elsewhere.get_with_timestamp("late") == ValueAndTimestamp(3, 4_500)
        assert elsewhere.committed_offset() == published.offset + 1


def test_a_later_snapshot_copies_only_the_table_files_the_earlier_lacks(location, tmp_path):
    with builder(location).build().init(task(tmp_path, "a")) as store:
        write_round(store, 1, keys=50_000)
        first = store.snapshot()
        assert first is not None and first.files_copied == first.files
        assert store.snapshot() is None, "nothing committed since"
        store.put("k00003", 99)
        store.commit()
        second = store.snapshot()
    assert second is not None and second.offset == first.offset + 1
    assert second.files_copied < second.files
    assert second.bytes_copied < second.bytes / 10, "the 50k keys' table file is shared, not copied again"
    stored = snapshots(location)
    objects = stored.files.list(f"{stored.directory}/files")
    assert len(objects) == first.files + second.files_copied
    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == 0
        assert elsewhere.get("k00003") == 99 and elsewhere.get("k49999") == 1


def test_local_state_that_is_current_is_used_as_it_is(location, tmp_path, caplog):
    with builder(location).build().init(task(tmp_path, "a")) as store:
        write_round(store, 1)
        store.snapshot()
        write_round(store, 2)
    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder(location).build().init(task(tmp_path, "a")) as store:
        assert store.restored_records == 0
        assert values(store) == {2}
    assert "loaded the snapshot" not in caplog.text


def test_local_state_older_than_the_newest_snapshot_starts_from_it(location, tmp_path, caplog):
    with builder(location).build().init(task(tmp_path, "a")) as store:
        write_round(store, 1)
    with builder(location).build().init(task(tmp_path, "b")) as behind:
        assert values(behind) == {1}
    with builder(location).build().init(task(tmp_path, "a")) as store:
        for value in range(2, 6):
            write_round(store, value)
        store.snapshot()
        last = write_round(store, 6)
    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder(location).build().init(task(tmp_path, "b")) as behind:
        assert behind.restored_records == KEYS, "only the commit after the snapshot"
        assert values(behind) == {6} and behind.committed_offset() == last
    assert f"loaded the snapshot at offset {last - KEYS}" in caplog.text


def replace_object(location, key, damage):
    """Rewrites the snapshot object ``key`` with ``damage(bytes)`` as a new file (a hard link
    shares its inode with the store that published it, which must stay as it is)."""
    stored = snapshots(location)
    if location.kind == "dir":
        path = os.path.join(stored.files.url, *key.split("/"))
        with open(path, "rb") as file:
            data = file.read()
        with open(f"{path}.new", "wb") as file:
            file.write(damage(data))
        os.replace(f"{path}.new", path)
        return
    import s3fs

    fs = s3fs.S3FileSystem(**location.storage_options)
    path = f"{location.url.removeprefix('s3://')}/{key}"
    data = fs.cat_file(path)
    fs.pipe_file(path, damage(data))


def flip_middle_byte(data):
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def test_a_snapshot_that_fails_its_check_is_not_used(location, tmp_path, caplog):
    with builder(location).build().init(task(tmp_path, "a")) as store:
        write_round(store, 1)
        older = store.snapshot()
        store.put_all((f"x{i:05d}", i) for i in range(5_000))
        store.commit()
        newer = store.snapshot()
        last = write_round(store, 2)
    stored = snapshots(location)
    manifest = stored.read(newer.offset)
    earlier = stored.read(older.offset)
    _, _, own_table = next(f for f in manifest.files_not_in(earlier) if f[0].endswith(".sst"))
    replace_object(location, f"{stored.directory}/files/{own_table}", flip_middle_byte)

    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder(location).build().init(task(tmp_path, "b")) as store:
        assert store.restored_records == last - older.offset
        assert values(store) == set(range(5_000)) and store.get("k00000") == 2
    assert f"the snapshot at offset {newer.offset}" in caplog.text
    assert f"trying the one at offset {older.offset}" in caplog.text
    assert "content hash" in caplog.text
    assert f"loaded the snapshot at offset {older.offset}" in caplog.text

    # The older manifest damaged too: the changelog restores everything.
    replace_object(location, f"{stored.directory}/manifests/{older.offset:020d}.snapshot", flip_middle_byte)
    caplog.clear()
    with builder(location).build().init(task(tmp_path, "c")) as store:
        assert store.restored_records == last + 1
        assert store.get("x04999") == 4999 and store.get("k00000") == 2
    assert "restoring the changelog" in caplog.text


def test_a_restore_without_any_snapshot_replays_the_changelog(location, tmp_path):
    with builder(location, minDeltasForSnapshot=100).build().init(task(tmp_path, "a")) as store:
        last = write_round(store, 1)
    assert snapshots(location).offsets() == []
    with builder(location).build().init(task(tmp_path, "b")) as store:
        assert store.restored_records == last + 1 and values(store) == {1}


def test_snapshot_options_are_checked(tmp_path):
    local = {"changelog.dir": str(tmp_path / "changelog")}
    supplier = Stores.persistent_key_value_store("counts")
    for bad in (0, -1, "x", True, 1.5):
        with pytest.raises(InvalidArgumentError, match="minDeltasForSnapshot"):
            Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
                {**local, "minDeltasForSnapshot": bad}
            ).build()
    with pytest.raises(InvalidArgumentError, match="minDeltaBytesForSnapshot"):
        Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
            {**local, "minDeltaBytesForSnapshot": 0}
        ).build()
    unlogged = Stores.key_value_store_builder(supplier, "string", "int64").build().init(tmp_path / "s" / APP / "0_0")
    with unlogged, pytest.raises(InvalidArgumentError, match="takes no snapshots"):
        unlogged.snapshot()
    memory = Stores.key_value_store_builder(Stores.in_memory_key_value_store("m"), "string", "int64")
    with memory.with_logging_enabled(local).build().init(tmp_path / "m" / APP / "0_0") as store:
        with pytest.raises(InvalidArgumentError, match="takes no snapshots"):
            store.snapshot()
    with pytest.raises(InvalidArgumentError, match="need a persistent transactional store"):
        memory.with_logging_enabled({**local, "minDeltasForSnapshot": 5}).build().init(tmp_path / "m2" / APP / "0_0")
    window = Stores.window_store_builder(
        Stores.in_memory_window_store("w", retention_ms=60_000, window_size_ms=1_000), "string", "int64"
    )
    with pytest.raises(InvalidArgumentError, match="need a persistent transactional store"):
        window.with_logging_enabled({**local, "minDeltasForSnapshot": 5}).build().init(tmp_path / "w" / APP / "0_0")


def test_snapshots_by_changelog_bytes(tmp_path):
    location = {"changelog.dir": str(tmp_path / "changelog"), "minDeltaBytesForSnapshot": 20_000}
    supplier = Stores.persistent_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(location)
    with builder.build().init(task(tmp_path, "a")) as store:
        store.put("small", 1)
        store.commit()
        write_round(store, 1, keys=2_000)  # about 60 kB of records
    partition = tmp_path / "changelog" / f"{TOPIC}-0"
    manifests = os.listdir(partition / "snapshots" / "manifests")
    assert manifests == [f"{2_000:020d}.snapshot"], "the second commit passed the bytes"


def test_commits_count_across_store_objects_of_one_local_state(tmp_path):
    """In Spark a partition's next batch often runs in another Python worker, which opens the
    store anew on the same local state: the commits since the last snapshot still add up."""
    location = {"changelog.dir": str(tmp_path / "changelog"), "minDeltasForSnapshot": 4}
    supplier = Stores.persistent_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(location)
    manifests = tmp_path / "changelog" / f"{TOPIC}-0" / "snapshots" / "manifests"
    offsets = []
    for commit in range(6):
        with builder.build().init(task(tmp_path, "a")) as store:  # one commit per store object
            offsets.append(write_round(store, commit, keys=10))
        published = sorted(os.listdir(manifests)) if manifests.exists() else []
        assert published == ([f"{offsets[3]:020d}.snapshot"] if commit >= 3 else []), commit


def test_changelog_bytes_count_across_store_objects_and_reattached_changelogs(tmp_path):
    """Every commit's changelog bytes count once: a store object's first commit, and the commits
    after a parked store's changelog was detached and attached again (kstate.spark)."""
    location = {"changelog.dir": str(tmp_path / "changelog"), "minDeltaBytesForSnapshot": 80_000}
    supplier = Stores.persistent_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(location)
    manifests = tmp_path / "changelog" / f"{TOPIC}-0" / "snapshots" / "manifests"
    offsets = []
    with builder.build().init(task(tmp_path, "a")) as store:
        offsets.append(write_round(store, 0, keys=700))  # 33.6 kB of records
        store.detach_changelog()
        store.attach_changelog()
        offsets.append(write_round(store, 1, keys=700))
    assert not manifests.exists(), "67 kB so far"
    with builder.build().init(task(tmp_path, "a")) as store:
        offsets.append(write_round(store, 2, keys=700))
    assert os.listdir(manifests) == [f"{offsets[2]:020d}.snapshot"], "the third commit passed 80 kB"

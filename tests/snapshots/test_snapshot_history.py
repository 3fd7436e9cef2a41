"""A store partition's state as of an offset read from its history (``kstate.log.history``): the
newest usable snapshot at or below the offset, then the changelog after it. History below the
oldest snapshot deleted (as the snapshot collector does, ``history_retention.py``) is not needed;
a state that only deleted history could give is ``ChangelogTruncatedError``, from a read of
history and from a store's own restore alike, never a partial state; a start compaction moved is
no missing history. On a local directory and on moto's S3."""

from __future__ import annotations

import logging

import pytest

from kstate import Stores, _core
from kstate.errors import ChangelogTruncatedError
from kstate.log import Partition
from kstate.log.history import StoreHistory, open_snapshot_store, rebuild_state, store_entries
from remote.locations import Remote

from .history_retention import damage_snapshot, delete_history_below

APP = "app"
TOPIC = f"{APP}-counts-changelog"
KEYS = 200


def builder(location, **config):
    """The string -> int64 store ``counts`` logged to ``location`` in small segments (so a
    retention has whole ones to delete), never compacted (a compaction of rounds that rewrite
    every key moves the changelog's start itself); snapshots by ``snapshot()``."""
    config = {"minDeltasForSnapshot": 1_000, "segment.bytes": 4096, "cleanup.policy": "delete", **config}
    supplier = Stores.persistent_key_value_store("counts")
    return Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
        location.logging_config(**config)
    )


def task(root, machine):
    return root / machine / "state" / APP / "0_0"


def write_rounds(store, rounds):
    """Round ``r`` sets every key to ``r``, one commit each; returns each round's last offset."""
    ends = {}
    for r in rounds:
        store.put_all((f"k{i:04d}", r) for i in range(KEYS))
        ends[r] = store.commit()
    return ends


def history(location):
    return StoreHistory(location.url, TOPIC, 0, location.storage_options)


def state_at(location, tmp_path, until=None, name="rebuilt"):
    """``(rebuilt, {key: value})`` of the state ``rebuild_state`` builds as of ``until``."""
    rebuilt = rebuild_state(history(location), str(tmp_path / name / "counts"), timestamped=False, until=until)
    store = open_snapshot_store(rebuilt.directory, f"{TOPIC}-0", False, rebuilt.offset)
    try:
        entries = {
            k.decode(): int.from_bytes(v, "big", signed=True)
            for table in store_entries(store)
            for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist())
        }
    finally:
        store.close()
    return rebuilt, entries


def every_key(value):
    return {f"k{i:04d}": value for i in range(KEYS)}


@pytest.fixture
def written(location, tmp_path):
    """Six rounds, a snapshot after rounds 1 and 3: ``{round: last offset}``, the two snapshot offsets."""
    with builder(location).build().init(task(tmp_path, "a")) as store:
        ends = write_rounds(store, range(2))
        first = store.snapshot(batch_id=1).offset
        ends |= write_rounds(store, range(2, 4))
        second = store.snapshot(batch_id=3).offset
        ends |= write_rounds(store, range(4, 6))
    assert (first, second) == (ends[1], ends[3])
    return ends, first, second


def test_the_state_at_an_offset_starts_from_the_newest_snapshot_at_or_below_it(location, tmp_path, written, caplog):
    ends, first, second = written
    caplog.set_level(logging.INFO, logger="kstate.log.history")
    rebuilt, state = state_at(location, tmp_path)
    assert state == every_key(5) and rebuilt.offset == ends[5]
    assert rebuilt.snapshot.offset == second and rebuilt.snapshot.batch_id == 3
    assert rebuilt.replayed == ends[5] - second, "only the changelog after the snapshot"
    assert f"loaded the snapshot at offset {second} (batch 3)" in caplog.text
    rebuilt, state = state_at(location, tmp_path, until=ends[2], name="at-2")
    assert state == every_key(2) and rebuilt.snapshot.offset == first and rebuilt.replayed == ends[2] - first
    rebuilt, state = state_at(location, tmp_path, until=ends[0], name="at-0")
    assert state == every_key(0) and rebuilt.snapshot is None and rebuilt.replayed == ends[0] + 1


def test_history_below_the_oldest_snapshot_is_not_needed(location, tmp_path, written):
    ends, first, second = written
    start = delete_history_below(location.url, location.storage_options, TOPIC, 0, first + 1)
    assert 0 < start <= first + 1
    assert state_at(location, tmp_path)[1] == every_key(5)
    assert state_at(location, tmp_path, until=ends[2], name="at-2")[1] == every_key(2)
    with pytest.raises(ChangelogTruncatedError, match=rf"{TOPIC}-0.*from offset 0.*before offset {start} was deleted"):
        state_at(location, tmp_path, until=ends[0], name="at-0")
    # The store's own restore on a machine without local state: from the newest snapshot.
    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert dict(elsewhere.all()) == every_key(5)
        assert elsewhere.restored_records == ends[5] - second


def test_a_damaged_snapshot_falls_back_to_an_older_one_and_none_is_a_typed_error(location, tmp_path, written, caplog):
    ends, first, second = written
    delete_history_below(location.url, location.storage_options, TOPIC, 0, first + 1)
    damage_snapshot(location.url, location.storage_options, TOPIC, 0, second)
    caplog.set_level(logging.INFO, logger="kstate.log.history")
    rebuilt, state = state_at(location, tmp_path)
    assert state == every_key(5) and rebuilt.snapshot.offset == first and rebuilt.replayed == ends[5] - first
    assert f"the snapshot at offset {second}" in caplog.text and "cannot be used" in caplog.text
    damage_snapshot(location.url, location.storage_options, TOPIC, 0, first)
    with pytest.raises(
        ChangelogTruncatedError, match=rf"{TOPIC}-0.*snapshots at offsets: {first}, {second}; {second}: "
    ):
        state_at(location, tmp_path, name="again")
    # Nor does a store restore part of the state: its init refuses, and leaves nothing behind.
    with pytest.raises(ChangelogTruncatedError):
        builder(location).build().init(task(tmp_path, "b"))


def test_without_snapshots_the_whole_changelog_replays(location, tmp_path):
    plain = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    with plain.with_logging_enabled(location.logging_config()).build().init(task(tmp_path, "a")) as store:
        ends = write_rounds(store, range(3))
    rebuilt, state = state_at(location, tmp_path)
    assert state == every_key(2) and rebuilt.snapshot is None and rebuilt.replayed == ends[2] + 1


def test_a_start_compaction_moved_is_no_missing_history(tmp_path):
    # Compaction deletes a first segment whose every record has a later one: nothing is lost.
    with Partition.open(
        tmp_path / "changelog" / f"{TOPIC}-0", {"segment.bytes": 100, "cleanup.policy": "compact"}
    ) as log:
        for i in range(30):
            log.append([(f"k{i % 3:04d}".encode(), i.to_bytes(8, "big", signed=True))], 1_000 + i)
        log.compact()
        assert log.log_start_offset > 0
    rebuilt, state = state_at(Remote("dir", str(tmp_path / "changelog")), tmp_path)
    assert state == {"k0000": 27, "k0001": 28, "k0002": 29} and rebuilt.snapshot is None and rebuilt.offset == 29


def test_a_window_store_s_state_is_its_snapshot_s_segments_and_the_changelog_after(location, tmp_path):
    minute = 60_000
    supplier = Stores.persistent_window_store("clicks", retention_ms=60 * minute, window_size_ms=minute)
    windows = Stores.window_store_builder(supplier, "string", "int64").with_logging_enabled(
        location.logging_config(minDeltasForSnapshot=1_000, **{"retention.ms": "-1"})  # event times of 1970
    )
    with windows.build().init(task(tmp_path, "a")) as store:
        for i in range(40):  # 40 windows over several segments (segments of 30 minutes)
            store.put(f"k{i % 4}", i, window_start=i * minute)
        store.commit()
        published = store.snapshot()
        store.put("k3", 99, window_start=39 * minute)  # window 39 is k3's: rewritten
        store.put("k9", 1, window_start=40 * minute)
        last = store.commit()
    history = StoreHistory(location.url, f"{APP}-clicks-changelog", 0, location.storage_options)
    rebuilt = rebuild_state(history, str(tmp_path / "rebuilt" / "clicks"))
    assert rebuilt.snapshot.kind == "window" and rebuilt.snapshot.offset == published.offset
    assert rebuilt.replayed == 2 and rebuilt.offset == last
    assert _core.summarize_store(rebuilt.directory, True)[2] == 41, "40 windows, one rewritten, one new"

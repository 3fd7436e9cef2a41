"""Stores backed by a changelog: commits publish to a Kafka log partition first, and opening
restores whatever the store lacks (persistent after a lost state dir, in-memory every time)."""

import logging
import shutil

import pytest

from kstate import Stores, ValueAndTimestamp
from kstate.errors import InvalidArgumentError

APP = "app"


def build(kind="persistent", logging_config=None):
    supplier = {
        "persistent": Stores.persistent_timestamped_key_value_store,
        "memory": Stores.in_memory_timestamped_key_value_store,
    }[kind]("counts")
    builder = Stores.timestamped_key_value_store_builder(supplier, "string", "int64")
    return builder.with_logging_enabled(logging_config).build()


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


def test_commits_take_offsets_from_the_changelog_and_checkpoint_them(state_dir):
    task = state_dir / APP / "0_2"
    with build().init(task) as store:
        assert store.logged
        store.put("a", 1, timestamp=10)
        store.put("b", 2, timestamp=11)
        assert store.commit() == 1
        store.delete("a")
        assert store.commit() == 2
        assert store.commit() == 2, "an empty commit publishes nothing"
        with pytest.raises(InvalidArgumentError, match="logged"):
            store.commit(7)
    partition = state_dir / "changelog" / f"{APP}-counts-changelog-2"
    assert (partition / "00000000000000000000.log").stat().st_size > 0
    assert (task / ".checkpoint").read_text() == f"0\n1\n{APP}-counts-changelog 2 2\n"


def test_a_lost_state_dir_is_restored_from_the_changelog(state_dir, caplog):
    task = state_dir / APP / "0_0"
    with build().init(task) as store:
        for batch in range(3):
            store.put_all({f"k{i}": batch * 100 + i for i in range(500)}.items())
            store.delete("k7")
            store.commit()
        expected = list(store.all_with_timestamp())
    shutil.rmtree(task)
    caplog.set_level(logging.INFO, logger="kstate.store")
    with build().init(task) as store:
        assert store.restored_records == 1500
        assert list(store.all_with_timestamp()) == expected
        assert store.get_with_timestamp("k1") == ValueAndTimestamp(201, expected[1].value.timestamp)
    assert "restored 1500 records" in caplog.text and "records/s" in caplog.text
    with build().init(task) as store:
        assert store.restored_records == 0, "a current store restores nothing"


def test_in_memory_stores_restore_on_every_init(state_dir):
    task = state_dir / APP / "0_0"
    log_dir = state_dir / "elsewhere"
    with build("memory", {"changelog.dir": log_dir, "segment.bytes": 4096}).init(task) as store:
        for start in range(0, 300, 100):
            store.put_all([(f"k{i}", i) for i in range(start, start + 100)])
            store.commit()
        store.put("uncommitted", 1)
    assert len(list(log_dir.glob("app-counts-changelog-0/*.log"))) > 1, "small segments rolled"
    with build("memory", {"changelog.dir": log_dir}).init(task) as store:
        assert store.restored_records == 300
        assert store.get("k299") == 299 and store.get("uncommitted") is None


def test_bad_topic_configs_are_typed_errors(state_dir):
    with pytest.raises(InvalidArgumentError, match="cleanup.policy"):
        build(logging_config={"cleanup.policy": "shred"}).init(state_dir / APP / "0_0")


def compacting(**extra):
    return {"segment.bytes": 4096, **extra}


def changelog_dir(state_dir):
    return state_dir / "changelog" / f"{APP}-counts-changelog-0"


def rewrite_rounds(store, rounds, start=0):
    """Each round rewrites the same 50 keys, so old records are superseded."""
    for n in range(start, start + rounds):
        store.put_all([(f"k{i:02d}", n) for i in range(50)])
        store.commit()


def test_the_changelog_compacts_itself_as_commits_add_to_it(state_dir, caplog):
    task = state_dir / APP / "0_0"
    caplog.set_level(logging.INFO, logger="kstate.store")
    with build(logging_config=compacting()).init(task) as store:
        rewrite_rounds(store, 60)  # 3,000 records of ~40 bytes, 50 keys
        expected = list(store.all_with_timestamp())
    written = 60 * 50
    kept = sum(p.stat().st_size for p in changelog_dir(state_dir).glob("*.log"))
    assert "cleaned" in caplog.text and "records removed" in caplog.text
    # 3,000 records of 43 bytes (entry overhead, 3-byte key, 8-byte value) went in.
    assert kept < written * 43 / 4, f"{kept} bytes kept"
    shutil.rmtree(task)
    with build(logging_config=compacting()).init(task) as store:
        assert store.restored_records < written / 4, "a compacted changelog restores the latest records"
        assert list(store.all_with_timestamp()) == expected


def test_a_large_changelog_compacts_beside_the_commits_and_when_opened_for_one_commit_at_a_time(state_dir, caplog):
    """Compactions of more than 8 MiB run on a cleaner thread: a commit that makes one due does
    not wait for it, and a close waits for one still running (and logs it), so a store opened for
    one commit at a time compacts too. A restore from the compacted changelog is the store's state."""
    caplog.set_level(logging.INFO, logger="kstate.store")
    task = state_dir / APP / "0_0"
    config = {"segment.bytes": 1 << 20}
    value = "v" * 200
    for run in range(18):  # one commit a run: 20,000 of the same 40,000 keys, ~4.6 MB
        with build(logging_config=config).init(task) as store:
            first = run * 20_000 % 40_000
            store.put_all([(f"key-{(first + i) % 40_000:05d}-{value}", run) for i in range(20_000)])
            store.commit()
            expected = list(store.all_with_timestamp())
    kept = sum(p.stat().st_size for p in changelog_dir(state_dir).glob("*.log"))
    assert kept < 40 << 20, f"compacted: {kept} bytes kept of ~83 MB written"
    assert not list(changelog_dir(state_dir).glob("*.cleaned")), "a close leaves no compaction behind"
    assert "compaction finished at the close (" in caplog.text and "records removed" in caplog.text
    shutil.rmtree(task)
    with build(logging_config=config).init(task) as store:
        assert list(store.all_with_timestamp()) == expected


def test_a_store_behind_its_compacted_changelog_is_restored_from_scratch(state_dir, tmp_path):
    task = state_dir / APP / "0_0"
    with build(logging_config=compacting()).init(task) as store:
        rewrite_rounds(store, 2)
    shutil.copytree(task, tmp_path / "stale")  # local state at offset 99, as a moved partition's
    with build(logging_config=compacting()).init(task) as store:
        rewrite_rounds(store, 60, start=2)
        expected = list(store.all_with_timestamp())
    log_start = min(int(p.stem) for p in changelog_dir(state_dir).glob("*.log"))
    assert log_start > 100, "compaction dropped the first segments whole"
    shutil.rmtree(task)
    shutil.move(tmp_path / "stale", task)
    with build(logging_config=compacting()).init(task) as store:
        assert list(store.all_with_timestamp()) == expected

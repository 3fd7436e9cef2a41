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

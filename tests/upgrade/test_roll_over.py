"""Roll-over upgrade (KIP-258): a plain, logged key-value store (the old format) gets a timestamped
standby built from its changelog while it keeps serving, then the standby takes its place. Values
are checked against the old store and the column families read back with rocksdict; a build
killed with SIGKILL and a takeover interrupted between its renames both finish when run again."""

import shutil
import struct
import textwrap

import pytest

from kstate import Stores
from kstate.errors import InvalidArgumentError, InvalidStateStoreError
from kstate.upgrade import build_standby, inspect_store, take_over

APP = "app"
KEYS = 3_000


SEGMENT = {"segment.bytes": 16 * 1024}
"""Small changelog segments: the standby restores segment by segment, committing after each."""


def old_builder():
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")


def new_builder():
    supplier = Stores.persistent_timestamped_key_value_store("counts")
    return Stores.timestamped_key_value_store_builder(supplier, "string", "int64").with_logging_enabled()


@pytest.fixture
def task(tmp_path):
    """A task dir whose plain store ``counts`` has 3 commits (every key, then rewrites and
    deletes) in its changelog."""
    task = tmp_path / "state" / APP / "0_0"
    with old_builder().with_logging_enabled(SEGMENT).build().init(task) as store:
        store.put_all([(f"k{i:05d}", i) for i in range(KEYS)])
        store.commit()
        store.put_all([(f"k{i:05d}", -i) for i in range(0, KEYS, 3)])
        store.commit()
        for i in range(0, KEYS, 7):
            store.delete(f"k{i:05d}")
        store.commit()
    return task


def old_contents(task):
    with old_builder().with_logging_enabled().build().init(task) as store:
        return dict(store.all())


def test_the_standby_is_built_beside_the_serving_store_then_takes_over(task, column_families):
    expected = old_contents(task)
    serving = old_builder().with_logging_enabled().build().init(task)
    try:
        # The changelog's records (the first commit, rewrites, deletes), less what its cleaner compacted.
        assert 0 < build_standby(new_builder(), task) <= KEYS + len(range(0, KEYS, 3)) + len(range(0, KEYS, 7))
        assert inspect_store(task / "rocksdb" / "counts").format == "plain", "the serving store is untouched"
        with pytest.raises(InvalidStateStoreError, match="still open"):
            take_over(new_builder(), task)
        serving.put("late", 1)  # the old store still serves and commits
        serving.commit()
        expected["late"] = 1
    finally:
        serving.close()
    assert take_over(new_builder(), task) == 1, "the standby catches up with the last commit"
    assert inspect_store(task / "rocksdb" / "counts").format == "timestamped"
    assert not (task / "rocksdb" / ".counts.standby").exists() and not (task / "rocksdb" / ".counts.old").exists()
    with new_builder().build().init(task) as store:
        assert store.restored_records == 0, "the standby took over at the changelog's end"
        got = dict(store.all_with_timestamp())
    assert {k: v.value for k, v in got.items()} == expected
    assert all(v.timestamp > 1_600_000_000_000 for v in got.values()), "record timestamps, not -1"
    families = column_families(task / "rocksdb" / "counts")
    assert families["default"] == {} and len(families["keyValueWithTimestamp"]) == len(expected)
    raw = families["keyValueWithTimestamp"][b"k00001"]
    assert struct.unpack(">q", raw[8:])[0] == expected["k00001"]


def test_a_standby_build_killed_midway_resumes(task, kill_writer):
    expected = old_contents(task)
    script = textwrap.dedent("""
        import sys, time
        from kstate import Stores
        from kstate.store_lifecycle import RestoreProgress
        from kstate.upgrade import build_standby

        def killed_here(self, done, total):
            print("restored", done, flush=True)
            time.sleep(60)  # the test kills the process now: its standby is built part of the way
        RestoreProgress.__call__ = killed_here  # the build reports each changelog segment it restored
        supplier = Stores.persistent_timestamped_key_value_store("counts")
        builder = Stores.timestamped_key_value_store_builder(supplier, "string", "int64").with_logging_enabled()
        build_standby(builder, sys.argv[1])
    """)
    kill_writer(script, [task], wait_for="restored")
    total = KEYS + len(range(0, KEYS, 3)) + len(range(0, KEYS, 7))
    rest = build_standby(new_builder(), task)
    assert 0 < rest < total, "the build resumed from where the killed one had committed"
    take_over(new_builder(), task)
    with new_builder().build().init(task) as store:
        assert {k: v for k, v in store.all()} == expected


def test_a_takeover_interrupted_between_its_renames_finishes(task):
    expected = old_contents(task)
    build_standby(new_builder(), task)
    rocksdb = task / "rocksdb"
    (rocksdb / "counts").rename(rocksdb / ".counts.old")  # the crash came after the first rename
    assert take_over(new_builder(), task) == 0
    assert not (rocksdb / ".counts.old").exists()
    with new_builder().build().init(task) as store:
        assert dict(store.all()) == expected
    shutil.rmtree(task)


def test_only_logged_timestamped_stores_roll_over(task):
    with pytest.raises(InvalidArgumentError, match="timestamped"):
        build_standby(old_builder().with_logging_enabled(), task)

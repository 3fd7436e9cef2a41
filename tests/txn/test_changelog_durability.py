"""``statestore.durability = "changelog"``: Kafka Streams' RocksDB contract (no write-ahead log).
Commits reach disk when RocksDB flushes its memtables, every column family together, so a writer
killed with SIGKILL reopens at an older committed offset holding exactly that commit's data,
and says so; a clean close loses nothing. Logged stores restore the rest from their changelog
(tests/txn/test_changelog_crash.py runs its crash windows with both durabilities)."""

import logging
import random
import textwrap

import pytest

from kstate import Stores
from kstate.errors import InvalidArgumentError

KEYS = 2000
# 64 KiB write buffers: the ~200 KB each commit writes flush several times a commit, so kills land
# before, during and after flushes.
SMALL_MEMTABLES = {"write_buffer_size": 65536}

WRITER = textwrap.dedent(f"""
    import sys, time
    from kstate import Stores

    task_dir, durability, memtables = sys.argv[1], sys.argv[2], sys.argv[3]
    pause_after = int(sys.argv[4]) if len(sys.argv) > 4 else None  # a commit to wait after, to be killed
    config = {{"statestore.durability": durability}}
    if memtables == "small":
        config["rocksdb.config.setter"] = {SMALL_MEMTABLES}
    store = (Stores.key_value_store_builder(Stores.persistent_key_value_store("s"))
             .with_config(config).build().init(task_dir))
    keys = [b"k%05d" % i for i in range({KEYS})]
    n = (store.committed_offset() or 0) + 1
    while True:  # commit n holds value n for every key, at offset n
        store.put_all(keys, [b"%d" % n + b"." * 90] * len(keys))
        store.commit(n)
        print("committed", n, flush=True)
        if n == pause_after:
            time.sleep(60)  # the test kills the process here
        n += 1
""")


LOGGED_WRITER = textwrap.dedent(f"""
    import sys, time
    from kstate import Stores

    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s")).with_logging_enabled({{}}).build()
    store.init(sys.argv[1])
    keys = [b"k%05d" % i for i in range({KEYS})]
    for n in range(1, 7):  # commit n holds value n for every key
        store.put_all(keys, [b"%d" % n + b"." * 90] * len(keys))
        store.commit()
    print("committed", store.committed_offset(), flush=True)
    time.sleep(60)  # the test kills the process here
""")


def reopen(task_dir, durability):
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"))
    return builder.with_config({"statestore.durability": durability}).build().init(task_dir)


def values_of(store):
    """The commit numbers the store's values hold, and how many keys it has."""
    rows = list(store.all())
    return {v[: v.index(b".")] for _, v in rows}, len(rows)


@pytest.mark.parametrize("attempt", range(6))
def test_a_killed_unlogged_store_reopens_at_an_older_whole_commit_and_says_so(kill_writer, task_dir, caplog, attempt):
    random.seed(attempt)
    kill_writer(WRITER, [task_dir, "changelog", "small"], "committed 5", delay=random.uniform(0, 0.5))
    with caplog.at_level(logging.WARNING, logger="kstate.store"):
        store = reopen(task_dir, "changelog")
    with store:
        offset = store.committed_offset()
        if offset is None:
            assert list(store.all()) == [], "data flushed without its offset"
        else:
            assert values_of(store) == ({b"%d" % offset}, KEYS), f"data of another commit than offset {offset}"
    assert any("not closed cleanly" in r.getMessage() and "possibly older" in r.getMessage() for r in caplog.records), (
        "a store that may have gone back must say so"
    )


def test_the_same_writer_with_the_wal_loses_no_commit(kill_writer, task_dir, caplog):
    lines = kill_writer(WRITER, [task_dir, "wal", "small"], "committed 5", delay=0.2)
    seen = [int(words[1]) for words in lines if words[0] == "committed"]
    with caplog.at_level(logging.WARNING, logger="kstate.store"), reopen(task_dir, "wal") as store:
        offset = store.committed_offset()
        assert offset >= max(seen)
        assert values_of(store) == ({b"%d" % offset}, KEYS)
    assert not [r for r in caplog.records if "not closed cleanly" in r.getMessage()]


def test_a_killed_store_without_flushes_reopens_empty_then_resumes(kill_writer, task_dir):
    """Default write buffers: the first commits never leave the memtables, so a kill loses them
    all, and the store reopened (unclean) takes commits again and keeps them across a clean close."""
    kill_writer(WRITER, [task_dir, "changelog", "default", 3], "committed 3")
    with reopen(task_dir, "changelog") as store:
        assert store.committed_offset() is None
        assert list(store.all()) == []
        store.put(b"k", b"v")
        store.commit(7)
    with reopen(task_dir, "changelog") as store:
        assert store.committed_offset() == 7
        assert store.get(b"k") == b"v"


def test_a_clean_close_loses_nothing_and_reopens_clean(task_dir, caplog):
    with reopen(task_dir, "changelog") as store:
        for n in range(1, 4):
            store.put_all([b"k%05d" % i for i in range(100)], [b"%d." % n] * 100)
            store.commit(n)
            assert store.durable_offset() is None, "in memtables only"
    with caplog.at_level(logging.WARNING, logger="kstate.store"), reopen(task_dir, "changelog") as store:
        assert store.committed_offset() == store.durable_offset() == 3
        assert values_of(store) == ({b"3"}, 100)
    assert not [r for r in caplog.records if "not closed cleanly" in r.getMessage()]
    # Switching durability across a restart keeps every commit either way.
    with reopen(task_dir, "wal") as store:
        store.put(b"k00000", b"4.")
        store.commit(4)
        assert store.durable_offset() == 4
    with reopen(task_dir, "changelog") as store:
        assert store.committed_offset() == 4
        assert store.get(b"k00000") == b"4."


def test_a_spilled_commit_is_durable_before_its_spill_is_deleted(kill_writer, task_dir):
    """Staged writes past the bound spill and are ingested as a table file, durable at once:
    the commits still in memtables are flushed first, the offset after."""
    writer = WRITER.replace(
        'config = {"statestore.durability": durability}',
        'config = {"statestore.durability": durability, "statestore.uncommitted.max.bytes": 50_000}',
    )
    assert writer != WRITER
    lines = kill_writer(writer, [task_dir, "changelog", "default"], "committed 3", delay=0.1)
    seen = [int(words[1]) for words in lines if words[0] == "committed"]
    with reopen(task_dir, "changelog") as store:
        offset = store.committed_offset()
        assert offset >= max(seen), "a spilled commit is flushed before the commit returns"
        assert values_of(store) == ({b"%d" % offset}, KEYS)


@pytest.mark.parametrize("value", ["WAL", " changelog "])
def test_durability_names_are_normalized(task_dir, value):
    with reopen(task_dir, value) as store:
        assert store.durability == value.strip().lower()


@pytest.mark.parametrize("value", ["fsync", "", 1, None.__class__])
def test_a_bad_durability_is_a_clear_error(task_dir, value):
    with pytest.raises(InvalidArgumentError, match="statestore.durability"):
        reopen(task_dir, value)


def test_changelog_durability_needs_a_transactional_store(task_dir):
    config = {"statestore.durability": "changelog", "enable.transactional.statestores": False}
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("s")).with_config(config)
    with pytest.raises(InvalidArgumentError, match="transactional"):
        builder.build().init(task_dir)


def test_window_and_session_stores_keep_the_wal(task_dir):
    config = {"statestore.durability": "changelog"}
    window = Stores.window_store_builder(Stores.persistent_window_store("w", 600_000, 60_000))
    with pytest.raises(InvalidArgumentError, match="write-ahead log"):
        window.with_config(config).build()
    session = Stores.session_store_builder(Stores.persistent_session_store("s", 600_000))
    with pytest.raises(InvalidArgumentError, match="write-ahead log"):
        session.with_config(config).build()


def test_a_transactional_store_with_a_changelog_runs_without_the_wal_by_default(tmp_path, kill_writer, caplog):
    """Kafka Streams' default: a logged store's changelog is its durability. Killed, the store
    reopens at an older commit and restores the rest from its changelog: nothing is lost. Any
    other store keeps the WAL."""
    plain = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"))
    assert plain.build().durability == "wal"
    assert plain.with_logging_enabled({}).build().durability == "changelog"
    unsafe = plain.with_config({"enable.transactional.statestores": False}).with_logging_enabled({})
    assert unsafe.build().durability == "wal"
    assert plain.with_logging_enabled({}).with_config({"statestore.durability": "wal"}).build().durability == "wal"

    task_dir = str(tmp_path / "app" / "0_0")
    (*_, (_, offset)) = kill_writer(LOGGED_WRITER, [task_dir], "committed")
    with caplog.at_level(logging.WARNING, logger="kstate.store"):
        store = plain.with_logging_enabled({}).build().init(task_dir)
    assert "commits since the last flush are lost" in caplog.text, "no flush ran: the WAL was off"
    assert store.committed_offset() == int(offset)
    assert values_of(store) == ({b"6"}, KEYS)
    store.close()

"""A writer process killed with SIGKILL before, during and after commit: the reopened store holds
exactly one committed state, never a mix, and nothing committed is lost."""

import random
import textwrap

import pytest

from kstate import Stores

WRITER = textwrap.dedent("""
    import sys, time
    from kstate import Stores

    task_dir, mode, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = (Stores.key_value_store_builder(Stores.persistent_key_value_store("s"))
             .with_config({"statestore.uncommitted.max.bytes": limit}).build().init(task_dir))

    def batch(n, size):
        return [(b"k%06d" % i, b"%d-" % n + bytes(1000)) for i in range(size)]

    def pause(done, total):
        # mid-commit: at the first progress report (marked, nothing applied yet);
        # applied: once every spilled write is in the store, before the offset is.
        if mode == "mid-commit" or done == total:
            print("copying", done, total, flush=True)
            time.sleep(60)

    if mode == "loop":            # commit n has every key at value n; say so after each commit
        n = 1
        while True:
            store.put_all(batch(n, 3000))
            store.commit(n)
            print("committed", n, flush=True)
            n += 1
    store.put_all(batch(1, 3000))
    store.commit(1)
    store.put_all(batch(2, 20000))  # 20 MB
    if mode == "staged":
        print("staged", flush=True)
        time.sleep(60)
    elif mode in ("mid-commit", "applied"):
        store.commit(2, pause)
    elif mode == "after-commit":
        store.commit(2)
        print("committed", flush=True)
        time.sleep(60)
""")

SPILL = 1 << 20  # 1 MiB: the 20 MB batch spills; its commit ingests the spill as a table file
NO_SPILL = 1 << 30


def reopen(task_dir):
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("s")).build().init(task_dir)


def state_of(store):
    values = {v.split(b"-")[0] for _, v in store.all()}
    return len(list(store.all())), values


@pytest.mark.parametrize("limit", [SPILL, NO_SPILL], ids=["spilled", "in-memory"])
def test_killed_before_commit_keeps_the_last_commit(kill_writer, task_dir, limit):
    kill_writer(WRITER, [task_dir, "staged", limit], "staged")
    with reopen(task_dir) as store:
        assert store.committed_offset() == 1
        assert state_of(store) == (3000, {b"1"})
    assert not (task_dir / "rocksdb" / ".s.uncommitted").exists()


@pytest.mark.parametrize("mode", ["mid-commit", "applied"])
def test_killed_in_the_middle_of_a_spilled_commit_finishes_it_on_reopen(kill_writer, task_dir, mode):
    lines = kill_writer(WRITER, [task_dir, mode, SPILL], "copying")
    done, total = int(lines[-1][1]), int(lines[-1][2])
    if mode == "mid-commit":
        assert done < total, "killed once the commit was marked, before the writes were applied"
    else:
        assert done == total > 0, "killed with every write applied, before the offset"
    with reopen(task_dir) as store:
        assert store.committed_offset() == 2
        assert state_of(store) == (20000, {b"2"})
    assert not (task_dir / "rocksdb" / ".s.uncommitted").exists()


@pytest.mark.parametrize("limit", [SPILL, NO_SPILL], ids=["spilled", "in-memory"])
def test_killed_after_commit_keeps_it(kill_writer, task_dir, limit):
    kill_writer(WRITER, [task_dir, "after-commit", limit], "committed")
    with reopen(task_dir) as store:
        assert store.committed_offset() == 2
        assert state_of(store) == (20000, {b"2"})


@pytest.mark.parametrize("attempt", range(3))
def test_killed_while_committing_in_a_loop_lands_on_one_commit(kill_writer, task_dir, attempt):
    random.seed(attempt)
    lines = kill_writer(WRITER, [task_dir, "loop", NO_SPILL], "committed 3", delay=random.uniform(0, 0.3))
    last_said = max(int(words[1]) for words in lines if words[0] == "committed")
    with reopen(task_dir) as store:
        offset = store.committed_offset()
        assert offset >= last_said, "a commit the writer reported is lost"
        assert state_of(store) == (3000, {str(offset).encode()})

"""A window-store writer process killed with SIGKILL in the middle of a commit that spans several
segment databases, or of commits that write one segment alone (without the commit intent): the
reopened store holds the old or the new committed state, never a mix."""

import random
import textwrap

import pytest

from kstate import Stores

MINUTE = 60_000
STARTS = [1, 5 * MINUTE, 10 * MINUTE]  # retention 10 min, 5-minute segments: three segment databases
KEYS = 2000

WRITER = textwrap.dedent(f"""
    import sys, time
    from kstate import Stores

    task_dir, mode = sys.argv[1], sys.argv[2]
    # "mid-commit-spilled": staged writes spill to disk, so the commit applies them from the intent file
    config = {{"statestore.uncommitted.max.bytes": 20_000}} if mode.endswith("spilled") else {{}}
    builder = Stores.window_store_builder(Stores.persistent_window_store("w", 10 * 60_000, 60_000))
    store = builder.with_config(config).build().init(task_dir)

    def write(n):  # commit n holds value n in every window of every key
        for i in range({KEYS}):
            for start in {STARTS}:
                store.put(b"k%05d" % i, b"%d" % n, start)

    def pause(done, total):
        print("applied", done, total, flush=True)
        time.sleep(60)

    if mode in ("loop", "mixed"):  # mixed: even commits write the newest segment alone
        n = 1
        while True:
            if mode == "loop" or n % 2:
                write(n)
            else:
                for i in range({KEYS}):
                    store.put(b"k%05d" % i, b"%d" % n, {STARTS[-1]})
            store.commit(n)
            print("committed", n, flush=True)
            n += 1
    write(1)
    store.commit(1)
    write(2)
    if mode == "staged":
        print("staged", flush=True)
        time.sleep(60)
    elif mode.startswith("mid-commit"):
        store.commit(2, pause)  # the pause comes after the first segment's batch is applied
""")


def reopen(task_dir):
    return Stores.window_store_builder(Stores.persistent_window_store("w", 10 * MINUTE, MINUTE)).build().init(task_dir)


def state_of(store):
    """Number of windows per segment and the set of values seen."""
    per_segment, values = {}, set()
    for kv in store.all():
        per_segment[kv.key.start] = per_segment.get(kv.key.start, 0) + 1
        values.add(kv.value)
    return per_segment, values


@pytest.mark.parametrize("mode", ["mid-commit", "mid-commit-spilled"])
def test_killed_between_segment_writes_finishes_the_commit_on_reopen(kill_writer, task_dir, mode):
    lines = kill_writer(WRITER, [task_dir, mode], "applied")
    done, total = int(lines[-1][1]), int(lines[-1][2])
    assert (done, total) == (1, 3), "killed with one of three segments written"
    with reopen(task_dir) as store:
        assert store.committed_offset() == 2
        assert state_of(store) == ({start: KEYS for start in STARTS}, {b"2"})
    assert not (task_dir / ".w.commit.tmp").exists()


def test_killed_before_commit_keeps_the_last_commit(kill_writer, task_dir):
    kill_writer(WRITER, [task_dir, "staged"], "staged")
    with reopen(task_dir) as store:
        assert store.committed_offset() == 1
        assert state_of(store) == ({start: KEYS for start in STARTS}, {b"1"})


@pytest.mark.parametrize("attempt", range(3))
def test_killed_at_a_random_moment_lands_on_one_commit(kill_writer, task_dir, attempt):
    rng = random.Random(attempt)
    lines = kill_writer(WRITER, [task_dir, "loop"], "committed 2", delay=rng.uniform(0, 0.4))
    last_said = max(int(words[1]) for words in lines if words[0] == "committed")
    with reopen(task_dir) as store:
        offset = store.committed_offset()
        assert offset >= last_said, "a commit the writer reported is lost"
        assert state_of(store) == ({start: KEYS for start in STARTS}, {str(offset).encode()})


@pytest.mark.parametrize("attempt", range(3))
def test_killed_among_one_segment_commits_lands_on_one_commit(kill_writer, task_dir, attempt):
    rng = random.Random(100 + attempt)
    lines = kill_writer(WRITER, [task_dir, "mixed"], "committed 3", delay=rng.uniform(0, 0.4))
    last_said = max(int(words[1]) for words in lines if words[0] == "committed")
    with reopen(task_dir) as store:
        offset = store.committed_offset()
        assert offset >= last_said, "a commit the writer reported is lost"
        last_odd = offset if offset % 2 else offset - 1
        values = {}
        for kv in store.all():
            values.setdefault(kv.key.start, set()).add(kv.value)
        assert values == {
            STARTS[0]: {str(last_odd).encode()},
            STARTS[1]: {str(last_odd).encode()},
            STARTS[2]: {str(offset).encode()},
        }
        assert sum(1 for _ in store.all()) == KEYS * len(STARTS)

"""The four crash windows of the KIP-892 seed, each with a real writer process killed by SIGKILL,
for a store backed by a changelog. Each commit adds 1 to every key's count (a read-modify-write
that is wrong if a commit is lost or applied twice), so after a reopen every count must equal
the number of commits the changelog published, and no commit the writer saw finish may be lost.
Each runs with both ``statestore.durability`` values: with ``"changelog"`` (no RocksDB WAL) the
killed store loses the commits its memtables held and restores them from its changelog on open.
"""

import random

import pytest

from kstate import Stores

KEYS = 200
OPENING = f"""
    limit, durability = int(args[0]), args[1]
    store = (Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
             .with_config({{"statestore.uncommitted.max.bytes": limit, "statestore.durability": durability}})
             .with_logging_enabled().build().init(task_dir))
    keys = [f"k{{i:03d}}" for i in range({KEYS})]

    def count_once():
        store.put_all(zip(keys, [(v or 0) + 1 for v in store.get_many(keys)]))
"""
SPILL = 4096  # staged writes spill to disk: the commit streams them to the changelog from there
NO_SPILL = 1 << 30


def reopen(task_dir, durability):
    supplier = Stores.persistent_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled()
    return builder.with_config({"statestore.durability": durability}).build().init(task_dir)


def counts(store):
    return {v for _, v in store.all()}


def checkpointed(task_dir):
    lines = (task_dir / ".checkpoint").read_text().split("\n")
    return int(lines[2].split()[2])


@pytest.mark.parametrize("durability", ["wal", "changelog"])
@pytest.mark.parametrize("limit", [SPILL, NO_SPILL], ids=["spilled", "in-memory"])
@pytest.mark.parametrize(
    "window, pause_at, commits, restored",
    [
        ("1: staged, not published", "staged", 1, 0),
        ("2: published, not in the store", "published", 2, KEYS),
        ("3: in the store, not checkpointed", "store-committed", 2, 0),
        ("4: checkpointed", "checkpointed", 2, 0),
    ],
    ids=lambda v: v.split(":")[0] if isinstance(v, str) and ":" in v else None,
)
def test_each_crash_window_reopens_at_exactly_the_published_commits(
    kill_writer, counting_writer, task_dir, durability, limit, window, pause_at, commits, restored
):
    kill_writer(counting_writer(OPENING), [task_dir, pause_at, limit, durability], wait_for=pause_at)
    with reopen(task_dir, durability) as store:
        if durability == "wal":
            assert store.restored_records == restored, window
        else:  # the commits still in memtables are restored too
            assert restored <= store.restored_records <= commits * KEYS, window
        assert counts(store) == {commits}, window
        assert store.committed_offset() == commits * KEYS - 1
    assert checkpointed(task_dir) == commits * KEYS - 1, ".checkpoint catches up on open"


@pytest.mark.parametrize("durability", ["wal", "changelog"])
@pytest.mark.parametrize("attempt", range(3))
def test_killed_at_random_while_committing_loses_and_repeats_nothing(
    kill_writer, counting_writer, task_dir, attempt, durability
):
    random.seed(attempt)
    writer = counting_writer(OPENING)
    args = [task_dir, "loop", NO_SPILL, durability]
    lines = kill_writer(writer, args, "committed 799", delay=random.uniform(0, 0.3))
    seen = [int(words[1]) for words in lines if words[0] == "committed"]
    with reopen(task_dir, durability) as store:
        offset = store.committed_offset()
        assert offset >= max(seen), "a commit the writer saw finish is lost"
        assert (offset + 1) % KEYS == 0, "the store holds whole commits only"
        assert counts(store) == {(offset + 1) // KEYS}, "every published commit applied exactly once"

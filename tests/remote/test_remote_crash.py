"""A writer of a store with a remote changelog, killed with SIGKILL in each window of a commit:
before the upload, after the upload (the publication point) but before the local cache counts
it, after the cache does but before RocksDB has it, and after. Each commit adds 1 to every
key's count, so a lost or doubled commit shows. The same machine reopening, and a machine with
no local state, must both see exactly the commits the remote log holds."""

from __future__ import annotations

import json
import random

import pytest

from kstate import Stores

KEYS = 200
OPENING = f"""
    store = (Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
             .with_logging_enabled(json.loads(args[0]))
             .with_config({{"statestore.durability": args[1]}} if len(args) > 1 else {{}}).build().init(task_dir))
    keys = [f"k{{i:03d}}" for i in range({KEYS})]

    def count_once():
        store.put_all(zip(keys, [(v or 0) + 1 for v in store.get_many(keys)]))
"""


def reopen(task_dir, remote):
    supplier = Stores.persistent_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, "string", "int64")
    return builder.with_logging_enabled(remote.logging_config()).build().init(task_dir)


def counts(store):
    return {v for _, v in store.all()}


@pytest.mark.parametrize("durability", ["wal", "changelog"])
@pytest.mark.parametrize(
    "window, pause_at, commits, restored",
    [
        ("1: staged, not uploaded", "staged", 1, 0),
        ("2: uploaded, not cached", "uploaded", 2, KEYS),
        ("3: cached, not in the store", "published", 2, KEYS),
        ("4: in the store", "store-committed", 2, 0),
    ],
    ids=lambda v: v.split(":")[0] if isinstance(v, str) and ":" in v else None,
)
def test_each_crash_window_reopens_at_exactly_the_uploaded_commits(
    kill_writer, counting_writer, remote, tmp_path, window, pause_at, commits, restored, durability
):
    """With the WAL the store keeps its own commits and restores only what the upload has and it
    lacks; without it (the default) nothing was flushed, so it restores every uploaded commit."""
    task_dir = tmp_path / "a" / "app" / "0_0"
    writer = counting_writer(OPENING)
    kill_writer(writer, [task_dir, pause_at, json.dumps(remote.logging_config()), durability], wait_for=pause_at)
    with reopen(task_dir, remote) as store:
        assert store.restored_records == (restored if durability == "wal" else commits * KEYS), window
        assert counts(store) == {commits}, window
        assert store.committed_offset() == commits * KEYS - 1
    with reopen(tmp_path / "b" / "app" / "0_0", remote) as elsewhere:
        assert counts(elsewhere) == {commits}, "another machine restores the same commits"


def test_killed_at_random_while_committing_loses_and_repeats_nothing(kill_writer, counting_writer, remote, tmp_path):
    task_dir = tmp_path / "a" / "app" / "0_0"
    random.seed(remote.kind)
    args = [task_dir, "loop", json.dumps(remote.logging_config())]
    lines = kill_writer(counting_writer(OPENING), args, "committed 799", delay=random.uniform(0, 0.3))
    seen = [int(words[1]) for words in lines if words[0] == "committed"]
    with reopen(task_dir, remote) as store:
        offset = store.committed_offset()
        assert offset >= max(seen), "a commit the writer saw finish is lost"
        assert (offset + 1) % KEYS == 0, "the store holds whole commits only"
        assert counts(store) == {(offset + 1) // KEYS}, "every published commit applied exactly once"
    with reopen(tmp_path / "b" / "app" / "0_0", remote) as elsewhere:
        assert elsewhere.committed_offset() == offset and counts(elsewhere) == {(offset + 1) // KEYS}

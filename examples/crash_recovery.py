"""kstate demo: a word count whose state survives SIGKILL.

1. Counts words of a few batches into a timestamped, transactional RocksDB store, committing each
   batch at its "changelog offset".
2. A writer process stages a batch and is killed with SIGKILL before committing: on reopen the
   store holds exactly the last commit.
3. A writer whose batch is larger than ``statestore.uncommitted.max.bytes`` spills to disk and is
   killed in the middle of copying its commit: on reopen the commit is finished, not half-applied.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kstate import Stores

WORDS = "the quick brown fox jumps over the lazy dog and the cat".split()
SMALL_SPILL_LIMIT = 64 * 1024


def open_store(task_dir: Path, spill_limit: int | None = None):
    builder = Stores.timestamped_key_value_store_builder(
        Stores.persistent_timestamped_key_value_store("word-counts"), "string", "int64"
    )
    if spill_limit is not None:
        builder = builder.with_config({"statestore.uncommitted.max.bytes": spill_limit})
    return builder.build().init(task_dir)


def batch(number: int, size: int) -> list[tuple[str, int]]:
    """``size`` (word, event time) records of batch ``number``."""
    return [
        (f"{WORDS[(number * 7 + i) % len(WORDS)]}-{i % 2000}", 1_700_000_000_000 + number * 1000 + i)
        for i in range(size)
    ]


def count(store, records) -> None:
    """Adds a batch to the counts: one vectorized read, one write per distinct word."""
    seen = Counter(w for w, _ in records)
    latest = {w: ts for w, ts in records}
    words = list(seen)
    for word, old in zip(words, store.get_many(words)):
        store.put(word, (old or 0) + seen[word], timestamp=latest[word])


def child(task_dir: Path, mode: str) -> None:
    if mode == "uncommitted":
        store = open_store(task_dir)
        count(store, batch(99, 2000))
        print("staged", flush=True)
        time.sleep(60)
    else:
        store = open_store(task_dir, SMALL_SPILL_LIMIT)
        count(store, batch(3, 20_000))

        def progress(done: int, total: int) -> None:
            print("copying", done, total, flush=True)
            time.sleep(60)  # the parent kills us here: copying began, the offset is not written yet

        store.commit(3, progress)


def kill_child(task_dir: Path, mode: str, wait_for: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, str(task_dir)], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    assert line.startswith(wait_for), f"child said {line!r}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    print(f"  writer pid {proc.pid} killed with SIGKILL after it said: {line.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "TASK_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[1]), args.child[0])
        return
    logging.basicConfig(level=logging.INFO, format="   log: %(name)s: %(message)s", stream=sys.stdout)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="kstate-demo-"))
    task_dir = state_dir / "demo-app" / "0_0"
    expected: Counter[str] = Counter()

    print(f"1. counting 3 batches into {task_dir}/rocksdb/word-counts")
    t0 = time.perf_counter()
    with open_store(task_dir) as store:
        for n in range(3):
            records = batch(n, 5000)
            count(store, records)
            expected.update(w for w, _ in records)
            store.commit(n)
        print(
            f"   {store.approximate_num_entries()} keys, committed at offset {store.committed_offset()} "
            f"({15000 / (time.perf_counter() - t0):,.0f} records/s)"
        )

    print("2. a writer stages batch 99 and is killed before it commits")
    kill_child(task_dir, "uncommitted", "staged")
    with open_store(task_dir) as store:
        recovered = store.recover(2)
        state = dict(store.all())
        print(f"   recover(2) -> {recovered}; state equals the last commit: {state == dict(expected)}")

    print("3. a writer commits a batch too big for memory and is killed in the middle of its commit")
    kill_child(task_dir, "spilled", "copying")
    expected.update(w for w, _ in batch(3, 20_000))
    with open_store(task_dir) as store:
        state = dict(store.all())
        print(
            f"   reopened at offset {store.committed_offset()}; state equals commit 3 in full: "
            f"{state == dict(expected)}"
        )
        word, vt = next(iter(store.all_with_timestamp()))
        print(f"   e.g. {word!r} -> {vt.value} (last seen at {vt.timestamp})")
    ok = state == dict(expected)
    print("demo", "passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

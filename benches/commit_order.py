"""Commit time of a transactional store by the order its keys were staged in. RocksDB's memtable
takes keys in ascending order faster, so a commit writes staged keys in key order unless they
were staged in about that order (``Overlay::mostly_ascending`` in rust/core/src/store/overlay.rs).

The keys are a processor's state keys (the pickled grouping key ``("u<n>",)`` and a suffix, three
per user) of USERS users, staged three ways: as ``transform_with_state`` stages them (users in
Arrow's string order, which is runs of ascending pickled keys), sorted, and shuffled. Each way
writes every key ROUNDS times, committing after each round, and prints the commits' CPU seconds
(``thread_time``: the commit runs on the calling thread). To compare two builds, run it with
``PYTHONPATH=<a directory holding the other kstate>`` too, alternating.

  .venv/bin/python benches/commit_order.py                 # 10,000 users (30,000 keys), 5 rounds
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import tempfile
import time


def commit_seconds(keys: list[bytes], rounds: int) -> float:
    from kstate.serdes import BytesSerde
    from kstate.stores import Stores

    with tempfile.TemporaryDirectory(prefix="kstate-commit-order-") as work:
        supplier = Stores.persistent_key_value_store("s")
        store = Stores.key_value_store_builder(supplier, BytesSerde(), BytesSerde()).build()
        store.init(work)
        spent = 0.0
        try:
            for _ in range(rounds):
                for key in keys:
                    store.put(key, os.urandom(20))
                started = time.thread_time()
                store.commit()
                spent += time.thread_time() - started
        finally:
            store.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    users = sorted(f"u{i}" for i in range(args.users))  # Arrow's sort of the grouping column
    staged = [pickle.dumps((user,), protocol=4) + bytes([0, suffix]) for user in users for suffix in range(3)]
    orders = {
        "as staged": staged,
        "sorted": sorted(staged),
        "shuffled": random.Random(7).sample(staged, len(staged)),
    }
    print(f"{len(staged):,} keys, {args.rounds} commits each: commit CPU seconds")
    for _ in range(args.repeat):
        print("  " + ", ".join(f"{name} {commit_seconds(keys, args.rounds):.3f}" for name, keys in orders.items()))


if __name__ == "__main__":
    main()

"""Stores of 1 MiB values under a 32 MiB budget, for test_large_values.py:

    python tests/memory/large_values_worker.py write <state dir>
    python tests/memory/large_values_worker.py read <state dir> key-value|window|session

``write`` fills a key-value, a window and a session store with ``ROWS`` values each, in
transactions of ``COMMIT_EVERY`` values, and prints its peak RSS; ``read``
opens one of them in a fresh process, iterates every row and prints (JSON) how many rows it read
and how far the process's peak RSS rose while it did.
"""

from __future__ import annotations

import json
import sys

from kstate import Stores
from kstate.memory import peak_rss_bytes

ROWS = 320
# 100 MiB a transaction: past the budget's share for staged writes, so each spills.
COMMIT_EVERY = 100
VALUE_BYTES = 1 << 20
READ_BUDGET = 32 << 20
T0 = 1_700_000_000_000
# Writes under the default budget (256 MiB), whose block cache could take the spills' blocks.
WRITE_CONFIG: dict = {}
READ_CONFIG = {"statestore.memory.max.bytes": READ_BUDGET}


def open_store(kind: str, state_dir: str, config: dict):
    if kind == "key-value":
        builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("kv"), "bytes", "bytes")
    elif kind == "window":
        supplier = Stores.persistent_window_store("w", retention_ms=3_600_000, window_size_ms=1000)
        builder = Stores.window_store_builder(supplier, "bytes", "bytes")
    else:
        supplier = Stores.persistent_session_store("s", retention_ms=3_600_000)
        builder = Stores.session_store_builder(supplier, "bytes", "bytes")
    return builder.with_config(config).build().init(f"{state_dir}/0_0")


def value(i: int) -> bytes:
    return bytes([i % 251]) * VALUE_BYTES


def write(state_dir: str) -> None:
    for kind in ("key-value", "window", "session"):
        store = open_store(kind, state_dir, WRITE_CONFIG)
        for i in range(ROWS):
            if kind == "key-value":
                store.put(b"k%04d" % i, value(i))
            elif kind == "window":
                store.put(b"k%04d" % i, value(i), T0 + i % 4 * 1000)
            else:
                # One key's sessions: fetch(key) reads them all.
                store.put_all([b"user"], [value(i)], [T0 + i * 1000], [T0 + i * 1000 + 500])
            if i % COMMIT_EVERY == COMMIT_EVERY - 1:
                store.commit(changelog_offset=i)
        store.commit(changelog_offset=ROWS)
        store.close()
    print(json.dumps({"peak": peak_rss_bytes()}))


def read(state_dir: str, kind: str) -> None:
    store = open_store(kind, state_dir, READ_CONFIG)
    before = peak_rss_bytes()
    if kind == "key-value":
        rows = store.all()
    elif kind == "window":
        rows = store.fetch_all(T0, T0 + 3000)
    else:
        rows = store.fetch(b"user")
    with rows:
        lengths = [len(row[1]) for row in rows]
    store.close()
    assert set(lengths) == {VALUE_BYTES}, set(lengths)
    print(json.dumps({"rows": len(lengths), "rise": peak_rss_bytes() - before}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        read(sys.argv[2], sys.argv[3])

"""Point reads of window and session stores right after the scale benches' puts, the reads Bloom
filters serve: ``WindowStore.fetch(key, time)`` (a windowed aggregation's read of each record's
window, Kafka's ``KStreamWindowAggregate``) and ``SessionStore.fetch_session(key, start, end)``,
of rows that are there and of rows that are not (the window after a key's last; a session whose
end is one millisecond off). benches/README.md, issue 21's fifteenth pass.

    .venv/bin/python benches/segmented_point_reads.py window|session KEYS DIR [--kstate-options JSON]

KEYS keys with 10 windows or sessions each, written as ``scale_window.py`` / ``scale_session.py``
write them; then three rounds of 20k random keys, absent and present reads in each. Prints the
reads a second of each round as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

from scale_session import SESSIONS, session_times  # benches/scale_session.py
from scale_session import put_kstate as put_sessions
from scale_window import MINUTE, T0, WINDOWS, row_key  # benches/scale_window.py
from scale_window import put_kstate as put_windows

READS = 20_000
ROUNDS = 3


def readers(kind: str, n_keys: int, where: str, rocksdb_options: dict | None):
    """The store, and a read of one key for rows absent and present."""
    if kind == "window":
        store = put_windows(n_keys, where, rocksdb_options)[0]
        absent_time, present_time = T0 + WINDOWS * MINUTE, T0 + WINDOWS // 2 * MINUTE
        return store, lambda key: store.fetch(key, absent_time), lambda key: store.fetch(key, present_time)
    store = put_sessions(n_keys, where, rocksdb_options)[0]
    start, end = session_times(SESSIONS // 2)
    return (
        store,
        lambda key: store.fetch_session(key, start, end + 1),
        lambda key: store.fetch_session(key, start, end),
    )


def timed(read: Callable[[bytes], object], keys: list[bytes], expect_found: bool) -> int:
    started = time.perf_counter()
    found = sum(read(key) is not None for key in keys)
    rate = round(len(keys) / (time.perf_counter() - started))
    if found != (len(keys) if expect_found else 0):
        raise SystemExit(f"found {found} of {len(keys)} rows, expected {'all' if expect_found else 'none'}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["window", "session"])
    parser.add_argument("keys", type=int)
    parser.add_argument("dir")
    parser.add_argument("--kstate-options", type=json.loads, default=None, help="rocksdb.config.setter as JSON")
    args = parser.parse_args()
    store, absent, present = readers(args.kind, args.keys, args.dir, args.kstate_options)
    rng, result = random.Random(1), {"absent": [], "present": []}
    for _ in range(ROUNDS):
        for what, read in (("absent", absent), ("present", present)):
            keys = [row_key(rng.randrange(args.keys)) for _ in range(READS)]
            result[what].append(timed(read, keys, what == "present"))
    store.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

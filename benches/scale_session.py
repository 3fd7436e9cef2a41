"""Session stores at scale: K keys with 10 sessions each (K * 10 sessions, 30 s long, one a
minute) in a kstate session store under the default 256 MiB budget, and the same rows in rocksdict
(its defaults) under the session store's own keys (``key || end || start``, spec 1.7), each
library in a process of its own, alternating, best of the runs. benches/README.md.

    .venv/bin/python benches/scale_session.py 500000 [--runs 2] [--dir /var/tmp] [--kstate-options JSON]

Rows: puts in time order (a minute of every key, then the next), kstate ``put_all`` of 100k
sessions in columns (keys, aggregates, starts, ends: no ``Windowed`` object per session) and a
commit, rocksdict a ``WriteBatch`` of 100k; then the lookup a session aggregation makes for each
record, ``find_sessions(key, t - gap, t + gap)`` of 20k random keys at a time
inside their sixth session (one session found; rocksdict iterates ``items(from_key=key ||
t - gap)`` while the key matches and the session starts at or before ``t + gap``), and
``fetch(key)`` of the same keys (all 10 sessions of one key).
"""

from __future__ import annotations

import random
import struct
import time
from typing import Any

from scale import peak_rss  # benches/scale.py
from scale_window import BUDGET, COMMIT_EVERY, MINUTE, T0, alternating_runs, arguments, row_key, row_value

SESSIONS = 10
LENGTH = 30_000
GAP = 20_000
LOOKUPS = 20_000


def session_times(s: int) -> tuple[int, int]:
    start = T0 + s * MINUTE
    return start, start + LENGTH


def session_store_key(key: bytes, start: int, end: int) -> bytes:
    return key + struct.pack(">qq", end, start)


def _lookups(n_keys: int) -> tuple[list[bytes], int]:
    """The keys both libraries look up (the same seeded draw) and the record time."""
    rng = random.Random(1)
    return [row_key(rng.randrange(n_keys)) for _ in range(LOOKUPS)], session_times(SESSIONS // 2)[0] + 10_000


def put_kstate(n_keys: int, where: str, rocksdb_options: dict | None = None) -> tuple[Any, float, float]:
    """A kstate session store holding the bench's rows: the store, the puts' wall-clock and CPU
    seconds (all threads)."""
    from kstate import Stores

    supplier = Stores.persistent_session_store("sessions", retention_ms=3_600_000)
    config = {"statestore.memory.max.bytes": BUDGET, "rocksdb.config.setter": rocksdb_options}
    store = Stores.session_store_builder(supplier, "bytes", "bytes").with_config(config).build()
    store.init(f"{where}/app/0_0")
    started, cpu, keys, aggregates = time.perf_counter(), time.process_time(), [], []

    def put_all(start: int, end: int) -> None:
        store.put_all(keys, aggregates, [start] * len(keys), [end] * len(keys))

    for s in range(SESSIONS):
        start, end = session_times(s)
        for i in range(n_keys):
            keys.append(row_key(i))
            aggregates.append(row_value(i, s))
            if len(keys) == COMMIT_EVERY:
                put_all(start, end)
                store.commit(changelog_offset=0)
                keys, aggregates = [], []
        if keys:
            put_all(start, end)
            keys, aggregates = [], []
    store.commit(changelog_offset=0)
    return store, time.perf_counter() - started, time.process_time() - cpu


def run_kstate(n_keys: int, where: str, rocksdb_options: dict | None = None) -> dict:
    store, put_seconds, put_cpu = put_kstate(n_keys, where, rocksdb_options)
    keys, t = _lookups(n_keys)
    started, found = time.perf_counter(), 0
    for key in keys:
        for _row in store.find_sessions(key, t - GAP, t + GAP):
            found += 1
    find_seconds = time.perf_counter() - started
    started, fetched = time.perf_counter(), 0
    for key in keys:
        for _row in store.fetch(key):
            fetched += 1
    fetch_seconds = time.perf_counter() - started
    store.close()
    return _result(n_keys, (put_seconds, put_cpu), found, find_seconds, fetched, fetch_seconds)


def run_rocksdict(n_keys: int, where: str) -> dict:
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(f"{where}/rocksdict", options=Options(raw_mode=True))
    started, cpu, batch = time.perf_counter(), time.process_time(), WriteBatch(raw_mode=True)
    for s in range(SESSIONS):
        start, end = session_times(s)
        for i in range(n_keys):
            batch.put(session_store_key(row_key(i), start, end), row_value(i, s))
            if len(batch) == COMMIT_EVERY:
                db.write(batch)
                batch = WriteBatch(raw_mode=True)
    db.write(batch)
    put_seconds, put_cpu = time.perf_counter() - started, time.process_time() - cpu
    keys, t = _lookups(n_keys)
    started, found = time.perf_counter(), 0
    for key in keys:
        for store_key, _value in db.items(from_key=key + struct.pack(">q", t - GAP)):
            if store_key[:-16] != key or struct.unpack_from(">q", store_key, len(key) + 8)[0] > t + GAP:
                break
            found += 1
    find_seconds = time.perf_counter() - started
    started, fetched = time.perf_counter(), 0
    for key in keys:
        for store_key, _value in db.items(from_key=key):
            if store_key[:-16] != key:
                break
            fetched += 1
    fetch_seconds = time.perf_counter() - started
    db.close()
    return _result(n_keys, (put_seconds, put_cpu), found, find_seconds, fetched, fetch_seconds)


def _result(n_keys: int, put: tuple[float, float], found: int, find_seconds: float, fetched: int, fetch_seconds: float):
    """``put``: wall-clock and CPU seconds (all threads) of the puts."""
    if found != LOOKUPS or fetched != LOOKUPS * SESSIONS:
        raise SystemExit(f"found {found} and fetched {fetched} sessions, expected {LOOKUPS} and {LOOKUPS * SESSIONS}")
    return {
        "put_rate": n_keys * SESSIONS / put[0],
        "put_cpu_us": put[1] / (n_keys * SESSIONS) * 1e6,
        "find_rate": LOOKUPS / find_seconds,
        "fetch_rate": LOOKUPS / fetch_seconds,
        "rss": peak_rss(),
    }


def main() -> None:
    args = arguments(__doc__, run_kstate, run_rocksdict)
    if args is None:
        return
    rates = ("put_rate", "find_rate", "fetch_rate")
    print("| library | sessions | put sessions/s | find_sessions(key, t ± gap) /s | fetch(key) /s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for n_keys in args.keys:
        runs = alternating_runs(__file__, n_keys, args.runs, args.dir, args.kstate_options)
        best = {library: {k: max(r[k] for r in results) for k in rates} for library, results in runs.items()}
        for library, results in runs.items():
            best[library]["rss"] = min(r["rss"] for r in results)
            r = best[library]
            cells = " | ".join(f"{r[k]:,.0f}" for k in rates)
            print(f"| {library} | {n_keys * SESSIONS:,} | {cells} | {r['rss'] / 2**20:,.0f} |", flush=True)
        k, p = best["kstate"], best["rocksdict"]
        cells = " | ".join(f"{k[r] / p[r]:.2f}x" for r in rates)
        print(f"| kstate / rocksdict | | {cells} | {p['rss'] / k['rss']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()

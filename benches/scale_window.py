"""Window stores at scale: K keys with 10 one-minute tumbling windows each (K * 10 windows) in a
kstate window store under the default 256 MiB budget, and the same rows in rocksdict (its
defaults) under the window store's own keys (``key || window start || seqnum``, spec 1.6), each
library in a process of its own, alternating, best of the runs. benches/README.md.

    .venv/bin/python benches/scale_window.py 1000000 [--runs 2] [--dir /var/tmp] [--kstate-options JSON]

Rows: puts in time order (a minute of every key, then the next), kstate ``put_all`` of 100k
windows and a commit, rocksdict a ``WriteBatch`` of 100k; then ``fetch(key, t0, t9)`` of 20k random
keys (all 10 windows of one key: rocksdict iterates ``items(from_key=key || t0)`` up to
``key || t9``), and ``fetch_all(t5, t5)`` (one minute of every key; kstate filters the segment's
rows by time natively, rocksdict scans every row and compares the time bytes in Python, as a
rocksdict user would).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from scale import bench_dir, peak_rss  # benches/scale.py

WINDOWS = 10
MINUTE = 60_000
T0 = 1_700_000_000_000 // MINUTE * MINUTE
COMMIT_EVERY = 100_000
FETCHES = 20_000
BUDGET = 256 << 20
VALUES = [os.urandom(100) for _ in range(4096)]


def row_key(i: int) -> bytes:
    return b"key-%012d" % i


def row_value(i: int, nth: int) -> bytes:
    """The value of key ``i``'s ``nth`` row (``nth < 16``). A key's rows lie side by side in the
    store, so each gets a value of its own: a block never holds one value twice and stays
    incompressible to rocksdict's default compression, as benches/scale.py's rows are."""
    return VALUES[(i * 16 + nth) % len(VALUES)]


def window_store_key(key: bytes, start: int) -> bytes:
    return key + struct.pack(">qi", start, 0)


def put_kstate(
    n_keys: int, where: str, rocksdb_options: dict | None = None, retain_duplicates: bool = False
) -> tuple[Any, float, float]:
    """A kstate window store holding the bench's rows: the store, the puts' wall-clock and CPU
    seconds (all threads)."""
    from kstate import Stores

    supplier = Stores.persistent_window_store(
        "windows", retention_ms=3_600_000, window_size_ms=MINUTE, retain_duplicates=retain_duplicates
    )
    config = {"statestore.memory.max.bytes": BUDGET, "rocksdb.config.setter": rocksdb_options}
    store = Stores.window_store_builder(supplier, "bytes", "bytes").with_config(config).build()
    store.init(f"{where}/app/0_0")
    started, cpu, keys, values = time.perf_counter(), time.process_time(), [], []
    for w in range(WINDOWS):
        start = T0 + w * MINUTE
        for i in range(n_keys):
            keys.append(row_key(i))
            values.append(row_value(i, w))
            if len(keys) == COMMIT_EVERY:
                store.put_all(keys, values, [start] * len(keys))
                store.commit(changelog_offset=0)
                keys, values = [], []
        if keys:
            store.put_all(keys, values, [start] * len(keys))
            keys, values = [], []
    store.commit(changelog_offset=0)
    return store, time.perf_counter() - started, time.process_time() - cpu


def fetch_kstate(store: Any, keys: list[bytes], last: int) -> int:
    """``fetch(key, T0, last)`` of each key: the windows found."""
    rows = 0
    for key in keys:
        for _row in store.fetch(key, T0, last):
            rows += 1
    return rows


def run_kstate(n_keys: int, where: str, rocksdb_options: dict | None = None, retain_duplicates: bool = False) -> dict:
    store, put_seconds, put_cpu = put_kstate(n_keys, where, rocksdb_options, retain_duplicates)
    keys, last = fetch_keys(n_keys)
    started = time.perf_counter()
    rows = fetch_kstate(store, keys, last)
    fetch_seconds = time.perf_counter() - started
    if rows != FETCHES * WINDOWS:
        raise SystemExit(f"fetch found {rows} windows, expected {FETCHES * WINDOWS}")
    middle = T0 + WINDOWS // 2 * MINUTE
    started = time.perf_counter()
    with store.fetch_all(middle, middle) as found:
        fetched_all = sum(1 for _ in found)
    fetch_all_seconds = time.perf_counter() - started
    if fetched_all != n_keys:
        raise SystemExit(f"fetch_all found {fetched_all} windows, expected {n_keys}")
    store.close()
    return _result(n_keys, (put_seconds, put_cpu), fetch_seconds, fetch_all_seconds)


def put_rocksdict(n_keys: int, where: str) -> tuple[Any, float, float]:
    """A rocksdict DB holding the bench's rows under Kafka's window keys: the DB, the puts'
    wall-clock and CPU seconds (all threads)."""
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(f"{where}/rocksdict", options=Options(raw_mode=True))
    started, cpu, batch = time.perf_counter(), time.process_time(), WriteBatch(raw_mode=True)
    for w in range(WINDOWS):
        start = T0 + w * MINUTE
        for i in range(n_keys):
            batch.put(window_store_key(row_key(i), start), row_value(i, w))
            if len(batch) == COMMIT_EVERY:
                db.write(batch)
                batch = WriteBatch(raw_mode=True)
    db.write(batch)
    return db, time.perf_counter() - started, time.process_time() - cpu


def fetch_rocksdict(db: Any, keys: list[bytes], last: int) -> int:
    """The range scan that is rocksdict's ``fetch(key, T0, last)`` of each key: the windows found."""
    rows = 0
    for key in keys:
        upper = key + struct.pack(">qi", last, -1)
        for store_key, _value in db.items(from_key=window_store_key(key, T0)):
            if store_key > upper:
                break
            rows += 1
    return rows


def run_rocksdict(n_keys: int, where: str) -> dict:
    db, put_seconds, put_cpu = put_rocksdict(n_keys, where)
    keys, last = fetch_keys(n_keys)
    started = time.perf_counter()
    rows = fetch_rocksdict(db, keys, last)
    fetch_seconds = time.perf_counter() - started
    if rows != FETCHES * WINDOWS:
        raise SystemExit(f"fetch found {rows} windows, expected {FETCHES * WINDOWS}")
    middle = struct.pack(">q", T0 + WINDOWS // 2 * MINUTE)
    started = time.perf_counter()
    fetched_all = sum(1 for store_key, _value in db.items() if store_key[-12:-4] == middle)
    fetch_all_seconds = time.perf_counter() - started
    if fetched_all != n_keys:
        raise SystemExit(f"fetch_all found {fetched_all} windows, expected {n_keys}")
    db.close()
    return _result(n_keys, (put_seconds, put_cpu), fetch_seconds, fetch_all_seconds)


def fetch_keys(n_keys: int) -> tuple[list[bytes], int]:
    """The keys both libraries fetch (the same seeded draw) and the last window start."""
    rng = random.Random(1)
    return [row_key(rng.randrange(n_keys)) for _ in range(FETCHES)], T0 + (WINDOWS - 1) * MINUTE


def _result(n_keys: int, put: tuple[float, float], fetch_seconds: float, fetch_all_seconds: float) -> dict:
    """``put``: wall-clock and CPU seconds (all threads) of the puts."""
    return {
        "put_rate": n_keys * WINDOWS / put[0],
        "put_cpu_us": put[1] / (n_keys * WINDOWS) * 1e6,
        "fetch_rate": FETCHES / fetch_seconds,
        # rows scanned per second: the whole store is read to find one minute's windows
        "fetch_all_rate": n_keys * WINDOWS / fetch_all_seconds,
        "rss": peak_rss(),
    }


def alternating_runs(
    script: str, n_keys: int, runs: int, where: str | None, kstate_options: str = "{}"
) -> dict[str, list[dict]]:
    """``runs`` runs of ``script --child LIBRARY N_KEYS DIR OPTIONS`` per library, each in a process
    of its own, alternating (each library first in every other run): their JSON results."""
    libraries = ["kstate", "rocksdict"]
    results: dict[str, list[dict]] = {library: [] for library in libraries}
    for run in range(runs):
        for library in libraries if run % 2 == 0 else libraries[::-1]:
            directory = tempfile.mkdtemp(prefix=f"kstate-{library}-", dir=where)
            try:
                out = subprocess.run(
                    [sys.executable, script, "--child", library, str(n_keys), directory, kstate_options],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            results[library].append(json.loads(out.strip().splitlines()[-1]))
            print(f"<!-- {library} {n_keys:,} run {run + 1}: {json.dumps(results[library][-1])} -->", flush=True)
    return results


def arguments(doc: str | None, run_kstate: Callable, run_rocksdict: Callable) -> argparse.Namespace | None:
    """The command line of a bench of this shape; ``None`` once a ``--child`` run printed its result."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("keys", type=int, nargs="*")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--dir", type=bench_dir, default=None)
    parser.add_argument(
        "--kstate-options",
        default="{}",
        help="kstate's rocksdb.config.setter as JSON, e.g. '{\"write_buffer_size\": 33554432}'",
    )
    parser.add_argument("--child", nargs=4, metavar=("LIBRARY", "KEYS", "DIR", "OPTIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.child:
        return args
    library, n_keys, where, options = args.child[0], int(args.child[1]), args.child[2], args.child[3]
    if library == "kstate":
        result = run_kstate(n_keys, where, json.loads(options) or None)
    else:
        result = run_rocksdict(n_keys, where)
    print(json.dumps(result), flush=True)
    return None


def main() -> None:
    args = arguments(__doc__, run_kstate, run_rocksdict)
    if args is not None:
        print_table(__file__, args)


def print_table(script: str, args: argparse.Namespace) -> None:
    """The bench's table: ``script``'s runs of each of ``args.keys``, best of ``args.runs``."""
    print("| library | windows | put windows/s | fetch(key, t0, t9) /s | fetch_all rows scanned/s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for n_keys in args.keys:
        runs = alternating_runs(script, n_keys, args.runs, args.dir, args.kstate_options)
        best = {}
        for library, results in runs.items():
            best[library] = {k: max(r[k] for r in results) for k in ("put_rate", "fetch_rate", "fetch_all_rate")}
            best[library]["rss"] = max(r["rss"] for r in results)
            r = best[library]
            print(
                f"| {library} | {n_keys * WINDOWS:,} | {r['put_rate']:,.0f} | {r['fetch_rate']:,.0f} "
                f"| {r['fetch_all_rate']:,.0f} | {r['rss'] / 2**20:,.0f} |",
                flush=True,
            )
        k, p = best["kstate"], best["rocksdict"]
        print(
            f"| kstate / rocksdict | | {k['put_rate'] / p['put_rate']:.2f}x | {k['fetch_rate'] / p['fetch_rate']:.2f}x "
            f"| {k['fetch_all_rate'] / p['fetch_all_rate']:.2f}x | {p['rss'] / k['rss']:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()

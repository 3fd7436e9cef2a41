"""State far larger than memory: one store of N keys (16-byte keys, 100-byte random values) under
a 256 MiB memory budget, and the same workload on rocksdict with its defaults, each in a process
of its own (RSS is the process's), alternating, best of ``--runs``. Prints one markdown row per
(library, N) and their ratio; benches/README.md.

    .venv/bin/python benches/scale.py 1000000 10000000 50000000 [--dir /work/tmp] [--runs 2]
    .venv/bin/python benches/scale.py 10000000 --restore     # changelog on, then a restore
    .venv/bin/python benches/scale.py 10000000 --library kstate --library kstate-changelog --library rocksdict

Workload: puts (keys in order, values cycling through 4,096 random ones) in batches of 100k
keys (kstate: ``put_all``, then a commit every 100k keys, a micro-batch;
rocksdict: a ``WriteBatch`` of 100k per write, which is its fastest write path), then 3 rounds
of 200k random point gets of present keys, fresh keys each round (kstate: ``get``, read cache
on as by default), 3 of absent keys (where a Bloom filter counts) and a forward scan of 1M keys
from a random start. Commit: the mean of a run's commits (its first ones touch the memtables'
memory for the first time) and their median. Disk is the store directory once closed, RSS the
peak (``VmHWM``).
``kstate-changelog``: kstate with ``statestore.durability = "changelog"`` (RocksDB's WAL off,
Kafka Streams' contract), the same workload.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BATCH = 100_000
COMMIT_EVERY = 100_000
GETS = 200_000
GET_ROUNDS = 3
SCAN = 1_000_000
BUDGET = 256 << 20


def bench_dir(path: str) -> str:
    """``--dir``: created if missing, so a fresh machine's first run does not fail on it."""
    os.makedirs(path, exist_ok=True)
    return path


def peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _disk(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def row_keys(start: int, end: int) -> list[bytes]:
    return [b"key-%012d" % i for i in range(start, end)]


# Values cycle through 4,096 random ones (400 KiB, more than a 4 KiB block): incompressible to
# rocksdict's default compression without a value per key in memory.
VALUES = [os.urandom(100) for _ in range(4096)]


def row_values(start: int, end: int) -> list[bytes]:
    return [VALUES[i % 4096] for i in range(start, end)]


def _point_gets(get, n: int) -> tuple[float, float]:
    """Best of GET_ROUNDS rounds of GETS random present keys, fresh keys each round (so no cache
    of recent reads helps), then of absent keys falling between present ones: (get/s, absent/s)."""
    rng = random.Random(1)
    hit_rate = miss_rate = 0.0
    for _ in range(GET_ROUNDS):
        probes = [b"key-%012d" % rng.randrange(n) for _ in range(GETS)]
        started = time.perf_counter()
        for key in probes:
            if get(key) is None:
                raise SystemExit(f"{key!r} missing")
        hit_rate = max(hit_rate, GETS / (time.perf_counter() - started))
    for _ in range(GET_ROUNDS):
        absent = [b"key-%012dx" % rng.randrange(n) for _ in range(GETS)]
        started = time.perf_counter()
        if any(get(key) is not None for key in absent):
            raise SystemExit("an absent key was found")
        miss_rate = max(miss_rate, GETS / (time.perf_counter() - started))
    return hit_rate, miss_rate


def run_kstate(n: int, where: str, rocksdb_options: dict | None = None, durability: str = "wal") -> dict:
    from kstate import Stores

    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("scale"), "bytes", "bytes")
    config = {
        "statestore.memory.max.bytes": BUDGET,
        "rocksdb.config.setter": rocksdb_options,
        "statestore.durability": durability,
    }
    store = builder.with_config(config).build().init(f"{where}/app/0_0")
    commits = []
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, n, BATCH):
        end = min(n, start + BATCH)
        store.put_all(row_keys(start, end), row_values(start, end))
        if (start + BATCH) % COMMIT_EVERY == 0 or start + BATCH >= n:
            began = time.perf_counter()
            store.commit(changelog_offset=start)
            commits.append(time.perf_counter() - began)
    put_seconds, put_cpu = time.perf_counter() - started, time.process_time() - cpu
    get_rate, miss_rate = _point_gets(store.get, n)
    start = b"key-%012d" % random.Random(3).randrange(max(1, n - SCAN))
    started = time.perf_counter()
    with store.range(start, b"key-\xff") as rows:
        scanned = sum(1 for _, _row in zip(range(SCAN), rows))
    scan_seconds = time.perf_counter() - started
    store.close()
    return {
        "put_rate": n / put_seconds,
        # CPU of every thread per key put (less moved by the machine's load than the rate)
        "put_cpu_us": put_cpu / n * 1e6,
        "get_rate": get_rate,
        "miss_rate": miss_rate,
        "scan_rate": scanned / scan_seconds,
        "commit_seconds": sum(commits) / len(commits),
        "commit_p50": statistics.median(commits),
        "disk": _disk(f"{where}/app"),
    }


def _logged_builder(rocksdb_options: dict | None):
    from kstate import Stores

    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("scale"), "bytes", "bytes")
    config = {"statestore.memory.max.bytes": BUDGET, "rocksdb.config.setter": rocksdb_options}
    return builder.with_logging_enabled().with_config(config)


def run_kstate_changelogged(n: int, where: str, rocksdb_options: dict | None = None) -> dict:
    """The put workload with the changelog on (a commit per 100k keys): what a restore reads."""
    store = _logged_builder(rocksdb_options).build().init(f"{where}/app/0_0")
    started = time.perf_counter()
    for start in range(0, n, BATCH):
        end = min(n, start + BATCH)
        store.put_all(row_keys(start, end), row_values(start, end))
        store.commit()
    put_seconds = time.perf_counter() - started
    store.close()
    return {"put_rate": n / put_seconds, "changelog_disk": _disk(f"{where}/changelog")}


def run_kstate_restore(n: int, where: str, rocksdb_options: dict | None = None) -> dict:
    """The store's directory lost, reopened under the budget: restored from its changelog."""
    shutil.rmtree(f"{where}/app/0_0")
    started = time.perf_counter()
    store = _logged_builder(rocksdb_options).build().init(f"{where}/app/0_0")
    restore_seconds = time.perf_counter() - started
    if store.restored_records != n:
        raise SystemExit(f"restored {store.restored_records} records, expected {n}")
    rng = random.Random(2)
    if any(store.get(b"key-%012d" % rng.randrange(n)) is None for _ in range(10_000)):
        raise SystemExit("a restored key is missing")
    store.close()
    return {"restore_rate": n / restore_seconds, "restore_seconds": restore_seconds, "disk": _disk(f"{where}/app/0_0")}


def run_rocksdict(n: int, where: str) -> dict:
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(f"{where}/rocksdict", options=Options(raw_mode=True))
    commits = []
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, n, BATCH):
        batch = WriteBatch(raw_mode=True)
        end = min(n, start + BATCH)
        for key, value in zip(row_keys(start, end), row_values(start, end)):
            batch.put(key, value)
        began = time.perf_counter()
        db.write(batch)
        commits.append(time.perf_counter() - began)
    put_seconds, put_cpu = time.perf_counter() - started, time.process_time() - cpu
    get_rate, miss_rate = _point_gets(db.get, n)
    start = b"key-%012d" % random.Random(3).randrange(max(1, n - SCAN))
    started = time.perf_counter()
    scanned = sum(1 for _, _row in zip(range(SCAN), db.items(from_key=start)))
    scan_seconds = time.perf_counter() - started
    db.close()
    return {
        "put_rate": n / put_seconds,
        # CPU of every thread per key put (less moved by the machine's load than the rate)
        "put_cpu_us": put_cpu / n * 1e6,
        "get_rate": get_rate,
        "miss_rate": miss_rate,
        "scan_rate": scanned / scan_seconds,
        # rocksdict has no commit; its per-write of a 100k batch, scaled to the keys of a kstate commit
        "commit_seconds": sum(commits) / len(commits) * (COMMIT_EVERY / BATCH),
        "commit_p50": statistics.median(commits) * (COMMIT_EVERY / BATCH),
        "disk": _disk(f"{where}/rocksdict"),
    }


def child(library: str, n: int, where: str, options: str) -> None:
    if library == "kstate":
        result = run_kstate(n, where, json.loads(options) or None)
    elif library == "kstate-changelog":
        result = run_kstate(n, where, json.loads(options) or None, durability="changelog")
    elif library == "kstate-changelogged":
        result = run_kstate_changelogged(n, where, json.loads(options) or None)
    elif library == "kstate-restore":
        result = run_kstate_restore(n, where, json.loads(options) or None)
    else:
        result = run_rocksdict(n, where)
    result["rss"] = peak_rss()
    print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", type=int, nargs="*")
    parser.add_argument(
        "--dir", type=bench_dir, default=None, help="where the stores go (default: a temporary directory)"
    )
    parser.add_argument("--library", choices=["kstate", "kstate-changelog", "rocksdict"], action="append")
    parser.add_argument("--runs", type=int, default=2, help="runs of each library, alternating (best of them)")
    parser.add_argument(
        "--kstate-options",
        default="{}",
        help='rocksdb.config.setter as JSON, e.g. \'{"block_based_table_factory": '
        '{"filter_policy": "nullptr"}}\' (no Bloom filter)',
    )
    parser.add_argument("--child", nargs=4, metavar=("LIBRARY", "N", "DIR", "OPTIONS"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--restore",
        action="store_true",
        help="instead: kstate with its changelog, then the store directory deleted and restored in a new process",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2], args.child[3])
        return
    if args.restore:
        restore_rows(args)
        return
    print(
        "| library | keys | put keys/s | present get/s | absent get/s | scan rows/s | commit s (100k keys) "
        "| commit p50 s | disk GiB | peak RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    libraries = args.library or ["kstate", "rocksdict"]
    for n in args.sizes:
        runs: dict[str, list[dict]] = {library: [] for library in libraries}
        for run in range(args.runs):
            # Alternating, each library first in every other run.
            for library in libraries if run % 2 == 0 else libraries[::-1]:
                where = tempfile.mkdtemp(prefix=f"kstate-scale-{library}-", dir=args.dir)
                try:
                    runs[library].append(_child(library, n, where, args.kstate_options))
                finally:
                    shutil.rmtree(where, ignore_errors=True)
                print(f"<!-- {library} {n:,} run {run + 1}: {json.dumps(runs[library][-1])} -->", flush=True)
        best = {library: _best(results) for library, results in runs.items()}
        for library in libraries:
            plain = library == "rocksdict" or args.kstate_options == "{}"
            _print_row(library if plain else f"{library} {args.kstate_options}", n, best[library])
        for library in [lib for lib in libraries if lib != "rocksdict" and "rocksdict" in libraries]:
            ratios = {k: best[library][k] / best["rocksdict"][k] for k in best[library]}
            # Rates: kstate / rocksdict; seconds, bytes: rocksdict / kstate, so > 1 is kstate ahead.
            for k in ("commit_seconds", "commit_p50", "disk", "rss"):
                ratios[k] = 1 / ratios[k]
            print(
                f"| {library} / rocksdict | | {ratios['put_rate']:.2f}x | {ratios['get_rate']:.2f}x "
                f"| {ratios['miss_rate']:.2f}x | {ratios['scan_rate']:.2f}x | {ratios['commit_seconds']:.2f}x "
                f"| {ratios['commit_p50']:.2f}x | {ratios['disk']:.2f}x | {ratios['rss']:.2f}x |",
                flush=True,
            )


def _best(results: list[dict]) -> dict:
    """Best of the runs: the highest rates, the lowest commit time; disk and RSS: the largest."""
    best = {k: max(r[k] for r in results) for k in ("put_rate", "get_rate", "miss_rate", "scan_rate")}
    best["commit_seconds"] = min(r["commit_seconds"] for r in results)
    best["commit_p50"] = min(r["commit_p50"] for r in results)
    best["disk"] = max(r["disk"] for r in results)
    best["rss"] = max(r["rss"] for r in results)
    return best


def _print_row(label: str, n: int, r: dict) -> None:
    print(
        f"| {label} | {n:,} | {r['put_rate']:,.0f} | {r['get_rate']:,.0f} | {r['miss_rate']:,.0f} "
        f"| {r['scan_rate']:,.0f} | {r['commit_seconds']:.3f} "
        f"| {r['commit_p50']:.3f} | {r['disk'] / 2**30:.2f} | {r['rss'] / 2**20:,.0f} |",
        flush=True,
    )


def _child(library: str, n: int, where: str, options: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", library, str(n), where, options],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def restore_rows(args: argparse.Namespace) -> None:
    print(
        "| keys | put keys/s (changelog on) | changelog GiB | restore s | restore records/s | store GiB "
        "| restore peak RSS MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        where = tempfile.mkdtemp(prefix="kstate-scale-restore-", dir=args.dir)
        try:
            written = _child("kstate-changelogged", n, where, args.kstate_options)
            r = _child("kstate-restore", n, where, args.kstate_options)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        print(
            f"| {n:,} | {written['put_rate']:,.0f} | {written['changelog_disk'] / 2**30:.2f} "
            f"| {r['restore_seconds']:.1f} | {r['restore_rate']:,.0f} | {r['disk'] / 2**30:.2f} "
            f"| {r['rss'] / 2**20:,.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

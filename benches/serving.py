"""Serving a query's state (issue 42): a warm ``StateReplica``'s ``get`` / ``get_many`` beside
rocksdict reading the same keys, and how fresh a following replica is. benches/README.md,
"Serving".

    .venv/bin/python benches/serving.py 1000000 10000000 [--dir /var/tmp/serving] [--rounds 5]
    .venv/bin/python benches/serving.py --freshness [--intervals 0.1 0.5] [--batches 100]

Reads: the application's state is written without Spark, through kstate.spark's protocol
(``StateBackend.process``, as tests/serving/application.py does): one key-value store,
``key-<9 digits>`` string keys and int64 values, in 4 partitions, a micro-batch per million
keys. A replica is built from its changelogs; rocksdict (its default mode: ``str`` keys and
``int`` values encoded by rocksdict) holds the same keys. In one process, alternating rounds
(kstate, rocksdict, kstate, ...), both read the same key sequence in a round, a new draw every
round (so no cache keeps one round's keys for the next): 200,000 keys drawn uniformly or by Zipf
(s = 1.1, hot keys scattered over the key space), present keys (hits) or keys never written that
sort among them (misses: ``key-000000017.miss``); then "uniform, warm": present keys drawn
uniformly again after both readers read every key once, the caches as a replica serving a
uniform load for a while has them (kstate's read cache holds values per key, so one round of
draws warms it far less than rocksdict's block cache, which holds ~100 keys a block).
``get``: one call per key;
``get_many``: lists of 100 keys (rocksdict: ``get`` of a list, its multi-get), and Arrow arrays
of 1,000 keys for kstate (Arrow in, Arrow out). A round before the measured ones warms both. Each
size runs in a process of its own. Printed per row: the median round's ns per key (keys
per second), and from one round timing every call: p50 and p99 per call.

Freshness: a replica follows the application with ``follow(interval)`` while the application
publishes a micro-batch (1,000 keys over 4 partitions) at a random moment within each interval;
lag = from the last partition's publication (``process`` returned) to a ``get`` with
``at_least_batch`` of that batch answering. p50 and p99 over ``--batches`` batches.
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
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from kstate import Stores
from kstate.serving import StateReplica
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.routing.hashing import partition_ids

PARTITIONS = 4
BATCH_KEYS = 1_000_000
READS = 200_000
TIMED_CALLS = 50_000
MANY = 100
ARROW_MANY = 1_000
ZIPF_S = 1.1
APPLICATION = "serving-bench"


def key_of(i: int) -> str:
    return f"key-{i:09d}"


def backend(where: str) -> StateBackend:
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend(
        [builder], f"{where}/state", f"{where}/changelog", APPLICATION, keys=["key"], num_partitions=PARTITIONS
    )


def put_all(batches: Iterator[Any], stores: Any) -> Iterator[int]:
    counts = stores["counts"]
    for batch in batches:
        counts.put_all(batch.column("key"), batch.column("value"))
        yield batch.num_rows


def publish(app: StateBackend, batch: int, keys: list[str], values: list[int]) -> None:
    """Micro-batch ``batch``: ``keys`` put in their partitions, one task per partition in turn."""
    table = pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(values, pa.int64())})
    ids = partition_ids([table.column("key")], PARTITIONS)
    for p in range(PARTITIONS):
        rows = table.filter(pa.array(ids == p)).to_batches(max_chunksize=65_536)
        list(app.process(put_all, rows, TaskInfo(p, batch, 0)))


def write_application(where: str, n: int) -> float:
    app = backend(where)
    started = time.perf_counter()
    for batch, start in enumerate(range(0, n, BATCH_KEYS)):
        end = min(n, start + BATCH_KEYS)
        publish(app, batch, [key_of(i) for i in range(start, end)], list(range(start, end)))
    took = time.perf_counter() - started
    # The application's stores stay open in this process (parked, as an executor keeps them)
    # unless released: they would hold memtables in the readers' memory budget, and outlive
    # the directory the run deletes.
    app.release_local_state(range(PARTITIONS))
    return took


def write_rocksdict(where: str, n: int) -> Any:
    from rocksdict import Rdict, WriteBatch

    db = Rdict(f"{where}/rocksdict")
    for start in range(0, n, BATCH_KEYS):
        batch = WriteBatch()
        for i in range(start, min(n, start + BATCH_KEYS)):
            batch.put(key_of(i), i)
        db.write(batch)
    db.flush()
    return db


def key_ids(n: int, distribution: str, rng: np.random.Generator) -> np.ndarray:
    if distribution == "uniform":
        return rng.integers(0, n, READS)
    ranks = rng.zipf(ZIPF_S, READS * 2)
    ranks = ranks[ranks <= n][:READS] - 1
    return rng.permutation(n)[: int(ranks.max()) + 1][ranks]  # hot ranks scattered over the keys


def workload(n: int, distribution: str, hits: bool, seed: int) -> list[str]:
    ids = key_ids(n, distribution, np.random.default_rng(seed))
    # A miss sorts among the keys (a table's key range cannot rule it out): "key-000000017.miss".
    return [key_of(int(i)) if hits else f"{key_of(int(i))}.miss" for i in ids]


def timed_rounds(readers: dict[str, Callable[[Any], int]], workloads: list[Any]) -> dict[str, float]:
    """Median seconds of a round per reader, the readers alternating; round ``i`` reads
    ``workloads[i]`` (a warm-up round on the first one first), so that neither a read cache nor a
    block cache gets to keep one round's keys for the next."""
    for read in readers.values():
        read(workloads[0])
    seconds: dict[str, list[float]] = {name: [] for name in readers}
    for workload in workloads[1:]:
        for name, read in readers.items():
            started = time.perf_counter()
            read(workload)
            seconds[name].append(time.perf_counter() - started)
    return {name: statistics.median(s) for name, s in seconds.items()}


def call_latencies(call: Callable[[Any], Any], arguments: list[Any]) -> tuple[float, float]:
    """p50 and p99 of ``call(argument)`` in ns, each call timed."""
    clock = time.perf_counter_ns
    took = []
    for argument in arguments:
        started = clock()
        call(argument)
        took.append(clock() - started)
    took.sort()
    return took[len(took) // 2], took[len(took) * 99 // 100]


def measure_workload(
    replica: StateReplica, db: Any, draws: list[list[str]], hits: bool
) -> dict[str, tuple[float, tuple[float, float]]]:
    """Per read, the median round's seconds (a round per draw of keys but the last, the first a
    warm-up) and the p50 / p99 of a call over the last draw."""
    get, get_many = replica.get, replica.get_many

    def batched(keys: list[str]) -> tuple[list[str], list[list[str]], list[Any]]:
        lists = [keys[i : i + MANY] for i in range(0, len(keys), MANY)]
        arrays = [pa.array(keys[i : i + ARROW_MANY], pa.string()) for i in range(0, len(keys), ARROW_MANY)]
        return keys, lists, arrays

    workloads = [batched(keys) for keys in draws]
    keys, lists, arrays = workloads[-1]
    expected = [int(k[4:]) if hits else None for k in keys[:MANY]]
    assert [get("counts", k).value for k in keys[:MANY]] == expected == [db.get(k) for k in keys[:MANY]]
    assert get_many("counts", lists[0]).value == db.get(lists[0]) == expected
    assert get_many("counts", arrays[0]).value.to_pylist()[:MANY] == expected
    readers: dict[str, Callable[[Any], int]] = {
        "kstate get": lambda w: sum(1 for k in w[0] if get("counts", k).value is not None),
        "rocksdict get": lambda w: sum(1 for k in w[0] if db.get(k) is not None),
        "kstate get_many (lists of 100)": lambda w: sum(len(get_many("counts", b).value) for b in w[1]),
        "rocksdict get (lists of 100)": lambda w: sum(len(db.get(b)) for b in w[1]),
        "kstate get_many (Arrow, 1,000)": lambda w: sum(len(get_many("counts", a).value) for a in w[2]),
    }
    medians = timed_rounds(readers, workloads[:-1])
    latency = {
        "kstate get": call_latencies(lambda k: get("counts", k), keys[:TIMED_CALLS]),
        "rocksdict get": call_latencies(db.get, keys[:TIMED_CALLS]),
        "kstate get_many (lists of 100)": call_latencies(lambda b: get_many("counts", b), lists),
        "rocksdict get (lists of 100)": call_latencies(db.get, lists),
        "kstate get_many (Arrow, 1,000)": call_latencies(lambda a: get_many("counts", a), arrays),
    }
    return {name: (medians[name], latency[name]) for name in readers}


def measure_reads(where: str, n: int, rounds: int) -> list[dict[str, Any]]:
    build = write_application(where, n)
    db = write_rocksdict(where, n)
    started = time.perf_counter()
    replica = StateReplica(f"{where}/changelog", APPLICATION, local_dir=f"{where}/replica")
    replica_build = time.perf_counter() - started
    print(f"# {n:,} keys: application written in {build:.1f} s, replica built in {replica_build:.1f} s", flush=True)
    assert replica.get("counts", key_of(n - 1)).value == n - 1 and db.get(key_of(n - 1)) == n - 1
    rows = []
    for distribution in ("uniform", "zipf"):
        for hits in (True, False):
            draws = [workload(n, distribution, hits, seed=n * 100 + hits * 10 + i) for i in range(rounds + 2)]
            rows += report(n, distribution, hits, measure_workload(replica, db, draws, hits))
    # A replica that has served a while: every key read once by both readers (their caches as
    # a steady uniform load leaves them), then new uniform draws again.
    every = [key_of(i) for i in np.random.default_rng(n).permutation(n)]
    for read in (lambda k: replica.get("counts", k), db.get):
        for key in every:
            read(key)
    del every
    draws = [workload(n, "uniform", True, seed=n * 100 + 20 + i) for i in range(rounds + 2)]
    rows += report(n, "uniform, warm", True, measure_workload(replica, db, draws, True))
    replica.close()
    db.close()
    return rows


def report(n: int, access: str, hits: bool, measured: dict[str, tuple[float, tuple[float, float]]]) -> list[dict]:
    rows = []
    for name, (seconds, (p50, p99)) in measured.items():
        row = {
            "keys": n,
            "access": access,
            "reads": "hits" if hits else "misses",
            "read": name,
            "ns_per_key": seconds / READS * 1e9,
            "keys_per_s": READS / seconds,
            "p50_us": p50 / 1e3,
            "p99_us": p99 / 1e3,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def measure_freshness(where: str, interval: float, batches: int) -> dict[str, Any]:
    app = backend(where)
    rng = random.Random(7)
    ids = list(range(1000))
    publish(app, 0, [key_of(i) for i in ids], ids)
    probe = next(key_of(i) for i in ids if partition_ids([pa.array([key_of(i)])], PARTITIONS)[0] == PARTITIONS - 1)
    lags = []
    with StateReplica(f"{where}/changelog", APPLICATION, local_dir=f"{where}/replica") as replica:
        replica.follow(interval)
        for batch in range(1, batches + 1):
            time.sleep(rng.uniform(0, interval))
            start = batch * 1000
            publish(app, batch, [key_of(i) for i in range(start, start + 1000)], ids)
            published = time.perf_counter()
            answer = replica.get("counts", probe, at_least_batch=batch, timeout=30)
            lags.append(time.perf_counter() - published)
            assert answer.partitions[PARTITIONS - 1] >= batch
    lags.sort()
    row = {
        "interval_s": interval,
        "batches": batches,
        "p50_ms": lags[len(lags) // 2] * 1e3,
        "p99_ms": lags[min(len(lags) - 1, len(lags) * 99 // 100)] * 1e3,
        "max_ms": lags[-1] * 1e3,
    }
    print(json.dumps(row), flush=True)
    return row


def print_tables(reads: list[dict[str, Any]], freshness: list[dict[str, Any]]) -> None:
    if reads:
        print("\n| keys | access | reads | read | ns / key | keys/s | p50 / call µs | p99 / call µs |")
        print("|---:|---|---|---|---:|---:|---:|---:|")
        for r in reads:
            print(
                f"| {r['keys']:,} | {r['access']} | {r['reads']} | {r['read']} | {r['ns_per_key']:,.0f} | "
                f"{r['keys_per_s']:,.0f} | {r['p50_us']:,.1f} | {r['p99_us']:,.1f} |"
            )
    if freshness:
        print("\n| follow interval s | batches | lag p50 ms | lag p99 ms | max ms |")
        print("|---:|---:|---:|---:|---:|")
        for f in freshness:
            print(f"| {f['interval_s']} | {f['batches']} | {f['p50_ms']:.0f} | {f['p99_ms']:.0f} | {f['max_ms']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", type=int, nargs="*")
    parser.add_argument("--dir", default=None, help="where the state goes (default: a temporary directory)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--freshness", action="store_true")
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.1, 0.5])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # a child: one size, its rows as JSON lines
        where = tempfile.mkdtemp(prefix=f"serving-{args.one}-", dir=args.dir and _made(args.dir))
        try:
            measure_reads(where, args.one, args.rounds)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        return
    reads, freshness = [], []
    for n in args.sizes:
        # A process per size: its stores (parked by the protocol, as an executor's) and its
        # memory go with it, and the next size starts as a fresh replica would.
        command = [sys.executable, __file__, "--one", str(n), "--rounds", str(args.rounds)]
        done = subprocess.run(command + (["--dir", args.dir] if args.dir else []), stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"the {n:,}-key run failed")
        for line in done.stdout.splitlines():
            print(line, flush=True)
            if line.startswith("{"):
                reads.append(json.loads(line))
    if args.freshness:
        for interval in args.intervals:
            where = tempfile.mkdtemp(prefix="serving-fresh-", dir=args.dir and _made(args.dir))
            try:
                freshness.append(measure_freshness(where, interval, args.batches))
            finally:
                shutil.rmtree(where, ignore_errors=True)
    print_tables(reads, freshness)


def _made(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


if __name__ == "__main__":
    main()

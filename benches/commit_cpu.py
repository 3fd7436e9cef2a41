"""Where the put phase of the scale benches spends its main thread: CPU (user + system, this
thread only, so the machine's load moves it less than wall clock) of staging each batch of 100k
writes and of committing it, kstate against rocksdict (building a ``WriteBatch``, then
``write``), one process each. benches/README.md, issue 21's fifth pass.

    .venv/bin/python benches/commit_cpu.py kv|window kstate|rocksdict [--keys 1000000] [--dir /var/tmp]
        [--kstate-options '{"max_write_buffer_number": 4}'] [--durability wal|changelog] [--offsets-family]

``--offsets-family`` gives rocksdict kstate's column family layout: an ``offsets`` family beside
the data, one 8-byte entry written there in each batch, as a kstate commit records its offset
(Kafka's KIP-1035 layout). With more than one column family RocksDB syncs every closed WAL before
each memtable flush (``SyncClosedWals``), which a single-family rocksdict never does.

``kv``: ``benches/scale.py``'s put phase (keys in order, 100-byte values); ``window``:
``benches/scale_window.py``'s (a minute of every key, then the next; 10 minutes). Prints one
JSON line: ms per batch of the stage (``put_cpu_ms``) and of the commit (``commit_cpu_ms``),
the commit's wall clock (``commit_ms``), the main thread's page faults a commit
(``commit_faults``; ``later_commit_faults``: after the first five, once the memtables' memory
was touched), the rate, the CPU of all threads per write until the close (``process_cpu_us``)
and the close's wall clock (``close_ms``: a store with ``statestore.durability`` ``changelog``
flushes there what a WAL held).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time

from scale import BATCH, BUDGET, bench_dir, row_keys, row_values  # benches/scale.py
from scale_window import MINUTE, T0, WINDOWS, row_key, row_value, window_store_key  # benches/scale_window.py

# Commits in which a fresh store first touches its memtables' memory (3 write buffers of 16 MiB).
FIRST_COMMITS = 5


def _window_batches(n_keys: int) -> list[tuple[list[bytes], list[bytes], list[int]]]:
    batches, keys, values, starts = [], [], [], []
    for w in range(WINDOWS):
        for i in range(n_keys):
            keys.append(row_key(i))
            values.append(row_value(i, w))
            starts.append(T0 + w * MINUTE)
            if len(keys) == BATCH:
                batches.append((keys, values, starts))
                keys, values, starts = [], [], []
    return batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=["kv", "window"])
    parser.add_argument("library", choices=["kstate", "rocksdict"])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys (window: keys x 10 windows)")
    parser.add_argument("--dir", type=bench_dir, default=None)
    parser.add_argument("--kstate-options", type=json.loads, default=None, help="rocksdb.config.setter as JSON")
    parser.add_argument("--durability", default=None, help="kstate's statestore.durability (kv only)")
    parser.add_argument(
        "--offsets-family", action="store_true", help="rocksdict: an offsets column family written in each batch"
    )
    args = parser.parse_args()
    where = tempfile.mkdtemp(dir=args.dir)
    if args.shape == "kv":
        ends = [(s, min(args.keys, s + BATCH)) for s in range(0, args.keys, BATCH)]
        batches = [(row_keys(s, e), row_values(s, e), None) for s, e in ends]
    else:
        batches = _window_batches(args.keys)
    if args.library == "kstate":
        from kstate import Stores

        config = {"statestore.memory.max.bytes": BUDGET, "rocksdb.config.setter": args.kstate_options}
        if args.durability is not None:
            config["statestore.durability"] = args.durability
        if args.shape == "kv":
            supplier = Stores.persistent_key_value_store("scale")
            store = Stores.key_value_store_builder(supplier, "bytes", "bytes").with_config(config).build()
        else:
            supplier = Stores.persistent_window_store("windows", retention_ms=3_600_000, window_size_ms=MINUTE)
            store = Stores.window_store_builder(supplier, "bytes", "bytes").with_config(config).build()
        store.init(f"{where}/app/0_0")

        def stage(keys, values, starts):
            store.put_all(keys, values) if starts is None else store.put_all(keys, values, starts)
            return None

        def commit(_staged) -> None:
            store.commit()
    else:
        from rocksdict import Options, Rdict, WriteBatch

        options = Options(raw_mode=True)
        if args.offsets_family:
            options.create_missing_column_families(True)
            store = Rdict(f"{where}/rocksdict", options=options, column_families={"offsets": Options(raw_mode=True)})
            offsets = store.get_column_family_handle("offsets")
        else:
            store = Rdict(f"{where}/rocksdict", options=options)
        written = 0

        def stage(keys, values, starts):
            nonlocal written
            batch = WriteBatch(raw_mode=True)
            if starts is None:
                for key, value in zip(keys, values):
                    batch.put(key, value)
            else:
                for key, value, start in zip(keys, values, starts):
                    batch.put(window_store_key(key, start), value)
            written += len(keys)
            if args.offsets_family:
                batch.put(b"scale-0", written.to_bytes(8, "big"), offsets)
            return batch

        def commit(batch) -> None:
            store.write(batch)

    put_cpu = commit_cpu = commit_wall = 0.0
    faults = []  # the main thread's page faults in each commit
    started, process_cpu = time.perf_counter(), time.process_time()
    for keys, values, starts in batches:
        cpu = time.thread_time()
        staged = stage(keys, values, starts)
        put_cpu += time.thread_time() - cpu
        wall, cpu = time.perf_counter(), time.thread_time()
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        commit(staged)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
        commit_cpu += time.thread_time() - cpu
        commit_wall += time.perf_counter() - wall
    elapsed, process_cpu = time.perf_counter() - started, time.process_time() - process_cpu
    closing = time.perf_counter()
    store.close()
    close_ms = (time.perf_counter() - closing) * 1000
    shutil.rmtree(where)
    writes = sum(len(keys) for keys, _, _ in batches)
    per_batch = 1000 / len(batches)
    print(
        json.dumps(
            {
                "shape": args.shape,
                "library": args.library,
                "durability": args.durability,
                "offsets_family": args.offsets_family,
                "writes": writes,
                "rate": round(writes / elapsed),
                "put_cpu_ms": round(put_cpu * per_batch, 1),
                "commit_cpu_ms": round(commit_cpu * per_batch, 1),
                "commit_ms": round(commit_wall * per_batch, 1),
                # page faults a commit, and once the first FIRST_COMMITS touched the memtables
                "commit_faults": round(sum(faults) / len(faults)),
                "later_commit_faults": round(sum(faults[FIRST_COMMITS:]) / max(1, len(faults) - FIRST_COMMITS)),
                "close_ms": round(close_ms, 1),
                # every thread (RocksDB's flushes and compactions too), per write
                "process_cpu_us": round(process_cpu / writes * 1e6, 3),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()

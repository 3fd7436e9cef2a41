"""One-key window reads right after the puts, timed round by round: how much of
``benches/scale_window.py``'s ``fetch`` row is the first read of each block. benches/README.md,
issue 21's thirteenth and fourteenth passes.

    .venv/bin/python benches/window_rounds.py kstate|rocksdict [--keys 100000] [--rounds 4]
        [--pause 0.5] [--dir /var/tmp] [--kstate-options '{"write_buffer_size": 33554432}']

The put phase is scale_window's (``--keys`` keys, 10 windows each); then, ``--pause`` seconds
later (RocksDB's flushes and compactions go on meanwhile), the same ``fetch(key, t0, t9)`` of its
20k keys, ``--rounds`` times. One line per round: reads a second,
the main thread's CPU, and for kstate the table files of the store's segments.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from scale import bench_dir  # benches/scale.py
from scale_window import fetch_keys, fetch_kstate, fetch_rocksdict, put_kstate, put_rocksdict  # benches/


def table_files(where: str) -> dict[str, int]:
    return {segment.name: len(list(segment.glob("*.sst"))) for segment in Path(where).glob("app/0_0/**/windows*")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", choices=["kstate", "rocksdict"])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between the puts and the first round")
    parser.add_argument("--dir", type=bench_dir, default=None)
    parser.add_argument("--kstate-options", type=json.loads, default=None, help="rocksdb.config.setter as JSON")
    args = parser.parse_args()
    where = tempfile.mkdtemp(dir=args.dir)
    if args.library == "kstate":
        store, _, _ = put_kstate(args.keys, where, args.kstate_options)
        fetch = fetch_kstate
    else:
        store, _, _ = put_rocksdict(args.keys, where)
        fetch = fetch_rocksdict
    keys, last = fetch_keys(args.keys)
    time.sleep(args.pause)
    for r in range(args.rounds):
        files = table_files(where) if args.library == "kstate" else {}
        started, cpu = time.perf_counter(), time.thread_time()
        fetch(store, keys, last)
        seconds, cpu = time.perf_counter() - started, time.thread_time() - cpu
        print(
            f"round {r}: {len(keys) / seconds:,.0f} reads/s, main thread {cpu:.3f} s, table files at its start {files}",
            flush=True,
        )
    store.close()


if __name__ == "__main__":
    main()

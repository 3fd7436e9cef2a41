"""One transaction of N staged keys, past the staged share of a 256 MiB budget so it spills, then
one commit, timed (kstate, changelog off and on), beside rocksdict writing the same keys as one
``WriteBatch``; each in a process of its own. benches/README.md, "Spilled commits".

    .venv/bin/python benches/spilled_commit.py 1000000 [--dir /var/tmp] [--runs 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time

import scale


def kstate_commit(n: int, where: str, logged: bool) -> float:
    from kstate import Stores

    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("spill"), "bytes", "bytes")
    builder = builder.with_logging_enabled() if logged else builder
    store = builder.with_config({"statestore.memory.max.bytes": scale.BUDGET}).build().init(f"{where}/app/0_0")
    for start in range(0, n, scale.BATCH):
        end = min(n, start + scale.BATCH)
        store.put_all(scale.row_keys(start, end), scale.row_values(start, end))
    started = time.perf_counter()
    store.commit()
    seconds = time.perf_counter() - started
    store.close()
    return seconds


def rocksdict_write(n: int, where: str) -> float:
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(f"{where}/rocksdict", options=Options(raw_mode=True))
    batch = WriteBatch(raw_mode=True)
    for key, value in zip(scale.row_keys(0, n), scale.row_values(0, n)):
        batch.put(key, value)
    started = time.perf_counter()
    db.write(batch)
    seconds = time.perf_counter() - started
    db.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int)
    parser.add_argument("--dir", type=scale.bench_dir, default=None)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--child", choices=["kstate", "kstate-logged", "rocksdict"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        where = tempfile.mkdtemp(dir=args.dir)
        try:
            if args.child == "rocksdict":
                print(rocksdict_write(args.n, where))
            else:
                print(kstate_commit(args.n, where, args.child == "kstate-logged"))
        finally:
            shutil.rmtree(where, ignore_errors=True)
        return
    print(f"| {args.n:,} staged keys, one commit | seconds per run |")
    print("|---|---:|")
    for child, label in [
        ("kstate", "kstate (changelog off)"),
        ("kstate-logged", "kstate (changelog on)"),
        ("rocksdict", "rocksdict `WriteBatch` write"),
    ]:
        runs = []
        for _ in range(args.runs):
            command = [sys.executable, __file__, str(args.n), "--child", child]
            command += ["--dir", args.dir] if args.dir else []
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs.append(float(out.strip().splitlines()[-1]))
        print(f"| {label} | {' / '.join(f'{r:.2f}' for r in runs)} |", flush=True)


if __name__ == "__main__":
    main()

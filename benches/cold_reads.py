"""A micro-batch's reads of many keys with a cold block cache, as when Spark hands a partition's
next task to another Python worker (benches/README.md, "A moved partition's reads"): a store of
N keys (16-byte random keys, 20-byte values) written in ``--writes`` full rewrites, each closed
(so each is a table of its own until RocksDB compacts them), then reopened and read with one
``get_many`` of every ``step``-th key in key order; rocksdict (raw mode) holds the same tables'
writes and reads the same keys with ``get`` of a list, its multi-get. Rounds alternate kstate,
rocksdict, each reopening its store; the median round's ms for the whole read is printed with their ratio.

    .venv/bin/python benches/cold_reads.py                      # 50k keys, 1 and 3 rewrites
    .venv/bin/python benches/cold_reads.py --keys 400000 --writes 3 --steps 1 2 5 7 8 16

A kstate read of at least one in 8 of a store's keys walks one iterator over them (a step to
each next key); fewer are looked up one by one (``read_sorted`` in rust/core/src/store/rocks.rs).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time

VALUE_BYTES = 20


def kstate_store(where: str):
    from kstate import Stores

    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("cold"), "bytes", "bytes")
    return builder.with_config({"statestore.durability": "changelog"}).build().init(f"{where}/app/0_0")


def rocksdict_store(where: str):
    from rocksdict import Options, Rdict

    return Rdict(f"{where}/rocksdict", options=Options(raw_mode=True))


def write(keys: list[bytes], writes: int, where: str) -> None:
    """Every key written ``writes`` times over, the store closed after each (a table each)."""
    from rocksdict import WriteBatch

    rng = random.Random(7)
    for offset in range(writes):
        values = [rng.randbytes(VALUE_BYTES) for _ in keys]
        store = kstate_store(where)
        store.put_all(keys, values)
        store.commit(changelog_offset=offset)
        store.close()
        db = rocksdict_store(where)
        batch = WriteBatch(raw_mode=True)
        for key, value in zip(keys, values):
            batch.put(key, value)
        db.write(batch)
        db.flush()  # a table, as kstate's close makes one
        db.close()


def cold_read(library: str, where: str, wanted: list[bytes]) -> float:
    """Seconds of one read of ``wanted`` from a freshly opened store."""
    if library == "kstate":
        store = kstate_store(where)
        started = time.perf_counter()
        found = store.get_many(wanted)
        seconds = time.perf_counter() - started
    else:
        store = rocksdict_store(where)
        started = time.perf_counter()
        found = store.get(wanted)
        seconds = time.perf_counter() - started
    store.close()
    if any(v is None for v in found):
        raise SystemExit(f"{library}: a written key was not found")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--writes", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 2, 8, 16])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the stores go (a temporary directory by default)")
    args = parser.parse_args()

    rng = random.Random(3)
    keys = sorted({rng.randbytes(16) for _ in range(args.keys)})
    print("| keys | rewrites | read | kstate ms | rocksdict ms | kstate / rocksdict |")
    print("|---:|---:|---|---:|---:|---:|")
    for writes in args.writes:
        where = tempfile.mkdtemp(prefix="kstate-cold-reads-", dir=args.dir)
        try:
            write(keys, writes, where)
            for step in args.steps:
                wanted = keys[::step]
                times: dict[str, list[float]] = {"kstate": [], "rocksdict": []}
                for _ in range(args.rounds):
                    for library in times:
                        times[library].append(cold_read(library, where, wanted))
                ours, theirs = (statistics.median(times[lib]) * 1000 for lib in ("kstate", "rocksdict"))
                read = f"1 in {step} ({len(wanted):,} keys)"
                print(f"| {len(keys):,} | {writes} | {read} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")
        finally:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A process that opens many stores under one memory budget and writes them in commits until
they hold a given amount of data, printing one JSON line per phase (RSS from /proc). Run by
test_budget_rss.py; also by hand for the full 2 GiB run:

    python tests/memory/rss_worker.py key-value <state dir> --stores 200 --total-bytes 2147483648
        [--rocksdb-options '{"recycle_log_file_num": 0}']

Each line also gives the bytes of the state directory's files (``disk``) and of its RocksDB WAL
files (``wal``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from kstate import Stores
from kstate.memory import disk_bytes, memory_usage, rss_bytes

VALUE_BYTES = 200
RECORDS_PER_PUT = 1000


def wal_bytes(state_dir: str) -> int:
    """Bytes of the RocksDB WAL files (``<number>.log`` under a task's ``rocksdb``)."""
    wals = (path for path in Path(state_dir).rglob("[0-9]*.log") if "rocksdb" in path.parts)
    return sum(path.stat().st_size for path in wals)


def report(phase: str, started: float, state_dir: str, **extra: object) -> None:
    usage = memory_usage(stores=False)
    line = {
        "phase": phase,
        "seconds": round(time.monotonic() - started, 1),
        "rss": rss_bytes(),
        "in_use": usage["in_use"],
        "block_cache": usage["block_cache_usage"],
        "memtables": usage["memtables"],
        "staged": usage["staged"],
        "read_cache": usage["read_cache"],
        "open_stores": usage["open_stores"],
        "open_files": usage["open_files"],
        "disk": disk_bytes([state_dir]),
        "wal": wal_bytes(state_dir),
        **extra,
    }
    print(json.dumps(line), flush=True)


def builder(kind: str, index: int, config: dict):
    name = f"s{index}"
    if kind == "key-value":
        supplier = Stores.persistent_key_value_store(name)
        return Stores.key_value_store_builder(supplier, "bytes", "bytes").with_config(config).build()
    supplier = Stores.persistent_window_store(name, retention_ms=120_000, window_size_ms=1_000)
    return Stores.window_store_builder(supplier, "bytes", "bytes").with_config(config).build()


def write_round(kind: str, store, round_no: int, records: int, value: bytes) -> None:
    for start in range(0, records, RECORDS_PER_PUT):
        keys = [b"key-%08d-%06d" % (round_no, i) for i in range(start, min(start + RECORDS_PER_PUT, records))]
        if kind == "key-value":
            store.put_all(keys, [value] * len(keys))
        else:
            # One new segment per round (interval 60 s); older ones expire as stream time moves on.
            for i, key in enumerate(keys):
                store.put(key, value, window_start=round_no * 60_000 + (start + i) % 60_000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["key-value", "window"])
    parser.add_argument("state_dir")
    parser.add_argument("--stores", type=int, default=200)
    parser.add_argument("--total-bytes", type=int, default=256 << 20)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--durability", default=None, help="statestore.durability (key-value)")
    parser.add_argument("--rocksdb-options", type=json.loads, default=None, help="rocksdb.config.setter as JSON")
    args = parser.parse_args()
    started = time.monotonic()
    config = {} if args.budget is None else {"statestore.memory.max.bytes": args.budget}
    if args.durability is not None:
        config["statestore.durability"] = args.durability
    if args.rocksdb_options is not None:
        config["rocksdb.config.setter"] = args.rocksdb_options
    report("started", started, args.state_dir)
    records_per_store_round = max(1, args.total_bytes // (VALUE_BYTES + 16) // args.stores // args.rounds)
    value = bytes(random.Random(7).getrandbits(8) for _ in range(VALUE_BYTES))
    stores = [builder(args.kind, i, config).init(f"{args.state_dir}/app/0_{i}") for i in range(args.stores)]
    report("opened", started, args.state_dir)
    written = 0
    for round_no in range(args.rounds):
        for store in stores:
            write_round(args.kind, store, round_no, records_per_store_round, value)
            store.commit(changelog_offset=round_no)
            written += records_per_store_round * (VALUE_BYTES + 16)
        report("committed", started, args.state_dir, round=round_no, data_bytes=written)
    for store in stores:
        store.close()
    report("closed", started, args.state_dir, data_bytes=written)
    stores = [builder(args.kind, i, config).init(f"{args.state_dir}/app/0_{i}") for i in range(args.stores)]
    report("reopened", started, args.state_dir)
    rng = random.Random(1)
    last = args.rounds - 1
    for store in stores:
        for _ in range(200):
            key = b"key-%08d-%06d" % (last, rng.randrange(records_per_store_round))
            found = store.get(key) if args.kind == "key-value" else store.fetch(key, last * 60_000 + 0)
            if args.kind == "key-value" and found != value:
                sys.exit(f"{key!r}: read back {found!r}")
        write_round(args.kind, store, args.rounds, records_per_store_round, value)
        store.commit(changelog_offset=args.rounds)
    written += records_per_store_round * (VALUE_BYTES + 16) * args.stores
    report("reopened-written", started, args.state_dir, data_bytes=written)
    for store in stores:
        store.close()
    report("done", started, args.state_dir, data_bytes=written)


if __name__ == "__main__":
    main()

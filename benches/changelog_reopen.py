"""What re-attaching a parked changelog costs: a partition log whose active segment holds MIB
MiB of changelog-sized records (60-byte keys and values, as a processor's state entries) is
closed and opened again, ROUNDS times, as kstate.spark does with a task's changelogs between
micro-batches. Without a clean close (before issue 24's third step, or after a crash) every open
scans the whole active segment (a CRC of every entry); after one, an open (since issue 24's
fourth step by any process: the clean-shutdown file is on disk) checks the files' identity and
the CRC of the last 4 KiB instead.

  .venv/bin/python benches/changelog_reopen.py                 # 1, 4 and 16 MiB segments
  .venv/bin/python benches/changelog_reopen.py --mib 16 --rounds 20

``--attach``: the same through a key-value store's ``attach_changelog`` / ``detach_changelog``, as a
parked store is re-attached (the changelog's published marker too).

Prints milliseconds per open (median, wall and CPU of the thread) per segment size.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

RECORD = 60
"""Bytes of each record's key and of its value."""


def reopen_ms(mib: int, rounds: int) -> tuple[float, float]:
    from kstate.log import Partition

    config = {"segment.bytes": 64 << 20}
    with tempfile.TemporaryDirectory(prefix="kstate-reopen-") as work:
        directory = Path(work) / "changelog-0"
        partition = Partition.open(directory, config)
        records, batch = (mib << 20) // (2 * RECORD + 40), 1000
        for first in range(0, records, batch):
            partition.append(
                [(b"k%059d" % i, b"v" * RECORD, 1_700_000_000_000) for i in range(first, first + batch)],
                now_ms=1_700_000_000_000,
            )
        partition.close()
        walls, cpus = [], []
        for _ in range(rounds):
            wall, cpu = time.perf_counter(), time.thread_time()
            partition = Partition.open(directory, config)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
            partition.close()
    return 1000 * statistics.median(walls), 1000 * statistics.median(cpus)


def reattach_ms(mib: int, rounds: int) -> tuple[float, float]:
    from kstate import _core

    config = {"segment.bytes": str(64 << 20)}
    with tempfile.TemporaryDirectory(prefix="kstate-reattach-") as work:
        store, _ = _core.KeyValueStore.open_rocksdb(
            "s", f"{work}/rocksdb/s", f"{work}/rocksdb/.s.spill", False, True, 64 << 20, 0, "changelog-0"
        )
        directory = f"{work}/changelog-0"
        store.attach_changelog(directory, config, "changelog", 0, False)
        records, batch = (mib << 20) // (2 * RECORD + 40), 10_000
        for first in range(0, records, batch):
            keys = [b"k%059d" % i for i in range(first, first + batch)]
            store.put_all(keys, [b"v" * RECORD] * len(keys))
            store.commit(None, 1_700_000_000_000)
        store.detach_changelog()
        walls, cpus = [], []
        for _ in range(rounds):
            wall, cpu = time.perf_counter(), time.thread_time()
            store.attach_changelog(directory, config, "changelog", 0, False)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
            store.detach_changelog()
        store.close()
    return 1000 * statistics.median(walls), 1000 * statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--attach", action="store_true", help="through a store's attach / detach")
    args = parser.parse_args()
    print("| active segment MiB | open ms (median) | CPU ms (median) |")
    print("|---:|---:|---:|")
    for mib in args.mib:
        wall, cpu = (reattach_ms if args.attach else reopen_ms)(mib, args.rounds)
        print(f"| {mib} | {wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()

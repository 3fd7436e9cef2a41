"""Where the peak RSS of ``benches/scale_window.py``'s kstate run comes from: the run with a
thread sampling, every 0.25 s, the process's RSS, glibc's ``mallinfo2()`` (bytes malloc has in
use and holds free) and ``kstate.memory.memory_usage()`` (the budget's block cache, its pinned
part, memtables, staged writes). benches/README.md, issue 21's fourteenth pass. Linux with glibc.

    .venv/bin/python benches/rss_timeline.py [--keys 5000000] [--dir /var/tmp] [--kstate-options JSON]

Prints a JSON line every 5 s, then the sample at the peak and the run's result.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import tempfile
import threading
import time

from kstate.memory import memory_usage, rss_bytes
from scale import bench_dir  # benches/scale.py
from scale_window import run_kstate  # benches/scale_window.py

MIB = 1 << 20
BUDGET_PARTS = ("block_cache_usage", "block_cache_pinned", "memtables", "staged", "read_cache")


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=5_000_000)
    parser.add_argument("--dir", type=bench_dir, default=None)
    parser.add_argument("--kstate-options", type=json.loads, default=None, help="rocksdb.config.setter as JSON")
    args = parser.parse_args()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    started, done, peak = time.perf_counter(), threading.Event(), {"rss_mib": 0}

    def sample() -> dict:
        malloc, budget = libc.mallinfo2(), memory_usage()
        return {
            "seconds": round(time.perf_counter() - started, 1),
            "rss_mib": rss_bytes() // MIB,
            "malloc_in_use_mib": (malloc.uordblks + malloc.hblkhd) // MIB,
            "malloc_free_mib": malloc.fordblks // MIB,
        } | {f"{part}_mib": budget[part] // MIB for part in BUDGET_PARTS}

    def sampler() -> None:
        printed = 0.0
        while not done.wait(0.25):
            now = sample()
            if now["rss_mib"] > peak["rss_mib"]:
                peak.clear()
                peak.update(now)
            if now["seconds"] - printed >= 5:
                print(json.dumps(now), flush=True)
                printed = now["seconds"]

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    result = run_kstate(args.keys, tempfile.mkdtemp(dir=args.dir), args.kstate_options)
    done.set()
    thread.join()
    print("peak", json.dumps(peak))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

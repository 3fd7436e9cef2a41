"""ListState.appendValue scales linearly: n values appended one at a time to one key, for growing
n, each size in a fresh store, then one commit and the list read back.

  .venv/bin/python benches/list_append.py                  # n = 1,000 ... 100,000
  .venv/bin/python benches/list_append.py --sizes 1000,10000

Prints per size the seconds of the appends, microseconds per append and the ratio of that to the
smallest size's: flat (about 1x) is linear, rising with n would be a list rewritten per append.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time
from pathlib import Path


def appends(n: int, work: Path) -> tuple[float, float]:
    from kstate.spark import StateBackend, StatefulProcessorHandle, TaskInfo
    from kstate.stores import Stores

    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("l"), "bytes", "bytes")
    state = StateBackend([builder], work / "state", work / "log", "bench").partition_state(TaskInfo(0, 0))
    handle = StatefulProcessorHandle(state.open())
    items = handle.getListState("l", "amount long")
    handle.set_current_key(pickle.dumps(("user",), protocol=4))
    started = time.perf_counter()
    for i in range(n):
        items.appendValue((i,))
    appended = time.perf_counter() - started
    state.commit()
    state = StateBackend([builder], work / "state", work / "log", "bench").partition_state(TaskInfo(0, 1))
    handle = StatefulProcessorHandle(state.open())
    items = handle.getListState("l", "amount long")
    handle.set_current_key(pickle.dumps(("user",), protocol=4))
    started = time.perf_counter()
    count = sum(1 for _ in items.get())
    read = time.perf_counter() - started
    state.abort()
    assert count == n, (count, n)
    return appended, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,30000,100000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| values appended | append s | us per append | vs smallest | read back s |")
    print("|---:|---:|---:|---:|---:|")
    base = None
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="kstate-list-") as work:
            appended, read = appends(n, Path(work))
        per = appended / n * 1e6
        base = base or per
        print(f"| {n:,} | {appended:.3f} | {per:.2f} | {per / base:.2f}x | {read:.3f} |")


if __name__ == "__main__":
    main()

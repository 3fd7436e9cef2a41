"""The TTL sweep of a ``transform_with_state`` processor's state when much of it expires at once:
KEYS grouping keys each write a value, a list of three and two map entries with a TTL of 1 s
(one batch, committed), then a batch 2 s later sweeps them (``remove_expired``, what a task
runs after its keys) and commits the deletes. No Spark: the task's stores as a task opens them.

  .venv/bin/python benches/ttl_sweep.py            # 50,000 keys: 300,000 entries expire
  .venv/bin/python benches/ttl_sweep.py --keys 200000

Prints the writing batch's seconds (a measure of the machine's speed at the time), the sweep's
and the deleting commit's.
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import tempfile
import time
from pathlib import Path

from kstate.spark import StateBackend, StatefulProcessorHandle, TaskInfo
from kstate.spark.processor.processor import TTL_INDEX
from kstate.spark.protocol.idle import IDLE
from kstate.stores import Stores

NOW = 1_700_000_000_000
NAMES = ("v", "l", "m", TTL_INDEX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=50_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kstate-ttl-sweep-"))
    builders = [Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes") for n in NAMES]
    backend = StateBackend(builders, work / "state", work / "log", "bench")

    def batch(batch_id: int, now: int) -> tuple:
        state = backend.partition_state(TaskInfo(0, batch_id))
        handle = StatefulProcessorHandle(state.open(), "None", now=now)
        variables = (
            handle.getValueState("v", ttlDurationMs=1000),
            handle.getListState("l", ttlDurationMs=1000),
            handle.getMapState("m", ttlDurationMs=1000),
        )
        return state, handle, variables

    try:
        state, handle, (value, items, mapping) = batch(0, NOW)
        started = time.perf_counter()
        for i in range(args.keys):
            handle.set_current_key(pickle.dumps((f"u{i}",), protocol=4))
            value.update(i)
            items.put([1, 2, 3])
            mapping.updateValue("a", 1)
            mapping.updateValue("b", 2)
        state.commit()
        written = time.perf_counter() - started
        state, handle, _ = batch(1, NOW + 2000)
        started = time.perf_counter()
        removed = handle.remove_expired()
        swept = time.perf_counter() - started
        started = time.perf_counter()
        state.commit()
        committed = time.perf_counter() - started
        print(
            f"keys {args.keys:,}: writing batch {written:.2f} s; sweep {swept:.2f} s "
            f"({removed:,} entries, {swept / max(removed, 1) * 1e6:.1f} us an entry); its commit {committed:.2f} s"
        )
    finally:
        IDLE.release_all()  # the parked stores, before their directory goes
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The cost of the first use of kstate in a fresh interpreter, beside rocksdict's.

Each run is a new ``python`` process that times, from its first line, the import and a first
store: open a persistent key-value store in a new directory, put, commit and get one key, close
it (without the commit, closing would discard the put, and say so). The peer does the same with
``rocksdict.Rdict``, whose put is durable as it returns (RocksDB's write-ahead log). Runs
alternate between the two; the table gives the minimum and the median of each, wall clock and
the process's CPU time (the minimum is what an idle machine gives: noise only adds; CPU time
moves less than the wall clock on a busy machine). Warm: the files are in the page cache after
the first runs, as on any second start. What the first use loads: tests/release/test_first_use.py.

    .venv/bin/python benches/first_use.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile

KSTATE = """
import time
started, cpu = time.perf_counter(), time.process_time()
from kstate import Stores
store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "int64").build()
store.init(DIRECTORY)
store.put("k", 1)
store.commit()
assert store.get("k") == 1
store.close()
print(time.perf_counter() - started, time.process_time() - cpu)
"""

ROCKSDICT = """
import time
started, cpu = time.perf_counter(), time.process_time()
from rocksdict import Rdict
db = Rdict(DIRECTORY)
db["k"] = 1
assert db["k"] == 1
db.close()
print(time.perf_counter() - started, time.process_time() - cpu)
"""


def one_run(code: str) -> tuple[float, float]:
    """Wall clock and CPU seconds of one first use."""
    with tempfile.TemporaryDirectory(prefix="kstate-first-use-") as directory:
        program = code.replace("DIRECTORY", repr(f"{directory}/store"))
        out = subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, text=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    times: dict[str, list[tuple[float, float]]] = {"kstate": [], "rocksdict": []}
    for _ in range(runs):
        times["kstate"].append(one_run(KSTATE))
        times["rocksdict"].append(one_run(ROCKSDICT))
    print("| first use | wall min ms | wall median ms | CPU min ms | CPU median ms |")
    print("|---|---:|---:|---:|---:|")
    for name, values in times.items():
        wall, cpu = [v[0] * 1000 for v in values], [v[1] * 1000 for v in values]
        print(
            f"| {name} | {min(wall):.1f} | {statistics.median(wall):.1f} "
            f"| {min(cpu):.1f} | {statistics.median(cpu):.1f} |"
        )
    ours, peer = times["kstate"], times["rocksdict"]
    print(
        f"\nkstate / rocksdict (min): wall {min(v[0] for v in ours) / min(v[0] for v in peer):.2f}x, "
        f"CPU {min(v[1] for v in ours) / min(v[1] for v in peer):.2f}x"
    )


if __name__ == "__main__":
    main()

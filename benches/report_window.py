"""Runs the window-store benchmarks and prints the tables of benches/README.md.

.venv/bin/python benches/report_window.py
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

N = 100_000
# (operation, window-store test, key-value reference test, records per round)
THROUGHPUT = [
    ("tumbling put (1 window / record)", "test_tumbling_put", "test_tumbling_put_reference"),
    ("tumbling fetch(key, start)", "test_tumbling_fetch", "test_tumbling_fetch_reference"),
    ("hopping put (5 windows / record)", "test_hopping_put", "test_hopping_put_reference"),
    ("hopping fetch(key, from, to) (5 windows)", "test_hopping_fetch", "test_hopping_fetch_reference"),
]
TTL = [
    ("window aggregation: fetch + put", "test_window_aggregation_ttl"),
    ("key-value: get + put", "test_key_value_ttl"),
]
TTL_TARGET = 0.15


def main() -> None:
    out = Path(tempfile.mkdtemp()) / "bench.json"
    here = Path(__file__).parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(here / "test_window_store.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={out}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    mean = {b["name"]: b["stats"]["mean"] for b in json.loads(out.read_text())["benchmarks"]}
    print("| operation | window store records/s | key-value reference records/s | window / reference |")
    print("|---|---:|---:|---:|")
    for name, ours, ref in THROUGHPUT:
        print(f"| {name} | {N / mean[ours]:,.0f} | {N / mean[ref]:,.0f} | {mean[ref] / mean[ours]:.2f}x |")
    print()
    print("| workload (timestamped store) | TTL off records/s | TTL on records/s | overhead | target | met |")
    print("|---|---:|---:|---:|---:|---|")
    for name, test in TTL:
        off, on = mean[f"{test}[ttl_off]"], mean[f"{test}[ttl_on]"]
        overhead = on / off - 1
        met = "yes" if overhead < TTL_TARGET else "**no**"
        print(f"| {name} | {N / off:,.0f} | {N / on:,.0f} | {overhead:+.1%} | < {TTL_TARGET:.0%} | {met} |")


if __name__ == "__main__":
    main()

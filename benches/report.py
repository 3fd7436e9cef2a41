"""Runs the benchmarks and prints the kstate / peer ratio table of benches/README.md.

.venv/bin/python benches/report.py
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

# (operation, kstate test, peer test, target ratio kstate/peer in ops/s)
ROWS = [
    ("single put", "test_put_kstate", "test_put_rocksdict", 1.0),
    ("single get", "test_get_kstate", "test_get_rocksdict", 1.0),
    ("single get, read cache off", "test_get_kstate_uncached", "test_get_rocksdict", None),
    ("get_many, list (vs rocksdict get loop)", "test_get_many_kstate_list", "test_get_many_rocksdict_loop", 3.0),
    ("get_many, Arrow (vs rocksdict get loop)", "test_get_many_kstate_arrow", "test_get_many_rocksdict_loop", 3.0),
    ("get_many, list (vs rocksdict multi-get)", "test_get_many_kstate_list", "test_get_many_rocksdict_multi_get", None),
    (
        "get_many, read cache off (vs rocksdict get loop)",
        "test_get_many_kstate_uncached",
        "test_get_many_rocksdict_loop",
        None,
    ),
    ("put_all, list (vs rocksdict put loop)", "test_put_all_kstate_list", "test_put_all_rocksdict_loop", 3.0),
    ("put_all, Arrow (vs rocksdict put loop)", "test_put_all_kstate_arrow", "test_put_all_rocksdict_loop", 3.0),
    ("forward scan", "test_scan_kstate", "test_scan_rocksdict", None),
    ("commit 100k staged (vs WriteBatch write)", "test_commit_kstate", "test_commit_rocksdict_write_batch", 1 / 1.3),
]
N = 100_000


def main() -> None:
    out = Path(tempfile.mkdtemp()) / "bench.json"
    here = Path(__file__).parent
    subprocess.run(
        [sys.executable, "-m", "pytest", str(here), "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    mean = {b["name"]: b["stats"]["mean"] for b in json.loads(out.read_text())["benchmarks"]}
    print("| operation | kstate ops/s | peer ops/s | kstate / peer | target | met |")
    print("|---|---:|---:|---:|---:|---|")
    for name, ours, peer, target in ROWS:
        ratio = mean[peer] / mean[ours]
        met = "-" if target is None else ("yes" if ratio >= target else "**no**")
        shown = "-" if target is None else f">= {target:.2f}x"
        print(f"| {name} | {N / mean[ours]:,.0f} | {N / mean[peer]:,.0f} | {ratio:.2f}x | {shown} | {met} |")


if __name__ == "__main__":
    main()

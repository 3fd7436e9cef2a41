"""The key-value store benches (benches/test_key_value_store.py) on two kstate wheels in one run,
each in a virtualenv of its own with the same dependencies, alternating A, B, A, B, ... so both
see the same machine; prints the median ops/s of each and B / A per bench.

    python scripts/compare_wheels.py dist/kstate-*.whl wheelhouse/kstate-*.whl [--runs 2]

Used for releases: the portable wheel (scripts/build-wheel.sh) against the local build
(scripts/setup.sh) must stay within 5% on every row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benches" / "test_key_value_store.py"
DEPS = ["pytest>=8", "pytest-benchmark>=4", "rocksdict>=0.3.23", "pyarrow>=14"]
N = 100_000  # keys per round (benches/conftest.py)


def make_venv(where: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel), *DEPS], check=True)
    return python


def run(python: Path, out: Path) -> dict[str, float]:
    """Mean seconds per round of each bench."""
    subprocess.run(
        [str(python), "-m", "pytest", str(BENCH), "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}"],
        cwd=ROOT / "benches",
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return {b["name"]: b["stats"]["mean"] for b in json.loads(out.read_text())["benchmarks"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel_a", type=Path)
    parser.add_argument("wheel_b", type=Path)
    parser.add_argument("--runs", type=int, default=2, help="runs of the bench file per wheel (default 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kstate-compare-") as tmp:
        pythons = [make_venv(Path(tmp) / name, wheel) for name, wheel in (("a", args.wheel_a), ("b", args.wheel_b))]
        means: list[dict[str, list[float]]] = [{}, {}]
        for run_no in range(args.runs):
            for side, python in enumerate(pythons):
                for name, mean in run(python, Path(tmp) / f"{side}-{run_no}.json").items():
                    means[side].setdefault(name, []).append(mean)
                print(f"run {run_no + 1}/{args.runs} of {'AB'[side]} done", file=sys.stderr, flush=True)
    print(f"A: {args.wheel_a.name}\nB: {args.wheel_b.name}\n{args.runs} runs each, alternating; median of the runs")
    print("\n| bench | A ops/s | B ops/s | B / A |\n|---|---:|---:|---:|")
    worst = 1.0
    for name in means[0]:
        a, b = (N / statistics.median(side[name]) for side in means)
        print(f"| {name} | {a:,.0f} | {b:,.0f} | {b / a:.3f} |")
        if "kstate" in name:
            worst = min(worst, b / a)
    print(f"\nslowest kstate row of B relative to A: {worst:.3f}")


if __name__ == "__main__":
    main()

"""The key-value store benches (benches/test_key_value_store.py) on two kstate wheels in one run,
each in a virtualenv of its own with the same dependencies, alternating A, B, A, B, ... so both
see the same machine; prints the median ops/s of each and B / A per bench.

    python scripts/compare_wheels.py dist/kstate-*.whl wheelhouse/kstate-*.whl [--runs 5]

Per row: the median ops/s of each wheel, B / A, and B / A of the kstate / rocksdict ratio of
each run (the peer ran in the same venv a few seconds apart: this cancels the machine's drift
between runs, which on a shared 2-core VM moves even rocksdict by 10-25%).

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
sys.path.insert(0, str(ROOT / "benches"))
from report import STORE_ROWS  # noqa: E402  (operation, kstate test, peer test, target)

BENCH = ROOT / "benches" / "test_key_value_store.py"
RESTORE_BENCH = ROOT / "benches" / "test_restore.py"
RESTORED = 1_000_000  # records per restore (benches/test_restore.py)
DEPS = ["pytest>=8", "pytest-benchmark>=4", "rocksdict>=0.3.23", "pyarrow>=14"]
N = 100_000  # keys per round (benches/conftest.py)


def make_venv(where: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel), *DEPS], check=True)
    return python


def run(python: Path, out: Path, bench: Path = BENCH) -> dict[str, float]:
    """Mean seconds per round of each bench."""
    subprocess.run(
        [str(python), "-m", "pytest", str(bench), "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}"],
        cwd=ROOT / "benches",
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return {b["name"]: b["stats"]["mean"] for b in json.loads(out.read_text())["benchmarks"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel_a", type=Path)
    parser.add_argument("wheel_b", type=Path)
    parser.add_argument("--runs", type=int, default=5, help="runs of the bench file per wheel (default 5)")
    parser.add_argument("--restore", action="store_true", help="also the restore bench (test_restore.py) each run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kstate-compare-") as tmp:
        pythons = [make_venv(Path(tmp) / name, wheel) for name, wheel in (("a", args.wheel_a), ("b", args.wheel_b))]
        means: list[dict[str, list[float]]] = [{}, {}]
        for run_no in range(args.runs):
            for side, python in enumerate(pythons):
                for name, mean in run(python, Path(tmp) / f"{side}-{run_no}.json").items():
                    means[side].setdefault(name, []).append(mean)
                if args.restore:
                    restored = run(python, Path(tmp) / f"{side}-{run_no}-restore.json", RESTORE_BENCH)
                    for name, mean in restored.items():
                        means[side].setdefault(name, []).append(mean)
                print(f"run {run_no + 1}/{args.runs} of {'AB'[side]} done", file=sys.stderr, flush=True)
    print(f"A: {args.wheel_a.name}\nB: {args.wheel_b.name}\n{args.runs} runs each, alternating; median of the runs")
    print("\n| operation | A ops/s | B ops/s | B / A | B / A of kstate / peer |\n|---|---:|---:|---:|---:|")
    worst = 1.0
    for operation, test, peer, _ in STORE_ROWS:
        a, b = (N / statistics.median(side[test]) for side in means)
        relative = [statistics.median(p / k for k, p in zip(side[test], side[peer])) for side in means]
        normalized = relative[1] / relative[0]
        print(f"| {operation} | {a:,.0f} | {b:,.0f} | {b / a:.3f} | {normalized:.3f} |")
        worst = min(worst, normalized)
    restores = sorted(name for name in means[0] if name.startswith("test_restore"))
    for name in restores:
        a, b = (RESTORED / statistics.median(side[name]) for side in means)
        print(f"| {name} (records/s, no peer) | {a:,.0f} | {b:,.0f} | {b / a:.3f} | - |")
    print(f"\nslowest row of B relative to A (peer-normalized): {worst:.3f}")


if __name__ == "__main__":
    main()

"""The driver the Spark benches share: every mode in a process (and JVM) of its own, one after the
other; modes under a minute run ``--repeat`` times and the median run counts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Sequence


def run_modes(
    script: str,
    doc: str | None,
    modes: Sequence[str],
    default_keys: int,
    run_mode: Callable[[str, int, int, int], dict],
    table: Callable[[list[dict]], str],
) -> dict[str, list[dict]]:
    """Parses the bench's command line; in a child (``--one MODE``) runs ``run_mode`` and prints
    its result as JSON, else runs every mode in a child, prints ``table`` of the medians and
    returns every mode's runs."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(modes))
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=default_keys)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each mode under a minute; the median counts")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_mode(args.one, args.files, args.rows, args.keys)))
        sys.exit(0)
    runs: dict[str, list[dict]] = {}
    chosen = args.modes.split(",")
    for round_ in range(args.repeat):
        for mode in chosen:
            if round_ and (mode not in runs or runs[mode][0]["seconds"] > 60):
                continue  # the slow modes are many times off; one run tells
            result = _run_one(script, mode, args)
            if result is not None:
                runs.setdefault(mode, []).append(result)
    medians = [sorted(runs[m], key=lambda r: r["seconds"])[len(runs[m]) // 2] for m in chosen if m in runs]
    print(table(medians))
    print()
    print("runs (seconds): " + "; ".join(f"{m} " + ", ".join(f"{r['seconds']:.1f}" for r in runs[m]) for m in runs))
    if len(runs) != len(chosen):
        sys.exit(f"modes failed: {sorted(set(chosen) - set(runs))}")
    return runs


def _run_one(script: str, mode: str, args: argparse.Namespace) -> dict | None:
    command = [sys.executable, script, "--one", mode, "--files", str(args.files), "--rows", str(args.rows)]
    command += ["--keys", str(args.keys)]
    print(f"[bench] {mode} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"[bench] {mode} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    result = json.loads(lines[-1])
    checked = f", equals reference: {result['matches_reference']}" if "matches_reference" in result else ""
    print(
        f"[bench] {mode}: {result['seconds']:.1f} s, {result['rows_per_s']:,.0f} rows/s{checked}",
        file=sys.stderr,
        flush=True,
    )
    return result

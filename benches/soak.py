"""The soak: a query that runs for a long time through faults (see benches/README.md, "Soak").

    .venv/bin/python benches/soak.py --files 1000 --out benches/results/soak.json

Spark on local-cluster[2,1,1024] runs three stateful kstate queries over files this run writes
one by one, with changelogs on moto's S3 server behind a fault proxy, executors and Python
workers SIGKILLed, the queries restarted, a state disk filled and the object store down, on a
seeded schedule. Every output row and, every --check-every files, the state are compared with a
plain-Python reference; the report gives the faults, memory, disk, storage and batch times per
100 files. Needs root (the state disks are tmpfs mounts)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from soak_harness.run import Soak, SoakConfig  # noqa: E402
from soak_harness.workload import Workload  # noqa: E402

COLUMNS = [
    ("files", "files"),
    ("faults", "faults"),
    ("latency_p50_s", "file p50 s"),
    ("latency_p99_s", "file p99 s"),
    ("batch_p50_ms", "batch p50 ms"),
    ("batch_p99_ms", "batch p99 ms"),
    ("rss_median_mib", "RSS/executor median MiB"),
    ("rss_peak_mib", "RSS/executor peak MiB"),
    ("rss_python_median_mib", "Python/executor median MiB"),
    ("rss_worker_median_mib", "worker median MiB"),
    ("local_mib", "local state MiB"),
    ("remote_mib", "remote MiB"),
]


def table(report: dict) -> str:
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(block[name]) for name, _ in COLUMNS) + " |" for block in report["blocks"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000, help="micro-batches (one input file each)")
    parser.add_argument("--rows", type=int, default=Workload.rows, help="rows per file")
    parser.add_argument("--keys", type=int, default=Workload.keys, help="the fixed key set's size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-every", type=int, default=100)
    parser.add_argument("--no-faults", action="store_true", help="no scheduled faults (the proxy still errs)")
    parser.add_argument("--trigger", default=SoakConfig.trigger, help="the queries' processing-time trigger")
    parser.add_argument("--work-dir", type=Path, help="default: a temporary directory")
    parser.add_argument("--out", type=Path, help="write the report here as JSON (after each check, and at the end)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # A stopped soak (timeout, kill) still stops Spark and unmounts its state disks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="kstate-soak-"))
    config = SoakConfig(
        work_dir=work_dir,
        files=args.files,
        seed=args.seed,
        check_every=args.check_every,
        workload=replace(Workload(), rows=args.rows, keys=args.keys, seed=args.seed),
        inflict=not args.no_faults,
        trigger=args.trigger,
        report_path=args.out,
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    report = Soak(config).run()
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(json.dumps({k: v for k, v in report.items() if k not in ("blocks", "checks")}, indent=2))


if __name__ == "__main__":
    main()

"""Runs the benchmarks and prints the kstate / peer ratio tables of benches/README.md.

.venv/bin/python benches/report.py                         # every table
.venv/bin/python benches/report.py test_record_codec.py    # the tables of these bench files
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

# (operation, kstate test, peer test, target ratio kstate/peer in ops/s)
STORE_ROWS = [
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


def codec_rows() -> list:
    """Legacy v1 codec rows, per compression: decode and encode against aiokafka (Cython)."""
    rows = []
    for codec in ("none", "gzip"):
        aiokafka = f"test_decode_aiokafka[{codec}]"
        rows += [
            (f"decode {codec}, per record (`iter_decode`)", f"test_decode_kstate_iter[{codec}]", aiokafka, 1.0),
            (f"decode {codec}, columnar (`decode_arrow`)", f"test_decode_kstate_arrow[{codec}]", aiokafka, 3.0),
            (f"decode {codec}, list (`decode`)", f"test_decode_kstate_list[{codec}]", aiokafka, None),
            (
                f"decode {codec}, per record (vs kafka-python)",
                f"test_decode_kstate_iter[{codec}]",
                f"test_decode_kafka_python[{codec}]",
                None,
            ),
            (
                f"encode {codec}, `Record`s (`encode`)",
                f"test_encode_kstate_records[{codec}]",
                f"test_encode_aiokafka[{codec}]",
                None,
            ),
            (
                f"encode {codec}, columnar (`encode_arrow`)",
                f"test_encode_kstate_arrow[{codec}]",
                f"test_encode_aiokafka[{codec}]",
                None,
            ),
        ]
    return rows


# (title, rows, statistic): the codec's operations take milliseconds, so a load spike from another
# process skews their mean; their fastest round is the steady number (as timeit reports).
TABLES = [
    ("Key-value store (peer: rocksdict), mean of the rounds", STORE_ROWS, "mean"),
    (
        "Legacy record codec, 100k v1 records (peer: aiokafka's Cython codec unless named), fastest round",
        codec_rows(),
        "min",
    ),
]
N = 100_000

# (operation, test, records per round, target records/s): operations without a peer.
ABSOLUTE_ROWS = [
    ("restore 1M-record changelog, plain store", "test_restore[plain]", 1_000_000, 1_000_000),
    ("restore 1M-record changelog, timestamped store", "test_restore[timestamped]", 1_000_000, 1_000_000),
]


def main() -> None:
    out = Path(tempfile.mkdtemp()) / "bench.json"
    here = Path(__file__).parent
    targets = [str(here / name) for name in sys.argv[1:]] or [str(here)]
    subprocess.run(
        [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stats = {b["name"]: b["stats"] for b in json.loads(out.read_text())["benchmarks"]}
    for title, rows, statistic in TABLES:
        seconds = {name: stat[statistic] for name, stat in stats.items()}
        measured = [row for row in rows if row[1] in seconds and row[2] in seconds]
        if not measured:
            continue
        print(f"\n{title}\n")
        print("| operation | kstate ops/s | peer ops/s | kstate / peer | target | met |")
        print("|---|---:|---:|---:|---:|---|")
        for name, ours, peer, target in measured:
            ratio = seconds[peer] / seconds[ours]
            met = "-" if target is None else ("yes" if ratio >= target else "**no**")
            shown = "-" if target is None else f">= {target:.2f}x"
            print(f"| {name} | {N / seconds[ours]:,.0f} | {N / seconds[peer]:,.0f} | {ratio:.2f}x | {shown} | {met} |")
    measured = [row for row in ABSOLUTE_ROWS if row[1] in stats]
    if measured:
        print("\nWithout a peer, mean of the rounds\n")
        print("| operation | kstate records/s | target | met |")
        print("|---|---:|---:|---|")
        for name, test, records, target in measured:
            rate = records / stats[test]["mean"]
            print(f"| {name} | {rate:,.0f} | >= {target:,} | {'yes' if rate >= target else '**no**'} |")


if __name__ == "__main__":
    main()

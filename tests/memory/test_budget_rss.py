"""One memory budget per process, checked on real processes: many stores written in commits until
they hold far more data than the budget, RSS read from ``/proc/<pid>/status`` by this process
while the worker runs (``rss_worker.py``).

The bound (README, "Memory"): RSS <= ``statestore.memory.max.bytes`` + 64 MiB + 0.5 MiB per
open RocksDB instance (a window store's segments each count). CI writes 256 MiB in total;
``KSTATE_MEMORY_TEST_BYTES=2147483648`` runs the 2 GiB case (numbers in benches/README.md).

Once the last store closes, the budget's block cache goes and what glibc holds free goes back to
the system (``malloc_trim``): before, these workers held 209-252 MiB more than at their start
after closing every store (the cache's blocks of closed tables, and glibc's freed memory), now
11-56 MiB."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("rss_worker.py")
BUDGET = 256 << 20
FIXED_OVERHEAD = 64 << 20
PER_INSTANCE_OVERHEAD = 512 << 10
TOTAL_BYTES = int(os.environ.get("KSTATE_MEMORY_TEST_BYTES", 256 << 20))
# What a worker may hold above its start once no store is open: Python's objects (the closed
# stores among them) and what glibc holds in pieces smaller than a page.
KEPT_AFTER_CLOSE = 96 << 20
GLIBC = platform.libc_ver()[0] == "glibc"


def _status(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_worker(kind: str, state_dir: Path, stores: int, durability: str = "wal") -> tuple[list[dict], int]:
    """Runs the worker; returns its phase reports and the peak RSS this process saw."""
    command = [sys.executable, str(WORKER), kind, str(state_dir), "--stores", str(stores)]
    command += ["--total-bytes", str(TOTAL_BYTES), "--budget", str(BUDGET)]
    if kind == "key-value":
        command += ["--durability", durability]
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], _status(worker.pid, "VmHWM"), _status(worker.pid, "VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert worker.stdout is not None
    reports = [json.loads(line) for line in worker.stdout]
    done.set()
    sampler.join()
    assert worker.wait() == 0, reports[-1:]
    return reports, peak[0]


def check_bound(reports: list[dict], peak: int, instances: int) -> None:
    bound = BUDGET + FIXED_OVERHEAD + instances * PER_INSTANCE_OVERHEAD
    phases = {r["phase"]: r for r in reports}
    written = phases["done"]["data_bytes"]
    assert written >= TOTAL_BYTES, "the stores hold less data than the test means to write"
    assert peak > phases["opened"]["rss"], "the sampler saw the worker"
    for report in reports:
        # What the budget counts stays in it; memtables may pass their share by what a commit writes.
        assert report["in_use"] <= BUDGET, report
        assert report["rss"] <= bound, report
    assert peak <= bound, f"peak RSS {peak >> 20} MiB > {bound >> 20} MiB with {written >> 20} MiB written"
    if GLIBC:  # other allocators have no malloc_trim
        for phase in ("closed", "done"):  # every store closed
            kept = phases[phase]["rss"] - phases["started"]["rss"]
            assert phases[phase]["block_cache"] == 0, f"{phase}: the closed stores keep the block cache"
            assert kept <= KEPT_AFTER_CLOSE, f"{phase}: {kept >> 20} MiB kept with every store closed"


# Without a WAL ("changelog") the memtables leave memory only by flushes: the budget's relief too.
@pytest.mark.parametrize("durability", ["wal", "changelog"])
def test_200_key_value_stores_stay_within_the_budget_through_close_and_reopen(tmp_path: Path, durability: str) -> None:
    reports, peak = run_worker("key-value", tmp_path, stores=200, durability=durability)
    check_bound(reports, peak, instances=200)
    phases = {r["phase"]: r for r in reports}
    assert phases["closed"]["open_stores"] == 0 and phases["closed"]["staged"] == 0
    assert phases["closed"]["read_cache"] == 0
    assert phases["reopened-written"]["open_stores"] == 200


def test_window_stores_rolling_through_many_segments_stay_within_the_budget(tmp_path: Path) -> None:
    # 9 rounds, one new segment per round and store: each store passes through 9 segments,
    # 3 live at a time.
    reports, peak = run_worker("window", tmp_path, stores=100)
    check_bound(reports, peak, instances=300)
    phases = {r["phase"]: r for r in reports}
    assert phases["reopened"]["open_stores"] <= 300
    assert phases["closed"]["open_stores"] == 0


@pytest.mark.parametrize("config", [{"statestore.memory.max.bytes": 1 << 20}, {"statestore.memory.max.bytes": "1g"}])
def test_bad_budget_is_refused_at_build_and_nothing_is_written(tmp_path: Path, config: dict) -> None:
    from kstate import Stores
    from kstate.errors import InvalidArgumentError

    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "string")
    with pytest.raises(InvalidArgumentError, match="statestore.memory.max.bytes"):
        builder.with_config(config).build().init(tmp_path / "app" / "0_0")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(platform.system() != "Linux", reason="/proc")
def test_a_workers_peak_rss_is_its_own_not_the_forking_process(tmp_path: Path) -> None:
    # ru_maxrss would report this process's 256 MiB of ballast for the child: Linux carries the
    # forking process's RSS into it up to the exec.
    ballast = bytearray(256 << 20)
    ballast[:: 1 << 12] = b"\x01" * len(range(0, len(ballast), 1 << 12))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            # RSS first: the peak read after it holds it (read before, the peak misses whatever
            # the reads themselves fault in, ~200 KiB of code in a process that loaded little).
            "from kstate.memory import peak_rss_bytes, rss_bytes; print(rss_bytes(), peak_rss_bytes())",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rss, peak = map(int, out.split())
    assert 0 < rss <= peak < 128 << 20, (peak, rss)
    del ballast

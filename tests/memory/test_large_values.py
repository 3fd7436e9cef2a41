"""Stores of large values stay within the memory budget, on real processes
(``large_values_worker.py``: 320 values of 1 MiB per key-value, window and session store).

- Writing in transactions of 100 MiB under the default 256 MiB budget: each transaction spills
  past the staged share, and the commit reads the spill once without caching its blocks, which
  had filled the budget's block cache with dead blocks (peak RSS 379-416 MiB before, ~185 now).
- Reading back under a 32 MiB budget in a fresh process: an iterator's chunk holds at most ~1 MiB
  of rows past its last row (``CHUNK_BYTES`` in the core), not 2,048 rows whatever their size
  (2 GiB of 1 MiB values); the peak RSS rose 270-325 MiB before, 23-33 MiB now."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("large_values_worker.py")
# The memory bound (README, "Memory"): the budget + 64 MiB.
WRITE_PEAK_ALLOWED = (256 << 20) + (64 << 20)
# The read budget's block cache fills with the values read; one chunk and a row or two on top.
READ_RISE_ALLOWED = (32 << 20) + (16 << 20)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    state_dir = tmp_path_factory.mktemp("large-values")
    out = subprocess.run(
        [sys.executable, str(WORKER), "write", str(state_dir)], check=True, capture_output=True, text=True
    ).stdout
    return state_dir, json.loads(out)["peak"]


def test_writing_1_mib_values_in_spilled_transactions_stays_within_the_budget(written: tuple[Path, int]) -> None:
    _, peak = written
    assert peak < WRITE_PEAK_ALLOWED, f"peak RSS {peak >> 20} MiB writing 3 x 320 MiB in 100 MiB transactions"


@pytest.mark.parametrize("kind", ["key-value", "window", "session"])
def test_iterating_1_mib_values_holds_a_chunk_not_thousands_of_rows(written: tuple[Path, int], kind: str) -> None:
    state_dir, _ = written
    out = subprocess.run(
        [sys.executable, str(WORKER), "read", str(state_dir), kind], check=True, capture_output=True, text=True
    ).stdout
    read = json.loads(out)
    assert read["rows"] == 320
    assert read["rise"] < READ_RISE_ALLOWED, f"peak RSS rose {read['rise'] >> 20} MiB iterating {kind}"

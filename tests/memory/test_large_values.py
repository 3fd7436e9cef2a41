"""Iterating stores of large values stays within the memory budget: an iterator's chunk holds at
most ~1 MiB of rows past its last row (``CHUNK_BYTES`` in the core), not 2,048 rows whatever
their size (2 GiB of 1 MiB values). Real processes (``large_values_worker.py``): 320 values of
1 MiB per store under a 32 MiB budget, each store read back in a fresh process whose peak RSS
shows what the iteration held."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("large_values_worker.py")
BUDGET = 32 << 20
# The budget's block cache fills with the values read; one chunk and a row or two in Python on top.
ALLOWED_RISE = BUDGET + (16 << 20)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state_dir = tmp_path_factory.mktemp("large-values")
    subprocess.run([sys.executable, str(WORKER), "write", str(state_dir)], check=True)
    return state_dir


@pytest.mark.parametrize("kind", ["key-value", "window", "session"])
def test_iterating_1_mib_values_holds_a_chunk_not_thousands_of_rows(state_dir: Path, kind: str) -> None:
    out = subprocess.run(
        [sys.executable, str(WORKER), "read", str(state_dir), kind], check=True, capture_output=True, text=True
    ).stdout
    read = json.loads(out)
    assert read["rows"] == 320
    # Before chunks had a byte bound: 270-325 MiB here (chunks of 16, 64 and 256 rows).
    assert read["rise"] < ALLOWED_RISE, f"peak RSS rose {read['rise'] >> 20} MiB iterating {kind}"

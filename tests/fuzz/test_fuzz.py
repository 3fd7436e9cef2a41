"""Runs the decoder fuzz target (fuzz_records.py) for a bounded time, and checks its seeds.

KSTATE_FUZZ_SECONDS sets the run's length (45 s by default, about 1.5 million inputs here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kstate.log import records

HERE = Path(__file__).parent
SEEDS = sorted((HERE / "corpus").iterdir())
FUZZ_SECONDS = int(os.environ.get("KSTATE_FUZZ_SECONDS", "45"))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda path: path.name)
def test_seeds_are_valid_sets_that_kafka_python_reads_alike(seed):
    data = seed.read_bytes()
    decoded = [(r.offset, r.key, r.value) for r in records.decode(data)]
    memory_records, read = MemoryRecords(data), []
    while (batch := memory_records.next_batch()) is not None:
        read.extend((r.offset, r.key, r.value) for r in batch)
    assert decoded and decoded == read


def test_fuzzing_the_decoders_finds_nothing(tmp_path):
    """Any exception but CorruptedDataError, a panic, a crash or a hang fails the run."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    command = [
        sys.executable,
        str(HERE / "fuzz_records.py"),
        f"-max_total_time={FUZZ_SECONDS}",
        "-timeout=10",
        "-rss_limit_mb=2048",
        "-keep_seed=1",
        "-reduce_inputs=0",
        f"-artifact_prefix={tmp_path}/",
        str(corpus),
        str(HERE / "corpus"),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=FUZZ_SECONDS + 120)
    summary = [line for line in run.stderr.splitlines() if not line.startswith("INFO: Instrumenting")]
    findings = [path.name for path in tmp_path.iterdir() if path.is_file()]
    assert run.returncode == 0 and not findings, "\n".join([*summary[-40:], f"findings: {findings}"])
    assert any(line.startswith("Done ") for line in summary), "\n".join(summary[-20:])

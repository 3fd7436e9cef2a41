"""The soak's input: one parquet file per micro-batch, made from a seed and the file's index
alone (a restarted harness makes the same files). Keys are Zipf-distributed over a fixed key set,
plus a trickle of keys never seen before; event times advance ``STEP_MS`` per file, with rows out
of order and, from file 2 on, rows late for any watermark the query can have (see ``late_ms``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
STEP_MS = 10_000
WATERMARK_DELAY_MS = 30_000


@dataclass(frozen=True)
class Workload:
    """The input's shape: ``rows`` per file over ``keys`` Zipf-distributed keys (exponent
    ``zipf_exponent``) plus ``new_keys`` never seen before, shares of rows out of order and late."""

    seed: int = 0
    keys: int = 10_000
    rows: int = 1_000
    new_keys: int = 3
    zipf_exponent: float = 1.1
    out_of_order_share: float = 0.1
    late_share: float = 0.03

    def file(self, index: int) -> dict[str, list]:
        """File ``index``'s columns: ``key``, ``file``, ``v`` (unique over the run), ``event_ms``."""
        rng = np.random.default_rng([self.seed, index])
        ranks = np.arange(1, self.keys + 1)
        weights = ranks**-self.zipf_exponent
        picked = rng.choice(self.keys, size=self.rows - self.new_keys, p=weights / weights.sum())
        keys = [f"k{k}" for k in picked] + [f"n{index}-{i}" for i in range(self.new_keys)]
        base = START_MS + index * STEP_MS
        events = base + rng.integers(0, STEP_MS, size=self.rows)
        # Out of order but never late: at or above base - delay, which is above any watermark the
        # batch can have (earlier files' events are all below base).
        shuffled = rng.random(self.rows) < self.out_of_order_share
        events[shuffled] = base - WATERMARK_DELAY_MS + rng.integers(1, WATERMARK_DELAY_MS, size=int(shuffled.sum()))
        if index >= 2:
            late = rng.random(self.rows) < self.late_share
            events[late] = self.late_ms(index) - rng.integers(0, 60_000, size=int(late.sum()))
        return {
            "key": keys,
            "file": [index] * self.rows,
            "v": list(range(index * self.rows, (index + 1) * self.rows)),
            "event_ms": events.tolist(),
        }

    @staticmethod
    def late_ms(index: int) -> int:
        """An event time late in file ``index`` whatever batches ran in between: Spark drops rows
        at or below the previous batch's watermark, which is at least file ``index - 2``'s
        smallest event (``base - 2 * STEP_MS``) less the delay, even with a batch without data
        between files."""
        return START_MS + index * STEP_MS - 2 * STEP_MS - WATERMARK_DELAY_MS - 1


def write_file(directory: Path, index: int, columns: dict[str, list]) -> None:
    """Writes input file ``index`` whole: under a hidden name, then renamed (a stream lists no
    hidden file), with a modification time that orders the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = directory / f"part-{index:06d}.parquet"
    hidden = path.with_name(f".{path.name}")
    schema = pa.schema([("key", pa.string()), ("file", pa.int64()), ("v", pa.int64()), ("event_ms", pa.int64())])
    pq.write_table(pa.table(columns, schema=schema), hidden)
    os.utime(hidden, (1_700_000_000 + index, 1_700_000_000 + index))
    os.replace(hidden, path)

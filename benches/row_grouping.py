"""kstate's own per-task work outside the processor and its state calls, for one partition of one
micro-batch like benches/spark_processor.py's (50,000 rows, ~18,000 users): the Row API's grouping
(Arrow batches -> sorted -> one list of ``Row``s per key) and its output (one ``Row`` per key ->
Arrow record batches), without Spark.

    .venv/bin/python benches/row_grouping.py
"""

from __future__ import annotations

import random
import time

import pyarrow as pa
from pyspark.sql import Row

from kstate.spark.routing.groups import OutputBatcher, iter_groups

ROWS = 50_000
USERS = 20_000
OUTPUT = pa.schema(
    [("user", pa.string()), ("count", pa.int64()), ("total", pa.int64()), ("recent", pa.string()),
     ("categories", pa.string())]
)  # fmt: skip


def main() -> None:
    rnd = random.Random(7)
    table = pa.table(
        {
            "user": [f"u{rnd.randrange(USERS)}" for _ in range(ROWS)],
            "category": [f"c{rnd.randrange(5)}" for _ in range(ROWS)],
            "amount": [rnd.randrange(1000) for _ in range(ROWS)],
        }
    )
    for _ in range(3):
        started = time.perf_counter()
        groups = list(iter_groups(iter(table.to_batches(max_chunksize=10_000)), ["user"], rows=True))
        grouped = time.perf_counter()
        results = [
            Row(user=key[0], count=len(rows), total=1, recent="1,2,3", categories="c1=1") for key, rows in groups
        ]
        output = OutputBatcher(OUTPUT, pandas=False, rows=True)
        converting = time.perf_counter()
        batches = [batch for result in results for batch in output.add(result)] + output.flush()
        done = time.perf_counter()
        assert sum(b.num_rows for b in batches) == len(groups)
        print(
            f"{len(groups):,} groups of {ROWS:,} rows: grouping {grouped - started:.3f} s, "
            f"output {done - converting:.3f} s"
        )


if __name__ == "__main__":
    main()

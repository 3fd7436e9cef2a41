"""What kstate's figures in the query's progress cost per output row: the same batch job, a
``StateBackend.map_partitions`` passing ROWS rows through (a string key, a long; two partitions,
``local[2]``) into Spark's ``noop`` sink, with ``metrics_name=None`` (no figures: a plain
``mapInArrow``) and ``"kstate"`` (the hidden column, its observation, the filter and drop),
alternating, REPEAT times each after one warm-up pair. Its input is cached, so the time is the
plan's: the Python worker's Arrow round trip, the state's open and commit (no writes), and for
``kstate`` the figures' share.

  .venv/bin/python benches/observed_figures.py                  # 2,000,000 rows, 5 pairs
  .venv/bin/python benches/observed_figures.py --rows 500000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time


def passthrough(batches, stores):
    yield from batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from kstate import Stores
    from kstate.spark import StateBackend, local_session

    spark = local_session("observed-figures", conf={"spark.sql.shuffle.partitions": 2})
    spark.sparkContext.setLogLevel("ERROR")
    state_dir = tempfile.mkdtemp(prefix="observed-figures-")
    rows = spark.range(args.rows).selectExpr("cast(id % 100000 as string) as key", "id as v").cache()
    rows.count()
    seconds: dict[str, list[float]] = {"none": [], "kstate": []}
    for run in range(args.repeat + 1):
        for mode in seconds:
            counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
            backend = StateBackend(
                [counts], state_dir, application_id=f"{mode}-{run}", keys=["key"], num_partitions=2, batch_id=run,
                metrics_name=None if mode == "none" else "kstate",
            )  # fmt: skip
            mapped = backend.map_partitions(rows, passthrough, "key string, v long")
            started = time.perf_counter()
            mapped.write.format("noop").mode("overwrite").save()
            if run:  # the first pair warms the JVM and the Python workers
                seconds[mode].append(time.perf_counter() - started)
    spark.stop()
    medians = {mode: statistics.median(values) for mode, values in seconds.items()}
    extra = medians["kstate"] - medians["none"]
    print(json.dumps({"rows": args.rows, "seconds": seconds, "medians": medians}))
    print(
        f"{args.rows:,} rows: no figures {medians['none']:.2f} s, figures {medians['kstate']:.2f} s (medians of "
        f"{args.repeat}): {extra:+.2f} s, {extra / args.rows * 1e9:+.0f} ns wall per output row"
    )


if __name__ == "__main__":
    main()

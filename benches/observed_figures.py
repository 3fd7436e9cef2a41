"""What kstate's figures in the query's progress cost per output row: the same batch job, a
``StateBackend.map_partitions`` passing ROWS rows through (a string key, a long; two partitions,
``local[2]``) into Spark's ``noop`` sink, with ``metrics_name=None`` (no figures: a plain
``mapInArrow``) and ``"kstate"`` (the hidden column, its observation, the filter and drop),
alternating, REPEAT times each after one warm-up pair. Its input is cached, so the time is the
plan's: the Python worker's Arrow round trip, the state's open and commit (no writes), and for
``kstate`` the figures' share.

``--streaming``: per micro-batch instead, in one warm JVM: a streaming running count
(``map_partitions``) over FILES parquet files of 2,000 rows (500 keys), one per batch,
``availableNow``, without and then with figures, REPEAT pairs; the medians of Spark's
``durationMs`` over each run's batches after its first.

  .venv/bin/python benches/observed_figures.py                  # 2,000,000 rows, 5 pairs
  .venv/bin/python benches/observed_figures.py --rows 500000 --repeat 3
  .venv/bin/python benches/observed_figures.py --streaming --files 10 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from spark_cluster import kstate_udf


def passthrough(batches, stores):
    yield from batches


def per_batch(spark, work: str, files: int, repeat: int) -> None:
    """Each run's median ``durationMs`` per batch, without and with figures, alternating."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from kstate import Stores
    from kstate.spark import StateBackend

    os.makedirs(f"{work}/in")
    for i in range(files):
        keys = [f"k{(i * 7 + j) % 500}" for j in range(2000)]
        pq.write_table(pa.table({"key": keys, "v": list(range(2000))}), f"{work}/in/{i:04d}.parquet")
    runs: dict[str, list[dict[str, float]]] = {"none": [], "kstate": []}
    for run in range(repeat):
        for mode in runs:
            app = f"{mode}-{run}"
            counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
            backend = StateBackend(
                [counts], f"{work}/state", application_id=app, keys=["key"], num_partitions=2,
                metrics_name=None if mode == "none" else "kstate",
            )  # fmt: skip
            rows = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(f"{work}/in")
            query = (
                backend.map_partitions(rows, kstate_udf(), "key string, count long")
                .writeStream.format("noop")
                .option("checkpointLocation", f"{work}/checkpoint-{app}")
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            batches = [p for p in query.recentProgress if p.numInputRows > 0][1:]
            parts = ("queryPlanning", "addBatch", "triggerExecution")
            runs[mode].append({part: statistics.median(p.durationMs[part] for p in batches) for part in parts})
    print(json.dumps({"files": files, "ms per batch": runs}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--streaming", action="store_true", help="per micro-batch, in one warm JVM")
    parser.add_argument("--files", type=int, default=10)
    args = parser.parse_args()

    from kstate import Stores
    from kstate.spark import StateBackend, local_session

    conf = {"spark.sql.shuffle.partitions": 2, "spark.sql.streaming.pollingDelay": "100ms"}
    spark = local_session("observed-figures", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    state_dir = tempfile.mkdtemp(prefix="observed-figures-")
    if args.streaming:
        per_batch(spark, state_dir, args.files, args.repeat)
        spark.stop()
        return
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

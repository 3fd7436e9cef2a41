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

``--processor``: the same per micro-batch, on benches/spark_processor.py's ``kstate_row`` query
(its processor and input: FILES files of 100,000 rows, 20,000 users; ``foreachBatch`` into
parquet), ``transform_with_state`` with ``metrics_name=None`` and ``"kstate"`` alternating in one
JVM, a warm-up pair first, then REPEAT pairs: what the figures cost each batch once the JVM has
paid for their code (a fresh JVM's first batches pay that once: benches/README.md).

  .venv/bin/python benches/observed_figures.py                  # 2,000,000 rows, 5 pairs
  .venv/bin/python benches/observed_figures.py --rows 500000 --repeat 3
  .venv/bin/python benches/observed_figures.py --streaming --files 10 --repeat 2
  .venv/bin/python benches/observed_figures.py --processor --files 8 --repeat 4
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


def processor_batches(spark, work: str, files: int, repeat: int) -> None:
    """spark_processor.py's kstate_row query per micro-batch, without and with figures,
    alternating in this JVM; each run's median ``durationMs`` per batch after its first."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    import spark_processor
    from kstate.spark import transform_with_state
    from spark_processor import OUTPUT, input_files, processor

    cloudpickle.register_pickle_by_value(spark_processor)  # the workers cannot import the benches

    os.makedirs(f"{work}/in")
    for i, columns in enumerate(input_files(files, 100_000, 20_000)):
        path = f"{work}/in/part-{i:05d}.parquet"
        pq.write_table(pa.table(columns), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the stream takes the files in this order
    runs: dict[str, list[dict[str, float]]] = {"none": [], "kstate": []}
    for run in range(repeat + 1):
        for mode in runs:
            app = f"{mode}-{run}"
            os.makedirs(f"{work}/timings-{app}")
            rows = spark.readStream.schema("user string, category string, amount long")
            counted = transform_with_state(
                rows.option("maxFilesPerTrigger", 1).parquet(f"{work}/in"), ["user"],
                processor("row", f"{work}/timings-{app}"), OUTPUT, f"{work}/state-{app}", f"{work}/changelog-{app}",
                "bench", num_partitions=2, api="row", metrics_name=None if mode == "none" else "kstate",
            )  # fmt: skip

            def write(frame, batch_id, sink=f"{work}/out-{app}"):
                frame.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(sink)

            query = (
                counted.writeStream.outputMode("update")
                .foreachBatch(write)
                .option("checkpointLocation", f"{work}/checkpoint-{app}")
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            if not run:
                continue  # the first pair warms the JVM and the Python workers
            batches = [p for p in query.recentProgress if p.numInputRows > 0][1:]
            parts = ("queryPlanning", "addBatch", "triggerExecution")
            runs[mode].append({part: statistics.median(p.durationMs[part] for p in batches) for part in parts})
    medians = {mode: statistics.median(r["triggerExecution"] for r in rs) for mode, rs in runs.items()}
    print(json.dumps({"files": files, "ms per batch": runs, "medians": medians}))
    extra = medians["kstate"] - medians["none"]
    print(
        f"{files} batches per run, {repeat} pairs: without figures {medians['none']:.0f} ms a batch, with "
        f"{medians['kstate']:.0f} ms ({extra:+.0f} ms, {extra / medians['none']:+.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--streaming", action="store_true", help="per micro-batch, in one warm JVM")
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--processor", action="store_true", help="spark_processor's query per micro-batch")
    args = parser.parse_args()

    from kstate import Stores
    from kstate.spark import StateBackend, local_session

    conf = {"spark.sql.shuffle.partitions": 2, "spark.sql.streaming.pollingDelay": "100ms"}
    spark = local_session("observed-figures", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    state_dir = tempfile.mkdtemp(prefix="observed-figures-")
    if args.streaming or args.processor:
        (processor_batches if args.processor else per_batch)(spark, state_dir, args.files, args.repeat)
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

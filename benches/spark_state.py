"""Stateful running count per key in a PySpark streaming query: kstate against Spark's own Python
state APIs and a hand-rolled rocksdict backend, same input, same machine, one after the other.

The workload is ``shared/peers/spark_state_baseline.py``'s: FILES parquet files of ROWS rows
(keys ``k<random below KEYS>``, seed 7) read one file per trigger (``maxFilesPerTrigger=1``),
``local[2]``, two shuffle partitions, output mode update into a parquet sink through
``foreachBatch``, ``availableNow``. Modes:

  kstate     repartition by key + mapInArrow, state in a logged kstate store (changelog on,
             exactly once per micro-batch): one get_many and one put_all per Arrow batch
  rocksdict  repartition by key + mapInArrow, state in a per-partition rocksdict (the peer)
  tws        transformWithStateInPandas (ValueState, RocksDB state store provider)
  apiws      applyInPandasWithState (GroupState)
  kstate_tws the tws processor unchanged but for its imports, on kstate.spark.transform_with_state
             (value state in a kstate store, exactly once, per-key calls as in Spark's API)
  nostate    repartition by key + mapInArrow counting each batch alone, no state at all: the
             floor Spark's own work sets for the two mapInArrow modes (not a peer)

  .venv/bin/python benches/spark_state.py                    # all modes (fast ones 3x), the table
  .venv/bin/python benches/spark_state.py --modes kstate,rocksdict --files 4 --rows 100000 --keys 50000

Each run is its own Python process (a fresh JVM) printing one JSON line; modes taking under a
minute run ``--repeat`` times, interleaved, and their median run counts (this 2-core machine is
shared, and a run swings by 20%). The parent prints the markdown tables of benches/README.md.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from spark_modes import run_modes

MODES = ("kstate", "rocksdict", "tws", "apiws", "kstate_tws", "nostate")


def make_input(src: Path, files: int, rows: int, keys: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rnd = random.Random(7)
    for f in range(files):
        ks = [f"k{rnd.randrange(keys)}" for _ in range(rows)]
        pq.write_table(pa.table({"key": ks, "v": list(range(rows))}), src / f"part-{f:05d}.parquet")


def kstate_query(df, work: Path):
    """The kstate UDF: counts per key of each Arrow batch, one get_many, one put_all."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kstate import Stores
    from kstate.spark import StateBackend

    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    state = StateBackend([counts], work / "state", work / "changelog", "bench", keys=["key"], num_partitions=2)
    timings = work / "timings"

    def running_count(batches, stores):
        store = stores["counts"]
        in_calls = compute = 0.0
        for batch in batches:
            received = time.perf_counter()
            counted = pc.value_counts(batch.column("key"))
            keys, n = counted.field("values"), counted.field("counts")
            t = time.perf_counter()
            new = pc.add(pc.fill_null(store.get_many(keys), 0), n)
            store.put_all(keys, new)
            in_calls += time.perf_counter() - t
            out = pa.RecordBatch.from_arrays([keys, new], names=["key", "count"])
            compute += time.perf_counter() - received
            yield out
        # Open and commit are timed by the backend (on_task adds them).
        timings.mkdir(exist_ok=True)
        line = {"batch": stores.batch_id, "partition": stores.partition, "calls": in_calls, "compute": compute}
        with open(timings / f"{stores.batch_id}-{stores.partition}.json", "w") as out:
            json.dump(line, out)

    def on_task(task, spent):
        path = timings / f"{task.batch_id}-{task.partition}.json"
        line = json.loads(path.read_text())
        line.update(open=spent.open, commit=spent.commit)
        path.write_text(json.dumps(line))

    state.on_task = on_task
    return state.partition(df).mapInArrow(state.map_in_arrow(running_count), "key string, count long")


def rocksdict_query(df, work: Path):
    """The peer's hand-rolled backend, as in shared/peers/spark_state_baseline.py."""
    import collections

    import pyarrow as pa

    state_dir = str(work / "state")
    timings = work / "timings"

    def fn(batches):
        from pyspark import TaskContext
        from rocksdict import Options, Rdict, WriteBatch

        context = TaskContext.get()
        pid = context.partitionId()
        started = time.perf_counter()
        db = Rdict(os.path.join(state_dir, str(pid)), Options(raw_mode=True))
        compute = time.perf_counter() - started
        try:
            for b in batches:
                received = time.perf_counter()
                cnt = collections.Counter(b.column("key").to_pylist())
                ks = list(cnt)
                cur = db.get([k.encode() for k in ks])
                wb = WriteBatch(raw_mode=True)
                outc = []
                for k, old in zip(ks, cur):
                    c = (int.from_bytes(old, "big") if old else 0) + cnt[k]
                    wb.put(k.encode(), c.to_bytes(8, "big"))
                    outc.append(c)
                db.write(wb)
                out = pa.RecordBatch.from_pydict({"key": ks, "count": outc})
                compute += time.perf_counter() - received
                yield out
        finally:
            closing = time.perf_counter()
            db.close()
            compute += time.perf_counter() - closing
            # The timing is the bench's, not the peer's: it does not change what the peer does.
            batch = int(context.getLocalProperty("streaming.sql.batchId"))
            timings.mkdir(exist_ok=True)
            (timings / f"{batch}-{pid}.json").write_text(json.dumps({"batch": batch, "compute": compute}))

    return df.repartition(2, "key").mapInArrow(fn, "key string, count long")


def nostate_query(df, work: Path):
    """The same plan as the two mapInArrow modes with the state left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def fn(batches):
        for batch in batches:
            counted = pc.value_counts(batch.column("key"))
            yield pa.RecordBatch.from_arrays([counted.field("values"), counted.field("counts")], names=["key", "count"])

    return df.repartition(2, "key").mapInArrow(fn, "key string, count long")


def tws_query(df, work: Path):
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    class Counter(StatefulProcessor):
        def init(self, handle):
            self.st = handle.getValueState("count", StructType([StructField("c", LongType())]))

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(p) for p in rows)
            cur = self.st.get()
            c = (cur[0] if cur else 0) + n
            self.st.update((c,))
            yield pd.DataFrame({"key": [key[0]], "count": [c]})

        def close(self):
            pass

    out = StructType([StructField("key", StringType()), StructField("count", LongType())])
    return df.groupBy("key").transformWithStateInPandas(Counter(), out, "Update", "None")


def kstate_tws_query(df, work: Path):
    import pandas as pd

    from kstate.spark import StatefulProcessor, transform_with_state

    class Counter(StatefulProcessor):
        def init(self, handle):
            self.st = handle.getValueState("count", "c long")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802
            n = sum(len(p) for p in rows)
            cur = self.st.get()
            c = (cur[0] if cur else 0) + n
            self.st.update((c,))
            yield pd.DataFrame({"key": [key[0]], "count": [c]})

    return transform_with_state(
        df, ["key"], Counter(), "key string, count long", work / "state", work / "changelog", "bench", num_partitions=2
    )


def apiws_query(df, work: Path):
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def fn(key, pdfs, state):
        n = sum(len(p) for p in pdfs)
        c = (state.get[0] if state.exists else 0) + n
        state.update((c,))
        yield pd.DataFrame({"key": [key[0]], "count": [c]})

    return df.groupBy("key").applyInPandasWithState(
        fn, "key string, count long", "c long", "Update", GroupStateTimeout.NoTimeout
    )


def run_mode(mode: str, files: int, rows: int, keys: int) -> dict:
    from kstate.spark import local_session

    work = Path(tempfile.mkdtemp(prefix=f"spark-{mode}-"))
    src = work / "in"
    src.mkdir()
    make_input(src, files, rows, keys)
    spark = local_session(
        f"bench-{mode}",
        conf={
            "spark.sql.shuffle.partitions": 2,
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
            ),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(str(src))
    queries = {
        "kstate": kstate_query,
        "rocksdict": rocksdict_query,
        "tws": tws_query,
        "apiws": apiws_query,
        "kstate_tws": kstate_tws_query,
        "nostate": nostate_query,
    }
    query = queries[mode](df, work)
    sink = str(work / "out")
    started = time.perf_counter()
    running = (
        query.writeStream.outputMode("update")
        .foreachBatch(lambda frame, _: frame.write.mode("append").parquet(sink))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    running.awaitTermination()
    seconds = time.perf_counter() - started
    batches_ms = [p["durationMs"].get("triggerExecution", 0) for p in running.recentProgress if p["numInputRows"]]
    final = spark.read.parquet(sink).groupBy("key").max("count").toPandas()
    result = {
        "mode": mode,
        "rows": files * rows,
        "seconds": seconds,
        "rows_per_s": files * rows / seconds,
        "final_total": int(final["max(count)"].sum()),
        "batch_ms": batches_ms,
    }
    if mode in ("kstate", "rocksdict"):
        result["tasks"] = [json.loads(p.read_text()) for p in sorted((work / "timings").glob("*.json"))]
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return result


def table(results: list[dict]) -> str:
    by_mode = {r["mode"]: r for r in results}
    kstate = by_mode.get("kstate")
    targets = {"tws": 20.0, "rocksdict": 1.5}
    lines = [
        "| mode | seconds | rows/s | kstate / mode | target | met | final total |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        ratio = kstate["rows_per_s"] / r["rows_per_s"] if kstate and r is not kstate else None
        target = targets.get(r["mode"])
        met = "-" if target is None or ratio is None else ("yes" if ratio >= target else "no")
        lines.append(
            f"| {r['mode']} | {r['seconds']:.1f} | {r['rows_per_s']:,.0f} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {'-' if target is None else f'>= {target:.1f}x'} | "
            f"{met} | {r['final_total']:,} |"
        )
    if "kstate_tws" in by_mode and "tws" in by_mode:
        ratio = by_mode["kstate_tws"]["rows_per_s"] / by_mode["tws"]["rows_per_s"]
        lines += ["", f"kstate_tws / tws (the same processor on kstate): {ratio:.2f}x"]
    if kstate:
        lines += ["", "kstate per micro-batch (both partitions summed; wall time from Spark's progress):", ""]
        lines += [
            "| batch | wall ms | kstate open ms | get_many+put_all ms | commit ms | kstate total ms | share of wall |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i, wall in enumerate(kstate["batch_ms"]):
            tasks = [t for t in kstate["tasks"] if t["batch"] == i]
            opened = 1000 * sum(t.get("open", 0) for t in tasks)
            calls = 1000 * sum(t["calls"] for t in tasks)
            commit = 1000 * sum(t.get("commit", 0) for t in tasks)
            total = opened + calls + commit
            lines.append(
                f"| {i} | {wall:,} | {opened:.0f} | {calls:.0f} | {commit:.0f} | {total:.0f} | {total / wall:.1%} |"
            )
    peer = by_mode.get("rocksdict")
    if kstate and peer:
        lines += ["", "UDF compute per micro-batch, both partitions summed (ms; time blocked on Spark excluded):", ""]
        lines += [
            "| batch | kstate (open + batches + commit) | rocksdict (open + batches + close) | rocksdict / kstate |"
        ]
        lines += ["|---:|---:|---:|---:|"]
        for i in range(len(kstate["batch_ms"])):
            ours = 1000 * sum(
                t.get("open", 0) + t["compute"] + t.get("commit", 0) for t in kstate["tasks"] if t["batch"] == i
            )
            theirs = 1000 * sum(t["compute"] for t in peer["tasks"] if t["batch"] == i)
            lines.append(f"| {i} | {ours:.0f} | {theirs:.0f} | {theirs / ours:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    run_modes(__file__, __doc__, MODES, 50_000, run_mode, table)


if __name__ == "__main__":
    main()

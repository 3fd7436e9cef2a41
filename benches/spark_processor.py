"""One StatefulProcessor written against Spark's API (value + list + map state per key) on
kstate's Row and pandas APIs and on Spark's own ``transformWithState`` (Row) and
``transformWithStateInPandas``, same input, same machine, one after the other.

The workload: FILES parquet files of ROWS rows (``user`` ``u<random below KEYS>``, ``category``
one of five, ``amount`` below 1000; seed 7) read one file per trigger (``maxFilesPerTrigger=1``),
``local[2]``, two partitions (shuffle partitions for Spark, ``num_partitions`` for kstate; Spark
with its RocksDB state store provider, kstate with changelogs, exactly once), output mode update
into a parquet sink through ``foreachBatch``, ``availableNow``. Per user the processor keeps its
count and total (value state), its last three amounts (list state) and a count per category (map
state), and emits ``(user, count, total, last three amounts, the counts of this batch's
categories)``. It reads its state, computes, writes its state, and times the reads and writes
(``perf_counter`` around each block: the state calls' share of its time) and its whole handler.
The fifth mode, ``floor``, is the same plan with no state store: ``repartition(2, "user")``
and ``mapInArrow`` running the same logic on dicts the Python worker keeps (no durability, no
exactly once): what Spark's scan, shuffle and Arrow transfer cost alone.

  .venv/bin/python benches/spark_processor.py              # all five modes, the table
  .venv/bin/python benches/spark_processor.py --modes kstate_row,kstate_pandas --repeat 1

Each run is its own Python process (a fresh JVM) printing one JSON line, with a digest of its
whole output (every batch's rows, sorted): every mode's digest must equal every other's and that
of a plain-Python reference computed from the same files. Modes taking under a minute run
``--repeat`` times, interleaved, and their median counts (the 2-core machine is shared). The
parent prints the markdown tables of benches/README.md.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from spark_modes import run_modes

MODES = ("floor", "kstate_row", "kstate_pandas", "spark_row", "spark_pandas")
NO_FIGURES = "kstate_row_nofigures"
"""Not in the table: kstate_row without its figures in the progress (``metrics_name=None``), what
they cost run beside kstate_row (``--modes kstate_row,kstate_row_nofigures``)."""
CATEGORIES = 5
OUTPUT = "user string, count long, total long, recent string, categories string"
OUTPUT_NAMES = [part.split()[0] for part in OUTPUT.split(", ")]
TARGETS = {("kstate_row", "spark_row"): 20.0, ("kstate_row", "spark_pandas"): 10.0}
TARGETS[("kstate_pandas", "spark_pandas")] = 5.0
FLOOR_TARGET = 1.25  # kstate_row's time over the floor's (issue 24)
EQUALS = {True: "yes", False: "NO", None: "not a state result"}


def input_files(files: int, rows: int, keys: int) -> list[dict[str, list]]:
    rnd = random.Random(7)
    return [
        {
            "user": [f"u{rnd.randrange(keys)}" for _ in range(rows)],
            "category": [f"c{rnd.randrange(CATEGORIES)}" for _ in range(rows)],
            "amount": [rnd.randrange(1000) for _ in range(rows)],
        }
        for _ in range(files)
    ]


def reference(inputs: list[dict[str, list]]) -> list[tuple]:
    """Every batch's output rows in plain Python, as ``(batch, *row)``."""
    totals: dict[str, tuple[int, int]] = {}
    recent: dict[str, list[int]] = collections.defaultdict(list)
    categories: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    out = []
    for batch, columns in enumerate(inputs):
        per_user = collections.defaultdict(list)
        for user, category, amount in zip(columns["user"], columns["category"], columns["amount"]):
            per_user[user].append((category, amount))
        for user, pairs in per_user.items():
            count, total = totals.get(user, (0, 0))
            totals[user] = (count + len(pairs), total + sum(a for _, a in pairs))
            recent[user] = (recent[user] + [a for _, a in pairs])[-3:]
            seen = sorted({c for c, _ in pairs})
            categories[user].update(c for c, _ in pairs)
            cats = ",".join(f"{c}:{categories[user][c]}" for c in seen)
            out.append((batch, user, *totals[user], ",".join(map(str, recent[user])), cats))
    return sorted(out)


def digest(rows: list[tuple]) -> str:
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


class Activity:
    """The processor's logic, shared by its Row and pandas forms (Spark binds a processor class
    to one API). ``timings``: where ``close`` leaves what this task spent."""

    def __init__(self, timings: str):
        self.timings = timings

    def init(self, handle):
        self.totals = handle.getValueState("totals", "count long, total long")
        self.recent = handle.getListState("recent", "amount long")
        self.categories = handle.getMapState("categories", "category string", "n long")
        self.keys = 0
        self.state_s = self.handler_s = 0.0

    def apply(self, key, pairs):
        """``pairs``: the key's (category, amount) rows. Returns the output tuple."""
        clock = time.perf_counter
        seen = sorted({c for c, _ in pairs})
        t0 = clock()
        stored = self.totals.get()
        recent = [a for (a,) in self.recent.get()]
        counts = [self.categories.getValue((c,)) for c in seen]
        t1 = clock()
        count, total = stored if stored is not None else (0, 0)
        count, total = count + len(pairs), total + sum(int(a) for _, a in pairs)
        recent = (recent + [int(a) for _, a in pairs])[-3:]
        added = collections.Counter(c for c, _ in pairs)
        counts = [(0 if n is None else n[0]) + added[c] for c, n in zip(seen, counts)]
        t2 = clock()
        self.totals.update((count, total))
        self.recent.put([(a,) for a in recent])
        for c, n in zip(seen, counts):
            self.categories.updateValue((c,), (n,))
        t3 = clock()
        self.keys += 1
        self.state_s += (t1 - t0) + (t3 - t2)
        cats = ",".join(f"{c}:{n}" for c, n in zip(seen, counts))
        return (key[0], count, total, ",".join(map(str, recent)), cats)

    def close(self):
        from pyspark import TaskContext

        context = TaskContext.get()
        if not self.keys or context is None:
            return  # the driver's init (both Spark and kstate call init there)
        batch = context.getLocalProperty("streaming.sql.batchId")
        line = {"batch": int(batch), "keys": self.keys, "state": self.state_s, "handler": self.handler_s}
        path = Path(self.timings) / f"{batch}-{context.partitionId()}-{context.taskAttemptId()}-processor.json"
        path.write_text(json.dumps(line))


def processor(api: str, timings: str):
    """The processor of ``api`` ("row" or "pandas"), a subclass of Spark's StatefulProcessor."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    class RowActivity(Activity, StatefulProcessor):
        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
            started = time.perf_counter()
            out = Row(**dict(zip(OUTPUT_NAMES, self.apply(key, [(r.category, r.amount) for r in rows]))))
            self.handler_s += time.perf_counter() - started
            yield out

    class PandasActivity(Activity, StatefulProcessor):
        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
            import pandas as pd

            started = time.perf_counter()
            pairs = [p for frame in rows for p in zip(frame["category"], frame["amount"])]
            out = pd.DataFrame([self.apply(key, pairs)], columns=OUTPUT_NAMES)
            self.handler_s += time.perf_counter() - started
            yield out

    return (RowActivity if api == "row" else PandasActivity)(timings)


def floor_partition(batches):
    """The floor: the processor's logic on plain dicts a Python worker keeps between tasks, over
    one partition's rows grouped per user. No state store, no durability, no exactly once; and
    as Spark may run a partition's next task in another worker, its output is not a state
    result (not checked against the reference)."""
    import types

    import pyarrow as pa

    held = sys.modules.get("kstate_bench_floor")
    if held is None:
        held = sys.modules["kstate_bench_floor"] = types.ModuleType("kstate_bench_floor")
        held.totals, held.recent, held.categories = {}, {}, collections.defaultdict(collections.Counter)
    per_user = collections.defaultdict(list)
    for batch in batches:
        columns = batch.to_pydict()
        for user, category, amount in zip(columns["user"], columns["category"], columns["amount"]):
            per_user[user].append((category, amount))
    out = {name: [] for name in OUTPUT_NAMES}
    for user, pairs in per_user.items():
        seen = sorted({c for c, _ in pairs})
        count, total = held.totals.get(user, (0, 0))
        count, total = count + len(pairs), total + sum(a for _, a in pairs)
        held.totals[user] = (count, total)
        recent = held.recent[user] = (held.recent.get(user, []) + [a for _, a in pairs])[-3:]
        counts = held.categories[user]
        counts.update(c for c, _ in pairs)
        row = (user, count, total, ",".join(map(str, recent)), ",".join(f"{c}:{counts[c]}" for c in seen))
        for name, value in zip(OUTPUT_NAMES, row):
            out[name].append(value)
    yield pa.RecordBatch.from_pydict(out)


def query_of(mode: str, df, work: Path):
    timings = work / "timings"
    if mode == "floor":
        return df.repartition(2, "user").mapInArrow(floor_partition, OUTPUT)
    api = mode.split("_")[1]
    if mode.startswith("spark"):
        grouped = df.groupBy("user")
        run = grouped.transformWithState if api == "row" else grouped.transformWithStateInPandas
        return run(processor(api, str(timings)), OUTPUT, "Update", "None")
    from kstate.spark import transform_with_state

    def on_task(task, spent):
        line = {"batch": task.batch_id, "open": spent.open, "commit": spent.commit}
        (timings / f"{task.batch_id}-{task.partition}-kstate.json").write_text(json.dumps(line))

    return transform_with_state(
        df, ["user"], processor(api, str(timings)), OUTPUT, work / "state", work / "changelog", "bench",
        num_partitions=2, api=api, on_task=on_task, metrics_name=None if mode == NO_FIGURES else "kstate",
    )  # fmt: skip


def run_mode(mode: str, files: int, rows: int, keys: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kstate.spark import local_session

    work = Path(tempfile.mkdtemp(prefix=f"spark-{mode}-"))
    src = work / "in"
    src.mkdir()
    (work / "timings").mkdir()
    inputs = input_files(files, rows, keys)
    for i, columns in enumerate(inputs):
        path = src / f"part-{i:05d}.parquet"
        pq.write_table(pa.table(columns), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the stream takes the files in this order
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
    schema = "user string, category string, amount long"
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
    sink = str(work / "out")

    def write(frame, batch_id):
        from pyspark.sql import functions as F

        frame.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(sink)

    started = time.perf_counter()
    running = (
        query_of(mode, df, work)
        .writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    running.awaitTermination()
    seconds = time.perf_counter() - started
    batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in running.recentProgress if p["numInputRows"]]
    frame = spark.read.parquet(sink).toPandas()
    got = sorted(
        (int(b), u, int(c), int(t), r, cs)
        for b, u, c, t, r, cs in zip(
            frame["batch"], frame["user"], frame["count"], frame["total"], frame["recent"], frame["categories"]
        )
    )
    expected = reference(inputs)
    tasks: dict[str, dict] = {}
    for path in sorted((work / "timings").glob("*.json")):
        line = json.loads(path.read_text())
        batch, partition = path.name.split("-")[:2]
        tasks.setdefault(f"{batch}-{partition}", {}).update(line)
    result = {
        "mode": mode,
        "rows": files * rows,
        "seconds": seconds,
        "rows_per_s": files * rows / seconds,
        "batch_ms": batch_ms,
        "output_rows": len(got),
        "digest": digest(got),
        "reference_digest": digest(expected),
        "matches_reference": got == expected if mode != "floor" else None,
        "tasks": list(tasks.values()),
    }
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return result


def table(results: list[dict]) -> str:
    by_mode = {r["mode"]: r for r in results}
    lines = [
        "| mode | seconds | rows/s | output rows | output digest | equals reference |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['mode']} | {r['seconds']:.1f} | {r['rows_per_s']:,.0f} | {r['output_rows']:,} | "
            f"`{r['digest']}` | {EQUALS[r['matches_reference']]} |"
        )
    lines += ["", "| ratio | measured | target | met |", "|---|---:|---:|---|"]
    for (ours, theirs), target in TARGETS.items():
        if ours in by_mode and theirs in by_mode:
            ratio = by_mode[ours]["rows_per_s"] / by_mode[theirs]["rows_per_s"]
            met = "yes" if ratio >= target else "no"
            lines.append(f"| {ours} / {theirs} | {ratio:.2f}x | >= {target:.0f}x | {met} |")
    for ours in ("kstate_row", "kstate_pandas"):
        if ours in by_mode and "floor" in by_mode:
            ratio = by_mode[ours]["seconds"] / by_mode["floor"]["seconds"]
            met = "yes" if ratio <= FLOOR_TARGET else "no"
            lines.append(f"| {ours} time / floor time | {ratio:.2f}x | <= {FLOOR_TARGET}x | {met} |")
    lines += [
        "",
        "Where the time goes, all micro-batches (task seconds summed over both partitions; "
        "the batches' wall time from Spark's progress, two task slots):",
        "",
        "| mode | batches' wall s | state calls s | processor's own s | kstate open + commit s | "
        "rest (grouping, Arrow/pandas, Spark) s | state calls us/key |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        wall = sum(r["batch_ms"]) / 1000
        tasks = r["tasks"]
        state = sum(t.get("state", 0) for t in tasks)
        handler = sum(t.get("handler", 0) for t in tasks)
        kstate = sum(t.get("open", 0) + t.get("commit", 0) for t in tasks)
        keys = sum(t.get("keys", 0) for t in tasks)
        rest = 2 * wall - handler - kstate
        lines.append(
            f"| {r['mode']} | {wall:.1f} | {state:.1f} | {handler - state:.1f} | "
            f"{'-' if r['mode'].startswith('spark') else f'{kstate:.1f}'} | {rest:.1f} | "
            f"{1e6 * state / max(keys, 1):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    runs = run_modes(__file__, __doc__, MODES, 20_000, run_mode, table)
    digests = {r["digest"] for m, rs in runs.items() for r in rs if m != "floor"}
    wrong = [m for m, rs in runs.items() for r in rs if r["matches_reference"] is False]
    if len(digests) != 1 or wrong:
        sys.exit(f"results differ: digests {sorted(digests)}, not the reference: {wrong}")


if __name__ == "__main__":
    main()

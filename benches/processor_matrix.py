"""The processor shapes of benches/processor_shapes.py in Spark, each beside its floors, in the
same run (issue 45).

Per shape, the modes:

- ``floor_row``: ``repartition(2, "user")`` + ``mapInArrow``, the shape's logic on dicts the
  Python worker keeps (its ``*Dicts`` class): no state store, the Row API's floor;
- ``kstate_row``: ``transform_with_state(api="row")`` over the shape's processor;
- ``floor_pandas``: ``groupBy("user").applyInPandas``, the same dict logic per key's frame: the
  pandas API's floor (one DataFrame in and out per key is that API's cost, not the store's);
- ``kstate_pandas``: ``transform_with_state(api="pandas")``;
- ``spark_row`` / ``spark_pandas`` (shapes 1, 2 and 5): Spark's ``transformWithState`` /
  ``transformWithStateInPandas`` with its RocksDB state store provider;
- ``rocksdict_row`` (shapes without event time): RocksDB hand-rolled as users write it without
  kstate: the floor's task with each user's state (its entries in the shape's dicts) in one
  pickled record of a rocksdict ``Rdict`` per partition, one multi-get and one write batch a
  task, RocksDB's WAL off; no changelog, no undo, no recovery;
- ``kstate_row_record`` (shapes 2, 7a and 7b): ``transform_with_state(api="row")`` over the
  shape's logic with a user's whole state in one value variable (``Shape.record_state``: a
  struct holding an array and a map), as a user can write it: what one entry a key costs.

Every run is its own process and JVM (``local[2]``, 2 partitions, ``maxFilesPerTrigger=1``,
``availableNow``, output mode update into parquet through ``foreachBatch``); shape 5 runs in
event time (``withWatermark("ts", "1 second")`` for Spark, ``event_time_column="ts"`` for
kstate) with batches without data off in both (``spark.sql.streaming.noDataMicroBatches.enabled``
false, ``fire_idle_timers=False``). Every state result (kstate's, Spark's) is checked equal to
the shape's reference (its dict logic run in one process); the floors' outputs are not state
results (a partition's next task may run in the other worker, whose dicts lack its keys) and
are not checked.

  .venv/bin/python benches/processor_matrix.py                           # every shape, 3 rounds
  .venv/bin/python benches/processor_matrix.py --shapes 2,7b --repeat 1
  .venv/bin/python benches/processor_matrix.py --old /tmp/venv-old/bin/python   # old vs new

``--old PYTHON``: the kstate modes run under that interpreter too (its installed kstate: the
old wheel), alternating with this one run by run (old first in every other round); the floors
and Spark's modes run under this one. Spark's modes run in the first round only (each takes
minutes). Medians of the rounds are printed as markdown tables, with the load average at each
run's start and end. Each run's line on stderr gives its micro-batches' ``triggerExecution`` ms
too: the first holds the JVM's warm-up and the Python workers' start, the others what a batch
costs; and their ``addBatch`` ms, the batch's job alone (the tasks, the sink's write), without
Spark's planning and its offset and commit logs. And its CPU seconds, the JVM's and its Python
workers' (``process_tree_cpu``), with a table of their medians per mode and kstate_row's wall
time over the floor's round by round: on a host whose load moves a run's wall time by seconds,
the workers' CPU is what a mode's Python side costs, steadily.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from processor_shapes import INPUT, SHAPES, WATERMARK_DELAY_MS, Shape, input_files, reference  # noqa: E402

MODES = (
    "floor_row", "kstate_row", "floor_pandas", "kstate_pandas", "spark_row", "spark_pandas", "rocksdict_row",
    "kstate_row_record",
)  # fmt: skip
TARGET = 1.25
"""kstate's time over its API's floor (issue 45)."""


def processor(shape: Shape, api: str):
    """The shape's processor on ``api`` ("row" or "pandas"), a subclass of Spark's
    StatefulProcessor: its logic (``shape.state``) given each key's ``(category, amount, ms)``."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    logic_class, names = shape.state, shape.output_names

    class RowProcessor(StatefulProcessor):
        def init(self, handle):
            self.logic = logic_class()
            self.logic.init(handle)
            self.out = Row(*names)

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
            out = self.out
            for row in self.logic.on_input(key[0], [(r.category, r.amount, r.ms) for r in rows]):
                yield out(*row)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
            out = self.out
            for row in self.logic.on_timer(key[0], expiredTimerInfo.getExpiryTimeInMs()):
                yield out(*row)

        def close(self):
            pass

    class PandasProcessor(StatefulProcessor):
        def init(self, handle):
            self.logic = logic_class()
            self.logic.init(handle)

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
            import pandas as pd

            batch = []
            for frame in rows:
                batch += zip(frame["category"].tolist(), frame["amount"].tolist(), frame["ms"].tolist())
            out = self.logic.on_input(key[0], batch)
            if out:
                yield pd.DataFrame(out, columns=names)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
            import pandas as pd

            yield pd.DataFrame(self.logic.on_timer(key[0], expiredTimerInfo.getExpiryTimeInMs()), columns=names)

        def close(self):
            pass

    return RowProcessor() if api == "row" else PandasProcessor()


_HELD: dict[str, object] = {}
"""The floors' dict logic per shape, kept by the Python worker between tasks."""
_MAX_EVENT_TIME: dict[int, int] = {}
"""Per batch id, the largest event time this worker saw (the floors' watermark)."""
_FIRED: set[int] = set()


def _floor_logic(shape: Shape):
    logic = _HELD.get(shape.name)
    if logic is None:
        logic = _HELD[shape.name] = shape.dicts()
    return logic


def _batch_and_watermark() -> tuple[int, int]:
    """The task's batch id and the watermark the worker's own rows of earlier batches give."""
    from pyspark import TaskContext

    batch = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
    earlier = [ms for b, ms in _MAX_EVENT_TIME.items() if b < batch]
    return batch, (max(earlier) - WATERMARK_DELAY_MS if earlier else -1)


def rows_per_user(batches, event_time: bool) -> tuple[dict, int | None]:
    """A task's input rows ``(category, amount, ms)`` grouped per user, and (event time) the
    largest event time among them."""
    import collections

    per_user = collections.defaultdict(list)
    largest = None
    for batch in batches:
        columns = batch.to_pydict()
        rows = zip(columns["category"], columns["amount"], columns["ms"])
        for user, row in zip(columns["user"], rows):
            per_user[user].append(row)
        if event_time and columns["ms"]:
            largest = max(largest or 0, max(columns["ms"]))
    return per_user, largest


def output_batch(shape: Shape, out: list[tuple]):
    """The shape's output rows ``out`` as one Arrow record batch."""
    import pyarrow as pa

    schema = arrow_schema(shape)
    columns = list(zip(*out)) if out else [[] for _ in schema]
    return pa.RecordBatch.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, schema)], schema=schema)


def floor_row(shape: Shape):
    """The Row API's floor: the task function of ``mapInArrow``, the shape's dict logic over the
    partition's rows grouped per user, then (event time) the due timers."""

    def task(batches):
        logic = _floor_logic(shape)
        per_user, largest = rows_per_user(batches, shape.event_time)
        out = []
        for user, rows in per_user.items():
            out += logic.on_input(user, rows)
        if shape.event_time:
            batch_id, watermark = _batch_and_watermark()
            out += logic.fire(watermark)
            if largest is not None:
                _MAX_EVENT_TIME[batch_id] = max(_MAX_EVENT_TIME.get(batch_id, largest), largest)
        yield output_batch(shape, out)

    return task


def rocksdict_row(shape: Shape, root: str):
    """Hand-rolled RocksDB: the floor's task with each user's entries in the shape's dicts kept
    in one pickled record of a rocksdict ``Rdict`` per partition under ``root``, read with one
    multi-get and written with one write batch (WAL off) a task."""

    def task(batches):
        import pickle

        from pyspark import TaskContext
        from rocksdict import Options, Rdict, WriteBatch, WriteOptions

        per_user, _ = rows_per_user(batches, False)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        db = Rdict(f"{root}/{TaskContext.get().partitionId()}", options)
        logic = shape.dicts()
        held = {name: entries for name, entries in vars(logic).items() if isinstance(entries, dict)}
        users = list(per_user)
        for user, stored in zip(users, db[[user.encode() for user in users]]):
            for name, value in pickle.loads(stored).items() if stored is not None else ():
                held[name][user] = value
        out, writes = [], WriteBatch(raw_mode=True)
        for user, rows in per_user.items():
            out += logic.on_input(user, rows)
            record = {name: entries[user] for name, entries in held.items() if user in entries}
            if record:
                writes.put(user.encode(), pickle.dumps(record, protocol=5))
            else:
                writes.delete(user.encode())
        no_wal = WriteOptions()
        no_wal.disable_wal = True
        db.write(writes, no_wal)
        db.close()
        yield output_batch(shape, out)

    return task


def floor_pandas(shape: Shape):
    """The pandas API's floor: the function of ``groupBy("user").applyInPandas``, the shape's
    dict logic over one key's frame. applyInPandas has no end of task: with event time, a
    worker's first group of each batch fires the timers the previous batch's end would have
    (the same work, one batch later; the last batch's are not fired)."""
    import pandas as pd

    names = shape.output_names
    kinds = {"string": object, "long": "int64"}  # typed: Spark refuses an empty frame of object columns as longs
    empty = pd.DataFrame({name: pd.Series([], dtype=kinds[kind]) for name, kind in _columns(shape)})

    def group(key, frame):
        logic = _floor_logic(shape)
        rows = list(zip(frame["category"].tolist(), frame["amount"].tolist(), frame["ms"].tolist()))
        out = []
        if shape.event_time:
            batch_id, _ = _batch_and_watermark()
            if batch_id not in _FIRED:
                _FIRED.add(batch_id)
                earlier = [ms for b, ms in _MAX_EVENT_TIME.items() if b < batch_id - 1]
                out += logic.fire(max(earlier) - WATERMARK_DELAY_MS if earlier else -1)
            if rows:
                largest = max(ms for _, _, ms in rows)
                _MAX_EVENT_TIME[batch_id] = max(_MAX_EVENT_TIME.get(batch_id, largest), largest)
        out += logic.on_input(key[0], rows)
        return pd.DataFrame(out, columns=names) if out else empty

    return group


def _columns(shape: Shape) -> list[tuple[str, str]]:
    """``(name, type)`` of the shape's output columns (its DDL)."""
    return [tuple(part.split()) for part in shape.output.split(", ")]


def arrow_schema(shape: Shape):
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64()}
    return pa.schema([(name, types[kind]) for name, kind in _columns(shape)])


def query_of(shape: Shape, mode: str, df, work: Path):
    if not shape.event_time:
        df = df.drop("ts")  # only shape 5 reads it; every mode gets the same columns
    if mode == "floor_row":
        return df.repartition(2, "user").mapInArrow(floor_row(shape), shape.output)
    if mode == "floor_pandas":
        return df.groupBy("user").applyInPandas(floor_pandas(shape), shape.output)
    if mode == "rocksdict_row":
        return df.repartition(2, "user").mapInArrow(rocksdict_row(shape, str(work / "rocksdict")), shape.output)
    api = mode.split("_")[1]
    if mode == "kstate_row_record":
        shape = shape.in_one_value()
    time_mode = "EventTime" if shape.event_time else "None"
    if mode.startswith("spark"):
        if shape.event_time:
            df = df.withWatermark("ts", f"{WATERMARK_DELAY_MS} milliseconds")
        grouped = df.groupBy("user")
        run = grouped.transformWithState if api == "row" else grouped.transformWithStateInPandas
        return run(processor(shape, api), shape.output, "Update", time_mode)
    from kstate.spark import transform_with_state

    timing = {"event_time_column": "ts", "watermark_delay_ms": WATERMARK_DELAY_MS} if shape.event_time else {}
    return transform_with_state(
        df, ["user"], processor(shape, api), shape.output, work / "state", work / "changelog", "bench",
        num_partitions=2, api=api, time_mode=time_mode, fire_idle_timers=False, **timing,
    )  # fmt: skip


def process_tree_cpu(root: int) -> tuple[float, float]:
    """CPU seconds (user + system) of process ``root`` (the JVM) and of all its descendants (the
    Python daemon and workers; with the children they reaped), read from ``/proc``: far steadier
    than a run's wall time on a loaded host, and split by side."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, ticks = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # the name may hold spaces
        except OSError:
            continue  # exited meanwhile
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = [int(x) for x in fields[11:15]]  # utime stime cutime cstime

    def below_root(pid: int) -> bool:
        while pid in parents and pid != root:
            pid = parents[pid]
        return pid == root

    descendants = sum(sum(t) for pid, t in ticks.items() if pid != root and below_root(pid))
    return sum(ticks[root][:2]) / tick, descendants / tick


def digest(rows: list[tuple]) -> str:
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def run_mode(shape: Shape, mode: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The workers import this directory's modules (the shapes' logic) by name.
    here = str(Path(__file__).parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    from kstate.spark import local_session

    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix=f"shape-{shape.name}-{mode}-"))
    src = work / "in"
    src.mkdir()
    inputs = input_files(shape)
    for i, columns in enumerate(inputs):
        table = pa.table({**columns, "ts": pa.array(columns["ms"], pa.timestamp("ms", tz="UTC"))})
        path = src / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the stream takes the files in this order
    conf = {
        "spark.sql.shuffle.partitions": 2,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
    }
    spark = local_session(f"shape-{shape.name}-{mode}", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).parquet(str(src))
    sink = str(work / "out")

    def write(frame, batch_id):
        from pyspark.sql import functions as F

        frame.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(sink)

    started = time.perf_counter()
    running = (
        query_of(shape, mode, df, work)
        .writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    running.awaitTermination()
    seconds = time.perf_counter() - started
    progress = [p for p in running.recentProgress if p["numInputRows"]]
    batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    add_batch_ms = [p["durationMs"].get("addBatch", 0) for p in progress]
    names = shape.output_names
    got = sorted((int(r["batch"]), *(r[n] for n in names)) for r in spark.read.parquet(sink).collect())
    expected = reference(shape, inputs)
    jvm_cpu, workers_cpu = process_tree_cpu(spark.sparkContext._gateway.proc.pid)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "shape": shape.name,
        "mode": mode,
        "seconds": seconds,
        "batch_ms": batch_ms,
        "add_batch_ms": add_batch_ms,
        "output_rows": len(got),
        "digest": digest(got),
        "matches_reference": None if mode.startswith("floor") else got == expected,
        "load": [load, os.getloadavg()[0]],
        "cpu": {"jvm": jvm_cpu, "workers": workers_cpu},
        "kstate": str(Path(sys.modules["kstate"].__file__).parent),  # which wheel ran
    }


def scaled(shape: Shape, scale: float) -> Shape:
    """``shape`` with ``scale`` times its rows and keys (at least 50 keys): a quick check."""
    if scale == 1:
        return shape
    keys = max(50, int(shape.keys * scale)) if shape.keys > 50 else shape.keys
    return dataclasses.replace(shape, rows=max(keys, int(shape.rows * scale)), keys=keys)


def run_one(python: str, shape: str, mode: str, scale: float = 1.0) -> dict | None:
    command = [python, __file__, "--one", f"{shape}:{mode}", "--scale", str(scale)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"[matrix] shape {shape} {mode} ({python}) failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    result = json.loads(lines[-1])
    print(
        f"[matrix] shape {shape} {mode} ({python}): {result['seconds']:.1f} s "
        f"(batches {', '.join(str(ms) for ms in result['batch_ms'])} ms; "
        f"their addBatch {', '.join(str(ms) for ms in result.get('add_batch_ms', []))} ms), "
        f"equals reference: {result['matches_reference']}, load {result['load'][0]:.1f}-{result['load'][1]:.1f}, "
        f"CPU: JVM {result['cpu']['jvm']:.1f} s, Python workers {result['cpu']['workers']:.1f} s, "
        f"kstate from {result['kstate']}",
        file=sys.stderr,
        flush=True,
    )
    return result


def median(runs: list[dict]) -> float | None:
    return statistics.median(r["seconds"] for r in runs) if runs else None


def tables(runs: dict[tuple[str, str], list[dict]], shapes: list[str], old: bool) -> str:
    def cell(shape: str, mode: str) -> str:
        rs = runs.get((shape, mode), [])
        return ", ".join(f"{r['seconds']:.1f}" for r in rs) if rs else "-"

    def ratio(shape: str, mode: str, floor: str) -> str:
        ours, theirs = median(runs.get((shape, mode), [])), median(runs.get((shape, floor), []))
        if ours is None or theirs is None:
            return "-"
        return f"{ours / theirs:.2f}x" + ("" if ours / theirs <= TARGET else " (missed)")

    lines = []
    for api in ("row", "pandas"):
        versions = ["kstate_" + api + "@old", "kstate_" + api] if old else ["kstate_" + api]
        header = "| shape | floor s | " + " | ".join(f"{v} s" for v in versions) + " | "
        header += " | ".join(f"{v} / floor" for v in versions) + f" | spark_{api} s | spark_{api} / kstate_{api} |"
        if api == "row":
            header += " rocksdict_row s | kstate_row / rocksdict_row |"
            header += " kstate_row_record s | kstate_row_record / floor |"
        lines += [f"**{api} API** (medians; runs in brackets; target <= {TARGET}x the floor)", "", header]
        lines.append("|---|---:|" + "---:|" * (2 * len(versions) + 2 + 4 * (api == "row")))
        for shape in shapes:
            floor = f"floor_{api}"
            parts = [f"{shape}", f"{median(runs.get((shape, floor), [])) or 0:.1f} ({cell(shape, floor)})"]
            parts += [f"{median(runs.get((shape, v), [])) or 0:.1f} ({cell(shape, v)})" for v in versions]
            parts += [ratio(shape, v, floor) for v in versions]
            spark = median(runs.get((shape, f"spark_{api}"), []))
            ours = median(runs.get((shape, f"kstate_{api}"), []))
            parts += [f"{spark:.1f}" if spark else "-", f"{spark / ours:.2f}x" if spark and ours else "-"]
            if api == "row":
                peer = median(runs.get((shape, "rocksdict_row"), []))
                parts += [f"{peer:.1f} ({cell(shape, 'rocksdict_row')})" if peer else "-"]
                parts += [f"{ours / peer:.2f}x" if peer and ours else "-"]
                record = median(runs.get((shape, "kstate_row_record"), []))
                parts += [f"{record:.1f} ({cell(shape, 'kstate_row_record')})" if record else "-"]
                parts += [ratio(shape, "kstate_row_record", floor) if record else "-"]
            lines.append("| " + " | ".join(parts) + " |")
        lines.append("")
    lines += cpu_table(runs, shapes)
    wrong = [f"{k[0]}:{k[1]}" for k, rs in runs.items() for r in rs if r["matches_reference"] is False]
    lines.append("state results not equal to the reference: " + (", ".join(wrong) if wrong else "none"))
    loads = [x for rs in runs.values() for r in rs for x in r["load"]]
    lines.append(f"load average (1 min) at the runs' starts and ends: {min(loads):.1f}-{max(loads):.1f}")
    return "\n".join(lines)


def cpu_table(runs: dict[tuple[str, str], list[dict]], shapes: list[str]) -> list[str]:
    """Medians of each mode's CPU seconds, the JVM's and its Python workers' (the process tree
    Spark starts): what a mode costs, with the host's load on the run's wall time taken out.
    Beside them kstate_row's wall time over the floor's round by round (the runs alternate, so
    a round's two runs met the same load)."""
    modes = sorted({mode for _, mode in runs}, key=lambda m: (not m.startswith("floor"), m))
    if not modes:
        return []

    def cpu(shape: str, mode: str, side: str) -> float | None:
        rs = runs.get((shape, mode), [])
        return statistics.median(r["cpu"][side] for r in rs) if rs else None

    lines = ["**CPU seconds** (medians: the JVM / its Python workers)", ""]
    lines.append(
        "| shape | " + " | ".join(modes) + " | Python workers: kstate_row / floor_row | wall, round by round |"
    )
    lines.append("|---|" + "---:|" * (len(modes) + 2))
    for shape in shapes:
        cells = []
        for mode in modes:
            jvm, workers = cpu(shape, mode, "jvm"), cpu(shape, mode, "workers")
            cells.append("-" if jvm is None else f"{jvm:.1f} / {workers:.1f}")
        ours, floor = cpu(shape, "kstate_row", "workers"), cpu(shape, "floor_row", "workers")
        cells.append(f"{ours / floor:.2f}x" if ours and floor else "-")
        floors = {r["round"]: r["seconds"] for r in runs.get((shape, "floor_row"), [])}
        ours_by_round = [(r["round"], r["seconds"]) for r in runs.get((shape, "kstate_row"), [])]
        rounds = [seconds / floors[n] for n, seconds in ours_by_round if n in floors]
        cells.append(", ".join(f"{ratio:.2f}x" for ratio in rounds) or "-")
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old", help="an interpreter whose kstate is the old wheel: kstate modes run under both")
    parser.add_argument("--scale", type=float, default=1.0, help="rows and keys times this (a quick check)")
    parser.add_argument("--first-round", type=int, default=0, help="the first round's number (runs split over calls)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        shape, mode = args.one.split(":")
        print(json.dumps(run_mode(scaled(SHAPES[shape], args.scale), mode)))
        return
    shapes = args.shapes.split(",")
    modes = args.modes.split(",")
    runs: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.first_round, args.first_round + args.repeat):
        for shape in shapes:
            for mode in modes:
                if mode.startswith("spark") and (round_ or not SHAPES[shape].spark):
                    continue
                if mode == "rocksdict_row" and SHAPES[shape].event_time:
                    continue
                if mode == "kstate_row_record" and SHAPES[shape].record_state is None:
                    continue
                pythons = [(mode, sys.executable)]
                if args.old and mode.startswith("kstate"):
                    pythons.append((mode + "@old", args.old))
                    pythons = pythons[::-1] if round_ % 2 == 0 else pythons
                for label, python in pythons:
                    result = run_one(python, shape, mode, args.scale)
                    if result is not None:
                        runs.setdefault((shape, label), []).append({**result, "round": round_})
    print(tables(runs, shapes, args.old is not None))
    if any(r["matches_reference"] is False for rs in runs.values() for r in rs):
        sys.exit("a state result differs from the reference")


if __name__ == "__main__":
    main()

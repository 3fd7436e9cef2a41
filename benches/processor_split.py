"""Where kstate's Row ``transform_with_state`` spends a task's time, per part, outside Spark.

benches/spark_processor.py's workload (its processor, its input: FILES micro-batches of ROWS
rows, KEYS users) runs through the very task function ``transform_with_state(api="row")`` hands
to ``mapInArrow``: a local Spark session plans the query (driver side only), the task function is
taken from the plan's ``mapInArrow`` call, and each micro-batch's two partitions (rows routed by
Spark's hash, as ``repartition(2, "user")`` routes them) run in this process, one task after the
other, with real stores, changelogs and batch log. No code of kstate is changed or replaced: the
task runs under ``cProfile`` and its time is attributed to kstate's functions by part:

- routing checks (``verify_batch``, every row's hash), grouping (sort, bounds, keys), Row
  construction (``python_rows``), read-ahead (pickled keys, ``get_many``), state calls by kind,
  the processor's own logic (the rest of ``handleInputRows``), output conversion, stores' open,
  commit split into undo files, changelog publication, batch log entry, local commit.

  .venv/bin/python benches/processor_split.py                     # 4 x 40,000 rows, 8,000 keys
  .venv/bin/python benches/processor_split.py --rows 100000 --keys 20000
  .venv/bin/python benches/processor_split.py --move              # every task reopens its stores
  .venv/bin/python benches/processor_split.py --floor             # the floor's task on the same input

``--floor`` runs benches/spark_processor.py's floor (``floor_partition``: the same logic on dicts
the worker keeps, no state store) on the same routed batches, split into its parts the same way
(``FLOOR_PARTS``): what kstate Row's parts compare with.

``--move`` releases each task's parked stores after it, as when Spark hands the partition's next
task to another Python worker (with ``local[2]`` it often does): every task opens its stores.

Profiled seconds are inflated by cProfile's per-call cost (most where calls are many and
short); the unprofiled task seconds (and the task thread's CPU seconds, which other processes'
load moves less) are printed beside them, and the shares are what to compare.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from spark_processor import OUTPUT, floor_partition, input_files, processor  # noqa: E402

# (part, file, function names): a function is matched by its file (a path suffix; "~" for a
# native method, matched by name) and name; cumulative seconds, minus the parts nested in them
# (``parts_of``).
PARTS = [
    ("routing checks", "routing/partitioning.py", ("verify_batch", "checked_batches")),
    ("Row construction", "routing/groups.py", ("python_rows",)),
    ("grouping (sort, bounds, keys)", "routing/groups.py", ("iter_groups",)),
    ("read-ahead (pickle keys, get_many, list / map scans)", "processor/processor.py", ("read_ahead",)),
    ("value get", "processor/state_variables.py", ("ValueState.get",)),
    ("value update", "processor/state_variables.py", ("ValueState.update",)),
    ("list get", "processor/state_variables.py", ("ListState.get",)),
    ("list put", "processor/state_variables.py", ("ListState.put",)),
    ("map getValue", "processor/state_variables.py", ("MapState.getValue",)),
    ("map updateValue", "processor/state_variables.py", ("MapState.updateValue",)),
    ("processor's own logic", "spark_processor.py", ("handleInputRows",)),
    ("output conversion", "routing/groups.py", ("OutputBatcher.add", "OutputBatcher.flush")),
    ("open (locks, stores)", "protocol/exactly_once.py", ("PartitionState.open",)),
    ("commit: undo files", "protocol/undo.py", ("previous_values", "write")),
    ("commit: changelog publish", "~", ("publish",)),
    ("commit: batch log entry", "protocol/batch_log.py", ("append",)),
    ("commit: local commit", "~", ("commit_published",)),
    (
        "figures: row counts (staged writes, counts file)",
        "protocol/row_counts.py",
        ("RowCounts.opened", "RowCounts.staged", "RowCounts.committed"),
    ),
    ("figures: the task's figures", "protocol/progress.py", ("task_figures",)),
    ("commit: rest (memory sample, park)", "protocol/exactly_once.py", ("PartitionState.commit",)),
    ("release (--move: the parked stores closed)", "protocol/idle.py", ("release",)),
]

FLOOR_PARTS = [
    ("grouping + logic on dicts, Arrow in and out", "spark_processor.py", ("floor_partition",)),
]
"""cProfile does not see pyarrow's Cython methods (``to_pydict``, ``from_pydict``): the floor's
task is one part."""


def route(columns: dict[str, list], partitions: int) -> list[list]:
    """Each partition's Arrow record batches of one micro-batch, routed by Spark's hash."""
    import pyarrow as pa

    from kstate.spark.routing.hashing import partition_ids

    table = pa.table({"user": columns["user"], "category": columns["category"], "amount": columns["amount"]})
    ids = partition_ids([table.column("user")], partitions)
    out = []
    for p in range(partitions):
        part = table.filter(pa.array(ids == p))
        out.append(part.to_batches(max_chunksize=10_000))
    return out


def task_function(work: Path, timings: Path):
    """``(backend, process)`` of the Row query over the bench's processor, as its task runs them."""
    from kstate.spark import local_session, transform_with_state

    spark = local_session("processor-split", conf={"spark.sql.shuffle.partitions": 2})
    df = spark.createDataFrame([], "user string, category string, amount long")
    captured = {}
    frame_class = type(df)  # PySpark 4's classic DataFrame
    original = frame_class.mapInArrow

    def capture(self, fn, schema, *args, **kwargs):
        captured["task"] = fn
        return original(self, fn, schema, *args, **kwargs)

    frame_class.mapInArrow = capture
    try:
        transform_with_state(
            df, ["user"], processor("row", str(timings)), OUTPUT, work / "state", work / "changelog", "bench",
            num_partitions=2, api="row",
        )  # fmt: skip
    finally:
        frame_class.mapInArrow = original
    task = captured["task"]  # StateBackend.map_observed's
    cells = dict(zip(task.__code__.co_freevars, (c.cell_contents for c in task.__closure__)))
    return spark, cells["self"], cells["fn"], cells["arrow_schema"]


def observed_task(backend, process, arrow_schema, batches, task):
    """What ``map_observed``'s task function runs, for a given ``TaskInfo``: the processor's
    ``process`` in ``backend.process``, then the task's figures row."""
    from kstate.spark.engine.observed import with_figures
    from kstate.spark.protocol.progress import ProcessorCounts, task_figures

    counts, figures = ProcessorCounts(), []

    def committed(timings, partitions):
        figures.append(task_figures(timings, partitions, counts))

    run = backend.process(lambda rows, stores: process(rows, stores, counts), batches, task=task, committed=committed)
    return with_figures(run, arrow_schema, lambda: figures[0])


def first_line(where: str, qualified: str) -> int:
    """The first line of method ``Class.name`` of kstate's module at ``where`` (cProfile tells
    methods of one name apart by line only)."""
    import importlib

    module = importlib.import_module("kstate.spark." + where.removesuffix(".py").replace("/", "."))
    owner, name = qualified.split(".")
    return getattr(module, owner).__dict__[name].__code__.co_firstlineno


def matched(stats: pstats.Stats, table: list) -> dict[str, float]:
    """Cumulative seconds of each part of ``table`` (``PARTS``' shape) in the profile. Method
    names are matched without their class (cProfile keeps only the function's name)."""
    raw = stats.stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    parts: dict[str, float] = {}
    for part, where, names in table:
        bare = {n.split(".")[-1] for n in names}
        lines = {line for n in names if "." in n for line in [first_line(where, n)]}
        total = 0.0
        for (file, line, fn), (_, _, _, ct, _) in raw.items():
            if where == "~":
                hit = file == "~" and any(f"'{n}'" in fn for n in bare)
            else:
                hit = file.endswith(where) and fn in bare and (not lines or line in lines)
            total += ct if hit else 0.0
        parts[part] = total
    return parts


def parts_of(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per part from the profile (nested parts subtracted from their parents)."""
    parts = matched(stats, PARTS)
    parts["grouping (sort, bounds, keys)"] -= (
        parts["Row construction"] + parts["read-ahead (pickle keys, get_many, list / map scans)"]
    )
    state = sum(seconds for part, seconds in parts.items() if part.split()[0] in ("value", "list", "map"))
    parts["processor's own logic"] -= state
    parts["commit: rest (memory sample, park)"] -= sum(
        s for p, s in parts.items() if p.startswith("commit: ") and "rest" not in p
    )
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--keys", type=int, default=8_000)
    parser.add_argument("--move", action="store_true", help="every task opens its stores (moved partitions)")
    parser.add_argument("--floor", action="store_true", help="the floor's task (no state store) instead")
    parser.add_argument("--dump", help="write the whole profile here (pstats)")
    args = parser.parse_args()

    from kstate.spark import TaskInfo
    from kstate.spark.protocol.idle import IDLE, release

    inputs = input_files(args.files, args.rows, args.keys)
    totals: dict[str, float] = {}
    task_seconds = {"profiled": 0.0, "unprofiled": 0.0, "unprofiled CPU": 0.0}
    whole = pstats.Stats()
    for profiled in (False, True):
        work = Path(tempfile.mkdtemp(prefix="processor-split-"))
        sys.modules.pop("kstate_bench_floor", None)  # the floor's dicts start empty in each pass
        (work / "timings").mkdir()
        spark, backend, process, arrow_schema = task_function(work, work / "timings")
        profile = cProfile.Profile()
        for batch_id, columns in enumerate(inputs):
            for partition, batches in enumerate(route(columns, 2)):
                task = TaskInfo(partition, batch_id, attempt=batch_id * 2 + partition)
                started, cpu_started = time.perf_counter(), time.thread_time()
                if profiled:
                    profile.enable()
                if args.floor:
                    run = floor_partition(iter(batches))
                else:
                    run = observed_task(backend, process, arrow_schema, iter(batches), task)
                for _ in run:
                    pass
                if args.move:  # as the other worker does when this partition's next task asks
                    release(IDLE.take(backend.current_layout().task_dir(partition)))
                if profiled:
                    profile.disable()
                task_seconds["profiled" if profiled else "unprofiled"] += time.perf_counter() - started
                if not profiled:
                    task_seconds["unprofiled CPU"] += time.thread_time() - cpu_started
        if profiled:
            stats = pstats.Stats(profile)
            whole = stats
            totals = matched(stats, FLOOR_PARTS) if args.floor else parts_of(stats)
            profiled_total = sum(v[2] for v in stats.stats.values())
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.dump:
        whole.dump_stats(args.dump)
    known = sum(totals.values())
    moved = ", stores released after each task" if args.move else ""
    moved += ", the floor's task" if args.floor else ""
    print(f"{args.files} x {args.rows:,} rows, {args.keys:,} keys, 2 partitions, tasks run one after the other{moved}")
    print(
        f"task seconds: unprofiled {task_seconds['unprofiled']:.2f} (CPU of the task thread "
        f"{task_seconds['unprofiled CPU']:.2f}), profiled {task_seconds['profiled']:.2f}"
    )
    print()
    print("| part | profiled s | share |")
    print("|---|---:|---:|")
    for part, seconds in [*totals.items(), ("other (unattributed)", profiled_total - known)]:
        print(f"| {part} | {seconds:.2f} | {100 * seconds / profiled_total:.0f}% |")
    print(f"| all | {profiled_total:.2f} | 100% |")


if __name__ == "__main__":
    main()

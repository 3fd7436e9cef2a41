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

``--shape NAME`` runs a shape of benches/processor_shapes.py instead (its processor as
benches/processor_matrix.py runs it, its input), on ``--api row`` or ``pandas``; the parts then
include every kind of state call a shape makes (list appends and clears, map ``containsKey``,
map walks, timers in the handlers and the batch's firing, the TTL sweep), the store iterators
opened within them, and the seconds Python's cyclic GC took (``gc.callbacks``, unprofiled pass).

  .venv/bin/python benches/processor_split.py --shape 2
  .venv/bin/python benches/processor_split.py --shape 5 --api pandas
  .venv/bin/python benches/processor_split.py --shape 3 --floor   # the shape's Row floor
  .venv/bin/python benches/processor_split.py --shape 7a --record  # a user's state in one value

``--scale F`` takes F times a shape's rows and keys; ``--unprofiled`` runs the unprofiled pass
alone and prints its task seconds, for a profiler outside (instructions of the whole process,
whose start is the same in every run, so two builds' totals differ by their tasks'):

  valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
      .venv/bin/python benches/processor_split.py --shape 7a --scale 0.1 --unprofiled

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
import gc
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from processor_matrix import _HELD as held_dicts  # noqa: E402
from processor_matrix import floor_row as shape_floor  # noqa: E402
from processor_matrix import processor as shape_processor  # noqa: E402
from processor_matrix import scaled  # noqa: E402
from processor_shapes import INPUT, SHAPES, WATERMARK_DELAY_MS  # noqa: E402
from processor_shapes import input_files as shape_input  # noqa: E402
from spark_processor import OUTPUT, floor_partition, input_files, processor  # noqa: E402

# (part, file, function names): a function is matched by its file (a path suffix; "~" for a
# native method, matched by name) and name; cumulative seconds, minus the parts nested in them
# (``parts_of``).
PARTS = [
    ("routing checks", "routing/partitioning.py", ("verify_batch", "checked_batches")),
    ("Row construction", "routing/groups.py", ("python_rows",)),
    ("grouping (sort, bounds, keys; pandas: per-key frames)", "routing/groups.py", ("iter_groups",)),
    ("pandas: a key's frames cut to Spark's batch limits", "format/conversion.py", ("chunks",)),
    ("read-ahead (pickle keys, get_many, list / map scans)", "processor/processor.py", ("read_ahead",)),
    ("value get", "processor/state_variables.py", ("ValueState.get", "~ValueCalls.get")),
    ("value update", "processor/state_variables.py", ("ValueState.update", "~ValueCalls.update")),
    ("value clear", "processor/state_variables.py", ("ValueState.clear",)),
    ("list get", "processor/state_variables.py", ("ListState.get", "~ListCalls.get")),
    ("list put", "processor/state_variables.py", ("ListState.put", "~ListCalls.put")),
    ("list appendValue / appendList", "processor/state_variables.py",
     ("ListState.appendValue", "ListState.appendList", "~ListCalls.appendValue")),
    ("list clear", "processor/state_variables.py", ("ListState.clear",)),
    ("map getValue", "processor/state_variables.py", ("MapState.getValue", "~MapCalls.getValue")),
    ("map containsKey", "processor/state_variables.py", ("MapState.containsKey", "~MapCalls.containsKey")),
    ("map updateValue", "processor/state_variables.py", ("MapState.updateValue", "~MapCalls.updateValue")),
    ("map iterator / keys / values (walked)", "processor/state_variables.py",
     ("MapState.iterator", "<genexpr>", "~MapCalls.iterator", "~MapCalls.keys", "~MapCalls.values")),
    ("timers: listTimers / deleteTimer / registerTimer in the handlers", "processor/state_variables.py",
     ("StatefulProcessorHandle.listTimers", "StatefulProcessorHandle.deleteTimer",
      "StatefulProcessorHandle.registerTimer"), ("not", "processor/processor.py")),
    ("timers: firing (due, still set, deleted after the handler, next)", "processor/state_variables.py",
     ("StatefulProcessorHandle.due_timers", "StatefulProcessorHandle.has_timer",
      "StatefulProcessorHandle.next_timer", "StatefulProcessorHandle.deleteTimer"), ("only", "processor/processor.py")),
    ("TTL: the batch's sweep (index entries are in the writes)", "processor/state_variables.py",
     ("StatefulProcessorHandle.remove_expired",)),
    ("processor's own logic", ("spark_processor.py", "processor_matrix.py"), ("handleInputRows", "handleExpiredTimer")),
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
]  # fmt: skip
WITHIN_HANDLERS = ("value ", "list ", "map ", "timers: listTimers")
"""The parts a processor's handlers call (subtracted from the processor's own logic)."""
ITERATORS = ("of these, store iterators opened (prefix_scan, range, reverse_range, all)", "kstate/store_reads.py",
             ("prefix_scan", "range", "reverse_range", "all"))  # fmt: skip
"""Not a part of its own: the store reads that open a RocksDB iterator, within their callers' parts."""

FLOOR_PARTS = [
    ("grouping + logic on dicts, Arrow in and out", "spark_processor.py", ("floor_partition",)),
]
SHAPE_FLOOR_PARTS = [
    ("grouping, Arrow in and out", "processor_matrix.py", ("task",)),
    ("the shape's logic on dicts", "processor_shapes.py", ("on_input", "fire")),
]
"""cProfile does not see pyarrow's Cython methods (``to_pydict``, ``from_pydict``): the floor's
task is one part."""


def route(columns: dict[str, list], partitions: int, event_time: bool = False) -> list[list]:
    """Each partition's Arrow record batches of one micro-batch, routed by Spark's hash;
    ``event_time``: with column ``ts``, ``ms`` as a timestamp (a shape with event time)."""
    import pyarrow as pa

    from kstate.spark.routing.hashing import partition_ids

    table = pa.table(columns)
    if event_time:
        table = table.append_column("ts", pa.array(columns["ms"], pa.timestamp("ms", tz="UTC")))
    ids = partition_ids([table.column("user")], partitions)
    out = []
    for p in range(partitions):
        part = table.filter(pa.array(ids == p))
        out.append(part.to_batches(max_chunksize=10_000))
    return out


def task_function(work: Path, timings: Path, shape=None, api: str = "row"):
    """``(backend, process)`` of the query over the bench's processor (or ``shape``'s on ``api``),
    as its task runs them."""
    from kstate.spark import local_session, transform_with_state

    conf = {"spark.sql.shuffle.partitions": 2, "spark.sql.session.timeZone": "UTC"}
    spark = local_session("processor-split", conf=conf)
    schema = "user string, category string, amount long"
    if shape is not None:
        schema = INPUT if shape.event_time else INPUT.removesuffix(", ts timestamp")
    df = spark.createDataFrame([], schema)
    captured = {}
    frame_class = type(df)  # PySpark 4's classic DataFrame
    original = frame_class.mapInArrow

    def capture(self, fn, schema, *args, **kwargs):
        captured["task"] = fn
        return original(self, fn, schema, *args, **kwargs)

    frame_class.mapInArrow = capture
    try:
        if shape is None:
            transform_with_state(
                df, ["user"], processor("row", str(timings)), OUTPUT, work / "state", work / "changelog", "bench",
                num_partitions=2, api="row",
            )  # fmt: skip
        else:
            time_mode = "EventTime" if shape.event_time else "None"
            timing = {"event_time_column": "ts", "watermark_delay_ms": WATERMARK_DELAY_MS} if shape.event_time else {}
            transform_with_state(
                df, ["user"], shape_processor(shape, api), shape.output, work / "state", work / "changelog", "bench",
                num_partitions=2, api=api, time_mode=time_mode, fire_idle_timers=False, **timing,
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
    names are matched without their class (cProfile keeps only the function's name, so a
    method's first line tells it apart); ``<genexpr>`` matches every generator expression of the
    file. A part's functions called by one another count once (the callers' edges subtracted). A
    fourth element ``("only" | "not", file)`` counts only the calls from (or not from) that file."""
    raw = stats.stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    parts: dict[str, float] = {}
    for part, where, names, *by_caller in table:
        wheres = (where,) if isinstance(where, str) else where
        natives = [n[1:].split(".") for n in names if n.startswith("~")]
        names = [n for n in names if not n.startswith("~")]
        specs = [(n.split(".")[-1], first_line(wheres[0], n) if "." in n else None) for n in names]
        hits = set()
        for func in raw:
            file, line, fn = func
            if wheres == ("~",):
                hit = file == "~" and any(f"'{bare}'" in fn for bare, _ in specs)
            else:
                hit = any(file.endswith(w) for w in wheres) and any(
                    fn == bare and (first is None or first == line) for bare, first in specs
                )
            # "~Class.method": a native method of kstate._core (a variable's bound native call)
            hit = hit or (file == "~" and any(f"'{m}' of 'kstate._core.{c}'" in fn for c, m in natives))
            if hit:
                hits.add(func)
        total = 0.0
        for func in hits:
            _, _, _, ct, callers = raw[func]
            edges = {caller: edge[3] for caller, edge in callers.items() if caller not in hits}
            if by_caller:
                kind, caller_file = by_caller[0]
                chosen = sum(t for caller, t in edges.items() if caller[0].endswith(caller_file))
                ct = chosen if kind == "only" else sum(edges.values()) - chosen
            else:
                ct -= sum(edge[3] for caller, edge in callers.items() if caller in hits)
            total += ct
        parts[part] = total
    return parts


def parts_of(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per part from the profile (nested parts subtracted from their parents)."""
    parts = matched(stats, PARTS)
    grouping = "grouping (sort, bounds, keys; pandas: per-key frames)"
    parts[grouping] -= parts["Row construction"] + parts["read-ahead (pickle keys, get_many, list / map scans)"]
    within = sum(seconds for part, seconds in parts.items() if part.startswith(WITHIN_HANDLERS))
    parts["processor's own logic"] -= within
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
    parser.add_argument("--shape", choices=SHAPES, help="a shape of benches/processor_shapes.py (its own input)")
    parser.add_argument("--api", choices=("row", "pandas"), default="row", help="with --shape")
    parser.add_argument("--scale", type=float, default=1.0, help="with --shape: its rows and keys times this")
    parser.add_argument(
        "--unprofiled", action="store_true", help="the unprofiled pass alone (for callgrind or py-spy around it)"
    )
    parser.add_argument(
        "--record", action="store_true", help="with --shape: its logic with a user's state in one value variable"
    )
    args = parser.parse_args()
    shape = None if args.shape is None else scaled(SHAPES[args.shape], args.scale)
    if args.record:
        if shape is None or shape.record_state is None:
            parser.error("--record takes a --shape with a record_state (2, 7a, 7b)")
        shape = shape.in_one_value()
    if shape is not None and args.floor and (shape.event_time or args.api == "pandas"):
        parser.error("--floor with --shape runs the Row floor of shapes without event time")

    from kstate.spark import TaskInfo
    from kstate.spark.protocol.idle import IDLE, release

    if shape is None:
        inputs = input_files(args.files, args.rows, args.keys)
        floor_task = floor_partition
    else:
        inputs = shape_input(shape)
        floor_task = shape_floor(shape)
        args.files, args.rows, args.keys = shape.files, shape.rows, shape.keys
    totals: dict[str, float] = {}
    task_seconds = {"profiled": 0.0, "unprofiled": 0.0, "unprofiled CPU": 0.0, "GC": 0.0}
    gc_started: list[float] = []

    def gc_timer(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started.append(time.perf_counter())
        elif gc_started:
            task_seconds["GC"] += time.perf_counter() - gc_started.pop()

    whole = pstats.Stats()
    for profiled in (False,) if args.unprofiled else (False, True):
        work = Path(tempfile.mkdtemp(prefix="processor-split-"))
        sys.modules.pop("kstate_bench_floor", None)  # the floor's dicts start empty in each pass
        held_dicts.clear()
        (work / "timings").mkdir()
        spark, backend, process, arrow_schema = task_function(work, work / "timings", shape, args.api)
        profile = cProfile.Profile()
        for batch_id, columns in enumerate(inputs):
            for partition, batches in enumerate(route(columns, 2, shape is not None and shape.event_time)):
                task = TaskInfo(partition, batch_id, attempt=batch_id * 2 + partition)
                started, cpu_started = time.perf_counter(), time.thread_time()
                if profiled:
                    profile.enable()
                else:
                    gc.callbacks.append(gc_timer)
                if args.floor:
                    run = floor_task(iter(batches))
                else:
                    run = observed_task(backend, process, arrow_schema, iter(batches), task)
                for _ in run:
                    pass
                if args.move:  # as the other worker does when this partition's next task asks
                    release(IDLE.take(backend.current_layout().task_dir(partition)))
                if profiled:
                    profile.disable()
                else:
                    gc.callbacks.remove(gc_timer)
                task_seconds["profiled" if profiled else "unprofiled"] += time.perf_counter() - started
                if not profiled:
                    task_seconds["unprofiled CPU"] += time.thread_time() - cpu_started
        if profiled:
            stats = pstats.Stats(profile)
            whole = stats
            if args.floor:
                totals = matched(stats, FLOOR_PARTS if shape is None else SHAPE_FLOOR_PARTS)
                if shape is not None:
                    totals[SHAPE_FLOOR_PARTS[0][0]] -= totals[SHAPE_FLOOR_PARTS[1][0]]
            else:
                totals = parts_of(stats)
            iterators = matched(stats, [ITERATORS])
            profiled_total = sum(v[2] for v in stats.stats.values())
        spark.stop()
        IDLE.release_all()  # the parked stores, before their directory goes
        shutil.rmtree(work, ignore_errors=True)
    moved = ", stores released after each task" if args.move else ""
    moved += ", the floor's task" if args.floor else ""
    moved += f", shape {shape.name} ({shape.title}), {args.api} API" if shape is not None else ""
    print(f"{args.files} x {args.rows:,} rows, {args.keys:,} keys, 2 partitions, tasks run one after the other{moved}")
    print(
        f"task seconds: unprofiled {task_seconds['unprofiled']:.2f} (CPU of the task thread "
        f"{task_seconds['unprofiled CPU']:.2f}; Python's cyclic GC {task_seconds['GC']:.2f})"
        + ("" if args.unprofiled else f", profiled {task_seconds['profiled']:.2f}")
    )
    if args.unprofiled:
        return
    if args.dump:
        whole.dump_stats(args.dump)
    known = sum(totals.values())
    print()
    print("| part | profiled s | share |")
    print("|---|---:|---:|")
    for part, seconds in [*totals.items(), ("other (unattributed)", profiled_total - known)]:
        print(f"| {part} | {seconds:.2f} | {100 * seconds / profiled_total:.0f}% |")
    print(f"| all | {profiled_total:.2f} | 100% |")
    for part, seconds in iterators.items():
        print(f"| {part} | {seconds:.2f} | {100 * seconds / profiled_total:.0f}% |")


if __name__ == "__main__":
    main()

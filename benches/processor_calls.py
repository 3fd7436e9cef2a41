"""Per-call latency of a processor's state calls on kstate: value-state get / update, list-state
get / put / appendValue and map-state getValue / updateValue, each timed alone
(``perf_counter_ns`` around the call) over KEYS keys, as a processor makes them inside
``handleInputRows`` (the key set once per key, stores opened as a task opens them, a committed
state underneath: half the keys were written in an earlier batch, their lists three elements
long, as benches/spark_processor.py keeps the last three amounts).

  .venv/bin/python benches/processor_calls.py              # typed (schema) and pickled values
  .venv/bin/python benches/processor_calls.py --keys 20000

Instructions per call (the machine's noise does not move them): ``--only CALL`` makes only that
call per key (``none``: only the key set), untimed; under ``valgrind --tool=callgrind`` the
difference to ``--only none``, divided by the keys, is the call's cost:

  valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python benches/processor_calls.py \
      --keys 2000 --only "value get" --values typed

Background threads of RocksDB (flushes, compactions) add a few million instructions of noise to
such runs; ``--codec MODE`` runs the typed codec alone, no store (``encode`` / ``decode`` a
``(count, total)`` row or ``key``-encode a map key, KEYS times; ``none``: the baseline), which
callgrind counts exactly.

``--loops N`` makes each call (and the set of the key) N times on one key read ahead, every kind
inside its own ``functools.reduce``, so that one callgrind run counts each kind alone (a dump
per ``functools_reduce``, which kstate does not call; the first kind, ``none``, is the loop's
own cost):

  valgrind --tool=callgrind --collect-atstart=no --toggle-collect=functools_reduce \
      --dump-after=functools_reduce --callgrind-out-file=/tmp/cg/out .venv/bin/python \
      benches/processor_calls.py --loops 5000
  # the last 13 dumps, in LOOPED's order: (summary - none's summary) / 5000 per call

Batch 1 reads every variable's state for its keys ahead first, as ``transform_with_state`` does
for a micro-batch (``StatefulProcessorHandle._read_ahead_values``: value state through
``get_many``, list and map state through one native scan each); its cost per key is its own row,
and ``--only none`` includes it (``--no-read-ahead``: without it, to count its instructions).

Prints p50 / p99 in microseconds per call kind. Spark's own Python state calls go over a socket
to the JVM: 65-78 us p50 per call (SPARK-52333); the target here is p50 <= 2 us.
"""

from __future__ import annotations

import argparse
import functools
import pickle
import statistics
import tempfile
import time
from pathlib import Path

CALLS = ("value get", "value update", "list get", "list put", "list appendValue", "map getValue", "map updateValue")


def measure(
    keys: int, typed: bool, work: Path, only: str | None = None, read_ahead: bool = True
) -> dict[str, list[int]]:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from kstate.spark import StateBackend, StatefulProcessorHandle, TaskInfo
    from kstate.spark.processor.state_variables import TypedSchemas
    from kstate.stores import Stores

    value_schema = StructType([StructField("count", LongType()), StructField("total", LongType())])
    amount_schema = StructType([StructField("amount", LongType())])
    key_schema = StructType([StructField("category", StringType())])
    n_schema = StructType([StructField("n", LongType())])
    schemas = {
        "totals": TypedSchemas((value_schema,), value_schema),
        "recent": TypedSchemas((amount_schema,), amount_schema),
        "categories": TypedSchemas((n_schema,), n_schema, key_schema),
    }
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes")
        for n in ("totals", "recent", "categories")
    ]
    backend = StateBackend(builders, work / "state", work / "log", "bench")
    pickled_keys = [pickle.dumps((f"u{i}",), protocol=4) for i in range(keys)]

    def open_batch(batch: int) -> tuple:
        state = backend.partition_state(TaskInfo(0, batch))
        handle = StatefulProcessorHandle(state.open(), schemas=schemas if typed else None)
        totals = handle.getValueState("totals", value_schema if typed else None)
        recent = handle.getListState("recent", amount_schema if typed else None)
        categories = handle.getMapState("categories", key_schema if typed else None, n_schema if typed else None)
        return state, handle, totals, recent, categories

    state, handle, totals, recent, categories = open_batch(0)
    for key in pickled_keys[::2]:
        handle.set_current_key(key)
        totals.update((1, 10))
        recent.put([(1,), (2,), (3,)])
        categories.updateValue(("c1",), (1,))
    state.commit()

    state, handle, totals, recent, categories = open_batch(1)
    t0 = time.perf_counter_ns()
    if read_ahead:
        handle.read_ahead_values(pickled_keys)
    ahead_ns = time.perf_counter_ns() - t0
    if only is not None:
        call = {
            "none": lambda: None,
            "value get": totals.get,
            "value update": lambda: totals.update((1, 10)),
            "list get": lambda: list(recent.get()),
            "list put": lambda: recent.put([(2,), (3,), (4,)]),
            "list appendValue": lambda: recent.appendValue((4,)),
            "map getValue": lambda: categories.getValue(("c1",)),
            "map updateValue": lambda: categories.updateValue(("c1",), (1,)),
        }[only]
        for key in pickled_keys:
            handle.set_current_key(key)
            call()
        state.commit()
        return {}
    timings: dict[str, list[int]] = {call: [] for call in CALLS}
    timings["read ahead (per key)"] = [ahead_ns // keys]
    clock = time.perf_counter_ns
    for key in pickled_keys:
        handle.set_current_key(key)
        t0 = clock()
        current = totals.get()
        t1 = clock()
        totals.update((1, 10) if current is None else (current[0] + 1, current[1] + 10))
        t2 = clock()
        amounts = list(recent.get())
        t3 = clock()
        recent.put([*amounts[-2:], (5,)])
        t4 = clock()
        recent.appendValue((6,))
        t5 = clock()
        n = categories.getValue(("c1",))
        t6 = clock()
        categories.updateValue(("c1",), (1 if n is None else n[0] + 1,))
        t7 = clock()
        for call, spent in zip(CALLS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6)):
            timings[call].append(spent)
    state.commit()
    return timings


LOOPED = {
    "none": "None",
    "value get": "totals.get()",
    "value update": "totals.update((3, 4))",
    "list get": "list(recent.get())",
    "list put": "recent.put([(2,), (3,), (4,)])",
    "list appendValue": "recent.appendValue((5,))",
    "map containsKey": "categories.containsKey(('c3',))",
    "map getValue": "categories.getValue(('c3',))",
    "map updateValue": "categories.updateValue(('c3',), (4,))",
    "map iterator (5 entries)": "list(categories.iterator())",
    "map keys (5 entries)": "list(categories.keys())",
    "map values (5 entries)": "list(categories.values())",
    "set the current key": "handle.set_current_key(other)",
}
"""``--loops``' calls, in the order they run (each its own ``functools.reduce``)."""


def loops(count: int, work: Path) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from kstate.spark import StateBackend, StatefulProcessorHandle, TaskInfo
    from kstate.spark.processor.state_variables import TypedSchemas
    from kstate.stores import Stores

    value_schema = StructType([StructField("count", LongType()), StructField("total", LongType())])
    amount_schema = StructType([StructField("amount", LongType())])
    key_schema = StructType([StructField("category", StringType())])
    n_schema = StructType([StructField("n", LongType())])
    schemas = {
        "totals": TypedSchemas((value_schema,), value_schema),
        "recent": TypedSchemas((amount_schema,), amount_schema),
        "categories": TypedSchemas((n_schema,), n_schema, key_schema),
    }
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes")
        for n in ("totals", "recent", "categories")
    ]
    backend = StateBackend(builders, work / "state", work / "log", "bench")
    keys = [pickle.dumps((f"u{i}",), protocol=4) for i in range(100)]
    for batch in (0, 1):
        state = backend.partition_state(TaskInfo(0, batch))
        handle = StatefulProcessorHandle(state.open(), schemas=schemas)
        totals = handle.getValueState("totals", value_schema)
        recent = handle.getListState("recent", amount_schema)
        categories = handle.getMapState("categories", key_schema, n_schema)
        if batch == 0:
            for key in keys:
                handle.set_current_key(key)
                totals.update((1, 10))
                recent.put([(1,), (2,), (3,)])
                for c in range(5):
                    categories.updateValue((f"c{c}",), (c,))
            state.commit()
    handle.read_ahead_values(keys)
    scope = {"totals": totals, "recent": recent, "categories": categories, "handle": handle, "other": keys[7]}
    for label, call in LOOPED.items():
        handle.set_current_key(keys[5])
        function = eval(f"lambda done, _: ({call}, done)[1]", scope)  # noqa: S307 (the bench's own calls)
        functools.reduce(function, range(count), 0)
        print(f"done {label}", flush=True)
    state.commit()


def codec_only(mode: str, count: int) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from kstate.spark.processor.state_variables import TypedCodec

    schema = StructType([StructField("count", LongType()), StructField("total", LongType())])
    codec = TypedCodec("totals", schema, (schema,))
    key = TypedCodec("categories", StructType([StructField("category", StringType())]), versioned=False)
    raw = codec.encode((1, 10))
    if mode == "encode":
        for i in range(count):
            codec.encode((i, 10 * i))
    elif mode == "decode":
        for _ in range(count):
            codec.decode(raw)
    elif mode == "key":
        for _ in range(count):
            key.encode(("c1",))


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--only", choices=("none", *CALLS), help="make only this call, untimed (for callgrind)")
    parser.add_argument("--values", choices=("typed", "pickled"), default="typed", help="with --only")
    parser.add_argument("--no-read-ahead", action="store_true", help="with --only: no read-ahead for batch 1")
    parser.add_argument("--codec", choices=("none", "encode", "decode", "key"), help="the typed codec alone, untimed")
    parser.add_argument("--loops", type=int, help="each of LOOPED's calls this many times, for callgrind")
    args = parser.parse_args()
    if args.loops is not None:
        with tempfile.TemporaryDirectory(prefix="kstate-calls-") as work:
            loops(args.loops, Path(work))
        return
    if args.codec is not None:
        codec_only(args.codec, args.keys)
        return
    if args.only is not None:
        with tempfile.TemporaryDirectory(prefix="kstate-calls-") as work:
            measure(args.keys, args.values == "typed", Path(work), args.only, not args.no_read_ahead)
        return
    print("| values | call | p50 us | p99 us | mean us | target p50 <= 2 us |")
    print("|---|---|---:|---:|---:|---|")
    for typed in (True, False):
        with tempfile.TemporaryDirectory(prefix="kstate-calls-") as work:
            timings = measure(args.keys, typed, Path(work))
        for call, values in timings.items():
            p50 = percentile(values, 0.5)
            print(
                f"| {'typed' if typed else 'pickled'} | {call} | {p50:.2f} | {percentile(values, 0.99):.2f} | "
                f"{statistics.fmean(values) / 1000:.2f} | {'met' if p50 <= 2 else 'missed'} |"
            )


if __name__ == "__main__":
    main()

"""Processors written against Spark's own API (``pyspark.sql.streaming.StatefulProcessor``) on
kstate and on Spark, same input, same run: Spark's ``transformWithStateInPandas`` and Row
``transformWithState`` against kstate's pandas and Row APIs, and all four against plain Python.

The processor keeps value, list and map state per user, state with a 1 ms TTL (written every
batch, so it must have expired by the next: if a TTL were ignored, a returning user would see
it), a processing-time timer at the batch's own time (fires after the batch's input, in the same
batch), an initial state for some users, and ``deleteIfExists`` of a variable it no longer uses.
"""

import collections
import sys
import time

import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402

from kstate.spark import transform_with_state  # noqa: E402

from .workload import input_stream, spark_for_tests, write_file  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "user string, kind string, count long, total long, recent string, categories string, ttl_seen boolean"
USERS = 60
FILES = 3
ROWS = 200
INITIAL = {f"u{i}": (5, 50) for i in range(0, USERS, 7)}
"""Initial (count, total) of some users; ``init-only`` never sends input."""


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-processor-parity", "local[2,3]")
    session.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    yield session
    session.stop()


def file_rows(index):
    users = [f"u{(index * 13 + i * 7) % USERS}" for i in range(ROWS)]
    return {
        "user": users,
        "category": [f"c{(i + index) % 4}" for i in range(ROWS)],
        "amount": [(i * 31 + index) % 100 for i in range(ROWS)],
    }


class Activity:
    """The processor's logic, shared by its pandas and Row forms (Spark binds a processor to one)."""

    def init(self, handle):
        self.handle = handle
        handle.deleteIfExists("retired")
        self.totals = handle.getValueState("totals", "count long, total long")
        self.recent = handle.getListState("recent", "amount long")
        self.categories = handle.getMapState("categories", "category string", "n long")
        self.fleeting_value = handle.getValueState("fleeting_value", "seen boolean", ttlDurationMs=1)
        self.fleeting_list = handle.getListState("fleeting_list", "seen boolean", ttlDurationMs=1)
        self.fleeting_map = handle.getMapState("fleeting_map", "k string", "seen boolean", ttlDurationMs=1)
        self.lasting = handle.getMapState("lasting", "k string", "n long", ttlDurationMs=86_400_000)

    def apply(self, key, rows, timer_values):
        """``rows``: (category, amount) pairs. Returns the output tuple."""
        ttl_seen = self.fleeting_value.exists() or self.fleeting_list.exists() or self.fleeting_map.exists()
        count, total = self.totals.get() or (0, 0)
        for category, amount in rows:
            count, total = count + 1, total + int(amount)
            self.recent.appendValue((int(amount),))
            n = self.categories.getValue((category,))
            self.categories.updateValue((category,), ((n[0] if n else 0) + 1,))
        self.totals.update((count, total))
        recent = [a for (a,) in self.recent.get()][-3:]
        self.recent.put([(a,) for a in recent])
        self.fleeting_value.update((True,))
        self.fleeting_list.appendValue((True,))
        self.fleeting_map.updateValue(("x",), (True,))
        lasting = self.lasting.getValue(("batches",))
        self.lasting.updateValue(("batches",), ((lasting[0] if lasting else 0) + 1,))
        self.handle.registerTimer(timer_values.getCurrentProcessingTimeInMs())
        categories = ",".join(f"{c}:{n}" for (c,), (n,) in sorted(self.categories.iterator()))
        recent_text = ",".join(map(str, recent))
        return (key[0], "input", count, total, recent_text, categories, bool(ttl_seen))

    def timer_row(self, key):
        count, total = self.totals.get()
        return (key[0], "timer", count, total, "", "", False)

    def initial(self, key, count, total):
        self.totals.update((int(count), int(total)))

    def close(self):
        pass


class PandasActivity(Activity, StatefulProcessor):
    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        import pandas as pd

        pairs = [p for frame in rows for p in zip(frame["category"], frame["amount"])]
        yield pd.DataFrame([self.apply(key, pairs, timerValues)], columns=OUTPUT_NAMES)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        import pandas as pd

        yield pd.DataFrame([self.timer_row(key)], columns=OUTPUT_NAMES)

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        for count, total in zip(initialState["count"], initialState["total"]):
            self.initial(key, count, total)


class RowActivity(Activity, StatefulProcessor):
    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        pairs = [(r.category, r.amount) for r in rows]
        yield Row(**dict(zip(OUTPUT_NAMES, self.apply(key, pairs, timerValues))))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield Row(**dict(zip(OUTPUT_NAMES, self.timer_row(key))))

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        self.initial(key, initialState["count"], initialState["total"])


OUTPUT_NAMES = [part.split()[0] for part in OUTPUT.split(", ")]


def reference(files):
    totals = dict(INITIAL)
    recent, categories, out = collections.defaultdict(list), collections.defaultdict(collections.Counter), []
    for index in files:
        rows = file_rows(index)
        per_user = collections.defaultdict(list)
        for user, category, amount in zip(rows["user"], rows["category"], rows["amount"]):
            per_user[user].append((category, amount))
        emitted = []
        for user, pairs in per_user.items():
            count, total = totals.get(user, (0, 0))
            for category, amount in pairs:
                count, total = count + 1, total + amount
                recent[user].append(amount)
                categories[user][category] += 1
            totals[user] = (count, total)
            recent[user] = recent[user][-3:]
            cats = ",".join(f"{c}:{n}" for c, n in sorted(categories[user].items()))
            emitted.append((user, "input", count, total, ",".join(map(str, recent[user])), cats, False))
            emitted.append((user, "timer", count, total, "", "", False))
        out.append(sorted(emitted))
    return out


def initial_state(spark):
    rows = [(u, c, t) for u, (c, t) in INITIAL.items()] + [("init-only", 1, 1)]
    return spark.createDataFrame(rows, "user string, count long, total long")


def run(frame, checkpoint, batches=FILES, timeout=300):
    """The non-empty outputs of the query's micro-batches, in order. Spark's transformWithState
    in processing time runs a batch without data after every other (its timers may be due), so
    neither ``availableNow`` nor ``processAllAvailable`` ever ends: the query runs until
    ``batches`` batches had output."""
    outputs = {}

    def sink(batch_frame, batch_id):
        rows = sorted(tuple(r) for r in batch_frame.collect())
        if rows:
            outputs[batch_id] = rows

    query = (
        frame.writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def committed():
        """Every output's batch is in the commit log (Spark reports a batch's progress after it), so
        a query started again on the checkpoint does not replay the last one."""
        progress = query.lastProgress
        return len(outputs) >= batches and progress is not None and progress["batchId"] >= max(outputs)

    deadline = time.monotonic() + timeout
    try:
        while not committed() and query.exception() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    return [outputs[b] for b in sorted(outputs)]


def test_spark_processors_give_spark_results_on_kstate(spark, work):
    for i in range(FILES):
        write_file(work, i, file_rows(i))
    expected = reference(range(FILES))
    schema = "user string, category string, amount long"
    grouped = input_stream(spark, work, schema).groupBy("user")
    initial = initial_state(spark)
    results = {
        "spark pandas": run(
            grouped.transformWithStateInPandas(
                PandasActivity(), OUTPUT, "Update", "ProcessingTime", initialState=initial.groupBy("user")
            ),
            work / "cp-spark-pandas",
        ),
    }
    if hasattr(grouped, "transformWithState"):  # Spark's Row API is new in PySpark 4.1; kstate's runs on 4.0
        results["spark row"] = run(
            grouped.transformWithState(
                RowActivity(), OUTPUT, "Update", "ProcessingTime", initialState=initial.groupBy("user")
            ),
            work / "cp-spark-row",
        )
    for api, processor in (("pandas", PandasActivity()), ("row", RowActivity())):
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], processor, OUTPUT, work / f"state-{api}",
            work / f"changelog-{api}", "activity", num_partitions=2, time_mode="ProcessingTime", api=api,
            initial_state=initial.groupBy("user"), lock_timeout=60,
        )  # fmt: skip
        results[f"kstate {api}"] = run(frame, work / f"cp-kstate-{api}")
    for name, outputs in results.items():
        assert outputs == expected, name


def test_a_query_restarted_on_its_checkpoint_continues_exactly(spark, work):
    """Stopped after two batches and started again (a new processor, the same checkpoint and
    state): the value, list and map state continue, TTL state stays expired, timers fire, the
    initial state is not applied again."""
    expected = reference(range(FILES))
    schema = "user string, category string, amount long"
    initial = initial_state(spark)

    def query(batches):
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], RowActivity(), OUTPUT, work / "state", work / "changelog",
            "restarted", num_partitions=2, time_mode="ProcessingTime", api="row",
            initial_state=initial.groupBy("user"), lock_timeout=60,
        )  # fmt: skip
        return run(frame, work / "cp", batches=batches)

    for i in range(FILES - 1):
        write_file(work, i, file_rows(i))
    assert query(FILES - 1) == expected[: FILES - 1]
    write_file(work, FILES - 1, file_rows(FILES - 1))
    assert query(1) == expected[FILES - 1 :]


class Counts(StatefulProcessor):
    """A count per user and per (user, category), typed with ``value_schema`` / ``n_schema``."""

    def __init__(self, value_schema, n_schema):
        self.value_schema, self.n_schema = value_schema, n_schema

    def init(self, handle):
        self.count = handle.getValueState("count", self.value_schema)
        self.per_category = handle.getMapState("per_category", "category string", self.n_schema)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        stored = self.count.get()
        count = 0 if stored is None else stored[-1]
        for row in rows:
            count += 1
            n = self.per_category.getValue((row.category,))
            self.per_category.updateValue((row.category,), ((n[-1] if n else 0) + 1,))
        self.count.update((None, count) if "note" in self.value_schema else (count,))
        top = sum(n for (n,) in self.per_category.values())
        yield Row(user=key[0], count=count, categories=top)


def changelog_files(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())


def test_schema_evolution_reads_old_state_and_an_incompatible_change_fails_at_start(spark, work):
    from kstate.errors import StateSchemaError

    # Files arrive as each query needs them: a query stopped after its batches cannot have run
    # a file meant for the next one.
    for i in range(2):
        write_file(work, i, file_rows(i))
    schema = "user string, category string, amount long"
    output = "user string, count long, categories long"

    def query(processor, batches, checkpoint="cp"):
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], processor, output, work / "state", work / "changelog",
            "typed", num_partitions=2, api="row", lock_timeout=60,
        )  # fmt: skip
        return run(frame, work / checkpoint, batches=batches)

    counts, out = collections.Counter(), []
    for index in range(FILES):
        users = file_rows(index)["user"]
        counts.update(users)
        out.append(sorted((u, counts[u], counts[u]) for u in set(users)))

    first = query(Counts("count int", "n int"), batches=2)
    assert first == out[:2]
    # Compatible: a nullable field added in front, int widened to long (values and map values).
    write_file(work, 2, file_rows(2))
    second = query(Counts("note string, count long", "n long"), batches=1)
    assert second == out[2:]
    before = changelog_files(work / "changelog")
    for incompatible in (Counts("count string", "n long"), Counts("note string, count long", "n int")):
        with pytest.raises(StateSchemaError, match="changed type"):
            query(incompatible, batches=1, checkpoint="cp-bad")
    assert changelog_files(work / "changelog") == before, "a refused query touches nothing"


def test_spark_defaults_aqe_and_200_shuffle_partitions_give_the_reference(spark, work):
    """Spark's defaults (AQE on, 200 shuffle partitions) with an advisory size far below a batch,
    num_partitions unset: kstate picks and records the count, routes the initial state and every
    batch with it, and the Row API's output (TTL, timers, initial state) is exactly the reference."""
    for i in range(FILES):
        write_file(work, i, file_rows(i))
    saved = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")}
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "1k")
    try:
        frame = transform_with_state(
            input_stream(spark, work, "user string, category string, amount long"), ["user"], RowActivity(),
            OUTPUT, work / "state", work / "changelog", "defaults", time_mode="ProcessingTime", api="row",
            initial_state=initial_state(spark).groupBy("user"), lock_timeout=60,
        )  # fmt: skip
        assert run(frame, work / "cp") == reference(range(FILES))
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
        spark.conf.unset("spark.sql.adaptive.advisoryPartitionSizeInBytes")

"""kstate.spark under Spark Connect (``SparkSession.builder.remote("local[2]")``: a local Spark
Connect server, the client talking to it over gRPC, as on Databricks serverless and shared
clusters and with ``spark.api.mode=connect``). The functions kstate hands Spark run in the
executors' Python workers, as in classic Spark; what needs the classic driver API (the
SparkContext) is refused with ``SparkConnectUnsupportedError``.

Under Connect, ``foreachBatch`` runs on the server, so queries write parquet and the test reads
it back. One Connect server for the module (it takes ~20 s to start)."""

import collections
import sys
import warnings

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.errors import SparkConnectUnsupportedError  # noqa: E402
from kstate.spark import StateBackend, configure_environment, read_processor_state, transform_with_state  # noqa: E402
from kstate.spark.engine.session import is_spark_connect  # noqa: E402

from .workload import (  # noqa: E402
    SCHEMA,
    RunningCount,
    add_files,
    file_keys,
    input_stream,
    reference,
    running_count,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

INITIAL_COUNT = 1000
"""``k0``'s count before batch 0, from the initial state."""


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    configure_environment()
    classic = SparkSession.getActiveSession()
    if classic is not None:  # a local Connect server starts its own SparkContext: one per process
        classic.stop()
    builder = (
        SparkSession.builder.remote("local[2]")
        .appName("kstate-connect")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.pollingDelay", "100ms")
    )
    with warnings.catch_warnings():
        # The server takes the static configs at start; the client then warns it cannot set them.
        warnings.filterwarnings("ignore", message="Failed to set spark", category=UserWarning)
        session = builder.getOrCreate()
    assert is_spark_connect(session)
    yield session
    session.stop()


class RowCounter(StatefulProcessor):
    """``RunningCount`` as Spark's Row ``transformWithState`` takes it (a subclass of PySpark's
    own ``StatefulProcessor``)."""

    def init(self, handle):
        self.count = handle.getValueState("count", "c long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802
        total = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((total,))
        yield Row(key=key[0], count=total)

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802
        self.count.update((initialState["count"],))


PROCESSORS = {"pandas": RunningCount, "row": RowCounter}


def expected_rows(files, initial=0):
    """``(key, count)`` of every row the batches of ``files`` (one file a batch) emit."""
    return sorted(
        (key, count + (initial if key == "k0" else 0))
        for counts in reference(files).values()
        for key, count in counts.items()
    )


def run_stream(frame, work, name):
    """Runs the streaming ``frame`` over the input not yet processed (``availableNow``, the
    checkpoint in ``work``), appending to parquet at ``work/<name>``; returns every row there."""
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(work / name))
        .option("checkpointLocation", str(work / f"{name}-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    spark = frame.sparkSession
    return sorted((r["key"], r["count"]) for r in spark.read.parquet(str(work / name)).collect())


@pytest.mark.parametrize("api", ["pandas", "row"])
def test_transform_with_state_streams_and_restarts(spark, work, api):
    """Two files, a restart from the checkpoint, a third: every batch's counts, the initial state
    in batch 0 (given as Spark Connect's ``groupBy``), nothing counted twice."""
    initial = spark.createDataFrame([("k0", INITIAL_COUNT)], "key string, count long").groupBy("key")

    def query():
        return transform_with_state(
            input_stream(spark, work), ["key"], PROCESSORS[api](), SCHEMA, work / "state", work / "changelog",
            "connect-tws", num_partitions=2, api=api, initial_state=initial, lock_timeout=60,
        )  # fmt: skip

    add_files(work, range(2))
    assert run_stream(query(), work, "out") == expected_rows(range(2), INITIAL_COUNT)
    add_files(work, [2])
    assert run_stream(query(), work, "out") == expected_rows(range(3), INITIAL_COUNT)


@pytest.mark.parametrize("api", ["pandas", "row"])
def test_transform_with_state_in_batch_jobs(spark, work, api):
    """A batch job is batch ``batch_id``: run again it is redone (not counted twice); the next
    batch id builds on it."""
    add_files(work, range(2))

    def run(index, batch_id):
        frame = spark.read.parquet(str(work / "in" / f"part-{index:05d}.parquet"))
        counted = transform_with_state(
            frame, ["key"], PROCESSORS[api](), SCHEMA, work / "state", work / "changelog", "connect-batch",
            num_partitions=2, api=api, batch_id=batch_id, lock_timeout=60,
        )  # fmt: skip
        return {r["key"]: r["count"] for r in counted.collect()}

    assert run(0, 0) == reference([0])[0]
    assert run(0, 0) == reference([0])[0], "batch 0 again: rolled back, then redone"
    assert run(1, 1) == reference(range(2))[1]


def test_map_in_arrow_state_dataframe_the_changelog_source_and_apply_in_arrow(spark, work):
    """``StateBackend.map_in_arrow`` on rows routed by ``StateBackend.partition`` in a streaming
    query with a restart; the state (``state_dataframe``) and the changelog (``format("kstate")``)
    read back through Spark Connect; then a batch job of ``apply_in_arrow`` on the same state."""
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")

    def backend():
        return StateBackend(
            [counts], work / "state", work / "changelog", "connect-arrow", keys=["key"], num_partitions=2,
            lock_timeout=60,
        )  # fmt: skip

    def query():
        state = backend()
        return state.partition(input_stream(spark, work)).mapInArrow(state.map_in_arrow(running_count), SCHEMA)

    add_files(work, range(2))
    assert run_stream(query(), work, "out") == expected_rows(range(2))
    add_files(work, [2])
    assert run_stream(query(), work, "out") == expected_rows(range(3))

    totals = dict(collections.Counter(key for i in range(3) for key in file_keys(i)))
    frame = backend().state_dataframe(spark, "counts")
    assert frame.schema.simpleString() == "struct<partition:int,batch:bigint,key:string,value:bigint>"
    rows = frame.collect()
    assert {r["key"]: r["value"] for r in rows} == totals
    assert {r["partition"] for r in rows} == {0, 1} and {r["batch"] for r in rows} == {2}

    state = backend()
    state.release_local_state([0, 1])
    changelog = state.changelog_dataframe(spark, "counts").collect()
    latest = {}
    for r in sorted(changelog, key=lambda r: (r["partition"], r["offset"])):
        latest[bytes(r["key"]).decode()] = int.from_bytes(bytes(r["value"]), "big")
    assert latest == totals

    def add_rows(key, table, stores):
        store = stores["counts"]
        total = store.get(key[0]) + table.num_rows
        store.put(key[0], total)
        return pa.table({"key": [key[0]], "count": [total]})

    grouped = backend()
    grouped.batch_id = 3  # a batch job after the stream's batches 0-2
    rows = grouped.apply_in_arrow(spark.read.parquet(str(work / "in")), ["key"], add_rows, SCHEMA).collect()
    assert {r["key"]: r["count"] for r in rows} == {key: 2 * n for key, n in totals.items()}


def test_what_needs_the_spark_context_is_refused(spark, work):
    add_files(work, [0])
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    backend = StateBackend([counts], work / "state", work / "changelog", "connect-refused", keys=["key"])
    with pytest.raises(SparkConnectUnsupportedError, match="report_progress.*on_task"):
        backend.report_progress(spark)
    with pytest.raises(SparkConnectUnsupportedError, match="give num_partitions"):
        backend.partition(spark.read.parquet(str(work / "in")))
    with pytest.raises(SparkConnectUnsupportedError, match="give num_partitions"):
        transform_with_state(
            spark.read.parquet(str(work / "in")), ["key"], RunningCount(), SCHEMA, work / "state",
            work / "changelog", "connect-refused",
        )  # fmt: skip
    with pytest.raises(SparkConnectUnsupportedError, match="read_processor_state"):
        read_processor_state(spark, work / "changelog", "connect-refused", stateVarName="count")
    assert backend.partitioning_log().current() is None, "no partition count was recorded"


def test_every_figure_of_every_batch_reaches_last_progress_and_the_listener(spark, work, wait_until):
    """``progress_scenario``'s query under Connect: each batch's figures in ``lastProgress`` (as
    the Connect client receives observed metrics) equal what the test computes, and a
    ``StateMetricsListener`` gets the same figures."""
    from kstate.spark import StateMetricsListener

    from .progress_scenario import check_every_batch

    handed = []
    listener = StateMetricsListener(lambda progress, figures: handed.append(figures))
    spark.streams.addListener(listener)
    try:
        seen = check_every_batch(spark, work)
        wait_until(lambda: len(handed) == len(seen), "the listener's calls")
    finally:
        spark.streams.removeListener(listener)
    assert handed == [tws for _, tws, _ in seen]

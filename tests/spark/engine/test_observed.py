"""kstate's figures in the query's own progress (``observedMetrics``), classic Spark: every figure
of every batch of ``progress_scenario``'s query against what the test computes itself; the
listener; the figures of a batch job."""

import collections
import logging
import sys

import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402

from kstate.spark import StateMetricsListener, state_figures  # noqa: E402
from kstate.spark.engine.observed import FIGURES_COLUMN, with_figures  # noqa: E402

from ..progress_scenario import STORE_APP, Changelogs, check_every_batch, count_emitted, store_backend  # noqa: E402
from ..workload import spark_for_tests  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-observed", "local[2]")
    yield session
    session.stop()


def test_every_figure_of_every_batch_equals_what_the_test_computes(spark, work, caplog, wait_until):
    handed = []
    listener = StateMetricsListener(lambda progress, figures: handed.append((progress.batchId, figures)))
    spark.streams.addListener(listener)
    try:
        with caplog.at_level(logging.INFO, logger="kstate.spark"):
            seen = check_every_batch(spark, work)
            wait_until(lambda: len(handed) == len(seen), "the listener's calls")
    finally:
        spark.streams.removeListener(listener)
    assert [figures for _, figures in handed] == [tws for _, tws, _ in seen]
    lines = [r.getMessage() for r in caplog.records if " kstate numRowsTotal=" in r.getMessage()]
    assert len(lines) == len(seen) and f"numRowsTotal={seen[-1][1]['numRowsTotal']} " in lines[-1]


def test_a_batch_job_returns_its_figures(spark, work):
    """A batch DataFrame of the backend (``batch_id`` 0) returns the same figures from the job."""
    rows = spark.createDataFrame([(f"k{i % 7}", 1) for i in range(30)], "key string, count long")
    backend = store_backend(work)
    out = backend.map_partitions(rows, count_emitted, "key string, emitted long").collect()
    figures = backend.job_figures()
    assert len(out) == 30
    assert figures["numRowsTotal"] == figures["emitted.numRowsTotal"] == 7
    assert backend.state_dataframe(spark, "emitted").count() == 7
    assert figures["numRowsUpdated"] == 7 and figures["numRowsRemoved"] == 0 and figures["numTasks"] == 2
    key_and_value_bytes = sum(len(f"k{i}") + 8 for i in range(7))  # string keys, int64 values
    assert figures["changelogBytesPublished"] == key_and_value_bytes


def test_the_declared_nullability_stays_the_outputs(spark, work):
    """The figures' row is dropped, and the user's NOT NULL columns stay NOT NULL, as without
    figures (and as Spark's own operators keep their declared output)."""
    rows = spark.createDataFrame([(f"k{i % 7}", 1) for i in range(30)], "key string, count long")
    backend = store_backend(work)
    out = backend.map_partitions(rows, count_emitted, "key string not null, emitted long not null")
    assert [field.nullable for field in out.schema.fields] == [False, False]
    per_key = collections.Counter(f"k{i % 7}" for i in range(30))
    assert sorted(r.emitted for r in out.collect()) == sorted(n for c in per_key.values() for n in range(1, c + 1))
    assert backend.job_figures()["numRowsTotal"] == 7


def test_the_figures_row_fills_never_null_columns_of_every_type():
    import pyarrow as pa

    declared = pa.schema(
        [
            pa.field("s", pa.string(), nullable=False),
            pa.field("b", pa.binary(), nullable=False),
            pa.field("flag", pa.bool_(), nullable=False),
            pa.field("t", pa.timestamp("us", "UTC"), nullable=False),
            pa.field("nested", pa.struct([pa.field("n", pa.int32(), nullable=False), ("maybe", pa.string())]), False),
            pa.field("items", pa.list_(pa.int64()), nullable=False),
            pa.field("counts", pa.map_(pa.string(), pa.int64()), nullable=False),
            pa.field("note", pa.string()),
        ]
    )
    *_, last = with_figures([], declared, lambda: {"numTasks": 1})
    assert last.schema.remove(last.num_columns - 1) == declared
    assert [last.column(i).null_count for i in range(len(declared))] == [0] * 7 + [1]
    assert last.column(FIGURES_COLUMN).to_pylist() == [[("numTasks", 1)]]


def run_available(frame, work, outputs):
    """Runs the streaming ``frame`` over the input not yet processed into a ``foreachBatch`` sink
    (``outputs[batch]``: its row count); the stopped query."""
    query = (
        frame.writeStream.foreachBatch(lambda batch_frame, batch: outputs.update({batch: batch_frame.count()}))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return query


def test_figures_reach_progress_through_foreach_batch_at_spark_defaults(spark, work):
    """Spark's defaults (200 shuffle partitions, adaptive execution on) upstream of the state, a
    ``foreachBatch`` sink: the figures still reach each batch's progress."""
    from ..workload import add_files, file_keys, input_stream

    spark.conf.set("spark.sql.shuffle.partitions", "200")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    try:
        add_files(work, range(2))
        shuffled = input_stream(spark, work).repartition("v").withColumnRenamed("v", "count")
        backend = store_backend(work)
        counted = backend.map_partitions(shuffled, count_emitted, "key string, emitted long")
        outputs = {}
        query = run_available(counted, work, outputs)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    figures = [state_figures(p, "kstate_store") for p in query.recentProgress]
    keys = [set(file_keys(i)) for i in range(2)]
    assert [f["numRowsUpdated"] for f in figures] == [len(k) for k in keys]
    assert [f["numRowsTotal"] for f in figures] == [len(keys[0]), len(keys[0] | keys[1])]
    assert figures[-1]["numRowsTotal"] == backend.state_dataframe(spark, "emitted").count()
    assert [f["numTasks"] for f in figures] == [2, 2] and outputs == {0: 300, 1: 300}


def test_without_a_metrics_name_the_plan_has_no_figures(spark, work):
    from kstate.errors import InvalidArgumentError

    rows = spark.createDataFrame([(f"k{i % 7}", 1) for i in range(30)], "key string, count long")
    backend = store_backend(work)
    backend.metrics_name = None
    mapped = backend.map_partitions(rows, count_emitted, "key string, emitted long")
    assert mapped.columns == ["key", "emitted"] and len(mapped.collect()) == 30
    with pytest.raises(InvalidArgumentError, match="no batch DataFrame of this backend observed its figures"):
        backend.job_figures()


def test_a_replayed_batch_reports_its_rollbacks_and_exact_counts(spark, work):
    """Batch 2's state committed, then the driver died before Spark's commit log got it: Spark
    runs batch 2 again, each partition rolls its state back first, and the counts stay exact;
    the changelog bytes are the rollback's records and the redo's."""
    from ..workload import add_files, file_keys, input_stream

    add_files(work, range(3))
    backend = store_backend(work)
    changelogs = Changelogs(work, [(STORE_APP, "emitted")])

    def counted():
        rows = input_stream(spark, work).withColumnRenamed("v", "count")
        return backend.map_partitions(rows, count_emitted, "key string, emitted long")

    first = run_available(counted(), work, {})
    changelogs.next_batch()
    for entry in ("2", ".2.crc"):
        (work / "checkpoint" / "commits" / entry).unlink()
    replayed = run_available(counted(), work, {})
    published = changelogs.next_batch()["emitted"]["changelogBytesPublished"]
    before, again = (
        state_figures(first.recentProgress[-1], "kstate_store"),
        state_figures(replayed.lastProgress, "kstate_store"),
    )
    assert replayed.lastProgress["batchId"] == 2 and before["rolledBackBatches"] == 0
    assert again["rolledBackBatches"] == 2 and again["restoredRecords"] == 0
    assert again["numRowsTotal"] == before["numRowsTotal"] == backend.state_dataframe(spark, "emitted").count()
    assert again["numRowsUpdated"] == before["numRowsUpdated"] == len(set(file_keys(2)))
    assert again["changelogBytesPublished"] == published > before["changelogBytesPublished"]

"""The cases of Spark's own transformWithState suites (``test_pandas_transform_with_state.py``,
``test_pandas_transform_with_state_state_variable.py``, the Row API's ``test_transform_with_state``)
on kstate's two APIs and on Spark's, compared with each other and with what Spark's tests
expect. Processors: ``spark_suite_processors`` (each case's processor as Spark's behaves).

Many cases share one query (``Suite``: the key is ``(case, id)``), one query per time mode and
API, in Spark's test settings: 5 shuffle partitions, RocksDB state store, UTC, no batches without
data (``spark.sql.streaming.noDataMicroBatches.enabled=false``, which kstate follows too). The
docs' table (docs/stateful-processor.md) maps each Spark test to the case here.
"""

import collections
import datetime
import json
import random
import string
import sys
import time

import pytest

pytest.importorskip("pyspark")

import pandas as pd  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import Row  # noqa: E402

from kstate.spark import read_processor_state, transform_with_state  # noqa: E402
from kstate.spark.processor.ticks import needs_batch  # noqa: E402
from kstate.spark.testing import TwsTester  # noqa: E402

from .. import spark_suite_processors as p  # noqa: E402
from ..workload import (  # noqa: E402
    add_whole,
    collecting,
    committed,
    input_stream,
    run_until,
    spark_for_tests,
    wait_for,
    write_file,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

try:
    from pyspark.sql.streaming.tws_tester import TwsTester as SparkTwsTester
except ImportError:  # PySpark before 4.2
    SparkTwsTester = None

SPARK_TEST_CONF = {
    "spark.sql.shuffle.partitions": "5",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.execution.arrow.transformWithStateInPandas.maxRecordsPerBatch": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}

R1 = [("0", 123), ("0", 46), ("1", 146), ("1", 346)]
R2 = [("0", 123), ("0", 223), ("0", 323), ("1", 246), ("1", 6)]
R3 = [("0", 123), ("1", 6)]
AFTER_INITIAL = [("0", 67), ("3", 12)]
INITIAL = [("0", 789), ("3", 987)]


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-spark-suites", "local[2]")
    for key, value in SPARK_TEST_CONF.items():
        session.conf.set(key, value)
    yield session
    session.stop()


def expect(*batches):
    """Per batch, a case's expected output rows (dicts of its output columns)."""
    return [{json.dumps(row, sort_keys=True) for row in batch} for batch in batches]


def counts(*batches):
    return expect(*[[{"id": i, "countAsString": c} for i, c in batch] for batch in batches])


def collect(frame, checkpoint, batches, trigger="200 milliseconds", output_mode="update"):
    """The non-empty outputs of the query's first batches, in order, each a sorted list of
    tuples (the query runs until ``batches`` of them came)."""
    outputs, _ = run_until(frame, checkpoint, batches, trigger, output_mode)
    return [outputs[b] for b in sorted(outputs)][:batches]


def four_ways(
    spark, work, name, schema, cases, time_mode, batches, initial=None, watermark=None, pandas_conf=None, partitions=3
):
    """The suite of ``cases`` on Spark's pandas and Row APIs (PySpark 4.1+, whose runners kstate
    follows; 4.0's pandas runner cuts a key's rows by the JVM's Arrow batches) and on kstate's,
    same input (``work/in``); results by API name. ``pandas_conf``: session settings
    of the pandas runs (Arrow batch limits: Spark's Row API with an initial state would call
    the processor once per ``maxRecordsPerBatch`` rows). ``partitions``: kstate's
    ``num_partitions`` (Spark's come from the session's shuffle partitions)."""
    results = {}
    for pandas in (True, False):
        for key, value in (pandas_conf or {}).items():
            spark.conf.set(key, value) if pandas else spark.conf.unset(key)
        cases_here = {n: c for n, c in cases.items() if pandas or not getattr(c, "pandas_only", False)}
        stream = input_stream(spark, work, schema)
        spark_input = stream if watermark is None else stream.withWatermark("eventTime", f"{watermark // 1000} seconds")
        grouped = spark_input.groupBy("case", "id")
        initial_grouped = None if initial is None else initial.groupBy("case", "id")
        method = "transformWithStateInPandas" if pandas else "transformWithState"
        if hasattr(grouped, "transformWithState"):  # 4.1+: Spark 4.0's pandas runner chunks otherwise
            frame = getattr(grouped, method)(
                p.Suite(cases_here, pandas), p.SUITE_OUTPUT, "Update", time_mode, initialState=initial_grouped
            )
            results[f"spark {'pandas' if pandas else 'row'}"] = collect(
                frame, work / f"cp-spark-{name}-{pandas}", batches
            )
        api = "pandas" if pandas else "row"
        options = {"event_time_column": "eventTime", "watermark_delay_ms": watermark} if watermark else {}
        frame = transform_with_state(
            stream, ["case", "id"], p.Suite(cases_here, pandas), p.SUITE_OUTPUT, work / f"state-{name}-{api}",
            work / f"changelog-{name}-{api}", name, num_partitions=partitions, time_mode=time_mode, api=api,
            initial_state=initial_grouped, lock_timeout=60, **options,
        )  # fmt: skip
        results[f"kstate {api}"] = collect(frame, work / f"cp-kstate-{name}-{api}", batches)
    return results


def by_case(outputs):
    """Per case, per batch: the set of its rows' JSON."""
    cases = collections.defaultdict(lambda: [set() for _ in outputs])
    for index, rows in enumerate(outputs):
        for case, _, out in rows:
            cases[case][index].add(json.dumps(json.loads(out), sort_keys=True))
    return cases


def check(results, facts, pandas_only=()):
    """kstate equals Spark API by API, and every API's cases equal Spark's tests' facts."""
    for api in ("pandas", "row"):
        if f"spark {api}" in results:
            assert results[f"kstate {api}"] == results[f"spark {api}"], api
    for api, outputs in results.items():
        cases = by_case(outputs)
        for case, expected in facts.items():
            if api.endswith("row") and case in pandas_only:
                continue
            got = [batch for batch in cases[case] if batch] if case in cases else []
            assert got == expected, (api, case)


def write_rows(work, files, columns=("case", "id", "temperature")):
    for index, rows in enumerate(files):
        write_file(work, index, {c: [r[i] for r in rows] for i, c in enumerate(columns)})


def tagged(case, rows):
    return [(case, *row) for row in rows]


class ChunkCount(p.ChunkCount):
    pandas_only = True


def test_value_list_map_state_deleted_variables_composite_types_initial_state_and_chunks(spark, work):
    """timeMode None: basic (numViolations, a deleted variable raising), non-existent value
    state, map state, the large list, 512 KB values, composite types (nested structs as Rows,
    a bare map key), initial state, and (pandas) chunk counts at maxRecordsPerBatch=1."""
    cases = {
        "basic": p.Violations,
        "invalid": p.NeverStored,
        "map": p.Counters,
        "large_list": p.GrowingList,
        "large_values": p.LargeValues,
        "composite": p.Composite,
        "init": p.Accumulated,
        "chunks": ChunkCount,
    }
    two_batches = ("basic", "large_list", "composite", "chunks")
    files = [
        [row for case in cases if case != "init" for row in tagged(case, R1)] + tagged("init", R1),
        [row for case in two_batches for row in tagged(case, R2)] + tagged("init", AFTER_INITIAL),
    ]
    write_rows(work, files)
    initial = spark.createDataFrame(tagged("init", INITIAL), "case string, id string, initVal int")
    limit = {"spark.sql.execution.arrow.maxRecordsPerBatch": "1"}
    schema = "case string, id string, temperature long"
    results = four_ways(spark, work, "none", schema, cases, "None", 2, initial, pandas_conf=limit)
    hundred, hundred_ninety = ",".join(map(str, range(100))), ",".join(map(str, range(190)))
    large = {"valueStateResult": p.LARGE, "listStateResult": f"{p.LARGE},{p.LARGE}b,{p.LARGE}c"}
    large["mapStateResult"] = f"large_string_key:{p.LARGE}"

    def composite(key, value, flat, attributes, confs):
        return {
            "id": key, "value_arr": value, "list_state_arr": flat,
            "map_state_arr": json.dumps(attributes, sort_keys=True),
            "nested_map_state_arr": json.dumps(confs, sort_keys=True),
        }  # fmt: skip

    first = {"key1": [1], "key2": [10]}, {"e1": {"e2": 5, "e3": 10}}
    facts = {
        "basic": counts([("0", "2"), ("1", "2")], [("0", "3"), ("1", "2")]),
        "invalid": counts([("0", "0"), ("1", "0")]),
        "map": counts([("0", "2"), ("1", "2")]),
        "large_list": expect(
            [{"id": k, "prevElements": "", "updatedElements": hundred} for k in "01"],
            [{"id": k, "prevElements": hundred, "updatedElements": hundred_ninety} for k in "01"],
        ),
        "large_values": expect([{"id": k, **large} for k in "01"]),
        "composite": expect(
            [composite(k, "0", "0", *first) for k in "01"],
            [
                composite("0", "669", "0,669", {**first[0], "0": [669]}, {"e1": {"e2": 5, "e3": 10, "0": 669}}),
                composite("1", "252", "0,252", {**first[0], "1": [252]}, {"e1": {"e2": 5, "e3": 10, "1": 252}}),
            ],
        ),
        "init": expect(
            [{"id": "0", "value": "958"}, {"id": "1", "value": "492"}],
            [{"id": "0", "value": "1025"}, {"id": "3", "value": "999"}],
        ),
        "chunks": expect(
            [{"id": "0", "chunkCount": 2}, {"id": "1", "chunkCount": 2}],
            [{"id": "0", "chunkCount": 3}, {"id": "1", "chunkCount": 2}],
        ),
    }
    check(results, facts, pandas_only=("chunks",))


def test_processing_time_timers_ttl_lists_and_initial_state_timers(spark, work):
    """timeMode "processingtime" (any case, as Spark): the timer case (the expired timer still
    listed in its handler), value/list/map state with long TTLs, interleaved list iterators and a
    timestamp list, initial state registering timers, and (pandas) chunks cut by
    maxBytesPerBatch=2 (one row each)."""
    cases = {
        "timer": p.CountdownTimer,
        "ttl_value": p.ViolationsWithTtl,
        "lists": p.InterleavedLists,
        "lists_ttl": p.InterleavedListsWithTtl,
        "map_ttl": p.CountersWithTtl,
        "init_timers": p.AccumulatedWithTimers,
        "chunks": ChunkCount,
    }
    first_batch = ("ttl_value", "lists", "lists_ttl", "map_ttl", "chunks", "init_timers")
    files = [
        tagged("timer", R3) + [r for c in first_batch for r in tagged(c, R1)],
        tagged("timer", R1) + tagged("ttl_value", R2) + tagged("init_timers", AFTER_INITIAL) + tagged("chunks", R2),
        tagged("timer", R2),
    ]  # fmt: skip
    write_rows(work, files)
    initial = spark.createDataFrame(tagged("init_timers", INITIAL), "case string, id string, initVal int")
    limit = {"spark.sql.execution.arrow.maxBytesPerBatch": "2"}
    schema = "case string, id string, temperature long"
    results = four_ways(spark, work, "proc", schema, cases, "processingtime", 3, initial, pandas_conf=limit)
    two = counts([("0", "2"), ("1", "2")])
    facts = {
        "timer": counts(
            [("0", "1"), ("1", "1")], [("0", "3"), ("0", "-1"), ("1", "3")], [("0", "3"), ("0", "-1"), ("1", "5")]
        ),
        "ttl_value": counts([("0", "2"), ("1", "2")], [("0", "3"), ("1", "2")]),
        "lists": two,
        "lists_ttl": two,
        "map_ttl": two,
        "init_timers": expect(
            [{"id": "0", "value": "958"}, {"id": "1", "value": "492"}]
            + [{"id": f"{k}-expired", "value": "timer"} for k in "03"],
            [{"id": "0", "value": "1025"}, {"id": "3", "value": "999"}],
        ),
        "chunks": expect(
            [{"id": "0", "chunkCount": 2}, {"id": "1", "chunkCount": 2}],
            [{"id": "0", "chunkCount": 3}, {"id": "1", "chunkCount": 2}],
        ),
    }
    check(results, facts, pandas_only=("chunks",))


def at(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


def test_event_time_watermarks_late_rows_and_timers(spark, work):
    """timeMode "eventtime", a 10 s watermark: Spark's event-time case (batch 0's watermark 0, a
    timer at the watermark fires in its batch, rows at or below the previous batch's watermark
    dropped), and (pandas) one chunk per key without limits."""
    cases = {"event": p.LatestEventTime, "chunks": ChunkCount}
    files = [
        [("event", "a", at(20))] + [("chunks", k, at(20)) for k in "0011"],
        [("event", "a", at(4))] + [("chunks", k, at(20)) for k in "00011"],
        [("event", "a", at(s)) for s in (2, 11, 13, 15)],
    ]
    write_rows(work, files, ("case", "id", "eventTime"))
    results = four_ways(
        spark, work, "event", "case string, id string, eventTime timestamp", cases, "eventtime", 3, watermark=10_000
    )
    facts = {
        "event": expect(
            [{"id": "a", "timestamp": "20"}, {"id": "a-expired", "timestamp": "0"}],
            [{"id": "a", "timestamp": "4"}, {"id": "a-expired", "timestamp": "10000"}],
            [{"id": "a", "timestamp": "15"}, {"id": "a-expired", "timestamp": "10000"}],
        ),
        "chunks": expect([{"id": k, "chunkCount": 1} for k in "01"], [{"id": k, "chunkCount": 1} for k in "01"]),
    }
    check(results, facts, pandas_only=("chunks",))


def test_composite_output_types(spark, work):
    """Spark's composite-output case: arrays, maps, arrays and maps of structs as output
    columns (pandas: dicts; Row API: Rows), on both APIs of both."""
    write_rows(work, [R1, R2], ("id", "temperature"))
    schema = (
        "primitiveValue string, listOfPrimitive array<string>, mapOfPrimitive map<string, string>, "
        "listOfComposite array<struct<intValue: int, doubleValue: double, arrayValue: array<string>, "
        "mapValue: map<string, string>>>, mapOfComposite map<string, struct<intValue: int, doubleValue: double, "
        "arrayValue: array<string>, mapValue: map<string, string>>>"
    )
    results = {}
    for pandas in (True, False):
        api = "pandas" if pandas else "row"
        grouped = input_stream(spark, work, "id string, temperature long").groupBy("id")
        method = "transformWithStateInPandas" if pandas else "transformWithState"
        if hasattr(grouped, method):
            frame = getattr(grouped, method)(p.CompositeOutput(pandas), schema, "Update", "None")
            results[f"spark {api}"] = collect(frame, work / f"cp-spark-{api}", 2)
        frame = transform_with_state(
            input_stream(spark, work, "id string, temperature long"), ["id"], p.CompositeOutput(pandas), schema,
            work / f"state-{api}", work / f"changelog-{api}", "composite", num_partitions=2, api=api,
        )  # fmt: skip
        results[f"kstate {api}"] = collect(frame, work / f"cp-kstate-{api}", 2)

    def plain(value):
        if isinstance(value, Row):
            return {k: plain(v) for k, v in value.asDict().items()}
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    for api, outputs in results.items():
        got = [[plain(list(row)) for row in batch] for batch in outputs]
        expected = [
            [[f"key_{k}_count_{n}", *plain(list(p.composite_output(True, n).values()))] for k, n in keys]
            for keys in ([("0", 2), ("1", 2)], [("0", 5), ("1", 4)])
        ]
        assert got == expected, api


def test_int_for_decimal_is_coerced_as_the_session_allows_or_fails_as_spark(spark, work):
    """A batch (not streaming) query whose processor returns an int for a decimal(10, 2) column:
    with Spark's intToDecimalCoercionEnabled the value is coerced, without it the query fails
    with Spark's conversion error (kstate and Spark alike)."""
    df = spark.createDataFrame([("1", "a"), ("1", "b"), ("2", "c")], ["id", "value"])
    output = "id string, decimal_result decimal(10, 2)"
    setting = "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled"

    spark_has_it = hasattr(df.groupBy("id"), "transformWithState")  # the setting is new in 4.1 too

    def queries(index):
        if spark_has_it:
            yield df.groupBy("id").transformWithStateInPandas(p.IntForDecimal(True), output, "Update", "None")
        yield transform_with_state(
            df, ["id"], p.IntForDecimal(True), output, work / f"state-{index}", work / f"changelog-{index}",
            "decimal", num_partitions=2, lock_timeout=60,
        )  # fmt: skip

    try:
        spark.conf.set(setting, "true")
        coerced = [sorted(tuple(r) for r in q.collect()) for q in queries(0)]
        assert all(c == [("1", 12345), ("2", 12345)] for c in coerced)
        spark.conf.set(setting, "false")
        failures = []
        for query in queries(1):
            with pytest.raises(Exception) as failed:
                query.collect()
            failures.append(str(failed.value))
        # Spark's words depend on what Arrow raises (TypeError: "Cannot convert the output value",
        # ValueError: "Failed to convert the value"); kstate's are the same.
        phrases = [w for w in ("Cannot convert the output value", "Failed to convert the value") if w in failures[0]]
        assert all(w in failures[-1] for w in phrases) and "convert the" in failures[-1], failures[-1]
    finally:
        spark.conf.unset(setting)


def test_event_time_with_late_rows_and_timestamps_in_a_non_utc_zone_equals_spark(spark, work):
    """Event time in Spark's default settings (batches without data on) and a session time zone
    east of UTC: TimestampType in, in state and out; late rows (at or below the previous batch's
    watermark) dropped; timers at the watermark fire, in the batch without data that follows
    the last input too. Spark's transformWithStateInPandas and kstate's give the same batches.
    Each input file comes once the query settled (its batches without data done)."""
    schema = "user string, ts timestamp, amount int"
    local = datetime.datetime(2024, 3, 10, 9, 0, 0)  # wall-clock times of the session zone
    files = [
        [("u1", local, 1), ("u1", local + datetime.timedelta(seconds=30), 2), ("u2", local, 3)],
        [("u1", local - datetime.timedelta(seconds=20), 4), ("u2", local + datetime.timedelta(seconds=45), 5)],
        [("u1", local + datetime.timedelta(seconds=10), 6), ("u3", local + datetime.timedelta(seconds=90), 7)],
    ]
    for index, rows in enumerate(files):
        frame = spark.createDataFrame(rows, schema)
        frame.coalesce(1).write.mode("overwrite").parquet(str(work / "stage" / str(index)))
    output = "user string, kind string, ts timestamp, count long"
    zone, no_data = "spark.sql.session.timeZone", "spark.sql.streaming.noDataMicroBatches.enabled"
    saved = {k: spark.conf.get(k) for k in (zone, no_data)}
    spark.conf.set(zone, "Asia/Kolkata")
    spark.conf.set(no_data, "true")
    try:
        stream = input_stream(spark, work, schema)
        grouped = stream.withWatermark("ts", "5 seconds").groupBy("user")
        frame = grouped.transformWithStateInPandas(p.LastSeen(True), output, "Update", "EventTime")
        theirs = feed_and_collect(work, frame, "spark", len(files), owes_batch=watermark_behind(5_000))
        frame = transform_with_state(
            stream, ["user"], p.LastSeen(True), output, work / "state", work / "changelog", "late",
            num_partitions=2, time_mode="EventTime", event_time_column="ts", watermark_delay_ms=5_000, lock_timeout=60,
            fire_idle_timers=True,  # the default on PySpark 4.1+
        )  # fmt: skip
        # kstate's batch without data comes from its tick source at a later trigger (Spark's at the
        # next one): the query owes it while the partitions' timer records say one is needed.
        timers = work / "changelog" / "late-kstate-timers"
        ours = feed_and_collect(
            work, frame, "kstate", len(files),
            owes_batch=lambda _: needs_batch(timers, "EventTime", 5_000, int(time.time() * 1000)),
        )  # fmt: skip
        assert timers.is_dir(), "the tick source's records are where this test looks"
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    assert ours == theirs
    assert ("u1", "input", local + datetime.timedelta(seconds=30), 2) in ours[0], "timestamps are session wall time"
    assert not any(r[0] == "u1" and r[3] == 3 for batch in ours for r in batch), "u1's late row was dropped"
    assert sum(r[1] == "expired" for batch in ours for r in batch) >= 3, "timers fired in batches without data"


def file_rows_read(query):
    """The rows ``query``'s file source has read, over its recent progress."""
    return sum(
        source["numInputRows"]
        for progress in query.recentProgress
        for source in progress["sources"]
        if source["description"].startswith("FileStreamSource")
    )


def watermark_behind(delay_ms):
    """Whether a query with a ``withWatermark`` of ``delay_ms`` owes a batch without data: the
    watermark its last batch used is below the largest event time read so far less the delay
    (Spark's rule for running one, with no-data batches on)."""

    def owes(query):
        progress = query.recentProgress
        event_times = [p["eventTime"] for p in progress if "eventTime" in p]
        largest = [instant_ms(e["max"]) for e in event_times if "max" in e]
        if not largest or "watermark" not in event_times[-1]:
            return False
        return instant_ms(event_times[-1]["watermark"]) < max(largest) - delay_ms

    return owes


def instant_ms(text):
    """Milliseconds since the epoch of a progress report's UTC instant (``...T09:00:00.000Z``)."""
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def settle(query, rows, owes_batch):
    """Waits until ``query`` has read ``rows`` input rows, owes no batch (``owes_batch(query)``)
    and runs none: every batch the input so far calls for is done, however slow the machine."""
    # In this order: a batch that changes what is owed runs until after it changed it.
    wait_for(
        lambda: file_rows_read(query) >= rows and not owes_batch(query) and not query.status["isTriggerActive"],
        query,
        "the query settled",
    )


def feed_and_collect(work, frame, name, files, owes_batch):
    """Runs ``frame`` on ``work/in``, adding the staged input files one at a time, each once the
    query settled; the non-empty outputs of its batches, in order."""
    import pyarrow.parquet as pq

    for old in (work / "in").glob("*"):
        old.unlink()
    query, outputs = collecting(frame, work / f"cp-{name}", "300 milliseconds")
    try:
        rows = 0
        for index in range(files):
            for part in (work / "stage" / str(index)).glob("*.parquet"):
                rows += pq.read_metadata(part).num_rows
                copy = part.read_bytes()
                add_whole(
                    work / "in" / f"{index:03d}-{part.name}", index, lambda path, copy=copy: path.write_bytes(copy)
                )
            settle(query, rows, owes_batch)
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return [outputs[b] for b in sorted(outputs)]


def test_idle_stream_timers_fire_without_input_and_exactly_once_across_a_restart(spark, work):
    """Processing time with Spark's defaults (batches without data on): input stops, and each
    key's timer fires within its delay plus a trigger, in a batch kstate's tick source adds;
    stopped before a timer is due and restarted after it, the timer fires once; a query with
    nothing due runs no batch."""
    write_rows(work, [R3], ("id", "temperature"))
    output = "id string, kind string, count long, at long"

    def query(trigger):
        """The query, its rows (``(batch id, *row)``) and its batch ids, filled as it runs."""
        frame = transform_with_state(
            input_stream(spark, work, "id string, temperature long"), ["id"], p.Reminder(False), output,
            work / "state", work / "changelog", "idle", num_partitions=2, time_mode="ProcessingTime", api="row",
            lock_timeout=60, fire_idle_timers=True,  # the default on PySpark 4.1+
        )  # fmt: skip
        rows, batches = [], []

        def sink(batch_frame, batch_id):
            batches.append(batch_id)
            rows.extend((batch_id, *r) for r in batch_frame.collect())

        started = (
            frame.writeStream.outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", str(work / "cp"))
            .trigger(**trigger)
            .start()
        )
        return started, rows, batches

    no_data = "spark.sql.streaming.noDataMicroBatches.enabled"
    spark.conf.set(no_data, "true")  # Spark's default (the module runs Spark's tests' "false")
    try:
        idle_timers(spark, work, query)
    finally:
        spark.conf.set(no_data, "false")


def planned_at(checkpoint, batch):
    """When Spark planned ``batch`` (its trigger's time, in its offset log), in ms."""
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[1])["batchTimestampMs"]


def committed_at(checkpoint, batch):
    """When ``batch``'s commit log entry was written, in ms."""
    return (checkpoint / "commits" / str(batch)).stat().st_mtime_ns // 1_000_000


class IdleTriggers:
    """A listener counting, per query run, the triggers that ran no batch (Spark's idle events,
    one a trigger while ``spark.sql.streaming.noDataProgressEventInterval`` is 0)."""

    def __init__(self, spark):
        from pyspark.sql.streaming import StreamingQueryListener

        seen = self.seen = collections.Counter()

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):  # noqa: N802
                pass

            def onQueryProgress(self, event):  # noqa: N802
                pass

            def onQueryIdle(self, event):  # noqa: N802
                seen[str(event.runId)] += 1

            def onQueryTerminated(self, event):  # noqa: N802
                pass

        self.listener = Listener()
        spark.streams.addListener(self.listener)


def idle_timers(spark, work, query):
    trigger_ms = 500
    every_trigger = {"processingTime": f"{trigger_ms} milliseconds"}
    running, rows, batches = query(every_trigger)
    try:
        wait_for(lambda: sum(r[2] == "timer" for r in rows) >= 2, running, "both timers fired")
        committed(running, max(batches))
    finally:
        running.stop()
    assert running.exception() is None, running.exception()
    fired = [r for r in rows if r[2] == "timer"]
    assert sorted((r[1], r[3]) for r in fired) == [("0", 1), ("1", 1)]
    inputs = {r[0] for r in rows if r[2] == "input"}
    for batch, _, _, _, expiry in fired:
        assert batch not in inputs, "fired in a batch without input"
        # The tick source adds the batch at the first trigger that finds the timer due, once the
        # batch before it is done; the slack covers that trigger's own reads, not a batch's run.
        ready = max(expiry, committed_at(work / "cp", batch - 1))
        assert planned_at(work / "cp", batch) <= ready + trigger_ms + 5_000, "fired within its interval plus a trigger"

    # A new input, then stopped before its timer is due (availableNow: the query ends after the
    # input's batch, and its tick source adds none); the timer comes due while it is stopped.
    write_rows(work, [R3, [("0", 1)]], ("id", "temperature"))
    running, rows, batches = query({"availableNow": True})
    assert running.awaitTermination(600), "the availableNow query ended"
    assert running.exception() is None, running.exception()
    assert [r[1:4] for r in rows] == [("0", "input", 2)], "stopped before the timer was due"
    due = rows[0][4] + p.Reminder.delay_ms
    while time.time() * 1000 <= due:
        time.sleep(0.05)

    interval = "spark.sql.streaming.noDataProgressEventInterval"
    idle = IdleTriggers(spark)
    spark.conf.set(interval, "0")
    try:
        running, rows, batches = query(every_trigger)
        try:
            wait_for(lambda: rows, running, "the timer fired after the restart")
            committed(running, max(batches))
            # Nothing else is due: the next triggers run no batch (counted, not waited out).
            seen = idle.seen[str(running.runId)]
            wait_for(lambda: idle.seen[str(running.runId)] >= seen + 5, running, "five idle triggers")
            idle_batches = len(batches)
        finally:
            running.stop()
    finally:
        spark.streams.removeListener(idle.listener)
        spark.conf.unset(interval)
    assert [r[1:4] for r in rows] == [("0", "timer", 2)], "fired once after the restart"
    assert idle_batches == 1, "a query with nothing due ran no batch"


def test_row_api_with_an_initial_state_is_called_per_max_records_as_spark(spark, work):
    """Spark's Row runner with an initial state calls ``handleInputRows`` once per
    ``maxRecordsPerBatch`` rows of a key, its initial rows counted first (without one, once per
    key); kstate's Row API does the same (batch queries)."""
    df = spark.createDataFrame([("0", 1), ("0", 2), ("0", 3), ("1", 4)], "id string, temperature long")
    initial = spark.createDataFrame([("0", 9)], "id string, initVal int")
    output = "id string, call int, rows int"
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        results = []
        for index, with_initial in enumerate((True, False)):
            start = initial.groupBy("id") if with_initial else None
            grouped = df.groupBy("id")
            if hasattr(grouped, "transformWithState"):
                theirs = grouped.transformWithState(p.Calls(False), output, "Update", "None", initialState=start)
                results.append(sorted(tuple(r) for r in theirs.collect()))
            ours = transform_with_state(
                df, ["id"], p.Calls(False), output, work / f"state-{index}", work / f"changelog-{index}", "calls",
                num_partitions=2, api="row", initial_state=start, lock_timeout=60,
            )  # fmt: skip
            results.append(sorted(tuple(r) for r in ours.collect()))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    per_chunk, per_key = [("0", 1, 1), ("0", 2, 2), ("1", 1, 1)], [("0", 1, 3), ("1", 1, 1)]
    assert results == [per_chunk] * (len(results) // 2) + [per_key] * (len(results) // 2)


def every_api(spark, work, name, frame, keys, processor, output, batches=None, initial=None, then=None, **options):
    """``processor`` (a class of ``spark_suite_processors``) on ``frame()`` grouped by ``keys``, on
    Spark's pandas and Row APIs (PySpark 4.1+) and kstate's; results by API name: the rows of a
    batch query, or the first ``batches`` non-empty outputs of a streaming one (checkpoints
    ``work/cp-<name>-<system>-<api>``; kstate's changelogs ``work/changelog-<name>-<api>``,
    application id ``<name>-<api>``). ``initial``: the initial state, or a function of the API's
    name giving it; ``then``: applied to each API's output (Spark's tests that transform it);
    ``options`` go to kstate's ``transform_with_state``."""
    options = {"num_partitions": 3, "time_mode": "None", "lock_timeout": 60, **options}
    results = {}
    for api in ("pandas", "row"):
        pandas = api == "pandas"

        def start(system, api=api):
            return initial(f"{system} {api}") if callable(initial) else initial

        grouped = frame().groupBy(*keys)
        frames = {}
        if hasattr(grouped, "transformWithState"):
            method = "transformWithStateInPandas" if pandas else "transformWithState"
            frames["spark"] = getattr(grouped, method)(
                processor(pandas), output, "Update", options["time_mode"], initialState=start("spark")
            )
        frames["kstate"] = transform_with_state(
            frame(), keys, processor(pandas), output, work / f"state-{name}-{api}", work / f"changelog-{name}-{api}",
            f"{name}-{api}", api=api, initial_state=start("kstate"), **options,
        )  # fmt: skip
        for system, result in frames.items():
            result = result if then is None else then(result)
            if batches is None:
                results[f"{system} {api}"] = sorted(tuple(r) for r in result.collect())
            else:
                results[f"{system} {api}"] = collect(result, work / f"cp-{name}-{system}-{api}", batches)
    return results


def all_equal(results, expected):
    """Every API's result is ``expected`` (so kstate's equal Spark's)."""
    for api, got in results.items():
        assert got == expected, api


def test_batch_queries_with_and_without_an_initial_state(spark, work):
    """Spark's batch queries: a batch DataFrame with an initial state (the initial value of key 0
    added to its rows; key 3, initial state only, emits nothing), and without one."""
    df = spark.createDataFrame(R1, "id string, temperature int")
    initial = spark.createDataFrame(INITIAL, "id string, initVal int").groupBy("id")
    results = every_api(
        spark, work, "batch", lambda: df, ["id"], p.Accumulated, "id string, value string", initial=initial
    )
    all_equal(results, [("0", str(789 + 123 + 46)), ("1", str(146 + 346))])
    # Spark's batch query (map state, no initial state), on the Row API too.
    results = every_api(spark, work, "plain", lambda: df, ["id"], p.Counters, "id string, countAsString string")
    all_equal(results, [("0", "2"), ("1", "2")])


def test_non_contiguous_grouping_columns_with_and_without_an_initial_state(spark, work):
    """Spark's non-contiguous grouping columns: the key ``(id1, id2)`` is the input's first and
    third columns (the initial state's second and third), with and without an initial state."""
    rows = [("0", 123, "1"), ("0", 46, "1"), ("1", 146, "2"), ("1", 346, "2")]
    write_rows(work, [rows], ("id1", "temperature", "id2"))
    initial = spark.createDataFrame([(789, "0", "1"), (987, "3", "2")], "initVal int, id1 string, id2 string")
    output = "id1 string, id2 string, value string"

    def run(name, start):
        stream = input_stream(spark, work, "id1 string, temperature long, id2 string")
        return every_api(spark, work, name, lambda: stream, ["id1", "id2"], p.Accumulated, output, 1, start)

    key_1 = ("1", "2", str(146 + 346))
    all_equal(run("plain", None), [[("0", "1", str(123 + 46)), key_1]])
    all_equal(run("initial", initial.groupBy("id1", "id2")), [[("0", "1", str(789 + 123 + 46)), key_1]])


def test_a_non_nullable_state_field_fails_under_avro_encoding_as_spark(spark, work):
    """Spark's not-nullable case: with ``stateStore.encodingFormat=avro``, a value state whose
    fields are not nullable fails Spark's query with ``TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE``
    and kstate's ``transform_with_state`` with a ``StateSchemaError`` of the same name (before the
    query starts); with Spark's default encoding both run it."""
    from pyspark.errors import StreamingQueryException

    from kstate.errors import StateSchemaError

    write_rows(work, [R1], ("id", "temperature"))
    output = "id string, name string"
    error_class = "TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE"
    setting = "spark.sql.streaming.stateStore.encodingFormat"
    spark.conf.set(setting, "avro")
    try:
        for api in ("pandas", "row"):
            grouped = input_stream(spark, work, "id string, temperature long").groupBy("id")
            if hasattr(grouped, "transformWithState"):
                method = "transformWithStateInPandas" if api == "pandas" else "transformWithState"
                frame = getattr(grouped, method)(p.NotNullable(api == "pandas"), output, "Update", "None")
                query, _ = collecting(frame, work / f"cp-avro-{api}")
                with pytest.raises(StreamingQueryException, match=error_class):
                    query.processAllAvailable()
                query.stop()
            with pytest.raises(StateSchemaError, match=f"{error_class}.*'state' must be nullable"):
                transform_with_state(
                    input_stream(spark, work, "id string, temperature long"), ["id"], p.NotNullable(api == "pandas"),
                    output, work / "state-avro", work / "changelog-avro", "avro", num_partitions=2, api=api,
                )  # fmt: skip
    finally:
        spark.conf.unset(setting)
    df = spark.createDataFrame(R1, "id string, temperature int")
    results = every_api(spark, work, "unsaferow", lambda: df, ["id"], p.NotNullable, output)
    all_equal(results, [("0", "name-0"), ("1", "name-1")])


def statestore(spark, work, name, system, api, variable, field):
    """A list state variable's ``(id, initVal)`` rows (``initVal``: the element's ``field``):
    Spark's state data source on Spark's checkpoint, ``read_processor_state`` on kstate's
    changelogs (``every_api``'s places)."""
    if system == "spark":
        reader = spark.read.format("statestore").option("stateVarName", variable)
        frame = reader.load(str(work / f"cp-{name}-spark-{api}"))
    else:
        frame = read_processor_state(
            spark, work / f"changelog-{name}-{api}", f"{name}-{api}", state_dir=work / f"reader-{name}-{api}",
            stateVarName=variable,
        )  # fmt: skip
    return frame.selectExpr("key.id AS id", f"list_element.{field} AS initVal")


def test_an_initial_state_of_many_rows_per_key_read_from_an_earlier_query(spark, work, partitions=3):
    """Spark's restart with multiple rows of initial state: a first query's list state (five
    elements per key), read with the state data source, is a second query's initial state; the
    processor appends each key's initial rows to a list (pandas: one frame, Row: one call per row)
    and sums the input in value state."""
    first, second = work / "first", work / "second"
    for place, files in ((first, [R1]), (second, [R1, AFTER_INITIAL])):
        (place / "in").mkdir(parents=True)
        write_rows(place, files, ("id", "temperature"))
    schema = "id string, temperature long"
    options = {"num_partitions": partitions}
    results = every_api(
        spark, work, "lists", lambda: input_stream(spark, first, schema), ["id"], p.InterleavedLists,
        "id string, countAsString string", 1, **options,
    )  # fmt: skip
    all_equal(results, [[("0", "2"), ("1", "2")]])

    def initial(api_name):
        return statestore(spark, work, "lists", *api_name.split(), "listState1", "temperature").groupBy("id")

    results = every_api(
        spark, work, "multi", lambda: input_stream(spark, second, schema), ["id"], p.ListedInitialState,
        "id string, value string", 2, initial, **options,
    )  # fmt: skip
    all_equal(results, [[("0", str(123 + 46)), ("1", str(146 + 346))], [("0", str(123 + 46 + 67)), ("3", "12")]])
    for api_name in results:
        elements = statestore(spark, work, "multi", *api_name.split(), "list_state", "value").collect()
        elements = sorted(tuple(r) for r in elements)
        assert elements == [(k, v) for k in "01" for v in (20, 20, 111, 120, 120)], api_name


def test_an_initial_state_with_a_transformation_of_the_output(spark, work):
    """Spark's initial state with an extra transformation: a ``select`` (a renamed key, the value
    as JSON) on the output of the initial-state case."""
    from pyspark.sql import functions as fn

    write_rows(work, [R1, AFTER_INITIAL], ("id", "temperature"))
    initial = spark.createDataFrame(INITIAL, "id string, initVal int").groupBy("id")

    def then(frame):
        return frame.select(fn.col("id").alias("key"), fn.to_json(fn.struct(fn.col("value"))).alias("value"))

    results = every_api(
        spark, work, "extra", lambda: input_stream(spark, work, "id string, temperature long"), ["id"],
        p.Accumulated, "id string, value string", 2, initial, then,
    )  # fmt: skip

    def json_of(*rows):
        return [(k, json.dumps({"value": str(v)}, separators=(",", ":"))) for k, v in rows]

    first, second = json_of(("0", 789 + 123 + 46), ("1", 146 + 346)), json_of(("0", 789 + 123 + 46 + 67), ("3", 999))
    all_equal(results, [first, second])


def test_timers_and_initial_states_on_a_single_partition(spark, work):
    """Spark's single-partition runs (one shuffle partition; kstate's ``num_partitions=1``): the
    processing-time timer case and initial state with timers, the event-time case, and the
    initial state of many rows per key read from an earlier query."""
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        processing = work / "processing"
        (processing / "in").mkdir(parents=True)
        files = [
            tagged("timer", R3) + tagged("init_timers", R1),
            tagged("timer", R1) + tagged("init_timers", AFTER_INITIAL),
            tagged("timer", R2),
        ]
        write_rows(processing, files)
        initial = spark.createDataFrame(tagged("init_timers", INITIAL), "case string, id string, initVal int")
        cases = {"timer": p.CountdownTimer, "init_timers": p.AccumulatedWithTimers}
        schema = "case string, id string, temperature long"
        results = four_ways(spark, processing, "proc", schema, cases, "ProcessingTime", 3, initial, partitions=1)
        facts = {
            "timer": counts(
                [("0", "1"), ("1", "1")], [("0", "3"), ("0", "-1"), ("1", "3")], [("0", "3"), ("0", "-1"), ("1", "5")]
            ),
            "init_timers": expect(
                [{"id": "0", "value": "958"}, {"id": "1", "value": "492"}]
                + [{"id": f"{k}-expired", "value": "timer"} for k in "03"],
                [{"id": "0", "value": "1025"}, {"id": "3", "value": "999"}],
            ),
        }
        check(results, facts)

        event = work / "event"
        (event / "in").mkdir(parents=True)
        files = [[("event", "a", at(20))], [("event", "a", at(4))], [("event", "a", at(s)) for s in (2, 11, 13, 15)]]
        write_rows(event, files, ("case", "id", "eventTime"))
        schema = "case string, id string, eventTime timestamp"
        cases = {"event": p.LatestEventTime}
        results = four_ways(spark, event, "event", schema, cases, "eventtime", 3, watermark=10_000, partitions=1)
        facts = {
            "event": expect(
                [{"id": "a", "timestamp": "20"}, {"id": "a-expired", "timestamp": "0"}],
                [{"id": "a", "timestamp": "4"}, {"id": "a-expired", "timestamp": "10000"}],
                [{"id": "a", "timestamp": "15"}, {"id": "a-expired", "timestamp": "10000"}],
            ),
        }
        check(results, facts)

        restart = work / "restart"
        restart.mkdir()
        test_an_initial_state_of_many_rows_per_key_read_from_an_earlier_query(spark, restart, partitions=1)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", SPARK_TEST_CONF["spark.sql.shuffle.partitions"])


def test_a_watermark_without_event_time_filters_nothing(spark, work):
    """Spark's watermark with time modes None and ProcessingTime: a watermarked input (10 s)
    whose late rows still reach the processor (no event-time filtering outside EventTime), on
    kstate too (the same ``withWatermark`` input, no ``event_time_column``)."""
    files = [[("a", at(20))], [("a", at(4))], [("a", at(s)) for s in (2, 11, 13, 15)]]
    write_rows(work, files, ("id", "eventTime"))

    def frame():
        return input_stream(spark, work, "id string, eventTime timestamp").withWatermark("eventTime", "10 seconds")

    for time_mode in ("None", "ProcessingTime"):
        results = every_api(
            spark, work, time_mode.lower(), frame, ["id"], p.EarliestEventTime, "id string, timestamp string", 3,
            time_mode=time_mode,
        )  # fmt: skip
        all_equal(results, [[("a", "20")], [("a", "4")], [("a", "2")]])


FUZZ_CASES = {"running_count": p.RunningCount, "top_k": p.TopScores, "word_frequency": p.WordFrequency}


def fuzz_batches(seed=20, batches=3, rows=60):
    """Random input of Spark's TwsTester fuzz tests, per batch ``(case, id, value, score)`` rows:
    six keys a case, five-letter values (one letter for word frequency), scores to 1/1000."""
    rng = random.Random(seed)

    def row(case):
        letters = 1 if case == "word_frequency" else 5
        value = "".join(rng.choices(string.ascii_lowercase, k=letters))
        return (case, f"key{rng.randint(0, 5)}", value, rng.randint(0, 1_000_000) / 1000)

    return [[row(case) for case in FUZZ_CASES for _ in range(rows)] for _ in range(batches)]


def outputs_of_tester(tester_class, files):
    """Per batch, the sorted ``(case, id, out)`` rows of ``tester_class`` (kstate's or Spark's
    TwsTester), one tester per case and API, fed key by key as a batch groups them."""
    results = {}
    for api in ("pandas", "row"):
        testers = {case: tester_class(make(api == "pandas")) for case, make in FUZZ_CASES.items()}
        batches = []
        for rows in files:
            out = []
            grouped = collections.defaultdict(list)
            for case, key, value, score in rows:
                grouped[(case, key)].append(Row(id=key, value=value, score=score))
            for (case, key), values in grouped.items():
                if api == "pandas":
                    frame = testers[case].testInPandas(key, pd.DataFrame([v.asDict() for v in values]))
                    records = frame.to_dict("records")
                else:
                    records = [r.asDict(recursive=True) for r in testers[case].test(key, values)]
                out.extend((case, key, p.as_json(r)) for r in records)
            batches.append(sorted(out))
        results[api] = batches
    return results


def test_tws_tester_fuzz_equals_streaming_queries(spark, work):
    """Spark's TwsTester fuzz tests (running count, top k, word frequency on random input, fixed
    seed): kstate's TwsTester, Spark's (PySpark 4.2+) and the streaming queries of Spark's and
    kstate's ``transform_with_state`` give the same rows batch by batch, on both APIs."""
    files = fuzz_batches()
    write_rows(work, files, ("case", "id", "value", "score"))
    results = every_api(
        spark, work, "fuzz", lambda: input_stream(spark, work, "case string, id string, value string, score double"),
        ["case", "id"], lambda pandas: p.Suite(FUZZ_CASES, pandas), p.SUITE_OUTPUT, batches=len(files),
    )  # fmt: skip
    expected = outputs_of_tester(TwsTester, files)
    assert all(batch for batch in expected["row"]) and expected["row"] == expected["pandas"]
    for api, outputs in results.items():
        assert outputs == expected[api.split()[1]], api
    if SparkTwsTester is not None:
        assert outputs_of_tester(SparkTwsTester, files) == expected


def test_chained_aggregation_after_the_operator_with_a_watermark_on_its_output(spark, work):
    """Spark's chaining case: an event-time processor (no state) passes each row's event time on
    as ``outputTimestamp``; an Append-mode count by it (and by it and ``id``) follows. Spark names
    the column with ``eventTimeColumnName``; kstate takes a ``.withWatermark`` on its output
    instead (the same delay as the input's), and finalizes the same counts in the same batches:
    10 s after batch 1, 11 s and 15 s after batch 2 (the row at 5 s is late and dropped)."""
    files = [[("a", at(10)), ("b", at(15))], [("a", at(11)), ("c", at(25))], [("a", at(5))]]
    write_rows(work, files, ("id", "eventTime"))
    output = "id string, outputTimestamp timestamp"

    def naive(seconds):
        return at(seconds).replace(tzinfo=None)

    # Spark's two groupings, one per API (each query costs seconds).
    cases = {
        "pandas": (("outputTimestamp",), [[(naive(10), 1)], [(naive(11), 1), (naive(15), 1)]]),
        "row": (("outputTimestamp", "id"), [[(naive(10), "a", 1)], [(naive(11), "a", 1), (naive(15), "b", 1)]]),
    }
    for api, (grouping, want) in cases.items():
        pandas = api == "pandas"
        stream = input_stream(spark, work, "id string, eventTime timestamp")
        frames = {}
        grouped = stream.withWatermark("eventTime", "5 seconds").groupBy("id")
        if hasattr(grouped, "transformWithState"):
            method = "transformWithStateInPandas" if pandas else "transformWithState"
            frames["spark"] = getattr(grouped, method)(
                p.ChainedEvents(pandas), output, "Append", "EventTime", eventTimeColumnName="outputTimestamp"
            )
        name = f"chain-{len(grouping)}-{api}"
        kstate = transform_with_state(
            stream, ["id"], p.ChainedEvents(pandas), output, work / f"state-{name}", work / f"changelog-{name}",
            name, num_partitions=3, time_mode="EventTime", event_time_column="eventTime",
            watermark_delay_ms=5000, api=api, lock_timeout=60,
        )  # fmt: skip
        frames["kstate"] = kstate.withWatermark("outputTimestamp", "5 seconds")
        for system, frame in frames.items():
            counted = frame.groupBy(*grouping).count()
            got = collect(counted, work / f"cp-{name}-{system}", 2, output_mode="append")
            assert got == want, (system, api, grouping)

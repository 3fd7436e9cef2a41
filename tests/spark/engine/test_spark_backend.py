"""kstate.spark under real local Spark: a running count per key over the micro-batches of a
streaming query reading parquet files (one file per trigger), checked against the same count
computed in plain Python, through worker kills, restarts, replays, lost state and duplicate
attempts. One SparkSession for the module; ``local[2,3]`` is two threads with three attempts
per task, so a killed task is retried as on a cluster."""

import collections
import datetime
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.spark import StateBackend  # noqa: E402
from kstate.spark.protocol.progress import batch_listener  # noqa: E402

from ..workload import (  # noqa: E402
    ROWS,
    SCHEMA,
    RunningCount,
    add_files,
    counts_into,
    file_keys,
    input_stream,
    reference,
    run_to_end,
    running_count,
    spark_for_tests,
    write_file,
)

# Spark's workers cannot import this test module by name: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-tests", "local[2,3]")
    yield session
    session.stop()


def backend_of(work, state="state", num_partitions=2):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend(
        [counts], work / state, work / "changelog", "counts-app", lock_timeout=60, keys=["key"],
        num_partitions=num_partitions,
    )  # fmt: skip


def run_query(spark, work, udf, outputs):
    """Runs the streaming query over the files not yet processed; ``outputs[batch]`` gets every
    key's count as the batch reported it (the sink is at-least-once: a replay reports again)."""
    counted = input_stream(spark, work).repartition(2, "key").mapInArrow(udf, SCHEMA)
    run_to_end(counted, work, counts_into(outputs))


def test_running_count_equals_plain_python(spark, work):
    add_files(work, range(4))
    outputs = {}
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    assert outputs == reference(range(4))


def test_a_python_worker_killed_mid_batch_is_retried_from_the_previous_batch(spark, work):
    add_files(work, range(3))
    marker = work / "killed"
    backend = backend_of(work)

    def killed_once(batches, stores):
        for out in running_count(batches, stores):
            if stores.batch_id == 1 and stores.partition == 0 and not marker.exists():
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)  # writes staged, nothing committed
            yield out

    outputs = {}
    run_query(spark, work, backend.map_in_arrow(killed_once), outputs)
    assert marker.exists()
    assert outputs == reference(range(3))


def test_a_restarted_query_continues_from_its_checkpoint(spark, work):
    add_files(work, range(2))
    outputs = {}
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    add_files(work, range(2, 4))
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    assert outputs == reference(range(4))


def test_a_batch_replayed_after_its_state_committed_is_not_counted_twice(spark, work):
    add_files(work, range(3))
    outputs = {}
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    # The state of batch 2 committed, then the driver died before Spark's commit log got it.
    for entry in ("2", ".2.crc"):
        (work / "checkpoint" / "commits" / entry).unlink()
    outputs.clear()
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    assert outputs == {2: reference(range(3))[2]}, "only batch 2 ran again, from the state of batch 1"


def test_a_lost_state_dir_is_restored_from_the_changelog(spark, work):
    add_files(work, range(2))
    outputs = {}
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    # The partitions move to an executor with an empty disk: the workers that kept them open
    # close them (as a lost executor's would be gone), then the local state goes.
    backend_of(work).release_local_state([0, 1])
    shutil.rmtree(work / "state")
    add_files(work, range(2, 4))
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    assert outputs == reference(range(4))


def reported_batches(spark, work, backend, wait_until, wait=True):
    """Runs the query over the files not yet processed with ``backend``'s progress reports on;
    returns (run id, batch id) of every batch Spark reported (``wait``: once kstate's reports
    have them)."""
    backend.report_progress(spark)
    counted = input_stream(spark, work).repartition(2, "key").mapInArrow(backend.map_in_arrow(running_count), SCHEMA)
    query = (
        counted.writeStream.foreachBatch(counts_into({}))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = {(str(p["runId"]), p["batchId"]) for p in map(json.loads, (p.json for p in query.recentProgress))}
    if wait:  # progress events reach listeners asynchronously
        wait_until(lambda: batches <= {(r.run_id, r.batch_id) for r in backend.progress}, "kstate's progress reports")
    return batches


def test_progress_reports_each_batch_with_its_own_tasks_whenever_its_event_arrives(spark, work, wait_until):
    """Each batch's report holds its own tasks' restores and commits, keyed by query run and batch:
    not what happened between two listener events (which arrive late, and interleave with the
    next query's start)."""
    backend = backend_of(work)
    add_files(work, range(2))
    first = reported_batches(spark, work, backend, wait_until)
    backend.release_local_state([0, 1])
    shutil.rmtree(work / "state")
    add_files(work, range(2, 4))
    second = reported_batches(spark, work, backend, wait_until, wait=False)
    add_files(work, range(4, 5))  # the next query starts before the last one's events arrive
    third = reported_batches(spark, work, backend, wait_until)
    batches = first | second | third
    reports = {(r.run_id, r.batch_id): r for r in backend.progress}
    assert batches <= set(reports), "every batch Spark reported has kstate's report"
    assert {reports[b].tasks for b in batches} == {2}, "both partitions' tasks, once each"
    assert all(reports[b].commit_seconds > 0 and reports[b].max_rss > 0 for b in batches)
    restored = {b: reports[b].restored_records for b in batches}
    (restoring,) = [b for b in second if b[1] == min(batch for _, batch in second)]
    assert restored[restoring] > 0, "the lost state was restored in the second run's first batch"
    assert sum(restored.values()) == restored[restoring], restored


WINDOW_MS = 60_000


EPOCH = (time.time_ns() // 1_000_000 // WINDOW_MS - 10) * WINDOW_MS
"""Ten minutes ago on a minute boundary: a windowed changelog's retention (the store's + 1 day)
deletes records by their timestamps, as Kafka's does, so event times are recent."""


def event_time(index, row):
    """Row ``row`` of file ``index`` happened at this time (ms): files overlap in time, so a
    window collects counts over several batches."""
    return EPOCH + index * 40_000 + row * 200


def windowed_reference(files):
    """Every (key, window start)'s count after all ``files``."""
    counts = collections.Counter()
    for index in files:
        for row, key in enumerate(file_keys(index)):
            t = event_time(index, row)
            counts[key, t - t % WINDOW_MS] += 1
    return dict(counts)


def windowed_backend(work):
    supplier = Stores.persistent_window_store("windows", retention_ms=3_600_000, window_size_ms=WINDOW_MS)
    windows = Stores.window_store_builder(supplier, "string", "int64")
    return StateBackend(
        [windows], work / "state", work / "changelog", "windows-app", lock_timeout=60, keys=["key"], num_partitions=2
    )


def count_windows(batches, stores):
    """The UDF: counts per key and tumbling one-minute window of event time (column ``v``)."""
    store = stores["windows"]
    for batch in batches:
        keys, times = batch.column("key").to_pylist(), batch.column("v").to_pylist()
        counted = collections.Counter((key, t - t % WINDOW_MS) for key, t in zip(keys, times))
        totals = {}
        for (key, start), n in counted.items():
            totals[key, start] = (store.fetch(key, start) or 0) + n
            store.put(key, totals[key, start], start)
        yield pa.RecordBatch.from_arrays(
            [pa.array([k for k, _ in totals]), pa.array(list(totals.values()), pa.int64())], names=["key", "count"]
        )


def test_a_window_store_counts_exactly_once_through_a_replay_and_a_lost_state_dir(spark, work):
    for i in range(3):
        write_file(work, i, {"key": file_keys(i), "v": [event_time(i, r) for r in range(ROWS)]})
    outputs = {}
    run_query(spark, work, windowed_backend(work).map_in_arrow(count_windows), outputs)
    # Batch 2's state committed but Spark's commit log never got it: it replays (rolled back
    # first); then the partitions lose their local state and restore from the changelogs.
    for entry in ("2", ".2.crc"):
        (work / "checkpoint" / "commits" / entry).unlink()
    run_query(spark, work, windowed_backend(work).map_in_arrow(count_windows), outputs)
    windowed_backend(work).release_local_state([0, 1])
    shutil.rmtree(work / "state")
    rows = windowed_backend(work).state_dataframe(spark, "windows", num_partitions=2).collect()
    assert all(r["end"] == r["start"] + WINDOW_MS for r in rows)
    assert {(r["key"], r["start"]): r["value"] for r in rows} == windowed_reference(range(3))


def test_two_concurrent_attempts_of_one_batch_publish_it_once(spark, work):
    """Two jobs run partition 0 of batch 7 at once, as two executors would (their own state
    dirs, one changelog). Whatever order they reach the locks in, the batch counts once."""
    add_files(work, [0])
    source = spark.read.parquet(str(work / "in")).repartition(1, "key")
    results, errors = {}, []

    def attempt(name):
        backend = backend_of(work, state=f"state-{name}", num_partitions=1)
        backend.batch_id = 7

        def slow_count(batches, stores):
            import time

            time.sleep(1.0)  # both attempts are inside the task before either publishes
            yield from running_count(batches, stores)

        try:
            rows = source.mapInArrow(backend.map_in_arrow(slow_count), SCHEMA).collect()
            results[name] = {r["key"]: r["count"] for r in rows}
        except Exception as error:  # the loser's last attempt may fail: that is the point
            errors.append(error)

    threads = [threading.Thread(target=attempt, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    once = collections.Counter(file_keys(0))
    assert all(r == once for r in results.values()) and results, (results, errors)
    check = backend_of(work, state="state-check", num_partitions=1)
    check.batch_id = 8

    def read_all(batches, stores):
        for _ in batches:
            pass
        with stores["counts"].all() as entries:
            keys, counts = zip(*entries)
        yield pa.RecordBatch.from_arrays([pa.array(keys), pa.array(counts, pa.int64())], names=["key", "count"])

    rows = (
        spark.read.parquet(str(work / "in"))
        .repartition(1, "key")
        .mapInArrow(check.map_in_arrow(read_all), SCHEMA)
        .collect()
    )
    seen = {r["key"]: r["count"] for r in rows}
    assert seen == dict(once), "batch 7 counted once in the published state"


def test_grouped_apply_in_pandas_keeps_state_per_key(spark, work):
    add_files(work, range(2))
    backend = backend_of(work)

    def per_key(key, frame, stores):
        import pandas as pd

        store = stores["counts"]
        total = (store.get(key[0]) or 0) + len(frame)
        store.put(key[0], total)
        return pd.DataFrame({"key": [key[0]], "count": [total]})

    frames = input_stream(spark, work)
    counted = backend.apply_in_pandas(frames, ["key"], per_key, SCHEMA, num_partitions=2)
    outputs = {}
    run_to_end(counted, work, counts_into(outputs))
    assert outputs == reference(range(2))


def test_state_files_use_kafka_streams_layout(spark, work):
    add_files(work, [0])
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), {})
    tasks = sorted(p.name for p in Path(work / "state" / "counts-app").iterdir())
    assert tasks == ["0_0", "0_1"]
    logs = sorted(p.name for p in (work / "changelog").iterdir())
    assert "counts-app-counts-changelog-0" in logs and "counts-app-kstate-batches-1" in logs


def test_batch_jobs_with_map_in_pandas_and_apply_in_arrow(spark, work):
    """Outside Structured Streaming a job counts as batch ``batch_id`` (0 by default): running
    it again redoes it; the next batch id builds on it."""
    add_files(work, [0])
    backend = backend_of(work)
    source = spark.read.parquet(str(work / "in"))

    def pandas_count(frames, stores):
        import pandas as pd

        store = stores["counts"]
        for frame in frames:
            counted = frame["key"].value_counts()
            old = store.get_many(list(counted.index))
            new = [(o or 0) + int(n) for o, n in zip(old, counted.values)]
            store.put_all(list(counted.index), new)
            yield pd.DataFrame({"key": list(counted.index), "count": new})

    def run():
        rows = source.repartition(2, "key").mapInPandas(backend.map_in_pandas(pandas_count), SCHEMA).collect()
        return {r["key"]: r["count"] for r in rows}

    once = dict(collections.Counter(file_keys(0)))
    assert run() == once
    assert run() == once, "the same batch again: rolled back, then redone"

    def arrow_count(key, table, stores):
        store = stores["counts"]
        total = store.get(key[0]) + table.num_rows
        store.put(key[0], total)
        return pa.table({"key": [key[0]], "count": [total]})

    backend.batch_id = 1
    rows = backend.apply_in_arrow(source, ["key"], arrow_count, SCHEMA, num_partitions=2).collect()
    assert {r["key"]: r["count"] for r in rows} == {k: 2 * n for k, n in once.items()}


def test_transform_with_state_runs_a_spark_style_processor(spark, work):
    from kstate.spark import transform_with_state

    add_files(work, range(3))
    frames = input_stream(spark, work)
    counted = transform_with_state(
        frames, ["key"], RunningCount(), SCHEMA, work / "state", work / "changelog", "tws-app"
    )
    outputs = {}
    run_to_end(counted, work, counts_into(outputs))
    assert outputs == reference(range(3))


def test_event_time_timers_fire_once_the_watermark_passes(spark, work):
    """Each key's count is emitted by a timer 1 s of event time after its last row, once the
    watermark (the largest event time of earlier batches, minus 0) passes it."""
    from kstate.spark import StatefulProcessor, transform_with_state

    class EmitWhenQuiet(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.count = handle.getValueState("count")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802
            for frame in rows:
                self.count.update((self.count.get() or 0) + len(frame))
                for expiry in self.handle.listTimers():
                    self.handle.deleteTimer(expiry)
                self.handle.registerTimer(int(frame["t"].max()) + 1000)
            return iter(())

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802
            import pandas as pd

            assert expiredTimerInfo.getExpiryTimeInMs() <= timerValues.getCurrentWatermarkInMs()
            yield pd.DataFrame({"key": [key[0]], "count": [self.count.get()]})
            self.count.clear()

    files = [[("a", 100), ("b", 5000), ("a", 300)], [("c", 10_000), ("b", 5_500)], [("d", 20_000)]]
    for i, rows in enumerate(files):
        write_file(work, i, {"key": [k for k, _ in rows], "t": [t for _, t in rows]})
    frames = input_stream(spark, work, "key string, t long")
    emitted = transform_with_state(
        frames,
        ["key"],
        EmitWhenQuiet(),
        SCHEMA,
        work / "state",
        work / "changelog",
        "timers-app",
        num_partitions=2,
        time_mode="EventTime",
        event_time_column="t",
        lock_timeout=60,
    )
    outputs = {}
    run_to_end(emitted, work, lambda frame, batch: outputs.update({batch: sorted(map(tuple, frame.collect()))}))
    # Batch 1's watermark is 5000 (a's timer, 1300, fires); batch 2's is 10000 (b's, 6500).
    assert outputs == {0: [], 1: [("a", 2)], 2: [("b", 2)]}


def test_an_in_place_upgrade_switches_a_running_query_to_the_timestamped_format(spark, work, wait_until):
    """A query's plain stores are upgraded in place while the query runs: standbys built beside
    them, readiness and the switch exchanged as SubscriptionInfo/AssignmentInfo bytes between
    the tasks and the driver at batch boundaries; the counts stay exact throughout."""
    from kstate.upgrade import inspect_store

    add_files(work, range(1))
    outputs = {}
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), outputs)
    supplier = Stores.persistent_timestamped_key_value_store("counts")
    counts = Stores.timestamped_key_value_store_builder(supplier, "string", "int64")
    upgrading = StateBackend(
        [counts],
        work / "state",
        work / "changelog",
        "counts-app",
        lock_timeout=60,
        upgrade={"upgrade.from": "2.2", "upgrade.mode": "in_place"},
        keys=["key"],
    )
    upgrading.coordinate_upgrade(spark, num_partitions=2)
    # Spark calls a session's listeners one after another, in the order added: once this one
    # has heard of a batch, the driver's coordination of that batch is written.
    coordinated = []
    after_coordination = batch_listener(lambda event: coordinated.append(event.progress.batchId))
    spark.streams.addListener(after_coordination)

    def timestamped_count(batches, stores):
        """The running count on the timestamped store's API (Python lists)."""
        store = stores["counts"]
        for batch in batches:
            counted = collections.Counter(batch.column("key").to_pylist())
            keys = list(counted)
            new = [(old or 0) + counted[k] for k, old in zip(keys, store.get_many(keys))]
            store.put_all(list(zip(keys, new)))
            yield pa.RecordBatch.from_pydict({"key": keys, "count": new})

    try:
        for index in range(1, 5):  # one run per batch: the driver's coordination lands in between
            add_files(work, [index])
            run_query(spark, work, upgrading.map_in_arrow(timestamped_count), outputs)
            # Listeners hear of a batch asynchronously.
            wait_until(lambda: max(outputs) in coordinated, "the driver's coordination after the last batch")
    finally:
        spark.streams.removeListener(after_coordination)
    assert outputs == reference(range(5))
    for p in (0, 1):
        assert inspect_store(work / "state" / "counts-app" / f"0_{p}" / "rocksdb" / "counts").format == "timestamped"


def test_state_as_a_dataframe(spark, work):
    add_files(work, range(2))
    backend = backend_of(work)
    run_query(spark, work, backend.map_in_arrow(running_count), {})
    frame = backend.state_dataframe(spark, "counts", num_partitions=2)
    assert frame.schema.simpleString() == "struct<partition:int,batch:bigint,key:string,value:bigint>"
    rows = frame.collect()
    assert {r["key"]: r["value"] for r in rows} == dict(collections.Counter(file_keys(0) + file_keys(1)))
    assert {r["partition"] for r in rows} == {0, 1}
    assert {r["batch"] for r in rows} == {1}


def test_state_as_of_an_earlier_batch_or_time(spark, work):
    def state(**as_of):
        rows = backend_of(work).state_dataframe(spark, "counts", num_partitions=2, **as_of).collect()
        return {r["key"]: r["value"] for r in rows}, {r["batch"] for r in rows}

    def counted(files):
        return dict(collections.Counter(key for i in files for key in file_keys(i)))

    add_files(work, range(2))
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), {})
    between = datetime.datetime.now()
    time.sleep(0.05)
    add_files(work, [2])
    run_query(spark, work, backend_of(work).map_in_arrow(running_count), {})
    assert state() == (counted(range(3)), {2})
    assert state(as_of_batch=1) == (counted(range(2)), {1})
    assert state(as_of_time=between) == (counted(range(2)), {1})
    assert state(as_of_batch=0) == (counted([0]), {0})
    assert state(as_of_time=int(time.time() * 1000)) == (counted(range(3)), {2})
    # Undo files are kept for the last two batches (undo_retained_batches): no further back.
    with pytest.raises(Exception, match="no longer kept"):
        state(as_of_batch=-1)
    assert state() == (counted(range(3)), {2}), "reading an earlier state changes nothing"


def test_the_kstate_data_source_reads_changelogs_as_spark_reads_kafka(spark, work):
    from kstate.log.partition import Partition
    from kstate.spark import register_data_source

    add_files(work, range(2))
    backend = backend_of(work)
    run_query(spark, work, backend.map_in_arrow(running_count), {})
    register_data_source(spark)
    topic = "counts-app-counts-changelog"
    frame = spark.read.format("kstate").option("path", str(work / "changelog")).option("topic", topic).load()
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = frame.collect()
    expected = []
    backend.release_local_state([0, 1])  # the workers keep the changelogs open: the test opens them
    for p in (0, 1):
        with Partition.open(work / "changelog" / f"{topic}-{p}") as log:
            expected += [(r.key, r.value, p, r.offset) for r in log.records()]
    assert sorted((bytes(r.key), bytes(r.value), r.partition, r.offset) for r in rows) == sorted(expected)
    # The latest count of each key, as a consumer of the changelog would restore it.
    latest = {}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        latest[bytes(r.key).decode()] = int.from_bytes(bytes(r.value), "big")
    assert latest == dict(collections.Counter(file_keys(0) + file_keys(1)))
    assert sorted(backend.changelog_dataframe(spark, "counts").collect()) == sorted(rows)

    stream = spark.readStream.format("kstate").option("path", str(work / "changelog")).option("topic", topic).load()
    seen = []
    query = (
        stream.writeStream.foreachBatch(lambda batch, _: seen.extend(batch.collect()))
        .option("checkpointLocation", str(work / "source-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert len(seen) == len(rows)

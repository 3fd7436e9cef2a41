"""transform_with_state with its changelogs on S3 (moto's server, through s3fs) and
``fire_idle_timers`` at its default (on, PySpark 4.1+): event time with late rows and event-time
timers gives the batches the same query gives on a file-system changelog, a timer fires in a
batch without data once the watermark advanced, and a restarted query (its state restored from
S3 on a fresh state directory) keeps the watermark; processing-time timers fire on an idle
stream. Without Spark: tests/remote/test_spark_timers_s3.py."""

import datetime
import sys
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402

from kstate.spark import transform_with_state  # noqa: E402
from kstate.spark.processor.ticks import supports_available_now  # noqa: E402
from kstate.spark.processor.watermarks import query_watermarks  # noqa: E402
from kstate.spark.protocol.exactly_once import StateLayout  # noqa: E402
from remote.locations import s3_remote  # noqa: E402

from .. import spark_suite_processors as p  # noqa: E402
from ..workload import collecting, committed, input_stream, run_until, spark_for_tests, wait_for, write_file  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.skipif(not supports_available_now(), reason="fire_idle_timers is off by default before 4.1")

T = datetime.datetime(2024, 3, 10, 9, 0, 0, tzinfo=datetime.timezone.utc)
T_MS = int(T.timestamp() * 1000)
DELAY_MS = 5_000
OUTPUT = "user string, kind string, ts timestamp, count long"
# One file a batch. Batch 1's u1 row is on time (batch 0's watermark is 0); batch 2's is late (at
# or below batch 1's watermark, T+25 s). The timers (LastSeen: the watermark + 10 s, re-registered
# on input) of u1 and u2 fire in batch 2, u3's in batch 3, which has no data: the tick source adds
# it because the watermark advanced to T+85 s.
FILES = [[("u1", 30), ("u2", 30)], [("u1", 10), ("u2", 60)], [("u1", 20), ("u3", 90)]]
EXPECTED = [
    [("u1", "input", 1), ("u2", "input", 1)],
    [("u1", "input", 2), ("u2", "input", 2)],
    [("u1", "expired", 2), ("u2", "expired", 2), ("u3", "input", 1)],
    [("u3", "expired", 1)],
]
# After the restart: u4's row is late (batch 4's watermark for late rows is batch 3's, T+85 s);
# u5's timer fires in the batch without data that follows.
RESTART_FILE = [("u4", 80), ("u5", 120)]
EXPECTED_AFTER_RESTART = [[("u5", "input", 1)], [("u5", "expired", 1)]]


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-remote-timers", "local[2]")
    session.conf.set("spark.sql.session.timeZone", "UTC")
    yield session
    session.stop()


def write_events(work, index, rows):
    times = [T + datetime.timedelta(seconds=s) for _, s in rows]
    write_file(work, index, {"user": [u for u, _ in rows], "ts": pa.array(times, pa.timestamp("us", tz="UTC"))})


def event_time_query(spark, work, state, changelog, **options):
    return transform_with_state(
        input_stream(spark, work, "user string, ts timestamp"), ["user"], p.LastSeen(True), OUTPUT, work / state,
        changelog, "events", num_partitions=2, time_mode="EventTime", event_time_column="ts",
        watermark_delay_ms=DELAY_MS, lock_timeout=60, **options,
    )  # fmt: skip


def summary(outputs):
    return [[(user, kind, count) for user, kind, _, count in outputs[b]] for b in sorted(outputs)]


def file_rows(query, batch):
    return sum(
        source["numInputRows"]
        for progress in query.recentProgress
        if progress["batchId"] == batch
        for source in progress["sources"]
        if source["description"].startswith("FileStreamSource")
    )


def test_event_time_on_s3_gives_the_file_systems_batches_and_keeps_its_watermark_across_a_restart(
    spark, work, s3_endpoint
):
    s3 = s3_remote(s3_endpoint)
    for index, rows in enumerate(FILES):
        write_events(work, index, rows)
    local, _ = run_until(event_time_query(spark, work, "state-local", work / "changelog"), work / "cp-local", 4)
    on_s3, query = run_until(
        event_time_query(spark, work, "state-s3", s3.url, changelog_storage_options=s3.storage_options),
        work / "cp-s3",
        4,
    )
    assert summary(local) == EXPECTED
    assert on_s3 == local, "the same rows in the same batches"
    assert file_rows(query, 3) == 0, "batch 3 had no data: the tick source added it"

    # Restarted on the same checkpoint with a fresh state directory: the state comes back from S3.
    write_events(work, len(FILES), RESTART_FILE)
    frame = event_time_query(spark, work, "state-s3-restarted", s3.url, changelog_storage_options=s3.storage_options)
    after, _ = run_until(frame, work / "cp-s3", 2)
    assert sorted(after) == [4, 5] and summary(after) == EXPECTED_AFTER_RESTART

    # A process that never ran a task reads the watermarks back from S3 alone.
    layout = StateLayout(None, Path(), "events", s3.url, s3.storage_options)
    assert query_watermarks(layout, 4, DELAY_MS) == (T_MS + 85_000, T_MS + 85_000)
    assert query_watermarks(layout, 6, DELAY_MS) == (T_MS + 115_000, T_MS + 115_000)


def test_processing_time_timers_on_s3_fire_on_an_idle_stream(spark, work, s3_endpoint):
    s3 = s3_remote(s3_endpoint)
    write_file(work, 0, {"id": ["0", "1"], "temperature": [123, 6]})
    frame = transform_with_state(
        input_stream(spark, work, "id string, temperature long"), ["id"], p.Reminder(False),
        "id string, kind string, count long, at long", work / "state", s3.url, "idle", num_partitions=2,
        time_mode="ProcessingTime", api="row", lock_timeout=60, changelog_storage_options=s3.storage_options,
    )  # fmt: skip
    query, outputs = collecting(frame, work / "cp", "300 milliseconds")
    try:
        fired = lambda: sorted(r[:3] for rows in outputs.values() for r in rows if r[1] == "timer")  # noqa: E731
        wait_for(lambda: len(fired()) >= 2, query, "both timers fired")
        committed(query, max(outputs))
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert fired() == [("0", "timer", 1), ("1", "timer", 1)]
    for batch, rows in outputs.items():
        if any(r[1] == "timer" for r in rows):
            assert all(r[1] == "timer" for r in rows) and file_rows(query, batch) == 0, "fired without input"

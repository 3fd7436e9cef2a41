"""kstate Spark demo: sensor readings through a Structured Streaming query, exactly once.

A generator appends sensor readings to a kstate log (topic ``readings``: two partitions, key =
sensor id, value = the reading, record timestamp = event time; about 5% of the readings arrive
up to three minutes late, out of order). A streaming query reads the log with
``format("kstate")``, one wave of five minutes of event time per micro-batch, and keeps two
kstate stores from inside ``mapInArrow``:

- ``totals``: readings per sensor, stamped with the sensor's latest event time, in a
  timestamped key-value store with a 12-minute TTL on stream time (a sensor silent that long
  is forgotten; 50 of the 300 sensors stop reporting after the second wave);
- ``per_minute``: readings per sensor and one-minute event-time window, in a timestamped
  window store (one hour retention).

Each micro-batch appends the sensors it updated to a parquet table. Along the way the demo kills
a Python worker (SIGKILL) in the middle of a batch, loses Spark's last commit-log entry (Spark
replays that batch; kstate rolls its state back first), and wipes the executors' local state
(kstate restores it from the changelogs). At the end it checks both stores against the same
computation in plain Python and prints a report.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import random
import shutil
import signal
import tempfile
import time
import zlib
from pathlib import Path

import pyarrow as pa

from kstate import Stores, ValueAndTimestamp
from kstate.log import Topic
from kstate.spark import StateBackend, local_session, register_data_source

SENSORS = 300
SILENT_AFTER_WAVE = 1
"""Sensors 250-299 report in waves 0 and 1 only."""
ACTIVE = 250
WAVES = 6
READINGS_PER_WAVE = 10_000
MINUTE = 60_000
WAVE_MS = 5 * MINUTE
T0 = (time.time_ns() // 1_000_000 // MINUTE - 40) * MINUTE
"""Event time of the first reading: 40 minutes ago on a minute boundary. The window store's
changelog keeps records for its retention + 1 day of their timestamps, as Kafka's does."""
TTL_MS = 12 * MINUTE
LATE_SHARE, MAX_LATENESS_MS = 0.05, 3 * MINUTE
PARTITIONS = 2


# -- the input: a kstate log of readings ---------------------------------------------------------


def wave(index: int) -> list[tuple[str, float, int]]:
    """``(sensor, reading, event time)`` of one wave, in arrival order."""
    rnd = random.Random(index)
    sensors = SENSORS if index <= SILENT_AFTER_WAVE else ACTIVE
    readings = []
    for i in range(READINGS_PER_WAVE):
        t = T0 + index * WAVE_MS + i * WAVE_MS // READINGS_PER_WAVE
        if rnd.random() < LATE_SHARE:
            t -= rnd.randrange(MAX_LATENESS_MS)
        readings.append((f"sensor-{rnd.randrange(sensors):03d}", round(rnd.uniform(15, 30), 2), t))
    return readings


def append_wave(log_dir: Path, index: int) -> None:
    by_partition = collections.defaultdict(list)
    for sensor, reading, t in wave(index):
        key = sensor.encode()
        by_partition[zlib.crc32(key) % PARTITIONS].append((key, str(reading).encode(), t))
    with Topic(log_dir, "readings") as topic:
        for partition in range(PARTITIONS):
            log = topic.partition(partition)
            log.append(by_partition[partition])
            log.flush()


# -- the state -----------------------------------------------------------------------------------


def state_backend(work: Path) -> StateBackend:
    totals = Stores.timestamped_key_value_store_builder(
        Stores.persistent_timestamped_key_value_store("totals", ttl_ms=TTL_MS), "string", "int64"
    )
    per_minute = Stores.timestamped_window_store_builder(
        Stores.persistent_timestamped_window_store("per_minute", retention_ms=60 * MINUTE, window_size_ms=MINUTE),
        "string",
        "int64",
    )
    return StateBackend(
        [totals, per_minute], work / "state", work / "changelog", "sensors", keys=["sensor"], num_partitions=PARTITIONS
    )


def update_state(batches, stores):  # noqa: ANN001, ANN201
    """The UDF: running totals with TTL and per-minute counts, one Arrow batch at a time."""
    totals, per_minute = stores["totals"], stores["per_minute"]
    for batch in batches:
        sensors, times = batch.column("sensor").to_pylist(), batch.column("event_ms").to_pylist()
        seen: dict[str, tuple[int, int]] = {}
        windows: collections.Counter = collections.Counter()
        for sensor, t in zip(sensors, times):
            n, latest = seen.get(sensor, (0, t))
            seen[sensor] = (n + 1, max(latest, t))
            windows[sensor, t - t % MINUTE] += 1
        keys = list(seen)
        updated = []
        for key, before in zip(keys, totals.get_many_with_timestamp(keys)):
            n, latest = seen[key]
            if before is not None:  # None: new, or silent for longer than the TTL
                n, latest = n + before.value, max(latest, before.timestamp)
            updated.append((key, ValueAndTimestamp(n, latest)))
        totals.put_all(updated)
        for (sensor, start), n in windows.items():
            per_minute.put(sensor, (per_minute.fetch(sensor, start) or 0) + n, start, timestamp=start)
        if stores.batch_id == 1 and stores.partition == 0 and not KILL_MARKER.exists():
            KILL_MARKER.touch()
            print(f"    [worker {os.getpid()}] batch 1, partition 0: killing myself with SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([k for k, _ in updated]),
                pa.array([v.value for _, v in updated], pa.int64()),
                pa.array([v.timestamp for _, v in updated], pa.int64()),
            ],
            names=["sensor", "readings", "last_event_ms"],
        )


KILL_MARKER = Path(tempfile.gettempdir()) / f"kstate-demo-killed-{os.getpid()}"


# -- the query -----------------------------------------------------------------------------------


def run_query(spark, work: Path, state: StateBackend) -> list[dict]:  # noqa: ANN001
    """Processes what the log holds beyond the query's checkpoint; returns its progress reports."""
    readings = (
        spark.readStream.format("kstate")
        .option("path", str(work / "input"))
        .option("topic", "readings")
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS sensor",
            "CAST(CAST(value AS STRING) AS DOUBLE) AS reading",
            "unix_millis(timestamp) AS event_ms",
        )
    )
    updates = state.partition(readings).mapInArrow(
        state.map_in_arrow(update_state), "sensor string, readings long, last_event_ms long"
    )

    def sink(frame, batch_id) -> None:  # noqa: ANN001
        # Two actions on the batch: persist it, or the second runs the stateful plan again (a replay).
        frame.persist()
        frame.write.mode("append").parquet(str(work / "output"))
        print(f"    batch {batch_id}: {frame.count()} sensor updates written", flush=True)
        frame.unpersist()

    query = (
        updates.writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    # PySpark 4 gives progress objects, older releases dicts.
    return [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]


# -- the check and the report --------------------------------------------------------------------


def reference() -> tuple[dict, dict]:
    """``totals`` and ``per_minute`` as plain Python computes them from every reading."""
    counts, latest, windows = collections.Counter(), {}, collections.Counter()
    for index in range(WAVES):
        for sensor, _, t in wave(index):
            counts[sensor] += 1
            latest[sensor] = max(latest.get(sensor, t), t)
            windows[sensor, t - t % MINUTE] += 1
    stream_time = max(latest.values())
    totals = {s: (n, latest[s]) for s, n in counts.items() if latest[s] > stream_time - TTL_MS}
    return totals, dict(windows)


def disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    work = Path(tempfile.mkdtemp(prefix="kstate-spark-demo-"))
    conf = {"spark.sql.shuffle.partitions": PARTITIONS, "spark.ui.showConsoleProgress": "false"}
    spark = local_session("kstate-spark-demo", master="local[2,3]", conf=conf)
    spark.sparkContext.setLogLevel("OFF")
    register_data_source(spark)
    state = state_backend(work)
    kstate_progress = state.report_progress(spark)  # restores, rollbacks, commits per micro-batch
    progress: list[dict] = []
    started = time.monotonic()
    try:
        for index in range(WAVES):
            if index == 3:
                print(
                    "batch 2's commit-log entry is lost (the driver died after the state committed): Spark replays it"
                )
                for name in ("2", ".2.crc"):
                    (work / "checkpoint" / "commits" / name).unlink()
                progress += run_query(spark, work, state)
            if index == 4:
                print("the executors' local state is lost (partitions moved): kstate restores it from the changelogs")
                state.release_local_state(range(PARTITIONS))  # workers that keep stores open close them
                shutil.rmtree(work / "state")
            append_wave(work / "input", index)
            killed = (
                " (the worker of batch 1, partition 0 is killed once: Spark retries the task)" if index == 1 else ""
            )
            print(f"wave {index} appended to the log{killed}")
            progress += run_query(spark, work, state)
        wall = time.monotonic() - started

        totals = state.state_dataframe(spark, "totals", PARTITIONS).toPandas()
        windows = state.state_dataframe(spark, "per_minute", PARTITIONS).toPandas()
        want_totals, want_windows = reference()
        got_totals = {r.key: (r.value, r.timestamp) for r in totals.itertuples()}
        got_windows = {(r.key, r.start): r.value for r in windows.itertuples()}
        batches = {(p["runId"], p["batchId"]) for p in progress}
        deadline = time.monotonic() + 30  # progress events reach the listener asynchronously
        while not batches <= {(r.run_id, r.batch_id) for r in kstate_progress} and time.monotonic() < deadline:
            time.sleep(0.1)
        rows = sum(p["numInputRows"] for p in progress)
        seconds = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
        print()
        print("report")
        print(f"  readings generated      {WAVES * READINGS_PER_WAVE:,} ({WAVES} waves, ~5% late)")
        print(f"  rows processed          {rows:,} in {len(progress)} micro-batches (a replay counts again)")
        print(f"  rows/s                  {rows / max(seconds, 1e-9):,.0f} over the batches, {wall:.1f} s wall in all")
        print(
            f"  state                   {len(got_totals)} live sensors (TTL forgot {SENSORS - len(got_totals)}), "
            f"{len(got_windows):,} windows, {disk_bytes(work / 'state') / 2**20:.1f} MiB local"
        )
        restored = sum(r.restored_records for r in kstate_progress)
        restore_seconds = sum(r.restore_seconds for r in kstate_progress)
        rolled_back = sum(r.rolled_back_batches for r in kstate_progress)
        print(f"  commits                 {sum(r.tasks for r in kstate_progress)} partition commits")
        print(
            f"  restores                {restored:,} records in {restore_seconds:.2f} s, "
            f"{rolled_back} batches rolled back"
        )
        if got_totals != want_totals or got_windows != want_windows:
            bad = len(set(got_totals.items()) ^ set(want_totals.items()))
            bad += len(set(got_windows.items()) ^ set(want_windows.items()))
            raise SystemExit(f"MISMATCH: {bad} entries differ from the plain-Python reference")
        print("OK: both stores equal the plain-Python computation over every reading exactly once")
    finally:
        spark.stop()
        KILL_MARKER.unlink(missing_ok=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""kstate Spark demo: clicks per user in a Structured Streaming query, exactly once through failures.

A stream of click files (one file per micro-batch) feeds a running click count and the time of
the last click per user, kept in a timestamped kstate store from inside ``mapInArrow``. Along the
way the demo:

1. kills the Python worker of one task with SIGKILL in the middle of batch 1 (Spark retries it);
2. deletes the query's last commit-log entry, as if the driver died after the state committed,
   so Spark replays that batch on restart (kstate rolls it back first);
3. deletes the executors' local state, as if the partitions moved, and adds more files (kstate
   restores from the changelog);

then reads the state back as a DataFrame and checks it against the same count in plain Python.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import shutil
import signal
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kstate import Stores, ValueAndTimestamp
from kstate.spark import StateBackend, local_session

USERS = 200
CLICKS_PER_FILE = 2_000


def clicks(index: int) -> pa.Table:
    rnd = random.Random(index)
    users = [f"user-{rnd.randrange(USERS):04d}" for _ in range(CLICKS_PER_FILE)]
    times = [1_700_000_000_000 + index * 60_000 + i for i in range(CLICKS_PER_FILE)]
    return pa.table({"user": users, "ts": pa.array(times, pa.int64())})


def add_files(source: Path, indexes: range) -> None:
    for i in indexes:
        path = source / f"clicks-{i:04d}.parquet"
        pq.write_table(clicks(i), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def run_query(spark, source: Path, work: Path, state: StateBackend, kill_marker: Path) -> None:
    @state.map_in_arrow
    def count_clicks(batches, stores):
        store = stores["clicks"]
        for batch in batches:
            per_user = pa.Table.from_batches([batch]).group_by("user").aggregate([("user", "count"), ("ts", "max")])
            users = per_user.column("user").to_pylist()
            before = store.get_many_with_timestamp(users)
            counts = pc.add(
                pa.array([0 if b is None else b.value for b in before], pa.int64()),
                per_user["user_count"].combine_chunks(),
            )
            last = per_user.column("ts_max").to_pylist()
            store.put_all([(u, ValueAndTimestamp(c, t)) for u, c, t in zip(users, counts.to_pylist(), last)])
            if stores.batch_id == 1 and stores.partition == 0 and not kill_marker.exists():
                kill_marker.touch()
                print(f"  [worker {os.getpid()}] batch 1, partition 0: killing myself with SIGKILL", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            yield pa.RecordBatch.from_arrays([pa.array(users), counts], names=["user", "clicks"])

    frames = spark.readStream.schema("user string, ts long").option("maxFilesPerTrigger", 1).parquet(str(source))
    counted = frames.repartition(2, "user").mapInArrow(count_clicks, "user string, clicks long")
    query = (
        counted.writeStream.outputMode("update")
        .foreachBatch(lambda frame, batch_id: print(f"  batch {batch_id}: {frame.count()} users updated"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    work = Path(tempfile.mkdtemp(prefix="kstate-spark-demo-"))
    source = work / "clicks"
    source.mkdir()
    conf = {"spark.sql.shuffle.partitions": 2, "spark.ui.showConsoleProgress": "false"}
    spark = local_session("kstate-spark-demo", master="local[2,3]", conf=conf)
    spark.sparkContext.setLogLevel("OFF")
    supplier = Stores.persistent_timestamped_key_value_store("clicks")
    builder = Stores.timestamped_key_value_store_builder(supplier, "string", "int64")
    state = StateBackend([builder], work / "state", work / "changelog", "clicks-demo")
    try:
        print("1. batches 0-2, the worker of batch 1 partition 0 is killed once:")
        add_files(source, range(3))
        run_query(spark, source, work, state, work / "killed")
        print("2. the last commit-log entry is lost: Spark replays batch 2 on restart")
        for name in ("2", ".2.crc"):
            (work / "checkpoint" / "commits" / name).unlink()
        run_query(spark, source, work, state, work / "killed")
        print("3. the local state is lost (partitions moved), batches 3-4 arrive:")
        state.release_local_state([0, 1])  # the workers that kept the stores open close them
        shutil.rmtree(work / "state")
        add_files(source, range(3, 5))
        run_query(spark, source, work, state, work / "killed")

        table = state.state_dataframe(spark, "clicks", num_partitions=2).toPandas()
        expected = collections.Counter(u for i in range(5) for u in clicks(i).column("user").to_pylist())
        last_seen = {}
        for i in range(5):
            for u, t in zip(clicks(i).column("user").to_pylist(), clicks(i).column("ts").to_pylist()):
                last_seen[u] = max(last_seen.get(u, 0), t)
        got = {r.key: (r.value, r.timestamp) for r in table.itertuples()}
        want = {u: (n, last_seen[u]) for u, n in expected.items()}
        print(f"state: {len(got)} users, {sum(v for v, _ in got.values())} clicks in kstate")
        if got != want:
            raise SystemExit(f"MISMATCH: {len(set(got.items()) ^ set(want.items()))} users differ")
        print("OK: the state equals the plain-Python count of every click exactly once")
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A query's restart on a fresh cluster (issue 44): kstate against Spark's own RocksDB state store.

A running count per key (the workload of ``spark_cluster.py``) over ``--partitions`` state
partitions holding KEYS keys each, built in BATCHES micro-batches (file b inserts keys b*N/B to
(b+1)*N/B and updates a tenth as many keys drawn from those before it), ``local[2]``, Spark's
defaults otherwise (AQE on). Then the query restarts as on a new cluster: a new JVM, no
executor-local state (kstate's ``state_dir`` deleted; Spark keeps its state only in the
checkpoint), one more file of ``--restart-rows`` rows of existing keys. The figure is that restart
batch's ``durationMs.triggerExecution``: it holds every task's state load. Modes:

  spark          groupBy(key).count(), update mode, RocksDBStateStoreProvider, Spark's defaults
                 (a snapshot of the RocksDB files in the checkpoint every batch)
  kstate         repartition by key + mapInArrow, a logged kstate store with kstate.spark's
                 default snapshots (``minDeltasForSnapshot`` 10, ``minDeltaBytesForSnapshot``
                 64 MiB): restores the newest snapshot, then replays the changelog after it
  kstate_replay  the same without snapshots: restores by replaying the whole (compacted) changelog

Each mode is built once per (keys, batches); the restarts then alternate between the modes,
``--restarts`` each (every restart adds one small batch to the state it restarts from). With
``--s3`` kstate's changelog (and its snapshots) is on moto's S3 server on loopback (a Python
server sharing the two cores: its MB/s are moto's); Spark's checkpoint stays local.

    .venv/bin/python benches/restore.py --keys 1000000 10000000 --batches 5 50 --dir /var/tmp

One markdown row per (keys, batches, location, mode): median restart batch seconds, kstate's
restore seconds and records replayed (``StateBackend.report_progress``), the snapshot bytes loaded
per partition and the restore's MB/s and records/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snapshots import start_moto

MODES = ("spark", "kstate", "kstate_replay")
APP = "bench-restore"
STORE = "counts"
SNAPSHOT_EVERY = 10
SNAPSHOT_BYTES = 64 << 20


def make_inputs(src: Path, total_keys: int, batches: int, restart_rows: int, restarts: int) -> None:
    """``batches`` build files, then one file per restart."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)

    def write(name: str, numbers: np.ndarray) -> None:
        keys = pc.binary_join_element_wise("k", pa.array(numbers).cast(pa.string()), "")
        pq.write_table(pa.table({"key": keys, "v": pa.array(np.arange(len(numbers)))}), src / name)

    for b in range(batches):
        start, end = b * total_keys // batches, (b + 1) * total_keys // batches
        updates = rng.integers(0, max(start, 1), (end - start) // 10) if start else np.empty(0, np.int64)
        write(f"part-{b:05d}.parquet", np.concatenate([np.arange(start, end), updates]))
    for r in range(restarts):
        write(f"part-{batches + r:05d}.parquet", rng.integers(0, total_keys, restart_rows))


def kstate_query(spark, df, work: Path, changelog: str, options: dict | None, snapshots: bool):
    import pyarrow as pa
    import pyarrow.compute as pc

    from kstate import Stores
    from kstate.spark import StateBackend

    # kstate.spark's defaults take snapshots; None for both turns them off.
    every, after = (SNAPSHOT_EVERY, SNAPSHOT_BYTES) if snapshots else (None, None)
    logging = {"minDeltasForSnapshot": every, "minDeltaBytesForSnapshot": after}
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), "string", "int64")
    counts = counts.with_logging_enabled(logging)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    backend = StateBackend(
        [counts],
        work / "state",
        changelog,
        APP,
        keys=["key"],
        num_partitions=partitions,
        changelog_storage_options=options,
    )
    progress = backend.report_progress(spark)

    def running_count(batches, stores):
        store = stores[STORE]
        for batch in batches:
            counted = pc.value_counts(batch.column("key"))
            keys, n = counted.field("values"), counted.field("counts")
            new = pc.add(pc.fill_null(store.get_many(keys), 0), n)
            store.put_all(keys, new)
            yield pa.RecordBatch.from_arrays([keys, new], names=["key", "count"])

    query = backend.partition(df).mapInArrow(backend.map_in_arrow(running_count), "key string, count long")
    return query, progress


def run_one(mode: str, work: Path, phase: str, partitions: int, changelog: str, options: dict | None) -> dict:
    """One query run in this process (a fresh JVM): ``build`` or ``restart``."""
    from kstate.spark import local_session

    conf = {"spark.sql.shuffle.partitions": partitions, "spark.driver.memory": "6g"}
    if mode == "spark":
        conf["spark.sql.streaming.stateStore.providerClass"] = (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        )
    spark = local_session(f"bench-restore-{mode}", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(str(work / "in"))
        progress = None
        if mode == "spark":
            query = df.groupBy("key").count()
        else:
            query, progress = kstate_query(spark, df, work, changelog, options, mode == "kstate")
        started = time.perf_counter()
        running = (
            query.writeStream.outputMode("update")
            .format("noop")
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        running.awaitTermination()
        wall = time.perf_counter() - started
        batches = [p for p in running.recentProgress if p.numInputRows > 0]
        result = {"mode": mode, "phase": phase, "wall_s": wall, "batches": len(batches)}
        if phase == "restart":
            first = batches[0]
            result["batch_s"] = first.durationMs["triggerExecution"] / 1000
            result["batch_id"] = first.batchId
            if progress is not None:
                time.sleep(2)  # the listener hears the batch asynchronously
                mine = [r for r in progress if r.batch_id == first.batchId]
                result["restored_records"] = sum(r.restored_records for r in mine)
                result["restore_s"] = max((r.restore_seconds for r in mine), default=0.0)
        return result
    finally:
        spark.stop()


def snapshot_bytes(changelog: str, options: dict | None) -> list[int]:
    """The newest snapshot's bytes of each changelog partition that has one."""
    from kstate import _core

    if "://" in changelog:
        import fsspec

        fs, root = fsspec.core.url_to_fs(changelog, **(options or {}))
    else:
        fs, root = fsspec_local(), changelog
    newest: dict[str, str] = {}
    for path in fs.glob(f"{root}/*/snapshots/manifests/*.snapshot"):
        partition = path.split("/snapshots/")[0]
        newest[partition] = max(newest.get(partition, ""), path)
    return [_core.SnapshotManifest.decode(fs.cat_file(path)).total_bytes for path in newest.values()]


def fsspec_local():
    import fsspec

    return fsspec.filesystem("file")


def child(args: argparse.Namespace) -> None:
    options = json.loads(args.options) if args.options else None
    result = run_one(args.mode, Path(args.work), args.phase, args.partitions, args.changelog, options)
    print(json.dumps(result), flush=True)


def spawn(mode: str, work: Path, phase: str, partitions: int, changelog: str, options: dict | None) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--work", str(work), "--phase", phase]
    command += ["--partitions", str(partitions), "--changelog", changelog, "--options", json.dumps(options or {})]
    # Output to files, not pipes, and the child's process group killed once it exits: after a
    # large RocksDB state store's query stops, Spark's JVM may linger for minutes, holding pipes.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, start_new_session=True)
        returncode = child.wait()
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out.seek(0)
        err.seek(0)
        if returncode != 0:
            raise RuntimeError(f"{mode} {phase} failed:\n{err.read()[-4000:]}")
        return json.loads(out.read().strip().splitlines()[-1])


def measure(keys: int, batches: int, location: str, args: argparse.Namespace, endpoint: str | None) -> list[str]:
    root = Path(tempfile.mkdtemp(prefix="kstate-restore-", dir=args.dir))
    rows = []
    try:
        inputs = root / "inputs"
        inputs.mkdir()
        make_inputs(inputs, keys * args.partitions, batches, args.restart_rows, args.restarts)
        files = sorted(inputs.iterdir())
        works, changelogs, options = {}, {}, None
        if location == "s3":
            import s3fs

            options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        for mode in args.modes:
            work = works[mode] = root / mode
            (work / "in").mkdir(parents=True)
            if location == "s3" and mode != "spark":
                bucket = f"restore-{os.getpid()}-{keys}-{batches}-{mode.replace('_', '-')}"
                s3fs.S3FileSystem(**options).mkdir(bucket)
                changelogs[mode] = f"s3://{bucket}/changelog"
            else:
                changelogs[mode] = str(work / "changelog")
            for path in files[:batches]:
                os.link(path, work / "in" / path.name)
            built = spawn(mode, work, "build", args.partitions, changelogs[mode], options)
            shape = f"{keys:,}x{args.partitions} in {built['batches']} batches"
            print(f"<!-- built {mode} {shape}: {built['wall_s']:.1f} s -->")
        measured: dict[str, list[dict]] = {mode: [] for mode in args.modes}
        for r in range(args.restarts):
            for mode in args.modes if r % 2 == 0 else reversed(args.modes):
                work = works[mode]
                shutil.rmtree(work / "state", ignore_errors=True)  # a new cluster: no executor-local state
                path = files[batches + r]
                os.link(path, work / "in" / path.name)
                before = snapshot_bytes(changelogs[mode], options) if mode == "kstate" else []
                result = spawn(mode, work, "restart", args.partitions, changelogs[mode], options)
                result["snapshot_bytes"] = sum(before) / max(len(before), 1)
                measured[mode].append(result)
                print(f"<!-- {json.dumps(result)} -->", flush=True)
        for mode in args.modes:
            runs = measured[mode]
            batch_s = statistics.median(run["batch_s"] for run in runs)
            row = [f"{keys:,}", str(batches), location, mode, f"{batch_s:.2f}"]
            if mode == "spark":
                row += ["-"] * 5
            else:
                restore_s = statistics.median(run["restore_s"] for run in runs)
                records = statistics.median(run["restored_records"] for run in runs)
                snapshot = statistics.median(run["snapshot_bytes"] for run in runs)
                # restore_s sums the tasks'; the partitions restore at once, one per core.
                per_task = restore_s / args.partitions or float("nan")
                row += [
                    f"{restore_s:.2f}",
                    f"{records:,.0f}",
                    f"{snapshot / 2**20:,.0f}" if snapshot else "-",
                    f"{snapshot / 2**20 / per_task:,.0f}" if snapshot else "-",
                    f"{records / args.partitions / per_task:,.0f}",
                ]
            rows.append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000], help="keys per partition")
    parser.add_argument("--batches", type=int, nargs="+", default=[5], help="micro-batches that build the state")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--restart-rows", type=int, default=100_000)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--s3", action="store_true", help="kstate's changelog on moto's S3 server instead")
    parser.add_argument("--dir", default=None, help="where the work directories go")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--changelog", help=argparse.SUPPRESS)
    parser.add_argument("--options", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        child(args)
        return
    args.modes = args.modes.split(",")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1"
    server, endpoint = start_moto() if args.s3 else (None, None)
    print(
        "| keys per partition | batches | changelog | mode | restart batch s | restore s | records replayed "
        "| snapshot MiB per partition | MB/s per partition | records/s per partition |"
    )
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    try:
        for keys in args.keys:
            for batches in args.batches:
                for row in measure(keys, batches, "s3" if args.s3 else "dir", args, endpoint):
                    print(f"| {' | '.join(row)} |", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()

"""The Spark state workload of ``spark_state.py`` on ``local-cluster[2,1,1024]``: two executor
JVMs (from pip's pyspark), each with its own executor-local kstate state (``state_dir=None``) and
one shared changelog directory; the rocksdict peer keeps its per-partition databases in one
shared directory, as in the peer script.

Each mode runs twice on one cluster: run 1 processes FILES files from an empty state; then one
executor's local state is wiped (kstate) and run 2 restarts the query from its checkpoint with
FILES more files. Reported: rows/s of each run (rows over the query's wall time, as the peer
script measures), and for kstate the records restored and seconds spent restoring in run 2
(``StateBackend.report_progress``).

  .venv/bin/python benches/spark_cluster.py          # both modes, the table of benches/README.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spark_state import make_input, rocksdict_query

MASTER = "local-cluster[2,1,1024]"


def kstate_backend(work: Path):
    from kstate import Stores
    from kstate.spark import StateBackend

    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend([counts], None, work / "changelog", "bench-cluster", keys=["key"], num_partitions=2)


def kstate_udf():
    import pyarrow as pa
    import pyarrow.compute as pc

    def running_count(batches, stores):
        store = stores["counts"]
        for batch in batches:
            counted = pc.value_counts(batch.column("key"))
            keys, n = counted.field("values"), counted.field("counts")
            new = pc.add(pc.fill_null(store.get_many(keys), 0), n)
            store.put_all(keys, new)
            yield pa.RecordBatch.from_arrays([keys, new], names=["key", "count"])

    return running_count


def run_query(spark, df, work: Path) -> float:
    started = time.perf_counter()
    query = (
        df.writeStream.outputMode("update")
        .foreachBatch(lambda frame, _: frame.write.mode("append").parquet(str(work / "out")))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def run_mode(mode: str, files: int, rows: int, keys: int) -> dict:
    import pyspark

    from kstate.spark import local_session

    work = Path(tempfile.mkdtemp(prefix=f"spark-cluster-{mode}-"))
    (work / "in").mkdir()
    make_input(work / "in", 2 * files, rows, keys)
    pending = sorted((work / "in").iterdir())[files:]
    parked = work / "later"
    parked.mkdir()
    for path in pending:
        path.rename(parked / path.name)
    spark = local_session(f"bench-cluster-{mode}", master=MASTER, conf={"spark.sql.shuffle.partitions": 2})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(str(work / "in"))
        if mode == "kstate":
            backend = kstate_backend(work)
            progress = backend.report_progress(spark)
            query = backend.partition(df).mapInArrow(backend.map_in_arrow(kstate_udf()), "key string, count long")
        else:
            query = rocksdict_query(df, work)
        first = run_query(spark, query, work)
        app = Path(pyspark.__file__).parent / "work" / spark.sparkContext.applicationId
        wiped = sorted(app.glob("*/kstate-state"))[:1]
        for directory in wiped:
            shutil.rmtree(directory)  # one executor's local state is lost
        for path in sorted(parked.iterdir()):
            path.rename(work / "in" / path.name)
        second = run_query(spark, query, work)
        result = {"mode": mode, "rows": files * rows, "run1_s": first, "run2_s": second}
        if mode == "kstate":
            time.sleep(2)  # the listener hears the last batches asynchronously
            later = [r for r in progress if r.batch_id >= files]
            result["restored_records"] = sum(r.restored_records for r in later)
            result["restore_s"] = sum(r.restore_seconds for r in later)
            result["wiped_executors"] = len(wiped)
        return result
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_mode(args.one, args.files, args.rows, args.keys)), flush=True)
        return
    results = {}
    for mode in ("kstate", "rocksdict"):
        command = [sys.executable, __file__, "--one", mode, "--files", str(args.files)]
        command += ["--rows", str(args.rows), "--keys", str(args.keys)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[mode] = json.loads(out.strip().splitlines()[-1])
    k, r = results["kstate"], results["rocksdict"]
    print("| mode | run 1 rows/s | run 2 rows/s (after a wipe) | records restored | restore s |")
    print("|---|---:|---:|---:|---:|")
    for name, res in (("kstate", k), ("rocksdict", r)):
        restored = f"{res['restored_records']:,}" if "restored_records" in res else "-"
        seconds = f"{res['restore_s']:.2f}" if "restore_s" in res else "-"
        print(
            f"| {name} | {res['rows'] / res['run1_s']:,.0f} | {res['rows'] / res['run2_s']:,.0f} "
            f"| {restored} | {seconds} |"
        )
    print(
        f"\nkstate / rocksdict rows/s: run 1 {r['run1_s'] / k['run1_s']:.2f}x, run 2 {r['run2_s'] / k['run2_s']:.2f}x"
    )


if __name__ == "__main__":
    main()

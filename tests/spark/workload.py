"""The workload of the Spark tests: parquet files of keys (one file per micro-batch), a running
count per key as the UDF, and the same count in plain Python."""

import collections
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import cloudpickle

from kstate.spark import local_session

# Spark's workers cannot import the tests' modules by name: ship their functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS = 40
ROWS = 300
SCHEMA = "key string, count long"


def file_keys(index):
    return [f"k{(index * 7 + i * i) % KEYS}" for i in range(ROWS)]


def reference(files):
    """Per batch (one file each), every key's running count after the batch."""
    totals, out = collections.Counter(), {}
    for batch, index in enumerate(files):
        keys = file_keys(index)
        totals.update(keys)
        out[batch] = {k: totals[k] for k in set(keys)}
    return out


def add_files(work, indexes):
    for i in indexes:
        path = work / "in" / f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"key": file_keys(i), "v": list(range(ROWS))}), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the stream takes files in this order


def running_count(batches, stores):
    """The UDF: one get_many and one put_all per Arrow batch."""
    store = stores["counts"]
    for batch in batches:
        counted = pc.value_counts(batch.column("key"))
        keys, n = counted.field("values"), counted.field("counts")
        new = pc.add(pc.fill_null(store.get_many(keys), 0), n)
        store.put_all(keys, new)
        yield pa.RecordBatch.from_arrays([keys, new], names=["key", "count"])


def spark_for_tests(name, master):
    """A SparkSession for one test module: two shuffle partitions, fast polling, quiet logs."""
    session = local_session(
        name, master=master, conf={"spark.sql.shuffle.partitions": 2, "spark.sql.streaming.pollingDelay": "100ms"}
    )
    session.sparkContext.setLogLevel("ERROR")
    return session

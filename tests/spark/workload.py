"""The workload of the Spark tests: parquet files of keys (one file per micro-batch), a running
count per key as the UDF, and the same count in plain Python."""

import collections
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import cloudpickle

from kstate.spark import StatefulProcessor, local_session
from kstate.spark.protocol.exactly_once import TASK_LOCK
from kstate.spark.protocol.idle import wait_for_release

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


def write_file(work, index, columns):
    """Input file ``index`` of ``work/in`` with ``columns`` (a dict of lists)."""
    add_whole(work / "in" / f"part-{index:05d}.parquet", index, lambda path: pq.write_table(pa.table(columns), path))


def add_whole(path, index, write):
    """Adds input file ``path`` as the ``index``-th, written by ``write(path)`` under a hidden name
    and then renamed: a stream lists no hidden file, so it never reads half of one."""
    hidden = path.with_name(f".{path.name}")
    write(hidden)
    os.utime(hidden, (1_700_000_000 + index, 1_700_000_000 + index))  # the stream takes files in this order
    os.replace(hidden, path)


def add_files(work, indexes):
    for i in indexes:
        write_file(work, i, {"key": file_keys(i), "v": list(range(ROWS))})


def running_count(batches, stores, key="key"):
    """The UDF: one get_many and one put_all per Arrow batch (rows counted by column ``key``)."""
    store = stores["counts"]
    for batch in batches:
        counted = pc.value_counts(batch.column(key))
        keys, n = counted.field("values"), counted.field("counts")
        new = pc.add(pc.fill_null(store.get_many(keys), 0), n)
        store.put_all(keys, new)
        yield pa.RecordBatch.from_arrays([keys, new], names=[key, "count"])


class RunningCount(StatefulProcessor):
    """``running_count`` as a ``transform_with_state`` processor (pandas API); an initial state
    sets a key's count before batch 0."""

    def init(self, handle):
        self.count = handle.getValueState("count", "c long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802
        import pandas as pd

        total = (self.count.get() or (0,))[0] + sum(len(frame) for frame in rows)
        self.count.update((total,))
        yield pd.DataFrame({"key": [key[0]], "count": [total]})

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802
        self.count.update((int(initialState["count"].sum()),))


def release_parked_stores(state_dir):
    """Has the Python workers that keep stores parked in any task directory under ``state_dir``
    close them, and waits until they did: then the local state can be deleted as a new cluster
    would lack it (a parked store closed later would write into the directory a restore makes)."""
    for lock in Path(state_dir).rglob(TASK_LOCK):
        wait_for_release(lock.parent, lock, f"task directory {lock.parent}", 60)


def spark_for_tests(name, master):
    """A SparkSession for one test module: two shuffle partitions, fast polling, quiet logs."""
    session = local_session(
        name, master=master, conf={"spark.sql.shuffle.partitions": 2, "spark.sql.streaming.pollingDelay": "100ms"}
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def input_stream(spark, work, schema="key string, v long"):
    """The streaming read of ``work/in``, one file per micro-batch."""
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(work / "in"))


def counts_into(outputs):
    """A ``foreachBatch`` function putting each batch's ``{key: count}`` in ``outputs[batch]``
    (at-least-once: a replay reports again)."""

    def sink(frame, batch_id):
        outputs[batch_id] = {row["key"]: row["count"] for row in frame.collect()}

    return sink


def run_to_end(frame, work, on_batch):
    """Runs the streaming ``frame`` over the input not yet processed (``availableNow``, the
    checkpoint in ``work``), calling ``on_batch(batch_frame, batch_id)`` per micro-batch."""
    query = (
        frame.writeStream.outputMode("update")
        .foreachBatch(on_batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None


def collecting(frame, checkpoint, trigger="200 milliseconds", output_mode="update"):
    """Starts the streaming ``frame`` (``output_mode``, a ``processingTime`` trigger); returns the
    query and ``{batch id: its rows as sorted tuples}`` of the batches with rows, filled as
    they run (at-least-once: a replay reports again)."""
    outputs = {}

    def sink(batch_frame, batch_id):
        rows = sorted(tuple(r) for r in batch_frame.collect())
        if rows:
            outputs[batch_id] = rows

    query = (
        frame.writeStream.outputMode(output_mode)
        .foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=trigger)
        .start()
    )
    return query, outputs


def wait_for(condition, query, what, timeout=600):
    """Waits until ``condition()`` holds, failing if the streaming ``query`` fails or ``timeout``
    seconds pass (a deadline for a machine far slower than this one, never a measure of speed)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"{what}: not in {timeout} s ({query.recentProgress[-3:]})"
        time.sleep(0.05)


def committed(query, batch):
    """Waits until Spark's commit log has ``batch`` (Spark reports a batch's progress after writing
    it): a query stopped before then replays the batch when it starts again."""
    wait_for(
        lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= batch,
        query,
        f"batch {batch} committed",
    )


def run_until(frame, checkpoint, batches, trigger="200 milliseconds", output_mode="update"):
    """Runs the streaming ``frame`` (``collecting``) until ``batches`` of its micro-batches had
    output and the last of them is committed (the sink sees a batch's rows before Spark writes its
    commit log: stopping then leaves a checkpoint without that batch, which Spark's state reader
    refuses to read); returns ``{batch id: sorted rows}`` and the stopped query."""
    query, outputs = collecting(frame, checkpoint, trigger, output_mode)
    try:
        wait_for(lambda: len(outputs) >= batches, query, f"{batches} batches with output")
        committed(query, max(outputs))
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return outputs, query

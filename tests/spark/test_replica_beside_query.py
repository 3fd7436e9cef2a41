"""A replica in another process beside a streaming query on local Spark: while the query writes
(a running count per key, kstate's StateBackend in ``mapInArrow``, one input file per
micro-batch), every read the replica answers equals the reference state of the batch it names."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.spark import StateBackend  # noqa: E402
from kstate.spark.routing.hashing import partition_ids  # noqa: E402

from .workload import (  # noqa: E402
    KEYS,
    SCHEMA,
    add_files,
    collecting,
    committed,
    file_keys,
    input_stream,
    running_count,
    spark_for_tests,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FILES = 8
ALL_KEYS = [f"k{i}" for i in range(KEYS)]

READER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from kstate.serving import StateReplica

    changelog, local, out, stop, keys = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5:]
    while True:  # until the query's first batch made the state
        try:
            replica = StateReplica(changelog, "counts-app", local_dir=local)
            break
        except Exception:
            time.sleep(0.1)
    replica.follow(0.05)
    with open(out, "w") as reads:
        while not stop.exists():
            answer = replica.get_many("counts", keys)
            one = replica.get("counts", keys[len(keys) // 2])
            for read, ks, values in ((answer, keys, answer.value), (one, [keys[len(keys) // 2]], [one.value])):
                row = {"batch": read.batch_id, "partitions": read.partitions, "keys": ks, "values": values}
                reads.write(json.dumps(row) + "\\n")
            time.sleep(0.01)
    replica.close()
    """
)


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-serving-tests", "local[2]")
    yield session
    session.stop()


def counts_after(batch: int) -> dict[str, int]:
    """Every key's running count after micro-batch ``batch`` (file ``batch``; -1: before any)."""
    totals: collections.Counter[str] = collections.Counter()
    for index in range(batch + 1):
        totals.update(file_keys(index))
    return dict(totals)


def test_a_replica_beside_a_running_query_answers_the_state_of_the_batch_it_names(spark, work):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    backend = StateBackend(
        [counts], work / "state", work / "changelog", "counts-app", lock_timeout=60, keys=["key"], num_partitions=2
    )
    frame = input_stream(spark, work).repartition(2, "key").mapInArrow(backend.map_in_arrow(running_count), SCHEMA)
    stop, reads = work / "stop", work / "reads.jsonl"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(work / "changelog"), str(work / "replica"), str(reads), str(stop), *ALL_KEYS]
    )
    query, _ = collecting(frame, work / "checkpoint", trigger="100 milliseconds")
    try:
        for index in range(FILES):  # one file per micro-batch, each added once the one before ran
            add_files(work, [index])
            committed(query, index)
            time.sleep(0.3)  # reads at this batch, before the next one
        deadline = time.monotonic() + 120
        while f'"batch": {FILES - 1},' not in (reads.read_text() if reads.exists() else ""):
            assert time.monotonic() < deadline, "the replica did not reach the last batch in 120 s"
            time.sleep(0.1)
    finally:
        query.stop()
        stop.touch()
        reader.wait(120)
    assert reader.returncode == 0
    partition_of = dict(zip(ALL_KEYS, partition_ids([pa.array(ALL_KEYS)], 2).tolist()))
    rows = [json.loads(line) for line in reads.read_text().splitlines()]
    named = set()
    for row in rows:
        held = {int(p): b for p, b in row["partitions"].items()}
        for key, value in zip(row["keys"], row["values"]):
            partition = partition_of[key]
            batch = row["batch"] if row["batch"] is not None else held[partition]
            assert held[partition] >= batch
            assert value == counts_after(batch).get(key), (key, row)
        named.add(row["batch"])
    assert FILES - 1 in named and len(named) >= 3, sorted(named, key=str)

"""kstate.spark on ``local-cluster[2,1,1024]``: two executor JVMs started from pip's pyspark, each
with its own executor-local state (``state_dir=None``: its working directory) and one changelog
directory both see. A running count per key equals the plain-Python count through an executor
killed mid-query and a partition whose local state is lost, and each batch's restores show in the
backend's progress reports."""

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import pyspark  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.spark import StateBackend  # noqa: E402

from .workload import (  # noqa: E402
    SCHEMA,
    add_files,
    counts_into,
    input_stream,
    reference,
    run_to_end,
    running_count,
    spark_for_tests,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    session = spark_for_tests("kstate-cluster-tests", "local-cluster[2,1,1024]")
    yield session
    session.stop()


def executor_state_dirs(spark):
    """Each executor's ``kstate-state`` directory (standalone runs executor ``n`` of an
    application in ``<SPARK_HOME>/work/<app id>/<n>``)."""
    app = Path(pyspark.__file__).parent / "work" / spark.sparkContext.applicationId
    return sorted(app.glob("*/kstate-state"))


def backend_of(work, changelog=None, storage_options=None):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend(
        [counts],
        None,
        changelog or work / "changelog",
        f"cluster-{work.name}",
        lock_timeout=60,
        changelog_storage_options=storage_options,
        keys=["key"],
        num_partitions=2,
    )


def run_query(spark, work, backend, udf, wait_until):
    outputs = {}
    backend.report_progress(spark)
    counted = input_stream(spark, work).repartition(2, "key").mapInArrow(backend.map_in_arrow(udf), SCHEMA)
    run_to_end(counted, work, counts_into(outputs))
    # Progress events reach listeners asynchronously: wait for the last batch's.
    last = max(outputs, default=-1)
    wait_until(lambda: last in {r.batch_id for r in backend.progress}, f"kstate's progress report of batch {last}")
    return outputs


def test_executors_keep_their_own_state_and_results_equal_plain_python(cluster, work, wait_until):
    add_files(work, range(3))
    backend = backend_of(work)
    assert run_query(cluster, work, backend, running_count, wait_until) == reference(range(3))
    task_dirs = [d for state in executor_state_dirs(cluster) for d in state.glob(f"cluster-{work.name}/0_*")]
    assert {d.name for d in task_dirs} == {"0_0", "0_1"}, "task dirs live in the executors' own directories"
    assert [r.batch_id for r in backend.progress] == [0, 1, 2]
    assert all(r.tasks >= 2 for r in backend.progress)
    # Memory and disk per batch: the executors' Python workers' budgets, RSS and state on disk.
    assert all(r.state_disk_bytes > 0 and r.max_rss > r.max_memory_in_use > 0 for r in backend.progress)
    assert all(r.max_open_files > 0 for r in backend.progress)


def test_an_executor_killed_mid_query_ends_with_the_reference_result(cluster, work, wait_until):
    add_files(work, range(3))
    marker = work / "killed"

    def kill_my_executor_once(batches, stores):
        for out in running_count(batches, stores):
            if stores.batch_id == 1 and stores.partition == 0 and not marker.exists():
                marker.touch()
                # This worker's parent is PySpark's daemon, whose parent is the executor JVM.
                jvm = int(Path(f"/proc/{os.getppid()}/stat").read_text().split()[3])
                assert b"CoarseGrainedExecutorBackend" in Path(f"/proc/{jvm}/cmdline").read_bytes()
                os.kill(jvm, signal.SIGKILL)
            yield out

    outputs = run_query(cluster, work, backend_of(work), kill_my_executor_once, wait_until)
    assert marker.exists()
    assert outputs == reference(range(3))


def test_a_partition_whose_local_state_is_lost_restores_from_the_shared_changelog(cluster, work, wait_until):
    add_files(work, range(2))
    backend = backend_of(work)
    run_query(cluster, work, backend, running_count, wait_until)
    for state in executor_state_dirs(cluster):
        shutil.rmtree(state / f"cluster-{work.name}", ignore_errors=True)  # as if every partition moved
    add_files(work, range(2, 4))
    outputs = run_query(cluster, work, backend, running_count, wait_until)
    assert outputs == {b: counts for b, counts in reference(range(4)).items() if b >= 2}
    first = next(r for r in backend.progress if r.batch_id == 2)
    assert first.restored_records > 0, "the lost state was restored from the changelog"


def test_the_changelogs_on_s3_survive_lost_executor_state(cluster, work, s3_endpoint, wait_until):
    """Changelogs, batch log and undo files in a bucket of the S3 server on loopback: executors
    restore from it and first-writer-wins comes from exclusive creates, not file locks."""
    import s3fs

    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    bucket = f"kstate-{work.name[-20:].lower().replace('_', '-')}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    backend = backend_of(work, f"s3://{bucket}/changelogs", options)
    add_files(work, range(2))
    run_query(cluster, work, backend, running_count, wait_until)
    for state in executor_state_dirs(cluster):
        shutil.rmtree(state / f"cluster-{work.name}", ignore_errors=True)
    add_files(work, range(2, 4))
    outputs = run_query(cluster, work, backend, running_count, wait_until)
    assert outputs == {b: counts for b, counts in reference(range(4)).items() if b >= 2}
    assert next(r for r in backend.progress if r.batch_id == 2).restored_records > 0
    listed = s3fs.S3FileSystem(**options).ls(f"{bucket}/changelogs")
    assert any("kstate-batches-0" in path for path in listed), "the batch log is in the bucket"

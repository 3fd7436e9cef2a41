"""kstate routes rows itself, under Spark's default configuration (adaptive query execution on,
200 shuffle partitions), and rescales: real local Spark against plain-Python references.

The processor keeps value, map and timer state per user, so a key whose rows or state land in
another partition shows in its output (count, evens, timers)."""

import collections
import sys

import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.spark import StateBackend, StatefulProcessor, transform_with_state  # noqa: E402

from ..workload import input_stream, run_to_end, running_count, spark_for_tests, write_file  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "user string, count long, evens long, timers long"
USERS = 8_000
FAR_FUTURE_MS = 10**15


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-routing", "local[2,3]")
    yield session
    session.stop()


@pytest.fixture
def spark_defaults(spark):
    """Spark's own defaults for shuffles, and a small advisory size standing in for production
    batches against the 64 MiB default: AQE coalesces partitions of a countless repartition."""
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "100k")
    yield spark
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.unset("spark.sql.adaptive.advisoryPartitionSizeInBytes")


class UserActivity(StatefulProcessor):
    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "count long")
        self.parity = handle.getMapState("parity", "even boolean", "n long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802
        import pandas as pd

        (total,) = self.count.get() or (0,)
        for frame in rows:
            total += len(frame)
            evens = int((frame["v"] % 2 == 0).sum())
            (before,) = self.parity.getValue((True,)) or (0,)
            self.parity.updateValue((True,), (before + evens,))
        self.count.update((total,))
        self.handle.registerTimer(FAR_FUTURE_MS)  # never fires; must move with its key
        timers = len(list(self.handle.listTimers()))
        (evens,) = self.parity.getValue((True,))
        yield pd.DataFrame({"user": [key[0]], "count": [total], "evens": [evens], "timers": [timers]})


SIZES = [300, 30_000, 50, 8_000, 2_000, 12_000]
"""Rows per micro-batch: very different sizes, so AQE coalesces differently per batch."""


def file_rows(index):
    n = SIZES[index]
    users = [f"u{(index * 7919 + i * 104_729) % USERS}" for i in range(n)]
    return {"user": users, "v": list(range(n))}


def add_files(work, indexes):
    for i in indexes:
        write_file(work, i, file_rows(i))


def reference(indexes):
    counts, evens, out = collections.Counter(), collections.Counter(), {}
    for batch, index in enumerate(indexes):
        rows = file_rows(index)
        counts.update(rows["user"])
        evens.update(u for u, v in zip(rows["user"], rows["v"]) if v % 2 == 0)
        out[batch] = {u: (counts[u], evens[u], 1) for u in set(rows["user"])}
    return out


def users_into(outputs, offset=0):
    def sink(frame, batch_id):
        outputs[offset + batch_id] = {r["user"]: (r["count"], r["evens"], r["timers"]) for r in frame.collect()}

    return sink


def run_processor(spark, work, outputs, **options):
    frames = input_stream(spark, work, "user string, v long")
    result = transform_with_state(
        frames, ["user"], UserActivity(), SCHEMA, work / "state", work / "changelog", "users",
        time_mode="ProcessingTime", **options,
    )  # fmt: skip
    run_to_end(result, work, users_into(outputs))


def test_default_partitioning_under_aqe_gives_the_reference(spark_defaults, work):
    """num_partitions left unset, AQE on with 200 shuffle partitions: kstate picks and records a
    count (Spark's default parallelism here) and routes with it, batch after batch."""
    add_files(work, range(4))
    outputs = {}
    run_processor(spark_defaults, work, outputs)
    assert outputs == reference(range(4))
    backend = StateBackend([_counts()], work / "state", work / "changelog", "users", keys=["user"])
    assert backend.partitioning_log().current().num_partitions == spark_defaults.sparkContext.defaultParallelism


def _counts():
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")


def count_users(batches, stores):
    return running_count(batches, stores, key="user")


def changelog_files(work):
    return sorted(
        (str(p.relative_to(work)), p.stat().st_size)
        for p in (work / "changelog").rglob("*")
        if p.is_file() and p.name not in {".lock", ".head"}
    )


def test_a_repartition_kstate_did_not_make_fails_and_touches_nothing(spark_defaults, work):
    """The user's own repartition: without a count (200 partitions, which AQE may coalesce) and on
    another column, each fails its batch with the routing error; no partition the state does not
    have is ever opened, and with the count right but the column wrong nothing is touched (tasks
    0 and 1 of 200 may commit rows that do belong to them; the retry rolls them back). The right
    plan then continues to the reference."""
    state = StateBackend([_counts()], work / "state", work / "changelog", "clicks", keys=["user"], num_partitions=2)
    add_files(work, range(2))
    outputs = {}
    frames = input_stream(spark_defaults, work, "user string, v long")
    good = state.partition(frames).mapInArrow(state.map_in_arrow(count_users), "user string, count long")
    run_to_end(good, work, counts_into_users(outputs))
    before = changelog_files(work)
    add_files(work, [2])
    for wrong, untouched in ((frames.repartition("user"), partitions_of), (frames.repartition(2, "v"), list)):
        query = wrong.mapInArrow(state.map_in_arrow(count_users), "user string, count long")
        with pytest.raises(Exception, match="MisroutedRowsError"):
            run_to_end(query, work, counts_into_users(outputs))
        after = changelog_files(work)
        assert untouched(after) == untouched(before)
        before = after
    run_to_end(good, work, counts_into_users(outputs))
    expected = {b: {u: c for u, (c, _, _) in rows.items()} for b, rows in reference(range(3)).items()}
    assert outputs == expected


def partitions_of(files):
    """The changelog partitions that exist (their files' sizes may have changed)."""
    return {name.split("/")[1] for name, _ in files}


def counts_into_users(outputs):
    def sink(frame, batch_id):
        outputs[batch_id] = {r["user"]: r["count"] for r in frame.collect()}

    return sink


def test_a_changed_count_fails_fast_then_rescale_continues_exactly(spark, work, rescale_cli):
    from kstate.errors import PartitioningChangedError

    add_files(work, range(2))
    outputs = {}
    run_processor(spark, work, outputs, num_partitions=2)
    add_files(work, range(2, 4))
    with pytest.raises(PartitioningChangedError, match="kstate rescale"):
        run_processor(spark, work, outputs, num_partitions=3)
    assert "2 -> 3 partitions" in rescale_cli(work / "changelog", "users", 3)
    run_processor(spark, work, outputs, num_partitions=3)
    assert outputs == reference(range(4))


def test_rescale_down_from_four_to_two(spark, work):
    from kstate.spark.rescale import rescale

    add_files(work, range(2))
    outputs = {}
    run_processor(spark, work, outputs, num_partitions=4)
    rescale(work / "changelog", "users", 2)
    add_files(work, range(2, 4))
    run_processor(spark, work, outputs)  # the recorded count: 2
    assert outputs == reference(range(4))

"""Routing checks and rescaling, at the protocol level (no Spark session): tasks get Arrow
batches routed the way Spark's ``repartition(n, "key")`` routes them (``partition_ids``, checked
against Spark itself in test_hashing.py), through key-value, window and session stores; a
rescale re-routes the state and the undo of the last batches; a real SIGKILL inside a rescale."""

import collections
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from kstate import Stores, Windowed
from kstate.errors import InvalidArgumentError, MisroutedRowsError, PartitioningChangedError
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.rescale import rescale
from kstate.spark.routing.hashing import partition_ids

DAY = 86_400_000
MINUTE = 60_000
NOW_DAY = time.time_ns() // 1_000_000 // DAY * DAY
"""Event times are today's: window changelogs delete records older than retention by wall clock."""


def builders():
    return [
        Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64"),
        Stores.window_store_builder(
            Stores.persistent_window_store("per_minute", retention_ms=10 * DAY, window_size_ms=MINUTE),
            "string",
            "int64",
        ),
        Stores.session_store_builder(Stores.persistent_session_store("visits", 10 * DAY), "string", "int64"),
        Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("latest"), "string", "int64"
        ),
    ]


def backend_of(tmp_path, num_partitions=None):
    return StateBackend(
        builders(), tmp_path / "state", tmp_path / "changelog", "app", keys=["key"], num_partitions=num_partitions
    )


def batch_rows(batch):
    """The rows of micro-batch ``batch``: 120 keys, uneven counts, timestamps a few minutes apart."""
    keys = [f"user-{(batch * 37 + i * i) % 120}" for i in range(400 + 300 * batch)]
    times = [NOW_DAY + batch * 5 * MINUTE + (i % 7) * 17_000 for i in range(len(keys))]
    return pa.table({"key": keys, "ts": pa.array(times, pa.int64())})


def count_everything(batches, stores):
    counts, windows, sessions, latest = stores["counts"], stores["per_minute"], stores["visits"], stores["latest"]
    for batch in batches:
        for key, ts in zip(batch.column("key").to_pylist(), batch.column("ts").to_pylist()):
            counts.put(key, (counts.get(key) or 0) + 1)
            latest.put(key, ts % 1000, timestamp=ts)
            start = ts // MINUTE * MINUTE
            windows.put(key, (windows.fetch(key, start) or 0) + 1, window_start=start)
            sessions.put(Windowed(key, ts, ts), 1)
        yield batch.num_rows


def run_batch(backend, batch, n, fn=count_everything, route_by="key"):
    """Micro-batch ``batch`` as Spark runs it after ``repartition(n, route_by)``: one task per partition."""
    table = batch_rows(batch)
    ids = partition_ids([table.column(route_by)], n)
    for p in range(n):
        rows = table.filter(pa.array(ids == p)).to_batches(max_chunksize=150)
        list(backend.process(fn, rows, TaskInfo(p, batch)))


def reference(batches):
    counts, windows, sessions, latest = collections.Counter(), collections.Counter(), set(), {}
    for batch in batches:
        table = batch_rows(batch)
        for key, ts in zip(table.column("key").to_pylist(), table.column("ts").to_pylist()):
            counts[key] += 1
            latest[key] = (ts % 1000, ts)
            windows[(key, ts // MINUTE * MINUTE)] += 1
            sessions.add((key, ts))
    return dict(counts), dict(windows), sessions, latest


def state_of(backend, n):
    """Every partition's committed state; checks each key sits in the partition Spark routes it to."""
    counts, windows, sessions, latest = {}, {}, set(), {}
    for p in range(n):
        state = backend.partition_state(TaskInfo(p, 1_000_000))
        stores = state.open(read_only=True)
        try:
            with stores["counts"].all() as it:
                mine = dict(it)
            with stores["per_minute"].all() as it:
                my_windows = {(kv.key.key, kv.key.start): kv.value for kv in it}
            with stores["visits"].fetch(None, None) as it:
                my_sessions = {(kv.key.key, kv.key.start) for kv in it}
            with stores["latest"].all_with_timestamp() as it:
                latest.update({k: (v.value, v.timestamp) for k, v in it})
        finally:
            state.abort()
        keys = list(mine) + [k for k, _ in my_windows] + [k for k, _ in my_sessions]
        if keys:
            assert set(partition_ids([pa.array(keys, pa.string())], n).tolist()) == {p}
        counts.update(mine)
        windows.update(my_windows)
        sessions |= my_sessions
    return counts, windows, sessions, latest


def test_misrouted_rows_fail_the_task_before_anything_is_staged(tmp_path):
    backend = backend_of(tmp_path, num_partitions=2)
    run_batch(backend, 0, 2)
    before = state_of(backend, 2)
    with pytest.raises(MisroutedRowsError, match=r"state\.partition\(df\)"):
        run_batch(backend, 1, 2, route_by="ts")  # a repartition on another column
    with pytest.raises(MisroutedRowsError):
        list(backend.process(count_everything, batch_rows(1).to_batches(), TaskInfo(0, 1)))  # no repartition
    assert state_of(backend, 2) == before
    run_batch(backend, 1, 2)
    assert state_of(backend, 2) == reference([0, 1])


def test_a_stage_with_more_partitions_than_the_state_fails_in_every_extra_task(tmp_path):
    """repartition("user") without a count: 200 tasks, most of them empty. A task whose partition id
    is not one of the state's fails before it opens anything, rows or not; tasks 0 and 1 get only
    rows that belong to them (pmod(h, 200) == 0 implies pmod(h, 2) == 0) and commit them, as a
    Spark state store's task commits its own version; the batch's retry rolls them back."""
    backend = backend_of(tmp_path, num_partitions=2)
    run_batch(backend, 0, 2)
    before = state_of(backend, 2)
    partitions_before = sorted(p.name for p in (tmp_path / "changelog").iterdir())
    for p in (2, 103, 199):
        with pytest.raises(MisroutedRowsError, match=f"task of partition {p} in batch 1, but the state has 2"):
            list(backend.process(count_everything, [], TaskInfo(p, 1)))
    with pytest.raises(MisroutedRowsError, match="task of partition 7"):
        list(backend.process(count_everything, batch_rows(1).slice(0, 0).to_batches(), TaskInfo(7, 1)))
    assert sorted(p.name for p in (tmp_path / "changelog").iterdir()) == partitions_before
    assert {p.name for p in (tmp_path / "state").rglob("0_*") if p.is_dir()} == {"0_0", "0_1"}
    assert state_of(backend, 2) == before
    table = batch_rows(1)
    ids = partition_ids([table.column("key")], 200)
    for p in (0, 1):  # correctly routed subsets: committed
        list(backend.process(count_everything, table.filter(pa.array(ids == p)).to_batches(), TaskInfo(p, 1)))
    run_batch(backend, 1, 2)  # the retry with the right plan
    assert state_of(backend, 2) == reference([0, 1])


def test_a_function_that_swallows_the_error_still_commits_nothing(tmp_path):
    backend = backend_of(tmp_path, num_partitions=2)
    run_batch(backend, 0, 2)
    before = state_of(backend, 2)
    table = batch_rows(1)
    ids = partition_ids([table.column("key")], 2)
    good, bad = table.filter(pa.array(ids == 0)), table.filter(pa.array(ids == 1))

    def swallowing(batches, stores):
        try:
            yield from count_everything(batches, stores)
        except MisroutedRowsError:
            yield 0

    with pytest.raises(MisroutedRowsError):
        list(backend.process(swallowing, [*good.to_batches(), *bad.to_batches()], TaskInfo(0, 1)))
    assert state_of(backend, 2) == before


def test_a_different_count_or_key_type_is_refused(tmp_path):
    run_batch(backend_of(tmp_path, num_partitions=2), 0, 2)
    with pytest.raises(PartitioningChangedError, match="kstate rescale"):
        run_batch(backend_of(tmp_path, num_partitions=3), 1, 3)
    typed = pa.table({"key": pa.array([1, 2], pa.int64()), "ts": pa.array([0, 0], pa.int64())})
    with pytest.raises(PartitioningChangedError, match="bigint"):
        list(backend_of(tmp_path).process(count_everything, typed.to_batches(), TaskInfo(0, 1)))
    with pytest.raises(InvalidArgumentError, match="keys="):
        StateBackend(builders(), tmp_path / "s", tmp_path / "changelog", "other").map_in_arrow(count_everything)


def test_the_refusal_names_the_rescale_command_that_fixes_it(tmp_path, rescale_cli):
    changelog_dir = tmp_path / "change logs"  # a space: the command must quote it
    backend = StateBackend(builders(), tmp_path / "state", changelog_dir, "app", keys=["key"], num_partitions=2)
    run_batch(backend, 0, 2)
    grown = StateBackend(builders(), tmp_path / "state", changelog_dir, "app", keys=["key"], num_partitions=3)
    with pytest.raises(PartitioningChangedError) as refused:
        run_batch(grown, 1, 3)
    command = str(refused.value).rsplit(": ", 1)[1]
    assert shlex.split(command) == [
        "kstate", "rescale", str(changelog_dir), "--application-id", "app", "--partitions", "3"
    ]  # fmt: skip
    assert "2 -> 3 partitions" in rescale_cli(changelog_dir, "app", 3)
    run_batch(grown, 1, 3)
    assert state_of(grown, 3) == reference(range(2))


@pytest.mark.parametrize(("before", "after"), [(2, 3), (4, 2)])
def test_rescaled_state_continues_exactly_and_replays_roll_back(tmp_path, before, after):
    backend = backend_of(tmp_path, num_partitions=before)
    for batch in range(3):
        run_batch(backend, batch, before)
    report = rescale(tmp_path / "changelog", "app", after)
    assert (report.from_partitions, report.to_partitions, report.generation, report.batch) == (before, after, 1, 2)
    rescaled = backend_of(tmp_path)
    assert rescaled.partitioning_log().current().num_partitions == after
    assert state_of(rescaled, after) == reference(range(3))
    run_batch(rescaled, 2, after)  # Spark replays the last batch after the restart: rolled back, redone
    assert state_of(rescaled, after) == reference(range(3))
    run_batch(rescaled, 3, after)
    assert state_of(rescaled, after) == reference(range(4))
    names = os.listdir(tmp_path / "changelog")
    assert f"app-gen1-counts-changelog-{after - 1}" in names
    assert not [n for n in names if n.startswith("app-counts-") or n.startswith("app-kstate-batches")]


def test_rolling_back_further_than_the_kept_undo_still_fails_after_a_rescale(tmp_path):
    backend = backend_of(tmp_path, num_partitions=2)
    for batch in range(4):
        run_batch(backend, batch, 2)
    rescale(tmp_path / "changelog", "app", 3)
    rescaled = backend_of(tmp_path)
    run_batch(rescaled, 2, 3)  # batches 2 and 3 have undo (undo_retained_batches=2)
    assert state_of(rescaled, 3) == reference(range(3))
    with pytest.raises(Exception, match="undo file"):
        run_batch(rescaled, 1, 3)


KILLED_RESCALE = """
import os, signal, sys
from kstate.spark.protocol import exactly_once
from kstate.spark.rescale import rescale
original = exactly_once.PartitionState.install
def install_then_die(self, history, floor=None):
    original(self, history, floor)
    os.kill(os.getpid(), signal.SIGKILL)  # after the first new partition is complete
exactly_once.PartitionState.install = install_then_die
rescale(sys.argv[1], "app", 3)
"""


def test_a_killed_rescale_leaves_the_old_state_and_runs_again(tmp_path, rescale_cli):
    backend = backend_of(tmp_path, num_partitions=2)
    for batch in range(2):
        run_batch(backend, batch, 2)
    killed = subprocess.run([sys.executable, "-c", KILLED_RESCALE, str(tmp_path / "changelog")], check=False)
    assert killed.returncode == -signal.SIGKILL
    assert "app-gen1-kstate-batches-0" in os.listdir(tmp_path / "changelog")
    assert backend_of(tmp_path).partitioning_log().current().num_partitions == 2
    assert state_of(backend_of(tmp_path), 2) == reference(range(2)), "the old state is intact"
    assert "2 -> 3 partitions" in rescale_cli(tmp_path / "changelog", "app", 3)
    rescaled = backend_of(tmp_path)
    assert state_of(rescaled, 3) == reference(range(2))
    run_batch(rescaled, 2, 3)
    assert state_of(rescaled, 3) == reference(range(3))


def test_partition_ids_spread_keys(tmp_path):
    """A sanity check of the test's own routing: every partition gets keys."""
    ids = partition_ids([batch_rows(0).column("key")], 3)
    assert set(np.unique(ids).tolist()) == {0, 1, 2}


def test_the_event_time_watermark_reads_the_same_after_a_rescale(tmp_path):
    """transform_with_state's event-time store is per partition, not per key: a rescale keeps its
    history so the query-wide watermark of every batch (replays included) stays what it was."""
    from kstate.spark.processor.processor import EVENT_TIME, _tracking_event_time
    from kstate.spark.processor.watermarks import query_watermarks

    def backend(num_partitions=None):
        stores = [
            builders()[0],
            Stores.key_value_store_builder(Stores.persistent_key_value_store(EVENT_TIME), "bytes", "bytes"),
        ]
        return StateBackend(
            stores, tmp_path / "state", tmp_path / "changelog", "app", keys=["key"], num_partitions=num_partitions,
            key_codecs={EVENT_TIME: "event-time"},
        )  # fmt: skip

    def track(batches, stores):
        tracked = _tracking_event_time(iter(batches), "ts", stores[EVENT_TIME], stores.batch_id, late_watermark=0)
        for batch in tracked:
            counts = stores["counts"]
            for key in batch.column("key").to_pylist():
                counts.put(key, (counts.get(key) or 0) + 1)
            yield batch.num_rows

    for batch in range(3):
        run_batch(backend(2), batch, 2, fn=track)
    layout = backend().current_layout()
    before = [query_watermarks(layout, b, 0) for b in range(4)]
    assert before[0] == (0, 0) and before[3][1] == max(batch_rows(2).column("ts").to_pylist())
    rescale(tmp_path / "changelog", "app", 3)
    after = [query_watermarks(backend().current_layout(), b, 0) for b in range(4)]
    assert after == before
    run_batch(backend(), 3, 3, fn=track)
    assert query_watermarks(backend().current_layout(), 4, 0)[1] == max(batch_rows(3).column("ts").to_pylist())


def test_a_timestamped_builder_over_a_plain_supplier_keeps_plain_values(tmp_path):
    """Such a store keeps the plain format (Kafka's adapter): its changelog's records are
    restored as plain values, not with their timestamps in front."""

    def backend(num_partitions=None):
        plain = Stores.persistent_key_value_store("latest")
        latest = Stores.timestamped_key_value_store_builder(plain, "string", "int64")
        return StateBackend(
            [latest], tmp_path / "state", tmp_path / "changelog", "app", keys=["key"], num_partitions=num_partitions
        )

    def write(batches, stores):
        for batch in batches:
            for key in batch.column("key").to_pylist():
                stores["latest"].put(key, 7, timestamp=123)
            yield batch.num_rows

    keys = pa.array([f"k{i}" for i in range(10)])
    ids = partition_ids([keys], 2)
    for p in range(2):
        rows = pa.table({"key": keys.filter(pa.array(ids == p))}).to_batches()
        list(backend(2).process(write, rows, TaskInfo(p, 0)))
    rescale(tmp_path / "changelog", "app", 3)
    found = {}
    for p in range(3):
        state = backend().partition_state(TaskInfo(p, 1_000_000))
        with state.open(read_only=True)["latest"].all() as entries:
            found.update(entries)
        state.abort()
    assert found == {key: 7 for key in keys.to_pylist()}

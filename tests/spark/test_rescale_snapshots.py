"""Rescaling state whose key-value stores take snapshots, at the protocol level (no Spark
session): each old partition's state is read from its newest snapshot at or below what its batch
log records, then the changelog after it, so a changelog whose history below the oldest
snapshot was deleted (by hand here, as a retention would) rescales exactly; with every snapshot
over the deleted history unusable the rescale stops with ``ChangelogTruncatedError`` and switches
nothing. A window store's snapshot holds its segments, read segment by segment. On a shared
directory and on moto's S3."""

import collections

import pyarrow as pa
import pytest

from kstate import Stores
from kstate.errors import ChangelogTruncatedError
from kstate.log.snapshots import open_snapshots
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol import idle
from kstate.spark.rescale import rescale
from kstate.spark.routing.hashing import partition_ids
from remote.locations import s3_remote
from snapshots.history_retention import damage_snapshot, delete_history_below, log_start

from .test_rescale import DAY, MINUTE, batch_rows

SNAPSHOTTED = ("counts", "latest", "per_minute")
LOGGING = {"minDeltasForSnapshot": 2, "segment.bytes": 2048}
"""A snapshot every second commit; small segments, so that a retention has whole ones to delete."""


@pytest.fixture(params=["dir", "s3"])
def changelog(request, tmp_path):
    """``(changelog_dir, storage options)``: a directory, or a bucket on moto's S3."""
    if request.param == "dir":
        return str(tmp_path / "changelog"), None
    s3 = s3_remote(request.getfixturevalue("s3_endpoint"))
    return s3.url, s3.storage_options


def backend_of(tmp_path, changelog, num_partitions=None):
    url, options = changelog
    return StateBackend(
        [
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), "string", "int64"
            ).with_logging_enabled(LOGGING),
            Stores.timestamped_key_value_store_builder(
                Stores.persistent_timestamped_key_value_store("latest"), "string", "int64"
            ).with_logging_enabled(LOGGING),
            Stores.window_store_builder(
                Stores.persistent_window_store("per_minute", retention_ms=10 * DAY, window_size_ms=MINUTE),
                "string",
                "int64",
            ).with_logging_enabled(LOGGING),
        ],
        tmp_path / "state",
        url,
        "app",
        keys=["key"],
        num_partitions=num_partitions,
        changelog_storage_options=options,
    )


def count(batches, stores):
    counts, latest, windows = stores["counts"], stores["latest"], stores["per_minute"]
    for batch in batches:
        for key, ts in zip(batch.column("key").to_pylist(), batch.column("ts").to_pylist()):
            counts.put(key, (counts.get(key) or 0) + 1)
            latest.put(key, ts % 1000, timestamp=ts)
            start = ts // MINUTE * MINUTE
            windows.put(key, (windows.fetch(key, start) or 0) + 1, window_start=start)
        yield batch.num_rows


def run_batch(backend, batch, n):
    table = batch_rows(batch)
    ids = partition_ids([table.column("key")], n)
    for p in range(n):
        list(backend.process(count, table.filter(pa.array(ids == p)).to_batches(max_chunksize=150), TaskInfo(p, batch)))


def reference(batches):
    counts, latest, windows = collections.Counter(), {}, collections.Counter()
    for batch in batches:
        table = batch_rows(batch)
        for key, ts in zip(table.column("key").to_pylist(), table.column("ts").to_pylist()):
            counts[key] += 1
            latest[key] = (ts % 1000, ts)
            windows[(key, ts // MINUTE * MINUTE)] += 1
    return dict(counts), latest, dict(windows)


def state_of(backend, n):
    counts, latest, windows = {}, {}, {}
    for p in range(n):
        state = backend.partition_state(TaskInfo(p, 1_000_000))
        stores = state.open(read_only=True)
        try:
            with stores["counts"].all() as it:
                counts.update(it)
            with stores["latest"].all_with_timestamp() as it:
                latest.update({k: (v.value, v.timestamp) for k, v in it})
            with stores["per_minute"].all() as it:
                windows.update({(kv.key.key, kv.key.start): kv.value for kv in it})
        finally:
            state.abort()
    return counts, latest, windows


def snapshot_offsets(changelog, store, partition):
    return open_snapshots(changelog[0], f"app-{store}-changelog", partition, changelog[1]).offsets()


def delete_history(changelog):
    """Every snapshotted store partition loses its changelog below its newest snapshot (as if
    the older ones had been collected: compaction merges the first segments, so the oldest
    snapshot is seldom past a whole one)."""
    for store in SNAPSHOTTED:
        for p in range(2):
            newest = snapshot_offsets(changelog, store, p)[-1]
            delete_history_below(*changelog, f"app-{store}-changelog", p, newest + 1)
            assert log_start(*changelog, f"app-{store}-changelog", p) > 0


def test_a_rescale_reads_snapshots_and_needs_no_history_below_them(tmp_path, changelog):
    backend = backend_of(tmp_path, changelog, num_partitions=2)
    for batch in range(6):
        run_batch(backend, batch, 2)
    idle.IDLE.release_all()  # the parked stores close once their snapshots are out
    delete_history(changelog)
    report = rescale(changelog[0], "app", 3, storage_options=changelog[1])
    assert report.snapshots == 6, "the three stores of both old partitions"
    assert report.snapshot_entries > 0 and report.batch == 5
    rescaled = backend_of(tmp_path, changelog)
    assert state_of(rescaled, 3) == reference(range(6))
    run_batch(rescaled, 5, 3)  # Spark replays the last batch after the restart: rolled back, redone
    run_batch(rescaled, 6, 3)
    assert state_of(rescaled, 3) == reference(range(7))


def test_a_rescale_over_deleted_history_without_a_usable_snapshot_switches_nothing(tmp_path, changelog):
    backend = backend_of(tmp_path, changelog, num_partitions=2)
    for batch in range(6):
        run_batch(backend, batch, 2)
    idle.IDLE.release_all()
    delete_history(changelog)
    for offset in snapshot_offsets(changelog, "counts", 1):
        damage_snapshot(*changelog, "app-counts-changelog", 1, offset)
    with pytest.raises(ChangelogTruncatedError, match="app-counts-changelog-1.*no usable snapshot"):
        rescale(changelog[0], "app", 3, storage_options=changelog[1])
    assert backend_of(tmp_path, changelog).partitioning_log().current().num_partitions == 2

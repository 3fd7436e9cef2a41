"""kstate.spark's micro-batches with snapshots on (``minDeltasForSnapshot`` in a store's logging
config), without Spark: each commit counts towards the next snapshot with its batch, a snapshot
names the batch of the commit it holds, and a partition that moves to an executor without its
state (another state dir) loads the newest snapshot and replays only the changelog after it,
its state exactly the counts of the batches run; a replayed batch still rolls back. On a shared
directory and on moto's S3."""

import logging

import pytest

from kstate import Stores
from kstate.log.partition import Partition
from kstate.log.remote import RemoteChangelog, resolve
from kstate.log.snapshots import open_snapshots
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol import idle
from remote.locations import s3_remote

KEYS = [f"k{i:03d}" for i in range(50)]


@pytest.fixture(params=["dir", "s3"])
def changelog(request, tmp_path):
    """``(changelog_dir, storage options)``: a directory, or a bucket on moto's S3."""
    if request.param == "dir":
        return str(tmp_path / "changelog"), None
    s3 = s3_remote(request.getfixturevalue("s3_endpoint"))
    return s3.url, s3.storage_options


def backend_on(changelog, state_dir, **logging):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    url, options = changelog
    return StateBackend(
        [counts.with_logging_enabled({"minDeltasForSnapshot": 2, **logging})],
        state_dir,
        url,
        "app",
        lock_timeout=5,
        changelog_storage_options=options,
    )


def count(backend, batch, attempt=0):
    """One task of ``batch``: every key counts one more."""

    def fn(stores):
        store = stores["counts"]
        store.put_all(zip(KEYS, [(v or 0) + 1 for v in store.get_many(KEYS)]))
        yield {"restored": store.restored_records}

    return list(backend.run(fn, TaskInfo(0, batch, attempt)))[0]


def test_a_moved_partition_starts_from_the_newest_snapshot(changelog, tmp_path, caplog):
    a = backend_on(changelog, tmp_path / "a")
    for batch in range(6):
        count(a, batch)
    # Executor a is done with the partition: its parked store closes, once its snapshot is out.
    idle.IDLE.release_all()
    snapshots = open_snapshots(changelog[0], "app-counts-changelog", 0, changelog[1])
    taken = snapshots.offsets()
    assert taken, "every second commit starts a snapshot"
    newest = snapshots.read(taken[-1])
    assert newest.batch_id is not None and 1 <= newest.batch_id <= 5
    assert (newest.offset + 1) % len(KEYS) == 0 and (newest.offset + 1) // len(KEYS) == newest.batch_id + 1, (
        "the batch named is the one whose commit the files hold"
    )

    caplog.set_level(logging.INFO, logger="kstate.store")
    b = backend_on(changelog, tmp_path / "b")
    moved = count(b, 6)
    assert moved["restored"] == 6 * len(KEYS) - 1 - newest.offset, "only the changelog after the snapshot"
    assert f"loaded the snapshot at offset {newest.offset} (batch {newest.batch_id})" in caplog.text
    count(b, 6)  # Spark replays batch 6: rolled back, then redone
    state = b.partition_state(TaskInfo(0, 10_000))
    stores = state.open()
    with stores["counts"].all() as it:
        assert dict(it) == {key: 7 for key in KEYS}, "batches 0-6, each once"
    state.abort()


def test_history_goes_below_snapshots_but_never_below_what_a_replay_rolls_back(changelog, tmp_path):
    a = backend_on(changelog, tmp_path / "a", minDeltasForSnapshot=1, minBatchesToRetain=1)
    for batch in range(10):
        count(a, batch)
    idle.IDLE.release_all()
    url, options = changelog
    if options is None:
        with Partition.open(f"{url}/app-counts-changelog-0") as log:
            start = log.log_start_offset
    else:
        start = resolve(RemoteChangelog(url, "app-counts-changelog", 0, options).list())[0].first
    # Batches 8 and 9 can be rolled back (undo_retained_batches=2): the state of batch 7, at
    # offset 8 * 50 - 1, and everything after stays, even when the snapshots kept are newer.
    kept = open_snapshots(url, "app-counts-changelog", 0, options).offsets()
    assert len(kept) == 2, "the newest two (snapshots run one at a time in the background)"
    assert 0 < start <= min(kept[0] + 1, 8 * len(KEYS) - 1)

    # Another executor starts from the newest snapshot and rolls back two batches to replay 8.
    b = backend_on(changelog, tmp_path / "b", minDeltasForSnapshot=1, minBatchesToRetain=1)
    count(b, 8)
    state = b.partition_state(TaskInfo(0, 10_000))
    stores = state.open()
    with stores["counts"].all() as it:
        assert dict(it) == {key: 9 for key in KEYS}, "batches 0-8, each once"
    state.abort()

"""kstate.spark's exactly-once protocol with its changelogs, batch log and undo files on an S3
API server (moto on loopback, through s3fs), without Spark: no file locks there, so exclusive
creates decide; two "executors" are two state dirs sharing the bucket."""

import pytest

from kstate import Stores
from kstate.errors import BatchConflictError, ProcessorStateError
from kstate.log.object_store import ObjectStore
from kstate.log.remote import COMPACT_AFTER_COMMITS, RemoteChangelog
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol.batch_log import TRIM_SLACK
from kstate.store_lifecycle import native_store


def backend_on(s3, state_dir):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend(
        [counts], state_dir, s3.url, "app", lock_timeout=5, changelog_storage_options=s3.storage_options
    )


def count(backend, batch, keys, attempt=0):
    def fn(stores):
        store = stores["counts"]
        for key in keys:
            store.put(key, (store.get(key) or 0) + 1)
        yield {k: store.get(k) for k in sorted(set(keys))}

    return list(backend.run(fn, TaskInfo(0, batch, attempt)))[0]


def snapshot(backend):
    state = backend.partition_state(TaskInfo(0, 10_000))
    stores = state.open(read_only=True)
    with stores["counts"].all() as it:
        out = dict(it)
    state.abort()
    return out


def test_batches_replays_and_a_moved_partition_over_s3(s3, tmp_path):
    a, b = backend_on(s3, tmp_path / "a"), backend_on(s3, tmp_path / "b")
    assert count(a, 0, ["x", "y"]) == {"x": 1, "y": 1}
    assert count(b, 1, ["x"]) == {"x": 2}, "executor b restores from the bucket"
    assert count(a, 1, ["y"]) == {"y": 2}, "a replay of batch 1 on a rolls it back first"
    assert count(a, 2, ["x"]) == {"x": 2}
    assert snapshot(b) == {"x": 2, "y": 2}
    objects = RemoteChangelog(s3.url, "app-counts-changelog", 0, s3.storage_options).list()
    assert objects, "each commit is an object in the bucket"


def test_of_two_attempts_of_a_batch_one_publishes(s3, tmp_path):
    a, b = backend_on(s3, tmp_path / "a"), backend_on(s3, tmp_path / "b")
    count(a, 0, ["x"])
    first = a.partition_state(TaskInfo(0, 1, 1))
    second = b.partition_state(TaskInfo(0, 1, 2))
    stores_a, stores_b = first.open(), second.open()
    stores_a["counts"].put("x", 10)
    stores_b["counts"].put("x", 20)
    first.commit()
    with pytest.raises(BatchConflictError):
        second.commit()
    assert snapshot(b) == {"x": 10}


def test_objects_a_crashed_attempt_published_are_voided_then_deleted(s3, tmp_path):
    a = backend_on(s3, tmp_path / "a")
    count(a, 0, ["x"])
    crashed = a.partition_state(TaskInfo(0, 1, 1))
    stores = crashed.open()
    stores["counts"].put("x", 99)
    native_store(stores["counts"]).publish(0)  # its changelog object exists, no batch entry
    crashed.abort()
    remote = RemoteChangelog(s3.url, "app-counts-changelog", 0, s3.storage_options)
    assert len(remote.list()) == 2
    b = backend_on(s3, tmp_path / "b")
    assert count(b, 1, ["x"]) == {"x": 2}, "the unrecorded 99 never counted"
    assert snapshot(a) == {"x": 2}


def test_a_long_run_keeps_a_bounded_batch_log_and_undo_objects_in_the_bucket(s3, tmp_path):
    a = backend_on(s3, tmp_path / "a")
    expected: dict[str, int] = {}
    for batch in range(2 * TRIM_SLACK + 5):
        keys = ["x", f"k{batch % 5}"]
        count(a, batch, keys)
        for key in keys:
            expected[key] = expected.get(key, 0) + 1
    bucket = ObjectStore(s3.url, s3.storage_options)
    entries = bucket.list(a.layout.batch_log_name(0))
    assert len(entries) <= a.undo_retained_batches + 1 + TRIM_SLACK, sorted(entries)
    assert len(bucket.list(f"{a.layout.undo_name(0)}/counts")) == a.undo_retained_batches
    # Another executor restores and rolls back within what is kept; beyond it, nothing changes.
    b = backend_on(s3, tmp_path / "b")
    last = 2 * TRIM_SLACK + 4
    assert count(b, last, ["x"]) == {"x": expected["x"]}
    with pytest.raises(ProcessorStateError):
        count(b, last - 10, ["x"])
    assert snapshot(a) == {**expected, f"k{last % 5}": expected[f"k{last % 5}"] - 1}


def test_settings_changed_across_restarts_keep_the_state_exact(s3, tmp_path):
    """A query restarted with another undo retention and another compaction ratio, each time on
    a fresh executor, reads its state from the bucket and keeps it exact."""

    def backend(state_dir, undo_retained_batches, dirty_ratio):
        counts = Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), "string", "int64"
        ).with_logging_enabled({"min.cleanable.dirty.ratio": dirty_ratio})
        return StateBackend(
            [counts],
            state_dir,
            s3.url,
            "app",
            lock_timeout=5,
            changelog_storage_options=s3.storage_options,
            undo_retained_batches=undo_retained_batches,
        )

    expected: dict[str, int] = {}
    batch = 0

    def run(on, batches):
        nonlocal batch
        for _ in range(batches):
            keys = ["x", f"k{batch % 11}"]
            count(on, batch, keys)
            for key in keys:
                expected[key] = expected.get(key, 0) + 1
            batch += 1

    run(backend(tmp_path / "a", 5, "0.5"), TRIM_SLACK + 10)
    b = backend(tmp_path / "b", 1, "0.01")  # keeps less; compacts at the first chance
    run(b, COMPACT_AFTER_COMMITS + 10)
    last = ["x", f"k{(batch - 1) % 11}"]
    assert count(b, batch - 1, last) == {k: expected[k] for k in last}, "a replay within one batch rolls back"
    with pytest.raises(ProcessorStateError):
        count(b, batch - 2, ["x"])
    compacted = RemoteChangelog(s3.url, "app-counts-changelog", 0, s3.storage_options).list()
    assert any(o.last is not None for o in compacted), "the lower ratio compacted the changelog"
    c = backend(tmp_path / "c", 5, "0.5")
    run(c, 3)
    assert snapshot(c) == expected
    assert snapshot(backend(tmp_path / "d", 2, "0.5")) == expected, "a fresh executor restores the same"

"""The exactly-once protocol of kstate.spark without Spark: task attempts are driven directly with
explicit ``TaskInfo``s, so every crash window and race is reached deterministically."""

import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from kstate import Stores
from kstate.errors import BatchConflictError, ProcessorStateError, StateLockTimeoutError
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol import batch_log as batch_log_module
from kstate.spark.protocol.batch_log import BatchLog
from kstate.spark.protocol.idle import RELEASE_REQUEST
from kstate.store_lifecycle import native_store


def counts_builder():
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")


@pytest.fixture
def backend(tmp_path):
    return StateBackend([counts_builder()], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5)


def count(backend, batch, keys, partition=0, attempt=0):
    """One task: adds 1 per key occurrence, returns the counts after the batch."""

    def fn(stores):
        store = stores["counts"]
        for key in keys:
            store.put(key, (store.get(key) or 0) + 1)
        yield {k: store.get(k) for k in sorted(set(keys))}

    return list(backend.run(fn, TaskInfo(partition, batch, attempt)))[0]


def snapshot(backend, partition=0):
    """The committed counts, read by opening the next batch and committing nothing."""
    state = backend.partition_state(TaskInfo(partition, 10_000))
    stores = state.open()
    with stores["counts"].all() as it:
        out = dict(it)
    state.abort()
    return out


def batch_log(backend, partition=0):
    log = BatchLog(backend.layout.batch_log_dir(partition))
    try:
        return log.history(100)
    finally:
        log.close()


def test_batches_accumulate_and_a_replay_rolls_back_the_last_one(backend):
    assert count(backend, 0, ["a", "b", "a"]) == {"a": 2, "b": 1}
    assert count(backend, 1, ["a", "c"]) == {"a": 3, "c": 1}
    # Spark replays batch 1 (restart, or a retry after an attempt died once it had published).
    assert count(backend, 1, ["a", "c"]) == {"a": 3, "c": 1}
    assert snapshot(backend) == {"a": 3, "b": 1, "c": 1}
    head, restated, *_ = batch_log(backend)
    assert (head.batch_id, restated.batch_id, restated.restates) == (1, 0, 1)


def test_a_replay_of_several_batches_rolls_each_back(backend):
    backend.undo_retained_batches = 5
    for batch in range(4):
        count(backend, batch, ["a", f"k{batch}"])
    assert count(backend, 1, ["a"]) == {"a": 2}
    assert snapshot(backend) == {"a": 2, "k0": 1}


def test_undo_beyond_retention_is_a_typed_error(backend):
    for batch in range(4):
        count(backend, batch, ["a"])
    with pytest.raises(ProcessorStateError, match="undo file"):
        count(backend, 0, ["a"])


def test_a_long_run_keeps_a_few_batch_log_segments_and_undo_files(backend, monkeypatch):
    monkeypatch.setattr(batch_log_module, "SEGMENT_BYTES", 600)  # a few entries per segment
    expected: dict[str, int] = {}
    for batch in range(60):
        keys = ["a", f"k{batch % 7}"]
        count(backend, batch, keys)
        for key in keys:
            expected[key] = expected.get(key, 0) + 1
    segments = list(backend.layout.batch_log_dir(0).glob("*.log"))
    assert len(segments) <= 4, f"entries below the undo horizon are deleted, found {len(segments)} segments"
    assert len(list(backend.layout.undo_dir(0).glob("*/*"))) == backend.undo_retained_batches
    assert snapshot(backend) == expected
    # What the log still keeps is enough to roll back as far as undo files reach, and no further.
    assert count(backend, 59, ["a", "k3"]) == {"a": 60, "k3": 9}
    assert count(backend, 58, ["a", "k2"]) == {"a": 59, "k2": 9}
    with pytest.raises(ProcessorStateError):
        count(backend, 40, ["a"])
    assert snapshot(backend) == {**expected, "a": 59, "k3": 8}


def test_a_failed_attempt_leaves_the_previous_batch(backend):
    count(backend, 0, ["a"])

    def failing(stores):
        stores["counts"].put("a", 100)
        yield None
        raise RuntimeError("task dies")

    with pytest.raises(RuntimeError):
        list(backend.run(failing, TaskInfo(0, 1, attempt=1)))
    assert count(backend, 1, ["a"], attempt=2) == {"a": 2}


def test_a_lost_state_dir_restores_from_the_changelog(backend, tmp_path):
    count(backend, 0, ["a", "b"])
    count(backend, 1, ["a"])
    shutil.rmtree(tmp_path / "state")
    assert count(backend, 2, ["a"]) == {"a": 3}
    # The replay of a batch whose state moved executors rolls back from the shared undo files.
    shutil.rmtree(tmp_path / "state")
    assert count(backend, 2, ["b"]) == {"b": 2}
    assert snapshot(backend) == {"a": 2, "b": 2}


def test_a_partition_moves_between_executors_and_back_while_stores_are_parked(backend, tmp_path):
    """Executor A's worker keeps the partition's stores parked (open) after its task; executor B
    (its own state dir, the same changelogs) takes the next batch, then A gets it back."""
    other = StateBackend([counts_builder()], tmp_path / "state-b", tmp_path / "changelog", "app", lock_timeout=5)
    count(backend, 0, ["a"])
    assert count(other, 1, ["a"]) == {"a": 2}, "B restores from the changelog A's parked store left open"
    assert count(backend, 2, ["a", "b"]) == {"a": 3, "b": 1}, "A's parked store is stale: reopened and caught up"
    assert count(backend, 3, ["a"]) == {"a": 4}, "A's own parked store, reused"


def test_a_stale_state_dir_catches_up(backend, tmp_path):
    count(backend, 0, ["a"])
    shutil.copytree(tmp_path / "state", tmp_path / "old")
    count(backend, 1, ["a"])
    count(backend, 2, ["b"])
    shutil.rmtree(tmp_path / "state")
    shutil.move(tmp_path / "old", tmp_path / "state")
    assert count(backend, 3, ["a", "b"]) == {"a": 3, "b": 2}


def test_changelog_records_published_without_a_batch_entry_are_retracted(backend):
    count(backend, 0, ["a"])
    # A batch that crashed after publishing its changelog, before its batch log entry.
    state = backend.partition_state(TaskInfo(0, 1))
    stores = state.open()
    stores["counts"].put("a", 50)
    stores["counts"].put("z", 50)
    native_store(stores["counts"]).publish(0)
    state.abort()
    assert count(backend, 1, ["a"]) == {"a": 2}
    assert snapshot(backend) == {"a": 2}


CRASH_AFTER_ENTRY = """
import os, signal, sys
from kstate import Stores
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol import exactly_once
backend = StateBackend([Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")],
                       sys.argv[1], sys.argv[2], "app")
original = exactly_once.BatchLog.append
def append_then_die(self, entry):
    original(self, entry)
    os.kill(os.getpid(), signal.SIGKILL)
exactly_once.BatchLog.append = append_then_die
def fn(stores):
    stores["counts"].put("a", 41)
    yield
list(backend.run(fn, TaskInfo(0, 1)))
"""


def test_a_batch_killed_after_its_entry_is_published_and_restored(backend, tmp_path):
    count(backend, 0, ["a"])
    done = subprocess.run(
        [sys.executable, "-c", CRASH_AFTER_ENTRY, str(tmp_path / "state"), str(tmp_path / "changelog")], check=False
    )
    assert done.returncode == -signal.SIGKILL
    assert snapshot(backend) == {"a": 41}, "published: RocksDB catches up from the changelog"
    assert count(backend, 1, ["a"]) == {"a": 2}, "a retry of the batch rolls it back and redoes it"


def test_of_two_concurrent_attempts_the_first_to_publish_wins(backend, wait_until):
    backend.lock_timeout = 300  # the second attempt waits for the locks through the first's commit
    count(backend, 0, ["a"])
    first = backend.partition_state(TaskInfo(0, 1, attempt=1))
    stores = first.open()
    stores["counts"].put("a", 2)
    outcome = {}

    def second_attempt():
        try:
            outcome["counts"] = count(backend, 1, ["a"], attempt=2)
        except BatchConflictError as error:
            outcome["error"] = error

    thread = threading.Thread(target=second_attempt)
    thread.start()
    # Having noted the head, an attempt that finds the task directory locked asks its holder to release it.
    release_request = backend.layout.task_dir(0) / RELEASE_REQUEST
    wait_until(release_request.exists, "the second attempt waiting for the task directory's lock")
    first.commit()
    thread.join()
    assert "published batch 1" in str(outcome["error"])
    assert snapshot(backend) == {"a": 2}
    assert [e.batch_id for e in batch_log(backend)] == [1, 0]


def test_a_held_task_dir_lock_times_out(backend):
    backend.lock_timeout = 0.2
    holder = backend.partition_state(TaskInfo(0, 0))
    holder.open()
    try:
        with pytest.raises(StateLockTimeoutError, match="task directory of partition 0"):
            count(backend, 0, ["a"])
    finally:
        holder.abort()
    assert count(backend, 0, ["a"]) == {"a": 1}


def test_partitions_are_independent(backend):
    count(backend, 0, ["a"], partition=0)
    count(backend, 0, ["a"], partition=1)
    count(backend, 1, ["a"], partition=1)
    assert snapshot(backend, 0) == {"a": 1}
    assert snapshot(backend, 1) == {"a": 2}
    assert sorted(os.listdir(backend.layout.state_dir / "app")) == ["0_0", "0_1"]


COUNT_IN_ANOTHER_PROCESS = """
import sys
from kstate import Stores
from kstate.spark import StateBackend, TaskInfo
backend = StateBackend([Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")],
                       sys.argv[1], sys.argv[2], "app", lock_timeout=10)
def fn(stores):
    store = stores["counts"]
    store.put("a", store.get("a") + 1)
    yield
list(backend.run(fn, TaskInfo(0, int(sys.argv[3]))))
"""


def test_a_worker_reuses_its_open_stores_and_gives_them_up_when_another_asks(backend, tmp_path):
    count(backend, 0, ["a"])
    first = backend.partition_state(TaskInfo(0, 1))
    stores = first.open()
    store = stores["counts"]
    stores["counts"].put("a", 2)
    first.commit()
    again = backend.partition_state(TaskInfo(0, 2))
    assert again.open()["counts"] is store, "the next task of this process takes the parked store"
    again.commit()
    # Another worker process runs batch 3 of the partition: this process releases the parked
    # stores when asked, and reopens (restores) once the other has published.
    state, changelog = str(tmp_path / "state"), str(tmp_path / "changelog")
    subprocess.run([sys.executable, "-c", COUNT_IN_ANOTHER_PROCESS, state, changelog, "3"], check=True, timeout=60)
    assert count(backend, 4, ["a"]) == {"a": 4}


def test_a_missing_java_is_explained_in_one_sentence(monkeypatch):
    from kstate.errors import JavaNotFoundError
    from kstate.spark import local_session

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaNotFoundError, match="install Java 17 or 21"):
        local_session("no-java")


def upgrading_backend(tmp_path):
    """The backend of ``backend``'s directories with timestamped ``counts`` and an in-place upgrade."""
    supplier = Stores.persistent_timestamped_key_value_store("counts")
    counts = Stores.timestamped_key_value_store_builder(supplier, "string", "int64")
    upgrade = {"upgrade.from": "2.2", "upgrade.mode": "in_place"}
    return StateBackend([counts], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5, upgrade=upgrade)


def test_an_in_place_upgrade_switches_once_every_partition_is_ready(tmp_path):
    """Plain stores serve (in upgrade mode) while timestamped standbys are built beside them;
    the partitions' SubscriptionInfo bytes say when they are ready, the driver's AssignmentInfo
    says switch, and the next task replaces each store with its standby."""
    from kstate.rebalance import AssignmentInfo, SubscriptionInfo
    from kstate.spark.protocol.upgrade import wait_for_build
    from kstate.upgrade import inspect_store

    old = StateBackend([counts_builder()], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5)
    new = upgrading_backend(tmp_path)
    upgrade_dir = tmp_path / "changelog" / "app-kstate-upgrade"
    partitions = (0, 1)

    def batch(backend, number):
        for p in partitions:
            count(backend, number, ["a", "b", "a"], partition=p)
            wait_for_build(backend.layout.task_dir(p))
        return backend.upgrade.coordinate(len(partitions)) if backend.upgrade else None

    batch(old, 0)
    assert batch(new, 1).commonly_supported_version == 3, "standbys were still being built"
    subscription = SubscriptionInfo.decode((upgrade_dir / "subscription-0").read_bytes())
    assert (subscription.version, subscription.latest_supported_version) == (3, 3)
    for p in partitions:
        assert inspect_store(new.layout.task_dir(p) / "rocksdb" / "counts").format in ("plain", "upgrading")
        assert (new.layout.task_dir(p) / "rocksdb" / ".counts.standby").exists(), "built beside, 2x disk"
    assert batch(new, 2).commonly_supported_version == 4, "every partition is ready"
    assert AssignmentInfo.decode((upgrade_dir / "assignment").read_bytes()).commonly_supported_version == 4
    batch(new, 3)
    for p in partitions:
        rocksdb = new.layout.task_dir(p) / "rocksdb"
        assert inspect_store(rocksdb / "counts").format == "timestamped"
        assert not (rocksdb / ".counts.standby").exists() and not (rocksdb / ".counts.old").exists()
        assert snapshot(new, p) == {"a": 8, "b": 4}, "four batches counted once each"


IN_PLACE_WRITER = """
import sys, time
from kstate import Stores
from kstate.spark import StateBackend, TaskInfo
from kstate.store_lifecycle import RestoreProgress


def killed_here(self, done, total):
    print("restored", done, flush=True)
    time.sleep(60)  # the test kills the process now: its standby is built part of the way


RestoreProgress.__call__ = killed_here  # the standby build reports each segment it restored
root = sys.argv[1]
supplier = Stores.persistent_timestamped_key_value_store("counts")
counts = Stores.timestamped_key_value_store_builder(supplier, "string", "int64")
upgrade = {"upgrade.from": "2.2", "upgrade.mode": "in_place"}
backend = StateBackend([counts], root + "/state", root + "/changelog", "app", upgrade=upgrade)


def add_one(stores):
    stores["counts"].put("k0000", stores["counts"].get("k0000") + 1)
    yield None


list(backend.run(add_one, TaskInfo(0, 10)))
time.sleep(60)  # the standby builds in a daemon thread, up to its first report
"""


def test_an_in_place_upgrade_killed_while_building_its_standby_resumes(tmp_path, kill_writer):
    from kstate.spark.protocol.upgrade import wait_for_build
    from kstate.upgrade import inspect_store

    small = counts_builder().with_logging_enabled({"segment.bytes": 4096})
    old = StateBackend([small], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5)
    keys = [f"k{i:04d}" for i in range(2000)]
    for batch in range(10):  # ten commits, so ten small changelog segments
        count(old, batch, keys[batch * 200 : (batch + 1) * 200])
    kill_writer(IN_PLACE_WRITER, [tmp_path], wait_for="restored")
    rocksdb = tmp_path / "state" / "app" / "0_0" / "rocksdb"
    assert (rocksdb / ".counts.standby").exists(), "killed with a partial standby"
    new = upgrading_backend(tmp_path)
    versions = []
    for batch in (11, 12, 13):
        count(new, batch, ["k0001"])
        wait_for_build(new.layout.task_dir(0))
        versions.append(new.upgrade.coordinate(1).commonly_supported_version)
    assert versions[0] == 3, "the partial standby was not ready; its build resumed"
    assert 4 in versions
    count(new, 14, ["k0001"])
    assert inspect_store(rocksdb / "counts").format == "timestamped"
    assert snapshot(new) == {**{k: 1 for k in keys}, "k0000": 2, "k0001": 5}


def test_parked_stores_are_reused_only_while_their_settings_stay(tmp_path):
    """A query restarted in the same Spark application (the same Python workers) with another
    changelog config or serde gets stores opened with it, not the ones parked by the last run."""

    def backend(logging=None, value_serde="int64"):
        builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", value_serde)
        if logging is not None:
            builder = builder.with_logging_enabled(logging)
        return StateBackend([builder], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5)

    opened = []

    def fn(stores):
        opened.append(stores["counts"])
        stores["counts"].put("a", len(opened))
        yield None

    runs = [backend(), backend(), backend({"segment.bytes": 64}), backend({"segment.bytes": 64}), backend(None, "long")]
    for batch, run in enumerate(runs):
        list(run.run(fn, TaskInfo(0, batch)))
    assert opened[1] is opened[0], "the same settings: the parked stores"
    assert opened[2] is not opened[1], "another segment.bytes: reopened"
    assert opened[3] is opened[2]
    assert opened[4] is not opened[3], "another value serde (and the default segment.bytes again): reopened"
    assert snapshot(backend()) == {"a": 5}

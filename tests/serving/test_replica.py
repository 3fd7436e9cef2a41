"""``StateReplica`` on changelogs in a directory: every read equals the plain-Python state of the
batch it names, while the application writes, replays, compacts, trims and rescales under it.
The application writes without Spark, through the exactly-once protocol (``application.py``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

from kstate.errors import InvalidArgumentError, InvalidStateStoreError, StateTypeError, StoreClosedError
from kstate.log.files import read_log
from kstate.serving import Answer, StateReplica
from kstate.spark import TaskInfo
from kstate.spark.protocol import batch_log as batch_log_module

from .application import Application, count_everything, rows_of
from .reads import check_all, check_everything, check_get, check_get_many

REBUILT = "rebuilding it from scratch"


def rebuilds(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kstate.serving" and REBUILT in r.getMessage()]


def test_every_read_answers_the_state_of_the_batch_it_names(app, tmp_path):
    for batch in range(4):
        app.run(batch)
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "replica") as replica:
        assert replica.num_partitions == 3 and replica.generation == 0
        assert replica.stores == {
            "counts": "key_value",
            "per_minute": "window",
            "visits": "session",
            "latest": "key_value",
        }
        assert replica.batches == {0: 3, 1: 3, 2: 3} and replica.batch_id == 3
        check_everything(app, replica)
        answer = check_get(app, replica, "user-3")
        assert isinstance(answer, Answer) and answer.batch_id == 3
        for batch in range(4, 7):
            app.run(batch)
        assert replica.get("counts", "user-3").batch_id == 3, "nothing moves without a refresh"
        assert replica.refresh() == 6
        check_everything(app, replica)
        assert check_all(app, replica).batch_id == 6


def test_a_restarted_replica_catches_up_without_rebuilding(app, tmp_path, caplog):
    caplog.set_level(logging.INFO, "kstate.serving")
    local = tmp_path / "replica"
    for batch in range(3):
        app.run(batch)
    with StateReplica(tmp_path / "changelog", "app", local_dir=local) as replica:
        check_everything(app, replica)
    copies = sorted(p.relative_to(local) for p in local.glob("app/heads/partition-*/copy-*"))
    assert len(copies) == 3
    for batch in range(3, 6):
        app.run(batch)
    with StateReplica(tmp_path / "changelog", "app", local_dir=local) as replica:
        assert replica.batch_id == 5
        check_everything(app, replica)
    assert sorted(p.relative_to(local) for p in local.glob("app/heads/partition-*/copy-*")) == copies
    assert not rebuilds(caplog)


def test_a_replay_is_never_mixed_with_the_attempt_it_rolls_back(app, tmp_path):
    """A first attempt of batch 3 (other rows) is published, then Spark replays the batch: the
    replay rolls it back (an entry restating batch 2) and publishes its own rows. An unaligned
    replica shows the attempt as batch 3 until the rollback is published, then batch 2 again,
    then the replay; an aligned one never shows it (no partition had published batch 4)."""
    for batch in range(3):
        app.run(batch)
    unaligned = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "unaligned")
    aligned = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "aligned", aligned=True)
    try:
        assert unaligned.batch_id == 2 and aligned.batch_id == 1
        app.run(3, garbage=True, attempt=1)
        unaligned.refresh()
        aligned.refresh()
        first_attempt = app.state_after(2)
        first_attempt.apply(rows_of(3, garbage=True))
        answer = unaligned.all("counts")
        assert answer.batch_id == 3
        assert {kv.key: kv.value for kv in answer.value} == first_attempt.counts
        assert aligned.all("counts").batch_id == 2
        check_all(app, aligned)

        # The replay of partition 0: its rollback is published first, then its batch.
        backend = app.backend()
        state = backend.partition_state(TaskInfo(0, 3, attempt=2))
        stores = state.open()
        unaligned.refresh()
        rolled_back = unaligned.get_many("counts", [f"user-{i}" for i in range(40)])
        assert rolled_back.partitions[0] == 2, "partition 0 is at batch 2 again"
        check_get_many(app, unaligned, [k for k in (f"user-{i}" for i in range(40)) if app.partition_of(k) == 0])
        table = rows_of(3)
        mine = table.filter(pa.array([app.partition_of(k) == 0 for k in table.column("key").to_pylist()]))
        list(count_everything(mine.to_batches(), stores))
        state.commit()
        app.run(3, attempt=3, only={1, 2})
        for replica in (unaligned, aligned):
            replica.refresh()
            check_everything(app, replica)
        assert unaligned.batch_id == 3 and aligned.batch_id == 2
        app.run(4)
        aligned.refresh()
        assert aligned.batch_id == 3
        check_everything(app, aligned)
    finally:
        unaligned.close()
        aligned.close()


def test_an_aligned_replica_holds_every_partition_at_one_batch(app, tmp_path):
    for batch in range(3):
        app.run(batch)
    app.run(3, only={0})  # partition 0 published batch 3; 1 and 2 are still running it
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "a", aligned=True) as aligned:
        assert aligned.batches == {0: 2, 1: 2, 2: 2}
        check_everything(app, aligned)
        with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "u") as unaligned:
            assert unaligned.batches == {0: 3, 1: 2, 2: 2}
            assert unaligned.batch_id is None, "partition 0 is at batch 3, the others are not known to be"
            check_everything(app, unaligned)
            app.run(3, only={1, 2})
            app.run(4, only={2})
            unaligned.refresh()
            aligned.refresh()
            assert unaligned.batches == {0: 3, 1: 3, 2: 4}
            assert aligned.batches == {0: 3, 1: 3, 2: 3}
            check_everything(app, unaligned)
            check_everything(app, aligned)


@pytest.mark.parametrize("aligned", [False, True], ids=["unaligned", "aligned"])
def test_reads_while_the_replica_follows_a_writing_query(app, tmp_path, aligned):
    """Readers in other threads read all the time while the replica follows in the background
    and the application writes batches, some of them replayed after a first attempt with other
    rows; every read names a batch and equals its state (an aligned replica never shows a first
    attempt: a replay comes before any partition publishes the next batch)."""
    app.run(0)
    failures: list[BaseException] = []
    reads = [0]
    stop = threading.Event()
    replayed = {3, 6}

    def first_attempt(batch):
        state = app.state_after(batch - 1)
        state.apply(rows_of(batch, garbage=True))
        return state

    def read_all_the_time(replica):
        keys = [f"user-{i}" for i in range(12)]
        while not stop.is_set():
            try:
                answer = replica.get_many("counts", keys)
                for key, value in zip(keys, answer.value):
                    batch = answer.partitions[app.partition_of(key)]
                    states = [app.state_after(batch)]
                    if batch in replayed and not aligned:
                        states.append(first_attempt(batch))  # shown until its rollback is published
                    assert value in [state.counts.get(key) for state in states], (key, batch)
                if aligned:
                    assert answer.batch_id is not None
                    check_all(app, replica)
                reads[0] += 1
            except BaseException as error:  # noqa: BLE001 - handed to the test's thread
                failures.append(error)
                return

    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r", aligned=aligned) as replica:
        replica.follow(interval=0.01)
        readers = [threading.Thread(target=read_all_the_time, args=(replica,)) for _ in range(2)]
        for reader in readers:
            reader.start()
        try:
            for batch in range(1, 9):
                if batch in replayed:
                    app.run(batch, garbage=True, attempt=1)
                    time.sleep(0.05)
                app.run(batch)
                time.sleep(0.05)
            replica.get("counts", "user-1", at_least_batch=7 if aligned else 8, timeout=60)
        finally:
            stop.set()
            for reader in readers:
                reader.join()
        assert not failures, failures[0]
        assert reads[0] > 5
        assert replica.following
        replica.stop_following()
        replica.refresh()
        check_everything(app, replica)


def test_at_least_batch_waits_for_the_batch_or_times_out(app, tmp_path):
    app.run(0)
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r") as replica:
        with pytest.raises(InvalidStateStoreError, match="did not reach batch 1 within 0.2 s"):
            replica.get("counts", "user-1", at_least_batch=1, timeout=0.2)
        writer = threading.Timer(0.3, app.run, args=(1,))
        writer.start()
        answer = replica.get("counts", "user-1", at_least_batch=1, timeout=60)  # refreshes as it waits
        writer.join()
        assert answer.batch_id == 1
        check_get(app, replica, "user-1", at_least_batch=1)
        replica.follow(interval=0.01)
        writer = threading.Timer(0.3, app.run, args=(2,))
        writer.start()
        answer = replica.get_many("counts", ["user-1", "user-2"], at_least_batch=2, timeout=60)
        writer.join()
        assert min(answer.partitions.values()) >= 2
        check_get_many(app, replica, ["user-1", "user-2"])


def test_compaction_under_a_replica_rebuilds_it(tmp_path, caplog):
    """Changelogs of small segments, compacted after each commit: a replica that missed batches
    stands on offsets whose records are gone (tombstones may be among them), so it is rebuilt
    from scratch; one that kept up only catches up."""
    caplog.set_level(logging.INFO, "kstate.serving")
    app = Application(
        tmp_path / "state",
        tmp_path / "changelog",
        **{"segment.bytes": "200", "min.cleanable.dirty.ratio": "0.01"},
    )
    for batch in range(3):
        app.run(batch)
    kept_up = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "kept-up")
    behind = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "behind")
    try:
        for batch in range(3, 12):
            app.run(batch)
            kept_up.refresh()
            check_get_many(app, kept_up, [f"user-{i}" for i in range(32)])
        assert not rebuilds(caplog)
        offsets = [
            o for b in read_log(tmp_path / "changelog" / "app-counts-changelog-0") for o in b["offset"].to_pylist()
        ]
        assert offsets[-1] + 1 > len(offsets), "compaction removed records"
        behind.refresh()
        assert rebuilds(caplog), "the compacted changelogs rebuilt the replica that was behind"
        for replica in (kept_up, behind):
            assert replica.batch_id == 11
            check_everything(app, replica)
        assert [p.name for p in (tmp_path / "behind" / "app" / "heads" / "partition-0").iterdir()] == ["copy-1"]
    finally:
        kept_up.close()
        behind.close()
    # The last compaction ran after batch 11: what it kept is the state at batch 11, not at 10,
    # so an aligned replica restores batch 11 and takes it back to 10 with its undo.
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "aligned", aligned=True) as aligned:
        assert aligned.batch_id == 10
        check_everything(app, aligned)


def test_a_trimmed_batch_log_entry_rebuilds_the_copy_on_it(app, tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, "kstate.serving")
    monkeypatch.setattr(batch_log_module, "SEGMENT_BYTES", 600)  # a few entries per segment
    app.run(0)
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r") as replica:
        for batch in range(1, 12):
            app.run(batch)
        assert not (tmp_path / "changelog" / "app-kstate-batches-0" / f"{0:020d}.log").exists()
        replica.refresh()
        assert any("no longer holds the entry" in message for message in rebuilds(caplog))
        check_everything(app, replica)


def test_a_rescaled_application_is_followed_to_its_new_partitions(app, tmp_path, caplog):
    """After a rescale the new partitions hold the state of batch 2 (and the history before, as
    undo only): a replica switches to them at once; an aligned one, standing on batch 1, keeps the
    old partitions until it can stand on a batch of the new ones, after the next batch."""
    caplog.set_level(logging.INFO, "kstate.serving")
    for batch in range(3):
        app.run(batch)
    replica = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r")
    aligned = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "a", aligned=True)
    try:
        check_everything(app, replica)
        check_everything(app, aligned)
        app.rescale(5)
        before = app_with(app, partitions=3)
        check_all(before, replica)  # still the old partitions, until a refresh
        replica.refresh()
        aligned.refresh()
        assert (replica.num_partitions, replica.generation) == (5, 1)
        assert any("rescaled from 3 to 5 partitions" in r.getMessage() for r in caplog.records)
        check_everything(app, replica)
        assert (aligned.num_partitions, aligned.batch_id) == (3, 1)
        check_everything(before, aligned)
        with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "new", aligned=True) as starting:
            with pytest.raises(InvalidStateStoreError, match="no state to serve yet"):
                starting.get("counts", "user-1")
        app.run(3)
        replica.refresh()
        aligned.refresh()
        assert max(replica.batches.values()) == 3
        check_everything(app, replica)
        assert (aligned.num_partitions, aligned.batch_id) == (5, 2)
        check_everything(app, aligned)
        assert sorted(p.name for p in (tmp_path / "r").iterdir() if p.is_dir()) == ["app-gen1"]
    finally:
        replica.close()
        aligned.close()


def app_with(app: Application, partitions: int) -> Application:
    """``app`` as routed before a rescale."""
    before = Application(app.state_dir, app.changelog_dir, partitions)
    before.batches = list(app.batches)
    return before


def test_stores_a_query_adds_are_replicated(app, tmp_path):
    from kstate import Stores
    from kstate.spark.routing.partitioning import Partitioning

    app.run(0)
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r") as replica:
        extra = Stores.key_value_store_builder(Stores.persistent_key_value_store("extra"), "string", "string")
        backend = app.backend()
        backend.builders = [*backend.builders, extra]
        # What the driver's StateBackend.partition(df) records for a query with another store.
        backend.partitioning_log().establish(Partitioning(3, (("key", "string"),), stores=backend.store_descriptions()))

        def write_extra(batches, stores):
            for batch in batches:
                for key in batch.column("key").to_pylist():
                    stores["extra"].put(key, key.upper())
                yield batch.num_rows

        for p in range(app.partitions):
            keys = [k for k in (f"user-{i}" for i in range(6)) if app.partition_of(k) == p]
            rows = pa.table({"key": keys, "ts": pa.array([0] * len(keys), pa.int64())}).to_batches()
            list(backend.process(write_extra, rows, TaskInfo(p, 1)))
        replica.refresh()
        assert replica.stores["extra"] == "key_value"
        assert replica.get_many("extra", ["user-1", "user-5", "user-9"]).value == ["USER-1", "USER-5", None]
        assert replica.get("counts", "user-1").value == app.state_after(0).counts.get("user-1")


def test_bad_reads_are_typed_errors(app, tmp_path):
    app.run(0)
    with pytest.raises(InvalidArgumentError, match="no kstate state of application 'other'"):
        StateReplica(tmp_path / "changelog", "other", local_dir=tmp_path / "o")
    replica = StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r")
    with pytest.raises(InvalidArgumentError, match=r"no store named 'nope'; the application has \['counts'"):
        replica.get("nope", "user-1")
    with pytest.raises(InvalidArgumentError, match="is a window store, not a key_value store"):
        replica.get("per_minute", "user-1")
    with pytest.raises(InvalidArgumentError, match="is a key_value store, not a window store"):
        replica.fetch("counts", "user-1", 0)
    with pytest.raises(StateTypeError, match="key column 'key' is string"):
        replica.get("counts", 17)
    with pytest.raises(StateTypeError):
        replica.get_many("counts", pa.array([1.5, 2.5]))
    with pytest.raises(StateTypeError):
        replica.get_many("counts", ["user-1", 2])
    with pytest.raises(InvalidArgumentError, match="no state variable 'v'"):
        replica.state_variable("v", "user-1")
    replica.close()
    with pytest.raises(StoreClosedError):
        replica.get("counts", "user-1")
    with pytest.raises(StoreClosedError):
        replica.refresh()


def test_a_replica_loads_no_pyspark(app, tmp_path):
    app.run(0)
    script = textwrap.dedent(
        """
        import sys
        from kstate.serving import StateReplica

        with StateReplica(sys.argv[1], "app", local_dir=sys.argv[2]) as replica:
            assert replica.get("counts", "user-1").batch_id == 0
            replica.all("counts")
            replica.fetch_all("per_minute", 0, 2**62)
        print("pyspark" in sys.modules)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "changelog"), str(tmp_path / "r")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_two_replicas_cannot_share_a_local_dir(app, tmp_path):
    from kstate.errors import StateLockTimeoutError

    app.run(0)
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r"):
        with pytest.raises(StateLockTimeoutError):
            StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "r", lock_timeout=0.1)


@pytest.mark.parametrize("flush_past", [1, 1 << 40])
def test_a_catch_up_leaves_the_memtables_once_past_the_bound(app, tmp_path, monkeypatch, flush_past):
    """A copy's key-value stores flush a commit's memtable to a table file once it holds
    ``READ_MEMTABLE_BYTES`` (gets search a memtable first: a catch-up's keys there slowed them
    1.5x); below it they keep it. Reads are the same either way."""
    from kstate.memory import memory_usage
    from kstate.spark.serving import partition_copy

    monkeypatch.setattr(partition_copy, "READ_MEMTABLE_BYTES", flush_past)
    for batch in range(3):
        app.run(batch)
    with StateReplica(tmp_path / "changelog", "app", local_dir=tmp_path / "replica") as replica:
        replica.refresh()

        def in_tables() -> list[bool]:
            stores = memory_usage()["stores"]
            return [s["sst_files"] > 0 for s in stores if s["name"] == "counts" and "replica" in s["path"]]

        for _ in range(100):  # the flush runs on RocksDB's threads
            if all(in_tables()) or flush_past > 1:
                break
            time.sleep(0.05)
        assert len(in_tables()) == 3
        assert all(in_tables()) if flush_past == 1 else not any(in_tables())
        check_everything(app, replica)

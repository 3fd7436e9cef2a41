"""Stores whose changelog lives on an object store: each commit is one immutable Kafka segment
object created exclusively, a store restores from the remote log on any machine, the first of
two writers at an offset wins, and compaction keeps the state. Every test runs against moto's
S3 server (through s3fs) and a ``file://`` directory."""

from __future__ import annotations

import logging
import shutil
import threading
import time

import pytest
from kafka.record.memory_records import MemoryRecords

from kstate import Stores
from kstate.errors import CommitConflictError, RemoteStorageError
from kstate.log.object_store import ObjectStore
from kstate.log.remote import COMPACT_AFTER_COMMITS, KEEP_NEWEST_COMMITS, RemoteChangelog, object_name
from kstate.log.storage_process import StorageProcess
from kstate.store_lifecycle import CACHE_SEGMENT_BYTES

from .locations import Remote, builder

APP = "app"
TOPIC = f"{APP}-counts-changelog"


def task(root, partition=0):
    """A task directory under its own state dir (one state dir per simulated machine)."""
    return root / "state" / APP / f"0_{partition}"


def remote_log(remote, partition=0):
    return RemoteChangelog(remote.url, TOPIC, partition, remote.storage_options)


def names(remote, partition=0):
    return [o.name for o in remote_log(remote, partition).list()]


def contents(store):
    return list(store.all_with_timestamp())


PER_ROUND = 50
"""Records a round of ``commit_rounds`` publishes."""


def commit_rounds(store, rounds, start=0):
    """Round ``n`` rewrites 47 keys, adds ``r<n>`` (never rewritten) and ``x<n>``, and deletes
    ``x<n-1>`` (which stays deleted), then commits; returns the offsets."""
    offsets = []
    for n in range(start, start + rounds):
        store.put_all([(f"k{i:03d}", n * 1000 + i) for i in range(PER_ROUND - 3)])
        store.put(f"r{n}", n)
        store.put(f"x{n}", n)
        store.delete(f"x{n - 1}")
        offsets.append(store.commit())
    return offsets


def test_each_commit_is_one_kafka_segment_object_named_by_its_first_offset(remote, tmp_path):
    with builder(remote).build().init(task(tmp_path)) as store:
        store.put("a", 1, timestamp=10)
        store.put("b", 2, timestamp=11)
        assert store.commit() == 1
        store.delete("a")
        assert store.commit() == 2
        assert store.commit() == 2, "an empty commit publishes nothing"
    assert names(remote) == [object_name(0), object_name(2)]
    fs, root = remote_fs(remote)
    first = fs.cat_file(f"{root}/{TOPIC}-0/{object_name(0)}")
    records = read_with_kafka_python(first)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, 10, b"a", (1).to_bytes(8, "big")),
        (1, 11, b"b", (2).to_bytes(8, "big")),
    ]
    deleted = read_with_kafka_python(fs.cat_file(f"{root}/{TOPIC}-0/{object_name(2)}"))
    assert [(r.offset, r.key, r.value) for r in deleted] == [(2, b"a", None)]
    assert (tmp_path / "state" / "changelog-cache" / f"{TOPIC}-0").is_dir(), "the local cache"


def remote_fs(remote):
    import fsspec

    fs, root = fsspec.core.url_to_fs(remote.url, **remote.storage_options)
    return fs, root


def read_with_kafka_python(data):
    """Records of a segment file as kafka-python (an independent reader) sees them."""
    records, out = MemoryRecords(data), []
    while records.has_next():
        out.extend(records.next_batch())
    return out


def test_a_machine_without_local_state_restores_from_the_remote_log(remote, tmp_path):
    with builder(remote, **{"segment.bytes": 4096}).build().init(task(tmp_path / "a")) as store:
        commit_rounds(store, 6)
        expected = contents(store)
    # Another machine: no task directory, no cache.
    with builder(remote).build().init(task(tmp_path / "b")) as store:
        assert store.restored_records == 6 * PER_ROUND
        assert contents(store) == expected
    # The first machine lost its whole state dir, cache included.
    shutil.rmtree(tmp_path / "a" / "state")
    with builder(remote).build().init(task(tmp_path / "a")) as store:
        assert contents(store) == expected
        assert store.committed_offset() == 6 * PER_ROUND - 1
    # In memory: restored on every init.
    with builder(remote, "memory").build().init(task(tmp_path / "c")) as store:
        assert store.restored_records == 6 * PER_ROUND and contents(store) == expected


def test_a_wiped_cache_is_refilled_from_where_the_store_is(remote, tmp_path):
    with builder(remote).build().init(task(tmp_path)) as store:
        commit_rounds(store, 3)
        expected = contents(store)
    shutil.rmtree(tmp_path / "state" / "changelog-cache")
    with builder(remote).build().init(task(tmp_path)) as store:
        assert store.restored_records == 0, "the store holds everything"
        assert contents(store) == expected
        assert commit_rounds(store, 1, start=3) == [4 * PER_ROUND - 1], "offsets go on"
        expected = contents(store)
    shutil.rmtree(tmp_path / "state")
    with builder(remote).build().init(task(tmp_path)) as store:
        assert contents(store) == expected


def cache_segments(root):
    return sorted((root / "state" / "changelog-cache" / f"{TOPIC}-0").glob("*.log"))


def test_the_local_cache_keeps_only_what_the_store_has_not_committed(remote, tmp_path):
    small = builder(remote, **{"segment.bytes": 4096})
    with small.build().init(task(tmp_path)) as store:
        commit_rounds(store, 30)  # ~60 KB of records: 15 segments of 4 KiB if nothing went
        expected = contents(store)
        cached = cache_segments(tmp_path)
        assert len(cached) <= 2, "the active segment, and the one it rolled from at most"
        assert int(cached[0].stem) > 0
    # The store holds everything: reopening replays nothing and commits go on.
    with small.build().init(task(tmp_path)) as store:
        assert store.restored_records == 0 and contents(store) == expected
        assert commit_rounds(store, 1, start=30) == [31 * PER_ROUND - 1]
        expected = contents(store)
    # Lost task directory, cache kept: the store is behind the cache's start and refetches.
    shutil.rmtree(task(tmp_path))
    with small.build().init(task(tmp_path)) as store:
        assert store.restored_records == 31 * PER_ROUND
        assert contents(store) == expected
    with builder(remote).build().init(task(tmp_path / "other")) as store:
        assert contents(store) == expected


def test_the_first_of_two_writers_at_an_offset_wins(remote, tmp_path):
    with builder(remote).build().init(task(tmp_path / "a")) as a:
        commit_rounds(a, 1)
    a = builder(remote).build().init(task(tmp_path / "a"))
    b = builder(remote).build().init(task(tmp_path / "b"))
    try:
        before = list(b.all())
        a.put("winner", 1, timestamp=5)
        b.put("loser", 2, timestamp=5)
        assert a.commit() == PER_ROUND
        b_cache = b._reader.changelog_range()
        with pytest.raises(CommitConflictError, match=f"another writer published offset {PER_ROUND} first"):
            b.commit()
        assert b.committed_offset() == PER_ROUND - 1, "nothing of the losing commit is applied"
        assert b._reader.changelog_range() == b_cache, "nor cached"
        assert list(b.read_only().all()) == before, "the committed state is as it was"
        assert names(remote) == [object_name(0), object_name(PER_ROUND)]
        assert b.recover() is True, "recover drops the writes and catches up"
        assert b.get("winner") == 1 and b.get("loser") is None
        b.put("second", 3, timestamp=6)
        assert b.commit() == PER_ROUND + 1
        a.put("late", 4, timestamp=6)
        with pytest.raises(CommitConflictError):
            a.commit()
        a.recover()
        assert contents(a) == contents(b)
    finally:
        a.close()
        b.close()


def test_of_concurrent_attempts_of_one_batch_exactly_one_publishes(remote, tmp_path):
    with builder(remote).build().init(task(tmp_path / "seed")) as seed:
        commit_rounds(seed, 1)
    attempts = [builder(remote).build().init(task(tmp_path / f"attempt{i}")) for i in range(4)]
    barrier = threading.Barrier(len(attempts))
    outcomes = [None] * len(attempts)

    def attempt(i, store):
        store.put_all([(f"k{j:03d}", i) for j in range(20 + i)])
        barrier.wait()
        try:
            outcomes[i] = store.commit()
        except CommitConflictError:
            outcomes[i] = "conflict"

    threads = [threading.Thread(target=attempt, args=(i, s)) for i, s in enumerate(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        winners = [i for i, outcome in enumerate(outcomes) if outcome != "conflict"]
        assert len(winners) == 1, outcomes
        assert names(remote) == [object_name(0), object_name(PER_ROUND)]
        for store in attempts:
            store.recover()
            assert contents(store) == contents(attempts[winners[0]])
    finally:
        for store in attempts:
            store.close()


def test_compaction_keeps_the_state_a_restore_sees(remote, tmp_path, caplog):
    config = {"delete.retention.ms": 1}  # the deletes' tombstones are old at once
    with builder(remote, **config).build().init(task(tmp_path / "a")) as store:
        commit_rounds(store, 5)
    stale = tmp_path / "stale"
    shutil.copytree(tmp_path / "a", stale)  # a machine that stopped here
    with builder(remote, **config).build().init(task(tmp_path / "a")) as store:
        commit_rounds(store, 5, start=5)
        expected = contents(store)
        report = store.compact_changelog()
        assert report.objects_merged == 9 and report.objects_written == 1 and report.objects_deleted == 9
        assert report.superseded_removed > 0 and report.tombstones_removed > 0
        assert names(remote) == [object_name(0, 9 * PER_ROUND - 1), object_name(9 * PER_ROUND)]
        commit_rounds(store, 2, start=10)
        expected = contents(store)
        assert store.compact_changelog().objects_merged == 3, "the compacted object and two commits"
        assert names(remote) == [object_name(0, 11 * PER_ROUND - 1), object_name(11 * PER_ROUND)]
    with builder(remote).build().init(task(tmp_path / "b")) as fresh:
        assert contents(fresh) == expected
        assert fresh.restored_records < 12 * PER_ROUND
    with builder(remote).build().init(task(stale)) as behind:
        # Its offset lies inside the compacted object, which dropped expired tombstones of keys
        # it holds: it restores from scratch.
        assert contents(behind) == expected, "a store behind the compacted range catches up"
    assert "wiping its local state to restore it from scratch" in caplog.text
    with builder(remote).build().init(task(tmp_path / "a")) as writer:
        assert commit_rounds(writer, 1, start=12) == [13 * PER_ROUND - 1]


def test_commits_compact_the_remote_changelog_as_it_grows(remote, tmp_path, caplog):
    """A store that only commits keeps its remote changelog bounded, as a Kafka broker compacts a
    changelog topic: without it a query's changelog, and every restore's replay, grows forever."""
    with builder(remote).build().init(task(tmp_path / "a")) as store:
        with caplog.at_level(logging.INFO, logger="kstate.log.remote"):
            commit_rounds(store, 3 * COMPACT_AFTER_COMMITS)
        expected = contents(store)
    objects = remote_log(remote).list()
    assert any(o.last is not None for o in objects), "compacted objects"
    assert len([o for o in objects if o.last is None]) <= COMPACT_AFTER_COMMITS + 1
    assert caplog.text.count("Compacted ") >= 2
    with builder(remote).build().init(task(tmp_path / "b")) as other:
        assert contents(other) == expected, "a restore sees the state"


def test_the_local_cache_of_a_remote_changelog_stays_small(remote, tmp_path):
    """The soak's find: the cache drops only whole segments behind the committed offset, and with
    Kafka's 1 GiB segments its one segment held every commit (10 MiB a store after 20 minutes,
    on a 256 MiB state disk)."""
    keys = [f"{i:02d}" + "k" * 2_000 for i in range(50)]  # ~100 KB of records a commit
    with builder(remote).build().init(task(tmp_path)) as store:
        for n in range(8 * CACHE_SEGMENT_BYTES // 100_000):
            store.put_all([(key, n) for key in keys])
            store.commit()
    cache = tmp_path / "state" / "changelog-cache" / f"{TOPIC}-0"
    held = sum(f.stat().st_size for f in cache.glob("*.log"))
    assert held <= 2 * CACHE_SEGMENT_BYTES, f"the cache holds {held} bytes"


def test_a_commit_does_not_wait_for_the_compaction_it_starts(remote, tmp_path, monkeypatch, caplog):
    """A compaction reads, merges and rewrites the log (minutes for a large one on a real object
    store): it runs on a thread of its own while the commits go on, one at a time; the store's
    close waits for it, and one that fails is logged and retried by a later commit."""
    started, release, calls = threading.Event(), threading.Event(), []
    compact = StorageProcess.compact  # the storage process compacts what commits make due

    def held(self, *args, **kwargs):
        calls.append(time.monotonic())
        started.set()
        release.wait(60)
        if len(calls) == 1:
            raise RemoteStorageError("the object store is down")
        return compact(self, *args, **kwargs)

    monkeypatch.setattr(StorageProcess, "compact", held)
    with builder(remote).build().init(task(tmp_path / "a")) as store:
        due = COMPACT_AFTER_COMMITS + KEEP_NEWEST_COMMITS
        commit_rounds(store, due)
        assert started.wait(10), "a commit started a compaction"
        begun = time.monotonic()
        commit_rounds(store, 5, start=due)
        assert time.monotonic() - begun < 30 and len(calls) == 1, "commits went on; one compaction at a time"
        release.set()
        store.wait_for_compaction()
        assert "compaction failed, a later commit tries again: RemoteStorageError" in caplog.text
        commit_rounds(store, 1, start=due + 5)
        assert len(calls) == 2, "the next commit tried again"
        expected = contents(store)
    objects = remote_log(remote).list()
    assert any(o.last is not None for o in objects), "compacted by the time the store closed"
    with builder(remote).build().init(task(tmp_path / "b")) as other:
        assert contents(other) == expected


def test_a_compaction_interrupted_before_deleting_leaves_a_readable_log(remote, tmp_path, monkeypatch):
    with builder(remote).build().init(task(tmp_path / "a")) as store:
        commit_rounds(store, 4)
        expected = contents(store)
        real_delete = ObjectStore.delete
        deleted = []

        def crash_after_one(self, key):
            if deleted:
                raise RemoteStorageError("simulated crash")
            deleted.append(key)
            real_delete(self, key)

        monkeypatch.setattr(ObjectStore, "delete", crash_after_one)
        with pytest.raises(RemoteStorageError):
            store.compact_changelog()
        monkeypatch.setattr(ObjectStore, "delete", real_delete)
        assert names(remote) == [
            object_name(0, 3 * PER_ROUND - 1),
            object_name(PER_ROUND),
            object_name(2 * PER_ROUND),
            object_name(3 * PER_ROUND),
        ]
        with builder(remote).build().init(task(tmp_path / "b")) as reader:
            assert contents(reader) == expected
        commit_rounds(store, 1, start=4)
        expected = contents(store)
        report = store.compact_changelog()
        assert names(remote) == [object_name(0, 4 * PER_ROUND - 1), object_name(4 * PER_ROUND)]
        assert report.objects_deleted == 4
    with builder(remote).build().init(task(tmp_path / "c")) as reader:
        assert contents(reader) == expected


def test_a_writer_behind_a_compaction_cannot_publish_where_it_was(remote, tmp_path):
    with builder(remote).build().init(task(tmp_path / "a")) as a:
        commit_rounds(a, 1)
    a = builder(remote).build().init(task(tmp_path / "a"))
    zombie = builder(remote).build().init(task(tmp_path / "zombie"))
    try:
        commit_rounds(a, 2, start=1)
        a.compact_changelog()  # the object at PER_ROUND is compacted away
        assert names(remote) == [object_name(0, 2 * PER_ROUND - 1), object_name(2 * PER_ROUND)]
        zombie.put("zombie", 1, timestamp=5)
        with pytest.raises(CommitConflictError, match="behind"):
            zombie.commit()
        assert names(remote) == [object_name(0, 2 * PER_ROUND - 1), object_name(2 * PER_ROUND)], (
            "its object is removed again"
        )
        zombie.recover()
        assert contents(zombie) == contents(a)
    finally:
        a.close()
        zombie.close()


def break_remote(remote):
    """Makes the remote location fail every request; returns what repairs it (contents kept)."""
    fs, root = remote_fs(remote)
    if remote.kind == "file":
        aside = f"{root}.aside"
        fs.mv(root, aside, recursive=True)
        fs.pipe_file(root, b"not a directory")

        def repair():
            fs.rm_file(root)
            fs.mv(aside, root, recursive=True)

        return repair
    bucket = root.split("/", 1)[0]
    saved = {path: fs.cat_file(path) for path in fs.find(bucket)}
    fs.rm(bucket, recursive=True)  # every request now meets NoSuchBucket

    def repair():
        fs.mkdir(bucket)
        for path, data in saved.items():
            fs.pipe_file(path, data)

    return repair


def test_storage_failures_are_typed_and_lose_nothing(remote, tmp_path):
    with builder(remote).build().init(task(tmp_path / "a")) as store:
        commit_rounds(store, 2)
        expected = contents(store)
        cache = store._reader.changelog_range()
        repair = break_remote(remote)
        store.put("staged", 7, timestamp=5)
        with pytest.raises(RemoteStorageError, match="creating"):
            store.commit()
        assert store.committed_offset() == 2 * PER_ROUND - 1 and store._reader.changelog_range() == cache
        assert store.read_only().get("staged") is None and store.get("staged") == 7, "still staged"
        with pytest.raises(RemoteStorageError, match="listing"):
            builder(remote).build().init(task(tmp_path / "b"))
        repair()
        assert store.commit() == 2 * PER_ROUND, "the same commit goes through once the store is back"
        expected = contents(store)
    with builder(remote).build().init(task(tmp_path / "b")) as other:
        assert contents(other) == expected


def test_a_commit_whose_upload_answer_was_lost_applies_once(remote, tmp_path, monkeypatch):
    with builder(remote).build().init(task(tmp_path)) as store:
        commit_rounds(store, 1)
        real_create = ObjectStore.create

        def lost_answer(self, key, local_path):
            real_create(self, key, local_path)
            raise RemoteStorageError("connection reset before the answer came")

        monkeypatch.setattr(ObjectStore, "create", lost_answer)
        store.put("once", 1, timestamp=5)
        with pytest.raises(RemoteStorageError):
            store.commit()
        monkeypatch.setattr(ObjectStore, "create", real_create)
        assert store.committed_offset() == PER_ROUND - 1
        if remote.kind == "s3":
            store.commit()  # the retry finds its own object there, byte for byte: done
        else:
            # A local create compares bytes only after its own call failed (a hard link either
            # is made or is not); this one succeeded, so the retry meets a conflict.
            with pytest.raises(CommitConflictError):
                store.commit()
            assert store.recover()
        assert store.committed_offset() == PER_ROUND and store.get("once") == 1


def test_an_unreachable_s3_endpoint_is_a_typed_error(tmp_path):
    unreachable = {
        "endpoint_url": "http://127.0.0.1:9",  # discard port: nothing listens
        "key": "testing",
        "secret": "testing",
        "config_kwargs": {"retries": {"max_attempts": 1}},
    }
    remote = Remote("s3", "s3://nowhere/changelogs", unreachable)
    with pytest.raises(RemoteStorageError, match="Could not connect"):
        builder(remote).build().init(task(tmp_path))


def test_compaction_in_groups_of_segment_bytes_tiles_the_log(remote, tmp_path):
    with builder(remote, **{"segment.bytes": 4096}).build().init(task(tmp_path / "a")) as store:
        commit_rounds(store, 8)
        stale = tmp_path / "stale"
        shutil.copytree(tmp_path / "a", stale)
        commit_rounds(store, 2, start=8)
        expected = contents(store)
        report = store.compact_changelog()
        assert report.objects_written > 1, "one compacted object per group of inputs"
        chain = [(o.first, o.last) for o in remote_log(remote).list()]
        assert [first for first, _ in chain[1:]] == [last + 1 for _, last in chain[:-1]], "no gap"
    for machine in [tmp_path / "b", stale]:
        with builder(remote).build().init(task(machine)) as reader:
            assert contents(reader) == expected


def test_compaction_while_a_writer_commits(remote, tmp_path):
    writer = builder(remote).build().init(task(tmp_path / "a"))
    stop = threading.Event()
    failures, merged = [], []

    def compact_repeatedly():
        while not stop.is_set():
            try:
                merged.append(writer.compact_changelog().objects_merged)
            except Exception as error:  # surfaced by the assertion below
                failures.append(error)
                return

    compactor = threading.Thread(target=compact_repeatedly)
    compactor.start()
    rounds = 15
    try:
        commit_rounds(writer, rounds)
        # On a busy machine the compactor may not have merged yet: round by round until it has.
        deadline = time.monotonic() + 300
        while sum(merged) == 0 and not failures and time.monotonic() < deadline:
            commit_rounds(writer, 1, start=rounds)
            rounds += 1
    finally:
        stop.set()
        compactor.join()
    try:
        assert failures == []
        assert sum(merged) > 0, f"the compactor merged nothing while {rounds} rounds committed"
        expected = contents(writer)
    finally:
        writer.close()
    with builder(remote).build().init(task(tmp_path / "b")) as reader:
        assert contents(reader) == expected


def test_listing_never_answers_from_a_stale_listing_cache(s3, tmp_path, monkeypatch):
    # The race behind a false CommitConflictError: a compaction thread's listing, started before
    # a writer's create and finished after it, refills s3fs's shared listing cache after the
    # writer invalidated it. Model it: reinstate the old listing and make invalidation a no-op.
    objects = ObjectStore(s3.url, s3.storage_options)
    source = tmp_path / "object"
    source.write_bytes(b"x")
    objects.create("d/a.log", str(source))
    assert objects.list("d") == {"a.log": 1}
    stale = dict(objects._fs.dircache)
    objects.create("d/b.log", str(source))
    objects._fs.dircache.update(stale)
    monkeypatch.setattr(objects._fs, "invalidate_cache", lambda path=None: None)
    assert objects.list("d") == {"a.log": 1, "b.log": 1}


def test_a_window_store_restores_from_the_remote_log_on_another_machine(remote, tmp_path):
    supplier = Stores.persistent_timestamped_window_store("w", 10 * 60_000, 60_000)
    builder = Stores.timestamped_window_store_builder(supplier, "string", "int64").with_logging_enabled(
        remote.logging_config()
    )
    with builder.build().init(task(tmp_path / "a")) as store:
        for minute in range(5):
            for key in range(10):
                store.put(f"k{key}", minute * 10 + key, minute * 60_000, timestamp=minute * 60_000 + key)
            store.commit()
        store.put("k0", 999, 0)  # rewrites a window: compaction keeps only this record of it
        store.commit()
        expected = list(store.all_with_timestamp())
        assert store.compact_changelog().objects_merged == 5
    assert [o.name for o in RemoteChangelog(remote.url, f"{APP}-w-changelog", 0, remote.storage_options).list()] == [
        object_name(0, 49),
        object_name(50),
    ]
    with builder.build().init(task(tmp_path / "b")) as store:
        assert list(store.all_with_timestamp()) == expected
        assert store.fetch("k0", 0) == 999

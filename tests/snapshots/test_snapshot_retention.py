"""Bounded history (``minBatchesToRetain``): after each snapshot the writer deletes the snapshots
retention no longer keeps, the files no kept snapshot names, and the changelog's history below
the oldest kept snapshot; a restore that would need that history and has no snapshot says so.
The races with writers still publishing, and SIGKILLs during a collection. Every test runs on a
local changelog directory and on moto's S3."""

from __future__ import annotations

import json
import logging
import random
import time

import pytest

from kstate import Stores
from kstate.errors import ChangelogTruncatedError, InvalidArgumentError
from kstate.log import snapshot_retention
from kstate.log.partition import Partition
from kstate.log.remote import RemoteChangelog, resolve
from kstate.log.snapshots import Snapshots, manifest_name, open_snapshots

APP = "app"
TOPIC = f"{APP}-counts-changelog"
KEYS = 200


@pytest.fixture(autouse=True)
def no_delete_delay(monkeypatch):
    """Files no kept snapshot names go at once, unless a test says otherwise (writers made
    afterwards take the module's delay)."""
    monkeypatch.setattr(snapshot_retention, "DELETE_DELAY_SECONDS", 0.0)


def builder(location, **config):
    """The string -> int64 store ``counts`` logged to ``location`` with snapshots on (only
    ``snapshot()`` takes one unless ``config`` says otherwise)."""
    config.setdefault("minDeltasForSnapshot", 1_000)
    supplier = Stores.persistent_key_value_store("counts")
    return Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
        location.logging_config(**config)
    )


def task(root, machine):
    return root / machine / "state" / APP / "0_0"


def count_round(store, reference):
    """Adds 1 to every key's count in ``store`` and in the plain-Python ``reference``; commits."""
    store.put_all((key, reference[key] + 1) for key in reference)
    for key in reference:
        reference[key] += 1
    return store.commit()


def fresh_reference():
    return {f"k{i:05d}": 0 for i in range(KEYS)}


def snapshots(location) -> Snapshots:
    return open_snapshots(location.url, TOPIC, 0, location.storage_options)


def named_by_manifests(stored):
    return {name for offset in stored.offsets() for _, _, name in stored.read(offset).files}


def stored_files(stored):
    return set(stored.files.list(stored.key("files")))


def changelog_start(location, topic=TOPIC):
    """The first offset the changelog (local partition or remote objects) still holds."""
    if location.kind == "dir":
        with Partition.open(f"{location.url}/{topic}-0") as partition:
            return partition.log_start_offset
    return resolve(RemoteChangelog(location.url, topic, 0, location.storage_options).list())[0].first


def test_retention_keeps_what_spark_keeps_and_the_newest_two():
    oldest_kept = snapshot_retention.oldest_kept
    # Spark: the newest snapshot at or before batch newest - minBatchesToRetain + 1, and all after.
    assert oldest_kept([10, 20, 30, 40, 50], 21) == 2  # 50 - 21 + 1 = 30
    assert oldest_kept([10, 20, 30, 40, 50], 20) == 2  # 31: the snapshot of batch 30
    assert oldest_kept([10, 20, 30, 40, 50], 22) == 1
    assert oldest_kept([10, 20, 30, 40, 50], 1) == 3, "the newest and one older, whatever the count"
    assert oldest_kept([10, 20, 30, 40, 50], 100) is None, "none old enough: everything stays"
    assert oldest_kept([50], 1) == 0
    # Outside Spark (no batch ids) it counts snapshots.
    assert oldest_kept([None] * 5, 3) == 2
    assert oldest_kept([None] * 5, 5) == 0
    assert oldest_kept([None] * 5, 6) is None
    assert oldest_kept([None] * 5, 1) == 3
    assert oldest_kept([], 1) is None


def test_old_snapshots_their_files_and_the_history_below_go(location, tmp_path):
    reference = fresh_reference()
    with builder(location, minBatchesToRetain=2).build().init(task(tmp_path, "a")) as store:
        for round_ in range(6):
            last = count_round(store, reference)
            store.put_all((f"x{round_}-{i}", i) for i in range(50))  # new table files every round
            reference.update({f"x{round_}-{i}": i for i in range(50)})
            last = store.commit()
            store.snapshot()
        store.put("k00000", -1)
        reference["k00000"] = -1
        last = store.commit()  # a local changelog deletes its history after a commit
    stored = snapshots(location)
    kept = stored.offsets()
    assert len(kept) == 2, "minBatchesToRetain=2 outside Spark: the two newest snapshots"
    assert stored_files(stored) == named_by_manifests(stored), "no file of a deleted snapshot is left"
    assert 0 < changelog_start(location) <= kept[0] + 1, "the history below the oldest kept snapshot went"
    if location.kind == "dir":
        assert changelog_start(location) == kept[0] + 1, "Kafka's log start: exactly there"

    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert dict(elsewhere.all()) == reference
        assert elsewhere.committed_offset() == last
        assert elsewhere.restored_records == last - kept[-1]


def test_nothing_goes_until_a_snapshot_is_old_enough(location, tmp_path):
    reference = fresh_reference()
    with builder(location).build().init(task(tmp_path, "a")) as store:  # minBatchesToRetain: 100
        for _ in range(4):
            count_round(store, reference)
            store.snapshot()
        count_round(store, reference)
    assert len(snapshots(location).offsets()) == 4
    assert changelog_start(location) == 0
    for offset in snapshots(location).offsets():
        manifest = snapshots(location).read(offset)
        for _, _, name in manifest.files:
            snapshots(location).files.delete(snapshots(location).key("files", name))
    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert dict(elsewhere.all()) == reference, "every snapshot broken: the whole changelog is there"


def test_a_restore_that_needs_deleted_history_without_a_snapshot_raises(location, tmp_path, caplog):
    reference = fresh_reference()
    with builder(location, minBatchesToRetain=1).build().init(task(tmp_path, "behind")) as behind:
        count_round(behind, reference)
    with builder(location, minBatchesToRetain=1).build().init(task(tmp_path, "a")) as store:
        for _ in range(4):
            count_round(store, reference)
            store.snapshot()
        count_round(store, reference)
    start = changelog_start(location)
    assert start > KEYS, "history below the oldest kept snapshot went"
    stored = snapshots(location)
    for offset in stored.offsets():
        stored.files.delete(stored.key("manifests", manifest_name(offset)))
    with pytest.raises(ChangelogTruncatedError, match="snapshots hold it"):
        builder(location).build().init(task(tmp_path, "fresh"))
    caplog.set_level(logging.WARNING, logger="kstate.store")
    with pytest.raises(ChangelogTruncatedError):
        builder(location).build().init(task(tmp_path, "behind"))  # its state ends before the start
    assert "wiping its local state" in caplog.text


def test_a_store_behind_the_start_starts_from_a_snapshot(location, tmp_path):
    reference = fresh_reference()
    with builder(location, minBatchesToRetain=1).build().init(task(tmp_path, "behind")) as behind:
        count_round(behind, reference)
        behind_offset = behind.committed_offset()
    with builder(location, minBatchesToRetain=1).build().init(task(tmp_path, "a")) as store:
        for _ in range(4):
            count_round(store, reference)
            store.snapshot()
        last = count_round(store, reference)
    assert changelog_start(location) > behind_offset + 1
    with builder(location).build().init(task(tmp_path, "behind")) as behind:
        assert dict(behind.all()) == reference and behind.committed_offset() == last


def test_the_history_kstate_spark_still_needs_is_kept(location, tmp_path):
    reference = fresh_reference()
    with builder(location, minBatchesToRetain=1).build().init(task(tmp_path, "a")) as store:
        store.keep_history_from = KEYS  # as kstate.spark's batch log would say
        for _ in range(5):
            count_round(store, reference)
            store.snapshot()
        count_round(store, reference)
    assert len(snapshots(location).offsets()) == 2
    assert 0 < changelog_start(location) <= KEYS


def test_history_never_goes_below_a_snapshot_missing_a_file(location, tmp_path, caplog):
    reference = fresh_reference()
    config = {"minBatchesToRetain": 2}
    with builder(location, **config).build().init(task(tmp_path, "a")) as store:
        for _ in range(2):
            count_round(store, reference)
            store.snapshot()
        stored = snapshots(location)
        older, newer = stored.offsets()
        # The one the next collection would keep as its oldest loses a file no later snapshot
        # names either (RocksDB's MANIFEST grows with every flush).
        lost = next(name for path, _, name in stored.read(newer).files if path.startswith("MANIFEST"))
        assert lost not in {f[2] for f in stored.read(older).files}
        stored.files.delete(stored.key("files", lost))
        caplog.set_level(logging.WARNING, logger="kstate.log.snapshots")
        count_round(store, reference)
        store.snapshot()
        count_round(store, reference)
    offsets = stored.offsets()
    assert lost not in {f[2] for f in stored.read(offsets[-1]).files}
    assert offsets[0] == older, "the older whole snapshot is kept instead"
    assert "has all its files" not in caplog.text
    assert changelog_start(location) <= older + 1, "history kept from the whole snapshot"
    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert dict(elsewhere.all()) == reference


def test_a_window_store_is_collected_alike(location, tmp_path):
    supplier = Stores.persistent_window_store("events", retention_ms=3_600_000, window_size_ms=60_000)
    config = location.logging_config(minDeltasForSnapshot=1_000, minBatchesToRetain=1, **{"retention.ms": "-1"})
    windows = Stores.window_store_builder(supplier, "string", "int64").with_logging_enabled(config)
    base = 1_800_000_000_000
    with windows.build().init(task(tmp_path, "a")) as store:
        for round_ in range(5):
            store.put_all((f"k{i:03d}", round_, base + round_ * 60_000) for i in range(50))
            store.commit()
            store.snapshot()
        store.put("k000", -1, base)
        store.commit()
        with store.all() as rows:
            written = list(rows)
    stored = open_snapshots(location.url, f"{APP}-events-changelog", 0, location.storage_options)
    assert len(stored.offsets()) == 2
    assert stored_files(stored) == named_by_manifests(stored)
    assert 0 < changelog_start(location, f"{APP}-events-changelog") <= stored.offsets()[0] + 1
    with windows.build().init(task(tmp_path, "b")) as elsewhere:
        with elsewhere.all() as rows:
            assert list(rows) == written and len(written) == 250


def test_minBatchesToRetain_is_checked(tmp_path):
    supplier = Stores.persistent_key_value_store("counts")
    for bad in (0, -1, "x", True, 1.5):
        with pytest.raises(InvalidArgumentError, match="minBatchesToRetain"):
            Stores.key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
                {"changelog.dir": str(tmp_path), "minDeltasForSnapshot": 1, "minBatchesToRetain": bad}
            ).build()
    from kstate.config import ChangelogConfig

    assert ChangelogConfig.parse({"minBatchesToRetain": "7"}).min_batches_to_retain == 7
    assert ChangelogConfig.parse({}).min_batches_to_retain == 100, "Spark's default"


# -- races with writers still publishing ------------------------------------------------------------


def collecting_before_manifests(monkeypatch, collection):
    """Runs ``collection()`` once, just before the next manifest is created: a collection of
    another writer at the worst moment."""
    create = Snapshots._create
    pending = [collection]

    def create_then(self, key, path, immutable):
        if "/manifests/" in key and pending:
            pending.pop()()
        create(self, key, path, immutable)

    monkeypatch.setattr(Snapshots, "_create", create_then)


def test_a_file_the_location_lists_is_written_again_so_no_collection_takes_it(location, tmp_path, monkeypatch, caplog):
    delay = 2.0
    reference = fresh_reference()
    with builder(location).build().init(task(tmp_path, "a")) as store:
        count_round(store, reference)
        store.snapshot()
        count_round(store, reference)
        # A killed upload of the next snapshot: its files are there, its manifest never came.
        create = Snapshots._create

        def killed_at_manifest(self, key, path, immutable):
            if "/manifests/" in key:
                raise OSError("killed")
            create(self, key, path, immutable)

        monkeypatch.setattr(Snapshots, "_create", killed_at_manifest)
        with pytest.raises(OSError):
            store.snapshot()
        monkeypatch.setattr(Snapshots, "_create", create)
        stored = snapshots(location)
        left_over = {name for name in stored_files(stored) - named_by_manifests(stored) if ".sst" in name}
        assert left_over
        time.sleep(delay + 1.5)  # the leftovers are older than the delay now

        # The next snapshot holds the same files; another writer's collection runs just before
        # its manifest is created.
        collecting_before_manifests(monkeypatch, lambda: snapshot_retention.collect(stored, 100, delay))
        caplog.set_level(logging.WARNING, logger="kstate.log.snapshots")
        published = store.snapshot()
    assert published is not None
    manifest = stored.read(published.offset)
    assert left_over <= {f[2] for f in manifest.files}, "the leftovers are files of this snapshot"
    assert stored.missing(manifest) == []
    assert "deleted while it was published" not in caplog.text, "written again, so never deleted"
    with builder(location).build().init(task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == 0 and dict(elsewhere.all()) == reference


def zombie_and_active(location, tmp_path, reference):
    """Machine ``a`` publishes a snapshot and commits once more, then the partition moves to
    ``b`` (``a`` stays open: a zombie whose writer still knows its snapshot as the earlier one).
    Returns ``(a, b, the snapshot a published)``."""
    config = {"minBatchesToRetain": 2}
    a = builder(location, **config).build().init(task(tmp_path, "a"))
    count_round(a, reference)
    earlier = a.snapshot()
    count_round(a, reference)
    a.detach_changelog()
    # Its own collection would delete its next snapshot at once (older than b's): left out here,
    # so that the snapshot can be looked at.
    a._snapshot_writer._collect = lambda: None
    b = builder(location, **config).build().init(task(tmp_path, "b"))
    return a, b, earlier


def test_a_zombie_whose_earlier_snapshot_was_collected_writes_every_file(location, tmp_path, caplog):
    reference = fresh_reference()
    a, b, earlier = zombie_and_active(location, tmp_path, reference)
    stored = snapshots(location)
    earlier_files = {f[2] for f in stored.read(earlier.offset).files}
    for _ in range(3):
        count_round(b, reference)
        b.snapshot()
    assert earlier.offset not in stored.offsets()
    gone = earlier_files - stored_files(stored)
    assert gone, "files only the collected snapshot named went with it"
    caplog.set_level(logging.INFO, logger="kstate.log.snapshots")
    zombie = a.snapshot()  # its state at its last commit, older than b's
    manifest = stored.read(zombie.offset)
    assert stored.missing(manifest) == [], "the zombie's snapshot names no missing file"
    assert "is not among the two newest; writing every file" in caplog.text
    assert "deleted while it was published" not in caplog.text, "none was missing, even for a moment"
    a.close()
    b.close()


def test_a_zombie_whose_earlier_snapshot_is_collected_while_it_publishes_writes_it_again(
    location, tmp_path, monkeypatch, caplog
):
    reference = fresh_reference()
    a, b, earlier = zombie_and_active(location, tmp_path, reference)
    stored = snapshots(location)

    def active_publishes_and_collects():
        for _ in range(3):
            count_round(b, reference)
            b.snapshot()
        assert earlier.offset not in stored.offsets()

    collecting_before_manifests(monkeypatch, active_publishes_and_collects)
    caplog.set_level(logging.WARNING, logger="kstate.log.snapshots")
    zombie = a.snapshot()
    assert "deleted while it was published" in caplog.text
    assert stored.missing(stored.read(zombie.offset)) == []
    a.close()
    b.close()


# -- SIGKILL during a collection --------------------------------------------------------------------

WRITER = f"""
import json, sys, time
from kstate import Stores
from kstate.log import snapshot_retention

task_dir, pause, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
snapshot_retention.DELETE_DELAY_SECONDS = 0.0
supplier = Stores.persistent_key_value_store("counts")
store = (Stores.key_value_store_builder(supplier, "string", "int64")
         .with_logging_enabled(config).build().init(task_dir))
keys = [f"k{{i:05d}}" for i in range({KEYS})]

def count_once():
    # Round n adds 1 to every count and writes keys of its own (new table files each round).
    n = (store.get("k00000") or 0) + 1
    store.put_all(zip(keys, [(v or 0) + 1 for v in store.get_many(keys)]))
    store.put_all((f"x{{n}}-{{i}}", i) for i in range(50))
    return n, store.commit()

def pausing(real, kind):
    def call(keys):
        if pause == kind and any(f"/{{kind}}/" in key for key in keys):
            real(keys[:1] if kind == "files" else [])
            print("paused", flush=True)
            time.sleep(60)
        return real(keys)
    return call

def pausing_delete(real):
    def call(key):
        real(key)
        print("paused", flush=True)
        time.sleep(60)
    return call

writer = store._writer()
files = writer.snapshots.files
files.delete_many = pausing(pausing(files.delete_many, "files"), "manifests")
if pause == "history" and store._remote is not None:
    store._remote.store.delete = pausing_delete(store._remote.store.delete)
while True:
    n, offset = count_once()
    print("committed", offset, flush=True)
    if pause != "loop" or n % 2:
        store.snapshot()
"""


def check_after_kill(location, tmp_path, machine, seen):
    """A new machine restores exactly the published commits; its next snapshot's collection
    removes what the killed one left."""
    with builder(location, minBatchesToRetain=2).build().init(task(tmp_path, machine)) as elsewhere:
        assert elsewhere.committed_offset() >= max(seen), "a commit the writer saw finish is lost"
        state = dict(elsewhere.all())
        rounds = state["k00000"]
        reference = {f"k{i:05d}": rounds for i in range(KEYS)}
        reference.update({f"x{r}-{i}": i for r in range(1, rounds + 1) for i in range(50)})
        reference.update({key: state[key] for key in ("z",) if key in state})
        assert state == reference, "every published commit applied exactly once"
        elsewhere.put("z", 1)
        elsewhere.commit()
        assert elsewhere.snapshot() is not None
        elsewhere.put("z", 2)
        elsewhere.commit()  # a local changelog deletes its history after a commit
    stored = snapshots(location)
    assert len(stored.offsets()) == 2
    assert stored_files(stored) == named_by_manifests(stored), "the killed collection's leftovers are gone"
    assert 0 < changelog_start(location) <= stored.offsets()[0] + 1


@pytest.mark.parametrize("pause", ["files", "manifests", "history"])
def test_a_collection_killed_part_way_leaves_nothing_a_restore_misses(kill_writer, location, tmp_path, pause):
    if pause == "history" and location.kind == "dir":
        pytest.skip("a local changelog deletes its history in one native call (killed at random below)")
    config = location.logging_config(minDeltasForSnapshot=1_000, minBatchesToRetain=2)
    lines = kill_writer(WRITER, [task(tmp_path, "a"), pause, json.dumps(config)], "paused")
    seen = [int(words[1]) for words in lines if words[0] == "committed"]
    assert len(seen) >= 2, "the pause came in a collection that deletes"
    check_after_kill(location, tmp_path, "b", seen)


def test_killed_at_random_while_collecting(kill_writer, location, tmp_path):
    # Small segments, so a local changelog's history goes segment by segment.
    config = location.logging_config(minDeltasForSnapshot=1_000, minBatchesToRetain=2, **{"segment.bytes": 8_192})
    random.seed(location.kind)
    for attempt in range(3):
        lines = kill_writer(
            WRITER, [task(tmp_path, "a"), "loop", json.dumps(config)], "committed", delay=random.uniform(0.3, 1.5)
        )
        seen = [int(words[1]) for words in lines if words[0] == "committed"]
        check_after_kill(location, tmp_path, f"restore-{attempt}", seen)

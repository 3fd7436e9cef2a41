"""A writer publishing snapshots, killed with SIGKILL while it uploads: after some of a
snapshot's files, just before its manifest, and at random while it commits with snapshots
taken in the background. What it left half done is never used: a restore on another machine
finds only whole snapshots and ends at exactly the published commits, and the same machine's
next snapshot goes over the leftovers. On a local changelog directory and on moto's S3."""

from __future__ import annotations

import json
import random

import pytest

from kstate import Stores
from kstate.log.snapshots import open_snapshots

APP = "app"
TOPIC = f"{APP}-counts-changelog"
KEYS = 400

WRITER = f"""
import json, sys, time
from kstate import Stores
from kstate.log import snapshots

task_dir, mode, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
supplier = Stores.persistent_key_value_store("counts")
store = (Stores.key_value_store_builder(supplier, "string", "int64")
         .with_logging_enabled(config).build().init(task_dir))
keys = [f"k{{i:05d}}" for i in range({KEYS})]

def count_once():
    store.put_all(zip(keys, [(v or 0) + 1 for v in store.get_many(keys)]))
    return store.commit()

create = snapshots.Snapshots._create
created = []

def pausing_create(self, key, path, immutable):
    if mode == "manifest" and "/manifests/" in key:
        print("paused", flush=True)
        time.sleep(60)
    create(self, key, path, immutable)
    created.append(key)
    if mode == "files" and len(created) == 1:
        print("paused", flush=True)
        time.sleep(60)

offset = count_once()
store.snapshot()  # None when a snapshot in the background took this offset already
print("snapshot", offset, flush=True)
if mode == "loop":
    while True:
        print("committed", count_once(), flush=True)
count_once()
snapshots.Snapshots._create = pausing_create
store.snapshot()
"""


def task(root, machine):
    return root / machine / "state" / APP / "0_0"


def reopen(location, task_dir):
    supplier = Stores.persistent_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, "string", "int64")
    return builder.with_logging_enabled(snapshots_on(location)).build().init(task_dir)


def snapshots_on(location, every=1_000):
    """``location``'s logging config with snapshots on, every ``every`` commits (a store with a
    remote changelog looks for snapshots only when it takes them)."""
    return location.logging_config(minDeltasForSnapshot=every)


def counts(store):
    return {v for _, v in store.all()}


def stored_snapshots(location):
    return open_snapshots(location.url, TOPIC, 0, location.storage_options)


def referenced_objects(stored):
    return {name for offset in stored.offsets() for _, _, name in stored.read(offset).files}


@pytest.mark.parametrize("pause", ["files", "manifest"])
def test_a_snapshot_killed_while_uploading_is_never_used(kill_writer, location, tmp_path, pause):
    lines = kill_writer(WRITER, [task(tmp_path, "a"), pause, json.dumps(snapshots_on(location))], "paused")
    first = int(next(words for words in lines if words[0] == "snapshot")[1])
    assert first == KEYS - 1
    stored = stored_snapshots(location)
    assert stored.offsets() == [first], "the killed snapshot has no manifest"
    objects = stored.files.list(f"{stored.directory}/files")
    left_over = set(objects) - referenced_objects(stored)
    assert left_over, "the killed upload left files no manifest names"

    with reopen(location, task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == KEYS, "the snapshot of the first commit, then the second"
        assert counts(elsewhere) == {2} and elsewhere.committed_offset() == 2 * KEYS - 1

    # The killed writer's machine: its capture directory is left over, and its next snapshot
    # publishes over the leftovers.
    capture = task(tmp_path, "a") / "rocksdb" / ".counts.snapshot"
    assert capture.exists()
    with reopen(location, task(tmp_path, "a")) as store:
        assert counts(store) == {2}
        published = store.snapshot()
        assert published is not None and published.offset == 2 * KEYS - 1
    assert not capture.exists()
    with reopen(location, task(tmp_path, "c")) as elsewhere:
        assert elsewhere.restored_records == 0
        assert counts(elsewhere) == {2}


def test_killed_at_random_while_snapshotting_in_the_background(kill_writer, location, tmp_path):
    config = snapshots_on(location, every=2)
    random.seed(location.kind)
    for attempt in range(3):
        lines = kill_writer(
            WRITER, [task(tmp_path, "a"), "loop", json.dumps(config)], "committed", delay=random.uniform(0.2, 1.5)
        )
        seen = [int(words[1]) for words in lines if words[0] == "committed"]
        stored = stored_snapshots(location)
        newest = max(stored.offsets())
        with reopen(location, task(tmp_path, f"restore-{attempt}")) as elsewhere:
            offset = elsewhere.committed_offset()
            assert offset >= max(seen), "a commit the writer saw finish is lost"
            assert (offset + 1) % KEYS == 0
            assert counts(elsewhere) == {(offset + 1) // KEYS}, "every published commit applied exactly once"
            assert elsewhere.restored_records == offset - newest, "the newest snapshot, then the changelog after it"
    assert len(stored.offsets()) >= 2, "the background wrote snapshots between the kills"
    for offset in stored.offsets():
        manifest = stored.read(offset)
        assert (manifest.offset + 1) % KEYS == 0, "a snapshot holds whole commits"


DUE_WRITER = """
import json, sys, time
from kstate import Stores
from kstate.log import snapshots

task_dir, config = sys.argv[1], json.loads(sys.argv[2])
create = snapshots.Snapshots._create

def pausing_create(self, key, path, immutable):
    print("paused", flush=True)
    time.sleep(60)

snapshots.Snapshots._create = pausing_create
supplier = Stores.persistent_key_value_store("counts")
store = (Stores.key_value_store_builder(supplier, "string", "int64")
         .with_logging_enabled(config).build().init(task_dir))
for value in (1, 2):
    store.put_all((f"k{i:05d}", value) for i in range(10))
    store.commit()  # the second starts a snapshot in the background, which pauses
time.sleep(60)
"""


def test_a_snapshot_that_died_with_its_process_is_taken_by_the_next_commit(kill_writer, location, tmp_path):
    """The commits that made a snapshot due count until one is published: a Python worker that
    Spark ends while its snapshot uploads leaves it due, not ``minDeltasForSnapshot`` away."""
    config = snapshots_on(location, every=2)
    kill_writer(DUE_WRITER, [task(tmp_path, "a"), json.dumps(config)], "paused")
    assert stored_snapshots(location).offsets() == []
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    with builder.with_logging_enabled(config).build().init(task(tmp_path, "a")) as store:
        store.put("k00000", 3)
        offset = store.commit()
    assert stored_snapshots(location).offsets() == [offset], "the next commit took the snapshot left due"

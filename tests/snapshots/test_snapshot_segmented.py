"""Snapshots of window and session stores (plain and timestamped): every live segment at one
changelog offset, with the stream time. A store on a machine without local state (or with
local state older than the newest snapshot) loads the snapshot and replays only the changelog
after it, and then reads as a plain-Python reference of Kafka's retention says (and as a restore
from the changelog alone): fetches of one key and of key ranges, forward and backward, session
finds, timestamps and a TTL. Segments the retention dropped stay dropped. A snapshot with a
damaged segment file, or of the store under another retention, is not used; a writer killed
with SIGKILL while it captures or uploads one leaves no partial snapshot. Every test runs on a
local changelog directory and on moto's S3."""

from __future__ import annotations

import json
import logging
import os
import random
from contextlib import contextmanager

import pytest

from kstate import Stores, ValueAndTimestamp
from kstate.log.snapshots import open_snapshots
from kstate.windowed import MAX_TIME, Windowed
from snapshots.test_snapshot_restore import flip_middle_byte, replace_object

APP = "app"
NAME = "events"
TOPIC = f"{APP}-{NAME}-changelog"
MINUTE = 60_000
RETENTION = 10 * MINUTE
"""Ten minutes of retention: five-minute segments, two or three of them live."""
BASE = 1_800_000_000_000
"""Round 0's time (a segment start). The changelog's ``retention.ms`` is off, so no record is
deleted by the clock whatever the time."""
KEYS = 30
TTL = 3 * MINUTE
"""The timestamped window store's TTL, on the stream time of its values' timestamps."""

KINDS = ["window", "timestamped-window", "session", "timestamped-session"]


def supplier(kind, retention=RETENTION):
    if kind == "window":
        return Stores.persistent_window_store(NAME, retention_ms=retention, window_size_ms=MINUTE)
    if kind == "timestamped-window":
        return Stores.persistent_timestamped_window_store(
            NAME, retention_ms=retention, window_size_ms=MINUTE, ttl_ms=TTL
        )
    if kind == "session":
        return Stores.persistent_session_store(NAME, retention_ms=retention)
    return Stores.persistent_timestamped_session_store(NAME, retention_ms=retention)


def builder(kind, location, retention=RETENTION, snapshots=True, **config):
    """The string -> int64 store ``events`` of ``kind`` logged to ``location``; with
    ``snapshots`` it takes them (``snapshot()`` only, by default) and looks for them on restore
    (a store with a remote changelog looks only then)."""
    if snapshots:
        config.setdefault("minDeltasForSnapshot", 1_000)
    make = {
        "window": Stores.window_store_builder,
        "timestamped-window": Stores.timestamped_window_store_builder,
        "session": Stores.session_store_builder,
        "timestamped-session": Stores.timestamped_session_store_builder,
    }[kind]
    return make(supplier(kind, retention), "string", "int64").with_logging_enabled(
        location.logging_config(**{"retention.ms": "-1", **config})
    )


def task(root, machine):
    """The task directory of partition 0 on ``machine`` (a state dir of its own)."""
    return root / machine / "state" / APP / "0_0"


def stored_snapshots(location):
    return open_snapshots(location.url, TOPIC, 0, location.storage_options)


class Reference:
    """What a window or session store holds, in plain Python: rows by ``(key, start)`` (window)
    or ``(key, start, end)`` (session), Kafka's retention by stream time (the largest window
    start / session end put: a put into a segment below that of ``stream time - retention`` is
    dropped, reads show nothing older than ``stream time - retention + 1``), and a TTL on the
    largest value timestamp put."""

    def __init__(self, kind, retention=RETENTION):
        self.kind = kind
        self.session = kind.endswith("session")
        self.timestamped = kind.startswith("timestamped")
        self.ttl = TTL if kind == "timestamped-window" else None
        self.retention = retention
        self.interval = max(retention // 2, MINUTE)
        self.rows = {}
        self.stream_time = -1
        self.ttl_clock = -1

    def put(self, row, time, value, timestamp):
        """Returns whether the put was kept (``False``: its segment had expired)."""
        self.stream_time = max(self.stream_time, time)
        if time // self.interval < (self.stream_time - self.retention) // self.interval:
            return False
        if value is None:
            self.rows.pop(row, None)
        else:
            self.rows[row] = (value, timestamp)
            self.ttl_clock = max(self.ttl_clock, timestamp)
        return True

    def visible(self, time, timestamp):
        expired = self.ttl is not None and 0 <= timestamp <= self.ttl_clock - self.ttl
        return time >= self.stream_time - self.retention + 1 and not expired

    def value(self, value, timestamp, with_timestamp):
        return ValueAndTimestamp(value, timestamp) if with_timestamp else value

    def reads(self):
        """What ``reads`` of a store holding these rows returns."""
        out = {"stream time": self.stream_time}
        if self.session:
            sessions = sorted(
                (key, start, end, value, ts)
                for (key, start, end), (value, ts) in self.rows.items()
                if self.visible(end, ts)
            )
            for key in keys():
                mine = sorted((s for s in sessions if s[0] == key), key=lambda s: (s[2], s[1]))
                out[f"fetch {key}"] = [(start, end, value) for _, start, end, value, _ in mine]
                if self.timestamped:
                    out[f"with timestamps {key}"] = [
                        (start, end, ValueAndTimestamp(v, ts)) for _, start, end, v, ts in mine
                    ]
            earliest_end, latest_start = self.stream_time - 7 * MINUTE, self.stream_time - 2 * MINUTE
            found = [s for s in sessions if "k005" <= s[0] <= "k020" and s[2] >= earliest_end and s[1] <= latest_start]
            found.sort(key=lambda s: (s[2] // self.interval, s[0], s[2], s[1]))
            out["find range"] = [(key, start, end, value) for key, start, end, value, _ in found]
            return out
        windows = sorted(
            (key, start, value, ts) for (key, start), (value, ts) in self.rows.items() if self.visible(start, ts)
        )
        for key in keys():
            mine = [w for w in windows if w[0] == key]
            out[f"fetch {key}"] = [(start, value) for _, start, value, _ in mine]
            if self.timestamped:
                out[f"with timestamps {key}"] = [(start, ValueAndTimestamp(v, ts)) for _, start, v, ts in mine]
        in_range = [w for w in windows if "k005" <= w[0] <= "k020" and w[1] >= BASE + 4 * MINUTE]
        in_range.sort(key=lambda w: (w[1] // self.interval, w[0], w[1]))
        out["fetch range"] = [(key, start, value) for key, start, value, _ in in_range]
        out["points"] = [self._point(key, start) for key, start in points(self.stream_time)]
        return out

    def _point(self, key, start):
        held = self.rows.get((key, start))
        if held is None or not self.visible(start, held[1]):
            return None
        return held[0]


def keys():
    return [f"k{i:03d}" for i in range(KEYS)]


def points(stream_time):
    """``(key, window start)`` pairs a point fetch reads: present, expired, never written."""
    return [(f"k{i:03d}", stream_time - offset * MINUTE) for i in (0, 7, 13) for offset in (0, 3, 6, 9, 12)]


def reads(store, kind):
    """The store's reads that ``Reference.reads`` models, as plain tuples; backward reads are
    checked against the forward ones here."""
    out = {"stream time": store.stream_time}
    timestamped = kind.startswith("timestamped")
    if kind.endswith("session"):
        for key in keys():
            forward = [(w.start, w.end, v) for w, v in store.fetch(key)]
            assert [(w.start, w.end, v) for w, v in store.backward_fetch(key)] == forward[::-1]
            out[f"fetch {key}"] = forward
            if timestamped:
                out[f"with timestamps {key}"] = [(w.start, w.end, v) for w, v in store.fetch_with_timestamp(key)]
        t = store.stream_time
        found = [
            (w.key, w.start, w.end, v) for w, v in store.find_sessions("k005", "k020", t - 7 * MINUTE, t - 2 * MINUTE)
        ]
        backward = store.backward_find_sessions("k005", "k020", t - 7 * MINUTE, t - 2 * MINUTE)
        assert [(w.key, w.start, w.end, v) for w, v in backward] == found[::-1]
        out["find range"] = found
        return out
    for key in keys():
        forward = [(start, v) for start, v in store.fetch(key, 0, MAX_TIME)]
        assert [(start, v) for start, v in store.backward_fetch(key, 0, MAX_TIME)] == forward[::-1]
        out[f"fetch {key}"] = forward
        if timestamped:
            out[f"with timestamps {key}"] = [(start, v) for start, v in store.fetch_with_timestamp(key, 0, MAX_TIME)]
    in_range = [(w.key, w.start, v) for w, v in store.fetch("k005", "k020", BASE + 4 * MINUTE, MAX_TIME)]
    backward = store.backward_fetch("k005", "k020", BASE + 4 * MINUTE, MAX_TIME)
    assert [(w.key, w.start, v) for w, v in backward] == in_range[::-1]
    out["fetch range"] = in_range
    out["points"] = [store.fetch(key, start) for key, start in points(store.stream_time)]
    return out


def write_round(store, reference, r):
    """Round ``r``: every key's window (session) two minutes later than round ``r - 1``'s, some
    in the segment before; a delete of round ``r - 1``'s for every seventh; one late put, which
    expired segments drop. Committed; returns the offset."""
    t = BASE + r * 2 * MINUTE
    kind = reference.kind
    for i, key in enumerate(keys()):
        back = (i % 3) * 3 * MINUTE
        value = r * 1_000 + i
        timestamp = t - back + (i % 5) * 1_000
        if reference.session:
            end = t - back
            session = Windowed(key, end - (i % 4) * 20_000, end)
            put = ValueAndTimestamp(value, timestamp) if reference.timestamped else value
            assert store.put(session, put) == reference.put(tuple(session), end, value, timestamp)
            if (i + r) % 7 == 0 and r > 0:
                old_end = end - 2 * MINUTE
                old = Windowed(key, old_end - (i % 4) * 20_000, old_end)
                assert store.put(old, None) == reference.put(tuple(old), old_end, None, -1)
        else:
            start = t - back
            if kind == "timestamped-window":
                kept = store.put(key, value, start, timestamp)
            else:
                kept = store.put(key, value, start)
            # A plain window store's value carries no timestamp: its TTL-free reference takes the start.
            assert kept == reference.put((key, start), start, value, timestamp if reference.timestamped else start)
            if (i + r) % 7 == 0 and r > 0:
                old = start - 2 * MINUTE
                assert store.put(key, None, old) == reference.put((key, old), old, None, -1)
    late = t - 12 * MINUTE
    if reference.session:
        session = Windowed("late", late, late)
        assert store.put(session, 1) == reference.put(tuple(session), late, 1, late)
    else:
        assert store.put("late", 1, late) == reference.put(("late", late), late, 1, late)
    return store.commit()


def segments_of(manifest, interval):
    """The segment ids a manifest holds files of (``<store>.<start ms>/...``)."""
    return sorted({int(path.split("/")[0].rsplit(".", 1)[1]) // interval for path, _, _ in manifest.files})


@contextmanager
def snapshots_hidden(location):
    """A local changelog directory with snapshots is always looked at: moved aside while a
    store restores from the changelog alone (a remote one is listed only by a store taking
    snapshots)."""
    if location.kind != "dir":
        yield
        return
    stored = stored_snapshots(location)
    path = os.path.join(stored.files.url, *stored.directory.split("/"))
    os.rename(path, f"{path}.hidden")
    try:
        yield
    finally:
        os.rename(f"{path}.hidden", path)


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_machine_loads_the_snapshot_and_reads_as_the_reference(location, tmp_path, kind, caplog):
    reference = Reference(kind)
    with builder(kind, location).build().init(task(tmp_path, "a")) as store:
        for r in range(6):
            write_round(store, reference, r)
        published = store.snapshot()
        for r in range(6, 10):
            last = write_round(store, reference, r)
        written_segments = store.segment_ids()
        assert reads(store, kind) == reference.reads(), "the reference models the store"
    assert published is not None and published.offset < last
    manifest = stored_snapshots(location).read(published.offset)
    assert manifest.kind == kind.removeprefix("timestamped-")
    assert manifest.stream_time == BASE + 5 * 2 * MINUTE
    in_snapshot = segments_of(manifest, reference.interval)
    assert len(in_snapshot) >= 2, "several segments"
    assert in_snapshot[0] < written_segments[0], "the tail expires segments the snapshot holds"

    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder(kind, location).build().init(task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == last - published.offset, "the snapshot, then the tail"
        assert elsewhere.committed_offset() == last
        assert elsewhere.segment_ids() == written_segments, "segments the retention dropped stay dropped"
        from_snapshot = reads(elsewhere, kind)
        assert from_snapshot == reference.reads()
    assert f"loaded the snapshot at offset {published.offset}" in caplog.text

    # As a restore from the changelog alone: stream time, TTL clock, segments, every read.
    with snapshots_hidden(location):
        with builder(kind, location, snapshots=False).build().init(task(tmp_path, "c")) as replayed:
            assert replayed.restored_records == last + 1
            assert replayed.segment_ids() == written_segments
            assert reads(replayed, kind) == from_snapshot

    # A snapshot of the last commit, with no tail after it: the stream time comes from the
    # manifest alone (a commit writing several segments records it in no segment).
    with builder(kind, location).build().init(task(tmp_path, "a")) as store:
        newest = store.snapshot()
    assert newest is not None and newest.offset == last
    with builder(kind, location).build().init(task(tmp_path, "d")) as elsewhere:
        assert elsewhere.restored_records == 0
        assert elsewhere.segment_ids() == written_segments
        assert reads(elsewhere, kind) == reference.reads()

    # The restored store goes on as the writer would: the next round's late put is dropped by
    # the same stream time, its expired segment goes.
    with builder(kind, location).build().init(task(tmp_path, "b")) as store:
        write_round(store, reference, 10)
        assert reads(store, kind) == reference.reads()
        assert store.segment_ids()[0] > written_segments[0]


def test_local_state_that_is_current_is_used_and_older_local_state_loads_the_snapshot(location, tmp_path, caplog):
    reference = Reference("window")
    with builder("window", location).build().init(task(tmp_path, "a")) as store:
        first = write_round(store, reference, 0)
    with builder("window", location).build().init(task(tmp_path, "b")) as behind:
        assert behind.restored_records == first + 1
    with builder("window", location).build().init(task(tmp_path, "a")) as store:
        for r in range(1, 5):
            write_round(store, reference, r)
        published = store.snapshot()
        last = write_round(store, reference, 5)
    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder("window", location).build().init(task(tmp_path, "a")) as store:
        assert store.restored_records == 0
        assert reads(store, "window") == reference.reads()
    assert "loaded the snapshot" not in caplog.text
    with builder("window", location).build().init(task(tmp_path, "b")) as behind:
        assert behind.restored_records == last - published.offset, "only the commit after the snapshot"
        assert reads(behind, "window") == reference.reads()
    assert f"loaded the snapshot at offset {published.offset}" in caplog.text


@pytest.mark.parametrize("kind", ["window", "session"])
def test_a_snapshot_with_a_damaged_segment_file_is_not_used(location, tmp_path, kind, caplog):
    reference = Reference(kind)
    with builder(kind, location).build().init(task(tmp_path, "a")) as store:
        for r in range(3):
            write_round(store, reference, r)
        older = store.snapshot()
        for r in range(3, 6):
            write_round(store, reference, r)
        newer = store.snapshot()
        last = write_round(store, reference, 6)
    assert newer.files_copied < newer.files, "table files the older snapshot published are not copied again"
    stored = stored_snapshots(location)
    manifest, earlier = stored.read(newer.offset), stored.read(older.offset)
    path, _, own_table = next(f for f in manifest.files_not_in(earlier) if f[0].endswith(".sst"))
    assert "/" in path, "a file of a segment's directory"
    replace_object(location, f"{stored.directory}/files/{own_table}", flip_middle_byte)

    caplog.set_level(logging.INFO, logger="kstate.store")
    with builder(kind, location).build().init(task(tmp_path, "b")) as store:
        assert store.restored_records == last - older.offset
        assert reads(store, kind) == reference.reads()
    assert f"the snapshot at offset {newer.offset}" in caplog.text
    assert f"trying the one at offset {older.offset}" in caplog.text
    assert f"{path}: content hash" in caplog.text
    assert f"loaded the snapshot at offset {older.offset}" in caplog.text


def test_a_snapshot_of_the_store_under_another_retention_is_not_used(location, tmp_path, caplog):
    reference = Reference("window")
    with builder("window", location).build().init(task(tmp_path, "a")) as store:
        for r in range(4):
            last = write_round(store, reference, r)
        assert store.snapshot().offset == last
    caplog.set_level(logging.INFO, logger="kstate.store")
    # 30 minutes: 15-minute segments, of which the snapshot's 5-minute starts are not all.
    with builder("window", location, retention=30 * MINUTE).build().init(task(tmp_path, "b")) as store:
        assert store.restored_records == last + 1, "the changelog restores everything"
        assert store.committed_offset() == last
        assert store.stream_time == reference.stream_time
    assert "cannot be this store's" in caplog.text and "restoring the changelog" in caplog.text


# -- killed while snapshotting -------------------------------------------------------------------

KILLED_KEYS = 100

WRITER = f"""
import json, sys, time
from kstate import Stores
from kstate.log import snapshots

task_dir, mode, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
supplier = Stores.persistent_window_store("{NAME}", retention_ms={RETENTION}, window_size_ms={MINUTE})
store = (Stores.window_store_builder(supplier, "string", "int64")
         .with_logging_enabled(config).build().init(task_dir))
keys = [f"k{{i:03d}}" for i in range({KILLED_KEYS})]

def count_once():
    # Round n: every key's window at n minutes and at n - 5 minutes (often the segment before).
    offset = store.committed_offset()
    n = 0 if offset is None else (offset + 1) // (2 * len(keys))
    for key in keys:
        store.put(key, n, {BASE} + n * {MINUTE})
        store.put(key, n, {BASE} + (n - 5) * {MINUTE})
    return store.commit()

publish = snapshots.Snapshots.publish
create = snapshots.Snapshots._create
created = []

def pausing_publish(self, *args):
    print("paused", flush=True)
    time.sleep(60)

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
if mode == "capture":
    snapshots.Snapshots.publish = pausing_publish
snapshots.Snapshots._create = pausing_create
store.snapshot()
"""


def killed_reference(commits):
    """The writer's store after ``commits`` rounds."""
    reference = Reference("window")
    for n in range(commits):
        for key in (f"k{i:03d}" for i in range(KILLED_KEYS)):
            reference.put((key, BASE + n * MINUTE), BASE + n * MINUTE, n, BASE + n * MINUTE)
            reference.put((key, BASE + (n - 5) * MINUTE), BASE + (n - 5) * MINUTE, n, BASE + (n - 5) * MINUTE)
    return reference


def windows(store):
    return sorted((w.key, w.start, v) for w, v in store.all())


def reference_windows(reference):
    return sorted(
        (key, start, value) for (key, start), (value, _) in reference.rows.items() if reference.visible(start, 0)
    )


def reopen(location, task_dir):
    return builder("window", location).build().init(task_dir)


def referenced_objects(stored):
    return {name for offset in stored.offsets() for _, _, name in stored.read(offset).files}


@pytest.mark.parametrize("pause", ["capture", "files", "manifest"])
def test_a_segmented_snapshot_killed_while_capturing_or_uploading_is_never_used(kill_writer, location, tmp_path, pause):
    config = location.logging_config(**{"retention.ms": "-1", "minDeltasForSnapshot": 1_000})
    lines = kill_writer(WRITER, [task(tmp_path, "a"), pause, json.dumps(config)], "paused")
    per_commit = 2 * KILLED_KEYS
    first = int(next(words for words in lines if words[0] == "snapshot")[1])
    assert first == per_commit - 1
    stored = stored_snapshots(location)
    assert stored.offsets() == [first], "the killed snapshot has no manifest"
    left_over = set(stored.files.list(f"{stored.directory}/files")) - referenced_objects(stored)
    assert bool(left_over) == (pause != "capture"), "an upload killed part-way leaves files no manifest names"

    with reopen(location, task(tmp_path, "b")) as elsewhere:
        assert elsewhere.restored_records == per_commit, "the snapshot of the first commit, then the second"
        assert elsewhere.committed_offset() == 2 * per_commit - 1
        assert windows(elsewhere) == reference_windows(killed_reference(2))

    # The killed writer's machine: its capture directory is left over, and its next snapshot
    # publishes over the leftovers.
    capture = task(tmp_path, "a") / f".{NAME}.snapshot"
    assert capture.exists()
    with reopen(location, task(tmp_path, "a")) as store:
        published = store.snapshot()
        assert published is not None and published.offset == 2 * per_commit - 1
    assert not capture.exists()
    with reopen(location, task(tmp_path, "c")) as elsewhere:
        assert elsewhere.restored_records == 0
        assert windows(elsewhere) == reference_windows(killed_reference(2))


def test_a_window_store_killed_at_random_while_snapshotting_in_the_background(kill_writer, location, tmp_path):
    config = location.logging_config(**{"retention.ms": "-1", "minDeltasForSnapshot": 2})
    per_commit = 2 * KILLED_KEYS
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
            assert (offset + 1) % per_commit == 0
            reference = killed_reference((offset + 1) // per_commit)
            assert elsewhere.stream_time == reference.stream_time
            assert windows(elsewhere) == reference_windows(reference), "every published commit applied exactly once"
            assert elsewhere.restored_records == offset - newest, "the newest snapshot, then the changelog after it"
    assert len(stored.offsets()) >= 2, "the background wrote snapshots between the kills"
    for offset in stored.offsets():
        manifest = stored.read(offset)
        assert (manifest.offset + 1) % per_commit == 0, "a snapshot holds whole commits"
        assert manifest.stream_time == BASE + (manifest.offset + 1) // per_commit * MINUTE - MINUTE

"""transform_with_state's event-time watermarks and idle-timer records with the changelogs on an
object store (moto's S3 through s3fs), without Spark: the partitions' event-time stores are
driven through the exactly-once protocol as a query's tasks drive them, and the watermarks read
from S3 must equal those read from a file-system changelog; a crashed attempt's unrecorded
record never counts; a process reads each object once; the tick source's records on S3 give each
partition's newest. (The same end to end in Spark: tests/spark/processor/test_remote_timers.py.)"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from kstate import Stores, _core
from kstate.log import remote as remote_module
from kstate.log.object_store import ObjectStore
from kstate.log.remote import RemoteChangelog
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.processor import ticks, watermarks
from kstate.spark.processor.processor import EVENT_TIME, _tracking_event_time
from kstate.spark.processor.watermarks import query_watermarks
from kstate.spark.rescale import rescale
from kstate.spark.routing.partitioning import Partitioning
from kstate.store_lifecycle import native_store

DELAY = 5_000
PARTITIONS = 2
# Event times (ms) per batch and partition: late rows (below the previous batch's watermark),
# a partition without input, and one that only sees event times from batch 2 on.
EVENTS = [
    {0: [30_000, 12_000], 1: []},
    {0: [10_000], 1: []},
    {0: [40_000], 1: [20_000, 90_000]},
    {0: [80_000], 1: [85_000]},
    {0: [], 1: [100_000]},
    {0: [130_000], 1: [1_000]},
    {0: [], 1: []},
]


@pytest.fixture(autouse=True)
def cold_process(monkeypatch):
    """Each test starts as a new process would: nothing read yet."""
    monkeypatch.setattr(watermarks, "_KNOWN", {})


def backend_at(location, state_dir, options=None):
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store(EVENT_TIME), "bytes", "bytes")
    return StateBackend(
        [store], state_dir, location, "app", keys=["key"], lock_timeout=5, changelog_storage_options=options,
        key_codecs={EVENT_TIME: "event-time"},
    )  # fmt: skip


def run_task(backend, batch, partition, times, attempt=0):
    """One task of ``batch``: its watermarks (read first, as a task does), then its rows tracked."""
    layout = backend.current_layout()
    late, watermark = query_watermarks(layout, batch, DELAY, backend.partitioning_log().current())

    def fn(stores):
        rows = pa.record_batch({"ts": pa.array(times, pa.int64())})
        tracked = _tracking_event_time(iter([rows]), "ts", stores[EVENT_TIME], batch, late)
        yield sum(b.num_rows for b in tracked)

    kept = list(backend.run(fn, TaskInfo(partition, batch, attempt), layout))[0]
    return late, watermark, kept


def run_query(backend, batches=EVENTS):
    """Every batch's tasks in order; ``(late, watermark, rows kept)`` per batch and partition."""
    wanted = Partitioning(PARTITIONS, (("key", "string"),), stores=backend.store_descriptions())
    backend.partitioning_log().establish(wanted)
    return [[run_task(backend, b, p, events[p]) for p in range(PARTITIONS)] for b, events in enumerate(batches)]


def expected_watermarks(batches=EVENTS):
    """Spark's two watermarks of each batch, from the event times alone."""
    out, largest, watermarks_so_far = [], None, [0]
    for events in batches:
        out.append((watermarks_so_far[-2] if len(watermarks_so_far) > 1 else 0, watermarks_so_far[-1]))
        times = [t for p in events.values() for t in p]
        if times:
            largest = max([largest or 0, *times])
        watermarks_so_far.append(max(watermarks_so_far[-1], 0 if largest is None else max(0, largest - DELAY)))
    return out


def test_watermarks_from_s3_equal_those_from_a_file_system_batch_by_batch(s3, tmp_path):
    on_s3 = run_query(backend_at(s3.url, tmp_path / "s3-state", s3.storage_options))
    local = run_query(backend_at(tmp_path / "changelog", tmp_path / "local-state"))
    assert on_s3 == local
    assert [batch[0][:2] for batch in on_s3] == expected_watermarks()
    assert all(len({task[:2] for task in batch}) == 1 for batch in on_s3), "every task of a batch agrees"
    assert on_s3[1][0][2] == 1 and on_s3[5][1][2] == 0, "rows at or below the previous watermark dropped"
    # A new process (another executor) reads the same from S3, for every batch, replays included.
    fresh = backend_at(s3.url, tmp_path / "other-state", s3.storage_options)
    record = fresh.partitioning_log().current()
    for batch, expected in enumerate(expected_watermarks()):
        watermarks._KNOWN.clear()
        assert query_watermarks(fresh.current_layout(), batch, DELAY, record) == expected, batch
    for batch, expected in reversed(list(enumerate(expected_watermarks()))):  # what it read, then further back
        assert query_watermarks(fresh.current_layout(), batch, DELAY, record) == expected, batch


def test_a_replayed_batch_sees_its_watermarks_again(s3, tmp_path):
    backend = backend_at(s3.url, tmp_path / "state", s3.storage_options)
    first = run_query(backend, EVENTS[:4])
    again = [run_task(backend, 3, p, EVENTS[3][p]) for p in range(PARTITIONS)]  # rolled back, redone
    assert again == first[3]
    assert run_task(backend, 4, 0, EVENTS[4][0])[:2] == expected_watermarks()[4]


def test_an_unrecorded_attempt_never_raises_the_watermark(s3, tmp_path):
    """A crashed attempt published its event-time commit object (a record far in the future) but
    no batch log entry: no task counts it, neither while it lies there nor once a retry of the
    batch voided it and published another object under the same name."""
    backend = backend_at(s3.url, tmp_path / "state", s3.storage_options)
    run_query(backend, EVENTS[:3])
    expected = expected_watermarks()
    assert run_task(backend, 3, 0, EVENTS[3][0])[:2] == expected[3]

    crashed = backend.partition_state(TaskInfo(1, 3, 7))
    stores = crashed.open()
    stores[EVENT_TIME].put(_core.LATEST_EVENT_TIME_KEY, _core.event_time_record(3, 10**12))
    native_store(stores[EVENT_TIME]).publish(0)  # the object exists, no batch log entry records it
    crashed.abort()
    objects = RemoteChangelog(s3.url, f"app-{EVENT_TIME}-changelog", 1, s3.storage_options).list()
    unrecorded = objects[-1].name
    record = backend.partitioning_log().current()
    for cold in (False, True):
        if cold:
            watermarks._KNOWN.clear()
        assert query_watermarks(backend.current_layout(), 4, DELAY, record) == expected[4], "before the retry"

    retry = run_task(backend, 3, 1, EVENTS[3][1], attempt=8)  # voids and deletes it, publishes its own
    assert retry[:2] == expected[3]
    names = [o.name for o in RemoteChangelog(s3.url, f"app-{EVENT_TIME}-changelog", 1, s3.storage_options).list()]
    assert unrecorded in names, "the retry's commit object has the crashed one's name"
    assert query_watermarks(backend.current_layout(), 4, DELAY, record) == expected[4], "warm"
    watermarks._KNOWN.clear()
    assert query_watermarks(backend.current_layout(), 4, DELAY, record) == expected[4], "cold"


def test_a_rescale_on_s3_keeps_every_batchs_watermarks(s3, tmp_path):
    """A rescale writes the event-time history of every earlier batch into one partition of the
    new generation (records that are not a running maximum): read from S3, cold or not, each
    batch's watermarks stay what they were, and the batches after it go on from them."""
    backend = backend_at(s3.url, tmp_path / "state", s3.storage_options)
    run_query(backend, EVENTS[:5])
    rescale(s3.url, "app", 3, storage_options=s3.storage_options)
    rescaled = backend_at(s3.url, tmp_path / "rescaled", s3.storage_options)
    layout, record = rescaled.current_layout(), rescaled.partitioning_log().current()
    assert layout.application_id == "app-gen1" and record.num_partitions == 3
    expected = expected_watermarks()
    for batch in range(5):
        watermarks._KNOWN.clear()
        assert query_watermarks(layout, batch, DELAY, record) == expected[batch], batch
    for batch in reversed(range(6)):
        assert query_watermarks(layout, batch, DELAY, record) == expected[batch], batch
    late, watermark, _ = run_task(rescaled, 5, 2, EVENTS[5][0])
    assert (late, watermark) == expected[5]
    assert query_watermarks(layout, 6, DELAY, record) == expected[6]


class Requests:
    """Counts ``ObjectStore`` listings and fetches."""

    def __init__(self, monkeypatch):
        self.lists, self.fetches = [], []
        for name, seen in (("list", self.lists), ("fetch", self.fetches)):
            original = getattr(ObjectStore, name)

            def counted(store, key, *args, _original=original, _seen=seen):
                _seen.append(key)
                return _original(store, key, *args)

            monkeypatch.setattr(ObjectStore, name, counted)

    def take(self):
        out = (list(self.lists), list(self.fetches))
        self.lists.clear()
        self.fetches.clear()
        return out


def test_a_batch_costs_one_listing_per_partition_and_its_new_objects(s3, tmp_path, monkeypatch):
    backend = backend_at(s3.url, tmp_path / "state", s3.storage_options)
    run_query(backend, EVENTS[:6])
    layout, record = backend.current_layout(), backend.partitioning_log().current()
    requests = Requests(monkeypatch)
    watermarks._KNOWN.clear()

    # A process that read nothing yet: per partition the batch log listed, the head entry, the
    # changelog listed, and objects from the newest back to one of a batch before N - 1 (not all six).
    query_watermarks(layout, 6, DELAY, record)
    lists, fetches = requests.take()
    assert sorted(lists) == sorted(
        [f"app-kstate-batches-{p}" for p in range(PARTITIONS)]
        + [f"app-{EVENT_TIME}-changelog-{p}" for p in range(PARTITIONS)]
    )
    changelog_fetches = [f for f in fetches if EVENT_TIME in f]
    assert len(changelog_fetches) <= 2 * PARTITIONS, changelog_fetches

    # Asked again with nothing new: one listing per partition, nothing fetched.
    assert query_watermarks(layout, 6, DELAY, record) == expected_watermarks()[6]
    lists, fetches = requests.take()
    assert sorted(lists) == [f"app-kstate-batches-{p}" for p in range(PARTITIONS)] and fetches == []

    # The next batch (its tasks in other processes): one listing per partition, its new head
    # entry and its new commit object.
    this_process = watermarks._KNOWN
    monkeypatch.setattr(watermarks, "_KNOWN", {})
    for p in range(PARTITIONS):
        run_task(backend, 6, p, EVENTS[6][p])
    monkeypatch.setattr(watermarks, "_KNOWN", this_process)
    requests.take()
    assert query_watermarks(layout, 7, DELAY, record) == expected_watermarks([*EVENTS, {}])[7]
    lists, fetches = requests.take()
    assert sorted(lists) == [f"app-kstate-batches-{p}" for p in range(PARTITIONS)]
    assert sorted(f.split("/")[0] for f in fetches) == sorted(
        [f"app-kstate-batches-{p}" for p in range(PARTITIONS)]
        + [f"app-{EVENT_TIME}-changelog-{p}" for p in range(PARTITIONS)]
    ), fetches


def test_tick_records_on_s3_give_each_partitions_newest(s3, monkeypatch):
    records = ticks.RemoteTickRecords(s3.url, "app-kstate-timers", s3.storage_options)
    records.write(0, 0, {"next_timer": 5, "watermark": 0, "largest": None})
    records.write(1, 0, {"next_timer": None, "watermark": 0, "largest": None})
    records.write(0, 1, {"next_timer": 9, "watermark": 0, "largest": None})
    listed = sorted(records.store.list("app-kstate-timers"))
    assert [n.split("-")[:3] for n in listed] == [["part", "0", f"{1:020d}"], ["part", "1", f"{0:020d}"]]
    assert sorted(r["next_timer"] or 0 for r in records.records()) == [0, 9]
    assert ticks.records_need_batch(records.records(), "ProcessingTime", 0, 9)
    assert not ticks.records_need_batch(records.records(), "ProcessingTime", 0, 8)

    # Two attempts of one batch: the later written counts; the next batch deletes both.
    records.write(1, 1, {"next_timer": 100, "watermark": 0, "largest": None})
    time.sleep(0.002)
    records.write(1, 1, {"next_timer": 50, "watermark": 0, "largest": None})
    assert sorted(r["next_timer"] for r in records.records()) == [9, 50]

    # Each name is fetched once; one deleted between the listing and its fetch is skipped.
    requests = Requests(monkeypatch)
    reader = ticks.RemoteTickRecords(s3.url, "app-kstate-timers", s3.storage_options)
    assert len(reader.records()) == 2
    assert len(reader.records()) == 2
    lists, fetches = requests.take()
    assert len(lists) == 2 and len(fetches) == 3, fetches
    records.write(0, 2, {"next_timer": 1, "watermark": 0, "largest": None})
    newest = [n for n in records.store.list("app-kstate-timers") if n.startswith(f"part-0-{2:020d}")]
    original = ObjectStore.fetch

    def vanishing(store, key, path):
        if key.endswith(newest[0]):
            raise FileNotFoundError(key)
        return original(store, key, path)

    monkeypatch.setattr(ObjectStore, "fetch", vanishing)
    assert sorted(r["next_timer"] for r in reader.records()) == [50], "partition 0 read at the next trigger"
    monkeypatch.setattr(ObjectStore, "fetch", original)
    assert sorted(r["next_timer"] for r in reader.records()) == [1, 50]
    records.write(1, 2, {"next_timer": None, "watermark": 0, "largest": None})
    assert len(records.store.list("app-kstate-timers")) == 2, "older records deleted"


def test_a_replay_after_a_compaction_sees_its_watermarks_again(s3, tmp_path, monkeypatch):
    """The soak's find: a batch's commit compacted the event-time changelog, then the query
    restarted and replayed that batch. Had compaction kept only the latest record (the batch
    itself), the replay's late-row watermark, read from the batches before it, would have been 0
    and late rows would have counted. Commits leave the newest objects whole."""
    monkeypatch.setattr(remote_module, "COMPACT_AFTER_COMMITS", 2)
    batches = [{0: [10_000 * (b + 1)], 1: [10_000 * (b + 1) + 5_000, 1_000]} for b in range(12)]
    backend = backend_at(s3.url, tmp_path / "state", s3.storage_options)
    first = run_query(backend, batches)
    assert [batch[0][:2] for batch in first] == expected_watermarks(batches)
    objects = RemoteChangelog(s3.url, f"app-{EVENT_TIME}-changelog", 0, s3.storage_options).list()
    assert any(o.last is not None for o in objects), "the event-time changelog was compacted"
    watermarks._KNOWN.clear()  # the restarted query's tasks run in new Python workers
    again = [run_task(backend, 11, p, batches[11][p]) for p in range(PARTITIONS)]  # rolled back, redone
    assert again == first[11]

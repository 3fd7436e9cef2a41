"""Exact row counts of window and session stores (``numRowsTotal`` and the writes of a commit)
without Spark: tasks driven with explicit ``TaskInfo``s through batches whose stream time hides
entries, drops whole segments and drops late puts, a replayed batch, a partition that moves and
one whose local state is lost. After every batch each store's count equals a count of its state
read back, and its writes equal its changelog records of the batch."""

import shutil
import time

import pytest

from kstate import Stores
from kstate.log.files import read_log
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol.row_counts import ROW_COUNTS_FILE
from kstate.windowed import Windowed

RETENTION = 120_000
"""Segments of 60 s: a write at t hides everything older than t - 120 s + 1 ms and expires the
segments wholly before it."""
WINDOW = 10_000
STORES = ("windows", "sessions")
BASE = int(time.time() * 1000) // 600_000 * 600_000 - 3_600_000
"""An hour ago, on a segment boundary: the changelogs keep records a day after their timestamp
by the clock, as Kafka's brokers do."""


@pytest.fixture
def backend(tmp_path):
    windows = Stores.window_store_builder(
        Stores.persistent_window_store("windows", RETENTION, WINDOW), "string", "int64"
    )
    sessions = Stores.session_store_builder(Stores.persistent_session_store("sessions", RETENTION), "string", "int64")
    return StateBackend([windows, sessions], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5)


BATCHES = [
    # (window puts: key, start, value or None; session puts: key, start, end, value or None),
    # times after BASE
    ([("k1", 0, 1), ("k2", 0, 1), ("k3", 10_000, 1)], [("a", 0, 5_000, 1), ("b", 1_000, 2_000, 1)]),
    ([("k1", 0, 2), ("k2", 0, None), ("k4", 70_000, 1)], [("b", 1_000, 2_000, None), ("c", 60_000, 65_000, 1)]),
    # Stream time 130 s: windows before 10,001 ms and sessions ending before 6,001 ms are hidden.
    ([("k5", 130_000, 1)], [("d", 125_000, 126_000, 1)]),
    # Stream time 190 s: segment 0 expires; k7 at 5 s is dropped; k8 at 65 s lands in a live
    # segment but older than reads show: stored and published, hidden at once.
    ([("k6", 190_000, 1), ("k7", 5_000, 1), ("k8", 65_000, 1)], [("e", 180_000, 185_000, 1)]),
    ([("k6", 190_000, None), ("k9", 195_000, 1)], [("d", 125_000, 126_000, None), ("e", 180_000, 185_000, 2)]),
]


def run_batch(backend, batch, attempt=0):
    """One task of partition 0 writing batch ``batch`` of ``BATCHES``; its stores' figures."""
    window_puts, session_puts = BATCHES[batch]
    timings = []

    def fn(stores):
        for key, start, value in window_puts:
            stores["windows"].put(key, value, BASE + start)
        for key, start, end, value in session_puts:
            stores["sessions"].put(Windowed(key, BASE + start, BASE + end), value)
        yield None

    list(backend.run(fn, TaskInfo(0, batch, attempt), committed=timings.append))
    return timings[0]


def state_counts(backend):
    """Each store's entries, read back as a reader of the state sees them."""
    state = backend.partition_state(TaskInfo(0, 10_000))
    stores = state.open(read_only=True)
    try:
        with stores["windows"].all() as windows, stores["sessions"].fetch(None, None) as sessions:
            return {"windows": sum(1 for _ in windows), "sessions": sum(1 for _ in sessions)}
    finally:
        state.close_view()


class Changelogs:
    """The stores' changelog records since the last call: per store, the records with a value,
    the tombstones of keys that held one, and the keys' and values' bytes."""

    def __init__(self, backend):
        self.dirs = {name: backend.layout.changelog_partition_dir(name, 0) for name in STORES}
        self.read_to = dict.fromkeys(STORES, 0)
        self.stored = {name: {} for name in STORES}

    def next_batch(self):
        out = {}
        for name, directory in self.dirs.items():
            updated = removed = size = 0
            for batch in read_log(directory, self.read_to[name]):
                rows = zip(*(batch.column(c).to_pylist() for c in ("key", "value", "offset")))
                for key, value, offset in rows:
                    if value is None:
                        removed += self.stored[name].pop(key, None) is not None
                    else:
                        updated += 1
                        self.stored[name][key] = value
                    size += len(key) + len(value or b"")
                    self.read_to[name] = offset + 1
            out[name] = (updated, removed, size)
        return out


def check(timings, backend, changelogs):
    counts = state_counts(backend)
    written = changelogs.next_batch()
    for name in STORES:
        figures = timings.stores[name]
        assert figures.rows_total == counts[name], (name, figures, counts)
        assert (figures.rows_updated, figures.rows_removed, figures.changelog_bytes) == written[name], name
    return counts


def test_every_batch_counts_what_a_reader_of_the_state_sees(backend):
    changelogs = Changelogs(backend)
    seen = [check(run_batch(backend, batch), backend, changelogs) for batch in range(len(BATCHES))]
    assert seen == [
        {"windows": 3, "sessions": 2},
        {"windows": 3, "sessions": 2},
        {"windows": 2, "sessions": 2},  # k1, k3 and session a hidden; k4, k5; c, d
        {"windows": 2, "sessions": 2},  # k4 hidden, k7 dropped, k8 hidden; k5, k6; d, e (c hidden)
        {"windows": 2, "sessions": 1},
    ]


def test_a_replayed_batch_counts_its_rollback_and_the_redo(backend):
    changelogs = Changelogs(backend)
    for batch in range(4):
        check(run_batch(backend, batch), backend, changelogs)
    again = run_batch(backend, 3, attempt=1)  # Spark replays batch 3: rolled back, then redone
    counts = state_counts(backend)
    written = changelogs.next_batch()
    assert again.rolled_back_batches == 1
    for name in STORES:
        figures = again.stores[name]
        assert figures.rows_total == counts[name]
        # The rollback's records (the undo values) and the redo's: every byte published.
        assert figures.changelog_bytes == written[name][2] > 0, name


def test_counts_survive_a_move_a_lost_counts_file_and_lost_local_state(backend, tmp_path):
    changelogs = Changelogs(backend)
    check(run_batch(backend, 0), backend, changelogs)
    check(run_batch(backend, 1), backend, changelogs)
    backend.release_local_state([0])  # another worker takes the partition: the recorded counts
    check(run_batch(backend, 2), backend, changelogs)
    task_dir = backend.layout.task_dir(0)
    backend.release_local_state([0])
    (task_dir / ROW_COUNTS_FILE).unlink()  # counted again by a scan
    check(run_batch(backend, 3), backend, changelogs)
    backend.release_local_state([0])
    shutil.rmtree(tmp_path / "state")  # restored from the changelogs, then counted by a scan
    timings = run_batch(backend, 4)
    assert timings.restored_records > 0
    assert check(timings, backend, changelogs) == {"windows": 2, "sessions": 1}


def test_a_key_value_store_on_a_new_executor_takes_its_count_from_the_batch_log(tmp_path, monkeypatch):
    """Spark keeps ``numRowsTotal`` in its checkpoint; kstate in the batch log entry: a partition
    restored with no local state, and a batch replayed there, are counted without a scan."""
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")

    def executor(name):
        return StateBackend([counts], tmp_path / name, tmp_path / "changelog", "app", lock_timeout=5)

    writes = [
        {f"k{i}": i for i in range(10)},
        {"k0": None, "k1": None, "k2": None, **{f"k{i}": i for i in range(10, 15)}},
        {"k3": None, "k15": 15, "k4": 40},
    ]

    def run(backend, batch, attempt=0):
        def fn(stores):
            for key, value in writes[batch].items():
                if value is None:
                    stores["counts"].delete(key)
                else:
                    stores["counts"].put(key, value)
            yield None

        timings = []
        list(backend.run(fn, TaskInfo(0, batch, attempt), committed=timings.append))
        return timings[0].stores["counts"]

    first = executor("a")
    assert [run(first, batch).rows_total for batch in (0, 1)] == [10, 12]
    first.release_local_state([0])

    def no_scan(store):
        raise AssertionError("counted by a scan")

    monkeypatch.setattr("kstate.spark.protocol.row_counts.scan_count", no_scan)
    second = executor("b")  # no local state: restored from the changelog
    assert run(second, 2).rows_total == 12
    assert run(second, 2, attempt=1).rows_total == 12, "replayed: rolled back to batch 1's count, redone"
    state = second.partition_state(TaskInfo(0, 10_000))
    stores = state.open(read_only=True)
    try:
        with stores["counts"].all() as entries:
            assert len(dict(entries)) == 12
    finally:
        state.close_view()

"""An application's state written through kstate.spark's exactly-once protocol without Spark,
and the same state in plain Python, for the replica's tests.

Each micro-batch is rows of keys and event times, routed as Spark's ``repartition(n, "key")``
routes them (``partition_ids``), one task per partition (``StateBackend.process``: every task
checks its rows and records the partitioning), into four stores: counts per key (a key-value
store; a count reaching a multiple of ``DELETE_EVERY`` is deleted, so changelogs hold
tombstones), counts per key and minute (a window store), one session per row (a session store)
and the latest event per key (a timestamped key-value store). ``State.after(batch)`` is what they
hold after that batch, computed in plain Python from the same rows."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kstate import Stores, Windowed
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.routing.hashing import partition_ids

DAY = 86_400_000
MINUTE = 60_000
TODAY = time.time_ns() // 1_000_000 // DAY * DAY
"""Event times are today's: window changelogs delete records older than retention by the clock."""
KEYS = 30
DELETE_EVERY = 4


def rows_of(batch: int, garbage: bool = False) -> pa.Table:
    """The rows of micro-batch ``batch``: a few dozen keys, uneven, a few minutes apart. The
    ``garbage`` rows are what a first attempt Spark replays wrote: other keys, other times."""
    count = 40 + 7 * (batch % 5)
    keys = [f"user-{(batch * 11 + i * i + (17 if garbage else 0)) % KEYS}" for i in range(count)]
    times = [TODAY + batch * 3 * MINUTE + (i % 9) * 13_000 + (500_000 if garbage else 0) for i in range(count)]
    return pa.table({"key": keys, "ts": pa.array(times, pa.int64())})


def builders(**logging: Any) -> list:
    """The four stores; ``logging``: topic configs of their changelogs."""
    made = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64"),
        Stores.window_store_builder(
            Stores.persistent_window_store("per_minute", retention_ms=10 * DAY, window_size_ms=MINUTE),
            "string",
            "int64",
        ),
        Stores.session_store_builder(Stores.persistent_session_store("visits", 10 * DAY), "string", "int64"),
        Stores.timestamped_key_value_store_builder(
            Stores.persistent_timestamped_key_value_store("latest"), "string", "int64"
        ),
    ]
    return [b.with_logging_enabled(logging) for b in made] if logging else made


def count_everything(batches: Any, stores: Any) -> Any:
    counts, windows, sessions, latest = stores["counts"], stores["per_minute"], stores["visits"], stores["latest"]
    for batch in batches:
        for key, ts in zip(batch.column("key").to_pylist(), batch.column("ts").to_pylist()):
            count = (counts.get(key) or 0) + 1
            counts.put(key, None if count % DELETE_EVERY == 0 else count)
            latest.put(key, ts % 1000, timestamp=ts)
            start = ts // MINUTE * MINUTE
            windows.put(key, (windows.fetch(key, start) or 0) + 1, window_start=start)
            sessions.put(Windowed(key, ts, ts), 1)
        yield batch.num_rows


@dataclass
class State:
    """An application's state after some batch, as plain Python."""

    counts: dict[str, int] = field(default_factory=dict)
    windows: dict[tuple[str, int], int] = field(default_factory=dict)
    sessions: set[tuple[str, int]] = field(default_factory=set)
    latest: dict[str, int] = field(default_factory=dict)

    def apply(self, rows: pa.Table) -> None:
        for key, ts in zip(rows.column("key").to_pylist(), rows.column("ts").to_pylist()):
            count = self.counts.get(key, 0) + 1
            if count % DELETE_EVERY == 0:
                del self.counts[key]
            else:
                self.counts[key] = count
            self.latest[key] = ts % 1000
            start = ts // MINUTE * MINUTE
            self.windows[(key, start)] = self.windows.get((key, start), 0) + 1
            self.sessions.add((key, ts))


class Application:
    """The state of application ``app`` with its changelogs at ``changelog_dir`` (a directory or
    an object store URL), in ``partitions`` partitions (see the module docstring)."""

    def __init__(self, state_dir, changelog_dir, partitions=3, storage_options=None, **logging):
        self.state_dir = state_dir
        self.changelog_dir = changelog_dir
        self.partitions = partitions
        self.storage_options = storage_options
        self.logging = logging
        self.batches: list[int] = []
        """The batches run, in order (a replay of a batch is not run twice here)."""

    def backend(self, partitions=None):
        return StateBackend(
            builders(**self.logging),
            self.state_dir,
            self.changelog_dir,
            "app",
            keys=["key"],
            num_partitions=partitions or self.partitions,
            changelog_storage_options=self.storage_options,
            lock_timeout=30,
        )

    def partition_of(self, key: str) -> int:
        return int(partition_ids([pa.array([key])], self.partitions)[0])

    def run(self, batch: int, garbage: bool = False, attempt: int = 0, only: set[int] | None = None) -> None:
        """Micro-batch ``batch`` in every partition (or those in ``only``), as Spark runs it;
        ``garbage``: an attempt with other rows, which a replay of the batch must undo."""
        table = rows_of(batch, garbage)
        ids = partition_ids([table.column("key")], self.partitions)
        if not garbage and batch not in self.batches:
            self.batches.append(batch)  # before a replica can name it (the reference must know it)
        backend = self.backend()
        for p in range(self.partitions):
            if only is None or p in only:
                rows = table.filter(pa.array(ids == p)).to_batches(max_chunksize=16)
                list(backend.process(count_everything, rows, TaskInfo(p, batch, attempt)))

    def rescale(self, partitions: int) -> None:
        from kstate.spark.rescale import rescale

        rescale(self.changelog_dir, "app", partitions, storage_options=self.storage_options)
        self.partitions = partitions

    def state_after(self, batch: int) -> State:
        """The state after ``batch`` (-1: before any): every batch run up to it, in order."""
        state = State()
        for run in self.batches:
            if run <= batch:
                state.apply(rows_of(run))
        return state

"""kstate's work per micro-batch in a streaming query's progress.

Each task's ``Timings`` (seconds restoring, rolling back, opening, committing; the stores' rows,
writes, memory and disk after the commit) become the task's ``figures``: flat names, Spark's
where the meaning is Spark's (``numRowsTotal``, ``commitTimeMs``, ...), kstate's own beside them,
and per store ``<store>.<figure>``. Summed over a batch's tasks they reach the query's progress as
its observed metrics (``kstate.spark.engine.observed``). ``report_progress`` (classic Spark only)
still sums timings through an accumulator keyed by query run and batch."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from kstate.memory import memory_usage
from kstate.spark.protocol.row_counts import RowCounts

if TYPE_CHECKING:
    from kstate.spark.protocol.task import TaskInfo
    from kstate.store_lifecycle import StoreLifecycle

log = logging.getLogger("kstate.spark")


@dataclass
class StoreFigures:
    """One store of a task after its commit. ``rows_total`` ``None``: not counted (a task
    without ``kstate.spark.protocol.row_counts``)."""

    rows_total: int | None = None
    rows_updated: int = 0
    rows_removed: int = 0
    changelog_bytes: int = 0
    disk_bytes: int = 0
    memory_bytes: int = 0
    """RocksDB's memtables and table readers, staged writes, kstate's read cache (the block
    cache is the process's, shared: ``Timings.memory_in_use``)."""


@dataclass
class Timings:
    """Seconds spent in kstate for one task: opening (locks, restore, rollback), of which
    opening the stores and restoring them from their changelogs, the task's work between open
    and commit, and committing; and its stores after the commit."""

    open: float = 0.0
    commit: float = 0.0
    restore: float = 0.0
    restored_records: int = 0
    rolled_back_batches: int = 0
    state_disk_bytes: int = 0
    """Files of the partition's stores after the commit."""
    memory_in_use: int = 0
    """The worker process's memory budget in use after the commit (``kstate.memory``)."""
    rss: int = 0
    open_files: int = 0
    updates: float = 0.0
    """Seconds between open and commit: the function's work on its input and the stores."""
    stores: dict[str, StoreFigures] = field(default_factory=dict)

    def sample_memory(self, stores: dict[str, StoreLifecycle], row_counts: RowCounts | None = None) -> None:
        """Records each store's rows, writes, memory and disk and the process's memory, as the
        commit left them."""
        self.stores = {}
        for name, store in stores.items():
            if not store.is_open:
                continue
            metrics = store.metrics()
            memory = sum(metrics[part] for part in ("memtables", "table_readers", "staged", "read_cache"))
            figures = StoreFigures(disk_bytes=metrics["disk_bytes"], memory_bytes=memory)
            if row_counts is not None and name in row_counts.totals:
                writes = row_counts.writes.get(name)
                figures.rows_total = row_counts.totals[name]
                if writes is not None:
                    figures.rows_updated, figures.rows_removed = writes.updated, writes.removed
                    figures.changelog_bytes = writes.bytes
                figures.changelog_bytes += row_counts.rolled_back_bytes.get(name, 0)
            self.stores[name] = figures
        self.state_disk_bytes = sum(figures.disk_bytes for figures in self.stores.values())
        usage = memory_usage(stores=False)
        self.memory_in_use, self.rss, self.open_files = usage["in_use"], usage["rss"], usage["open_files"]


@dataclass(frozen=True)
class BatchProgress:
    """kstate's share of one micro-batch, over all its tasks (a retried task counts again)."""

    batch_id: int
    tasks: int
    restored_records: int
    restore_seconds: float
    rolled_back_batches: int
    open_seconds: float
    commit_seconds: float
    state_disk_bytes: int = 0
    """The batch's partitions' stores on disk after their commits (summed over tasks)."""
    max_memory_in_use: int = 0
    """The largest memory budget use of a worker after a commit (``kstate.memory.memory_usage``)."""
    max_rss: int = 0
    max_open_files: int = 0
    run_id: str | None = None
    """The streaming query run the batch belongs to (``StreamingQueryProgress.runId``)."""


@dataclass
class ProcessorCounts:
    """What a ``transform_with_state`` task counts beside its stores."""

    timers_fired: int = 0
    rows_dropped_by_watermark: int = 0


STATE_FIGURES = (
    "numRowsTotal",
    "numRowsUpdated",
    "numRowsRemoved",
    "commitTimeMs",
    "allUpdatesTimeMs",
    "memoryUsedBytes",
    "numRowsDroppedByWatermark",
    "numShufflePartitions",
    "numTasks",
    "openTimeMs",
    "restoredRecords",
    "restoreTimeMs",
    "rolledBackBatches",
    "changelogBytesPublished",
    "timersFired",
    "stateBytesOnDisk",
)
"""A batch's figures over all its stores: Spark's names (``StateOperatorProgress``) first, then
kstate's own."""
STORE_FIGURES = (
    "numRowsTotal",
    "numRowsUpdated",
    "numRowsRemoved",
    "changelogBytesPublished",
    "stateBytesOnDisk",
    "memoryUsedBytes",
)
"""Each store's figures, named ``<store>.<figure>``."""
LARGEST = frozenset({"numShufflePartitions"})
"""Figures whose batch value is the largest of its tasks' (every task names the same count), not their sum."""


def task_figures(timings: Timings, partitions: int, counts: ProcessorCounts | None = None) -> dict[str, int]:
    """One committed task's figures (``figure_names``); summed over a batch's tasks they are the batch's."""
    counts = counts or ProcessorCounts()
    stores = timings.stores.values()
    figures = {
        "numRowsTotal": sum(s.rows_total or 0 for s in stores),
        "numRowsUpdated": sum(s.rows_updated for s in stores),
        "numRowsRemoved": sum(s.rows_removed for s in stores),
        "commitTimeMs": round(timings.commit * 1000),
        "allUpdatesTimeMs": round(timings.updates * 1000),
        "memoryUsedBytes": sum(s.memory_bytes for s in stores),
        "numRowsDroppedByWatermark": counts.rows_dropped_by_watermark,
        "numShufflePartitions": partitions,
        "numTasks": 1,
        "openTimeMs": round(timings.open * 1000),
        "restoredRecords": timings.restored_records,
        "restoreTimeMs": round(timings.restore * 1000),
        "rolledBackBatches": timings.rolled_back_batches,
        "changelogBytesPublished": sum(s.changelog_bytes for s in stores),
        "timersFired": counts.timers_fired,
        "stateBytesOnDisk": timings.state_disk_bytes,
    }
    for name, store in timings.stores.items():
        figures[f"{name}.numRowsTotal"] = store.rows_total or 0
        figures[f"{name}.numRowsUpdated"] = store.rows_updated
        figures[f"{name}.numRowsRemoved"] = store.rows_removed
        figures[f"{name}.changelogBytesPublished"] = store.changelog_bytes
        figures[f"{name}.stateBytesOnDisk"] = store.disk_bytes
        figures[f"{name}.memoryUsedBytes"] = store.memory_bytes
    return figures


_SUMS = ("tasks", "open", "commit", "restore", "restored_records", "rolled_back_batches", "state_disk_bytes")
_MAXIMA = ("memory_in_use", "rss", "open_files")


class BatchSumsParam:
    """An accumulator of ``{(run id, batch id): [sums..., maxima...]}`` (Spark's
    ``AccumulatorParam`` interface): each task adds its batch's row, so a batch's totals do not
    depend on when its progress event reaches the driver (events are delivered asynchronously,
    queries may run side by side)."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:  # noqa: N802
        for key, row in value2.items():
            old = value1.get(key)
            if old is None:
                value1[key] = list(row)
                continue
            for i in range(len(_SUMS)):
                old[i] += row[i]
            for i in range(len(_SUMS), len(row)):
                old[i] = max(old[i], row[i])
        return value1


class TaskMetrics:
    """An accumulator the tasks add their ``Timings`` to, by query run and batch; created on the driver."""

    def __init__(self, spark_context: Any):
        self._batches = spark_context.accumulator({}, BatchSumsParam())

    def add(self, task: TaskInfo, timings: Timings) -> None:
        """In a task: adds its timings to its batch's."""
        if task.run_id is None:
            return  # not a streaming query's task: no progress event will ask for it
        row = [1] + [getattr(timings, name) for name in _SUMS[1:] + _MAXIMA]
        self._batches.add({(task.run_id, task.batch_id): row})

    def take(self, run_id: str, batch_id: int) -> dict[str, float]:
        """On the driver: the batch's totals, forgotten once taken (zeros for a batch no kstate task ran in)."""
        row = self._batches.value.pop((run_id, batch_id), None) or [0] * (len(_SUMS) + len(_MAXIMA))
        return dict(zip(_SUMS + _MAXIMA, row))

    def forget_run(self, run_id: str) -> None:
        """On the driver: drops what a terminated run's batches left without a progress event (a failed batch)."""
        batches = self._batches.value
        for key in [key for key in batches if key[0] == run_id]:
            batches.pop(key, None)


def batch_listener(on_progress: Callable[[Any], None], on_terminated: Callable[[Any], None] | None = None) -> Any:
    """A ``StreamingQueryListener`` calling ``on_progress(event)`` after each micro-batch of the
    session's streaming queries (and ``on_terminated(event)`` when one stops)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            on_progress(event)

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            if on_terminated is not None:
                on_terminated(event)

    return Listener()


def progress_listener(metrics: TaskMetrics, reports: list[BatchProgress]) -> Any:
    """A listener that turns each progress event's batch (by query run and batch id) into the
    batch's ``BatchProgress``: appended to ``reports`` and logged."""

    def progressed(event: Any) -> None:
        run_id, batch_id = str(event.progress.runId), event.progress.batchId
        batch = metrics.take(run_id, batch_id)
        report = BatchProgress(
            batch_id=batch_id,
            tasks=int(batch["tasks"]),
            restored_records=int(batch["restored_records"]),
            restore_seconds=batch["restore"],
            rolled_back_batches=int(batch["rolled_back_batches"]),
            open_seconds=batch["open"],
            commit_seconds=batch["commit"],
            state_disk_bytes=int(batch["state_disk_bytes"]),
            max_memory_in_use=int(batch["memory_in_use"]),
            max_rss=int(batch["rss"]),
            max_open_files=int(batch["open_files"]),
            run_id=run_id,
        )
        reports.append(report)
        log.info(
            "query %s batch %d: kstate restored %d records in %.2f s, rolled back %d batches; "
            "open %.2f s, commit %.2f s over %d tasks; state %.1f MiB on disk, worker memory "
            "budget in use up to %.1f MiB (RSS %.1f MiB, %d open files)",
            event.progress.name or event.progress.id,
            report.batch_id,
            report.restored_records,
            report.restore_seconds,
            report.rolled_back_batches,
            report.open_seconds,
            report.commit_seconds,
            report.tasks,
            report.state_disk_bytes / 2**20,
            report.max_memory_in_use / 2**20,
            report.max_rss / 2**20,
            report.max_open_files,
        )

    return batch_listener(progressed, lambda event: metrics.forget_run(str(event.runId)))

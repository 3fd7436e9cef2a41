"""kstate's work per micro-batch in a streaming query's progress: what the tasks spent restoring,
rolling back, opening and committing, summed over a batch's tasks through Spark accumulators
and reported with each progress event of the query (``StateBackend.report_progress``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from kstate.spark.exactly_once import Timings

log = logging.getLogger("kstate.spark")


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


class MaxParam:
    """An accumulator keeping the largest value added (Spark's `AccumulatorParam` interface)."""

    def zero(self, value: int) -> int:
        return 0

    def addInPlace(self, value1: int, value2: int) -> int:  # noqa: N802
        return max(value1, value2)


class TaskMetrics:
    """Accumulators the tasks add their ``Timings`` to; created on the driver."""

    def __init__(self, spark_context: Any):
        self._tasks = spark_context.accumulator(0)
        self._sums = {
            "open": spark_context.accumulator(0.0),
            "commit": spark_context.accumulator(0.0),
            "restore": spark_context.accumulator(0.0),
            "restored_records": spark_context.accumulator(0),
            "rolled_back_batches": spark_context.accumulator(0),
            "state_disk_bytes": spark_context.accumulator(0),
        }
        maxima = ("memory_in_use", "rss", "open_files")
        self._maxima = {name: spark_context.accumulator(0, MaxParam()) for name in maxima}

    def add(self, timings: Timings) -> None:
        """In a task: adds its timings."""
        self._tasks.add(1)
        for name, accumulator in {**self._sums, **self._maxima}.items():
            accumulator.add(getattr(timings, name))

    def totals(self) -> dict[str, float]:
        """On the driver: the sums so far."""
        return {"tasks": self._tasks.value, **{name: acc.value for name, acc in self._sums.items()}}

    def maxima(self) -> dict[str, int]:
        """On the driver: the largest values since the last call (then starts again from 0)."""
        maxima = {name: acc.value for name, acc in self._maxima.items()}
        for acc in self._maxima.values():
            acc.value = 0
        return maxima


def batch_listener(on_progress: Callable[[Any], None], on_started: Callable[[Any], None] | None = None) -> Any:
    """A ``StreamingQueryListener`` calling ``on_progress(event)`` after each micro-batch of the
    session's streaming queries (and ``on_started(event)`` when one starts)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            if on_started is not None:
                on_started(event)

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            on_progress(event)

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            pass

    return Listener()


def progress_listener(metrics: TaskMetrics, reports: list[BatchProgress]) -> Any:
    """A listener that turns the accumulators' growth between two progress events into the
    batch's ``BatchProgress``: appended to ``reports`` and logged."""
    seen = [metrics.totals()]

    def started(event: Any) -> None:
        seen[0] = metrics.totals()
        metrics.maxima()

    def progressed(event: Any) -> None:
        now = metrics.totals()
        delta = {name: now[name] - seen[0][name] for name in now}
        seen[0] = now
        maxima = metrics.maxima()
        report = BatchProgress(
            batch_id=event.progress.batchId,
            tasks=int(delta["tasks"]),
            restored_records=int(delta["restored_records"]),
            restore_seconds=delta["restore"],
            rolled_back_batches=int(delta["rolled_back_batches"]),
            open_seconds=delta["open"],
            commit_seconds=delta["commit"],
            state_disk_bytes=int(delta["state_disk_bytes"]),
            max_memory_in_use=maxima["memory_in_use"],
            max_rss=maxima["rss"],
            max_open_files=maxima["open_files"],
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

    return batch_listener(progressed, started)

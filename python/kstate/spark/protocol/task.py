"""Which partition and micro-batch a Python worker is processing, from Spark's ``TaskContext``."""

from __future__ import annotations

from dataclasses import dataclass

from kstate.errors import InvalidArgumentError

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Set by Structured Streaming on every job of a micro-batch (foreachBatch's jobs too)."""
RUN_ID_PROPERTY = "spark.jobGroup.id"
"""A streaming query runs its batches in a job group named by its run id (new on every start)."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class TaskInfo:
    """The identity of one task attempt, as kstate.spark uses it.

    ``batch_id`` is the unit of exactly-once: the micro-batch, or for a batch job the id the
    backend was given (default 0: a batch job counts as one batch, and running it again redoes
    it). ``attempt`` is Spark's ``taskAttemptId`` (unique in the application); ``run_id`` and
    ``query_id`` only go into the batch log, to tell a person who published what.
    """

    partition: int
    batch_id: int
    attempt: int = 0
    run_id: str | None = None
    query_id: str | None = None

    @classmethod
    def current(cls, default_batch_id: int = 0) -> TaskInfo:
        """The task this Python worker is running (``TaskContext.get()``)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise InvalidArgumentError(
                "no Spark task is running here: kstate.spark functions run inside mapInArrow, mapInPandas "
                "or the grouped helpers"
            )
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        return cls(
            partition=context.partitionId(),
            batch_id=default_batch_id if batch is None else int(batch),
            attempt=context.taskAttemptId(),
            run_id=context.getLocalProperty(RUN_ID_PROPERTY),
            query_id=context.getLocalProperty(QUERY_ID_PROPERTY),
        )

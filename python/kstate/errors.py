"""The exceptions kstate raises. Every failure of a kstate call is a ``KStateError``."""

from __future__ import annotations


class KStateError(Exception):
    """Base class of every kstate error."""


class InvalidStateStoreError(KStateError):
    """The store cannot serve the call in its current state (Kafka's ``InvalidStateStoreException``)."""


class StoreClosedError(InvalidStateStoreError):
    """The store, or the store an iterator or view belongs to, is closed or was never initialized."""


class StoreBehindChangelogError(InvalidStateStoreError):
    """A logged store's offset is below its changelog's start (compaction or retention removed
    what it would replay): its local state is restored from scratch."""


class StateLockTimeoutError(InvalidStateStoreError):
    """Another process held the lock of a task directory or of a changelog partition for longer
    than the wait allowed (kstate.spark: a zombie attempt of the same partition, or a Python
    worker that hangs)."""


class BatchConflictError(KStateError):
    """kstate.spark: another attempt of the same partition and micro-batch (speculation, a
    zombie) published the batch first; this attempt published nothing and gives up."""


class ProcessorStateError(KStateError):
    """RocksDB or the file system failed (Kafka's ``ProcessorStateException``)."""


class RemoteStorageError(ProcessorStateError):
    """The object store holding a remote changelog failed or refused a request (unreachable,
    missing bucket, no permission). A commit that raises it applied nothing locally, and
    retrying it is safe: if the failed attempt did reach the object store after all, the retry
    gets ``CommitConflictError`` and ``recover()`` applies that commit exactly once."""


class CommitConflictError(InvalidStateStoreError):
    """Another writer published to the changelog at this offset first (first writer wins: two
    attempts of the same batch, or a writer that fell behind). Nothing of the commit was applied;
    ``recover()`` drops its writes and brings the store to what the changelog holds (Kafka's
    ``ProducerFencedException``)."""


class CorruptedDataError(KStateError):
    """Bytes read from disk, or received from another instance, do not have the layout their format
    requires."""


class TaskAssignmentError(KStateError):
    """Rebalance metadata that the group protocol cannot reconcile (Kafka's ``TaskAssignmentException``):
    e.g. a subscription newer than a pre-probing leader reads, or an assignment newer than the
    subscription sent."""


class InvalidArgumentError(KStateError, ValueError):
    """An argument or configuration value that can never be valid."""


class StateTypeError(InvalidArgumentError, TypeError):
    """kstate.spark: a typed state value of a type its schema does not accept. A ``TypeError`` too,
    as Spark's type verifier raises one for it (a null where none may be, or an integer out of
    range, is a plain ``InvalidArgumentError``: a ``ValueError``, as Spark's)."""


class InvalidTimestampError(InvalidArgumentError):
    """A log rejected a batch of records whose timestamps are out of the allowed range (Kafka's
    ``INVALID_TIMESTAMP``, error 32); nothing of the batch was written."""


class SerializationError(KStateError, ValueError):
    """A key or value could not be serialized or deserialized by its serde."""


class PartitioningError(KStateError):
    """kstate.spark: rows or a query do not fit how the application's state is partitioned."""


class MisroutedRowsError(PartitioningError):
    """A task got rows whose keys hash to another partition than the one it runs (adaptive query
    execution coalescing partitions, a repartition on other columns or with another count, or
    none): their state is elsewhere. The task commits nothing."""


class PartitioningChangedError(PartitioningError):
    """A query's partition count or key columns differ from those the state was written with;
    keep them, or rescale the state (``kstate rescale``)."""


class SparkConnectUnsupportedError(KStateError):
    """kstate.spark: a call that needs Spark's classic driver API (the ``SparkContext``: RDDs,
    accumulators) made with a Spark Connect session; the message names what works there."""


class JavaNotFoundError(KStateError):
    """Spark cannot start: this machine has no Java runtime (``kstate.spark.local_session``)."""


class StateSchemaError(KStateError):
    """kstate.spark: a processor's state schemas cannot read the state stored with other schemas
    (an incompatible change), raised before the query starts; the state is untouched."""


class DeletedStateVariableError(KStateError, RuntimeError):
    """kstate.spark: a call on a state variable after ``handle.deleteIfExists`` deleted it (Spark
    fails such calls too; kstate.spark raises a subclass that is also PySpark's
    ``PySparkRuntimeError``, with Spark's message, so processors catching that work unchanged)."""


__all__ = [
    "KStateError",
    "InvalidStateStoreError",
    "StoreClosedError",
    "StateLockTimeoutError",
    "BatchConflictError",
    "ProcessorStateError",
    "RemoteStorageError",
    "CommitConflictError",
    "CorruptedDataError",
    "TaskAssignmentError",
    "InvalidArgumentError",
    "StateTypeError",
    "InvalidTimestampError",
    "SerializationError",
    "JavaNotFoundError",
    "SparkConnectUnsupportedError",
    "PartitioningError",
    "MisroutedRowsError",
    "PartitioningChangedError",
    "StateSchemaError",
    "StoreBehindChangelogError",
    "DeletedStateVariableError",
]

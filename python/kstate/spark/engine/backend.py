"""``StateBackend``: kstate stores as the state of PySpark UDFs.

A backend names the stores (``Stores`` builders), the executor-local ``state_dir`` and the
changelog location. Its wrappers turn a function that takes the partition's stores into the
function Spark calls:

- ``map_in_arrow`` / ``map_in_pandas``: ``fn(batches, stores)`` yields batches, for
  ``df.mapInArrow`` / ``df.mapInPandas``;
- ``apply_in_arrow`` / ``apply_in_pandas``: ``fn(key, group, stores)`` once per group, for a
  DataFrame grouped by key columns (the plan ``groupBy(...).applyInPandas`` runs: hash partitioning
  by the keys, then the groups of each partition in key order).

``map_partitions(df, fn, schema)``, the grouped helpers and ``transform_with_state`` build the
DataFrame themselves, and add kstate's figures per batch to the query's progress
(``observedMetrics["kstate"]``, ``kstate.spark.engine.observed``).

Each task opens the stores of ``TaskContext.partitionId()`` at the state after the previous
micro-batch, runs the function, and commits once the function has consumed its input and
returned: exactly once per micro-batch (see ``kstate.spark.protocol.exactly_once``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from kstate.config import CHANGELOG_DIR, CHANGELOG_STORAGE_OPTIONS
from kstate.errors import InvalidArgumentError, MisroutedRowsError, PartitioningChangedError
from kstate.log.object_store import is_url
from kstate.rebalance import UpgradeConfig
from kstate.serdes import BytesSerde, DoubleSerde, JsonSerde, LongSerde, StringSerde
from kstate.spark.engine.observed import (
    METRICS_NAME,
    observe_figures,
    state_figures,
    with_figures,
    with_figures_column,
)
from kstate.spark.engine.session import default_parallelism, refuse_spark_connect
from kstate.spark.format.conversion import SessionConversion, to_arrow_schema
from kstate.spark.protocol.exactly_once import TASK_LOCK, PartitionState, StateLayout, TaskStores
from kstate.spark.protocol.idle import claim, wait_for_release
from kstate.spark.protocol.progress import (
    BatchProgress,
    ProcessorCounts,
    TaskMetrics,
    Timings,
    progress_listener,
    task_figures,
)
from kstate.spark.protocol.task import TaskInfo
from kstate.spark.protocol.upgrade import InPlaceUpgrade, upgrade_listener
from kstate.spark.routing.groups import OutputBatcher, iter_groups
from kstate.spark.routing.partitioning import (
    Partitioning,
    PartitioningLog,
    check_compatible,
    checked_batches,
    generation_application_id,
    key_kind,
    keys_of_schema,
    verify_batch,
    verify_task_partition,
)
from kstate.stores import StoreBuilder
from kstate.suppliers import SessionBytesStoreSupplier, WindowBytesStoreSupplier

log = logging.getLogger("kstate.spark")

BatchFunction = Callable[[Iterator[Any], TaskStores], Iterable[Any]]
CountingFunction = Callable[[Iterator[Any], TaskStores, ProcessorCounts], Iterable[Any]]
"""A ``BatchFunction`` that also counts what it did beyond its stores (timers fired, late rows)."""
_SERDE_KEY_CODECS = {"StringSerde": "serde:string", "LongSerde": "serde:int64", "BytesSerde": "serde:bytes"}
GroupFunction = Callable[[tuple, Any, TaskStores], Any]


def _arrow_type_of(serde: Any) -> Any:
    import pyarrow as pa

    for kind, arrow_type in ((BytesSerde, pa.binary()), (StringSerde, pa.string())):
        if isinstance(serde, kind):
            return arrow_type
    return {LongSerde: pa.int64(), DoubleSerde: pa.float64()}.get(type(serde), pa.string())


def _serde_name(serde: Any) -> str | None:
    """The ``serde_for`` name of a built-in serde (``None``: another serde, which a reader of the
    state cannot rebuild from a name)."""
    names = {BytesSerde: "bytes", StringSerde: "string", LongSerde: "int64", DoubleSerde: "float64", JsonSerde: "json"}
    return names.get(type(serde))


def _every_entry(store: Any, timestamped: bool, sessions: bool) -> Any:
    """An iterator over every entry of an open store (values with timestamps if asked)."""
    if sessions:
        return store.fetch_with_timestamp(None, None) if timestamped else store.fetch(None, None)
    return store.all_with_timestamp() if timestamped else store.all()


def _arrow_schema_of(batch: Any) -> Any:
    """The Arrow schema of a record batch, or of a pandas frame as Arrow would convert it."""
    import pyarrow as pa

    return batch.schema if isinstance(batch, (pa.RecordBatch, pa.Table)) else pa.Schema.from_pandas(batch)


def _epoch_ms(when: Any) -> int:
    """``when`` (ms since the epoch, or a ``datetime``; naive means local time) in ms."""
    if isinstance(when, datetime):
        return int(when.timestamp() * 1000)
    if isinstance(when, bool) or not isinstance(when, int):
        raise InvalidArgumentError(f"as_of_time must be ms since the epoch or a datetime, got {when!r}")
    return when


def _column_value(value: Any, arrow_type: Any) -> Any:
    import pyarrow as pa

    return value if value is None or arrow_type != pa.string() or isinstance(value, str) else str(value)


class StateBackend:
    """The stores of a Spark job and where they live.

    ``stores``: ``StoreBuilder``s (``Stores.key_value_store_builder(...)``); each is logged
    (``with_logging_enabled`` topic configs are kept). ``state_dir``: executor-local disk, laid
    out as Kafka Streams does (``<state_dir>/<application_id>/0_<partition>``); ``None``: the
    executor's working directory (``./kstate-state``), which is per executor and per
    application on a cluster. ``changelog_dir``: the durable copy, shared by every executor
    that may run a partition (default ``<state_dir>/changelog``; required without a
    ``state_dir``): a shared file system path, or an object store URL (``s3://bucket/prefix``,
    with ``changelog_storage_options`` for its fsspec filesystem), where exclusive creates
    replace the file locks. ``batch_id``: the batch a job outside Structured
    Streaming counts as. ``lock_timeout``: seconds to wait for another attempt of the same
    partition. ``undo_retained_batches``: how many published batches can be rolled back.
    ``on_task(task, timings)``: called in the worker after each task commits, with the seconds
    kstate spent opening and committing (metrics). ``metrics_name``: what the DataFrames this
    backend builds observe their figures under (``observedMetrics[metrics_name]``; two kstate
    operators in one query need two names); ``None``: no figures.

    ``keys``: the columns the state is partitioned by, and ``num_partitions`` how many
    partitions (default: what the state was first written with, else Spark's default
    parallelism). Route rows with ``partition(df)``; every task checks that each row's keys hash
    to its partition (``kstate.spark.routing.partitioning``) before its function sees them.
    """

    def __init__(
        self,
        stores: Sequence[StoreBuilder],
        state_dir: str | os.PathLike | None,
        changelog_dir: str | os.PathLike | None = None,
        application_id: str = "kstate",
        *,
        batch_id: int = 0,
        lock_timeout: float = 600.0,
        undo_retained_batches: int = 2,
        on_task: Callable[[TaskInfo, Timings], None] | None = None,
        changelog_storage_options: dict[str, Any] | None = None,
        upgrade: Mapping[str, Any] | None = None,
        keys: Sequence[str] | None = None,
        num_partitions: int | None = None,
        key_codecs: Mapping[str, str] | None = None,
        metrics_name: str | None = METRICS_NAME,
    ):
        builders = list(stores)
        if not builders or not all(isinstance(b, StoreBuilder) for b in builders):
            raise InvalidArgumentError("stores must be a non-empty list of StoreBuilder (Stores.*_builder(...))")
        names = [b.name for b in builders]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"store names must differ, got {names}")
        if not builders[0].supplier.persistent or not all(b.supplier.persistent for b in builders):
            raise InvalidArgumentError("kstate.spark keeps state on disk: use persistent stores")
        if undo_retained_batches < 1:
            raise InvalidArgumentError("undo_retained_batches must be >= 1 (replaying a batch needs its undo)")
        local = None if state_dir is None else Path(state_dir).absolute()
        url = None
        if changelog_dir is not None and is_url(os.fspath(changelog_dir)):
            url, changelogs = os.fspath(changelog_dir), Path()
        elif changelog_dir is not None:
            changelogs = Path(changelog_dir).absolute()
        elif local is not None:
            changelogs = local / "changelog"
        else:
            raise InvalidArgumentError("without a state_dir (executor-local state) the changelog_dir is required")
        self.layout = StateLayout(local, changelogs, application_id, url, dict(changelog_storage_options or {}))
        self.builders = builders
        self.batch_id = batch_id
        self.lock_timeout = lock_timeout
        self.undo_retained_batches = undo_retained_batches
        self.upgrade = None
        if upgrade is not None:
            if url is not None:
                raise InvalidArgumentError("an in-place upgrade builds standbys from a changelog_dir on a file system")
            self.upgrade = InPlaceUpgrade(UpgradeConfig.parse(upgrade), builders, changelogs, application_id)
        self.on_task = on_task
        if isinstance(keys, str):
            keys = [keys]
        self.keys = None if keys is None else list(keys)
        if self.keys is not None and (not self.keys or not all(isinstance(k, str) and k for k in self.keys)):
            raise InvalidArgumentError(f"keys must be a non-empty list of column names, got {keys!r}")
        if num_partitions is not None and (isinstance(num_partitions, bool) or int(num_partitions) < 1):
            raise InvalidArgumentError(f"num_partitions must be a positive int, got {num_partitions!r}")
        self.num_partitions = None if num_partitions is None else int(num_partitions)
        self.key_codecs = dict(key_codecs or {})
        self.partitioning: Partitioning | None = None
        """Set on the driver by ``partition(df)``: what tasks check the record against."""
        self._metrics: TaskMetrics | None = None
        self.progress: list[BatchProgress] = []
        self.metrics_name = metrics_name
        self.observation: Any = None
        """The ``Observation`` of the last batch DataFrame built here (``job_figures``)."""

    def partition_state(self, task: TaskInfo | None = None, layout: StateLayout | None = None) -> PartitionState:
        """The state of the current task's partition (or of ``task``), not yet opened."""
        return PartitionState(
            self.builders,
            layout or self.current_layout(),
            task or TaskInfo.current(self.batch_id),
            self.lock_timeout,
            self.undo_retained_batches,
            self.upgrade,
        )

    # -- partitioning ----------------------------------------------------------------------------

    def partitioning_log(self) -> PartitioningLog:
        """The records of how this application's state is partitioned."""
        layout = self.layout
        return PartitioningLog(
            layout.changelog_dir, layout.application_id, layout.changelog_url, layout.storage_options
        )

    def current_layout(self) -> StateLayout:
        """Where the state of the current generation lives (a rescale starts a new one)."""
        record = self.partitioning_log().current()
        return self.layout_of(record)

    def layout_of(self, record: Partitioning | None) -> StateLayout:
        generation = 0 if record is None else record.generation
        return replace(self.layout, application_id=generation_application_id(self.layout.application_id, generation))

    def _require_keys(self, what: str) -> list[str]:
        if self.keys is None:
            raise InvalidArgumentError(
                f"{what} needs the key columns the state is partitioned by: StateBackend(..., keys=['user']), "
                "with rows routed by state.partition(df). kstate checks every row against them: without them a "
                "repartition that differs between batches (adaptive query execution, another count or column) "
                "would silently read and write other partitions' state"
            )
        return self.keys

    def store_descriptions(self) -> dict[str, dict[str, Any]]:
        """What a rescale or a replica needs to know of each store: its supplier, how its keys
        give the key columns (``key``: ``serde:<name>`` for a single key column, ``pickle...``
        for ``transform_with_state``'s stores, ``opaque`` when kstate cannot tell), and its
        serdes (``serdes``: ``key`` and ``value``, the ``serde_for`` name of a built-in serde, or
        ``None`` for any other)."""
        out = {}
        for builder in self.builders:
            built = builder.build()
            supplier = builder.supplier
            kind = (
                "session"
                if isinstance(supplier, SessionBytesStoreSupplier)
                else "window"
                if isinstance(supplier, WindowBytesStoreSupplier)
                else "key_value"
            )
            codec = self.key_codecs.get(builder.name)
            if codec is None:
                codec = _SERDE_KEY_CODECS.get(type(built.key_serde).__name__, "opaque")
                codec = codec if self.keys is not None and len(self.keys) == 1 else "opaque"
            logging_config = {
                k: v for k, v in (builder.logging or {}).items() if k not in (CHANGELOG_DIR, CHANGELOG_STORAGE_OPTIONS)
            }
            out[builder.name] = json.loads(
                json.dumps(
                    {
                        "kind": kind,
                        "supplier": supplier.fields(),
                        "timestamped": builder.timestamped,
                        "config": dict(builder.config),
                        "logging": logging_config,
                        "key": codec,
                        "serdes": {"key": _serde_name(built.key_serde), "value": _serde_name(built.value_serde)},
                    },
                    default=str,
                )
            )
        return out

    def partition(self, df: Any, num_partitions: int | None = None) -> Any:
        """``df`` routed as the state is partitioned: ``df.repartition(n, *keys)``, with ``n``
        fixed (recorded with the state on first use: ``num_partitions``, the backend's, or
        Spark's default parallelism), which adaptive query execution does not coalesce. Raises
        ``PartitioningChangedError`` if the state was written with another count or keys."""
        keys = self._require_keys("StateBackend.partition")

        wanted_keys = keys_of_schema(to_arrow_schema(df.schema), keys)
        wanted = num_partitions if num_partitions is not None else self.num_partitions
        records = self.partitioning_log()
        current = records.current()
        if current is not None:
            check_compatible(current, wanted, wanted_keys, records)
        n = wanted or (current.num_partitions if current else default_parallelism(df.sparkSession))
        record = records.establish(Partitioning(n, wanted_keys, stores=self.store_descriptions()))
        log.info(
            "state of %s: %d partitions by (%s), generation %d",
            self.layout.application_id,
            record.num_partitions,
            record.describe_keys(),
            record.generation,
        )
        self.partitioning, self.num_partitions = record, record.num_partitions
        return df.repartition(record.num_partitions, *keys)

    def _task_partitioning(self, task: TaskInfo, first_batch: Any) -> Partitioning | None:
        """The record this task's rows are checked against (``None``: no record yet and nothing
        to check), after checking it still is what the driver planned with."""
        keys = self._require_keys("a kstate task")
        records = self.partitioning_log()
        current = records.current()
        planned = self.partitioning
        if planned is not None:
            if current is None or (current.generation, current.num_partitions) != (
                planned.generation,
                planned.num_partitions,
            ):
                raise PartitioningChangedError(
                    f"the state at {records.location} was repartitioned (now "
                    f"{'no record' if current is None else f'{current.num_partitions} partitions'}) since this "
                    f"query was planned with {planned.num_partitions}: restart the query"
                )
            return current
        kinds: list[tuple[str, str | None]] = [(k, None) for k in keys]
        if first_batch is not None:
            schema = _arrow_schema_of(first_batch)
            missing = [k for k in keys if k not in schema.names]
            if missing:
                raise MisroutedRowsError(
                    f"the rows lack the key columns {missing} the state is partitioned by; they have {schema.names}"
                )
            kinds = [(k, key_kind(schema.field(k).type)) for k in keys]
        if current is not None:
            check_compatible(current, self.num_partitions, kinds, records)
            return current
        if first_batch is None:
            return None
        if self.num_partitions is None:
            raise InvalidArgumentError(
                "the state has no partition count yet: route rows with state.partition(df), or give "
                "StateBackend(..., num_partitions=n) to match your own df.repartition(n, *keys)"
            )
        return records.establish(Partitioning(self.num_partitions, tuple(kinds), stores=self.store_descriptions()))

    def coordinate_upgrade(self, spark: Any, num_partitions: int) -> None:
        """The driver's half of an in-place upgrade (``upgrade=``): after each micro-batch of
        ``spark``'s streaming queries, reads the partitions' subscriptions and writes the
        assignment that switches them once all are ready (see ``kstate.spark.protocol.upgrade``)."""
        if self.upgrade is None:
            raise InvalidArgumentError("the backend has no in-place upgrade (upgrade=...)")
        spark.streams.addListener(upgrade_listener(self.upgrade, num_partitions))

    def process(
        self,
        fn: BatchFunction,
        batches: Iterable[Any],
        task: TaskInfo | None = None,
        committed: Callable[[Timings, int], None] | None = None,
    ) -> Iterator[Any]:
        """Checks that every row of ``batches`` belongs to the task's partition (the first batch
        before the stores open, each later one before ``fn`` sees it), then ``run``s
        ``fn(batches, stores)``; misrouted rows fail the task with ``MisroutedRowsError``.
        ``committed(timings, partitions)``: called once the stores committed."""
        task = task or TaskInfo.current(self.batch_id)
        if self.partitioning is not None:
            # Planned on the driver: the partition's directory is known before any row arrives.
            claim(self.layout_of(self.partitioning).task_dir(task.partition))
        rows = iter(batches)
        first = next(rows, None)
        partitioning = self._task_partitioning(task, first)
        if partitioning is not None:
            verify_task_partition(partitioning, task.partition, task.batch_id)
        failures: list[BaseException] = []
        if first is not None:
            assert partitioning is not None
            verify_batch(first, partitioning, task.partition, task.batch_id)
            later = checked_batches(rows, partitioning, task.partition, task.batch_id, failures)
            rows = itertools.chain([first], later)

        def checked(stores: TaskStores) -> Iterator[Any]:
            yield from fn(rows, stores)
            if failures:
                raise failures[0]  # the function swallowed it: still nothing may commit

        partitions = 0 if partitioning is None else partitioning.num_partitions
        on_commit = None if committed is None else (lambda timings: committed(timings, partitions))
        yield from self.run(checked, task, self.layout_of(partitioning), on_commit)

    def run(
        self,
        fn: Callable[[TaskStores], Iterable[Any]],
        task: TaskInfo | None = None,
        layout: StateLayout | None = None,
        committed: Callable[[Timings], None] | None = None,
    ) -> Iterator[Any]:
        """Opens the partition's stores, yields what ``fn(stores)`` yields, and commits when it is
        done; on any error (or if the caller stops early) nothing is committed. ``committed``:
        called with the task's timings once the stores committed."""
        state = self.partition_state(task, layout)
        stores = state.open()
        started = time.perf_counter()
        try:
            yield from fn(stores)
        except BaseException:
            state.abort()
            raise
        state.timings.updates = time.perf_counter() - started
        entry = state.commit()
        log.info(
            "partition %d batch %d: committed %s; kstate open %.3f s, commit %.3f s",
            stores.partition,
            stores.batch_id,
            "nothing" if entry is None else f"batch log entry {entry.position}",
            state.timings.open,
            state.timings.commit,
        )
        if self._metrics is not None:
            self._metrics.add(state.task, state.timings)
        if committed is not None:
            committed(state.timings)
        if self.on_task is not None:
            self.on_task(state.task, state.timings)

    def report_progress(self, spark: Any) -> list[BatchProgress]:
        """Reports kstate's work in each micro-batch of ``spark``'s streaming queries (records
        restored and seconds restoring, batches rolled back, seconds opening and committing),
        logged (``kstate.spark``, INFO) with each progress event and appended to the returned
        list (``self.progress``). Call before starting the query that uses this backend."""
        refuse_spark_connect(
            spark,
            "StateBackend.report_progress",
            "its reports sum the tasks' timings in an accumulator. There, each task logs its timings "
            "(kstate.spark, INFO, in the executors' logs) and hands them to StateBackend(on_task=...)",
        )
        if self._metrics is None:
            self._metrics = TaskMetrics(spark.sparkContext)
            spark.streams.addListener(progress_listener(self._metrics, self.progress))
        return self.progress

    def __getstate__(self) -> dict[str, Any]:
        # Tasks get the accumulators, not the driver's reports.
        return {**self.__dict__, "progress": [], "observation": None}

    # -- figures in the query's progress --------------------------------------------------------

    def map_partitions(self, df: Any, fn: BatchFunction, schema: Any, num_partitions: int | None = None) -> Any:
        """``df`` routed as the state is partitioned (``partition``), each partition's rows
        through ``fn(batches, stores)`` (Arrow record batches in, record batches or tables of
        ``schema`` out, as ``mapInArrow``), with kstate's figures per batch in the query's
        progress (``observedMetrics["kstate"]``) or, for a batch DataFrame, in ``job_figures()``."""
        routed = self.partition(df, num_partitions)
        return self.map_observed(routed, lambda batches, stores, _: fn(batches, stores), schema)

    def map_observed(self, routed: Any, fn: CountingFunction, schema: Any) -> Any:
        """``routed.mapInArrow`` of ``fn(batches, stores, counts)`` in ``process``, its figures
        observed under ``metrics_name`` (``kstate.spark.engine.observed``)."""
        from pyspark.sql.types import StructType

        if isinstance(schema, str):
            schema = StructType.fromDDL(schema)
        if self.metrics_name is None:

            def plain(batches: Iterator[Any]) -> Iterator[Any]:
                return self.process(lambda rows, stores: fn(rows, stores, ProcessorCounts()), batches)

            plain.__name__ = getattr(fn, "__name__", "task")
            return routed.mapInArrow(plain, schema)
        arrow_schema = to_arrow_schema(schema, SessionConversion.of(routed.sparkSession).timezone)

        def task(batches: Iterator[Any]) -> Iterator[Any]:
            counts = ProcessorCounts()
            figures: list[dict[str, int]] = []

            def committed(timings: Timings, partitions: int) -> None:
                figures.append(task_figures(timings, partitions, counts))

            outputs = self.process(lambda rows, stores: fn(rows, stores, counts), batches, committed=committed)
            return with_figures(outputs, arrow_schema, lambda: figures[0])

        task.__name__ = getattr(fn, "__name__", "task")
        mapped = routed.mapInArrow(task, with_figures_column(schema))
        observed, self.observation = observe_figures(mapped, self.metrics_name)
        return observed

    def job_figures(self) -> dict[str, int]:
        """kstate's figures of the last batch DataFrame built by this backend (``map_partitions``,
        the grouped helpers, ``transform_with_state`` on a batch DataFrame), once an action ran it:
        summed over its tasks, as a streaming query's progress shows them."""
        if self.observation is None:
            raise InvalidArgumentError(
                "no batch DataFrame of this backend observed its figures: build one with map_partitions, "
                "apply_in_arrow / apply_in_pandas or transform_with_state (metrics_name not None), and run an action"
            )
        return state_figures({"observedMetrics": {self.metrics_name: self.observation.get}}, self.metrics_name) or {}

    # -- mapInArrow / mapInPandas ----------------------------------------------------------------

    def map_in_arrow(self, fn: BatchFunction) -> Callable[[Iterator[Any]], Iterator[Any]]:
        """Wraps ``fn(batches, stores)`` for ``df.mapInArrow``: it gets an iterator of
        ``pyarrow.RecordBatch`` and the partition's stores, and yields record batches. Route the
        rows with ``state.partition(df)``: each task checks every row's keys first."""

        self._require_keys("StateBackend.map_in_arrow")

        def task(batches: Iterator[Any]) -> Iterator[Any]:
            return self.process(fn, batches)

        task.__name__ = getattr(fn, "__name__", "task")
        return task

    def map_in_pandas(self, fn: BatchFunction) -> Callable[[Iterator[Any]], Iterator[Any]]:
        """Wraps ``fn(frames, stores)`` for ``df.mapInPandas``: it gets an iterator of
        ``pandas.DataFrame`` and the partition's stores, and yields data frames."""
        return self.map_in_arrow(fn)

    def release_local_state(self, partitions: Iterable[int], timeout: float = 60.0) -> None:
        """Asks the Python workers of this machine that keep stores of ``partitions`` open
        between tasks to close them, and waits until they did: afterwards nothing writes into
        those task directories (for instance before deleting the local state)."""
        layout = self.current_layout()
        for partition in partitions:
            task_dir = layout.task_dir(partition)
            if task_dir.exists():
                wait_for_release(task_dir, task_dir / TASK_LOCK, f"task directory of partition {partition}", timeout)

    # -- state as a DataFrame --------------------------------------------------------------------

    def state_dataframe(
        self,
        spark: Any,
        store: str,
        num_partitions: int | None = None,
        as_of_batch: int | None = None,
        as_of_time: int | datetime | None = None,
    ) -> Any:
        """The state of ``store`` after each partition's last published batch, as a DataFrame of
        ``partition``, ``batch`` (whose state it is; -1: before the first), ``key`` (window and
        session stores: ``start`` and ``end`` too), ``value`` and, for a timestamped store,
        ``timestamp``, read by one Spark task per partition. Key and value columns take their
        type from the serdes: bytes -> binary, string -> string, int64 -> bigint, float64 ->
        double, others -> string (their ``str``).

        For audits, an earlier state: ``as_of_batch`` (each partition's state after its last
        batch with an id at or below it) or ``as_of_time`` (ms since the epoch or a
        ``datetime``: after its last batch published by then). Earlier states are reached by
        undoing the later batches, so as far back as ``undo_retained_batches`` (raise it to
        keep more history); further back raises ``ProcessorStateError``."""
        import pyarrow as pa

        builder = next((b for b in self.builders if b.name == store), None)
        if builder is None:
            raise InvalidArgumentError(f"no store named {store!r}; the backend has {[b.name for b in self.builders]}")
        built = builder.build()
        key_type, value_type = _arrow_type_of(built.key_serde), _arrow_type_of(built.value_serde)
        timestamped = builder.timestamped
        sessions = isinstance(builder.supplier, SessionBytesStoreSupplier)
        windowed = sessions or isinstance(builder.supplier, WindowBytesStoreSupplier)
        if as_of_batch is not None and as_of_time is not None:
            raise InvalidArgumentError("give as_of_batch or as_of_time, not both")
        as_of_ms = _epoch_ms(as_of_time) if as_of_time is not None else None
        record = self.partitioning_log().current()
        layout = self.layout_of(record)
        if num_partitions is None:
            if record is None:
                raise InvalidArgumentError("the state has no partitioning record yet: give num_partitions")
            num_partitions = record.num_partitions
        fields = [("partition", pa.int32()), ("batch", pa.int64()), ("key", key_type)]
        fields += [("start", pa.int64()), ("end", pa.int64())] if windowed else []
        fields += [("value", value_type)] + ([("timestamp", pa.int64())] if timestamped else [])
        schema = pa.schema(fields)

        def read(batches: Iterator[Any]) -> Iterator[Any]:
            for _ in batches:
                pass
            current = TaskInfo.current(self.batch_id)
            state = self.partition_state(current, layout)
            opened = state.open(read_only=True)[store]
            try:
                batch = state.show_as_of(as_of_batch, as_of_ms)
                with _every_entry(opened, timestamped, sessions) as entries:
                    rows = list(entries)
            finally:
                state.close_view()
            keys = [r.key.key if windowed else r.key for r in rows]
            columns = {
                "partition": [current.partition] * len(rows),
                "batch": [batch] * len(rows),
                "key": [_column_value(k, key_type) for k in keys],
            }
            if windowed:
                columns["start"] = [r.key.start for r in rows]
                columns["end"] = [r.key.end for r in rows]
            columns["value"] = [_column_value(r.value.value if timestamped else r.value, value_type) for r in rows]
            if timestamped:
                columns["timestamp"] = [r.value.timestamp for r in rows]
            yield pa.RecordBatch.from_pydict(columns, schema=schema)

        from pyspark.sql.pandas.types import from_arrow_schema

        # One task per partition (a range splits evenly), in classic Spark and Spark Connect alike.
        tasks = spark.range(0, num_partitions, 1, num_partitions)
        return tasks.mapInArrow(read, from_arrow_schema(schema))

    def changelog_dataframe(self, spark: Any, store: str) -> Any:
        """``store``'s changelog as a DataFrame with the columns of Spark's Kafka source
        (``format("kstate")``): every published write, ``offset`` in publication order;
        ``timestamp`` is the write's own for timestamped, window and session stores and its
        publication time otherwise, as Kafka Streams logs them. File-system changelogs only."""
        from kstate.spark.engine.source import register_data_source

        if store not in {b.name for b in self.builders}:
            raise InvalidArgumentError(f"no store named {store!r}; the backend has {[b.name for b in self.builders]}")
        if self.layout.changelog_url is not None:
            raise InvalidArgumentError("format('kstate') reads changelogs on a file system, not at a URL")
        register_data_source(spark)
        layout = self.current_layout()
        topic = f"{layout.application_id}-{store}-changelog"
        return spark.read.format("kstate").option("path", str(layout.changelog_dir)).option("topic", topic).load()

    # -- grouped ---------------------------------------------------------------------------------

    def apply_in_arrow(
        self, df: Any, keys: Sequence[str], fn: GroupFunction, schema: Any, num_partitions: int | None = None
    ) -> Any:
        """``df`` grouped by ``keys``, ``fn(key, table, stores)`` called once per group with the
        key tuple and a ``pyarrow.Table``; it returns a table or record batch (or ``None``)
        of ``schema``. ``num_partitions``: as in ``partition`` (recorded with the state on first
        use; a different count later raises ``PartitioningChangedError`` until a rescale)."""
        return self._grouped(df, keys, fn, schema, num_partitions, pandas=False)

    def apply_in_pandas(
        self, df: Any, keys: Sequence[str], fn: GroupFunction, schema: Any, num_partitions: int | None = None
    ) -> Any:
        """As ``apply_in_arrow`` with a ``pandas.DataFrame`` per group; ``fn`` returns one."""
        return self._grouped(df, keys, fn, schema, num_partitions, pandas=True)

    def _grouped(
        self, df: Any, keys: Sequence[str], fn: GroupFunction, schema: Any, num_partitions: int | None, pandas: bool
    ) -> Any:
        from pyspark.sql.types import StructType

        keys = [keys] if isinstance(keys, str) else list(keys)
        if not keys:
            raise InvalidArgumentError("grouping needs at least one key column")
        if self.keys is not None and self.keys != keys:
            raise InvalidArgumentError(f"the backend's state is keyed by {self.keys}, not {keys}")
        self.keys = keys
        if isinstance(schema, str):
            schema = StructType.fromDDL(schema)
        arrow_schema = to_arrow_schema(schema)

        partitioned = self.partition(df, num_partitions)
        return self.map_observed(partitioned, grouped_function(keys, fn, arrow_schema, pandas), schema)


def grouped_function(keys: Sequence[str], fn: GroupFunction, schema: Any, pandas: bool) -> CountingFunction:
    """The task function that calls ``fn(key, group, stores)`` for each group."""

    def each_group(batches: Iterator[Any], stores: TaskStores, counts: ProcessorCounts) -> Iterator[Any]:
        output = OutputBatcher(schema, pandas)
        for key, group in iter_groups(batches, keys, pandas):
            yield from output.add(fn(key, group, stores))
        yield from output.flush()

    each_group.__name__ = getattr(fn, "__name__", "grouped")
    return each_group

"""``transform_with_state``: Spark's ``transformWithStateInPandas`` and ``transformWithState``
(Row) on kstate stores, with the same ``StatefulProcessor`` class for both.

A ``StatefulProcessor`` (``init(handle)``, ``handleInputRows(key, rows, timerValues)``,
``handleExpiredTimer(key, timerValues, expiredTimerInfo)``, ``handleInitialState(key,
initialState, timerValues)``, ``close()``) declares its state variables in ``init`` with the
handle's ``getValueState``, ``getListState`` and ``getMapState`` (``kstate.spark.state_variables``),
with Spark's names and arguments, so a processor written for Spark runs here with its imports
changed. ``api="pandas"`` passes each key's rows as ``pandas.DataFrame``s and takes frames back
(``transformWithStateInPandas``); ``api="row"`` passes ``pyspark.sql.Row``s and takes ``Row``s (or
tuples) back (``transformWithState``). Every state call is an in-process call into RocksDB (no
socket round trip), and state is exactly once per micro-batch as the rest of kstate.spark.

Timers (``time_mode="ProcessingTime"`` or ``"EventTime"``): ``handle.registerTimer(ms)``,
``deleteTimer``, ``listTimers`` for the current key. Each micro-batch, after the keys with input,
every timer due by then fires once (``handleExpiredTimer``) and is deleted, in expiry order: due at
the batch's processing time, or at the watermark for event time. The watermark is query-wide, as
Spark's: the largest ``event_time_column`` value of the earlier batches of every partition, minus
``watermark_delay_ms``. Each partition records ``(batch id, largest event time so far)`` in a
store of its own every batch, and a task reads the others' from their changelogs, taking only
records of earlier batches, so a replayed batch sees the watermark it saw before. Timers fire in
batches Spark runs, so a query with no new input fires none until input arrives. After the
timers, values whose TTL ran out are deleted (``kstate.spark.state_variables``).

``initial_state`` (a DataFrame, or Spark's ``df.groupBy(...)`` of one, with the key columns):
before the query starts, its rows are routed as the state is (``repartition(n, *keys)``) and
kept per partition beside the changelogs (``<application_id>-kstate-initial-state/``); in batch 0
each partition calls ``handleInitialState`` for its keys' rows (pandas: one frame per key; Row:
once per row) before their input, as Spark does in the first batch.

Timers live in two stores, one ordered by expiry (to find the due ones) and one by key
(``listTimers``).
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.spark.backend import StateBackend
from kstate.spark.exactly_once import StateLayout, TaskStores
from kstate.spark.groups import OutputBatcher, iter_groups
from kstate.spark.state_schemas import SchemaLog, VariableSchemas, reconcile
from kstate.spark.state_variables import (
    TIMERS_BY_KEY,
    TIMERS_BY_TIME,
    TTL_INDEX,
    Declared,
    ListState,
    MapState,
    StatefulProcessorHandle,
    TypedSchemas,
    ValueState,
)
from kstate.stores import Stores

__all__ = [
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "ValueState",
    "ListState",
    "MapState",
    "TimerValues",
    "ExpiredTimerInfo",
    "transform_with_state",
    "TIMERS_BY_TIME",
    "TIMERS_BY_KEY",
    "TTL_INDEX",
    "EVENT_TIME",
]

TIME_MODES = ("None", "ProcessingTime", "EventTime")
APIS = ("pandas", "row")
EVENT_TIME = "tws.event-time"
"""The store of the largest event time seen (one entry), next to the processor's state variables."""
_MAX_EVENT_TIME = b"max"
_KEY_CODECS = {
    "value": "pickle",
    "list": "pickle-prefixed",
    "map": "pickle-prefixed",
    "deleted": "opaque",
    TIMERS_BY_TIME: "pickle-after-expiry",
    TIMERS_BY_KEY: "pickle-prefixed",
    TTL_INDEX: "ttl-index",
    EVENT_TIME: "event-time",
}
"""How each store's keys hold the pickled grouping key (for a rescale)."""
_BATCH_AND_TIME = struct.Struct(">qq")


def _pickled(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=4)


class StatefulProcessor:
    """Base class of a processor (Spark's ``StatefulProcessor``); override ``init``,
    ``handleInputRows`` and, if needed, ``handleExpiredTimer``, ``handleInitialState`` and
    ``close``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        raise NotImplementedError

    def handleInputRows(self, key: tuple, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N802, N803
        raise NotImplementedError

    def handleExpiredTimer(  # noqa: N802
        self,
        key: tuple,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Any]:
        """Called for each timer of ``key`` that came due; yields output like ``handleInputRows``."""
        return iter(())

    def handleInitialState(self, key: tuple, initialState: Any, timerValues: TimerValues) -> None:  # noqa: N802, N803
        """Called in batch 0 with the initial state of ``key``: a ``pandas.DataFrame`` (pandas API)
        or each ``Row`` (Row API)."""

    def close(self) -> None:
        """Called once a task's groups are done."""


class TimerValues:
    """What Spark passes as ``timerValues``: the batch's processing time and the event-time
    watermark (-1 where the time mode has none)."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1) -> None:  # noqa: N803
        self._current_processing_time_ms = currentProcessingTimeInMs
        self._current_watermark_ms = currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self._current_processing_time_ms

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802
        return self._current_watermark_ms

    def __repr__(self) -> str:
        return f"TimerValues({self._current_processing_time_ms}, {self._current_watermark_ms})"


class ExpiredTimerInfo:
    """Which timer fired (Spark's ``ExpiredTimerInfo``)."""

    def __init__(self, expiryTimeInMs: int = -1) -> None:  # noqa: N803
        self._expiry_time_ms = expiryTimeInMs

    def getExpiryTimeInMs(self) -> int:  # noqa: N802
        return self._expiry_time_ms

    def __repr__(self) -> str:
        return f"ExpiredTimerInfo({self._expiry_time_ms})"


def state_store_names(declared: dict[str, Any], time_mode: str) -> list[str]:
    """The stores a processor's state lives in: one per declared (or deleted) variable, the TTL
    index if any variable has a TTL, the timers' and the event time's."""
    names = list(declared)
    names += [TTL_INDEX] if any(d.ttl_ms is not None for d in declared.values()) else []
    names += [] if time_mode == "None" else [TIMERS_BY_TIME, TIMERS_BY_KEY]
    names += [EVENT_TIME] if time_mode == "EventTime" else []
    return names


def transform_with_state(
    df: Any,
    keys: Sequence[str],
    processor: StatefulProcessor,
    output_schema: Any,
    state_dir: str | os.PathLike,
    changelog_dir: str | os.PathLike | None = None,
    application_id: str = "kstate",
    num_partitions: int | None = None,
    time_mode: str = "None",
    event_time_column: str | None = None,
    watermark_delay_ms: int = 0,
    api: str = "pandas",
    initial_state: Any = None,
    **backend_options: Any,
) -> Any:
    """``df`` grouped by ``keys`` through ``processor``, its state in kstate stores: what
    ``df.groupBy(*keys).transformWithStateInPandas(processor, output_schema, "Update",
    time_mode, initial_state)`` computes (``api="pandas"``), or with ``api="row"`` Spark 4.1's
    Row-based ``transformWithState``. ``time_mode`` ``"EventTime"`` needs ``event_time_column``
    (epoch ms, or a timestamp) and takes ``watermark_delay_ms`` (see the module docstring).
    ``initial_state``: a DataFrame (or ``groupBy(*keys)`` of one) holding the key columns, handed
    to ``handleInitialState`` in batch 0.
    ``num_partitions``: how many partitions the state has, recorded with it on the first run
    (default: Spark's default parallelism); later runs keep it unless ``kstate rescale`` changed
    it, and kstate routes the rows itself (``StateBackend.partition``), checked in every task.
    ``backend_options`` go to ``StateBackend`` (``batch_id``, ``lock_timeout``, ...)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if time_mode not in TIME_MODES:
        raise InvalidArgumentError(f"time_mode must be one of {TIME_MODES}, got {time_mode!r}")
    if api not in APIS:
        raise InvalidArgumentError(f"api must be one of {APIS}, got {api!r}")
    if (time_mode == "EventTime") != (event_time_column is not None):
        raise InvalidArgumentError('event_time_column goes with time_mode "EventTime", and only with it')
    declaring = StatefulProcessorHandle(None, time_mode)
    processor.init(declaring)
    if not declaring.declared:
        raise InvalidArgumentError("the processor's init declares no state variable")
    names = state_store_names(declaring.declared, time_mode)
    wanted = {name: _parsed_schemas(name, d) for name, d in declaring.declared.items()}
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "bytes", "bytes") for name in names
    ]
    keys = [keys] if isinstance(keys, str) else list(keys)
    codecs = {name: _KEY_CODECS[d.kind] for name, d in declaring.declared.items()}
    codecs.update({name: _KEY_CODECS[name] for name in names if name in _KEY_CODECS})
    backend = StateBackend(
        builders, state_dir, changelog_dir, application_id, keys=keys, key_codecs=codecs, **backend_options
    )
    record = backend.partitioning_log().current()
    layout = backend.layout
    schema_log = SchemaLog(layout.changelog_dir, layout.application_id, layout.changelog_url, layout.storage_options)
    stored = reconcile(schema_log, wanted, record is not None and any(n in record.stores for n in names))
    typed = {
        name: TypedSchemas(stored[name].values, schemas.values[0], stored[name].key)
        for name, schemas in wanted.items()
        if schemas.values
    }
    if time_mode == "EventTime" and backend.layout.changelog_url is not None:
        raise InvalidArgumentError("event-time timers read every partition's changelog from a file system path")
    if isinstance(output_schema, str):
        output_schema = StructType.fromDDL(output_schema)
    arrow_schema = to_arrow_schema(output_schema)
    routed = backend.partition(df, num_partitions)
    initial_dir = None
    if initial_state is not None:
        from kstate.spark.initial_state import stage_initial_state

        initial_dir = stage_initial_state(initial_state, keys, backend)
    pandas = api == "pandas"

    def process(batches: Iterator[Any], stores: TaskStores) -> Iterator[Any]:
        handle = StatefulProcessorHandle(stores, time_mode, schemas=typed)
        processor.init(handle)
        watermark = -1
        if time_mode == "EventTime":
            largest = _query_event_time(stores.layout, stores.batch_id)
            watermark = -1 if largest is None else largest - watermark_delay_ms
            batches = _tracking_event_time(batches, event_time_column, stores[EVENT_TIME], stores.batch_id)
        timer_values = TimerValues(-1 if time_mode == "None" else handle._now_ms, watermark)
        output = OutputBatcher(arrow_schema, pandas=pandas, rows=not pandas)
        initial = {}
        if initial_dir is not None and stores.batch_id == 0:
            from kstate.spark.initial_state import read_initial_state

            initial = read_initial_state(initial_dir, stores.partition, keys, pandas)
        pickled_keys: list[bytes] = []

        def read_ahead(group_keys: list[tuple]) -> None:
            pickled_keys.extend(_pickled(key) for key in group_keys)
            handle._read_ahead_values(pickled_keys)

        try:
            groups = iter_groups(batches, keys, pandas=pandas, rows=not pandas, before=read_ahead)
            for index, (key, group) in enumerate(groups):
                handle._set_key(pickled_keys[index])  # read_ahead has pickled every key by now
                if initial:
                    _apply_initial_state(processor, key, initial.pop(key, None), timer_values, pandas)
                for result in processor.handleInputRows(key, iter(group if not pandas else [group]), timer_values):
                    yield from output.add(result)
            handle._read_ahead_values([])
            for key, rows in initial.items():
                handle._set_key(_pickled(key))
                _apply_initial_state(processor, key, rows, timer_values, pandas)
            if time_mode != "None":
                due_by = handle._now_ms if time_mode == "ProcessingTime" else watermark
                for expiry, pickled_key in handle._due_timers(due_by):
                    handle._set_key(pickled_key)
                    handle.deleteTimer(expiry)
                    expired = ExpiredTimerInfo(expiry)
                    for result in processor.handleExpiredTimer(pickle.loads(pickled_key), timer_values, expired):
                        yield from output.add(result)
            handle._remove_expired()
            yield from output.flush()
        finally:
            processor.close()

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        return backend.process(process, batches)

    return routed.mapInArrow(task, output_schema)


def _parsed_schemas(name: str, declared: Declared) -> VariableSchemas:
    """A declared variable's schemas as ``StructType``s (DDL strings parsed by Spark, so on the
    driver). A map needs both or neither."""
    from pyspark.sql.types import StructType

    def struct(schema: Any, what: str) -> Any:
        if schema is None:
            return None
        parsed = StructType.fromDDL(schema) if isinstance(schema, str) else schema
        if not isinstance(parsed, StructType):
            raise InvalidArgumentError(
                f"state variable {name!r}: the {what} must be a StructType or a DDL string of fields, got {schema!r}"
            )
        return parsed

    value, key = struct(declared.schema, "schema"), struct(declared.key_schema, "userKeySchema")
    if declared.kind == "map" and (value is None) != (key is None):
        raise InvalidArgumentError(f"map state {name!r}: give both userKeySchema and valueSchema, or neither")
    return VariableSchemas(declared.kind, () if value is None else (value,), key, declared.ttl_ms is not None)


def _apply_initial_state(
    processor: StatefulProcessor, key: tuple, rows: Any, timer_values: TimerValues, pandas: bool
) -> None:
    if rows is None:
        return
    if pandas:
        processor.handleInitialState(key, rows, timer_values)
        return
    for row in rows:
        processor.handleInitialState(key, row, timer_values)


def _tracking_event_time(batches: Iterator[Any], column: str, store: Any, batch_id: int) -> Iterator[Any]:
    """Passes ``batches`` through, recording ``(batch_id, largest column value so far)`` in
    ``store``, even for a partition without input."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stored = store.get(_MAX_EVENT_TIME)
    largest = None if stored is None else _BATCH_AND_TIME.unpack(stored)[1]
    if largest is not None:
        store.put(_MAX_EVENT_TIME, _BATCH_AND_TIME.pack(batch_id, largest))
    for batch in batches:
        times = batch.column(column)
        if pa.types.is_timestamp(times.type):
            times = pc.cast(pc.cast(times, pa.timestamp("ms")), pa.int64())
        batch_max = pc.max(times).as_py()
        if batch_max is not None and (largest is None or batch_max > largest):
            largest = batch_max
            store.put(_MAX_EVENT_TIME, _BATCH_AND_TIME.pack(batch_id, largest))
        yield batch


def _query_event_time(layout: StateLayout, batch_id: int) -> int | None:
    """The largest event time of every partition's batches before ``batch_id``, read from the
    partitions' event-time changelogs (published records only; every key's records count)."""
    from kstate.log.files import read_log

    largest = None
    for directory in layout.changelog_dir.glob(f"{layout.application_id}-{EVENT_TIME}-changelog-*"):
        for batch in read_log(directory):
            for value in batch.column("value").to_pylist():
                if value is None:
                    continue
                recorded_batch, time = _BATCH_AND_TIME.unpack(value)
                if recorded_batch < batch_id and (largest is None or time > largest):
                    largest = time
    return largest

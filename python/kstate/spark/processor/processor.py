"""``transform_with_state``: Spark's ``transformWithStateInPandas`` and ``transformWithState``
(Row) on kstate stores, with the same ``StatefulProcessor`` class for both.

A ``StatefulProcessor`` (``init(handle)``, ``handleInputRows(key, rows, timerValues)``,
``handleExpiredTimer(key, timerValues, expiredTimerInfo)``, ``handleInitialState(key,
initialState, timerValues)``, ``close()``) declares its state variables in ``init`` with the
handle's ``getValueState``, ``getListState`` and ``getMapState`` (``kstate.spark.processor.state_variables``),
with Spark's names and arguments, so a processor written for Spark runs here with its imports
changed. ``api="pandas"`` passes each key's rows as ``pandas.DataFrame``s and takes frames back
(``transformWithStateInPandas``); ``api="row"`` passes ``pyspark.sql.Row``s and takes ``Row``s (or
tuples) back (``transformWithState``). Every state call is an in-process call into RocksDB (no
socket round trip), and state is exactly once per micro-batch as the rest of kstate.spark.

Timers (``time_mode="ProcessingTime"`` or ``"EventTime"``): ``handle.registerTimer(ms)``,
``deleteTimer``, ``listTimers`` for the current key. Each micro-batch, after the keys with input,
every timer due by then fires once (``handleExpiredTimer``, which still lists it) and is then
deleted, in expiry order: due at the batch's processing time, or at the watermark for event
time. The watermarks are query-wide and Spark's: a batch's watermark is the largest
``event_time_column`` value of the earlier batches of every partition minus
``watermark_delay_ms`` (0 before any, never going back), and rows at or below the previous
batch's watermark are late and dropped before the processor sees them. Each partition records
``(batch id, largest event time so far)`` in a store of its own every batch, and a task reads the
others' published records from their changelogs, on a file system or an object store, taking
only records of earlier batches, so a replayed batch sees the watermarks it saw before
(``kstate.spark.processor.watermarks``). With ``fire_idle_timers`` (the default in both time modes) the
``kstate.spark.processor.ticks`` source adds a batch without input when a timer is due or the watermark
advanced, as Spark runs batches without data. After the timers, values whose TTL ran out are
deleted (``kstate.spark.processor.state_variables``).

pandas input comes as Spark makes it: each key's rows in frames of at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (and ``maxBytesPerBatch`` bytes), timestamps
naive in the session time zone; returned frames are converted with Spark's rules
(``kstate.spark.format.conversion``).

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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kstate import _core
from kstate.errors import InvalidArgumentError, StateSchemaError
from kstate.spark.engine.backend import StateBackend
from kstate.spark.format.conversion import SessionConversion, average_row_bytes, to_arrow_schema
from kstate.spark.format.state_schemas import SchemaLog, VariableSchemas, reconcile
from kstate.spark.format.state_values import pickled_key, pickled_keys
from kstate.spark.processor.initial_state import read_initial_state, stage_initial_state
from kstate.spark.processor.state_variables import (
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
from kstate.spark.processor.watermarks import EVENT_TIME, query_watermarks
from kstate.spark.protocol.exactly_once import TaskStores
from kstate.spark.protocol.progress import ProcessorCounts
from kstate.spark.routing.groups import OutputBatcher, iter_groups
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
NO_STATE = "tws.no-state"
"""The store of a processor without state variables or timers (always empty): kstate's exactly-once
bookkeeping is per store."""
_KEY_CODECS = {
    "value": "pickle",
    "list": "pickle-prefixed",
    "map": "pickle-prefixed",
    "deleted": "opaque",
    TIMERS_BY_TIME: "pickle-after-expiry",
    TIMERS_BY_KEY: "pickle-prefixed",
    TTL_INDEX: "ttl-index",
    EVENT_TIME: "event-time",
    NO_STATE: "pickle",
}
"""How each store's keys hold the pickled grouping key (for a rescale)."""
ROW_OUTPUT_ROWS = 10_000
PANDAS_OUTPUT_ROWS = 1_000
"""Output rows per conversion to Arrow (``OutputBatcher``'s size) of each API."""


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
    names = list(declared) or ([NO_STATE] if time_mode == "None" else [])
    names += [TTL_INDEX] if any(d.ttl_ms is not None for d in declared.values()) else []
    names += [] if time_mode == "None" else [TIMERS_BY_TIME, TIMERS_BY_KEY]
    names += [EVENT_TIME] if time_mode == "EventTime" else []
    return names


def canonical_time_mode(time_mode: Any) -> str:
    """``time_mode`` in its canonical spelling; any case is accepted, as Spark accepts it."""
    canonical = {mode.lower(): mode for mode in TIME_MODES}.get(str(time_mode).lower())
    if not isinstance(time_mode, str) or canonical is None:
        raise InvalidArgumentError(f"time_mode must be one of {TIME_MODES} (any case), got {time_mode!r}")
    return canonical


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
    fire_idle_timers: bool | None = None,
    changelog_config: Mapping[str, Any] | None = None,
    **backend_options: Any,
) -> Any:
    """``df`` grouped by ``keys`` through ``processor``, its state in kstate stores: what
    ``df.groupBy(*keys).transformWithStateInPandas(processor, output_schema, "Update",
    time_mode, initial_state)`` computes (``api="pandas"``), or with ``api="row"`` Spark 4.1's
    Row-based ``transformWithState``. ``time_mode`` ``"EventTime"`` needs ``event_time_column``
    (epoch ms, or a timestamp) and takes ``watermark_delay_ms`` (see the module docstring).
    ``initial_state``: a DataFrame (or ``groupBy(*keys)`` of one) holding the key columns, handed
    to ``handleInitialState`` in batch 0.
    ``fire_idle_timers`` (time modes with timers; default: Spark's
    ``spark.sql.streaming.noDataMicroBatches.enabled``, true unless set, on PySpark 4.1+; off on
    4.0, where an ``availableNow`` query with it would run as one batch): the query also reads
    ``kstate.spark.processor.ticks``, a source that adds a batch when a timer is due (or the watermark
    advanced) and no input came, as Spark runs batches without data; switching it on or off
    changes the query's sources, which its checkpoint records.
    ``num_partitions``: how many partitions the state has, recorded with it on the first run
    (default: Spark's default parallelism); later runs keep it unless ``kstate rescale`` changed
    it, and kstate routes the rows itself (``StateBackend.partition``), checked in every task.
    ``changelog_config``: Kafka topic configs for the state's changelogs, as a store's
    ``with_logging_enabled`` takes them (``delete.retention.ms``, ``min.cleanable.dirty.ratio``,
    ``segment.bytes``, ...).
    ``backend_options`` go to ``StateBackend`` (``batch_id``, ``lock_timeout``, ...)."""
    from pyspark.sql.types import StructType

    time_mode = canonical_time_mode(time_mode)
    if api not in APIS:
        raise InvalidArgumentError(f"api must be one of {APIS}, got {api!r}")
    if (time_mode == "EventTime") != (event_time_column is not None):
        raise InvalidArgumentError('event_time_column goes with time_mode "EventTime", and only with it')
    declaring = StatefulProcessorHandle(None, time_mode)
    processor.init(declaring)
    names = state_store_names(declaring.declared, time_mode)
    wanted = {name: _parsed_schemas(name, d) for name, d in declaring.declared.items()}
    _refuse_non_nullable_under_avro(wanted, df.sparkSession)
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "bytes", "bytes").with_logging_enabled(
            changelog_config
        )
        for name in names
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
    if isinstance(output_schema, str):
        output_schema = StructType.fromDDL(output_schema)
    spark = df.sparkSession
    conversion = SessionConversion.of(spark)
    arrow_schema = to_arrow_schema(output_schema, conversion.timezone)
    if fire_idle_timers is None and time_mode != "None":
        from kstate.spark.processor.ticks import supports_available_now

        no_data_batches = spark.conf.get("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        fire_idle_timers = str(no_data_batches).strip().lower() == "true" and supports_available_now()
    ticking = fire_idle_timers and time_mode != "None"
    if ticking:
        from kstate.spark.processor.ticks import with_ticks

        df = with_ticks(df, backend, time_mode, watermark_delay_ms)
    routed = backend.partition(df, num_partitions)
    partitioning = backend.partitioning  # the tasks check that it is still current
    initial_dir = None
    if initial_state is not None:
        initial_dir = stage_initial_state(initial_state, keys, backend)
    pandas = api == "pandas"

    def process(batches: Iterator[Any], stores: TaskStores, counts: ProcessorCounts) -> Iterator[Any]:
        if ticking:
            from kstate.spark.processor.ticks import without_ticks

            batches = without_ticks(batches)
        handle = StatefulProcessorHandle(stores, time_mode, schemas=typed)
        processor.init(handle)
        watermark = -1
        if time_mode == "EventTime":
            late, watermark = query_watermarks(stores.layout, stores.batch_id, watermark_delay_ms, partitioning)
            batches = _tracking_event_time(
                batches, event_time_column, stores[EVENT_TIME], stores.batch_id, late, counts
            )
        timer_values = TimerValues(-1 if time_mode == "None" else handle.now_ms, watermark)
        # pandas: a concat every 1,000 rows, not 10,000: a processor's frames (often one row per
        # key) die young instead of piling up into the cyclic GC's oldest generation (Row: the
        # batcher keeps plain tuples, which the GC stops tracking).
        size = PANDAS_OUTPUT_ROWS if pandas else ROW_OUTPUT_ROWS
        output = OutputBatcher(arrow_schema, pandas=pandas, size=size, rows=not pandas, conversion=conversion)
        initial = {}
        if initial_dir is not None and stores.batch_id == 0:
            initial = read_initial_state(initial_dir, stores.partition, keys, pandas, conversion)
        batch_keys: list[bytes] = []

        def read_ahead(group_keys: list[tuple]) -> None:
            batch_keys.extend(pickled_keys(group_keys))
            handle.read_ahead_values(batch_keys)

        try:
            collected = list(batches)
            row_bytes = average_row_bytes(collected)
            groups = iter_groups(iter(collected), keys, pandas, not pandas, read_ahead, conversion)
            one_call = not pandas and initial_dir is None  # each key's rows in one call, as they are
            handle_input = processor.handleInputRows
            for index, (key, group) in enumerate(groups):
                handle.set_current_key(batch_keys[index])  # read_ahead has pickled every key by now
                if one_call:
                    calls: Any = (iter(group),)
                else:
                    initial_rows = initial.pop(key, None) if initial else None
                    _apply_initial_state(processor, key, initial_rows, timer_values, pandas)
                    before = 0 if initial_rows is None else len(initial_rows)
                    calls = _calls(group, pandas, initial_dir is not None, conversion, row_bytes, before)
                for rows in calls:
                    for result in handle_input(key, rows, timer_values):
                        if output.push(result):
                            yield from output.flush()
            handle.read_ahead_values([])
            for key, rows in initial.items():
                handle.set_current_key(pickled_key(key))
                _apply_initial_state(processor, key, rows, timer_values, pandas)
            if time_mode != "None":
                due_by = handle.now_ms if time_mode == "ProcessingTime" else watermark
                for expiry, timer_key in handle.due_timers(due_by):
                    handle.set_current_key(timer_key)
                    if not handle.has_timer(expiry):
                        continue  # an earlier handler of the key deleted it
                    expired = ExpiredTimerInfo(expiry)
                    counts.timers_fired += 1
                    for result in processor.handleExpiredTimer(pickle.loads(timer_key), timer_values, expired):
                        yield from output.add(result)
                    handle.deleteTimer(expiry)  # after the handler, as Spark: it still lists the timer
            handle.remove_expired()
            if ticking:
                from kstate.spark.processor.ticks import record_next_due

                largest = _largest_event_time(stores[EVENT_TIME]) if time_mode == "EventTime" else None
                record_next_due(
                    stores.layout, stores.partition, stores.batch_id, handle.next_timer(), watermark, largest
                )
            yield from output.flush()
        finally:
            processor.close()

    return backend.map_observed(routed, process, output_schema)


def _calls(
    group: Any, pandas: bool, initial: bool, conversion: Any, row_bytes: float, initial_rows: int
) -> Iterator[Iterator[Any]]:
    """The ``rows`` argument of each ``handleInputRows`` call for a key's group, as Spark makes
    them: pandas, one call with the key's frames cut by the Arrow batch limits; Row, one call
    with every row, except in a query with an initial state: Spark's Row runner then cuts the
    key's initial rows (``initial_rows`` of them, first) and input rows together every
    ``maxRecordsPerBatch`` rows and calls once per piece with input."""
    if pandas:
        yield conversion.chunks(group, row_bytes)
        return
    size = conversion.max_records
    if not initial or initial_rows + len(group) <= size:
        yield iter(group)
        return
    start = 0
    end = size - initial_rows % size
    while start < len(group):
        yield iter(group[start:end])
        start, end = end, end + size


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


ENCODING_FORMAT = "spark.sql.streaming.stateStore.encodingFormat"


def _refuse_non_nullable_under_avro(wanted: dict[str, VariableSchemas], spark: Any) -> None:
    """With Spark's Avro state encoding set in the session, Spark refuses a state schema with a
    non-nullable top-level field (``TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE``): so does
    kstate, though it does not encode with Avro, so that a processor refused there is refused
    here (before the query starts, where Spark fails the query)."""
    if str(spark.conf.get(ENCODING_FORMAT, "unsaferow")).strip().lower() != "avro":
        return
    for name, schemas in wanted.items():
        for schema in schemas.values:
            if not all(f.nullable for f in schema.fields):
                raise StateSchemaError(
                    f"[TRANSFORM_WITH_STATE_SCHEMA_MUST_BE_NULLABLE] with {ENCODING_FORMAT}=avro, all the fields "
                    f"in the schema of state variable {name!r} must be nullable, as Spark requires: make them "
                    f"nullable (or unset {ENCODING_FORMAT}). Current schema: {schema.simpleString()}"
                )


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


def _tracking_event_time(
    batches: Iterator[Any],
    column: str,
    store: Any,
    batch_id: int,
    late_watermark: int,
    counts: ProcessorCounts | None = None,
) -> Iterator[Any]:
    """Passes ``batches`` through without the rows at or below ``late_watermark`` (Spark drops
    late rows before its operator, counted in ``counts``), recording ``(batch_id, largest column value so far)`` in
    ``store``, late rows included (Spark's watermark counts them), even for a partition without
    input."""
    import pyarrow as pa
    import pyarrow.compute as pc

    largest = _largest_event_time(store)
    if largest is not None:
        store.put(_core.LATEST_EVENT_TIME_KEY, _core.event_time_record(batch_id, largest))
    for batch in batches:
        times = batch.column(column)
        late_bound = late_watermark
        if pa.types.is_timestamp(times.type):
            times = pc.cast(pc.cast(times, pa.timestamp("us")), pa.int64())
            late_bound *= 1000
            batch_max = pc.max(times).as_py()
            batch_max = None if batch_max is None else batch_max // 1000
        else:
            batch_max = pc.max(times).as_py()
        if batch_max is not None and (largest is None or batch_max > largest):
            largest = batch_max
            store.put(_core.LATEST_EVENT_TIME_KEY, _core.event_time_record(batch_id, largest))
        on_time = pc.invert(pc.fill_null(pc.less_equal(times, late_bound), False))
        if pc.all(on_time).as_py():
            yield batch
            continue
        kept = batch.filter(on_time)
        if counts is not None:
            counts.rows_dropped_by_watermark += batch.num_rows - kept.num_rows
        yield kept


def _largest_event_time(store: Any) -> int | None:
    stored = store.get(_core.LATEST_EVENT_TIME_KEY)
    return None if stored is None else _core.split_event_time_record(stored)[1]

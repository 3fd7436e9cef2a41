"""``transform_with_state``: Spark's ``transformWithStateInPandas`` shape on kstate stores.

A ``StatefulProcessor`` (``init(handle)``, ``handleInputRows(key, rows, timerValues)``,
``handleExpiredTimer(key, timerValues, expiredTimerInfo)``, ``close()``) declares its state
variables in ``init`` with the handle's ``getValueState``, ``getListState`` and ``getMapState``,
as with Spark, so a processor written for Spark runs here with its imports changed. Differences:
every state call is an in-process call into RocksDB (no socket round trip), state is exactly once
per micro-batch as the rest of kstate.spark, and values are any picklable Python objects (Spark's
schemas are accepted and not enforced).

Timers (``time_mode="ProcessingTime"`` or ``"EventTime"``): ``handle.registerTimer(ms)``,
``deleteTimer``, ``listTimers`` for the current key. Each micro-batch, after the keys with input,
every timer due by then fires once (``handleExpiredTimer``) and is deleted, in expiry order: due at
the batch's processing time, or at the watermark for event time. The watermark is query-wide, as
Spark's: the largest ``event_time_column`` value of the earlier batches of every partition, minus
``watermark_delay_ms``. Each partition records ``(batch id, largest event time so far)`` in a
store of its own every batch, and a task reads the others' from their changelogs, taking only
records of earlier batches, so a replayed batch sees the watermark it saw before. Timers fire in
batches Spark runs, so a query with no new input fires none until input arrives.

Each state variable is a kstate store named after it: keys are the pickled grouping key (a map
state adds the map key after a length prefix), values are pickled. A value state with a TTL keeps
its expiry with the value and reads as absent once it passed. Timers live in two more stores,
one ordered by expiry (to find the due ones) and one by key (``listTimers``).
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.spark.backend import StateBackend
from kstate.spark.exactly_once import StateLayout, TaskStores
from kstate.spark.groups import OutputBatcher, iter_groups
from kstate.store_lifecycle import now_ms
from kstate.stores import Stores


def _pickled(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=4)


TIME_MODES = ("None", "ProcessingTime", "EventTime")
TIMERS_BY_TIME = "tws.timers-by-time"
TIMERS_BY_KEY = "tws.timers-by-key"
EVENT_TIME = "tws.event-time"
"""Stores of the timers (``<expiry><key>`` and ``<key length><key><expiry>``, empty values) and of
the largest event time seen (one entry), next to the processor's own state variables."""
_MAX_EVENT_TIME = b"max"
_KEY_CODECS = {"value": "pickle", "list": "pickle", "map": "pickle-prefixed"}
"""How each kind of state variable's store keys hold the pickled grouping key (for a rescale)."""
_BATCH_AND_TIME = struct.Struct(">qq")
_EXPIRY = struct.Struct(">Q")


def _expiry_bytes(ms: int) -> bytes:
    """Big-endian with the sign bit flipped: sorts as the signed value."""
    return _EXPIRY.pack(ms + (1 << 63))


def _expiry_of(raw: bytes) -> int:
    return _EXPIRY.unpack(raw)[0] - (1 << 63)


def _key_prefix(key: bytes) -> bytes:
    return struct.pack(">I", len(key)) + key


class StatefulProcessor:
    """Base class of a processor; override ``init``, ``handleInputRows`` and, if needed, ``close``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        raise NotImplementedError

    def handleInputRows(self, key: tuple, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N802
        raise NotImplementedError

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Any]:  # noqa: N802
        """Called for each timer of ``key`` that came due; yields output like ``handleInputRows``."""
        return iter(())

    def close(self) -> None:
        """Called once a task's groups are done."""


@dataclass(frozen=True)
class TimerValues:
    """What Spark passes as ``timerValues``: the batch's processing time and the event-time
    watermark (-1 without event time)."""

    current_processing_time_ms: int
    current_watermark_ms: int = -1

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self.current_processing_time_ms

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802
        return self.current_watermark_ms


@dataclass(frozen=True)
class ExpiredTimerInfo:
    """Which timer fired (Spark's ``ExpiredTimerInfo``)."""

    expiry_time_ms: int

    def getExpiryTimeInMs(self) -> int:  # noqa: N802
        return self.expiry_time_ms


class _Variable:
    def __init__(self, handle: StatefulProcessorHandle, name: str):
        self._handle = handle
        self._name = name

    @property
    def _store(self) -> Any:
        return self._handle._stores[self._name]

    @property
    def _key(self) -> bytes:
        return self._handle._current_key


class ValueState(_Variable):
    """One value per grouping key (Spark's ``ValueState``)."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, ttl_ms: int | None):
        super().__init__(handle, name)
        self._ttl_ms = ttl_ms

    def exists(self) -> bool:
        return self.get() is not None

    def get(self) -> Any:
        stored = self._store.get(self._key)
        if stored is None:
            return None
        expires, value = pickle.loads(stored)
        if expires is not None and expires <= self._handle._now_ms:
            return None
        return value

    def update(self, value: Any) -> None:
        expires = None if self._ttl_ms is None else self._handle._now_ms + self._ttl_ms
        self._store.put(self._key, _pickled((expires, value)))

    def clear(self) -> None:
        self._store.delete(self._key)


class ListState(_Variable):
    """A list per grouping key (Spark's ``ListState``), stored as one value."""

    def exists(self) -> bool:
        return self._store.get(self._key) is not None

    def get(self) -> Iterator[Any]:
        stored = self._store.get(self._key)
        return iter(() if stored is None else pickle.loads(stored))

    def put(self, values: Sequence[Any]) -> None:
        self._store.put(self._key, _pickled(list(values)))

    def appendValue(self, value: Any) -> None:  # noqa: N802
        self.put([*self.get(), value])

    def appendList(self, values: Sequence[Any]) -> None:  # noqa: N802
        self.put([*self.get(), *values])

    def clear(self) -> None:
        self._store.delete(self._key)


class MapState(_Variable):
    """A map per grouping key (Spark's ``MapState``): one store entry per map key, found by a
    prefix scan of the grouping key."""

    def _prefix(self) -> bytes:
        return struct.pack(">I", len(self._key)) + self._key

    def _entry_key(self, user_key: Any) -> bytes:
        return self._prefix() + _pickled(user_key)

    def exists(self) -> bool:
        with self._store.prefix_scan(self._prefix()) as entries:
            return next(entries, None) is not None

    def getValue(self, key: Any) -> Any:  # noqa: N802
        stored = self._store.get(self._entry_key(key))
        return None if stored is None else pickle.loads(stored)

    def containsKey(self, key: Any) -> bool:  # noqa: N802
        return self._store.get(self._entry_key(key)) is not None

    def updateValue(self, key: Any, value: Any) -> None:  # noqa: N802
        self._store.put(self._entry_key(key), _pickled(value))

    def iterator(self) -> Iterator[tuple[Any, Any]]:
        skip = len(self._prefix())
        with self._store.prefix_scan(self._prefix()) as entries:
            items = [(pickle.loads(k[skip:]), pickle.loads(v)) for k, v in entries]
        return iter(items)

    def keys(self) -> Iterator[Any]:
        return (k for k, _ in self.iterator())

    def values(self) -> Iterator[Any]:
        return (v for _, v in self.iterator())

    def removeKey(self, key: Any) -> None:  # noqa: N802
        self._store.delete(self._entry_key(key))

    def clear(self) -> None:
        entry_keys = [self._entry_key(k) for k in self.keys()]
        self._store.put_all(entry_keys, [None] * len(entry_keys))


class StatefulProcessorHandle:
    """What ``init`` gets: declares state variables (``getValueState``, ``getListState``,
    ``getMapState``); Spark's schema arguments are accepted and not enforced."""

    def __init__(self, stores: TaskStores | None, time_mode: str = "None"):
        self._stores = stores
        self._current_key = b""
        self._now_ms = now_ms()
        self._time_mode = time_mode
        self.declared: dict[str, str] = {}

    def _declare(self, name: str, kind: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a state variable needs a name, got {name!r}")
        if self.declared.get(name, kind) != kind:
            raise InvalidArgumentError(
                f"state variable {name!r} is declared twice, as {self.declared[name]} and {kind}"
            )
        self.declared[name] = kind

    def getValueState(self, name: str, schema: Any = None, ttl_duration_ms: int | None = None) -> ValueState:  # noqa: N802
        self._declare(name, "value")
        return ValueState(self, name, ttl_duration_ms)

    def getListState(self, name: str, schema: Any = None, ttl_duration_ms: int | None = None) -> ListState:  # noqa: N802
        self._declare(name, "list")
        return ListState(self, name)

    def getMapState(  # noqa: N802
        self, name: str, user_key_schema: Any = None, value_schema: Any = None, ttl_duration_ms: int | None = None
    ) -> MapState:
        self._declare(name, "map")
        return MapState(self, name)

    # -- timers ----------------------------------------------------------------------------------

    def _timer_stores(self) -> tuple[Any, Any]:
        if self._time_mode == "None":
            raise InvalidArgumentError('timers need time_mode "ProcessingTime" or "EventTime"')
        assert self._stores is not None, "timers are registered while processing, not in init"
        return self._stores[TIMERS_BY_TIME], self._stores[TIMERS_BY_KEY]

    def registerTimer(self, expiry_time_ms: int) -> None:  # noqa: N802
        """Fire ``handleExpiredTimer`` for the current key once ``expiry_time_ms`` has passed."""
        by_time, by_key = self._timer_stores()
        expiry = _expiry_bytes(int(expiry_time_ms))
        by_time.put(expiry + self._current_key, b"")
        by_key.put(_key_prefix(self._current_key) + expiry, b"")

    def deleteTimer(self, expiry_time_ms: int) -> None:  # noqa: N802
        by_time, by_key = self._timer_stores()
        expiry = _expiry_bytes(int(expiry_time_ms))
        by_time.delete(expiry + self._current_key)
        by_key.delete(_key_prefix(self._current_key) + expiry)

    def listTimers(self) -> Iterator[int]:  # noqa: N802
        """The current key's timers, earliest first."""
        _, by_key = self._timer_stores()
        prefix = _key_prefix(self._current_key)
        with by_key.prefix_scan(prefix) as entries:
            expiries = [_expiry_of(k[len(prefix) :]) for k, _ in entries]
        return iter(expiries)

    def _due_timers(self, until_ms: int) -> list[tuple[int, bytes]]:
        """``(expiry, pickled key)`` of every timer due at ``until_ms``, earliest first."""
        by_time, _ = self._timer_stores()
        # Every key is <expiry><pickled key>: those below <until + 1> are due.
        with by_time.range(None, _expiry_bytes(until_ms + 1)) as entries:
            return [(_expiry_of(k[:8]), k[8:]) for k, _ in entries]


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
    **backend_options: Any,
) -> Any:
    """``df`` grouped by ``keys`` through ``processor``, its state in kstate stores: what
    ``df.groupBy(*keys).transformWithStateInPandas(processor, output_schema, "Update",
    time_mode)`` computes. ``time_mode`` ``"EventTime"`` needs ``event_time_column`` (epoch ms,
    or a timestamp) and takes ``watermark_delay_ms`` (see the module docstring).
    ``num_partitions``: how many partitions the state has, recorded with it on the first run
    (default: Spark's default parallelism); later runs keep it unless ``kstate rescale`` changed
    it, and kstate routes the rows itself (``StateBackend.partition``), checked in every task.
    ``backend_options`` go to ``StateBackend`` (``batch_id``, ``lock_timeout``, ...)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if time_mode not in TIME_MODES:
        raise InvalidArgumentError(f"time_mode must be one of {TIME_MODES}, got {time_mode!r}")
    if (time_mode == "EventTime") != (event_time_column is not None):
        raise InvalidArgumentError('event_time_column goes with time_mode "EventTime", and only with it')
    declaring = StatefulProcessorHandle(None, time_mode)
    processor.init(declaring)
    if not declaring.declared:
        raise InvalidArgumentError("the processor's init declares no state variable")
    names = list(declaring.declared)
    names += [] if time_mode == "None" else [TIMERS_BY_TIME, TIMERS_BY_KEY]
    names += [EVENT_TIME] if time_mode == "EventTime" else []
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "bytes", "bytes") for name in names
    ]
    keys = [keys] if isinstance(keys, str) else list(keys)
    codecs = {name: _KEY_CODECS[kind] for name, kind in declaring.declared.items()}
    codecs.update({TIMERS_BY_TIME: "pickle-after-expiry", TIMERS_BY_KEY: "pickle-prefixed", EVENT_TIME: "event-time"})
    backend = StateBackend(
        builders, state_dir, changelog_dir, application_id, keys=keys, key_codecs=codecs, **backend_options
    )
    if time_mode == "EventTime" and backend.layout.changelog_url is not None:
        raise InvalidArgumentError("event-time timers read every partition's changelog from a file system path")
    if isinstance(output_schema, str):
        output_schema = StructType.fromDDL(output_schema)
    arrow_schema = to_arrow_schema(output_schema)

    def process(batches: Iterator[Any], stores: TaskStores) -> Iterator[Any]:
        handle = StatefulProcessorHandle(stores, time_mode)
        processor.init(handle)
        watermark = -1
        if time_mode == "EventTime":
            largest = _query_event_time(stores.layout, stores.batch_id)
            watermark = -1 if largest is None else largest - watermark_delay_ms
            batches = _tracking_event_time(batches, event_time_column, stores[EVENT_TIME], stores.batch_id)
        timer_values = TimerValues(handle._now_ms, watermark)
        output = OutputBatcher(arrow_schema, pandas=True)
        try:
            for key, group in iter_groups(batches, keys, pandas=True):
                handle._current_key = _pickled(key)
                for frame in processor.handleInputRows(key, iter([group]), timer_values):
                    yield from output.add(frame)
            if time_mode != "None":
                due_by = handle._now_ms if time_mode == "ProcessingTime" else watermark
                for expiry, pickled_key in handle._due_timers(due_by):
                    handle._current_key = pickled_key
                    handle.deleteTimer(expiry)
                    expired = ExpiredTimerInfo(expiry)
                    for frame in processor.handleExpiredTimer(pickle.loads(pickled_key), timer_values, expired):
                        yield from output.add(frame)
            yield from output.flush()
        finally:
            processor.close()

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        return backend.process(process, batches)

    return backend.partition(df, num_partitions).mapInArrow(task, output_schema)


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

"""``transform_with_state``: Spark's ``transformWithStateInPandas`` shape on kstate stores.

A ``StatefulProcessor`` (``init(handle)``, ``handleInputRows(key, rows, timerValues)``,
``close()``) declares its state variables in ``init`` with the handle's ``getValueState``,
``getListState`` and ``getMapState``, as with Spark, so a processor written for Spark runs here
with its imports changed. Differences: every state call is an in-process call into RocksDB (no
socket round trip), state is exactly once per micro-batch as the rest of kstate.spark, values are
any picklable Python objects (Spark's schemas are accepted and not enforced), and there are no
timers (``timerValues`` carries the current processing time only).

Each state variable is a kstate store named after it: keys are the pickled grouping key (a map
state adds the map key after a length prefix), values are pickled. A value state with a TTL keeps
its expiry with the value and reads as absent once it passed.
"""

from __future__ import annotations

import os
import pickle
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.spark.backend import StateBackend
from kstate.spark.exactly_once import TaskStores
from kstate.spark.groups import OutputBatcher, iter_groups
from kstate.stores import Stores


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _pickled(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=4)


class StatefulProcessor:
    """Base class of a processor; override ``init``, ``handleInputRows`` and, if needed, ``close``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        raise NotImplementedError

    def handleInputRows(self, key: tuple, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N802
        raise NotImplementedError

    def close(self) -> None:
        """Called once a task's groups are done."""


@dataclass(frozen=True)
class TimerValues:
    """What Spark passes as ``timerValues``; kstate has no timers, only the processing time."""

    current_processing_time_ms: int

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self.current_processing_time_ms


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

    def __init__(self, stores: TaskStores | None):
        self._stores = stores
        self._current_key = b""
        self._now_ms = _now_ms()
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


def transform_with_state(
    df: Any,
    keys: Sequence[str],
    processor: StatefulProcessor,
    output_schema: Any,
    state_dir: str | os.PathLike,
    changelog_dir: str | os.PathLike | None = None,
    application_id: str = "kstate",
    num_partitions: int | None = None,
    **backend_options: Any,
) -> Any:
    """``df`` grouped by ``keys`` through ``processor``, its state in kstate stores: what
    ``df.groupBy(*keys).transformWithStateInPandas(processor, output_schema, "Update", "None")``
    computes. ``backend_options`` go to ``StateBackend`` (``batch_id``, ``lock_timeout``, ...)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    declaring = StatefulProcessorHandle(None)
    processor.init(declaring)
    if not declaring.declared:
        raise InvalidArgumentError("the processor's init declares no state variable")
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "bytes", "bytes")
        for name in declaring.declared
    ]
    backend = StateBackend(builders, state_dir, changelog_dir, application_id, **backend_options)
    if isinstance(output_schema, str):
        output_schema = StructType.fromDDL(output_schema)
    arrow_schema = to_arrow_schema(output_schema)
    keys = list(keys)

    def process(batches: Iterator[Any], stores: TaskStores) -> Iterator[Any]:
        handle = StatefulProcessorHandle(stores)
        processor.init(handle)
        timer_values = TimerValues(handle._now_ms)
        output = OutputBatcher(arrow_schema, pandas=True)
        try:
            for key, group in iter_groups(batches, keys, pandas=True):
                handle._current_key = _pickled(key)
                for frame in processor.handleInputRows(key, iter([group]), timer_values):
                    yield from output.add(frame)
            yield from output.flush()
        finally:
            processor.close()

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        return backend.run(lambda stores: process(batches, stores))

    partitioned = df.repartition(num_partitions, *keys) if num_partitions else df.repartition(*keys)
    return partitioned.mapInArrow(task, output_schema)

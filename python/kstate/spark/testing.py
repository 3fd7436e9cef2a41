"""``TwsTester``: unit tests of a ``StatefulProcessor`` without Spark, as Spark 4.2's
``pyspark.sql.streaming.tws_tester.TwsTester`` (same method names), on kstate's own state
variables over in-memory kstate stores, so what a test sees is what ``transform_with_state`` does:
TTL expires (Spark's tester ignores it), list appends, typed values with ``StructType`` schemas,
and timers fire in expiry order.

```python
from pyspark.sql import Row
from kstate.spark.testing import TwsTester

tester = TwsTester(Counter(), timeMode="ProcessingTime")
assert tester.test("u1", [Row(v=1), Row(v=2)]) == [Row(user="u1", count=2)]
tester.peekValueState("count", "u1")                 # (2,)
fired = tester.setProcessingTime(60_000)             # timers due by then fire; TTLs run out
```

Processing time starts at 0 and the watermark at 0 (event time); both only move forward, by
``setProcessingTime`` and ``setWatermark``, each of which fires the timers due and then removes
expired state, as the end of a micro-batch does. In ``EventTime`` mode ``eventTimeExtractor`` (a
row's event time in ms) is required: rows at or below the watermark never reach the processor, as
in a query. Schemas given as ``StructType`` are enforced;
DDL strings need a Spark session to parse, so without one their values are stored as Spark
normalizes them (tuples) but not checked.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.spark.processor.processor import ExpiredTimerInfo, TimerValues, canonical_time_mode, state_store_names
from kstate.spark.processor.state_variables import (
    ListState,
    MapState,
    StatefulProcessorHandle,
    TypedSchemas,
    ValueState,
)
from kstate.stores import Stores

OUTPUT_MODES = {"append", "update", "complete"}


def _typed(declared: Any) -> TypedSchemas | None:
    from pyspark.sql.types import StructType

    value, key = declared.schema, declared.key_schema
    if not isinstance(value, StructType) or (declared.kind == "map" and not isinstance(key, StructType)):
        return None
    return TypedSchemas((value,), value, key)


class TwsTester:
    """Runs ``processor`` key by key on in-memory state (see the module docstring).
    ``initialStateRow``: ``(key, Row)`` pairs, ``initialStatePandas``: ``(key, DataFrame)``
    pairs, handed to ``handleInitialState`` at once. ``outputMode`` is checked, as Spark's tester
    takes it; ``eventTimeExtractor``: see the module docstring."""

    def __init__(
        self,
        processor: Any,
        initialStateRow: Iterable[tuple[Any, Any]] | None = None,  # noqa: N803
        initialStatePandas: Iterable[tuple[Any, Any]] | None = None,  # noqa: N803
        timeMode: str = "None",  # noqa: N803
        outputMode: str = "Append",  # noqa: N803
        eventTimeExtractor: Callable[[Any], int] | None = None,  # noqa: N803
    ):
        if initialStateRow is not None and initialStatePandas is not None:
            raise InvalidArgumentError("give initialStateRow or initialStatePandas, not both")
        if str(outputMode).lower() not in OUTPUT_MODES:
            raise InvalidArgumentError(
                f"outputMode must be one of {sorted(OUTPUT_MODES)} (any case), got {outputMode!r}"
            )
        self.processor = processor
        self._time_mode = canonical_time_mode(timeMode)
        if self._time_mode == "EventTime" and eventTimeExtractor is None:
            raise InvalidArgumentError('timeMode "EventTime" needs eventTimeExtractor (a row\'s event time in ms)')
        self._event_time = eventTimeExtractor
        self._processing_time = 0
        self._watermark = 0
        self._pandas = initialStatePandas is not None
        declaring = StatefulProcessorHandle(None, self._time_mode)
        processor.init(declaring)
        self._scratch = tempfile.TemporaryDirectory(prefix="kstate-tws-tester-")
        self._stores = {
            name: Stores.key_value_store_builder(Stores.in_memory_key_value_store(name), "bytes", "bytes")
            .build()
            .init(self._scratch.name)
            for name in state_store_names(declaring.declared, self._time_mode)
        }
        typed = {name: t for name, d in declaring.declared.items() if (t := _typed(d)) is not None}
        self.handle = StatefulProcessorHandle(self._stores, self._time_mode, now=0, schemas=typed)  # type: ignore[arg-type]
        processor.init(self.handle)
        for key, state in initialStateRow or initialStatePandas or ():
            self._at(key)
            processor.handleInitialState(self._key(key), state, self._timer_values())

    # -- input -------------------------------------------------------------------------------------

    def test(self, key: Any, input: list[Any]) -> list[Any]:  # noqa: A002
        """``handleInputRows`` of ``key`` with ``input`` (``Row``s); its output ``Row``s."""
        self._pandas = False
        self._at(key)
        if self._event_time is not None:
            input = [row for row in input if self._event_time(row) > self._watermark]  # noqa: A001
        return list(self.processor.handleInputRows(self._key(key), iter(input), self._timer_values()))

    def testInPandas(self, key: Any, input: Any) -> Any:  # noqa: N802, A002
        """``handleInputRows`` of ``key`` with one ``pandas.DataFrame``; its output concatenated."""
        self._pandas = True
        self._at(key)
        if self._event_time is not None and len(input):
            on_time = input.apply(lambda row: self._event_time(row) > self._watermark, axis=1)
            input = input[on_time].reset_index(drop=True)  # noqa: A001
        return self._frame(self.processor.handleInputRows(self._key(key), iter([input]), self._timer_values()))

    # -- time --------------------------------------------------------------------------------------

    def setProcessingTime(self, currentTimeMs: int) -> Any:  # noqa: N802, N803
        """Moves processing time forward; fires the timers due (``ProcessingTime``) and removes
        state whose TTL ran out. Returns what the timers emitted."""
        if currentTimeMs <= self._processing_time:
            raise InvalidArgumentError(f"processing time must move forward: {self._processing_time} -> {currentTimeMs}")
        self._processing_time = currentTimeMs
        self.handle.set_processing_time(currentTimeMs)
        return self._end_of_batch(currentTimeMs if self._time_mode == "ProcessingTime" else None)

    def setWatermark(self, currentWatermarkMs: int) -> Any:  # noqa: N802, N803
        """Moves the watermark forward (``EventTime``) and fires the timers due by it."""
        if self._time_mode != "EventTime":
            raise InvalidArgumentError('setWatermark needs timeMode "EventTime"')
        if currentWatermarkMs <= self._watermark:
            raise InvalidArgumentError(f"the watermark must move forward: {self._watermark} -> {currentWatermarkMs}")
        self._watermark = currentWatermarkMs
        return self._end_of_batch(currentWatermarkMs)

    # -- state -------------------------------------------------------------------------------------

    def peekValueState(self, stateName: str, key: Any) -> Any:  # noqa: N802, N803
        variable = self._variable(stateName, key, "value")
        return variable.get()

    def peekListState(self, stateName: str, key: Any) -> list[Any]:  # noqa: N802, N803
        return list(self._variable(stateName, key, "list").get())

    def peekMapState(self, stateName: str, key: Any) -> dict[Any, Any]:  # noqa: N802, N803
        return dict(self._variable(stateName, key, "map").iterator())

    def updateValueState(self, stateName: str, key: Any, value: Any) -> None:  # noqa: N802, N803
        self._variable(stateName, key, "value").update(value)

    def updateListState(self, stateName: str, key: Any, value: list[Any]) -> None:  # noqa: N802, N803
        self._variable(stateName, key, "list").put(value)

    def updateMapState(self, stateName: str, key: Any, value: dict[Any, Any]) -> None:  # noqa: N802, N803
        mapping = self._variable(stateName, key, "map")
        mapping.clear()
        for k, v in value.items():
            mapping.updateValue(k, v)

    def deleteState(self, stateName: str, key: Any) -> None:  # noqa: N802, N803
        declared = self.handle.declared.get(stateName)
        if declared is None or declared.kind == "deleted":
            raise InvalidArgumentError(f"no state variable {stateName!r}")
        self._variable(stateName, key, declared.kind).clear()

    def listTimers(self, key: Any) -> list[int]:  # noqa: N802
        self._at(key)
        return list(self.handle.listTimers())

    # -- internals ---------------------------------------------------------------------------------

    @staticmethod
    def _key(key: Any) -> tuple:
        return key if isinstance(key, tuple) else (key,)

    def _at(self, key: Any) -> None:
        self.handle.set_current_key(pickle.dumps(self._key(key), protocol=4))

    def _timer_values(self) -> TimerValues:
        if self._time_mode == "None":
            return TimerValues(-1, -1)
        return TimerValues(self._processing_time, self._watermark if self._time_mode == "EventTime" else -1)

    def _variable(self, name: str, key: Any, kind: str) -> Any:
        declared = self.handle.declared.get(name)
        if declared is None or declared.kind != kind:
            raise InvalidArgumentError(f"no {kind} state named {name!r}; init declared {sorted(self.handle.declared)}")
        self._at(key)
        handle = self.handle
        if kind == "value":
            return ValueState(handle, name, handle.value_codec(name, declared.schema), declared.ttl_ms)
        if kind == "list":
            return ListState(handle, name, handle.value_codec(name, declared.schema), declared.ttl_ms)
        codecs = handle.key_codec(name, declared.key_schema), handle.value_codec(name, declared.schema)
        return MapState(handle, name, *codecs, declared.ttl_ms)

    def _end_of_batch(self, due_by: int | None) -> Any:
        emitted: list[Any] = []
        if due_by is not None:
            for expiry, pickled_key in self.handle.due_timers(due_by):
                self.handle.set_current_key(pickled_key)
                if not self.handle.has_timer(expiry):
                    continue  # an earlier handler of the key deleted it
                fired = self.processor.handleExpiredTimer(
                    pickle.loads(pickled_key), self._timer_values(), ExpiredTimerInfo(expiry)
                )
                emitted.extend(fired)
                self.handle.deleteTimer(expiry)  # after the handler, as Spark's tester
        self.handle.remove_expired()
        return self._frame(iter(emitted)) if self._pandas else emitted

    @staticmethod
    def _frame(frames: Any) -> Any:
        import pandas as pd

        collected = list(frames)
        return pd.concat(collected, ignore_index=True) if collected else pd.DataFrame()

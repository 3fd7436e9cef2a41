"""Processors that behave as the ones of Spark's own transformWithState test suites
(``python/pyspark/sql/tests/pandas/helper/helper_pandas_transform_with_state.py``), written
afresh from what those tests check: each has a pandas and a Row form, declares the same state
variables and asserts inside what Spark's asserts (a failed assert fails the query).

``Suite`` runs many of them in one query: the grouping key is ``(case, id)``, each case's
processor gets its own keys (``id`` only), its state variables under ``<case>.<name>`` (a
``Prefixed`` handle) and its rows without the ``case`` column; what it returns becomes
``(case, id, out)`` rows, ``out`` the returned row as JSON. One query (per time mode) then covers
many of Spark's cases, on Spark's APIs and on kstate's alike.
"""

import json
import sys

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SUITE_OUTPUT = "case string, id string, out string"
LARGE = "a" * (512 * 1024)


class Prefixed:
    """A handle whose state variables are named ``<prefix>.<name>``; timers are the key's own."""

    def __init__(self, handle, prefix):
        self.handle, self.prefix = handle, prefix

    def getValueState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802, N803
        return self.handle.getValueState(f"{self.prefix}.{stateName}", schema, ttlDurationMs)

    def getListState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802, N803
        return self.handle.getListState(f"{self.prefix}.{stateName}", schema, ttlDurationMs)

    def getMapState(self, stateName, userKeySchema, valueSchema, ttlDurationMs=None):  # noqa: N802, N803
        return self.handle.getMapState(f"{self.prefix}.{stateName}", userKeySchema, valueSchema, ttlDurationMs)

    def deleteIfExists(self, stateName):  # noqa: N802, N803
        self.handle.deleteIfExists(f"{self.prefix}.{stateName}")

    def registerTimer(self, expiryTimestampMs):  # noqa: N802, N803
        self.handle.registerTimer(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs):  # noqa: N802, N803
        self.handle.deleteTimer(expiryTimestampMs)

    def listTimers(self):  # noqa: N802
        return self.handle.listTimers()


def as_json(record):
    return json.dumps(record, sort_keys=True, default=str)


class Suite(StatefulProcessor):
    """Dispatches each ``(case, id)`` key to its case's processor (``cases``: name -> class)."""

    def __init__(self, cases, pandas):
        self.cases = {name: make(pandas) for name, make in cases.items()}
        self.pandas = pandas

    def init(self, handle):
        for name, case in self.cases.items():
            case.init(Prefixed(handle, name))

    def _rows(self, rows):
        if self.pandas:
            return (frame.drop(columns=["case"]).reset_index(drop=True) for frame in rows)
        return (Row(**{k: v for k, v in row.asDict().items() if k != "case"}) for row in rows)

    def _wrap(self, name, key, results):
        for result in results:
            if self.pandas:
                records = result.to_dict("records")
                yield pd.DataFrame({"case": name, "id": key[1], "out": [as_json(r) for r in records]})
            else:
                yield Row(case=name, id=key[1], out=as_json(result.asDict(recursive=True)))

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        name = key[0]
        if name not in self.cases:
            return  # a case of the other API only (pandas chunk counts)
        results = self.cases[name].handleInputRows(key[1:], self._rows(rows), timerValues)
        yield from self._wrap(name, key, results)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        name = key[0]
        yield from self._wrap(name, key, self.cases[name].handleExpiredTimer(key[1:], timerValues, expiredTimerInfo))

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        if self.pandas:
            initialState = initialState.drop(columns=["case"]).reset_index(drop=True)  # noqa: N806
        else:
            initialState = Row(**{k: v for k, v in initialState.asDict().items() if k != "case"})  # noqa: N806
        self.cases[key[0]].handleInitialState(key[1:], initialState, timerValues)

    def close(self):
        for case in self.cases.values():
            case.close()


class Base(StatefulProcessor):
    """A case's processor: ``pandas`` tells which form it is; ``emit`` builds its output."""

    def __init__(self, pandas):
        self.pandas = pandas

    def emit(self, **columns):
        if self.pandas:
            return pd.DataFrame({k: [v] for k, v in columns.items()})
        return Row(**columns)

    def temperatures(self, rows):
        """Every non-null temperature of the key's rows (a chunk's or a row's)."""
        if self.pandas:
            return [int(t) for frame in rows for t in frame["temperature"].dropna()]
        return [r.temperature for r in rows if r.temperature is not None]

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        return iter(())

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        pass

    def close(self):
        pass


class Violations(Base):
    """Spark's basic case: a count of readings over 100 per key in value state (its expected
    value per batch asserted), and a variable deleted in ``init`` whose use must fail."""

    expected = {0: {"0": 1, "1": 2}, 1: {"0": 4, "1": 3}}
    ttl = None

    def init(self, handle):
        self.violations = handle.getValueState("numViolations", "value int", *([self.ttl] if self.ttl else []))
        self.temp = handle.getValueState("tempState", "value int")
        handle.deleteIfExists("tempState")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        from pyspark.errors import PySparkRuntimeError

        try:
            self.temp.exists()
            raise AssertionError("a deleted state variable answered")
        except PySparkRuntimeError as error:
            assert "Error checking value state exists" in str(error), error
        temps = self.temperatures(rows)
        before = self.violations.get()[0] if self.violations.exists() else None
        batch = 0 if before is None else 1
        if before is not None:
            assert before == self.expected[0][key[0]], (key, before)
        now = (before or 0) + sum(t > 100 for t in temps)
        assert now == self.expected[batch][key[0]], (key, now)
        self.violations.update((now,))
        yield self.emit(id=key[0], countAsString=str(len(temps)))


class ViolationsWithTtl(Violations):
    # Long enough to outlive the batches however slow the machine: a value that expired between
    # batch 0 and 1 would fail the case, and expiry is not what it tests.
    ttl = 3_600_000


class NeverStored(Base):
    """Spark's invalid-simple case: a value never written: exists() false, get() None, clear() fine."""

    def init(self, handle):
        self.violations = handle.getValueState("numViolations", "value int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        list(rows)
        assert not self.violations.exists()
        assert self.violations.get() is None
        self.violations.clear()
        yield self.emit(id=key[0], countAsString="0")


class Counters(Base):
    """Spark's map-state case: two counters in map state, iterated in key order, then removed."""

    ttl = None

    def init(self, handle):
        args = [self.ttl] if self.ttl else []
        self.counters = handle.getMapState("mapState", "name string", "count int", *args)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        n = len(self.temperatures(rows))
        first, second = ("key1",), ("key2",)
        one = n + (self.counters.getValue(first)[0] if self.counters.containsKey(first) else 0)
        two = n + (self.counters.getValue(second)[0] if self.counters.containsKey(second) else 0)
        self.counters.updateValue(first, (one,))
        self.counters.updateValue(second, (two,))
        assert [k[0] for k in self.counters.keys()] == ["key1", "key2"]
        assert [v[0] for v in self.counters.values()] == [one, two]
        entries = list(self.counters.iterator())
        assert entries[0][0] == first and entries[1][1] == (two,)
        self.counters.removeKey(first)
        assert not self.counters.containsKey(first) and self.counters.exists()
        self.counters.clear()
        assert not self.counters.exists()
        yield self.emit(id=key[0], countAsString=str(n))


class CountersWithTtl(Counters):
    ttl = 31_536_000_000


class GrowingList(Base):
    """Spark's large-list case: 100 elements (a null field each) put or appended, then 90 more."""

    def init(self, handle):
        self.items = handle.getListState("listState", "value int, valueNull int")
        self.size = handle.getValueState("listSizeState", "size int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        list(rows)
        before = list(self.items.get())
        if not before:
            assert self.size.get() is None
            added = [(i, None) for i in range(100)]
            self.items.put(added) if key[0] == "0" else self.items.appendList(added)
            self.size.update((100,))
        else:
            size = self.size.get()[0]
            assert before == [(i, None) for i in range(size)], before[:3]
            if key[0] == "0":
                self.items.put([(i, None) for i in range(size + 90)])
            else:
                self.items.appendList([(i, None) for i in range(size, size + 90)])
            self.size.update((size + 90,))
        after = ",".join(str(v) for v, _ in self.items.get())
        yield self.emit(id=key[0], prevElements=",".join(str(v) for v, _ in before), updatedElements=after)


class LargeValues(Base):
    """Spark's large-values case: 512 KB strings in value, list and map state."""

    def init(self, handle):
        self.value = handle.getValueState("valueState", "value string")
        self.items = handle.getListState("listState", "value string")
        self.entries = handle.getMapState("mapState", "key string", "value string")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        list(rows)
        self.value.update((LARGE,))
        self.items.put([(LARGE,), (LARGE + "b",), (LARGE + "c",)])
        self.entries.updateValue(("large_string_key",), (LARGE,))
        yield self.emit(
            id=key[0],
            valueStateResult=self.value.get()[0],
            listStateResult=",".join(v for (v,) in self.items.get()),
            mapStateResult=f"large_string_key:{self.entries.getValue(('large_string_key',))[0]}",
        )


OBJECT = (
    "id array<int>, tags array<array<string>>, metadata array<struct<key: string, value: string>>, "
    "address array<struct<road_id: int, city: string>>"
)
TAGS = [["dummy1", "dummy2"], ["dummy3"]]
METADATA = [{"key": "env", "value": "prod"}, {"key": "region", "value": "us-west"}]
ADDRESS = [(1, "Seattle"), (3, "SF")]


class Composite(Base):
    """Spark's composite-type case: arrays, nested structs (read back as Rows) and maps in value,
    list and map state; the map keyed by the bare key string (a one-field key schema)."""

    def init(self, handle):
        self.obj = handle.getValueState("obj_state", OBJECT)
        self.items = handle.getListState("list_state", OBJECT)
        self.entries = handle.getMapState(
            "map_state",
            "name string",
            "id int, attributes map<string, array<int>>, confs map<string, map<string, int>>",
        )

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        total = sum(self.temperatures(rows))
        if self.obj.exists():
            ids, tags, metadata, address = self.obj.get()
            assert tags == TAGS and metadata == [Row(**m) for m in METADATA], (tags, metadata)
            assert [a.asDict() for a in address] == [{"road_id": r, "city": c} for r, c in ADDRESS], address
            ids = [x + total for x in ids]
        else:
            ids = [0]
        self.obj.update((ids, TAGS, METADATA, ADDRESS))
        updated = []
        for stored_ids, tags, metadata, address in self.items.get():
            updated.append((stored_ids + [total], tags, [m.asDict() for m in metadata], address))
        self.items.put(updated or [(ids, TAGS, METADATA, ADDRESS)])
        flat = [i for stored_ids, *_ in updated or [(ids,)] for i in stored_ids]
        name = key[0]  # a bare string for the one-field key schema, as Spark's tests pass it
        if not self.entries.containsKey(name):
            self.entries.updateValue(name, (0, {"key1": [1], "key2": [10]}, {"e1": {"e2": 5, "e3": 10}}))
        else:
            number, attributes, confs = self.entries.getValue(name)
            attributes[name] = [total]
            confs.setdefault("e1", {})[name] = total
            self.entries.updateValue(name, (number, attributes, confs))
        _, attributes, confs = self.entries.getValue(name)
        yield self.emit(
            id=name,
            value_arr=",".join(map(str, ids)),
            list_state_arr=",".join(map(str, flat)),
            map_state_arr=json.dumps(attributes, sort_keys=True),
            nested_map_state_arr=json.dumps(confs, sort_keys=True),
        )


class Accumulated(Base):
    """Spark's initial-state case: the initial value plus every temperature, in value state; a
    two-column key ``(id1, id2)`` comes out as two columns (Spark's non-contiguous-key case)."""

    timers = False

    def init(self, handle):
        self.handle = handle
        self.value = handle.getValueState("value_state", "value int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        total = (self.value.get()[0] if self.value.exists() else 0) + sum(self.temperatures(rows))
        self.value.update((total,))
        if len(key) > 1:
            yield self.emit(id1=key[0], id2=key[1], value=str(total))
        else:
            yield self.emit(id=key[0], value=str(total))

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        value = int(initialState.at[0, "initVal"] if self.pandas else initialState.initVal)
        assert {("0",): 789, ("3",): 987, ("0", "1"): 789, ("3", "2"): 987}[tuple(key)] == value
        self.value.update((value,))
        if self.timers:
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() - 1)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        self.handle.deleteTimer(expiredTimerInfo.getExpiryTimeInMs())
        yield self.emit(id=f"{key[0]}-expired", value="timer")


class AccumulatedWithTimers(Accumulated):
    timers = True


class ListedInitialState(Accumulated):
    """Spark's multiple-rows initial-state case: every initial row of a key appended to a list
    (the value state starts empty)."""

    def init(self, handle):
        super().init(handle)
        self.initial = handle.getListState("list_state", "value int")

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        values = initialState["initVal"].tolist() if self.pandas else [initialState.initVal]
        for value in values:
            self.initial.appendValue((int(value),))


class NotNullable(Base):
    """Spark's not-nullable case: value state whose fields are declared non-nullable."""

    def init(self, handle):
        from pyspark.sql.types import IntegerType, StringType, StructField, StructType

        fields = [StructField("id", IntegerType(), False), StructField("name", StringType(), False)]
        self.state = handle.getValueState("state", StructType(fields))

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        list(rows)
        number = int(key[0])
        self.state.update((number, f"name-{number}"))
        yield self.emit(id=key[0], name=f"name-{number}")


class CountdownTimer(Base):
    """Spark's processing-time case: a running count; key "0" registers a timer 1 ms ahead in
    every batch; a firing timer (still listed, with the one registered since) clears the count."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count_state", "value string")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        count = (int(self.count.get()[0]) if self.count.exists() else 0) + len(self.temperatures(rows))
        if key == ("0",):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        self.count.update((str(count),))
        yield self.emit(id=key[0], countAsString=str(count))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        timers = list(self.handle.listTimers())
        assert timers == list(self.handle.listTimers()) and len(timers) == 2, timers
        assert expiredTimerInfo.getExpiryTimeInMs() in timers
        self.count.clear()
        self.handle.deleteTimer(expiredTimerInfo.getExpiryTimeInMs())
        yield self.emit(id=key[0], countAsString="-1")


class InterleavedLists(Base):
    """Spark's list-state case: two lists put and appended per row or chunk, read by interleaved
    iterators; a timestamp list written once."""

    ttl = None

    def init(self, handle):
        args = [self.ttl] if self.ttl else []
        self.first = handle.getListState("listState1", "temperature int", *args)
        self.second = handle.getListState("listState2", "temperature int", *args)
        self.times = handle.getListState("listStateTimestamp", "time timestamp")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        import datetime

        count, times = 0, []
        for part in rows:
            self.first.put([(120,), (20,)])
            self.second.put([(120,), (20,)])
            self.first.appendValue((111,))
            self.second.appendValue((222,))
            self.first.appendList([(120,), (20,)])
            self.second.appendList([(120,), (20,)])
            count += len(self.temperatures([part]))
            now = datetime.datetime.fromtimestamp(timerValues.getCurrentProcessingTimeInMs() / 1000)
            times.append((now + datetime.timedelta(minutes=1),))
        one, two = self.first.get(), self.second.get()
        assert [next(one)[0], next(two)[0], next(one)[0], next(two)[0]] == [120, 120, 20, 20]
        three = self.first.get()
        assert [next(three)[0], next(three)[0]] == [120, 20]
        assert [next(one)[0], next(two)[0], next(three)[0]] == [111, 222, 111]
        assert [next(one)[0], next(two)[0], next(three)[0]] == [120, 120, 120]
        assert [next(one)[0], next(two)[0], next(three)[0]] == [20, 20, 20]
        self.times.put(times)
        yield self.emit(id=key[0], countAsString=str(count))


class InterleavedListsWithTtl(InterleavedLists):
    ttl = 3_600_000  # as ViolationsWithTtl's


class ChunkCount(Base):
    """Spark's chunk-count case: how many frames a key's rows came in; no state variables."""

    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        yield self.emit(id=key[0], chunkCount=sum(1 for _ in rows))


class LatestEventTime(Base):
    """Spark's event-time case: the largest event time (s) in value state; a timer at the current
    watermark, which clears it when it fires."""

    def init(self, handle):
        self.handle = handle
        self.largest = handle.getValueState("max_state", "value string")

    def seconds(self, rows):
        if self.pandas:
            return [int(s) for frame in rows for s in frame["eventTime"].astype("int64") // 10**9]
        return [int(r.eventTime.timestamp()) for r in rows]

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        current = int(self.largest.get()[0]) if self.largest.exists() else 0
        largest = str(max([current, *self.seconds(rows)]))
        self.largest.update((largest,))
        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())
        yield self.emit(id=key[0], timestamp=largest)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        self.largest.clear()
        self.handle.deleteTimer(expiredTimerInfo.getExpiryTimeInMs())
        yield self.emit(id=f"{key[0]}-expired", timestamp=str(expiredTimerInfo.getExpiryTimeInMs()))


class EarliestEventTime(LatestEventTime):
    """Spark's watermark-without-event-time case: the smallest event time (s) so far in value
    state, no timers."""

    def init(self, handle):
        self.smallest = handle.getValueState("min_state", "value string")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        earlier = [int(self.smallest.get()[0])] if self.smallest.exists() else []
        smallest = str(min(earlier + self.seconds(rows)))
        self.smallest.update((smallest,))
        yield self.emit(id=key[0], timestamp=smallest)


def composite_output(pandas, count):
    """Spark's composite-output case's row for a key seen ``count`` times (dicts for pandas,
    Rows for the Row API)."""
    struct = dict if pandas else Row

    def inner(i, scale, key):
        return struct(
            intValue=i * scale,
            doubleValue=float(i * (1.5 if scale == 1 else 2.5)),
            arrayValue=[f"elem_{i}_{j}" for j in range(i + 1)],
            mapValue={f"map_{i}_{j}": f"val_{i}_{j}" for j in range(i + 1)},
        )

    return {
        "listOfPrimitive": [f"item_{i}" for i in range(count)],
        "mapOfPrimitive": {f"key{i}": f"value{i}" for i in range(count)},
        "listOfComposite": [inner(i, 1, None) for i in range(count)],
        "mapOfComposite": {f"nested_key{i}": inner(i, 10, None) for i in range(count)},
    }


class CompositeOutput(Base):
    """Spark's composite-output case: arrays, maps, arrays of structs and maps of structs out."""

    def init(self, handle):
        self.count = handle.getValueState("count_state", "value int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        count = (self.count.get()[0] if self.count.exists() else 0) + len(self.temperatures(rows))
        self.count.update((count,))
        yield self.emit(primitiveValue=f"key_{key[0]}_count_{count}", **composite_output(self.pandas, count))


class IntForDecimal(Base):
    """Spark's coercion case: an int returned for a decimal(10, 2) column."""

    def init(self, handle):
        self.count = handle.getValueState("count", "value int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        count = (self.count.get()[0] if self.count.exists() else 0) + sum(len(f) for f in rows)
        self.count.update((count,))
        yield pd.DataFrame({"id": [key[0]], "decimal_result": [12345]})


class LastSeen(Base):
    """For the event-time comparison: per user a count of on-time rows and the latest event
    time (TimestampType in state and out); a timer 10 s past the watermark emits the user's
    last state when the watermark passes it."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.latest = handle.getValueState("latest", "ts timestamp")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        if self.pandas:
            frames = list(rows)
            seen = sum(len(f) for f in frames)
            newest = max(f["ts"].max() for f in frames).to_pydatetime()
        else:
            stamps = [r.ts for r in rows]
            seen, newest = len(stamps), max(stamps)
        count = (self.count.get()[0] if self.count.exists() else 0) + seen
        self.count.update((count,))
        stored = self.latest.get()
        if stored is None or _naive(stored[0]) < _naive(newest):
            self.latest.update((newest,))
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs() + 10_000)
        yield self.emit(user=key[0], kind="input", ts=newest, count=count)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield self.emit(user=key[0], kind="expired", ts=self.latest.get()[0], count=self.count.get()[0])


def _naive(moment):
    return moment.replace(tzinfo=None) if moment.tzinfo is None else moment.astimezone().replace(tzinfo=None)


class Reminder(Base):
    """For the idle-stream test: on input, a processing-time timer ``delay_ms`` ahead; when it
    fires, the key's count and the expiry."""

    delay_ms = 3_000

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        count = (self.count.get()[0] if self.count.exists() else 0) + len(self.temperatures(rows))
        self.count.update((count,))
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + self.delay_ms)
        yield self.emit(id=key[0], kind="input", count=count, at=timerValues.getCurrentProcessingTimeInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield self.emit(id=key[0], kind="timer", count=self.count.get()[0], at=expiredTimerInfo.getExpiryTimeInMs())


class Calls(Base):
    """Counts its ``handleInputRows`` calls per key (value state) and the rows of each call;
    no timers, an initial value per key."""

    def init(self, handle):
        self.calls = handle.getValueState("calls", "n int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        seen = sum(len(f) for f in rows) if self.pandas else sum(1 for _ in rows)
        call = (self.calls.get()[0] if self.calls.exists() else 0) + 1
        self.calls.update((call,))
        yield self.emit(id=key[0], call=call, rows=seen)

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        self.calls.update((0,))


class RunningCount(Base):
    """Spark's TwsTester fuzz case: the rows a key has had so far (value state), after each batch."""

    def init(self, handle):
        self.count = handle.getValueState("count", "count int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        seen = sum(len(frame) for frame in rows) if self.pandas else sum(1 for _ in rows)
        (count,) = self.count.get() or (0,)
        self.count.update((count + seen,))
        yield self.emit(id=key[0], count=count + seen)

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        initial = initialState["initial_count"]
        self.count.update((int(initial.iloc[0] if self.pandas else initial),))


class TopScores(Base):
    """Spark's TwsTester fuzz case (top k): the ``K`` highest scores a key has had (list state),
    all of them after each batch."""

    K = 5

    def init(self, handle):
        self.top = handle.getListState("topK", "score double")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        new = [float(s) for frame in rows for s in frame["score"]] if self.pandas else [r.score for r in rows]
        top = sorted([s for (s,) in self.top.get()] + new, reverse=True)[: self.K]
        self.top.put([(s,) for s in top])
        if self.pandas:
            yield pd.DataFrame({"id": [key[0]] * len(top), "score": top})
        else:
            yield from (Row(id=key[0], score=s) for s in top)


class WordFrequency(Base):
    """Spark's TwsTester fuzz case (word frequency): a count per word and key (map state); each
    word of the batch with its new count."""

    def init(self, handle):
        self.counts = handle.getMapState("frequencies", "word string", "count int")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        words = [w for frame in rows for w in frame["value"]] if self.pandas else [r.value for r in rows]
        for word in sorted(set(words)):
            count = (self.counts.getValue((word,)) or (0,))[0] + words.count(word)
            self.counts.updateValue((word,), (count,))
            yield self.emit(id=key[0], word=word, count=count)


class ChainedEvents(Base):
    """Spark's chaining case: no state; each row's event time passed on as ``outputTimestamp``."""

    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        if self.pandas:
            for frame in rows:
                yield pd.DataFrame({"id": key[0], "outputTimestamp": frame["eventTime"]})
        else:
            yield from (Row(id=key[0], outputTimestamp=row.eventTime) for row in rows)

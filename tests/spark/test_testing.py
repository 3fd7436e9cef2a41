"""kstate.spark.testing.TwsTester: a processor written against Spark's API, run key by key without
Spark, with controlled processing time and watermark."""

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType  # noqa: E402

from kstate.errors import InvalidArgumentError  # noqa: E402
from kstate.spark.testing import TwsTester  # noqa: E402

from . import spark_suite_processors as p  # noqa: E402

COUNT = StructType([StructField("count", LongType())])


class Sessions(StatefulProcessor):
    """Counts a user's events; a timer 1 s after the last one emits the session; amounts are kept
    for 10 s each (TTL per list element)."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", COUNT)
        self.amounts = handle.getListState("amounts", "amount long", ttlDurationMs=10_000)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        (count,) = self.count.get() or (0,)
        for row in rows:
            count += 1
            self.amounts.appendValue((row.amount,))
        self.count.update((count,))
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1000)
        yield Row(user=key[0], count=count)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        total = sum(a for (a,) in self.amounts.get())
        yield Row(user=key[0], session=self.count.get()[0], total=total, at=expiredTimerInfo.getExpiryTimeInMs())
        self.count.clear()

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        self.count.update((initialState["count"],))

    def close(self):
        pass


def test_rows_state_timers_and_ttl():
    tester = TwsTester(Sessions(), initialStateRow=[("a", Row(count=10))], timeMode="ProcessingTime")
    assert tester.test("a", [Row(amount=1), Row(amount=2)]) == [Row(user="a", count=12)]
    assert tester.test("b", [Row(amount=5)]) == [Row(user="b", count=1)]
    assert tester.peekValueState("count", "a") == (12,)
    assert tester.listTimers("a") == [1000]
    assert tester.setProcessingTime(999) == []
    fired = tester.setProcessingTime(1000)
    assert fired == [Row(user="a", session=12, total=3, at=1000), Row(user="b", session=1, total=5, at=1000)]
    assert tester.peekValueState("count", "a") is None
    assert tester.peekListState("amounts", "a") == [(1,), (2,)]
    tester.setProcessingTime(10_000)
    assert tester.peekListState("amounts", "a") == [], "each amount lives 10 s"


def test_state_can_be_set_and_is_typed():
    tester = TwsTester(Sessions(), timeMode="ProcessingTime")
    tester.updateValueState("count", "a", (41,))
    assert tester.test("a", [Row(amount=1)]) == [Row(user="a", count=42)]
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        tester.updateValueState("count", "a", ("many",))
    with pytest.raises(InvalidArgumentError, match="forward"):
        tester.setProcessingTime(0)


class Amounts(StatefulProcessor):
    """Appends each row's amount to a typed list that lives 10 s per element."""

    def init(self, handle):
        self.amounts = handle.getListState("amounts", AMOUNT, ttlDurationMs=10_000)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        self.amounts.appendList([(row.amount,) for row in rows])
        return iter(())


AMOUNT = StructType([StructField("amount", LongType())])


def test_a_list_put_replaces_every_element_and_appends_continue_after_it():
    """``put`` writes the new elements and deletes the old ones past them in one native call."""
    tester = TwsTester(Amounts(), timeMode="ProcessingTime")
    tester.test("a", [Row(amount=n) for n in range(5)])
    tester.updateListState("amounts", "a", [(10,), (11,)])
    assert tester.peekListState("amounts", "a") == [(10,), (11,)]
    tester.test("a", [Row(amount=12)])
    assert tester.peekListState("amounts", "a") == [(10,), (11,), (12,)]
    tester.updateListState("amounts", "a", [(n,) for n in range(20, 27)])
    assert tester.peekListState("amounts", "a") == [(n,) for n in range(20, 27)]
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        tester.updateListState("amounts", "a", [(1,), ("x",)])
    assert tester.peekListState("amounts", "a") == [(n,) for n in range(20, 27)], "a misfit writes nothing"
    tester.setProcessingTime(10_000)
    assert tester.peekListState("amounts", "a") == [], "the replaced elements carry their TTL"


class AsSpark(StatefulProcessor):
    """Spark's behaviours a processor may rely on: nested structs read back as Rows, a bare
    one-character string as a one-field map key, a deleted variable raising Spark's error, an
    expired timer still listed in its handler."""

    def init(self, handle):
        self.handle = handle
        tag = StructType([StructField("k", StringType()), StructField("v", LongType())])
        inner = StructType([StructField("a", LongType())])
        obj = StructType([StructField("tags", ArrayType(tag)), StructField("inner", inner)])
        self.obj = handle.getValueState("obj", obj)  # typed in the tester: StructType schemas
        name = StructType([StructField("name", StringType())])
        self.names = handle.getMapState("names", name, StructType([StructField("n", LongType())]))
        self.gone = handle.getValueState("gone", COUNT)
        handle.deleteIfExists("gone")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        from pyspark.errors import PySparkRuntimeError

        from kstate.errors import DeletedStateVariableError, StateTypeError

        list(rows)
        self.obj.update(([{"k": "x", "v": 1}], (2,)))
        tags, inner = self.obj.get()
        assert tags[0].asDict() == {"k": "x", "v": 1} and inner.a == 2 and type(self.obj.get()) is tuple
        self.names.updateValue("a", (1,))
        assert self.names.getValue(("a",)) == (1,) and self.names.containsKey("a")
        with pytest.raises(StateTypeError, match="first character"):
            self.names.updateValue("ab", (1,))
        for call in (self.gone.exists, self.gone.get, lambda: self.gone.update((1,))):
            with pytest.raises(PySparkRuntimeError, match="Error (checking|getting|updating) value state"):
                call()
        with pytest.raises(DeletedStateVariableError):
            self.gone.clear()
        self.handle.registerTimer(10)
        yield Row(key=key[0])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield Row(key=key[0], listed=list(self.handle.listTimers()))


def test_spark_behaviours_processors_rely_on():
    tester = TwsTester(AsSpark(), timeMode="processingtime")
    assert tester.test("k", [Row(x=1)]) == [Row(key="k")]
    assert tester.setProcessingTime(10) == [Row(key="k", listed=[10])], "listed in its handler"
    assert tester.listTimers("k") == [], "deleted after it"


# -- Spark's own TwsTester tests (test_tws_tester.py), on kstate's tester and on Spark's -----------

try:
    from pyspark.sql.streaming.tws_tester import TwsTester as SparkTwsTester
except ImportError:  # PySpark before 4.2
    SparkTwsTester = None

TESTERS = [
    pytest.param(TwsTester, id="kstate"),
    pytest.param(SparkTwsTester, id="spark", marks=pytest.mark.skipif(SparkTwsTester is None, reason="PySpark < 4.2")),
]


def refusal(tester_class):
    """The error a tester raises for misuse: kstate's typed one, or Spark's (assertions, or its
    PySpark errors)."""
    from pyspark.errors import PySparkException

    return InvalidArgumentError if tester_class is TwsTester else (AssertionError, PySparkException)


def frame(**columns):
    import pandas as pd

    return pd.DataFrame(columns)


def records(result):
    """A tester's output as dicts, whichever API gave it."""
    return result.to_dict("records") if hasattr(result, "to_dict") else [r.asDict() for r in result]


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_running_count_value_state_and_inputs(tester_class):
    """Spark's running-count cases (Row and pandas), direct value state access, step function,
    row by row, empty and null inputs, dtypes, init called once, deleteState of a value."""
    tester = tester_class(p.RunningCount(False))
    assert tester.test("key1", [Row(value="a")]) == [Row(id="key1", count=1)]
    assert tester.test("key2", [Row(value="a"), Row(value=None)]) == [Row(id="key2", count=2)]
    assert tester.test("key1", [Row(value="a")] * 3) == [Row(id="key1", count=4)]
    assert tester.test("key3", []) == [Row(id="key3", count=0)]
    assert [tester.peekValueState("count", k) for k in ("key1", "key2", "key4")] == [(4,), (2,), None]
    tester.updateValueState("count", "key1", (10,))
    assert tester.test("key1", [Row(value="q")]) == [Row(id="key1", count=11)]
    rows = [tester.test(k, [Row(value="x")])[0]["count"] for k in ("a", "b", "a", "a")]
    assert rows == [1, 1, 2, 3], "row by row"
    tester.deleteState("count", "a")
    assert tester.peekValueState("count", "a") is None and tester.peekValueState("count", "b") == (1,)

    pandas = tester_class(p.RunningCount(True))
    assert records(pandas.testInPandas("key1", frame(value=["a", "b", "c"]))) == [{"id": "key1", "count": 3}]
    assert records(pandas.testInPandas("key1", frame(value=[]))) == [{"id": "key1", "count": 3}]
    assert pandas.testInPandas("key2", frame(value=["a"]))["count"].dtype == "int64"


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_top_k_and_list_state(tester_class):
    """Spark's top-k cases (list state; Row and pandas), direct list state, deleteState of a list."""
    tester = tester_class(p.TopScores(False))
    assert [r.score for r in tester.test("key1", [Row(score=s) for s in (2.0, 3.0, 1.0, 9.0, 8.0, 7.0)])] == [
        9.0, 8.0, 7.0, 3.0, 2.0,
    ]  # fmt: skip
    assert [r.score for r in tester.test("key1", [Row(score=10.0)])] == [10.0, 9.0, 8.0, 7.0, 3.0]
    assert tester.peekListState("topK", "key1") == [(10.0,), (9.0,), (8.0,), (7.0,), (3.0,)]
    assert tester.peekListState("topK", "key2") == []
    tester.updateListState("topK", "key2", [(6.0,), (5.0,)])
    assert [r.score for r in tester.test("key2", [Row(score=5.5)])] == [6.0, 5.5, 5.0]
    tester.deleteState("topK", "key1")
    assert tester.peekListState("topK", "key1") == [] and len(tester.peekListState("topK", "key2")) == 3

    pandas = tester_class(p.TopScores(True))
    assert records(pandas.testInPandas("key1", frame(score=[2.0, 3.0]))) == [
        {"id": "key1", "score": 3.0}, {"id": "key1", "score": 2.0},
    ]  # fmt: skip


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_word_frequency_and_map_state(tester_class):
    """Spark's word-frequency cases (map state; Row and pandas), direct map state, deleteState of
    a map."""
    tester = tester_class(p.WordFrequency(False))
    words = [Row(value=w) for w in ("hello", "world", "hello", "world")]
    assert [tuple(r)[1:] for r in tester.test("user1", words)] == [("hello", 2), ("world", 2)]
    assert [tuple(r)[1:] for r in tester.test("user1", [Row(value="hello"), Row(value="test")])] == [
        ("hello", 3), ("test", 1),
    ]  # fmt: skip
    assert tester.peekMapState("frequencies", "user1") == {("hello",): (3,), ("world",): (2,), ("test",): (1,)}
    assert tester.peekMapState("frequencies", "user3") == {}
    tester.updateMapState("frequencies", "user2", {("spark",): (10,)})
    assert [tuple(r)[1:] for r in tester.test("user2", [Row(value="spark")])] == [("spark", 11)]
    tester.deleteState("frequencies", "user1")
    assert tester.peekMapState("frequencies", "user1") == {}
    assert tester.peekMapState("frequencies", "user2") == {("spark",): (11,)}

    pandas = tester_class(p.WordFrequency(True))
    assert records(pandas.testInPandas("u", frame(value=["a", "b", "a"]))) == [
        {"id": "u", "word": "a", "count": 2}, {"id": "u", "word": "b", "count": 1},
    ]  # fmt: skip


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_initial_states_row_and_pandas(tester_class):
    """Spark's initial-state cases: handleInitialState per (key, state), empty initial states."""
    initial = [("a", Row(initial_count=10)), ("b", Row(initial_count=20))]
    tester = tester_class(p.RunningCount(False), initialStateRow=initial)
    assert tester.peekValueState("count", "a") == (10,) and tester.peekValueState("count", "b") == (20,)
    assert tester.test("a", [Row(value="a")]) == [Row(id="a", count=11)]
    assert tester.test("c", [Row(value="c")]) == [Row(id="c", count=1)]
    pandas = tester_class(p.RunningCount(True), initialStatePandas=[("a", frame(initial_count=[10]))])
    assert records(pandas.testInPandas("a", frame(value=["a"]))) == [{"id": "a", "count": 11}]
    empty = tester_class(p.RunningCount(False), initialStateRow=[])
    assert empty.test("k", [Row(value="a")]) == [Row(id="k", count=1)]
    empty = tester_class(p.RunningCount(True), initialStatePandas=[])
    assert records(empty.testInPandas("k", frame(value=["a"]))) == [{"id": "k", "count": 1}]


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_keys_of_any_type(tester_class):
    """Spark's key cases: numeric, special characters, None (Row and pandas). A tuple key: Spark's
    tester hands the processor ``(key,)``, kstate's the tuple itself (a key of several columns,
    as ``transform_with_state`` grouped by them gives it)."""
    tester = tester_class(p.RunningCount(False))
    assert tester.test(1, [Row(value="a"), Row(value="c")]) == [Row(id=1, count=2)]
    assert tester.test("key@#$%", [Row(value="a")]) == [Row(id="key@#$%", count=1)]
    assert tester.test(None, [Row(value="a"), Row(value="b")]) == [Row(id=None, count=2)]
    pandas = tester_class(p.RunningCount(True))
    assert records(pandas.testInPandas(None, frame(value=["a", "b"]))) == [{"id": None, "count": 2}]
    first_column = 1 if tester_class is TwsTester else (1, 2)
    assert tester.test((1, 2), [Row(value="a")]) == [Row(id=first_column, count=1)]


class SessionTimeout(StatefulProcessor):
    """Spark's session-timeout case: each input registers a timer 10 s after the processing time;
    when it fires the session ends (its state cleared)."""

    def __init__(self, pandas):
        self.pandas = pandas

    def init(self, handle):
        self.handle = handle
        self.last_seen = handle.getValueState("lastSeen", "ms long")

    def emit(self, key, result):
        return frame(key=[key], result=[result]) if self.pandas else Row(key=key, result=result)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        values = [v for f in rows for v in f["value"]] if self.pandas else [r.value for r in rows]
        now = timerValues.getCurrentProcessingTimeInMs()
        self.last_seen.update((now,))
        self.handle.registerTimer(now + 10_000)
        yield self.emit(key[0], f"received:{values[-1]}")

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        self.last_seen.clear()
        yield self.emit(key[0], "session-expired")


class EventTimeSession(StatefulProcessor):
    """Spark's event-time session case: a timer 5 s after a row's event time; a count of the rows
    that reached the processor."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "count long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        for row in rows:
            (count,) = self.count.get() or (0,)
            self.count.update((count + 1,))
            self.handle.registerTimer(row.event_time_ms + 5000)
            yield Row(key=key[0], result=f"received:{row.value}@{row.event_time_ms}")

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        self.count.clear()
        yield Row(key=key[0], result=f"session-expired@watermark={timerValues.getCurrentWatermarkInMs()}")


@pytest.mark.parametrize("pandas", [False, True], ids=["row", "pandas"])
@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_processing_time_timers(tester_class, pandas):
    """Spark's processing-time timer cases (Row and pandas): timers fire once processing time
    passes them; their handler's output comes back; state cleared there is gone."""
    tester = tester_class(SessionTimeout(pandas), timeMode="ProcessingTime")
    run = tester.testInPandas if pandas else tester.test
    assert records(run("key1", frame(value=["hello"]) if pandas else [Row(value="hello")])) == [
        {"key": "key1", "result": "received:hello"}
    ]
    assert len(tester.setProcessingTime(5000)) == 0
    run("key2", frame(value=["world"]) if pandas else [Row(value="world")])
    assert records(tester.setProcessingTime(11_000)) == [{"key": "key1", "result": "session-expired"}]
    assert records(tester.setProcessingTime(16_000)) == [{"key": "key2", "result": "session-expired"}]
    assert tester.peekValueState("lastSeen", "key1") is None and tester.peekValueState("lastSeen", "key2") is None


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_event_time_timers_and_late_rows(tester_class):
    """Spark's event-time cases: timers fired by a manual watermark, rows at or below the
    watermark dropped before the processor (``eventTimeExtractor``), timers from on-time rows."""
    tester = tester_class(EventTimeSession(), timeMode="EventTime", eventTimeExtractor=lambda r: r.event_time_ms)
    assert tester.test("key1", [Row(event_time_ms=10_000, value="hello")]) == [
        Row(key="key1", result="received:hello@10000")
    ]
    tester.test("key2", [Row(event_time_ms=11_000, value="world")])
    assert tester.setWatermark(15_000) == [Row(key="key1", result="session-expired@watermark=15000")]
    assert tester.setWatermark(16_000) == [Row(key="key2", result="session-expired@watermark=16000")]
    assert tester.peekValueState("count", "key1") is None
    tester.setWatermark(20_000)
    late_and_on_time = [Row(event_time_ms=t, value=v) for t, v in ((10_000, "late"), (20_000, "late"), (25_000, "ok"))]
    assert tester.test("key1", late_and_on_time) == [Row(key="key1", result="received:ok@25000")]
    assert tester.peekValueState("count", "key1") == (1,)

    pandas = tester_class(p.RunningCount(True), timeMode="EventTime", eventTimeExtractor=lambda r: r["t"])
    pandas.setWatermark(6000)
    assert records(pandas.testInPandas("k", frame(t=[4000, 6000, 8000], value=["a", "b", "c"]))) == [
        {"id": "k", "count": 1}
    ]


@pytest.mark.parametrize("tester_class", TESTERS)
def test_spark_misuse_is_refused(tester_class):
    """Spark's error cases: both initial states, timers without a time mode, a clock moved back or
    in the wrong mode, EventTime without an extractor, unknown state names; and what is no error:
    clearing state never set, ``deleteIfExists`` of an unknown name. Each tester raises its own
    error type (kstate's typed ``InvalidArgumentError``, a ``ValueError``)."""
    refused = refusal(tester_class)
    with pytest.raises(refused):
        tester_class(p.RunningCount(False), initialStateRow=[], initialStatePandas=[])
    with pytest.raises(refused, match="eventTimeExtractor"):
        tester_class(p.RunningCount(False), timeMode="EventTime")
    tester = tester_class(p.RunningCount(False))
    tester.handle.deleteIfExists("nonexistent_state")
    for misuse in (
        lambda: tester.handle.registerTimer(12_345),
        lambda: tester.handle.deleteTimer(12_345),
        lambda: list(tester.handle.listTimers()),
        lambda: tester.setWatermark(1000),
        lambda: tester.updateValueState("nonexistent_state", "k", (5,)),
        lambda: tester.peekValueState("nonexistent_state", "k"),
        lambda: tester.deleteState("nonexistent_state", "k"),
    ):
        with pytest.raises(refused):
            misuse()
    for processor, name in ((p.RunningCount, "count"), (p.TopScores, "topK"), (p.WordFrequency, "frequencies")):
        tester_class(processor(False)).deleteState(name, "never-set")
    timed = tester_class(p.RunningCount(False), timeMode="ProcessingTime")
    timed.setProcessingTime(1000)
    for misuse in (
        lambda: timed.setProcessingTime(1000),
        lambda: timed.setProcessingTime(500),
        lambda: timed.setWatermark(1),
    ):
        with pytest.raises(refused):
            misuse()
    watermarked = tester_class(p.RunningCount(False), timeMode="EventTime", eventTimeExtractor=lambda r: 0)
    watermarked.setWatermark(1000)
    with pytest.raises(refused):
        watermarked.setWatermark(1000)
    if tester_class is TwsTester:
        assert tester.setProcessingTime(1000) == [], "kstate: processing time moves in any mode (TTL needs it)"
    else:
        with pytest.raises(refused):
            tester.setProcessingTime(1000)

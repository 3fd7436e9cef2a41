"""kstate.spark.testing.TwsTester: a processor written against Spark's API, run key by key without
Spark, with controlled processing time and watermark."""

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType  # noqa: E402

from kstate.errors import InvalidArgumentError  # noqa: E402
from kstate.spark.testing import TwsTester  # noqa: E402

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

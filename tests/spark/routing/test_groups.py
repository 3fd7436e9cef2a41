"""The Row API's input rows (``kstate.spark.routing.groups.python_rows``) behave as the
``pyspark.sql.Row``s Spark builds, in everything a processor can observe, and its output rows
are matched to the output schema as Spark matches them; no Spark session."""

import gc
import pickle

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.errors import PySparkAttributeError, PySparkRuntimeError  # noqa: E402
from pyspark.sql import Row  # noqa: E402

from kstate.errors import InvalidArgumentError  # noqa: E402
from kstate.spark.routing.groups import (  # noqa: E402
    TUPLE_FIELD,
    OutputBatcher,
    cyclic_gc_paused,
    field_descriptor,
    iter_groups,
    python_rows,
)

# Names that shadow Row's and tuple's own attributes keep those attributes' meaning on Spark's rows.
TABLE = pa.table(
    {
        "user": ["a", "b", None],
        "count": [1, 2, 3],
        "index": [4, 5, 6],
        "asDict": [7, 8, 9],
        "amount": [1.5, None, 2.5],
        "tags": [["x"], [], None],
    }
)


def spark_rows(table):
    columns = [c.to_pylist() for c in table.columns]
    return [Row(*table.column_names)(*values) for values in zip(*columns)]


@pytest.mark.parametrize("position", range(3))
def test_rows_are_sparks_rows_in_all_a_processor_sees(position):
    ours, theirs = python_rows(TABLE)[position], spark_rows(TABLE)[position]
    assert isinstance(ours, Row) and type(ours).__name__ == "Row"
    assert ours == theirs and tuple(ours) == tuple(theirs)
    hashable = TABLE.drop_columns(["tags"])
    assert hash(python_rows(hashable)[position]) == hash(spark_rows(hashable)[position])
    assert repr(ours) == repr(theirs)
    assert list(ours.__fields__) == list(theirs.__fields__) == TABLE.column_names
    assert ours.asDict() == theirs.asDict() and ours.asDict(True) == theirs.asDict(True)
    for name in ("user", "amount", "tags"):
        assert getattr(ours, name) == getattr(theirs, name) == ours[name]
    # tuple's and Row's own attributes win over fields of the same name, as on Spark's rows
    assert ours.count(ours[1]) == theirs.count(theirs[1]) == 1
    assert ours.index(ours[0]) == theirs.index(theirs[0]) == 0
    assert ours["count"] == theirs["count"] and ours["asDict"] == theirs["asDict"]
    assert ours[1:3] == theirs[1:3] and ("user" in ours) and ("nope" not in ours)
    for dump, load in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)):
        back = load(dump(ours))
        assert back == theirs and repr(back) == repr(theirs) and back.user == theirs.user


def test_unknown_fields_and_writes_fail_as_on_sparks_rows():
    ours, theirs = python_rows(TABLE)[0], spark_rows(TABLE)[0]
    for row in (ours, theirs):
        with pytest.raises(PySparkAttributeError):
            _ = row.nope
        with pytest.raises(PySparkAttributeError):
            _ = row.__nope__
        with pytest.raises(PySparkRuntimeError):
            row.user = "c"


@pytest.mark.parametrize("kind", [TUPLE_FIELD, property], ids=["tuple slot", "property fallback"])
def test_field_descriptors_read_the_position_and_refuse_writes_as_rows_do(kind):
    # CPython's namedtuple field descriptor reads the tuple slot, bypassing Row.__getitem__;
    # where an interpreter's namedtuple fields are properties, a property reads the position.
    cls = type("Row", (Row,), {"__slots__": (), "a": field_descriptor(0, kind), "b": field_descriptor(1, kind)})
    ours, theirs = tuple.__new__(cls, ("x", 2)), Row(a="x", b=2)
    assert (ours.a, ours.b) == (theirs.a, theirs.b) == ("x", 2) and ours == theirs
    with pytest.raises(PySparkRuntimeError):
        ours.a = "y"
    assert python_rows(TABLE)[0].user == "a" and type(type(python_rows(TABLE)[0]).user) is TUPLE_FIELD


def test_a_repeated_name_reads_its_first_column():
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["v", "v"])
    ours, theirs = python_rows(table)[0], spark_rows(table)[0]
    assert ours.v == theirs.v == 1 and ours["v"] == theirs["v"] == 1 and ours == theirs


def test_groups_of_rows_are_slices_of_the_partitions_rows():
    batches = pa.table({"user": ["b", "a", "b"], "amount": [1, 2, 3]}).to_batches()
    groups = dict(iter_groups(iter(batches), ["user"], rows=True))
    assert {k: [(r.user, r.amount) for r in rows] for k, rows in groups.items()} == {
        ("a",): [("a", 2)],
        ("b",): [("b", 1), ("b", 3)],
    }
    assert all(isinstance(r, Row) for rows in groups.values() for r in rows)


def test_the_cyclic_gc_pauses_while_kstate_builds_a_batch_and_never_in_user_code():
    """The GC is off while the groups (and the read-ahead of their keys) are built and while
    output rows become a table; on in between, where the processor runs; and as it was after,
    an error inside included. A GC the user turned off stays off."""
    seen = []
    batches = pa.table({"user": ["b", "a", "b"], "amount": [1, 2, 3]}).to_batches()
    groups = iter_groups(iter(batches), ["user"], rows=True, before=lambda keys: seen.append(gc.isenabled()))
    for _ in groups:
        seen.append(gc.isenabled())
    assert seen == [False, True, True] and gc.isenabled()
    output = OutputBatcher(pa.schema([("n", pa.int64())]), pandas=False, rows=True)
    output.push((1,))
    output.flush()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), cyclic_gc_paused():
        assert not gc.isenabled()
        1 / 0  # noqa: B018
    assert gc.isenabled()
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        list(iter_groups(iter(batches), ["user"], rows=True))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_output_rows_match_the_schema_by_name_and_tuples_by_position():
    """``Row``s with field names go to the output columns by name (rows of two factories with
    their names in different orders, mixed in one batch), ``Row(**kwargs)`` too, plain tuples by
    position; a Row lacking a column, a tuple of the wrong width, a factory's row with fewer
    values than names, or a non-tuple is refused."""
    schema = pa.schema([("user", pa.string()), ("n", pa.int64())])
    same, swapped = Row("user", "n"), Row("n", "user")
    output = OutputBatcher(schema, pandas=False, rows=True, size=100)
    for row in [same("a", 1), swapped(2, "b"), same("c", 3), Row(n=4, user="d"), ("e", 5), swapped(6, "f")]:
        assert not output.push(row)
    (batch,) = output.flush()
    assert batch.to_pydict() == {"user": ["a", "b", "c", "d", "e", "f"], "n": [1, 2, 3, 4, 5, 6]}
    for bad in [Row("user", "m")("g", 7), ("h",), same("i"), ["j", 8], Row(user="k")]:
        with pytest.raises(InvalidArgumentError):
            OutputBatcher(schema, pandas=False, rows=True).push(bad)
    fresh = OutputBatcher(schema, pandas=False, rows=True)
    fresh.push(same("l", 9))
    with pytest.raises(InvalidArgumentError):
        fresh.push(same("m"))  # the fields match those of a row taken before; the width does not

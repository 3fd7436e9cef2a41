"""Typed state values: the binary row encoding, round trips of every supported type, checks on
write, and which schema changes read old values."""

import datetime
import decimal

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kstate.errors import InvalidArgumentError  # noqa: E402
from kstate.spark.row_codec import evolution_problems  # noqa: E402
from kstate.spark.state_variables import TypedCodec  # noqa: E402

INNER = StructType([StructField("x", IntegerType()), StructField("y", StringType())])
EVERYTHING = StructType(
    [
        StructField("flag", BooleanType()),
        StructField("n", LongType()),
        StructField("i", IntegerType()),
        StructField("f", FloatType()),
        StructField("d", DoubleType()),
        StructField("s", StringType()),
        StructField("b", BinaryType()),
        StructField("day", DateType()),
        StructField("at", TimestampType()),
        StructField("money", DecimalType(10, 2)),
        StructField("big", DecimalType(30, 4)),
        StructField("items", ArrayType(LongType())),
        StructField("tags", MapType(StringType(), IntegerType())),
        StructField("inner", INNER),
    ]
)


def codec(schema, versions=None):
    return TypedCodec("v", schema, tuple(versions or (schema,)))


def test_every_type_round_trips_as_a_tuple():
    value = (
        True,
        -(2**63),
        2**31 - 1,
        1.5,
        -2.25,
        "naïve ☃",
        bytearray(b"\x00\xff"),
        datetime.date(1969, 12, 31),
        datetime.datetime(2024, 2, 29, 23, 59, 58, 123456),
        decimal.Decimal("-12.34"),
        decimal.Decimal("123456789012345678901234.5678"),
        [1, None, 3],
        {"a": 1, "b": None},
        (7, None),
    )
    typed = codec(EVERYTHING)
    raw = typed.encode(value)
    assert typed.decode(raw) == value
    assert typed.decode(typed.encode((None,) * 14)) == (None,) * 14


def test_the_encoding_is_compact_and_stable():
    schema = StructType([StructField("count", LongType()), StructField("total", LongType())])
    raw = codec(schema).encode((3, 300))
    # writer schema 0, null bitmap, zigzag varints 3 -> 6 and 300 -> 600 (0xd8 0x04)
    assert raw == bytes([0, 0, 6, 0xD8, 0x04])


def test_rows_are_matched_by_field_name():
    schema = StructType([StructField("a", LongType()), StructField("b", StringType())])
    typed = codec(schema)
    assert typed.decode(typed.encode(Row(b="x", a=1))) == (1, "x")


def test_values_that_do_not_fit_are_refused():
    schema = StructType([StructField("count", LongType(), False), StructField("name", StringType())])
    typed = codec(schema)
    for bad in (("3", "x"), (None, "x"), (1,), 5):
        with pytest.raises(InvalidArgumentError, match="does not fit"):
            typed.encode(bad)
    assert typed.decode(typed.encode((1, 2))) == (1, "2"), "Spark stores the str of a string field's value"


def test_compatible_changes_read_old_values():
    old = StructType([StructField("count", IntegerType()), StructField("ratio", FloatType())])
    new = StructType(
        [
            StructField("note", StringType()),
            StructField("count", LongType()),
            StructField("ratio", DoubleType()),
        ]
    )
    assert evolution_problems(old, new) == []
    raw = codec(old).encode((5, 0.5))
    assert codec(new, [old, new]).decode(raw) == (None, 5, 0.5)


def test_incompatible_changes_are_named():
    old = StructType([StructField("count", LongType()), StructField("name", StringType())])
    narrowed = StructType([StructField("count", IntegerType()), StructField("name", StringType())])
    retyped = StructType([StructField("count", StringType()), StructField("name", StringType())])
    required = StructType([*old.fields, StructField("extra", LongType(), False)])
    assert evolution_problems(old, narrowed) == ["field count changed type bigint -> int"]
    assert evolution_problems(old, retyped) == ["field count changed type bigint -> string"]
    assert evolution_problems(old, required) == ["new field extra must be nullable (old values have none)"]

"""Typed state values: the binary row encoding, round trips of every supported type, checks on
write, and which schema changes read old values."""

import datetime
import decimal
import json
import random
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
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

from kstate.errors import CorruptedDataError, InvalidArgumentError, StateTypeError  # noqa: E402
from kstate.spark.format.row_codec import compile_schema, evolution_problems, row_decoder, row_encoder  # noqa: E402
from kstate.spark.processor.state_variables import TypedCodec  # noqa: E402

from . import row_codec_reference as reference  # noqa: E402
from .row_values import from_json, random_schema, random_value, same  # noqa: E402

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


def test_a_lone_surrogate_is_refused_as_a_value_that_does_not_fit():
    schema = StructType([StructField("name", StringType()), StructField("tags", MapType(StringType(), LongType()))])
    typed = codec(schema)
    for bad in (("x\ud800", {}), ("x", {"\udfff": 1}), (LoneSurrogateStr(), {})):
        with pytest.raises(InvalidArgumentError, match="'v'.*not valid Unicode text"):
            typed.encode(bad)
    assert typed.decode(typed.encode(("x\u00e9\U0001f600", {"k": 1}))) == ("x\u00e9\U0001f600", {"k": 1})


class LoneSurrogateStr:
    """Not a str: Spark stores its ``str()``, which here has no UTF-8 form."""

    def __str__(self):
        return "\ud800"


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


# -- the native codec against the Python codec it replaced, Spark's verifier, and garbage --------

FIXTURES = Path(__file__).parent / "fixtures" / "row_codec_python.json"


def reference_bytes(schema, value):
    out = bytearray()
    reference.row_encoder(schema)(out, value)
    return bytes(out)


def reference_decode(schema, raw):
    return reference.row_decoder(schema, schema)(memoryview(raw), 0)[0]


def test_bytes_the_python_codec_wrote_read_back_and_are_written_again_identically():
    cases = json.loads(FIXTURES.read_text())["cases"]
    assert len(cases) > 300
    for case in cases:
        schema = StructType.fromJson(case["schema"])
        value, raw = from_json(case["value"]), bytes.fromhex(case["hex"])
        native = compile_schema(schema)
        assert native.encode(value) == raw, (schema.simpleString(), value)
        decoded, end = native.decode(raw)
        assert end == len(raw)
        assert same(decoded, reference_decode(schema, raw)), (schema.simpleString(), value)


def test_random_values_encode_and_decode_as_the_python_codec_does():
    rng = random.Random(13)
    checked = 0
    for _ in range(300):
        schema = random_schema(rng, 3)
        native = compile_schema(schema)
        for _ in range(10):
            value = random_value(rng, schema, nullable=False)
            raw = reference_bytes(schema, value)
            assert native.encode(value) == raw, (schema.simpleString(), value)
            assert same(native.decode(raw)[0], reference_decode(schema, raw)), (schema.simpleString(), value)
            checked += 1
    assert checked == 3000


_FLAT_TYPES = [BooleanType(), ByteType(), IntegerType(), LongType(), DoubleType(), StringType()]


def test_flat_rows_given_as_plain_tuples_encode_as_the_python_codec_does():
    """Rows of booleans, integers, doubles and strings given as plain tuples take the native
    flat-row path: the same bytes as the reference codec, and what does not fit refused as
    Spark's verifier refuses it (the tuple left to the schema walk)."""
    from pyspark.sql.types import _make_type_verifier

    rng = random.Random(41)
    refused = 0
    for _ in range(200):
        fields = [StructField(f"f{i}", rng.choice(_FLAT_TYPES), rng.random() < 0.5) for i in range(rng.randint(1, 9))]
        schema = StructType(fields)
        native, typed = compile_schema(schema), codec(schema)
        spark = _make_type_verifier(schema, name="v")
        for _ in range(10):
            value = tuple(random_value(rng, f.dataType, f.nullable) for f in fields)
            assert native.encode(value) == reference_bytes(schema, value), (schema.simpleString(), value)
            assert native.encode(value) == native.encode(list(value)), (schema.simpleString(), value)
            bad = list(value)
            bad[rng.randrange(len(bad))] = rng.choice([None, True, 1, 2**63, -129, 1.5, "x", "\ud800"])
            bad = tuple(bad)
            expected, got = _outcome(spark, bad), _outcome(typed.encode, bad)
            if expected is None and "\ud800" not in bad:
                assert got is None and native.encode(bad) == reference_bytes(schema, bad), (schema.simpleString(), bad)
                continue
            refused += 1
            assert isinstance(got, InvalidArgumentError), (schema.simpleString(), bad, expected)
            if expected is not None:
                assert str(expected) in str(got), (str(expected), str(got))
    assert refused > 500


def test_schemas_in_json_form_read_what_their_struct_types_wrote():
    """A replica reads state without PySpark: codecs compiled from the recorded JSON decode the
    bytes the ``StructType``'s codec wrote, evolved schemas too."""
    rng = random.Random(29)
    for _ in range(100):
        schema = random_schema(rng, 3)
        written = compile_schema(schema)
        from_json_form = compile_schema(json.loads(schema.json()))
        for _ in range(5):
            raw = written.encode(random_value(rng, schema, nullable=False))
            assert same(from_json_form.decode(raw)[0], written.decode(raw)[0]), schema.simpleString()
    old = StructType([StructField("count", IntegerType()), StructField("money", DecimalType(10, 2))])
    new = StructType([StructField("count", LongType()), StructField("note", StringType())])
    raw = compile_schema(old).encode((5, decimal.Decimal("1.25")))
    assert row_decoder(old.jsonValue(), new.jsonValue())(raw, 0)[0] == (5, None)
    assert compile_schema(EVERYTHING.jsonValue()).decode(compile_schema(EVERYTHING).encode((None,) * 14))[0] == (
        (None,) * 14
    )


def test_row_decoder_and_row_encoder_keep_their_signatures():
    schema = StructType([StructField("a", LongType()), StructField("b", StringType())])
    out = bytearray(b"\xff")
    row_encoder(schema)(out, (1, "x"))
    assert row_decoder(schema, schema)(memoryview(bytes(out)), 1) == ((1, "x"), len(out))


_BAD_VALUES = ["x", 1, 1.5, None, True, b"b", [1], {"a": 1}, (1,), 2**70, -129, decimal.Decimal("1.5")]
_BAD_VALUES += [datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), object()]


def _outcome(check, value):
    """The error ``check(value)`` raises, or ``None``."""
    try:
        check(value)
    except (TypeError, ValueError) as error:
        return error
    return None


@pytest.mark.parametrize("seed", range(4))
def test_values_that_do_not_fit_raise_what_spark_verifier_raises(seed):
    from pyspark.sql.types import _make_type_verifier

    rng = random.Random(seed)
    compared = raised = 0
    for _ in range(150):
        schema = random_schema(rng, 2)
        typed = codec(schema)
        spark = _make_type_verifier(schema, name="v")
        for _ in range(8):
            value = [random_value(rng, f.dataType, f.nullable) for f in schema.fields]
            value[rng.randrange(len(value))] = rng.choice(_BAD_VALUES)
            value = tuple(value)
            expected, got = _outcome(spark, value), _outcome(typed.encode, value)
            compared += 1
            if expected is None:
                assert got is None, (schema.simpleString(), value, got)
                continue
            raised += 1
            assert got is not None, (schema.simpleString(), value, expected)
            assert isinstance(got, InvalidArgumentError)
            assert isinstance(got, TypeError) == isinstance(expected, TypeError), (value, expected, got)
            assert isinstance(got, ValueError)
            assert str(expected) in str(got), (str(expected), str(got))
            assert "state variable 'v'" in str(got)
    assert raised > compared / 3


def test_each_kind_of_misfit_names_its_field_as_spark_does():
    from pyspark.sql.types import _make_type_verifier

    schema = StructType(
        [
            StructField("count", LongType(), False),
            StructField("xs", ArrayType(ByteType(), False)),
            StructField("m", MapType(StringType(), IntegerType())),
            StructField("inner", INNER),
        ]
    )
    typed = codec(schema)
    spark = _make_type_verifier(schema, name="v")
    for bad, field in [
        ((None, [], {}, None), "field count in v"),
        (("3", [], {}, None), "field count in v"),
        ((1, [None], {}, None), "element in array field xs in v"),
        ((1, [300], {}, None), "field xs in v"),
        ((1, [], {None: 1}, None), "key of map field m in v"),
        ((1, [], {"k": "1"}, None), "value of map field m in v"),
        ((1, [], {}, ("x", None)), "field x in field inner in v"),
        ((1, [], {}, (1,)), "field inner in v"),
        ((1,), "v: Length of object"),
        (5, "v: StructType"),
    ]:
        expected, got = _outcome(spark, bad), _outcome(typed.encode, bad)
        assert isinstance(got, TypeError) == isinstance(expected, TypeError), bad
        assert field in str(got) and str(expected) in str(got), (str(expected), str(got))
    with pytest.raises(StateTypeError):
        typed.encode(("3", [], {}, None))
    assert isinstance(_outcome(typed.encode, ("3", [], {}, None)), TypeError)


def test_numpy_and_pandas_values_are_stored_as_spark_stores_them():
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    schema = StructType(
        [StructField("n", LongType()), StructField("x", DoubleType()), StructField("at", TimestampType())]
    )
    typed = codec(schema)
    moment = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
    raw = typed.encode((np.int64(3), np.float64(0.5), pd.Timestamp(moment)))
    assert raw == typed.encode((3, 0.5, moment))


def test_a_nan_decimal_is_stored_as_null_as_spark_does():
    schema = StructType([StructField("d", DecimalType(10, 2)), StructField("e", DecimalType(10, 2), False)])
    typed = codec(schema)
    assert typed.decode(typed.encode((decimal.Decimal("NaN"), decimal.Decimal("1.5")))) == (
        None,
        decimal.Decimal("1.50"),
    )
    with pytest.raises(InvalidArgumentError, match="not nullable"):
        typed.encode((None, decimal.Decimal("NaN")))


def test_garbage_bytes_raise_corrupted_data_never_crash():
    rng = random.Random(99)
    for _ in range(300):
        schema = random_schema(rng, 3)
        typed = codec(schema)
        for _ in range(30):
            raw = bytes([0]) + bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
            try:
                typed.decode(raw)
            except CorruptedDataError:
                pass
        valid = typed.encode(random_value(rng, schema, nullable=False))
        for cut in range(1, len(valid)):
            with pytest.raises(CorruptedDataError):
                typed.decode(valid[:cut])
    with pytest.raises(CorruptedDataError, match="schema"):
        codec(INNER).decode(bytes([7, 0, 2]))


def test_nested_structs_evolve_too():
    old_inner = StructType([StructField("x", IntegerType()), StructField("gone", BooleanType())])
    new_inner = StructType([StructField("y", DateType()), StructField("x", LongType())])
    old = StructType([StructField("inner", old_inner), StructField("xs", ArrayType(old_inner))])
    new = StructType([StructField("inner", new_inner), StructField("xs", ArrayType(new_inner))])
    assert evolution_problems(old, new) == []
    raw = codec(old).encode(((7, True), [(1, False), None]))
    assert codec(new, [old, new]).decode(raw) == ((None, 7), [(None, 1), None])
    assert row_decoder(old, new)(raw, 1) == (((None, 7), [(None, 1), None]), len(raw))


def test_declared_state_variables_pickle_to_the_executors_with_their_codecs():
    """Spark pickles the processor with what its ``init`` declared on the driver."""
    import pickle

    from pyspark import cloudpickle

    from kstate.spark.processor.state_variables import StatefulProcessorHandle, TypedSchemas

    schema = StructType([StructField("n", LongType())])
    handle = StatefulProcessorHandle(
        None, schemas={"m": TypedSchemas((schema,), schema, INNER), "v": TypedSchemas((schema,), schema)}
    )
    declared = [handle.getValueState("v", schema), handle.getMapState("m", INNER, schema), handle.getListState("l")]
    value, mapping, listing = pickle.loads(cloudpickle.dumps(declared))
    assert value._codec.decode(value._codec.encode((5,))) == (5,)
    assert mapping._keys.decode(mapping._keys.encode((1, "a"))) == (1, "a")
    assert listing._codec.decode(listing._codec.encode(["x"])) == ["x"]

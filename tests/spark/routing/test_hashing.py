"""kstate.spark.routing.hashing against real Spark: the same Arrow data hashed by kstate and, as a Spark
DataFrame, by Spark's ``hash()`` / ``pmod(hash(), n)``, and routed by ``repartition(n, *cols)``,
must agree on every row. One SparkSession for the module; a few thousand random rows."""

import datetime
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from kstate import _core  # noqa: E402
from kstate.errors import InvalidArgumentError  # noqa: E402
from kstate.spark.routing.hashing import check_hashable, partition_ids, spark_hash  # noqa: E402

from ..workload import spark_for_tests  # noqa: E402

ROWS = 3000
PARTITION_COUNTS = (1, 2, 7, 200)
# Multi-column keys, by column name.
KEYS = [("s", "l"), ("i", "s", "bin"), ("b", "f", "d", "dt", "ts")]


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-hashing-tests", "local[2]")
    yield session
    session.stop()


def random_string(rng):
    alphabet = "abcXYZ09 -é日本語😀ßΩ"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 41)))


def with_nulls(rng, values, rate=0.1):
    return [None if rng.random() < rate else v for v in values]


@pytest.fixture(scope="module")
def table():
    """``id`` plus one column of each supported Spark type: random values, edge values, nulls."""
    rng = random.Random(20240229)
    n = ROWS
    # Every UTF-8 byte length 0..40 (every tail length), then random multi-byte strings.
    strings = ["x" * k for k in range(41)] + ["", "é", "日", "😀", "aé", "a日", "a😀"]
    strings += [random_string(rng) for _ in range(n - len(strings))]
    longs = [0, 1, -1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1]
    longs += [rng.getrandbits(64) - 2**63 for _ in range(n - len(longs))]
    ints = [0, 1, -1, 2**31 - 1, -(2**31)] + [rng.getrandbits(32) - 2**31 for _ in range(n - 5)]
    shorts = [0, 1, -1, 2**15 - 1, -(2**15)] + [rng.getrandbits(16) - 2**15 for _ in range(n - 5)]
    bytes_ = [0, 1, -1, 127, -128] + [rng.getrandbits(8) - 128 for _ in range(n - 5)]
    specials = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5, -1.5, 1e-45, 3.4e38]
    floats = specials + [rng.uniform(-1e6, 1e6) for _ in range(n - len(specials))]
    doubles = specials + [5e-324, 1.7976931348623157e308]
    doubles += [rng.uniform(-1e12, 1e12) for _ in range(n - len(doubles))]
    days = [0, -1, 19782, -719162, 2932896] + [rng.randrange(-50000, 50000) for _ in range(n - 5)]
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    micros = [0, -1, 1, 1709210096789012] + [rng.randrange(-(2**41), 2**41) for _ in range(n - 4)]
    binaries = [b"", b"\x00", b"\xff", b"\x80\xfe\x7f", b"\xff" * 7] + [
        rng.randbytes(rng.randrange(0, 41)) for _ in range(n - 5)
    ]
    columns = {
        "id": pa.array(range(n), pa.int64()),
        "s": pa.array(with_nulls(rng, strings), pa.string()),
        "l": pa.array(with_nulls(rng, longs), pa.int64()),
        "i": pa.array(with_nulls(rng, ints), pa.int32()),
        "sh": pa.array(with_nulls(rng, shorts), pa.int16()),
        "by": pa.array(with_nulls(rng, bytes_), pa.int8()),
        "b": pa.array(with_nulls(rng, [rng.random() < 0.5 for _ in range(n)]), pa.bool_()),
        "f": pa.array(with_nulls(rng, floats), pa.float32()),
        "d": pa.array(with_nulls(rng, doubles), pa.float64()),
        "dt": pa.array(with_nulls(rng, [epoch.date() + datetime.timedelta(days=d) for d in days]), pa.date32()),
        "ts": pa.array(with_nulls(rng, micros), pa.int64()).cast(pa.timestamp("us", "UTC")),
        "bin": pa.array(with_nulls(rng, binaries), pa.binary()),
    }
    return pa.table(columns)


def spark_results(spark, table, expressions):
    """``{name: int32 numpy array}`` of Spark's columns ``expressions`` over ``table``, by ``id``."""
    frame = spark.createDataFrame(table)
    out = frame.select("id", *[e.alias(name) for name, e in expressions.items()]).orderBy("id").toArrow()
    assert out.column("id").to_pylist() == list(range(len(table)))
    return {name: out.column(name).to_numpy(zero_copy_only=False).astype(np.int32) for name in expressions}


@pytest.fixture(scope="module")
def spark_hashes(spark, table):
    """Spark's ``hash`` of each column and key, and ``pmod(hash(key), n)``."""
    names = [c for c in table.column_names if c != "id"]
    expressions = {c: F.hash(c) for c in names}
    for key in KEYS:
        expressions["+".join(key)] = F.hash(*key)
        for n in PARTITION_COUNTS:
            expressions[f"{'+'.join(key)}%{n}"] = F.pmod(F.hash(*key), F.lit(n))
    return spark_results(spark, table, expressions)


def test_the_spark_frame_has_the_arrow_types(spark, table):
    schema = {f.name: f.dataType.simpleString() for f in spark.createDataFrame(table.slice(0, 1)).schema}
    assert schema == {
        "id": "bigint",
        "s": "string",
        "l": "bigint",
        "i": "int",
        "sh": "smallint",
        "by": "tinyint",
        "b": "boolean",
        "f": "float",
        "d": "double",
        "dt": "date",
        "ts": "timestamp",
        "bin": "binary",
    }


@pytest.mark.parametrize("column", ["s", "l", "i", "sh", "by", "b", "f", "d", "dt", "ts", "bin"])
def test_each_type_hashes_as_spark_does(table, spark_hashes, column):
    np.testing.assert_array_equal(spark_hash([table.column(column)]), spark_hashes[column])


def test_float_edge_values_hash_as_spark_does(table, spark_hashes):
    # -0.0 like 0.0, NaN canonical, infinities: the first rows (unless nulled) are the specials.
    f = table.column("f").to_pylist()[:9]
    d = table.column("d").to_pylist()[:11]
    assert any(v is not None and np.isnan(v) for v in f + d)
    np.testing.assert_array_equal(spark_hash([table.column("f").slice(0, 9)]), spark_hashes["f"][:9])
    np.testing.assert_array_equal(spark_hash([table.column("d").slice(0, 11)]), spark_hashes["d"][:11])
    zeros = spark_hash([pa.array([0.0, -0.0], pa.float64())])
    assert zeros[0] == zeros[1]


@pytest.mark.parametrize("key", KEYS, ids="+".join)
def test_multi_column_keys_and_partitions_as_spark(table, spark_hashes, key):
    columns = [table.column(c) for c in key]
    name = "+".join(key)
    np.testing.assert_array_equal(spark_hash(columns), spark_hashes[name])
    for n in PARTITION_COUNTS:
        ids = partition_ids(columns, n)
        assert ids.dtype == np.int32
        np.testing.assert_array_equal(ids, spark_hashes[f"{name}%{n}"])


def test_null_rows_hash_to_the_seed(table):
    nulls = pa.nulls(3, pa.string())
    np.testing.assert_array_equal(spark_hash([nulls, pa.nulls(3, pa.int64()), pa.nulls(3)]), [42, 42, 42])


@pytest.mark.parametrize("n", [3, 16])
def test_repartition_puts_each_row_in_its_partition_id(spark, table, n):
    key = ["s", "l"]
    frame = spark.createDataFrame(table.select(["id", *key])).repartition(n, *key)
    placed = frame.select("id", F.spark_partition_id().alias("p")).orderBy("id").toArrow()
    assert placed.column("id").to_pylist() == list(range(len(table)))
    expected = partition_ids([table.column(c) for c in key], n)
    np.testing.assert_array_equal(placed.column("p").to_numpy(), expected)


def test_slices_chunks_and_other_layouts_hash_like_the_plain_array(table, spark_hashes):
    s, ts = table.column("s").combine_chunks(), table.column("ts").combine_chunks()
    want_s, want_ts = spark_hashes["s"], spark_hashes["ts"]
    for start, length in [(0, 5), (3, 100), (13, 1000), (ROWS - 7, 7)]:
        for column, want in [("s", want_s), ("b", spark_hashes["b"]), ("l", spark_hashes["l"])]:
            array = table.column(column).combine_chunks().slice(start, length)
            np.testing.assert_array_equal(spark_hash([array]), want[start : start + length])
    chunked = pa.chunked_array([s.slice(0, 1000), s.slice(1000, 1), s.slice(1001)])
    np.testing.assert_array_equal(spark_hash([chunked]), want_s)
    np.testing.assert_array_equal(spark_hash([s.cast(pa.large_string())]), want_s)
    np.testing.assert_array_equal(spark_hash([s.cast(pa.string_view())]), want_s)
    np.testing.assert_array_equal(spark_hash([s.dictionary_encode()]), want_s)
    np.testing.assert_array_equal(spark_hash([table.column("bin").cast(pa.large_binary())]), spark_hashes["bin"])
    # Other timestamp units and zones are the same instants, hashed as microseconds.
    np.testing.assert_array_equal(spark_hash([ts.cast(pa.timestamp("ns", "Europe/Paris"))]), want_ts)
    np.testing.assert_array_equal(spark_hash([ts.cast(pa.timestamp("us"))]), want_ts)
    seconds = pa.array([0, -86400, 1709210096], pa.int64())
    np.testing.assert_array_equal(
        spark_hash([seconds.cast(pa.timestamp("s"))]),
        spark_hash([pc.multiply(seconds, 1_000_000).cast(pa.timestamp("us"))]),
    )
    dt = table.column("dt").combine_chunks()
    np.testing.assert_array_equal(spark_hash([dt.cast(pa.date64())]), spark_hashes["dt"])
    assert len(spark_hash([pa.array([], pa.string())])) == 0


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.decimal128(10, 2),
        pa.list_(pa.int32()),
        pa.struct([("a", pa.int32())]),
        pa.map_(pa.string(), pa.int32()),
        pa.uint32(),
        pa.float16(),
        pa.time64("us"),
        pa.duration("us"),
        pa.binary(4),
        pa.dictionary(pa.int32(), pa.decimal128(5, 1)),
    ],
    ids=str,
)
def test_unsupported_types_are_refused_by_name(arrow_type):
    with pytest.raises(InvalidArgumentError, match="supported: bool, int8") as raised:
        check_hashable(arrow_type)
    assert str(arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type) in str(raised.value)
    with pytest.raises(InvalidArgumentError):
        spark_hash([pa.nulls(1, arrow_type)])


def test_supported_types_pass_the_check(table):
    for field in table.schema:
        check_hashable(field.type)
    for t in [pa.large_string(), pa.string_view(), pa.null(), pa.timestamp("ns"), pa.date64()]:
        check_hashable(t)


def test_bad_arguments_are_invalid_argument_errors():
    a, b = pa.array([1, 2], pa.int64()), pa.array(["x"])
    for columns in [[], [a, b], a, [[1, 2]]]:
        with pytest.raises(InvalidArgumentError):
            spark_hash(columns)
    for n in [0, -1, 2**31, 1.5, True]:
        with pytest.raises(InvalidArgumentError):
            partition_ids([a], n)
    lossy = pa.array([1], pa.timestamp("ns"))
    with pytest.raises(InvalidArgumentError, match="precision"):
        spark_hash([lossy])


def test_malformed_buffers_through_the_binding_are_invalid_argument_errors():
    eight = (7).to_bytes(8, "little")
    assert np.frombuffer(_core.spark_hash(1, [("int64", None, eight, None, 0)]), "<i4").tolist() == [
        spark_hash([pa.array([7], pa.int64())])[0]
    ]
    offsets = b"".join(o.to_bytes(4, "little") for o in (0, 5))
    for count, column in [
        (2, ("int64", None, eight, None, 0)),  # data shorter than two longs
        (1, ("int64", None, eight, None, 1)),  # offset past the data
        (9, ("int64", None, eight * 9, b"\xff", 0)),  # validity shorter than the rows
        (1, ("binary", offsets, b"abc", None, 0)),  # offsets past the data
        (1, ("binary", None, b"abc", None, 0)),  # no offsets
        (2, ("large_binary", offsets, b"abcdef", None, 0)),  # offsets too short for i64s
        (9, ("bool", None, b"\xff", None, 0)),  # 9 bits of 8
        (1, ("decimal128", None, eight * 2, None, 0)),  # no such kind
    ]:
        with pytest.raises(InvalidArgumentError):
            _core.spark_hash(count, [column])
    with pytest.raises(InvalidArgumentError, match="positive"):
        _core.spark_hash(1, [("int64", None, eight, None, 0)], 0)

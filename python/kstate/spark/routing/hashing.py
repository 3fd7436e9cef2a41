"""Spark's ``hash()`` and ``HashPartitioning`` partition ids of Arrow columns, natively.

``df.repartition(n, *cols)`` (and every shuffle on ``cols``) sends a row to Spark partition
``pmod(hash(*cols), n)``, with ``hash`` Spark's Murmur3 (seed 42). :func:`partition_ids` computes
exactly that for the rows of Arrow arrays, so a Python UDF can check that every row of a batch
belongs to the partition its task runs, and stored keys can be re-routed to a new partition
count. Vectorized in Rust (no Python object per row, GIL released); no pyspark needed, so it runs
in Python workers and in the CLI alike.

Spark semantics kept: a null leaves the running hash unchanged (an all-null row hashes to 42);
columns chain, each seeded with the previous column's hash; strings hash their UTF-8 bytes;
``-0.0`` hashes like ``0.0`` and every NaN like Java's canonical NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kstate import _core
from kstate.errors import InvalidArgumentError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

SUPPORTED_TYPES = (
    "bool, int8, int16, int32, int64, float32, float64, date32, date64, timestamp (any unit, any "
    "time zone; as microseconds), string, large_string, binary, large_binary, string_view, "
    "binary_view, null, and dictionaries of these"
)
"""The Arrow types :func:`spark_hash` takes, as Spark types: boolean, byte, short, int, long,
float, double, date, timestamp / timestamp_ntz, string, binary, void."""

# The binding's column kinds of the Arrow types it reads directly, by pyarrow type id string.
_FIXED = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "float": "float32",
    "double": "float64",
    "date32[day]": "date32",
}
_WIDTH = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "float32": 4, "float64": 8, "date32": 4, "timestamp_us": 8}


def check_hashable(arrow_type: pa.DataType) -> None:
    """Raises :class:`~kstate.errors.InvalidArgumentError` unless :func:`spark_hash` can hash
    columns of ``arrow_type`` exactly as Spark would (call it up front, e.g. on a schema)."""
    _plan(arrow_type)


def spark_hash(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Spark's ``hash(*columns)`` (``Murmur3Hash``, seed 42) of each row of the equally long Arrow
    ``columns``, as an int32 numpy array."""
    return _hash(columns, None)


def partition_ids(columns: Sequence[pa.Array | pa.ChunkedArray], num_partitions: int) -> np.ndarray:
    """The Spark partition of each row when a DataFrame is hash-partitioned on ``columns`` into
    ``num_partitions`` (``repartition(num_partitions, *cols)``): ``pmod(hash(*columns), n)``, as
    an int32 numpy array."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
        raise InvalidArgumentError(f"num_partitions must be an int, got {num_partitions!r}")
    if not 0 < num_partitions < 2**31:
        raise InvalidArgumentError(f"num_partitions must be in [1, 2^31), got {num_partitions}")
    return _hash(columns, num_partitions)


def _plan(arrow_type: Any) -> tuple[str, Any]:
    """``(kind, cast_to)``: the binding's column kind for ``arrow_type`` and the Arrow type to cast
    to first (``None``: as it is); raises for types Spark's hash cannot be matched on."""
    import pyarrow as pa

    t = pa.types
    if not isinstance(arrow_type, pa.DataType):
        raise InvalidArgumentError(f"expected a pyarrow DataType, got {type(arrow_type).__name__}")
    kind = _FIXED.get(str(arrow_type))
    if kind is not None:
        return kind, None
    if t.is_null(arrow_type):
        return "null", None
    if t.is_string(arrow_type) or t.is_binary(arrow_type):
        return "binary", None
    if t.is_large_string(arrow_type) or t.is_large_binary(arrow_type):
        return "large_binary", None
    if str(arrow_type) in ("string_view", "binary_view"):
        return "large_binary", pa.large_binary()
    if t.is_date64(arrow_type):
        return "date32", pa.date32()
    if t.is_timestamp(arrow_type):
        us = pa.timestamp("us", arrow_type.tz)
        return "timestamp_us", None if arrow_type == us else us
    if t.is_dictionary(arrow_type):
        kind, _ = _plan(arrow_type.value_type)
        return kind, arrow_type.value_type
    raise InvalidArgumentError(
        f"Spark's hash cannot be computed for Arrow type {arrow_type}; supported: {SUPPORTED_TYPES}"
    )


def _hash(columns: Sequence[Any], num_partitions: int | None) -> np.ndarray:
    import numpy as np
    import pyarrow as pa

    if isinstance(columns, (pa.Array, pa.ChunkedArray)) or not isinstance(columns, Sequence):
        raise InvalidArgumentError("columns must be a sequence of pyarrow arrays (one per hashed column)")
    if not columns:
        raise InvalidArgumentError("Spark's hash needs at least one column")
    arrays = [_array(column) for column in columns]
    count = len(arrays[0])
    if any(len(a) != count for a in arrays):
        raise InvalidArgumentError(f"columns of different lengths: {[len(a) for a in arrays]}")
    if count == 0:
        return np.zeros(0, dtype=np.int32)
    packed = [p for p in (_column(a) for a in arrays) if p is not None]
    out = _core.spark_hash(count, packed, num_partitions)
    return np.frombuffer(out, dtype="<i4").astype(np.int32)


def _array(column: Any) -> Any:
    """``column`` as one Arrow array of a type the binding reads directly."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not isinstance(column, pa.Array):
        raise InvalidArgumentError(f"expected a pyarrow Array or ChunkedArray, got {type(column).__name__}")
    _, cast_to = _plan(column.type)
    if cast_to is None:
        return column
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
        if column.type == cast_to:
            return _array(column)
    try:
        return _array(column.cast(cast_to))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise InvalidArgumentError(
            f"cannot hash {column.type} values as Spark's {cast_to} without losing precision: {e}"
        ) from e


def _slice(buffer: Any, start: int, length: int) -> bytes:
    return buffer.slice(start, length).to_pybytes()


def _column(array: Any) -> tuple | None:
    """The binding's ``(kind, offsets, data, validity, offset)`` for ``array``, copying only the
    bytes of its rows (``None``: nothing to mix in, every value null)."""
    kind, _ = _plan(array.type)
    n = len(array)
    if kind == "null" or array.null_count == n:
        return None
    # Start the copied buffers at the byte holding the first row's validity bit.
    bit = array.offset % 8
    base = array.offset - bit
    bitmap_bytes = (bit + n + 7) // 8
    buffers = array.buffers()
    validity = _slice(buffers[0], base // 8, bitmap_bytes) if array.null_count and buffers[0] is not None else None
    if kind in ("binary", "large_binary"):
        width = 8 if kind == "large_binary" else 4
        offsets = _slice(buffers[1], base * width, (bit + n + 1) * width)
        data = buffers[2].to_pybytes() if buffers[2] is not None else b""
        return kind, offsets, data, validity, bit
    if kind == "bool":
        return kind, None, _slice(buffers[1], base // 8, bitmap_bytes), validity, bit
    width = _WIDTH[kind]
    return kind, None, _slice(buffers[1], base * width, (bit + n) * width), validity, bit

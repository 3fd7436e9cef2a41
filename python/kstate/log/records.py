"""Kafka's legacy message format, magic v0 and v1 (KIP-31/32): message sets to and from bytes.

A *message set* is what a v0/v1 log segment, fetch response or produce request carries: a plain
concatenation of entries ``<i64 offset><i32 size><message>``. A message is either one record or
a *compressed wrapper* whose value is a whole inner message set compressed with gzip, snappy or
lz4. Every message has a CRC-32; v1 messages also have a timestamp and a timestamp type.

- ``encode(records, ...)`` builds a message set, uncompressed (one entry per record) or as one
  compressed wrapper, the way Kafka's ``MemoryRecordsBuilder`` does.
- ``decode(data)`` returns every record with its absolute offset, wrappers decompressed, the way
  Kafka's consumer reads them; ``iter_decode(data)`` yields them one at a time as it reads them.
  ``shallow_entries(data)`` returns the top-level entries as stored,
  for tools that look at segment files.
- ``decode_arrow(data)`` / ``encode_arrow(batch)`` do the same with a ``pyarrow.RecordBatch``
  (columns ``offset``, ``timestamp``, ``timestamp_type``, ``key``, ``value``), passing column
  buffers to the native codec with no Python object per record. pyarrow is optional and only
  imported by these two functions.

Bad bytes raise ``kstate.errors.CorruptedDataError`` naming the entry's byte position and offset;
bad arguments raise ``kstate.errors.InvalidArgumentError``. As in Kafka, a set that ends in a
truncated entry (a fetch response cut at its size limit) is not corrupt: reading stops there.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.value_and_timestamp import NO_TIMESTAMP

if TYPE_CHECKING:
    import pyarrow as pa


def _squashed(name: str) -> str:
    """``"LogAppendTime"``, ``"log_append_time"`` and ``"log-append-time"`` all become one key."""
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


class TimestampType(enum.IntEnum):
    """What a record's timestamp means; the values are Kafka's ids.

    ``TimestampType("CreateTime")``, ``TimestampType("log_append_time")`` and ``TimestampType(1)``
    all work. Magic v0 records have no timestamp, and so ``NO_TIMESTAMP_TYPE``.
    """

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    """Set by the producer."""
    LOG_APPEND_TIME = 1
    """Set by the broker when it appended the record; on a wrapper it replaces the inner records'."""

    @classmethod
    def _missing_(cls, value: object) -> TimestampType:
        if isinstance(value, str):
            for member in cls:
                if _squashed(value) == _squashed(member.name):
                    return member
        names = ", ".join(repr(member.name) for member in cls)
        raise InvalidArgumentError(f"{value!r} is not a timestamp type: use one of {names} or -1, 0, 1")


_core.register_timestamp_type(TimestampType)  # records report their type as a member of it


class Compression(enum.IntEnum):
    """The codec of a compressed wrapper; the values are Kafka's codec ids (attribute bits 0-2).

    ``Compression("gzip")``, ``Compression("LZ4")`` and ``Compression(2)`` all work, and
    ``Compression(None)`` is ``NONE``. zstd exists only in the v2 format, so it is not here.
    """

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3

    @classmethod
    def _missing_(cls, value: object) -> Compression:
        if value is None:
            return cls.NONE
        if isinstance(value, str):
            for member in cls:
                if _squashed(value) == _squashed(member.name):
                    return member
            if _squashed(value) == "zstd":
                raise InvalidArgumentError("zstd compression exists only in v2 record batches, not in v0/v1")
        names = ", ".join(repr(member.name.lower()) for member in cls)
        raise InvalidArgumentError(f"{value!r} is not a compression: use one of {names} or 0-3")


Record = _core.Record
Record.__doc__ = """One record as a consumer sees it: ``Record(offset, timestamp, timestamp_type, key, value)``.

``offset`` is absolute; ``timestamp`` is in milliseconds since the epoch or -1 (``NO_TIMESTAMP``);
``timestamp_type`` is a ``TimestampType``; ``key`` and ``value`` are ``bytes`` (exactly, not a
subclass) or ``None`` (a null key, or a null value, which is a tombstone; both differ from ``b""``).

Records are immutable, hashable and comparable (ordered by offset, then timestamp, timestamp type,
key and value, ``None`` before any bytes), and pickle. Build one with keywords, for example
``Record(7, 1_700_000_000_000, key=b"k", value=b"v")``: the timestamp type defaults to
``CREATE_TIME``. Decoding creates them natively, without running Python code per record.
"""


class Entry(NamedTuple):
    """One top-level entry of a message set as stored (see ``shallow_entries``).

    For a compressed wrapper, ``offset`` is its last inner record's offset, ``timestamp`` the
    largest inner timestamp (CreateTime) or the log-append time, ``key`` is ``None`` and ``value``
    holds the still-compressed inner message set.
    """

    position: int
    """Byte position of the entry in the set (what a Kafka offset index points at)."""
    size: int
    """Bytes the entry takes: the 12-byte offset and size header plus the message."""
    offset: int
    magic: int
    compression: Compression
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None

    @property
    def is_compressed(self) -> bool:
        return self.compression != Compression.NONE


def _magic(magic: int) -> int:
    if isinstance(magic, bool) or magic not in (0, 1):
        raise InvalidArgumentError(f"magic must be 0 or 1 (the legacy message formats), got {magic!r}")
    return magic


def _set_bytes(data: Any) -> bytes:
    """The message set as ``bytes`` (the native codec reads ``bytes``; others are copied once)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(f"a message set must be bytes, bytearray or memoryview, got {type(data).__name__}")


def encode(
    records: Iterable[Record | tuple[int, int, bytes | None, bytes | None]],
    *,
    magic: int = 1,
    compression: Compression | str | None = Compression.NONE,
    timestamp_type: TimestampType | str = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """Encode ``records`` (``Record``s or ``(offset, timestamp, key, value)`` tuples) into one
    message set of ``magic`` 0 or 1. A record's own timestamp type is ignored: a set has one.

    Uncompressed, each record is its own entry; with a ``compression`` the records go into one
    wrapper (v1 stores inner offsets relative to the first record, v0 absolute ones; the
    wrapper takes the last offset). Offsets must be non-negative and strictly increasing, and a
    timestamp must be -1 or non-negative (v0 stores none).

    ``timestamp_type=LOG_APPEND_TIME`` writes the set the way a broker does when the topic's
    ``message.timestamp.type`` is LogAppendTime: every record gets ``log_append_time`` (v1 only,
    and then required). An empty ``records`` gives ``b""``.
    """
    timestamp_type = TimestampType(timestamp_type)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise InvalidArgumentError("a LogAppendTime message set needs log_append_time")
    elif timestamp_type == TimestampType.CREATE_TIME:
        if log_append_time is not None:
            raise InvalidArgumentError("log_append_time is only for timestamp_type=LOG_APPEND_TIME")
    else:
        raise InvalidArgumentError("a message set is CreateTime or LogAppendTime, not NO_TIMESTAMP_TYPE")
    return _core.encode_records(records, _magic(magic), Compression(compression), log_append_time)


def decode(data: bytes | bytearray | memoryview) -> list[Record]:
    """Every record of the message set ``data``, in order, with absolute offsets.

    Compressed wrappers are decompressed and their records returned in their place, as Kafka's
    consumer does: a v1 inner offset is made absolute from the wrapper's offset, and a
    LogAppendTime wrapper's timestamp replaces its records' own. CRCs are checked.
    """
    return _core.decode_records(_set_bytes(data))


def iter_decode(data: bytes | bytearray | memoryview) -> Iterator[Record]:
    """The records of ``data`` as ``decode`` returns them, made as iteration reaches them.

    Records are made in chunks of up to 1024, and a compressed wrapper is decompressed when its
    first record is needed, so a large set never becomes one big list: faster and lighter than
    ``decode`` for a loop. A corrupt entry raises when iteration reaches it, after the records
    before it.
    """
    # The native side decodes a chunk of records per call; chaining the chunks in C keeps the
    # cost per record below that of a native call per record.
    return itertools.chain.from_iterable(_core.RecordChunks(_set_bytes(data)))


def shallow_entries(data: bytes | bytearray | memoryview) -> list[Entry]:
    """The top-level entries of ``data`` as stored, with their byte positions; wrappers stay
    compressed. CRCs are checked. Entries end at a truncated trailing entry: when the last
    entry's ``position + size`` is below ``len(data)``, the rest is a partial entry."""
    return [
        Entry(position, size, offset, magic, Compression(codec), timestamp, TimestampType(ts_type), key, value)
        for position, size, offset, magic, codec, timestamp, ts_type, key, value in _core.shallow_entries(
            _set_bytes(data)
        )
    ]


def arrow_schema(large_binary: bool = False) -> pa.Schema:
    """The schema of ``decode_arrow``'s batches: ``offset`` int64, ``timestamp`` int64,
    ``timestamp_type`` int8 (Kafka's ids, -1 for v0), ``key`` and ``value`` binary (nullable)."""
    import pyarrow as pa

    binary = pa.large_binary() if large_binary else pa.binary()
    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("timestamp_type", pa.int8(), nullable=False),
            pa.field("key", binary),
            pa.field("value", binary),
        ]
    )


def decode_arrow(data: bytes | bytearray | memoryview, *, large_binary: bool = False) -> pa.RecordBatch:
    """Every record of ``data`` (as ``decode``) as one ``pyarrow.RecordBatch`` of ``arrow_schema()``.

    The native codec fills the column buffers directly: no Python object is made per record.
    ``large_binary=True`` gives ``large_binary`` key and value columns, needed past 2 GiB.
    """
    import pyarrow as pa

    count, offsets, timestamps, timestamp_types, keys, values = _core.decode_record_columns(
        _set_bytes(data), large_binary
    )
    schema = arrow_schema(large_binary)

    def arrow_buffer(native: _core.ColumnBuffer) -> pa.Buffer:
        # No copy: the Arrow buffer reads the native memory and keeps its owner alive.
        return pa.foreign_buffer(native.address, native.size, base=native)

    def fixed_width(arrow_type: pa.DataType, native: _core.ColumnBuffer) -> pa.Array:
        return pa.Array.from_buffers(arrow_type, count, [None, arrow_buffer(native)], null_count=0)

    def binary(packed: tuple[_core.ColumnBuffer, _core.ColumnBuffer, _core.ColumnBuffer, int]) -> pa.Array:
        validity, value_offsets, value_data, null_count = packed
        buffers = [arrow_buffer(validity), arrow_buffer(value_offsets), arrow_buffer(value_data)]
        return pa.Array.from_buffers(schema.field("key").type, count, buffers, null_count=null_count)

    columns = [
        fixed_width(pa.int64(), offsets),
        fixed_width(pa.int64(), timestamps),
        fixed_width(pa.int8(), timestamp_types),
        binary(keys),
        binary(values),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def encode_arrow(
    batch: pa.RecordBatch | pa.Table,
    *,
    magic: int = 1,
    compression: Compression | str | None = Compression.NONE,
) -> bytes:
    """Encode the rows of ``batch`` (columns named as in ``arrow_schema()``) into one message set,
    like ``encode``, passing column buffers to the native codec with no Python object per row.

    ``offset``, ``key`` and ``value`` are required; ``timestamp`` defaults to -1 and
    ``timestamp_type`` to CreateTime. If every ``timestamp_type`` is LogAppendTime (1), the set is
    written as a LogAppendTime set whose log-append time is the rows' one shared timestamp, so a
    decoded LogAppendTime batch encodes back to the same records. Otherwise every type must be
    CreateTime (0) or none (-1). Keys and values may be binary or string, large or not.
    """
    import pyarrow as pa

    names = set(batch.schema.names)
    missing = {"offset", "key", "value"} - names
    if missing:
        raise InvalidArgumentError(f"encode_arrow needs the columns {sorted(missing)}; it got {batch.schema.names}")
    count = batch.num_rows

    def column(name: str) -> pa.Array:
        array = batch.column(name)
        return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array

    def fixed_width(name: str, arrow_type: pa.DataType, default: int) -> bytes:
        array = column(name) if name in names else pa.repeat(pa.scalar(default, arrow_type), count)
        if array.null_count:
            raise InvalidArgumentError(f"the {name} column has {array.null_count} nulls")
        if array.type != arrow_type:
            try:
                array = array.cast(arrow_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise InvalidArgumentError(f"the {name} column must be {arrow_type}: {error}") from None
        width = arrow_type.bit_width // 8
        return array.buffers()[1].slice(array.offset * width, count * width).to_pybytes()

    def binary(name: str) -> tuple[bytes, bytes, bytes | None, int, bool]:
        array = column(name)
        if pa.types.is_null(array.type):
            array = array.cast(pa.binary())
        if not (
            pa.types.is_binary(array.type)
            or pa.types.is_large_binary(array.type)
            or pa.types.is_string(array.type)
            or pa.types.is_large_string(array.type)
        ):
            raise InvalidArgumentError(f"the {name} column must be binary or string, got {array.type}")
        validity, offsets, data = array.buffers()
        large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
        return (
            offsets.to_pybytes(),
            data.to_pybytes() if data is not None else b"",
            validity.to_pybytes() if validity is not None else None,
            array.offset,
            large,
        )

    return _core.encode_record_columns(
        _magic(magic),
        Compression(compression),
        count,
        fixed_width("offset", pa.int64(), 0),
        fixed_width("timestamp", pa.int64(), NO_TIMESTAMP),
        fixed_width("timestamp_type", pa.int8(), TimestampType.CREATE_TIME),
        binary("key"),
        binary("value"),
    )


__all__ = [
    "NO_TIMESTAMP",
    "Compression",
    "Entry",
    "Record",
    "TimestampType",
    "arrow_schema",
    "decode",
    "decode_arrow",
    "encode",
    "encode_arrow",
    "iter_decode",
    "shallow_entries",
]

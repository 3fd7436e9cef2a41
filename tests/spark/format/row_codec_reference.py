"""The pure-Python row codec kstate shipped before the native one (issue 13), kept verbatim as the
independent oracle the native codec is checked against (tests/spark/format/test_row_codec.py)."""

# ruff: noqa
from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any, Callable

from kstate.errors import InvalidArgumentError

_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
_INTEGERS = ("byte", "short", "integer", "long")
_WIDENING = {("float", "double")} | {(a, b) for i, a in enumerate(_INTEGERS) for b in _INTEGERS[i:]}


def _write_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(raw: memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = raw[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, pos
        shift += 7


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63) if -(1 << 63) <= n < (1 << 63) else _out_of_range(n)


def _out_of_range(n: int) -> int:
    raise InvalidArgumentError(f"{n} does not fit in a 64-bit integer")


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def type_name(data_type: Any) -> str:
    return data_type.typeName()


def _encoder(data_type: Any) -> Callable[[bytearray, Any], None]:
    name = type_name(data_type)
    if name == "boolean":
        return lambda out, v: out.append(1 if v else 0)
    if name in _INTEGERS:
        return lambda out, v: _write_varint(out, _zigzag(int(v)))
    if name == "float":
        return lambda out, v: out.extend(_FLOAT.pack(v))
    if name == "double":
        return lambda out, v: out.extend(_DOUBLE.pack(v))
    if name in ("string", "char", "varchar"):

        def text(out: bytearray, v: Any) -> None:
            raw = (v if isinstance(v, str) else str(v)).encode()  # Spark stores any object's str
            _write_varint(out, len(raw))
            out.extend(raw)

        return text
    if name == "binary":

        def binary(out: bytearray, v: Any) -> None:
            _write_varint(out, len(v))
            out.extend(v)

        return binary
    if name == "date":
        return lambda out, v: _write_varint(out, _zigzag((v - _EPOCH_DATE).days))
    if name in ("timestamp", "timestamp_ntz"):
        ntz = name == "timestamp_ntz"
        return lambda out, v: _write_varint(out, _zigzag(_micros(v, ntz)))
    if name == "decimal":
        small, scale = data_type.precision <= 18, data_type.scale

        def number(out: bytearray, v: Any) -> None:
            value = decimal.Decimal(v)
            if small:
                _write_varint(out, _zigzag(int(value.scaleb(scale).to_integral_value())))
            else:
                text = str(value).encode()
                _write_varint(out, len(text))
                out.extend(text)

        return number
    if name == "array":
        element = _encoder(data_type.elementType)

        def array(out: bytearray, values: Any) -> None:
            values = list(values)
            _write_varint(out, len(values))
            _write_nullable(out, values, [element] * len(values))

        return array
    if name == "map":
        keys, values = _encoder_of_array(data_type.keyType), _encoder_of_array(data_type.valueType)

        def mapping(out: bytearray, v: Any) -> None:
            items = list(v.items())
            keys(out, [k for k, _ in items])
            values(out, [x for _, x in items])

        return mapping
    if name == "struct":
        return row_encoder(data_type)
    raise InvalidArgumentError(f"kstate cannot store state of type {data_type.simpleString()}")


def _encoder_of_array(element_type: Any) -> Callable[[bytearray, Any], None]:
    from pyspark.sql.types import ArrayType

    return _encoder(ArrayType(element_type))


def _micros(value: Any, ntz: bool) -> int:
    if ntz or value.tzinfo is None:
        if ntz:
            value = value.replace(tzinfo=datetime.timezone.utc)
        else:
            value = value.astimezone()  # naive: local time, as Spark reads it
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _write_nullable(out: bytearray, values: list[Any], encoders: list[Callable[[bytearray, Any], None]]) -> None:
    bitmap = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value is None:
            bitmap[i >> 3] |= 1 << (i & 7)
    out.extend(bitmap)
    for value, encode in zip(values, encoders):
        if value is not None:
            encode(out, value)


def row_encoder(schema: Any) -> Callable[[bytearray, Any], None]:
    """Appends a row (tuple, ``Row`` or dict) of ``schema`` to a bytearray."""
    names = schema.names
    encoders = [_encoder(f.dataType) for f in schema.fields]

    def row(out: bytearray, value: Any) -> None:
        if isinstance(value, dict):
            value = [value.get(n) for n in names]
        _write_nullable(out, list(value), encoders)

    return row


def _decoder(data_type: Any) -> Callable[[memoryview, int], tuple[Any, int]]:
    name = type_name(data_type)
    if name == "boolean":
        return lambda raw, pos: (raw[pos] != 0, pos + 1)
    if name in _INTEGERS:

        def integer(raw: memoryview, pos: int) -> tuple[Any, int]:
            n, pos = _read_varint(raw, pos)
            return _unzigzag(n), pos

        return integer
    if name == "float":
        return lambda raw, pos: (_FLOAT.unpack_from(raw, pos)[0], pos + 4)
    if name == "double":
        return lambda raw, pos: (_DOUBLE.unpack_from(raw, pos)[0], pos + 8)
    if name in ("string", "binary", "char", "varchar"):
        binary = name == "binary"

        def text(raw: memoryview, pos: int) -> tuple[Any, int]:
            n, pos = _read_varint(raw, pos)
            chunk = bytes(raw[pos : pos + n])
            return (bytearray(chunk) if binary else chunk.decode()), pos + n

        return text
    if name == "date":

        def date(raw: memoryview, pos: int) -> tuple[Any, int]:
            n, pos = _read_varint(raw, pos)
            return _EPOCH_DATE + datetime.timedelta(days=_unzigzag(n)), pos

        return date
    if name in ("timestamp", "timestamp_ntz"):
        ntz = name == "timestamp_ntz"

        def timestamp(raw: memoryview, pos: int) -> tuple[Any, int]:
            n, pos = _read_varint(raw, pos)
            value = _EPOCH + datetime.timedelta(microseconds=_unzigzag(n))
            return (value.replace(tzinfo=None) if ntz else value.astimezone().replace(tzinfo=None)), pos

        return timestamp
    if name == "decimal":
        small, scale = data_type.precision <= 18, data_type.scale

        def number(raw: memoryview, pos: int) -> tuple[Any, int]:
            n, pos = _read_varint(raw, pos)
            if small:
                return decimal.Decimal(_unzigzag(n)).scaleb(-scale), pos
            return decimal.Decimal(bytes(raw[pos : pos + n]).decode()), pos + n

        return number
    if name == "array":
        element = _decoder(data_type.elementType)

        def array(raw: memoryview, pos: int) -> tuple[Any, int]:
            n, pos = _read_varint(raw, pos)
            return _read_nullable(raw, pos, [element] * n)

        return array
    if name == "map":
        from pyspark.sql.types import ArrayType

        keys, values = _decoder(ArrayType(data_type.keyType)), _decoder(ArrayType(data_type.valueType))

        def mapping(raw: memoryview, pos: int) -> tuple[Any, int]:
            k, pos = keys(raw, pos)
            v, pos = values(raw, pos)
            return dict(zip(k, v)), pos

        return mapping
    if name == "struct":
        decode = row_decoder(data_type, data_type)
        return decode
    raise InvalidArgumentError(f"kstate cannot store state of type {data_type.simpleString()}")


def _read_nullable(raw: memoryview, pos: int, decoders: list[Callable]) -> tuple[list[Any], int]:
    n = len(decoders)
    bitmap = raw[pos : pos + (n + 7) // 8]
    pos += (n + 7) // 8
    values = []
    for i, decode in enumerate(decoders):
        if bitmap[i >> 3] & (1 << (i & 7)):
            values.append(None)
        else:
            value, pos = decode(raw, pos)
            values.append(value)
    return values, pos


def row_decoder(writer: Any, reader: Any) -> Callable[[memoryview, int], tuple[tuple, int]]:
    """Reads a row ``writer`` wrote as a tuple of ``reader``'s fields (matched by name; fields the
    writer lacks are ``None``). The schemas must be compatible (``evolution_problems``)."""
    decoders = [_decoder(f.dataType) for f in writer.fields]
    positions = {name: i for i, name in enumerate(writer.names)}
    picks = [positions.get(name) for name in reader.names]
    same = picks == list(range(len(writer.names)))

    def row(raw: memoryview, pos: int) -> tuple[tuple, int]:
        values, pos = _read_nullable(raw, pos, decoders)
        if same:
            return tuple(values), pos
        return tuple(None if i is None else values[i] for i in picks), pos

    return row


def evolution_problems(writer: Any, reader: Any, path: str = "") -> list[str]:
    """Why values ``writer`` wrote cannot be read as ``reader`` (empty: they can): fields are
    matched by name; a field the writer lacks must be nullable; types must be equal or widen
    (byte -> short -> int -> long, float -> double), structs recursively, arrays and maps by their
    element types."""
    problems = []
    old = {f.name: f for f in writer.fields}
    for field in reader.fields:
        where = f"{path}{field.name}"
        before = old.get(field.name)
        if before is None:
            if not field.nullable:
                problems.append(f"new field {where} must be nullable (old values have none)")
            continue
        problems += _type_problems(before.dataType, field.dataType, where)
        if before.nullable and not field.nullable:
            problems.append(f"field {where} was nullable and is not any more")
    return problems


def _type_problems(old: Any, new: Any, where: str) -> list[str]:
    a, b = type_name(old), type_name(new)
    if a == "struct" and b == "struct":
        return evolution_problems(old, new, where + ".")
    if a == "array" and b == "array":
        return _type_problems(old.elementType, new.elementType, where + "[]")
    if a == "map" and b == "map":
        return _type_problems(old.keyType, new.keyType, where + "{key}") + _type_problems(
            old.valueType, new.valueType, where + "{value}"
        )
    if a == b and (a != "decimal" or (old.precision, old.scale) == (new.precision, new.scale)):
        return []
    if (a, b) in _WIDENING:
        return []
    return [f"field {where} changed type {old.simpleString()} -> {new.simpleString()}"]

"""Typed state values: a compact, stable binary encoding of a Spark ``StructType``, and which schema
changes can still read what an older schema wrote.

A row is encoded as its fields in schema order, preceded by a null bitmap (one bit per field,
``ceil(n / 8)`` bytes, bit ``i % 8`` of byte ``i // 8`` set when field ``i`` is null); a null field
takes no further bytes. Field encodings:

| Spark type | bytes |
|---|---|
| boolean | 1 byte, 0 or 1 |
| byte, short, int, long | zigzag varint (LEB128 of ``(n << 1) ^ (n >> 63)``) |
| float / double | 4 / 8 bytes IEEE 754, little-endian |
| string / binary | varint length + UTF-8 (of any object's ``str``, as Spark) / raw bytes |
| date | zigzag varint of days since 1970-01-01 |
| timestamp, timestamp_ntz | zigzag varint of microseconds since the epoch (UTC) |
| decimal(p, s) | zigzag varint of the unscaled value when p <= 18, else varint length + its decimal string |
| array<T> | varint count, null bitmap of the elements, the non-null elements |
| map<K, V> | an array<K> of the keys, then an array<V> of the values |
| struct | a nested row (bitmap + fields) |

All integer widths share one encoding, so widening (byte -> short -> int -> long) and float ->
double read old values unchanged; fields are matched by name, so a reader schema may add nullable
fields (read as ``None``) or drop fields. ``evolution_problems`` names every other change.
Values are checked against the schema as they are encoded, with the rules and messages of Spark's
type verifier (``_make_type_verifier``: a ``TypeError`` kind for a value of the wrong type,
``ValueError`` for a null in a non-nullable field or an integer out of range, each naming the
field), and decode to tuples (nested structs too), dates and timestamps as Spark gives them to
Python. A ``Decimal('NaN')`` is stored as null, as Spark stores it.

The codec is native (``kstate_core::row_codec``, bound as ``kstate._core.RowCodec``): this module
describes a schema to it (``_spec``) and holds the few conversions done with Python's own
``datetime`` and ``decimal`` arithmetic, which the native codec calls.
"""

from __future__ import annotations

import datetime
import decimal
import re
from typing import Any, Callable

from kstate import _core
from kstate.errors import StateSchemaError

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def type_name(data_type: Any) -> str:
    return data_type.typeName()


_SIZED_JSON_TYPE = re.compile(r"^(decimal|char|varchar)\((\d+)(?:,\s*(-?\d+))?\)$")


def _spec(data_type: Any) -> tuple:
    """``data_type`` as the native codec reads it: ``(typeName, str(type), details...)``."""
    if isinstance(data_type, (dict, str)):
        return _spec_of_json(data_type)
    name, text = type_name(data_type), str(data_type)
    if name == "struct":
        return (name, text, tuple((f.name, f.nullable, _spec(f.dataType)) for f in data_type.fields))
    if name == "array":
        return (name, text, _spec(data_type.elementType), data_type.containsNull)
    if name == "map":
        return (name, text, _spec(data_type.keyType), _spec(data_type.valueType), data_type.valueContainsNull)
    if name == "decimal":
        return (name, text, data_type.precision, data_type.scale)
    if name in ("char", "varchar"):
        return (name, text, data_type.length)
    return (name, text)


def _spec_of_json(data_type: dict[str, Any] | str) -> tuple:
    """``_spec`` of a type in Spark's JSON form (``StructType.jsonValue()``, as the state schemas
    are recorded), read without PySpark. The type's text, which only messages about values being
    written show, is its JSON type name."""
    if isinstance(data_type, str):
        sized = _SIZED_JSON_TYPE.match(data_type)
        if sized is None:
            return (data_type, data_type)
        name, first, second = sized.groups()
        if name == "decimal":
            return (name, data_type, int(first), int(second or 0))
        return (name, data_type, int(first))
    name = data_type["type"]
    if name == "struct":
        fields = tuple((f["name"], bool(f["nullable"]), _spec_of_json(f["type"])) for f in data_type["fields"])
        return (name, name, fields)
    if name == "array":
        return (name, name, _spec_of_json(data_type["elementType"]), bool(data_type["containsNull"]))
    if name == "map":
        key, value = _spec_of_json(data_type["keyType"]), _spec_of_json(data_type["valueType"])
        return (name, name, key, value, bool(data_type["valueContainsNull"]))
    raise StateSchemaError(f"a recorded state schema has a type kstate does not store: {data_type!r}")


def compile_schema(schema: Any, name: str | None = None) -> _core.RowCodec:
    """The native codec of ``schema`` (a ``StructType``, or its JSON form ``jsonValue()`` for
    reading without PySpark); ``name`` is what Spark's verifier calls the row in messages (a
    state variable's name)."""
    return _core.RowCodec(_spec(schema), name)


def nested_rows(schema: Any) -> Callable[[tuple], tuple] | None:
    """A function giving a decoded value (a tuple) its nested structs as ``Row``s with their field
    names, inside arrays and maps too, as Spark's state values come back (the value itself
    stays a tuple); ``None`` when ``schema`` has no nested struct."""
    from pyspark.sql import Row
    from pyspark.sql.types import ArrayType, MapType, StructType

    def converter(data_type: Any) -> Callable[[Any], Any] | None:
        if isinstance(data_type, StructType):
            fields = [converter(f.dataType) for f in data_type.fields]
            make = Row(*data_type.names)
            return lambda v: None if v is None else make(*(f(x) if f else x for f, x in zip(fields, v)))
        if isinstance(data_type, ArrayType):
            element = converter(data_type.elementType)
            return None if element is None else lambda v: None if v is None else [element(x) for x in v]
        if isinstance(data_type, MapType):
            key, value = converter(data_type.keyType), converter(data_type.valueType)
            if key is None and value is None:
                return None
            key, value = key or (lambda k: k), value or (lambda x: x)
            return lambda m: None if m is None else {key(k): value(x) for k, x in m.items()}
        return None

    top = [converter(f.dataType) for f in schema.fields]
    if all(c is None for c in top):
        return None
    return lambda value: tuple(c(x) if c else x for c, x in zip(top, value))


_ALREADY_PLAIN = frozenset({int, float, str, bool, bytes, type(None)})
"""Exact types ``plain`` returns as they are (the common case, checked first)."""


def plain(value: Any) -> Any:
    """A value as Spark stores it through a schema: rows and tuples as tuples, numpy scalars and
    pandas timestamps as Python values."""
    if type(value) in _ALREADY_PLAIN:
        return value
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    if hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()
    if hasattr(value, "to_pytimedelta"):
        return value.to_pytimedelta()
    return value


def _micros(value: Any, ntz: bool) -> int:
    """A datetime as microseconds since the epoch (naive: local time, as Spark reads it; a
    timestamp_ntz's fields as UTC)."""
    if ntz or value.tzinfo is None:
        if ntz:
            value = value.replace(tzinfo=datetime.timezone.utc)
        else:
            value = value.astimezone()
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp_of(micros: int, ntz: bool) -> datetime.datetime:
    """What ``_micros`` encoded, as Spark gives it to Python (naive; local time unless ntz)."""
    value = _EPOCH + datetime.timedelta(microseconds=micros)
    return value.replace(tzinfo=None) if ntz else value.astimezone().replace(tzinfo=None)


def _unscaled(value: decimal.Decimal, scale: int) -> int:
    return int(value.scaleb(scale).to_integral_value())


def _decimal_of(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(unscaled).scaleb(-scale)


def _decimal_text(text: str) -> decimal.Decimal:
    return decimal.Decimal(text)


_core.register_row_conversions(plain, _micros, _timestamp_of, _unscaled, _decimal_of, _decimal_text)


def row_encoder(schema: Any) -> Callable[[bytearray, Any], None]:
    """Appends a row (tuple, ``Row`` or dict) of ``schema`` to a bytearray, checked first."""
    encode = compile_schema(schema).encode

    def row(out: bytearray, value: Any) -> None:
        out.extend(encode(value))

    return row


def row_decoder(writer: Any, reader: Any) -> Callable[[Any, int], tuple[tuple, int]]:
    """Reads a row ``writer`` wrote as a tuple of ``reader``'s fields (matched by name, nested
    structs too; fields the writer lacks are ``None``): ``decode(raw, pos) -> (row, end)``. The
    schemas (``StructType``s, or both in JSON form) must be compatible (``evolution_problems``)."""
    written = compile_schema(writer)
    decode = written.decode if writer == reader else written.reader(compile_schema(reader)).decode

    def row(raw: Any, pos: int) -> tuple[tuple, int]:
        return decode(bytes(raw), pos)

    return row


def evolution_problems(writer: Any, reader: Any, path: str = "") -> list[str]:
    """Why values ``writer`` wrote cannot be read as ``reader`` (empty: they can): fields are
    matched by name; a field the writer lacks must be nullable; types must be equal or widen
    (byte -> short -> int -> long, float -> double), structs recursively, arrays and maps by their
    element types."""
    return compile_schema(writer).evolution_problems(compile_schema(reader), path)

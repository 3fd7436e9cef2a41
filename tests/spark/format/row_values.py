"""Random StructType schemas and values that fit them (every type the row codec stores, nested
structs / arrays / maps, nulls, extremes), for checking the native row codec against the Python
oracle and Spark's verifier; and a JSON form of values for the committed fixtures."""

from __future__ import annotations

import base64
import datetime
import decimal
import math
import random
from typing import Any

from pyspark.sql import Row
from pyspark.sql.types import (
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
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

_UTC = datetime.timezone.utc
_INTEGER_BOUNDS = {"byte": 7, "short": 15, "integer": 31, "long": 63}
_FLOAT32_MAX = 3.4028234663852886e38
_FLOATS = [0.0, -0.0, 1.5, -2.25, 1e-45, _FLOAT32_MAX, -_FLOAT32_MAX, math.inf, -math.inf, math.nan]
_DOUBLES = [0.0, -0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, math.inf, -math.inf, math.nan, 0.1]
_TEXT = ["", "a", "naïve ☃", "𝄞 non-BMP", "\x00nul", "x" * 300]


def leaf_types() -> list[Any]:
    return [
        BooleanType(),
        ByteType(),
        ShortType(),
        IntegerType(),
        LongType(),
        FloatType(),
        DoubleType(),
        StringType(),
        BinaryType(),
        DateType(),
        TimestampType(),
        TimestampNTZType(),
        DecimalType(10, 2),
        DecimalType(18, 0),
        DecimalType(30, 4),
        DecimalType(38, 38),
    ]


_KEY_TYPES = [StringType(), LongType(), IntegerType(), DateType(), BooleanType()]


def random_type(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth <= 0 or roll < 0.6:
        return rng.choice(leaf_types())
    if roll < 0.75:
        return ArrayType(random_type(rng, depth - 1), rng.random() < 0.7)
    if roll < 0.88:
        return MapType(rng.choice(_KEY_TYPES), random_type(rng, depth - 1), rng.random() < 0.7)
    return random_schema(rng, depth - 1)


def random_schema(rng: random.Random, depth: int = 2, fields: int | None = None) -> StructType:
    count = rng.randint(1, 6) if fields is None else fields
    return StructType([StructField(f"f{i}", random_type(rng, depth), rng.random() < 0.8) for i in range(count)])


def random_value(rng: random.Random, data_type: Any, nullable: bool = True) -> Any:
    """A value of ``data_type`` (``None`` now and then where ``nullable``)."""
    if nullable and rng.random() < 0.15:
        return None
    name = data_type.typeName()
    if name == "boolean":
        return rng.random() < 0.5
    if name in _INTEGER_BOUNDS:
        bits = _INTEGER_BOUNDS[name]
        return rng.choice([-(1 << bits), (1 << bits) - 1, 0, -1, rng.randint(-(1 << bits), (1 << bits) - 1)])
    if name == "float":
        return rng.choice(_FLOATS + [rng.uniform(-1e6, 1e6)])
    if name == "double":
        return rng.choice(_DOUBLES + [rng.uniform(-1e300, 1e300)])
    if name == "string":
        return rng.choice(_TEXT + ["".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 12)))])
    if name == "binary":
        raw = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 20)))
        return raw if rng.random() < 0.5 else bytearray(raw)
    if name == "date":
        return datetime.date.fromordinal(rng.choice([1, 3_652_059, 719_163, rng.randint(1, 3_652_059)]))
    if name in ("timestamp", "timestamp_ntz"):
        micros = rng.choice([0, -1, 1, rng.randint(-(2**55), 2**55)])
        moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=micros)
        return moment if name == "timestamp_ntz" else moment.replace(tzinfo=_UTC)
    if name == "decimal":
        digits = rng.randint(0, data_type.precision)
        unscaled = rng.choice([0, 10**data_type.precision - 1, rng.randint(0, 10**digits)]) * rng.choice([1, -1])
        return decimal.Decimal(unscaled).scaleb(-data_type.scale)
    if name == "array":
        values = [random_value(rng, data_type.elementType, data_type.containsNull) for _ in range(rng.randint(0, 5))]
        return values if rng.random() < 0.8 else tuple(values)
    if name == "map":
        keys = {random_value(rng, data_type.keyType, False) for _ in range(rng.randint(0, 4))}
        return {k: random_value(rng, data_type.valueType, data_type.valueContainsNull) for k in keys}
    if name == "struct":
        values = [random_value(rng, f.dataType, f.nullable) for f in data_type.fields]
        roll = rng.random()
        if roll < 0.15:
            return dict(zip(data_type.names, values))
        if roll < 0.3:
            return Row(**dict(zip(data_type.names, values)))
        return tuple(values)
    raise AssertionError(name)


def same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to itself and -0.0 told from 0.0 (what bytes keep)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def to_json(value: Any) -> Any:
    """``value`` as JSON (types tagged), for the committed fixtures."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, (bytes, bytearray)):
        return {type(value).__name__: base64.b64encode(value).decode()}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, Row):
        return {"row": [[k, to_json(v)] for k, v in value.asDict().items()]}
    if isinstance(value, tuple):
        return {"tuple": [to_json(v) for v in value]}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[to_json(k), to_json(v)] for k, v in value.items()]}
    raise AssertionError(type(value))


def from_json(raw: Any) -> Any:
    if not isinstance(raw, (dict, list)):
        return raw
    if isinstance(raw, list):
        return [from_json(v) for v in raw]
    ((tag, body),) = raw.items()
    if tag == "float":
        return float.fromhex(body)
    if tag in ("bytes", "bytearray"):
        decoded = base64.b64decode(body)
        return decoded if tag == "bytes" else bytearray(decoded)
    if tag == "datetime":
        return datetime.datetime.fromisoformat(body)
    if tag == "date":
        return datetime.date.fromisoformat(body)
    if tag == "decimal":
        return decimal.Decimal(body)
    if tag == "row":
        return Row(**{k: from_json(v) for k, v in body})
    if tag == "tuple":
        return tuple(from_json(v) for v in body)
    if tag == "dict":
        return {_hashable(from_json(k)): from_json(v) for k, v in body}
    raise AssertionError(tag)


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key

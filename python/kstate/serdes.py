"""Serdes: how keys and values become the bytes a store holds.

The built-ins match Kafka's serializers byte for byte where Kafka has one (``StringSerde`` is
UTF-8, ``LongSerde`` is Kafka's 8-byte big-endian ``LongSerializer``, ``DoubleSerde`` its
``DoubleSerializer``). Any object with ``serialize(obj) -> bytes`` and
``deserialize(data: bytes) -> obj`` is a serde too. ``None`` serializes to ``None`` (a delete).
"""

from __future__ import annotations

import struct

from kstate import errors  # the classes load with the native module, when one is raised

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, Protocol, runtime_checkable

    @runtime_checkable
    class Serde(Protocol):
        def serialize(self, obj: Any) -> bytes | None: ...

        def deserialize(self, data: bytes) -> Any: ...

else:

    def __getattr__(name: str) -> type:
        # ``Serde``, the protocol above, made when first asked for at run time (a
        # ``typing.Protocol`` needs typing, which a store's first use does without).
        if name != "Serde":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from typing import Protocol, runtime_checkable

        @runtime_checkable
        class Serde(Protocol):
            def serialize(self, obj: Any) -> bytes | None: ...

            def deserialize(self, data: bytes) -> Any: ...

        Serde.__qualname__ = "Serde"
        globals()["Serde"] = Serde
        return Serde


def key_bytes(serde: Serde, key: Any) -> bytes:
    """``key`` serialized for a store, which takes no null keys."""
    if key is None:
        raise errors.InvalidArgumentError("key cannot be None")
    raw = serde.serialize(key)
    if raw is None:
        raise errors.InvalidArgumentError(f"key serde turned {key!r} into None")
    return raw


class BytesSerde:
    """Raw bytes, unchanged (``bytearray`` and ``memoryview`` are copied to ``bytes``)."""

    def serialize(self, obj: Any) -> bytes | None:
        if type(obj) is bytes or obj is None:
            return obj
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise errors.SerializationError(f"BytesSerde needs bytes, got {type(obj).__name__}")

    def deserialize(self, data: bytes) -> bytes:
        return data


class StringSerde:
    """UTF-8 text (Kafka's ``StringSerializer``)."""

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise errors.SerializationError(f"StringSerde needs str, got {type(obj).__name__}")
        try:
            return obj.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate ("\ud800") has no UTF-8 form
            raise errors.SerializationError(f"StringSerde: {obj!r} is not valid Unicode text: {e}") from e

    def deserialize(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise errors.SerializationError(f"stored bytes are not UTF-8: {e}") from e


class _StructSerde:
    _format: struct.Struct
    _types: tuple[type, ...]
    _kafka_name: str

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        if isinstance(obj, bool) or not isinstance(obj, self._types):
            raise errors.SerializationError(f"{type(self).__name__} cannot serialize {type(obj).__name__}")
        try:
            return self._format.pack(obj)
        except struct.error as e:
            raise errors.SerializationError(f"{type(self).__name__}: {e}") from e

    def deserialize(self, data: bytes) -> Any:
        if len(data) != self._format.size:
            raise errors.SerializationError(
                f"size of data received by {self._kafka_name} is not {self._format.size} (got {len(data)})"
            )
        return self._format.unpack(data)[0]


class LongSerde(_StructSerde):
    """Signed 64-bit integers, 8 bytes big-endian (Kafka's ``LongSerializer``)."""

    _format = struct.Struct(">q")
    _types = (int,)
    _kafka_name = "LongDeserializer"


class DoubleSerde(_StructSerde):
    """IEEE-754 doubles, 8 bytes big-endian (Kafka's ``DoubleSerializer``)."""

    _format = struct.Struct(">d")
    _types = (float, int)
    _kafka_name = "DoubleDeserializer"


class JsonSerde:
    """JSON text in UTF-8 (compact separators, keys in insertion order)."""

    def __init__(self) -> None:
        # ``json`` loads with the first JSON serde, not with kstate (a store of other serdes
        # never needs it); the calls then pay nothing for it.
        import json

        self._encoder = json.JSONEncoder(separators=(",", ":"))
        self._decode = json.loads

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            return self._encoder.encode(obj).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise errors.SerializationError(f"JsonSerde: {e}") from e

    def deserialize(self, data: bytes) -> Any:
        try:
            return self._decode(data)
        except ValueError as e:
            raise errors.SerializationError(f"JsonSerde: stored bytes are not JSON: {e}") from e


class PickleSerde:
    """Any picklable object. Only for state this job alone reads: pickle is not a stable format."""

    def __init__(self) -> None:
        import pickle  # as ``json`` above: with the first pickle serde

        # Functions and classes, not the module: a serde must pickle (builders travel to executors).
        self._dumps, self._loads = pickle.dumps, pickle.loads
        self._protocol = pickle.HIGHEST_PROTOCOL
        self._unpicklable = (pickle.PicklingError, TypeError, AttributeError)

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            return self._dumps(obj, protocol=self._protocol)
        except self._unpicklable as e:
            raise errors.SerializationError(f"PickleSerde: {e}") from e

    def deserialize(self, data: bytes) -> Any:
        try:
            return self._loads(data)  # noqa: S301 - the store's own bytes
        except Exception as e:
            raise errors.SerializationError(f"PickleSerde: {e}") from e


_BY_NAME: dict[Any, type] = {
    None: BytesSerde,
    bytes: BytesSerde,
    "bytes": BytesSerde,
    str: StringSerde,
    "str": StringSerde,
    "string": StringSerde,
    int: LongSerde,
    "int": LongSerde,
    "int64": LongSerde,
    "long": LongSerde,
    float: DoubleSerde,
    "float": DoubleSerde,
    "float64": DoubleSerde,
    "double": DoubleSerde,
    "json": JsonSerde,
    "pickle": PickleSerde,
}


def serde_for(spec: Any) -> Serde:
    """A serde from a serde object, a Python type (``bytes``, ``str``, ``int``, ``float``), a name
    (``"bytes"``, ``"string"``, ``"int64"``, ``"float64"``, ``"json"``, ``"pickle"``) or ``None``
    (raw bytes)."""
    try:
        if spec in _BY_NAME:
            return _BY_NAME[spec]()
    except TypeError:  # unhashable spec: not a name, maybe a serde
        pass
    if hasattr(spec, "serialize") and hasattr(spec, "deserialize") and not isinstance(spec, type):
        return spec
    raise errors.InvalidArgumentError(
        f"not a serde: {spec!r}; pass an object with serialize/deserialize, a type "
        "(bytes, str, int, float) or one of " + ", ".join(sorted(k for k in _BY_NAME if isinstance(k, str)))
    )


__all__ = [
    "Serde",
    "BytesSerde",
    "StringSerde",
    "LongSerde",
    "DoubleSerde",
    "JsonSerde",
    "PickleSerde",
    "serde_for",
]

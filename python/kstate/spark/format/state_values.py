"""How ``transform_with_state``'s stored entries read back as values, without PySpark.

A state variable's values (and a map's user keys) are rows of the schemas they were written with
(``row_codec``; a value names its writer schema's index, so values of an older schema read as
the current one) or, declared without a schema, pickles of arbitrary objects; every value starts
with its expiry. The grouping key in front of every state key is a pickle of plain values (the
key columns' values), read here without running code. The bytes themselves are
``rust/core/src/spark/state_layout.rs``'s (``kstate._core.state_*``); the state reader
(``kstate.spark.read``) and replicas (``kstate.spark.serving``) read state through this module.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kstate import _core
from kstate.errors import ProcessorStateError
from kstate.spark.format.row_codec import row_decoder

NO_EXPIRY = _core.STATE_NO_EXPIRY
"""The expiry of a value without a TTL."""

PICKLES = ("bytes", "repr", "objects")
"""What a value stored as a pickle reads as: the pickle itself, the ``repr`` of what it holds, or
that object. Only the first runs no code: the others are for state no one else can write."""

_PLAIN_CLASSES = {
    ("datetime", "date"),
    ("datetime", "datetime"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("decimal", "Decimal"),
    ("zoneinfo", "ZoneInfo"),
}
"""What a grouping key's pickle may build besides Python's own literals (Arrow's ``to_pylist``
values of every key column type kstate routes by: time zones are ``ZoneInfo``s)."""


def _zone_lookup(owner: Any, name: str) -> Any:
    """The one ``getattr`` a pickle of plain values needs: ``ZoneInfo._unpickle`` (how a
    ``ZoneInfo`` pickles itself); any other attribute could reach arbitrary code."""
    import zoneinfo

    if owner is zoneinfo.ZoneInfo and name == "_unpickle":
        return zoneinfo.ZoneInfo._unpickle  # type: ignore[attr-defined]
    raise ProcessorStateError(f"a stored grouping key asks for {owner!r}.{name}, which the state reader refuses")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN_CLASSES:
            return super().find_class(module, name)
        if (module, name) == ("builtins", "getattr"):
            return _zone_lookup
        raise ProcessorStateError(
            f"a stored grouping key holds a {module}.{name}, which the state reader does not unpickle "
            "(only plain values); pass unpickle=True if only this application writes the changelogs"
        )


def plain_unpickle(raw: bytes) -> Any:
    """A pickle of plain values (tuples of numbers, strings, bytes, dates, timestamps), refusing
    any other class: no pickled code runs."""
    return _PlainUnpickler(io.BytesIO(raw)).load()


_dumps_key = partial(pickle.dumps, protocol=4)


def pickled_key(key: tuple) -> bytes:
    """A grouping key (the tuple of its key columns' values) as the state stores it."""
    return _dumps_key(key)


def pickled_keys(keys: Iterable[tuple]) -> list[bytes]:
    """``pickled_key`` of each of ``keys`` (a micro-batch's), the same bytes: written natively
    for tuples of ``None``, ``bool``, ``int``, ``float``, ``str`` and ``bytes``
    (``_core.state_pickled_keys``: half a ``pickle.dumps``'s instructions), by pickle otherwise."""
    return _core.state_pickled_keys(keys if isinstance(keys, list) else list(keys), _dumps_key)


@dataclass(frozen=True)
class VariableDecoder:
    """How one state variable's stored entries become values. ``values``: every value schema the
    variable was written with, oldest first (``StructType``s or their JSON form; empty: pickled
    values); ``key_schema``: a map's user key schema (``None``: pickled keys); ``ttl``: whether
    the processor declared a TTL; ``pickles``: what pickled values and keys read as (``PICKLES``).
    Typed values read as tuples of the newest schema's fields."""

    name: str
    kind: str
    values: tuple[Any, ...] = ()
    key_schema: Any = None
    ttl: bool = False
    pickles: str = "bytes"

    def value_of(self) -> Callable[[bytes, int], Any]:
        """``(value bytes, offset) -> value``: a value without its expiry (``_core.state_split_stored``)."""
        return self._decoder(self.values, versioned=True)

    def value_decoder(self) -> Callable[[bytes], Any]:
        """``stored bytes -> value`` (``<8-byte expiry><value>``); with a TTL ``(value, expiry)``,
        the expiry ``None`` for a value written without one."""
        plain = self.value_of()
        if not self.ttl:
            return lambda raw: plain(_core.state_split_stored(raw)[1], 0)

        def with_expiry(raw: bytes) -> Any:
            expiry, value = _core.state_split_stored(raw)
            return (plain(value, 0), None if expiry == NO_EXPIRY else expiry)

        return with_expiry

    def list_decoder(self) -> Callable[[bytes, bytes], list[Any]]:
        """``(store key, stored bytes) -> values`` of a list entry: its one element, or the
        elements of a run (``_core.state_list_elements``), each as ``value_decoder`` gives it."""
        plain = self.value_of()
        ttl = self.ttl

        def elements(key: bytes, stored: bytes) -> list[Any]:
            expiry, raw = _core.state_split_stored(stored)
            values = [plain(element, 0) for element in _core.state_list_elements(key, raw)]
            if not ttl:
                return values
            written = None if expiry == NO_EXPIRY else expiry
            return [(value, written) for value in values]

        return elements

    def user_key_decoder(self) -> Callable[[bytes, int], Any]:
        """``(store key, offset) -> value`` of a map's user key."""
        return self._decoder(() if self.key_schema is None else (self.key_schema,), versioned=False)

    def _decoder(self, schemas: tuple[Any, ...], versioned: bool) -> Callable[[bytes, int], Any]:
        if schemas:
            current = schemas[-1]
            readers = [row_decoder(writer, current) for writer in schemas]
            if versioned:
                # A typed value starts with the index of the schema it was written with.
                return lambda raw, at: readers[raw[at]](memoryview(raw), at + 1)[0]
            return lambda raw, at: readers[0](memoryview(raw), at)[0]
        if self.pickles == "repr":
            return lambda raw, at: repr(pickle.loads(raw[at:]))
        if self.pickles == "objects":
            return lambda raw, at: pickle.loads(raw[at:])
        return lambda raw, at: bytes(raw[at:])

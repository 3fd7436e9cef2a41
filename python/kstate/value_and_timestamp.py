"""``ValueAndTimestamp``: a value with the timestamp of the record that wrote it (KIP-258)."""

from __future__ import annotations

from kstate import _core

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, NamedTuple
else:
    from kstate.named_tuple import NamedTuple  # typing's, without importing typing

NO_TIMESTAMP = -1
"""Timestamp of values stored without one (legacy stores, plain suppliers)."""


class ValueAndTimestamp(NamedTuple):
    """A value and its record timestamp in milliseconds. Stored as ``<i64 BE timestamp><value>``."""

    value: Any
    timestamp: int

    @staticmethod
    def make(value: Any, timestamp: int) -> ValueAndTimestamp | None:
        """Kafka's ``ValueAndTimestamp.make``: ``None`` for a ``None`` value."""
        return None if value is None else ValueAndTimestamp(value, timestamp)


def encode(timestamp: int, raw: bytes) -> bytes:
    """Stored bytes of a serialized value and its timestamp."""
    return _core.encode_value_and_timestamp(timestamp, raw)


def decode(stored: bytes) -> tuple[int, bytes]:
    """``(timestamp, raw value)`` of stored bytes; ``CorruptedDataError`` if shorter than 8 bytes."""
    return _core.decode_value_and_timestamp(stored)

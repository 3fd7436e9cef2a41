"""``TimestampedKeyValueStore``: values stored with their record timestamp (KIP-258).

On disk a value is ``<i64 BE timestamp><serialized value>`` in the ``keyValueWithTimestamp``
column family. A store directory written by a plain store opens in upgrade mode: legacy values
read back with timestamp -1 and move to the new format when read or written. Built over a plain
supplier, the store keeps the plain format and reports timestamp -1 (Kafka's adapter).
"""

from __future__ import annotations

from collections.abc import Mapping

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.key_value_store import KeyValueStore, ReadOnlyKeyValueStore, keys_and_values
from kstate.store_lifecycle import now_ms
from kstate.store_reads import KeyValue, KeyValueIterator, KeyValueReads
from kstate.value_and_timestamp import NO_TIMESTAMP, ValueAndTimestamp

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, Callable


def _check_timestamp(timestamp: Any) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise InvalidArgumentError(f"timestamp must be an int (ms), got {timestamp!r}")
    return timestamp


class _TimestampedReads(KeyValueReads):
    """The ``*_with_timestamp`` reads, shared by the store and its read-only views."""

    _value_and_timestamp_of: Callable[[bytes], ValueAndTimestamp]

    def _entry_with_timestamp(self, key: bytes, stored: bytes | None) -> Any:
        k = self._key_serde.deserialize(key)
        return k if stored is None else KeyValue(k, self._value_and_timestamp_of(stored))

    def get_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        stored = self._reader.get(self._key_bytes(key))
        return None if stored is None else self._value_and_timestamp_of(stored)

    def get_many_with_timestamp(self, keys: Any) -> list[ValueAndTimestamp | None]:
        stored = self._reader.get_many([self._key_bytes(k) for k in keys])
        return [None if s is None else self._value_and_timestamp_of(s) for s in stored]

    def range_with_timestamp(self, from_key: Any, to_key: Any) -> KeyValueIterator:
        lower = None if from_key is None else self._key_bytes(from_key)
        upper = None if to_key is None else self._key_bytes(to_key)
        return KeyValueIterator(self._reader.range(lower, upper, False), self._entry_with_timestamp)

    def reverse_range_with_timestamp(self, from_key: Any, to_key: Any) -> KeyValueIterator:
        lower = None if from_key is None else self._key_bytes(from_key)
        upper = None if to_key is None else self._key_bytes(to_key)
        return KeyValueIterator(self._reader.range(lower, upper, True), self._entry_with_timestamp)

    def all_with_timestamp(self) -> KeyValueIterator:
        return self.range_with_timestamp(None, None)

    def reverse_all_with_timestamp(self) -> KeyValueIterator:
        return self.reverse_range_with_timestamp(None, None)


class ReadOnlyTimestampedKeyValueStore(_TimestampedReads, ReadOnlyKeyValueStore):
    """Reads of a timestamped store without its writes, ``*_with_timestamp`` included."""

    def _value_and_timestamp_of(self, stored: bytes) -> ValueAndTimestamp:
        return self._store._value_and_timestamp_of(stored)


class TimestampedKeyValueStore(_TimestampedReads, KeyValueStore):
    """A key-value store whose values carry timestamps.

    ``get``/``range``/``all`` return plain values; the ``*_with_timestamp`` forms return
    ``ValueAndTimestamp``. ``put(key, value)`` accepts a ``ValueAndTimestamp`` or a plain value,
    which is stamped with the current wall-clock time unless ``timestamp`` is given.
    """

    # -- value bytes -----------------------------------------------------------------------------

    def _value_and_timestamp_of(self, stored: bytes) -> ValueAndTimestamp:
        if not self._supplier.timestamped:
            return ValueAndTimestamp(self._value_serde.deserialize(stored), NO_TIMESTAMP)
        timestamp, raw = _core.decode_value_and_timestamp(stored)
        return ValueAndTimestamp(self._value_serde.deserialize(raw), timestamp)

    def _value_of(self, stored: bytes) -> Any:
        return self._value_and_timestamp_of(stored).value

    def _packs_values(self) -> bool:
        return False

    def _stored_numbers(self) -> Any:
        return None  # stored values carry a timestamp prefix: never plain Arrow numbers

    def read_only(self, read_committed: bool = True) -> ReadOnlyTimestampedKeyValueStore:
        return ReadOnlyTimestampedKeyValueStore(self, read_committed)

    def _stored_with(self, value: Any, timestamp: int) -> bytes | None:
        raw = self._value_serde.serialize(value)
        if raw is None:
            return None
        if not self._supplier.timestamped:
            return raw
        return _core.encode_value_and_timestamp(_check_timestamp(timestamp), raw)

    def _stored(self, value: Any, timestamp: int | None = None) -> bytes | None:
        if isinstance(value, ValueAndTimestamp):
            return self._stored_with(value.value, value.timestamp)
        return self._stored_with(value, now_ms() if timestamp is None else timestamp)

    # -- writes with timestamps ------------------------------------------------------------------

    def put(self, key: Any, value: Any, timestamp: int | None = None) -> None:
        """Write ``value`` (plain or ``ValueAndTimestamp``); ``None`` deletes."""
        self._reader.put(self._key_bytes(key), self._stored(value, timestamp))

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int | None = None) -> None:
        """The seed's ``putWithTimestamp(key, value, timestamp)`` / ``(key, ValueAndTimestamp)``."""
        if timestamp is None and not isinstance(value, ValueAndTimestamp) and value is not None:
            raise InvalidArgumentError("put_with_timestamp needs a timestamp or a ValueAndTimestamp")
        self.put(key, value, timestamp)

    def put_if_newer(self, key: Any, value: Any, timestamp: int | None = None) -> bool:
        """Out-of-order updates (KAFKA-5533): write ``value`` (plain or ``ValueAndTimestamp``;
        ``None`` deletes) unless ``key`` holds a value with a larger timestamp. Returns whether it
        applied; of equal timestamps the later write wins."""
        if not self._supplier.timestamped:
            raise InvalidArgumentError(f"put_if_newer needs a timestamped supplier; {self.name} stores no timestamps")
        if isinstance(value, ValueAndTimestamp):
            timestamp = value.timestamp
        elif timestamp is None:
            raise InvalidArgumentError("put_if_newer needs a timestamp or a ValueAndTimestamp")
        timestamp = _check_timestamp(timestamp)
        return self._reader.put_if_newer(self._key_bytes(key), self._stored(value, timestamp), timestamp)

    def put_if_absent_with_timestamp(
        self, key: Any, value: Any, timestamp: int | None = None
    ) -> ValueAndTimestamp | None:
        stored = self._stored(value, timestamp)
        if stored is None:
            raise InvalidArgumentError("put_if_absent needs a value, got None")
        existing = self._reader.put_if_absent(self._key_bytes(key), stored)
        return None if existing is None else self._value_and_timestamp_of(existing)

    def put_all_with_timestamp(self, entries: Any) -> None:
        """Write ``(key, ValueAndTimestamp)`` pairs (or a dict of them) in one call."""
        keys, values = keys_and_values(entries.items() if isinstance(entries, Mapping) else entries)
        for v in values:
            if v is not None and not isinstance(v, ValueAndTimestamp):
                raise InvalidArgumentError(f"put_all_with_timestamp needs ValueAndTimestamp values, got {v!r}")
        self.put_all(keys, values)

    def delete_with_timestamp(self, key: Any) -> ValueAndTimestamp | None:
        old = self._reader.delete(self._key_bytes(key))
        return None if old is None else self._value_and_timestamp_of(old)

"""``TimestampedWindowStore``: window values stored with their record timestamp (KIP-258).

On disk each segment is a timestamped key-value store: values are ``<i64 BE timestamp><value>``
in the ``keyValueWithTimestamp`` column family, with the dual-column-family upgrade of legacy
segments. Built over a plain supplier the store keeps the plain format and reports timestamp -1.
"""

from __future__ import annotations

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.store_reads import WindowReads
from kstate.value_and_timestamp import ValueAndTimestamp
from kstate.window_store import ReadOnlyWindowStore, WindowStore
from kstate.windowed import MAX_TIME, MIN_TIME, WindowedIterator, check_time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any


class _WithTimestampReads(WindowReads):
    """The ``*_with_timestamp`` reads: values come as ``ValueAndTimestamp``."""

    def fetch_with_timestamp(self, *args: Any) -> Any:
        """``fetch`` (all three forms) with ``ValueAndTimestamp`` values."""
        if len(args) == 2:
            stored = self._reader.fetch(self._key_bytes(args[0]), check_time("time", args[1]))
            return None if stored is None else self._value_and_timestamp_of(stored)
        return self._iterate(args, reverse=False, with_timestamp=True)

    def backward_fetch_with_timestamp(self, *args: Any) -> WindowedIterator:
        return self._iterate(args, reverse=True, with_timestamp=True)

    def all_with_timestamp(self) -> WindowedIterator:
        return self._iterate((None, None, MIN_TIME, MAX_TIME), reverse=False, with_timestamp=True)

    def backward_all_with_timestamp(self) -> WindowedIterator:
        return self._iterate((None, None, MIN_TIME, MAX_TIME), reverse=True, with_timestamp=True)

    def fetch_all_with_timestamp(self, time_from: int, time_to: int) -> WindowedIterator:
        return self._iterate((None, None, time_from, time_to), reverse=False, with_timestamp=True)

    def backward_fetch_all_with_timestamp(self, time_from: int, time_to: int) -> WindowedIterator:
        return self._iterate((None, None, time_from, time_to), reverse=True, with_timestamp=True)


class ReadOnlyTimestampedWindowStore(_WithTimestampReads, ReadOnlyWindowStore):
    """Reads of a timestamped window store without its writes."""


class TimestampedWindowStore(_WithTimestampReads, WindowStore):
    """A window store whose values carry timestamps.

    ``put(key, value, window_start)`` accepts a ``ValueAndTimestamp`` or a plain value, stamped
    with ``timestamp`` or, without one, the window start. Reads return plain values; the
    ``*_with_timestamp`` forms return ``ValueAndTimestamp``.
    """

    def read_only(self, read_committed: bool = True) -> ReadOnlyTimestampedWindowStore:
        return ReadOnlyTimestampedWindowStore(self, read_committed)

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        if isinstance(value, ValueAndTimestamp):
            value, timestamp = value.value, check_time("timestamp", value.timestamp)
        raw = self._value_serde.serialize(value)
        if raw is None or not self._timestamped_bytes:
            return raw
        return _core.encode_value_and_timestamp(timestamp, raw)

    def put(self, key: Any, value: Any, window_start: int, timestamp: int | None = None) -> bool:
        """Write ``value`` (plain or ``ValueAndTimestamp``; ``None`` deletes) for the window of
        ``key`` starting at ``window_start``; ``False`` when dropped as expired."""
        start = check_time("window_start", window_start)
        stamp = start if timestamp is None else check_time("timestamp", timestamp)
        return self._reader.put(self._key_bytes(key), self._stored(value, stamp), start)

    def put_with_timestamp(
        self, key: Any, value: Any, timestamp: int | None = None, window_start: int | None = None
    ) -> bool:
        """The seed's ``putWithTimestamp`` forms: ``(key, value, timestamp)``,
        ``(key, ValueAndTimestamp)``, ``(key, value, timestamp, window_start)`` and
        ``(key, ValueAndTimestamp, window_start=...)``. Without ``window_start`` the window
        starts at the value's timestamp (Kafka's ``put(key, value)`` used the record time)."""
        if isinstance(value, ValueAndTimestamp):
            if timestamp is not None:
                raise InvalidArgumentError("give the timestamp in the ValueAndTimestamp or as timestamp, not both")
            timestamp = value.timestamp
        elif timestamp is None:
            raise InvalidArgumentError("put_with_timestamp needs a timestamp or a ValueAndTimestamp")
        start = timestamp if window_start is None else window_start
        return self.put(key, value, start, timestamp)

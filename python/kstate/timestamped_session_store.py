"""``TimestampedSessionStore``: session aggregates stored with their record timestamp (the seed's
``SessionWithTimestampStore``; Kafka itself never shipped one).

Each segment is a timestamped key-value store: ``<i64 BE timestamp><aggregate>`` in the
``keyValueWithTimestamp`` column family.
"""

from __future__ import annotations

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.session_store import ReadOnlySessionStore, SessionStore, session_of
from kstate.store_reads import SessionReads
from kstate.value_and_timestamp import ValueAndTimestamp
from kstate.windowed import MAX_TIME, WindowedIterator, check_time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any


class _WithTimestampReads(SessionReads):
    """The ``*_with_timestamp`` reads: aggregates come as ``ValueAndTimestamp``."""

    def fetch_with_timestamp(self, key_or_from: Any, key_to: Any = ...) -> WindowedIterator:
        return self._find(key_or_from, key_to, 0, MAX_TIME, reverse=False, with_timestamp=True)

    def backward_fetch_with_timestamp(self, key_or_from: Any, key_to: Any = ...) -> WindowedIterator:
        return self._find(key_or_from, key_to, 0, MAX_TIME, reverse=True, with_timestamp=True)

    def find_sessions_with_timestamp(self, *args: Any) -> WindowedIterator:
        return self._find_args(args, reverse=False, with_timestamp=True)

    def backward_find_sessions_with_timestamp(self, *args: Any) -> WindowedIterator:
        return self._find_args(args, reverse=True, with_timestamp=True)

    def fetch_session_with_timestamp(
        self, key: Any, session_start_time: int, session_end_time: int
    ) -> ValueAndTimestamp | None:
        stored = self._reader.fetch_session(
            self._key_bytes(key),
            check_time("session_start_time", session_start_time),
            check_time("session_end_time", session_end_time),
        )
        return None if stored is None else self._value_and_timestamp_of(stored)


class ReadOnlyTimestampedSessionStore(_WithTimestampReads, ReadOnlySessionStore):
    """Reads of a timestamped session store without its writes."""


class TimestampedSessionStore(_WithTimestampReads, SessionStore):
    """A session store whose aggregates carry timestamps. ``put(session_key, aggregate)`` accepts
    a ``ValueAndTimestamp`` or a plain aggregate, stamped with the session end."""

    def read_only(self, read_committed: bool = True) -> ReadOnlyTimestampedSessionStore:
        return ReadOnlyTimestampedSessionStore(self, read_committed)

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        if isinstance(value, ValueAndTimestamp):
            value, timestamp = value.value, check_time("timestamp", value.timestamp)
        raw = self._value_serde.serialize(value)
        if raw is None or not self._timestamped_bytes:
            return raw
        return _core.encode_value_and_timestamp(timestamp, raw)

    def put_with_timestamp(self, session_key: Any, aggregate: Any, timestamp: int | None = None) -> bool:
        """The seed's ``putWithTimestamp(sessionKey, aggregate, timestamp)`` and
        ``putWithTimestamp(sessionKey, ValueAndTimestamp)``."""
        if not isinstance(aggregate, ValueAndTimestamp):
            if timestamp is None:
                raise InvalidArgumentError("put_with_timestamp needs a timestamp or a ValueAndTimestamp")
            aggregate = ValueAndTimestamp(aggregate, check_time("timestamp", timestamp))
        return self.put(session_of(session_key), aggregate)

"""``SessionStore``: an aggregate per key and session window (Kafka's ``RocksDBSessionStore``).

Store keys are ``key || session end || session start`` (spec 1.7), segmented by end time.
``find_sessions(key, earliest_session_end_time, latest_session_start_time)`` returns the sessions
that end at or after the first and start at or before the second: the sessions a new record may
merge with. Iterators walk the segments in time order (backward: reverse), each segment in
serialized-key order; bounds are inclusive, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.segmented_store import SegmentedStore, SegmentedView
from kstate.store_reads import SessionReads
from kstate.windowed import Windowed, check_time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any


def session_of(session_key: Any) -> Windowed:
    if not isinstance(session_key, tuple) or len(session_key) != 3:
        raise InvalidArgumentError(f"a session key is Windowed(key, start, end), got {session_key!r}")
    key, start, end = session_key
    return Windowed(key, check_time("session start", start), check_time("session end", end))


class ReadOnlySessionStore(SessionReads, SegmentedView):
    """Reads of a session store without its writes. ``read_committed`` views see only committed
    state and may be used from another thread while the writer works."""


class SessionStore(SessionReads, SegmentedStore):
    """A session store. Build one with ``Stores.session_store_builder(...).build()``, then
    ``init(task_dir)``."""

    _snapshot_kind = "session"

    def _open_segments(self, directory: str | None, config: dict, progress: Any) -> tuple[Any, dict]:
        return _core.SessionStore.open(self.name, directory, config, progress)

    def read_only(self, read_committed: bool = True) -> ReadOnlySessionStore:
        """A read-only view; with ``read_committed`` it ignores uncommitted writes and is safe to
        use from other threads."""
        return ReadOnlySessionStore(self, read_committed)

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        return self._value_serde.serialize(value)

    def put(self, session_key: Any, aggregate: Any) -> bool:
        """Write the aggregate of ``session_key`` = ``Windowed(key, start, end)`` (``None``
        removes it). Returns ``False`` when the session had already expired and was dropped."""
        session = session_of(session_key)
        stored = self._stored(aggregate, session.end)
        return self._reader.put(self._key_bytes(session.key), session.start, session.end, stored)

    def put_all(
        self, entries: Any, aggregates: Any = None, session_starts: Any = None, session_ends: Any = None
    ) -> int:
        """``put`` of many sessions in one call: ``(Windowed(key, start, end), aggregate)`` pairs
        (or a dict of them), two sequences ``put_all(session_keys, aggregates)``, or four columns
        ``put_all(keys, aggregates, session_starts, session_ends)`` (no ``Windowed`` per session:
        the form for data that arrives in columns). Returns how many were dropped as expired
        (counted in ``dropped_records``). Nothing is written if an entry is invalid."""
        if (session_starts is None) != (session_ends is None):
            raise InvalidArgumentError("put_all takes both session_starts and session_ends, or neither")
        if session_starts is not None:
            if aggregates is None:
                raise InvalidArgumentError("put_all(keys, aggregates, session_starts, session_ends) needs aggregates")
            return self._put_columns(list(entries), list(aggregates), list(session_starts), list(session_ends))
        if aggregates is None:
            pairs = list(entries.items() if isinstance(entries, Mapping) else entries)
            entries, aggregates = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
        sessions, aggregates = list(entries), list(aggregates)
        if len(sessions) != len(aggregates):
            raise InvalidArgumentError(f"put_all got {len(sessions)} sessions and {len(aggregates)} aggregates")
        if self._raw:  # the sessions are checked and split natively
            return self._reader.put_all_sessions(sessions, aggregates)
        for session_key in sessions:
            if not isinstance(session_key, tuple) or len(session_key) != 3:
                session_of(session_key)  # raises its error
        keys = [session[0] for session in sessions]
        starts, ends = [session[1] for session in sessions], [session[2] for session in sessions]
        return self._put_columns(keys, aggregates, starts, ends)

    def _put_columns(self, keys: list, aggregates: list, starts: list, ends: list) -> int:
        if not len(keys) == len(aggregates) == len(starts) == len(ends):
            raise InvalidArgumentError(
                f"put_all got {len(keys)} keys, {len(aggregates)} aggregates, "
                f"{len(starts)} session starts and {len(ends)} session ends"
            )
        if self._raw:  # keys, values and times are checked natively
            return self._reader.put_all(keys, starts, ends, aggregates)
        # Times are checked natively (ints in 64 bits, as check_time), keys and values too.
        stored = [self._stored(aggregate, check_time("session end", end)) for aggregate, end in zip(aggregates, ends)]
        return self._reader.put_all([self._key_bytes(key) for key in keys], starts, ends, stored)

    def remove(self, session_key: Any) -> None:
        """Remove the session ``Windowed(key, start, end)``. Like Kafka's ``remove`` it advances
        stream time but counts no drop when the session has expired."""
        session = session_of(session_key)
        self._reader.remove(self._key_bytes(session.key), session.start, session.end)

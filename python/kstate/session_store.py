"""``SessionStore``: an aggregate per key and session window (Kafka's ``RocksDBSessionStore``).

Store keys are ``key || session end || session start`` (spec 1.7), segmented by end time.
``find_sessions(key, earliest_session_end_time, latest_session_start_time)`` returns the sessions
that end at or after the first and start at or before the second: the sessions a new record may
merge with. Iterators walk the segments in time order (backward: reverse), each segment in
serialized-key order; bounds are inclusive, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.segmented_store import SegmentedStore, _SegmentedReads, _SegmentedView
from kstate.windowed import MAX_TIME, Windowed, WindowedIterator, check_time


def _session_of(session_key: Any) -> Windowed:
    if not isinstance(session_key, tuple) or len(session_key) != 3:
        raise InvalidArgumentError(f"a session key is Windowed(key, start, end), got {session_key!r}")
    key, start, end = session_key
    return Windowed(key, check_time("session start", start), check_time("session end", end))


class _SessionReads(_SegmentedReads):
    """Reads shared by a session store and its read-only views."""

    def fetch(self, key_or_from: Any, key_to: Any = ...) -> WindowedIterator:
        """``fetch(key)``: every live session of ``key``; ``fetch(key_from, key_to)``: of the keys
        in ``[key_from, key_to]`` (``None``: unbounded). Yields ``KeyValue(Windowed, aggregate)``."""
        return self._find(key_or_from, key_to, 0, MAX_TIME, reverse=False, with_timestamp=False)

    def backward_fetch(self, key_or_from: Any, key_to: Any = ...) -> WindowedIterator:
        return self._find(key_or_from, key_to, 0, MAX_TIME, reverse=True, with_timestamp=False)

    def find_sessions(self, *args: Any) -> WindowedIterator:
        """``find_sessions(key, earliest_session_end_time, latest_session_start_time)`` or
        ``find_sessions(key_from, key_to, earliest_session_end_time, latest_session_start_time)``:
        sessions with ``end >= earliest_session_end_time`` and ``start <= latest_session_start_time``."""
        return self._find_args(args, reverse=False, with_timestamp=False)

    def backward_find_sessions(self, *args: Any) -> WindowedIterator:
        return self._find_args(args, reverse=True, with_timestamp=False)

    def fetch_session(self, key: Any, session_start_time: int, session_end_time: int) -> Any:
        """The aggregate of exactly the session ``[start, end]`` of ``key``, or ``None``."""
        stored = self._reader.fetch_session(
            self._key_bytes(key),
            check_time("session_start_time", session_start_time),
            check_time("session_end_time", session_end_time),
        )
        return None if stored is None else self._value_of(stored)

    def _find_args(self, args: tuple, reverse: bool, with_timestamp: bool) -> WindowedIterator:
        if len(args) == 3:
            key, earliest_end, latest_start = args
            return self._find(key, ..., earliest_end, latest_start, reverse, with_timestamp)
        if len(args) == 4:
            return self._find(*args, reverse=reverse, with_timestamp=with_timestamp)
        raise InvalidArgumentError(
            "find_sessions takes (key, earliest_end, latest_start) or (key_from, key_to, earliest_end, latest_start); "
            f"got {len(args)} arguments"
        )

    def _find(
        self, key_from: Any, key_to: Any, earliest_end: int, latest_start: int, reverse: bool, with_timestamp: bool
    ) -> WindowedIterator:
        if key_to is ...:  # one key
            lower = upper = self._key_bytes(key_from)
        else:
            lower, upper = self._optional_key_bytes(key_from), self._optional_key_bytes(key_to)
        native = self._reader.find_sessions(
            lower,
            upper,
            check_time("earliest_session_end_time", earliest_end),
            check_time("latest_session_start_time", latest_start),
            reverse,
        )
        return self._windowed_iterator(native, with_timestamp)


class ReadOnlySessionStore(_SessionReads, _SegmentedView):
    """Reads of a session store without its writes. ``read_committed`` views see only committed
    state and may be used from another thread while the writer works."""


class SessionStore(_SessionReads, SegmentedStore):
    """A session store. Build one with ``Stores.session_store_builder(...).build()``, then
    ``init(task_dir)``."""

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
        session = _session_of(session_key)
        stored = self._stored(aggregate, session.end)
        return self._reader.put(self._key_bytes(session.key), session.start, session.end, stored)

    def put_all(self, entries: Any, aggregates: Any = None) -> int:
        """``put`` of many sessions in one call: ``(Windowed(key, start, end), aggregate)`` pairs
        (or a dict of them), or two sequences ``put_all(session_keys, aggregates)``. Returns how
        many were dropped as expired (counted in ``dropped_records``). Nothing is written if an
        entry is invalid."""
        if aggregates is None:
            pairs = list(entries.items() if isinstance(entries, Mapping) else entries)
            entries, aggregates = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
        sessions = entries if isinstance(entries, list) else list(entries)
        for session_key in sessions:
            if not isinstance(session_key, tuple) or len(session_key) != 3:
                _session_of(session_key)  # raises its error
        # Times are checked natively (ints in 64 bits, as check_time), keys and values too.
        keys = [session[0] for session in sessions]
        starts, ends = [session[1] for session in sessions], [session[2] for session in sessions]
        if self._raw:
            return self._reader.put_all(keys, starts, ends, aggregates)
        stored = [self._stored(aggregate, check_time("session end", end)) for aggregate, end in zip(aggregates, ends)]
        if len(stored) != len(sessions):
            raise InvalidArgumentError(f"put_all got {len(sessions)} sessions and {len(stored)} aggregates")
        return self._reader.put_all([self._key_bytes(key) for key in keys], starts, ends, stored)

    def remove(self, session_key: Any) -> None:
        """Remove the session ``Windowed(key, start, end)``. Like Kafka's ``remove`` it advances
        stream time but counts no drop when the session has expired."""
        session = _session_of(session_key)
        self._reader.remove(self._key_bytes(session.key), session.start, session.end)

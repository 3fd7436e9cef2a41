"""``WindowStore``: values per key and time window, in time segments (Kafka's ``RocksDBWindowStore``).

Store keys are ``key || window start || seqnum`` (spec 1.6); the window end is ``start + window
size``. Without duplicates a put overwrites the window's value; with ``retain_duplicates`` (for
stream-stream joins) every put is kept under the next sequence number. Iterators walk the
segments in time order (backward: reverse), each segment in serialized-key order; all bounds are
inclusive, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.key_value_store import KeyValue
from kstate.segmented_store import SegmentedStore, _SegmentedReads, _SegmentedView
from kstate.windowed import MAX_TIME, MIN_TIME, WindowedIterator, check_time


class _WindowReads(_SegmentedReads):
    """Reads shared by a window store and its read-only views."""

    def fetch(self, *args: Any) -> Any:
        """Kafka's three ``fetch`` forms:

        - ``fetch(key, time)``: the value of the window of ``key`` starting at ``time``, or ``None``
          (with duplicates, the first one put);
        - ``fetch(key, time_from, time_to)``: ``KeyValue(window start, value)`` of the windows of
          ``key`` starting in ``[time_from, time_to]``, oldest first;
        - ``fetch(key_from, key_to, time_from, time_to)``: ``KeyValue(Windowed, value)`` of the keys
          in ``[key_from, key_to]`` (``None``: unbounded).
        """
        if len(args) == 2:
            key, time = args
            if type(time) is not int or not MIN_TIME <= time <= MAX_TIME:
                check_time("time", time)
            if self._raw:
                return self._reader.fetch(key, time)
            stored = self._reader.fetch(self._key_bytes(key), time)
            return None if stored is None else self._value_of(stored)
        return self._iterate(args, reverse=False, with_timestamp=False)

    def backward_fetch(self, *args: Any) -> WindowedIterator:
        """``fetch(key, time_from, time_to)`` or ``fetch(key_from, key_to, time_from, time_to)``,
        newest first."""
        return self._iterate(args, reverse=True, with_timestamp=False)

    def all(self) -> WindowedIterator:
        """Every live window: ``KeyValue(Windowed, value)``, oldest segment first."""
        return self._iterate((None, None, MIN_TIME, MAX_TIME), reverse=False, with_timestamp=False)

    def backward_all(self) -> WindowedIterator:
        return self._iterate((None, None, MIN_TIME, MAX_TIME), reverse=True, with_timestamp=False)

    def fetch_all(self, time_from: int, time_to: int) -> WindowedIterator:
        """Every window starting in ``[time_from, time_to]``: ``KeyValue(Windowed, value)``."""
        return self._iterate((None, None, time_from, time_to), reverse=False, with_timestamp=False)

    def backward_fetch_all(self, time_from: int, time_to: int) -> WindowedIterator:
        return self._iterate((None, None, time_from, time_to), reverse=True, with_timestamp=False)

    def _iterate(self, args: tuple, reverse: bool, with_timestamp: bool) -> WindowedIterator:
        reader = self._reader
        if len(args) == 3:
            key, time_from, time_to = args
            native = reader.fetch_key(
                self._key_bytes(key), check_time("time_from", time_from), check_time("time_to", time_to), reverse
            )
            if self._raw and not with_timestamp:
                return WindowedIterator(native.finished_rows(KeyValue), None)
            value_of = self._decoder(with_timestamp)
            return WindowedIterator(native, lambda k, start, end, v: KeyValue(start, value_of(v)))
        if len(args) == 4:
            key_from, key_to, time_from, time_to = args
            lower, upper = self._optional_key_bytes(key_from), self._optional_key_bytes(key_to)
            native = reader.fetch_range(
                lower, upper, check_time("time_from", time_from), check_time("time_to", time_to), reverse
            )
            return self._windowed_iterator(native, with_timestamp)
        raise InvalidArgumentError(
            f"fetch takes (key, time), (key, time_from, time_to) or (key_from, key_to, time_from, time_to); "
            f"got {len(args)} arguments"
        )


class ReadOnlyWindowStore(_WindowReads, _SegmentedView):
    """Reads of a window store without its writes. ``read_committed`` views see only committed
    state and may be used from another thread while the writer works."""


class WindowStore(_WindowReads, SegmentedStore):
    """A window store. Build one with ``Stores.window_store_builder(...).build()``, then
    ``init(task_dir)``."""

    @property
    def window_size(self) -> int:
        return self._supplier.window_size_ms

    @property
    def retain_duplicates(self) -> bool:
        return self._supplier.retain_duplicates

    def _open_segments(self, directory: str | None, config: dict, progress: Any) -> tuple[Any, dict]:
        return _core.WindowStore.open(
            self.name, directory, config, self._supplier.window_size_ms, self._supplier.retain_duplicates, progress
        )

    def read_only(self, read_committed: bool = True) -> ReadOnlyWindowStore:
        """A read-only view; with ``read_committed`` it ignores uncommitted writes and is safe to
        use from other threads."""
        return ReadOnlyWindowStore(self, read_committed)

    def _bind_raw_calls(self) -> None:
        # Same arguments, same typed errors: the native put needs no conversion in between.
        if self._raw:
            self.put = self._reader.put

    def _stored(self, value: Any, timestamp: int) -> bytes | None:
        return self._value_serde.serialize(value)

    def put(self, key: Any, value: Any, window_start: int) -> bool:
        """Write ``value`` for the window of ``key`` starting at ``window_start`` (``None``
        deletes; with duplicates it does nothing). Returns ``False`` when the window had already
        expired and the put was dropped (counted in ``dropped_records``)."""
        if type(window_start) is not int or not MIN_TIME <= window_start <= MAX_TIME:
            check_time("window_start", window_start)
        if self._raw:
            return self._reader.put(key, value, window_start)
        return self._reader.put(self._key_bytes(key), self._stored(value, window_start), window_start)

    def put_all(self, entries: Any, values: Any = None, window_starts: Any = None) -> int:
        """``put`` of many windows in one call: an iterable of ``(key, value, window_start)``
        triples, or three sequences ``put_all(keys, values, window_starts)``. Returns how many
        puts were dropped because their window had expired (counted in ``dropped_records``).
        Nothing is written if an entry is invalid."""
        if values is None and window_starts is None:
            keys, values, window_starts = _columns(entries)
        elif values is None or window_starts is None:
            raise InvalidArgumentError("put_all takes (key, value, window_start) triples or three sequences")
        else:
            keys = entries
        if self._raw:
            return self._reader.put_all(keys, values, window_starts)
        starts = [check_time("window_start", start) for start in window_starts]
        stored = self._stored
        return self._reader.put_all(
            [self._key_bytes(k) for k in keys], [stored(v, s) for v, s in zip(values, starts)], starts
        )


def _columns(triples: Any) -> tuple[list, list, list]:
    keys, values, starts = [], [], []
    for key, value, start in triples:
        keys.append(key)
        values.append(value)
        starts.append(start)
    return keys, values, starts

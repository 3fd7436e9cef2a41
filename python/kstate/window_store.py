"""``WindowStore``: values per key and time window, in time segments (Kafka's ``RocksDBWindowStore``).

Store keys are ``key || window start || seqnum`` (spec 1.6); the window end is ``start + window
size``. Without duplicates a put overwrites the window's value; with ``retain_duplicates`` (for
stream-stream joins) every put is kept under the next sequence number. Iterators walk the
segments in time order (backward: reverse), each segment in serialized-key order; all bounds are
inclusive, as in Kafka.
"""

from __future__ import annotations

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.segmented_store import SegmentedStore, SegmentedView
from kstate.store_reads import WindowReads
from kstate.windowed import MAX_TIME, MIN_TIME, check_time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any


class ReadOnlyWindowStore(WindowReads, SegmentedView):
    """Reads of a window store without its writes. ``read_committed`` views see only committed
    state and may be used from another thread while the writer works."""


class WindowStore(WindowReads, SegmentedStore):
    """A window store. Build one with ``Stores.window_store_builder(...).build()``, then
    ``init(task_dir)``."""

    _snapshot_kind = "window"

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
            keys, values, window_starts = list(entries), list(values), list(window_starts)
        if not len(keys) == len(values) == len(window_starts):
            raise InvalidArgumentError(
                f"put_all got {len(keys)} keys, {len(values)} values and {len(window_starts)} window starts"
            )
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

"""What reading a store gives (``KeyValue``, ``KeyValueIterator``) and the reads a store shares
with its read-only views: ``KeyValueReads`` (key-value stores), ``SegmentedReads`` (window and
session stores), ``WindowReads`` and ``SessionReads``. The stores and views mix them in; each reads
through ``_reader``, the native store or view, and its serdes."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, starmap

from kstate import _core, arrow_numbers
from kstate.errors import InvalidArgumentError
from kstate.lazy_logger import LazyLogger
from kstate.serdes import BytesSerde, StringSerde, key_bytes, serde_for
from kstate.value_and_timestamp import NO_TIMESTAMP, ValueAndTimestamp
from kstate.windowed import MAX_TIME, MIN_TIME, Windowed, WindowedIterator, check_time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, Callable, NamedTuple

    from kstate.serdes import Serde
else:
    from kstate.named_tuple import NamedTuple  # typing's, without importing typing

log = LazyLogger("kstate.store")


class KeyValue(NamedTuple):
    """One entry of an iterator (Kafka's ``KeyValue``)."""

    key: Any
    value: Any


_core.register_window_rows(KeyValue, Windowed)  # window and session rows are made natively


def is_arrow(obj: Any) -> bool:
    """Whether ``obj`` is a pyarrow array (told without importing pyarrow)."""
    return type(obj).__module__.startswith("pyarrow") and hasattr(obj, "type")


class KeyValueIterator:
    """Iterator over store entries in key order (or reverse). Use as a context manager or call
    ``close()`` when done early; once its store is closed it raises ``StoreClosedError`` (after
    the rows of the chunk it already read: at most 2,048, or about 1 MiB). Reading ahead in
    chunks, it may or may not show a write made while it is open to a key it has not reached
    (Kafka's stores promise no snapshot either): take the keys first to write while iterating."""

    __slots__ = ("_native", "_decode", "_rows")

    def __init__(self, native: _core.RangeIterator, decode: Callable[[bytes, bytes | None], Any] | None = None):
        # Rows come in native chunks (lists of finished rows) that Python's own iterators walk,
        # so a ``for`` loop over ``iter(self)`` makes no call into the binding per row; ``decode``
        # (serdes other than bytes) turns stored bytes into the entry as each row is taken.
        self._native = native
        self._decode = decode
        rows = chain.from_iterable(iter(native.next_chunk, None))
        self._rows: Iterator[Any] = rows if decode is None else starmap(decode, rows)

    def __iter__(self) -> Iterator[Any]:
        return self._rows

    def __next__(self) -> Any:
        return next(self._rows)

    def peek_next_key(self) -> Any:
        """The key ``next()`` would return, or ``None`` at the end."""
        key = self._native.peek_next_key()
        return key if key is None or self._decode is None else self._decode(key, None)

    def close(self) -> None:
        self._native.close()
        self._rows = iter(())

    def __enter__(self) -> KeyValueIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KeyValueReads:
    """Read operations shared by a store and its read-only views. ``_reader`` is the native store
    or view; subclasses provide ``_key_bytes`` and ``_value_of``."""

    _reader: Any
    _key_serde: Serde
    _value_serde: Serde

    def _key_bytes(self, key: Any) -> bytes:
        return key_bytes(self._key_serde, key)

    def _value_of(self, stored: bytes) -> Any:
        return self._value_serde.deserialize(stored)

    def _entry(self, key: bytes, stored: bytes | None) -> Any:
        k = self._key_serde.deserialize(key)
        return k if stored is None else KeyValue(k, self._value_of(stored))

    name: str

    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``."""
        stored = self._reader.get(self._key_bytes(key))
        return None if stored is None else self._value_of(stored)

    def get_many(self, keys: Any) -> Any:
        """Values of many keys in one call: a list for a list, an Arrow array for an Arrow array."""
        reader = self._reader
        if is_arrow(keys):
            return self._get_many_arrow(reader, keys)
        if self._raw_bytes():
            return reader.get_many(keys)
        stored = reader.get_many([self._key_bytes(k) for k in keys])
        value_of = self._value_of
        return [None if s is None else value_of(s) for s in stored]

    def _get_many_arrow(self, reader: Any, keys: Any) -> Any:
        import pyarrow as pa

        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        numbers = self._stored_numbers()
        if not (self._packs_keys(keys.type) and (self._packs_values() or numbers is not None)):
            return pa.array(self.get_many(keys.to_pylist()))
        large = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
        validity, offsets, data = keys.buffers()
        out_validity, out_offsets, out_data, nulls = reader.get_many_packed(
            offsets.to_pybytes(),
            data.to_pybytes() if data is not None else b"",
            validity.to_pybytes() if validity is not None else None,
            keys.offset,
            len(keys),
            large,
        )
        if numbers is not None:
            return arrow_numbers.from_packed((out_validity, out_offsets, out_data, nulls), len(keys), large, numbers)
        if isinstance(self._value_serde, StringSerde):
            out_type = pa.large_string() if large else pa.string()
        else:
            out_type = pa.large_binary() if large else pa.binary()
        buffers = [pa.py_buffer(out_validity), pa.py_buffer(out_offsets), pa.py_buffer(out_data)]
        return pa.Array.from_buffers(out_type, len(keys), buffers, null_count=nulls)

    def _packs_keys(self, arrow_type: Any) -> bool:
        import pyarrow as pa

        t = arrow_type
        if isinstance(self._key_serde, BytesSerde):
            return pa.types.is_binary(t) or pa.types.is_large_binary(t)
        if isinstance(self._key_serde, StringSerde):
            return pa.types.is_string(t) or pa.types.is_large_string(t)
        return False

    def _packs_values(self) -> bool:
        """Whether stored value bytes are the serialized value itself (no timestamp to strip)."""
        return isinstance(self._value_serde, (BytesSerde, StringSerde))

    def _stored_numbers(self) -> Any:
        """The numpy dtype of stored values that are 8-byte big-endian numbers (``int64`` /
        ``float64`` serdes, no timestamp), which the Arrow paths convert in bulk; else ``None``."""
        return arrow_numbers.stored_dtype(self._value_serde)

    def _raw_bytes(self) -> bool:
        """Whether keys and values are stored exactly as given (bytes serdes, no timestamps)."""
        return type(self._key_serde) is BytesSerde and type(self._value_serde) is BytesSerde and self._packs_values()

    def range(self, from_key: Any, to_key: Any) -> KeyValueIterator:
        """Entries with ``from_key <= key <= to_key`` in serialized-key order; ``None`` is unbounded."""
        return self._iterate(from_key, to_key, reverse=False)

    def reverse_range(self, from_key: Any, to_key: Any) -> KeyValueIterator:
        return self._iterate(from_key, to_key, reverse=True)

    def all(self) -> KeyValueIterator:
        return self._iterate(None, None, reverse=False)

    def reverse_all(self) -> KeyValueIterator:
        return self._iterate(None, None, reverse=True)

    def prefix_scan(self, prefix: Any, prefix_serde: Any = None) -> KeyValueIterator:
        """Entries whose serialized key starts with the serialized ``prefix``."""

        serde = self._key_serde if prefix_serde is None else serde_for(prefix_serde)
        raw = serde.serialize(prefix)
        if raw is None:
            raise InvalidArgumentError("prefix cannot be None")
        if self._raw_bytes():
            return KeyValueIterator(self._reader.prefix_scan(raw, False, KeyValue))
        return KeyValueIterator(self._reader.prefix_scan(raw), self._entry)

    def _iterate(self, from_key: Any, to_key: Any, reverse: bool) -> KeyValueIterator:
        lower = None if from_key is None else self._key_bytes(from_key)
        upper = None if to_key is None else self._key_bytes(to_key)
        if lower is not None and upper is not None and lower > upper:
            log.warning("range with from_key > to_key returns no entries (serialized keys compared as bytes)")
        if self._raw_bytes():
            return KeyValueIterator(self._reader.range(lower, upper, reverse, KeyValue))
        return KeyValueIterator(self._reader.range(lower, upper, reverse), self._entry)

    def approximate_num_entries(self) -> int:
        """An estimate of the number of entries (RocksDB's ``estimate-num-keys`` plus staged writes)."""
        return self._reader.approximate_num_entries()

    def __iter__(self) -> Iterator[Any]:
        return self.all()


_FETCH_TIMES = ("time_from", "time_to")
_FIND_TIMES = ("earliest_session_end_time", "latest_session_start_time")


class SegmentedReads:
    """Value and key conversion shared by a store and its read-only views. ``_reader`` is the
    native store or view."""

    _reader: Any
    _key_serde: Serde
    _value_serde: Serde
    _timestamped_bytes: bool
    _raw: bool
    name: str

    def _key_bytes(self, key: Any) -> bytes:
        return key_bytes(self._key_serde, key)

    def _raw_bytes(self) -> bool:
        """Whether keys and values are stored exactly as given (bytes serdes, no timestamps):
        then the hottest calls skip the conversions and go straight to the native store, which
        raises the same typed errors for ``None`` or non-bytes arguments."""
        return (
            type(self._key_serde) is BytesSerde
            and type(self._value_serde) is BytesSerde
            and not (self._timestamped_bytes)
        )

    def _optional_key_bytes(self, key: Any) -> bytes | None:
        return None if key is None else self._key_bytes(key)

    def _one_key_args(self, key: Any, names: tuple[str, str], first: Any, second: Any) -> tuple[bytes, int, int]:
        """A one-key range read's stored key and checked times. With bytes serdes a ``bytes`` key
        and int times in 64 bits (the hot case) pass as they are, without a call per argument."""
        if (
            self._raw
            and type(key) is bytes
            and type(first) is int
            and type(second) is int
            and MIN_TIME <= first <= MAX_TIME
            and MIN_TIME <= second <= MAX_TIME
        ):
            return key, first, second
        return self._key_bytes(key), check_time(names[0], first), check_time(names[1], second)

    def _value_and_timestamp_of(self, stored: bytes) -> ValueAndTimestamp:
        if not self._timestamped_bytes:
            return ValueAndTimestamp(self._value_serde.deserialize(stored), NO_TIMESTAMP)
        timestamp, raw = _core.decode_value_and_timestamp(stored)
        return ValueAndTimestamp(self._value_serde.deserialize(raw), timestamp)

    def _value_of(self, stored: bytes) -> Any:
        if self._timestamped_bytes:
            return self._value_serde.deserialize(_core.decode_value_and_timestamp(stored)[1])
        return self._value_serde.deserialize(stored)

    def _decoder(self, with_timestamp: bool) -> Callable[[bytes], Any]:
        return self._value_and_timestamp_of if with_timestamp else self._value_of

    def _finished(self, with_timestamp: bool) -> bool:
        """Whether the binding makes the rows whole: bytes serdes, values without timestamps."""
        return self._raw and not with_timestamp

    def _windowed_iterator(self, native: Any, with_timestamp: bool) -> WindowedIterator:
        """Rows as ``KeyValue(Windowed(key, start, end), value)``; made natively when ``_finished``."""
        if self._finished(with_timestamp):
            return WindowedIterator(native, None)
        key_of = self._key_serde.deserialize
        value_of = self._decoder(with_timestamp)
        return WindowedIterator(native, lambda k, start, end, v: KeyValue(Windowed(key_of(k), start, end), value_of(v)))


class WindowReads(SegmentedReads):
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
        if len(args) == 3 and self._raw and type(args[0]) is bytes:
            # The hot case, in one call: the binding checks the times and makes the rows.
            return WindowedIterator(self._reader.fetch_key(*args, False, True), None)
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
            finished = self._finished(with_timestamp)
            native = reader.fetch_key(*self._one_key_args(key, _FETCH_TIMES, time_from, time_to), reverse, finished)
            if finished:
                return WindowedIterator(native, None)
            value_of = self._decoder(with_timestamp)
            return WindowedIterator(native, lambda k, start, end, v: KeyValue(start, value_of(v)))
        if len(args) == 4:
            key_from, key_to, time_from, time_to = args
            lower, upper = self._optional_key_bytes(key_from), self._optional_key_bytes(key_to)
            native = reader.fetch_range(
                lower,
                upper,
                check_time("time_from", time_from),
                check_time("time_to", time_to),
                reverse,
                self._finished(with_timestamp),
            )
            return self._windowed_iterator(native, with_timestamp)
        raise InvalidArgumentError(
            f"fetch takes (key, time), (key, time_from, time_to) or (key_from, key_to, time_from, time_to); "
            f"got {len(args)} arguments"
        )


class SessionReads(SegmentedReads):
    """Reads shared by a session store and its read-only views."""

    def fetch(self, key_or_from: Any, key_to: Any = ...) -> WindowedIterator:
        """``fetch(key)``: every live session of ``key``; ``fetch(key_from, key_to)``: of the keys
        in ``[key_from, key_to]`` (``None``: unbounded). Yields ``KeyValue(Windowed, aggregate)``."""
        if key_to is ... and self._raw and type(key_or_from) is bytes:
            # The hot case, in one call, as find_sessions'.
            native = self._reader.find_sessions(key_or_from, key_or_from, 0, MAX_TIME, False, True)
            return WindowedIterator(native, None)
        return self._find(key_or_from, key_to, 0, MAX_TIME, reverse=False, with_timestamp=False)

    def backward_fetch(self, key_or_from: Any, key_to: Any = ...) -> WindowedIterator:
        return self._find(key_or_from, key_to, 0, MAX_TIME, reverse=True, with_timestamp=False)

    def find_sessions(self, *args: Any) -> WindowedIterator:
        """``find_sessions(key, earliest_session_end_time, latest_session_start_time)`` or
        ``find_sessions(key_from, key_to, earliest_session_end_time, latest_session_start_time)``:
        sessions with ``end >= earliest_session_end_time`` and ``start <= latest_session_start_time``."""
        if len(args) == 3 and self._raw and type(args[0]) is bytes:
            # The hot case, in one call: the binding checks the times and makes the rows.
            key, earliest_end, latest_start = args
            return WindowedIterator(self._reader.find_sessions(key, key, earliest_end, latest_start, False, True), None)
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
            key, earliest_end, latest_start = self._one_key_args(key_from, _FIND_TIMES, earliest_end, latest_start)
            native = self._reader.find_sessions(
                key, key, earliest_end, latest_start, reverse, self._finished(with_timestamp)
            )
        else:
            native = self._reader.find_sessions(
                self._optional_key_bytes(key_from),
                self._optional_key_bytes(key_to),
                check_time(_FIND_TIMES[0], earliest_end),
                check_time(_FIND_TIMES[1], latest_start),
                reverse,
                self._finished(with_timestamp),
            )
        return self._windowed_iterator(native, with_timestamp)

"""``Windowed`` keys of window and session stores, and the iterator that yields them."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, starmap

from kstate import _core
from kstate.errors import InvalidArgumentError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, Callable, NamedTuple
else:
    from kstate.named_tuple import NamedTuple  # typing's, without importing typing

MAX_TIME = 2**63 - 1
"""Java's ``Long.MAX_VALUE``: "no upper bound" for times."""


class Window(NamedTuple):
    """A time window: ``start`` and ``end`` in milliseconds (Kafka's ``Window``)."""

    start: int
    end: int


class Windowed(NamedTuple):
    """A key and the window it belongs to (Kafka's ``Windowed<K>``). For window stores ``end`` is
    ``start + window size``; for session stores the session's start and end."""

    key: Any
    start: int
    end: int

    @property
    def window(self) -> Window:
        return Window(self.start, self.end)


MIN_TIME = -(2**63)


def check_time(name: str, value: Any) -> int:
    """A time argument in milliseconds: an int (not a bool)."""
    if type(value) is int and MIN_TIME <= value <= MAX_TIME:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an int (ms), got {value!r}")
    if not MIN_TIME <= value <= MAX_TIME:
        raise InvalidArgumentError(f"{name} must fit in 64 bits, got {value}")
    return value


class WindowedIterator:
    """Iterator over window or session store entries. Use as a context manager or call ``close()``
    when done early; once its store is closed it raises ``StoreClosedError`` (after the rows of
    the chunk it already read: at most 2,048, or about 1 MiB). Reading ahead in chunks, it may or
    may not show a write made while it is open to an entry it has not reached (as for
    ``KeyValueIterator``)."""

    __slots__ = ("_native", "_rows")

    def __init__(self, native: _core.WindowedIterator, decode: Callable[[bytes, int, int, bytes], Any] | None):
        # Rows come in native chunks (lists) that Python's own iterators walk, so a ``for`` loop
        # over ``iter(self)`` makes no call into the binding per row; ``decode(key, start, end,
        # stored)`` turns a native row into the entry, ``None`` when the native rows are finished
        # (bytes serdes).
        self._native = native
        rows = chain.from_iterable(iter(native.next_chunk, None))
        self._rows: Iterator[Any] = rows if decode is None else starmap(decode, rows)

    def __iter__(self) -> Iterator[Any]:
        return self._rows

    def __next__(self) -> Any:
        return next(self._rows)

    def close(self) -> None:
        self._native.close()
        self._rows = iter(())

    def __enter__(self) -> WindowedIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

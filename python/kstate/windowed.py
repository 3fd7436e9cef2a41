"""``Windowed`` keys of window and session stores, and the iterator that yields them."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import starmap
from typing import Any, Callable, NamedTuple

from kstate import _core
from kstate.errors import InvalidArgumentError

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
    when done early; it raises ``StoreClosedError`` once its store is closed. It reads ahead in
    chunks, so a write made while it is open to an entry it has not reached may or may not show
    in it (as for ``KeyValueIterator``)."""

    __slots__ = ("_native", "_rows")

    def __init__(self, native: _core.WindowedIterator, decode: Callable[[bytes, int, int, bytes], Any] | None):
        # ``decode(key, start, end, stored)`` turns a native row into the entry; ``None`` when the
        # native iterator yields finished rows (bytes serdes). Either way a ``for`` loop over
        # ``iter(self)`` runs no Python frame of this class per row.
        self._native = native
        self._rows = native if decode is None else starmap(decode, native)

    def __iter__(self) -> Iterator[Any]:
        return self._rows

    def __next__(self) -> Any:
        return next(self._rows)

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> WindowedIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

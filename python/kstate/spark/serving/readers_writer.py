"""A readers-writer lock whose writes readers can wait for.

Reads of a replica run together; a refresh applying what it prepared (commits, swapped copies)
runs alone, so a read sees every partition before or after an update, never during one. A
waiting writer goes first (a stream of reads cannot starve updates), and each write counts up
``version``, which a reader waiting for a newer state waits on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ReadersWriterLock:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0
        self.version = 0
        """How many writes finished."""

    @contextmanager
    def reading(self) -> Iterator[int]:
        """Holds the lock shared; gives the ``version`` read."""
        with self._changed:
            while self._writing or self._writers_waiting:
                self._changed.wait()
            self._readers += 1
            version = self.version
        try:
            yield version
        finally:
            with self._changed:
                self._readers -= 1
                if not self._readers:
                    self._changed.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Holds the lock alone."""
        with self._changed:
            self._writers_waiting += 1
            while self._writing or self._readers:
                self._changed.wait()
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._changed:
                self._writing = False
                self.version += 1
                self._changed.notify_all()

    def wait_for_write(self, seen: int, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for a write after version ``seen``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.version == seen:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(remaining)

"""A readers-writer lock whose writes readers can wait for, or read around.

Reads of a replica run together; a refresh applying what it prepared (commits, swapped copies)
runs alone, so a read sees every partition before or after an update, never during one. A
waiting writer goes first (a stream of reads cannot starve updates).

``sequence`` counts writes as a seqlock does: it goes up when a write starts and again when it
ends, so it is odd while one runs. A point read too short to be worth the lock reads
``sequence``, reads, and keeps what it read only if ``sequence`` is still the even number it saw
(no write started meanwhile); a reader waiting for a newer state waits for ``sequence`` to move
past a write. The count is native (``_core.Seqlock``) so that a native read (``_core.SnapshotRead``)
checks it without looking an attribute up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kstate import _core


class ReadersWriterLock:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0
        self.seqlock = _core.Seqlock()
        """Its ``sequence``: twice the writes finished, plus one while a write runs."""

    @property
    def sequence(self) -> int:
        return self.seqlock.sequence

    @contextmanager
    def reading(self) -> Iterator[int]:
        """Holds the lock shared; gives the ``sequence`` read (even: no write runs)."""
        with self._changed:
            while self._writing or self._writers_waiting:
                self._changed.wait()
            self._readers += 1
            sequence = self.sequence
        try:
            yield sequence
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
            self.seqlock.advance()
        try:
            yield
        finally:
            with self._changed:
                self._writing = False
                self.seqlock.advance()
                self._changed.notify_all()

    def wait_for_write(self, seen: int, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for a write to finish after ``sequence`` ``seen``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.sequence < seen + 2 - seen % 2:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(remaining)

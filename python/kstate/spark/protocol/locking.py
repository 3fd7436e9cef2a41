"""Exclusive file locks between processes: one per task directory, one per changelog partition.

``flock`` locks belong to an open file, not to a process, so two Python workers (or two opens in
one worker) exclude each other, and the kernel drops a lock when its holder dies, even by
SIGKILL: a crashed attempt never leaves a lock behind.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Callable

from kstate.errors import StateLockTimeoutError

log = logging.getLogger("kstate.spark")

# A holder asked to release usually does within milliseconds (kstate.spark.protocol.idle), so waiting
# starts with short polls and backs off to the longest. A partition that moved between Spark's
# Python workers waits here for the other worker's release (flush and close, tens of ms): a longer
# poll would add up to its length to every move. A poll is one flock call.
_FIRST_POLL_SECONDS = 0.002
_POLL_SECONDS = 0.01
_REPORT_EVERY_SECONDS = 10.0


class NoLock:
    """Stands in for the publication lock where the changelogs live on an object store: there
    exclusive creates decide, not locks."""

    token = ""
    previous_holder = None

    def acquire(self, on_wait: Callable[[], None] | None = None) -> NoLock:
        return self

    def release(self) -> None:
        """Nothing to release."""


class FileLock:
    """An exclusive lock on ``path`` (created if missing). ``acquire`` waits up to ``timeout``
    seconds, logging while it waits; use as a context manager.

    The holder writes a token of its own (pid and a random id) into the file; ``previous_holder``
    is what the file held before, so a process that finds its own token knows nobody else held
    the lock in between."""

    def __init__(self, path: str | os.PathLike, what: str, timeout: float):
        self.path = Path(path)
        self.what = what
        self.timeout = timeout
        self.token = f"{os.getpid()}:{uuid.uuid4().hex}"
        self.previous_holder = ""
        self._fd: int | None = None

    def acquire(self, on_wait: Callable[[], None] | None = None) -> FileLock:
        """Takes the lock; ``on_wait()`` runs once if another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        started = time.monotonic()
        next_report = started + _REPORT_EVERY_SECONDS
        poll = _FIRST_POLL_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                    on_wait = None
                now = time.monotonic()
                if now - started >= self.timeout:
                    os.close(fd)
                    raise StateLockTimeoutError(
                        f"{self.what} ({self.path}) stayed locked by another process for {self.timeout:.0f} s"
                    ) from None
                if now >= next_report:
                    log.info(
                        "waiting for %s (%s): locked by another process for %.0f s", self.what, self.path, now - started
                    )
                    next_report = now + _REPORT_EVERY_SECONDS
                time.sleep(poll)
                poll = min(2 * poll, _POLL_SECONDS)
        self.previous_holder = os.pread(fd, 256, 0).decode(errors="replace").strip()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.token}\n".encode(), 0)
        self._fd = fd
        return self

    def still_names_this_file(self) -> bool:
        """Whether the held lock file is still the file at ``path`` (not deleted or replaced)."""
        try:
            return self._fd is not None and os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

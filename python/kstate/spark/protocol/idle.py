"""Stores kept open between the tasks of a reused Python worker.

Spark reuses Python workers across tasks (``spark.python.worker.reuse``), so the next micro-batch
of a partition often runs in the process that committed the last one. Closing the stores after
each task would throw away RocksDB's open files and kstate's read cache, and the next task would
pay for a RocksDB open and cold reads. So a committed task parks its stores here, still holding
its task directory's lock, and the next task of that partition in this process takes them back.
Parked stores close their changelogs (which live in the directory every executor shares), so a
task of the partition on another executor can open them; a parked store whose partition was
published elsewhere meanwhile is closed and reopened instead of reused.

Another worker that needs the partition asks for it: it creates ``.kstate-release`` in the task
directory while it waits for the lock, and a daemon thread here closes parked stores named by a
request and releases their lock. The thread waits on the parked task directories with inotify
(``_core.FileWatch``), so it costs nothing until a request comes; where that is not available
it checks for requests every 10 ms (which cost a worker ~3% of a core while it had stores
parked, and made its running task give up the GIL each time). Only parked stores are given up;
a running task keeps its own.
Spark hands a task to whichever Python worker is idle, so with two workers a partition often
moves: a task asks as soon as it starts (``claim``), and the holder releases while the task still
waits for its input rows.

Parked stores hold open files (RocksDB's, the changelog cache's) and memory, so a process keeps a
bounded number: past ``MAX_PARKED`` partitions the longest parked is released, as is any left
untaken for ``IDLE_SECONDS`` or whose task directory was deleted. A process with too many open
files breaks more than kstate: py4j's callback server (``foreachBatch``) stops answering once
its descriptors pass 1024.

At the interpreter's exit the thread stops and the parked stores close, on the exiting thread:
left to the daemon thread, a store closing while the interpreter finalizes fails in the native
binding (it cannot take the GIL back) with a Rust panic instead of a clean close.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.errors import KStateError
from kstate.spark.protocol.locking import FileLock
from kstate.spark.protocol.upgrade import wait_for_build

log = logging.getLogger("kstate.spark")

RELEASE_REQUEST = ".kstate-release"
MAX_PARKED = 16
"""Partitions whose stores one process keeps parked."""
IDLE_SECONDS = 600.0
"""How long parked stores wait for their partition's next task before they are released."""
_POLL_SECONDS = 0.01
"""How often requests are checked for without ``_core.FileWatch``."""
_SWEEP_SECONDS = 1.0
_STOP_SECONDS = 60.0
"""How long the exit waits for a release under way (closing stores flushes their memtables)."""


@dataclass
class Parked:
    """Open stores of one partition with what they were committed at."""

    stores: dict[str, Any]
    task_lock: FileLock
    head_position: int | None
    """The batch log position the stores are at (``None``: before the first entry)."""
    publish_token: str
    """What this process wrote into the publication lock file when it last held it."""
    settings: dict[str, Any]
    """What the stores were opened with (``PartitionState.store_settings``): a task whose stores
    are set otherwise (a query restarted with other configs) reopens them instead."""
    parked_at: float = field(default_factory=time.monotonic)


class IdleStores:
    """Parked stores by task directory, longest parked first; thread-safe."""

    def __init__(self) -> None:
        self._parked: dict[Path, Parked] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._stops_at_exit = False
        self._requests: Any = None
        """The thread's ``_core.FileWatch`` of the parked task directories (``None``: it polls)."""

    def take(self, task_dir: Path) -> Parked | None:
        with self._lock:
            return self._unpark(task_dir)

    def _unpark(self, task_dir: Path) -> Parked | None:
        """Takes ``task_dir``'s parked stores out, if held; the lock is held."""
        parked = self._parked.pop(task_dir, None)
        if parked is not None and self._requests is not None:
            self._requests.remove(task_dir)
        return parked

    def holds(self, task_dir: Path) -> bool:
        with self._lock:
            return task_dir in self._parked

    def park(self, task_dir: Path, parked: Parked) -> None:
        with self._lock:
            self._unpark(task_dir)
            if self._watcher is None:
                if not self._stops_at_exit:
                    atexit.register(self.stop)
                    self._stops_at_exit = True
                self._stopping = threading.Event()
                self._requests = _request_watch()
                self._watcher = threading.Thread(
                    target=self._watch, args=(self._stopping, self._requests), name="kstate-idle-stores", daemon=True
                )
                self._watcher.start()
            self._parked[task_dir] = parked
            if self._requests is not None:
                self._watch_for_requests(task_dir)
            excess = list(self._parked)[: max(0, len(self._parked) - MAX_PARKED)]
            overflow = [self._unpark(d) for d in excess]
        for evicted in overflow:
            release(evicted)
        if overflow:
            log.info("released the parked stores of %d partitions (at most %d stay parked)", len(overflow), MAX_PARKED)

    def release_all(self) -> None:
        """Closes every parked store of this process (a process done with its partitions)."""
        with self._lock:
            given_up = [self._unpark(d) for d in list(self._parked)]
        for parked in given_up:
            release(parked)

    def stop(self) -> None:
        """Stops the thread that releases parked stores and closes them all (run at exit)."""
        with self._lock:
            watcher, self._watcher = self._watcher, None
            self._stopping.set()
            if self._requests is not None:
                self._requests.wake()
        if watcher is not None:
            watcher.join(_STOP_SECONDS)
        self.release_all()
        self._requests = None

    def _watch_for_requests(self, task_dir: Path) -> None:
        """Adds ``task_dir`` to the watch, and wakes the thread to check for a request made
        before (the lock is held). A directory that cannot be watched is checked at each sweep."""
        try:
            self._requests.add(task_dir)
        except KStateError as error:
            log.info("release requests for %s are checked every %.0f s: %s", task_dir, _SWEEP_SECONDS, error)
        self._requests.wake()

    def _watch(self, stop: threading.Event, requests: Any) -> None:
        next_sweep = time.monotonic() + _SWEEP_SECONDS
        while not stop.is_set():
            if requests is None:
                stop.wait(_POLL_SECONDS)
            else:
                requests.wait(max(0.0, next_sweep - time.monotonic()))
            if stop.is_set():
                return
            self._release_requested()
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + _SWEEP_SECONDS

    def _release_requested(self) -> None:
        """Releases the parked stores another worker asked for."""
        # Released outside the lock: closing flushes memtables, and this process's next task
        # may meanwhile take other parked stores.
        with self._lock:
            requested = [d for d in self._parked if (d / RELEASE_REQUEST).exists()]
            given_up = [(d, self._unpark(d)) for d in requested]
        for task_dir, parked in given_up:
            wait_for_build(task_dir)  # a standby build of an in-place upgrade writes there too
            release(parked)
            log.info("released the stores of %s to another worker", task_dir)

    def _sweep(self) -> None:
        """Releases stores parked for longer than ``IDLE_SECONDS`` or whose task directory is gone."""
        now = time.monotonic()
        with self._lock:
            stale = [d for d, p in self._parked.items() if now - p.parked_at > IDLE_SECONDS or not d.is_dir()]
            given_up = [(d, self._unpark(d)) for d in stale]
        for task_dir, parked in given_up:
            release(parked)
            log.info("released the stores of %s: idle or deleted", task_dir)


def _request_watch() -> Any:
    """A ``_core.FileWatch`` of release requests, or ``None`` where there is none (not Linux, or
    the user's inotify instances used up): the thread then polls."""
    try:
        return _core.FileWatch(RELEASE_REQUEST)
    except AttributeError:
        return None
    except KStateError as error:
        log.info("release requests are checked every %.0f ms: %s", _POLL_SECONDS * 1000, error)
        return None


def ask_to_release(task_dir: Path) -> None:
    """Asks the worker that parked ``task_dir``'s stores, if one did, to release them."""
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / RELEASE_REQUEST).touch()


def wait_for_release(task_dir: Path, task_lock: Path, what: str, timeout: float) -> None:
    """Asks the worker that parked ``task_dir``'s stores, if one did, to release them, and waits
    until ``task_lock`` (the task directory's lock) is free: afterwards nothing writes into
    ``task_dir`` (for instance before deleting the local state)."""
    request = task_dir / RELEASE_REQUEST
    request.touch()
    try:
        FileLock(task_lock, what, timeout).acquire().release()
    finally:
        request.unlink(missing_ok=True)


def claim(task_dir: Path) -> None:
    """At the start of a task, before its input arrives: unless this process has the partition's
    stores parked, asks whoever has them to release them now. The task that opens the partition
    removes the request once it holds the lock; one left by a task that failed before that costs
    the next holder one release and reopen."""
    if not IDLE.holds(task_dir):
        ask_to_release(task_dir)


def release(parked: Parked) -> None:
    """Closes parked stores and gives up their task directory's lock. Stores whose directory was
    deleted under them may fail to close; they hold nothing anyone needs, so that is logged."""
    try:
        for name, store in parked.stores.items():
            try:
                store.close()
            except KStateError as error:
                log.warning("closing parked store %s failed: %s", name, error)
    finally:
        parked.task_lock.release()


IDLE = IdleStores()
"""This process's parked stores."""

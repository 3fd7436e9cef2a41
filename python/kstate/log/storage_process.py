"""Object-store work done in the background by a child process: a snapshot's file uploads and
a remote changelog's compaction. Done by threads of the committing process, their Python work
(s3fs: each request's SHA-256 and checksum, aiohttp, the event loop) held its GIL often enough to
make the commits' own changelog requests several times slower (benches/README, "Commit latency
with snapshots").

One child per process, started on first use (``python -m kstate.log.storage_process``, at a
lower CPU priority: its work can wait, a commit cannot) and shared by every store. A request
names the location (URL and storage options) and the operation; the caller waits for the answer,
which is the operation's result or the exception it raised, as if it had run in the caller.
The child runs requests at once, each on a thread of its own (up to ``_THREADS``), and sends its
log records (kstate's, and other libraries' warnings) to the parent, which logs those its
logging is set to log, as its own.

The child ends when its parent does (it reads the end of its request pipe and exits at once,
leaving what it was writing unfinished, as a killed process would): an object store holds an
object whole or not at all, a snapshot's manifest is written only after every file of it has
been answered, and a compaction is safe to stop part-way. A child that dies, or sends an answer
that does not read (it is killed then), fails the requests it held (``RemoteStorageError``); the
next request starts another.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, NamedTuple

from kstate.errors import RemoteStorageError
from kstate.log.object_store import ObjectStore, RetryPolicy
from kstate.log.remote import CompactionReport, RemoteChangelog

log = logging.getLogger("kstate.log.storage_process")

_THREADS = 16  # more than callers send at once (a snapshot: snapshots.TRANSFER_THREADS, a compaction)
_NICENESS = 10
_FRAME = struct.Struct(">I")


class _Running(NamedTuple):
    """A child and the answers its callers wait for, by request."""

    process: subprocess.Popen[bytes]
    waiting: dict[int, Future[Any]]


class StorageProcess:
    """A child process doing object-store work; safe to call from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the child, its pipe and the answers awaited
        self._child: _Running | None = None
        self._next_request = 0

    def upload(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None,
        retry: RetryPolicy,
        key: str,
        local_path: str,
        exclusive: bool,
    ) -> None:
        """Writes ``local_path`` as ``key`` under ``url``: ``ObjectStore.create`` if
        ``exclusive``, else ``ObjectStore.replace``."""
        self._call(
            f"uploading {url}/{key}", "upload", url, dict(storage_options or {}), retry, key, local_path, exclusive
        )

    def compact(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None,
        topic: str,
        partition: int,
        config: Mapping[str, Any],
        min_objects: int,
        work_dir: str,
        keep_newest: int,
    ) -> CompactionReport:
        """``RemoteChangelog.compact`` of the changelog partition ``<url>/<topic>-<partition>``."""
        options = dict(storage_options or {})
        what = f"compacting {url}/{topic}-{partition}"
        return self._call(
            what, "compact", url, options, topic, partition, dict(config), min_objects, work_dir, keep_newest
        )

    def _call(self, what: str, operation: str, *args: Any) -> Any:
        answer: Future[Any] = Future()
        with self._lock:
            running = self._running_child()
            self._next_request += 1
            request = self._next_request
            running.waiting[request] = answer
            try:
                _write_frame(running.process.stdin, (request, operation, args))
            except (OSError, ValueError) as error:  # the child is gone: its reader fails the rest
                del running.waiting[request]
                if self._child is running:  # the next request starts another, its reader may lag
                    self._child = None
                raise RemoteStorageError(f"{what}: the storage process is gone: {error}") from error
        return answer.result()

    def _running_child(self) -> _Running:
        if self._child is None:
            # sys.path as PYTHONPATH: the child imports kstate from where this process did.
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
            process = subprocess.Popen(
                [sys.executable, "-m", "kstate.log.storage_process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            log.info("Started the storage process (pid %d)", process.pid)
            self._child = _Running(process, {})
            threading.Thread(
                target=self._read_answers, args=(self._child,), name="kstate-storage-answers", daemon=True
            ).start()
        return self._child

    def _read_answers(self, running: _Running) -> None:
        """Hands each answer to its caller until the child ends; then fails what it held."""
        child = running.process
        assert child.stdout is not None
        try:
            while True:
                message = _read_frame(child.stdout)
                if message is None:
                    break
                if message[0] == "log":
                    record = logging.makeLogRecord(message[1])
                    logger = logging.getLogger(record.name)
                    if logger.isEnabledFor(record.levelno):  # as this process's logging is set now
                        logger.handle(record)
                    continue
                _, request, result, error = message
                with self._lock:
                    future = running.waiting.pop(request)
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)
        except Exception as failure:  # an answer that does not read: the child is not to be trusted
            log.warning("The storage process (pid %d) sent what does not read, killing it: %s", child.pid, failure)
            child.kill()
        finally:
            with self._lock:  # no request goes to this child any more
                if self._child is running:
                    self._child = None
                lost = dict(running.waiting)
                running.waiting.clear()
            code = child.wait()
            if lost:
                log.warning(
                    "The storage process (pid %d) exited with code %s; %d requests failed", child.pid, code, len(lost)
                )
            for future in lost.values():
                exited = f"the storage process exited with code {code} before answering"
                future.set_exception(RemoteStorageError(exited))


_processes: dict[int, StorageProcess] = {}
_processes_lock = threading.Lock()


def shared() -> StorageProcess:
    """This process's storage process (a forked process gets its own: pipes are not shared)."""
    with _processes_lock:
        return _processes.setdefault(os.getpid(), StorageProcess())


def can_send(storage_options: Mapping[str, Any] | None) -> bool:
    """Whether ``storage_options`` can go to the child (a client object or a credentials
    callback may not pickle: such a location's work stays in its own process)."""
    try:
        pickle.dumps(dict(storage_options or {}))
        return True
    except Exception:  # any failure to pickle means: not sendable
        return False


def _write_frame(stream: BinaryIO | None, message: object) -> None:
    assert stream is not None
    data = pickle.dumps(message)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream: BinaryIO) -> Any:
    """The next message, or ``None`` at the end of the stream."""
    header = stream.read(_FRAME.size)
    if len(header) < _FRAME.size:
        return None
    return pickle.loads(stream.read(_FRAME.unpack(header)[0]))


class _Child:
    """The child's side: runs requests and answers them, and sends its log records."""

    def __init__(self, answers: BinaryIO):
        self._answers = answers
        self._answers_lock = threading.Lock()
        self._stores: dict[tuple[str, bytes, RetryPolicy], ObjectStore] = {}
        self._stores_lock = threading.Lock()

    def send(self, message: object) -> None:
        data = pickle.dumps(message)
        with self._answers_lock:
            self._answers.write(_FRAME.pack(len(data)) + data)
            self._answers.flush()

    def run(self, request: int, operation: str, args: tuple[Any, ...]) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = self.upload(*args) if operation == "upload" else self.compact(*args)
        except Exception as failure:  # every failure goes back to the caller, who acts on it
            error = failure
        try:
            self.send(("answer", request, result, error))
        except Exception:  # an exception that does not pickle goes back as its text
            self.send(("answer", request, None, RemoteStorageError(f"{type(error).__name__}: {error}")))

    def upload(self, url: str, options: dict[str, Any], retry: RetryPolicy, key: str, path: str, exclusive: bool):
        place = (url, pickle.dumps(options), retry)
        with self._stores_lock:
            if place not in self._stores:
                self._stores[place] = ObjectStore(url, options, retry)
            store = self._stores[place]
        (store.create if exclusive else store.replace)(key, path)

    def compact(self, url: str, options: dict[str, Any], topic: str, partition: int, *args: Any) -> CompactionReport:
        config, min_objects, work_dir, keep_newest = args
        changelog = RemoteChangelog(url, topic, partition, options)
        return changelog.compact(config, min_objects=min_objects, work_dir=work_dir, keep_newest=keep_newest)


class _ToParent(logging.Handler):
    def __init__(self, child: _Child):
        super().__init__()
        self._child = child

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {**record.__dict__, "msg": record.getMessage(), "args": None, "exc_info": None}
            if record.exc_info:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            self._child.send(("log", fields))
        except Exception:  # a record that cannot be sent is dropped, never the work
            self.handleError(record)


def _serve() -> None:
    """The child: answers requests from stdin on the original stdout (anything printed goes to
    stderr), and exits as soon as stdin ends."""
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    os.nice(_NICENESS)
    child = _Child(answers)
    logging.getLogger().addHandler(_ToParent(child))
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("kstate").setLevel(logging.DEBUG)  # every kstate record: the parent's logging filters
    with ThreadPoolExecutor(_THREADS, thread_name_prefix="kstate-storage") as pool:
        while True:
            message = _read_frame(requests)
            if message is None:
                os._exit(0)  # the parent ended (or closed): leave unfinished work as a kill would
            pool.submit(child.run, *message)


if __name__ == "__main__":
    _serve()

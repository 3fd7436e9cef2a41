"""Uploads to an object store made by a child process, so that a snapshot's hundred MiB of table
files do not share the committing process's GIL: s3fs's Python work for an upload (the request's
SHA-256 and checksum, aiohttp, the event loop) held it often enough to make a commit's own
changelog PUT several times slower (benches/README, "Commit latency with snapshots").

One child per process, started on the first upload (``python -m kstate.log.upload_process``, at
a lower CPU priority: its work can wait, a commit cannot) and reused by every store. A request
names the location (URL, storage options, retry policy), the key, the local file and whether the
object must not exist yet; the child answers when the object is written, or with the exception
``ObjectStore`` raised, which the caller gets as if it had uploaded itself. The child uploads as
many files at once as its callers send (up to ``_THREADS``).

The child ends when its parent does (it reads the end of its request pipe and exits at once,
leaving what it was writing unfinished, as a killed process would): an object store holds an
object whole or not at all, and a snapshot's manifest is written only after every file of it
has been answered. A child that dies fails the requests it held (``RemoteStorageError``); the
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
from typing import Any, BinaryIO

from kstate.errors import RemoteStorageError
from kstate.log.object_store import ObjectStore, RetryPolicy

log = logging.getLogger("kstate.log.upload_process")

_THREADS = 16  # more than any caller sends at once (a snapshot: snapshots.TRANSFER_THREADS)
_NICENESS = 10
_FRAME = struct.Struct(">I")


class UploadProcess:
    """A child process that uploads files; safe to call from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the child, its pipe and the answers awaited
        self._child: subprocess.Popen[bytes] | None = None
        self._waiting: dict[int, Future[None]] = {}
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
        """Writes ``local_path`` as ``key`` under ``url`` (``ObjectStore.create`` if
        ``exclusive``, else ``ObjectStore.replace``) and returns once it is written, raising
        what that raised."""
        options = dict(storage_options or {})
        answer: Future[None] = Future()
        with self._lock:
            child = self._running_child()
            self._next_request += 1
            request = self._next_request
            self._waiting[request] = answer
            try:
                _write_frame(child.stdin, (request, url, options, retry, key, local_path, exclusive))
            except (OSError, ValueError) as error:  # the child is gone: its reader fails the rest
                del self._waiting[request]
                raise RemoteStorageError(f"uploading {url}/{key}: the upload process is gone: {error}") from error
        answer.result()

    def _running_child(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            # sys.path as PYTHONPATH: the child imports kstate from where this process did.
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
            self._child = subprocess.Popen(
                [sys.executable, "-m", "kstate.log.upload_process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            log.info("Started the upload process (pid %d)", self._child.pid)
            threading.Thread(
                target=self._read_answers, args=(self._child,), name="kstate-upload-answers", daemon=True
            ).start()
        return self._child

    def _read_answers(self, child: subprocess.Popen[bytes]) -> None:
        assert child.stdout is not None
        try:
            while True:
                answer = _read_frame(child.stdout)
                if answer is None:
                    break
                request, error = answer
                with self._lock:
                    future = self._waiting.pop(request)
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
        finally:
            code = child.wait()
            with self._lock:
                if self._child is child:
                    self._child = None
                lost, self._waiting = self._waiting, {}
            if lost:
                log.warning(
                    "The upload process (pid %d) exited with code %s; %d uploads failed", child.pid, code, len(lost)
                )
            for future in lost.values():
                exited = f"the upload process exited with code {code} before answering"
                future.set_exception(RemoteStorageError(exited))


_processes: dict[int, UploadProcess] = {}
_processes_lock = threading.Lock()


def shared() -> UploadProcess:
    """This process's upload process (a forked process gets its own: pipes are not shared)."""
    with _processes_lock:
        return _processes.setdefault(os.getpid(), UploadProcess())


def can_send(storage_options: Mapping[str, Any] | None) -> bool:
    """Whether ``storage_options`` can go to the child (a client object or a credentials
    callback may not pickle: such a location uploads in its own process)."""
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
    data = stream.read(_FRAME.unpack(header)[0])
    return pickle.loads(data)


def _serve() -> None:
    """The child: answers requests from stdin on the original stdout (anything printed goes to
    stderr), and exits as soon as stdin ends."""
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    os.nice(_NICENESS)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stores: dict[tuple[str, bytes, RetryPolicy], ObjectStore] = {}
    stores_lock = threading.Lock()
    answers_lock = threading.Lock()

    def store_of(url: str, options: dict[str, Any], retry: RetryPolicy) -> ObjectStore:
        place = (url, pickle.dumps(options), retry)
        with stores_lock:
            if place not in stores:
                stores[place] = ObjectStore(url, options, retry)
            return stores[place]

    def upload(
        request: int, url: str, options: dict[str, Any], retry: RetryPolicy, key: str, path: str, exclusive: bool
    ) -> None:
        error: BaseException | None = None
        try:
            store = store_of(url, options, retry)
            (store.create if exclusive else store.replace)(key, path)
        except Exception as failure:  # every failure goes back to the caller, who acts on it
            error = failure
        try:
            answer = pickle.dumps((request, error))
        except Exception:  # an exception that does not pickle goes back as its text
            answer = pickle.dumps((request, RemoteStorageError(f"{type(error).__name__}: {error}")))
        with answers_lock:
            answers.write(_FRAME.pack(len(answer)) + answer)
            answers.flush()

    with ThreadPoolExecutor(_THREADS, thread_name_prefix="kstate-upload") as pool:
        while True:
            message = _read_frame(requests)
            if message is None:
                os._exit(0)  # the parent ended (or closed): leave unfinished uploads as a kill would
            pool.submit(upload, *message)


if __name__ == "__main__":
    _serve()

"""Files of one directory on any filesystem fsspec reaches (``s3://bucket/prefix``, ``gs://...``,
``file:///mnt/shared``, ...): list, fetch, create exclusively, delete. This is all a remote
changelog needs from its storage (``kstate.log.remote``).

``create`` is the one operation that must be atomic: the object appears whole or not at all, and
only if no object of that name exists. On S3 it is a conditional put (``If-None-Match: *``, on
multipart uploads too); on local and network-mounted files a hard link of a complete temporary
file (``link`` fails if the name exists). Other filesystems get fsspec's ``mode="create"``,
which is only as atomic as their implementation makes it.

Failures of the storage are ``RemoteStorageError``; ``create`` raises ``FileExistsError`` and
``fetch`` ``FileNotFoundError`` for the two outcomes callers act on.

Transient failures (:func:`is_transient`: connections refused, reset or closed early, timeouts,
HTTP 5xx and 429, S3's ``SlowDown`` / ``Throttling`` / ``RequestTimeout`` / ``InternalError`` /
``ServiceUnavailable``) are retried, each operation on its own, with exponential backoff and full
jitter (:class:`RetryPolicy`; by default 6 attempts, 3.1 s of sleep at most), each retry logged at
WARNING; ``RemoteStorageError`` says how many attempts failed. This is the outer layer: botocore
and s3fs retry some failures themselves first. Other failures raise at once. A ``create`` that
failed transiently may have been applied by the server all the same (its answer lost): if a retry
then finds the name taken, the object there is compared byte for byte with the file, and if they
are equal the create succeeded. On an object store this check follows any ``FileExistsError``,
as its client may have retried the upload unseen (s3fs does): an object with the same bytes counts
as this create's.
"""

from __future__ import annotations

import filecmp
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kstate.errors import InvalidArgumentError, RemoteStorageError
from kstate.log.local_files import create_exclusively, replace_atomically

log = logging.getLogger("kstate.log.object_store")

_LOCAL_PROTOCOLS = {"file", "local"}
_T = TypeVar("_T")


def is_url(location: str) -> bool:
    """Whether a ``changelog.dir`` names a remote location (``scheme://...``)."""
    return "://" in location


@dataclass(frozen=True)
class RetryPolicy:
    """How an :class:`ObjectStore` retries a transient failure: up to ``attempts`` tries of an
    operation; before retry ``n`` (1, 2, ...) it sleeps a uniformly random time up to
    ``first_delay * 2**(n - 1)`` seconds, capped at ``max_delay`` (exponential backoff, full
    jitter)."""

    attempts: int = 6
    first_delay: float = 0.1
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.first_delay < 0 or self.max_delay < 0:
            raise InvalidArgumentError(f"a RetryPolicy needs attempts >= 1 and delays >= 0, not {self}")

    def delay(self, retry: int) -> float:
        """The sleep before retry ``retry`` (1 for the first), jitter drawn."""
        return random.uniform(0.0, min(self.max_delay, self.first_delay * 2 ** (retry - 1)))


_TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "RequestTimeout", "InternalError", "ServiceUnavailable"})
# Storage clients' exception classes (and their subclasses) for a connection that failed, broke
# or timed out, by name: kstate imports no storage client. botocore wraps aiohttp's errors in
# HTTPClientError (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ...); a
# body cut short surfaces as aiohttp's ClientPayloadError; fsspec's sync calls time out with
# FSTimeoutError.
_TRANSIENT_TYPES = frozenset(
    {
        "HTTPClientError",
        "ConnectionError",
        "IncompleteReadError",
        "IncompleteRead",  # http.client's
        "ResponseStreamingError",
        "ClientConnectionError",
        "ClientPayloadError",
        "ServerTimeoutError",
        "FSTimeoutError",
    }
)
_PERMANENT_TYPES = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, then the exceptions it was raised from or during, each once."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)


def _s3_answer(error: BaseException) -> tuple[object, object] | None:
    """``(code, HTTP status)`` of botocore's ``ClientError``; ``None`` for any other exception."""
    response = getattr(error, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        return response["Error"].get("Code"), (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return None


def is_precondition_failed(error: BaseException) -> bool:
    """Whether a storage client's failure is S3's ``412 PreconditionFailed``: for a conditional
    put, the name is taken. s3fs raises ``FileExistsError`` for it only when the answer names the
    condition (``<Condition>If-None-Match</Condition>``, as AWS and moto do); other S3 servers
    (s3s) leave it out, and s3fs raises a plain ``OSError``."""
    for link in _causes(error):
        answer = _s3_answer(link)
        if answer is not None:
            return answer[0] == "PreconditionFailed" or answer[1] == 412
    return False


def _transient_answer(code: object, status: object) -> bool:
    if isinstance(status, int) and (status >= 500 or status == 429):
        return True
    return code in _TRANSIENT_CODES or (isinstance(code, str) and code.isdigit() and _transient_answer(None, int(code)))


def is_transient(error: BaseException) -> bool:
    """Whether a storage client's failure may pass if the operation is tried again: a connection
    refused, reset or closed early, a timeout, an incomplete read, HTTP 5xx or 429, or one of
    S3's codes ``SlowDown``, ``Throttling``, ``RequestTimeout``, ``InternalError``,
    ``ServiceUnavailable``. Follows the chain of causes to the first exception that tells."""
    # s3fs raises OSErrors (EBUSY for SlowDown, EREMOTEIO for InternalError, ...) from
    # botocore's ClientError, which tells: the chain is followed to the first that does.
    for link in _causes(error):
        answer = _s3_answer(link)
        if answer is not None:
            return _transient_answer(*answer)
        status = getattr(link, "status", None)  # aiohttp's ClientResponseError
        if isinstance(status, int) and 400 <= status < 600:
            return _transient_answer(None, status)
        if isinstance(link, _PERMANENT_TYPES):
            return False
        if isinstance(link, (ConnectionError, TimeoutError)):
            return True
        if _TRANSIENT_TYPES.intersection(kind.__name__ for kind in type(link).__mro__):
            return True
    return False


@contextmanager
def _storage_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as error:  # any failure of the storage client is the storage's failure
        raise RemoteStorageError(f"{what}: {type(error).__name__}: {error}") from error


class ObjectStore:
    """The objects under ``url``, through fsspec. ``storage_options`` go to the filesystem
    (e.g. ``{"endpoint_url": ..., "key": ..., "secret": ...}`` for s3fs); ``retry`` says how
    transient failures are retried (:class:`RetryPolicy`'s defaults if not given)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, retry: RetryPolicy | None = None):
        try:
            import fsspec
        except ImportError as error:
            raise InvalidArgumentError(
                f"changelog.dir {url!r} needs fsspec (and s3fs for s3://): pip install 'kstate[remote]'"
            ) from error
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        with _storage_errors(f"opening {self.url}"):
            self._fs, root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        self._root = root.rstrip("/")
        protocols = self._fs.protocol if isinstance(self._fs.protocol, tuple) else (self._fs.protocol,)
        self._local = bool(_LOCAL_PROTOCOLS.intersection(protocols))

    def _path(self, key: str) -> str:
        return f"{self._root}/{key}"

    def _retrying(self, what: str, attempt: Callable[[int], _T], passing: tuple[type[BaseException], ...] = ()) -> _T:
        """``attempt(n)`` for n = 1, 2, ... until it returns, raises one of ``passing`` or a
        failure that is not transient (``RemoteStorageError``), or the policy's attempts are
        spent (``RemoteStorageError`` saying so)."""
        attempts = self.retry.attempts
        for n in range(1, attempts + 1):
            try:
                return attempt(n)
            except passing:
                raise
            except RemoteStorageError:  # a verdict already (of an operation within this one)
                raise
            except Exception as error:  # any failure of the storage client is the storage's failure
                failure = f"{type(error).__name__}: {error}"
                if not is_transient(error):
                    raise RemoteStorageError(f"{what}: {failure}") from error
                if n == attempts:
                    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
                    raise RemoteStorageError(f"{what}: failed {tries}, the last with {failure}") from error
                delay = self.retry.delay(n)
                log.warning("%s: attempt %d of %d failed, retrying in %.2f s: %s", what, n, attempts, delay, failure)
                time.sleep(delay)
        raise AssertionError("unreachable")  # the last attempt returned or raised

    def list(self, directory: str) -> dict[str, int]:
        """Sizes of the files in ``directory`` by name; empty if it does not exist (but an
        object store's bucket must)."""
        path = self._path(directory)

        def attempt(_: int) -> list[dict[str, Any]]:
            # Never answer from fsspec's listing cache: a thread sharing this filesystem
            # instance can refill it with a listing older than our own last create, even right
            # after we invalidate it. ``refresh`` makes s3fs/gcsfs ask the server; filesystems
            # without a cache ignore it.
            self._fs.invalidate_cache(path)
            try:
                return list(self._fs.ls(path, detail=True, refresh=True))
            except FileNotFoundError:
                if not self._local:
                    # ``info``, not ``exists``: s3fs's ``exists`` answers False for any failure.
                    bucket = self._root.split("/", 1)[0]
                    try:
                        self._fs.info(bucket)
                    except FileNotFoundError:
                        raise FileNotFoundError(f"bucket {bucket!r} does not exist") from None
                return []

        entries = self._retrying(f"listing {self.url}/{directory}", attempt)
        return {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
            for entry in entries
            if entry.get("type") != "directory"
        }

    def list_detailed(self, directory: str) -> dict[str, tuple[int, float | None]]:
        """``(size, modified)`` of the files in ``directory`` by name, ``modified`` in seconds
        since the epoch as the storage tells it (S3's ``LastModified``; a local file's later
        of modification and change time), ``None`` where it tells none."""
        path = self._path(directory)

        def attempt(_: int) -> list[dict[str, Any]]:
            self._fs.invalidate_cache(path)
            try:
                return list(self._fs.ls(path, detail=True, refresh=True))
            except FileNotFoundError:
                return []

        entries = self._retrying(f"listing {self.url}/{directory}", attempt)
        return {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]: (int(entry.get("size") or 0), _modified(entry))
            for entry in entries
            if entry.get("type") != "directory"
        }

    def fetch(self, key: str, local_path: str) -> None:
        """Downloads ``key`` to ``local_path``; ``FileNotFoundError`` if it is gone."""
        self._retrying(
            f"fetching {self.url}/{key}",
            lambda _: self._fs.get_file(self._path(key), local_path),
            passing=(FileNotFoundError,),
        )

    def create(self, key: str, local_path: str) -> None:
        """Uploads ``local_path`` as ``key`` if no object has that name (``FileExistsError``
        otherwise), atomically: readers see all of it or nothing."""

        def attempt(n: int) -> None:
            try:
                if self._local:
                    create_exclusively(self._path(key), local_path)
                else:
                    try:
                        self._fs.put_file(local_path, self._path(key), mode="create")
                    except OSError as error:
                        if isinstance(error, FileExistsError) or not is_precondition_failed(error):
                            raise
                        raise FileExistsError(f"{self.url}/{key} exists") from error
            except FileExistsError:
                # The name may be taken by this very create: an earlier attempt that failed
                # transiently, or on an object store one its client retried by itself (s3fs
                # does, after a lost answer), which no exception shows.
                if (n > 1 or not self._local) and self._holds(key, local_path):
                    log.info("creating %s/%s: an earlier attempt had created it (its answer was lost)", self.url, key)
                    return
                raise

        self._retrying(f"creating {self.url}/{key}", attempt, passing=(FileExistsError,))

    def replace(self, key: str, local_path: str) -> None:
        """Uploads ``local_path`` as ``key`` whether or not an object has that name, atomically
        (readers see the old object or the new one, whole); its modification time becomes now."""

        def attempt(_: int) -> None:
            if self._local:
                replace_atomically(self._path(key), local_path)
            else:
                self._fs.put_file(local_path, self._path(key))

        self._retrying(f"replacing {self.url}/{key}", attempt)

    def _holds(self, key: str, local_path: str) -> bool:
        """Whether ``key`` holds the bytes of ``local_path``."""
        descriptor, copy = tempfile.mkstemp(prefix=".kstate-compare-", dir=os.path.dirname(local_path) or None)
        os.close(descriptor)
        try:
            self.fetch(key, copy)
            return filecmp.cmp(copy, local_path, shallow=False)
        except FileNotFoundError:
            return False  # deleted since: not ours to claim
        finally:
            os.unlink(copy)

    def directories(self) -> list[str]:
        """Names of the directories (prefixes) at the top of this location."""

        def attempt(_: int) -> list[dict[str, Any]]:
            self._fs.invalidate_cache(self._root)
            try:
                return list(self._fs.ls(self._root, detail=True, refresh=True))
            except FileNotFoundError:
                return []

        entries = self._retrying(f"listing {self.url}", attempt)
        return [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory"]

    def delete_directory(self, directory: str) -> None:
        """Deletes every object under ``directory``; one already gone is fine."""

        def attempt(_: int) -> None:
            try:
                self._fs.rm(self._path(directory), recursive=True)
            except FileNotFoundError:
                pass
            self._fs.invalidate_cache(self._path(directory))

        self._retrying(f"deleting {self.url}/{directory}", attempt)

    def delete(self, key: str) -> None:
        """Deletes ``key``; an object already gone is fine."""

        def attempt(_: int) -> None:
            try:
                self._fs.rm_file(self._path(key))
            except FileNotFoundError:
                pass

        self._retrying(f"deleting {self.url}/{key}", attempt)

    def delete_many(self, keys: list[str]) -> None:
        """Deletes ``keys``, a thousand per request on an object store; ones already gone are fine."""
        if not keys:
            return
        paths = [self._path(key) for key in keys]

        def attempt(_: int) -> None:
            if self._local:
                for path in paths:
                    try:
                        self._fs.rm_file(path)
                    except FileNotFoundError:
                        pass
            else:
                self._fs.rm(paths)

        self._retrying(f"deleting {len(keys)} objects under {self.url}", attempt)


def _modified(entry: Mapping[str, Any]) -> float | None:
    """An fsspec listing entry's modification time in seconds since the epoch: s3fs's
    ``LastModified`` (a datetime), a local file's later of ``mtime`` and ``created`` (its change
    time, which a hard link moves); ``None`` if the filesystem tells neither."""
    modified = entry.get("LastModified")
    if modified is not None and hasattr(modified, "timestamp"):
        return float(modified.timestamp())
    times = [float(entry[name]) for name in ("mtime", "created") if isinstance(entry.get(name), (int, float))]
    return max(times) if times else None

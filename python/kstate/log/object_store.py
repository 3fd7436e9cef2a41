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
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kstate.errors import InvalidArgumentError, RemoteStorageError

_LOCAL_PROTOCOLS = {"file", "local"}


def is_url(location: str) -> bool:
    """Whether a ``changelog.dir`` names a remote location (``scheme://...``)."""
    return "://" in location


@contextmanager
def _storage_errors(what: str, passing: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    try:
        yield
    except passing:
        raise
    except Exception as error:  # any failure of the storage client is the storage's failure
        raise RemoteStorageError(f"{what}: {type(error).__name__}: {error}") from error


class ObjectStore:
    """The objects under ``url``, through fsspec. ``storage_options`` go to the filesystem
    (e.g. ``{"endpoint_url": ..., "key": ..., "secret": ...}`` for s3fs)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None):
        try:
            import fsspec
        except ImportError as error:
            raise InvalidArgumentError(
                f"changelog.dir {url!r} needs fsspec (and s3fs for s3://): pip install 'kstate[remote]'"
            ) from error
        self.url = url.rstrip("/")
        with _storage_errors(f"opening {self.url}"):
            self._fs, root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        self._root = root.rstrip("/")
        protocols = self._fs.protocol if isinstance(self._fs.protocol, tuple) else (self._fs.protocol,)
        self._local = bool(_LOCAL_PROTOCOLS.intersection(protocols))

    def _path(self, key: str) -> str:
        return f"{self._root}/{key}"

    def list(self, directory: str) -> dict[str, int]:
        """Sizes of the files in ``directory`` by name; empty if it does not exist (but an
        object store's bucket must)."""
        path = self._path(directory)
        with _storage_errors(f"listing {self.url}/{directory}"):
            # Never answer from fsspec's listing cache: a thread sharing this filesystem
            # instance can refill it with a listing older than our own last create, even right
            # after we invalidate it. ``refresh`` makes s3fs/gcsfs ask the server; filesystems
            # without a cache ignore it.
            self._fs.invalidate_cache(path)
            try:
                entries = self._fs.ls(path, detail=True, refresh=True)
            except FileNotFoundError:
                bucket = self._root.split("/", 1)[0]
                if not self._local and not self._fs.exists(bucket):
                    raise FileNotFoundError(f"bucket {bucket!r} does not exist") from None
                return {}
        return {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
            for entry in entries
            if entry.get("type") != "directory"
        }

    def fetch(self, key: str, local_path: str) -> None:
        """Downloads ``key`` to ``local_path``; ``FileNotFoundError`` if it is gone."""
        with _storage_errors(f"fetching {self.url}/{key}", passing=(FileNotFoundError,)):
            self._fs.get_file(self._path(key), local_path)

    def create(self, key: str, local_path: str) -> None:
        """Uploads ``local_path`` as ``key`` if no object has that name (``FileExistsError``
        otherwise), atomically: readers see all of it or nothing."""
        with _storage_errors(f"creating {self.url}/{key}", passing=(FileExistsError,)):
            if self._local:
                self._create_local(self._path(key), local_path)
            else:
                self._fs.put_file(local_path, self._path(key), mode="create")

    @staticmethod
    def _create_local(target: str, local_path: str) -> None:
        directory = os.path.dirname(target)
        try:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError as error:  # a file where the directory should be: not a conflict
            raise NotADirectoryError(f"{directory} is not a directory") from error
        temporary = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        try:
            shutil.copyfile(local_path, temporary)
            with open(temporary, "rb+") as file:
                os.fsync(file.fileno())
            os.link(temporary, target)  # fails with FileExistsError if the name is taken
        finally:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def directories(self) -> list[str]:
        """Names of the directories (prefixes) at the top of this location."""
        with _storage_errors(f"listing {self.url}"):
            self._fs.invalidate_cache(self._root)
            try:
                entries = self._fs.ls(self._root, detail=True, refresh=True)
            except FileNotFoundError:
                return []
        return [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory"]

    def delete_directory(self, directory: str) -> None:
        """Deletes every object under ``directory``; one already gone is fine."""
        with _storage_errors(f"deleting {self.url}/{directory}"):
            try:
                self._fs.rm(self._path(directory), recursive=True)
            except FileNotFoundError:
                pass
            self._fs.invalidate_cache(self._path(directory))

    def delete(self, key: str) -> None:
        """Deletes ``key``; an object already gone is fine."""
        with _storage_errors(f"deleting {self.url}/{key}"):
            try:
                self._fs.rm_file(self._path(key))
            except FileNotFoundError:
                pass

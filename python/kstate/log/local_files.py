"""Files of one local directory with :class:`kstate.log.object_store.ObjectStore`'s operations
(list, fetch, create exclusively, replace, delete), by plain file system calls: a ``changelog.dir`` given
as a path needs no fsspec for what is kept beside its changelog (``kstate.log.snapshots``).

``create`` is atomic and exclusive: a complete, fsynced temporary file is hard-linked to the name
(``link`` fails if the name exists), then the directory is fsynced. Files that never change
(RocksDB's table files) may be shared by hard links instead of copied (``immutable=True``), in
both directions: the name then holds the very inode the source does, which is safe only because
neither side ever writes into it.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterable

# A hard link fails across file systems and where the file system has none: copy then.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


def create_exclusively(target: str, local_path: str) -> None:
    """Makes ``target`` a durable copy of ``local_path`` if no file has that name
    (``FileExistsError`` otherwise): readers see all of it or nothing."""
    directory = make_directory(os.path.dirname(target))
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
    sync_directory(directory)


def replace_atomically(target: str, local_path: str, link: bool = False) -> None:
    """Makes ``target`` a durable copy of ``local_path`` (``link``: a hard link where possible)
    whether or not a file has that name: a temporary name is renamed over it, so readers see the
    old file or the new one, whole."""
    directory = make_directory(os.path.dirname(target))
    temporary = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
    try:
        if not (link and _linked(local_path, temporary)):
            shutil.copyfile(local_path, temporary)
            with open(temporary, "rb+") as file:
                os.fsync(file.fileno())
        os.replace(temporary, target)
    finally:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
    sync_directory(directory)


def make_directory(directory: str) -> str:
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError as error:  # a file where the directory should be: not a conflict
        raise NotADirectoryError(f"{directory} is not a directory") from error
    return directory


def sync_directory(directory: str) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class LocalFiles:
    """The files under the directory ``root``, keyed by ``/``-separated relative paths."""

    def __init__(self, root: str):
        self.url = root.rstrip("/") or "/"

    def _path(self, key: str) -> str:
        return os.path.join(self.url, *key.split("/"))

    def list(self, directory: str) -> dict[str, int]:
        """Sizes of the files in ``directory`` by name; empty if it does not exist."""
        try:
            entries = list(os.scandir(self._path(directory)))
        except FileNotFoundError:
            return {}
        return {entry.name: entry.stat().st_size for entry in entries if entry.is_file(follow_symlinks=False)}

    def list_detailed(self, directory: str) -> dict[str, tuple[int, float | None]]:
        """``(size, modified)`` of the files in ``directory`` by name, ``modified`` in seconds
        since the epoch: the later of the file's modification and change times, since linking a
        file (as ``create`` and ``replace`` publish table files) changes only the latter."""
        try:
            entries = list(os.scandir(self._path(directory)))
        except FileNotFoundError:
            return {}
        found: dict[str, tuple[int, float | None]] = {}
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    found[entry.name] = (stat.st_size, max(stat.st_mtime, stat.st_ctime))
            except FileNotFoundError:
                continue  # deleted as it was listed
        return found

    def fetch(self, key: str, local_path: str, immutable: bool = False) -> None:
        """Copies ``key`` to ``local_path`` (a hard link where ``immutable`` and possible);
        ``FileNotFoundError`` if it is gone."""
        source = self._path(key)
        if immutable and _linked(source, local_path):
            return
        shutil.copyfile(source, local_path)

    def create(self, key: str, local_path: str, immutable: bool = False) -> None:
        """Makes ``local_path`` the file ``key`` if no file has that name (``FileExistsError``
        otherwise), atomically; ``immutable``: by a hard link where possible."""
        target = self._path(key)
        if immutable:
            directory = make_directory(os.path.dirname(target))
            if _linked(local_path, target):
                sync_directory(directory)
                return
        create_exclusively(target, local_path)

    def replace(self, key: str, local_path: str, immutable: bool = False) -> None:
        """Makes ``local_path`` the file ``key`` whether or not one has that name, atomically
        (``immutable``: by a hard link where possible); its times become now."""
        replace_atomically(self._path(key), local_path, link=immutable)

    def delete(self, key: str) -> None:
        """Deletes ``key``; a file already gone is fine."""
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)


def _linked(source: str, target: str) -> bool:
    """Hard-links ``source`` as ``target``: ``True`` if done, ``False`` where links cannot be
    made (another file system); ``FileExistsError`` if ``target`` exists."""
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno in _NO_LINK:
            return False
        raise
    return True

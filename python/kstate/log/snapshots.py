"""Snapshots of a store published beside its changelog, so that a restore loads files and
replays only the changelog after them.

Layout, inside the changelog partition's own directory (a local ``changelog.dir`` or the
object-store URL, with the same storage options), so that whatever removes a changelog removes
its snapshots too:

- ``<topic>-<p>/snapshots/files/<object>``: a captured file, named by its content
  (``000012-<XXH3-128>.sst``, ``_core.SnapshotManifest``), created exclusively and never
  changed. A table file a published snapshot holds already is not copied again.
- ``<topic>-<p>/snapshots/manifests/<20-digit offset>.snapshot``: a snapshot's manifest (the
  byte format is ``rust/core/src/snapshot/manifest.rs``'): the changelog offset its files hold,
  the Spark batch when known, the store kind, every file with size and hash.

A snapshot exists once its manifest does, and the manifest is created last, exclusively, after
every file it names: a writer killed part-way leaves files no manifest names, which no restore
reads. Two writers of the snapshot at one offset captured the same state (the changelog decides
what an offset holds); the first manifest wins and the other writer's new files are left over.
A restore fetches every file of a manifest into a directory of its own and checks each file's
size and hash before the store uses any of them; a snapshot that fails is not used.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from kstate import _core
from kstate.config import SNAPSHOTS_DIRECTORY
from kstate.errors import CorruptedDataError
from kstate.log.local_files import LocalFiles
from kstate.log.object_store import ObjectStore

log = logging.getLogger("kstate.log.snapshots")

_MANIFEST_SUFFIX = ".snapshot"
_TABLE_SUFFIX = ".sst"
TRANSFER_THREADS = 8
"""Files copied at once to and from an object store (each copy waits on the network)."""


class Files(Protocol):
    """What snapshots need of where they are kept: ``ObjectStore`` (a URL, fsspec) or
    ``LocalFiles`` (a directory)."""

    url: str

    def list(self, directory: str) -> dict[str, int]: ...

    def fetch(self, key: str, local_path: str) -> None: ...

    def create(self, key: str, local_path: str) -> None: ...


def manifest_name(offset: int) -> str:
    return f"{offset:020d}{_MANIFEST_SUFFIX}"


def open_snapshots(
    changelog_dir: str, topic: str, partition: int, storage_options: Mapping[str, Any] | None = None
) -> Snapshots:
    """The snapshots of the changelog partition ``<changelog_dir>/<topic>-<partition>``:
    ``changelog_dir`` a local directory or an object-store URL (``kstate.log.remote``)."""
    files: Files
    if "://" in changelog_dir:
        files = ObjectStore(changelog_dir, storage_options)
    else:
        files = LocalFiles(changelog_dir)
    return Snapshots(files, f"{topic}-{partition}/{SNAPSHOTS_DIRECTORY}")


@dataclass(frozen=True)
class Published:
    """What :meth:`Snapshots.publish` copied: ``files_copied`` of the manifest's ``files``
    (``bytes_copied`` of ``bytes``); the rest were held by the earlier snapshot."""

    offset: int
    files: int
    bytes: int
    files_copied: int
    bytes_copied: int
    seconds: float


@dataclass(frozen=True)
class Fetched:
    """What :meth:`Snapshots.fetch` read into a directory, checked."""

    offset: int
    files: int
    bytes: int
    seconds: float


class Snapshots:
    """The snapshots kept at ``directory`` of ``files``."""

    def __init__(self, files: Files, directory: str):
        self.files = files
        self.directory = directory
        self.location = f"{files.url}/{directory}"
        self._local = isinstance(files, LocalFiles)
        # A local directory shares table files by hard links (they never change); an object
        # store copies everything.
        self._create_file: Callable[[str, str, bool], None]
        self._fetch_file: Callable[[str, str, bool], None]
        if isinstance(files, LocalFiles):
            self._create_file, self._fetch_file = files.create, files.fetch
        else:
            self._create_file = lambda key, path, _: files.create(key, path)
            self._fetch_file = lambda key, path, _: files.fetch(key, path)

    def _key(self, *parts: str) -> str:
        return "/".join((self.directory, *parts))

    def offsets(self) -> list[int]:
        """The offsets of the published snapshots, oldest first."""
        names = self.files.list(self._key("manifests"))
        offsets = []
        for name in names:
            stem = name[: -len(_MANIFEST_SUFFIX)] if name.endswith(_MANIFEST_SUFFIX) else ""
            if len(stem) == 20 and stem.isdecimal():
                offsets.append(int(stem))
        return sorted(offsets)

    def read(self, offset: int) -> Any:
        """The manifest of the snapshot at ``offset`` (a ``_core.SnapshotManifest``);
        ``CorruptedDataError`` if it is not a manifest of that offset."""
        with tempfile.TemporaryDirectory(prefix="kstate-snapshot-") as scratch:
            path = os.path.join(scratch, manifest_name(offset))
            self.files.fetch(self._key("manifests", manifest_name(offset)), path)
            with open(path, "rb") as file:
                manifest = _core.SnapshotManifest.decode(file.read())
        if manifest.offset != offset:
            raise CorruptedDataError(
                f"snapshot manifest {self.location}/manifests/{manifest_name(offset)} names offset {manifest.offset}"
            )
        return manifest

    def newest(self) -> Any | None:
        """The manifest of the newest snapshot that reads, or ``None``."""
        for offset in reversed(self.offsets()):
            try:
                return self.read(offset)
            except (CorruptedDataError, FileNotFoundError) as error:
                log.warning("Snapshots %s: the manifest at offset %d is unreadable: %s", self.location, offset, error)
        return None

    # -- publishing ------------------------------------------------------------------------------

    def publish(self, captured: str, manifest: Any, earlier: Any | None = None) -> Published | None:
        """Publishes the files captured in the directory ``captured`` as ``manifest`` says them,
        copying those neither ``earlier`` (a published manifest) holds nor the location has,
        then the manifest. Returns ``None`` when a snapshot at that offset was published already
        (by another writer: its files are the state this one holds too)."""
        started = time.monotonic()
        name = manifest_name(manifest.offset)
        if name in self.files.list(self._key("manifests")):
            return None
        new = manifest.files if earlier is None else manifest.files_not_in(earlier)
        if new:
            # Another writer (an executor the partition moved to) may have published some since
            # the earlier manifest; an object store would fetch each one to compare it.
            present = self.files.list(self._key("files"))
            new = [file for file in new if file[2] not in present]

        def copy(file: tuple[str, int, str]) -> None:
            path, _, object_name = file
            self._create(self._key("files", object_name), os.path.join(captured, path), path.endswith(_TABLE_SUFFIX))

        self._each(copy, new)
        with tempfile.TemporaryDirectory(prefix="kstate-snapshot-") as scratch:
            path = os.path.join(scratch, name)
            with open(path, "wb") as file:
                file.write(manifest.encode())
            try:
                self._create(self._key("manifests", name), path, False)
            except FileExistsError:
                return None
        return Published(
            offset=manifest.offset,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            files_copied=len(new),
            bytes_copied=sum(size for _, size, _ in new),
            seconds=time.monotonic() - started,
        )

    def _create(self, key: str, path: str, immutable: bool) -> None:
        try:
            self._create_file(key, path, immutable)
        except FileExistsError:
            if not key.startswith(self._key("files")):
                raise
            # Named by its content: the object there holds these bytes already.

    # -- restoring -------------------------------------------------------------------------------

    def fetch(self, manifest: Any, into: str, progress: Callable[[int], None] | None = None) -> Fetched:
        """Fetches every file of ``manifest`` into the new directory ``into`` and checks each
        one's size and content hash; ``CorruptedDataError`` (naming the files) if any is wrong,
        ``FileNotFoundError`` if one is gone. ``progress(bytes)`` hears each file fetched."""
        started = time.monotonic()
        os.makedirs(into)
        for directory in sorted({os.path.dirname(path) for path, _, _ in manifest.files} - {""}):
            os.makedirs(os.path.join(into, directory), exist_ok=True)

        def fetch(file: tuple[str, int, str]) -> None:
            path, size, object_name = file
            key, target = self._key("files", object_name), os.path.join(into, path)
            self._fetch_file(key, target, path.endswith(_TABLE_SUFFIX))
            if progress is not None:
                progress(size)

        self._each(fetch, manifest.files)
        wrong = manifest.verify(into)
        if wrong:
            shown = "; ".join(f"{path}: {problem}" for path, problem in wrong[:5])
            raise CorruptedDataError(
                f"snapshot at offset {manifest.offset} in {self.location}: {len(wrong)} files fail their check: {shown}"
            )
        return Fetched(manifest.offset, len(manifest.files), manifest.total_bytes, time.monotonic() - started)

    def _each(self, work: Callable[[tuple[str, int, str]], None], files: Iterable[tuple[str, int, str]]) -> None:
        """``work`` on every file: one after another on a local directory (links and local
        copies), ``TRANSFER_THREADS`` at once on an object store."""
        files = list(files)
        if self._local or len(files) < 2:
            for file in files:
                work(file)
            return
        with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="kstate-snapshot") as pool:
            for done in [pool.submit(work, file) for file in files]:
                done.result()


def remove_tree(path: str) -> None:
    """Deletes a directory left by a capture or a fetch, if there is one."""
    shutil.rmtree(path, ignore_errors=True)

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

Old snapshots and files no snapshot names are deleted by ``kstate.log.snapshot_retention``, which
deletes a file named by no kept manifest only once it is older than a delay. So a writer reuses
(does not write) only the files of its earlier manifest while that one is among the two newest,
which a collection always keeps; every other file of its snapshot it writes again, even one the
location has (a leftover of a killed upload, or of a collected snapshot), replacing it so that
its delay starts over; and once its manifest exists it checks that every file it names is
there, writing again any a collection deleted meanwhile.
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
from kstate.log import storage_process
from kstate.log.local_files import LocalFiles
from kstate.log.object_store import ObjectStore

log = logging.getLogger("kstate.log.snapshots")

_MANIFEST_SUFFIX = ".snapshot"
_TABLE_SUFFIX = ".sst"
_REWRITE_ROUNDS = 3
TRANSFER_THREADS = 8
"""Files copied at once to and from an object store (each copy waits on the network)."""


class Files(Protocol):
    """What snapshots need of where they are kept: ``ObjectStore`` (a URL, fsspec) or
    ``LocalFiles`` (a directory)."""

    url: str

    def list(self, directory: str) -> dict[str, int]: ...

    def list_detailed(self, directory: str) -> dict[str, tuple[int, float | None]]: ...

    def fetch(self, key: str, local_path: str) -> None: ...

    def create(self, key: str, local_path: str) -> None: ...

    def replace(self, key: str, local_path: str) -> None: ...

    def delete(self, key: str) -> None: ...

    def delete_many(self, keys: list[str]) -> None: ...


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
        # store copies everything, from a process of its own (kstate.log.storage_process) when
        # its storage options can be sent there.
        self._create_file: Callable[[str, str, bool], None]
        self._replace_file: Callable[[str, str, bool], None]
        self._fetch_file: Callable[[str, str, bool], None]
        if isinstance(files, LocalFiles):
            self._create_file, self._replace_file, self._fetch_file = files.create, files.replace, files.fetch
        elif isinstance(files, ObjectStore) and storage_process.can_send(files.storage_options):
            uploads = storage_process.shared()
            place = (files.url, files.storage_options, files.retry)
            self._create_file = lambda key, path, _: uploads.upload(*place, key, path, exclusive=True)
            self._replace_file = lambda key, path, _: uploads.upload(*place, key, path, exclusive=False)
            self._fetch_file = lambda key, path, _: files.fetch(key, path)
        else:
            self._create_file = lambda key, path, _: files.create(key, path)
            self._replace_file = lambda key, path, _: files.replace(key, path)
            self._fetch_file = lambda key, path, _: files.fetch(key, path)

    def key(self, *parts: str) -> str:
        """The key of ``parts`` (``"manifests"`` or ``"files"``, then a name) at the location."""
        return "/".join((self.directory, *parts))

    def offsets(self) -> list[int]:
        """The offsets of the published snapshots, oldest first."""
        return manifest_offsets(self.files.list(self.key("manifests")))

    def read(self, offset: int) -> Any:
        """The manifest of the snapshot at ``offset`` (a ``_core.SnapshotManifest``);
        ``CorruptedDataError`` if it is not a manifest of that offset."""
        with tempfile.TemporaryDirectory(prefix="kstate-snapshot-") as scratch:
            path = os.path.join(scratch, manifest_name(offset))
            self.files.fetch(self.key("manifests", manifest_name(offset)), path)
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

    def publish(
        self, captured: str, manifest: Any, earlier: Any | None = None, delete_delay: float = float("inf")
    ) -> Published | None:
        """Publishes the files captured in the directory ``captured`` as ``manifest`` says them,
        then the manifest. The files ``earlier`` (this writer's last published manifest) holds
        are not written again while it is among the two newest manifests; every other file is
        written, replacing one of its name. ``delete_delay``: how old a file no manifest names
        must be before a collection deletes it (``snapshot_retention``): files this writer wrote
        longer ago than half of it are written again before the manifest. Returns ``None`` when
        a snapshot at that offset was published already (by another writer: its files are the
        state this one holds too)."""
        started = time.monotonic()
        name = manifest_name(manifest.offset)
        listed = manifest_offsets(self.files.list(self.key("manifests")))
        if manifest.offset in listed:
            return None
        if earlier is not None and earlier.offset not in sorted([*listed, manifest.offset])[-2:]:
            # Collected, or with this one it would not be among the two newest, which every
            # collection keeps (other writers published past it): its files may go.
            log.info(
                "Snapshots %s: the earlier snapshot at offset %d is not among the two newest; writing every file",
                self.location,
                earlier.offset,
            )
            earlier = None
        new = manifest.files if earlier is None else manifest.files_not_in(earlier)
        written: dict[str, float] = {}

        def write(file: tuple[str, int, str]) -> None:
            path, _, object_name = file
            self._create(self.key("files", object_name), os.path.join(captured, path), path.endswith(_TABLE_SUFFIX))
            written[object_name] = time.monotonic()

        self._each(write, new)
        # A file written more than half the delay ago could be deleted before the manifest names
        # it: write it again (each round writes fewer; the check after the manifest is the last).
        for _ in range(_REWRITE_ROUNDS if delete_delay > 0 else 0):
            stale = [file for file in new if time.monotonic() - written[file[2]] > delete_delay / 2]
            if not stale:
                break
            log.warning(
                "Snapshots %s: rewriting %d files written over %.0f s ago, before the manifest at offset %d",
                self.location,
                len(stale),
                delete_delay / 2,
                manifest.offset,
            )
            self._each(write, stale)
        with tempfile.TemporaryDirectory(prefix="kstate-snapshot-") as scratch:
            path = os.path.join(scratch, name)
            with open(path, "wb") as file:
                file.write(manifest.encode())
            try:
                self._create(self.key("manifests", name), path, False)
            except FileExistsError:
                return None
        missing = self.missing(manifest)
        if missing:
            # A collection deleted them since this writer looked (the earlier manifest collected
            # meanwhile): the manifest names them, so written now they stay.
            log.warning(
                "Snapshots %s: %d files of the snapshot at offset %d were deleted while it was published; "
                "writing them again",
                self.location,
                len(missing),
                manifest.offset,
            )
            self._each(write, missing)
        return Published(
            offset=manifest.offset,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            files_copied=len(new),
            bytes_copied=sum(size for _, size, _ in new),
            seconds=time.monotonic() - started,
        )

    def _create(self, key: str, path: str, immutable: bool) -> None:
        """Writes ``key``: a manifest exclusively (``FileExistsError`` if one has its name), a
        file replacing whatever has its name (named by content, it holds the same bytes), so
        that its modification time, which a collection's delay counts from, is now."""
        if key.startswith(self.key("files")):
            self._replace_file(key, path, immutable)
        else:
            self._create_file(key, path, immutable)

    def missing(self, manifest: Any, listed: Mapping[str, Any] | None = None) -> list[tuple[str, int, str]]:
        """The files of ``manifest`` the location lacks or holds with another size, by one
        listing (``listed``: a listing of the files directory already made, name -> size or
        ``(size, modified)``)."""
        if listed is None:
            listed = self.files.list(self.key("files"))
        sizes = {name: value[0] if isinstance(value, tuple) else value for name, value in listed.items()}
        return [file for file in manifest.files if sizes.get(file[2]) != file[1]]

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
            key, target = self.key("files", object_name), os.path.join(into, path)
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


def manifest_offsets(names: Iterable[str]) -> list[int]:
    """The offsets of the manifests among file names of the manifests directory, oldest first."""
    offsets = []
    for name in names:
        stem = name[: -len(_MANIFEST_SUFFIX)] if name.endswith(_MANIFEST_SUFFIX) else ""
        if len(stem) == 20 and stem.isdecimal():
            offsets.append(int(stem))
    return sorted(offsets)


def remove_tree(path: str) -> None:
    """Deletes a directory left by a capture or a fetch, if there is one."""
    shutil.rmtree(path, ignore_errors=True)

"""A writable store's life, the same for key-value, window and session stores: opening under a
task directory, the changelog that backs it (local or on an object store), committing through
that changelog, recovering, closing.

A subclass opens its native store in ``_open_local_state`` and names its local files in
``_local_paths``; everything else here works on ``_reader``, the native store.

Paths are strings here, in ``pathlib``'s normal form (``posix_path``): a store's first use loads
no ``pathlib`` (with ``urllib.parse`` and ``ipaddress``); ``task_dir`` makes a ``Path`` when asked.
"""

from __future__ import annotations

import os
import time

from kstate.config import (
    MIN_DELTA_BYTES_FOR_SNAPSHOT,
    MIN_DELTAS_FOR_SNAPSHOT,
    SNAPSHOTS_DIRECTORY,
    ChangelogConfig,
    StoreConfig,
)
from kstate.errors import (
    ChangelogTruncatedError,
    CorruptedDataError,
    InvalidArgumentError,
    RemoteStorageError,
    StoreBehindChangelogError,
    StoreClosedError,
)
from kstate.lazy_logger import LazyLogger
from kstate.memory import disk_bytes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Callable, TypeVar

    from kstate.log.remote import CompactionReport, RemoteChangelog
    from kstate.log.snapshot_writer import SnapshotWriter
    from kstate.log.snapshots import Published, Snapshots

    _Store = TypeVar("_Store", bound="StoreLifecycle")

log = LazyLogger("kstate.store")

CACHE_SEGMENT_BYTES = 1 << 20
"""Segment size of a remote changelog's local cache."""


def task_partition(name: str) -> int | None:
    """The partition a task directory's name gives, ``<subtopology>_<partition>`` (digits each),
    or ``None`` for another name."""
    subtopology, underscore, partition = name.partition("_")
    if underscore and subtopology.isdecimal() and partition.isdecimal():
        return int(partition)
    return None


class Unopened:
    """Stands in for the native store before ``init``: every use raises ``StoreClosedError``."""

    is_open = False

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise StoreClosedError(f"store {self._name} is not initialized; call init(task_dir) first")


def native_store(store: StoreLifecycle) -> Any:
    """The store's native ``_core`` handle, for the layers of kstate that drive a store below its
    Kafka Streams interface (read-only views, kstate.spark's exactly-once protocol and state
    variables); its calls raise ``StoreClosedError`` before ``init``."""
    return store._reader


class StoreLifecycle:
    """Opening, the changelog, transactions and closing, shared by every writable store."""

    name: str
    _reader: Any
    _key_serde: Any
    _value_serde: Any
    _supplier: Any
    _config: StoreConfig
    _logging: ChangelogConfig | None
    _remote: RemoteChangelog | None
    _task_dir: str | None
    restore_until: int | None = None
    """With a remote changelog, restore only commits starting at or before this offset."""
    _snapshots: Snapshots | None = None
    _opening_snapshot = False
    """While the local state opens on a snapshot's files: they were captured from an open store,
    so with ``"changelog"`` durability they say it was not closed cleanly, which tells nothing."""
    _snapshot_writer: SnapshotWriter | None = None
    _compaction: Any = None
    """The remote changelog's compaction running in the background (a ``threading.Thread``)."""
    _changelog_bytes_seen = 0
    keep_history_from: int | None = None
    """kstate.spark: the lowest changelog offset its batch log may still need (the last offset
    of the state before the oldest batch it can roll back); history from it on is never deleted
    below a snapshot. ``None``: no bound beyond the snapshots (a store outside kstate.spark)."""
    _history_start: int | None = None
    """Where the snapshot collector found the local changelog may start; applied after the next
    commit, on the committing thread (the native store is not called from the writer's)."""

    # -- what subclasses provide -----------------------------------------------------------------

    def _open_local_state(self) -> None:
        """Opens the native store into ``_reader`` (under ``task_dir`` when persistent)."""
        raise NotImplementedError

    def _local_paths(self) -> list[str]:
        """Every file and directory of the store's local state, to wipe it."""
        raise NotImplementedError

    def _snapshot_target(self) -> tuple[str, str] | None:
        """``(kind, directory)`` of a store whose files snapshots hold (``kstate.log.snapshots``):
        the manifest's store kind and the directory of those files; ``None``: no snapshots."""
        return None

    def _check_snapshot(self, fetched: str, manifest: Any) -> None:
        """Raises ``CorruptedDataError`` when the snapshot ``manifest`` whose files are fetched
        (and checked) at ``fetched`` cannot be this store's local state; nothing replaced it yet."""

    def _install_snapshot(self, manifest: Any) -> None:
        """Writes what the store keeps beside the snapshot's files, once they are in place and
        before the store opens on them."""

    # -- opening ---------------------------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        return self._supplier.persistent

    @property
    def task_dir(self) -> Path | None:
        """The task directory ``init`` opened the store under (``None`` before)."""
        if self._task_dir is None:
            return None
        from pathlib import Path  # the store itself needs the string alone

        return Path(self._task_dir)

    @property
    def changelog_config(self) -> ChangelogConfig | None:
        """The store's changelog settings (``None``: not logged)."""
        return self._logging

    @property
    def key_serde(self) -> Any:
        """The serde of the store's keys."""
        return self._key_serde

    @property
    def value_serde(self) -> Any:
        """The serde of the store's values."""
        return self._value_serde

    @property
    def transactional(self) -> bool:
        """Whether writes are staged until ``commit`` (KIP-892)."""
        return self._supplier.transactional and self._config.transactional

    @property
    def is_open(self) -> bool:
        return self._reader.is_open

    @property
    def logged(self) -> bool:
        """Whether a changelog backs the store (``StoreBuilder.with_logging_enabled``)."""
        return self._logging is not None

    def _open(self, task_dir: str | Path, partition: int | None, application_id: str | None) -> None:
        """``init``'s work: names the store's changelog partition (``<application.id>-<name>-
        changelog``, partition ``partition``; both default from the task directory's path),
        opens the local state, then the changelog, restoring whatever the store lacks."""
        if self._reader.is_open:
            raise InvalidArgumentError(f"store {self.name} is already open")
        directory = posix_path(task_dir)
        if partition is None:
            partition = task_partition(os.path.basename(directory)) or 0
        app = (
            application_id
            or self._config.application_id
            or os.path.basename(os.path.dirname(os.path.realpath(directory)))
            or "kstate"
        )
        self.changelog_topic = f"{app}-{self.name}-changelog"
        self.partition = partition
        self._offset_key = f"{self.changelog_topic}-{partition}"
        self._task_dir = directory
        self._remote = None
        if self._logging is not None and self._logging.snapshots and self._snapshot_target() is None:
            raise InvalidArgumentError(
                f"store {self.name}: {MIN_DELTAS_FOR_SNAPSHOT} / {MIN_DELTA_BYTES_FOR_SNAPSHOT} need a persistent "
                "transactional store (key-value, window or session)"
            )
        self._open_local_state()
        if self._logging is None:
            return
        self._locate_changelog(directory)
        try:
            self.attach_changelog()
            self._load_newer_snapshot()
            self.restored_records = self._catch_up("restoring", lambda progress: self._reader.restore(progress))
        except BaseException:
            self._reader.close()
            raise

    def _locate_changelog(self, task_dir: str) -> None:
        assert self._logging is not None
        state_dir = os.path.dirname(os.path.dirname(os.path.realpath(task_dir)))
        if self._logging.remote:
            # The object-store side (fsspec, HTTP, TLS) loads only for a store that uses it.
            from kstate.log.remote import RemoteChangelog

            # The remote log is the truth; the local partition directory caches it.
            self._remote = RemoteChangelog(
                self._logging.changelog_dir, self.changelog_topic, self.partition, self._logging.storage_options
            )
            log_dir = os.path.join(state_dir, "changelog-cache")
        else:
            log_dir = self._logging.changelog_dir or os.path.join(state_dir, "changelog")
        partition_dir = f"{self.changelog_topic}-{self.partition}"
        self._changelog_dir = posix_path(os.path.join(log_dir, partition_dir))
        self._fetch_path = posix_path(os.path.join(log_dir, f"{partition_dir}.fetching.log"))
        self._snapshots = None
        self._snapshot_writer = None

    def _cache_config(self) -> dict[str, str]:
        """The topic config for the local cache of a remote changelog: segments of at most
        ``CACHE_SEGMENT_BYTES``, so that the segments a commit leaves behind its committed
        offset are dropped (with Kafka's 1 GiB segments the cache's one segment held everything
        the store ever committed); the remote objects keep the topic's own ``segment.bytes``."""
        assert self._logging is not None
        config = {str(k): str(v) for k, v in self._logging.topic_config.items()}
        config["segment.bytes"] = str(min(int(config.get("segment.bytes", CACHE_SEGMENT_BYTES)), CACHE_SEGMENT_BYTES))
        return config

    def attach_changelog(self) -> None:
        """Opens the changelog of the open store again (``init`` does it; kstate.spark after
        ``detach_changelog``), logging a torn tail it cut or unpublished records it dropped."""
        assert self._logging is not None and self._task_dir is not None
        partition_dir = self._changelog_dir
        found = self._reader.attach_changelog(
            partition_dir,
            self._cache_config() if self._remote is not None else self._logging.topic_config,
            self.changelog_topic,
            self.partition,
            self._supplier.timestamped,
            os.path.join(self._task_dir, ".checkpoint") if self.persistent else None,
            None if self._remote is None else self._remote.publish,
        )
        self._changelog_bytes_seen = 0  # a changelog attached counts its appended bytes from 0
        if found["truncated_tail"] is not None:
            removed, problem = found["truncated_tail"]
            log.warning("Changelog %s: cut a torn tail of %d bytes (%s)", partition_dir, removed, problem)
        if found["unpublished_records_dropped"]:
            log.info(
                "Changelog %s: dropped %d records of a commit that never published",
                partition_dir,
                found["unpublished_records_dropped"],
            )

    def detach_changelog(self) -> None:
        """Closes the changelog while the store stays open (kstate.spark's parked stores: the
        changelog directory is shared by every executor, the store is this one's)."""
        if self._logging is not None:
            self._log_cleaned("compaction finished at the close", self._reader.detach_changelog())

    def _catch_up(self, what: str, replay: Callable[[RestoreProgress], Any]) -> Any:
        """Fetches what a remote changelog has beyond the local cache, then runs ``replay``
        (the native restore or recover); logs a restore that did work."""
        started = time.monotonic()
        if self._remote is not None and self.restore_until is not None:
            # The local cache may hold this executor's publication of a commit that was never
            # recorded (and another attempt's object may now stand at those offsets): it is
            # trusted up to what the store committed, which only recorded commits reach.
            self._reader.retract_changelog_to(self._reader.committed_offset())
        if self._remote is not None:
            from kstate.log.remote import StoreBehindCompaction

            try:
                self._remote.sync(self._reader, self._fetch_path, self.restore_until)
            except (StoreBehindCompaction, ChangelogTruncatedError) as behind:
                if isinstance(behind, ChangelogTruncatedError) and self._reader.committed_offset() is None:
                    raise  # no local state, and no snapshot could be loaded
                self._restart_from_snapshot(str(behind))
                self._remote.sync(self._reader, self._fetch_path, self.restore_until)
        with RestoreProgress(f"{what} {self.name}") as progress:
            try:
                result = replay(progress)
            except StoreBehindChangelogError as behind:
                self._restart_from_snapshot(str(behind))
                result = replay(progress)
        if progress.done:
            seconds = time.monotonic() - started
            log.info(
                "Store %s: restored %d records from %s in %.2f s (%.0f records/s)",
                self.name,
                progress.done,
                self._remote.location if self._remote is not None else "its changelog",
                seconds,
                progress.done / max(seconds, 1e-9),
            )
        return result

    # -- snapshots -------------------------------------------------------------------------------

    def _snapshot_location(self) -> Snapshots | None:
        """The snapshots beside the changelog (``kstate.log.snapshots``), for a store whose files
        snapshots hold; ``None`` for other stores."""
        if self._snapshots is None and self._logging is not None and self._snapshot_target() is not None:
            from kstate.log.snapshots import open_snapshots

            remote = self._logging.changelog_dir if self._remote is not None else None
            self._snapshots = open_snapshots(
                remote or os.path.dirname(self._changelog_dir),
                self.changelog_topic,
                self.partition,
                self._logging.storage_options,
            )
        return self._snapshots

    def _may_have_snapshots(self) -> bool:
        """Whether a restore looks for snapshots: a store that takes them, or one whose local
        changelog directory has them (a look at the directory alone, so a store without
        snapshots loads nothing of ``kstate.log``). A store with its changelog on an object
        store lists them only when it takes them too: a listing costs a request per open."""
        assert self._logging is not None
        return self._logging.snapshots or (
            self._remote is None and os.path.isdir(os.path.join(self._changelog_dir, SNAPSHOTS_DIRECTORY))
        )

    def _load_newer_snapshot(self) -> None:
        """Replaces the local state with the newest snapshot beside the changelog when the local
        state is older (or absent), so the changelog replays only what follows the snapshot.
        A snapshot that cannot be used (unreadable, a file missing or failing its check) is
        logged and the next older one tried; with none the changelog restores everything. The
        local state is replaced only by a snapshot fetched and checked in full."""
        target = self._snapshot_target()
        if target is None or not self._may_have_snapshots():
            return
        snapshots = self._snapshot_location()
        assert snapshots is not None
        from kstate.log.snapshots import remove_tree

        kind, directory = target
        local = self._reader.committed_offset()
        # A local changelog says how far its history goes; kstate.spark bounds a remote one by
        # what its batch log recorded.
        if self._remote is not None:
            bound = self.restore_until
        else:
            published = self._reader.changelog_range()[1]
            bound = -1 if published is None else published
        newer = [
            offset
            for offset in snapshots.offsets()
            if offset > (-1 if local is None else local) and (bound is None or offset <= bound)
        ]
        tries = newer[::-1][:SNAPSHOT_ATTEMPTS]
        restoring = os.path.join(os.path.dirname(directory), f".{self.name}.restoring")
        for attempt, offset in enumerate(tries, 1):
            remove_tree(restoring)
            try:
                manifest = snapshots.read(offset)
                if manifest.kind != kind:
                    raise CorruptedDataError(f"it holds a {manifest.kind} store, not a {kind} store")
                with BytesProgress(f"loading snapshot of {self.name}", manifest.total_bytes) as progress:
                    fetched = snapshots.fetch(manifest, restoring, progress)
                self._check_snapshot(restoring, manifest)
            except (CorruptedDataError, RemoteStorageError, OSError) as error:
                remove_tree(restoring)
                log.warning(
                    "Store %s: the snapshot at offset %d in %s cannot be used (%s: %s); %s",
                    self.name,
                    offset,
                    snapshots.location,
                    type(error).__name__,
                    error,
                    f"trying the one at offset {tries[attempt]}" if attempt < len(tries) else "restoring the changelog",
                )
                continue
            self._replace_local_state(restoring, directory, manifest)
            loaded = self._reader.committed_offset()
            if loaded != offset:
                self._restart_empty(f"the snapshot at offset {offset} opened at offset {loaded}")
                return
            log.info(
                "Store %s: loaded the snapshot at offset %d%s from %s: %d files, %.1f MiB in %.2f s (%.0f MiB/s); "
                "the changelog replays from offset %d",
                self.name,
                offset,
                "" if manifest.batch_id is None else f" (batch {manifest.batch_id})",
                snapshots.location,
                fetched.files,
                fetched.bytes / 2**20,
                fetched.seconds,
                fetched.bytes / 2**20 / max(fetched.seconds, 1e-9),
                offset + 1,
            )
            return

    def _replace_local_state(self, fetched: str, directory: str, manifest: Any) -> None:
        """Closes the store, replaces its local state with the files of snapshot ``manifest`` in
        ``fetched`` (moved to ``directory``) and opens it on them, with its changelog."""
        self.detach_changelog()
        self._reader.close()
        self.wipe_local_state()
        os.rename(fetched, directory)
        self._install_snapshot(manifest)
        self._opening_snapshot = True
        try:
            self._open_local_state()
        finally:
            self._opening_snapshot = False
        self.attach_changelog()

    def _writer(self) -> SnapshotWriter | None:
        """The store's snapshot writer, made on first use; ``None`` for a store without
        snapshots."""
        target, snapshots = self._snapshot_target(), self._snapshot_location()
        if self._snapshot_writer is None and target is not None and snapshots is not None:
            assert self._logging is not None
            from kstate.log.snapshot_writer import SnapshotWriter

            kind, directory = target
            self._snapshot_writer = SnapshotWriter(
                self.name,
                snapshots,
                os.path.join(os.path.dirname(directory), f".{self.name}.snapshot"),
                kind,
                self._logging.min_deltas_for_snapshot,
                self._logging.min_delta_bytes_for_snapshot,
                self._logging.min_batches_to_retain,
                self._history_collected,
            )
        return self._snapshot_writer

    def note_commit(self, batch_id: int | None = None) -> None:
        """Counts a commit towards the next snapshot and starts one in the background when due
        (``minDeltasForSnapshot``, ``minDeltaBytesForSnapshot``). ``commit`` calls it; a caller
        committing through ``publish`` / ``commit_published`` (kstate.spark) calls it after,
        with the micro-batch the commit belongs to."""
        if self._logging is None or not self._logging.snapshots:
            return
        writer = self._writer()
        if writer is None:
            return
        appended = self._reader.changelog_appended_bytes()
        grown, self._changelog_bytes_seen = appended - self._changelog_bytes_seen, appended
        writer.committed(self._reader, grown, batch_id)

    def snapshot(self, batch_id: int | None = None) -> Published | None:
        """Publish a snapshot of the committed state beside the changelog now (after one running
        in the background); returns what it copied, or ``None`` when nothing is committed or the
        newest snapshot holds this offset already. Persistent transactional stores (key-value,
        window, session) with a changelog; with ``minDeltasForSnapshot`` or
        ``minDeltaBytesForSnapshot`` set, commits take snapshots by themselves."""
        writer = self._writer() if self._reader.is_open else None
        if writer is None:
            raise InvalidArgumentError(
                f"store {self.name} takes no snapshots: only open persistent transactional stores with a changelog do"
            )
        return writer.take(self._reader, batch_id)

    def _restart_from_snapshot(self, why: str) -> None:
        """Wipes local state the changelog can no longer bring up to date and starts again from
        the newest usable snapshot, if any (the changelog's history may have been deleted below
        it: restoring without one then raises ``ChangelogTruncatedError``)."""
        self._restart_empty(why)
        self._load_newer_snapshot()

    def _history_collected(self, start: int) -> None:
        """The snapshot writer's thread found that the changelog may start at ``start`` (the
        oldest kept snapshot is whole): bounded by ``keep_history_from``, a remote changelog's
        objects below it are deleted now, a local changelog's history after the next commit."""
        if self.keep_history_from is not None:
            start = min(start, self.keep_history_from)
        if start <= 0:
            return
        if self._remote is not None:
            deleted = self._remote.delete_before(start)
            if deleted:
                log.info(
                    "Changelog %s: deleted %d objects below offset %d, which snapshots hold",
                    self._remote.location,
                    len(deleted),
                    start,
                )
        else:
            self._history_start = start

    def _delete_collected_history(self) -> None:
        """Deletes the local changelog's history the snapshot collector found snapshots hold,
        never past the store's own committed offset."""
        start, self._history_start = self._history_start, None
        committed = self._reader.committed_offset()
        if start is None or committed is None:
            return
        segments, deleted_bytes, log_start = self._reader.delete_changelog_before(min(start, committed + 1), now_ms())
        if segments:
            log.info(
                "Changelog %s: deleted %d segments (%d bytes) below offset %d, which snapshots hold",
                self._changelog_dir,
                segments,
                deleted_bytes,
                log_start,
            )

    def _restart_empty(self, why: str) -> None:
        """Wipes the local state and reopens it empty, to be restored from scratch (Kafka
        Streams wipes a store whose changelog offset is no longer usable the same way)."""
        log.warning("Store %s: %s; wiping its local state to restore it from scratch", self.name, why)
        self._reader.close()
        self.wipe_local_state()
        self._open_local_state()
        self.attach_changelog()

    def wipe_local_state(self) -> None:
        """Deletes the closed store's files under its task directory (a logged store restores
        them from its changelog on the next ``init``)."""
        if self._reader.is_open:
            raise InvalidArgumentError(f"store {self.name} is open; close it before wiping its local state")
        if self._task_dir is None or not self.persistent:
            return
        import shutil

        for path in self._local_paths():
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass

    # -- transactions ----------------------------------------------------------------------------

    def commit(
        self,
        changelog_offset: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        on_stage: Callable[[str], None] | None = None,
    ) -> int | None:
        """Apply every uncommitted write and record the changelog offset, atomically; returns
        that offset.

        A logged store publishes the writes to its changelog first and takes the offset from it
        (pass none); ``on_stage(name)`` hears ``"published"``, ``"store-committed"`` and
        ``"checkpointed"`` as the commit passes them (a remote changelog's ``"uploaded"``
        first). With a remote changelog another writer may have published at the same offset
        first: ``CommitConflictError``, after which ``recover()`` catches up. An unlogged store
        records ``changelog_offset`` (``None`` for stores without any changelog). A long commit
        reports ``progress(writes_applied, writes_total)`` and logs as it goes.
        """
        if changelog_offset is not None and (
            isinstance(changelog_offset, bool) or not isinstance(changelog_offset, int)
        ):
            raise InvalidArgumentError(f"changelog_offset must be an int or None, got {changelog_offset!r}")
        if changelog_offset is not None and changelog_offset < 0:
            raise InvalidArgumentError(f"changelog_offset must be >= 0 or None, got {changelog_offset}")
        if changelog_offset is not None and self.logged:
            raise InvalidArgumentError(
                f"store {self.name} is logged: its changelog assigns offsets, so commit() takes none"
            )
        progress = progress or progress_logger(f"committing {self.name}")
        committed = self._reader.commit(changelog_offset, now_ms(), progress, on_stage)
        self.note_commit()
        self.clean_changelog()
        return committed

    def clean_changelog(self) -> None:
        """Runs the changelog's cleaner (retention; compaction once
        ``min.cleanable.dirty.ratio`` of it was written since the last one) and logs what it did;
        a remote changelog is compacted by the same rule (``RemoteChangelog.wants_compaction``),
        as Kafka's brokers compact a changelog topic, so it stays bounded by the state it holds.
        A remote compaction runs on a thread of its own (it reads, merges and rewrites the log:
        seconds to minutes that no commit waits for; compaction is safe while writers commit);
        one that fails is logged and left to a later commit."""
        if self._logging is None:
            return
        if self._history_start is not None:
            self._delete_collected_history()
        self._log_cleaned("cleaned", self._reader.clean_changelog(now_ms()))
        if self._remote is not None and self._remote.wants_compaction(self._logging.topic_config):
            self._compact_in_background()

    def _log_cleaned(self, what: str, cleaned: dict[str, int] | None) -> None:
        """Logs what the changelog's cleaner did (``None``: nothing)."""
        if cleaned:
            log.info(
                "Changelog %s: %s (%s)",
                self._changelog_dir,
                what,
                ", ".join(f"{name.replace('_', ' ')} {value:,}" for name, value in cleaned.items()),
            )

    def _compact_in_background(self) -> None:
        """Starts compacting the remote changelog on a thread, unless a compaction runs. The
        thread has the storage process (``kstate.log.storage_process``) compact when the storage
        options can be sent there, so that the compaction's reads and writes do not share this
        process's GIL with its commits."""
        import threading

        from kstate.log import storage_process
        from kstate.log.remote import KEEP_NEWEST_COMMITS, MIN_OBJECTS_TO_MERGE

        assert self._remote is not None and self._logging is not None
        if self._compaction is not None and self._compaction.is_alive():
            return
        remote, config, work_dir = self._remote, self._logging.topic_config, os.path.dirname(self._fetch_path)
        location = remote.location

        def compact() -> None:
            try:
                if storage_process.can_send(remote.store.storage_options):
                    where = (remote.store.url, remote.store.storage_options, remote.topic, remote.partition)
                    storage_process.shared().compact(
                        *where, config, MIN_OBJECTS_TO_MERGE, work_dir, KEEP_NEWEST_COMMITS
                    )
                else:
                    self.compact_changelog(keep_newest=KEEP_NEWEST_COMMITS)
            except Exception as error:  # logged: the log stays as it was, a later commit tries again
                log.warning(
                    "Changelog %s: compaction failed, a later commit tries again: %s: %s",
                    location,
                    type(error).__name__,
                    error,
                )

        self._compaction = threading.Thread(target=compact, name=f"kstate-compaction-{self.name}", daemon=True)
        self._compaction.start()

    def wait_for_compaction(self) -> None:
        """Waits for the remote changelog's compaction running in the background, if any."""
        if self._compaction is not None:
            self._compaction.join()

    def flush(self) -> None:
        """Kafka's ``flush``: for a transactional store, a commit (at the current offset when
        the store is not logged)."""
        self.commit(None if self.logged else self.committed_offset())

    def recover(self, changelog_offset: int | None = None) -> bool:
        """Discard uncommitted writes. A logged store then replays what its changelog holds
        beyond it (a remote one: what any writer published) and returns ``True``. An unlogged
        store returns whether its committed state is at ``changelog_offset`` or later
        (``False``: restore it from its changelog).

        A store that holds part of what a compaction of its remote changelog replaced is wiped
        and restored from scratch; read-only views opened before then are closed."""
        if self._logging is None:
            return self._reader.recover(changelog_offset, None)
        return self._catch_up("recovering", lambda progress: self._reader.recover(changelog_offset, progress))

    def compact_changelog(self, min_objects: int = 2, keep_newest: int = 1) -> CompactionReport:
        """Compact the store's remote changelog (``kstate.log.remote``): every object but the
        ``keep_newest`` newest merges into few, keeping the latest record per key. Safe while
        this or other writers commit; restoring afterwards gives the same state."""
        if self._remote is None or self._logging is None:
            raise InvalidArgumentError(f"store {self.name} has no remote changelog (changelog.dir as a URL)")
        return self._remote.compact(
            self._logging.topic_config,
            min_objects=min_objects,
            work_dir=os.path.dirname(self._fetch_path),
            keep_newest=keep_newest,
        )

    def committed_offset(self) -> int | None:
        """The changelog offset of the last commit, or ``None``."""
        return self._reader.committed_offset()

    @property
    def uncommitted_bytes(self) -> int:
        """Bytes of staged writes held in memory (spilled writes not included)."""
        return self._reader.uncommitted()[0]

    def metrics(self) -> dict[str, int]:
        """The store's memory and disk, in bytes: ``memtables`` and ``table_readers`` (RocksDB),
        ``staged`` (uncommitted writes in memory), ``read_cache``, ``sst_bytes`` / ``sst_files``
        (its tables), ``disk_bytes`` (every file of its local state). Window and session stores
        add up their segments. The process's budget: ``kstate.memory.memory_usage()``."""
        metrics: dict[str, int] = dict(self._reader.memory())
        metrics["disk_bytes"] = disk_bytes(self._local_paths()) if self.persistent else 0
        return metrics

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store. Uncommitted writes are discarded (commit first to keep them)."""
        if not self._reader.is_open:
            return
        if self._snapshot_writer is not None:
            # A snapshot captured before the close is published before the store goes.
            self._snapshot_writer.wait()
        self.wait_for_compaction()  # its scratch files are under the store's local directory
        if self.transactional:
            staged, spilled = self._reader.uncommitted()
            if staged or spilled:
                log.warning("closing store %s discards its uncommitted writes", self.name)
        closed = self._reader.close()
        if self._logging is not None:
            self._log_cleaned("compaction finished at the close", closed)

    def __enter__(self: _Store) -> _Store:
        if not self.is_open:
            raise StoreClosedError(f"store {self.name} is not open; call init(task_dir) first")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<{type(self).__name__} {self.name!r} {state} transactional={self.transactional}>"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def posix_path(path: str | os.PathLike[str]) -> str:
    """``str(pathlib.Path(path))`` on POSIX, without ``pathlib``: empty and ``.`` parts and
    trailing slashes dropped, ``//`` at the start kept, ``..`` kept. Not a ``str`` (or an
    ``os.PathLike`` of one): ``TypeError``, as from ``Path``."""
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"argument should be a str object or an os.PathLike object returning str, not {type(text)!r}")
    root = "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    return root + "/".join(part for part in text.split("/") if part and part != ".") or "."


SNAPSHOT_ATTEMPTS = 3
"""Snapshots a restore tries, newest first, before it replays the whole changelog."""


class BytesProgress:
    """A ``progress(bytes)`` callback drawing a tqdm bar of bytes (on a terminal; quiet
    elsewhere)."""

    def __init__(self, what: str, total: int):
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=what, unit="B", unit_scale=True, disable=None)

    def __call__(self, done: int) -> None:
        self._bar.update(done)

    def __enter__(self) -> BytesProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


class RestoreProgress:
    """A ``progress(done, total)`` callback drawing a tqdm bar with records/s (shown on a
    terminal; tqdm stays quiet elsewhere) once a restore turns out to take a while."""

    def __init__(self, what: str):
        self._what = what
        self._bar: Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        self.done = done
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=self._what, unit=" records", unit_scale=True, disable=None)
        self._bar.total = max(self._bar.total or 0, total)
        self._bar.update(done - self._bar.n)

    def __enter__(self) -> RestoreProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def progress_logger(what: str) -> Callable[[int, int], None]:
    """A progress callback that logs every 10% of a long operation."""
    reported = [-1]

    def report(done: int, total: int) -> None:
        decile = (10 * done) // max(total, 1)
        if decile != reported[0]:
            reported[0] = decile
            log.info("%s: %d of %d writes applied", what, done, total)

    return report

"""Exactly-once per micro-batch for the stores of one partition.

One task attempt of partition ``p`` in micro-batch ``N``:

1. Notes the head of the partition's batch log (a hint), then takes the task directory's lock
   (two Python workers of one executor never open the same stores) and the partition's
   publication lock (one attempt at a time touches the changelogs and the batch log).
2. If the head moved while it waited and now names batch ``N`` or later, another attempt of
   this batch published first: it gives up (``BatchConflictError``), having written nothing.
3. Retracts changelog records past the head's offsets (a batch that crashed after publishing
   its changelogs but before its batch log entry), then opens the stores, which restore from
   their changelogs whatever the local state lacks (missing, stale, or a batch that published
   but never reached RocksDB).
4. If the head is batch ``N`` or later, Spark is replaying ``N`` (a restart, or a retry after an
   attempt died once it had published): each such batch is rolled back with its undo file, as a
   normal commit of the previous values, recorded as an entry restating the batch before.
5. Runs the user's function, then commits: undo files, changelogs published, the batch log
   entry (the publication point), then each store's RocksDB commit at its published offset.
   The stores stay open for this process's next task of the partition (``kstate.spark.protocol.idle``),
   which uses them as they are if nobody else held the publication lock in between.

Offsets a batch log entry covers are never rewritten (rollbacks append), so a local store at any
published offset is a prefix of the history and restoring forward is always right.

With the changelogs on an object store there is no publication lock: exclusive creates decide.
Step 2 does not apply (a concurrent attempt is rolled back and redone like a replay); in step 3
commit objects past the head are first made unrecordable (the attempt takes the next batch log
position with a copy of the head) and then deleted, and stores restore only up to the head's
offsets; a publication conflict in step 5 is a ``BatchConflictError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.config import (
    CHANGELOG_DIR,
    CHANGELOG_STORAGE_OPTIONS,
    MIN_DELTA_BYTES_FOR_SNAPSHOT,
    MIN_DELTAS_FOR_SNAPSHOT,
    ChangelogConfig,
    StoreConfig,
)
from kstate.errors import (
    BatchConflictError,
    CommitConflictError,
    InvalidArgumentError,
    ProcessorStateError,
    StoreCorruptedError,
)
from kstate.key_value_store import KeyValueStore
from kstate.log.remote import RemoteChangelog
from kstate.spark.protocol.batch_log import EMPTY_STATE, BatchEntry, BatchLog, RemoteBatchLog, peek_head
from kstate.spark.protocol.idle import IDLE, RELEASE_REQUEST, Parked, ask_to_release, release
from kstate.spark.protocol.locking import FileLock, NoLock
from kstate.spark.protocol.progress import Timings
from kstate.spark.protocol.row_counts import RowCounts
from kstate.spark.protocol.task import TaskInfo
from kstate.spark.protocol.undo import RemoteUndoFiles, UndoFiles, previous_values
from kstate.spark.protocol.upgrade import InPlaceUpgrade
from kstate.store_lifecycle import StoreLifecycle, native_store, now_ms
from kstate.stores import StoreBuilder

log = logging.getLogger("kstate.spark")


TASK_LOCK = ".kstate-task.lock"
CHANGELOG_SEGMENT_BYTES = 16 * 1024 * 1024
"""Changelog segments of Spark-managed stores roll at 16 MiB unless their logging config says
otherwise: opening a log scans its last segment (about 13 ms for 23 MiB here), and a partition
reopens whenever it changes workers, so the scan stays short (a full 1 GiB segment: ~0.6 s)."""

SNAPSHOT_DEFAULTS = {MIN_DELTAS_FOR_SNAPSHOT: 10, MIN_DELTA_BYTES_FOR_SNAPSHOT: 64 * 1024 * 1024}
"""A query's stores publish snapshots beside their changelogs unless their logging config names
either option (``None`` for both turns them off): every 10 batches, Spark's default
``minDeltasForSnapshot``, or once 64 MiB of changelog gathered (a few seconds of replay), so a
partition restored on a new executor loads files and replays a short tail (issue 44)."""


EXECUTOR_STATE_DIR = "kstate-state"
"""``state_dir=None``: this directory under the executor's working directory."""


@dataclass(frozen=True)
class StateLayout:
    """Where a partition's state lives (Kafka Streams' layout, one subtopology ``0``).
    ``state_dir`` ``None`` is executor-local: ``kstate-state`` in the working directory of the
    process the task runs in (each executor has its own on standalone, YARN and Kubernetes)."""

    state_dir: Path | None
    changelog_dir: Path
    application_id: str
    changelog_url: str | None = None
    """Set when the changelogs live on an object store (``changelog_dir`` is then unused)."""
    storage_options: dict[str, Any] = field(default_factory=dict)

    def local_state_dir(self) -> Path:
        return self.state_dir if self.state_dir is not None else Path.cwd() / EXECUTOR_STATE_DIR

    def task_dir(self, partition: int) -> Path:
        return self.local_state_dir() / self.application_id / f"0_{partition}"

    def batch_log_name(self, partition: int) -> str:
        return f"{self.application_id}-kstate-batches-{partition}"

    def undo_name(self, partition: int) -> str:
        return f"{self.application_id}-kstate-undo-{partition}"

    def batch_log_dir(self, partition: int) -> Path:
        return self.changelog_dir / self.batch_log_name(partition)

    def undo_dir(self, partition: int) -> Path:
        return self.changelog_dir / self.undo_name(partition)

    def changelog_partition_dir(self, store: str, partition: int) -> Path:
        return self.changelog_dir / f"{self.application_id}-{store}-changelog-{partition}"


class TaskStores(Mapping[str, Any]):
    """The open stores of one partition, by name, handed to the user's function: key-value,
    window and session stores, as the backend's builders say."""

    def __init__(
        self,
        stores: dict[str, Any],
        task: TaskInfo,
        layout: StateLayout | None = None,
        undo_sources: dict[str, Any] | None = None,
    ):
        self._stores = stores
        self.task = task
        self.layout = layout
        """Where the partition's state lives."""
        self.undo_sources: dict[str, Any] = {} if undo_sources is None else undo_sources
        """Per store, what keeps the committed values of the keys this batch writes (the
        processor's list and map read-aheads, ``_core.StateReadAhead``): the commit's undo takes
        them from it instead of reading the store again."""

    @property
    def partition(self) -> int:
        return self.task.partition

    @property
    def batch_id(self) -> int:
        return self.task.batch_id

    def __getitem__(self, name: str) -> Any:
        try:
            return self._stores[name]
        except KeyError:
            raise InvalidArgumentError(f"no store named {name!r}; the backend has {sorted(self._stores)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._stores

    def __iter__(self) -> Iterator[str]:
        return iter(self._stores)

    def __len__(self) -> int:
        return len(self._stores)


@dataclass
class PartitionState:
    """The stores of one partition for one task attempt, opened and committed exactly once per
    micro-batch. ``open()`` and then ``commit()`` or ``abort()``."""

    builders: list[StoreBuilder]
    layout: StateLayout
    task: TaskInfo
    lock_timeout: float = 600.0
    undo_retained_batches: int = 2
    upgrade: InPlaceUpgrade | None = None
    timings: Timings = field(default_factory=Timings)

    def __post_init__(self) -> None:
        p = self.task.partition
        self._task_lock = FileLock(
            self.layout.task_dir(p) / TASK_LOCK, f"task directory of partition {p}", self.lock_timeout
        )
        self._remote = self.layout.changelog_url is not None
        self._publish_lock = (
            NoLock()
            if self._remote
            else FileLock(
                self.layout.batch_log_dir(p) / ".lock", f"publication lock of partition {p}", self.lock_timeout
            )
        )
        self._undo: UndoFiles | RemoteUndoFiles = (
            RemoteUndoFiles(
                self.layout.changelog_url,
                self.layout.undo_name(p),
                [b.name for b in self.builders],
                self.layout.storage_options,
            )
            if self._remote
            else UndoFiles(self.layout.undo_dir(p))
        )
        self._log: BatchLog | RemoteBatchLog | None = None
        self._head: BatchEntry | None = None
        self._stores: dict[str, StoreLifecycle] = {}
        self._opened_at: dict[str, int | None] = {}
        self._undo_sources: dict[str, Any] = {}
        expiring = {b.name for b in self.builders if getattr(b.supplier, "ttl_ms", None) is not None}
        self._row_counts = RowCounts(self.layout.task_dir(p), expiring)

    # -- opening ---------------------------------------------------------------------------------

    def open(self, read_only: bool = False) -> TaskStores:
        """Locks the partition, brings its stores to the state after the last batch before this
        one, and returns them. ``read_only``: the state after the last published batch, whatever
        this task's batch id, for reading (then ``abort``)."""
        started = time.perf_counter()
        p, batch = self.task.partition, self.task.batch_id
        seen = None if self._remote else peek_head(self.layout.batch_log_dir(p))
        parked = self._take_parked()
        try:
            self._lock_task_dir(parked)
            self._publish_lock.acquire()
            self._log = self._open_batch_log()
            self._head = self._log.head()
            head_position = None if self._head is None else self._head.position
            # Locally the head moving while this attempt waited for the lock means another attempt
            # published this batch first. On an object store there is no waiting to tell a
            # concurrent attempt from a replay: this one rolls the batch back and redoes it, and
            # of attempts racing to publish, the batch log's exclusive create keeps one.
            if not self._remote and (seen[0] if seen else None) != head_position:
                self._log.write_head_hint(self._head)
                if not read_only and self._head is not None and self._head.batch_id >= batch:
                    raise BatchConflictError(
                        f"partition {p} batch {batch}: another attempt published batch {self._head.batch_id} "
                        f"while this one (task attempt {self.task.attempt}) waited; it publishes nothing"
                    )
            switching = self._switch_due()
            if (
                parked is not None
                and not switching
                and parked.head_position == head_position
                and (self._remote or parked.publish_token == self._publish_lock.previous_holder)
            ):
                # Nobody else held the publication lock since this process committed: the
                # parked stores are current; their changelogs were closed while parked.
                self._stores, parked = parked.stores, None
                for store in self._stores.values():
                    store.attach_changelog()
            else:
                if parked is not None:
                    for store in parked.stores.values():
                        store.close()
                    parked = None
                self._retract_unrecorded()
                if switching:
                    assert self.upgrade is not None
                    self.upgrade.switch(self._logged_builders(), self.layout.task_dir(p), p)
                self._open_stores()
            self._opened_at = {name: store.committed_offset() for name, store in self._stores.items()}
            if not read_only:
                self._roll_back_to(batch)
                self._row_counts.opened(self._stores, self._head)
        except BaseException:
            if parked is not None:
                release(parked)
            self.abort()
            raise
        self.timings.open = time.perf_counter() - started
        log.info(
            "partition %d batch %d: stores at batch %s (restored %d records, rolled back %d batches) in %.3f s",
            p,
            batch,
            EMPTY_STATE if self._head is None else self._head.batch_id,
            self.timings.restored_records,
            self.timings.rolled_back_batches,
            self.timings.open,
        )
        self._undo_sources = {}
        return TaskStores(self._stores, self.task, self.layout, self._undo_sources)

    def _take_parked(self) -> Parked | None:
        """This process's stores of the partition from an earlier task, if they still fit."""
        parked = IDLE.take(self.layout.task_dir(self.task.partition))
        if parked is None:
            return None
        if parked.task_lock.still_names_this_file() and parked.settings == self.store_settings():
            return parked
        release(parked)  # the task directory was deleted, or the backend has other stores or settings
        return None

    def store_settings(self) -> dict[str, Any]:
        """Per store, what its open stores keep from their builder: serdes, store config and the
        changelog's topic configs. Code (a serde, a config setter) counts by its name: each task
        unpickles its own copy of it."""
        return {
            b.name: _comparable(
                (b.key_serde, b.value_serde, b.config, ChangelogConfig.parse(self._logging_config(b)).topic_config)
            )
            for b in self.builders
        }

    def _lock_task_dir(self, parked: Parked | None) -> None:
        if parked is not None:
            self._task_lock = parked.task_lock
            return
        task_dir = self.layout.task_dir(self.task.partition)
        # A worker that parked these stores after its task gives them up when asked.
        self._task_lock.acquire(on_wait=lambda: ask_to_release(task_dir))
        (task_dir / RELEASE_REQUEST).unlink(missing_ok=True)

    def _open_batch_log(self) -> BatchLog | RemoteBatchLog:
        p = self.task.partition
        if self._remote:
            assert self.layout.changelog_url is not None
            return RemoteBatchLog(self.layout.changelog_url, self.layout.batch_log_name(p), self.layout.storage_options)
        return BatchLog(self.layout.batch_log_dir(p))

    def _logging_config(self, builder: StoreBuilder) -> dict[str, Any]:
        defaults: dict[str, Any] = {"segment.bytes": CHANGELOG_SEGMENT_BYTES}
        logging = builder.logging or {}
        transactional = builder.supplier.transactional and StoreConfig.parse(builder.config).transactional
        if transactional and not logging.keys() & SNAPSHOT_DEFAULTS.keys():
            defaults |= SNAPSHOT_DEFAULTS
        if self._remote:
            where = {CHANGELOG_DIR: self.layout.changelog_url, CHANGELOG_STORAGE_OPTIONS: self.layout.storage_options}
        else:
            where = {CHANGELOG_DIR: str(self.layout.changelog_dir)}
        return {**defaults, **logging, **where}

    def _local_changelog_dir(self, store: str) -> Path:
        """The store's changelog partition, or with a remote changelog its local cache."""
        if not self._remote:
            return self.layout.changelog_partition_dir(store, self.task.partition)
        topic = f"{self.layout.application_id}-{store}-changelog-{self.task.partition}"
        return self.layout.local_state_dir() / "changelog-cache" / topic

    def _void_unrecorded_remote(self) -> None:
        """On an object store nothing stops another attempt from publishing changelog objects
        the head does not record (a crashed attempt's, or a live one's that will lose). Before
        deleting them, this attempt takes the next batch log position with a copy of the head,
        so no attempt can record them any more."""
        assert self._log is not None and self.layout.changelog_url is not None
        offsets = {} if self._head is None else self._head.offsets
        remotes = {
            b.name: RemoteChangelog(
                self.layout.changelog_url,
                f"{self.layout.application_id}-{b.name}-changelog",
                self.task.partition,
                self.layout.storage_options,
            )
            for b in self.builders
        }
        beyond = {
            name: [o for o in remote.list() if o.last is None and o.first > offsets.get(name, -1)]
            for name, remote in remotes.items()
        }
        if not any(beyond.values()):
            return
        void = (
            BatchEntry(batch_id=EMPTY_STATE, offsets={})
            if self._head is None
            else replace(self._head, attempt=self.task.attempt, time_ms=now_ms())
        )
        self._head = self._log.append(void)  # BatchConflictError: someone else moved on
        for name, remote in remotes.items():
            remote.retract_after(offsets.get(name))

    def _retract_unrecorded(self) -> None:
        if self._remote:
            self._void_unrecorded_remote()
        offsets = {} if self._head is None else self._head.offsets
        for builder in self.builders:
            topic_config = ChangelogConfig.parse(self._logging_config(builder)).topic_config
            directory = self._local_changelog_dir(builder.name)
            if not directory.exists():
                continue  # no changelog yet (a first batch): nothing to retract, none to create
            retracted = _core.retract_changelog(str(directory), topic_config, offsets.get(builder.name))
            if retracted:
                log.warning(
                    "partition %d: retracted %d changelog records of %s that a crashed batch published "
                    "without recording it",
                    self.task.partition,
                    retracted,
                    builder.name,
                )

    def _open_stores(self) -> None:
        started = time.perf_counter()
        try:
            self._open_each_store()
        finally:
            self.timings.restore += time.perf_counter() - started

    def _open_each_store(self) -> None:
        task_dir = self.layout.task_dir(self.task.partition)
        recorded = {} if self._head is None else self._head.offsets
        for builder in self.builders:
            store = builder.with_logging_enabled(self._logging_config(builder)).build()
            store.restore_until = recorded.get(builder.name, -1)
            store.keep_history_from = 0  # until a commit knows what the batch log still needs
            try:
                store.init(task_dir, partition=self.task.partition, application_id=self.layout.application_id)
            except StoreCorruptedError as error:
                # Local state is a copy of the changelog: a damaged one is rebuilt from it.
                log.warning(
                    "partition %d: store %s is damaged (%s); restoring it from its changelog",
                    self.task.partition,
                    builder.name,
                    error,
                )
                store.wipe_local_state()
                store.init(task_dir, partition=self.task.partition, application_id=self.layout.application_id)
            self._stores[builder.name] = store
            self.timings.restored_records += store.restored_records

    def _roll_back_to(self, batch: int) -> None:
        """Takes every store back over each published batch >= ``batch``, newest first. Every
        undo file is read before the first rollback commits: one that cannot reach ``batch``
        fails with ``ProcessorStateError`` having changed nothing."""
        assert self._log is not None
        steps: list[tuple[BatchEntry, BatchEntry | None, dict[str, Any]]] = []
        entry = self._head
        while entry is not None and entry.batch_id >= batch:
            before = None if entry.previous is None else self._log.entry(entry.previous)
            undo = {name: self._undo.read(file) for name, file in entry.undo.items() if name in self._stores}
            steps.append((entry, before, undo))
            entry = before
        for undone, before, undo in steps:
            self._roll_back(undone, before, undo)

    def _roll_back(self, undone: BatchEntry, before: BatchEntry | None, undo: dict[str, Any]) -> None:
        """Takes every store back over ``undone`` (the head), as a commit of its undo values."""
        for name, values in undo.items():
            stage_raw(self._stores[name], values)
            self._row_counts.rolled_back(name, values)
        restated = BatchEntry(
            batch_id=EMPTY_STATE if before is None else before.batch_id,
            offsets={},
            undo={} if before is None else before.undo,
            rows={} if before is None else before.rows,
            previous=None if before is None else before.previous,
            restates=undone.position,
        )
        self._publish(restated)
        self.timings.rolled_back_batches += 1
        log.info(
            "partition %d: rolled back batch %d (replayed by task attempt %d); state is batch %d again",
            self.task.partition,
            undone.batch_id,
            self.task.attempt,
            restated.batch_id,
        )

    def show_as_of(self, batch_id: int | None = None, time_ms: int | None = None) -> int:
        """After ``open(read_only=True)``: stages onto the stores the undo of every batch after
        ``batch_id`` (or published after ``time_ms``), newest first, so reads see the state as of
        that batch; ``close_view()`` drops it. Returns the batch whose state the stores show
        (``EMPTY_STATE``: before the first). Reaches back as far as undo files are kept
        (``undo_retained_batches``), else raises ``ProcessorStateError``."""
        assert self._log is not None

        def after(entry: BatchEntry) -> bool:
            return (batch_id is not None and entry.batch_id > batch_id) or (
                time_ms is not None and entry.time_ms > time_ms
            )

        entry = self._head
        while entry is not None and after(entry):
            for name, undo_file in entry.undo.items():
                try:
                    undo = self._undo.read(undo_file)
                except ProcessorStateError as missing:
                    raise ProcessorStateError(
                        f"partition {self.task.partition}: the state before batch {entry.batch_id} is no longer "
                        f"kept ({missing}); undo files are kept for the last {self.undo_retained_batches} batches"
                    ) from None
                stage_raw(self._stores[name], undo)
            entry = None if entry.previous is None else self._log.entry(entry.previous)
        return EMPTY_STATE if entry is None else entry.batch_id

    def close_view(self) -> None:
        """Ends a read-only open, dropping what ``show_as_of`` staged."""
        for store in self._stores.values():
            native_store(store).recover(None)
        self.abort()

    # -- committing ------------------------------------------------------------------------------

    def commit(self) -> BatchEntry | None:
        """Publishes this batch's writes and commits every store; returns the batch log entry
        (``None`` when the batch wrote nothing). Releases the partition: the stores stay open,
        parked for this process's next task of the partition."""
        started = time.perf_counter()
        try:
            assert self._log is not None
            position = self._log.next_position
            undo = {}
            for name, store in self._stores.items():
                native = native_store(store)
                staged, spilled = native.uncommitted()
                if staged or spilled:
                    previous = previous_values(native, self._undo_sources.get(name))
                    self._row_counts.staged(name, store, previous)
                    undo[name] = self._undo.write(name, position, self.task.attempt, previous)
            entry = None
            if undo:
                entry = BatchEntry(
                    batch_id=self.task.batch_id,
                    offsets={},
                    undo=undo,
                    rows=self._row_counts.published_rows(self._stores),
                    previous=None if self._head is None else self._head.position,
                )
                entry = self._publish(entry)
                self._keep_recent()
            if self.upgrade is not None:
                p = self.task.partition
                self.upgrade.report(self._logged_builders(), self.layout.task_dir(p), p, self._opened_at)
        except BaseException:
            self.abort()
            raise
        finally:
            self.timings.commit = time.perf_counter() - started
            self._forget_undo_sources()
        self._row_counts.committed(self._stores)
        self.timings.sample_memory(self._stores, self._row_counts)
        self._park()
        return entry

    def install(self, history: list[tuple[int, dict[str, Any]]], floor: int | None = None) -> BatchEntry | None:
        """Writes the batch log of a partition opened without one (a rescale's new generation):
        an entry per ``(batch id, undo per store)`` of ``history``, oldest first, the last one
        publishing what is staged. ``floor``: a first entry for the state before them, whose undo
        is missing, so rolling back further than the history reaches fails as it did before.
        Closes the partition."""
        assert self._log is not None and self._head is None
        previous = None
        if floor is not None:
            missing = {b.name: f"{b.name}/before-rescale.arrow" for b in self.builders}
            previous = self._log.append(BatchEntry(batch_id=floor, offsets={}, undo=missing, time_ms=now_ms())).position
        entry = None
        for i, (batch_id, undo) in enumerate(history):
            position = self._log.next_position
            files = {name: self._undo.write(name, position, self.task.attempt, rows) for name, rows in undo.items()}
            entry = BatchEntry(batch_id=batch_id, offsets={}, undo=files, previous=previous)
            if i < len(history) - 1:
                entry = self._log.append(replace(entry, attempt=self.task.attempt, time_ms=now_ms()))
            else:
                entry = self._publish(entry)
            previous = entry.position
        self.close()
        return entry

    def _switch_due(self) -> bool:
        """Whether an in-place upgrade switches this partition's stores to the new format now."""
        task_dir = self.layout.task_dir(self.task.partition)
        return self.upgrade is not None and self.upgrade.switch_ordered() and self.upgrade.needs_switch(task_dir)

    def _logged_builders(self) -> dict[str, StoreBuilder]:
        return {b.name: b.with_logging_enabled(self._logging_config(b)) for b in self.builders}

    def _park(self) -> None:
        # Parked stores give up their changelogs: another executor may take the partition.
        for store in self._stores.values():
            store.detach_changelog()
        task_dir = self.layout.task_dir(self.task.partition)
        head_position = None if self._head is None else self._head.position
        IDLE.park(
            task_dir,
            Parked(dict(self._stores), self._task_lock, head_position, self._publish_lock.token, self.store_settings()),
        )
        self._stores.clear()
        self._close_log_and_publication_lock()

    def _publish(self, entry: BatchEntry) -> BatchEntry:
        """Publishes every store's staged writes, appends ``entry`` with their offsets (the
        publication point), then commits each store at its offset. The new head."""
        assert self._log is not None
        now = now_ms()
        try:
            published = {name: native_store(store).publish(now) for name, store in self._stores.items()}
        except CommitConflictError as error:
            # An object store's changelog took another attempt's commit at these offsets first.
            raise BatchConflictError(
                f"partition {self.task.partition} batch {self.task.batch_id}: {error}; this attempt publishes nothing"
            ) from error
        head_offsets = {} if self._head is None else self._head.offsets
        offsets = {**head_offsets, **{n: o for n, o in published.items() if o is not None}}
        entry = self._log.append(
            replace(
                entry,
                offsets=offsets,
                attempt=self.task.attempt,
                run_id=self.task.run_id,
                query_id=self.task.query_id,
                time_ms=now,
            )
        )
        for name, store in self._stores.items():
            native_store(store).commit_published(published[name])
            store.note_commit(entry.batch_id)
            store.clean_changelog()
        self._head = entry
        return entry

    def _keep_recent(self) -> None:
        """Keeps the undo files of the last ``undo_retained_batches`` states and the batch log
        entries that reach the state before them; deletes the undo files of the entry that just
        fell out. When the log trims (rarely), also every undo file no kept entry names: those of
        rolled-back batches and of attempts that died before publishing."""
        assert self._log is not None
        chain = self._log.history(self.undo_retained_batches + 1)
        kept, dropped = chain[: self.undo_retained_batches], chain[self.undo_retained_batches :]
        for name, store in self._stores.items():
            # The snapshot collector keeps the changelog from the state before the oldest batch a
            # replay can roll back (its records, and the event-time record a replay rereads).
            store.keep_history_from = max(chain[-1].offsets.get(name, 0), 0)
        if self._log.trim(chain[-1].position):
            self._undo.keep_only(name for entry in kept for name in entry.undo.values())
        else:
            self._undo.delete(name for entry in dropped for name in entry.undo.values())

    # -- closing ---------------------------------------------------------------------------------

    def abort(self) -> None:
        """Discards uncommitted writes and releases the locks; nothing of this attempt that was
        not published counts."""
        self._forget_undo_sources()
        self.close()

    def _forget_undo_sources(self) -> None:
        # What they keep is charged to the memory budget: give it back now, not when collected.
        for source in self._undo_sources.values():
            source.forget()
        self._undo_sources.clear()

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
        self._close_log_and_publication_lock()
        self._task_lock.release()

    def _close_log_and_publication_lock(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._publish_lock.release()


def _comparable(value: Any) -> Any:
    """``value`` with every object that is not plain data replaced by its type's (or its own)
    qualified name."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    named = value if isinstance(value, type) or callable(value) else type(value)
    return f"{getattr(named, '__module__', '')}.{getattr(named, '__qualname__', type(named).__name__)}"


def stage_raw(store: StoreLifecycle, undo: Any) -> None:
    """Stages stored bytes exactly as recorded (``None`` deletes), with no serde in between;
    window and session stores by store key, into the segments the keys name."""
    keys = undo.column("key").combine_chunks()
    values = undo.column("value").combine_chunks()
    if not len(keys):
        return
    native = native_store(store)
    if not isinstance(store, KeyValueStore):
        native.put_store_keys(keys.to_pylist(), values.to_pylist())
        return

    def column(arr: Any) -> tuple:
        validity, offsets, data = arr.buffers()
        return (
            offsets.to_pybytes(),
            data.to_pybytes() if data is not None else b"",
            validity.to_pybytes() if validity is not None else None,
            arr.offset,
            False,
        )

    native.put_all_packed(len(keys), column(keys), column(values))

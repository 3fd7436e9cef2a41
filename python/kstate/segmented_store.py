"""What window and session stores share: time segments on disk, retention, transactions.

A segmented store keeps one RocksDB per time segment at ``<task_dir>/<name>/<name>.<start ms>``
(Kafka's layout), ``segment_interval = max(retention / 2, 60 s)``. Stream time is the largest
window start (session end) put so far: reads hide what is older than ``stream time - retention``,
late puts into expired segments are dropped and counted (``dropped_records``), expired segments
are deleted. Writes are staged and readable at once; ``commit(changelog_offset)`` is atomic
across segments (a commit-intent file makes a crash in the middle finish on reopen). With
``with_logging_enabled`` a changelog backs the store as it backs a key-value store: records
keyed by store key (``key|start|seq``, ``key|end|start``), restored segment by segment.
Snapshots (``minDeltasForSnapshot``) hold every live segment at one changelog offset, with the
stream time, so that a restore loads them and replays only the changelog after them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kstate import _core
from kstate.config import DURABILITY_WAL, STATESTORE_DURABILITY, ChangelogConfig, StoreConfig
from kstate.errors import CorruptedDataError, InvalidArgumentError, InvalidStateStoreError
from kstate.lazy_logger import LazyLogger
from kstate.store_lifecycle import StoreLifecycle, Unopened, now_ms, progress_logger
from kstate.store_reads import SegmentedReads

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from kstate.serdes import Serde
    from kstate.suppliers import SegmentedBytesStoreSupplier

log = LazyLogger("kstate.store")


class SegmentedView(SegmentedReads):
    """A read-only view of a window or session store; ``read_committed`` views see only
    committed state and may be used from another thread while the writer works."""

    def __init__(self, store: SegmentedStore, read_committed: bool):
        self.name = store.name
        self.read_committed = read_committed
        self._key_serde = store._key_serde
        self._value_serde = store._value_serde
        self._timestamped_bytes = store._timestamped_bytes
        self._reader = store._reader.read_committed_view() if read_committed else store._reader
        self._raw = self._raw_bytes()


class SegmentedStore(StoreLifecycle, SegmentedReads):
    """Lifecycle and transactions of window and session stores. Build one with ``Stores``, then
    ``init(task_dir)``; or use it as a context manager after ``init``."""

    _snapshot_kind: str
    """The store kind a snapshot manifest names: ``"window"`` or ``"session"``."""

    def __init__(
        self,
        supplier: SegmentedBytesStoreSupplier,
        key_serde: Serde,
        value_serde: Serde,
        config: Mapping[str, Any] | None = None,
        logging: Mapping[str, Any] | None = None,
    ):
        self.name = supplier.name
        self._supplier = supplier
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._timestamped_bytes = supplier.timestamped
        self._config = StoreConfig.parse(config)
        if self._config.durability not in (None, DURABILITY_WAL):
            raise InvalidArgumentError(
                f"{STATESTORE_DURABILITY}={self._config.durability!r}: window and session stores keep RocksDB's "
                "write-ahead log (a commit spans several segments, which only the log keeps consistent with its offset)"
            )
        self._logging = None if logging is None else ChangelogConfig.parse(logging, _changelog_defaults(supplier))
        self._changelog_outrun_said = False
        self._reader: Any = Unopened(self.name)
        self._raw = self._raw_bytes()
        self._task_dir: str | None = None
        self._remote = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def retention_period(self) -> int:
        return self._supplier.retention_ms

    @property
    def segment_interval(self) -> int:
        return self._supplier.segment_interval_ms

    def _open_segments(self, directory: str | None, config: dict, progress: Any) -> tuple[Any, dict]:
        raise NotImplementedError

    def init(
        self, task_dir: str | Path, *, partition: int | None = None, application_id: str | None = None
    ) -> SegmentedStore:
        """Open the store under ``task_dir`` (segments in ``<task_dir>/<name>/``).

        The changelog this store commits offsets for is ``<application.id>-<name>-changelog``,
        partition ``partition``; both default from the task directory's path. Opening renames
        legacy segment directories, finishes a commit a crash interrupted, deletes expired
        segments, and restores from the changelog (if logged) what the store lacks.
        """
        self._open(task_dir, partition, application_id)
        return self

    def _open_local_state(self) -> None:
        supplier = self._supplier
        config = {
            "timestamped": supplier.timestamped,
            "retention_ms": supplier.retention_ms,
            "segment_interval": supplier.segment_interval_ms,
            "transactional": self.transactional,
            "max_uncommitted_bytes": self._config.uncommitted_max_bytes,
            "cache_max_bytes": self._config.cache_max_bytes,
            "offset_key": self._offset_key,
            "ttl_ms": supplier.ttl_ms,
            "ttl_wall_clock": supplier.ttl_clock == "wall_clock",
            "memory_max_bytes": self._config.memory_max_bytes,
            "rocksdb_config": self._config.rocksdb_options(self.name) if self.persistent else None,
        }
        directory = None
        if self.persistent:
            assert self._task_dir is not None
            directory = os.path.join(self._task_dir, self.name)
        native, found = self._open_segments(directory, config, progress_logger(f"finishing commit of {self.name}"))
        self._reader = native
        self._bind_raw_calls()
        if found.get("renamed_legacy"):
            log.info("Store %s: renamed %d legacy segment directories", self.name, found["renamed_legacy"])
        if found.get("upgrade_mode"):
            log.info("Opening store %s in upgrade mode: legacy values migrate on access", self.name)
        if found.get("finished_commit") is not None:
            log.info(
                "Store %s: finished a commit interrupted by a crash (%d segment batches)",
                self.name,
                found["finished_commit"],
            )
        if found.get("unclean_shutdown"):
            log.warning("Store %s was not closed cleanly; its offset was dropped so it is restored", self.name)

    def _local_paths(self) -> list[str]:
        """The segment directories, the commit-intent file and segment spills (task dir)."""
        task = self._task_dir
        assert task is not None
        spill_prefix, spill_suffix = f".{self.name}.", ".uncommitted"
        try:
            names = sorted(os.listdir(task))
        except FileNotFoundError:
            names = []
        spills = [
            os.path.join(task, name)
            for name in names  # the names Path.glob(".<name>.*.uncommitted") finds
            if name.startswith(spill_prefix)
            and name.endswith(spill_suffix)
            and len(name) >= len(spill_prefix) + len(spill_suffix)
        ]
        return [os.path.join(task, self.name), os.path.join(task, f".{self.name}.commit"), *spills]

    def _snapshot_target(self) -> tuple[str, str] | None:
        """Snapshots hold the segment directories of a persistent transactional store."""
        if not self.persistent or not self.transactional:
            return None
        assert self._task_dir is not None
        return self._snapshot_kind, os.path.join(self._task_dir, self.name)

    def _check_snapshot(self, fetched: str, manifest: Any) -> None:
        """The snapshot's segments must be segments of this store's interval, as opening checks
        them: a snapshot of the store written with another retention is not used."""
        try:
            _core.check_restored_segments(self.name, fetched, self.retention_period, self.segment_interval)
        except InvalidStateStoreError as error:
            raise CorruptedDataError(f"its segments cannot be this store's: {error}") from error

    def _install_snapshot(self, manifest: Any) -> None:
        """The snapshot's offset and stream time become the store's commit record (the stream
        time of a commit that wrote several segments is not in their files)."""
        assert self._task_dir is not None
        directory = os.path.join(self._task_dir, self.name)
        _core.install_restored_segments(self.name, directory, manifest.offset, manifest.stream_time)

    def _bind_raw_calls(self) -> None:
        """With bytes serdes, subclasses may bind their hottest calls to the native store."""

    # -- time and segments -----------------------------------------------------------------------

    @property
    def stream_time(self) -> int:
        """The largest segment timestamp put so far (-1 before any), staged puts included."""
        return self._reader.stream_time

    @property
    def dropped_records(self) -> int:
        """Puts dropped because their window or session had already expired."""
        return self._reader.dropped_records

    def segment_ids(self) -> list[int]:
        """Ids of the open segments, oldest first (segment start = id * segment_interval)."""
        return self._reader.segment_ids()

    def approximate_num_entries(self) -> int:
        return self._reader.approximate_num_entries()

    def compact(self) -> None:
        """Compact every segment now. With a TTL, expired values leave the disk."""
        self._reader.compact()

    def clean_changelog(self) -> None:
        self._say_if_changelog_deletes_live_records()
        super().clean_changelog()

    def _say_if_changelog_deletes_live_records(self) -> None:
        """Warns (once) when the changelog's retention deletes records the store still holds.

        The store keeps windows by stream time; its changelog, as Kafka's brokers do, deletes
        records ``retention.ms`` after their timestamp by the clock. With stream time far behind
        the clock (old data replayed, a backfill) the changelog drops records as they are
        written, and a restore from it would not bring them back. Remote changelogs delete
        nothing by time."""
        config = self._logging
        if self._changelog_outrun_said or config is None or config.remote or self.stream_time < 0:
            return
        topic = config.topic_config
        retention = int(topic.get("retention.ms", "-1"))
        if "delete" not in topic.get("cleanup.policy", "") or retention < 0:
            return
        live_from = self.stream_time - self.retention_period + 1
        if now_ms() - retention <= live_from:
            return
        self._changelog_outrun_said = True
        log.warning(
            "Store %s: its changelog deletes records retention.ms (%d ms) after their timestamp by the clock, "
            "as Kafka's brokers do, and the store's stream time (%d ms) is so far behind the clock that it "
            "deletes records the store still holds: a restore from the changelog would lose them. For old "
            "event times set the changelog's retention.ms (with_logging_enabled({'retention.ms': -1}) keeps "
            "records until compaction replaces them).",
            self.name,
            retention,
            self.stream_time,
        )


WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000
"""Kafka Streams' ``windowstore.changelog.additional.retention.ms`` default: how much longer than
the store a windowed changelog keeps records."""


def _changelog_defaults(supplier: SegmentedBytesStoreSupplier) -> dict[str, str]:
    """Kafka Streams' topic configs for a windowed store's changelog: compacted, and deleted
    once older than the store's retention plus a day."""
    retention = supplier.retention_ms + WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS
    return {"cleanup.policy": "compact,delete", "retention.ms": str(retention)}

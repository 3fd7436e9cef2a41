"""One partition's local copy of an application's state: its stores, holding what their
changelogs published up to one batch log entry, on disk beside that entry.

A copy is a directory (``<partition dir>/copy-<n>/``) laid out as a task directory
(``rocksdb/<store>``, window and session segments), with ``entry.json`` naming the batch log
entry whose state its stores hold. The stores are the query's, rebuilt from the partitioning
record, without a changelog of their own and always transactional: changelog records are staged,
invisible to the read-committed views that serve reads, and committed together at an entry, each
store at the entry's offset, then ``entry.json`` is replaced. A copy whose stores do not all stand
at its entry's offsets (a crash between two commits) serves nothing until it is caught up again.
A store built from scratch starts from the entries of its newest usable snapshot
(``kstate.log.history``), staged as records are, then the changelog after it.
A partition keeps one copy; a rebuild makes the next one beside it and the old one goes once the
new one is complete.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kstate import _core
from kstate.config import ENABLE_TRANSACTIONAL_STATESTORES
from kstate.key_value_store import KeyValueStore
from kstate.spark.protocol.batch_log import BatchEntry
from kstate.spark.protocol.exactly_once import stage_raw
from kstate.spark.protocol.published_changelog import stored_entries
from kstate.spark.routing.partitioning import SNAPSHOT_KINDS, store_supplier
from kstate.store_lifecycle import native_store
from kstate.stores import StoreBuilder

if TYPE_CHECKING:
    from kstate.log.history import StoreHistory

log = logging.getLogger("kstate.serving")

ENTRY_FILE = "entry.json"
READ_MEMTABLE_BYTES = 4 << 20
"""A copy's key-value store flushes its memtable to a table file once it holds this much after
a commit: a get searches the memtable first, and a skip list of a catch-up's keys (250k) took a
third of a 1M-key replica's get time (benches/README.md, "Serving")."""
_COPY_NAME = re.compile(r"^copy-(\d+)$")


def replica_builder(description: Mapping[str, Any], serdes: tuple[Any, Any] | None) -> StoreBuilder:
    """The builder of a copy's store: the query's supplier and timestamps as the partitioning
    record describes them, transactional, without a changelog; ``serdes`` (key, value), else the
    recorded names of built-in serdes, else bytes."""
    recorded = description.get("serdes") or {}
    key_serde, value_serde = serdes or (recorded.get("key") or "bytes", recorded.get("value") or "bytes")
    supplier = store_supplier(description, transactional=True)
    return StoreBuilder(
        supplier, key_serde, value_serde, bool(description["timestamped"]), {ENABLE_TRANSACTIONAL_STATESTORES: True}
    )


class PartitionCopy:
    """The stores of one partition in ``directory``, opened (see the module docstring)."""

    def __init__(self, directory: Path, partition: int, application_id: str):
        self.directory = directory
        self.partition = partition
        self.application_id = application_id
        self.entry: BatchEntry | None = None
        """The entry whose state the stores hold (``None``: the empty state, before any)."""
        self.complete = False
        """Whether every store stands at ``entry``'s offsets (else the copy serves nothing)."""
        self._stores: dict[str, Any] = {}
        self._timestamped: dict[str, bool] = {}
        self._kinds: dict[str, str] = {}
        self._views: dict[str, Any] = {}
        self._staged_until: dict[str, int] = {}

    @classmethod
    def open(
        cls,
        directory: Path,
        partition: int,
        application_id: str,
        stores: Mapping[str, Mapping[str, Any]],
        serdes: Mapping[str, tuple[Any, Any]],
    ) -> PartitionCopy:
        """Opens (creating) the copy in ``directory`` with ``stores`` (name -> the partitioning
        record's description)."""
        copy = cls(directory, partition, application_id)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            copy.add_stores(stores, serdes)
            copy.entry, copy.complete = copy._read_entry()
        except BaseException:
            copy.close()
            raise
        return copy

    def add_stores(self, stores: Mapping[str, Mapping[str, Any]], serdes: Mapping[str, tuple[Any, Any]]) -> None:
        """Opens the stores of ``stores`` the copy does not have yet (a query that added stores):
        they start empty, as before their first record, and make the copy incomplete until it
        is caught up."""
        for name, description in stores.items():
            if name in self._stores:
                continue
            store = replica_builder(description, serdes.get(name)).build()
            store.init(self.directory, partition=self.partition, application_id=self.application_id)
            self._stores[name] = store
            self._timestamped[name] = bool(description["supplier"]["timestamped"])
            self._kinds[name] = description["kind"]
        self.complete = self.complete and self._stores_at(self.entry)

    def _read_entry(self) -> tuple[BatchEntry | None, bool]:
        try:
            recorded = json.loads((self.directory / ENTRY_FILE).read_text())
        except FileNotFoundError:
            return None, all(store.committed_offset() is None for store in self._stores.values())
        entry = recorded["entry"]
        if entry is None:
            return None, all(store.committed_offset() is None for store in self._stores.values())
        entry = BatchEntry.from_bytes(json.dumps(entry).encode(), recorded["position"])
        return entry, self._stores_at(entry)

    def _stores_at(self, entry: BatchEntry | None) -> bool:
        offsets = {} if entry is None else entry.offsets
        return all(store.committed_offset() == offsets.get(name) for name, store in self._stores.items())

    @property
    def store_names(self) -> list[str]:
        return list(self._stores)

    def key_serde(self, store: str) -> Any:
        """The serde of ``store``'s keys (what orders them: their serialized bytes)."""
        return self._stores[store].key_serde

    def value_serde(self, store: str) -> Any:
        return self._stores[store].value_serde

    def plain_value_decoder(self, store: str) -> Callable[[bytes], Any] | None:
        """What turns ``store``'s stored values into values when they are their serde's bytes
        (a plain key-value store, no timestamp); ``None`` otherwise."""
        target = self._stores[store]
        if type(target) is not KeyValueStore or self._timestamped[store]:
            return None
        return target.value_serde.deserialize  # type: ignore[no-any-return]

    def native_view(self, store: str) -> Any:
        """The native read-committed view of ``store`` (what ``view`` reads through)."""
        return native_store(self._stores[store]).read_committed_view()

    def offset(self, store: str) -> int | None:
        """The changelog offset ``store`` stands at, with what is staged (``None``: before any)."""
        if store in self._staged_until:
            return self._staged_until[store]
        return self._stores[store].committed_offset()

    # -- catching up -----------------------------------------------------------------------------

    def stage(self, store: str, records: Iterator[Any]) -> None:
        """Stages ``store``'s changelog record batches (offsets rising from its ``offset``); a
        large catch-up spills to disk as any transaction does."""
        target = self._stores[store]
        for batch in records:
            if not batch.num_rows:
                continue
            stage_raw(target, stored_entries(batch, self._timestamped[store]))
            self._staged_until[store] = batch.column("offset")[-1].as_py()

    def stage_snapshot(self, store: str, history: StoreHistory, until: int) -> int | None:
        """Stages, for ``store`` built from scratch, the entries of its newest usable snapshot at
        or below offset ``until`` in ``history`` (fetched and checked by ``kstate.log.history``
        into a scratch directory beside the stores, then deleted) and returns its offset, where
        the changelog's records follow; ``None``: no snapshot, the changelog gives the state
        from its start. Raises ``ChangelogTruncatedError`` when neither gives it."""
        from kstate.log.history import snapshot_entries

        scratch = self.directory / f".{store}.loading-snapshot"
        entries = 0
        try:
            loaded = history.load_snapshot(until, str(scratch), SNAPSHOT_KINDS[self._kinds[store]])
            if loaded is None:
                return None
            for table in snapshot_entries(str(scratch), loaded, history.offset_key, self._timestamped[store]):
                stage_raw(self._stores[store], table)
                entries += table.num_rows
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self._staged_until[store] = loaded.offset
        log.info(
            "partition %d (%s): store %s starts from its snapshot at offset %d%s (%d entries) in %s; "
            "the changelog follows from offset %d",
            self.partition,
            self.application_id,
            store,
            loaded.offset,
            "" if loaded.batch_id is None else f" (batch {loaded.batch_id})",
            entries,
            history.snapshots.location,
            loaded.offset + 1,
        )
        return loaded.offset

    def stage_stored(self, store: str, entries: Any) -> None:
        """Stages ``entries`` (``key`` / ``value`` as the store holds them: an undo file) over
        what is staged."""
        stage_raw(self._stores[store], entries)

    def discard(self) -> None:
        """Drops everything staged since the last commit."""
        for store in self._stores.values():
            native_store(store).recover(None)
        self._staged_until.clear()

    def commit(self, entry: BatchEntry | None) -> None:
        """Commits every store at ``entry``'s offset (what is staged must reach it) and records
        ``entry`` as the copy's: the copy now holds its state."""
        offsets = {} if entry is None else entry.offsets
        for name, store in self._stores.items():
            offset = offsets.get(name)
            if offset != store.committed_offset() or self._staged_until.get(name) is not None:
                store.commit(changelog_offset=offset)
                native = native_store(store)
                if isinstance(native, _core.KeyValueStore):
                    native.flush_memtables_past(READ_MEMTABLE_BYTES)
        self._staged_until.clear()
        recorded = {
            "position": None if entry is None else entry.position,
            "entry": None if entry is None else json.loads(entry.to_bytes()),
        }
        written = self.directory / f"{ENTRY_FILE}.tmp"
        written.write_text(json.dumps(recorded))
        os.replace(written, self.directory / ENTRY_FILE)
        self.entry, self.complete = entry, True

    # -- reading ---------------------------------------------------------------------------------

    def view(self, store: str) -> Any:
        """A read-committed view of ``store`` (safe from any thread while records are staged)."""
        view = self._views.get(store)
        if view is None:
            view = self._views[store] = self._stores[store].read_only(read_committed=True)
        return view

    def close(self) -> None:
        self._views.clear()
        for store in self._stores.values():
            store.close()
        self._stores.clear()


def copy_directories(partition_dir: Path) -> list[Path]:
    """The copies of a partition, oldest first."""
    if not partition_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in partition_dir.iterdir() if (m := _COPY_NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def next_copy_directory(partition_dir: Path) -> Path:
    """Where the next copy of a partition is built."""
    existing = copy_directories(partition_dir)
    number = int(_COPY_NAME.match(existing[-1].name).group(1)) + 1 if existing else 0  # type: ignore[union-attr]
    return partition_dir / f"copy-{number}"


def served_copy_directory(partition_dir: Path) -> Path:
    """The copy a partition serves: the newest with an ``entry.json`` (a copy is built up to its
    first entry before it replaces the one before); the others are deleted."""
    copies = copy_directories(partition_dir)
    recorded = [p for p in copies if (p / ENTRY_FILE).exists()]
    served = recorded[-1] if recorded else next_copy_directory(partition_dir)
    for path in copies:
        if path != served:
            delete_copy(path)
    return served


def delete_copy(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)

"""``KeyValueStore``: a transactional key-value store on RocksDB (or in memory).

Writes are staged and readable at once; ``commit(changelog_offset)`` applies them, with the offset,
in one atomic RocksDB write; ``recover()`` discards what was never committed (KIP-892). The
on-disk layout is Kafka Streams' (``<task_dir>/rocksdb/<name>``, KIP-1035 ``offsets`` family).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from kstate import _core, arrow_numbers
from kstate.config import DURABILITY_CHANGELOG, DURABILITY_WAL, ChangelogConfig, StoreConfig
from kstate.errors import InvalidArgumentError
from kstate.lazy_logger import LazyLogger
from kstate.serdes import BytesSerde, StringSerde
from kstate.store_lifecycle import StoreLifecycle, Unopened, native_store, progress_logger
from kstate.store_reads import KeyValueReads, is_arrow

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from kstate.log.remote import RemoteChangelog
    from kstate.serdes import Serde
    from kstate.suppliers import KeyValueBytesStoreSupplier

log = LazyLogger("kstate.store")


class ReadOnlyKeyValueStore(KeyValueReads):
    """Reads of a store without its writes. ``read_committed`` views see only committed state and
    may be used from another thread while the writer works (interactive queries)."""

    def __init__(self, store: KeyValueStore, read_committed: bool):
        self.name = store.name
        self.read_committed = read_committed
        self._key_serde = store._key_serde
        self._value_serde = store._value_serde
        self._store = store
        self._reader = native_store(store).read_committed_view() if read_committed else native_store(store)

    def _value_of(self, stored: bytes) -> Any:
        return self._store._value_of(stored)

    def _packs_values(self) -> bool:
        return self._store._packs_values()

    def _stored_numbers(self) -> Any:
        return self._store._stored_numbers()


class KeyValueStore(StoreLifecycle, KeyValueReads):
    """A key-value store. Build one with ``Stores.key_value_store_builder(...).build()``, then
    ``init(task_dir)``; or use it as a context manager after ``init``."""

    def __init__(
        self,
        supplier: KeyValueBytesStoreSupplier,
        key_serde: Serde,
        value_serde: Serde,
        config: Mapping[str, Any] | None = None,
        logging: Mapping[str, Any] | None = None,
    ):
        self.name = supplier.name
        self._supplier = supplier
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._config = StoreConfig.parse(config)
        self._logging = ChangelogConfig.parse(logging) if logging is not None else None
        self._reader: Any = Unopened(self.name)
        self._task_dir: str | None = None
        self._remote: RemoteChangelog | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def _stores_timestamps(self) -> bool:
        return self._supplier.timestamped

    @property
    def durability(self) -> str:
        """``statestore.durability`` (``kstate.config.DURABILITIES``). Unless set: ``"changelog"``
        for a transactional store with a changelog (``with_logging_enabled``), as Kafka Streams'
        RocksDB stores run (after a kill it restores the commits it lost from there on open),
        ``"wal"`` for any other."""
        if self._config.durability is not None:
            return self._config.durability
        return DURABILITY_CHANGELOG if self.logged and self.transactional else DURABILITY_WAL

    def init(
        self, task_dir: str | Path, *, partition: int | None = None, application_id: str | None = None
    ) -> KeyValueStore:
        """Open the store under ``task_dir`` (Kafka layout: ``<state.dir>/<application.id>/<sub>_<partition>``).

        The changelog this store commits offsets for is ``<application.id>-<name>-changelog``,
        partition ``partition``; both default from the task directory's path. Opening finishes a
        spilled commit a crash interrupted, discards uncommitted writes a crash left behind, and
        restores from the changelog (if logged) what the store lacks.
        """
        self._open(task_dir, partition, application_id)
        return self

    def _local_paths(self) -> list[str]:
        """The store's RocksDB directory and its spill directory."""
        assert self._task_dir is not None
        rocksdb = os.path.join(self._task_dir, "rocksdb")
        return [os.path.join(rocksdb, self.name), os.path.join(rocksdb, f".{self.name}.uncommitted")]

    def _snapshot_target(self) -> tuple[str, str] | None:
        """Snapshots hold the RocksDB directory of a persistent transactional store."""
        if not self.persistent or not self.transactional:
            return None
        return "key-value", self._local_paths()[0]

    def durable_offset(self) -> int | None:
        """The committed offset a crash now would reopen at: ``committed_offset()`` with the
        ``"wal"`` durability; with ``"changelog"`` that of the last commit RocksDB flushed (older
        while commits wait in memtables; a clean ``close`` flushes them)."""
        return self._reader.durable_offset()

    def _open_local_state(self) -> None:
        if not self.persistent:
            self._reader = _core.KeyValueStore.open_in_memory(
                self.name,
                self.transactional,
                self._offset_key,
                self._supplier.ttl_ms,
                self._supplier.ttl_clock == "wall_clock",
            )
            self._bind_raw_calls()
            return
        path, spill = self._local_paths()
        native, found = _core.KeyValueStore.open_rocksdb(
            self.name,
            path,
            spill,
            self._supplier.timestamped,
            self.transactional,
            self._config.uncommitted_max_bytes,
            self._config.cache_max_bytes,
            self._offset_key,
            progress_logger(f"finishing commit of {self.name}"),
            self._supplier.ttl_ms,
            self._supplier.ttl_clock == "wall_clock",
            memory_max_bytes=self._config.memory_max_bytes,
            rocksdb_config=self._config.rocksdb_options(self.name),
            durability=self.durability,
        )
        self._reader = native
        self._bind_raw_calls()
        if found["upgrade_mode"]:
            log.info("Opening store %s in upgrade mode: legacy values migrate on access", self.name)
        if found["unclean_shutdown"]:
            log.warning("Store %s was not closed cleanly; its offset was dropped so it is restored", self.name)
        if found["unflushed_commits_lost"] and not self._opening_snapshot:
            log.warning(
                "Store %s was not closed cleanly: with %s durability its commits since the last flush "
                "are lost and it reopens at committed offset %s, %s",
                self.name,
                DURABILITY_CHANGELOG,
                native.committed_offset(),
                "restored from its changelog"
                if self.logged
                else "possibly older than its last commit: restore from there",
            )
        if found["finished_spilled_commit"] is not None:
            log.info(
                "Store %s: finished a commit interrupted by a crash (%d writes)",
                self.name,
                found["finished_spilled_commit"],
            )
        if found["discarded_spill"]:
            log.info("Store %s: discarded uncommitted writes a crash left on disk", self.name)

    def _bind_raw_calls(self) -> None:
        # With bytes serdes there is nothing to convert, so the hottest calls go straight to the
        # native store (it raises the same typed errors for None or non-bytes arguments).
        if self._raw_bytes():
            self.get = self._reader.get
            self.put = self._reader.put

    # -- transactions ----------------------------------------------------------------------------

    def compact(self) -> None:
        """Compact the RocksDB data now. With a TTL, expired values leave the disk."""
        self._reader.compact()

    def read_only(self, read_committed: bool = True) -> ReadOnlyKeyValueStore:
        """A read-only view; with ``read_committed`` it ignores uncommitted writes and is safe to
        use from other threads."""
        return ReadOnlyKeyValueStore(self, read_committed)

    # -- writes ----------------------------------------------------------------------------------

    def _stored(self, value: Any) -> bytes | None:
        return self._value_serde.serialize(value)

    def put(self, key: Any, value: Any) -> None:
        """Write ``value`` for ``key``; ``None`` deletes."""
        self._reader.put(self._key_bytes(key), self._stored(value))

    def put_if_absent(self, key: Any, value: Any) -> Any:
        """Write unless ``key`` has a value; returns the existing value (``None`` if written)."""
        stored = self._stored(value)
        if stored is None:
            raise InvalidArgumentError("put_if_absent needs a value, got None")
        existing = self._reader.put_if_absent(self._key_bytes(key), stored)
        return None if existing is None else self._value_of(existing)

    def put_all(self, entries: Any, values: Any = None) -> None:
        """Write many entries in one call: an iterable of ``(key, value)`` pairs, a dict, or two
        sequences / Arrow arrays ``put_all(keys, values)``. All or nothing: one entry refused
        (a bad key or value) writes none, so the whole input is taken in before anything is
        written; feed a stream larger than memory in batches."""
        native = self._reader
        if values is None:
            keys, vals = keys_and_values(entries.items() if isinstance(entries, Mapping) else entries)
        else:
            if is_arrow(entries) and is_arrow(values) and self._put_all_packed(native, entries, values):
                return
            keys = entries.to_pylist() if is_arrow(entries) else entries
            vals = values.to_pylist() if is_arrow(values) else values
        if self._raw_bytes():
            native.put_all(keys, vals)
            return
        stored = self._stored
        native.put_all([self._key_bytes(k) for k in keys], [stored(v) for v in vals])

    def _put_all_packed(self, native: Any, keys: Any, values: Any) -> bool:
        import pyarrow as pa

        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if len(keys) != len(values):
            raise InvalidArgumentError(f"put_all got {len(keys)} keys and {len(values)} values")
        value_serde_packs = (isinstance(self._value_serde, BytesSerde) and pa.types.is_binary(values.type)) or (
            isinstance(self._value_serde, StringSerde) and pa.types.is_string(values.type)
        )
        numbers = self._stored_numbers()
        if numbers is not None and self._packs_keys(keys.type) and arrow_numbers.is_number_type(values.type):
            native.put_all_packed(len(keys), _column(keys), arrow_numbers.to_column(values, numbers))
            return True
        if not (self._packs_keys(keys.type) and self._packs_values() and value_serde_packs):
            return False

        native.put_all_packed(len(keys), _column(keys), _column(values))
        return True

    def delete(self, key: Any) -> Any:
        """Delete ``key``; returns the value it had."""
        old = self._reader.delete(self._key_bytes(key))
        return None if old is None else self._value_of(old)


def _column(arr: Any) -> tuple:
    """An Arrow binary/string array as ``put_all_packed`` takes it."""
    import pyarrow as pa

    validity, offsets, data = arr.buffers()
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    return (
        offsets.to_pybytes(),
        data.to_pybytes() if data is not None else b"",
        validity.to_pybytes() if validity is not None else None,
        arr.offset,
        large,
    )


def keys_and_values(pairs: Iterable[tuple[Any, Any]]) -> tuple[list, list]:
    """The keys and the values of ``(key, value)`` pairs, as two lists (for ``put_all``)."""
    keys, values = [], []
    for k, v in pairs:
        keys.append(k)
        values.append(v)
    return keys, values

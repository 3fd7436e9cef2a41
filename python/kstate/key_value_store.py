"""``KeyValueStore``: a transactional key-value store on RocksDB (or in memory).

Writes are staged and readable at once; ``commit(changelog_offset)`` applies them, with the offset,
in one atomic RocksDB write; ``recover()`` discards what was never committed (KIP-892). The
on-disk layout is Kafka Streams' (``<task_dir>/rocksdb/<name>``, KIP-1035 ``offsets`` family).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, starmap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from kstate import _core, arrow_numbers
from kstate.config import ChangelogConfig, StoreConfig
from kstate.errors import InvalidArgumentError
from kstate.log.remote import RemoteChangelog
from kstate.serdes import BytesSerde, Serde, StringSerde, key_bytes
from kstate.store_lifecycle import StoreLifecycle, Unopened, progress_logger

if TYPE_CHECKING:
    from kstate.stores import KeyValueBytesStoreSupplier

log = logging.getLogger("kstate.store")


class KeyValue(NamedTuple):
    """One entry of an iterator (Kafka's ``KeyValue``)."""

    key: Any
    value: Any


def _is_arrow(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyarrow") and hasattr(obj, "type")


class KeyValueIterator:
    """Iterator over store entries in key order (or reverse). Use as a context manager or call
    ``close()`` when done early; once its store is closed it raises ``StoreClosedError`` (after
    the rows of the chunk it already read, at most 2,048)."""

    __slots__ = ("_native", "_decode", "_rows")

    def __init__(self, native: _core.RangeIterator, decode: Callable[[bytes, bytes | None], Any] | None = None):
        # Rows come in native chunks (lists of finished rows) that Python's own iterators walk,
        # so a ``for`` loop over ``iter(self)`` makes no call into the binding per row; ``decode``
        # (serdes other than bytes) turns stored bytes into the entry as each row is taken.
        self._native = native
        self._decode = decode
        rows = chain.from_iterable(iter(native.next_chunk, None))
        self._rows: Iterator[Any] = rows if decode is None else starmap(decode, rows)

    def __iter__(self) -> Iterator[Any]:
        return self._rows

    def __next__(self) -> Any:
        return next(self._rows)

    def peek_next_key(self) -> Any:
        """The key ``next()`` would return, or ``None`` at the end."""
        key = self._native.peek_next_key()
        return key if key is None or self._decode is None else self._decode(key, None)

    def close(self) -> None:
        self._native.close()
        self._rows = iter(())

    def __enter__(self) -> KeyValueIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Reads:
    """Read operations shared by a store and its read-only views. ``_reader`` is the native store
    or view; subclasses provide ``_key_bytes`` and ``_value_of``."""

    _reader: Any
    _key_serde: Serde
    _value_serde: Serde

    def _key_bytes(self, key: Any) -> bytes:
        return key_bytes(self._key_serde, key)

    def _value_of(self, stored: bytes) -> Any:
        return self._value_serde.deserialize(stored)

    def _entry(self, key: bytes, stored: bytes | None) -> Any:
        k = self._key_serde.deserialize(key)
        return k if stored is None else KeyValue(k, self._value_of(stored))

    name: str

    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``."""
        stored = self._reader.get(self._key_bytes(key))
        return None if stored is None else self._value_of(stored)

    def get_many(self, keys: Any) -> Any:
        """Values of many keys in one call: a list for a list, an Arrow array for an Arrow array."""
        reader = self._reader
        if _is_arrow(keys):
            return self._get_many_arrow(reader, keys)
        if self._raw_bytes():
            return reader.get_many(keys)
        stored = reader.get_many([self._key_bytes(k) for k in keys])
        value_of = self._value_of
        return [None if s is None else value_of(s) for s in stored]

    def _get_many_arrow(self, reader: Any, keys: Any) -> Any:
        import pyarrow as pa

        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        numbers = self._stored_numbers()
        if not (self._packs_keys(keys.type) and (self._packs_values() or numbers is not None)):
            return pa.array(self.get_many(keys.to_pylist()))
        large = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
        validity, offsets, data = keys.buffers()
        out_validity, out_offsets, out_data, nulls = reader.get_many_packed(
            offsets.to_pybytes(),
            data.to_pybytes() if data is not None else b"",
            validity.to_pybytes() if validity is not None else None,
            keys.offset,
            len(keys),
            large,
        )
        if numbers is not None:
            return arrow_numbers.from_packed((out_validity, out_offsets, out_data, nulls), len(keys), large, numbers)
        if isinstance(self._value_serde, StringSerde):
            out_type = pa.large_string() if large else pa.string()
        else:
            out_type = pa.large_binary() if large else pa.binary()
        buffers = [pa.py_buffer(out_validity), pa.py_buffer(out_offsets), pa.py_buffer(out_data)]
        return pa.Array.from_buffers(out_type, len(keys), buffers, null_count=nulls)

    def _packs_keys(self, arrow_type: Any) -> bool:
        import pyarrow as pa

        t = arrow_type
        if isinstance(self._key_serde, BytesSerde):
            return pa.types.is_binary(t) or pa.types.is_large_binary(t)
        if isinstance(self._key_serde, StringSerde):
            return pa.types.is_string(t) or pa.types.is_large_string(t)
        return False

    def _packs_values(self) -> bool:
        """Whether stored value bytes are the serialized value itself (no timestamp to strip)."""
        return isinstance(self._value_serde, (BytesSerde, StringSerde))

    def _stored_numbers(self) -> Any:
        """The numpy dtype of stored values that are 8-byte big-endian numbers (``int64`` /
        ``float64`` serdes, no timestamp), which the Arrow paths convert in bulk; else ``None``."""
        return arrow_numbers.stored_dtype(self._value_serde)

    def _raw_bytes(self) -> bool:
        """Whether keys and values are stored exactly as given (bytes serdes, no timestamps)."""
        return type(self._key_serde) is BytesSerde and type(self._value_serde) is BytesSerde and self._packs_values()

    def range(self, from_key: Any, to_key: Any) -> KeyValueIterator:
        """Entries with ``from_key <= key <= to_key`` in serialized-key order; ``None`` is unbounded."""
        return self._iterate(from_key, to_key, reverse=False)

    def reverse_range(self, from_key: Any, to_key: Any) -> KeyValueIterator:
        return self._iterate(from_key, to_key, reverse=True)

    def all(self) -> KeyValueIterator:
        return self._iterate(None, None, reverse=False)

    def reverse_all(self) -> KeyValueIterator:
        return self._iterate(None, None, reverse=True)

    def prefix_scan(self, prefix: Any, prefix_serde: Any = None) -> KeyValueIterator:
        """Entries whose serialized key starts with the serialized ``prefix``."""
        from kstate.serdes import serde_for

        serde = self._key_serde if prefix_serde is None else serde_for(prefix_serde)
        raw = serde.serialize(prefix)
        if raw is None:
            raise InvalidArgumentError("prefix cannot be None")
        if self._raw_bytes():
            return KeyValueIterator(self._reader.prefix_scan(raw, False, KeyValue))
        return KeyValueIterator(self._reader.prefix_scan(raw), self._entry)

    def _iterate(self, from_key: Any, to_key: Any, reverse: bool) -> KeyValueIterator:
        lower = None if from_key is None else self._key_bytes(from_key)
        upper = None if to_key is None else self._key_bytes(to_key)
        if lower is not None and upper is not None and lower > upper:
            log.warning("range with from_key > to_key returns no entries (serialized keys compared as bytes)")
        if self._raw_bytes():
            return KeyValueIterator(self._reader.range(lower, upper, reverse, KeyValue))
        return KeyValueIterator(self._reader.range(lower, upper, reverse), self._entry)

    def approximate_num_entries(self) -> int:
        """An estimate of the number of entries (RocksDB's ``estimate-num-keys`` plus staged writes)."""
        return self._reader.approximate_num_entries()

    def __iter__(self) -> Iterator[Any]:
        return self.all()


class ReadOnlyKeyValueStore(_Reads):
    """Reads of a store without its writes. ``read_committed`` views see only committed state and
    may be used from another thread while the writer works (interactive queries)."""

    def __init__(self, store: KeyValueStore, read_committed: bool):
        self.name = store.name
        self.read_committed = read_committed
        self._key_serde = store._key_serde
        self._value_serde = store._value_serde
        self._store = store
        self._reader = store._open_native().read_committed_view() if read_committed else store._open_native()

    def _value_of(self, stored: bytes) -> Any:
        return self._store._value_of(stored)

    def _packs_values(self) -> bool:
        return self._store._packs_values()

    def _stored_numbers(self) -> Any:
        return self._store._stored_numbers()


class KeyValueStore(StoreLifecycle, _Reads):
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
        self.task_dir: Path | None = None
        self._remote: RemoteChangelog | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def _stores_timestamps(self) -> bool:
        return self._supplier.timestamped

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

    def _local_paths(self) -> list[Path]:
        """The store's RocksDB directory and its spill directory."""
        rocksdb = self.task_dir / "rocksdb"
        return [rocksdb / self.name, rocksdb / f".{self.name}.uncommitted"]

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
            str(path),
            str(spill),
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
        )
        self._reader = native
        self._bind_raw_calls()
        if found["upgrade_mode"]:
            log.info("Opening store %s in upgrade mode: legacy values migrate on access", self.name)
        if found["unclean_shutdown"]:
            log.warning("Store %s was not closed cleanly; its offset was dropped so it is restored", self.name)
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
        sequences / Arrow arrays ``put_all(keys, values)``."""
        native = self._reader
        if values is None:
            keys, vals = _entries(entries.items() if isinstance(entries, Mapping) else entries)
        else:
            if _is_arrow(entries) and _is_arrow(values) and self._put_all_packed(native, entries, values):
                return
            keys = entries.to_pylist() if _is_arrow(entries) else entries
            vals = values.to_pylist() if _is_arrow(values) else values
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


def _entries(pairs: Iterable[tuple[Any, Any]]) -> tuple[list, list]:
    keys, values = [], []
    for k, v in pairs:
        keys.append(k)
        values.append(v)
    return keys, values

"""``Stores``: factories for store suppliers and builders, named as in Kafka Streams."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.key_value_store import KeyValueStore
from kstate.serdes import serde_for
from kstate.timestamped_key_value_store import TimestampedKeyValueStore

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _LEGAL_NAME.match(name) or name in (".", ".."):
        raise InvalidArgumentError(
            f"store name {name!r} is not legal: use 1-249 of a-z A-Z 0-9 . _ - (Kafka's topic name rule)"
        )
    return name


@dataclass(frozen=True)
class KeyValueBytesStoreSupplier:
    """What kind of store to build: persistent (RocksDB) or in memory, plain or timestamped."""

    name: str
    persistent: bool
    timestamped: bool
    transactional: bool = True

    def metrics_scope(self) -> str:
        return "rocksdb" if self.persistent else "in-memory"


@dataclass(frozen=True)
class StoreBuilder:
    """Builds a store from a supplier and serdes; ``with_config`` adds store configs."""

    supplier: KeyValueBytesStoreSupplier
    key_serde: Any
    value_serde: Any
    timestamped: bool
    config: Mapping[str, Any] = field(default_factory=dict)
    logging: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.supplier.name

    def with_config(self, config: Mapping[str, Any]) -> StoreBuilder:
        return replace(self, config={**self.config, **config})

    def with_logging_enabled(self, config: Mapping[str, Any] | None = None) -> StoreBuilder:
        """Back the store with a changelog (Kafka's ``withLoggingEnabled``).

        ``config`` holds Kafka topic configs for the changelog (``segment.bytes``,
        ``retention.ms``, ``cleanup.policy`` (default ``compact``), ``compression.type``, ...) and
        ``changelog.dir``, the log directory (default: ``<state.dir>/changelog``). A logged
        store's ``commit()`` publishes to the changelog first and returns the changelog offset;
        opening restores whatever the store lacks.

        ``changelog.dir`` may be a URL (``s3://bucket/prefix``, ``file:///mnt/shared``, any
        fsspec filesystem; ``changelog.storage.options`` holds the filesystem's options): the
        changelog then lives there, shared by every machine, as one immutable object per commit
        (first writer wins), and ``<state.dir>/changelog-cache`` caches it (``kstate.log.remote``).
        """
        return replace(self, logging=dict(config or {}))

    def with_logging_disabled(self) -> StoreBuilder:
        return replace(self, logging=None)

    def build(self) -> KeyValueStore:
        store_class = TimestampedKeyValueStore if self.timestamped else KeyValueStore
        return store_class(
            self.supplier, serde_for(self.key_serde), serde_for(self.value_serde), self.config, self.logging
        )


class Stores:
    """Factory methods, as in Kafka Streams' ``Stores``."""

    @staticmethod
    def persistent_key_value_store(name: str, transactional: bool = True) -> KeyValueBytesStoreSupplier:
        """A RocksDB store with plain values in the ``default`` column family."""
        return KeyValueBytesStoreSupplier(_check_name(name), True, False, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store(name: str, transactional: bool = True) -> KeyValueBytesStoreSupplier:
        """A RocksDB store with ``ValueAndTimestamp`` values in ``keyValueWithTimestamp``."""
        return KeyValueBytesStoreSupplier(_check_name(name), True, True, transactional)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        return KeyValueBytesStoreSupplier(_check_name(name), False, False)

    @staticmethod
    def in_memory_timestamped_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        return KeyValueBytesStoreSupplier(_check_name(name), False, True)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``KeyValueStore``. Serdes: a serde object, a type, a name, or ``None`` (bytes)."""
        if supplier.timestamped:
            raise InvalidArgumentError(
                f"{supplier.name} is a timestamped supplier; use Stores.timestamped_key_value_store_builder"
            )
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=False)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``TimestampedKeyValueStore``. Over a plain supplier the store keeps the plain
        on-disk format and reports timestamp -1, as Kafka's adapter does."""
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=True)

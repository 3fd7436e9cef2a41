"""``Stores``: factories for store suppliers and builders, named as in Kafka Streams; ``StoreBuilder``
builds a store from its supplier (``kstate.suppliers``) and serdes."""

from __future__ import annotations

from collections.abc import Mapping

from kstate.errors import InvalidArgumentError
from kstate.frozen_record import FrozenRecord
from kstate.key_value_store import KeyValueStore
from kstate.serdes import serde_for
from kstate.session_store import SessionStore
from kstate.suppliers import (
    KeyValueBytesStoreSupplier,
    SessionBytesStoreSupplier,
    WindowBytesStoreSupplier,
    check_name,
    check_ttl,
    session_supplier,
    window_supplier,
)
from kstate.timestamped_key_value_store import TimestampedKeyValueStore
from kstate.timestamped_session_store import TimestampedSessionStore
from kstate.timestamped_window_store import TimestampedWindowStore
from kstate.window_store import WindowStore

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any

    from kstate.suppliers import AnySupplier


class StoreBuilder(FrozenRecord):
    """Builds a store from a supplier and serdes; ``with_config`` adds store configs."""

    supplier: AnySupplier
    key_serde: Any
    value_serde: Any
    timestamped: bool
    config: Mapping[str, Any]
    logging: Mapping[str, Any] | None

    __match_args__ = ("supplier", "key_serde", "value_serde", "timestamped", "config", "logging")

    def __init__(
        self,
        supplier: AnySupplier,
        key_serde: Any,
        value_serde: Any,
        timestamped: bool,
        config: Mapping[str, Any] | None = None,
        logging: Mapping[str, Any] | None = None,
    ):
        object.__setattr__(self, "supplier", supplier)
        object.__setattr__(self, "key_serde", key_serde)
        object.__setattr__(self, "value_serde", value_serde)
        object.__setattr__(self, "timestamped", timestamped)
        object.__setattr__(self, "config", {} if config is None else config)
        object.__setattr__(self, "logging", logging)

    @property
    def name(self) -> str:
        return self.supplier.name

    def _with(self, config: Mapping[str, Any], logging: Mapping[str, Any] | None) -> StoreBuilder:
        """This builder with ``config`` and ``logging`` instead of its own."""
        return type(self)(self.supplier, self.key_serde, self.value_serde, self.timestamped, config, logging)

    def with_config(self, config: Mapping[str, Any]) -> StoreBuilder:
        return self._with({**self.config, **config}, self.logging)

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
        (first writer wins), and ``<state.dir>/changelog-cache`` caches what the store has not
        committed yet (``kstate.log.remote``).
        """
        return self._with(self.config, dict(config or {}))

    def with_logging_disabled(self) -> StoreBuilder:
        return self._with(self.config, None)

    def build(self) -> Any:
        """The store: a (timestamped) key-value, window or session store, as the supplier says."""
        key_serde, value_serde = serde_for(self.key_serde), serde_for(self.value_serde)
        if isinstance(self.supplier, WindowBytesStoreSupplier):
            store_class: type = TimestampedWindowStore if self.timestamped else WindowStore
        elif isinstance(self.supplier, SessionBytesStoreSupplier):
            store_class = TimestampedSessionStore if self.timestamped else SessionStore
        else:
            store_class = TimestampedKeyValueStore if self.timestamped else KeyValueStore
        return store_class(self.supplier, key_serde, value_serde, self.config, self.logging)


def _check_supplier(supplier: Any, kind: type, builder: str, timestamped_builder: str | None = None) -> None:
    if not isinstance(supplier, kind):
        raise InvalidArgumentError(f"{builder} needs a {kind.__name__}, got {supplier!r}")
    if timestamped_builder and supplier.timestamped:
        raise InvalidArgumentError(f"{supplier.name} is a timestamped supplier; use Stores.{timestamped_builder}")


class Stores:
    """Factory methods, as in Kafka Streams' ``Stores``."""

    @staticmethod
    def persistent_key_value_store(name: str, transactional: bool = True) -> KeyValueBytesStoreSupplier:
        """A RocksDB store with plain values in the ``default`` column family."""
        return KeyValueBytesStoreSupplier(check_name(name), True, False, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store(
        name: str, transactional: bool = True, *, ttl_ms: int | None = None, ttl_clock: str = "stream_time"
    ) -> KeyValueBytesStoreSupplier:
        """A RocksDB store with ``ValueAndTimestamp`` values in ``keyValueWithTimestamp``. With
        ``ttl_ms``, values ``ttl_ms`` or more behind ``ttl_clock`` (``"stream_time"``, the largest
        value timestamp seen, or ``"wall_clock"``) are invisible at once and dropped from disk by
        RocksDB compactions."""
        check_ttl(ttl_ms, ttl_clock)
        return KeyValueBytesStoreSupplier(check_name(name), True, True, transactional, ttl_ms, ttl_clock)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        return KeyValueBytesStoreSupplier(check_name(name), False, False)

    @staticmethod
    def in_memory_timestamped_key_value_store(
        name: str, *, ttl_ms: int | None = None, ttl_clock: str = "stream_time"
    ) -> KeyValueBytesStoreSupplier:
        check_ttl(ttl_ms, ttl_clock)
        return KeyValueBytesStoreSupplier(check_name(name), False, True, True, ttl_ms, ttl_clock)

    @staticmethod
    def persistent_window_store(
        name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False, transactional: bool = True
    ) -> WindowBytesStoreSupplier:
        """A window store of RocksDB segments (``<task_dir>/<name>/<name>.<start>``), plain values."""
        return window_supplier(name, True, False, retention_ms, window_size_ms, retain_duplicates, transactional)

    @staticmethod
    def persistent_timestamped_window_store(
        name: str,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
        transactional: bool = True,
        *,
        ttl_ms: int | None = None,
        ttl_clock: str = "stream_time",
    ) -> WindowBytesStoreSupplier:
        """A window store of timestamped RocksDB segments; TTL as for key-value stores."""
        return window_supplier(
            name, True, True, retention_ms, window_size_ms, retain_duplicates, transactional, ttl_ms, ttl_clock
        )

    @staticmethod
    def in_memory_window_store(
        name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False
    ) -> WindowBytesStoreSupplier:
        return window_supplier(name, False, False, retention_ms, window_size_ms, retain_duplicates)

    @staticmethod
    def in_memory_timestamped_window_store(
        name: str,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
        *,
        ttl_ms: int | None = None,
        ttl_clock: str = "stream_time",
    ) -> WindowBytesStoreSupplier:
        return window_supplier(
            name, False, True, retention_ms, window_size_ms, retain_duplicates, True, ttl_ms, ttl_clock
        )

    @staticmethod
    def persistent_session_store(name: str, retention_ms: int, transactional: bool = True) -> SessionBytesStoreSupplier:
        """A session store of RocksDB segments, plain aggregates."""
        return session_supplier(name, True, False, retention_ms, transactional)

    @staticmethod
    def persistent_timestamped_session_store(
        name: str, retention_ms: int, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of timestamped RocksDB segments (the seed's ``SessionWithTimestampStore``)."""
        return session_supplier(name, True, True, retention_ms, transactional)

    @staticmethod
    def in_memory_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        return session_supplier(name, False, False, retention_ms)

    @staticmethod
    def in_memory_timestamped_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        return session_supplier(name, False, True, retention_ms)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``KeyValueStore``. Serdes: a serde object, a type, a name, or ``None`` (bytes)."""
        _check_supplier(
            supplier, KeyValueBytesStoreSupplier, "key_value_store_builder", "timestamped_key_value_store_builder"
        )
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=False)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``TimestampedKeyValueStore``. Over a plain supplier the store keeps the plain
        on-disk format and reports timestamp -1, as Kafka's adapter does."""
        _check_supplier(supplier, KeyValueBytesStoreSupplier, "timestamped_key_value_store_builder")
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=True)

    @staticmethod
    def window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``WindowStore``."""
        _check_supplier(supplier, WindowBytesStoreSupplier, "window_store_builder", "timestamped_window_store_builder")
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=False)

    @staticmethod
    def timestamped_window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``TimestampedWindowStore`` (over a plain supplier: plain format, timestamp -1)."""
        _check_supplier(supplier, WindowBytesStoreSupplier, "timestamped_window_store_builder")
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=True)

    @staticmethod
    def session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``SessionStore``."""
        _check_supplier(
            supplier, SessionBytesStoreSupplier, "session_store_builder", "timestamped_session_store_builder"
        )
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=False)

    @staticmethod
    def timestamped_session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> StoreBuilder:
        """A builder of ``TimestampedSessionStore``."""
        _check_supplier(supplier, SessionBytesStoreSupplier, "timestamped_session_store_builder")
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=True)

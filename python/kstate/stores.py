"""``Stores``: factories for store suppliers and builders, named as in Kafka Streams."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

from kstate.errors import InvalidArgumentError
from kstate.key_value_store import KeyValueStore
from kstate.serdes import serde_for
from kstate.session_store import SessionStore
from kstate.timestamped_key_value_store import TimestampedKeyValueStore
from kstate.timestamped_session_store import TimestampedSessionStore
from kstate.timestamped_window_store import TimestampedWindowStore
from kstate.window_store import WindowStore

TTL_CLOCKS = ("stream_time", "wall_clock")
"""What a TTL is measured against: the largest value timestamp the store has seen, or the system clock."""

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _LEGAL_NAME.match(name) or name in (".", ".."):
        raise InvalidArgumentError(
            f"store name {name!r} is not legal: use 1-249 of a-z A-Z 0-9 . _ - (Kafka's topic name rule)"
        )
    return name


def _check_ms(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0 (ms), got {value!r}")
    return value


def _check_ttl(ttl_ms: Any, ttl_clock: Any) -> None:
    if ttl_ms is not None and (isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0):
        raise InvalidArgumentError(f"ttl_ms must be an int > 0 (ms) or None, got {ttl_ms!r}")
    if ttl_clock not in TTL_CLOCKS:
        raise InvalidArgumentError(f"ttl_clock must be one of {TTL_CLOCKS}, got {ttl_clock!r}")


def _segment_interval(retention_ms: int) -> int:
    """Kafka's ``Stores``: ``max(retention / 2, 60 s)``."""
    return max(retention_ms // 2, 60_000)


@dataclass(frozen=True)
class KeyValueBytesStoreSupplier:
    """What kind of store to build: persistent (RocksDB) or in memory, plain or timestamped.
    Timestamped stores may have a TTL: values ``ttl_ms`` or more behind ``ttl_clock`` expire."""

    name: str
    persistent: bool
    timestamped: bool
    transactional: bool = True
    ttl_ms: int | None = None
    ttl_clock: str = "stream_time"

    def metrics_scope(self) -> str:
        return "rocksdb" if self.persistent else "in-memory"


@dataclass(frozen=True)
class WindowBytesStoreSupplier:
    """A window store: retention and window size in ms, duplicates kept or not."""

    name: str
    persistent: bool
    timestamped: bool
    retention_ms: int
    window_size_ms: int
    retain_duplicates: bool = False
    transactional: bool = True
    ttl_ms: int | None = None
    ttl_clock: str = "stream_time"

    @property
    def segment_interval_ms(self) -> int:
        return _segment_interval(self.retention_ms)

    def metrics_scope(self) -> str:
        return "rocksdb-window" if self.persistent else "in-memory-window"


@dataclass(frozen=True)
class SessionBytesStoreSupplier:
    """A session store: retention in ms."""

    name: str
    persistent: bool
    timestamped: bool
    retention_ms: int
    transactional: bool = True
    ttl_ms: int | None = None
    ttl_clock: str = "stream_time"

    @property
    def segment_interval_ms(self) -> int:
        return _segment_interval(self.retention_ms)

    def metrics_scope(self) -> str:
        return "rocksdb-session" if self.persistent else "in-memory-session"


SegmentedBytesStoreSupplier = Union[WindowBytesStoreSupplier, SessionBytesStoreSupplier]
AnySupplier = Union[KeyValueBytesStoreSupplier, WindowBytesStoreSupplier, SessionBytesStoreSupplier]


def _window_supplier(
    name: str,
    persistent: bool,
    timestamped: bool,
    retention_ms: int,
    window_size_ms: int,
    retain_duplicates: bool,
    transactional: bool = True,
    ttl_ms: int | None = None,
    ttl_clock: str = "stream_time",
) -> WindowBytesStoreSupplier:
    retention, size = _check_ms("retention_ms", retention_ms), _check_ms("window_size_ms", window_size_ms)
    if size > retention:
        raise InvalidArgumentError(
            f"the retention period of window store {name} ({retention} ms) must be no smaller than its "
            f"window size ({size} ms)"
        )
    _check_ttl(ttl_ms, ttl_clock)
    return WindowBytesStoreSupplier(
        _check_name(name),
        persistent,
        timestamped,
        retention,
        size,
        bool(retain_duplicates),
        transactional,
        ttl_ms,
        ttl_clock,
    )


def _session_supplier(
    name: str,
    persistent: bool,
    timestamped: bool,
    retention_ms: int,
    transactional: bool = True,
    ttl_ms: int | None = None,
    ttl_clock: str = "stream_time",
) -> SessionBytesStoreSupplier:
    _check_ttl(ttl_ms, ttl_clock)
    return SessionBytesStoreSupplier(
        _check_name(name),
        persistent,
        timestamped,
        _check_ms("retention_ms", retention_ms),
        transactional,
        ttl_ms,
        ttl_clock,
    )


@dataclass(frozen=True)
class StoreBuilder:
    """Builds a store from a supplier and serdes; ``with_config`` adds store configs."""

    supplier: AnySupplier
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
        (first writer wins), and ``<state.dir>/changelog-cache`` caches what the store has not
        committed yet (``kstate.log.remote``).
        """
        return replace(self, logging=dict(config or {}))

    def with_logging_disabled(self) -> StoreBuilder:
        return replace(self, logging=None)

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
        return KeyValueBytesStoreSupplier(_check_name(name), True, False, transactional)

    @staticmethod
    def persistent_timestamped_key_value_store(
        name: str, transactional: bool = True, *, ttl_ms: int | None = None, ttl_clock: str = "stream_time"
    ) -> KeyValueBytesStoreSupplier:
        """A RocksDB store with ``ValueAndTimestamp`` values in ``keyValueWithTimestamp``. With
        ``ttl_ms``, values ``ttl_ms`` or more behind ``ttl_clock`` (``"stream_time"``, the largest
        value timestamp seen, or ``"wall_clock"``) are invisible at once and dropped from disk by
        RocksDB compactions."""
        _check_ttl(ttl_ms, ttl_clock)
        return KeyValueBytesStoreSupplier(_check_name(name), True, True, transactional, ttl_ms, ttl_clock)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        return KeyValueBytesStoreSupplier(_check_name(name), False, False)

    @staticmethod
    def in_memory_timestamped_key_value_store(
        name: str, *, ttl_ms: int | None = None, ttl_clock: str = "stream_time"
    ) -> KeyValueBytesStoreSupplier:
        _check_ttl(ttl_ms, ttl_clock)
        return KeyValueBytesStoreSupplier(_check_name(name), False, True, True, ttl_ms, ttl_clock)

    @staticmethod
    def persistent_window_store(
        name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False, transactional: bool = True
    ) -> WindowBytesStoreSupplier:
        """A window store of RocksDB segments (``<task_dir>/<name>/<name>.<start>``), plain values."""
        return _window_supplier(name, True, False, retention_ms, window_size_ms, retain_duplicates, transactional)

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
        return _window_supplier(
            name, True, True, retention_ms, window_size_ms, retain_duplicates, transactional, ttl_ms, ttl_clock
        )

    @staticmethod
    def in_memory_window_store(
        name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False
    ) -> WindowBytesStoreSupplier:
        return _window_supplier(name, False, False, retention_ms, window_size_ms, retain_duplicates)

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
        return _window_supplier(
            name, False, True, retention_ms, window_size_ms, retain_duplicates, True, ttl_ms, ttl_clock
        )

    @staticmethod
    def persistent_session_store(name: str, retention_ms: int, transactional: bool = True) -> SessionBytesStoreSupplier:
        """A session store of RocksDB segments, plain aggregates."""
        return _session_supplier(name, True, False, retention_ms, transactional)

    @staticmethod
    def persistent_timestamped_session_store(
        name: str, retention_ms: int, transactional: bool = True
    ) -> SessionBytesStoreSupplier:
        """A session store of timestamped RocksDB segments (the seed's ``SessionWithTimestampStore``)."""
        return _session_supplier(name, True, True, retention_ms, transactional)

    @staticmethod
    def in_memory_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        return _session_supplier(name, False, False, retention_ms)

    @staticmethod
    def in_memory_timestamped_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        return _session_supplier(name, False, True, retention_ms)

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

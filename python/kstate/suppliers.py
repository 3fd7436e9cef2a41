"""Store suppliers: what kind of store to build (persistent or in memory, plain or timestamped,
retention and TTL), checked as Kafka Streams' ``Stores`` checks them. The stores take their
supplier; ``kstate.stores`` builds stores from suppliers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Union

from kstate.errors import InvalidArgumentError

TTL_CLOCKS = ("stream_time", "wall_clock")
"""What a TTL is measured against: the largest value timestamp the store has seen, or the system clock."""

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _LEGAL_NAME.match(name) or name in (".", ".."):
        raise InvalidArgumentError(
            f"store name {name!r} is not legal: use 1-249 of a-z A-Z 0-9 . _ - (Kafka's topic name rule)"
        )
    return name


def check_ms(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0 (ms), got {value!r}")
    return value


def check_ttl(ttl_ms: Any, ttl_clock: Any) -> None:
    if ttl_ms is not None and (isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0):
        raise InvalidArgumentError(f"ttl_ms must be an int > 0 (ms) or None, got {ttl_ms!r}")
    if ttl_clock not in TTL_CLOCKS:
        raise InvalidArgumentError(f"ttl_clock must be one of {TTL_CLOCKS}, got {ttl_clock!r}")


def segment_interval(retention_ms: int) -> int:
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
        return segment_interval(self.retention_ms)

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
        return segment_interval(self.retention_ms)

    def metrics_scope(self) -> str:
        return "rocksdb-session" if self.persistent else "in-memory-session"


SegmentedBytesStoreSupplier = Union[WindowBytesStoreSupplier, SessionBytesStoreSupplier]
AnySupplier = Union[KeyValueBytesStoreSupplier, WindowBytesStoreSupplier, SessionBytesStoreSupplier]


def window_supplier(
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
    retention, size = check_ms("retention_ms", retention_ms), check_ms("window_size_ms", window_size_ms)
    if size > retention:
        raise InvalidArgumentError(
            f"the retention period of window store {name} ({retention} ms) must be no smaller than its "
            f"window size ({size} ms)"
        )
    check_ttl(ttl_ms, ttl_clock)
    return WindowBytesStoreSupplier(
        check_name(name),
        persistent,
        timestamped,
        retention,
        size,
        bool(retain_duplicates),
        transactional,
        ttl_ms,
        ttl_clock,
    )


def session_supplier(
    name: str,
    persistent: bool,
    timestamped: bool,
    retention_ms: int,
    transactional: bool = True,
    ttl_ms: int | None = None,
    ttl_clock: str = "stream_time",
) -> SessionBytesStoreSupplier:
    check_ttl(ttl_ms, ttl_clock)
    return SessionBytesStoreSupplier(
        check_name(name),
        persistent,
        timestamped,
        check_ms("retention_ms", retention_ms),
        transactional,
        ttl_ms,
        ttl_clock,
    )

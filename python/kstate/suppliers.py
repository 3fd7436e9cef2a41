"""Store suppliers: what kind of store to build (persistent or in memory, plain or timestamped,
retention and TTL), checked as Kafka Streams' ``Stores`` checks them. The stores take their
supplier; ``kstate.stores`` builds stores from suppliers."""

from __future__ import annotations

from kstate.errors import InvalidArgumentError
from kstate.frozen_record import FrozenRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, Union

TTL_CLOCKS = ("stream_time", "wall_clock")
"""What a TTL is measured against: the largest value timestamp the store has seen, or the system clock."""

_LEGAL_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def check_name(name: Any) -> str:
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= 249
        or not _LEGAL_NAME_CHARACTERS.issuperset(name)
        or name in (".", "..")
    ):
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


class KeyValueBytesStoreSupplier(FrozenRecord):
    """What kind of store to build: persistent (RocksDB) or in memory, plain or timestamped.
    Timestamped stores may have a TTL: values ``ttl_ms`` or more behind ``ttl_clock`` expire."""

    name: str
    persistent: bool
    timestamped: bool
    transactional: bool
    ttl_ms: int | None
    ttl_clock: str

    __match_args__ = ("name", "persistent", "timestamped", "transactional", "ttl_ms", "ttl_clock")

    def __init__(
        self,
        name: str,
        persistent: bool,
        timestamped: bool,
        transactional: bool = True,
        ttl_ms: int | None = None,
        ttl_clock: str = "stream_time",
    ):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "persistent", persistent)
        object.__setattr__(self, "timestamped", timestamped)
        object.__setattr__(self, "transactional", transactional)
        object.__setattr__(self, "ttl_ms", ttl_ms)
        object.__setattr__(self, "ttl_clock", ttl_clock)

    def metrics_scope(self) -> str:
        return "rocksdb" if self.persistent else "in-memory"


class WindowBytesStoreSupplier(FrozenRecord):
    """A window store: retention and window size in ms, duplicates kept or not."""

    name: str
    persistent: bool
    timestamped: bool
    retention_ms: int
    window_size_ms: int
    retain_duplicates: bool
    transactional: bool
    ttl_ms: int | None
    ttl_clock: str

    __match_args__ = (
        "name",
        "persistent",
        "timestamped",
        "retention_ms",
        "window_size_ms",
        "retain_duplicates",
        "transactional",
        "ttl_ms",
        "ttl_clock",
    )

    def __init__(
        self,
        name: str,
        persistent: bool,
        timestamped: bool,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
        transactional: bool = True,
        ttl_ms: int | None = None,
        ttl_clock: str = "stream_time",
    ):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "persistent", persistent)
        object.__setattr__(self, "timestamped", timestamped)
        object.__setattr__(self, "retention_ms", retention_ms)
        object.__setattr__(self, "window_size_ms", window_size_ms)
        object.__setattr__(self, "retain_duplicates", retain_duplicates)
        object.__setattr__(self, "transactional", transactional)
        object.__setattr__(self, "ttl_ms", ttl_ms)
        object.__setattr__(self, "ttl_clock", ttl_clock)

    @property
    def segment_interval_ms(self) -> int:
        return segment_interval(self.retention_ms)

    def metrics_scope(self) -> str:
        return "rocksdb-window" if self.persistent else "in-memory-window"


class SessionBytesStoreSupplier(FrozenRecord):
    """A session store: retention in ms."""

    name: str
    persistent: bool
    timestamped: bool
    retention_ms: int
    transactional: bool
    ttl_ms: int | None
    ttl_clock: str

    __match_args__ = ("name", "persistent", "timestamped", "retention_ms", "transactional", "ttl_ms", "ttl_clock")

    def __init__(
        self,
        name: str,
        persistent: bool,
        timestamped: bool,
        retention_ms: int,
        transactional: bool = True,
        ttl_ms: int | None = None,
        ttl_clock: str = "stream_time",
    ):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "persistent", persistent)
        object.__setattr__(self, "timestamped", timestamped)
        object.__setattr__(self, "retention_ms", retention_ms)
        object.__setattr__(self, "transactional", transactional)
        object.__setattr__(self, "ttl_ms", ttl_ms)
        object.__setattr__(self, "ttl_clock", ttl_clock)

    @property
    def segment_interval_ms(self) -> int:
        return segment_interval(self.retention_ms)

    def metrics_scope(self) -> str:
        return "rocksdb-session" if self.persistent else "in-memory-session"


if TYPE_CHECKING:
    SegmentedBytesStoreSupplier = Union[WindowBytesStoreSupplier, SessionBytesStoreSupplier]
    AnySupplier = Union[KeyValueBytesStoreSupplier, WindowBytesStoreSupplier, SessionBytesStoreSupplier]
else:

    def __getattr__(name: str) -> object:
        # The type aliases above, made when first asked for at run time: they need typing,
        # which a store's first use does without.
        if name not in ("SegmentedBytesStoreSupplier", "AnySupplier"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from typing import Union

        segmented = Union[WindowBytesStoreSupplier, SessionBytesStoreSupplier]
        globals().update(
            SegmentedBytesStoreSupplier=segmented, AnySupplier=Union[KeyValueBytesStoreSupplier, segmented]
        )
        return globals()[name]


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

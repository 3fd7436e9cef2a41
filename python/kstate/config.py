"""Store configuration: the Kafka Streams config names kstate honours, with kstate's defaults."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.frozen_record import FrozenRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any, Union

ENABLE_TRANSACTIONAL_STATESTORES = "enable.transactional.statestores"
STATESTORE_UNCOMMITTED_MAX_BYTES = "statestore.uncommitted.max.bytes"
STATESTORE_CACHE_MAX_BYTES = "statestore.cache.max.bytes"
APPLICATION_ID = "application.id"
STATESTORE_MEMORY_MAX_BYTES = "statestore.memory.max.bytes"
ROCKSDB_CONFIG_SETTER = "rocksdb.config.setter"
STATESTORE_DURABILITY = "statestore.durability"

DURABILITY_WAL = "wal"
DURABILITY_CHANGELOG = "changelog"
DURABILITIES = (DURABILITY_WAL, DURABILITY_CHANGELOG)
"""``statestore.durability`` (kstate's own; persistent key-value stores): what makes a commit
survive a crash. ``"wal"``: RocksDB's write-ahead log, a killed process reopens at its last commit.
``"changelog"``: Kafka Streams' ``RocksDBStore`` contract (its WAL is off): commits reach disk when
RocksDB flushes its memtables (all column families together, so data and offset never part) or
the store closes cleanly; after a kill the store reopens at an OLDER committed offset, with
exactly that commit's data, logs it, and must be restored from there. A logged store restores
itself from its changelog on open. By default ``"changelog"`` for a transactional key-value
store with a changelog, ``"wal"`` for any other; window and session stores keep ``"wal"``."""

DEFAULT_UNCOMMITTED_MAX_BYTES = 64 * 1024 * 1024
"""The KIP-892 proposal's default: 64 MiB of staged writes per store before they spill to disk."""

DEFAULT_CACHE_MAX_BYTES = 64 * 1024 * 1024
"""Per persistent store: committed values that reads fetched from RocksDB, kept in memory so a
read-modify-write loop skips RocksDB (the role of Kafka Streams' caching store; Kafka gives each
RocksDB store a 50 MB block cache besides). 0 turns the cache off."""

DEFAULT_MEMORY_MAX_BYTES, MIN_MEMORY_MAX_BYTES = _core.memory_budget_bounds()
"""``statestore.memory.max.bytes``: one budget per process for every store it opens (256 MiB by
default, a Spark Python worker's share of an executor's memory overhead; at least 32 MiB): RocksDB's
block cache and memtables, kstate's read caches (a quarter) and staged writes (a quarter)."""

if TYPE_CHECKING:
    RocksDBOptions = Mapping[str, Any]
    RocksDBConfigSetter = Union[RocksDBOptions, Callable[[str, dict], Any]]
"""``rocksdb.config.setter``: RocksDB options applied to every store after kstate's own, as a dict
(``{"max_open_files": 64, "block_based_table_factory": {"block_size": 16384}}``: RocksDB's option
names) or a callable ``setter(store_name, options)`` that fills the dict it is given (or returns
one): Kafka Streams' ``rocksdb.config.setter``. An unknown name or bad value fails at open."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        # The type aliases above, made when first asked for at run time: they need typing,
        # which a store's first use does without.
        if name not in ("RocksDBOptions", "RocksDBConfigSetter"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from typing import Any, Union

        options = Mapping[str, Any]
        globals().update(RocksDBOptions=options, RocksDBConfigSetter=Union[options, Callable[[str, dict], Any]])
        return globals()[name]


_KNOWN = {
    ENABLE_TRANSACTIONAL_STATESTORES,
    STATESTORE_UNCOMMITTED_MAX_BYTES,
    STATESTORE_CACHE_MAX_BYTES,
    STATESTORE_MEMORY_MAX_BYTES,
    ROCKSDB_CONFIG_SETTER,
    APPLICATION_ID,
    STATESTORE_DURABILITY,
}


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidArgumentError(f"{name} must be true or false, got {value!r}")


def _byte_count(config: Mapping[str, Any], name: str, default: int) -> int:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
    return value


def _memory_max_bytes(config: Mapping[str, Any]) -> int | None:
    value = config.get(STATESTORE_MEMORY_MAX_BYTES)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{STATESTORE_MEMORY_MAX_BYTES} must be a number of bytes, got {value!r}")
    if value < MIN_MEMORY_MAX_BYTES:
        raise InvalidArgumentError(
            f"{STATESTORE_MEMORY_MAX_BYTES} must be at least {MIN_MEMORY_MAX_BYTES} "
            f"({MIN_MEMORY_MAX_BYTES >> 20} MiB), got {value}"
        )
    return value


def _option_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):
        return "{" + rocksdb_options_string(value) + "}"
    if isinstance(value, (int, float, str)):
        text = str(value)
        if any(c in text for c in ";{}="):
            raise InvalidArgumentError(f"{ROCKSDB_CONFIG_SETTER}: the value of {name} must not contain ; {{ }} =")
        return text
    raise InvalidArgumentError(f"{ROCKSDB_CONFIG_SETTER}: {name} must be a number, string, bool or dict, got {value!r}")


def rocksdb_options_string(options: Mapping[str, Any]) -> str:
    """A dict of RocksDB options in RocksDB's option string syntax (``name=value;...``, nested
    dicts as ``name={...}``)."""
    parts = []
    for name, value in options.items():
        if not isinstance(name, str) or not name or any(c in name for c in ";{}= "):
            raise InvalidArgumentError(f"{ROCKSDB_CONFIG_SETTER}: bad option name {name!r}")
        parts.append(f"{name}={_option_value(name, value)}")
    return ";".join(parts)


def _durability(config: Mapping[str, Any]) -> str | None:
    value = config.get(STATESTORE_DURABILITY)
    if value is None:
        return None
    name = value.strip().lower() if isinstance(value, str) else value
    if name not in DURABILITIES:
        raise InvalidArgumentError(f"{STATESTORE_DURABILITY} must be one of {list(DURABILITIES)}, got {value!r}")
    return name


def _rocksdb_config_setter(config: Mapping[str, Any]) -> RocksDBConfigSetter | None:
    setter = config.get(ROCKSDB_CONFIG_SETTER)
    if setter is None or callable(setter):
        return setter
    if not isinstance(setter, Mapping):
        raise InvalidArgumentError(f"{ROCKSDB_CONFIG_SETTER} must be a dict or a callable, got {setter!r}")
    return dict(setter)


class StoreConfig(FrozenRecord):
    """Parsed store configuration. Unknown keys are rejected so a typo does not pass silently."""

    transactional: bool
    uncommitted_max_bytes: int
    cache_max_bytes: int
    application_id: str | None
    memory_max_bytes: int | None
    rocksdb_config_setter: RocksDBConfigSetter | None
    durability: str | None
    """``statestore.durability`` as given (``None``: the store's default)."""

    __match_args__ = (
        "transactional",
        "uncommitted_max_bytes",
        "cache_max_bytes",
        "application_id",
        "memory_max_bytes",
        "rocksdb_config_setter",
        "durability",
    )

    def __init__(
        self,
        transactional: bool = True,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        application_id: str | None = None,
        memory_max_bytes: int | None = None,
        rocksdb_config_setter: RocksDBConfigSetter | None = None,
        durability: str | None = None,
    ):
        object.__setattr__(self, "transactional", transactional)
        object.__setattr__(self, "uncommitted_max_bytes", uncommitted_max_bytes)
        object.__setattr__(self, "cache_max_bytes", cache_max_bytes)
        object.__setattr__(self, "application_id", application_id)
        object.__setattr__(self, "memory_max_bytes", memory_max_bytes)
        object.__setattr__(self, "rocksdb_config_setter", rocksdb_config_setter)
        object.__setattr__(self, "durability", durability)

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> StoreConfig:
        config = dict(config or {})
        unknown = set(config) - _KNOWN
        if unknown:
            raise InvalidArgumentError(f"unknown store config {sorted(unknown)}; known: {sorted(_KNOWN)}")
        app = config.get(APPLICATION_ID)
        if app is not None and (not isinstance(app, str) or not app):
            raise InvalidArgumentError(f"{APPLICATION_ID} must be a non-empty string, got {app!r}")
        parsed = cls(
            transactional=_as_bool(
                ENABLE_TRANSACTIONAL_STATESTORES, config.get(ENABLE_TRANSACTIONAL_STATESTORES, True)
            ),
            uncommitted_max_bytes=_byte_count(config, STATESTORE_UNCOMMITTED_MAX_BYTES, DEFAULT_UNCOMMITTED_MAX_BYTES),
            cache_max_bytes=_byte_count(config, STATESTORE_CACHE_MAX_BYTES, DEFAULT_CACHE_MAX_BYTES),
            application_id=app,
            memory_max_bytes=_memory_max_bytes(config),
            rocksdb_config_setter=_rocksdb_config_setter(config),
            durability=_durability(config),
        )
        if not callable(parsed.rocksdb_config_setter):
            parsed.rocksdb_options(None)  # a dict is checked now; a callable when a store opens
        return parsed

    def rocksdb_options(self, store_name: str | None) -> str | None:
        """``rocksdb.config.setter`` for ``store_name`` as RocksDB's option string, checked
        (with the memory budget) by RocksDB itself: an unknown option fails here."""
        setter = self.rocksdb_config_setter
        options: Mapping[str, Any] | None
        if callable(setter):
            given: dict[str, Any] = {}
            returned = setter(store_name or "", given)
            options = given if returned is None else returned
            if not isinstance(options, Mapping):
                raise InvalidArgumentError(f"{ROCKSDB_CONFIG_SETTER} must return a dict or None, got {returned!r}")
        else:
            options = setter
        text = rocksdb_options_string(options) if options else None
        _core.check_memory_config(self.memory_max_bytes, text)
        return text


CHANGELOG_DIR = "changelog.dir"
"""kstate's own logging config: the log directory holding changelog partitions, or a URL
(``s3://bucket/prefix``, ``file:///mnt/shared``, ...) of a remote changelog (``kstate.log.remote``)."""

CHANGELOG_STORAGE_OPTIONS = "changelog.storage.options"
"""kstate's own logging config: a dict of options for the fsspec filesystem of a remote
``changelog.dir`` (e.g. s3fs's ``endpoint_url``, ``key``, ``secret``)."""

MIN_DELTAS_FOR_SNAPSHOT = "minDeltasForSnapshot"
"""kstate's own logging config, Spark's name (``spark.sql.streaming.stateStore.minDeltasForSnapshot``):
a persistent key-value store publishes a snapshot of its files beside its changelog after this
many commits since the last one (``kstate.log.snapshots``), so a restore loads the snapshot and
replays only the changelog after it. Snapshots are off unless this or
``minDeltaBytesForSnapshot`` is set."""

MIN_DELTA_BYTES_FOR_SNAPSHOT = "minDeltaBytesForSnapshot"
"""kstate's own logging config: a snapshot is also due once the changelog took this many bytes
since the last one (whichever of the two comes first)."""

MIN_BATCHES_TO_RETAIN = "minBatchesToRetain"
"""kstate's own logging config, Spark's name and meaning (``spark.sql.streaming.minBatchesToRetain``,
default 100): how many of the latest micro-batches stay recoverable from what is kept beside the
changelog. After each snapshot the store keeps the newest snapshot taken at or before batch
``b - minBatchesToRetain + 1`` (``b``: the newest snapshot's batch) and everything newer, as
Spark's state stores keep their snapshots and deltas, and deletes older snapshots, the files
no kept snapshot names, and the changelog's history before the oldest snapshot kept
(``kstate.log.snapshot_retention``). Snapshots of a store outside Spark carry no batch: there it
counts snapshots (the newest ``minBatchesToRetain`` are kept). Either way at least the newest
snapshot and the one before it are kept, and history only goes below a snapshot whose files are
all there. Applies when snapshots are on."""

DEFAULT_MIN_BATCHES_TO_RETAIN = 100
"""Spark's default for ``spark.sql.streaming.minBatchesToRetain``."""

SNAPSHOTS_DIRECTORY = "snapshots"
"""The directory of a changelog partition (local, or its objects' prefix) that holds the store's
snapshots (``kstate.log.snapshots``)."""

CHANGELOG_TOPIC_DEFAULTS = {"cleanup.policy": "compact"}
"""Kafka Streams creates changelog topics compacted: the latest value per key is what restores."""


class ChangelogConfig(FrozenRecord):
    """Parsed ``with_logging_enabled`` config: where the changelog lives and its topic configs
    (Kafka's names, passed to the log as strings; the log rejects unknown names and values)."""

    changelog_dir: str | None
    topic_config: dict[str, str]
    storage_options: dict[str, Any]
    min_deltas_for_snapshot: int | None
    min_delta_bytes_for_snapshot: int | None
    min_batches_to_retain: int

    __match_args__ = (
        "changelog_dir",
        "topic_config",
        "storage_options",
        "min_deltas_for_snapshot",
        "min_delta_bytes_for_snapshot",
        "min_batches_to_retain",
    )

    def __init__(
        self,
        changelog_dir: str | None = None,
        topic_config: dict[str, str] | None = None,
        storage_options: dict[str, Any] | None = None,
        min_deltas_for_snapshot: int | None = None,
        min_delta_bytes_for_snapshot: int | None = None,
        min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
    ):
        object.__setattr__(self, "changelog_dir", changelog_dir)
        object.__setattr__(self, "topic_config", {} if topic_config is None else topic_config)
        object.__setattr__(self, "storage_options", {} if storage_options is None else storage_options)
        object.__setattr__(self, "min_deltas_for_snapshot", min_deltas_for_snapshot)
        object.__setattr__(self, "min_delta_bytes_for_snapshot", min_delta_bytes_for_snapshot)
        object.__setattr__(self, "min_batches_to_retain", min_batches_to_retain)

    @property
    def snapshots(self) -> bool:
        """Whether the store publishes snapshots (``minDeltasForSnapshot`` or
        ``minDeltaBytesForSnapshot`` given)."""
        return self.min_deltas_for_snapshot is not None or self.min_delta_bytes_for_snapshot is not None

    @property
    def remote(self) -> bool:
        """Whether ``changelog.dir`` is a URL: the changelog lives on an object store."""
        return self.changelog_dir is not None and "://" in self.changelog_dir

    @classmethod
    def parse(cls, config: Mapping[str, Any], defaults: Mapping[str, str] | None = None) -> ChangelogConfig:
        """``defaults``: the store kind's topic configs (a key-value store's changelog is
        compacted), which ``config`` overrides."""
        config = dict(config)
        log_dir = config.pop(CHANGELOG_DIR, None)
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise InvalidArgumentError(f"{CHANGELOG_DIR} must be a path or URL, got {log_dir!r}")
        storage_options = config.pop(CHANGELOG_STORAGE_OPTIONS, None) or {}
        if not isinstance(storage_options, Mapping):
            raise InvalidArgumentError(f"{CHANGELOG_STORAGE_OPTIONS} must be a dict, got {storage_options!r}")
        min_deltas = _positive_count(config.pop(MIN_DELTAS_FOR_SNAPSHOT, None), MIN_DELTAS_FOR_SNAPSHOT)
        min_delta_bytes = _positive_count(config.pop(MIN_DELTA_BYTES_FOR_SNAPSHOT, None), MIN_DELTA_BYTES_FOR_SNAPSHOT)
        min_batches = _positive_count(config.pop(MIN_BATCHES_TO_RETAIN, None), MIN_BATCHES_TO_RETAIN)
        topic_config = {**CHANGELOG_TOPIC_DEFAULTS, **(defaults or {})}
        for name, value in config.items():
            if isinstance(value, bool):
                value = str(value).lower()
            topic_config[str(name)] = str(value)
        return cls(
            None if log_dir is None else os.fspath(log_dir),
            topic_config,
            dict(storage_options),
            min_deltas,
            min_delta_bytes,
            DEFAULT_MIN_BATCHES_TO_RETAIN if min_batches is None else min_batches,
        )


def _positive_count(value: Any, name: str) -> int | None:
    """An int >= 1 given as an int or its digits; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
    return value

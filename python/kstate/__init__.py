"""kstate: Kafka Streams' local state for Python and PySpark.

Timestamped, transactional key-value, window and session stores on RocksDB whose bytes match
Kafka Streams.

``import kstate`` loads nothing but this facade: each name below is imported on first use
(PEP 562), so a Spark Python worker or a CLI call that needs one store does not pay for the
native library, the logs and the rebalance protocol up front.
"""

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any

    from kstate import errors, rebalance, serdes
    from kstate.key_value_store import KeyValueStore, ReadOnlyKeyValueStore
    from kstate.session_store import ReadOnlySessionStore, SessionStore
    from kstate.store_reads import KeyValue, KeyValueIterator
    from kstate.stores import StoreBuilder, Stores
    from kstate.suppliers import KeyValueBytesStoreSupplier, SessionBytesStoreSupplier, WindowBytesStoreSupplier
    from kstate.timestamped_key_value_store import TimestampedKeyValueStore
    from kstate.timestamped_session_store import TimestampedSessionStore
    from kstate.timestamped_window_store import TimestampedWindowStore
    from kstate.value_and_timestamp import NO_TIMESTAMP, ValueAndTimestamp
    from kstate.window_store import ReadOnlyWindowStore, WindowStore
    from kstate.windowed import Window, Windowed, WindowedIterator

    __version__: str

# Where each public name lives: a submodule (value None) or a name in one.
_LAZY: "dict[str, tuple[str, str | None]]" = {
    "errors": ("kstate.errors", None),
    "rebalance": ("kstate.rebalance", None),
    "serdes": ("kstate.serdes", None),
    # The installed distribution's version, set in one place ([workspace.package] version in
    # Cargo.toml) and compiled into the native module (importlib.metadata alone takes ~60 ms).
    "__version__": ("kstate._core", "__version__"),
    **{
        name: (module, name)
        for module, names in {
            "kstate.key_value_store": ("KeyValueStore", "ReadOnlyKeyValueStore"),
            "kstate.store_reads": ("KeyValue", "KeyValueIterator"),
            "kstate.session_store": ("ReadOnlySessionStore", "SessionStore"),
            "kstate.stores": ("StoreBuilder", "Stores"),
            "kstate.suppliers": ("KeyValueBytesStoreSupplier", "SessionBytesStoreSupplier", "WindowBytesStoreSupplier"),
            "kstate.timestamped_key_value_store": ("TimestampedKeyValueStore",),
            "kstate.timestamped_session_store": ("TimestampedSessionStore",),
            "kstate.timestamped_window_store": ("TimestampedWindowStore",),
            "kstate.value_and_timestamp": ("NO_TIMESTAMP", "ValueAndTimestamp"),
            "kstate.window_store": ("ReadOnlyWindowStore", "WindowStore"),
            "kstate.windowed": ("Window", "Windowed", "WindowedIterator"),
        }.items()
        for name in names
    },
}


def __getattr__(name: str) -> "Any":
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'kstate' has no attribute {name!r}") from None
    __import__(module_name)  # importlib.import_module without importing importlib
    module = sys.modules[module_name]
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "__version__",
    "errors",
    "rebalance",
    "serdes",
    "KeyValue",
    "KeyValueIterator",
    "KeyValueStore",
    "ReadOnlyKeyValueStore",
    "TimestampedKeyValueStore",
    "WindowStore",
    "ReadOnlyWindowStore",
    "TimestampedWindowStore",
    "SessionStore",
    "ReadOnlySessionStore",
    "TimestampedSessionStore",
    "Window",
    "Windowed",
    "WindowedIterator",
    "KeyValueBytesStoreSupplier",
    "WindowBytesStoreSupplier",
    "SessionBytesStoreSupplier",
    "StoreBuilder",
    "Stores",
    "ValueAndTimestamp",
    "NO_TIMESTAMP",
]

"""kstate: Kafka Streams' local state for Python and PySpark.

Timestamped, transactional key-value, window and session stores on RocksDB whose bytes match
Kafka Streams.
"""

from importlib.metadata import version as _distribution_version

from kstate import errors, rebalance, serdes
from kstate.key_value_store import KeyValue, KeyValueIterator, KeyValueStore, ReadOnlyKeyValueStore
from kstate.session_store import ReadOnlySessionStore, SessionStore
from kstate.stores import (
    KeyValueBytesStoreSupplier,
    SessionBytesStoreSupplier,
    StoreBuilder,
    Stores,
    WindowBytesStoreSupplier,
)
from kstate.timestamped_key_value_store import TimestampedKeyValueStore
from kstate.timestamped_session_store import TimestampedSessionStore
from kstate.timestamped_window_store import TimestampedWindowStore
from kstate.value_and_timestamp import NO_TIMESTAMP, ValueAndTimestamp
from kstate.window_store import ReadOnlyWindowStore, WindowStore
from kstate.windowed import Window, Windowed, WindowedIterator

# The installed distribution's version, set in one place: [workspace.package] version in Cargo.toml.
__version__: str = _distribution_version("kstate")

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

"""kstate: Kafka Streams' local state for Python and PySpark.

Timestamped, transactional key-value stores on RocksDB whose bytes match Kafka Streams.
"""

from kstate import errors, rebalance, serdes
from kstate.key_value_store import KeyValue, KeyValueIterator, KeyValueStore, ReadOnlyKeyValueStore
from kstate.stores import KeyValueBytesStoreSupplier, StoreBuilder, Stores
from kstate.timestamped_key_value_store import TimestampedKeyValueStore
from kstate.value_and_timestamp import NO_TIMESTAMP, ValueAndTimestamp

__all__ = [
    "errors",
    "rebalance",
    "serdes",
    "KeyValue",
    "KeyValueIterator",
    "KeyValueStore",
    "ReadOnlyKeyValueStore",
    "TimestampedKeyValueStore",
    "KeyValueBytesStoreSupplier",
    "StoreBuilder",
    "Stores",
    "ValueAndTimestamp",
    "NO_TIMESTAMP",
]

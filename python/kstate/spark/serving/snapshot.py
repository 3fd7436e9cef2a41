"""What a replica serves between two updates, for the reads of keys that skip its lock.

A replica's lock (``readers_writer``) costs more than reading a key from a warm copy. A
``Snapshot`` is taken under the lock after each update (by the first read that finds the one
before stale): per partition, whether it serves and the batches its state is known to hold; per
key-value store read by its keys, each partition's read-committed view. A read of keys takes the
snapshot, routes the keys natively without Arrow (plain Python values of the key column's type),
reads the views (in the same native call where the store's key and value bytes are plain serde
bytes: ``RoutedViews``), and the replica keeps what it read only if the lock's ``sequence`` is still the
snapshot's (a seqlock): no update started meanwhile, so the values are the state of the batches
the snapshot names. Anything else goes the locked way: keys of other types, stores read by
``route_by``, a partition not serving, a wait for a batch not there yet, an update that raced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kstate import _core
from kstate.serdes import BytesSerde, DoubleSerde, LongSerde, StringSerde
from kstate.spark.protocol.batch_log import EMPTY_STATE
from kstate.spark.serving.routing import SERDE_KEYS, Routing

if TYPE_CHECKING:
    from kstate.spark.serving.following import PartitionFollower

_NATIVE_KEYS = {"string": StringSerde, "binary": BytesSerde, "bigint": LongSerde}
"""The key serdes whose bytes ``RoutedViews`` makes of a key column's values, by Spark type."""
_NATIVE_VALUES = {BytesSerde: "bytes", StringSerde: "string", LongSerde: "int64", DoubleSerde: "double"}
"""The value serdes ``RoutedViews`` decodes itself, by the name it knows them by."""

Read = tuple[Any, "int | None", Mapping[int, int]]
"""What a read gives its ``Answer``: the value, the batch, the partitions read with theirs."""


class Snapshot:
    """What a replica serves at lock ``sequence`` (even: between updates), with ``followers``
    routed by ``routing`` (``None``: nothing to serve)."""

    def __init__(
        self,
        sequence: int,
        routing: Routing | None,
        followers: Sequence[PartitionFollower],
        aligned: bool,
    ):
        self.sequence = sequence
        self._routing = routing
        self._aligned = aligned
        self._num_partitions = len(followers)
        self._through = [f.through for f in followers]
        self._since = [EMPTY_STATE if f.copy.entry is None else f.copy.entry.batch_id for f in followers]
        self._alone = [(self.batches([p])[0], self._through[p]) for p in range(self._num_partitions)]
        """Per partition, the batch a read of it alone answers at, and the newest it holds."""
        self._spark_types: list[str] = []
        self._views: dict[str, list[Any]] = {}
        """Per key-value store read by its keys, each partition's read-committed view."""
        self._routed: dict[str, tuple[Any, Callable[[bytes], Any] | None]] = {}
        """Those of them read natively (``RoutedViews``), with what decodes their stored values
        (``None``: ``RoutedViews`` does)."""
        self._value_types: dict[str, Any] = {}
        self.answering: dict[str, Any] = {}
        """The stores whose reads of a key, waiting for no batch, are answered in one native call
        (``_core.SnapshotRead``): their ``RoutedViews``."""
        if routing is None or not followers or not all(f.servable for f in followers):
            return
        self._spark_types = [kind for _, kind in routing.partitioning.keys]
        copy = followers[0].copy
        for name, description in routing.partitioning.stores.items():
            if description["kind"] == "key_value" and description["key"] in SERDE_KEYS:
                self._views[name] = [f.copy.view(name) for f in followers]
                self._value_types[name] = arrow_value_type(copy.value_serde(name))
                decode = copy.plain_value_decoder(name)
                if decode is not None and type(copy.key_serde(name)) is _NATIVE_KEYS.get(self._spark_types[0]):
                    native = _NATIVE_VALUES.get(type(copy.value_serde(name)))
                    views = _core.RoutedViews(
                        [f.copy.native_view(name) for f in followers], self._spark_types[0], native, self._alone
                    )
                    self._routed[name] = (views, None if native else decode)
                    if native and not aligned:
                        self.answering[name] = views

    def get(self, store: str, key: Any, at_least_batch: int | None) -> Read | None:
        """``store``'s value of ``key`` and the batch it is at; ``None``: read it the locked way."""
        routed = self._routed.get(store)
        if routed is not None:
            views, decode = routed
            found = views.get(key)
            if found is None:
                return None
            partition, stored = found
            batch, through = self._alone[partition]
            if (at_least_batch is not None or self._aligned) and not self._answers((partition,), batch, at_least_batch):
                return None
            return (stored if decode is None or stored is None else decode(stored)), batch, {partition: through}
        view_of = self._views.get(store)
        if view_of is None:
            return None
        hashed = _core.spark_partitions_of_values([[key]], self._spark_types, self._num_partitions)
        if hashed is None:
            return None
        partition = hashed[0]
        batch, through = self._alone[partition]
        if not self._answers((partition,), batch, at_least_batch):
            return None
        return view_of[partition].get(key), batch, {partition: through}

    def get_many(self, store: str, keys: list[Any], at_least_batch: int | None) -> Read | None:
        """``store``'s values of ``keys`` (a list), in their order; ``None``: the locked way."""
        routed = self._routed.get(store)
        if routed is not None and keys:
            views, decode = routed
            found = views.get_many(keys)
            if found is None:
                return None
            read, stored = found
            batch, partitions = self.batches(read)
            if not self._answers(read, batch, at_least_batch):
                return None
            return (stored if decode is None else [None if s is None else decode(s) for s in stored]), batch, partitions
        views = self._views.get(store)
        if views is None or not keys:
            return None
        routed = _core.spark_partitions_of_values([keys], self._spark_types, self._num_partitions)
        if routed is None:
            return None
        read = sorted(set(routed))
        batch, partitions = self.batches(read)
        if not self._answers(read, batch, at_least_batch):
            return None
        if len(read) == 1:
            return views[read[0]].get_many(keys), batch, partitions
        by_partition: list[list[Any]] = [[] for _ in range(self._num_partitions)]
        for key, partition in zip(keys, routed):
            by_partition[partition].append(key)
        found = [
            iter(views[p].get_many(by_partition[p]) if by_partition[p] else ()) for p in range(self._num_partitions)
        ]
        return [next(found[p]) for p in routed], batch, partitions

    def get_many_arrow(self, store: str, keys: Any, at_least_batch: int | None) -> Read | None:
        """``store``'s values of the Arrow array ``keys`` as an Arrow array, in their order;
        ``None``: the locked way."""
        import numpy as np
        import pyarrow as pa

        views = self._views.get(store)
        assert self._routing is not None
        if views is None or not len(keys) or keys.null_count or keys.type != self._routing.types[0]:
            return None
        if store in self._routed:  # the native reads of a list beat Arrow's per-partition takes
            read = self.get_many(store, keys.to_pylist(), at_least_batch)
            return None if read is None else (pa.array(read[0], self._value_types[store]), *read[1:])
        ids = self._routing.partitions([keys])
        read = [int(p) for p in np.unique(ids)]
        batch, partitions = self.batches(read)
        if not self._answers(read, batch, at_least_batch):
            return None
        rows = [np.flatnonzero(ids == p) for p in read]
        found = [views[p].get_many(keys if len(read) == 1 else keys.take(pa.array(r))) for p, r in zip(read, rows)]
        value_type = self._value_types[store] or _common_type(found)
        if value_type is None:
            return None
        values = pa.concat_arrays([f if f.type == value_type else f.cast(value_type) for f in found])
        if len(read) > 1:
            values = values.take(pa.array(np.argsort(np.concatenate(rows), kind="stable")))
        return values, batch, partitions

    def _answers(self, read: Sequence[int], batch: int | None, at_least_batch: int | None) -> bool:
        """Whether a read of partitions ``read`` at ``batch`` answers here (else it waits)."""
        if self._aligned and batch is None:
            return False
        return at_least_batch is None or min(self._through[p] for p in read) >= at_least_batch

    def batches(self, partitions: Iterable[int]) -> tuple[int | None, dict[int, int]]:
        """The batch every partition of ``partitions`` is known to hold (``None``: none in
        common; a partition's state is known from its entry's batch to ``through``), and each
        one's newest."""
        through = {p: self._through[p] for p in partitions}
        newest_start = max(self._since[p] for p in through)
        oldest_end = min(through.values())
        return (oldest_end if oldest_end >= newest_start else None), through


def arrow_value_type(value_serde: Any) -> Any:
    """The Arrow type of the values of a store with ``value_serde`` in a ``get_many`` of Arrow
    keys: string, binary, int64 or float64 by the serde (``None``: as Arrow infers it)."""
    import pyarrow as pa

    types = {StringSerde: pa.string(), BytesSerde: pa.binary(), LongSerde: pa.int64(), DoubleSerde: pa.float64()}
    return types.get(type(value_serde))


def _common_type(found: list[Any]) -> Any:
    """The type of the Arrow arrays of values read per partition: theirs if they agree, or the
    one type besides ``null`` (partitions that found none); ``None``: they disagree."""
    types = {f.type for f in found if str(f.type) != "null"}
    if len(types) > 1:
        return None
    return types.pop() if types else found[0].type

"""Which partition holds a key: the query's own routing, ``pmod(hash(key columns), n)``
(``kstate.spark.routing.hashing``), over the key columns and types its partitioning record names.

A store whose keys are its single key column's values (the record says ``serde:<name>``) is read
by those keys; any other store's keys do not give the key columns, so a read names them
(``route_by``). ``transform_with_state``'s grouping keys are the key columns' values, pickled as
the processor pickles them (values as Arrow gives them, so ``1`` and ``numpy.int64(1)`` are one
key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kstate import _core
from kstate.errors import StateTypeError
from kstate.spark.routing.hashing import partition_ids
from kstate.spark.routing.partitioning import Partitioning, arrow_type_of

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

SERDE_KEYS = ("serde:string", "serde:int64", "serde:bytes")
"""The key codecs of stores whose keys are their key column's values."""


class Routing:
    """Routes keys as ``partitioning`` (the current record) says."""

    def __init__(self, partitioning: Partitioning):
        self.partitioning = partitioning
        self.types = [arrow_type_of(kind) for _, kind in partitioning.keys]

    def row(self, key: Any) -> tuple:
        """``key`` as the values of the key columns: a tuple of one value per column, or for one
        column the value itself."""
        if len(self.types) == 1 and not isinstance(key, tuple):
            return (key,)
        if not isinstance(key, tuple) or len(key) != len(self.types):
            raise StateTypeError(
                f"the state is partitioned by ({self.partitioning.describe_keys()}): give a key as a tuple of "
                f"{len(self.types)} values, got {key!r}"
            )
        return tuple(key)

    def columns(self, rows: Sequence[tuple]) -> list[pa.Array]:
        """The key columns of ``rows`` as Arrow arrays of the recorded types; a value of another
        type is a ``StateTypeError``."""
        import pyarrow as pa

        out = []
        for i, ((name, kind), arrow_type) in enumerate(zip(self.partitioning.keys, self.types)):
            values = [row[i] for row in rows]
            try:
                out.append(pa.array(values, arrow_type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as error:
                raise StateTypeError(
                    f"key column {name!r} is {kind}; keys {values[:3]!r} are not all {kind} values ({error})"
                ) from None
        return out

    def partitions(self, columns: Sequence[pa.Array]) -> np.ndarray:
        """The partition of each row of ``columns``."""
        return partition_ids(columns, self.partitioning.num_partitions)

    def partition_of(self, row: tuple) -> int:
        return int(self.partitions_of_rows([row])[0])

    def partitions_of_rows(self, rows: Sequence[tuple]) -> Sequence[int]:
        """The partition of each of ``rows``: natively from plain Python values of the key
        columns' types, else through Arrow (which converts other values or refuses them)."""
        columns = [[row[i] for row in rows] for i in range(len(self.types))]
        spark_types = [kind for _, kind in self.partitioning.keys]
        routed = _core.spark_partitions_of_values(columns, spark_types, self.partitioning.num_partitions)
        return self.partitions(self.columns(rows)) if routed is None else routed

    def grouping_key(self, key: Any) -> tuple[int, tuple]:
        """``(partition, grouping key)`` of a ``transform_with_state`` key: its values as the
        processor's groups hold them (Arrow's Python values of the key columns)."""
        columns = self.columns([self.row(key)])
        return int(self.partitions(columns)[0]), tuple(column[0].as_py() for column in columns)

"""Groups of a partition, for the grouped helpers (``StateBackend.apply_in_arrow/_pandas``).

Spark's ``groupBy(...).applyInPandas`` calls its function once per group and offers no hook at
the end of a task, where a micro-batch must commit. So the helpers run the same plan themselves:
``repartition`` by the keys (Spark's hash partitioning), then, in one ``mapInArrow`` task, the
partition's rows sorted by key (in Arrow) and cut where the key changes. A partition's rows of
one micro-batch are held in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from kstate.spark.backend import GroupFunction, StateBackend
    from kstate.spark.exactly_once import TaskStores


def group_bounds(table: pa.Table, keys: Sequence[str]) -> list[tuple[int, int]]:
    """``(start, length)`` of each run of equal keys in ``table`` (sorted by ``keys``)."""
    n = table.num_rows
    if n == 0:
        return []
    changed = np.zeros(n - 1, dtype=bool)
    for name in keys:
        column = table.column(name).combine_chunks()
        before, after = column.slice(0, n - 1), column.slice(1)
        differs = pc.coalesce(pc.not_equal(before, after), pc.not_equal(pc.is_null(before), pc.is_null(after)))
        changed |= differs.to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1))
    ends = np.append(starts[1:], n)
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def iter_groups(batches: Iterator[pa.RecordBatch], keys: Sequence[str]) -> Iterator[tuple[tuple, pa.Table]]:
    """``(key tuple, rows)`` of every group in a partition's batches, in key order."""
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    table = table.sort_by([(k, "ascending") for k in keys])
    key_columns = [table.column(k) for k in keys]
    for start, length in group_bounds(table, keys):
        yield tuple(column[start].as_py() for column in key_columns), table.slice(start, length)


def as_batches(result: Any, schema: pa.Schema, pandas: bool) -> list[pa.RecordBatch]:
    """A function's result (a pandas frame, an Arrow table or batch, or ``None``) as record
    batches of ``schema``."""
    if result is None:
        return []
    if pandas:
        table = pa.Table.from_pandas(result, schema=schema, preserve_index=False)
    elif isinstance(result, pa.RecordBatch):
        table = pa.Table.from_batches([result])
    else:
        table = result
    return table.select(schema.names).cast(schema).to_batches()


def grouped_task(
    backend: StateBackend, keys: Sequence[str], fn: GroupFunction, schema: pa.Schema, pandas: bool
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that calls ``fn(key, group, stores)`` for each group."""

    def each_group(batches: Iterator[pa.RecordBatch], stores: TaskStores) -> Iterator[pa.RecordBatch]:
        for key, group in iter_groups(batches, keys):
            yield from as_batches(fn(key, group.to_pandas() if pandas else group, stores), schema, pandas)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return backend.run(lambda stores: each_group(batches, stores))

    task.__name__ = getattr(fn, "__name__", "grouped")
    return task

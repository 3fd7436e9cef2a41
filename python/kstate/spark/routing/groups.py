"""Groups of a partition, for the grouped helpers (``StateBackend.apply_in_arrow/_pandas``).

Spark's ``groupBy(...).applyInPandas`` calls its function once per group and offers no hook at
the end of a task, where a micro-batch must commit. So the helpers run the same plan themselves:
``StateBackend.partition`` by the keys (Spark's hash partitioning, a fixed count), then, in one ``mapInArrow`` task, the
partition's rows sorted by key (in Arrow) and cut where the key changes. A partition's rows of
one micro-batch are held in memory at once.
"""

from __future__ import annotations

import gc
from collections import namedtuple
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstate.errors import InvalidArgumentError

if TYPE_CHECKING:
    from kstate.spark.format.conversion import SessionConversion


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic GC held off while kstate builds a batch's objects (rows, keys, output
    columns) that all outlive the block and form no cycles: each collection the allocations would
    trigger on the way scans them (and, once they fill the oldest generation, every tracked object
    of the process) and frees nothing. No user code runs inside. Restores the GC as it was."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
    lengths = np.diff(starts, append=n)
    return list(zip(starts.tolist(), lengths.tolist()))  # Python ints at C speed, not a numpy scalar each


def iter_groups(
    batches: Iterator[pa.RecordBatch],
    keys: Sequence[str],
    pandas: bool = False,
    rows: bool = False,
    before: Callable[[list[tuple]], None] | None = None,
    conversion: SessionConversion | None = None,
) -> Iterator[tuple[tuple, Any]]:
    """``(key tuple, rows)`` of every group in a partition's batches, in key order: an Arrow table
    per group, with ``pandas`` a ``pandas.DataFrame`` (index 0..n-1), with ``rows`` a list of
    ``pyspark.sql.Row``. The partition converts to pandas (or Python rows) once, and groups are
    slices of it. ``before(every key)`` is called once before the first group (to read state
    for all of them at once), inside the groups' build, with Python's cyclic GC paused
    (``cyclic_gc_paused``). ``conversion``: pandas frames as Spark's session makes them
    (timestamps in the session time zone)."""
    collected = list(batches)
    if not collected:
        return  # a partition without input (Spark still runs its task)
    table = pa.Table.from_batches(collected)
    if table.num_rows == 0:
        return
    with cyclic_gc_paused():
        table = table.sort_by([(k, "ascending") for k in keys])
        key_columns = [table.column(k) for k in keys]
        frame = None
        if pandas:
            from pandas import RangeIndex

            frame = table.to_pandas() if conversion is None else conversion.to_pandas(table)
        every_row = python_rows(table) if rows else None
        bounds = group_bounds(table, keys)
        starts = pa.array([start for start, _ in bounds], pa.int64())
        group_keys = list(zip(*(column.take(starts).to_pylist() for column in key_columns)))
        if before is not None:
            before(group_keys)
    for key, (start, length) in zip(group_keys, bounds):
        if every_row is not None:
            yield key, every_row[start : start + length]
        elif frame is None:
            yield key, table.slice(start, length)
        else:
            group = frame.iloc[start : start + length]
            group.index = RangeIndex(length)  # a view with its own index, no copy of the rows
            yield key, group


def python_rows(table: pa.Table) -> list[Any]:
    """Every row of ``table`` as a ``pyspark.sql.Row`` with its column names, built column-wise
    (``row_class``: each row is one tuple allocation)."""
    row = row_class(tuple(table.column_names))
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return list(map(row.of, zip(*columns)))


_ROW_CLASSES: dict[tuple[str, ...], type] = {}

TUPLE_FIELD = type(namedtuple("FieldProbe", "value").value)
"""The descriptor type ``namedtuple`` gives its fields: on CPython it reads the tuple's slot
directly (``itemgetter`` would call ``Row.__getitem__``, a Python frame, on every access)."""


def field_descriptor(position: int, kind: type = TUPLE_FIELD) -> Any:
    """The descriptor of a row class's field at ``position``: ``kind``'s, or where that is
    ``property`` (an interpreter whose ``namedtuple`` fields are properties), a property
    reading the position."""
    if kind is property:
        return property(itemgetter(position))
    return kind(position, None)


def row_class(names: tuple[str, ...]) -> Any:
    """A subclass of ``pyspark.sql.Row`` (named ``Row``) whose rows have the fields ``names``:
    its ``of(values)`` makes a row with one tuple allocation (``Row(*names)(*values)`` runs three
    Python frames and a per-row ``__fields__`` dict), and each field is a descriptor reading its
    tuple slot (``field_descriptor``), where ``Row.__getattr__`` searches the names on every
    access. A row behaves as Spark's: ``isinstance(row, Row)``, ``__fields__``, ``asDict``,
    ``row["name"]``, ``repr``, equality and pickling (to a plain ``Row``) are Row's own; names Row
    or tuple already define (``count``, ``index``, ``asDict``, dunders) keep Row's meaning, as on
    Spark's rows; a repeated name reads its first position, as ``__fields__.index`` does."""
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        from pyspark.sql import Row

        fields: dict[str, Any] = {"__fields__": Row(*names), "__slots__": ()}
        for position, name in reversed(list(enumerate(names))):
            if not name.startswith("__") and not hasattr(Row, name):
                fields[name] = field_descriptor(position)
        cls = type("Row", (Row,), fields)
        cls.of = classmethod(tuple.__new__)
        _ROW_CLASSES[names] = cls
    return cls


class OutputBatcher:
    """Collects what a function returns per group (pandas frames, Arrow tables or batches, or with
    ``rows`` single ``Row``s or tuples) and hands it to Spark in record batches of ``schema`` of
    about ``size`` rows: one conversion per batch, not per group."""

    def __init__(
        self,
        schema: pa.Schema,
        pandas: bool,
        size: int = 10_000,
        rows: bool = False,
        conversion: SessionConversion | None = None,
    ):
        self.schema = schema
        self.conversion = conversion
        self.pandas = pandas
        self.rows = rows
        self.size = size
        self._pending: list[Any] = []
        self._count = 0
        self._names = schema.names
        self._matching: Any = None
        """A Row's ``__fields__`` found equal to the schema's names: the rows of one Row factory
        share it (a tuple: it cannot change), so the rest are taken by position at once."""

    def add(self, result: Any) -> list[pa.RecordBatch]:
        """Takes one result (``None`` adds nothing); returns the batches now due."""
        return self.flush() if self.push(result) else []

    def push(self, result: Any) -> bool:
        """Takes one result (``None`` adds nothing) without converting; returns whether a batch
        is due (``flush``). ``add`` in a loop that yields the batches itself."""
        if result is None:
            return self._count >= self.size
        if self.rows:
            fields = getattr(result, "__fields__", None)
            matched = fields is not None and fields is self._matching
            if matched and isinstance(result, tuple) and len(result) == len(fields):
                self._pending.append(tuple(result))  # a Row of a factory whose names matched
            else:
                self._pending.append(self._plain_row(result))
            self._count += 1
        else:
            self._pending.append(result)
            self._count += len(result)
        return self._count >= self.size

    def _plain_row(self, row: Any) -> tuple:
        """An output row as a plain tuple in the schema's order: a ``Row`` with field names by
        name (as Spark matches them), a plain tuple by position. Held until the batch is
        converted, plain tuples of plain values cost the cyclic GC nothing (it stops tracking
        them); ``Row``s would pile up into its oldest generation."""
        names = self._names
        fields = getattr(row, "__fields__", None)
        if fields is not None and fields is not self._matching:
            if fields != names and list(fields) != names:  # a list compares as is
                as_dict = row.asDict()
                missing = [n for n in names if n not in as_dict]
                if missing:
                    raise InvalidArgumentError(
                        f"an output Row lacks the fields {missing} of the output schema: {row!r}"
                    )
                return tuple(as_dict[n] for n in names)
            if isinstance(fields, tuple):
                self._matching = fields
        if not isinstance(row, tuple) or len(row) != len(names):
            raise InvalidArgumentError(
                f"handleInputRows must yield Rows (or tuples) of the {len(names)} output columns {names}, got {row!r}"
            )
        return tuple(row)

    def flush(self) -> list[pa.RecordBatch]:
        if not self._pending:
            return []
        pending, self._pending, self._count = self._pending, [], 0
        if self.rows:
            with cyclic_gc_paused():
                table = _rows_table(pending, self.schema)
        elif self.pandas:
            import pandas as pd

            frame = pd.concat(pending, ignore_index=True)
            if self.conversion is not None:
                return self.conversion.from_pandas(frame, self.schema).to_batches()
            table = pa.Table.from_pandas(frame, schema=self.schema, preserve_index=False)
        else:
            tables = [pa.Table.from_batches([r]) if isinstance(r, pa.RecordBatch) else r for r in pending]
            table = pa.concat_tables([t.select(self.schema.names).cast(self.schema) for t in tables])
        return table.select(self.schema.names).cast(self.schema).to_batches()


def _rows_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """Output rows (``OutputBatcher._plain_row``'s) as ``schema``."""
    columns = list(zip(*rows))
    return pa.table([pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema)

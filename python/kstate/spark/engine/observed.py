"""kstate's figures in the query's own progress: ``query.lastProgress["observedMetrics"]["kstate"]``.

Spark's observed metrics (``Dataset.observe``, the ``CollectMetrics`` node) are the one channel
from tasks to ``StreamingQueryProgress`` that user code can use and that works alike in classic
Spark and Spark Connect (accumulators and listeners on the driver need the classic API); on a
batch DataFrame an ``Observation`` returns them after the action. So a kstate task, once its
stores committed, yields one more row: the user's columns null, a hidden map column holding the
task's figures (``kstate.spark.protocol.progress.task_figures``); every other row has the map
null. The plan observes one column, ``figures``: the tasks' maps gathered (``collect_list``: a
row without figures adds nothing) and summed per figure; then it drops the figures' rows and the
column, so the user's output is unchanged.

One observed column, not one per figure: Spark keeps an aggregate per observed column, and 40
of them cost the JVM measurably per batch (``benches/README.md``). A map, not a struct: its
names are flat (``numRowsTotal``, ``counts.numRowsTotal``), and under Spark Connect the client
receives observed metrics as JSON in which a nested row arrives as its ``values`` and ``schema``
(``state_figures`` reads either form).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kstate.spark.protocol.progress import LARGEST

METRICS_NAME = "kstate"
"""The name the figures are observed under (``observedMetrics["kstate"]``)."""
FIGURES = "figures"
"""The observed column: ``observedMetrics["kstate"]["figures"]["numRowsTotal"]``."""
FIGURES_COLUMN = "__kstate_figures"
"""The hidden column: a task's figures in its last row, null in every other."""


def figures_arrow_type() -> Any:
    import pyarrow as pa

    return pa.map_(pa.string(), pa.int64())


def with_figures_column(schema: Any) -> Any:
    """The Spark ``StructType`` ``schema`` plus the hidden column."""
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

    return StructType([*schema.fields, StructField(FIGURES_COLUMN, MapType(StringType(), LongType()), True)])


def with_figures(outputs: Iterable[Any], arrow_schema: Any, figures: Any) -> Iterator[Any]:
    """``outputs`` (Arrow record batches or tables, ``arrow_schema`` declared) with the hidden
    column null, then one row of the task's figures (``figures()``, called once ``outputs`` is
    done, i.e. after the commit). Every batch a task yields must have one schema: each gets its
    own columns' names and types, the declared nullability, and the hidden column. In the
    figures' row the user's columns are null, or a placeholder where the schema says never null
    (the row is dropped before anyone sees it; the declared schema stays the query's, as
    Spark's own operators keep it)."""
    import pyarrow as pa

    kind = figures_arrow_type()
    hidden = pa.field(FIGURES_COLUMN, kind)
    schema = None
    for output in outputs:
        for batch in output.to_batches() if isinstance(output, pa.Table) else (output,):
            if schema is None:
                fields = zip(batch.schema, arrow_schema)
                schema = pa.schema([field.with_nullable(declared.nullable) for field, declared in fields]).append(
                    hidden
                )
            yield pa.RecordBatch.from_arrays([*batch.columns, pa.nulls(batch.num_rows, kind)], schema=schema)
    if schema is None:
        schema = pa.schema(list(arrow_schema)).append(hidden)
    columns = [
        pa.nulls(1, field.type) if field.nullable else pa.array([_placeholder(field.type)], field.type)
        for field in schema
    ]
    columns[-1] = pa.array([list(figures().items())], kind)
    yield pa.RecordBatch.from_arrays(columns, schema=schema)


def _placeholder(kind: Any) -> Any:
    """A value of Arrow type ``kind`` for a never-null column of the figures' row."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return {f.name: _placeholder(f.type) if not f.nullable else None for f in kind}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return []
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return ""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return b""
    if pa.types.is_boolean(kind):
        return False
    return 0


def observe_figures(mapped: Any, name: str) -> tuple[Any, Any]:
    """``mapped`` (with the hidden column) observed under ``name`` and without the figures' rows
    and column. Returns it and, for a batch DataFrame, the ``Observation`` whose ``get`` holds
    the figures after an action (``None`` for a streaming one: its progress holds them)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, MapType, StringType

    column = F.col(FIGURES_COLUMN)
    zero = F.lit(0).cast("long")

    def added(figure: Any, total: Any, task: Any) -> Any:
        total, task = F.coalesce(total, zero), F.coalesce(task, zero)
        return F.when(figure.isin(*LARGEST), F.greatest(total, task)).otherwise(total + task)

    empty = F.create_map().cast(MapType(StringType(), LongType()))  # a type string costs the JVM a SQL parse
    summed = F.aggregate(F.collect_list(column), empty, lambda total, task: F.map_zip_with(total, task, added))
    aggregates = [summed.alias(FIGURES)]
    observation = None
    if mapped.isStreaming:
        observed = mapped.observe(name, *aggregates)
    else:
        from pyspark.sql import Observation

        observation = Observation(name)
        observed = mapped.observe(observation, *aggregates)
    return observed.filter(column.isNull()).drop(FIGURES_COLUMN), observation


def state_figures(progress: Any, name: str = METRICS_NAME) -> dict[str, int] | None:
    """kstate's figures of one batch from its progress (``query.lastProgress``, a listener's
    ``event.progress``, or the progress's JSON as a dict), as ``{figure: value}``; ``None`` if
    the batch has none (no kstate task ran: the figures of a batch without kstate rows)."""
    observed = progress["observedMetrics"] if isinstance(progress, dict) else progress.observedMetrics
    row = (observed or {}).get(name)
    if row is None:
        return None
    values = row.asDict() if hasattr(row, "asDict") else dict(row)
    if set(values) == {"values", "schema"}:  # Spark Connect: the row as JSON gave its parts
        names = [field["name"] for field in values["schema"]["fields"]]
        values = dict(zip(names, values["values"]))
    return {figure: 0 if value is None else int(value) for figure, value in (values[FIGURES] or {}).items()}

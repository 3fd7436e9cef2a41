"""kstate's figures in the query's own progress: ``query.lastProgress["observedMetrics"]["kstate"]``.

Spark's observed metrics (``Dataset.observe``, the ``CollectMetrics`` node) are the one channel
from tasks to ``StreamingQueryProgress`` that user code can use and that works alike in classic
Spark and Spark Connect (accumulators and listeners on the driver need the classic API); on a
batch DataFrame an ``Observation`` returns them after the action. So a kstate task, once its
stores committed, yields one more row: the user's columns null, a hidden map column holding the
task's figures (``kstate.spark.protocol.progress.task_figures``); every other row has the map
null. The plan observes, per figure, the sum over the batch's rows (the map's entry; null rows
add nothing), then drops the figures' rows and the column, so the user's output is unchanged.

The figures are flat (``numRowsTotal``, ``counts.numRowsTotal``), not nested structs: under
Spark Connect the client receives observed metrics as JSON in which a nested row arrives as its
``values`` and ``schema`` (``state_figures`` reads either form).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kstate.spark.protocol.progress import LARGEST, figure_names

METRICS_NAME = "kstate"
"""The name the figures are observed under (``observedMetrics["kstate"]``)."""
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
    done, i.e. after the commit), null in the other columns. Every batch a task yields must have
    one schema: each gets its own columns' names and types, all nullable (the figures' row is
    null in them), and the hidden column."""
    import pyarrow as pa

    kind = figures_arrow_type()
    hidden = pa.field(FIGURES_COLUMN, kind)
    schema = None
    for output in outputs:
        for batch in output.to_batches() if isinstance(output, pa.Table) else (output,):
            if schema is None:
                schema = pa.schema([field.with_nullable(True) for field in batch.schema]).append(hidden)
            yield pa.RecordBatch.from_arrays([*batch.columns, pa.nulls(batch.num_rows, kind)], schema=schema)
    if schema is None:
        schema = pa.schema([field.with_nullable(True) for field in arrow_schema]).append(hidden)
    columns = [pa.nulls(1, field.type) for field in schema]
    columns[-1] = pa.array([list(figures().items())], kind)
    yield pa.RecordBatch.from_arrays(columns, schema=schema)


def observe_figures(mapped: Any, stores: Sequence[str], name: str) -> tuple[Any, Any]:
    """``mapped`` (with the hidden column) observed under ``name`` and without the figures' rows
    and column. Returns it and, for a batch DataFrame, the ``Observation`` whose ``get`` holds
    the figures after an action (``None`` for a streaming one: its progress holds them)."""
    from pyspark.sql import functions as F

    column = F.col(FIGURES_COLUMN)
    # Each figure folds the few tasks' maps that a collect_list of the column gathered: a row
    # without figures only adds nothing to the lists (cheaper than a map lookup per row and figure).
    per_task = F.collect_list(column)
    zero = F.lit(0).cast("long")

    def folded(figure: str) -> Any:
        if figure in LARGEST:
            return F.aggregate(per_task, zero, lambda total, task: F.greatest(total, task.getItem(figure)))
        return F.aggregate(per_task, zero, lambda total, task: total + task.getItem(figure))

    aggregates = [folded(figure).alias(figure) for figure in figure_names(stores)]
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
    return {figure: 0 if value is None else int(value) for figure, value in values.items()}

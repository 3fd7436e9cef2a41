"""Batches without input for ``transform_with_state``'s timers: the ``kstate-ticks`` source.

Spark runs a micro-batch without data when its stateful operator needs one: in processing time
after every batch (timers may be due), in event time when the watermark advanced (late rows and
timers depend on it). A kstate processor runs inside ``mapInArrow``, which Spark runs only when
some source has new data, so a timer due while no input arrives would wait for the next input.

So ``transform_with_state`` unions its input with this source (``with_ticks``). After each
batch, every task records in ``<changelog_dir>/<application_id>-kstate-timers/part-<n>.json``
its earliest timer, the watermark its batch used and the largest event time it has seen
(``record_next_due``). At each trigger the source (on the driver) reads those records and
offers one row, a tick, when a batch is needed: a processing-time timer is due by now, or the
watermark the next batch would compute is past the one the last batch used (Spark's rule for a
batch without data). A tick is a row whose ``__kstate_tick`` column is true and whose other
columns are null; every task drops ticks before the processor sees its rows (``without_ticks``).
A trigger with nothing due reads the records (one small file per partition) and adds no batch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from kstate.errors import InvalidArgumentError

try:  # PySpark 4.1+: a source can keep an availableNow query's batches as they are
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # PySpark 4.0: Spark runs an availableNow query with this source as one batch
    SupportsTriggerAvailableNow = None

TICK_COLUMN = "__kstate_tick"
SOURCE_NAME = "kstate-ticks"
_DIRECTORY = "{application_id}-kstate-timers"


def ticks_dir(layout: Any) -> Path:
    return layout.changelog_dir / _DIRECTORY.format(application_id=layout.application_id)


def record_next_due(layout: Any, partition: int, next_timer: int | None, watermark: int, largest: int | None) -> None:
    """What the source needs of one partition after its batch (written beside, then renamed)."""
    directory = ticks_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{partition}.json"
    temporary = directory / f".part-{partition}.json.{os.getpid()}"
    temporary.write_text(json.dumps({"next_timer": next_timer, "watermark": watermark, "largest": largest}))
    os.replace(temporary, path)


def needs_batch(directory: Path, time_mode: str, watermark_delay_ms: int, now_ms: int) -> bool:
    """Whether the partitions' records call for a batch without input."""
    records = []
    for path in directory.glob("part-*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced: the next trigger reads it
    if time_mode == "ProcessingTime":
        return any(r["next_timer"] is not None and r["next_timer"] <= now_ms for r in records)
    largest = [r["largest"] for r in records if r["largest"] is not None]
    if not largest:
        return False
    used = max(r["watermark"] for r in records)
    return max(0, max(largest) - watermark_delay_ms) > used


def supports_available_now() -> bool:
    """Whether this PySpark keeps an ``availableNow`` query's batches with the tick source in it
    (4.1+); on 4.0 the query would run as one batch, so ``fire_idle_timers`` is off by default."""
    return SupportsTriggerAvailableNow is not None


def with_ticks(df: Any, backend: Any, time_mode: str, watermark_delay_ms: int) -> Any:
    """``df`` unioned with the tick source of ``backend``'s state (registered on the session)."""
    from pyspark.sql import functions

    if backend.layout.changelog_url is not None:
        raise InvalidArgumentError(
            "fire_idle_timers reads the partitions' timer records from a file-system changelog_dir; "
            "with changelogs on an object store pass fire_idle_timers=False"
        )
    spark = df.sparkSession
    spark.dataSource.register(TickSource)
    ticks = (
        spark.readStream.format(SOURCE_NAME)
        .option("directory", str(ticks_dir(backend.current_layout())))
        .option("timeMode", time_mode)
        .option("watermarkDelayMs", str(int(watermark_delay_ms)))
        .load()
    )
    marked = df.withColumn(TICK_COLUMN, functions.lit(None).cast("boolean"))
    return marked.unionByName(ticks, allowMissingColumns=True)


def without_ticks(batches: Iterator[Any], column: str = TICK_COLUMN) -> Iterator[Any]:
    """The batches without tick rows and without the tick column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        index = batch.schema.get_field_index(column)
        if index < 0:
            yield batch
            continue
        ticks = batch.column(index)
        if ticks.null_count != len(ticks):
            batch = batch.filter(pc.is_null(ticks))
        keep = [i for i in range(batch.num_columns) if i != index]
        yield pa.RecordBatch.from_arrays([batch.column(i) for i in keep], [batch.schema.names[i] for i in keep])


_AVAILABLE_NOW = (SupportsTriggerAvailableNow,) if SupportsTriggerAvailableNow is not None else ()


class TickReader(SimpleDataSourceStreamReader, *_AVAILABLE_NOW):
    """Runs on the driver: offers a tick when ``needs_batch``; a replayed batch gets its ticks
    again. An ``availableNow`` query reads up to the data there was when it started: no ticks."""

    def __init__(self, options: dict[str, str]):
        self.directory = Path(options["directory"])
        self.time_mode = options["timeMode"]
        self.delay = int(options["watermarkDelayMs"])
        self.available_now = False

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.available_now = True

    def initialOffset(self) -> dict:  # noqa: N802
        return {"tick": 0}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        if not self.available_now and needs_batch(self.directory, self.time_mode, self.delay, int(time.time() * 1000)):
            return iter([(True,)]), {"tick": start["tick"] + 1}
        return iter([]), start

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:  # noqa: N802
        return iter([(True,)] * (end["tick"] - start["tick"]))


class TickSource(DataSource):
    """One row when ``transform_with_state``'s timers need a batch without input."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return f"{TICK_COLUMN} boolean"

    def simpleStreamReader(self, schema: Any) -> TickReader:  # noqa: N802
        return TickReader(self.options)

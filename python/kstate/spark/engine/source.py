"""A Spark data source over kstate's Kafka logs (Python Data Source API): ``format("kstate")``.

```python
from kstate.spark import register_data_source
register_data_source(spark)
df = spark.read.format("kstate").option("path", "/data/changelog").option("topic", "app-counts-changelog").load()
stream = spark.readStream.format("kstate").option("path", ...).option("topic", ...).load()
```

The columns are those of Spark's Kafka source: ``key``, ``value`` (binary), ``topic``,
``partition``, ``offset``, ``timestamp``, ``timestampType``. Options: ``path`` (the log directory
holding ``<topic>-<partition>`` directories) and ``topic``, both required; ``partitions``
(comma-separated; default: every partition on disk); where reading starts, as Spark's Kafka
source says it: ``startingOffsets`` (``earliest``, the default, ``latest``, or JSON
``{"<topic>": {"0": 23, "1": -2}}`` with -2 earliest and -1 latest) or ``startingTimestamp``
(ms: each partition from its first record at or after it, found through the time index).

The files are read, never opened as a log: opening recovers a log (cuts a torn tail), which
must not race a writer. A trailing partial entry (an append in progress) is left for the next
read, and in a store's changelog only published records are read (up to ``.kstate-published``):
a commit that never published is invisible. Each Spark partition reads one log partition; a
streaming read's offsets are ``{partition: next offset}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from kstate.errors import InvalidArgumentError
from kstate.log.files import end_offset, first_offset_at, read_log

SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"


def register_data_source(spark: Any) -> None:
    """Makes ``format("kstate")`` available in ``spark``."""
    spark.dataSource.register(KstateDataSource)


class _LogPartition(InputPartition):
    def __init__(self, partition: int, start: int, end: int | None):
        super().__init__(partition)
        self.partition = partition
        self.start = start
        self.end = end  # exclusive; None: to the end


EARLIEST, LATEST = -2, -1
"""Spark's Kafka source's offsets for "the first" and "the next" record of a partition."""


@dataclass(frozen=True)
class _Options:
    log_dir: Path
    topic: str
    partitions: list[int] | None
    starting_offsets: str
    starting_timestamp: int | None

    def partition_dir(self, partition: int) -> Path:
        return self.log_dir / f"{self.topic}-{partition}"

    def wanted(self) -> list[int]:
        return self.partitions if self.partitions is not None else _partitions_on_disk(self.log_dir, self.topic)

    def start_offsets(self) -> dict[int, int]:
        """Where each wanted partition starts."""
        starts = {}
        for p in self.wanted():
            directory = self.partition_dir(p)
            if self.starting_timestamp is not None:
                starts[p] = first_offset_at(directory, self.starting_timestamp)
                continue
            wanted = self._starting_offset(p)
            starts[p] = end_offset(directory) if wanted == LATEST else 0 if wanted == EARLIEST else wanted
        return starts

    def _starting_offset(self, partition: int) -> int:
        if self.starting_offsets in ("earliest", "latest"):
            return EARLIEST if self.starting_offsets == "earliest" else LATEST
        try:
            return int(json.loads(self.starting_offsets)[self.topic][str(partition)])
        except (ValueError, KeyError, TypeError):
            raise InvalidArgumentError(
                f"startingOffsets {self.starting_offsets!r} names no offset for {self.topic} partition {partition} "
                '(use "earliest", "latest" or {"<topic>": {"<partition>": offset}}, -2 earliest, -1 latest)'
            ) from None


def _options(options: dict[str, str]) -> _Options:
    path, topic = options.get("path"), options.get("topic")
    if not path or not topic:
        raise InvalidArgumentError("the kstate data source needs the options path (a log directory) and topic")
    wanted = options.get("partitions")
    partitions = None if not wanted else [int(p) for p in wanted.split(",")]
    timestamp = options.get("startingTimestamp")
    try:
        starting_timestamp = None if timestamp is None else int(timestamp)
    except ValueError:
        raise InvalidArgumentError(
            f"startingTimestamp must be milliseconds since the epoch, got {timestamp!r}"
        ) from None
    return _Options(Path(path), topic, partitions, options.get("startingOffsets", "earliest"), starting_timestamp)


def _partitions_on_disk(log_dir: Path, topic: str) -> list[int]:
    prefix = f"{topic}-"
    found = []
    for entry in log_dir.glob(f"{topic}-*"):
        suffix = entry.name[len(prefix) :]
        if entry.is_dir() and suffix.isdigit():
            found.append(int(suffix))
    return sorted(found)


def _spark_rows(batch: Any, topic: str, partition: int) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    timestamps = pc.cast(batch.column("timestamp"), pa.timestamp("ms")).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [
            batch.column("key"),
            batch.column("value"),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            batch.column("offset"),
            timestamps,
            pc.cast(batch.column("timestamp_type"), pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


class KstateDataSource(DataSource):
    """``format("kstate")``: batch and streaming reads of kstate (Kafka format) logs."""

    @classmethod
    def name(cls) -> str:
        return "kstate"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        return _StreamReader(_options(self.options))


class _BatchReader(DataSourceReader):
    def __init__(self, options: _Options):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [_LogPartition(p, start, None) for p, start in self.options.start_offsets().items()]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _LogPartition)
        directory = self.options.partition_dir(partition.partition)
        if not os.path.isdir(directory):
            return
        for batch in read_log(directory, partition.start, partition.end):
            if batch.num_rows:
                yield _spark_rows(batch, self.options.topic, partition.partition)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, options: _Options):
        self.options = options
        self.batch = _BatchReader(options)

    def initialOffset(self) -> dict:  # noqa: N802
        return {str(p): start for p, start in self.options.start_offsets().items()}

    def latestOffset(self) -> dict:  # noqa: N802
        return {str(p): end_offset(self.options.partition_dir(p)) for p in self.options.wanted()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [
            _LogPartition(int(p), int(start.get(p, 0)), int(stop))
            for p, stop in end.items()
            if int(stop) > int(start.get(p, 0))
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self.batch.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the logs are read, never consumed."""

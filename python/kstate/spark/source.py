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
(comma-separated; default: every partition on disk).

The files are read, never opened as a log: opening recovers a log (cuts a torn tail), which
must not race a writer. A trailing partial entry (an append in progress) is left for the next
read, and in a store's changelog only published records are read (up to ``.kstate-published``):
a commit that never published is invisible. Each Spark partition reads one log partition; a
streaming read's offsets are ``{partition: next offset}``, starting at the earliest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from kstate.errors import InvalidArgumentError

SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
_PUBLISHED_MARKER = ".kstate-published"
_CHUNK_BYTES = 16 * 1024 * 1024


def register_data_source(spark: Any) -> None:
    """Makes ``format("kstate")`` available in ``spark``."""
    spark.dataSource.register(KstateDataSource)


class _LogPartition(InputPartition):
    def __init__(self, partition: int, start: int, end: int | None):
        super().__init__(partition)
        self.partition = partition
        self.start = start
        self.end = end  # exclusive; None: to the end


def _options(options: dict[str, str]) -> tuple[Path, str, list[int] | None]:
    path, topic = options.get("path"), options.get("topic")
    if not path or not topic:
        raise InvalidArgumentError("the kstate data source needs the options path (a log directory) and topic")
    wanted = options.get("partitions")
    partitions = None if not wanted else [int(p) for p in wanted.split(",")]
    return Path(path), topic, partitions


def _partitions_on_disk(log_dir: Path, topic: str) -> list[int]:
    prefix = f"{topic}-"
    found = []
    for entry in log_dir.glob(f"{topic}-*"):
        suffix = entry.name[len(prefix) :]
        if entry.is_dir() and suffix.isdigit():
            found.append(int(suffix))
    return sorted(found)


def _published_end(partition_dir: Path) -> int | None:
    """One past the last published offset of a kstate changelog; ``None`` for other logs."""
    try:
        return int((partition_dir / _PUBLISHED_MARKER).read_text().strip()) + 1
    except (FileNotFoundError, ValueError):
        return None


def read_log(partition_dir: Path, start: int = 0, end: int | None = None) -> Iterator[Any]:
    """Record batches (``kstate.log.records.arrow_schema``) of the records with ``start <= offset
    < end`` in a partition directory, read from its segment files."""
    from kstate.log.records import decode_arrow, shallow_entries

    published = _published_end(partition_dir)
    if published is not None:
        end = published if end is None else min(end, published)
    segments = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))
    for i, segment in enumerate(segments):
        following = int(segments[i + 1].stem) if i + 1 < len(segments) else None
        if following is not None and following <= start:
            continue  # the whole segment is before start
        if end is not None and int(segment.stem) >= end:
            return
        with open(segment, "rb") as file:
            chunk_bytes = _CHUNK_BYTES
            while True:
                position = file.tell()
                data = file.read(chunk_bytes)
                if not data:
                    break
                entries = shallow_entries(data)
                if not entries:
                    if len(data) < chunk_bytes:
                        break  # a partial entry at the end: an append in progress
                    chunk_bytes *= 2  # one entry larger than the chunk
                    file.seek(position)
                    continue
                consumed = entries[-1].position + entries[-1].size
                file.seek(position + consumed)
                batch = decode_arrow(data[:consumed])
                yield _between(batch, start, end)


def _between(batch: Any, start: int, end: int | None) -> Any:
    import pyarrow.compute as pc

    offsets = batch.column("offset")
    keep = pc.greater_equal(offsets, start)
    if end is not None:
        keep = pc.and_(keep, pc.less(offsets, end))
    return batch.filter(keep)


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


def _end_offset(partition_dir: Path) -> int:
    """One past the last readable record of a partition directory (0 when empty)."""
    end = 0
    for batch in read_log(partition_dir):
        if batch.num_rows:
            end = batch.column("offset")[-1].as_py() + 1
    return end


class KstateDataSource(DataSource):
    """``format("kstate")``: batch and streaming reads of kstate (Kafka format) logs."""

    @classmethod
    def name(cls) -> str:
        return "kstate"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(*_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        return _StreamReader(*_options(self.options))


class _BatchReader(DataSourceReader):
    def __init__(self, log_dir: Path, topic: str, partitions: list[int] | None):
        self.log_dir, self.topic = log_dir, topic
        self.wanted = partitions if partitions is not None else _partitions_on_disk(log_dir, topic)

    def partitions(self) -> list[InputPartition]:
        return [_LogPartition(p, 0, None) for p in self.wanted]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _LogPartition)
        directory = self.log_dir / f"{self.topic}-{partition.partition}"
        if not os.path.isdir(directory):
            return
        for batch in read_log(directory, partition.start, partition.end):
            if batch.num_rows:
                yield _spark_rows(batch, self.topic, partition.partition)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, log_dir: Path, topic: str, partitions: list[int] | None):
        self.batch = _BatchReader(log_dir, topic, partitions)
        self.fixed = partitions

    def _wanted(self) -> list[int]:
        return self.fixed if self.fixed is not None else _partitions_on_disk(self.batch.log_dir, self.batch.topic)

    def initialOffset(self) -> dict:  # noqa: N802
        return {str(p): 0 for p in self._wanted()}

    def latestOffset(self) -> dict:  # noqa: N802
        log_dir, topic = self.batch.log_dir, self.batch.topic
        return {str(p): _end_offset(log_dir / f"{topic}-{p}") for p in self._wanted()}

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

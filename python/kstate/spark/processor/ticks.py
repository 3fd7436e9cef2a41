"""Batches without input for ``transform_with_state``'s timers: the ``kstate-ticks`` source.

Spark runs a micro-batch without data when its stateful operator needs one: in processing time
after every batch (timers may be due), in event time when the watermark advanced (late rows and
timers depend on it). A kstate processor runs inside ``mapInArrow``, which Spark runs only when
some source has new data, so a timer due while no input arrives would wait for the next input.

So ``transform_with_state`` unions its input with this source (``with_ticks``). After each
batch, every task records its earliest timer, the watermark its batch used and the largest event
time it has seen (``record_next_due``) in ``<changelog_dir>/<application_id>-kstate-timers/``. At
each trigger the source (on the driver) reads those records and offers one row, a tick, when a
batch is needed: a processing-time timer is due by now, or the watermark the next batch would
compute is past the one the last batch used (Spark's rule for a batch without data). A tick is a
row whose ``__kstate_tick`` column is true and whose other columns are null; every task drops
ticks before the processor sees its rows (``without_ticks``).

On a file system a partition's record is ``part-<n>.json``, replaced (write beside, rename). An
object store has no replace, so each record is a new object
``part-<n>-<20-digit batch id>-<random>.json`` (created exclusively; the random part keeps every
name's bytes the same forever), after which the task deletes its partition's records of earlier
batches; the source takes each partition's record of the highest batch (of two attempts' of one
batch, the later written) and fetches each name once (``RemoteTickRecords``). A trigger with
nothing due costs one small file per partition on a file system, one listing on an object store,
and adds no batch.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from kstate.errors import InvalidArgumentError, RemoteStorageError
from kstate.log.object_store import ObjectStore

try:  # PySpark 4.1+: a source can keep an availableNow query's batches as they are
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # PySpark 4.0: Spark runs an availableNow query with this source as one batch
    SupportsTriggerAvailableNow = None

TICK_COLUMN = "__kstate_tick"
SOURCE_NAME = "kstate-ticks"
_DIRECTORY = "{application_id}-kstate-timers"
_REMOTE_RECORD = re.compile(r"^part-(\d+)-(\d{20})-[0-9a-f]{12}\.json$")

log = logging.getLogger("kstate.spark")


def ticks_name(layout: Any) -> str:
    """The name of the records' directory (or prefix) beside the changelogs."""
    return _DIRECTORY.format(application_id=layout.application_id)


def ticks_dir(layout: Any) -> Path:
    return layout.changelog_dir / ticks_name(layout)


def record_next_due(
    layout: Any, partition: int, batch_id: int, next_timer: int | None, watermark: int, largest: int | None
) -> None:
    """What the source needs of one partition after its batch ``batch_id``: on a file system
    written beside, then renamed; on an object store a new object (``RemoteTickRecords``)."""
    record = {"next_timer": next_timer, "watermark": watermark, "largest": largest}
    if layout.changelog_url is not None:
        remote = RemoteTickRecords(layout.changelog_url, ticks_name(layout), layout.storage_options)
        remote.write(partition, batch_id, record)
        return
    directory = ticks_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{partition}.json"
    temporary = directory / f".part-{partition}.json.{os.getpid()}"
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)


def needs_batch(directory: Path, time_mode: str, watermark_delay_ms: int, now_ms: int) -> bool:
    """Whether the partitions' records in ``directory`` (a file system's) call for a batch
    without input."""
    records = []
    for path in directory.glob("part-*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced: the next trigger reads it
    return records_need_batch(records, time_mode, watermark_delay_ms, now_ms)


def records_need_batch(records: list[dict[str, Any]], time_mode: str, watermark_delay_ms: int, now_ms: int) -> bool:
    """Whether the partitions' ``records`` (one each, or none) call for a batch without input."""
    if time_mode == "ProcessingTime":
        return any(r["next_timer"] is not None and r["next_timer"] <= now_ms for r in records)
    largest = [r["largest"] for r in records if r["largest"] is not None]
    if not largest:
        return False
    used = max(r["watermark"] for r in records)
    return max(0, max(largest) - watermark_delay_ms) > used


class RemoteTickRecords:
    """The partitions' records on an object store, at ``<url>/<name>/``: each written as a new
    object, read by listing, each name fetched once (its bytes never change)."""

    def __init__(self, url: str, name: str, storage_options: Mapping[str, Any] | None = None):
        self.store = ObjectStore(url, storage_options)
        self.name = name
        self._fetched: dict[str, dict[str, Any]] = {}

    def write(self, partition: int, batch_id: int, record: dict[str, Any]) -> None:
        """Creates the partition's record of ``batch_id``, then deletes its records of earlier
        batches (a record of the same batch, another attempt's, goes with the next batch's)."""
        name = f"part-{partition}-{batch_id:020d}-{uuid.uuid4().hex[:12]}.json"
        body = {**record, "written_ns": time.time_ns()}
        with tempfile.TemporaryDirectory(prefix="kstate-ticks-") as scratch:
            path = Path(scratch) / name
            path.write_text(json.dumps(body))
            self.store.create(f"{self.name}/{name}", str(path))
        for other in self.store.list(self.name):
            parsed = _REMOTE_RECORD.match(other)
            if parsed and int(parsed.group(1)) == partition and int(parsed.group(2)) < batch_id:
                self.store.delete(f"{self.name}/{other}")

    def records(self) -> list[dict[str, Any]]:
        """Each partition's newest record: of its highest batch, the one written last. A record
        deleted between the listing and its fetch is skipped (a newer one replaced it: the next
        trigger reads that)."""
        listed = {}
        for name in self.store.list(self.name):
            parsed = _REMOTE_RECORD.match(name)
            if parsed:
                listed[name] = (int(parsed.group(1)), int(parsed.group(2)))
        self._fetched = {name: record for name, record in self._fetched.items() if name in listed}
        highest: dict[int, int] = {}
        for partition, batch in listed.values():
            highest[partition] = max(batch, highest.get(partition, batch))
        newest: dict[int, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="kstate-ticks-") as scratch:
            for name, (partition, batch) in listed.items():
                if batch != highest[partition]:
                    continue
                record = self._fetched.get(name) or self._fetch(name, Path(scratch))
                if record is None:
                    continue
                if partition not in newest or record.get("written_ns", 0) > newest[partition].get("written_ns", 0):
                    newest[partition] = record
        return list(newest.values())

    def _fetch(self, name: str, scratch: Path) -> dict[str, Any] | None:
        path = scratch / name
        try:
            self.store.fetch(f"{self.name}/{name}", str(path))
            record = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        finally:
            path.unlink(missing_ok=True)
        self._fetched[name] = record
        return record


def supports_available_now() -> bool:
    """Whether this PySpark keeps an ``availableNow`` query's batches with the tick source in it
    (4.1+); on 4.0 the query would run as one batch, so ``fire_idle_timers`` is off by default."""
    return SupportsTriggerAvailableNow is not None


def with_ticks(df: Any, backend: Any, time_mode: str, watermark_delay_ms: int) -> Any:
    """``df`` unioned with the tick source of ``backend``'s state (registered on the session)."""
    from pyspark.sql import functions

    layout = backend.current_layout()
    spark = df.sparkSession
    spark.dataSource.register(TickSource)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("timeMode", time_mode)
        .option("watermarkDelayMs", str(int(watermark_delay_ms)))
    )
    if layout.changelog_url is None:
        reader = reader.option("directory", str(ticks_dir(layout)))
    else:
        try:
            options = json.dumps(layout.storage_options)
        except (TypeError, ValueError) as error:
            raise InvalidArgumentError(
                f"fire_idle_timers hands changelog_storage_options to the kstate-ticks source as JSON: {error}; "
                "pass options JSON can hold, or fire_idle_timers=False"
            ) from None
        reader = reader.option("url", layout.changelog_url).option("name", ticks_name(layout))
        reader = reader.option("storageOptions", options)
    ticks = reader.load()
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
        self.time_mode = options["timeMode"]
        self.delay = int(options["watermarkDelayMs"])
        self.available_now = False
        self.directory: Path | None = None
        self.remote: RemoteTickRecords | None = None
        if "url" in options:
            storage_options = json.loads(options.get("storageOptions") or "{}")
            self.remote = RemoteTickRecords(options["url"], options["name"], storage_options)
        else:
            self.directory = Path(options["directory"])

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.available_now = True

    def initialOffset(self) -> dict:  # noqa: N802
        return {"tick": 0}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        if not self.available_now and self._needs_batch(int(time.time() * 1000)):
            return iter([(True,)]), {"tick": start["tick"] + 1}
        return iter([]), start

    def _needs_batch(self, now_ms: int) -> bool:
        if self.remote is None:
            assert self.directory is not None
            return needs_batch(self.directory, self.time_mode, self.delay, now_ms)
        try:
            records = self.remote.records()
        except RemoteStorageError as error:
            # A tick only hurries a batch along: the next trigger reads again.
            log.warning("kstate-ticks: reading the timer records failed, no tick this trigger: %s", error)
            return False
        return records_need_batch(records, self.time_mode, self.delay, now_ms)

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

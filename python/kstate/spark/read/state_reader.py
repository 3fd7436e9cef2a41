"""``read_processor_state``: the state of a ``transform_with_state`` query as typed DataFrames, in
the shapes of Spark's state data source (``spark.read.format("statestore")`` with ``stateVarName``,
``readRegisteredTimers``, ``flattenCollectionTypes``, ``batchId``, ``readChangeFeed``).

Columns, as Spark's reader gives them for ``transformWithState`` (``key`` is a struct of the
grouping key's columns, ``partition_id`` the state partition):

- value state: ``key``, ``value``, ``partition_id``;
- list state: ``key``, ``list_element`` (one row per element), ``partition_id``; not flattened:
  ``key``, ``list_value`` (an array), ``partition_id``;
- map state: ``key``, ``user_map_key``, ``user_map_value``, ``partition_id``; not flattened:
  ``key``, ``map_value`` (a map), ``partition_id``;
- timers (``readRegisteredTimers``): ``key``, ``expiration_timestamp_ms``, ``partition_id``;
- change feed: ``batch_id``, ``change_type`` (``update`` / ``delete``, value null), ``key``,
  ``value``, ``partition_id``; a map's: ``key``, ``user_map_key``, ``user_map_value``; a list's:
  ``key``, ``list_element`` (``append`` for each element a call wrote: an ``appendValue``'s one,
  an ``appendList``'s or ``put``'s list; ``delete``, null, for each call's entry removed).
  Spark 4.3 names these columns so (``tests/spark/test_stateful_processor.py`` compares both
  readers on the same processor); timers have no change feed, as in Spark.

A variable declared with a schema has struct values of that schema (values written with an older
schema read as the current one); with a TTL each value is ``struct<value, ttlExpirationMs>``, as
Spark's. Like Spark's reader, values whose TTL ran out after the last batch's sweep are still
shown (with their ``ttlExpirationMs``): a batch deletes what expired by its own processing time.

The grouping key is stored as a pickle: it is read with an unpickler that builds only plain
values (numbers, strings, bytes, dates, timestamps). Values of variables declared without a
schema are pickles of arbitrary objects: they come as ``binary`` (the pickle), or with
``unpickle=True`` as a string (their ``repr``), which runs the pickles' code: only for state no
one else can write.

The state is read by one Spark task per partition, opening the partition's stores read-only
(as ``StateBackend.state_dataframe``): a running query's task of that partition waits meanwhile.
A store missing from the local state dir is restored first as the query restores it, from the
newest snapshot beside its changelog and the changelog after it; one whose history below its
changelog's start is gone with no usable snapshot is ``ChangelogTruncatedError``, not a partial state.
The change feed reads the changelogs and batch logs directly (no stores, no locks): for each
batch in the range, the records its last attempt published (a replayed batch's rolled-back
attempt does not count), up to one record per key and batch.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.errors import InvalidArgumentError, ProcessorStateError
from kstate.log.files import read_log
from kstate.log.object_store import is_url
from kstate.spark.engine.backend import StateBackend
from kstate.spark.engine.session import refuse_spark_connect
from kstate.spark.format.state_schemas import SchemaLog
from kstate.spark.format.state_values import VariableDecoder, plain_unpickle
from kstate.spark.processor.state_variables import TIMERS_BY_KEY
from kstate.spark.protocol.batch_log import BatchEntry
from kstate.spark.protocol.task import TaskInfo
from kstate.spark.routing.partitioning import PartitioningLog, store_builder


def _flag(value: Any, name: str) -> bool:
    """A boolean option given as Spark takes it (``True`` or ``"true"``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidArgumentError(f"{name} must be a boolean (or 'true' / 'false'), got {value!r}")


def _batch_id(value: Any, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a batch id (an int >= 0), got {value!r}") from None
    if isinstance(value, bool) or number < 0:
        raise InvalidArgumentError(f"{name} must be a batch id (an int >= 0), got {value!r}")
    return number


@dataclass(frozen=True)
class _Variable(VariableDecoder):
    """A state variable as the reader's rows show it (picklable, for the tasks)."""

    def value_type(self) -> Any:
        from pyspark.sql.types import BinaryType, LongType, StringType, StructType

        if self.values:
            plain = self.values[-1]
        else:
            plain = StringType() if self.pickles == "repr" else BinaryType()
        return StructType().add("value", plain).add("ttlExpirationMs", LongType()) if self.ttl else plain

    def user_key_type(self) -> Any:
        from pyspark.sql.types import BinaryType, StringType

        if self.key_schema is not None:
            return self.key_schema
        return StringType() if self.pickles == "repr" else BinaryType()


def read_processor_state(
    spark: Any,
    changelog_dir: str | os.PathLike[str],
    application_id: str = "kstate",
    *,
    state_dir: str | os.PathLike[str] | None = None,
    stateVarName: str | None = None,  # noqa: N803
    readRegisteredTimers: Any = False,  # noqa: N803
    flattenCollectionTypes: Any = True,  # noqa: N803
    batchId: Any = None,  # noqa: N803
    readChangeFeed: Any = False,  # noqa: N803
    changeStartBatchId: Any = None,  # noqa: N803
    changeEndBatchId: Any = None,  # noqa: N803
    unpickle: bool = False,
    changelog_storage_options: dict[str, Any] | None = None,
    lock_timeout: float = 600.0,
) -> Any:
    """The state of ``transform_with_state(..., changelog_dir=changelog_dir,
    application_id=application_id)`` as a DataFrame: Spark's state data source for
    ``transformWithState``, with its option names as keyword arguments (booleans also as
    ``"true"`` / ``"false"``; see the module docstring for the columns).

    ``stateVarName``: the state variable to read (or ``readRegisteredTimers=True``: the timers).
    ``batchId``: the state after that batch instead of the latest (as far back as the query's
    ``undo_retained_batches``). ``readChangeFeed=True`` with ``changeStartBatchId`` (and
    ``changeEndBatchId``, default the latest): every write of those batches. ``state_dir``: the
    query's (its partitions' local stores are read; one missing there is restored from the
    changelogs first); ``None``, as for the query: each executor's working directory.
    ``unpickle``: decode values stored without a schema (runs their pickles' code).
    ``changelog_storage_options``: as the query's, for changelogs on an object store (the state,
    not the change feed, can be read from one). ``lock_timeout``: seconds a task waits for a
    running query's task of the same partition."""

    refuse_spark_connect(
        spark,
        "read_processor_state",
        "it builds Spark's typed rows from an RDD. Read the state from a classic session "
        "(SparkSession.builder.master(...)), or StateBackend.state_dataframe's raw entries under Connect",
    )
    timers = _flag(readRegisteredTimers, "readRegisteredTimers")
    flatten = _flag(flattenCollectionTypes, "flattenCollectionTypes")
    change_feed = _flag(readChangeFeed, "readChangeFeed")
    as_of = _batch_id(batchId, "batchId")
    start = _batch_id(changeStartBatchId, "changeStartBatchId")
    end = _batch_id(changeEndBatchId, "changeEndBatchId")
    if timers == (stateVarName is not None):
        raise InvalidArgumentError("give stateVarName (a state variable) or readRegisteredTimers=True, one of them")
    if change_feed:
        if start is None:
            raise InvalidArgumentError("readChangeFeed needs changeStartBatchId")
        if as_of is not None:
            raise InvalidArgumentError("batchId and readChangeFeed cannot be used together")
        if end is not None and end < start:
            raise InvalidArgumentError(f"changeEndBatchId ({end}) cannot be smaller than changeStartBatchId ({start})")
    elif start is not None or end is not None:
        raise InvalidArgumentError("changeStartBatchId / changeEndBatchId go with readChangeFeed=True")

    pickles = "repr" if unpickle else "bytes"
    url = os.fspath(changelog_dir) if _is_url(changelog_dir) else None
    local = Path() if url is not None else Path(changelog_dir).absolute()
    options = dict(changelog_storage_options or {})
    partitioning = PartitioningLog(local, application_id, url, options).current()
    schemas = SchemaLog(local, application_id, url, options).current()
    if partitioning is None or schemas is None:
        raise InvalidArgumentError(
            f"no transform_with_state state of application {application_id!r} at {changelog_dir} (it has "
            "no partitioning or state schema record: has the query run a batch?)"
        )
    if timers:
        if TIMERS_BY_KEY not in partitioning.stores:
            raise InvalidArgumentError('the query has no timers (time_mode "None")')
        variable = _Variable(TIMERS_BY_KEY, "timers", pickles=pickles)
    else:
        recorded = schemas.variables.get(stateVarName)  # type: ignore[arg-type]
        live = sorted(n for n, v in schemas.variables.items() if v.kind != "deleted")
        if recorded is None or recorded.kind == "deleted":
            raise InvalidArgumentError(f"no state variable {stateVarName!r}; the query's are {live}")
        variable = _Variable(stateVarName, recorded.kind, recorded.values, recorded.key, recorded.ttl, pickles)  # type: ignore[arg-type]
    if change_feed and timers:
        raise InvalidArgumentError("timers have no change feed (readRegisteredTimers with readChangeFeed), as in Spark")
    if change_feed and url is not None:
        raise InvalidArgumentError("the change feed reads changelogs on a file system, not at a URL")

    # The stores as the query built them, logging configs included: a partition restores as the
    # query would, from the newest snapshot beside its changelog (on an object store listed only by
    # stores that take snapshots) and the changelog after it.
    builders = [store_builder(name, description) for name, description in partitioning.stores.items()]
    backend = StateBackend(
        builders,
        state_dir,
        changelog_dir,
        application_id,
        lock_timeout=lock_timeout,
        keys=partitioning.key_names,
        num_partitions=partitioning.num_partitions,
        changelog_storage_options=options,
    )
    layout = backend.current_layout()
    key_type = _key_type(partitioning.keys)
    key_decoder = pickle.loads if unpickle else plain_unpickle
    schema = _schema(variable, key_type, flatten, change_feed)
    n = partitioning.num_partitions

    if change_feed:
        rescaled = partitioning.generation > 0

        def partition_rows(partition: int) -> Iterator[tuple[Any, ...]]:
            return _change_feed(layout, variable, partition, start, end, key_decoder, rescaled)  # type: ignore[arg-type]

    else:

        def partition_rows(partition: int) -> Iterator[tuple[Any, ...]]:
            task = TaskInfo.current()
            state = backend.partition_state(task, layout)
            stores = state.open(read_only=True)
            try:
                state.show_as_of(as_of)
                with stores[variable.name].all() as entries:
                    # Streamed: Spark takes the rows as they come, in chunks of the store's iterator.
                    yield from _state_rows(variable, entries, task.partition, flatten, key_decoder)
            finally:
                state.close_view()

    rows = spark.sparkContext.parallelize(range(n), n).flatMap(partition_rows)
    return spark.createDataFrame(rows, schema)


def _is_url(path: Any) -> bool:
    return is_url(os.fspath(path))


def _key_type(keys: tuple[tuple[str, str], ...]) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromDDL(", ".join(f"`{name}` {kind}" for name, kind in keys))


def _schema(variable: _Variable, key_type: Any, flatten: bool, change_feed: bool) -> Any:
    from pyspark.sql.types import ArrayType, IntegerType, LongType, MapType, StringType, StructType

    out = StructType()
    if change_feed:
        out = out.add("batch_id", LongType()).add("change_type", StringType())
    out = out.add("key", key_type)
    if variable.kind == "timers":
        out = out.add("expiration_timestamp_ms", LongType())
    elif variable.kind == "map" and (flatten or change_feed):
        out = out.add("user_map_key", variable.user_key_type()).add("user_map_value", variable.value_type())
    elif variable.kind == "map":
        out = out.add("map_value", MapType(variable.user_key_type(), variable.value_type()))
    elif variable.kind == "list" and not flatten and not change_feed:
        out = out.add("list_value", ArrayType(variable.value_type()))
    elif variable.kind == "list":
        out = out.add("list_element", variable.value_type())
    else:
        out = out.add("value", variable.value_type())
    return out.add("partition_id", IntegerType())


def _state_rows(
    variable: _Variable, stored: Iterator[tuple[bytes, bytes]], partition: int, flatten: bool, key_decoder: Any
) -> Iterator[tuple[Any, ...]]:
    """One partition's rows of ``variable`` from its store's entries, in key order: each grouping
    key's list elements and map entries come together (not flattened: one row per key)."""
    kind = variable.kind
    if kind == "timers":
        for store_key, _ in stored:
            pickled, expiry = _core.state_split_timer_by_key(store_key)
            yield (key_decoder(pickled), expiry, partition)
        return
    value_of = variable.value_decoder()
    elements_of = variable.list_decoder()
    if kind == "value":
        for store_key, raw in stored:
            yield (key_decoder(store_key), value_of(raw), partition)
        return
    user_key_of = variable.user_key_decoder()
    if flatten:
        for store_key, raw in stored:
            pickled, at = _core.state_split_prefixed(store_key)
            if kind == "list":
                key = key_decoder(pickled)
                for element in elements_of(store_key, raw):
                    yield (key, element, partition)
            else:
                yield (key_decoder(pickled), user_key_of(store_key, at), value_of(raw), partition)
        return

    def collected(entries: list[tuple[bytes, bytes, int]]) -> Any:
        if kind == "list":
            return [element for store_key, raw, _ in entries for element in elements_of(store_key, raw)]
        return {user_key_of(store_key, at): value_of(raw) for store_key, raw, at in entries}

    current: bytes | None = None
    entries: list[tuple[bytes, bytes, int]] = []
    for store_key, raw in stored:
        pickled, at = _core.state_split_prefixed(store_key)
        if pickled != current and entries:
            yield (key_decoder(current), collected(entries), partition)
            entries = []
        current = pickled
        entries.append((store_key, raw, at))
    if entries:
        yield (key_decoder(current), collected(entries), partition)


def effective_history(entries: dict[int, BatchEntry]) -> list[tuple[BatchEntry, BatchEntry | None]]:
    """The batches whose writes make a partition's published state, oldest first: each as
    ``(entry, entry before it)``, the records between their offsets being its writes. A batch
    rolled back for a replay (an entry ``restates`` names) is left out; its replay is in."""
    history = []
    position = max(entries) if entries else None
    while position is not None:
        entry = entries[position]
        if entry.restates is not None:
            # A rollback entry: the state of the entry before the undone one, again.
            position = entries[entry.restates].previous
            continue
        history.append((entry, None if entry.previous is None else entries[entry.previous]))
        position = entry.previous
    return history[::-1]


def _read_batch_log(directory: Any) -> dict[int, BatchEntry]:
    entries: dict[int, BatchEntry] = {}
    if not directory.exists():
        return entries
    for batch in read_log(directory):
        for offset, value in zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist()):
            entries[offset] = BatchEntry.from_bytes(value, offset)
    return entries


def _change_feed(
    layout: Any,
    variable: _Variable,
    partition: int,
    start: int,
    end: int | None,
    key_decoder: Any,
    rescaled: bool = False,
) -> Iterator[tuple[Any, ...]]:
    """``variable``'s changes in batches ``start`` to ``end`` of one partition. ``rescaled``: the
    state is a rescale's generation, whose first published entry holds every re-routed entry
    (not a batch's writes), so the feed starts after it."""

    entries = _read_batch_log(layout.batch_log_dir(partition))
    store = variable.name
    changelog = layout.changelog_partition_dir(store, partition)
    value_of = variable.value_decoder()
    elements_of = variable.list_decoder()
    user_key_of = variable.user_key_decoder() if variable.kind == "map" else None
    for entry, before in effective_history(entries):
        if entry.batch_id < start or (end is not None and entry.batch_id > end):
            continue
        if rescaled and (before is None or not before.offsets):
            raise ProcessorStateError(
                f"partition {partition}: batch {entry.batch_id} is where a rescale installed the state of this "
                f"generation ({layout.application_id}); the change feed starts after it (changeStartBatchId > "
                f"{entry.batch_id})"
            )
        first = (-1 if before is None else before.offsets.get(store, -1)) + 1
        last = entry.offsets.get(store, -1)
        if last < first:
            continue
        records = [(o, k, v) for b in read_log(changelog, first, last + 1) for o, k, v in _records(b)]
        if [o for o, _, _ in records] != list(range(first, last + 1)):
            raise ProcessorStateError(
                f"partition {partition}: the changelog of {store!r} no longer holds every write of batch "
                f"{entry.batch_id} (offsets {first}-{last}; compacted or deleted by retention): the change feed "
                "cannot reach that batch"
            )
        for _, store_key, raw in records:
            change = "delete" if raw is None else "update"
            if variable.kind == "value":
                yield (
                    entry.batch_id,
                    change,
                    key_decoder(store_key),
                    None if raw is None else value_of(raw),
                    partition,
                )
                continue
            pickled, at = _core.state_split_prefixed(store_key)
            if variable.kind == "map":
                assert user_key_of is not None
                value = None if raw is None else value_of(raw)
                yield (entry.batch_id, change, key_decoder(pickled), user_key_of(store_key, at), value, partition)
            elif raw is None:
                # A deleted entry's elements are not in its record: one delete row stands for them.
                yield (entry.batch_id, "delete", key_decoder(pickled), None, partition)
            else:
                key = key_decoder(pickled)
                for element in elements_of(store_key, raw):
                    yield (entry.batch_id, "append", key, element, partition)


def _records(batch: Any) -> Iterator[tuple[int, bytes, bytes | None]]:
    return zip(batch.column("offset").to_pylist(), batch.column("key").to_pylist(), batch.column("value").to_pylist())

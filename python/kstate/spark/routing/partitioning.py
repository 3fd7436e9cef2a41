"""Which keys a partition's state holds: kstate decides it, records it, and checks every row.

Spark routes a row of ``df.repartition(n, *keys)`` to partition ``pmod(hash(*keys), n)``
(Murmur3, seed 42: ``HashPartitioning``), and adaptive query execution leaves a repartition with
an explicit count alone. Without a count, AQE may coalesce partitions differently in every
micro-batch, and with another count or other columns a key's rows reach another partition's
state: results go silently wrong. So kstate

- routes with an explicit count itself (``StateBackend.partition``, the grouped helpers,
  ``transform_with_state``);
- records the partitioning with the state, once per application, beside the batch logs
  (``<changelog_dir>/<application_id>-kstate-partitioning/<seq>.json``, each file created
  exclusively; the highest ``seq`` is current): partition count, key columns and their types,
  the stores and how their keys map to key columns (for ``kstate rescale``), and the generation;
- checks in every task, before the function sees a batch, that each row hashes to the task's
  partition (``verify_batch``), and fails the task with ``MisroutedRowsError`` otherwise;
- refuses a query whose count or keys differ from the record (``PartitioningChangedError``),
  unless the state is rescaled first (``kstate.spark.rescale``).

A rescale writes the state of the new partition count as a new *generation*: its stores,
changelogs and batch logs live under the application id ``<application_id>-gen<g>``, and the
record naming it is the switch.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kstate.errors import CorruptedDataError, InvalidArgumentError, MisroutedRowsError, PartitioningChangedError
from kstate.spark.format.record_log import RecordLog
from kstate.spark.routing.hashing import partition_ids
from kstate.stores import StoreBuilder
from kstate.suppliers import KeyValueBytesStoreSupplier, SessionBytesStoreSupplier, WindowBytesStoreSupplier

if TYPE_CHECKING:
    from kstate.suppliers import AnySupplier

FORMAT_VERSION = 1

# Spark SQL type names of the key column types kstate routes by, from their Arrow types.
_KINDS = {
    "string": "string",
    "large_string": "string",
    "binary": "binary",
    "large_binary": "binary",
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "bool": "boolean",
    "float": "float",
    "double": "double",
    "date32[day]": "date",
}


def key_kind(arrow_type: Any) -> str:
    """The Spark SQL type name of a key column's Arrow type (``string``, ``bigint``, ...)."""
    import pyarrow as pa

    if pa.types.is_timestamp(arrow_type):
        return "timestamp" if arrow_type.tz is not None else "timestamp_ntz"
    kind = _KINDS.get(str(arrow_type))
    if kind is None:
        raise InvalidArgumentError(
            f"kstate cannot route by a key column of type {arrow_type}; key columns may be "
            f"{sorted(set(_KINDS.values()) | {'timestamp', 'timestamp_ntz'})}"
        )
    return kind


def arrow_type_of(kind: str) -> Any:
    """The Arrow type a key column of Spark type ``kind`` arrives in (rescaling builds arrays of it)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "binary": pa.binary(),
        "tinyint": pa.int8(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "boolean": pa.bool_(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", "UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if kind not in types:
        raise InvalidArgumentError(f"unknown key column type {kind!r} in a partitioning record")
    return types[kind]


_SUPPLIERS = {
    "key_value": KeyValueBytesStoreSupplier,
    "window": WindowBytesStoreSupplier,
    "session": SessionBytesStoreSupplier,
}
"""The supplier class of each store kind a record names."""
SNAPSHOT_KINDS = {"key_value": "key-value", "window": "window", "session": "session"}
"""The kind a snapshot manifest names (``kstate.log.snapshots``) of each store kind a record names."""


def store_supplier(description: Mapping[str, Any], **changed: Any) -> AnySupplier:
    """The supplier of a store as the record describes it (``changed``: fields to differ)."""
    return _SUPPLIERS[description["kind"]](**{**description["supplier"], **changed})


def store_builder(name: str, description: Mapping[str, Any]) -> StoreBuilder:
    """A bytes-serde builder of a store as the record describes it, logged as the query logs it."""
    logging = dict(description.get("logging") or {})
    return StoreBuilder(
        store_supplier(description),
        "bytes",
        "bytes",
        bool(description["timestamped"]),
        dict(description.get("config") or {}),
        logging,
    ).with_logging_enabled(logging)


def generation_application_id(application_id: str, generation: int) -> str:
    """The application id the state of ``generation`` lives under (generation 0: the given one)."""
    return application_id if generation == 0 else f"{application_id}-gen{generation}"


@dataclass(frozen=True)
class Partitioning:
    """How an application's state is partitioned (one record)."""

    num_partitions: int
    keys: tuple[tuple[str, str], ...]
    """``(column, Spark SQL type)`` of each key column, in routing order."""
    generation: int = 0
    stores: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per store: its supplier and how its keys map to key columns (``kstate.spark.rescale``)."""
    seq: int = -1
    time_ms: int = 0

    @property
    def key_names(self) -> list[str]:
        return [name for name, _ in self.keys]

    def describe_keys(self) -> str:
        return ", ".join(f"{name} {kind}" for name, kind in self.keys)

    def to_bytes(self) -> bytes:
        fields = asdict(self)
        del fields["seq"]
        fields["keys"] = [list(k) for k in self.keys]
        return json.dumps({"format": FORMAT_VERSION, **fields}, sort_keys=True, indent=1).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, seq: int) -> Partitioning:
        try:
            fields = json.loads(raw)
            if fields.pop("format") != FORMAT_VERSION:
                raise ValueError("unknown format version")
            fields["keys"] = tuple((str(n), str(k)) for n, k in fields["keys"])
            return cls(**fields, seq=seq)
        except (ValueError, TypeError, KeyError) as error:
            raise CorruptedDataError(f"partitioning record {seq} is not a record: {error}") from None


class PartitioningLog(RecordLog):
    """The records of one application's partitioning, beside its changelogs. The highest ``seq``
    is current."""

    suffix = "kstate-partitioning"

    def current(self) -> Partitioning | None:
        """The current record; ``None`` before the application's first one."""
        latest = self.latest()
        return None if latest is None else Partitioning.from_bytes(latest[1], latest[0])

    def append(self, record: Partitioning) -> Partitioning:
        """Writes ``record`` as the one after the current (``seq`` of the current + 1, exclusive
        create: of two writers one wins, the other gets ``FileExistsError``)."""
        current = self.current()
        record = replace(record, seq=0 if current is None else current.seq + 1, time_ms=time.time_ns() // 1_000_000)
        self.create(record.seq, record.to_bytes())
        return record

    def establish(self, wanted: Partitioning) -> Partitioning:
        """The current record if it agrees with ``wanted`` (count, keys, generation not
        compared), else raises ``PartitioningChangedError``; without one, records ``wanted``.
        A record is rewritten (same count and keys) when ``wanted`` names stores it lacks."""
        for _ in range(3):
            current = self.current()
            if current is None:
                try:
                    return self.append(wanted)
                except FileExistsError:
                    continue  # another task or driver recorded it first: compare with theirs
            check_compatible(current, wanted.num_partitions, wanted.keys, self)
            missing = {n: s for n, s in wanted.stores.items() if n not in current.stores}
            if not missing:
                return current
            try:
                return self.append(replace(current, stores={**current.stores, **missing}))
            except FileExistsError:
                continue
        raise PartitioningChangedError(f"the partitioning record at {self.location} keeps changing; retry")

    def rescale_command(self, partitions: int) -> str:
        """The ``kstate rescale`` command line that rebuilds this application's state for
        ``partitions`` (a URL's ``--storage-option`` flags are the user's to add)."""
        return shlex.join(
            ["kstate", "rescale", self.changelog_location]
            + ["--application-id", self.application_id, "--partitions", str(partitions)]
        )


def check_compatible(
    current: Partitioning,
    num_partitions: int | None,
    keys: Sequence[tuple[str, str | None]],
    records: PartitioningLog,
) -> None:
    """Raises ``PartitioningChangedError`` if a query with ``num_partitions`` (``None``: any) and
    ``keys`` (``(name, kind or None)``) cannot use state recorded as ``current`` in ``records``."""
    location = records.location
    names = [n for n, _ in keys]
    if names != current.key_names:
        raise PartitioningChangedError(
            f"the state at {location} is partitioned by key columns ({current.describe_keys()}), this query by "
            f"({', '.join(names)}): a key's state would be looked up in the wrong partition. Use the same key "
            "columns, or start over with a new application_id"
        )
    for (name, kind), (_, recorded) in zip(keys, current.keys):
        if kind is not None and kind != recorded:
            raise PartitioningChangedError(
                f"key column {name} is {kind} in this query and was {recorded} when the state at {location} "
                "was written: Spark hashes the types differently, so keys would move between partitions. Cast "
                f"the column back to {recorded}"
            )
    if num_partitions is not None and num_partitions != current.num_partitions:
        raise PartitioningChangedError(
            f"the state at {location} has {current.num_partitions} partitions and this query asks for "
            f"{num_partitions}: each key's state lives in partition pmod(hash(keys), {current.num_partitions}). "
            f"Keep num_partitions={current.num_partitions}, or rescale the state first: "
            + records.rescale_command(num_partitions)
        )


def verify_task_partition(partitioning: Partitioning, partition: int, batch_id: int) -> None:
    """Raises ``MisroutedRowsError`` if the task's partition id cannot be one of the state's
    partitions: the stage has more partitions than the state (a repartition without a count, or
    with another), whether or not this task got rows. Checked before anything opens."""
    n = partitioning.num_partitions
    if partition >= n:
        keys = ", ".join(partitioning.key_names)
        raise MisroutedRowsError(
            f"task of partition {partition} in batch {batch_id}, but the state has {n} partitions: rows must "
            f"reach kstate through state.partition(df), which is df.repartition({n}, {keys!r}). Causes: a "
            "repartition without a count (200 shuffle partitions, or what adaptive query execution makes of "
            "them) or with another count. Nothing of this task was opened or committed"
        )


def verify_batch(batch: Any, partitioning: Partitioning, partition: int, batch_id: int) -> None:
    """Raises ``MisroutedRowsError`` unless every row of ``batch`` (a ``pyarrow.RecordBatch`` or
    a ``pandas.DataFrame``) hashes to ``partition``: one native hash and one compare per batch."""
    import numpy as np

    columns = key_columns(batch, partitioning)
    if not columns or len(columns[0]) == 0:
        return
    ids = partition_ids(columns, partitioning.num_partitions)
    wrong = np.flatnonzero(ids != partition)
    if wrong.size == 0:
        return
    first = int(wrong[0])
    example = ", ".join(f"{name}={column[first].as_py()!r}" for name, column in zip(partitioning.key_names, columns))
    n = partitioning.num_partitions
    keys = ", ".join(partitioning.key_names)
    raise MisroutedRowsError(
        f"partition {partition} of batch {batch_id} got {wrong.size} of {len(ids)} rows whose keys belong to "
        f"other partitions (first: {example} -> partition {int(ids[first])} of {n}). kstate keeps a key's "
        f"state in partition pmod(hash({keys}), {n}), so rows must reach the task through "
        f"state.partition(df), which is df.repartition({n}, {keys!r}). Causes: a repartition without a count "
        "(adaptive query execution coalesces partitions per batch), on other columns or with another count, "
        "or none. Nothing of this task was committed"
    )


def key_columns(batch: Any, partitioning: Partitioning) -> list[Any]:
    """The key columns of ``batch`` as Arrow arrays of their recorded types."""
    import pyarrow as pa

    arrow = isinstance(batch, (pa.RecordBatch, pa.Table))
    names = batch.schema.names if arrow else list(batch.columns)
    out = []
    for name, kind in partitioning.keys:
        if name not in names:
            raise MisroutedRowsError(
                f"the rows lack key column {name!r} (the state is partitioned by {partitioning.describe_keys()}); "
                f"the function gets {names}"
            )
        if arrow:
            column = batch.column(name)
            if key_kind(column.type) != kind:
                raise PartitioningChangedError(
                    f"key column {name} is {key_kind(column.type)} in these rows, {kind} in the state's record"
                )
        else:
            column = pa.Array.from_pandas(batch[name]).cast(arrow_type_of(kind))
        out.append(column)
    return out


def checked_batches(
    batches: Iterator[Any], partitioning: Partitioning, partition: int, batch_id: int, failures: list[BaseException]
) -> Iterator[Any]:
    """``batches``, each verified before it is passed on; a failure is also kept in
    ``failures`` so a function that swallows it still cannot commit."""
    for batch in batches:
        try:
            verify_batch(batch, partitioning, partition, batch_id)
        except BaseException as error:
            failures.append(error)
            raise
        yield batch


def keys_of_schema(arrow_schema: Any, keys: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``(name, Spark type)`` of ``keys`` in ``arrow_schema``; clear errors for missing columns."""
    names = arrow_schema.names
    missing = [k for k in keys if k not in names]
    if missing:
        raise InvalidArgumentError(f"key columns {missing} are not in the DataFrame's columns {names}")
    return tuple((k, key_kind(arrow_schema.field(k).type)) for k in keys)

"""``transform_with_state``'s initial state: routed once, read by each partition in batch 0.

Spark cannot union a static DataFrame into a streaming one, so the initial state does not travel
with the input. Before the query starts, one Spark job routes its rows as the state is
(``repartition(n, *keys)``, every row checked against its task's partition as input is) and each
task writes its partition's rows as one Arrow IPC file,
``<changelog_dir>/<application_id>-kstate-initial-state/part-<partition>.arrow`` (written beside
and renamed into place). In batch 0 (and a replay of it) each partition reads its file and calls
``handleInitialState`` per key. Once any partition has published a batch the files are not
rewritten: as in Spark, only the first batch sees an initial state.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.spark.format.conversion import to_arrow_schema
from kstate.spark.protocol.batch_log import peek_head
from kstate.spark.routing.groups import iter_groups
from kstate.spark.routing.partitioning import keys_of_schema, verify_batch

log = logging.getLogger("kstate.spark")

_DIRECTORY = "{application_id}-kstate-initial-state"


def stage_initial_state(initial_state: Any, keys: list[str], backend: Any) -> Path:
    """Routes ``initial_state`` (a DataFrame or a ``GroupedData``) into per-partition files unless
    the state already published a batch; returns their directory."""
    from pyspark.sql import DataFrame

    if not isinstance(initial_state, DataFrame):
        # df.groupBy(...): a GroupedData, classic or Spark Connect's (which is not a subclass of it)
        initial_state = getattr(initial_state, "_df", initial_state)
    if not isinstance(initial_state, DataFrame):
        raise InvalidArgumentError(f"initial_state must be a DataFrame or df.groupBy(...), got {initial_state!r}")
    record = backend.partitioning
    layout = backend.layout_of(record)
    if layout.changelog_url is not None:
        raise InvalidArgumentError("initial_state needs a changelog_dir on a file system (one every executor reads)")
    missing = [k for k in keys if k not in initial_state.columns]
    if missing:
        raise InvalidArgumentError(f"initial_state lacks the key columns {missing}; it has {initial_state.columns}")
    kinds = keys_of_schema(to_arrow_schema(initial_state.schema), keys)
    if tuple(kinds) != tuple(record.keys):
        raise InvalidArgumentError(
            f"initial_state's key columns are ({', '.join(f'{n} {k}' for n, k in kinds)}), the input's are "
            f"({record.describe_keys()}): cast them alike, so both route each key to the same partition"
        )
    directory = layout.changelog_dir / _DIRECTORY.format(application_id=layout.application_id)
    published = [p for p in range(record.num_partitions) if peek_head(layout.batch_log_dir(p)) is not None]
    if published:
        log.info("initial state: the state already has published batches; %s is kept as it is", directory)
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    log.info("initial state: routing into %d partitions at %s", record.num_partitions, directory)
    target = str(directory)

    def write(batches: Any) -> Any:
        import pyarrow as pa
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        collected = []
        for batch in batches:
            verify_batch(batch, record, partition, 0)
            collected.append(batch)
        rows = sum(b.num_rows for b in collected)
        if rows:
            path = os.path.join(target, f"part-{partition}.arrow")
            with pa.OSFile(path + ".tmp", "wb") as sink, pa.ipc.new_file(sink, collected[0].schema) as writer:
                for batch in collected:
                    writer.write_batch(batch)
            os.replace(path + ".tmp", path)
        yield pa.RecordBatch.from_arrays(
            [pa.array([partition], pa.int32()), pa.array([rows], pa.int64())], names=["partition", "rows"]
        )

    routed = initial_state.repartition(record.num_partitions, *keys)
    written = routed.mapInArrow(write, "partition int, rows long").collect()
    log.info("initial state: %d rows in %d partitions", sum(r["rows"] for r in written), len(written))
    return directory


def read_initial_state(
    directory: Path, partition: int, keys: list[str], pandas: bool, conversion: Any = None
) -> dict[tuple, Any]:
    """The initial state of ``partition`` per key tuple: a ``pandas.DataFrame`` each, or a list
    of ``Row``s; empty where the partition has none."""
    import pyarrow as pa

    path = Path(directory) / f"part-{partition}.arrow"
    if not path.exists():
        return {}
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    return dict(iter_groups(iter(table.to_batches()), keys, pandas, not pandas, conversion=conversion))

"""kstate as the state backend of PySpark UDFs, exactly once per micro-batch.

```python
from kstate import Stores
from kstate.spark import StateBackend

counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
state = StateBackend([counts], state_dir="/tmp/state", changelog_dir="/data/changelog", application_id="clicks",
                     keys=["key"])

@state.map_in_arrow
def running_count(batches, stores):
    ...  # read and write stores["counts"], yield pyarrow.RecordBatch

state.partition(df).mapInArrow(running_count, "key string, count long")  # routed by kstate, checked per row
```

``transform_with_state(df, ["key"], processor, schema, state_dir=..., api="pandas" | "row")`` runs
a processor written for Spark's ``transformWithStateInPandas`` / ``transformWithState`` on kstate
stores (``docs/stateful-processor.md``); ``kstate.spark.testing.TwsTester`` tests one without Spark;
``read_processor_state`` reads its state as Spark's state data source does (typed, per variable).

Each micro-batch's figures (``numRowsTotal``, ``commitTimeMs``, per store ...) are in the query's
progress, ``query.lastProgress["observedMetrics"]["kstate"]`` (``state_figures(progress)`` reads
them as a dict in classic Spark and Spark Connect alike); ``StateMetricsListener`` logs them per
batch and hands them to a callback.
"""

from typing import Any

from kstate.spark.engine.backend import StateBackend
from kstate.spark.engine.observed import state_figures
from kstate.spark.engine.session import configure_environment, local_session
from kstate.spark.processor.processor import (
    ExpiredTimerInfo,
    ListState,
    MapState,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    ValueState,
    transform_with_state,
)
from kstate.spark.protocol.batch_log import BatchEntry
from kstate.spark.protocol.exactly_once import PartitionState, TaskStores
from kstate.spark.protocol.progress import BatchProgress
from kstate.spark.protocol.task import TaskInfo
from kstate.spark.read.state_reader import read_processor_state


def __getattr__(name: str) -> Any:
    if name == "StateMetricsListener":  # a StreamingQueryListener: PySpark loads with it, not with kstate.spark
        from kstate.spark.engine.metrics_listener import StateMetricsListener

        return StateMetricsListener
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_data_source(spark):  # noqa: ANN001, ANN201
    """Makes ``spark.read.format("kstate")`` (kstate's Kafka logs as a DataFrame) available; see
    ``kstate.spark.engine.source``."""
    from kstate.spark.engine.source import register_data_source as register

    register(spark)


__all__ = [
    "StateBackend",
    "TaskStores",
    "TaskInfo",
    "PartitionState",
    "BatchEntry",
    "BatchProgress",
    "StateMetricsListener",
    "state_figures",
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "ValueState",
    "ListState",
    "MapState",
    "TimerValues",
    "ExpiredTimerInfo",
    "transform_with_state",
    "read_processor_state",
    "configure_environment",
    "local_session",
    "register_data_source",
]

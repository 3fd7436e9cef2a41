"""Serving a running kstate Spark application's state to any Python process: Kafka Streams'
interactive queries, for Spark, without Spark.

```python
from kstate.serving import StateReplica

with StateReplica("s3://bucket/changelogs", "clicks", storage_options={...}, local_dir="/var/lib/replica") as replica:
    replica.follow(interval=1.0)
    answer = replica.get("counts", "user-1", at_least_batch=12)
    answer.value, answer.batch_id
```

``StateReplica`` and ``Answer`` live in ``kstate.spark.serving.replica``; they are imported on
first use here, so ``import kstate.serving`` loads nothing else.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any

    from kstate.spark.serving.replica import Answer, StateReplica

__all__ = ["StateReplica", "Answer"]


def __getattr__(name: str) -> "Any":
    if name not in __all__:
        raise AttributeError(f"module 'kstate.serving' has no attribute {name!r}")
    from kstate.spark.serving import replica  # the stores, Arrow and the object-store side load here

    for exported in __all__:  # every later lookup is a plain module attribute
        globals()[exported] = getattr(replica, exported)
    return globals()[name]


def __dir__() -> "list[str]":
    return sorted({*globals(), *__all__})

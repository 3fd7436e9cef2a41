"""Read replicas of an application's state: ``StateReplica`` (public as ``kstate.serving``),
its partitions' local copies, following the batch logs, routing reads, state variables.

Layer 7 of kstate.spark: imports any layer below, and no PySpark (a replica runs where Spark
does not)."""

"""Exactly once per micro-batch: a task's identity, locks, the batch log, undo files, idle
stores, in-place upgrades, progress and ``PartitionState`` / ``TaskStores`` built on them.

Layer 2 of kstate.spark: imports ``format`` and ``protocol`` only, and no PySpark at module
level (a task's commit protocol runs without a Spark session)."""

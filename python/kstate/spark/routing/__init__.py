"""Which partition a row belongs to: Spark's hash, the partitioning record that pins it, and the
groups of a partition's rows.

Layer 3 of kstate.spark: imports ``format``, ``protocol`` and ``routing``."""

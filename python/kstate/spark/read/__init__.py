"""A ``transform_with_state`` query's state read back as Spark's state data source reads it.

Layer 6 of kstate.spark: imports the layers below it and ``read``."""

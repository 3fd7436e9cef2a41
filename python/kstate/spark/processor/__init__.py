"""Spark's ``StatefulProcessor`` API on kstate stores: ``transform_with_state``, the state
variables, timers, ticks and initial state.

Layer 5 of kstate.spark: imports the layers below it and ``processor``."""

"""How kstate.spark's state looks: the row codec, Arrow/pandas conversion, state variable
schemas and the JSON record logs they are kept in.

Layer 1 of kstate.spark: imports nothing from kstate.spark outside ``format``."""

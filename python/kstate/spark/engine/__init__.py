"""kstate in a Spark job: ``StateBackend`` (stores for a UDF, exactly once), the Spark session
helpers and ``format("kstate")``.

Layer 4 of kstate.spark: imports ``format``, ``protocol``, ``routing`` and ``engine``."""

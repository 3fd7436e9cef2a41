"""``StateMetricsListener``: kstate's figures of each micro-batch, from the query's progress, in
one log line and handed to a callback (for users who ship metrics elsewhere)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from pyspark.sql.streaming import StreamingQueryListener

from kstate.spark.engine.observed import METRICS_NAME, state_figures
from kstate.spark.protocol.progress import STATE_FIGURES

log = logging.getLogger("kstate.spark")


class StateMetricsListener(StreamingQueryListener):
    """A ``StreamingQueryListener`` (``spark.streams.addListener(StateMetricsListener())``) that,
    after each micro-batch with kstate's figures (``observedMetrics[name]``), logs them in one
    line (``kstate.spark``, INFO: the batch's figures over all stores) and calls
    ``callback(progress, figures)`` with the batch's ``StreamingQueryProgress`` and every figure
    (``{"numRowsTotal": ..., "<store>.numRowsTotal": ..., ...}``). Classic Spark and Spark
    Connect alike (under Connect the listener runs in the client)."""

    def __init__(self, callback: Callable[[Any, dict[str, int]], None] | None = None, name: str = METRICS_NAME) -> None:
        self.callback = callback
        self.name = name

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        progress = event.progress
        figures = state_figures(progress, self.name)
        if figures is None:
            return
        log.info(
            "query %s batch %d: %s %s",
            progress.name or progress.id,
            progress.batchId,
            self.name,
            " ".join(f"{figure}={figures[figure]}" for figure in STATE_FIGURES if figure in figures),
        )
        if self.callback is not None:
            self.callback(progress, figures)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass

"""The soak's three stateful queries, each a path of kstate users take, and the logic they run
(shipped to Spark's workers by value). ``reference.py`` computes the same in plain Python.

- ``event``: ``transform_with_state`` (Row API, event time): value, list and map state, a value
  with a TTL, an event-time timer per key and minute.
- ``processing``: ``transform_with_state`` (Row API, processing time): a processing-time timer
  per key, registered when none is pending.
- ``backend``: ``StateBackend.map_in_arrow`` over a key-value store (a running count per key)
  and a window store (a count per key and minute)."""

from __future__ import annotations

import sys

from pyspark import cloudpickle
from pyspark.sql import Row

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TWS_OUTPUT = "key string, kind string, file long, count long, recent long, buckets long, prev long"
BACKEND_OUTPUT = "key string, file long, total long, window_start long, window_count long"
RECENT = 5
BUCKETS = 8
MINUTE_MS = 60_000
LAST_FILE_TTL_MS = 15_000
PROCESSING_TIMER_MS = 2_000
WINDOW_RETENTION_MS = 30 * MINUTE_MS


def timer_of(event_ms: int) -> int:
    """The event-time timer a row at ``event_ms`` registers: its minute's end plus a minute."""
    return (event_ms // MINUTE_MS + 2) * MINUTE_MS


class EventTimeCounts:
    """Per key: a count, the last ``RECENT`` values, a count per value bucket (map), the file of
    the key's previous rows (a value with a TTL), and a timer per minute of event time."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "count long")
        self.recent = handle.getListState("recent", "v long")
        self.buckets = handle.getMapState("buckets", "bucket long", "count long")
        self.last_file = handle.getValueState("last_file", "file long", LAST_FILE_TTL_MS)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802
        rows = sorted(rows, key=lambda r: r.v)
        count = (self.count.get() or (0,))[0] + len(rows)
        self.count.update((count,))
        recent = [r[0] for r in (self.recent.get() or [])] + [r.v for r in rows]
        self.recent.put([(v,) for v in recent[-RECENT:]])
        for row in rows:
            bucket = (row.v % BUCKETS,)
            seen = self.buckets.getValue(bucket)[0] if self.buckets.containsKey(bucket) else 0
            self.buckets.updateValue(bucket, (seen + 1,))
        prev = self.last_file.get()
        self.last_file.update((rows[0].file,))
        self.handle.registerTimer(timer_of(max(r.event_ms for r in rows)))
        yield Row(
            key=key[0],
            kind="data",
            file=rows[0].file,
            count=count,
            recent=sum(recent[-RECENT:]),
            buckets=len(list(self.buckets.keys())),
            prev=None if prev is None else prev[0],
        )

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802
        yield Row(
            key=key[0],
            kind="timer",
            file=-1,
            count=expiredTimerInfo.getExpiryTimeInMs(),
            recent=None,
            buckets=None,
            prev=None,
        )

    def close(self):
        pass


class ProcessingTimeCounts:
    """Per key: a count, and a processing-time timer registered when none is pending; the
    registration and the firing each say which file registered it."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "count long")
        self.pending = handle.getValueState("pending", "file long")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802
        rows = list(rows)
        file = rows[0].file
        count = (self.count.get() or (0,))[0] + len(rows)
        self.count.update((count,))
        yield Row(key=key[0], kind="data", file=file, count=count, recent=None, buckets=None, prev=None)
        if self.pending.get() is None:
            self.pending.update((file,))
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + PROCESSING_TIMER_MS)
            yield Row(key=key[0], kind="registered", file=file, count=None, recent=None, buckets=None, prev=None)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802
        (file,) = self.pending.get()
        self.pending.clear()
        yield Row(key=key[0], kind="fired", file=file, count=None, recent=None, buckets=None, prev=None)

    def close(self):
        pass


def count_and_window(batches, stores):
    """``StateBackend.map_in_arrow``'s function: a task's rows (one file) counted per key into
    ``totals`` and per key and minute into the window store ``minutes``."""
    import collections

    import pyarrow as pa

    per_key, per_window, file = collections.Counter(), collections.Counter(), None
    for batch in batches:
        columns = batch.to_pydict()
        for key, event_ms, row_file in zip(columns["key"], columns["event_ms"], columns["file"]):
            per_key[key] += 1
            per_window[key, event_ms // MINUTE_MS * MINUTE_MS] += 1
            file = row_file
    if file is None:
        return
    totals, minutes = stores["totals"], stores["minutes"]
    keys = sorted(per_key)
    previous = dict(zip(keys, totals.get_many(pa.array(keys, pa.string())).to_pylist()))
    new_totals = {k: (previous[k] or 0) + per_key[k] for k in keys}
    totals.put_all(pa.array(keys), pa.array([new_totals[k] for k in keys], pa.int64()))
    out = {"key": [], "file": [], "total": [], "window_start": [], "window_count": []}
    for (key, start), n in sorted(per_window.items()):
        count = (minutes.fetch(key, start) or 0) + n
        minutes.put(key, count, start)
        for name, value in zip(out, (key, file, new_totals[key], start, count)):
            out[name].append(value)
    schema = pa.schema([("key", pa.string())] + [(name, pa.int64()) for name in list(out)[1:]])
    yield pa.RecordBatch.from_pydict(out, schema=schema)

"""A streaming query whose kstate figures in ``lastProgress`` the test computes itself, batch by
batch, in classic Spark (``engine/test_observed.py``) and Spark Connect (``test_connect.py``).

The query: ``transform_with_state`` in event time (a running count per key, a value with a 1 ms
TTL, a timer 1 s of event time after the key's last row that emits a closing row and clears the
count; late rows dropped), then a ``StateBackend`` store counting each key's output rows
(``map_partitions``), deleting a key on its closing row. One input file per run of the query
(``availableNow``: every run is a restart), four runs; before the last, the local state is
deleted, so that batch restores every store from its changelog.

What the test computes, per store and batch, without kstate's counters:
- ``numRowsTotal``: the store's entries, read from the stores by Spark tasks (``state_dataframe``);
- ``numRowsUpdated`` / ``numRowsRemoved`` / ``changelogBytesPublished``: from the batch's
  changelog records (read from the log files): records with a value, tombstones of keys the
  state held (the state replayed from the records before), their keys' and values' bytes; the
  workload writes each key at most once per store and batch, so records are keys;
- ``restoredRecords``: every record of the changelogs when the state was deleted;
- ``timersFired``, ``numRowsDroppedByWatermark``: from the input, by the watermark rules.
Timings, memory and disk are sampled in the workers: checked to add up and be non-negative.
"""

import shutil
import sys

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor

from kstate import Stores
from kstate.log.files import read_log
from kstate.spark import StateBackend, state_figures, transform_with_state
from kstate.spark.protocol.progress import STATE_FIGURES, STORE_FIGURES

from .workload import write_file

cloudpickle.register_pickle_by_value(sys.modules[__name__])

APP, STORE_APP = "watched", "watched-store"
PARTITIONS = 2
TWS_STORES = ("count", "seen", "tws.ttl", "tws.timers-by-time", "tws.timers-by-key", "tws.event-time")
FILES = [
    [("a", 1000), ("b", 1500), ("c", 2000)],
    [("a", 2500), ("d", 8000)],
    [("b", 1000), ("e", 9500)],  # b at 1000 is late: batch 1's watermark is 2000
    [("f", 12000)],
]
RESTORED_BATCH = 3
TIMER_DELAY = 1000


class Watched(StatefulProcessor):
    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.seen = handle.getValueState("seen", "b boolean", ttlDurationMs=1)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802
        frames = list(rows)
        total = (self.count.get() or (0,))[0] + sum(len(f) for f in frames)
        self.count.update((total,))
        self.seen.update((True,))
        for expiry in self.handle.listTimers():
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(int(max(f["t"].max() for f in frames)) + TIMER_DELAY)
        yield pd.DataFrame({"key": [key[0]], "count": [total]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802
        yield pd.DataFrame({"key": [key[0]], "count": [-1]})
        self.count.clear()


def count_emitted(batches, stores):
    """Per key, how many rows the processor emitted; its closing row deletes the key."""
    import pyarrow as pa

    store = stores["emitted"]
    for batch in batches:
        keys, emitted = [], []
        for key, count in zip(batch.column("key").to_pylist(), batch.column("count").to_pylist()):
            if count < 0:
                store.delete(key)
                continue
            n = (store.get(key) or 0) + 1
            store.put(key, n)
            keys.append(key)
            emitted.append(n)
        yield pa.RecordBatch.from_pydict(
            {"key": keys, "emitted": emitted}, schema=pa.schema([("key", pa.string()), ("emitted", pa.int64())])
        )


def store_backend(work):
    emitted = Stores.key_value_store_builder(Stores.persistent_key_value_store("emitted"), "string", "int64")
    return StateBackend(
        [emitted], work / "state", work / "changelog", STORE_APP, keys=["key"], num_partitions=PARTITIONS,
        lock_timeout=60, metrics_name="kstate_store",
    )  # fmt: skip


def tws_reader(work):
    """A backend over the processor's stores as bytes, to read them (``state_dataframe``)."""
    builders = [
        Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "bytes", "bytes") for name in TWS_STORES
    ]
    return StateBackend(builders, work / "state", work / "changelog", APP, keys=["key"], lock_timeout=60)


def query(spark, work):
    frames = spark.readStream.schema("key string, t long").option("maxFilesPerTrigger", 1).parquet(str(work / "in"))
    counted = transform_with_state(
        frames, ["key"], Watched(), "key string, count long", work / "state", work / "changelog", APP,
        num_partitions=PARTITIONS, time_mode="EventTime", event_time_column="t", fire_idle_timers=False,
        lock_timeout=60,
    )  # fmt: skip
    return store_backend(work).map_partitions(counted, count_emitted, "key string, emitted long")


def run_batch(spark, work, index):
    """Adds input file ``index`` and runs the query over it (one micro-batch); its progress."""
    rows = FILES[index]
    write_file(work, index, {"key": [k for k, _ in rows], "t": [t for _, t in rows]})
    running = (
        query(spark, work)
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    running.awaitTermination()
    assert running.exception() is None, running.exception()
    progress = [p for p in running.recentProgress if p.numInputRows > 0]
    assert [p.batchId for p in progress] == [index]
    return progress[0]


def input_figures():
    """Per batch, (timers fired, rows dropped as late), by Spark's event-time rules: a batch's
    watermark is the largest event time of the earlier batches; rows at or below the previous
    batch's watermark are late; after a batch's input, the timers due by its watermark fire."""
    largest, watermarks, timers, out = -1, [], {}, []
    for rows in FILES:
        watermark, late_bound = largest, watermarks[-1] if watermarks else -1
        on_time = [(k, t) for k, t in rows if t > late_bound]
        for key in {k for k, _ in on_time}:
            timers[key] = max(t for k, t in on_time if k == key) + TIMER_DELAY
        fired = [key for key, expiry in timers.items() if expiry <= watermark]
        for key in fired:
            del timers[key]
        out.append((len(fired), len(rows) - len(on_time)))
        watermarks.append(watermark)
        largest = max([largest] + [t for _, t in rows])
    return out


class Changelogs:
    """The changelog records of the stores, read from the log files, batch by batch."""

    def __init__(self, work, stores):
        self.dirs = {
            name: [work / "changelog" / f"{app}-{name}-changelog-{p}" for p in range(PARTITIONS)]
            for app, name in stores
        }
        self.read_to = {name: [0] * PARTITIONS for name in self.dirs}
        self.state = {name: {} for name in self.dirs}

    def records(self, stores):
        """Every record now in the logs of ``stores``."""
        return sum(len(self._read(d, 0)) for name in stores for d in self.dirs[name])

    def _read(self, directory, start):
        if not directory.exists():
            return []
        out = []
        for batch in read_log(directory, start):
            out += zip(
                batch.column("key").to_pylist(), batch.column("value").to_pylist(), batch.column("offset").to_pylist()
            )
        return out

    def next_batch(self):
        """Per store, the figures of the records published since the last call."""
        figures = {}
        for name, dirs in self.dirs.items():
            updated = removed = size = 0
            for p, directory in enumerate(dirs):
                for key, value, offset in self._read(directory, self.read_to[name][p]):
                    state = self.state[name].setdefault(p, {})
                    if value is None:
                        removed += key in state
                        state.pop(key, None)
                    else:
                        updated += 1
                        state[key] = value
                    size += len(key) + len(value or b"")
                    self.read_to[name][p] = offset + 1
            figures[name] = {"numRowsUpdated": updated, "numRowsRemoved": removed, "changelogBytesPublished": size}
        return figures


def check_every_batch(spark, work):
    """Runs the four batches and checks each batch's figures in ``lastProgress``; returns them."""
    logs = Changelogs(work, [(APP, name) for name in TWS_STORES] + [(STORE_APP, "emitted")])
    expected_input = input_figures()
    seen = []
    for index in range(len(FILES)):
        restored = {"kstate": 0, "kstate_store": 0}
        if index == RESTORED_BATCH:
            # The partitions move to an executor with an empty disk.
            tws_reader(work).release_local_state(range(PARTITIONS))
            store_backend(work).release_local_state(range(PARTITIONS))
            shutil.rmtree(work / "state")
            restored = {"kstate": logs.records(TWS_STORES), "kstate_store": logs.records(["emitted"])}
        progress = run_batch(spark, work, index)
        written = logs.next_batch()
        tws, store = state_figures(progress, "kstate"), state_figures(progress, "kstate_store")
        seen.append((progress, tws, store))
        totals = {name: tws_reader(work).state_dataframe(spark, name).count() for name in TWS_STORES}
        totals["emitted"] = store_backend(work).state_dataframe(spark, "emitted").count()
        timers, late = expected_input[index]
        check(tws, TWS_STORES, totals, written, timers, late, restored["kstate"])
        check(store, ["emitted"], totals, written, 0, 0, restored["kstate_store"])
    return seen


def check(figures, stores, totals, written, timers, late, restored):
    """One operator's figures of one batch against what the test computed."""
    assert figures is not None
    for name in stores:
        per_store = {f: figures[f"{name}.{f}"] for f in STORE_FIGURES}
        assert per_store["numRowsTotal"] == totals[name], (name, per_store, totals[name])
        for f in ("numRowsUpdated", "numRowsRemoved", "changelogBytesPublished"):
            assert per_store[f] == written[name][f], (name, f, per_store, written[name])
        assert per_store["stateBytesOnDisk"] > 0 and per_store["memoryUsedBytes"] >= 0
    for f in ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "changelogBytesPublished", "stateBytesOnDisk"):
        assert figures[f] == sum(figures[f"{name}.{f}"] for name in stores), f
    assert figures["memoryUsedBytes"] == sum(figures[f"{name}.memoryUsedBytes"] for name in stores)
    assert figures["timersFired"] == timers
    assert figures["numRowsDroppedByWatermark"] == late
    assert figures["numShufflePartitions"] == PARTITIONS and figures["numTasks"] == PARTITIONS
    assert figures["rolledBackBatches"] == 0
    assert figures["restoredRecords"] == restored
    for f in ("commitTimeMs", "allUpdatesTimeMs", "openTimeMs", "restoreTimeMs"):
        assert figures[f] >= 0
    assert set(figures) == set(STATE_FIGURES) | {f"{name}.{f}" for name in stores for f in STORE_FIGURES}

"""Queries whose stores take snapshots (``minDeltasForSnapshot`` in a store's logging config, or
``transform_with_state``'s ``changelog_config``) under real local Spark, restarted with every
executor-local state wiped and the changelogs' history below the newest snapshot deleted (by
hand, as a retention would): each partition loads its snapshot, replays only the changelog after
it, and the query goes on exactly as plain Python computes it, timers firing once. The tools that
read history then start from snapshots too: ``state_dataframe`` / ``read_processor_state`` (the
latest batch and a retained earlier one), ``kstate inspect --history`` and ``kstate rescale``;
with no usable snapshot over deleted history, a read is ``ChangelogTruncatedError``."""

import collections
import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.log.history import StoreHistory  # noqa: E402
from kstate.log.snapshots import open_snapshots  # noqa: E402
from kstate.spark import StateBackend, read_processor_state, transform_with_state  # noqa: E402
from remote.locations import s3_remote  # noqa: E402
from snapshots.history_retention import damage_snapshot, delete_history_below, log_start  # noqa: E402

from .workload import (  # noqa: E402
    SCHEMA,
    add_files,
    counts_into,
    file_keys,
    input_stream,
    reference,
    run_to_end,
    run_until,
    running_count,
    spark_for_tests,
    write_file,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LOGGING = {"minDeltasForSnapshot": 1, "segment.bytes": 100}
"""A snapshot after every commit, so the newest is at the last batch's; a segment about every
commit, so that a retention has whole ones to delete."""


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-snapshots", "local[2]")
    yield session
    session.stop()


@pytest.fixture(params=["dir", "s3"])
def changelog(request, work):
    """``(changelog_dir, storage options)``: a directory, or a bucket on moto's S3."""
    if request.param == "dir":
        return str(work / "changelog"), {}
    s3 = s3_remote(request.getfixturevalue("s3_endpoint"))
    return s3.url, s3.storage_options


def snapshot_offsets(changelog, topic, partition):
    return open_snapshots(changelog[0], topic, partition, changelog[1]).offsets()


def wipe_local_state(work, changelog, application_id, partitions):
    """The partitions move to executors with empty disks: the workers that keep them open close
    them (waiting for their snapshots' uploads), then the state dir goes."""
    any_store = Stores.key_value_store_builder(Stores.persistent_key_value_store("any"), "bytes", "bytes")
    backend = StateBackend(
        [any_store], work / "state", changelog[0], application_id, changelog_storage_options=changelog[1]
    )
    backend.release_local_state(partitions)
    shutil.rmtree(work / "state", ignore_errors=True)


def delete_history(changelog, topics, partitions):
    """Deletes each changelog's history below its newest snapshot; returns ``{(topic, p): (the
    changelog's start after it, the records after the snapshot)}`` of those with a snapshot."""
    kept = {}
    for topic in topics:
        for p in partitions:
            offsets = snapshot_offsets(changelog, topic, p)
            if not offsets:
                continue
            delete_history_below(*changelog, topic, p, offsets[-1] + 1)
            tail = StoreHistory(changelog[0], topic, p, changelog[1]).records(offsets[-1], None)
            kept[topic, p] = (log_start(*changelog, topic, p), sum(b.num_rows for b in tail))
    return kept


# -- mapInArrow: a running count per key -----------------------------------------------------------


def counts_backend(work):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend(
        [counts.with_logging_enabled(LOGGING)], work / "state", work / "changelog", "counts-app", lock_timeout=60,
        keys=["key"], num_partitions=2,
    )  # fmt: skip


def run_counts(spark, work, backend, outputs):
    counted = input_stream(spark, work).repartition(2, "key").mapInArrow(backend.map_in_arrow(running_count), SCHEMA)
    run_to_end(counted, work, counts_into(outputs))


def counted(files):
    return dict(collections.Counter(key for i in files for key in file_keys(i)))


def test_a_running_count_restarts_from_snapshots_and_its_history_is_read_from_them(spark, work, wait_until):
    changelog = (str(work / "changelog"), {})
    add_files(work, range(4))
    outputs = {}
    run_counts(spark, work, counts_backend(work), outputs)
    wipe_local_state(work, changelog, "counts-app", [0, 1])
    kept = delete_history(changelog, ["counts-app-counts-changelog"], [0, 1])
    assert len(kept) == 2 and all(start > 0 for start, _ in kept.values()), "history below the snapshots is gone"

    add_files(work, range(4, 6))
    backend = counts_backend(work)
    progress = backend.report_progress(spark)
    run_counts(spark, work, backend, outputs)
    assert outputs == reference(range(6))
    wait_until(lambda: {r.batch_id for r in progress} >= {4, 5}, "kstate's progress reports")
    restored = {r.batch_id: r.restored_records for r in progress}
    assert restored[4] == sum(tail for _, tail in kept.values()), "only the changelog after the snapshots"
    assert restored[5] == 0

    # state_dataframe restores the wiped partitions from snapshots too, at the head and a batch back.
    wipe_local_state(work, changelog, "counts-app", [0, 1])
    latest = counts_backend(work).state_dataframe(spark, "counts", num_partitions=2).collect()
    assert {r["key"]: r["value"] for r in latest} == counted(range(6)) and {r["batch"] for r in latest} == {5}
    earlier = counts_backend(work).state_dataframe(spark, "counts", num_partitions=2, as_of_batch=4).collect()
    assert {r["key"]: r["value"] for r in earlier} == counted(range(5)) and {r["batch"] for r in earlier} == {4}

    inspected = subprocess.run(
        [sys.executable, "-m", "kstate.cli", "inspect", str(work / "changelog"), "--history", "--json"],
        capture_output=True,
        text=True,
    )
    assert inspected.returncode == 0, inspected.stderr
    rows = {row["partition"]: row for row in json.loads(inspected.stdout)}
    assert sorted(rows) == [0, 1] and all(row["snapshot_offset"] is not None for row in rows.values())
    assert sum(row["entries"] for row in rows.values()) == len(counted(range(6)))

    # Without a usable snapshot over the deleted history, a read fails rather than read part of it.
    wipe_local_state(work, changelog, "counts-app", [0, 1])
    for offset in snapshot_offsets(changelog, "counts-app-counts-changelog", 0):
        damage_snapshot(*changelog, "counts-app-counts-changelog", 0, offset)
    with pytest.raises(Exception, match="ChangelogTruncatedError"):
        counts_backend(work).state_dataframe(spark, "counts", num_partitions=2).collect()


# -- transform_with_state: value, list and map state, a TTL, event-time timers ---------------------

OUTPUT = "user string, kind string, count long, recent string, buckets string, fleeting_seen boolean"
T0 = 1_710_061_200_000
"""2024-03-10 09:00 UTC, in ms: file ``b`` holds event times from ``T0 + 60 s * b``."""
USERS = 12


def file_events(index):
    """``(user, ts, bucket)`` rows of file ``index``: two thirds of the users, ``i`` seconds into
    the file's minute, and the ``clock``'s row 20 s in, past every user's: each batch's timers'
    watermark (the largest event time of the batches before) is the previous file's clock."""
    rows = [(f"u{i}", T0 + 60_000 * index + 1_000 * i, f"b{(i + index) % 2}") for i in range(USERS) if (i + index) % 3]
    return [*rows, ("clock", T0 + 60_000 * index + 20_000, "b0")]


def write_events(work, index):
    users, times, buckets = zip(*file_events(index))
    write_file(work, index, {"user": list(users), "ts": list(times), "bucket": list(buckets)})


class Tally(StatefulProcessor):
    """Per user: a count (value state), the last three event times (list state), rows per bucket
    (map state), a 1 ms TTL value (written every batch, so expired by the next: never seen), and
    an event-time timer 1 ms past the user's latest row, which fires in the first batch without
    the user (its watermark passes it), emitting the count."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.recent = handle.getListState("recent", "ts long")
        self.buckets = handle.getMapState("buckets", "bucket string", "n long")
        self.fleeting = handle.getValueState("fleeting", "seen boolean", ttlDurationMs=1)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        frame = pd.concat(list(rows))
        count = (self.count.get() or (0,))[0] + len(frame)
        self.count.update((count,))
        recent = [t for (t,) in self.recent.get()] + [int(t) for t in frame["ts"]]
        self.recent.put([(t,) for t in recent[-3:]])
        for bucket in frame["bucket"]:
            n = self.buckets.getValue((bucket,))
            self.buckets.updateValue((bucket,), ((n[0] if n else 0) + 1,))
        seen = self.fleeting.exists()
        self.fleeting.update((True,))
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        self.handle.registerTimer(int(frame["ts"].max()) + 1)
        buckets = ",".join(f"{b}:{n}" for (b,), (n,) in sorted(self.buckets.iterator()))
        recent_text = ",".join(str(t - T0) for t in recent[-3:])
        yield pd.DataFrame([(key[0], "input", count, recent_text, buckets, seen)], columns=OUTPUT_NAMES)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield pd.DataFrame([(key[0], "expired", self.count.get()[0], "", "", False)], columns=OUTPUT_NAMES)


OUTPUT_NAMES = [part.split()[0] for part in OUTPUT.split(", ")]


def tally_reference(files):
    """Per batch (one file each) its sorted output rows; and the state after the last: counts,
    buckets and registered timers per user."""
    counts, recent, buckets, timers = collections.Counter(), collections.defaultdict(list), {}, {}
    outputs, before = {}, set()
    for batch, index in enumerate(files):
        rows, out = file_events(index), []
        for user in sorted({u for u, _, _ in rows}):
            mine = [(t, b) for u, t, b in rows if u == user]
            counts[user] += len(mine)
            recent[user] = (recent[user] + [t for t, _ in mine])[-3:]
            per_bucket = buckets.setdefault(user, collections.Counter())
            per_bucket.update(b for _, b in mine)
            timers[user] = max(t for t, _ in mine) + 1
            shown = ",".join(f"{b}:{n}" for b, n in sorted(per_bucket.items()))
            out.append((user, "input", counts[user], ",".join(str(t - T0) for t in recent[user]), shown, False))
        watermark = max((t for i in files[:batch] for _, t, _ in file_events(i)), default=0)
        for user in sorted(before - {u for u, _, _ in rows}):
            if timers.get(user, watermark + 1) <= watermark:
                out.append((user, "expired", counts[user], "", "", False))
                del timers[user]
        outputs[batch] = sorted(out)
        before = {u for u, _, _ in rows}
    return outputs, dict(counts), {u: dict(b) for u, b in buckets.items()}, timers


def tally_query(spark, work, changelog, num_partitions):
    return transform_with_state(
        input_stream(spark, work, "user string, ts long, bucket string"), ["user"], Tally(), OUTPUT, work / "state",
        changelog[0], "tally", num_partitions=num_partitions, time_mode="EventTime", event_time_column="ts",
        fire_idle_timers=False, changelog_config=LOGGING, lock_timeout=60, changelog_storage_options=changelog[1],
    )  # fmt: skip


def read_state(spark, work, changelog, **options):
    return read_processor_state(
        spark, changelog[0], "tally", state_dir=work / "state", changelog_storage_options=changelog[1], **options
    ).collect()


def test_a_processor_restarts_from_snapshots_with_its_timers_and_ttl_and_rescales_from_them(
    spark, work, changelog, rescale_cli
):
    expected, _, _, _ = tally_reference(list(range(8)))
    for index in range(4):
        write_events(work, index)
    outputs, _ = run_until(tally_query(spark, work, changelog, 2), work / "checkpoint", 4)
    wipe_local_state(work, changelog, "tally", [0, 1])
    stores = [f"tally-{name}-changelog" for name in ("count", "recent", "buckets", "fleeting", "tws.ttl")]
    stores += ["tally-tws.timers-by-time-changelog", "tally-tws.timers-by-key-changelog"]
    # The event-time store's changelog stays whole: the watermark reads its records of the
    # batches a replay may redo (what any retention of it must keep).
    kept = delete_history(changelog, stores, [0, 1])
    assert len(kept) >= 10 and sum(start > 0 for start, _ in kept.values()) >= 4, kept

    for index in range(4, 6):
        write_events(work, index)
    after, _ = run_until(tally_query(spark, work, changelog, 2), work / "checkpoint", 2)
    outputs.update(after)
    assert outputs == {b: expected[b] for b in range(6)}, "timers fired once after the restore, TTLs held"

    wipe_local_state(work, changelog, "tally", [0, 1])
    _, counts, buckets, timers = tally_reference(list(range(6)))
    latest = read_state(spark, work, changelog, stateVarName="count")
    assert {r["key"]["user"]: r["value"]["n"] for r in latest} == counts
    _, counts_then, _, _ = tally_reference(list(range(5)))
    earlier = read_state(spark, work, changelog, stateVarName="count", batchId=4)
    assert {r["key"]["user"]: r["value"]["n"] for r in earlier} == counts_then
    rows = read_state(spark, work, changelog, stateVarName="buckets")
    read_buckets = collections.defaultdict(dict)
    for r in rows:
        read_buckets[r["key"]["user"]][r["user_map_key"]["bucket"]] = r["user_map_value"]["n"]
    assert read_buckets == buckets
    registered = read_state(spark, work, changelog, readRegisteredTimers=True)
    assert {r["key"]["user"]: r["expiration_timestamp_ms"] for r in registered} == timers

    printed = rescale_cli(changelog[0], "tally", 3, changelog[1])
    assert "2 -> 3 partitions" in printed and " snapshots (" in printed
    for index in range(6, 8):
        write_events(work, index)
    rescaled, _ = run_until(tally_query(spark, work, changelog, 3), work / "checkpoint", 2)
    assert rescaled == {b: expected[b] for b in (6, 7)}, "the rescaled state's timers fire once too"

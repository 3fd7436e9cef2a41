"""Processors written against Spark's own API (``pyspark.sql.streaming.StatefulProcessor``) on
kstate and on Spark, same input, same run: Spark's ``transformWithStateInPandas`` and Row
``transformWithState`` against kstate's pandas and Row APIs, and all four against plain Python.

The processor keeps value, list and map state per user, state with a 1 ms TTL (written every
batch, so it must have expired by the next: if a TTL were ignored, a returning user would see
it), a processing-time timer at the batch's own time (fires after the batch's input, in the same
batch), an initial state for some users, and ``deleteIfExists`` of a variable it no longer uses.
"""

import collections
import json
import shutil
import sys
import time

import pytest

pytest.importorskip("pyspark")

import pandas as pd  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402

from kstate.spark import read_processor_state, transform_with_state  # noqa: E402
from kstate.spark.format.state_schemas import FORMAT_VERSION, SchemaLog  # noqa: E402

from ..workload import input_stream, release_parked_stores, run_until, spark_for_tests, write_file  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "user string, kind string, count long, total long, recent string, categories string, ttl_seen boolean"
USERS = 60
FILES = 3
ROWS = 200
INITIAL = {f"u{i}": (5, 50) for i in range(0, USERS, 7)}
"""Initial (count, total) of some users; ``init-only`` never sends input."""
FAR = 10**13
"""Each user keeps one processing-time timer at ``FAR + count``: it never fires, so the state
reader finds it."""


@pytest.fixture(scope="module")
def spark():
    session = spark_for_tests("kstate-processor-parity", "local[2,3]")
    session.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    # Spark's state reader has a change feed only from changelog checkpoints.
    session.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    yield session
    session.stop()


def file_rows(index):
    users = [f"u{(index * 13 + i * 7) % USERS}" for i in range(ROWS)]
    return {
        "user": users,
        "category": [f"c{(i + index) % 4}" for i in range(ROWS)],
        "amount": [(i * 31 + index) % 100 for i in range(ROWS)],
    }


class Activity:
    """The processor's logic, shared by its pandas and Row forms (Spark binds a processor to one)."""

    def init(self, handle):
        self.handle = handle
        handle.deleteIfExists("retired")
        self.totals = handle.getValueState("totals", "count long, total long")
        self.recent = handle.getListState("recent", "amount long")
        self.categories = handle.getMapState("categories", "category string", "n long")
        self.fleeting_value = handle.getValueState("fleeting_value", "seen boolean", ttlDurationMs=1)
        self.fleeting_list = handle.getListState("fleeting_list", "seen boolean", ttlDurationMs=1)
        self.fleeting_map = handle.getMapState("fleeting_map", "k string", "seen boolean", ttlDurationMs=1)
        self.lasting = handle.getMapState("lasting", "k string", "n long", ttlDurationMs=86_400_000)

    def apply(self, key, rows, timer_values):
        """``rows``: (category, amount) pairs. Returns the output tuple."""
        ttl_seen = self.fleeting_value.exists() or self.fleeting_list.exists() or self.fleeting_map.exists()
        count, total = self.totals.get() or (0, 0)
        for category, amount in rows:
            count, total = count + 1, total + int(amount)
            self.recent.appendValue((int(amount),))
            n = self.categories.getValue((category,))
            self.categories.updateValue((category,), ((n[0] if n else 0) + 1,))
        self.totals.update((count, total))
        recent = [a for (a,) in self.recent.get()][-3:]
        self.recent.put([(a,) for a in recent])
        self.fleeting_value.update((True,))
        self.fleeting_list.appendValue((True,))
        self.fleeting_map.updateValue(("x",), (True,))
        lasting = self.lasting.getValue(("batches",))
        self.lasting.updateValue(("batches",), ((lasting[0] if lasting else 0) + 1,))
        for expiry in self.handle.listTimers():
            if expiry >= FAR:
                self.handle.deleteTimer(expiry)
        self.handle.registerTimer(FAR + count)
        self.handle.registerTimer(timer_values.getCurrentProcessingTimeInMs())
        categories = ",".join(f"{c}:{n}" for (c,), (n,) in sorted(self.categories.iterator()))
        recent_text = ",".join(map(str, recent))
        return (key[0], "input", count, total, recent_text, categories, bool(ttl_seen))

    def timer_row(self, key):
        count, total = self.totals.get()
        return (key[0], "timer", count, total, "", "", False)

    def initial(self, key, count, total):
        self.totals.update((int(count), int(total)))

    def close(self):
        pass


class PandasActivity(Activity, StatefulProcessor):
    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        import pandas as pd

        pairs = [p for frame in rows for p in zip(frame["category"], frame["amount"])]
        yield pd.DataFrame([self.apply(key, pairs, timerValues)], columns=OUTPUT_NAMES)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        import pandas as pd

        yield pd.DataFrame([self.timer_row(key)], columns=OUTPUT_NAMES)

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        for count, total in zip(initialState["count"], initialState["total"]):
            self.initial(key, count, total)


class RowActivity(Activity, StatefulProcessor):
    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        pairs = [(r.category, r.amount) for r in rows]
        yield Row(**dict(zip(OUTPUT_NAMES, self.apply(key, pairs, timerValues))))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield Row(**dict(zip(OUTPUT_NAMES, self.timer_row(key))))

    def handleInitialState(self, key, initialState, timerValues):  # noqa: N802, N803
        self.initial(key, initialState["count"], initialState["total"])


OUTPUT_NAMES = [part.split()[0] for part in OUTPUT.split(", ")]


def reference(files):
    totals = dict(INITIAL)
    recent, categories, out = collections.defaultdict(list), collections.defaultdict(collections.Counter), []
    for index in files:
        rows = file_rows(index)
        per_user = collections.defaultdict(list)
        for user, category, amount in zip(rows["user"], rows["category"], rows["amount"]):
            per_user[user].append((category, amount))
        emitted = []
        for user, pairs in per_user.items():
            count, total = totals.get(user, (0, 0))
            for category, amount in pairs:
                count, total = count + 1, total + amount
                recent[user].append(amount)
                categories[user][category] += 1
            totals[user] = (count, total)
            recent[user] = recent[user][-3:]
            cats = ",".join(f"{c}:{n}" for c, n in sorted(categories[user].items()))
            emitted.append((user, "input", count, total, ",".join(map(str, recent[user])), cats, False))
            emitted.append((user, "timer", count, total, "", "", False))
        out.append(sorted(emitted))
    return out


def initial_state(spark):
    rows = [(u, c, t) for u, (c, t) in INITIAL.items()] + [("init-only", 1, 1)]
    return spark.createDataFrame(rows, "user string, count long, total long")


def run(frame, checkpoint, batches=FILES):
    """The non-empty outputs of the query's micro-batches, in order. Spark's transformWithState
    in processing time runs a batch without data after every other (its timers may be due), so
    neither ``availableNow`` nor ``processAllAvailable`` ever ends: the query runs until
    ``batches`` batches had output."""
    outputs, _ = run_until(frame, checkpoint, batches)
    return [outputs[b] for b in sorted(outputs)]


def test_spark_processors_give_spark_results_on_kstate(spark, work):
    for i in range(FILES):
        write_file(work, i, file_rows(i))
    expected = reference(range(FILES))
    schema = "user string, category string, amount long"
    grouped = input_stream(spark, work, schema).groupBy("user")
    initial = initial_state(spark)
    results = {
        "spark pandas": run(
            grouped.transformWithStateInPandas(
                PandasActivity(), OUTPUT, "Update", "ProcessingTime", initialState=initial.groupBy("user")
            ),
            work / "cp-spark-pandas",
        ),
    }
    if hasattr(grouped, "transformWithState"):  # Spark's Row API is new in PySpark 4.1; kstate's runs on 4.0
        results["spark row"] = run(
            grouped.transformWithState(
                RowActivity(), OUTPUT, "Update", "ProcessingTime", initialState=initial.groupBy("user")
            ),
            work / "cp-spark-row",
        )
    for api, processor in (("pandas", PandasActivity()), ("row", RowActivity())):
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], processor, OUTPUT, work / f"state-{api}",
            work / f"changelog-{api}", "activity", num_partitions=2, time_mode="ProcessingTime", api=api,
            initial_state=initial.groupBy("user"), lock_timeout=60,
        )  # fmt: skip
        results[f"kstate {api}"] = run(frame, work / f"cp-kstate-{api}")
    for name, outputs in results.items():
        assert outputs == expected, name
    if hasattr(grouped, "transformWithState"):  # kstate's reader has the columns of Spark 4.1+'s
        same_state_as_spark_reads_it(spark, work / "cp-spark-pandas", work / "changelog-pandas")


def same_state_as_spark_reads_it(spark, checkpoint, changelog_dir):
    """Spark's state data source on Spark's checkpoint and ``read_processor_state`` on kstate's
    state of the same processor and input: the same columns and types, and the same rows (TTL
    expiry times aside: each ran at its own time). The 1 ms TTL variables and the change feeds are
    compared by schema only: Spark's batches without data sweep TTL state (kstate's next batch
    with data does), count in its batch ids, and Spark's change feed has a row per write."""

    def plain(value):
        if isinstance(value, Row):
            fields = value.asDict()
            return tuple(plain(v) for k, v in sorted(fields.items()) if k != "ttlExpirationMs")
        if isinstance(value, dict):
            return tuple(sorted((plain(k), plain(v)) for k, v in value.items()))
        if isinstance(value, list):
            return tuple(plain(v) for v in value)
        return value

    reads = [{"stateVarName": v} for v in ("totals", "recent", "categories", "lasting")]
    reads += [{"stateVarName": v, "flattenCollectionTypes": False} for v in ("recent", "categories")]
    reads += [{"readRegisteredTimers": True}]
    reads += [{"stateVarName": v} for v in ("fleeting_value", "fleeting_list", "fleeting_map")]
    reads += [
        {"stateVarName": v, "readChangeFeed": True, "changeStartBatchId": 0} for v in ("totals", "recent", "lasting")
    ]
    for options in reads:
        reader = spark.read.format("statestore")
        for name, value in options.items():
            reader = reader.option(name, value)
        theirs = reader.load(str(checkpoint))
        # A state_dir of its own: the reader restores each partition from the changelogs.
        ours = read_processor_state(
            spark, changelog_dir, "activity", state_dir=changelog_dir.parent / "reader", **options
        )
        assert ours.schema.simpleString() == theirs.schema.simpleString(), options
        if options.get("stateVarName", "").startswith("fleeting") or "readChangeFeed" in options:
            continue  # Spark's batch ids count its batches without data, and it logs every write
        columns = [c for c in ours.columns if c != "partition_id"]
        assert sorted(plain(r) for r in ours.select(columns).collect()) == sorted(
            plain(r) for r in theirs.select(columns).collect()
        ), options


@pytest.mark.parametrize("api", ["row", "pandas"])
def test_a_query_restarted_on_its_checkpoint_continues_exactly(spark, work, api):
    """Stopped after two batches and started again (a new processor, the same checkpoint and
    state, its changelogs' configs changed): the value, list and map state continue, TTL state
    stays expired, timers fire, the initial state is not applied again; on both of kstate's APIs."""
    expected = reference(range(FILES))
    schema = "user string, category string, amount long"
    initial = initial_state(spark)

    def query(batches, changelog_config=None):
        processor = RowActivity() if api == "row" else PandasActivity()
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], processor, OUTPUT, work / "state", work / "changelog",
            "restarted", num_partitions=2, time_mode="ProcessingTime", api=api,
            initial_state=initial.groupBy("user"), lock_timeout=60, changelog_config=changelog_config,
        )  # fmt: skip
        return run(frame, work / "cp", batches=batches)

    def segments():
        return {str(p.relative_to(work)) for p in (work / "changelog").rglob("*.log")}

    for i in range(FILES - 1):
        write_file(work, i, file_rows(i))
    assert query(FILES - 1) == expected[: FILES - 1]
    before = segments()
    write_file(work, FILES - 1, file_rows(FILES - 1))
    assert query(1, changelog_config={"segment.bytes": 64}) == expected[FILES - 1 :]
    # One batch of a few records never fills a default segment; at 64 bytes each commit rolls one
    # (compaction may merge the old ones meanwhile, so count new names, not files).
    assert segments() - before, "the changelogs rolled segments at the new segment.bytes"


def kill_once(marker, batch):
    """SIGKILLs this Python worker the first time it gets here in ``batch``."""
    import os
    import signal

    from pyspark import TaskContext

    if TaskContext.get().getLocalProperty("streaming.sql.batchId") == str(batch) and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


class KilledOnce(RowActivity):
    """``RowActivity`` whose Python worker is killed (SIGKILL) twice before its batch commits:
    in batch 1 after a user's state was written, in batch 2 while timers fire; plus a variable
    without a schema (pickled)."""

    def __init__(self, markers):
        self.markers = [str(m) for m in markers]

    def init(self, handle):
        super().init(handle)
        self.note = handle.getValueState("note")

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        yield from super().handleInputRows(key, rows, timerValues)
        self.note.update({"user": key[0], "count": self.totals.get()[0]})
        kill_once(self.markers[0], 1)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
        yield from super().handleExpiredTimer(key, timerValues, expiredTimerInfo)
        kill_once(self.markers[1], 2)


def reference_state(files):
    """Every user's state after ``files``, as the processor keeps it: ``(count, total)``, the last
    three amounts, per-category counts, batches seen (``lasting``), the users of the last batch
    (``fleeting_*``: expired by the next batch, swept only then) and per batch the users with input."""
    totals = {**INITIAL, "init-only": (1, 1)}
    recent, categories, batches, per_batch = {}, collections.defaultdict(collections.Counter), {}, []
    for index in files:
        rows = file_rows(index)
        for user, category, amount in zip(rows["user"], rows["category"], rows["amount"]):
            count, total = totals.get(user, (0, 0))
            totals[user] = (count + 1, total + amount)
            recent[user] = (recent.get(user, []) + [amount])[-3:]
            categories[user][category] += 1
        per_batch.append(set(rows["user"]))
        for user in per_batch[-1]:
            batches[user] = batches.get(user, 0) + 1
    return totals, recent, categories, batches, per_batch


def test_a_killed_worker_then_the_state_read_back_typed_equal_the_reference(spark, work, tmp_path):
    """Python workers SIGKILLed mid-batch (value, list, map state, TTL, timers written, nothing
    committed; and while timers fire): each batch is retried, the output and the state are
    exactly the reference. Then ``read_processor_state`` reads each variable typed (Spark's state
    reader's shapes), the timers, and, after batch 2 replayed (its state rolled back and redone),
    the change feed between batches (the replay only) and the state as of batch 1."""

    for i in range(FILES):
        write_file(work, i, file_rows(i))
    markers = [tmp_path / "killed-in-input", tmp_path / "killed-in-timers"]
    schema = "user string, category string, amount long"

    def query(batches):
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], KilledOnce(markers), OUTPUT, work / "state",
            work / "changelog", "killed", num_partitions=2, time_mode="ProcessingTime", api="row",
            initial_state=initial_state(spark).groupBy("user"), lock_timeout=60,
        )  # fmt: skip
        return run(frame, work / "cp", batches=batches)

    assert query(FILES) == reference(range(FILES))
    assert all(m.exists() for m in markers), "the workers were killed"
    totals, recent, categories, batches, per_batch = reference_state(range(FILES))

    def read(**options):
        return read_processor_state(spark, work / "changelog", "killed", state_dir=work / "state", **options)

    frame = read(stateVarName="totals")
    assert frame.schema.simpleString() == (
        "struct<key:struct<user:string>,value:struct<count:bigint,total:bigint>,partition_id:int>"
    )
    rows = frame.collect()
    assert {r.key.user: tuple(r.value) for r in rows} == totals
    assert {r.partition_id for r in rows} == {0, 1}

    nested = read(stateVarName="recent", flattenCollectionTypes="false").collect()
    assert {r.key.user: [a for (a,) in r.list_value] for r in nested} == recent
    flat = read(stateVarName="recent").collect()
    assert sorted((r.key.user, r.list_element.amount) for r in flat) == sorted(
        (u, a) for u, s in recent.items() for a in s
    )

    flat = read(stateVarName="categories").collect()
    assert {(r.key.user, r.user_map_key.category): r.user_map_value.n for r in flat} == {
        (u, c): n for u, counted in categories.items() for c, n in counted.items()
    }
    nested = read(stateVarName="categories", flattenCollectionTypes=False).collect()
    assert {r.key.user: {k.category: v.n for k, v in r.map_value.items()} for r in nested} == categories

    # TTL: every value is struct<value, ttlExpirationMs>. The last batch's 1 ms values have expired
    # but stay until the next batch sweeps them, as in Spark's reader; earlier ones were swept.
    fleeting = read(stateVarName="fleeting_value")
    assert (
        fleeting.schema["value"].dataType.simpleString() == "struct<value:struct<seen:boolean>,ttlExpirationMs:bigint>"
    )
    rows = fleeting.collect()
    assert {r.key.user for r in rows} == per_batch[-1]
    assert all(r.value.value.seen and r.value.ttlExpirationMs < time.time() * 1000 for r in rows)
    lasting = read(stateVarName="lasting").collect()
    assert {r.key.user: r.user_map_value.value.n for r in lasting} == batches
    assert all(r.user_map_value.ttlExpirationMs > time.time() * 1000 for r in lasting)

    timers = read(readRegisteredTimers=True)
    assert timers.columns == ["key", "expiration_timestamp_ms", "partition_id"]
    assert {(r.key.user, r.expiration_timestamp_ms) for r in timers.collect()} == {
        (u, FAR + totals[u][0]) for u in batches
    }, "the timers due in each batch fired; each user's far one is left"

    notes = read(stateVarName="note")
    assert notes.schema["value"].dataType.simpleString() == "binary", "pickles stay bytes unless asked"
    unpickled = read(stateVarName="note", unpickle=True).collect()
    assert {r.key.user: r.value for r in unpickled} == {u: repr({"user": u, "count": totals[u][0]}) for u in batches}

    def change_feed(name, start, end=None):
        return read(stateVarName=name, readChangeFeed=True, changeStartBatchId=start, changeEndBatchId=end)

    def expected_totals_feed(start):
        running, out = {**INITIAL, "init-only": (1, 1)}, set()
        for b in range(FILES):
            rows = file_rows(b)
            for user, amount in zip(rows["user"], rows["amount"]):
                running[user] = (running.get(user, (0, 0))[0] + 1, running.get(user, (0, 0))[1] + amount)
            if b >= start:
                out |= {(b, "update", u, running[u]) for u in per_batch[b]}
        return out

    def check_feeds():
        feed = change_feed("totals", 1)
        assert feed.columns == ["batch_id", "change_type", "key", "value", "partition_id"]
        assert {(r.batch_id, r.change_type, r.key.user, tuple(r.value)) for r in feed.collect()} == (
            expected_totals_feed(1)
        )
        swept = {(r.batch_id, r.change_type, r.key.user) for r in change_feed("fleeting_value", 1, 2).collect()}
        assert swept == {(b, "update", u) for b in (1, 2) for u in per_batch[b]} | {
            (b, "delete", u) for b in (1, 2) for u in per_batch[b - 1] - per_batch[b]
        }, "each batch rewrites its users' 1 ms values and its sweep deletes the earlier batch's others"
        feed = change_feed("categories", 2, 2)
        assert feed.columns == ["batch_id", "change_type", "key", "user_map_key", "user_map_value", "partition_id"]
        assert {(r.key.user, r.user_map_key.category, r.user_map_value.n) for r in feed.collect()} == {
            (u, c, categories[u][c])
            for u in per_batch[2]
            for c in {cat for user, cat in zip(file_rows(2)["user"], file_rows(2)["category"]) if user == u}
        }

    # Batch 2's state committed but Spark's commit log lost it: it replays, rolled back and redone.
    for entry in ("2", ".2.crc"):
        (work / "cp" / "commits" / entry).unlink()
    assert query(1) == reference(range(FILES))[2:]
    check_feeds()
    assert {r.key.user: tuple(r.value) for r in read(stateVarName="totals").collect()} == totals
    assert {r.key.user: tuple(r.value) for r in read(stateVarName="totals", batchId=1).collect()} == (
        reference_state(range(2))[0]
    ), "the state as of batch 1"


class Counts(StatefulProcessor):
    """A count per user and per (user, category), typed with ``value_schema`` / ``n_schema``;
    ``pandas``: the pandas API's form."""

    def __init__(self, value_schema, n_schema, pandas=False):
        self.value_schema, self.n_schema, self.pandas = value_schema, n_schema, pandas

    def init(self, handle):
        self.count = handle.getValueState("count", self.value_schema)
        self.per_category = handle.getMapState("per_category", "category string", self.n_schema)

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803
        stored = self.count.get()
        count = 0 if stored is None else stored[-1]
        categories = [c for frame in rows for c in frame["category"]] if self.pandas else [r.category for r in rows]
        for category in categories:
            count += 1
            n = self.per_category.getValue((category,))
            self.per_category.updateValue((category,), ((n[-1] if n else 0) + 1,))
        self.count.update((None, count) if "note" in self.value_schema else (count,))
        top = sum(n for (n,) in self.per_category.values())
        if self.pandas:
            yield pd.DataFrame({"user": [key[0]], "count": [count], "categories": [top]})
        else:
            yield Row(user=key[0], count=count, categories=top)


def changelog_files(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("api", ["row", "pandas"])
def test_schema_evolution_reads_old_state_and_an_incompatible_change_fails_at_start(spark, work, api):
    """Spark's schema evolution cases, on either API: a compatible change reads the old state, an
    incompatible one fails at start (kstate's rules, see the docs' Typed state)."""
    from kstate.errors import StateSchemaError

    # Files arrive as each query needs them: a query stopped after its batches cannot have run
    # a file meant for the next one.
    for i in range(2):
        write_file(work, i, file_rows(i))
    schema = "user string, category string, amount long"
    output = "user string, count long, categories long"

    def query(processor, batches, checkpoint="cp"):
        frame = transform_with_state(
            input_stream(spark, work, schema), ["user"], processor, output, work / "state", work / "changelog",
            "typed", num_partitions=2, api=api, lock_timeout=60,
        )  # fmt: skip
        return run(frame, work / checkpoint, batches=batches)

    counts, out = collections.Counter(), []
    for index in range(FILES):
        users = file_rows(index)["user"]
        counts.update(users)
        out.append(sorted((u, counts[u], counts[u]) for u in set(users)))

    first = query(Counts("count int", "n int", pandas=api == "pandas"), batches=2)
    assert first == out[:2]
    # Compatible: a nullable field added in front, int widened to long (values and map values).
    write_file(work, 2, file_rows(2))
    second = query(Counts("note string, count long", "n long", pandas=api == "pandas"), batches=1)
    assert second == out[2:]

    # The state reader reads values of either schema as the current one: batch 1's were "count int".
    def stored(**as_of):
        frame = read_processor_state(
            spark, work / "changelog", "typed", state_dir=work / "state", stateVarName="count", **as_of
        )
        assert frame.schema["value"].dataType.simpleString() == "struct<note:string,count:bigint>"
        return {r.key.user: tuple(r.value) for r in frame.collect()}

    assert stored() == {u: (None, n) for u, n in counts.items()}
    after_two = collections.Counter(u for i in range(2) for u in file_rows(i)["user"])
    assert stored(batchId=1) == {u: (None, n) for u, n in after_two.items()}
    before = changelog_files(work / "changelog")
    incompatible_changes = (
        Counts("count string", "n long", pandas=api == "pandas"),
        Counts("note string, count long", "n int", pandas=api == "pandas"),
    )
    for incompatible in incompatible_changes:
        with pytest.raises(StateSchemaError, match="changed type"):
            query(incompatible, batches=1, checkpoint="cp-bad")
    assert changelog_files(work / "changelog") == before, "a refused query touches nothing"

    # State a newer kstate wrote (a newer format recorded with its schemas): refused by the
    # query before it starts and by the state reader, the state untouched.
    schema_log = SchemaLog(work / "changelog", "typed")
    seq, raw = schema_log.latest()
    schema_log.create(seq + 1, json.dumps({**json.loads(raw), "format": FORMAT_VERSION + 1}).encode())
    before = changelog_files(work / "changelog")
    with pytest.raises(StateSchemaError, match="a newer kstate's"):
        query(Counts("note string, count long", "n long", pandas=api == "pandas"), batches=1, checkpoint="cp-new")
    with pytest.raises(StateSchemaError, match="a newer kstate's"):
        stored()
    assert changelog_files(work / "changelog") == before


def test_spark_defaults_aqe_and_200_shuffle_partitions_give_the_reference(spark, work):
    """Spark's defaults (AQE on, 200 shuffle partitions) with an advisory size far below a batch,
    num_partitions unset: kstate picks and records the count, routes the initial state and every
    batch with it, and the Row API's output (TTL, timers, initial state) is exactly the reference;
    restarted on its checkpoint with the settings changed (AQE off, 7 shuffle partitions) and
    no local state (a new cluster: the stores load their snapshots, taken every batch here, and
    replay the changelog after them) it continues exactly, and the typed state reads back as the
    reference's."""
    expected = reference(range(FILES))
    for i in range(FILES - 1):
        write_file(work, i, file_rows(i))
    saved = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")}
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "1k")

    def query(batches):
        frame = transform_with_state(
            input_stream(spark, work, "user string, category string, amount long"), ["user"], RowActivity(),
            OUTPUT, work / "state", work / "changelog", "defaults", time_mode="ProcessingTime", api="row",
            initial_state=initial_state(spark).groupBy("user"), lock_timeout=60,
            changelog_config={"minDeltasForSnapshot": 1},
        )  # fmt: skip
        return run(frame, work / "cp", batches=batches)

    try:
        assert query(FILES - 1) == expected[: FILES - 1]
        spark.conf.set("spark.sql.shuffle.partitions", "7")
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        release_parked_stores(work / "state")  # closing, they finish the snapshots running
        shutil.rmtree(work / "state")
        assert list((work / "changelog").glob("*/snapshots/manifests/*.snapshot")), "snapshots to restore from"
        write_file(work, FILES - 1, file_rows(FILES - 1))
        assert query(1) == expected[FILES - 1 :]
        totals = reference_state(range(FILES))[0]
        stored = read_processor_state(
            spark, work / "changelog", "defaults", state_dir=work / "reader", stateVarName="totals"
        ).collect()
        assert {r.key.user: tuple(r.value) for r in stored} == totals
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
        spark.conf.unset("spark.sql.adaptive.advisoryPartitionSizeInBytes")

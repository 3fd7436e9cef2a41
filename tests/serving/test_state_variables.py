"""``transform_with_state``'s state variables read by a replica, typed by their recorded schemas,
without Spark or PySpark in the replica.

The state is written as a processor's tasks write it, without Spark: kstate's own state variables
(``StatefulProcessorHandle``) over each partition's stores in the exactly-once protocol
(``StateBackend.process``), with the schemas recorded as ``transform_with_state`` records them
(``reconcile``). Only the test imports PySpark's types, to declare the schemas (no session)."""

from __future__ import annotations

import base64
import json
import pickle
import time

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: E402

from kstate import Stores  # noqa: E402
from kstate.errors import InvalidArgumentError, StateTypeError  # noqa: E402
from kstate.serving import StateReplica  # noqa: E402
from kstate.spark import StateBackend, TaskInfo  # noqa: E402
from kstate.spark.format.state_schemas import SchemaLog, VariableSchemas, reconcile  # noqa: E402
from kstate.spark.format.state_values import pickled_key  # noqa: E402
from kstate.spark.processor.processor import state_store_names  # noqa: E402
from kstate.spark.processor.state_variables import TTL_INDEX, StatefulProcessorHandle, TypedSchemas  # noqa: E402
from kstate.spark.routing.hashing import partition_ids  # noqa: E402

from .server import serving  # noqa: E402

PARTITIONS = 2
USERS = [f"u{i}" for i in range(8)]
LAST = StructType([StructField("count", LongType()), StructField("name", StringType())])
LAST_V2 = StructType([*LAST.fields, StructField("note", StringType())])
EVENT = StructType([StructField("ts", LongType())])
KIND = StructType([StructField("kind", StringType())])
TOTAL = StructType([StructField("total", LongType())])
TTL_MS = 600_000
KEY_CODECS = {"last": "pickle", "raw": "pickle", "events": "pickle-prefixed", "by_kind": "pickle-prefixed"}


def now_ms():
    return time.time_ns() // 1_000_000


def note(schema):
    """What the processor writes in the field the schema's second version adds."""
    return ("v2",) if len(schema.fields) == 3 else ()


class Reference:
    """The variables in plain Python, as the processor's reads give them."""

    def __init__(self):
        self.last, self.raw, self.events, self.by_kind = {}, {}, {}, {}

    def batch(self, rows, last_schema, now):
        for user, kind, ts in rows:
            count = (self.last.get(user) or (0,))[0] + 1
            self.last[user] = (count, user, *note(last_schema))
            self.raw[user] = {"user": user, "count": count}
            self.events.setdefault(user, []).append((ts,))
            totals = self.by_kind.setdefault(user, {})
            before = totals.get((kind,))
            total = ts if before is None or before[1] <= now else before[0] + ts
            totals[(kind,)] = (total, now + TTL_MS)

    def map_of(self, user, now):
        """``user``'s map, without the entries whose TTL ran out by ``now``."""
        return {kind: (total,) for kind, (total, expiry) in self.by_kind.get(user, {}).items() if expiry > now}

    def last_as_read(self, user):
        """``user``'s value state read with the second schema (``None`` for what the first lacks)."""
        value = self.last.get(user)
        return None if value is None else value + (None,) * (3 - len(value))


class Application:
    """A processor's four variables, written batch by batch in ``PARTITIONS`` partitions."""

    def __init__(self, tmp_path):
        self.changelog_dir = tmp_path / "changelog"
        self.state_dir = tmp_path / "state"
        self.reference = Reference()

    def run(self, batch, last_schema, users=USERS, hours_ago=0):
        """One micro-batch of the rows of ``users``; ``hours_ago``: its processing time (the
        map entries' TTL counts from it)."""
        wanted = {
            "last": VariableSchemas("value", (last_schema,)),
            "events": VariableSchemas("list", (EVENT,)),
            "by_kind": VariableSchemas("map", (TOTAL,), KIND, ttl=True),
            "raw": VariableSchemas("value"),
        }
        stored = reconcile(SchemaLog(self.changelog_dir, "app"), wanted, state_exists=batch > 0)
        typed = {n: TypedSchemas(stored[n].values, w.values[0], stored[n].key) for n, w in wanted.items() if w.values}
        names = ["last", "events", "by_kind", "raw", TTL_INDEX]
        builders = [
            Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes") for n in names
        ]
        backend = StateBackend(
            builders,
            self.state_dir,
            self.changelog_dir,
            "app",
            keys=["user"],
            num_partitions=PARTITIONS,
            key_codecs={**KEY_CODECS, TTL_INDEX: "ttl-index"},
        )
        rows = [(user, "click" if (i + batch) % 3 else "view", 1000 * batch + i) for i, user in enumerate(users * 2)]
        now = now_ms() - hours_ago * 3_600_000

        def process(batches, stores):
            handle = StatefulProcessorHandle(stores, "None", now=now, schemas=typed)
            last = handle.getValueState("last", last_schema)
            raw = handle.getValueState("raw")
            events = handle.getListState("events", EVENT)
            by_kind = handle.getMapState("by_kind", KIND, TOTAL, ttlDurationMs=TTL_MS)
            assert sorted(state_store_names(handle.declared, "None")) == sorted(names)
            for table in batches:
                mine = list(zip(*(table.column(c).to_pylist() for c in ("user", "kind", "ts"))))
                handle.read_ahead_values([pickled_key((user,)) for user, _, _ in mine])
                for user, kind, ts in mine:
                    handle.set_current_key(pickled_key((user,)))
                    count = (last.get() or (0,))[0] + 1
                    last.update((count, user, *note(last_schema)))
                    raw.update({"user": user, "count": count})
                    events.appendValue((ts,))
                    before = by_kind.getValue((kind,))
                    by_kind.updateValue((kind,), (ts if before is None else before[0] + ts,))
                yield table.num_rows

        table = pa.table({"user": [r[0] for r in rows], "kind": [r[1] for r in rows], "ts": [r[2] for r in rows]})
        ids = partition_ids([table.column("user")], PARTITIONS)
        for p in range(PARTITIONS):
            list(backend.process(process, table.filter(pa.array(ids == p)).to_batches(), TaskInfo(p, batch)))
        self.reference.batch(rows, last_schema, now)


def test_variables_read_as_the_processor_reads_them(tmp_path):
    app = Application(tmp_path)
    app.run(0, LAST, hours_ago=1)  # its map entries' TTL ran out long ago
    app.run(1, LAST, users=USERS[:5])
    reference = app.reference
    with StateReplica(app.changelog_dir, "app", local_dir=tmp_path / "r") as replica:
        assert {n: v["kind"] for n, v in replica.state_variables.items()} == {
            "last": "value",
            "events": "list",
            "by_kind": "map",
            "raw": "value",
        }
        for user in [*USERS, "nobody"]:
            answer = replica.state_variable("last", user)
            assert answer.value == reference.last.get(user) and answer.batch_id == 1
            assert replica.state_variable("last", (user,)).value == reference.last.get(user), "a one-column tuple"
            assert replica.state_variable("events", user).value == reference.events.get(user, [])
            expected = reference.map_of(user, now_ms())
            assert replica.state_variable("by_kind", user).value == expected, "expired entries left out"
            raw = replica.state_variable("raw", user).value
            assert (raw if raw is None else pickle.loads(raw)) == reference.raw.get(user), "a pickle, unless unpickle"
        assert not reference.map_of(USERS[-1], now_ms()) and reference.by_kind[USERS[-1]], "all expired, all stored"

        # A compatible schema change: values written before read as the new schema.
        app.run(2, LAST_V2, users=USERS[:3])
        replica.refresh()
        assert replica.state_variables["last"]["values"] == [LAST.jsonValue(), LAST_V2.jsonValue()]
        for user in USERS:
            assert replica.state_variable("last", user).value == reference.last_as_read(user)
            assert replica.state_variable("events", user).value == reference.events[user]

        with pytest.raises(InvalidArgumentError, match="no state variable 'nope'"):
            replica.state_variable("nope", "u1")
        with pytest.raises(InvalidArgumentError, match="state_variable"):
            replica.get("last", "u1")
        with pytest.raises(StateTypeError, match="key column 'user' is string"):
            replica.state_variable("last", 5)
        with pytest.raises(StateTypeError, match="a tuple of 1"):
            replica.state_variable("last", ("u1", "extra"))
    with StateReplica(app.changelog_dir, "app", local_dir=tmp_path / "r", unpickle=True) as replica:
        assert replica.state_variable("raw", "u1").value == reference.raw["u1"]


def test_variables_over_http(tmp_path):
    app = Application(tmp_path)
    app.run(0, LAST)
    app.run(1, LAST, users=USERS[:5])
    reference = app.reference
    with serving(app.changelog_dir, "app", tmp_path / "r") as client:
        variables = client.get("/variables").json()["variables"]
        assert {n: v["kind"] for n, v in variables.items()} == {
            "last": "value",
            "events": "list",
            "by_kind": "map",
            "raw": "value",
        }
        for user in [*USERS, "nobody"]:
            body = client.get("/variables/last", params={"key": json.dumps(user)}).json()
            expected = reference.last.get(user)
            assert body["value"] == (None if expected is None else list(expected)) and body["batch_id"] == 1
            assert client.get("/variables/last", params={"key": json.dumps([user])}).json()["value"] == body["value"]
            events = client.get("/variables/events", params={"key": json.dumps(user)}).json()["value"]
            assert events == [list(e) for e in reference.events.get(user, [])]
            entries = client.get("/variables/by_kind", params={"key": json.dumps(user)}).json()["value"]
            assert {tuple(e["key"]): tuple(e["value"]) for e in entries} == reference.map_of(user, now_ms())
        raw = client.get("/variables/raw", params={"key": '"u1"'}).json()["value"]
        assert pickle.loads(base64.b64decode(raw)) == reference.raw["u1"], "a pickle, as base64 text"
        app.run(2, LAST, users=USERS[:3])
        body = client.get("/variables/last", params={"key": '"u0"', "at_least_batch": 2, "timeout": 10}).json()
        assert body["batch_id"] == 2 and body["value"] == list(reference.last["u0"])
        wrong = client.get("/variables/last", params={"key": "5"})
        assert wrong.status_code == 400 and "key column 'user' is string" in wrong.json()["error"]
        bad = client.get("/variables/last", params={"key": "u0"})
        assert bad.status_code == 400 and "key is not JSON" in bad.json()["error"]

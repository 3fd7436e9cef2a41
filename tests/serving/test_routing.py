"""A replica routes keys natively, without Arrow (``_core.spark_partitions_of_values``,
``_core.RoutedViews``): every key goes to the partition Spark's routing over Arrow gives it
(``partition_ids``), and a value that is not a plain one of the key column's type is left to
Arrow (``None``), which converts or refuses it."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest

from kstate import Stores, _core
from kstate.errors import InvalidArgumentError, InvalidStateStoreError
from kstate.spark.routing.hashing import partition_ids
from kstate.store_lifecycle import native_store

rng = random.Random(42)
TEXT = ["", "a", "user-1", "ünïcødé", "日本語テキスト", "x" * 37, *(f"k{rng.randrange(10**9)}" for _ in range(200))]
LONGS = [0, 1, -1, 2**63 - 1, -(2**63), *(rng.randrange(-(2**63), 2**63) for _ in range(200))]


class Answer(tuple):
    __slots__ = ()


def answering(views):
    """``views``' reads of a key as a replica's ``get`` answers them (its seqlock untouched)."""
    return _core.SnapshotRead(views, Answer, _core.Seqlock(), 0).read


COLUMNS = {
    "string": (pa.string(), TEXT),
    "binary": (pa.binary(), [t.encode() for t in TEXT] + [bytes([0, 255, 128])]),
    "tinyint": (pa.int8(), [-128, 0, 5, 127]),
    "smallint": (pa.int16(), [-(2**15), 0, 300, 2**15 - 1]),
    "int": (pa.int32(), [-(2**31), -7, 0, 2**31 - 1, *(rng.randrange(-(2**31), 2**31) for _ in range(100))]),
    "bigint": (pa.int64(), LONGS),
    "boolean": (pa.bool_(), [True, False]),
    "double": (pa.float64(), [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), 1e300]),
}


@pytest.mark.parametrize("spark_type", sorted(COLUMNS))
@pytest.mark.parametrize("partitions", [1, 3, 200])
def test_values_go_where_arrow_routing_sends_them(spark_type, partitions):
    arrow_type, values = COLUMNS[spark_type]
    values = [*values, None]
    expected = partition_ids([pa.array(values, arrow_type)], partitions).tolist()
    assert _core.spark_partitions_of_values([values], [spark_type], partitions) == expected


def test_rows_of_several_columns_chain_as_arrow_does():
    keys = [("a", 1), ("b", None), (None, -5), ("ü", 2**40)]
    columns = [[k[0] for k in keys], [k[1] for k in keys]]
    expected = partition_ids([pa.array(columns[0], pa.string()), pa.array(columns[1], pa.int64())], 7).tolist()
    assert _core.spark_partitions_of_values(columns, ["string", "bigint"], 7) == expected


@pytest.mark.parametrize(
    ("spark_type", "value"),
    [
        ("string", b"bytes"),
        ("string", 17),
        ("binary", "text"),
        ("int", 2**31),
        ("tinyint", 128),
        ("bigint", 2**63),
        ("bigint", True),
        ("bigint", 1.0),
        ("boolean", 1),
        ("double", 1),
        ("date", 19000),
        ("string", "\ud800"),
    ],
)
def test_other_values_are_left_to_arrow(spark_type, value):
    assert _core.spark_partitions_of_values([[value]], [spark_type], 3) is None
    assert _core.spark_partitions_of_values([["a", value]], [spark_type], 3) is None


@pytest.mark.parametrize(
    ("spark_type", "serde", "stored"),
    [
        ("string", "string", str.encode),
        ("binary", "bytes", lambda k: k),
        ("bigint", "int64", lambda k: struct.pack(">q", k)),
    ],
)
def test_routed_views_read_each_key_from_its_partition(tmp_path, spark_type, serde, stored):
    arrow_type, keys = COLUMNS[spark_type]
    ids = partition_ids([pa.array(keys, arrow_type)], 3).tolist()
    stores = []
    for p in range(3):
        store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), serde, "bytes").build()
        store.init(tmp_path / f"p{p}")
        for key, partition in zip(keys, ids):
            if partition == p:
                store.put(key, b"%d" % p)
        store.commit()
        stores.append(store)
    views = _core.RoutedViews([native_store(s).read_committed_view() for s in stores], spark_type)
    for key, partition in zip(keys, ids):
        assert views.get(key) == (partition, b"%d" % partition)
    absent = {"string": "absent", "binary": b"absent", "bigint": 12345}[spark_type]
    assert views.get(absent)[1] is None
    read, values = views.get_many([*keys, absent])
    assert read == sorted(set(ids) | {views.get(absent)[0]})
    assert values == [b"%d" % p for p in ids] + [None]
    assert views.get(None) is None and views.get_many([keys[0], 1.5]) is None
    if spark_type == "string":
        assert views.get("\ud800") is None, "a str with no UTF-8 form is left to Arrow, which refuses it"
    assert native_store(stores[ids[0]]).get(stored(keys[0])) == b"%d" % ids[0], "the serde's bytes are read"
    for store in stores:
        store.close()


VALUES = {
    "bytes": [b"", b"\x00\xff", b"v" * 40],
    "string": ["", "ünïcødé", "日本語"],
    "int64": [0, -1, 2**63 - 1, -(2**63)],
    "double": [0.0, -0.0, 1.5, float("inf"), -1e300],
}


@pytest.mark.parametrize("serde", sorted(VALUES))
def test_routed_views_decode_values_as_the_serde_does(tmp_path, serde):
    """Values come back decoded, equal to what the store's own ``get`` (its Python serde) gives;
    a replica's read answers with the partition's batches; bytes the serde rejects are left to it."""
    keys = TEXT[:40]
    ids = partition_ids([pa.array(keys, pa.string())], 2).tolist()
    stores = []
    for p in range(2):
        store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", serde).build()
        store.init(tmp_path / f"p{p}")
        for i, (key, partition) in enumerate(zip(keys, ids)):
            if partition == p:
                store.put(key, VALUES[serde][i % len(VALUES[serde])])
        store.commit()
        stores.append(store)
    views = _core.RoutedViews(
        [native_store(s).read_committed_view() for s in stores], "string", serde, [(7, 9), (None, 8)]
    )
    for key, partition in zip(keys, ids):
        expected = stores[partition].get(key)
        assert repr(views.get(key)) == repr((partition, expected))  # repr: -0.0 and 0.0 differ
        assert repr(answering(views)(key)) == repr((expected, [7, None][partition], {partition: [9, 8][partition]}))
    assert answering(views)("absent")[0] is None
    read, values = views.get_many(keys)
    assert repr(values) == repr([stores[p].get(k) for k, p in zip(keys, ids)])

    raw = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "bytes").build()
    raw.init(tmp_path / "raw")
    raw.put("k", b"\xff\xfe\xfd")  # neither UTF-8 nor 8 bytes
    raw.commit()
    views = _core.RoutedViews([native_store(raw).read_committed_view()], "string", serde, [(0, 0)])
    if serde == "bytes":
        assert views.get("k") == (0, b"\xff\xfe\xfd")
    else:
        assert views.get("k") is None and answering(views)("k") is None and views.get_many(["k"]) is None
    for store in [*stores, raw]:
        store.close()


def test_routed_views_refuse_what_they_cannot_decode_or_answer(tmp_path):
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "bytes").build()
    store.init(tmp_path)
    view = native_store(store).read_committed_view()
    with pytest.raises(InvalidArgumentError, match="json"):
        _core.RoutedViews([view], "string", "json")
    with pytest.raises(InvalidArgumentError, match="every partition"):
        _core.RoutedViews([view], "string", None, [(0, 0), (0, 0)])
    with pytest.raises(InvalidStateStoreError, match="batches"):
        answering(_core.RoutedViews([view], "string"))("k")
    store.close()


def test_a_snapshot_read_answers_only_while_its_seqlock_stands_still(tmp_path):
    """``SnapshotRead`` (a replica's ``get``): the views' ``read`` as an instance of the answer
    type while the seqlock is at the snapshot's sequence; ``None`` once a write has started,
    and then also for a read that failed because the write closed the store."""
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "int64").build()
    store.init(tmp_path)
    store.put("k", 7)
    store.commit()
    views = _core.RoutedViews([native_store(store).read_committed_view()], "string", "int64", [(3, 4)])
    seqlock = _core.Seqlock()
    read = _core.SnapshotRead(views, Answer, seqlock, 0).read
    answer = read("k")
    assert type(answer) is Answer and answer == (7, 3, {0: 4})
    assert read("absent") == (None, 3, {0: 4}) and read(b"k") is None
    answers = [read("k") for _ in range(3)]
    answers[0][2][0] = 99  # each answer has a mapping of its own
    assert answers[1] == answers[2] == (7, 3, {0: 4})
    seqlock.advance()
    assert seqlock.sequence == 1 and read("k") is None
    seqlock.advance()
    assert read("k") is None, "a snapshot never answers after a write, even an ended one"
    with pytest.raises(InvalidArgumentError, match="tuple subclass"):
        _core.SnapshotRead(views, dict, seqlock, 0)

    stale = _core.SnapshotRead(views, Answer, seqlock, seqlock.sequence).read
    store.close()
    with pytest.raises(InvalidStateStoreError):
        stale("k")  # closed with no write begun: the read's own error
    seqlock.advance()
    assert stale("k") is None

"""The StatefulProcessor state variables on kstate stores, without Spark: Spark's names and
arguments, TTL per value / list element / map entry, list appends, deleteIfExists, timers."""

import pickle

import pytest

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.spark import StateBackend, StatefulProcessorHandle, TaskInfo
from kstate.spark.format.state_values import VariableDecoder
from kstate.spark.processor.processor import TIMERS_BY_KEY, TIMERS_BY_TIME, TTL_INDEX
from kstate.spark.protocol.undo import previous_values
from kstate.store_lifecycle import native_store
from kstate.stores import Stores

NOW = 1_700_000_000_000


@pytest.fixture
def open_handle(tmp_path):
    states = []

    def make(batch, names=("v", "l", "m"), time_mode="None", now=NOW):
        builders = [
            Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes") for n in names
        ]
        state = StateBackend(builders, tmp_path / "state", tmp_path / "log", "app").partition_state(TaskInfo(0, batch))
        states.append(state)
        return state, StatefulProcessorHandle(state.open(), time_mode, now=now)

    yield make
    for state in states:
        state.abort()


def key(handle, value):
    handle.set_current_key(pickle.dumps((value,), protocol=4))


def list_entries(state, handle, name="l"):
    """The current key's entries of list variable ``name``: ``(sequence, is a run, element
    count)`` each, in key order."""
    prefix = handle._current_prefix
    with state._stores[name].prefix_scan(prefix) as entries:
        return [
            (int.from_bytes(k[len(prefix) : len(prefix) + 8], "big"), len(k) == len(prefix) + 9, len(elements(k, v)))
            for k, v in entries
        ]


def elements(store_key, stored):
    return _core.state_list_elements(store_key, _core.state_split_stored(stored)[1])


def test_value_list_and_map_state_per_key_survive_commits(open_handle):
    state, handle = open_handle(0)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    for k in ("a", "b"):
        key(handle, k)
        assert not value.exists() and list(items.get()) == [] and not mapping.exists()
        value.update((1, k))
        items.appendValue(k)
        items.appendList([1, 2])
        mapping.updateValue("x", 10)
        mapping.updateValue(("y", 2), {"deep": k})
    state.commit()
    state, handle = open_handle(1)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    key(handle, "a")
    assert value.get() == (1, "a") and list(items.get()) == ["a", 1, 2]
    items.appendValue(3)
    assert list(items.get()) == ["a", 1, 2, 3], "an append after a reopen goes after the stored elements"
    assert dict(mapping.iterator()) == {"x": 10, ("y", 2): {"deep": "a"}}
    assert mapping.containsKey("x") and mapping.getValue("nope") is None
    mapping.removeKey("x")
    assert list(mapping.keys()) == [("y", 2)]
    mapping.clear()
    value.clear()
    items.clear()
    assert not mapping.exists() and not value.exists() and not items.exists()
    key(handle, "b")
    assert value.get() == (1, "b") and mapping.getValue("x") == 10 and list(items.get()) == ["b", 1, 2]


class StateCallingValue:
    """A value whose pickling makes state calls (``calls``) while kstate encodes it."""

    def __init__(self, calls):
        self.calls = calls

    def __reduce__(self):
        self.calls()
        return (str, ("outer",))


def test_state_calls_made_while_a_value_is_encoded_store_both_values(open_handle):
    # A state call encodes into a buffer of the thread's; one made while that is in use (here,
    # from the pickling of the value being stored) must not share it.
    state, handle = open_handle(0)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    key(handle, "a")

    def inner_calls():
        mapping.updateValue("inner", "x" * 100)
        items.appendValue(7)

    value.update(StateCallingValue(inner_calls))
    mapping.updateValue("outer", StateCallingValue(lambda: value.update("inner value")))
    items.appendList([StateCallingValue(lambda: mapping.updateValue("from a list", 1)), "b"])
    items.put([StateCallingValue(lambda: mapping.removeKey("from a list"))])
    assert value.get() == "inner value", "the inner update came after the outer one was staged"
    assert dict(mapping.iterator()) == {"inner": "x" * 100, "outer": "outer"}
    assert list(items.get()) == ["outer"]
    state.commit()
    state, handle = open_handle(1)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    key(handle, "a")
    assert value.get() == "inner value" and list(items.get()) == ["outer"]
    assert dict(mapping.iterator()) == {"inner": "x" * 100, "outer": "outer"}


def test_spark_keyword_arguments(open_handle):
    names = ("v", "l", "m", "w", "p", "q", TTL_INDEX, TIMERS_BY_TIME, TIMERS_BY_KEY)
    _, handle = open_handle(0, names=names, time_mode="ProcessingTime")
    value = handle.getValueState(stateName="v", schema="c long", ttlDurationMs=1000)
    items = handle.getListState(stateName="l", schema="c long", ttlDurationMs=1000)
    mapping = handle.getMapState(stateName="m", userKeySchema="k string", valueSchema="c long", ttlDurationMs=1000)
    key(handle, "a")
    value.update(newValue=(1,))
    items.put(newState=[(1,)])
    items.appendValue(newState=(2,))
    items.appendList(newState=[(3,)])
    mapping.updateValue(key=("k",), value=(4,))
    handle.registerTimer(expiryTimestampMs=5)
    assert list(handle.listTimers()) == [5]
    handle.deleteTimer(expiryTimestampMs=5)
    assert value.get() == (1,) and list(items.get()) == [(1,), (2,), (3,)] and mapping.getValue(("k",)) == (4,)
    # Without a TTL some calls are native methods: the same names.
    plain_value = handle.getValueState(stateName="w", schema="c long")
    plain_value.update(newValue=(5,))
    assert plain_value.get() == (5,)
    plain_items = handle.getListState(stateName="p", schema="c long")
    plain_map = handle.getMapState(stateName="q", userKeySchema="k string", valueSchema="c long")
    plain_items.put(newState=[(1,)])
    plain_items.appendValue(newState=(2,))
    plain_map.updateValue(key=("k",), value=(4,))
    assert plain_map.containsKey(key=("k",)) and plain_map.getValue(key=("k",)) == (4,)
    assert list(plain_items.get()) == [(1,), (2,)]


def test_a_schema_stores_values_as_spark_does(open_handle):
    """With a schema, a Row and a tuple are the same map key and values come back as tuples with
    Python numbers (Spark normalizes numpy scalars)."""
    np = pytest.importorskip("numpy")
    from pyspark.sql import Row

    _, handle = open_handle(0)
    value, mapping = handle.getValueState("v", "c long, name string"), handle.getMapState("m", "k string", "n long")
    key(handle, "a")
    value.update(Row(c=np.int64(3), name="x"))
    stored = value.get()
    assert stored == (3, "x") and type(stored) is tuple and type(stored[0]) is int
    mapping.updateValue(Row(k="p"), (np.int64(1),))
    mapping.updateValue(("p",), (2,))
    assert list(mapping.iterator()) == [(("p",), (2,))]


def test_values_spark_refuses_are_refused(open_handle):
    _, handle = open_handle(0)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    key(handle, "a")
    for bad in (
        lambda: value.update(None),
        lambda: items.put([]),
        lambda: items.put(()),
        lambda: items.put([(1,), None]),
        lambda: items.put(None),
        lambda: items.put("ab"),
        lambda: items.appendList([]),
        lambda: items.appendList(()),
        lambda: items.appendList([(1,), None]),
        lambda: items.appendList(None),
        lambda: items.appendList("ab"),
        lambda: items.appendValue(None),
        lambda: mapping.updateValue("k", None),
        lambda: mapping.updateValue(None, (1,)),
        lambda: handle.getValueState("v2", ttlDurationMs=0),
        lambda: handle.getValueState("tws.x"),
    ):
        with pytest.raises(InvalidArgumentError):
            bad()
    assert not value.exists() and not items.exists() and not mapping.exists()
    items.put(((1,), (2,)))
    assert list(items.get()) == [(1,), (2,)], "a tuple is a list of values"
    items.put(v for v in [(3,)])
    assert list(items.get()) == [(3,)], "so is any iterable, as Spark iterates it"
    items.appendList(v for v in [(4,)])
    items.appendList(((5,), (6,)))
    assert list(items.get()) == [(3,), (4,), (5,), (6,)], "appendList takes what put takes"


def ttl_variables(handle, ttl_ms=1000) -> tuple:
    """Value ``v``, list ``l`` and map ``m``, each with a TTL of ``ttl_ms``."""
    return (
        handle.getValueState("v", ttlDurationMs=ttl_ms),
        handle.getListState("l", ttlDurationMs=ttl_ms),
        handle.getMapState("m", ttlDurationMs=ttl_ms),
    )


def test_ttl_expires_values_list_elements_and_map_entries_by_processing_time(open_handle):
    names = ("v", "l", "m", TTL_INDEX)
    state, handle = open_handle(0, names=names, now=NOW)
    value, items, mapping = ttl_variables(handle)
    key(handle, "a")
    value.update(1)
    items.appendValue("old")
    mapping.updateValue("old", 1)
    assert value.get() == 1, "visible for the rest of the batch"
    state.commit()

    # Half a TTL later: new elements and entries get their own expiry; the value is rewritten.
    state, handle = open_handle(1, names=names, now=NOW + 500)
    value, items, mapping = ttl_variables(handle)
    key(handle, "a")
    value.update(2)
    items.appendValue("new")
    mapping.updateValue("new", 2)
    state.commit()

    # At the first expiry (now >= expiry, as Spark): the old element and entry are gone.
    state, handle = open_handle(2, names=names, now=NOW + 1000)
    value, items, mapping = ttl_variables(handle)
    key(handle, "a")
    assert value.get() == 2 and list(items.get()) == ["new"] and dict(mapping.iterator()) == {"new": 2}
    assert not mapping.containsKey("old") and mapping.getValue("old") is None
    assert handle.remove_expired() == 2, "the old list element and map entry leave the stores"
    state.commit()

    state, handle = open_handle(3, names=names, now=NOW + 1500)
    value, items, mapping = ttl_variables(handle)
    key(handle, "a")
    assert not value.exists() and not items.exists() and not mapping.exists()
    assert handle.remove_expired() == 3
    stores = state._stores
    for name in names:
        with stores[name].all() as entries:
            assert list(entries) == [], f"{name} still holds entries"


def test_rewritten_values_outlive_their_first_expiry(open_handle):
    names = ("v", TTL_INDEX)
    state, handle = open_handle(0, names=names, now=NOW)
    value = handle.getValueState("v", ttlDurationMs=100)
    key(handle, "a")
    value.update(1)
    state.commit()
    state, handle = open_handle(1, names=names, now=NOW + 50)
    value = handle.getValueState("v", ttlDurationMs=100)
    key(handle, "a")
    value.update(2)
    state.commit()
    state, handle = open_handle(2, names=names, now=NOW + 120)
    value = handle.getValueState("v", ttlDurationMs=100)
    assert handle.remove_expired() == 0, "the first index entry is stale: the value was updated since"
    key(handle, "a")
    assert value.get() == 2


def ttl_index_entries(state) -> list[tuple]:
    """The TTL index's entries as ``(raw, expiry, name, key, prefix, suffix)``."""
    with state._stores[TTL_INDEX].all() as entries:
        return [(k, *_core.state_split_ttl_entry(k)) for k, _ in entries]


def test_a_batch_indexes_each_variable_and_key_once_however_many_entries_it_writes(open_handle):
    names = ("v", "l", "m", TTL_INDEX)
    state, handle = open_handle(0, names=names, now=NOW)
    value, items, mapping = ttl_variables(handle)
    for k in ("a", "b"):
        key(handle, k)
        value.update(1)
        value.update(2)
        items.put([1, 2, 3])
        items.appendValue(4)
        for j in range(4):
            mapping.updateValue(f"k{j}", j)
    indexed = sorted((name, pickle.loads(k)[0], suffix) for _, _, name, k, _, suffix in ttl_index_entries(state))
    assert indexed == [(n, k, b"") for n in ("l", "m", "v") for k in ("a", "b")]


def test_per_entry_ttl_index_entries_of_kstate_0_1_are_still_swept(open_handle):
    """kstate 0.1 indexed each list element and map entry (the entry's key after the prefix):
    a store it wrote keeps working, its index entries swept one entry each."""
    names = ("l", "m", TTL_INDEX)
    state, handle = open_handle(0, names=names, now=NOW)
    items = handle.getListState("l", ttlDurationMs=1000)
    mapping = handle.getMapState("m", ttlDurationMs=1000)
    key(handle, "a")
    items.appendValue("x")  # an entry per element, as kstate 0.1 wrote every list
    items.appendValue("y")
    mapping.updateValue("k", 1)
    state.commit()
    state, handle = open_handle(1, names=names, now=NOW + 10)
    stores = state._stores
    for raw, _, name, _, prefix, _ in ttl_index_entries(state):
        with stores[name].prefix_scan(prefix) as entries:
            suffixes = [k[len(prefix) :] for k, _ in entries]
        stores[TTL_INDEX].delete(raw)
        for suffix in suffixes:
            stores[TTL_INDEX].put(raw + suffix, b"")
    assert [suffix != b"" for *_, suffix in ttl_index_entries(state)] == [True] * 3
    state.commit()

    state, handle = open_handle(2, names=names, now=NOW + 1000)
    handle.getListState("l", ttlDurationMs=1000)
    handle.getMapState("m", ttlDurationMs=1000)
    assert handle.remove_expired() == 3
    for name in names:
        with state._stores[name].all() as entries:
            assert list(entries) == [], f"{name} still holds entries"


def test_values_read_ahead_for_many_keys_give_way_to_later_writes(open_handle):
    state, handle = open_handle(0, names=("v", "w", TTL_INDEX))
    value = handle.getValueState("v", ttlDurationMs=10)
    for k in ("a", "b", "c"):
        key(handle, k)
        value.update(k)
    state.commit()
    state, handle = open_handle(1, names=("v", "w", TTL_INDEX), now=NOW + 5)
    value, same = handle.getValueState("v", ttlDurationMs=10), handle.getValueState("v", ttlDurationMs=10)
    other = handle.getValueState("w")
    keys = [pickle.dumps((k,), protocol=4) for k in ("a", "b", "c", "new")]
    handle.read_ahead_values(keys)
    key(handle, "a")
    assert value.get() == "a" and same.exists()
    same.update("a2")
    assert value.get() == "a2", "a write through any handle of the variable replaces the read-ahead value"
    key(handle, "b")
    value.clear()
    assert not same.exists() and same.get() is None
    key(handle, "new")
    assert value.get() is None and other.get() is None
    other.update(1)
    assert other.get() == 1
    handle.read_ahead_values([])
    key(handle, "a")
    assert value.get() == "a2"
    state.commit()
    state, handle = open_handle(2, names=("v", "w", TTL_INDEX), now=NOW + 10)
    value = handle.getValueState("v", ttlDurationMs=10)
    handle.read_ahead_values(keys)
    key(handle, "c")
    assert value.get() is None and not value.exists(), "a read-ahead value expires as a stored one"
    key(handle, "a")
    assert value.get() == "a2"


def test_list_and_map_state_read_ahead_behave_as_the_store_does(open_handle):
    """A random run of list and map calls on keys read ahead (and some not) checked against a
    plain-dict model after every call, with TTL-expired entries still stored underneath, then the
    committed state read back without a read-ahead: reads see the batch's staged writes, list
    appends go after expired elements, a put or clear deletes exactly what was stored. The
    batch's undo, taken from the committed values the read-aheads kept, is what the stores
    read themselves (the read-ahead of a store with writes staged before it read keeps none),
    and a replay of the batch rolls it back with it."""
    import copy
    import random

    names = ("l", "m", "t", TTL_INDEX)
    rng = random.Random(24)
    users = [f"u{i}" for i in range(40)]
    lists = {u: [] for u in users}
    maps = {u: {} for u in users}
    short = {u: [] for u in users}  # list "t": TTL 10 ms, all expired by batch 1
    state, handle = open_handle(0, names=names)
    items, mapping, expiring = handle.getListState("l"), handle.getMapState("m"), handle.getListState("t", None, 10)
    for u in users[::2]:
        key(handle, u)
        lists[u] = list(range(rng.randrange(1, 5)))
        items.put(lists[u])
        maps[u] = {f"k{j}": j for j in range(rng.randrange(0, 4))}
        for k, v in maps[u].items():
            mapping.updateValue(k, v)
        expiring.appendList([1, 2])
    state.commit()
    before = copy.deepcopy((lists, maps))

    state, handle = open_handle(1, names=names, now=NOW + 20)
    items, mapping, expiring = handle.getListState("l"), handle.getMapState("m"), handle.getListState("t", None, 10)
    key(handle, users[1])
    items.appendValue("staged before the read-ahead")
    lists[users[1]] = ["staged before the read-ahead"]
    handle.read_ahead_values([pickle.dumps((u,), protocol=4) for u in users[:30]])  # u30.. are not read ahead
    held = handle._prefixed_ahead["l"]
    key(handle, users[1])
    assert held.next_sequence(handle._current_prefix) == 1, "the read-ahead holds the staged element"
    key(handle, users[35])
    assert held.next_sequence(handle._current_prefix) is None
    for step in range(3000):
        u = rng.choice(users)
        key(handle, u)
        op = rng.randrange(11)
        if op == 0:
            lists[u] = [step, step + 1][: rng.randrange(1, 3)]
            items.put(lists[u])
        elif op == 1:
            items.appendValue(step)
            lists[u].append(step)
        elif op == 2:
            items.appendList([step, -step])
            lists[u] += [step, -step]
        elif op == 3 and rng.random() < 0.3:
            items.clear()
            lists[u] = []
        elif op == 4:
            k = f"k{rng.randrange(6)}"
            mapping.updateValue(k, step)
            maps[u][k] = step
        elif op == 5:
            k = f"k{rng.randrange(6)}"
            mapping.removeKey(k)
            maps[u].pop(k, None)
        elif op == 6 and rng.random() < 0.3:
            mapping.clear()
            maps[u] = {}
        elif op == 7:
            expiring.appendValue(step)
            short[u].append(step)
        elif op == 8:
            short[u] = [step]
            expiring.put(short[u])
        elif op == 9:  # the last three kept: the old elements that stay are not rewritten
            lists[u] = (lists[u] + [step])[-3:]
            items.put(lists[u])
        k = f"k{rng.randrange(6)}"
        assert mapping.getValue(k) == maps[u].get(k) and mapping.containsKey(k) == (k in maps[u])
        assert list(items.get()) == lists[u] and items.exists() == bool(lists[u])
        assert dict(mapping.iterator()) == maps[u] and mapping.exists() == bool(maps[u])
        assert list(expiring.get()) == short[u], u
    handle.read_ahead_values([])
    undo_sources = handle._stores.undo_sources
    assert handle._prefixed_ahead["l"].kept_values() == 0, "writes were staged before it read"
    assert handle._prefixed_ahead["m"].kept_values() > 0 and handle._prefixed_ahead["t"].kept_values() > 0
    for name in ("l", "m", "t"):
        native = native_store(handle._stores[name])
        assert undo_sources[name] is handle._prefixed_ahead[name]
        assert previous_values(native, undo_sources[name]).equals(previous_values(native)), name
    state.commit()

    state, handle = open_handle(2, names=names, now=NOW + 25)
    items, mapping, expiring = handle.getListState("l"), handle.getMapState("m"), handle.getListState("t", None, 10)
    for u in users:
        key(handle, u)
        assert (
            list(items.get()) == lists[u] and dict(mapping.iterator()) == maps[u] and list(expiring.get()) == short[u]
        )
        held = sum(n for *_, n in list_entries(state, handle))
        assert held == len(lists[u]), "a put or clear left no stale element behind"
    state.abort()

    # Batch 1 replayed: rolled back with those undo files, the state is batch 0's again.
    state, handle = open_handle(1, names=names, now=NOW + 20)
    items, mapping = handle.getListState("l"), handle.getMapState("m")
    for u in users:
        key(handle, u)
        assert list(items.get()) == before[0][u] and dict(mapping.iterator()) == before[1][u], u


def test_delete_if_exists_drops_every_key_of_a_variable(open_handle):
    state, handle = open_handle(0, names=("v", "old"))
    old = handle.getMapState("old")
    for k in ("a", "b"):
        key(handle, k)
        old.updateValue("x", 1)
    state.commit()
    state, handle = open_handle(1, names=("v", "old"))
    handle.deleteIfExists("old")
    assert handle.declared["old"].kind == "deleted"
    with state._stores["old"].all() as entries:
        assert list(entries) == []


def test_list_appends_write_one_entry_each(open_handle):
    """An append is one put of one element: the store holds one entry per element, and reading
    the list back is one prefix scan."""
    state, handle = open_handle(0, names=("l",))
    items = handle.getListState("l")
    key(handle, "a")
    for i in range(1000):
        items.appendValue(i)
    with state._stores["l"].all() as entries:
        assert len(list(entries)) == 1000
    assert list(items.get()) == list(range(1000))


def test_a_list_put_is_one_entry_and_a_list_kept_by_put_one_write_a_call(open_handle):
    """``put`` writes the list as one entry (a run) at its first sequence, whatever its length,
    and deletes its other entries; a list kept as its last 50 by ``put`` is one write a call, and
    none when unchanged. A list written an entry per element (``appendValue``, as kstate before
    runs wrote every list) reads and is replaced alike; appends follow the run."""
    state, handle = open_handle(0, names=("l",))
    items = handle.getListState("l")
    key(handle, "a")
    for value in range(50):
        items.appendValue(value)
    state.commit()
    state, handle = open_handle(1, names=("l",))
    items = handle.getListState("l")
    key(handle, "a")
    assert list(items.get()) == list(range(50))
    items.put(list(range(2, 52)))
    assert list_entries(state, handle) == [(0, True, 50)]
    items.appendValue(52)
    items.appendList([53, 54])
    assert list(items.get()) == list(range(2, 55))
    assert list_entries(state, handle) == [(0, True, 50), (1, False, 1), (2, True, 2)]
    state.commit()
    state, handle = open_handle(2, names=("l",))
    items = handle.getListState("l")
    key(handle, "a")
    assert list(items.get()) == list(range(2, 55))
    store = state._stores["l"]
    items.put(list(range(5, 55)))
    assert list_entries(state, handle) == [(0, True, 50)]
    staged = store.uncommitted_bytes
    items.put(list(range(5, 55)))
    assert store.uncommitted_bytes == staged, "the list holds it already: nothing written"
    state.commit()
    state, handle = open_handle(3, names=("l",))
    items = handle.getListState("l")
    key(handle, "a")
    items.put(list(range(6, 56)))
    assert state._stores["l"].uncommitted_bytes < 1_000, "one run staged (an entry per element: ~4,700 bytes)"
    assert list(items.get()) == list(range(6, 56))
    items.clear()
    items.put(["x"])
    assert list(items.get()) == ["x"] and list_entries(state, handle) == [(0, True, 1)]


def test_the_state_readers_decoder_reads_runs_and_elements_with_their_expiries(open_handle):
    """``VariableDecoder.list_decoder`` (the state reader's and the change feed's) gives each
    entry's elements as the processor wrote them, an element's and a run's, with the expiry of
    the call that wrote them where the variable has a TTL."""
    state, handle = open_handle(0, names=("l", "p", TTL_INDEX))
    timed, pickled = handle.getListState("l", None, 1000), handle.getListState("p")
    key(handle, "a")
    timed.appendValue((1,))
    pickled.appendValue({"x": 1})
    pickled.appendList([{"y": 2}, ("z",)])
    state.commit()
    state, handle = open_handle(1, names=("l", "p", TTL_INDEX), now=NOW + 10)
    timed = handle.getListState("l", None, 1000)
    key(handle, "a")
    timed.appendList([(2,), (3,)])
    state.commit()
    state, _ = open_handle(2, names=("l", "p", TTL_INDEX), now=NOW + 20)
    decoders = (
        VariableDecoder("l", "list", ttl=True, pickles="objects"),
        VariableDecoder("p", "list", pickles="objects"),
    )
    read = []
    for name, decoder in zip(("l", "p"), decoders):
        elements_of = decoder.list_decoder()
        with state._stores[name].all() as entries:
            read.append([element for k, v in entries for element in elements_of(k, v)])
    assert read == [[((1,), NOW + 1000), ((2,), NOW + 1010), ((3,), NOW + 1010)], [{"x": 1}, {"y": 2}, ("z",)]]


def test_a_ttl_added_and_removed_across_restarts_keeps_lists_and_expiries_right(open_handle):
    """A list kept as its last three by ``put`` (its sequences no longer start at 0), then the
    query restarted with a TTL on it, then without one again: every batch reads the model's
    list; elements written under the TTL expire and leave the store, the ones rewritten without
    a TTL do not."""
    names = ("l", TTL_INDEX)
    model: list[int] = []
    runs = [(None, NOW), (None, NOW), (1000, NOW + 10), (None, NOW + 20), (None, NOW + 5000)]
    for batch, (ttl, now) in enumerate(runs):
        state, handle = open_handle(batch, names=names, now=now)
        items = handle.getListState("l", None, ttl)
        key(handle, "a")
        assert list(items.get()) == model, batch
        if batch < 4:
            model = (model + [batch * 10, batch * 10 + 1])[-3:]
            items.put(model)
            items.appendValue(batch * 10 + 2)
            model = model + [batch * 10 + 2]
            assert list(items.get()) == model
        else:
            assert handle.remove_expired() == 0, "every element was rewritten without a TTL"
            assert sum(n for *_, n in list_entries(state, handle)) == len(model)
        state.commit()

    # Written under a TTL and not rewritten since: those elements expire and leave the store.
    state, handle = open_handle(5, names=names, now=NOW + 6000)
    items = handle.getListState("l", None, 1000)
    key(handle, "a")
    items.put([1, 2])
    state.commit()
    state, handle = open_handle(6, names=names, now=NOW + 6100)
    items = handle.getListState("l")
    key(handle, "a")
    items.appendValue(3)
    state.commit()
    state, handle = open_handle(7, names=names, now=NOW + 7000)
    items = handle.getListState("l", None, 1000)  # a handle sweeps the TTL index of TTL variables
    key(handle, "a")
    assert list(items.get()) == [3]
    assert handle.remove_expired() == 1, "the run of 1 and 2 expired"
    with state._stores["l"].prefix_scan(handle._current_prefix) as entries:
        assert len(list(entries)) == 1


def test_a_name_declared_as_two_kinds_is_an_error(open_handle):
    _, handle = open_handle(0, names=("v",))
    handle.getValueState("v")
    with pytest.raises(InvalidArgumentError, match="declared twice"):
        handle.getMapState("v")


def test_timers_per_key_are_listed_deleted_and_found_due_in_expiry_order(open_handle):
    _, handle = open_handle(0, names=("v", TIMERS_BY_TIME, TIMERS_BY_KEY), time_mode="ProcessingTime")
    for k, expiries in ((b"a", [300, -5, 100]), (b"b", [100, 2**40])):
        handle.set_current_key(k)
        for expiry in expiries:
            handle.registerTimer(expiry)
    handle.set_current_key(b"a")
    assert list(handle.listTimers()) == [-5, 100, 300]
    handle.deleteTimer(300)
    assert list(handle.listTimers()) == [-5, 100]
    assert handle.due_timers(100) == [(-5, b"a"), (100, b"a"), (100, b"b")]
    assert handle.due_timers(99) == [(-5, b"a")]


def test_timers_need_a_time_mode(open_handle):
    _, handle = open_handle(0, names=("v",))
    with pytest.raises(InvalidArgumentError, match="time_mode"):
        handle.registerTimer(5)


def test_the_change_feed_follows_the_published_history_without_rolled_back_attempts():
    """Batch 2 published, rolled back for a replay (an entry restating batch 1), then published
    again: the change feed's history is 0, 1 and the replay of 2, each with the entry before it
    (whose offsets start its records)."""
    from kstate.spark import BatchEntry
    from kstate.spark.read.state_reader import effective_history

    log = [
        BatchEntry(0, {"v": 3}),
        BatchEntry(1, {"v": 5}, previous=0),
        BatchEntry(2, {"v": 9}, previous=1),
        BatchEntry(1, {"v": 12}, previous=0, restates=2),
        BatchEntry(2, {"v": 15}, previous=3),
    ]
    entries = {i: BatchEntry(**{**e.__dict__, "position": i}) for i, e in enumerate(log)}
    history = [(e.batch_id, e.position, None if b is None else b.position) for e, b in effective_history(entries)]
    assert history == [(0, 0, None), (1, 1, 0), (2, 4, 3)]
    assert effective_history({}) == []


def test_grouping_keys_are_unpickled_as_plain_values_only():
    import datetime
    import os

    import pyarrow as pa

    from kstate.errors import ProcessorStateError
    from kstate.spark.format.state_values import plain_unpickle

    zoned = pa.array([1, 2], pa.timestamp("us", "Europe/Berlin")).to_pylist()  # ZoneInfo time zones
    key = ("a", 1, 2.5, b"x", True, None, datetime.date(2024, 1, 2), datetime.datetime.now(datetime.timezone.utc))
    assert plain_unpickle(pickle.dumps(key + tuple(zoned), protocol=4)) == key + tuple(zoned)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo unpickled > /dev/null",))

    class Reach:
        def __reduce__(self):  # getattr(ZoneInfo, "__base__"): a step towards any class
            import zoneinfo

            return (getattr, (zoneinfo.ZoneInfo, "__base__"))

    with pytest.raises(ProcessorStateError, match="does not unpickle"):
        plain_unpickle(pickle.dumps(("a", Evil()), protocol=4))
    with pytest.raises(ProcessorStateError, match="refuses"):
        plain_unpickle(pickle.dumps(("a", Reach()), protocol=4))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "stateVarName"),
        ({"stateVarName": "v", "readRegisteredTimers": True}, "one of them"),
        ({"stateVarName": "v", "readChangeFeed": "true"}, "changeStartBatchId"),
        ({"stateVarName": "v", "readChangeFeed": True, "changeStartBatchId": 3, "changeEndBatchId": 2}, "smaller"),
        ({"stateVarName": "v", "readChangeFeed": True, "changeStartBatchId": 1, "batchId": 1}, "together"),
        ({"stateVarName": "v", "changeStartBatchId": 1}, "readChangeFeed=True"),
        ({"stateVarName": "v", "flattenCollectionTypes": "yes"}, "boolean"),
        ({"stateVarName": "v", "batchId": -1}, "batch id"),
    ],
)
def test_state_reader_options_are_checked_as_spark_checks_them(tmp_path, options, message):
    from kstate.spark import read_processor_state

    with pytest.raises(InvalidArgumentError, match=message):
        read_processor_state(None, tmp_path, "app", **options)


def test_the_state_reader_names_a_missing_application(tmp_path):
    from kstate.spark import read_processor_state

    with pytest.raises(InvalidArgumentError, match="has the query run a batch"):
        read_processor_state(None, tmp_path, "app", stateVarName="v")


def test_the_change_feed_reads_each_batchs_records_and_refuses_what_is_gone(tmp_path):
    """The change feed of one partition from real log files: the records between each published
    batch's entry and the one before (a rolled-back attempt left out); a gap (compaction) and a
    rescale's installing entry are errors, not a partial feed."""
    from kstate.errors import ProcessorStateError
    from kstate.log.partition import Partition
    from kstate.spark import BatchEntry
    from kstate.spark.protocol.batch_log import BatchLog
    from kstate.spark.protocol.exactly_once import StateLayout
    from kstate.spark.read.state_reader import _change_feed, _Variable, plain_unpickle

    layout = StateLayout(None, tmp_path, "app")
    variable = _Variable("v", "value", pickles="repr")
    records = [("a", 1), ("b", 2), ("a", 3), ("a", None), ("b", 4)]  # offsets 0-4
    with Partition.open(layout.changelog_partition_dir("v", 0)) as changelog:
        changelog.append(
            [(pickle.dumps((k,)), None if v is None else b"\x00" * 8 + pickle.dumps(v)) for k, v in records], 1
        )
    batches = BatchLog(layout.batch_log_dir(0))
    batches.append(BatchEntry(0, {"v": 1}))  # position 0: offsets 0-1
    batches.append(BatchEntry(1, {"v": 2}, previous=0))  # 1: offset 2, then rolled back
    batches.append(BatchEntry(0, {"v": 3}, previous=None, restates=1))  # 2: offset 3 undoes it
    batches.append(BatchEntry(1, {"v": 4}, previous=2))  # 3: the replay, offset 4
    batches.close()

    def feed(start, end=None, rescaled=False):
        rows = _change_feed(layout, variable, 0, start, end, plain_unpickle, rescaled)
        return [(b, change, key[0], value) for b, change, key, value, _ in rows]

    assert feed(0) == [(0, "update", "a", "1"), (0, "update", "b", "2"), (1, "update", "b", "4")]
    assert feed(1, 1) == [(1, "update", "b", "4")]
    with pytest.raises(ProcessorStateError, match="rescale"):
        feed(0, rescaled=True)
    assert feed(1, rescaled=True) == [(1, "update", "b", "4")]
    # A compacted changelog misses offsets: the feed says so.
    gap = tmp_path / "gap"
    gapped = StateLayout(None, gap, "app")
    with Partition.open(gapped.changelog_partition_dir("v", 0)) as changelog:
        changelog.append([(pickle.dumps(("a",)), b"\x00" * 8 + pickle.dumps(1))], 1)
    batches = BatchLog(gapped.batch_log_dir(0))
    batches.append(BatchEntry(0, {"v": 1}))
    batches.close()
    with pytest.raises(ProcessorStateError, match="no longer holds"):
        list(_change_feed(gapped, variable, 0, 0, None, plain_unpickle))


def typed_handle(open_handle, batch, ttl=None, now=NOW):
    """A handle whose map ``m`` is typed: one-string-field keys, ``n long`` values, or (``n2``)
    values holding a nested struct, as ``transform_with_state`` types them from DDL."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from kstate.spark.processor.state_variables import TypedSchemas

    keys = StructType([StructField("category", StringType())])
    values = StructType([StructField("n", LongType())])
    nested = StructType([StructField("inner", values)])
    schemas = {"m": TypedSchemas((values,), values, keys), "n2": TypedSchemas((nested,), nested, keys)}
    names = ("m", "n2") + ((TTL_INDEX,) if ttl else ())
    state, handle = open_handle(batch, names=names, now=now)
    handle = StatefulProcessorHandle(handle._stores, schemas=schemas, now=now)
    return state, handle, handle.getMapState("m", keys, values, ttl), handle.getMapState("n2", keys, nested)


@pytest.mark.parametrize("ttl", [None, 60_000])
def test_map_calls_answer_natively_as_the_python_methods_do(open_handle, ttl):
    """A typed map's ``containsKey``, ``getValue``, ``updateValue`` and walks (``iterator``,
    ``keys``, ``values``) are native calls bound to the variable (``_core.MapCalls``): on keys
    read ahead and not, staged and committed, they answer as the Python methods
    (``MapState.__dict__``'s) on the same state, and refuse what those refuse with the same
    errors: a ``None`` key or value, a bare string of more than one character for a one-field key
    (one character is that field). Values holding nested structs come back as ``Row``s through
    Python's ``getValue``, ``iterator`` and ``values``; a deleted variable refuses them."""
    import random

    from kstate.errors import DeletedStateVariableError, StateTypeError
    from kstate.spark.processor.state_variables import MapState

    state, handle, m, nested = typed_handle(open_handle, 0, ttl)
    native = ("containsKey", "getValue", "updateValue", "iterator", "keys", "values")
    assert all(name in vars(m) for name in native)
    assert not {"getValue", "iterator", "values"} & set(vars(nested)), "nested structs are made Rows in Python"
    assert "keys" in vars(nested)
    users = [f"u{i}" for i in range(20)]
    model = {u: {} for u in users}
    for u in users[::2]:
        key(handle, u)
        for c in "abc":
            m.updateValue((c,), (ord(c),))
            model[u][c] = ord(c)
    state.commit()
    state, handle, m, nested = typed_handle(open_handle, 1, ttl)
    handle.read_ahead_values([pickle.dumps((u,), protocol=4) for u in users[:14]])
    rng = random.Random(45)
    python = {name: getattr(MapState, name).__get__(m) for name in native}
    for step in range(2000):
        u = rng.choice(users)
        key(handle, u)
        c = rng.choice("abcde")
        if rng.random() < 0.4:
            update = m.updateValue if rng.random() < 0.5 else python["updateValue"]
            update((c,) if rng.random() < 0.5 else c, (step,))  # a one-character bare string is the field
            model[u][c] = step
        for probe in ((c,), c):
            expected = model[u].get(c)
            assert m.containsKey(probe) == python["containsKey"](probe) == (expected is not None)
            got = m.getValue(probe)
            assert got == python["getValue"](probe) == (None if expected is None else (expected,))
        entries = list(m.iterator())
        assert entries == list(python["iterator"]()) and {k: v for (k,), (v,) in entries} == model[u]
        assert list(m.keys()) == list(python["keys"]()) == [k for k, _ in entries]
        assert list(m.values()) == list(python["values"]()) == [v for _, v in entries]
    for call in (m.containsKey, m.getValue, python["containsKey"], python["getValue"]):
        with pytest.raises(InvalidArgumentError, match="cannot be None"):
            call(None)
        with pytest.raises(StateTypeError, match="is a tuple"):
            call("ab")
    for update in (m.updateValue, python["updateValue"]):
        with pytest.raises(InvalidArgumentError, match="cannot be None"):
            update(("a",), None)
        with pytest.raises(InvalidArgumentError, match="cannot be None"):
            update(None, (1,))
        with pytest.raises(StateTypeError, match="is a tuple"):
            update("ab", (1,))
    key(handle, "u1")
    nested.updateValue(("x",), ((5,),))
    got = nested.getValue(("x",))
    assert got == ((5,),) and type(got[0]).__name__ == "Row" and got[0].n == 5
    assert [(k, v[0].n) for k, v in nested.iterator()] == [(("x",), 5)] and next(nested.values())[0].n == 5
    assert list(nested.keys()) == [("x",)]
    handle.deleteIfExists("m")
    with pytest.raises(DeletedStateVariableError):
        m.containsKey(("a",))
    for walk in ("iterator", "keys", "values"):
        with pytest.raises(DeletedStateVariableError):
            getattr(m, walk)()
    with pytest.raises(DeletedStateVariableError):
        m.updateValue(("a",), (1,))


def test_list_get_answers_natively_as_the_python_method_does(open_handle):
    """A typed list's ``get`` is a native call bound to the variable (``_core.ListCalls``): on
    keys read ahead and not, staged and committed, it gives what ``ListState.get`` gives on the
    same state, in order; elements holding nested structs come back as ``Row``s through Python's
    ``get``."""
    import random

    from pyspark.sql.types import LongType, StructField, StructType

    from kstate.spark.processor.state_variables import ListState, TypedSchemas

    amounts = StructType([StructField("amount", LongType())])
    nested = StructType([StructField("inner", amounts)])
    schemas = {"l": TypedSchemas((amounts,), amounts), "n": TypedSchemas((nested,), nested)}

    def lists(batch):
        state, handle = open_handle(batch, names=("l", "n"))
        handle = StatefulProcessorHandle(handle._stores, schemas=schemas, now=NOW)
        return state, handle, handle.getListState("l", amounts), handle.getListState("n", nested)

    users = [f"u{i}" for i in range(20)]
    model = {u: [] for u in users}
    state, handle, items, _ = lists(0)
    assert "get" in vars(items)
    for u in users[::2]:
        key(handle, u)
        model[u] = list(range(3))
        items.put([(a,) for a in model[u]])
    state.commit()
    state, handle, items, nested_items = lists(1)
    assert "get" not in vars(nested_items), "nested structs are made Rows in Python"
    handle.read_ahead_values([pickle.dumps((u,), protocol=4) for u in users[:14]])
    python_get = ListState.get.__get__(items)
    rng = random.Random(46)
    for step in range(1000):
        u = rng.choice(users)
        key(handle, u)
        if rng.random() < 0.3:
            items.appendValue((step,))
            model[u].append(step)
        elif rng.random() < 0.2:
            model[u] = model[u][-2:] + [step]
            items.put([(a,) for a in model[u]])
        got = items.get()
        assert iter(got) is got, "an iterator, as Spark's"
        assert list(got) == list(python_get()) == [(a,) for a in model[u]]
    key(handle, "u1")
    nested_items.appendValue(((7,),))
    (element,) = nested_items.get()
    assert type(element[0]).__name__ == "Row" and element[0].amount == 7


def test_map_keys_and_values_are_the_iterators_halves_expired_entries_hidden(open_handle):
    """``keys()`` decodes the live map keys alone and ``values()`` the live values alone, in the
    iterator's order, read ahead or not; entries whose TTL ran out are in neither."""
    state, handle = open_handle(0, names=("m", "e", TTL_INDEX))
    mapping, expiring = handle.getMapState("m"), handle.getMapState("e", None, None, 10)
    for u in ("a", "b"):
        key(handle, u)
        for k in ("z", "y", ("t", 1)):
            mapping.updateValue(k, {"of": k})
            expiring.updateValue(k, 1)
    state.commit()
    state, handle = open_handle(1, names=("m", "e", TTL_INDEX), now=NOW + 20)
    mapping, expiring = handle.getMapState("m"), handle.getMapState("e", None, None, 10)
    handle.read_ahead_values([pickle.dumps(("a",), protocol=4)])  # "b" is read from the store
    for u in ("a", "b"):
        key(handle, u)
        expiring.updateValue("fresh", 2)
        entries = list(mapping.iterator())
        assert list(mapping.keys()) == [k for k, _ in entries] and len(entries) == 3
        assert list(mapping.values()) == [v for _, v in entries]
        assert list(expiring.keys()) == ["fresh"] and list(expiring.values()) == [2]


def test_values_read_again_are_new_where_a_reader_could_change_them(open_handle, monkeypatch):
    """Reads of the same stored bytes may hand out the value decoded before
    (``_core.StateCodec`` keeps values that decode to constants: tuples of numbers, strings,
    dates); a value holding a list, a dict or a bytearray is decoded anew at each read, so a
    processor changing what it read changes nothing else it reads, under this key or another;
    a timestamp is read in the time zone of the moment of reading, as Spark gives it."""
    import datetime
    import time

    from pyspark.sql import types as t

    from kstate.spark.processor.state_variables import TypedSchemas

    def struct(**fields):
        return t.StructType([t.StructField(name, data_type) for name, data_type in fields.items()])

    text = t.StringType()
    mutable = struct(tags=t.ArrayType(text), counts=t.MapType(text, t.LongType()), raw=t.BinaryType())
    flat = struct(n=t.LongType(), name=text)
    at = struct(at=t.TimestampType())
    schemas = {n: TypedSchemas((s,), s) for n, s in (("v", mutable), ("l", flat), ("m", at))}
    state, handle = open_handle(0)
    handle = StatefulProcessorHandle(handle._stores, schemas=schemas, now=NOW)
    v, f, t = (handle.getValueState(n, schemas[n].current) for n in ("v", "l", "m"))
    stored = (["x"], {"k": 1}, bytearray(b"\x01"))
    for user in ("a", "b"):
        key(handle, user)
        v.update(stored)
        f.update((7, "seven"))
        t.update((datetime.datetime(2026, 3, 29, 12, 0),))
    for user in ("a", "b", "a"):
        key(handle, user)
        got = v.get()
        assert got == stored
        got[0].append("y")
        got[1]["k"] = 2
        got[2][0] = 9
        assert f.get() == (7, "seven") and f.get() is f.get(), "a constant is decoded once"
    try:
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
        in_utc = t.get()[0]
        monkeypatch.setenv("TZ", "Asia/Tokyo")
        time.tzset()
        assert t.get()[0] - in_utc == datetime.timedelta(hours=9)
    finally:
        monkeypatch.undo()
        time.tzset()
    state.commit()


def test_timers_of_keys_read_ahead_are_listed_from_it_and_kept_in_step(open_handle):
    """Timers by key are read ahead for the batch's keys: ``listTimers`` answers from the
    read-ahead, and registering or deleting a timer keeps it in step, checked against a model
    after every call, on keys read ahead and not; the committed timers read back without a
    read-ahead are the model's, and the due ones are found in expiry order."""
    import random

    names = ("v", TIMERS_BY_TIME, TIMERS_BY_KEY)
    users = [f"u{i}" for i in range(30)]
    timers = {u: set() for u in users}
    state, handle = open_handle(0, names=names, time_mode="ProcessingTime")
    for u in users[::3]:
        key(handle, u)
        handle.registerTimer(1_000 + len(u))
        timers[u].add(1_000 + len(u))
    state.commit()
    state, handle = open_handle(1, names=names, time_mode="ProcessingTime")
    handle.read_ahead_values([pickle.dumps((u,), protocol=4) for u in users[:20]])
    rng = random.Random(45)
    for _ in range(1500):
        u = rng.choice(users)
        key(handle, u)
        if rng.random() < 0.5:
            expiry = rng.randrange(-50, 3_000)
            handle.registerTimer(expiry)
            timers[u].add(expiry)
        elif timers[u]:
            expiry = rng.choice(sorted(timers[u]))
            handle.deleteTimer(expiry)
            timers[u].discard(expiry)
        assert list(handle.listTimers()) == sorted(timers[u])
    key(handle, users[0])
    assert handle._timers_ahead.timer_expiries(handle._current_prefix) == sorted(timers[users[0]])
    key(handle, users[25])
    assert handle._timers_ahead.timer_expiries(handle._current_prefix) is None, "not read ahead"
    handle.read_ahead_values([])
    state.commit()
    state, handle = open_handle(2, names=names, time_mode="ProcessingTime")
    for u in users:
        key(handle, u)
        assert list(handle.listTimers()) == sorted(timers[u])
    due = sorted((e, pickle.dumps((u,), protocol=4)) for u in users for e in timers[u] if e <= 1_500)
    assert handle.due_timers(1_500) == due

"""The StatefulProcessor-style state variables on kstate stores, without Spark."""

import pytest

from kstate.errors import InvalidArgumentError
from kstate.spark import StateBackend, StatefulProcessorHandle, TaskInfo
from kstate.stores import Stores


@pytest.fixture
def open_handle(tmp_path):
    states = []

    def make(batch, names=("v", "l", "m")):
        builders = [
            Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes") for n in names
        ]
        state = StateBackend(builders, tmp_path / "state", tmp_path / "log", "app").partition_state(TaskInfo(0, batch))
        states.append(state)
        return state, StatefulProcessorHandle(state.open())

    yield make
    for state in states:
        state.abort()


def test_value_list_and_map_state_per_key_survive_commits(open_handle):
    state, handle = open_handle(0)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    for key in ("a", "b"):
        handle._current_key = key.encode()
        assert not value.exists() and list(items.get()) == [] and not mapping.exists()
        value.update((1, key))
        items.appendValue(key)
        items.appendList([1, 2])
        mapping.updateValue("x", 10)
        mapping.updateValue(("y", 2), {"deep": key})
    state.commit()
    state, handle = open_handle(1)
    value, items, mapping = handle.getValueState("v"), handle.getListState("l"), handle.getMapState("m")
    handle._current_key = b"a"
    assert value.get() == (1, "a") and list(items.get()) == ["a", 1, 2]
    assert dict(mapping.iterator()) == {"x": 10, ("y", 2): {"deep": "a"}}
    assert mapping.containsKey("x") and mapping.getValue("nope") is None
    mapping.removeKey("x")
    assert list(mapping.keys()) == [("y", 2)]
    mapping.clear()
    value.clear()
    items.clear()
    assert not mapping.exists() and not value.exists() and not items.exists()
    handle._current_key = b"b"
    assert value.get() == (1, "b") and mapping.getValue("x") == 10, "other keys untouched"


def test_value_state_ttl_expires(open_handle):
    state, handle = open_handle(0, names=("v",))
    value = handle.getValueState("v", "c long", ttl_duration_ms=1000)
    value.update((5,))
    assert value.get() == (5,)
    handle._now_ms += 1000
    assert value.get() is None and not value.exists()


def test_a_name_declared_as_two_kinds_is_an_error(open_handle):
    _, handle = open_handle(0, names=("v",))
    handle.getValueState("v")
    with pytest.raises(InvalidArgumentError, match="declared twice"):
        handle.getMapState("v")


def test_timers_per_key_are_listed_deleted_and_found_due_in_expiry_order(tmp_path):
    from kstate.spark.processor import TIMERS_BY_KEY, TIMERS_BY_TIME

    names = ("v", TIMERS_BY_TIME, TIMERS_BY_KEY)
    builders = [Stores.key_value_store_builder(Stores.persistent_key_value_store(n), "bytes", "bytes") for n in names]
    state = StateBackend(builders, tmp_path / "state", tmp_path / "log", "app").partition_state(TaskInfo(0, 0))
    handle = StatefulProcessorHandle(state.open(), "ProcessingTime")
    try:
        for key, expiries in ((b"a", [300, -5, 100]), (b"b", [100, 2**40])):
            handle._current_key = key
            for expiry in expiries:
                handle.registerTimer(expiry)
        handle._current_key = b"a"
        assert list(handle.listTimers()) == [-5, 100, 300]
        handle.deleteTimer(300)
        assert list(handle.listTimers()) == [-5, 100]
        assert handle._due_timers(100) == [(-5, b"a"), (100, b"a"), (100, b"b")]
        assert handle._due_timers(99) == [(-5, b"a")]
    finally:
        state.abort()


def test_timers_need_a_time_mode(open_handle):
    _, handle = open_handle(0, names=("v",))
    with pytest.raises(InvalidArgumentError, match="time_mode"):
        handle.registerTimer(5)

"""Bad input a user can pass to a store: a clear, typed error, and nothing already written is lost."""

import pytest

from kstate import Stores
from kstate.errors import InvalidArgumentError, SerializationError

KINDS = [("persistent", True), ("persistent", False), ("memory", True), ("memory", False)]
LONE_SURROGATE = "\ud800"  # a str Python holds, with no UTF-8 form


@pytest.mark.parametrize("kind,transactional", KINDS)
def test_a_negative_commit_offset_is_refused_and_the_writes_stay_staged(open_store, kind, transactional):
    store = open_store(kind, config={"enable.transactional.statestores": transactional})
    store.put(b"a", b"1")
    assert store.commit(3) == 3
    store.put(b"b", b"2")
    for offset in (-5, -1):
        with pytest.raises(InvalidArgumentError, match=r"changelog_offset must be >= 0 or None, got -"):
            store.commit(offset)
    assert store.committed_offset() == 3
    assert dict(store.all()) == {b"a": b"1", b"b": b"2"}
    assert store.commit(0) == 0, "offset 0 is a valid offset"
    assert store.committed_offset() == 0
    assert store.commit(None) is None


@pytest.mark.parametrize("kind", ["persistent", "memory"])
def test_a_str_with_a_lone_surrogate_is_a_serialization_error(open_store, kind):
    store = open_store(kind, key="string", value="string")
    store.put("k", "v")
    store.commit(1)
    calls = [
        lambda: store.put(LONE_SURROGATE, "v"),
        lambda: store.put("k", "x" + LONE_SURROGATE),
        lambda: store.put_if_absent(LONE_SURROGATE, "v"),
        lambda: store.put_all([("ok", "v"), (LONE_SURROGATE, "v")]),
        lambda: store.get(LONE_SURROGATE),
        lambda: store.get_many(["k", LONE_SURROGATE]),
        lambda: store.delete(LONE_SURROGATE),
        lambda: list(store.range(LONE_SURROGATE, "z")),
        lambda: list(store.prefix_scan(LONE_SURROGATE)),
    ]
    for call in calls:
        with pytest.raises(SerializationError, match="not valid Unicode text"):
            call()
    store.commit(2)
    assert dict(store.all()) == {"k": "v"}, "no partial write of a refused batch"


def test_a_window_store_refuses_a_lone_surrogate_key(task_dir):
    supplier = Stores.persistent_window_store("w", retention_ms=60_000, window_size_ms=1_000)
    store = Stores.window_store_builder(supplier, "string", "string").build().init(task_dir)
    try:
        with pytest.raises(SerializationError):
            store.put(LONE_SURROGATE, "v", 0)
        with pytest.raises(SerializationError):
            store.fetch(LONE_SURROGATE, 0)
    finally:
        store.close()

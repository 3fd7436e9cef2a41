"""put_if_newer (KAFKA-5533): whatever order updates arrive in, the value with the larger
timestamp wins; of equal timestamps the later write wins."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstate import Stores, ValueAndTimestamp
from kstate.errors import InvalidArgumentError


def test_older_updates_are_dropped(open_store):
    store = open_store(timestamped=True, key="string", value="string")
    assert store.put_if_newer("k", "v10", 10)
    assert not store.put_if_newer("k", "v5", 5)
    assert store.get_with_timestamp("k") == ValueAndTimestamp("v10", 10)
    assert store.put_if_newer("k", ValueAndTimestamp("v10b", 10))
    assert not store.put_if_newer("k", None, 9), "an older delete is dropped too"
    assert store.put_if_newer("k", None, 11)
    assert store.get("k") is None
    store.commit(1)
    assert store.put_if_newer("k", "v1", 1), "nothing left to be newer than"
    with pytest.raises(InvalidArgumentError):
        store.put_if_newer("k", "no timestamp")


def test_needs_a_timestamped_supplier(open_store):
    plain = Stores.timestamped_key_value_store_builder(Stores.in_memory_key_value_store("p")).build().init("unused")
    with pytest.raises(InvalidArgumentError):
        plain.put_if_newer(b"k", b"v", 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 20)), max_size=30), st.randoms())
def test_any_arrival_order_ends_with_the_newest(updates, rng):
    store = (
        Stores.timestamped_key_value_store_builder(
            Stores.in_memory_timestamped_key_value_store("s"), "string", "string"
        )
        .build()
        .init("unused")
    )
    arrivals = list(enumerate(updates))
    rng.shuffle(arrivals)
    newest = {}
    for arrival, (i, (key, ts)) in enumerate(arrivals):
        store.put_if_newer(key, f"{i}", ts)
        if key not in newest or ts >= newest[key][0]:
            newest[key] = (ts, arrival, f"{i}")
    assert {k: store.get_with_timestamp(k) for k in newest} == {
        k: ValueAndTimestamp(v, ts) for k, (ts, _, v) in newest.items()
    }

"""Windowed aggregation throughput and TTL cost (benches/README.md). No external peer has window
stores; the reference is kstate's own key-value store doing the same work on `key || start` keys."""

import struct

import pytest

from kstate import Stores, ValueAndTimestamp

ROUNDS = dict(rounds=5, iterations=1, warmup_rounds=1)
MINUTE = 60_000
HOUR = 60 * MINUTE
HOP = 5  # hopping windows: 5 minutes long, advancing by 1 minute: each record is in 5 windows


@pytest.fixture(scope="module")
def records(keys):
    """One record per key, timestamps spread over an hour: (key, timestamp, tumbling window start)."""
    out = []
    for i, key in enumerate(keys):
        ts = HOUR + (i * 7919) % HOUR
        out.append((key, ts, ts - ts % MINUTE))
    return out


# 500k staged hopping windows of 100-byte values exceed the default 64 MiB bound and would spill;
# the benches measure staging in memory, for the window stores and the reference alike.
CONFIG = {"statestore.uncommitted.max.bytes": 1 << 30}


def window_store(tmp_path, size, timestamped=False, ttl_ms=None):
    if timestamped:
        supplier = Stores.persistent_timestamped_window_store("win", 2 * HOUR, size, ttl_ms=ttl_ms)
        builder = Stores.timestamped_window_store_builder(supplier)
    else:
        builder = Stores.window_store_builder(Stores.persistent_window_store("win", 2 * HOUR, size))
    return builder.with_config(CONFIG).build().init(tmp_path / "app" / "0_0")


@pytest.fixture
def tumbling(tmp_path):
    store = window_store(tmp_path, MINUTE)
    yield store
    store.close()


@pytest.fixture
def hopping(tmp_path):
    store = window_store(tmp_path, HOP * MINUTE)
    yield store
    store.close()


@pytest.fixture
def reference(tmp_path):
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("ref")).with_config(CONFIG)
    store = builder.build().init(tmp_path / "r" / "0_0")
    yield store
    store.close()


def hopping_starts(ts):
    last = ts - ts % MINUTE
    return [last - i * MINUTE for i in range(HOP)]


# -- tumbling: one window per record ---------------------------------------------------------------


@pytest.mark.benchmark(group="tumbling put")
def test_tumbling_put(benchmark, tumbling, records, value):
    put = tumbling.put
    benchmark.pedantic(lambda: [put(k, value, start) for k, _, start in records], **ROUNDS)


@pytest.mark.benchmark(group="tumbling put")
def test_tumbling_put_reference(benchmark, reference, records, value):
    put = reference.put
    keys = [k + struct.pack(">q", start) for k, _, start in records]
    benchmark.pedantic(lambda: [put(k, value) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="tumbling fetch")
def test_tumbling_fetch(benchmark, tumbling, records, value):
    for k, _, start in records:
        tumbling.put(k, value, start)
    tumbling.commit(1)
    fetch = tumbling.fetch
    benchmark.pedantic(lambda: [fetch(k, start) for k, _, start in records], **ROUNDS)


@pytest.mark.benchmark(group="tumbling fetch")
def test_tumbling_fetch_reference(benchmark, reference, records, value):
    keys = [k + struct.pack(">q", start) for k, _, start in records]
    for k in keys:
        reference.put(k, value)
    reference.commit(1)
    get = reference.get
    benchmark.pedantic(lambda: [get(k) for k in keys], **ROUNDS)


# -- hopping: five windows per record --------------------------------------------------------------


@pytest.mark.benchmark(group="hopping put")
def test_hopping_put(benchmark, hopping, records, value):
    put = hopping.put
    work = [(k, hopping_starts(ts)) for k, ts, _ in records]
    benchmark.pedantic(lambda: [put(k, value, s) for k, starts in work for s in starts], **ROUNDS)


@pytest.mark.benchmark(group="hopping put")
def test_hopping_put_reference(benchmark, reference, records, value):
    put = reference.put
    keys = [k + struct.pack(">q", s) for k, ts, _ in records for s in hopping_starts(ts)]
    benchmark.pedantic(lambda: [put(k, value) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="hopping fetch")
def test_hopping_fetch(benchmark, hopping, records, value):
    """A record's five windows in one time-range fetch per record."""
    for k, ts, _ in records:
        for s in hopping_starts(ts):
            hopping.put(k, value, s)
    hopping.commit(1)
    fetch = hopping.fetch
    ranges = [(k, ts - ts % MINUTE - (HOP - 1) * MINUTE, ts) for k, ts, _ in records]

    def run():
        for k, lo, hi in ranges:
            with fetch(k, lo, hi) as it:
                for _ in it:
                    pass

    benchmark.pedantic(run, **ROUNDS)


@pytest.mark.benchmark(group="hopping fetch")
def test_hopping_fetch_reference(benchmark, reference, records, value):
    """The same five values per record by a key-value range scan over `key || start`."""
    for k, ts, _ in records:
        for s in hopping_starts(ts):
            reference.put(k + struct.pack(">q", s), value)
    reference.commit(1)
    scan = reference.range
    ranges = [
        (k + struct.pack(">q", ts - ts % MINUTE - (HOP - 1) * MINUTE), k + struct.pack(">q", ts))
        for k, ts, _ in records
    ]

    def run():
        for lo, hi in ranges:
            with scan(lo, hi) as it:
                for _ in it:
                    pass

    benchmark.pedantic(run, **ROUNDS)


# -- TTL cost: a timestamped tumbling aggregation (fetch, add, put) with TTL off and on -------------


def aggregate(store, records):
    fetch, put = store.fetch, store.put
    one = struct.pack(">q", 1)
    for k, ts, start in records:
        old = fetch(k, start)
        total = one if old is None else struct.pack(">q", struct.unpack(">q", old)[0] + 1)
        put(k, ValueAndTimestamp(total, ts), start)


@pytest.mark.parametrize("ttl", [None, 10 * HOUR], ids=["ttl_off", "ttl_on"])
@pytest.mark.benchmark(group="ttl cost (window aggregation)")
def test_window_aggregation_ttl(benchmark, tmp_path, records, ttl):
    store = window_store(tmp_path, MINUTE, timestamped=True, ttl_ms=ttl)
    aggregate(store, records)
    store.commit(1)
    try:
        benchmark.pedantic(lambda: aggregate(store, records), **ROUNDS)
    finally:
        store.close()


@pytest.mark.parametrize("ttl", [None, 10 * HOUR], ids=["ttl_off", "ttl_on"])
@pytest.mark.benchmark(group="ttl cost (key-value get + put)")
def test_key_value_ttl(benchmark, tmp_path, records, value, ttl):
    supplier = Stores.persistent_timestamped_key_value_store("kv", ttl_ms=ttl)
    store = Stores.timestamped_key_value_store_builder(supplier).build().init(tmp_path / "app" / "0_0")
    get, put = store.get, store.put

    def run():
        for k, ts, _ in records:
            get(k)
            put(k, value, ts)

    run()
    store.commit(1)
    try:
        benchmark.pedantic(run, **ROUNDS)
    finally:
        store.close()

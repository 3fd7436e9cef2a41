"""kstate vs rocksdict, same run, same 16-byte keys and 100-byte values (benches/README.md)."""

import pyarrow as pa
import pytest
from rocksdict import WriteBatch

from conftest import N

ROUNDS = dict(rounds=5, iterations=1, warmup_rounds=1)


def loaded(store_or_db, keys, value, commit):
    for k in keys:
        store_or_db.put(k, value)
    if commit:
        store_or_db.commit(1)


@pytest.mark.benchmark(group="put (per call)")
def test_put_kstate(benchmark, kstate_store, keys, value):
    put = kstate_store.put
    benchmark.pedantic(lambda: [put(k, value) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="put (per call)")
def test_put_rocksdict(benchmark, rdict, keys, value):
    put = rdict.put
    benchmark.pedantic(lambda: [put(k, value) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="get (per call)")
def test_get_kstate(benchmark, kstate_store, keys, value):
    loaded(kstate_store, keys, value, commit=True)
    get = kstate_store.get
    benchmark.pedantic(lambda: [get(k) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="get (per call)")
def test_get_kstate_uncached(benchmark, kstate_uncached_store, keys, value):
    loaded(kstate_uncached_store, keys, value, commit=True)
    get = kstate_uncached_store.get
    benchmark.pedantic(lambda: [get(k) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="get (per call)")
def test_get_rocksdict(benchmark, rdict, keys, value):
    loaded(rdict, keys, value, commit=False)
    get = rdict.get
    benchmark.pedantic(lambda: [get(k) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="get_many (batch)")
def test_get_many_kstate_list(benchmark, kstate_store, keys, value):
    loaded(kstate_store, keys, value, commit=True)
    benchmark.pedantic(lambda: kstate_store.get_many(keys), **ROUNDS)


@pytest.mark.benchmark(group="get_many (batch)")
def test_get_many_kstate_arrow(benchmark, kstate_store, keys, value):
    loaded(kstate_store, keys, value, commit=True)
    arrow_keys = pa.array(keys, pa.binary())
    benchmark.pedantic(lambda: kstate_store.get_many(arrow_keys), **ROUNDS)


@pytest.mark.benchmark(group="get_many (batch)")
def test_get_many_kstate_uncached(benchmark, kstate_uncached_store, keys, value):
    loaded(kstate_uncached_store, keys, value, commit=True)
    benchmark.pedantic(lambda: kstate_uncached_store.get_many(keys), **ROUNDS)


@pytest.mark.benchmark(group="get_many (batch)")
def test_get_many_rocksdict_loop(benchmark, rdict, keys, value):
    loaded(rdict, keys, value, commit=False)
    get = rdict.get
    benchmark.pedantic(lambda: [get(k) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="get_many (batch)")
def test_get_many_rocksdict_multi_get(benchmark, rdict, keys, value):
    loaded(rdict, keys, value, commit=False)
    benchmark.pedantic(lambda: rdict.get(keys), **ROUNDS)


@pytest.mark.benchmark(group="put_all (batch)")
def test_put_all_kstate_list(benchmark, kstate_store, keys, value):
    values = [value] * N
    benchmark.pedantic(lambda: kstate_store.put_all(keys, values), **ROUNDS)


@pytest.mark.benchmark(group="put_all (batch)")
def test_put_all_kstate_arrow(benchmark, kstate_store, keys, value):
    arrow_keys, arrow_values = pa.array(keys, pa.binary()), pa.array([value] * N, pa.binary())
    benchmark.pedantic(lambda: kstate_store.put_all(arrow_keys, arrow_values), **ROUNDS)


@pytest.mark.benchmark(group="put_all (batch)")
def test_put_all_rocksdict_loop(benchmark, rdict, keys, value):
    put = rdict.put
    benchmark.pedantic(lambda: [put(k, value) for k in keys], **ROUNDS)


@pytest.mark.benchmark(group="forward scan")
def test_scan_kstate(benchmark, kstate_store, keys, value):
    loaded(kstate_store, keys, value, commit=True)
    benchmark.pedantic(lambda: sum(1 for _ in kstate_store.all()), **ROUNDS)


@pytest.mark.benchmark(group="forward scan")
def test_scan_rocksdict(benchmark, rdict, keys, value):
    loaded(rdict, keys, value, commit=False)

    def scan():
        it = rdict.iter()
        it.seek_to_first()
        n = 0
        while it.valid():
            it.key()
            it.value()
            n += 1
            it.next()
        return n

    benchmark.pedantic(scan, **ROUNDS)


@pytest.mark.benchmark(group="commit 100k staged keys")
def test_commit_kstate(benchmark, kstate_store, keys, value):
    values = [value] * N

    def stage():
        kstate_store.put_all(keys, values)
        return (), {}

    benchmark.pedantic(lambda: kstate_store.commit(1), setup=stage, rounds=5, iterations=1)


@pytest.mark.benchmark(group="commit 100k staged keys")
def test_commit_rocksdict_write_batch(benchmark, rdict, keys, value):
    def build():
        batch = WriteBatch(raw_mode=True)
        for k in keys:
            batch.put(k, value)
        return (batch,), {}

    benchmark.pedantic(rdict.write, setup=build, rounds=5, iterations=1)

"""Restore of a 1M-record changelog into a store whose state directory was lost (benches/README.md).
There is no peer: Kafka Streams restores through a consumer; the target is 1M records/s."""

import os
import shutil

import pytest

from kstate import Stores

RECORDS = 1_000_000
BATCH = 100_000


def builder(timestamped):
    if timestamped:
        supplier = Stores.persistent_timestamped_key_value_store("restored")
        return Stores.timestamped_key_value_store_builder(supplier).with_logging_enabled()
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("restored")).with_logging_enabled()


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "timestamped"])
def changelogged(request, tmp_path_factory):
    """A task directory whose store committed 1M records (16-byte keys, 100-byte values) in
    batches of 100k through its changelog."""
    task = tmp_path_factory.mktemp("restore") / "app" / "0_0"
    value = os.urandom(100)
    with builder(request.param).build().init(task) as store:
        for start in range(0, RECORDS, BATCH):
            store.put_all([b"key-%012d" % i for i in range(start, start + BATCH)], [value] * BATCH)
            store.commit()
    return request.param, task


@pytest.mark.benchmark(group="restore 1M records")
def test_restore(benchmark, changelogged):
    timestamped, task = changelogged

    def wipe_state():
        shutil.rmtree(task, ignore_errors=True)
        return (), {}

    def restore():
        with builder(timestamped).build().init(task) as store:
            assert store.restored_records == RECORDS

    benchmark.pedantic(restore, setup=wipe_state, rounds=3, iterations=1)

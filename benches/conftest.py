import os

import pytest
from rocksdict import Options, Rdict

from kstate import Stores

N = 100_000


@pytest.fixture(scope="module")
def keys():
    return [b"key-%012d" % i for i in range(N)]  # 16 bytes


@pytest.fixture(scope="module")
def value():
    return os.urandom(100)


def open_kstate(tmp_path, config=None):
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("bench"))
    return builder.with_config(config or {}).build().init(tmp_path / "app" / "0_0")


@pytest.fixture
def kstate_store(tmp_path):
    store = open_kstate(tmp_path)
    yield store
    store.close()


@pytest.fixture
def kstate_uncached_store(tmp_path):
    """Reads go to RocksDB every time: the read cache is off."""
    store = open_kstate(tmp_path, {"statestore.cache.max.bytes": 0})
    yield store
    store.close()


@pytest.fixture
def rdict(tmp_path):
    db = Rdict(str(tmp_path / "rocksdict"), Options(raw_mode=True))
    yield db
    db.close()

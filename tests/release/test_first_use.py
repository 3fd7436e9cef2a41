"""The first use of kstate (import, open a persistent key-value store, put, commit, get, close) in a
fresh interpreter loads what that store needs and nothing else: the import was 100-170 ms, 6x
rocksdict's first use, for modules the store never used (issue 43; ``benches/first_use.py``
times it). Checked by the modules loaded, not by a clock; then what the first use left out still
loads, and works, when something asks for it."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

FIRST_USE = """
import sys
before = set(sys.modules)
from kstate import Stores
store = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "int64").build()
store.init(sys.argv[1])
store.put("k", 1)
assert store.commit() is None
assert store.get("k") == 1
store.close()
store.init(sys.argv[1])
assert store.get("k") == 1, "the commit is on disk"
store.close()
print("\\n".join(sorted(set(sys.modules) - before)))
"""

NOT_LOADED = {
    "dataclasses": "the configs, suppliers and StoreBuilder are FrozenRecords (dataclasses loads inspect)",
    "inspect": "with dis, ast, tokenize, linecache: dataclasses' cost",
    "ast": "inspect's",
    "tokenize": "inspect's",
    "logging": "LazyLogger imports it when a store first logs; this store has nothing to say",
    "threading": "logging's",
    "traceback": "logging's",
    "typing": "annotations are strings and typing's names are imported when TYPE_CHECKING; NamedTuple is "
    "kstate.named_tuple's, the Serde protocol and the type aliases are made when asked for",
    "re": "store names and task directories are checked with str methods (re loads enum, functools)",
    "enum": "re's",
    "pathlib": "paths are strings (posix_path); StoreLifecycle.task_dir makes a Path when asked",
    "urllib": "pathlib's (with ipaddress)",
    "shutil": "only wipe_local_state removes directories",
    "json": "JsonSerde's, imported when it serializes",
    "pickle": "PickleSerde's, imported when it serializes",
    "copy": "dataclasses.replace's; StoreBuilder makes its copies itself",
    "tempfile": "kstate.log.remote's",
    "uuid": "kstate.log.remote's",
    "kstate.log": "the changelogs: a store without one never loads them (kstate.log.remote: fsspec, HTTP, TLS)",
    "kstate.rebalance": "rebalance metadata",
    "kstate.spark": "PySpark's state backend",
    "kstate.upgrade": "KIP-258 upgrades",
    "fsspec": "remote changelogs",
    "http": "remote changelogs",
    "ssl": "remote changelogs",
    "socket": "remote changelogs",
    "pyarrow": "the Arrow paths of get_many and put_all, when given Arrow arrays",
    "numpy": "arrow_numbers, when given Arrow arrays",
    "pandas": "kstate.spark",
    "pyspark": "kstate.spark",
    "tqdm": "a restore's progress bar",
    "importlib.metadata": "the version is compiled into kstate._core",
}


def first_use_loads(tmp_path: Path) -> set[str]:
    """The modules a fresh interpreter loads for the first use (from an empty directory, so
    ``kstate`` is the installed package, or whatever PYTHONPATH puts first)."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE, str(tmp_path / "app" / "0_0")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "the first use has nothing to say"
    return set(done.stdout.split())


def test_the_first_use_loads_nothing_it_does_not_need(tmp_path: Path) -> None:
    loaded = first_use_loads(tmp_path)
    assert {"kstate._core", "kstate.stores", "kstate.key_value_store"} <= loaded
    offenders = {
        module: why
        for module, why in NOT_LOADED.items()
        if any(name == module or name.startswith(module + ".") for name in loaded)
    }
    assert not offenders, offenders


def test_what_the_first_use_leaves_out_loads_when_asked_for(tmp_path: Path) -> None:
    code = """
import sys
from kstate import Stores
from kstate.serdes import JsonSerde, PickleSerde, Serde

builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "json", "pickle")
store = builder.build().init(sys.argv[1])
store.put({"a": [1]}, {1, 2})
store.commit()
assert store.get({"a": [1]}) == {1, 2}
assert "json" in sys.modules and "pickle" in sys.modules
assert isinstance(JsonSerde(), Serde) and not isinstance(1, Serde)
assert "logging" not in sys.modules
store.put({"b": 2}, 3)
store.close()  # discards the put, and says so: logging loads now
assert "logging" in sys.modules
store.init(sys.argv[1])
assert store.task_dir == __import__("pathlib").Path(sys.argv[1]), store.task_dir
store.close()
store.wipe_local_state()
assert not (store.task_dir / "rocksdb" / "s").exists()
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "app" / "0_0/")], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"
    assert "closing store s discards its uncommitted writes" in done.stderr


def test_a_lazy_logger_is_its_logger_with_the_callers_line(caplog: pytest.LogCaptureFixture) -> None:
    from kstate.lazy_logger import LazyLogger

    log = LazyLogger("kstate.test-first-use")
    with caplog.at_level(logging.INFO, logger="kstate.test-first-use"):
        log.info("restored %d records", 3)
        line = sys._getframe().f_lineno - 1
    assert log.logger() is logging.getLogger("kstate.test-first-use")
    assert log.isEnabledFor(logging.WARNING) and log.name == "kstate.test-first-use"
    (record,) = caplog.records
    assert (record.getMessage(), record.name, record.levelno) == ("restored 3 records", log.name, logging.INFO)
    assert (record.pathname, record.lineno, record.funcName) == (__file__, line, sys._getframe().f_code.co_name)


def test_frozen_records_keep_what_the_frozen_dataclasses_gave() -> None:
    from kstate import Stores
    from kstate.config import ChangelogConfig, StoreConfig
    from kstate.suppliers import KeyValueBytesStoreSupplier

    supplier = Stores.persistent_key_value_store("s")
    assert supplier == KeyValueBytesStoreSupplier("s", True, False) != KeyValueBytesStoreSupplier("t", True, False)
    assert hash(supplier) == hash(KeyValueBytesStoreSupplier("s", True, False))
    assert supplier != ("s", True, False, True, None, "stream_time")
    assert repr(supplier) == (
        "KeyValueBytesStoreSupplier(name='s', persistent=True, timestamped=False, transactional=True, "
        "ttl_ms=None, ttl_clock='stream_time')"
    )
    assert (
        supplier.fields()
        == vars(supplier)
        == {
            "name": "s",
            "persistent": True,
            "timestamped": False,
            "transactional": True,
            "ttl_ms": None,
            "ttl_clock": "stream_time",
        }
    )
    builder = Stores.key_value_store_builder(supplier, "string", "int64").with_config({"a": 1})
    assert builder.with_logging_enabled({"b": 2}).config == {"a": 1} and builder.logging is None
    assert builder.with_logging_enabled().with_logging_disabled() == builder
    assert pickle.loads(pickle.dumps(builder)) == builder
    assert StoreConfig() == StoreConfig.parse(None) and ChangelogConfig().topic_config == {}
    with pytest.raises(TypeError, match="unhashable"):
        hash(ChangelogConfig())
    for record, field in ((supplier, "name"), (builder, "config"), (StoreConfig(), "durability")):
        with pytest.raises(FrozenInstanceError, match=f"cannot assign to field '{field}'"):
            setattr(record, field, None)
        with pytest.raises(FrozenInstanceError, match=f"cannot delete field '{field}'"):
            delattr(record, field)


def test_named_tuples_are_plain_namedtuples() -> None:
    from kstate import KeyValue, ValueAndTimestamp, Window, Windowed

    assert KeyValue.__bases__ == Windowed.__bases__ == (tuple,) and KeyValue._fields == ("key", "value")
    assert KeyValue.__module__ == "kstate.store_reads" and KeyValue.__doc__.startswith("One entry")
    assert Windowed("k", 1, 2).window == Window(1, 2) and repr(Window(1, 2)) == "Window(start=1, end=2)"
    assert ValueAndTimestamp.make(None, 1) is None and ValueAndTimestamp.make(1, 2) == (1, 2)
    assert pickle.loads(pickle.dumps(Windowed("k", 1, 2))) == Windowed("k", 1, 2)


def test_the_type_aliases_are_there_when_asked_for() -> None:
    import kstate.config
    import kstate.suppliers

    assert str(kstate.config.RocksDBConfigSetter).startswith("typing.Union[collections.abc.Mapping[str, typing.Any]")
    assert set(kstate.suppliers.AnySupplier.__args__) == {
        kstate.suppliers.KeyValueBytesStoreSupplier,
        kstate.suppliers.WindowBytesStoreSupplier,
        kstate.suppliers.SessionBytesStoreSupplier,
    }
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        kstate.config.nope  # noqa: B018


@pytest.mark.parametrize("name", ["ab\n", "", "a" * 250, "a b", "é", "."])
def test_store_names_are_checked_without_re(name: str) -> None:
    from kstate import Stores
    from kstate.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="is not legal"):
        Stores.persistent_key_value_store(name)
    assert Stores.persistent_key_value_store("a" * 249).name == "a" * 249


def test_task_directories_and_paths_read_as_before() -> None:
    from kstate.store_lifecycle import posix_path, task_partition

    partitions = {"0_1": 1, "12_345": 345, "0_01": 1, "1_2_3": None, "_1": None, "1_": None, "a_1": None}
    assert {name: task_partition(name) for name in partitions} == partitions
    for path in ("", ".", "a/", "a//b", "/a/./b/", "//a", "///a", "/", "a/../b", Path("x/y")):
        assert posix_path(path) == str(Path(path)), path
    with pytest.raises(TypeError):
        posix_path(b"x")  # type: ignore[arg-type]

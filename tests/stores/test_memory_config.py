"""statestore.memory.max.bytes and rocksdb.config.setter as users pass them, and what
store.metrics() / kstate.memory.memory_usage() report."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from kstate import Stores
from kstate.errors import InvalidArgumentError
from kstate.memory import memory_usage


def in_fresh_process(fn, *args) -> None:
    """Runs ``fn`` in a new interpreter, where the process's budget and its count of open stores
    start from nothing (in this one, other tests' stores may still wait for the garbage collector)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(fn, args)


def kv(name: str = "s", config: dict | None = None):
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store(name), "string", "string")
    return builder.with_config(config or {})


def test_options_dict_and_callable_reach_every_store(tmp_path: Path) -> None:
    seen = []

    def setter(store_name: str, options: dict) -> None:
        seen.append(store_name)
        options["max_open_files"] = 64
        options["block_based_table_factory"] = {"block_size": 16384}

    with kv("a", {"rocksdb.config.setter": {"write_buffer_size": 8 << 20}}).build().init(tmp_path / "app" / "0_0") as a:
        with kv("b", {"rocksdb.config.setter": setter}).build().init(tmp_path / "app" / "0_0") as b:
            for store in (a, b):
                store.put_all([f"k{i}" for i in range(1000)], ["v" * 100] * 1000)
                store.commit(changelog_offset=1)
                assert store.get("k7") == "v" * 100
    assert seen == ["b"]


@pytest.mark.parametrize(
    "config, match",
    [
        ({"rocksdb.config.setter": {"no_such_option": 1}}, "no_such_option"),
        ({"rocksdb.config.setter": {"max_open_files": "many"}}, "max_open_files"),
        ({"rocksdb.config.setter": "max_open_files=1"}, "dict or a callable"),
        ({"statestore.memory.max.bytes": 16 << 20}, "at least"),
        ({"statestore.memory.max.bytes": 1.5e9}, "number of bytes"),
        ({"statestore.memory.max.bytes": True}, "number of bytes"),
    ],
)
def test_bad_config_is_a_clear_error_before_anything_is_written(tmp_path: Path, config: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        kv(config=config).build().init(tmp_path / "app" / "0_0")
    assert not any(tmp_path.iterdir())


def test_a_callable_naming_an_unknown_option_fails_at_open_with_nothing_written(tmp_path: Path) -> None:
    store = kv(config={"rocksdb.config.setter": lambda name, options: {"bogus_option": 1}}).build()
    with pytest.raises(InvalidArgumentError, match="bogus_option"):
        store.init(tmp_path / "app" / "0_0")
    assert not any(tmp_path.iterdir())


def test_budget_numbers_as_strings_are_read_and_differing_values_refused(tmp_path: Path) -> None:
    in_fresh_process(budget_numbers_as_strings_are_read_and_differing_values_refused, tmp_path)


def budget_numbers_as_strings_are_read_and_differing_values_refused(tmp_path: Path) -> None:
    with kv("a", {"statestore.memory.max.bytes": str(512 << 20)}).build().init(tmp_path / "app" / "0_0"):
        assert memory_usage()["limit"] == 512 << 20
        with pytest.raises(InvalidArgumentError, match="one budget per process"):
            kv("b", {"statestore.memory.max.bytes": 256 << 20}).build().init(tmp_path / "app" / "0_1")
        # Unset takes the process's budget.
        with kv("c").build().init(tmp_path / "app" / "0_2"):
            assert memory_usage()["open_stores"] == 2
    assert memory_usage()["open_stores"] == 0


def test_metrics_count_staged_writes_read_cache_and_disk(tmp_path: Path) -> None:
    in_fresh_process(metrics_count_staged_writes_read_cache_and_disk, tmp_path)


def metrics_count_staged_writes_read_cache_and_disk(tmp_path: Path) -> None:
    with kv().build().init(tmp_path / "app" / "0_0") as store:
        store.put_all([f"k{i}" for i in range(10_000)], ["v" * 100] * 10_000)
        staged = store.metrics()["staged"]
        assert staged >= 10_000 * 100
        assert memory_usage()["staged"] >= staged
        store.commit(changelog_offset=3)
        for i in range(0, 10_000, 10):
            store.get(f"k{i}")
        metrics = store.metrics()
        assert metrics["staged"] == 0 and metrics["read_cache"] > 0 and metrics["memtables"] > 0
        assert metrics["disk_bytes"] > 0
        usage = memory_usage()
        [entry] = [s for s in usage["stores"] if s["name"] == "s"]
        assert entry["read_cache"] == metrics["read_cache"]
        assert usage["in_use"] <= usage["limit"] and usage["rss"] > 0 and usage["open_files"] > 0
    assert memory_usage()["read_cache"] == 0

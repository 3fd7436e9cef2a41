"""A smoke test of an installed kstate: the native module loads, stores commit and recover, a
changelog restores a lost store, a window store expires, and the ``kstate`` command reads a log.
Needs only kstate and its required dependencies (no pyarrow, no Spark), so it runs on a bare
Python where the wheel was just installed:

    python scripts/smoke_test.py        # prints one line per check, exits non-zero on a failure
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import kstate
from kstate import Stores, ValueAndTimestamp, Windowed
from kstate.log import Partition


def check(what: str, ok: bool) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        raise SystemExit(f"smoke test failed: {what}")


def key_value(state: Path) -> None:
    builder = Stores.timestamped_key_value_store_builder(
        Stores.persistent_timestamped_key_value_store("counts"), key_serde="string", value_serde="int64"
    )
    task = state / "smoke" / "0_0"
    with builder.build().init(task) as store:
        store.put("a", 1, timestamp=1_700_000_000_000)
        check("a staged write is readable", store.get_with_timestamp("a") == ValueAndTimestamp(1, 1_700_000_000_000))
        store.commit(changelog_offset=41)
        store.put("b", 2)
        check("recover(41) drops what was not committed", store.recover(41) and store.get("b") is None)
        check("committed offset 41", store.committed_offset() == 41)
    with builder.build().init(task) as store:
        check("a reopened store has its commit", [tuple(kv) for kv in store.all()] == [("a", 1)])


def changelog(state: Path) -> Path:
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("clicks"), "string", "int64")
    task = state / "smoke" / "0_1"
    with builder.with_logging_enabled().build().init(task) as store:
        store.put_all([(f"k{i}", i) for i in range(1000)])
        store.delete("k7")
        check("commit publishes to the changelog first: offsets 0-999", store.commit() == 999)
        expected = list(store.all())
    shutil.rmtree(task)
    with builder.with_logging_enabled().build().init(task) as store:
        restored = store.restored_records == 1000 and list(store.all()) == expected
        check("a lost store restores from its changelog", restored)
    partition = state / "changelog" / "smoke-clicks-changelog-1"
    with Partition.open(partition) as log:
        records = list(log.read(0))
    tombstones = [r.key for r in records if r.value is None]
    check("the changelog is a Kafka log: 1000 records, one tombstone", len(records) == 1000 and tombstones == [b"k7"])
    return partition


def window(state: Path) -> None:
    windows = Stores.window_store_builder(
        Stores.persistent_window_store("w", retention_ms=60_000, window_size_ms=10_000), "string", "int64"
    ).build()
    with windows.init(state / "smoke" / "0_2") as store:
        store.put("a", 3, window_start=0)
        store.put("a", 4, window_start=100_000)
        store.commit(changelog_offset=1)
        check("an expired window is gone", store.fetch("a", 0) is None and store.fetch("a", 100_000) == 4)
    sessions = Stores.session_store_builder(Stores.persistent_session_store("s", 60_000), "string", "int64").build()
    with sessions.init(state / "smoke" / "0_3") as store:
        store.put(Windowed("a", 1_000, 5_000), 2)
        store.commit(changelog_offset=1)
        check("a session is found", [kv.value for kv in store.find_sessions("a", 4_000, 9_000)] == [2])


def cli(partition: Path) -> None:
    script = Path(sysconfig.get_path("scripts")) / "kstate"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kstate.cli"]
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    check(f"kstate --version: {version}", version == f"kstate {kstate.__version__}")
    dump = subprocess.run([*command, "log", "dump", str(partition), "--deep"], capture_output=True, text=True)
    check("kstate log dump reads the changelog", dump.returncode == 0 and "offset: 999" in dump.stdout)


def main() -> None:
    check(f"import kstate {kstate.__version__} ({kstate._core.__file__})", True)
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        key_value(state)
        partition = changelog(state)
        window(state)
        cli(partition)
    print("smoke test passed")


if __name__ == "__main__":
    main()

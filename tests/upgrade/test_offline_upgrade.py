"""``kstate upgrade``: plain stores (written by another RocksDB binding in Kafka's legacy layout)
converted to the timestamped format offline, checked by reading the column families back with
rocksdict; a dry run changes nothing and an upgrade killed with SIGKILL finishes when run again."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from rocksdict import Options, Rdict

from kstate import Stores, ValueAndTimestamp
from kstate.upgrade import inspect_store

KSTATE = str(Path(sys.executable).parent / "kstate")
LEGACY = {b"key-%05d" % i: b"value-%d-" % i + bytes(2000) for i in range(5000)}  # ~10 MB


def write_legacy(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(path), Options(raw_mode=True))
    for k, v in LEGACY.items():
        db[k] = v
    db.close()


def test_dry_run_then_upgrade_of_every_store_under_a_state_dir(tmp_path, column_families):
    store_dir = tmp_path / "state" / "app" / "0_1" / "rocksdb" / "legacy"
    write_legacy(store_dir)
    dry = subprocess.run([KSTATE, "upgrade", "--dry-run", str(tmp_path / "state")], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert f"{store_dir}: plain, would convert 5000 values" in dry.stdout
    assert inspect_store(store_dir).format == "plain" and "keyValueWithTimestamp" not in column_families(store_dir)

    done = subprocess.run([KSTATE, "upgrade", str(tmp_path / "state")], capture_output=True, text=True)
    assert "converted 5000 values" in done.stdout
    families = column_families(store_dir)
    assert families["default"] == {}
    assert families["keyValueWithTimestamp"] == {k: (-1).to_bytes(8, "big", signed=True) + v for k, v in LEGACY.items()}
    supplier = Stores.persistent_timestamped_key_value_store("legacy")
    with Stores.timestamped_key_value_store_builder(supplier).build().init(store_dir.parent.parent) as store:
        assert store.get_with_timestamp(b"key-00042") == ValueAndTimestamp(LEGACY[b"key-00042"], -1)
    again = subprocess.run([KSTATE, "upgrade", str(store_dir)], capture_output=True, text=True)
    assert "timestamped, nothing to upgrade" in again.stdout


UPGRADER = textwrap.dedent("""
    import sys, time
    from kstate import _core

    def pause(done, total):
        print("converted", done, total, flush=True)
        time.sleep(60)

    _core.upgrade_store_to_timestamped(sys.argv[1], pause)
""")


def test_an_upgrade_killed_midway_reads_right_and_finishes_when_run_again(tmp_path, column_families):
    store_dir = tmp_path / "app" / "0_0" / "rocksdb" / "legacy"
    write_legacy(store_dir)
    proc = subprocess.Popen([sys.executable, "-c", UPGRADER, str(store_dir)], stdout=subprocess.PIPE, text=True)
    words = proc.stdout.readline().split()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done, total = int(words[1]), int(words[2])
    assert 0 < done < total == len(LEGACY)

    midway = inspect_store(store_dir)
    assert midway.format == "upgrading" and midway.legacy_entries + midway.timestamped_entries == len(LEGACY)
    supplier = Stores.persistent_timestamped_key_value_store("legacy")
    with Stores.timestamped_key_value_store_builder(supplier).build().init(store_dir.parent.parent) as store:
        assert dict(store.all()) == LEGACY, "half-upgraded, every value reads the same"
    subprocess.run([KSTATE, "upgrade", str(store_dir)], check=True, capture_output=True)
    families = column_families(store_dir)
    assert families["default"] == {} and len(families["keyValueWithTimestamp"]) == len(LEGACY)

"""`kstate inspect <state dir>`: every store of a state directory, read-only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kstate import Stores


def test_inspect_lists_stores_partitions_offsets_and_sizes_of_open_stores(tmp_path: Path) -> None:
    kv = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64").build()
    windows = Stores.window_store_builder(
        Stores.persistent_window_store("clicks", retention_ms=3_600_000, window_size_ms=60_000), "string", "int64"
    ).build()
    with kv.init(tmp_path / "app" / "0_3") as counts, windows.init(tmp_path / "app" / "0_4") as clicks:
        counts.put_all([f"k{i}" for i in range(5000)], list(range(5000)))
        counts.commit(changelog_offset=41)
        for i in range(100):
            clicks.put("a", i, window_start=i * 60_000)
        clicks.commit(changelog_offset=7)
        # The stores stay open (locked by this process): inspect reads them read-only.
        done = subprocess.run(
            [sys.executable, "-m", "kstate.cli", "inspect", str(tmp_path), "--json"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        rows = {row["store"]: row for row in json.loads(done.stdout)}
        table = subprocess.run(
            [sys.executable, "-m", "kstate.cli", "inspect", str(tmp_path)], capture_output=True, text=True
        ).stdout
    assert rows["counts"]["partition"] == 3 and rows["counts"]["kind"] == "key-value"
    assert rows["counts"]["offsets"] == {"app-counts-changelog-3": 41}
    assert rows["counts"]["approximate_entries"] == 5000 and rows["counts"]["disk_bytes"] > 5000 * 10
    assert rows["clicks"]["partition"] == 4 and rows["clicks"]["segments"] >= 2
    assert rows["clicks"]["offsets"]["app-clicks-changelog-4"] == 7
    assert "2 stores, 2 partitions" in table and "app-counts-changelog-3=41" in table

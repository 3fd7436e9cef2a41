"""``kstate inspect <changelog location> --history``: every store changelog partition there, its
snapshots and the state its history gives, rebuilt from the newest usable snapshot and the
changelog after it (history below the snapshot deleted by hand here, as a retention would), or
why it cannot be (exit status 1). ``kstate inspect <state dir> --exact`` counts entries where
RocksDB estimates them. On a local directory and on moto's S3."""

from __future__ import annotations

import json
import subprocess
import sys

from kstate import Stores
from snapshots.conftest import location  # noqa: F401 (the fixture: a directory, or a bucket on moto's S3)
from snapshots.history_retention import damage_snapshot, delete_history_below

KEYS = 150


def kstate_inspect(location, *args):  # noqa: F811
    options = [f"--storage-option={k}={v}" for k, v in location.storage_options.items()]
    return subprocess.run(
        [sys.executable, "-m", "kstate.cli", "inspect", location.url, "--history", *options, *args],
        capture_output=True,
        text=True,
    )


def write(location, tmp_path):  # noqa: F811
    """Store ``counts`` (snapshots after rounds 1 and 3 of 6, every key rewritten each round) and
    store ``plain`` (no snapshots, a key deleted) of application ``app``, partition 0; returns
    ``({round: last offset of counts}, snapshot offsets)``."""
    config = location.logging_config(**{"segment.bytes": 4096, "cleanup.policy": "delete"})
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    plain = Stores.key_value_store_builder(Stores.persistent_key_value_store("plain"), "string", "int64")
    ends, snapshots = {}, []
    task = tmp_path / "state" / "app" / "0_0"
    with counts.with_logging_enabled({**config, "minDeltasForSnapshot": 1_000}).build().init(task) as store:
        for r in range(6):
            store.put_all((f"k{i:04d}", r) for i in range(KEYS))
            ends[r] = store.commit()
            if r in (1, 3):
                snapshots.append(store.snapshot(batch_id=r).offset)
    with plain.with_logging_enabled(config).build().init(task) as store:
        store.put_all((f"p{i}", i) for i in range(10))
        store.commit()
        store.delete("p3")
        store.commit()
    return ends, snapshots


def test_the_history_of_each_changelog_gives_its_state_from_the_newest_snapshot(location, tmp_path):  # noqa: F811
    ends, (first, second) = write(location, tmp_path)
    assert delete_history_below(location.url, location.storage_options, "app-counts-changelog", 0, first + 1) > 0
    done = kstate_inspect(location, "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["topic"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {"app-counts-changelog", "app-plain-changelog"}
    counts, plain = rows["app-counts-changelog"], rows["app-plain-changelog"]
    assert counts["snapshots"] == [first, second] and 0 < counts["log_start_offset"] <= first + 1
    assert counts["log_end_offset"] == ends[5] + 1 and counts["offset"] == ends[5]
    assert (counts["snapshot_offset"], counts["snapshot_batch"]) == (second, 3)
    assert counts["replayed_records"] == ends[5] - second, "only the changelog after the snapshot"
    assert counts["entries"] == KEYS and counts["error"] is None
    assert (plain["snapshots"], plain["snapshot_offset"], plain["replayed_records"]) == ([], None, 11)
    assert plain["entries"] == 9, "counted, not estimated: the deleted key is gone"

    table = kstate_inspect(location).stdout
    assert f"snapshot {second}" in table and "2 changelog partitions, 0 without" in table


def test_a_state_only_deleted_history_could_give_is_reported_and_fails_the_command(location, tmp_path):  # noqa: F811
    ends, (first, second) = write(location, tmp_path)
    delete_history_below(location.url, location.storage_options, "app-counts-changelog", 0, first + 1)
    for offset in (second, first):
        damage_snapshot(location.url, location.storage_options, "app-counts-changelog", 0, offset)
    done = kstate_inspect(location, "--json")
    assert done.returncode == 1, done.stderr
    rows = {row["topic"]: row for row in json.loads(done.stdout)}
    assert rows["app-counts-changelog"]["entries"] is None
    assert "no usable snapshot" in rows["app-counts-changelog"]["error"]
    assert rows["app-plain-changelog"]["entries"] == 9
    table = kstate_inspect(location)
    assert table.returncode == 1 and "MISSING HISTORY: changelog" in table.stdout
    assert "1 without the history their state needs" in table.stdout


def test_exact_counts_where_the_estimate_counts_overwrites_and_deletes(tmp_path):
    kv = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64").build()
    with kv.init(tmp_path / "app" / "0_0") as counts:
        for value in range(3):
            counts.put_all([(f"k{i}", value) for i in range(1000)])
            counts.commit(changelog_offset=value)
        for i in range(300):
            counts.delete(f"k{i}")
        counts.commit(changelog_offset=3)
    done = subprocess.run(
        [sys.executable, "-m", "kstate.cli", "inspect", str(tmp_path), "--json", "--exact"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["entries"] == 700
    table = subprocess.run(
        [sys.executable, "-m", "kstate.cli", "inspect", str(tmp_path), "--exact"], capture_output=True, text=True
    ).stdout
    assert " 700 " in table and "entries~" not in table

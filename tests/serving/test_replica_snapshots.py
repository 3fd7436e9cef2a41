"""A replica of state whose stores take snapshots, after the history below them was deleted (by
hand here, as the snapshot collector does it): a copy built from nothing, or one that fell
behind the changelog's start, loads each store's newest usable snapshot at or below its batch log
head and follows the changelog after it, for every store kind (key-value, timestamped, window,
session; ``transform_with_state``'s variables in ``test_variables_of_a_replica_start_from_snapshots``),
its reads equal to the state in plain Python; with every snapshot unusable it refuses to start
(``ChangelogTruncatedError``) rather than serve part of the state. On a local directory and on
moto's S3."""

from __future__ import annotations

import logging

import pytest

from kstate.errors import ChangelogTruncatedError
from kstate.log.snapshots import open_snapshots
from kstate.serving import StateReplica
from kstate.spark.protocol import idle
from snapshots.conftest import location  # noqa: F401 (the fixture: a directory, or a bucket on moto's S3)
from snapshots.history_retention import damage_snapshot, delete_history_below

from .application import Application, builders
from .reads import check_everything
from .test_replica import rebuilds

STORES = [b.name for b in builders()]
LOGGING = {"minDeltasForSnapshot": 3, "segment.bytes": 2048, "cleanup.policy": "delete"}
"""A snapshot every third batch (batches 2, 5, 8, ...); small segments, so that deleting history
removes whole ones (their records are gone, not only below a recorded start), never compacted (a
compaction under a replica that missed batches rebuilds it: ``test_replica.py``)."""
LOADED = "loaded the snapshot at offset"


def application(location, tmp_path):  # noqa: F811
    return Application(tmp_path / "state", location.url, storage_options=location.storage_options, **LOGGING)


def snapshot_offsets(location, store, partition):  # noqa: F811
    return open_snapshots(location.url, f"app-{store}-changelog", partition, location.storage_options).offsets()


def delete_history_below_newest_snapshots(url, options, stores, partitions):
    """Deletes every store partition's changelog below its newest snapshot, as the collector
    does; the stores are closed first (their snapshots published)."""
    idle.IDLE.release_all()
    for store in stores:
        for p in range(partitions):
            offsets = open_snapshots(url, f"app-{store}-changelog", p, options).offsets()
            assert offsets, f"{store} {p} took snapshots"
            start = delete_history_below(url, options, f"app-{store}-changelog", p, offsets[-1] + 1)
            assert start > 0, "history was deleted: the changelog alone no longer gives the state"


def test_a_new_replica_starts_from_snapshots_and_follows_the_changelog(location, tmp_path, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, "kstate")
    app = application(location, tmp_path)

    def replica(name, **options):
        return StateReplica(location.url, "app", location.storage_options, tmp_path / name, **options)

    for batch in range(3):
        app.run(batch)
    with replica("behind") as behind:  # built from the whole changelog: no history deleted yet
        check_everything(app, behind)
    for batch in range(3, 10):
        app.run(batch)
    delete_history_below_newest_snapshots(location.url, location.storage_options, STORES, app.partitions)

    caplog.clear()
    with replica("new") as new:
        assert new.batch_id == 9
        check_everything(app, new)
        loaded = [r.getMessage() for r in caplog.records if LOADED in r.getMessage()]
        assert len(loaded) == len(STORES) * app.partitions, "every store partition from its newest snapshot"
        for store in STORES:
            for p in range(app.partitions):
                newest = snapshot_offsets(location, store, p)[-1]
                assert any(f"app-{store}-changelog-{p}: {LOADED} {newest} (batch 8)" in m for m in loaded), (store, p)
        app.run(10, garbage=True, attempt=1)
        app.run(10)  # Spark replays batch 10: the first attempt is rolled back
        app.run(11)
        assert new.refresh() == 11
        check_everything(app, new)
        assert not rebuilds(caplog), "a copy from snapshots follows the changelog record by record"

    # A copy standing on offsets below the changelog's start now is rebuilt from the snapshots.
    with replica("behind") as behind:
        assert any("fell behind" in m for m in rebuilds(caplog))
        assert behind.batch_id == 11
        check_everything(app, behind)

    # Aligned: each store read from its snapshot up to the head (batch 11), then back to batch 10
    # with the undo of batch 11.
    with replica("aligned", aligned=True) as aligned:
        assert aligned.batch_id == 10
        check_everything(app, aligned)


def test_with_every_snapshot_unusable_a_replica_does_not_start(location, tmp_path):  # noqa: F811
    app = application(location, tmp_path)
    for batch in range(3):
        app.run(batch)
    local = tmp_path / "following"
    following = StateReplica(location.url, "app", location.storage_options, local)
    try:
        for batch in range(3, 7):
            app.run(batch)
        delete_history_below_newest_snapshots(location.url, location.storage_options, STORES, app.partitions)
        for offset in snapshot_offsets(location, "visits", 1):
            damage_snapshot(location.url, location.storage_options, "app-visits-changelog", 1, offset)
        truncated = r"app-visits-changelog-1.*was deleted because snapshots hold it"
        with pytest.raises(ChangelogTruncatedError, match=truncated):
            StateReplica(location.url, "app", location.storage_options, tmp_path / "replica")
        # A replica standing on batch 2, below the changelogs' start now: no partition moves on
        # (partition 0's rebuilt copy is dropped), each keeps serving batch 2.
        with pytest.raises(ChangelogTruncatedError, match=truncated):
            following.refresh()
        assert following.batch_id == 2
        check_everything(app, following)
        assert len(list(local.glob("app/heads/partition-*/copy-*"))) == app.partitions
    finally:
        following.close()


def test_variables_of_a_replica_start_from_snapshots(tmp_path, monkeypatch):
    """``transform_with_state``'s variables (value, list, map with TTL, pickled value, and the TTL
    index) from their snapshots, written as ``test_state_variables.py`` writes them, with a
    query's default snapshots every second batch."""
    pytest.importorskip("pyspark")
    import pickle

    from kstate.spark.processor.state_variables import TTL_INDEX
    from kstate.spark.protocol import exactly_once

    from .test_state_variables import LAST, PARTITIONS, USERS, now_ms
    from .test_state_variables import Application as Processor

    monkeypatch.setattr(
        exactly_once, "SNAPSHOT_DEFAULTS", {**exactly_once.SNAPSHOT_DEFAULTS, "minDeltasForSnapshot": 2}
    )
    app = Processor(tmp_path)
    app.run(0, LAST, hours_ago=1)  # its map entries' TTL ran out long ago
    for batch in range(1, 6):
        app.run(batch, LAST, users=USERS[: 2 + batch])
    variables = ["last", "events", "by_kind", "raw"]
    delete_history_below_newest_snapshots(str(app.changelog_dir), None, [*variables, TTL_INDEX], PARTITIONS)

    def check(replica):
        reference = app.reference
        for user in [*USERS, "nobody"]:
            assert replica.state_variable("last", user).value == reference.last.get(user)
            assert replica.state_variable("events", user).value == reference.events.get(user, [])
            assert replica.state_variable("by_kind", user).value == reference.map_of(user, now_ms())
            raw = replica.state_variable("raw", user).value
            assert (raw if raw is None else pickle.loads(raw)) == reference.raw.get(user)

    with StateReplica(app.changelog_dir, "app", local_dir=tmp_path / "r") as replica:
        assert replica.batch_id == 5
        check(replica)
        app.run(6, LAST, users=USERS[:3])
        assert replica.refresh() == 6
        check(replica)

"""``StateReplica`` on changelogs in a bucket of an S3 API server (moto on loopback, through
s3fs): every read equals the plain-Python state of the batch it names, a replay included; a
restarted replica catches up; a compaction of the objects under a replica rebuilds it."""

import logging

from kstate.log.remote import RemoteChangelog
from kstate.serving import StateReplica

from .application import Application, builders
from .reads import check_all, check_everything
from .test_replica import rebuilds


def test_a_replica_of_changelogs_on_s3(s3, tmp_path, caplog):
    caplog.set_level(logging.INFO, "kstate.serving")
    app = Application(tmp_path / "state", s3.url, storage_options=s3.storage_options)
    for batch in range(3):
        app.run(batch)

    def replica(**options):
        return StateReplica(s3.url, "app", s3.storage_options, tmp_path / "replica", **options)

    with replica() as following:
        assert following.batch_id == 2
        check_everything(app, following)
        app.run(3, garbage=True, attempt=1)
        app.run(3)  # Spark replays batch 3: the first attempt is rolled back
        assert following.refresh() == 3
        check_everything(app, following)
    app.run(4)
    with replica() as restarted:
        assert restarted.batch_id == 4
        check_everything(app, restarted)
        assert not rebuilds(caplog), "a restarted replica only catches up"
        app.run(5)
        app.run(6)
        for store in (b.name for b in builders()):
            for p in range(app.partitions):
                RemoteChangelog(s3.url, f"app-{store}-changelog", p, s3.storage_options).compact(keep_newest=1)
        restarted.refresh()
        assert rebuilds(caplog), "the replica stood on offsets a compaction merged"
        assert restarted.batch_id == 6
        check_everything(app, restarted)
    with replica(aligned=True) as aligned:
        assert aligned.batch_id == 5
        check_all(app, aligned)

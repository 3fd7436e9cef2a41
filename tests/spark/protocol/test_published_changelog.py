"""Reading a store's published changelog beside the query (``published_changelog``): each offset
once, in order; a gap after the offset a copy stands on (``BehindHistory``) and a compaction
during the read or past its bound (``ChangelogMoved``) are said, in a directory and on an object
store. And the batch log read without its lock (``BatchLogReader``)."""

import pytest

from kstate.errors import ChangelogTruncatedError, ProcessorStateError
from kstate.log.partition import Partition
from kstate.spark.protocol.batch_log import EMPTY_STATE, BatchEntry, BatchLog, BatchLogReader
from kstate.spark.protocol.published_changelog import (
    BehindHistory,
    ChangelogFiles,
    ChangelogMoved,
    ChangelogObjects,
    stored_entries,
)


def offsets(batches):
    return [o for batch in batches for o in batch.column("offset").to_pylist()]


def latest(batches):
    out = {}
    for batch in batches:
        out.update(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()))
    return out


def test_a_changelog_directory_reads_each_offset_once_or_says_why_it_cannot(tmp_path):
    directory = tmp_path / "app-counts-changelog-0"
    config = {"segment.bytes": 100, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}
    with Partition.open(directory, config) as log:
        for i in range(12):
            log.append([(f"k{i % 3}".encode(), f"v{i}".encode())], 1_000 + i)
        changelog = ChangelogFiles(directory)
        watched = changelog.watch()
        assert offsets(changelog.records(3, 8, watched)) == [4, 5, 6, 7, 8]
        everything = list(changelog.records(None, 11, watched))
        assert offsets(everything) == list(range(12))
        log.compact()
    with pytest.raises(ChangelogMoved, match="replaced while it was read"):
        list(changelog.records(None, 11, watched))
    with pytest.raises(BehindHistory, match="missing"):
        list(changelog.records(2, 11, changelog.watch()))
    from_scratch = list(changelog.records(None, 11, changelog.watch()))
    assert offsets(from_scratch) != list(range(12)), "compaction removed records"
    assert latest(from_scratch) == latest(everything)


def test_records_become_what_the_store_holds(tmp_path):
    directory = tmp_path / "log"
    with Partition.open(directory) as log:
        log.append([(b"a", b"1", 7), (b"b", None, 8)])
    changelog = ChangelogFiles(directory)
    (batch,) = changelog.records(None, 1, changelog.watch())
    assert stored_entries(batch, False).to_pydict() == {"key": [b"a", b"b"], "value": [b"1", None]}
    stored = stored_entries(batch, True).to_pydict()
    assert stored["value"] == [(7).to_bytes(8, "big") + b"1", None]


def test_a_changelog_on_an_object_store_says_when_it_was_compacted(tmp_path):
    from kstate import Stores

    url = (tmp_path / "remote").as_uri()
    store = (
        Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
        .with_logging_enabled({"changelog.dir": url})
        .build()
        .init(tmp_path / "state" / "app" / "0_0", partition=0, application_id="app")
    )
    for i in range(6):
        store.put(f"k{i % 2}", i)
        store.commit()
    changelog = ChangelogObjects(url, "app-counts-changelog", 0, {})
    assert offsets(changelog.records(1, 4)) == [2, 3, 4]
    everything = list(changelog.records(None, 5))
    store.compact_changelog(keep_newest=1)  # offsets 0-4 merged into one object
    with pytest.raises(BehindHistory, match="compacted"):
        list(changelog.records(1, 5))
    with pytest.raises(ChangelogMoved, match="published past offset 3"):
        list(changelog.records(None, 3))
    assert latest(changelog.records(None, 5)) == latest(everything)
    assert offsets(changelog.records(4, 5)) == [5], "the newest commit stays whole"
    store.close()


def test_a_read_from_scratch_of_a_changelog_whose_history_went_says_so(tmp_path):
    from kstate.log.remote import RemoteChangelog

    directory = tmp_path / "app-counts-changelog-0"
    with Partition.open(directory, {"segment.bytes": 100}) as log:
        for i in range(12):
            log.append([(f"k{i % 3}".encode(), f"v{i}".encode())], 1_000 + i)
        log.delete_records_before(5)  # snapshots hold the history before 5
    changelog = ChangelogFiles(directory)
    assert offsets(changelog.records(5, 11, changelog.watch())) == list(range(6, 12))
    with pytest.raises(ChangelogTruncatedError, match="before offset 5 was deleted"):
        list(changelog.records(None, 11, changelog.watch()))

    from kstate import Stores

    url = (tmp_path / "remote").as_uri()
    store = (
        Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
        .with_logging_enabled({"changelog.dir": url})
        .build()
        .init(tmp_path / "state" / "app" / "0_0", partition=0, application_id="app")
    )
    for i in range(4):
        store.put(f"k{i}", i)
        store.commit()
    store.close()
    RemoteChangelog(url, "app-counts-changelog", 0).delete_before(2)
    objects = ChangelogObjects(url, "app-counts-changelog", 0, {})
    assert offsets(objects.records(1, 3)) == [2, 3]
    with pytest.raises(ChangelogTruncatedError, match="before offset 2 was deleted"):
        list(objects.records(None, 3))


def test_the_batch_log_reads_without_its_lock(tmp_path):
    reader = BatchLogReader(tmp_path / "batches")
    assert reader.head() is None
    log = BatchLog(tmp_path / "batches")
    first = log.append(BatchEntry(0, {"counts": 3}))
    second = log.append(BatchEntry(1, {"counts": 5}, previous=first.position))
    assert reader.head() == second and reader.entry(0) == first
    assert reader.history(5) == [second, first]
    with pytest.raises(ProcessorStateError, match="no longer kept"):
        reader.entry(7)
    log.close()
    assert BatchEntry(EMPTY_STATE, {}).holds_state and first.holds_state
    assert not BatchEntry(4, {}, undo={"counts": "x"}).holds_state, "a rescale's history entry"


def test_an_entry_with_a_field_a_newer_kstate_added_still_reads():
    raw = b'{"batch_id":3,"offsets":{"counts":7},"rows":{"counts":2},"later":{"x":1}}'
    entry = BatchEntry.from_bytes(raw, 5)
    assert (entry.batch_id, entry.offsets, entry.rows, entry.position) == (3, {"counts": 7}, {"counts": 2}, 5)
    assert BatchEntry.from_bytes(b'{"batch_id":3,"offsets":{}}', 0).rows == {}, "an entry from before counts"

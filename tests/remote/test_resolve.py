"""Which objects make up a remote log (``kstate.log.remote.resolve``), in every state writers,
zombies and interrupted compactions can leave a partition directory in."""

import pytest

from kstate.errors import CorruptedDataError
from kstate.log.remote import LogObject, object_name, resolve


def objects(*names):
    return [LogObject.parse(name, 1) for name in names]


def commit(first):
    return object_name(first)


def compacted(first, last):
    return object_name(first, last)


def ranges(chain):
    return [(link.object.name, link.first, link.last) for link in chain]


def test_names_are_kafka_segment_names_by_20_digit_offsets():
    assert object_name(10) == "00000000000000000010.log"
    assert object_name(0, 19) == "00000000000000000000-00000000000000000019.log"
    assert LogObject.parse(object_name(0, 19), 7) == LogObject(object_name(0, 19), 0, 19, 7)
    for other in [
        ".00000000000000000010.log.1a2b.tmp",
        "00000000000000000010.index",
        "0000000010.log",
        "00000000000000000019-00000000000000000000.log",
    ]:
        assert LogObject.parse(other, 1) is None, other


def test_commits_follow_one_another_and_the_newest_ends_at_its_last_record():
    chain = resolve(objects(commit(0), commit(10), commit(25)))
    assert ranges(chain) == [(commit(0), 0, 9), (commit(10), 10, 24), (commit(25), 25, None)]
    assert resolve([]) == []


def test_compacted_objects_win_over_what_they_cover_and_the_widest_wins():
    # Mid-compaction: the compacted object is written, its inputs not yet deleted.
    mid = objects(commit(0), commit(10), compacted(0, 19), commit(20))
    assert ranges(resolve(mid)) == [(compacted(0, 19), 0, 19), (commit(20), 20, None)]
    # A second compaction wrote a wider object before deleting the first one's.
    wider = objects(compacted(0, 19), compacted(0, 29), commit(20), commit(30))
    assert ranges(resolve(wider)) == [(compacted(0, 29), 0, 29), (commit(30), 30, None)]
    # Groups of one compaction tile the offsets.
    groups = objects(compacted(0, 9), compacted(10, 29), commit(30))
    assert [link.object.name for link in resolve(groups)] == [compacted(0, 9), compacted(10, 29), commit(30)]


def test_a_zombie_commit_under_a_compacted_object_is_not_taken():
    # Offset 10 was published, compacted into 0-19 and deleted; a writer behind then created it.
    chain = resolve(objects(compacted(0, 19), commit(10), commit(20)))
    assert ranges(chain) == [(compacted(0, 19), 0, 19), (commit(20), 20, None)]


def test_a_log_may_start_above_zero():
    assert ranges(resolve(objects(commit(50), commit(60)))) == [(commit(50), 50, 59), (commit(60), 60, None)]


def test_objects_past_a_hole_are_corrupt():
    with pytest.raises(CorruptedDataError, match="no object holds"):
        resolve(objects(compacted(0, 9), commit(20)))

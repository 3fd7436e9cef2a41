"""The KIP-268 upgrade test matrix, replayed by the deterministic group simulator.

Releases are named by the newest metadata version they know: 0.10.0 = 1, 0.10.1 to 1.1 = 2,
"1.2" (shipped as 2.0) = 3, today's release = 11, and a simulated future release = 12 (the
version-11 layout with 12 in the header). Every rebalance encodes each subscription and assignment
with the sender's codec and decodes it with the receiver's, so a version sent to an instance that
cannot read it shows up as a violation.
"""

import pytest

from kstate.rebalance import GroupSimulator, ProbingProtocol, Release

V0_10_0, V0_10_1_TO_1_1, V1_2, CURRENT, FUTURE = 1, 2, 3, 11, 12
NAMES = ["a", "b", "c"]  # "a" joins first and leads until it leaves
PROTOCOLS = [ProbingProtocol.KIP268, ProbingProtocol.CURRENT]


def check(records):
    """Invariants after every rebalance: the simulator's own checks found nothing, the leader
    assigned, every task is active exactly once, and each membership change (a stop or a start)
    took at most one follow-up rebalance, plus one for each crash in it."""
    events = [r for r in records if r.cause != "follow-up"]
    crashes = sum(m.crashed for r in records for m in r.members)
    assert records and 1 <= len(events) <= 2 and len(records) <= 2 * len(events) + crashes, records
    for record in records:
        assert record.violations == (), record
        assert record.failure is None, record
        if not any(m.crashed for m in record.members):
            active = [task for m in record.members for task in m.active_tasks]
            assert sorted(active) == sorted(set(active)), record
            assert len(active) == 6 or any(m.future for m in record.members), record
    return records


def group_of(version, protocol=ProbingProtocol.CURRENT, upgrade_from=None):
    group = GroupSimulator(tasks=6, standby_replicas=1, protocol=protocol)
    for name in NAMES:
        check(group.start(name, Release.of(version, upgrade_from)))
    assert group.settled_version == version
    return group


def rolling_bounce(group, release, order=("b", "c", "a")):
    """Bounces every instance once; returns the number of rebalances each bounce took."""
    return [len(check(group.bounce(name, release))) for name in order]


# ------------------------------------------------------------------------------------------------
# Rows of the KIP-268 matrix that need upgrade.from: two rolling bounces.

TWO_BOUNCE_ROWS = [
    # (from, upgrade.from value, to)
    (V0_10_0, "0.10.0", V0_10_1_TO_1_1),  # 0.10.0 -> 0.10.1 .. 1.1 (KAFKA-6054)
    (V0_10_0, "0.10.0", V1_2),  # 0.10.0 -> 1.2
    (V0_10_0, "0.10.0", CURRENT),  # 0.10.0 -> post-1.2
    (V0_10_1_TO_1_1, "0.10.1", V1_2),  # 0.10.1 .. 1.1 -> 1.2
    (V0_10_1_TO_1_1, "1.1", CURRENT),  # 0.10.1 .. 1.1 -> post-1.2
]


@pytest.mark.parametrize(("old", "upgrade_from", "new"), TWO_BOUNCE_ROWS)
def test_two_rolling_bounces_with_upgrade_from(old, upgrade_from, new):
    group = group_of(old)
    # First bounce: new code, still sending the old version, so old leaders can read it.
    assert rolling_bounce(group, Release.of(new, upgrade_from)) == [2, 2, 2]
    assert group.settled_version == old
    # Second bounce: upgrade.from removed; the group moves up when the last forced member is gone.
    assert rolling_bounce(group, Release.of(new)) == [2, 2, 2]
    assert group.settled_version == new
    assert set(group.used_versions.values()) == {new}


@pytest.mark.parametrize("upgrade_from", ["0.10.1", "0.10.2", "0.11.0", "1.0"])
def test_upgrades_between_version_2_releases_need_one_bounce(upgrade_from):
    # 0.10.1.x .. 1.0.x -> a later 2-release: the metadata does not change.
    group = group_of(V0_10_1_TO_1_1)
    assert rolling_bounce(group, Release.of(V0_10_1_TO_1_1, upgrade_from)) == [2, 2, 2]
    assert group.settled_version == V0_10_1_TO_1_1


@pytest.mark.parametrize(("old", "new"), [(V0_10_0, V0_10_1_TO_1_1), (V0_10_1_TO_1_1, CURRENT)])
def test_without_upgrade_from_the_old_leader_cannot_read_the_new_subscription(old, new):
    group = group_of(old)
    check(group.stop("b"))
    records = group.start("b", Release.of(new))
    assert records[-1].failure is not None and "cannot" in records[-1].failure
    assert records[-1].leader == "a"


# ------------------------------------------------------------------------------------------------
# Version probing: one rolling bounce.


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("old", "new"), [(V1_2, V1_2 + 1), (CURRENT, FUTURE)], ids=["1.2-to-next", "11-to-12"])
def test_version_probing_with_the_leader_bounced_last(protocol, old, new):
    group = group_of(old, protocol)
    # Each new follower probes the old leader: stop (1) + start (probe + rejoin = 2).
    for name in ("b", "c"):
        records = check(group.bounce(name, Release.of(new)))
        assert len(records) == 3
        probe = records[1]
        assert probe.probing and probe.member(name).future
        assert probe.member(name).used_version_after == old
        if protocol is ProbingProtocol.KIP268:
            assert probe.member(name).active_tasks == ()  # the empty probing assignment
        assert group.settled_version == old
    # The leader goes last: once it is gone the new leader advertises `new`, and one more
    # rebalance moves the group up.
    records = check(group.stop("a"))
    assert len(records) == 2
    assert records[0].leader == "b" and records[0].member("b").commonly_supported_version == new
    assert group.settled_version == new
    assert len(check(group.start("a", Release.of(new)))) == 1
    assert group.settled_version == new


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_version_probing_with_the_leader_bounced_first(protocol):
    group = group_of(CURRENT, protocol)
    counts = rolling_bounce(group, Release.of(FUTURE), order=("a", "b", "c"))
    # a: old leader b answers its probe; b: old leader c; c: the last old instance leaves (one
    # extra rebalance to move up) and rejoins a new group.
    assert counts == [3, 3, 3]
    assert group.settled_version == FUTURE


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_future_release_joining_a_current_group_downgrades_and_stays(protocol):
    group = group_of(CURRENT, protocol)
    records = check(group.start("d", Release.of(FUTURE)))
    assert [r.probing for r in records] == [True, False]
    assert group.used_versions["d"] == CURRENT and group.settled_version == CURRENT


# ------------------------------------------------------------------------------------------------
# Failures in the middle of an upgrade.


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_old_member_crashes_during_a_probing_rebalance(protocol):
    group = group_of(CURRENT, protocol)
    check(group.stop("b"))
    group.crash_during_next_rebalance("c")
    records = check(group.start("b", Release.of(FUTURE)))
    assert records[0].member("c").crashed and records[0].probing
    assert group.members == ["a", "b"] and group.settled_version == CURRENT
    # c comes back on the new release; then the leader is upgraded last.
    assert len(check(group.start("c", Release.of(FUTURE)))) == 2
    assert len(check(group.bounce("a", Release.of(FUTURE)))) == 2 + 1
    assert group.settled_version == FUTURE


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_leader_crashes_before_answering_a_probe(protocol):
    group = group_of(CURRENT, protocol)
    check(group.stop("b"))
    group.crash_during_next_rebalance("a")
    records = check(group.start("b", Release.of(FUTURE)))
    # No assignment in the rebalance the leader died in; c (old) leads the probe that follows.
    assert all(m.assignment_version is None for m in records[0].members)
    assert records[1].leader == "c" and records[1].probing
    assert group.used_versions == {"c": CURRENT, "b": CURRENT}
    assert len(check(group.stop("c"))) == 2  # the last old instance leaves: b moves up
    assert group.settled_version == FUTURE


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_upgraded_instance_rolled_back_mid_upgrade(protocol):
    group = group_of(CURRENT, protocol)
    rolling_bounce(group, Release.of(FUTURE), order=("b",))
    rolling_bounce(group, Release.of(CURRENT), order=("b",))  # roll b back
    assert group.settled_version == CURRENT
    assert rolling_bounce(group, Release.of(FUTURE)) == [3, 3, 3]
    assert group.settled_version == FUTURE


def test_future_subscription_next_to_a_version_2_member_fails_the_assignment():
    group = group_of(CURRENT)
    check(group.bounce("b", Release.of(CURRENT, "1.1")))  # b sends version 2
    records = group.start("d", Release.of(FUTURE))
    assert "at the same time" in records[-1].failure


def test_history_and_state_accessors():
    group = group_of(CURRENT)
    assert group.leader == "a" and group.members == NAMES
    assert [r.generation for r in group.history] == [1, 2, 3]
    assert group.history[0].cause == "start a"

"""The leader and member state machines on their own, and upgrade.from / upgrade.mode."""

import pytest

from kstate.errors import InvalidArgumentError, TaskAssignmentError
from kstate.rebalance import (
    AssignmentInfo,
    FutureSubscriptionInfo,
    Leader,
    Member,
    ProbingProtocol,
    SubscriptionInfo,
    UpgradeConfig,
    UpgradeFrom,
    UpgradeMode,
)

SPEC_2_7_VALUES = (
    "0.10.0 0.10.1 0.10.2 0.11.0 1.0 1.1 2.0 2.1 2.2 2.3 2.4 2.5 2.6 2.7 2.8 3.0 3.1 3.2 3.3 3.4 3.5 3.6 3.7 3.8"
).split()


def test_upgrade_from_values_and_forced_versions():
    assert list(UpgradeFrom.VALUES) == SPEC_2_7_VALUES
    forced = {v: UpgradeFrom.parse(v).forced_subscription_version for v in SPEC_2_7_VALUES}
    assert forced["0.10.0"] == 1
    assert {forced[v] for v in ("0.10.1", "0.10.2", "0.11.0", "1.0", "1.1")} == {2}
    assert {forced[v] for v in SPEC_2_7_VALUES[6:]} == {None}
    assert UpgradeFrom.parse("2.3").eager_rebalancing and not UpgradeFrom.parse("2.4").eager_rebalancing


@pytest.mark.parametrize("bad", ["0.10.0.x", "1.2", "3.9", "4.0", "", "2.0 ", 2.0])
def test_upgrade_from_rejects_anything_else(bad):
    with pytest.raises(InvalidArgumentError, match="upgrade.from"):
        UpgradeFrom.parse(bad)


def test_upgrade_mode_only_with_upgrade_from():
    assert UpgradeConfig.parse({"upgrade.mode": "in_place"}) == UpgradeConfig()
    config = UpgradeConfig.parse({"upgrade.from": "1.1", "upgrade.mode": "roll_over"})
    assert config.upgrade_mode is UpgradeMode.ROLL_OVER and config.upgrade_from.value == "1.1"
    with pytest.raises(InvalidArgumentError, match="upgrade.mode"):
        UpgradeConfig.parse({"upgrade.mode": "inplace"})


def test_leader_plan():
    leader = Leader(11, ProbingProtocol.KIP268)
    plan = leader.plan([SubscriptionInfo(11), FutureSubscriptionInfo(12, 12), SubscriptionInfo(9, 12)])
    assert (plan.assignment_version, plan.commonly_supported_version, plan.future_members) == (9, 11, (1,))
    assert plan.is_probing and plan.future_members_get_empty_assignment
    assert leader.probing_assignment() == AssignmentInfo(11, 11)
    plan = Leader(11, ProbingProtocol.CURRENT).plan([SubscriptionInfo(11), FutureSubscriptionInfo(12, 12)])
    assert not plan.future_members_get_empty_assignment
    assert Leader(11).plan([SubscriptionInfo(2), SubscriptionInfo(11)]).commonly_supported_version == -1
    with pytest.raises(TaskAssignmentError, match="at the same time"):
        Leader(11).plan([SubscriptionInfo(2), FutureSubscriptionInfo(12, 12)])
    with pytest.raises(TaskAssignmentError, match="upgrade.from"):
        Leader(2).plan([SubscriptionInfo(2), SubscriptionInfo(3)])


def test_member_downgrades_upgrades_and_validates():
    member = Member(12, protocol=ProbingProtocol.KIP268)
    assert member.used_version == 12
    reaction = member.on_assignment(AssignmentInfo(11, 11))
    assert (reaction.apply_assignment, reaction.rejoin, reaction.version_change) == (
        False,
        True,
        ("downgraded", 12, 11),
    )
    reaction = member.on_assignment(AssignmentInfo(11, 12))
    assert reaction.version_change == ("upgraded", 11, 12) and reaction.apply_assignment
    assert member.on_assignment(AssignmentInfo(11, 12)).rejoin is True  # someone still sends 11
    with pytest.raises(TaskAssignmentError, match="newer than this member"):
        member.on_assignment(AssignmentInfo(11, 13))

    forced = Member(11, UpgradeFrom.parse("0.10.2"))
    assert (forced.used_version, forced.advertised_latest_version) == (2, -1)
    assert forced.on_assignment(AssignmentInfo(1)).version_change is None
    with pytest.raises(TaskAssignmentError, match="newer than the version 2"):
        forced.on_assignment(AssignmentInfo(3, 11))
    # Kafka 2.6+ schedules the follow-up probing rebalance with nextRebalanceMs = 0.
    assert Member(11).on_assignment(AssignmentInfo(11, 11, next_rebalance_ms=0)).rejoin

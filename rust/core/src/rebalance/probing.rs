//! Version probing (KIP-268; spec 2.6) as two pure state machines: the leader decides which
//! version to answer a rebalance with, each member adjusts the version it subscribes with.
//!
//! Neither does I/O or task placement; [`super::simulator`] drives them with real bytes.
//!
//! Two leader behaviours are offered ([`ProbingProtocol`]):
//! - [`ProbingProtocol::Kip268`], the protocol of the KIP (Kafka 2.0-2.3): a member whose
//!   subscription is newer than the leader understands gets an *empty* assignment carrying the
//!   leader's latest version; every other member gets a regular assignment. The member
//!   downgrades, ignores the empty assignment and rejoins.
//! - [`ProbingProtocol::Current`] (Kafka 2.6+): every member, including the "future" ones, gets
//!   a regular assignment; the future members downgrade after applying it and rejoin.
//!
//! In both, assignments are written at the group's minimum subscription version and advertise
//! the group's minimum latest version as "commonly supported" (KAFKA-8649's fix: the KIP's
//! original "leader's own version" made upgraded members flip between versions). A member moves
//! up when the advertised version exceeds the one it uses, which is how the group reaches the
//! new version once the last old instance is gone.

use super::assignment::AssignmentInfo;
use super::upgrade_from::UpgradeFrom;
use super::{EARLIEST_PROBEABLE_VERSION, UNKNOWN};
use crate::error::{Error, Result};

/// How the leader answers a subscription it cannot read (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbingProtocol {
    Kip268,
    Current,
}

impl ProbingProtocol {
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "kip268" => Ok(ProbingProtocol::Kip268),
            "current" => Ok(ProbingProtocol::Current),
            _ => Err(Error::InvalidArgument(format!(
                "probing protocol {value:?} is not valid; expected kip268 or current"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProbingProtocol::Kip268 => "kip268",
            ProbingProtocol::Current => "current",
        }
    }
}

/// The two numbers every subscription from version 3 on starts with; for versions 1 and 2 the
/// latest version is [`UNKNOWN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionVersions {
    pub version: i32,
    pub latest_supported_version: i32,
}

impl SubscriptionVersions {
    /// What the sender can read: its latest version, or its version when it does not say.
    fn supported(self) -> i32 {
        if self.version < EARLIEST_PROBEABLE_VERSION {
            self.version
        } else {
            self.latest_supported_version
        }
    }
}

/// The leader's decision for one rebalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderPlan {
    /// The version every regular assignment is written in: the minimum received.
    pub assignment_version: i32,
    /// What regular assignments advertise ([`UNKNOWN`] below version 3, which cannot carry it).
    pub commonly_supported_version: i32,
    /// Indexes (into the subscriptions given) of members that sent a newer version than the
    /// leader reads. Non-empty means this is a probing rebalance.
    pub future_members: Vec<usize>,
    /// Whether future members get the empty probing assignment instead of tasks.
    pub future_members_get_empty_assignment: bool,
}

impl LeaderPlan {
    pub fn is_probing(&self) -> bool {
        !self.future_members.is_empty()
    }
}

/// The group leader's version logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    pub latest_supported_version: i32,
    pub protocol: ProbingProtocol,
}

impl Leader {
    /// Decides versions from every member's subscription (the leader's own included). Fails as
    /// Kafka's assignor does when it cannot answer: a leader older than probing (before
    /// version 3) sees a newer subscription, or a newer subscription arrives while a member
    /// still sends version 1 or 2.
    pub fn plan(&self, subscriptions: &[SubscriptionVersions]) -> Result<LeaderPlan> {
        let latest = self.latest_supported_version;
        if subscriptions.is_empty() {
            return Err(Error::InvalidArgument(
                "a rebalance needs at least one subscription".into(),
            ));
        }
        let min_received = subscriptions
            .iter()
            .map(|s| s.version)
            .fold(latest, i32::min);
        let min_supported = subscriptions
            .iter()
            .map(|s| s.supported())
            .fold(latest, i32::min);
        let future_members: Vec<usize> = (0..subscriptions.len())
            .filter(|&i| subscriptions[i].version > latest)
            .collect();
        if let Some(&first_future) = future_members.first() {
            let future_version = subscriptions[first_future].version;
            if latest < EARLIEST_PROBEABLE_VERSION {
                return Err(Error::TaskAssignment(format!(
                    "a version {latest} leader cannot read subscription version \
                     {future_version} and cannot probe (probing needs version \
                     {EARLIEST_PROBEABLE_VERSION}); new instances must set upgrade.from"
                )));
            }
            if min_received < EARLIEST_PROBEABLE_VERSION {
                return Err(Error::TaskAssignment(format!(
                    "received a future subscription (version {future_version}) and a version \
                     {min_received} subscription at the same time: version probing needs every \
                     member at version {EARLIEST_PROBEABLE_VERSION} or later"
                )));
            }
        }
        Ok(LeaderPlan {
            assignment_version: min_received,
            commonly_supported_version: if min_received < EARLIEST_PROBEABLE_VERSION {
                UNKNOWN
            } else {
                min_supported
            },
            future_members_get_empty_assignment: self.protocol == ProbingProtocol::Kip268
                && !future_members.is_empty(),
            future_members,
        })
    }

    /// KIP-268's answer to a future member: no tasks, version and supported version both the
    /// leader's latest (Kafka's `new AssignmentInfo()`).
    pub fn probing_assignment(&self) -> AssignmentInfo {
        let latest = self.latest_supported_version;
        AssignmentInfo::new(latest, latest)
    }
}

/// How a member's subscription version changed on an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionChange {
    /// The group's commonly supported version rose above the used one: the upgrade is complete.
    Upgraded { from: i32, to: i32 },
    /// The leader answered in an older version: someone (maybe the leader) is not upgraded yet.
    Downgraded { from: i32, to: i32 },
}

/// What a member does with a received assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberReaction {
    /// Whether to take the assignment's tasks (false for KIP-268's empty probing answer).
    pub apply_assignment: bool,
    /// Whether to rejoin the group at once (another rebalance).
    pub rejoin: bool,
    pub version_change: Option<VersionChange>,
}

/// One member's version logic (`maybeUpdateSubscriptionVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    latest_supported_version: i32,
    used_version: i32,
    protocol: ProbingProtocol,
}

impl Member {
    /// A member of a release whose latest version is `latest_supported_version`; with
    /// `upgrade.from` it starts at the version that option forces.
    pub fn new(
        latest_supported_version: i32,
        upgrade_from: Option<UpgradeFrom>,
        protocol: ProbingProtocol,
    ) -> Result<Self> {
        if latest_supported_version < 1 {
            return Err(Error::InvalidArgument(format!(
                "latest supported version must be at least 1, got {latest_supported_version}"
            )));
        }
        let forced = upgrade_from.and_then(UpgradeFrom::forced_subscription_version);
        Ok(Member {
            latest_supported_version,
            used_version: forced.map_or(latest_supported_version, |v| {
                v.min(latest_supported_version)
            }),
            protocol,
        })
    }

    pub fn latest_supported_version(&self) -> i32 {
        self.latest_supported_version
    }

    /// The version the next subscription is written in.
    pub fn used_version(&self) -> i32 {
        self.used_version
    }

    /// The subscription's `latestSupportedVersion` field: [`UNKNOWN`] in versions 1 and 2.
    pub fn advertised_latest_version(&self) -> i32 {
        if self.used_version < EARLIEST_PROBEABLE_VERSION {
            UNKNOWN
        } else {
            self.latest_supported_version
        }
    }

    /// Reacts to the assignment the leader sent (already decoded).
    pub fn on_assignment(&mut self, assignment: &AssignmentInfo) -> Result<MemberReaction> {
        let received = assignment.version;
        let commonly = assignment.commonly_supported_version;
        if received < 1 {
            return Err(Error::TaskAssignment(format!(
                "received an assignment of invalid version {received}"
            )));
        }
        if received > self.used_version {
            return Err(Error::TaskAssignment(format!(
                "received an assignment of version {received}, newer than the version {} \
                 subscription this member sent",
                self.used_version
            )));
        }
        let mut reaction = MemberReaction {
            apply_assignment: true,
            rejoin: false,
            version_change: None,
        };
        if received >= EARLIEST_PROBEABLE_VERSION {
            if commonly > self.latest_supported_version {
                return Err(Error::TaskAssignment(format!(
                    "the leader says the group supports version {commonly}, newer than this \
                     member's latest {}",
                    self.latest_supported_version
                )));
            }
            let from = self.used_version;
            if commonly > from {
                self.used_version = commonly;
                reaction.rejoin = true;
                reaction.version_change = Some(VersionChange::Upgraded { from, to: commonly });
            } else if received < from {
                self.used_version = commonly;
                reaction.rejoin = true;
                reaction.version_change = Some(VersionChange::Downgraded { from, to: commonly });
                reaction.apply_assignment = self.protocol == ProbingProtocol::Current;
            }
        }
        // A follow-up rebalance the leader scheduled for now (v7+).
        if received >= 7 && assignment.next_rebalance_ms == 0 {
            reaction.rejoin = true;
        }
        Ok(reaction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(pairs: &[(i32, i32)]) -> Vec<SubscriptionVersions> {
        pairs
            .iter()
            .map(
                |&(version, latest_supported_version)| SubscriptionVersions {
                    version,
                    latest_supported_version,
                },
            )
            .collect()
    }

    #[test]
    fn leader_answers_at_the_minimum_and_advertises_the_common_latest() {
        let leader = Leader {
            latest_supported_version: 11,
            protocol: ProbingProtocol::Kip268,
        };
        let plan = leader
            .plan(&versions(&[(11, 11), (12, 12), (11, 12)]))
            .unwrap();
        assert_eq!(plan.assignment_version, 11);
        assert_eq!(plan.commonly_supported_version, 11);
        assert_eq!(plan.future_members, vec![1]);
        assert!(plan.future_members_get_empty_assignment);

        let plan = leader.plan(&versions(&[(2, -1), (11, 11)])).unwrap();
        assert_eq!(
            (plan.assignment_version, plan.commonly_supported_version),
            (2, -1)
        );
        assert!(leader.plan(&versions(&[(2, -1), (12, 12)])).is_err());
        let old_leader = Leader {
            latest_supported_version: 2,
            protocol: ProbingProtocol::Current,
        };
        assert!(old_leader.plan(&versions(&[(2, -1), (3, 11)])).is_err());
    }

    #[test]
    fn member_downgrades_then_upgrades() {
        let mut member = Member::new(12, None, ProbingProtocol::Kip268).unwrap();
        let reaction = member.on_assignment(&AssignmentInfo::new(11, 11)).unwrap();
        assert_eq!(member.used_version(), 11);
        assert!(reaction.rejoin && !reaction.apply_assignment);
        let reaction = member.on_assignment(&AssignmentInfo::new(11, 12)).unwrap();
        assert_eq!(member.used_version(), 12);
        assert!(reaction.rejoin && reaction.apply_assignment);
        assert!(member.on_assignment(&AssignmentInfo::new(11, 13)).is_err());

        let forced = Member::new(
            11,
            Some(UpgradeFrom::parse("0.10.0").unwrap()),
            ProbingProtocol::Current,
        );
        assert_eq!(forced.unwrap().used_version(), 1);
        let mut member = Member::new(
            11,
            Some(UpgradeFrom::parse("1.1").unwrap()),
            ProbingProtocol::Current,
        )
        .unwrap();
        assert!(
            member.on_assignment(&AssignmentInfo::new(3, 11)).is_err(),
            "newer than sent"
        );
    }
}

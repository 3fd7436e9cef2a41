//! Kafka Streams' rebalance metadata (spec section 2): the `SubscriptionInfo` each member sends
//! and the `AssignmentInfo` the leader answers with, every version from 1 to 11, byte-exact;
//! version probing (KIP-268) as pure leader and member state machines; `upgrade.from`; and a
//! deterministic group simulator that runs rolling upgrades through real bytes.
//!
//! Decoders never panic and never allocate from an unchecked length: malformed bytes are
//! [`Error::Corrupted`](crate::Error::Corrupted) naming the message, version and field.

mod assignment;
mod assignor_error;
mod host_info;
pub mod modified_utf8;
mod probing;
pub mod simulator;
mod subscription;
mod task_id;
mod upgrade_from;
mod wire;

pub use assignment::{AssignmentInfo, HostPartitions, NO_NEXT_REBALANCE};
pub use assignor_error::AssignorError;
pub use host_info::{HostInfo, TopicPartition};
pub use probing::{
    Leader, LeaderPlan, Member, MemberReaction, ProbingProtocol, SubscriptionVersions,
    VersionChange,
};
pub use subscription::{DecodedSubscription, SubscriptionInfo, LATEST_OFFSET, UNKNOWN_OFFSET_SUM};
pub use task_id::TaskId;
pub use upgrade_from::{
    RebalanceProtocol, UpgradeConfig, UpgradeFrom, UpgradeMode, UPGRADE_FROM_VALUES,
};

use crate::error::{Error, Result};

/// The newest metadata version this library reads and writes (Kafka 3.2+).
pub const LATEST_SUPPORTED_VERSION: i32 = 11;
/// The first version that carries `latestSupportedVersion`, so that probing works (Kafka 2.0).
pub const EARLIEST_PROBEABLE_VERSION: i32 = 3;
/// The first version whose task ids may name a topology (Kafka 3.0).
pub const MIN_NAMED_TOPOLOGY_VERSION: i32 = 10;
/// Stands for an absent version number (versions 1 and 2 have no second version field).
pub const UNKNOWN: i32 = -1;

/// Versions this library can encode or decode as.
fn check_version(version: i32, what: &str) -> Result<()> {
    if (1..=LATEST_SUPPORTED_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: version {version} is not between 1 and {LATEST_SUPPORTED_VERSION}"
        )))
    }
}

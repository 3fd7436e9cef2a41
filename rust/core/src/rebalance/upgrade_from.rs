//! `upgrade.from` (spec 2.7) and KIP-258's `upgrade.mode`.
//!
//! `upgrade.from` names the release a rolling upgrade starts from. From 0.10.0 to 1.1 the old
//! leader cannot read a newer subscription and cannot probe, so new instances must keep sending
//! the old version (1 or 2) until every instance runs the new code: a first rolling bounce with
//! `upgrade.from` set, a second one without it.

use crate::error::{Error, Result};

/// Every value Kafka accepts (`UpgradeFromValues`).
pub const UPGRADE_FROM_VALUES: [&str; 24] = [
    "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0", "1.1", "2.0", "2.1", "2.2", "2.3", "2.4", "2.5",
    "2.6", "2.7", "2.8", "3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8",
];

/// The consumer rebalance protocol an `upgrade.from` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RebalanceProtocol {
    /// Stop-the-world: every member gives up all partitions on each rebalance (before 2.4).
    Eager,
    /// KIP-429 incremental cooperative rebalancing (2.4+, the default).
    Cooperative,
}

/// A validated `upgrade.from` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpgradeFrom {
    value: &'static str,
}

impl UpgradeFrom {
    pub fn parse(value: &str) -> Result<Self> {
        UPGRADE_FROM_VALUES
            .iter()
            .find(|&&known| known == value)
            .map(|&value| UpgradeFrom { value })
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "upgrade.from {value:?} is not a valid value; expected one of {}",
                    UPGRADE_FROM_VALUES.join(", ")
                ))
            })
    }

    pub fn as_str(self) -> &'static str {
        self.value
    }

    /// The subscription version an instance must send while the group may hold instances of
    /// the old release: 1 for 0.10.0, 2 for 0.10.1 to 1.1, and no constraint from 2.0 on.
    pub fn forced_subscription_version(self) -> Option<i32> {
        match self.value {
            "0.10.0" => Some(1),
            "0.10.1" | "0.10.2" | "0.11.0" | "1.0" | "1.1" => Some(2),
            _ => None,
        }
    }

    pub fn rebalance_protocol(self) -> RebalanceProtocol {
        match self.value {
            "0.10.0" | "0.10.1" | "0.10.2" | "0.11.0" | "1.0" | "1.1" | "2.0" | "2.1" | "2.2"
            | "2.3" => RebalanceProtocol::Eager,
            _ => RebalanceProtocol::Cooperative,
        }
    }
}

/// KIP-258's `upgrade.mode`: how the store format is upgraded while `upgrade.from` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpgradeMode {
    /// Each instance rebuilds its stores in the new format next to the old ones (2x disk).
    InPlace,
    /// New instances with new-format stores replace the old instances.
    RollOver,
}

impl UpgradeMode {
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "in_place" => Ok(UpgradeMode::InPlace),
            "roll_over" => Ok(UpgradeMode::RollOver),
            _ => Err(Error::InvalidArgument(format!(
                "upgrade.mode {value:?} is not a valid value; expected in_place or roll_over"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UpgradeMode::InPlace => "in_place",
            UpgradeMode::RollOver => "roll_over",
        }
    }
}

/// `upgrade.from` and `upgrade.mode` together. The mode is validated even when `upgrade.from`
/// is unset, so a typo is reported, but it only takes effect while `upgrade.from` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UpgradeConfig {
    pub upgrade_from: Option<UpgradeFrom>,
    pub upgrade_mode: Option<UpgradeMode>,
}

impl UpgradeConfig {
    pub fn parse(upgrade_from: Option<&str>, upgrade_mode: Option<&str>) -> Result<Self> {
        let upgrade_from = upgrade_from.map(UpgradeFrom::parse).transpose()?;
        let upgrade_mode = upgrade_mode.map(UpgradeMode::parse).transpose()?;
        Ok(UpgradeConfig {
            upgrade_from,
            upgrade_mode: upgrade_mode.filter(|_| upgrade_from.is_some()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_versions_follow_spec_2_7() {
        let forced = |v: &str| UpgradeFrom::parse(v).unwrap().forced_subscription_version();
        assert_eq!(forced("0.10.0"), Some(1));
        for v in ["0.10.1", "0.10.2", "0.11.0", "1.0", "1.1"] {
            assert_eq!(forced(v), Some(2), "{v}");
        }
        for v in &UPGRADE_FROM_VALUES[6..] {
            assert_eq!(forced(v), None, "{v}");
        }
        let protocol = |v: &str| UpgradeFrom::parse(v).unwrap().rebalance_protocol();
        assert_eq!(protocol("2.3"), RebalanceProtocol::Eager);
        assert_eq!(protocol("2.4"), RebalanceProtocol::Cooperative);
    }

    #[test]
    fn rejects_near_misses() {
        for bad in [
            "0.10.0.x", "2.9", "3.9", "4.0", "", " 2.0", "2.0 ", "020", "1.2",
        ] {
            let error = UpgradeFrom::parse(bad).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{bad}");
        }
    }

    #[test]
    fn mode_is_validated_and_ignored_without_upgrade_from() {
        let config = UpgradeConfig::parse(None, Some("in_place")).unwrap();
        assert_eq!(config.upgrade_mode, None);
        let config = UpgradeConfig::parse(Some("1.1"), Some("roll_over")).unwrap();
        assert_eq!(config.upgrade_mode, Some(UpgradeMode::RollOver));
        assert!(UpgradeConfig::parse(None, Some("inplace")).is_err());
    }
}

//! A topic's log configuration, with Kafka's topic-level config names and defaults.

use crate::error::{Error, Result};
use crate::record::{Compression, TimestampType};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What happens to old data (`cleanup.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CleanupPolicy {
    /// `delete`: whole segments past `retention.ms` / `retention.bytes` are deleted.
    Delete,
    /// `compact`: only the latest record of each key is kept.
    Compact,
    /// `compact,delete`: both.
    CompactAndDelete,
}

impl CleanupPolicy {
    /// Whether [`Partition::delete_expired`](super::Partition::delete_expired) does anything.
    pub fn deletes(self) -> bool {
        matches!(
            self,
            CleanupPolicy::Delete | CleanupPolicy::CompactAndDelete
        )
    }

    /// Whether [`Partition::compact`](super::Partition::compact) does anything, and whether
    /// appends must carry keys (Kafka rejects keyless records on compacted topics).
    pub fn compacts(self) -> bool {
        matches!(
            self,
            CleanupPolicy::Compact | CleanupPolicy::CompactAndDelete
        )
    }
}

/// Kafka's topic configs that the log honours. Times are milliseconds, sizes bytes; integer
/// types are Kafka's (`int` is `i32`, `long` is `i64`). Writes always use message format v1.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes` (default 1 GiB): roll a new segment when the active one would exceed it.
    pub segment_bytes: i32,
    /// `segment.ms` (default 7 days): roll when the active segment's first record is this old
    /// compared with the records being appended (see `Partition::append`).
    pub segment_ms: i64,
    /// `message.timestamp.type` (default CreateTime): keep the writer's timestamps, or stamp
    /// every record with the append time.
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms` (default `i64::MAX`): how far in the past a CreateTime
    /// timestamp may be.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (default `i64::MAX`): how far in the future a CreateTime
    /// timestamp may be.
    pub message_timestamp_after_max_ms: i64,
    /// `message.timestamp.difference.max.ms` (deprecated since Kafka 3.6, default `i64::MAX`):
    /// used for each of the two bounds above that is left at its default (spec 3.6).
    pub message_timestamp_difference_max_ms: i64,
    /// `retention.ms` (default 7 days; negative, e.g. -1, is infinite).
    pub retention_ms: i64,
    /// `retention.bytes` (default -1; negative is infinite): per partition.
    pub retention_bytes: i64,
    /// `cleanup.policy` (default delete).
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms` (default 1 day): how long compaction keeps a tombstone.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio` (default 0.5): compaction runs once this share of the
    /// sealed segments' bytes was written since the last one.
    pub min_cleanable_dirty_ratio: f64,
    /// `index.interval.bytes` (default 4096): bytes of log between two index entries.
    pub index_interval_bytes: i32,
    /// `compression.type` of what this log writes (default none; zstd needs format v2).
    pub compression: Compression,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * DAY_MS,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: i64::MAX,
            message_timestamp_difference_max_ms: i64::MAX,
            retention_ms: 7 * DAY_MS,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::Delete,
            delete_retention_ms: DAY_MS,
            min_cleanable_dirty_ratio: 0.5,
            index_interval_bytes: 4096,
            compression: Compression::None,
        }
    }
}

/// The smallest `segment.bytes`: Kafka's old minimum, one v0 message (`RECORD_OVERHEAD_V0`).
/// Tiny segments are useful in tests.
const MIN_SEGMENT_BYTES: i32 = 14;

impl LogConfig {
    /// Sets one config from its Kafka name and string value, as a `kafka-configs` user would.
    /// On error the config is unchanged.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let mut updated = self.clone();
        updated.apply(name, value)?;
        updated.validate()?;
        *self = updated;
        Ok(())
    }

    fn apply(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "segment.bytes" => self.segment_bytes = parse_number(name, value)?,
            "segment.ms" => self.segment_ms = parse_number(name, value)?,
            "message.timestamp.type" => {
                self.message_timestamp_type = match value {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(invalid_value(name, value, "CreateTime or LogAppendTime")),
                }
            }
            "message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = parse_number(name, value)?
            }
            "message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = parse_number(name, value)?
            }
            // The KIP-32 seed's name for it, which Kafka never shipped (spec 3.6).
            "message.timestamp.difference.max.ms" | "max.message.time.difference.ms" => {
                self.message_timestamp_difference_max_ms = parse_number(name, value)?
            }
            "retention.ms" => self.retention_ms = parse_number(name, value)?,
            "retention.bytes" => self.retention_bytes = parse_number(name, value)?,
            "cleanup.policy" => {
                let mut parts: Vec<&str> = value.split(',').map(str::trim).collect();
                parts.sort_unstable();
                self.cleanup_policy = match parts.as_slice() {
                    ["delete"] => CleanupPolicy::Delete,
                    ["compact"] => CleanupPolicy::Compact,
                    ["compact", "delete"] => CleanupPolicy::CompactAndDelete,
                    _ => return Err(invalid_value(name, value, "delete, compact or both")),
                }
            }
            "delete.retention.ms" => self.delete_retention_ms = parse_number(name, value)?,
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|ratio: &f64| (0.0..=1.0).contains(ratio))
                    .ok_or_else(|| invalid_value(name, value, "a number from 0 to 1"))?
            }
            "index.interval.bytes" => self.index_interval_bytes = parse_number(name, value)?,
            "compression.type" => {
                self.compression = match value {
                    // `producer` keeps what the producer sent; kstate is the producer and sends
                    // uncompressed sets unless told otherwise.
                    "uncompressed" | "none" | "producer" => Compression::None,
                    "gzip" => Compression::Gzip,
                    "snappy" => Compression::Snappy,
                    "lz4" => Compression::Lz4,
                    _ => {
                        return Err(invalid_value(
                            name,
                            value,
                            "uncompressed, gzip, snappy or lz4 (zstd needs message format v2)",
                        ))
                    }
                }
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown or unsupported log config {name:?}"
                )))
            }
        }
        Ok(())
    }

    /// Checks every value against Kafka's validators (with a smaller `segment.bytes` minimum).
    pub fn validate(&self) -> Result<()> {
        let checks: [(&str, i64, i64); 7] = [
            (
                "segment.bytes",
                i64::from(self.segment_bytes),
                i64::from(MIN_SEGMENT_BYTES),
            ),
            ("segment.ms", self.segment_ms, 1),
            (
                "message.timestamp.before.max.ms",
                self.message_timestamp_before_max_ms,
                0,
            ),
            (
                "message.timestamp.after.max.ms",
                self.message_timestamp_after_max_ms,
                0,
            ),
            (
                "message.timestamp.difference.max.ms",
                self.message_timestamp_difference_max_ms,
                0,
            ),
            ("delete.retention.ms", self.delete_retention_ms, 0),
            (
                "index.interval.bytes",
                i64::from(self.index_interval_bytes),
                0,
            ),
        ];
        for (name, value, minimum) in checks {
            if value < minimum {
                return Err(Error::InvalidArgument(format!(
                    "log config {name} is {value}, must be at least {minimum}"
                )));
            }
        }
        Ok(())
    }

    /// The effective `message.timestamp.before.max.ms`: the deprecated
    /// `message.timestamp.difference.max.ms` while the new config is at its default (spec 3.6).
    pub fn timestamp_before_max_ms(&self) -> i64 {
        if self.message_timestamp_before_max_ms == i64::MAX {
            self.message_timestamp_difference_max_ms
        } else {
            self.message_timestamp_before_max_ms
        }
    }

    /// The effective `message.timestamp.after.max.ms`, as [`Self::timestamp_before_max_ms`].
    pub fn timestamp_after_max_ms(&self) -> i64 {
        if self.message_timestamp_after_max_ms == i64::MAX {
            self.message_timestamp_difference_max_ms
        } else {
            self.message_timestamp_after_max_ms
        }
    }
}

fn parse_number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value
        .trim()
        .parse()
        .map_err(|_| invalid_value(name, value, "an integer in range"))
}

fn invalid_value(name: &str, value: &str, expected: &str) -> Error {
    Error::InvalidArgument(format!(
        "log config {name} = {value:?} is invalid: expected {expected}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let config = LogConfig::default();
        assert_eq!(config.segment_bytes, 1_073_741_824);
        assert_eq!(config.segment_ms, 604_800_000);
        assert_eq!(config.retention_ms, 604_800_000);
        assert_eq!(config.delete_retention_ms, 86_400_000);
        assert_eq!(config.index_interval_bytes, 4096);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn deprecated_difference_applies_only_to_bounds_left_at_default() {
        let mut config = LogConfig::default();
        config
            .set("message.timestamp.difference.max.ms", "1000")
            .unwrap();
        config.set("message.timestamp.after.max.ms", "50").unwrap();
        assert_eq!(config.timestamp_before_max_ms(), 1000);
        assert_eq!(config.timestamp_after_max_ms(), 50);
    }

    #[test]
    fn set_parses_kafka_names_and_rejects_bad_values() {
        let mut config = LogConfig::default();
        config.set("cleanup.policy", "delete, compact").unwrap();
        assert_eq!(config.cleanup_policy, CleanupPolicy::CompactAndDelete);
        config.set("compression.type", "lz4").unwrap();
        assert_eq!(config.compression, Compression::Lz4);
        config
            .set("message.timestamp.type", "LogAppendTime")
            .unwrap();
        assert_eq!(config.message_timestamp_type, TimestampType::LogAppendTime);
        assert!(config.set("compression.type", "zstd").is_err());
        assert!(config.set("segment.bytes", "3").is_err());
        assert!(config.set("segment.bytes", "x").is_err());
        assert!(config.set("no.such.config", "1").is_err());
    }
}

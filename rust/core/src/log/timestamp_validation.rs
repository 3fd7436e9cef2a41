//! The broker's timestamp check (spec 3.6, Kafka's `LogValidator.validateTimestamp`): with
//! `message.timestamp.type = CreateTime`, a record timestamp other than -1 must lie within
//! `[now - before.max.ms, now + after.max.ms]`, or the whole batch is rejected.
//!
//! The rejection is [`Error::InvalidTimestamp`], its message starting with Kafka's error name
//! and code, `INVALID_TIMESTAMP (32)`.

use super::config::LogConfig;
use crate::error::{Error, Result};
use crate::format::timestamped::NO_TIMESTAMP;
use crate::record::TimestampType;

/// The start of every timestamp rejection message.
pub const INVALID_TIMESTAMP: &str = "INVALID_TIMESTAMP (32)";

/// Checks every timestamp of a batch about to be appended at `now_ms`. Timestamps must be -1
/// or non-negative whatever the type (Kafka's record rule); with CreateTime they must also be
/// within the configured bounds of `now_ms`.
pub(crate) fn validate_timestamps(
    config: &LogConfig,
    timestamps: impl Iterator<Item = i64>,
    now_ms: i64,
) -> Result<()> {
    let before_max = config.timestamp_before_max_ms();
    let after_max = config.timestamp_after_max_ms();
    let check_bounds = config.message_timestamp_type == TimestampType::CreateTime;
    let mut total = 0usize;
    let mut out_of_range = 0usize;
    let mut first_bad: Option<i64> = None;
    for timestamp in timestamps {
        total += 1;
        if timestamp < NO_TIMESTAMP {
            return Err(Error::InvalidTimestamp(format!(
                "{INVALID_TIMESTAMP}: record {} has timestamp {timestamp}, which is negative and \
                 not -1 (no timestamp); nothing was appended",
                total - 1
            )));
        }
        let too_old = i128::from(now_ms) - i128::from(timestamp) > i128::from(before_max);
        let too_new = i128::from(timestamp) - i128::from(now_ms) > i128::from(after_max);
        if check_bounds && timestamp != NO_TIMESTAMP && (too_old || too_new) {
            out_of_range += 1;
            first_bad.get_or_insert(timestamp);
        }
    }
    let Some(first_bad) = first_bad else {
        return Ok(());
    };
    Err(Error::InvalidTimestamp(format!(
        "{INVALID_TIMESTAMP}: {out_of_range} of {total} records have timestamps outside \
         [{}, {}] (now {now_ms}, message.timestamp.before.max.ms {before_max}, \
         message.timestamp.after.max.ms {after_max}; first rejected timestamp {first_bad}); \
         nothing was appended",
        now_ms.saturating_sub(before_max),
        now_ms.saturating_add(after_max),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(before: i64, after: i64) -> LogConfig {
        LogConfig {
            message_timestamp_before_max_ms: before,
            message_timestamp_after_max_ms: after,
            ..LogConfig::default()
        }
    }

    #[test]
    fn bounds_are_inclusive_and_no_timestamp_passes() {
        let config = bounded(100, 10);
        assert!(validate_timestamps(&config, [900, 1000, 1010, -1].into_iter(), 1000).is_ok());
        let error = validate_timestamps(&config, [899, 1000, 1011].into_iter(), 1000)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with(INVALID_TIMESTAMP), "{error}");
        assert!(error.contains("2 of 3 records"), "{error}");
        assert!(error.contains("[900, 1010]"), "{error}");
    }

    #[test]
    fn defaults_accept_anything_and_extremes_do_not_overflow() {
        let config = LogConfig::default();
        assert!(validate_timestamps(&config, [0, i64::MAX].into_iter(), i64::MAX).is_ok());
        let strict = bounded(0, 0);
        assert!(validate_timestamps(&strict, [i64::MAX].into_iter(), 0).is_err());
        assert!(validate_timestamps(&strict, [0].into_iter(), i64::MAX).is_err());
    }

    #[test]
    fn deprecated_difference_bounds_both_sides() {
        let config = LogConfig {
            message_timestamp_difference_max_ms: 5,
            ..LogConfig::default()
        };
        assert!(validate_timestamps(&config, [95, 105].into_iter(), 100).is_ok());
        assert!(validate_timestamps(&config, [94].into_iter(), 100).is_err());
        assert!(validate_timestamps(&config, [106].into_iter(), 100).is_err());
    }

    #[test]
    fn log_append_time_ignores_bounds_but_not_negative_timestamps() {
        let config = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..bounded(0, 0)
        };
        assert!(validate_timestamps(&config, [5].into_iter(), 1000).is_ok());
        assert!(validate_timestamps(&config, [-5].into_iter(), 1000).is_err());
    }
}

//! Time segments of window and session stores (spec 1.8): each segment is its own RocksDB at
//! `<task_dir>/<store>/<store>.<segment start ms>`, so expired data goes by deleting a directory.

use std::path::Path;

use crate::error::Result;

/// The file in each segment directory kstate creates that records the segment interval it was
/// created with. The names alone cannot tell a store reopened with a retention whose interval
/// divides the old one: every old segment start is a start of the new interval too.
const INTERVAL_FILE: &str = "kstate-segment-interval";

/// Kafka's `Stores` choose `max(retention / 2, 60 s)`.
pub fn segment_interval(retention_ms: i64) -> i64 {
    (retention_ms / 2).max(60_000)
}

/// `segmentId(ts) = ts / segmentInterval` (Java's truncating division).
pub fn segment_id(timestamp: i64, interval: i64) -> i64 {
    timestamp / interval
}

/// The directory name of segment `id`: `<store>.<start ms>`.
pub fn segment_name(store: &str, id: i64, interval: i64) -> String {
    format!("{store}.{}", id.saturating_mul(interval))
}

/// What a segment directory's name says: the segment's start in ms, and whether the name gives
/// it exactly (`<store>.<ms>`, the legacy `<store>:<ms>`) or only to the minute (the legacy
/// `<store>-yyyyMMddHHmm`, UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentDirName {
    pub start_ms: i64,
    pub exact: bool,
}

impl SegmentDirName {
    /// Whether the name is a segment start of `interval`: a store written with another segment
    /// interval (another retention) has names that are not, and their rows would be read, kept
    /// and expired as the wrong segment's.
    pub fn fits(&self, interval: i64) -> bool {
        !self.exact || self.start_ms % interval == 0
    }
}

/// A directory name of `store`'s segments: `<store>.<ms>`, or the legacy `<store>:<ms>` and
/// `<store>-yyyyMMddHHmm` (UTC) forms that Kafka renames on open (see `SegmentDirName`). `None`:
/// not a segment of it.
pub fn parse_segment_dir(store: &str, name: &str) -> Option<SegmentDirName> {
    let rest = name.strip_prefix(store)?;
    if let Some(ms) = rest.strip_prefix('.').or_else(|| rest.strip_prefix(':')) {
        return Some(SegmentDirName {
            start_ms: parse_digits(ms)?,
            exact: true,
        });
    }
    Some(SegmentDirName {
        start_ms: legacy_date_millis(rest.strip_prefix('-')?)?,
        exact: false,
    })
}

/// Records in a new segment's directory the interval it is created with (atomically, durably).
pub fn write_segment_interval(segment_dir: &Path, interval: i64) -> Result<()> {
    crate::log::write_number_file(&segment_dir.join(INTERVAL_FILE), interval)
}

/// The interval a segment directory was created with; `None` when it does not say (a segment of
/// an older kstate, or of Kafka Streams).
pub fn read_segment_interval(segment_dir: &Path) -> Result<Option<i64>> {
    crate::log::read_number_file(&segment_dir.join(INTERVAL_FILE), "segment interval file")
}

fn parse_digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Milliseconds of a `yyyyMMddHHmm` UTC date.
fn legacy_date_millis(s: &str) -> Option<i64> {
    if s.len() != 12 {
        return None;
    }
    let field = |from: usize, to: usize| parse_digits(s.get(from..to)?);
    let (year, month, day) = (field(0, 4)?, field(4, 6)?, field(6, 8)?);
    let (hour, minute) = (field(8, 10)?, field(10, 12)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_id_and_name_follow_kafka() {
        assert_eq!(segment_interval(1_000), 60_000);
        assert_eq!(segment_interval(86_400_000), 43_200_000);
        let interval = 60_000;
        assert_eq!(segment_id(119_999, interval), 1);
        assert_eq!(segment_name("counts", 2, interval), "counts.120000");
        let dir = parse_segment_dir("counts", "counts.120000").unwrap();
        assert_eq!((segment_id(dir.start_ms, interval), dir.exact), (2, true));
    }

    #[test]
    fn legacy_names_parse_to_the_same_segment() {
        let interval = 60_000;
        let colon = parse_segment_dir("s", "s:120000").unwrap();
        assert_eq!(
            (segment_id(colon.start_ms, interval), colon.exact),
            (2, true)
        );
        // 2019-01-01 00:02 UTC = 1546300920000 ms.
        let date = parse_segment_dir("s", "s-201901010002").unwrap();
        assert_eq!((date.start_ms, date.exact), (1_546_300_920_000, false));
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn names_of_another_interval_do_not_fit() {
        let thirty_minutes = parse_segment_dir("w", "w.1700001000000").unwrap();
        assert!(thirty_minutes.fits(1_800_000));
        assert!(
            thirty_minutes.fits(5_400_000),
            "1700001000000 is a multiple of 90 minutes too"
        );
        assert!(!parse_segment_dir("w", "w.1700002800000")
            .unwrap()
            .fits(5_400_000));
        assert!(!parse_segment_dir("w", "w:90000").unwrap().fits(60_000));
        // Minute names cannot say: they fit.
        assert!(parse_segment_dir("s", "s-201901010002")
            .unwrap()
            .fits(7_000_000));
    }

    #[test]
    fn a_segment_says_the_interval_it_was_created_with() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_segment_interval(dir.path()).unwrap(), None);
        write_segment_interval(dir.path(), 1_800_000).unwrap();
        assert_eq!(read_segment_interval(dir.path()).unwrap(), Some(1_800_000));
        std::fs::write(dir.path().join(INTERVAL_FILE), "half an hour").unwrap();
        let error = read_segment_interval(dir.path()).unwrap_err();
        assert!(matches!(error, crate::Error::Corrupted(_)), "{error:?}");
    }

    #[test]
    fn other_names_are_not_segments() {
        for name in [
            "s",
            "s.",
            "s.12a",
            "t.120000",
            "s-2019",
            "s-201913010000",
            "s.-5",
            ".s.uncommitted",
        ] {
            assert_eq!(parse_segment_dir("s", name), None, "{name}");
        }
    }
}

//! Time to live of timestamped values: a value whose timestamp is `ttl_ms` or more behind the
//! store's clock (stream time or wall clock) is expired. Reads hide expired values at once; a
//! RocksDB compaction filter reading the 8-byte timestamp prefix removes them from disk in the
//! background, so expiry never pauses processing with a sweep.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rocksdb::compaction_filter::Decision;

use crate::error::{Error, Result};
use crate::key_range::{Direction, KeyRange};

/// What "now" is for expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlClock {
    /// The largest value timestamp the store has seen (Kafka's observed stream time), staged
    /// puts and restored records included; each commit records it with the changelog offset,
    /// so a reopened store starts from its last committed stream time.
    StreamTime,
    /// Milliseconds since the epoch by the system clock.
    WallClock,
}

/// A store's TTL. Clones share the stream time, so a store's segments and the compaction filters
/// RocksDB runs on background threads all see the same clock.
#[derive(Debug, Clone)]
pub struct Ttl {
    ttl_ms: i64,
    clock: TtlClock,
    stream_time: Arc<AtomicI64>,
}

fn timestamp_of(stored: &[u8]) -> Option<i64> {
    let prefix: [u8; 8] = stored.get(..8)?.try_into().ok()?;
    Some(i64::from_be_bytes(prefix))
}

/// Whether a value stored with the 8-byte timestamp prefix is expired at `cutoff`. Values
/// without a known timestamp (-1: legacy, migrated) never expire.
pub fn expired_at(cutoff: i64, stored: &[u8]) -> bool {
    timestamp_of(stored).is_some_and(|ts| ts >= 0 && ts <= cutoff)
}

impl Ttl {
    pub fn new(ttl_ms: i64, clock: TtlClock) -> Result<Self> {
        if ttl_ms <= 0 {
            return Err(Error::InvalidArgument(format!(
                "ttl_ms must be > 0, got {ttl_ms}"
            )));
        }
        Ok(Self {
            ttl_ms,
            clock,
            stream_time: Arc::new(AtomicI64::new(i64::MIN)),
        })
    }

    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    pub fn clock(&self) -> TtlClock {
        self.clock
    }

    /// Advances stream time with the timestamp of a stored (prefixed) value.
    pub fn observe(&self, stored: &[u8]) {
        if self.clock == TtlClock::StreamTime {
            if let Some(ts) = timestamp_of(stored) {
                self.stream_time.fetch_max(ts, Ordering::Relaxed);
            }
        }
    }

    /// Advances stream time to `timestamp` (a committed stream time read back on open).
    pub fn advance_to(&self, timestamp: i64) {
        if self.clock == TtlClock::StreamTime {
            self.stream_time.fetch_max(timestamp, Ordering::Relaxed);
        }
    }

    /// Stream time to record with a commit: `None` for the wall clock or before any value.
    pub fn stream_time(&self) -> Option<i64> {
        let time = self.stream_time.load(Ordering::Relaxed);
        (self.clock == TtlClock::StreamTime && time != i64::MIN).then_some(time)
    }

    /// The clock's current time; `i64::MIN` before stream time has seen a value.
    pub fn now(&self) -> i64 {
        match self.clock {
            TtlClock::StreamTime => self.stream_time.load(Ordering::Relaxed),
            TtlClock::WallClock => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }
    }

    /// Values with a timestamp at or below this are expired.
    pub fn cutoff(&self) -> i64 {
        self.now().saturating_sub(self.ttl_ms)
    }

    pub fn is_expired(&self, stored: &[u8]) -> bool {
        expired_at(self.cutoff(), stored)
    }

    /// The RocksDB compaction filter of the timestamped column family: drops expired values.
    /// (RocksDB turns a removal into a tombstone where older versions may lie below, so nothing
    /// older resurfaces.)
    pub fn compaction_filter(&self) -> impl FnMut(u32, &[u8], &[u8]) -> Decision + Send + 'static {
        let ttl = self.clone();
        move |_level, _key, value| {
            if ttl.is_expired(value) {
                Decision::Remove
            } else {
                Decision::Keep
            }
        }
    }
}

/// Runs a chunked `scan` of `range` and drops expired rows, scanning on until `limit` visible
/// rows are found or the range is exhausted (a short chunk means "no more" to the caller).
pub fn scan_visible(
    ttl: Option<&Ttl>,
    range: &KeyRange,
    direction: Direction,
    limit: usize,
    scan: impl Fn(&KeyRange, usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let Some(ttl) = ttl else {
        return scan(range, limit);
    };
    let cutoff = ttl.cutoff();
    let mut out = Vec::new();
    let mut rest = range.clone();
    loop {
        let want = limit - out.len();
        let rows = scan(&rest, want)?;
        let exhausted = rows.len() < want;
        if let Some((last, _)) = rows.last() {
            rest = rest.after(last, direction);
        }
        out.extend(rows.into_iter().filter(|(_, v)| !expired_at(cutoff, v)));
        if exhausted || out.len() >= limit {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timestamped::encode;

    #[test]
    fn stream_time_expiry_is_ttl_or_more_behind_the_largest_timestamp() {
        let ttl = Ttl::new(100, TtlClock::StreamTime).unwrap();
        assert!(!ttl.is_expired(&encode(0, b"v")), "no stream time yet");
        ttl.observe(&encode(1_000, b"v"));
        ttl.observe(&encode(500, b"late"));
        assert_eq!(ttl.now(), 1_000);
        assert!(ttl.is_expired(&encode(900, b"v")));
        assert!(!ttl.is_expired(&encode(901, b"v")));
        assert!(
            !ttl.is_expired(&encode(-1, b"legacy")),
            "unknown time never expires"
        );
        assert!(!ttl.is_expired(b"short"));
    }

    #[test]
    fn wall_clock_and_bad_ttl() {
        let ttl = Ttl::new(60_000, TtlClock::WallClock).unwrap();
        let now = ttl.now();
        assert!(ttl.is_expired(&encode(now - 61_000, b"")));
        assert!(!ttl.is_expired(&encode(now, b"")));
        assert!(matches!(
            Ttl::new(0, TtlClock::WallClock),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn scan_visible_keeps_scanning_past_expired_rows() {
        let ttl = Ttl::new(10, TtlClock::StreamTime).unwrap();
        ttl.observe(&encode(100, b""));
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0u8..10)
            .map(|i| (vec![i], encode(if i % 3 == 0 { 95 } else { 5 }, b"")))
            .collect();
        let scan = |range: &KeyRange, limit: usize| {
            Ok(rows
                .iter()
                .filter(|(k, _)| range.contains(k))
                .take(limit)
                .cloned()
                .collect())
        };
        let got = scan_visible(Some(&ttl), &KeyRange::all(), Direction::Forward, 2, scan).unwrap();
        assert_eq!(
            got.iter().map(|(k, _)| k[0]).collect::<Vec<_>>(),
            vec![0, 3]
        );
        let rest = KeyRange::all().after(&[3], Direction::Forward);
        let got = scan_visible(Some(&ttl), &rest, Direction::Forward, 5, scan).unwrap();
        assert_eq!(
            got.iter().map(|(k, _)| k[0]).collect::<Vec<_>>(),
            vec![6, 9]
        );
    }
}

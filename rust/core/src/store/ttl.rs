//! Time to live of timestamped values: a value whose timestamp is `ttl_ms` or more behind the
//! store's clock (stream time or wall clock) is expired. Reads hide expired values at once; a
//! RocksDB compaction filter reading the 8-byte timestamp prefix removes them from disk in the
//! background, so expiry never pauses processing with a sweep.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rocksdb::compaction_filter::Decision;

use crate::error::{Error, Result};
use crate::store::key_range::Direction;
use crate::store::merge::{merge_visit, ScanLimit, Scanned, SortedSource, VisitEntry};

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

/// The live entries of the merge of `sources` (see `merge_visit`) passed to `visit` up to
/// `limit`, values the TTL says expired skipped; says what was visited.
pub fn merge_live<S: SortedSource>(
    ttl: Option<&Ttl>,
    sources: &mut [S],
    direction: Direction,
    limit: ScanLimit,
    visit: &mut VisitEntry<'_>,
) -> Result<Scanned> {
    match ttl {
        None => merge_visit(sources, direction, limit, &mut |k, v| {
            visit(k, v).map(|()| true)
        }),
        Some(ttl) => {
            let cutoff = ttl.cutoff();
            merge_visit(sources, direction, limit, &mut |k, v| {
                if expired_at(cutoff, v) {
                    return Ok(false);
                }
                visit(k, v).map(|()| true)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::timestamped::encode;

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
    fn merge_live_skips_expired_rows_and_counts_only_live_ones() {
        use crate::store::merge::IterSource;
        let ttl = Ttl::new(10, TtlClock::StreamTime).unwrap();
        ttl.observe(&encode(100, b""));
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0u8..10)
            .map(|i| (vec![i], encode(if i % 3 == 0 { 95 } else { 5 }, b"")))
            .collect();
        let live = |limit: usize| {
            let items = rows.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice())));
            let mut sources: Vec<Box<dyn SortedSource>> = vec![Box::new(IterSource::new(items))];
            let mut keys = Vec::new();
            let scanned = merge_live(
                Some(&ttl),
                &mut sources,
                Direction::Forward,
                ScanLimit::rows(limit),
                &mut |k, _| {
                    keys.push(k[0]);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(scanned.rows, keys.len());
            keys
        };
        assert_eq!(live(2), vec![0, 3]);
        assert_eq!(live(10), vec![0, 3, 6, 9]);
    }
}

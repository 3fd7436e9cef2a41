//! Session stores (spec 1.7): an aggregate per (key, session start, session end) in a segmented
//! store, keyed `key || end || start` and segmented by end time, as Kafka's `RocksDBSessionStore`.
//! `find_sessions(key, earliest_end, latest_start)` finds the sessions that end at or after
//! `earliest_end` and start at or before `latest_start`: the sessions a new record may merge with.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::key_schema::session;
use crate::segmented::segmented_store::{
    min_live_time, SegmentQuery, SegmentedKeys, SegmentedStore, StorePuts,
};
use crate::segmented::segments::segment_id;
use crate::store::key_range::{successor, Direction, KeyRange};

/// How a store's queries are shaped: retention and segment interval.
#[derive(Debug, Clone, Copy)]
pub struct SessionQueries {
    pub retention_ms: i64,
    pub segment_interval: i64,
}

impl SessionQueries {
    /// `find_sessions` of one key (`key_from == key_to`, exact bounds) or a key range (`None`
    /// unbounded); `fetch(key)` is `find_sessions(key, 0, i64::MAX)`.
    pub fn find(
        &self,
        stream_time: i64,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: i64,
        latest_start: i64,
        direction: Direction,
    ) -> SegmentQuery {
        let earliest_end = earliest_end.max(min_live_time(stream_time, self.retention_ms));
        if let (Some(f), Some(t)) = (key_from, key_to) {
            if f > t {
                return SegmentQuery::empty(direction);
            }
        }
        let range = match (key_from, key_to) {
            (Some(f), Some(t)) if f == t => KeyRange {
                lower: Some(session::lower_range_fixed_size(f, earliest_end)),
                upper: Some(successor(&session::upper_range_fixed_size(t, latest_start))),
            },
            _ => KeyRange {
                lower: key_from.map(|k| session::lower_range(k, earliest_end)),
                upper: key_to.map(|k| successor(&session::scan_upper_bound(k, latest_start))),
            },
        };
        let (key_from, key_to) = (key_from.map(<[u8]>::to_vec), key_to.map(<[u8]>::to_vec));
        SegmentQuery {
            // Sessions live in the segment of their end; any end from `earliest_end` on counts.
            first_segment: segment_id(earliest_end, self.segment_interval),
            last_segment: i64::MAX,
            range,
            direction,
            accept: Arc::new(move |store_key| {
                let k = session::from_store_key(store_key)?;
                Ok(key_from.as_deref().is_none_or(|f| k.key >= f)
                    && key_to.as_deref().is_none_or(|t| k.key <= t)
                    && k.end >= earliest_end
                    && k.start <= latest_start)
            }),
        }
    }

    /// `(key, session start, session end)` of a store key.
    pub fn decode<'a>(&self, store_key: &'a [u8]) -> Result<(&'a [u8], i64, i64)> {
        let k = session::from_store_key(store_key)?;
        Ok((k.key, k.start, k.end))
    }
}

/// A session put: key, session start and end, aggregate (`None` removes the session).
pub type SessionWrite<'a> = (&'a [u8], i64, i64, Option<&'a [u8]>);

pub struct SessionStore {
    segments: SegmentedStore,
    queries: SessionQueries,
}

fn check_session(start: i64, end: i64) -> Result<()> {
    if start < 0 || end < start {
        return Err(Error::InvalidArgument(format!(
            "a session needs 0 <= start <= end, got start {start}, end {end}"
        )));
    }
    Ok(())
}

impl SegmentedKeys for SessionStore {
    fn segments(&self) -> &SegmentedStore {
        &self.segments
    }

    fn segments_mut(&mut self) -> &mut SegmentedStore {
        &mut self.segments
    }

    fn segment_time(store_key: &[u8]) -> Result<i64> {
        Ok(session::from_store_key(store_key)?.end)
    }
}

impl SessionStore {
    pub fn new(segments: SegmentedStore) -> Self {
        let options = segments.options();
        let queries = SessionQueries {
            retention_ms: options.retention_ms,
            segment_interval: options.segment_interval,
        };
        Self { segments, queries }
    }

    pub fn queries(&self) -> &SessionQueries {
        &self.queries
    }

    /// Writes the aggregate of a session (`None` removes it). Returns `false` when the
    /// session's segment has expired and the put was dropped.
    pub fn put(&mut self, key: &[u8], start: i64, end: i64, value: Option<&[u8]>) -> Result<bool> {
        check_session(start, end)?;
        self.segments
            .put(&session::to_store_key(key, start, end), end, value)
    }

    /// `put` of each `(key, start, end, value)` in turn; returns how many were dropped as
    /// expired. Every session's bounds are checked before anything is written.
    pub fn put_all(&mut self, writes: &[SessionWrite<'_>]) -> Result<usize> {
        for &(_, start, end, _) in writes {
            check_session(start, end)?;
        }
        let mut store_key = Vec::new();
        let key_len = writes.first().map_or(0, |(key, _, _, _)| key.len() + 16);
        let mut puts = StorePuts::with_capacity(writes.len(), key_len);
        for &(key, start, end, value) in writes {
            session::write_store_key(&mut store_key, key, start, end);
            puts.push(&store_key, end, value);
        }
        self.segments.put_all(&puts)
    }

    /// Removes a session (Kafka's `remove`: no segment is created, no drop counted).
    pub fn remove(&mut self, key: &[u8], start: i64, end: i64) -> Result<()> {
        check_session(start, end)?;
        self.segments
            .remove(&session::to_store_key(key, start, end), end)
    }

    /// `fetchSession(key, start, end)`: the aggregate of exactly that session.
    pub fn fetch_session(&mut self, key: &[u8], start: i64, end: i64) -> Result<Option<Vec<u8>>> {
        check_session(start, end)?;
        self.segments
            .get(&session::to_store_key(key, start, end), end)
    }
}

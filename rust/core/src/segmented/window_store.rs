//! Window stores (spec 1.6): values per (key, window start) in a segmented store, keyed
//! `key || start || seqnum`. Without duplicates the sequence number is 0 and a put overwrites;
//! with duplicates (stream-stream joins) every put gets the next number, as Kafka's
//! `RocksDBWindowStore` does. Window end = start + size. Queries are byte bounds plus a filter,
//! built against a stream time so the store and its read-committed views share them.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::key_schema::window;
use crate::segmented::segmented_store::{
    min_live_time, scan, ScanCursor, SegmentQuery, SegmentReader, SegmentedKeys, SegmentedStore,
    StorePuts,
};
use crate::segmented::segments::segment_id;
use crate::store::key_range::{successor, Direction, KeyRange};

/// How a store's queries are shaped: retention, segment interval, window size.
#[derive(Debug, Clone, Copy)]
pub struct WindowQueries {
    pub retention_ms: i64,
    pub segment_interval: i64,
    pub window_size: i64,
}

impl WindowQueries {
    /// `from` raised to what retention still shows at `stream_time`; `None`: nothing to find.
    fn live_from(&self, stream_time: i64, from: i64, to: i64) -> Option<i64> {
        let from = from.max(min_live_time(stream_time, self.retention_ms));
        (from <= to).then_some(from)
    }

    fn query(
        &self,
        from: i64,
        to: i64,
        range: KeyRange,
        direction: Direction,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> SegmentQuery {
        let (key_from, key_to) = (key_from.map(<[u8]>::to_vec), key_to.map(<[u8]>::to_vec));
        SegmentQuery {
            first_segment: segment_id(from, self.segment_interval),
            last_segment: segment_id(to, self.segment_interval),
            range,
            direction,
            accept: Arc::new(move |store_key| {
                let k = window::from_store_key(store_key)?;
                Ok(key_from.as_deref().is_none_or(|f| k.key >= f)
                    && key_to.as_deref().is_none_or(|t| k.key <= t)
                    && (from..=to).contains(&k.start))
            }),
        }
    }

    /// `fetch(key, time_from, time_to)`: one key's windows starting in `[from, to]`.
    pub fn key(
        &self,
        stream_time: i64,
        key: &[u8],
        from: i64,
        to: i64,
        direction: Direction,
    ) -> SegmentQuery {
        let Some(from) = self.live_from(stream_time, from, to) else {
            return SegmentQuery::empty(direction);
        };
        let range = KeyRange {
            lower: Some(window::lower_range_fixed_size(key, from)),
            upper: Some(successor(&window::upper_range_fixed_size(key, to))),
        };
        self.query(from, to, range, direction, Some(key), Some(key))
    }

    /// `fetch(key_from, key_to, time_from, time_to)`; `None` keys are unbounded, and with
    /// both `None` this is `fetch_all(time_from, time_to)`.
    pub fn range(
        &self,
        stream_time: i64,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        from: i64,
        to: i64,
        direction: Direction,
    ) -> SegmentQuery {
        let Some(from) = self.live_from(stream_time, from, to) else {
            return SegmentQuery::empty(direction);
        };
        if let (Some(f), Some(t)) = (key_from, key_to) {
            if f > t {
                return SegmentQuery::empty(direction);
            }
        }
        let range = KeyRange {
            lower: key_from.map(|k| window::lower_range(k, from)),
            upper: key_to.map(|k| successor(&window::scan_upper_bound(k, to))),
        };
        self.query(from, to, range, direction, key_from, key_to)
    }

    /// The first value (lowest sequence number) of `key`'s window starting at `time`, as
    /// `reader` sees it: `fetch(key, time)` of stores with duplicates.
    pub fn first_at(
        &self,
        reader: &dyn SegmentReader,
        key: &[u8],
        time: i64,
    ) -> Result<Option<Vec<u8>>> {
        let query = self.key(reader.stream_time(), key, time, time, Direction::Forward);
        let rows = scan(reader, &query, &mut ScanCursor::default(), 1)?;
        Ok(rows.into_iter().next().map(|(_, v)| v))
    }

    /// `(key, window start, window end)` of a store key.
    pub fn decode<'a>(&self, store_key: &'a [u8]) -> Result<(&'a [u8], i64, i64)> {
        let k = window::from_store_key(store_key)?;
        Ok((
            k.key,
            k.start,
            window::window_end(k.start, self.window_size),
        ))
    }
}

/// A window put: key, value (`None` deletes) and window start.
pub type WindowWrite<'a> = (&'a [u8], Option<&'a [u8]>, i64);

pub struct WindowStore {
    segments: SegmentedStore,
    queries: WindowQueries,
    retain_duplicates: bool,
    /// Kafka's in-memory counter: incremented before each put with duplicates, not persisted.
    seqnum: i32,
}

impl SegmentedKeys for WindowStore {
    fn segments(&self) -> &SegmentedStore {
        &self.segments
    }

    fn segments_mut(&mut self) -> &mut SegmentedStore {
        &mut self.segments
    }

    fn segment_time(store_key: &[u8]) -> Result<i64> {
        Ok(window::from_store_key(store_key)?.start)
    }
}

impl WindowStore {
    pub fn new(
        segments: SegmentedStore,
        window_size: i64,
        retain_duplicates: bool,
    ) -> Result<Self> {
        let options = segments.options();
        if window_size < 0 || window_size > options.retention_ms {
            return Err(Error::InvalidArgument(format!(
                "window size ({window_size} ms) must be >= 0 and not larger than the retention period ({} ms)",
                options.retention_ms
            )));
        }
        let queries = WindowQueries {
            retention_ms: options.retention_ms,
            segment_interval: options.segment_interval,
            window_size,
        };
        Ok(Self {
            segments,
            queries,
            retain_duplicates,
            seqnum: 0,
        })
    }

    pub fn queries(&self) -> &WindowQueries {
        &self.queries
    }

    pub fn retain_duplicates(&self) -> bool {
        self.retain_duplicates
    }

    /// Writes `value` (`None` deletes) for the window of `key` starting at `window_start`.
    /// Returns `false` when the window's segment has expired and the put was dropped. With
    /// duplicates a delete does nothing, as in Kafka.
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>, window_start: i64) -> Result<bool> {
        self.put_keyed(&mut Vec::new(), key, value, window_start)
    }

    /// `put`, building the store key in `store_key`.
    fn put_keyed(
        &mut self,
        store_key: &mut Vec<u8>,
        key: &[u8],
        value: Option<&[u8]>,
        window_start: i64,
    ) -> Result<bool> {
        if window_start < 0 {
            return Err(Error::InvalidArgument(format!(
                "window start must be >= 0, got {window_start}"
            )));
        }
        let Some(seq) = self.next_seq(value) else {
            return Ok(true);
        };
        window::write_store_key(store_key, key, window_start, seq);
        self.segments.put(store_key, window_start, value)
    }

    /// The sequence number of the next put's store key; `None`: a delete, which a store
    /// retaining duplicates ignores (Kafka's).
    fn next_seq(&mut self, value: Option<&[u8]>) -> Option<i32> {
        if !self.retain_duplicates {
            return Some(0);
        }
        value?;
        self.seqnum = (self.seqnum.wrapping_add(1)) & 0x7FFF_FFFF;
        Some(self.seqnum)
    }

    /// `put` of each `(key, value, window_start)` in turn; returns how many were dropped as
    /// expired. Every window start is checked before anything is written.
    pub fn put_all(&mut self, writes: &[WindowWrite<'_>]) -> Result<usize> {
        if let Some((_, _, start)) = writes.iter().find(|(_, _, start)| *start < 0) {
            return Err(Error::InvalidArgument(format!(
                "window start must be >= 0, got {start}"
            )));
        }
        let mut store_key = Vec::new();
        let key_len = writes.first().map_or(0, |(key, _, _)| key.len() + 12);
        let mut puts = StorePuts::with_capacity(writes.len(), key_len);
        for &(key, value, window_start) in writes {
            if let Some(seq) = self.next_seq(value) {
                window::write_store_key(&mut store_key, key, window_start, seq);
                puts.push(&store_key, window_start, value);
            }
        }
        self.segments.put_all(&puts)
    }

    /// `fetch(key, time)`: the value of the window of `key` starting at `time`. With duplicates,
    /// the one with the lowest sequence number.
    pub fn fetch(&mut self, key: &[u8], time: i64) -> Result<Option<Vec<u8>>> {
        self.fetch_with(key, time, |v| v.map(<[u8]>::to_vec))
    }

    /// `fetch`, passing the value to `f` without copying it.
    pub fn fetch_with<R>(
        &mut self,
        key: &[u8],
        time: i64,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        if self.retain_duplicates {
            let first = self.queries.first_at(&self.segments, key, time)?;
            return Ok(f(first.as_deref()));
        }
        self.segments
            .get_with(&window::to_store_key(key, time, 0), time, f)
    }
}

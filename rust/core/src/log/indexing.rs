//! How a segment's entries become index entries (Kafka's `LogSegment.append` / `recover`):
//! after more than `index.interval.bytes` of log since the last index entry, the next entry
//! gets an offset-index entry (its offset and position) and a time-index entry (the largest
//! timestamp so far and the offset where it was first reached), the latter only if that
//! timestamp grew.
//!
//! kstate applies the rule per message-set entry, where Kafka's append applies it per appended
//! set (and its recovery per entry). Both give valid indexes; per entry means appending and
//! rebuilding produce the same bytes, so an index that differs from a rebuild is known stale.

use super::offset_index::OffsetIndex;
use super::time_index::TimeIndex;
use crate::format::timestamped::NO_TIMESTAMP;

/// What the rule needs, besides the entries, to go on extending a segment's indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexingState {
    pub(crate) index_interval_bytes: u64,
    pub(crate) bytes_since_last_entry: u64,
    pub(crate) max_timestamp: i64,
    pub(crate) offset_of_max_timestamp: i64,
}

/// A segment's two indexes and what the rule needs to extend them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentIndexing {
    pub(crate) offsets: OffsetIndex,
    pub(crate) times: TimeIndex,
    index_interval_bytes: u64,
    bytes_since_last_entry: u64,
    /// The largest entry timestamp so far (`NO_TIMESTAMP` if none) and where it was reached.
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
}

impl SegmentIndexing {
    /// Empty indexes for a segment about to be written or rescanned.
    pub(crate) fn empty(base_offset: i64, index_interval_bytes: u64) -> Self {
        Self {
            offsets: OffsetIndex::new(base_offset, Vec::new()),
            times: TimeIndex::new(base_offset, Vec::new()),
            index_interval_bytes,
            bytes_since_last_entry: 0,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
        }
    }

    /// Indexes read from a segment's files. For a sealed segment the largest timestamp is the
    /// last time entry's, as in Kafka; a segment that will be appended to is rescanned first.
    pub(crate) fn loaded(
        offsets: OffsetIndex,
        times: TimeIndex,
        base_offset: i64,
        index_interval_bytes: u64,
    ) -> Self {
        Self {
            max_timestamp: times.last_timestamp().unwrap_or(NO_TIMESTAMP),
            offset_of_max_timestamp: times.last_offset().unwrap_or(base_offset),
            offsets,
            times,
            index_interval_bytes,
            bytes_since_last_entry: 0,
        }
    }

    /// Indexes read from an active segment's files, resumed where a clean close left them.
    pub(crate) fn resumed(offsets: OffsetIndex, times: TimeIndex, state: IndexingState) -> Self {
        Self {
            offsets,
            times,
            index_interval_bytes: state.index_interval_bytes,
            bytes_since_last_entry: state.bytes_since_last_entry,
            max_timestamp: state.max_timestamp,
            offset_of_max_timestamp: state.offset_of_max_timestamp,
        }
    }

    /// What [`Self::resumed`] takes back.
    pub(crate) fn state(&self) -> IndexingState {
        IndexingState {
            index_interval_bytes: self.index_interval_bytes,
            bytes_since_last_entry: self.bytes_since_last_entry,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: self.offset_of_max_timestamp,
        }
    }

    /// Applies the rule to one message-set entry, in log order.
    pub(crate) fn observe(&mut self, position: u64, offset: i64, timestamp: i64, size: u64) {
        if timestamp > self.max_timestamp {
            self.max_timestamp = timestamp;
            self.offset_of_max_timestamp = offset;
        }
        if self.bytes_since_last_entry > self.index_interval_bytes {
            self.offsets.append(offset, position);
            self.times
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
            self.bytes_since_last_entry = 0;
        }
        self.bytes_since_last_entry += size;
    }

    /// The final time entry Kafka adds when a segment stops being active, so that the last
    /// entry holds the segment's largest timestamp.
    pub(crate) fn seal(&mut self) {
        self.times
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
    }

    pub(crate) fn index_interval_bytes(&self) -> u64 {
        self.index_interval_bytes
    }

    pub(crate) fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_interval_and_time_entries_only_when_the_max_grows() {
        let mut indexing = SegmentIndexing::empty(0, 100);
        // 60-byte entries at offsets 0.. with timestamps 10, 30, 20, 20, 40.
        for (i, timestamp) in [10, 30, 20, 20, 40].into_iter().enumerate() {
            indexing.observe(i as u64 * 60, i as i64, timestamp, 60);
        }
        // 120 > 100 bytes before entry 2, then 120 again before entry 4.
        let offsets: Vec<_> = indexing
            .offsets
            .entries()
            .iter()
            .map(|e| (e.relative_offset, e.position))
            .collect();
        assert_eq!(offsets, [(2, 120), (4, 240)]);
        let times: Vec<_> = indexing
            .times
            .entries()
            .iter()
            .map(|e| (e.timestamp, e.relative_offset))
            .collect();
        assert_eq!(times, [(30, 1), (40, 4)]);
        indexing.seal();
        assert_eq!(indexing.times.entries().len(), 2);
        assert_eq!(indexing.max_timestamp(), 40);
    }
}

//! The time index (`.timeindex`, spec 3.8): sparse `timestamp -> offset` entries of one
//! segment. An entry (T, O) means: the largest timestamp of the entries up to offset O is T,
//! first reached at O; so any record with a timestamp above T comes after O.

use super::index_file::IndexEntry;
use super::sparse_index::SparseIndex;
use crate::format::timestamped::NO_TIMESTAMP;

/// One 12-byte `.timeindex` entry: i64 timestamp, then the i32 offset relative to the
/// segment's base offset, both big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeIndexEntry {
    pub timestamp: i64,
    pub relative_offset: i32,
}

impl TimeIndexEntry {
    pub const SIZE: usize = 12;

    pub fn to_bytes(self) -> [u8; 12] {
        let mut bytes = [0; 12];
        let (timestamp, offset) = bytes.split_at_mut(8);
        timestamp.copy_from_slice(&self.timestamp.to_be_bytes());
        offset.copy_from_slice(&self.relative_offset.to_be_bytes());
        bytes
    }

    pub fn from_bytes(bytes: [u8; 12]) -> Self {
        let [t0, t1, t2, t3, t4, t5, t6, t7, o0, o1, o2, o3] = bytes;
        Self {
            timestamp: i64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            relative_offset: i32::from_be_bytes([o0, o1, o2, o3]),
        }
    }
}

impl IndexEntry for TimeIndexEntry {
    const SIZE: usize = Self::SIZE;

    fn relative_offset(&self) -> i32 {
        self.relative_offset
    }

    fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    fn read_from(bytes: &[u8]) -> Option<Self> {
        Some(Self::from_bytes(bytes.try_into().ok()?))
    }
}

/// The entries of one segment's time index, in memory.
pub(crate) type TimeIndex = SparseIndex<TimeIndexEntry>;

impl TimeIndex {
    /// The last entry's timestamp: a sealed segment's largest timestamp.
    pub(crate) fn last_timestamp(&self) -> Option<i64> {
        self.last().map(|entry| entry.timestamp)
    }

    /// The last entry's absolute offset.
    pub(crate) fn last_offset(&self) -> Option<i64> {
        self.last().map(|entry| self.absolute(entry))
    }

    /// Adds (timestamp, offset) only if the timestamp is greater than the last entry's (or,
    /// for the first entry, not `NO_TIMESTAMP`), as Kafka's `TimeIndex.maybeAppend` does.
    pub(crate) fn maybe_append(&mut self, timestamp: i64, offset: i64) {
        let Some(relative_offset) = self.relative(offset) else {
            return;
        };
        let grows = match self.last() {
            None => timestamp > NO_TIMESTAMP,
            Some(last) => timestamp > last.timestamp && relative_offset >= last.relative_offset,
        };
        if grows {
            self.push(TimeIndexEntry {
                timestamp,
                relative_offset,
            });
        }
    }

    /// The offset to start looking for the first record with a timestamp `>= target`: that of
    /// the entry with the largest timestamp not above `target`, or the segment's base offset.
    pub(crate) fn lookup(&self, target: i64) -> i64 {
        let entries = self.entries();
        let below = entries.partition_point(|entry| entry.timestamp <= target);
        below
            .checked_sub(1)
            .and_then(|i| entries.get(i))
            .map_or(self.base_offset(), |entry| self.absolute(entry))
    }

    /// Why these entries cannot belong to a segment holding offsets below `upper_offset`.
    pub(crate) fn check(&self, upper_offset: i64) -> Result<(), String> {
        let mut previous: Option<&TimeIndexEntry> = None;
        for (i, entry) in self.entries().iter().enumerate() {
            if entry.relative_offset < 0 || entry.timestamp < 0 {
                return Err(format!("entry {i} is negative: {entry:?}"));
            }
            if let Some(previous) = previous {
                if entry.timestamp <= previous.timestamp
                    || entry.relative_offset < previous.relative_offset
                {
                    return Err(format!("entry {i} {entry:?} does not follow {previous:?}"));
                }
            }
            if self.absolute(entry) >= upper_offset {
                return Err(format!(
                    "entry {i} {entry:?} is past the end of the log (offsets below {upper_offset})"
                ));
            }
            previous = Some(entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_bytes_match_spec_6_4() {
        // Timestamp 1503648000942 at offset 55 of a segment based at 50.
        let entry = TimeIndexEntry {
            timestamp: 1_503_648_000_942,
            relative_offset: 5,
        };
        let expected = [0, 0, 0x01, 0x5e, 0x18, 0x67, 0xab, 0xae, 0, 0, 0, 5];
        assert_eq!(entry.to_bytes(), expected);
        assert_eq!(TimeIndexEntry::from_bytes(expected), entry);
    }

    #[test]
    fn entries_only_grow_and_lookup_falls_back_to_the_base() {
        let mut index = TimeIndex::new(50, Vec::new());
        index.maybe_append(NO_TIMESTAMP, 50);
        assert!(index.entries().is_empty());
        assert_eq!(index.lookup(5), 50);
        index.maybe_append(100, 52);
        index.maybe_append(100, 53); // not greater
        index.maybe_append(90, 54); // smaller
        index.maybe_append(200, 56);
        assert_eq!(index.entries().len(), 2);
        assert_eq!(index.lookup(99), 50);
        assert_eq!(index.lookup(100), 52);
        assert_eq!(index.lookup(199), 52);
        assert_eq!(index.lookup(5000), 56);
        assert_eq!(index.last_timestamp(), Some(200));
        index.truncate_to(56);
        assert_eq!(index.last_offset(), Some(52));
        assert!(index.check(53).is_ok());
        assert!(index.check(52).is_err());
    }
}

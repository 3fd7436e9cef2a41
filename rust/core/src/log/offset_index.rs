//! The offset index (`.index`, spec 3.8): sparse `offset -> file position` entries of one
//! segment, used to start reads near an offset instead of at the segment's start.

use super::index_file::IndexEntry;
use super::sparse_index::SparseIndex;

/// One 8-byte `.index` entry: i32 offset relative to the segment's base offset, then the i32
/// position of the entry's message-set entry in the `.log` file, both big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetIndexEntry {
    pub relative_offset: i32,
    pub position: i32,
}

impl OffsetIndexEntry {
    pub const SIZE: usize = 8;

    pub fn to_bytes(self) -> [u8; 8] {
        let mut bytes = [0; 8];
        let (offset, position) = bytes.split_at_mut(4);
        offset.copy_from_slice(&self.relative_offset.to_be_bytes());
        position.copy_from_slice(&self.position.to_be_bytes());
        bytes
    }

    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        let [o0, o1, o2, o3, p0, p1, p2, p3] = bytes;
        Self {
            relative_offset: i32::from_be_bytes([o0, o1, o2, o3]),
            position: i32::from_be_bytes([p0, p1, p2, p3]),
        }
    }
}

impl IndexEntry for OffsetIndexEntry {
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

/// The entries of one segment's offset index, in memory.
pub(crate) type OffsetIndex = SparseIndex<OffsetIndexEntry>;

impl OffsetIndex {
    /// Adds an entry. The segment only indexes offsets and positions that fit an i32 and grow,
    /// so nothing is lost by skipping one that does not (the index is sparse anyway).
    pub(crate) fn append(&mut self, offset: i64, position: u64) {
        let (Some(relative_offset), Ok(position)) =
            (self.relative(offset), i32::try_from(position))
        else {
            return;
        };
        let grows = self
            .last()
            .is_none_or(|last| relative_offset > last.relative_offset && position > last.position);
        if grows {
            self.push(OffsetIndexEntry {
                relative_offset,
                position,
            });
        }
    }

    /// The position to start reading at to find `offset`: the entry with the largest offset
    /// not above it, or the segment's start (Kafka's `OffsetIndex.lookup`).
    pub(crate) fn lookup(&self, offset: i64) -> u64 {
        let entries = self.entries();
        let below = entries.partition_point(|entry| self.absolute(entry) <= offset);
        below
            .checked_sub(1)
            .and_then(|i| entries.get(i))
            .map_or(0, |entry| u64::try_from(entry.position).unwrap_or(0))
    }

    /// Why these entries cannot belong to a segment holding offsets below `upper_offset` in
    /// `log_size` bytes, if they cannot.
    pub(crate) fn check(&self, upper_offset: i64, log_size: u64) -> Result<(), String> {
        let mut previous: Option<&OffsetIndexEntry> = None;
        for (i, entry) in self.entries().iter().enumerate() {
            if entry.relative_offset < 0 || entry.position < 0 {
                return Err(format!("entry {i} is negative: {entry:?}"));
            }
            if let Some(previous) = previous {
                if entry.relative_offset <= previous.relative_offset
                    || entry.position <= previous.position
                {
                    return Err(format!("entry {i} {entry:?} does not follow {previous:?}"));
                }
            }
            if self.absolute(entry) >= upper_offset
                || u64::try_from(entry.position).unwrap_or(0) >= log_size
            {
                return Err(format!(
                    "entry {i} {entry:?} is past the end of the log (offsets below \
                     {upper_offset}, {log_size} bytes)"
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
        // Segment base 50, offset 55 at position 4096.
        let entry = OffsetIndexEntry {
            relative_offset: 5,
            position: 4096,
        };
        assert_eq!(entry.to_bytes(), [0, 0, 0, 5, 0, 0, 0x10, 0]);
        assert_eq!(OffsetIndexEntry::from_bytes(entry.to_bytes()), entry);
    }

    #[test]
    fn lookup_finds_the_largest_entry_not_above_the_offset() {
        let mut index = OffsetIndex::new(50, Vec::new());
        assert_eq!(index.lookup(70), 0);
        index.append(55, 4096);
        index.append(60, 9000);
        index.append(58, 9500); // not growing: ignored
        assert_eq!(index.entries().len(), 2);
        assert_eq!(index.lookup(54), 0);
        assert_eq!(index.lookup(55), 4096);
        assert_eq!(index.lookup(59), 4096);
        assert_eq!(index.lookup(1000), 9000);
        index.truncate_to(60);
        assert_eq!(index.lookup(1000), 4096);
    }

    #[test]
    fn check_rejects_disorder_and_entries_past_the_end() {
        let entry = |relative_offset, position| OffsetIndexEntry {
            relative_offset,
            position,
        };
        let good = OffsetIndex::new(0, vec![entry(3, 100), entry(7, 200)]);
        assert!(good.check(8, 201).is_ok());
        assert!(good.check(7, 201).is_err());
        assert!(good.check(8, 200).is_err());
        let disordered = OffsetIndex::new(0, vec![entry(7, 100), entry(3, 200)]);
        assert!(disordered.check(100, 1000).is_err());
    }
}

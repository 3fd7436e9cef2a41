//! Writing a message set (spec 3.5 producer side), as Kafka's `MemoryRecordsBuilder` does for
//! magic v0/v1.

use super::compression;
use super::legacy::{self, write_entry};
use super::{Compression, Magic, TimestampType};
use crate::error::{Error, Result};
use crate::format::timestamped::NO_TIMESTAMP;

/// A top-level entry of a built message set, as a log indexes it: what
/// [`super::shallow_entries`] reads back of it (its position, size, offset and timestamp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltEntry {
    pub position: usize,
    pub size: usize,
    pub offset: i64,
    pub timestamp: i64,
}

/// Appends records and produces one message set: one entry per record when uncompressed,
/// otherwise a single compressed wrapper holding them all.
///
/// Inside a wrapper, v1 stores offsets relative to the first record (`0..n-1` for consecutive
/// offsets) and v0 stores them absolute; the wrapper's offset is the last record's. The
/// wrapper's timestamp is the max record timestamp (CreateTime) or the log-append time.
#[derive(Debug)]
pub struct MessageSetBuilder {
    magic: Magic,
    compression: Compression,
    timestamp_type: TimestampType,
    /// Replaces every record's timestamp when the type is LogAppendTime.
    log_append_time: i64,
    /// The entries so far: the whole set when uncompressed, the wrapper's value before
    /// compression otherwise.
    entries: Vec<u8>,
    /// The top-level entries so far, uncompressed (a wrapper's is known at `build`).
    built: Vec<BuiltEntry>,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
    max_timestamp: i64,
}

impl MessageSetBuilder {
    /// A builder of CreateTime records (their own timestamps; v0 stores none).
    pub fn new(magic: Magic, compression: Compression) -> Self {
        Self {
            magic,
            compression,
            timestamp_type: TimestampType::CreateTime,
            log_append_time: NO_TIMESTAMP,
            entries: Vec::new(),
            built: Vec::new(),
            first_offset: None,
            last_offset: None,
            max_timestamp: NO_TIMESTAMP,
        }
    }

    /// A builder of LogAppendTime records, as a broker writes them: every record (and the
    /// wrapper) gets `log_append_time` and the LogAppendTime attribute bit. v1 only.
    pub fn with_log_append_time(
        magic: Magic,
        compression: Compression,
        log_append_time: i64,
    ) -> Result<Self> {
        if magic == Magic::V0 {
            return Err(Error::InvalidArgument(
                "magic v0 has no timestamps, so no LogAppendTime".into(),
            ));
        }
        check_timestamp(log_append_time)?;
        Ok(Self {
            timestamp_type: TimestampType::LogAppendTime,
            log_append_time,
            ..Self::new(magic, compression)
        })
    }

    /// Adds a record. Offsets must be non-negative and strictly increasing; a timestamp must be
    /// -1 (none) or non-negative, and is not stored by v0.
    pub fn append(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<()> {
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "record offset {offset} is negative"
            )));
        }
        if let Some(last) = self.last_offset.filter(|&last| offset <= last) {
            return Err(Error::InvalidArgument(format!(
                "record offset {offset} does not follow the previous offset {last}"
            )));
        }
        check_timestamp(timestamp)?;
        let timestamp = match self.timestamp_type {
            TimestampType::CreateTime => timestamp,
            TimestampType::LogAppendTime => self.log_append_time,
        };
        let first_offset = *self.first_offset.get_or_insert(offset);
        let stored_offset = match (self.compression, self.magic) {
            (Compression::None, _) | (_, Magic::V0) => offset,
            _ => offset - first_offset,
        };
        let attributes = legacy::attributes(self.magic, Compression::None, self.timestamp_type);
        let position = self.entries.len();
        write_entry(
            &mut self.entries,
            stored_offset,
            self.magic,
            attributes,
            timestamp,
            key,
            value,
        )?;
        if self.compression == Compression::None {
            self.built.push(BuiltEntry {
                position,
                size: self.entries.len() - position,
                offset,
                timestamp: self.stored_timestamp(timestamp),
            });
        }
        self.last_offset = Some(offset);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(())
    }

    /// Makes room for `records` more records whose keys and values take `bytes` together: a
    /// builder given its batch's size grows its buffers once, not by copies as it fills.
    pub fn reserve(&mut self, records: usize, bytes: usize) {
        let overhead = legacy::entry_overhead(self.magic);
        self.entries
            .reserve(records.saturating_mul(overhead).saturating_add(bytes));
        if self.compression == Compression::None {
            self.built.reserve(records);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.last_offset.is_none()
    }

    /// The message set; empty if nothing was appended.
    pub fn build(self) -> Result<Vec<u8>> {
        Ok(self.build_indexed()?.0)
    }

    /// The message set and its top-level entries (what a log indexes without reading the set
    /// back).
    pub fn build_indexed(self) -> Result<(Vec<u8>, Vec<BuiltEntry>)> {
        let Some(last_offset) = self.last_offset else {
            return Ok((Vec::new(), Vec::new()));
        };
        if self.compression == Compression::None {
            return Ok((self.entries, self.built));
        }
        let value = compression::compress(self.compression, self.magic, &self.entries)?;
        let attributes = legacy::attributes(self.magic, self.compression, self.timestamp_type);
        let mut set = Vec::new();
        write_entry(
            &mut set,
            last_offset,
            self.magic,
            attributes,
            self.max_timestamp,
            None,
            Some(&value),
        )?;
        let wrapper = BuiltEntry {
            position: 0,
            size: set.len(),
            offset: last_offset,
            timestamp: self.stored_timestamp(self.max_timestamp),
        };
        Ok((set, vec![wrapper]))
    }

    /// The timestamp an entry written with `timestamp` reads back with (v0 stores none).
    fn stored_timestamp(&self, timestamp: i64) -> i64 {
        match self.magic {
            Magic::V0 => NO_TIMESTAMP,
            Magic::V1 => timestamp,
        }
    }
}

/// Kafka's rule: a timestamp is -1 (`NO_TIMESTAMP`) or non-negative.
fn check_timestamp(timestamp: i64) -> Result<()> {
    if timestamp < 0 && timestamp != NO_TIMESTAMP {
        return Err(Error::InvalidArgument(format!(
            "timestamp {timestamp} is negative and not -1 (no timestamp)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::shallow_entries;

    #[test]
    fn built_entries_are_what_the_set_reads_back_as() {
        let compressions = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
        ];
        for magic in [Magic::V0, Magic::V1] {
            for compression in compressions {
                for log_append in [false, true] {
                    if log_append && magic == Magic::V0 {
                        continue;
                    }
                    let mut builder = if log_append {
                        MessageSetBuilder::with_log_append_time(magic, compression, 77).unwrap()
                    } else {
                        MessageSetBuilder::new(magic, compression)
                    };
                    for (i, offset) in [5_i64, 6, 9, 10].into_iter().enumerate() {
                        let value = vec![b'v'; i * 40];
                        let key = (i % 2 == 0).then_some(&b"key"[..]);
                        let timestamp = [30, -1, 12, 4][i];
                        builder
                            .append(offset, timestamp, key, Some(&value))
                            .unwrap();
                    }
                    let (set, built) = builder.build_indexed().unwrap();
                    let read: Vec<BuiltEntry> = shallow_entries(&set)
                        .map(|entry| {
                            let entry = entry.unwrap();
                            BuiltEntry {
                                position: entry.position,
                                size: entry.size,
                                offset: entry.offset,
                                timestamp: entry.timestamp,
                            }
                        })
                        .collect();
                    assert_eq!(built, read, "{magic:?} {compression:?} {log_append}");
                }
            }
        }
    }
}

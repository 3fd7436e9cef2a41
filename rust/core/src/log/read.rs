//! Reading a partition: message-set bytes from an offset (a fetch), decoded records, and the
//! offset for a timestamp (`ListOffsets`).

use super::partition::Partition;
use super::scan::{Visit, SCAN_CHUNK_BYTES};
use crate::error::{Error, Result};
use crate::record::{deep_records, Record};

/// The smallest read from a segment file when looking for an entry.
const MIN_READ_CHUNK_BYTES: usize = 64 * 1024;

/// The first record at or after a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
}

impl Partition {
    /// The stored message-set bytes from the entry holding `from_offset` (or the first entry
    /// after it, compaction leaves gaps): whole entries up to `max_bytes`, but at least one
    /// entry whatever its size. Like a Kafka fetch it reads from one segment; an empty result
    /// means `from_offset` is the log end offset. A compressed wrapper is returned whole, so
    /// its first records may precede `from_offset` (as in Kafka; [`Self::read_records`]
    /// filters them).
    ///
    /// An offset below [`Self::log_start_offset`] or above [`Self::log_end_offset`] is an
    /// `InvalidArgument` error naming Kafka's `OFFSET_OUT_OF_RANGE (1)`.
    pub fn read(&self, from_offset: i64, max_bytes: usize) -> Result<Vec<u8>> {
        if from_offset < self.log_start_offset() || from_offset > self.log_end_offset {
            return Err(Error::InvalidArgument(format!(
                "OFFSET_OUT_OF_RANGE (1): offset {from_offset} is outside the log's [{}, {}]",
                self.log_start_offset(),
                self.log_end_offset
            )));
        }
        let chunk_bytes = max_bytes.clamp(MIN_READ_CHUNK_BYTES, SCAN_CHUNK_BYTES);
        let first = self.segment_index_for(from_offset);
        for (i, segment) in self.segments.iter().enumerate().skip(first) {
            let start = if i == first {
                segment.position_for(from_offset)
            } else {
                0
            };
            let mut set = Vec::new();
            segment.scan(start, chunk_bytes, &mut |scanned| {
                if scanned.entry.offset < from_offset {
                    return Ok(Visit::Continue);
                }
                if !set.is_empty() && set.len() + scanned.bytes.len() > max_bytes {
                    return Ok(Visit::Stop);
                }
                set.extend_from_slice(scanned.bytes);
                Ok(Visit::Continue)
            })?;
            if !set.is_empty() {
                return Ok(set);
            }
        }
        Ok(Vec::new())
    }

    /// The records with offsets `>= from_offset` in what [`Self::read`] returns, decoded
    /// (wrappers decompressed).
    pub fn read_records(&self, from_offset: i64, max_bytes: usize) -> Result<Vec<Record>> {
        let set = self.read(from_offset, max_bytes)?;
        deep_records(&set)
            .filter(|record| {
                record
                    .as_ref()
                    .map_or(true, |record| record.offset >= from_offset)
            })
            .collect()
    }

    /// The first record (in offset order) whose timestamp is `>= timestamp`, or `None`, by
    /// Kafka's algorithm (spec 3.8 "Timestamp lookup"): the first segment whose largest
    /// timestamp reaches it; there the time index gives an offset, the offset index a
    /// position, and the entries from there are scanned, skipping those whose (maximum)
    /// timestamp is below the target. `timestamp` must be `>= 0`: Kafka's special values
    /// EARLIEST and LATEST are [`Self::log_start_offset`] and [`Self::log_end_offset`].
    pub fn offsets_for_times(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        if timestamp < 0 {
            return Err(Error::InvalidArgument(format!(
                "timestamp {timestamp} is negative; use log_start_offset() or log_end_offset() \
                 for Kafka's EARLIEST (-2) and LATEST (-1)"
            )));
        }
        let log_start_offset = self.log_start_offset();
        for segment in &self.segments {
            if segment.max_timestamp() < timestamp {
                continue;
            }
            let start_offset = segment.offset_for_time(timestamp).max(log_start_offset);
            let mut found = None;
            segment.scan(
                segment.position_for(start_offset),
                MIN_READ_CHUNK_BYTES,
                &mut |scanned| {
                    if scanned.entry.timestamp < timestamp {
                        return Ok(Visit::Continue);
                    }
                    found = scanned.entry.records()?.into_iter().find(|record| {
                        record.timestamp >= timestamp && record.offset >= log_start_offset
                    });
                    Ok(if found.is_some() {
                        Visit::Stop
                    } else {
                        Visit::Continue
                    })
                },
            )?;
            if let Some(record) = found {
                return Ok(Some(TimestampAndOffset {
                    timestamp: record.timestamp,
                    offset: record.offset,
                }));
            }
        }
        Ok(None)
    }
}

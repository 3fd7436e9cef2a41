//! Deleting old segments (`cleanup.policy` with `delete`), as Kafka's `UnifiedLog` does:
//! by time (`retention.ms`), then by size (`retention.bytes`). Only a prefix of the log is
//! deleted, whole segments at a time, so the log start offset moves up to the first segment
//! left. And deleting the records before an offset on request (Kafka's `DeleteRecords`): the
//! log start offset moves to exactly that offset, kept across reopening, and the segments wholly
//! below it go.

use super::file_io;
use super::partition::{Partition, LOG_START_FILE};
use super::segment::LogSegment;
use crate::error::{Error, Result};

/// What [`Partition::delete_expired`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Segments deleted because their largest timestamp was older than `retention.ms`.
    pub deleted_by_time: usize,
    /// Segments deleted to bring the log within `retention.bytes`.
    pub deleted_by_size: usize,
    /// Segments of a remote log's local cache deleted because their reader is past them
    /// ([`Partition::delete_segments_below`]), or wholly below the offset records were deleted
    /// before ([`Partition::delete_records_before`]).
    pub deleted_below_offset: usize,
    pub bytes_deleted: u64,
    /// Whether the active segment had to be rolled because it was to be deleted too.
    pub rolled_active: bool,
    pub log_start_offset: i64,
}

impl Partition {
    /// Deletes the segments retention no longer keeps; a no-op unless `cleanup.policy`
    /// includes `delete`.
    ///
    /// - Time: from the oldest, while `now_ms - largest timestamp > retention.ms` (the largest
    ///   timestamp of a segment whose entries have none is its file's mtime, as in Kafka).
    /// - Size: from the oldest, while the log without the segment is still at least
    ///   `retention.bytes`.
    ///
    /// An empty active segment is never deleted. If every segment is to go, a new empty active
    /// segment is rolled first (as Kafka does), so the log end offset is kept.
    pub fn delete_expired(&mut self, now_ms: i64) -> Result<RetentionReport> {
        let mut report = RetentionReport::default();
        if self.config.cleanup_policy.deletes() {
            if self.config.retention_ms >= 0 {
                let retention_ms = self.config.retention_ms;
                let expired = self.deletable_prefix(&mut |segment| {
                    let largest = segment.largest_timestamp_for_retention()?;
                    Ok(now_ms.saturating_sub(largest) > retention_ms)
                })?;
                report.deleted_by_time = self.delete_oldest(expired, now_ms, &mut report)?;
            }
            if self.config.retention_bytes >= 0 {
                let retention_bytes = self.config.retention_bytes.unsigned_abs();
                let mut excess = self.size_bytes().saturating_sub(retention_bytes);
                let over = self.deletable_prefix(&mut |segment| {
                    let fits = segment.size() <= excess;
                    if fits {
                        excess -= segment.size();
                    }
                    Ok(fits)
                })?;
                report.deleted_by_size = self.delete_oldest(over, now_ms, &mut report)?;
            }
        }
        report.log_start_offset = self.log_start_offset();
        Ok(report)
    }

    /// Deletes the oldest segments whose records all have offsets below `offset`, never the
    /// active one: a local cache of a log kept elsewhere needs only what its reader has not
    /// consumed, as Kafka's tiered storage keeps a segment locally only until it is remote
    /// (KIP-405 local retention).
    pub fn delete_segments_below(&mut self, offset: i64, now_ms: i64) -> Result<RetentionReport> {
        let mut report = RetentionReport::default();
        let consumed = self
            .segments
            .windows(2)
            .take_while(|pair| pair[1].base_offset() <= offset)
            .count();
        report.deleted_below_offset = self.delete_oldest(consumed, now_ms, &mut report)?;
        report.log_start_offset = self.log_start_offset();
        Ok(report)
    }

    /// Deletes the records before `offset` (Kafka's `DeleteRecords`): the log start offset
    /// becomes `offset` (durably, in `.kstate-log-start-offset`, before any file goes), reads
    /// below it fail as out of range, and the segments wholly below it are deleted (the active
    /// one never). An offset at or below the log start changes nothing but still deletes the
    /// segments a crash left behind; one past the log end offset is an `InvalidArgument`.
    pub fn delete_records_before(&mut self, offset: i64, now_ms: i64) -> Result<RetentionReport> {
        if offset > self.log_end_offset {
            return Err(Error::InvalidArgument(format!(
                "OFFSET_OUT_OF_RANGE (1): cannot delete records before offset {offset}, past the \
                 log end offset {}",
                self.log_end_offset
            )));
        }
        if offset > self.log_start_offset() {
            file_io::write_number_file(&self.dir.join(LOG_START_FILE), offset)?;
            self.deleted_before = offset;
        }
        self.delete_segments_below(self.deleted_before, now_ms)
    }

    /// How many segments from the oldest satisfy `deletable` (stopping at the first that does
    /// not), never counting an empty last segment.
    fn deletable_prefix(
        &self,
        deletable: &mut dyn FnMut(&LogSegment) -> Result<bool>,
    ) -> Result<usize> {
        let mut count = 0;
        for (i, segment) in self.segments.iter().enumerate() {
            let last_and_empty = i + 1 == self.segments.len() && segment.size() == 0;
            if last_and_empty || !deletable(segment)? {
                break;
            }
            count += 1;
        }
        Ok(count)
    }

    /// Deletes the `count` oldest segments, rolling first if that is all of them.
    fn delete_oldest(
        &mut self,
        count: usize,
        now_ms: i64,
        report: &mut RetentionReport,
    ) -> Result<usize> {
        if count == 0 {
            return Ok(0);
        }
        if count >= self.segments.len() {
            self.roll(now_ms)?;
            report.rolled_active = true;
        }
        for segment in self.segments.drain(..count).collect::<Vec<_>>() {
            report.bytes_deleted += segment.size();
            segment.delete()?;
        }
        file_io::sync_dir(&self.dir)?;
        Ok(count)
    }
}

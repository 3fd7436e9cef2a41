//! Removing the tail of a partition (Kafka's `UnifiedLog.truncateTo`): how an unpublished
//! changelog tail is undone.

use super::file_io;
use super::file_names::FileStage;
use super::partition::{Partition, LOG_START_FILE};
use super::recovery::index_interval;
use super::scan::{Visit, SCAN_CHUNK_BYTES};
use super::segment::LogSegment;
use crate::error::{Error, Result};
use crate::record::{Compression, MessageSetBuilder, Record, TimestampType};

impl Partition {
    /// Removes every record with an offset `>= offset`; afterwards the log end offset is
    /// `offset` (or unchanged if it was not above it). Later segments are deleted, the one
    /// holding `offset` is cut, and a compressed wrapper holding records on both sides is
    /// rewritten with the records below `offset`. An offset below the log start offset empties
    /// the log and restarts it at `offset`. Durable when it returns.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "cannot truncate to negative offset {offset}"
            )));
        }
        if offset >= self.log_end_offset {
            return Ok(());
        }
        if offset < self.log_start_offset() {
            return self.truncate_fully_and_start_at(offset);
        }
        // Newest first, so a crash part-way leaves a shorter log, never a hole.
        while self.segments.len() > 1 && self.active_mut().base_offset() > offset {
            if let Some(segment) = self.segments.pop() {
                segment.delete()?;
            }
        }
        file_io::sync_dir(&self.dir)?;

        let active = self.active_mut();
        // No entry at or after `offset` (only possible once later segments are gone): the cut
        // is at the end, which still trims the indexes and recomputes the segment's state.
        let cut = find_cut(active, offset)?.unwrap_or(Cut {
            position: active.size(),
            kept_tail: None,
        });
        let rescan = active.truncate(cut.position, offset)?;
        let next_offset = match cut.kept_tail {
            Some((tail, last_kept)) => {
                active.append(&tail)?;
                last_kept + 1
            }
            None => rescan.next_offset,
        };
        active.flush()?;
        // Compaction can leave the last records below `offset` far below it.
        if next_offset < offset {
            self.start_segment_at(offset)?;
        }
        self.log_end_offset = offset;
        Ok(())
    }

    /// Seals the active segment and starts an empty one based at `offset` (above the last
    /// record), so the log end offset is `offset`, across reopening too.
    pub(super) fn start_segment_at(&mut self, offset: i64) -> Result<()> {
        self.active_mut().seal()?;
        let segment = LogSegment::create(
            &self.dir,
            offset,
            FileStage::Live,
            index_interval(&self.config),
        )?;
        file_io::sync_dir(&self.dir)?;
        self.segments.push(segment);
        self.log_end_offset = offset;
        Ok(())
    }

    /// Replaces the whole log by an empty one starting at `offset` (Kafka's
    /// `truncateFullyAndStartAt`). The new segment exists before the old ones go, so a crash
    /// in between leaves a log that still starts at or before `offset`. Durable when it returns.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "cannot start a log at negative offset {offset}"
            )));
        }
        if offset < self.deleted_before {
            // The log start offset moves down with the log (as Kafka's does).
            file_io::write_number_file(&self.dir.join(LOG_START_FILE), offset)?;
            self.deleted_before = offset;
        }
        let segment = LogSegment::create(
            &self.dir,
            offset,
            FileStage::Live,
            index_interval(&self.config),
        )?;
        file_io::sync_dir(&self.dir)?;
        for old in std::mem::replace(&mut self.segments, vec![segment]) {
            old.delete()?;
        }
        file_io::sync_dir(&self.dir)?;
        self.log_end_offset = offset;
        Ok(())
    }
}

/// Where to cut a segment for [`Partition::truncate_to`].
struct Cut {
    /// Start of the first entry whose (last) offset is `>= offset`.
    position: u64,
    /// When that entry is a compressed wrapper that also holds records below `offset`: those
    /// records as a new wrapper, and the last one's offset.
    kept_tail: Option<(Vec<u8>, i64)>,
}

fn find_cut(segment: &LogSegment, offset: i64) -> Result<Option<Cut>> {
    let mut cut = None;
    segment.scan(
        segment.position_for(offset),
        SCAN_CHUNK_BYTES,
        &mut |scanned| {
            let entry = &scanned.entry;
            if entry.offset < offset {
                return Ok(Visit::Continue);
            }
            let mut kept_tail = None;
            if entry.compression != Compression::None {
                let kept: Vec<Record> = entry
                    .records()?
                    .into_iter()
                    .filter(|record| record.offset < offset)
                    .collect();
                kept_tail = rebuild_wrapper(entry, &kept)?;
            }
            cut = Some(Cut {
                position: scanned.position,
                kept_tail,
            });
            Ok(Visit::Stop)
        },
    )?;
    Ok(cut)
}

/// `records` (some of `wrapper`'s) as a wrapper like it, with their offsets; `None` if empty.
pub(crate) fn rebuild_wrapper(
    wrapper: &crate::record::Entry<'_>,
    records: &[Record],
) -> Result<Option<(Vec<u8>, i64)>> {
    let Some(last) = records.last() else {
        return Ok(None);
    };
    let mut builder = match wrapper.timestamp_type {
        Some(TimestampType::LogAppendTime) => MessageSetBuilder::with_log_append_time(
            wrapper.magic,
            wrapper.compression,
            wrapper.timestamp,
        )?,
        _ => MessageSetBuilder::new(wrapper.magic, wrapper.compression),
    };
    for record in records {
        builder.append(
            record.offset,
            record.timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
        )?;
    }
    Ok(Some((builder.build()?, last.offset)))
}

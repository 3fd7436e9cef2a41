//! Log compaction (`cleanup.policy` with `compact`), after Kafka's `LogCleaner`, simplified:
//!
//! - One pass over the whole log (the active segment included) maps every key to the offset
//!   of its latest record. Kafka bounds this map (a dedupe buffer of key hashes) and cleans in
//!   several passes; here it holds every distinct key, so memory grows with the key count.
//! - The sealed segments are cleaned in groups of consecutive segments whose total size fits
//!   `segment.bytes` (small segments merge). A record is kept only if it is its key's latest;
//!   the active segment is never rewritten. Records keep their offsets, leaving gaps.
//! - A tombstone (null value) that is its key's latest is kept until `delete.retention.ms`
//!   after its own timestamp (Kafka measures from when its segment was first cleaned, which
//!   needs cleaner state; a tombstone without timestamp is kept). Keyless records are dropped.
//! - A group is written to `<base>.*.cleaned` files and fsynced, renamed to `.swap` (the log
//!   last: the commit point), the old segments are renamed `.deleted` and removed, and the swap
//!   files are renamed live. Opening the partition finishes or discards an interrupted group
//!   (see [`recovery`](super::recovery)). A group left with no record is just deleted.

use std::collections::HashMap;
use std::ops::Range;

use foldhash::fast::RandomState;

use super::file_io;
use super::file_names::FileStage;
use super::partition::Partition;
use super::recovery::index_interval;
use super::scan::{ScannedEntry, Visit, SCAN_CHUNK_BYTES};
use super::segment::LogSegment;
use super::truncate::rebuild_wrapper;
use crate::error::Result;
use crate::record::{Compression, Record, RecordView};

/// What [`Partition::compact`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    pub segments_before: usize,
    pub segments_after: usize,
    /// Groups of sealed segments rewritten (or deleted when nothing was left).
    pub groups_cleaned: usize,
    pub distinct_keys: usize,
    /// Records read while cleaning (the records of the groups cleaned).
    pub records_read: u64,
    /// Records dropped because a later record has the same key.
    pub superseded_removed: u64,
    pub tombstones_removed: u64,
    pub keyless_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Every key's latest record.
pub(super) type LatestByKey = HashMap<Vec<u8>, Latest, RandomState>;

/// A key's latest record.
pub(super) struct Latest {
    offset: i64,
    /// Index of the segment (or file) holding it.
    segment: usize,
    /// Whether it is a tombstone old enough to drop (if not in the active segment).
    expired_tombstone: bool,
}

/// Notes `record`, read from segment (or file) `segment`, as its key's latest. Returns where
/// the record it supersedes is, if any; a keyless record is not noted (compaction drops it).
pub(super) fn note_latest(
    latest: &mut LatestByKey,
    record: &RecordView<'_>,
    segment: usize,
    now_ms: i64,
    delete_retention_ms: i64,
) -> Option<usize> {
    let key = record.key?;
    let expired_tombstone = record.value.is_none()
        && record.timestamp >= 0
        && now_ms.saturating_sub(record.timestamp) > delete_retention_ms;
    let newest = Latest {
        offset: record.offset,
        segment,
        expired_tombstone,
    };
    match latest.get_mut(key) {
        Some(previous) => Some(std::mem::replace(previous, newest).segment),
        None => {
            latest.insert(key.to_vec(), newest);
            None
        }
    }
}

/// Why a record goes.
enum Verdict {
    Keep,
    Superseded,
    ExpiredTombstone,
    Keyless,
}

impl Partition {
    /// Compacts the sealed segments; a no-op unless `cleanup.policy` includes `compact`. Call
    /// [`Partition::roll`] first to make the active segment's records compactable too.
    pub fn compact(&mut self, now_ms: i64) -> Result<CompactionReport> {
        let mut report = CompactionReport {
            segments_before: self.segments.len(),
            bytes_before: self.size_bytes(),
            ..CompactionReport::default()
        };
        if self.config.cleanup_policy.compacts() && self.segments.len() > 1 {
            let (latest, removable) = self.latest_by_key(now_ms)?;
            report.distinct_keys = latest.len();
            let groups = self.cleaning_groups(&removable);
            // Last group first, so the indexes of the groups still to clean do not move.
            for group in groups.into_iter().rev() {
                self.clean_group(group, &latest, &mut report)?;
                report.groups_cleaned += 1;
            }
        }
        report.segments_after = self.segments.len();
        report.bytes_after = self.size_bytes();
        Ok(report)
    }

    /// Every key's latest record, and per segment how many records cleaning would drop.
    fn latest_by_key(&self, now_ms: i64) -> Result<(LatestByKey, Vec<u64>)> {
        let delete_retention_ms = self.config.delete_retention_ms;
        let mut latest = LatestByKey::default();
        let mut removable = vec![0u64; self.segments.len()];
        for (index, segment) in self.segments.iter().enumerate() {
            segment.scan(0, SCAN_CHUNK_BYTES, &mut |scanned| {
                scanned.entry.visit_records(&mut |record| {
                    let goes = match record.key {
                        None => Some(index),
                        Some(_) => {
                            note_latest(&mut latest, &record, index, now_ms, delete_retention_ms)
                        }
                    };
                    if let Some(count) = goes.and_then(|segment| removable.get_mut(segment)) {
                        *count += 1;
                    }
                    Ok(())
                })?;
                Ok(Visit::Continue)
            })?;
        }
        for record in latest.values().filter(|record| record.expired_tombstone) {
            if let Some(count) = removable.get_mut(record.segment) {
                *count += 1;
            }
        }
        Ok((latest, removable))
    }

    /// Consecutive sealed segments whose sizes add up to at most `segment.bytes` and whose
    /// offsets fit one segment's i32 relative offsets; a lone segment is cleaned only if it
    /// has something to drop.
    fn cleaning_groups(&self, removable: &[u64]) -> Vec<Range<usize>> {
        let segment_bytes = u64::try_from(self.config.segment_bytes).unwrap_or(0);
        let sealed = self.segments.len().saturating_sub(1);
        let mut groups = Vec::new();
        let mut start = 0;
        while start < sealed {
            let base_offset = self.segments.get(start).map_or(0, LogSegment::base_offset);
            let mut end = start + 1;
            let mut bytes = self.segments.get(start).map_or(0, LogSegment::size);
            while let (true, Some(next), Some(after)) = (
                end < sealed,
                self.segments.get(end),
                self.segments.get(end + 1),
            ) {
                let offsets_fit = i32::try_from(after.base_offset() - base_offset - 1).is_ok();
                if bytes + next.size() > segment_bytes || !offsets_fit {
                    break;
                }
                bytes += next.size();
                end += 1;
            }
            let drops = removable
                .get(start..end)
                .is_some_and(|counts| counts.iter().any(|&n| n > 0));
            if end - start > 1 || drops {
                groups.push(start..end);
            }
            start = end;
        }
        groups
    }

    /// Rewrites the segments `group` into one, keeping the records `latest` says to keep.
    fn clean_group(
        &mut self,
        group: Range<usize>,
        latest: &LatestByKey,
        report: &mut CompactionReport,
    ) -> Result<()> {
        let Some(base_offset) = self.segments.get(group.start).map(LogSegment::base_offset) else {
            return Ok(());
        };
        let mut cleaned = LogSegment::create(
            &self.dir,
            base_offset,
            FileStage::Cleaned,
            index_interval(&self.config),
        )?;
        let mut pending = Vec::new();
        for segment in self.segments.get(group.clone()).unwrap_or_default() {
            segment.scan(0, SCAN_CHUNK_BYTES, &mut |scanned| {
                retained_bytes(&scanned, latest, report, &mut pending)?;
                if pending.len() >= SCAN_CHUNK_BYTES {
                    cleaned.append(&pending)?;
                    pending.clear();
                }
                Ok(Visit::Continue)
            })?;
        }
        if !pending.is_empty() {
            cleaned.append(&pending)?;
        }
        cleaned.seal()?;

        let replaced: Vec<LogSegment> = self.segments.drain(group.clone()).collect();
        if cleaned.size() == 0 {
            cleaned.delete()?;
            for segment in replaced {
                segment.delete()?;
            }
        } else {
            cleaned.rename(FileStage::Swap)?;
            file_io::sync_dir(&self.dir)?;
            for segment in replaced {
                segment.delete()?;
            }
            cleaned.rename(FileStage::Live)?;
            self.segments.insert(group.start, cleaned);
        }
        file_io::sync_dir(&self.dir)
    }
}

/// Appends to `out` what of the scanned entry compaction keeps: the entry as stored when all
/// its records stay, a smaller wrapper when some of a wrapper's records go, nothing otherwise.
pub(super) fn retained_bytes(
    scanned: &ScannedEntry<'_>,
    latest: &LatestByKey,
    report: &mut CompactionReport,
    out: &mut Vec<u8>,
) -> Result<()> {
    let entry = &scanned.entry;
    if entry.compression == Compression::None {
        report.records_read += 1;
        if judge(latest, entry.key, entry.offset, report) {
            out.extend_from_slice(scanned.bytes);
        }
        return Ok(());
    }
    let records = entry.records()?;
    report.records_read += records.len() as u64;
    let kept: Vec<Record> = records
        .iter()
        .filter(|record| judge(latest, record.key.as_deref(), record.offset, report))
        .cloned()
        .collect();
    if kept.len() == records.len() {
        out.extend_from_slice(scanned.bytes);
    } else if let Some((wrapper, _)) = rebuild_wrapper(entry, &kept)? {
        out.extend_from_slice(&wrapper);
    }
    Ok(())
}

/// Whether a record stays, counting the ones that go.
fn judge(
    latest: &LatestByKey,
    key: Option<&[u8]>,
    offset: i64,
    report: &mut CompactionReport,
) -> bool {
    let verdict = match key.map(|key| latest.get(key)) {
        None => Verdict::Keyless,
        Some(Some(newest)) if newest.offset == offset && newest.expired_tombstone => {
            Verdict::ExpiredTombstone
        }
        Some(Some(newest)) if newest.offset == offset => Verdict::Keep,
        Some(_) => Verdict::Superseded,
    };
    match verdict {
        Verdict::Keep => return true,
        Verdict::Superseded => report.superseded_removed += 1,
        Verdict::ExpiredTombstone => report.tombstones_removed += 1,
        Verdict::Keyless => report.keyless_removed += 1,
    }
    false
}

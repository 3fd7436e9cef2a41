//! Log compaction (`cleanup.policy` with `compact`), after Kafka's `LogCleaner`, simplified:
//!
//! - One pass over the whole log (the active segment included, unless the compaction runs off
//!   the partition's writer: [`CompactionJob`]) maps every key to the offset of its latest
//!   record. Kafka bounds this map (a dedupe buffer of key hashes) and cleans in
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
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use foldhash::fast::RandomState;

use super::config::LogConfig;
use super::file_io;
use super::file_names::FileStage;
use super::partition::Partition;
use super::recovery::index_interval;
use super::scan::{ScannedEntry, Visit, SCAN_CHUNK_BYTES};
use super::segment::{LogSegment, SealedSource};
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
        let cleaned = match self.plan_compaction(now_ms, true)? {
            Some(job) => job.run()?,
            None => None,
        };
        match cleaned {
            Some(cleaned) => self.finish_compaction(cleaned),
            None => Ok(self.unchanged()),
        }
    }

    /// A compaction of the sealed segments as they are now, to run anywhere ([`CompactionJob`]);
    /// `None` unless `cleanup.policy` includes `compact` and a segment is sealed. `with_active`:
    /// the active segment's records count as their keys' latest too, which is right only if
    /// nothing can truncate them before the job is finished (it runs in place).
    pub fn plan_compaction(&self, now_ms: i64, with_active: bool) -> Result<Option<CompactionJob>> {
        let Some((active, sealed)) = self.segments.split_last() else {
            return Ok(None);
        };
        if !self.config.cleanup_policy.compacts() || sealed.is_empty() {
            return Ok(None);
        }
        Ok(Some(CompactionJob {
            dir: self.dir.clone(),
            config: self.config.clone(),
            now_ms,
            sealed: sealed
                .iter()
                .map(LogSegment::sealed_source)
                .collect::<Result<_>>()?,
            active: with_active.then(|| active.sealed_source()).transpose()?,
            upper_offset: active.base_offset(),
            cancel: Arc::default(),
        }))
    }

    /// Swaps in the groups a [`CompactionJob`] cleaned, each only if its segments are still
    /// the ones it read (retention or a truncation may have removed some meanwhile: that group
    /// is discarded, and the next compaction cleans what is left).
    pub fn finish_compaction(&mut self, cleaned: CleanedSegments) -> Result<CompactionReport> {
        let mut report = self.unchanged();
        report.distinct_keys = cleaned.distinct_keys;
        // Last group first, so the indexes of the groups still to swap do not move.
        for group in cleaned.groups.into_iter().rev() {
            match self.replaced_by(&group) {
                Some(range) => {
                    report.add_group(&group.counts);
                    self.swap_in(range, group.cleaned)?;
                }
                None => group.cleaned.delete()?,
            }
        }
        report.segments_after = self.segments.len();
        report.bytes_after = self.size_bytes();
        Ok(report)
    }

    fn unchanged(&self) -> CompactionReport {
        CompactionReport {
            segments_before: self.segments.len(),
            segments_after: self.segments.len(),
            bytes_before: self.size_bytes(),
            bytes_after: self.size_bytes(),
            ..CompactionReport::default()
        }
    }

    /// Where the sealed segments `group` replaces are, if they all still are, unchanged.
    fn replaced_by(&self, group: &CleanedGroup) -> Option<Range<usize>> {
        let (first, _) = group.replaces.first()?;
        let start = self
            .segments
            .iter()
            .position(|s| s.base_offset() == *first)?;
        let range = start..start + group.replaces.len();
        let sealed = self.segments.len().checked_sub(1)?;
        let same = range.end <= sealed
            && self.segments[range.clone()]
                .iter()
                .zip(&group.replaces)
                .all(|(s, &(base, size))| s.base_offset() == base && s.size() == size);
        same.then_some(range)
    }

    /// Replaces the segments `range` with `cleaned` (deletes them when it is empty), by the
    /// `.swap` protocol.
    fn swap_in(&mut self, range: Range<usize>, mut cleaned: LogSegment) -> Result<()> {
        let start = range.start;
        let replaced: Vec<LogSegment> = self.segments.drain(range).collect();
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
            self.segments.insert(start, cleaned);
        }
        file_io::sync_dir(&self.dir)
    }
}

/// A compaction of a partition's sealed segments taken out of the partition, so that its long
/// part (reading the log, writing the cleaned segments: seconds for a few hundred MiB) can run
/// on another thread while the partition's writer goes on appending, as Kafka's cleaner
/// threads do. [`Partition::plan_compaction`] makes it, [`CompactionJob::run`] writes
/// `<base>.*.cleaned` segments from files nothing changes meanwhile (sealed segments), and
/// [`Partition::finish_compaction`] swaps them in. Opening the partition removes `.cleaned`
/// files a crash left.
pub struct CompactionJob {
    dir: PathBuf,
    config: LogConfig,
    now_ms: i64,
    sealed: Vec<SealedSource>,
    /// The active segment's records up to where they were at planning; `None`: not counted.
    active: Option<SealedSource>,
    /// The active segment's base offset: every sealed offset is below it.
    upper_offset: i64,
    cancel: Arc<AtomicBool>,
}

/// The groups a [`CompactionJob`] cleaned, waiting to be swapped in.
pub struct CleanedSegments {
    groups: Vec<CleanedGroup>,
    distinct_keys: usize,
}

struct CleanedGroup {
    /// Base offset and size of each segment the group replaces.
    replaces: Vec<(i64, u64)>,
    cleaned: LogSegment,
    /// Records read and dropped.
    counts: CompactionReport,
}

impl CleanedSegments {
    /// Deletes the cleaned files (a compaction given up).
    pub fn discard(self) -> Result<()> {
        self.groups
            .into_iter()
            .try_for_each(|group| group.cleaned.delete())
    }
}

impl CompactionJob {
    /// A flag that makes [`Self::run`] stop at its next chunk and return `None`.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Maps every key to its latest record, then writes each group of sealed segments with a
    /// record to drop as one cleaned segment; `None` when cancelled (nothing left behind).
    pub fn run(self) -> Result<Option<CleanedSegments>> {
        let Some((latest, removable)) = self.latest_by_key()? else {
            return Ok(None);
        };
        let mut cleaned = CleanedSegments {
            groups: Vec::new(),
            distinct_keys: latest.len(),
        };
        for group in self.cleaning_groups(&removable) {
            match self.clean_group(group, &latest) {
                Ok(Some(group)) => cleaned.groups.push(group),
                outcome => {
                    cleaned.discard()?;
                    return outcome.map(|_| None);
                }
            }
        }
        Ok(Some(cleaned))
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Every key's latest record, and per sealed segment how many records cleaning would drop;
    /// `None` when cancelled.
    fn latest_by_key(&self) -> Result<Option<(LatestByKey, Vec<u64>)>> {
        let delete_retention_ms = self.config.delete_retention_ms;
        let mut latest = LatestByKey::default();
        let mut removable = vec![0u64; self.sealed.len()];
        for (index, segment) in self.sealed.iter().chain(&self.active).enumerate() {
            segment.scan(&mut |scanned| {
                if self.cancelled() {
                    return Ok(Visit::Stop);
                }
                scanned.entry.visit_records(&mut |record| {
                    let goes = match record.key {
                        None => Some(index),
                        Some(_) => note_latest(
                            &mut latest,
                            &record,
                            index,
                            self.now_ms,
                            delete_retention_ms,
                        ),
                    };
                    if let Some(count) = goes.and_then(|segment| removable.get_mut(segment)) {
                        *count += 1;
                    }
                    Ok(())
                })?;
                Ok(Visit::Continue)
            })?;
            if self.cancelled() {
                return Ok(None);
            }
        }
        for record in latest.values().filter(|record| record.expired_tombstone) {
            if let Some(count) = removable.get_mut(record.segment) {
                *count += 1;
            }
        }
        Ok(Some((latest, removable)))
    }

    /// Consecutive sealed segments whose sizes add up to at most `segment.bytes` and whose
    /// offsets fit one segment's i32 relative offsets; a lone segment is cleaned only if it
    /// has something to drop.
    fn cleaning_groups(&self, removable: &[u64]) -> Vec<Range<usize>> {
        let segment_bytes = u64::try_from(self.config.segment_bytes).unwrap_or(0);
        let sealed = &self.sealed;
        let upper = |i: usize| sealed.get(i).map_or(self.upper_offset, |s| s.base_offset);
        let mut groups = Vec::new();
        let mut start = 0;
        while start < sealed.len() {
            let base_offset = sealed[start].base_offset;
            let mut end = start + 1;
            let mut bytes = sealed[start].size;
            while let Some(next) = sealed.get(end) {
                let offsets_fit = i32::try_from(upper(end + 1) - base_offset - 1).is_ok();
                if bytes + next.size > segment_bytes || !offsets_fit {
                    break;
                }
                bytes += next.size;
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

    /// Writes the segments `group` as one, keeping the records `latest` says to keep; `None`
    /// when cancelled.
    fn clean_group(
        &self,
        group: Range<usize>,
        latest: &LatestByKey,
    ) -> Result<Option<CleanedGroup>> {
        let sources = &self.sealed[group];
        let mut cleaned = LogSegment::create(
            &self.dir,
            sources[0].base_offset,
            FileStage::Cleaned,
            index_interval(&self.config),
        )?;
        let mut counts = CompactionReport::default();
        let mut pending = Vec::new();
        for source in sources {
            source.scan(&mut |scanned| {
                if self.cancelled() {
                    return Ok(Visit::Stop);
                }
                retained_bytes(&scanned, latest, &mut counts, &mut pending)?;
                if pending.len() >= SCAN_CHUNK_BYTES {
                    cleaned.append(&pending)?;
                    pending.clear();
                }
                Ok(Visit::Continue)
            })?;
            if self.cancelled() {
                cleaned.delete()?;
                return Ok(None);
            }
        }
        if !pending.is_empty() {
            cleaned.append(&pending)?;
        }
        cleaned.seal()?;
        Ok(Some(CleanedGroup {
            replaces: sources.iter().map(|s| (s.base_offset, s.size)).collect(),
            cleaned,
            counts,
        }))
    }
}

impl CompactionReport {
    /// Adds a group's records read and dropped.
    fn add_group(&mut self, group: &CompactionReport) {
        self.groups_cleaned += 1;
        self.records_read += group.records_read;
        self.superseded_removed += group.superseded_removed;
        self.tombstones_removed += group.tombstones_removed;
        self.keyless_removed += group.keyless_removed;
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

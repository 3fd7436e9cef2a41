//! Opening a partition directory after a clean stop or a crash, as Kafka's `LogLoader` does:
//!
//! 1. `.deleted` and `.cleaned` files are removed (a deletion or compaction that had not
//!    reached its commit point).
//! 2. A compaction whose `<base>.log.swap` exists had written and synced its result: the live
//!    segments it replaces (base offsets from the swap's base up to its last offset) are
//!    removed and the swap files renamed to live. `.swap` indexes without a `.log.swap` are
//!    removed.
//! 3. Index files without a `.log` are removed.
//! 4. Sealed segments are opened from their (checked) indexes; the last segment is scanned
//!    entry by entry, a torn or corrupt tail is cut off and its indexes are rebuilt, unless
//!    the partition was closed cleanly and the segment's files are untouched since (its
//!    clean-shutdown file, `clean_close`, which opening always removes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::clean_close;
use super::config::LogConfig;
use super::file_io::{self, IoContext};
use super::file_names::{parse_segment_file_name, segment_path, FileStage, SegmentFile};
use super::segment::{LogSegment, OnDamage, TruncatedTail};
use crate::error::Result;

/// What opening a partition found and did, for the caller to log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The directory did not exist or held no segment: an empty log was created.
    pub created: bool,
    pub segments: usize,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The last segment ended in a torn or corrupt entry, which was cut off with what followed.
    pub truncated_tail: Option<TruncatedTail>,
    /// Indexes rewritten because they disagreed with their log: (segment base offset, why).
    pub rebuilt_indexes: Vec<(i64, String)>,
    /// Compactions interrupted after their result was complete, finished now (base offsets).
    pub completed_swaps: Vec<i64>,
    /// Leftovers removed: `.deleted`, `.cleaned` and incomplete `.swap` files, orphan indexes.
    pub removed_files: Vec<PathBuf>,
    /// The last segment was taken as a clean close left it, unscanned (`clean_close`).
    pub reopened_clean: bool,
}

impl OpenReport {
    /// Whether the log was found exactly as a clean stop leaves it.
    pub fn is_clean(&self) -> bool {
        self.truncated_tail.is_none()
            && self.rebuilt_indexes.is_empty()
            && self.completed_swaps.is_empty()
            && self.removed_files.is_empty()
    }
}

/// The segments of `dir` (never empty; the last one is active), the log end offset, and the
/// report.
pub(crate) fn load_segments(
    dir: &Path,
    config: &LogConfig,
) -> Result<(Vec<LogSegment>, i64, OpenReport)> {
    let interval = index_interval(config);
    let mut report = OpenReport::default();
    let mut found = list_segment_files(dir)?;

    for (&(base_offset, file), &stage) in &found.temporary {
        if matches!(stage, FileStage::Deleted | FileStage::Cleaned)
            || !found.swap_logs.contains(&base_offset)
        {
            let path = segment_path(dir, base_offset, file, stage);
            file_io::remove_file(&path)?;
            report.removed_files.push(path);
        }
    }
    for &base_offset in &found.swap_logs {
        finish_swap(dir, base_offset, interval, &mut found.live, &mut report)?;
    }
    for (&base_offset, files) in &found.live {
        if !files.contains(&SegmentFile::Log) {
            for &file in files {
                let path = segment_path(dir, base_offset, file, FileStage::Live);
                file_io::remove_file(&path)?;
                report.removed_files.push(path);
            }
        }
    }
    let bases: Vec<i64> = found
        .live
        .iter()
        .filter(|(_, files)| files.contains(&SegmentFile::Log))
        .map(|(&base_offset, _)| base_offset)
        .collect();

    let mut segments = Vec::with_capacity(bases.len().max(1));
    let Some((&last_base, sealed_bases)) = bases.split_last() else {
        report.created = true;
        segments.push(LogSegment::create(dir, 0, FileStage::Live, interval)?);
        file_io::sync_dir(dir)?;
        report.segments = 1;
        return Ok((segments, 0, report));
    };
    for (i, &base_offset) in sealed_bases.iter().enumerate() {
        let upper_offset = bases.get(i + 1).copied().unwrap_or(last_base);
        let (segment, rebuilt) = LogSegment::open_sealed(dir, base_offset, upper_offset, interval)?;
        if let Some(problem) = rebuilt {
            report.rebuilt_indexes.push((base_offset, problem));
        }
        segments.push(segment);
    }
    let closed = clean_close::take(dir, last_base, interval)?;
    report.reopened_clean = closed.is_some();
    let (last, rescan) = match closed {
        Some(closed) => LogSegment::open_closed(dir, closed)?,
        None => LogSegment::open_and_scan(
            dir,
            last_base,
            FileStage::Live,
            interval,
            OnDamage::Truncate,
        )?,
    };
    if let Some(problem) = rescan.index_problem {
        report.rebuilt_indexes.push((last_base, problem));
    }
    report.truncated_tail = rescan.truncated;
    segments.push(last);
    if !report.removed_files.is_empty() || !report.completed_swaps.is_empty() {
        file_io::sync_dir(dir)?;
    }
    report.segments = segments.len();
    report.log_start_offset = bases.first().copied().unwrap_or(last_base);
    report.log_end_offset = rescan.next_offset;
    Ok((segments, rescan.next_offset, report))
}

/// `index.interval.bytes` as a byte count (validated non-negative).
pub(crate) fn index_interval(config: &LogConfig) -> u64 {
    u64::try_from(config.index_interval_bytes).unwrap_or(0)
}

/// The segment files of a directory by stage.
#[derive(Default)]
struct SegmentFiles {
    /// Live files by base offset.
    live: BTreeMap<i64, BTreeSet<SegmentFile>>,
    /// `.cleaned`, `.swap` and `.deleted` files.
    temporary: BTreeMap<(i64, SegmentFile), FileStage>,
    /// Base offsets with a `.log.swap`: compactions that reached their commit point.
    swap_logs: BTreeSet<i64>,
}

fn list_segment_files(dir: &Path) -> Result<SegmentFiles> {
    let mut found = SegmentFiles::default();
    let listing = std::fs::read_dir(dir).context(|| format!("listing {}", dir.display()))?;
    for item in listing {
        let item = item.context(|| format!("listing {}", dir.display()))?;
        let name = item.file_name();
        let Some((base_offset, file, stage)) = name.to_str().and_then(parse_segment_file_name)
        else {
            continue;
        };
        match stage {
            FileStage::Live => {
                found.live.entry(base_offset).or_default().insert(file);
            }
            FileStage::Swap if file == SegmentFile::Log => {
                found.swap_logs.insert(base_offset);
                found.temporary.insert((base_offset, file), stage);
            }
            _ => {
                found.temporary.insert((base_offset, file), stage);
            }
        }
    }
    Ok(found)
}

/// Completes a compaction whose swap segment at `base_offset` is complete: the live segments it
/// replaces go, the swap files become live.
fn finish_swap(
    dir: &Path,
    base_offset: i64,
    interval: u64,
    live: &mut BTreeMap<i64, BTreeSet<SegmentFile>>,
    report: &mut OpenReport,
) -> Result<()> {
    let (mut swap, rescan) =
        LogSegment::open_and_scan(dir, base_offset, FileStage::Swap, interval, OnDamage::Fail)?;
    // The swap holds the replaced segments' retained records, so every live segment whose base
    // lies within its offsets was replaced (its own base included, even if it came out empty).
    let end = rescan.next_offset.max(base_offset.saturating_add(1));
    let replaced: Vec<i64> = live
        .range(base_offset..end)
        .map(|(&base, _)| base)
        .collect();
    for replaced_base in replaced {
        for file in live.remove(&replaced_base).unwrap_or_default() {
            let path = segment_path(dir, replaced_base, file, FileStage::Live);
            file_io::remove_file(&path)?;
            report.removed_files.push(path);
        }
    }
    swap.seal()?;
    swap.rename(FileStage::Live)?;
    live.insert(base_offset, SegmentFile::ALL.into_iter().collect());
    report.completed_swaps.push(base_offset);
    Ok(())
}

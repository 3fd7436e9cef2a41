//! Compaction of segment files outside a partition: the immutable objects of a changelog kept
//! on an object store (`kstate.log.remote`). The rules are [`compaction`](super::compaction)'s:
//! a record stays only if it is its key's latest (newer objects count too, but are not
//! rewritten, like the active segment), an expired tombstone goes `delete.retention.ms` after
//! its timestamp, keyless records go, and offsets are kept.
//!
//! Consecutive inputs are grouped while their sizes add up to at most `segment.bytes` and their
//! offsets fit one segment's i32 relative offsets. Each group becomes one file that covers
//! exactly its inputs' offsets, even when no record is left, so a log's objects keep tiling its
//! offsets without a gap.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::compaction::{note_latest, retained_bytes, LatestByKey};
use super::config::LogConfig;
use super::file_io::IoContext;
use super::file_names::filename_prefix;
use super::scan::{scan_entries, ScannedEntry, Visit, SCAN_CHUNK_BYTES};
use super::CompactionReport;
use crate::error::{Error, Result};

/// A segment file holding the records of offsets `first..=last` (`last` unknown: up to its
/// last record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentObject {
    pub first: i64,
    pub last: Option<i64>,
    pub path: PathBuf,
}

/// A file [`compact_objects`] wrote: what stays of the inputs with offsets `first..=last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactedObject {
    pub first: i64,
    pub last: i64,
    pub path: PathBuf,
    pub bytes: u64,
}

/// Compacts `inputs` (consecutive objects, oldest first) into files in `out_dir` named
/// `<first>-<last>.log` (20-digit offsets), given the `newer` objects that follow them.
/// `progress(bytes read, bytes to read)` hears about both passes over the files.
pub fn compact_objects(
    inputs: &[SegmentObject],
    newer: &[SegmentObject],
    config: &LogConfig,
    now_ms: i64,
    out_dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<CompactedObject>, CompactionReport)> {
    let ranges = input_ranges(inputs)?;
    let sizes = inputs
        .iter()
        .chain(newer)
        .map(|object| file_size(&object.path))
        .collect::<Result<Vec<u64>>>()?;
    let input_bytes: u64 = sizes.iter().take(inputs.len()).sum();
    let total = sizes.iter().sum::<u64>() + input_bytes;
    let mut done = 0;
    let mut report = CompactionReport {
        segments_before: inputs.len(),
        bytes_before: input_bytes,
        ..CompactionReport::default()
    };

    let mut latest = LatestByKey::default();
    let mut previous = None;
    for (index, object) in inputs.iter().chain(newer).enumerate() {
        scan_object(object, &mut |scanned| {
            scanned.entry.visit_records(&mut |record| {
                check_offset(object, record.offset, &mut previous)?;
                note_latest(
                    &mut latest,
                    &record,
                    index,
                    now_ms,
                    config.delete_retention_ms,
                );
                Ok(())
            })
        })?;
        done += sizes.get(index).copied().unwrap_or(0);
        progress(done, total);
    }
    report.distinct_keys = latest.len();

    let mut outputs = Vec::new();
    for group in groups(&ranges, &sizes, config) {
        let (Some(&(first, _)), Some(&(_, last))) =
            (ranges.get(group.start), ranges.get(group.end - 1))
        else {
            continue;
        };
        let path = out_dir.join(format!(
            "{}-{}.log",
            filename_prefix(first),
            filename_prefix(last)
        ));
        let mut file = File::create(&path).context(|| format!("creating {}", path.display()))?;
        let mut pending = Vec::new();
        let mut bytes = 0u64;
        for index in group {
            let (Some(object), Some(size)) = (inputs.get(index), sizes.get(index)) else {
                continue;
            };
            scan_object(object, &mut |scanned| {
                retained_bytes(&scanned, &latest, &mut report, &mut pending)?;
                if pending.len() >= SCAN_CHUNK_BYTES {
                    write(&mut file, &path, &mut pending, &mut bytes)?;
                }
                Ok(())
            })?;
            done += size;
            progress(done, total);
        }
        write(&mut file, &path, &mut pending, &mut bytes)?;
        report.bytes_after += bytes;
        outputs.push(CompactedObject {
            first,
            last,
            path,
            bytes,
        });
    }
    report.segments_after = outputs.len();
    report.groups_cleaned = outputs.len();
    Ok((outputs, report))
}

/// The `(first, last)` of every input, checked to follow one another without a gap.
fn input_ranges(inputs: &[SegmentObject]) -> Result<Vec<(i64, i64)>> {
    let mut ranges: Vec<(i64, i64)> = Vec::with_capacity(inputs.len());
    for object in inputs {
        let Some(last) = object.last.filter(|&last| last >= object.first) else {
            return Err(Error::InvalidArgument(format!(
                "compaction input {} needs a last offset at or above its first {}",
                object.path.display(),
                object.first
            )));
        };
        if let Some(&(_, previous_last)) = ranges.last() {
            if object.first != previous_last + 1 {
                return Err(Error::InvalidArgument(format!(
                    "compaction inputs must follow one another: {} starts at {} after offset {previous_last}",
                    object.path.display(),
                    object.first
                )));
            }
        }
        ranges.push((object.first, last));
    }
    Ok(ranges)
}

/// Consecutive inputs whose sizes add up to at most `segment.bytes` and whose offsets fit a
/// segment's i32 relative offsets (at least one input per group).
fn groups(ranges: &[(i64, i64)], sizes: &[u64], config: &LogConfig) -> Vec<std::ops::Range<usize>> {
    let segment_bytes = u64::try_from(config.segment_bytes).unwrap_or(0);
    let mut groups = Vec::new();
    let mut start = 0;
    while start < ranges.len() {
        let first = ranges.get(start).map_or(0, |&(first, _)| first);
        let mut bytes = sizes.get(start).copied().unwrap_or(0);
        let mut end = start + 1;
        while let (Some(&(_, last)), Some(&size)) = (ranges.get(end), sizes.get(end)) {
            if bytes + size > segment_bytes || i32::try_from(last - first).is_err() {
                break;
            }
            bytes += size;
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Visits the entries of an object file; a damaged entry is an error (objects are immutable).
fn scan_object(
    object: &SegmentObject,
    visit: &mut dyn FnMut(ScannedEntry<'_>) -> Result<()>,
) -> Result<()> {
    let path = &object.path;
    let file = File::open(path).context(|| format!("opening {}", path.display()))?;
    let size = file_size(path)?;
    let end = scan_entries(&file, 0, size, SCAN_CHUNK_BYTES, &mut |scanned| {
        visit(scanned)?;
        Ok(Visit::Continue)
    })?;
    match end.problem {
        Some(problem) => Err(Error::Corrupted(format!(
            "changelog object {}: bad entry at byte {}: {problem}",
            path.display(),
            end.position
        ))),
        None => Ok(()),
    }
}

/// Checks that a record's offset lies in its object's range and above every offset before it.
fn check_offset(object: &SegmentObject, offset: i64, previous: &mut Option<i64>) -> Result<()> {
    let in_range = offset >= object.first && object.last.is_none_or(|last| offset <= last);
    if !in_range || previous.is_some_and(|p| offset <= p) {
        return Err(Error::Corrupted(format!(
            "changelog object {} (offsets {}..={}) holds offset {offset}{}",
            object.path.display(),
            object.first,
            object.last.map_or("end".into(), |last| last.to_string()),
            previous.map_or(String::new(), |p| format!(" after offset {p}"))
        )));
    }
    *previous = Some(offset);
    Ok(())
}

fn file_size(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .context(|| format!("reading the size of {}", path.display()))?
        .len())
}

fn write(file: &mut File, path: &Path, pending: &mut Vec<u8>, bytes: &mut u64) -> Result<()> {
    file.write_all(pending)
        .context(|| format!("writing {}", path.display()))?;
    *bytes += pending.len() as u64;
    pending.clear();
    Ok(())
}

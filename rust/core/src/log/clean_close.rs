//! What a cleanly closed partition's active segment looked like, kept by this process so that
//! opening the partition again needs no scan of that segment: Kafka skips recovery after a
//! clean shutdown (its `.kafka_cleanshutdown` file); kstate keeps the scan's result in memory
//! instead, as kstate.spark parks a task's changelogs (closes them) after every micro-batch and
//! opens them again for the next one.
//!
//! The result is used only if the segment's three files are still the ones closed: same file
//! (device and inode), same length, same modification and change times, and the log's last
//! bytes unchanged. A file written behind the process's back (another process appending, a
//! truncation) is scanned as always, and a process that was killed kept nothing, so a crash is
//! always followed by a full scan.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::file_names::{segment_path, FileStage, SegmentFile};
use super::indexing::SegmentIndexing;

/// How many bytes of closed segments' indexes the process keeps at most (the entries of the
/// oldest closes are dropped first): past it, partitions are scanned on open as before.
const KEPT_MAX_BYTES: usize = 64 << 20;
/// Bytes counted per index entry kept (offset entry 8, time entry 12, with their vectors).
const BYTES_PER_ENTRY: usize = 24;
/// The log's last bytes, compared on open besides the files' identities.
const TAIL_BYTES: u64 = 4096;

/// One file as `stat` saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

fn identity(path: &Path) -> Option<FileIdentity> {
    let meta = std::fs::metadata(path).ok()?;
    Some(FileIdentity {
        device: meta.dev(),
        inode: meta.ino(),
        len: meta.len(),
        modified: (meta.mtime(), meta.mtime_nsec()),
        changed: (meta.ctime(), meta.ctime_nsec()),
    })
}

/// The active segment of a partition closed cleanly.
#[derive(Debug, Clone)]
pub(crate) struct ClosedSegment {
    pub(crate) base_offset: i64,
    pub(crate) size: u64,
    pub(crate) indexing: SegmentIndexing,
    pub(crate) first_entry_timestamp: Option<i64>,
    pub(crate) next_offset: i64,
    files: Vec<FileIdentity>,
    tail: Vec<u8>,
    /// Order of closing, for dropping the oldest first.
    closed: u64,
}

impl ClosedSegment {
    fn kept_bytes(&self) -> usize {
        (self.indexing.offsets.entries().len() + self.indexing.times.entries().len())
            * BYTES_PER_ENTRY
    }
}

#[derive(Default)]
struct Kept {
    by_dir: HashMap<PathBuf, ClosedSegment>,
    bytes: usize,
    closes: u64,
}

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

/// The last `TAIL_BYTES` of a log file `size` bytes long.
fn log_tail(dir: &Path, base_offset: i64, size: u64) -> Option<Vec<u8>> {
    let file = std::fs::File::open(segment_path(
        dir,
        base_offset,
        SegmentFile::Log,
        FileStage::Live,
    ))
    .ok()?;
    let start = size.saturating_sub(TAIL_BYTES);
    let mut tail = vec![0; (size - start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut tail, start).ok()?;
    Some(tail)
}

fn segment_files(dir: &Path, base_offset: i64) -> Option<Vec<FileIdentity>> {
    [
        SegmentFile::Log,
        SegmentFile::OffsetIndex,
        SegmentFile::TimeIndex,
    ]
    .into_iter()
    .map(|file| identity(&segment_path(dir, base_offset, file, FileStage::Live)))
    .collect()
}

/// Records the active segment of `dir`, just flushed and about to be closed.
pub(crate) fn remember(
    dir: &Path,
    base_offset: i64,
    size: u64,
    indexing: &SegmentIndexing,
    first_entry_timestamp: Option<i64>,
    next_offset: i64,
) {
    let Some(files) = segment_files(dir, base_offset) else {
        return;
    };
    if files[0].len != size {
        return; // not what the segment wrote: leave it to a scan
    }
    let Some(tail) = log_tail(dir, base_offset, size) else {
        return;
    };
    let Ok(mut kept) = KEPT.lock() else { return };
    let kept = kept.get_or_insert_with(Kept::default);
    kept.closes += 1;
    let segment = ClosedSegment {
        base_offset,
        size,
        indexing: indexing.clone(),
        first_entry_timestamp,
        next_offset,
        files,
        tail,
        closed: kept.closes,
    };
    if segment.kept_bytes() > KEPT_MAX_BYTES {
        return;
    }
    kept.bytes += segment.kept_bytes();
    if let Some(old) = kept.by_dir.insert(dir.to_path_buf(), segment) {
        kept.bytes -= old.kept_bytes();
    }
    while kept.bytes > KEPT_MAX_BYTES {
        let Some(oldest) = kept
            .by_dir
            .iter()
            .min_by_key(|(_, s)| s.closed)
            .map(|(d, _)| d.clone())
        else {
            break;
        };
        if let Some(old) = kept.by_dir.remove(&oldest) {
            kept.bytes -= old.kept_bytes();
        }
    }
}

/// Takes what the last clean close of `dir` left, if its active segment is `base_offset`'s and
/// its files are untouched since.
pub(crate) fn take(dir: &Path, base_offset: i64) -> Option<ClosedSegment> {
    let segment = {
        let mut kept = KEPT.lock().ok()?;
        let kept = kept.as_mut()?;
        let segment = kept.by_dir.remove(dir)?;
        kept.bytes -= segment.kept_bytes();
        segment
    };
    (segment.base_offset == base_offset
        && segment_files(dir, base_offset).as_ref() == Some(&segment.files)
        && log_tail(dir, base_offset, segment.size).as_ref() == Some(&segment.tail))
    .then_some(segment)
}

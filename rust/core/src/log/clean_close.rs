//! A partition's clean-shutdown file: what a clean close left of its active segment, so that
//! the next open, by any process, needs no scan of that segment. Kafka skips recovery the same
//! way after a clean shutdown (its `.kafka_cleanshutdown` file next to the logs); kstate.spark
//! closes a task's changelogs after every micro-batch and opens them again for the next one,
//! often in the other Python worker.
//!
//! `Partition::close` fsyncs the log (the index files are written, not fsynced) and then
//! writes the file: the segment's base offset, size and end offset, what the index rule needs
//! to go on appending, the entry counts and CRCs of its index files, the three files'
//! identities (device, inode, length, modification and change times) and a CRC of the log's
//! last bytes, all under a CRC of their own. Opening removes the file before anything can be appended, so a process killed
//! while it had the partition open leaves none and the next open scans. The file is used only
//! if every file is still the one closed: a file written behind the partition's back (another
//! tool appending, a truncation, a flipped byte near the end) is scanned as always. The file is
//! not fsynced: after a machine crash it is missing (a scan) or names files that changed since
//! (a scan), never wrong.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::file_io;
use super::file_names::{segment_path, FileStage, SegmentFile};
use super::index_file::{entries_crc, parse_index, StoredIndex};
use super::indexing::{IndexingState, SegmentIndexing};
use super::offset_index::{OffsetIndex, OffsetIndexEntry};
use super::time_index::{TimeIndex, TimeIndexEntry};

/// In the partition directory (the log ignores other files).
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = ".kstate-cleanshutdown";
/// What the file's first word says: its format.
const VERSION: &str = "kstate-cleanshutdown-v1";
/// The log's last bytes, checked on open besides the files' identities.
const TAIL_BYTES: u64 = 4096;
/// The three files of a segment, in the order the file lists them.
const FILES: [SegmentFile; 3] = [
    SegmentFile::Log,
    SegmentFile::OffsetIndex,
    SegmentFile::TimeIndex,
];

/// One file as `stat` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileIdentity {
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            device: meta.dev(),
            inode: meta.ino(),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    fn fields(&self) -> [i64; 7] {
        [
            self.device as i64,
            self.inode as i64,
            self.len as i64,
            self.modified.0,
            self.modified.1,
            self.changed.0,
            self.changed.1,
        ]
    }

    fn from_fields(f: &[i64]) -> Self {
        Self {
            device: f[0] as u64,
            inode: f[1] as u64,
            len: f[2] as u64,
            modified: (f[3], f[4]),
            changed: (f[5], f[6]),
        }
    }
}

/// The active segment of a partition as a clean close left it.
#[derive(Debug, Clone)]
pub(crate) struct ClosedSegment {
    pub(crate) base_offset: i64,
    pub(crate) size: u64,
    pub(crate) indexing: SegmentIndexing,
    pub(crate) first_entry_timestamp: Option<i64>,
    pub(crate) next_offset: i64,
}

/// What the file records, as numbers in a fixed order.
struct Record {
    base_offset: i64,
    size: u64,
    next_offset: i64,
    first_entry_timestamp: Option<i64>,
    state: IndexingState,
    offset_entries: usize,
    time_entries: usize,
    offset_index_crc: u32,
    time_index_crc: u32,
    files: [FileIdentity; 3],
    tail_crc: u32,
}

const FIELDS: usize = 13 + 3 * 7;

impl Record {
    fn to_line(&self) -> String {
        let mut fields = vec![
            self.base_offset,
            self.size as i64,
            self.next_offset,
            i64::from(self.first_entry_timestamp.is_some()),
            self.first_entry_timestamp.unwrap_or(0),
            self.state.index_interval_bytes as i64,
            self.state.bytes_since_last_entry as i64,
            self.state.max_timestamp,
            self.state.offset_of_max_timestamp,
            self.offset_entries as i64,
            self.time_entries as i64,
            i64::from(self.offset_index_crc),
            i64::from(self.time_index_crc),
        ];
        for file in &self.files {
            fields.extend(file.fields());
        }
        let numbers: Vec<String> = fields.iter().map(i64::to_string).collect();
        let body = format!("{VERSION} {} {}", numbers.join(" "), self.tail_crc);
        format!("{body} {}\n", crc32fast::hash(body.as_bytes()))
    }

    fn parse(text: &str) -> Option<Self> {
        let text = text.strip_suffix('\n')?;
        let (body, crc) = text.rsplit_once(' ')?;
        if crc.parse::<u32>().ok()? != crc32fast::hash(body.as_bytes()) {
            return None;
        }
        let mut words = body.split(' ');
        if words.next()? != VERSION {
            return None;
        }
        let words: Vec<&str> = words.collect();
        let (numbers, tail_crc) = words.split_at(words.len().checked_sub(1)?);
        let f = numbers
            .iter()
            .map(|w| w.parse::<i64>().ok())
            .collect::<Option<Vec<i64>>>()?;
        if f.len() != FIELDS {
            return None;
        }
        let identities = &f[13..];
        Some(Self {
            base_offset: f[0],
            size: u64::try_from(f[1]).ok()?,
            next_offset: f[2],
            first_entry_timestamp: (f[3] != 0).then_some(f[4]),
            state: IndexingState {
                index_interval_bytes: u64::try_from(f[5]).ok()?,
                bytes_since_last_entry: u64::try_from(f[6]).ok()?,
                max_timestamp: f[7],
                offset_of_max_timestamp: f[8],
            },
            offset_entries: usize::try_from(f[9]).ok()?,
            time_entries: usize::try_from(f[10]).ok()?,
            offset_index_crc: u32::try_from(f[11]).ok()?,
            time_index_crc: u32::try_from(f[12]).ok()?,
            files: [
                FileIdentity::from_fields(&identities[0..7]),
                FileIdentity::from_fields(&identities[7..14]),
                FileIdentity::from_fields(&identities[14..21]),
            ],
            tail_crc: tail_crc[0].parse().ok()?,
        })
    }
}

/// The CRC of the last `TAIL_BYTES` of a log file `size` bytes long.
fn tail_crc(dir: &Path, base_offset: i64, size: u64) -> Option<u32> {
    let file = std::fs::File::open(segment_path(
        dir,
        base_offset,
        SegmentFile::Log,
        FileStage::Live,
    ))
    .ok()?;
    let start = size.saturating_sub(TAIL_BYTES);
    let mut tail = vec![0; usize::try_from(size - start).ok()?];
    file_io::read_exact_at(&file, &mut tail, start).ok()?;
    Some(crc32fast::hash(&tail))
}

fn identities(dir: &Path, base_offset: i64) -> Option<[FileIdentity; 3]> {
    let [log, offsets, times] =
        FILES.map(|file| FileIdentity::of(&segment_path(dir, base_offset, file, FileStage::Live)));
    Some([log?, offsets?, times?])
}

/// Writes the clean-shutdown file of `dir`, whose active segment was just flushed (log and
/// index files complete and fsynced) and is about to be closed. A segment whose files cannot
/// be described leaves none (the next open scans).
pub(crate) fn remember(dir: &Path, closed: &ClosedSegment) {
    let Some(files) = identities(dir, closed.base_offset) else {
        return;
    };
    if files[0].len != closed.size {
        return; // not what the segment wrote: leave it to a scan
    }
    let Some(tail_crc) = tail_crc(dir, closed.base_offset, closed.size) else {
        return;
    };
    let record = Record {
        base_offset: closed.base_offset,
        size: closed.size,
        next_offset: closed.next_offset,
        first_entry_timestamp: closed.first_entry_timestamp,
        state: closed.indexing.state(),
        offset_entries: closed.indexing.offsets.entries().len(),
        time_entries: closed.indexing.times.entries().len(),
        offset_index_crc: entries_crc(closed.indexing.offsets.entries()),
        time_index_crc: entries_crc(closed.indexing.times.entries()),
        files,
        tail_crc,
    };
    let path = dir.join(CLEAN_SHUTDOWN_FILE);
    let tmp = path.with_extension("tmp");
    // Best effort: without the file the next open scans, which is always right.
    if std::fs::write(&tmp, record.to_line()).is_err() || std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&path);
    }
}

/// Takes the clean-shutdown file of `dir` (it is removed, whatever it says, before the
/// partition can be appended to) and returns the active segment it describes if that is
/// `base_offset`'s, indexed every `index_interval_bytes`, and its files are untouched since.
pub(crate) fn take(
    dir: &Path,
    base_offset: i64,
    index_interval_bytes: u64,
) -> crate::error::Result<Option<ClosedSegment>> {
    let path = dir.join(CLEAN_SHUTDOWN_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => None,
    };
    file_io::remove_file(&path)?;
    let Some(record) = text.as_deref().and_then(Record::parse) else {
        return Ok(None);
    };
    // The size goes on to place appends: it must be the closed log's length, not only match its CRC.
    let untouched = record.base_offset == base_offset
        && record.size == record.files[0].len
        && record.state.index_interval_bytes == index_interval_bytes
        && identities(dir, base_offset) == Some(record.files)
        && tail_crc(dir, base_offset, record.size) == Some(record.tail_crc);
    if !untouched {
        return Ok(None);
    }
    // Not fsynced at close: after a machine crash their bytes may differ at the same length.
    let index = |file, crc| {
        let bytes = std::fs::read(segment_path(dir, base_offset, file, FileStage::Live)).ok()?;
        (crc32fast::hash(&bytes) == crc).then_some(bytes)
    };
    let (Some(offset_bytes), Some(time_bytes)) = (
        index(SegmentFile::OffsetIndex, record.offset_index_crc),
        index(SegmentFile::TimeIndex, record.time_index_crc),
    ) else {
        return Ok(None);
    };
    let (StoredIndex::Entries(offsets), StoredIndex::Entries(times)) = (
        parse_index::<OffsetIndexEntry>(&offset_bytes),
        parse_index::<TimeIndexEntry>(&time_bytes),
    ) else {
        return Ok(None);
    };
    if offsets.len() != record.offset_entries || times.len() != record.time_entries {
        return Ok(None);
    }
    let indexing = SegmentIndexing::resumed(
        OffsetIndex::new(base_offset, offsets),
        TimeIndex::new(base_offset, times),
        record.state,
    );
    Ok(Some(ClosedSegment {
        base_offset,
        size: record.size,
        indexing,
        first_entry_timestamp: record.first_entry_timestamp,
        next_offset: record.next_offset,
    }))
}

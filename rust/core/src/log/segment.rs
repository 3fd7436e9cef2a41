//! One segment: a `.log` file of message-set entries whose offsets start at the segment's base
//! offset, with its `.index` and `.timeindex` (spec 3.8).
//!
//! Only the last segment of a partition is appended to. When it stops being last (a roll) it
//! is *sealed*: a final time entry is added and everything is fsynced, so only the last segment
//! can ever have a torn tail after a crash. Sealed segments are opened from their index files
//! (checked, not trusted blindly); the last one is scanned on every open.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use super::clean_close::{self, ClosedSegment};
use super::file_io::{self, IoContext};
use super::file_names::{segment_path, FileStage, SegmentFile};
use super::index_file::{read_index, IndexEntry, IndexFile, StoredIndex};
use super::indexing::SegmentIndexing;
use super::offset_index::{OffsetIndex, OffsetIndexEntry};
use super::scan::{
    scan_entries, ScanEnd, ScannedEntry, Visit, ENTRY_HEADER_BYTES, SCAN_CHUNK_BYTES,
};
use super::time_index::{TimeIndex, TimeIndexEntry};
use crate::error::{Error, Result};
use crate::format::timestamped::NO_TIMESTAMP;
use crate::record::{shallow_entries, BuiltEntry};

/// Index positions are i32, so a segment file cannot grow past this.
pub(crate) const MAX_SEGMENT_FILE_BYTES: u64 = i32::MAX as u64;

pub(crate) struct LogSegment {
    dir: PathBuf,
    base_offset: i64,
    stage: FileStage,
    log: File,
    size: u64,
    indexing: SegmentIndexing,
    offset_index_file: IndexFile<OffsetIndexEntry>,
    time_index_file: IndexFile<TimeIndexEntry>,
    /// The first entry's timestamp, which `segment.ms` is measured from (`None` when the
    /// segment is empty or sealed and not scanned).
    first_entry_timestamp: Option<i64>,
    /// When this process created the segment or first appended to it: what `segment.ms` is
    /// measured from when entries carry no timestamp.
    created_ms: Option<i64>,
    /// The log file holds nothing this process has not fdatasynced since: a commit's publication
    /// syncs it, and the close right after need not again. False for a segment just opened.
    log_synced: bool,
}

/// A sealed segment's log file, read by a compaction that runs beside the partition's writer
/// ([`LogSegment::sealed_source`]).
pub(crate) struct SealedSource {
    path: PathBuf,
    pub(crate) base_offset: i64,
    pub(crate) size: u64,
    log: File,
}

impl SealedSource {
    /// Visits every entry, as [`LogSegment::scan`] does.
    pub(crate) fn scan(
        &self,
        visit: &mut dyn FnMut(ScannedEntry<'_>) -> Result<Visit>,
    ) -> Result<ScanEnd> {
        let end = scan_entries(&self.log, 0, self.size, SCAN_CHUNK_BYTES, visit)?;
        whole(end, &self.path)
    }
}

/// A scan's end, or `Error::Corrupted` if it stopped at a bad entry of the log file `path`.
fn whole(end: ScanEnd, path: &Path) -> Result<ScanEnd> {
    match end.problem {
        Some(problem) => Err(Error::Corrupted(format!(
            "{}: bad entry at byte {}: {problem}",
            path.display(),
            end.position
        ))),
        None => Ok(end),
    }
}

/// What happens when a scan finds a bad entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDamage {
    /// Cut the file before it (the last segment: a torn or corrupt tail).
    Truncate,
    /// Fail with `Error::Corrupted` (a sealed segment was fsynced, so damage is not a crash).
    Fail,
}

/// A tail cut off by [`LogSegment::rescan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    pub base_offset: i64,
    /// Where the first bad entry started; the file was cut there.
    pub position: u64,
    pub bytes_removed: u64,
    pub problem: String,
}

/// What [`LogSegment::rescan`] found.
pub(crate) struct Rescan {
    /// The last entry's offset + 1, or the base offset if the segment is empty.
    pub next_offset: i64,
    pub truncated: Option<TruncatedTail>,
    /// Why the index files were rewritten, if they disagreed with the log.
    pub index_problem: Option<String>,
}

impl LogSegment {
    /// A new empty segment (any files of that name are emptied).
    pub(crate) fn create(
        dir: &Path,
        base_offset: i64,
        stage: FileStage,
        index_interval_bytes: u64,
    ) -> Result<Self> {
        let log_path = segment_path(dir, base_offset, SegmentFile::Log, stage);
        let log = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .context(|| format!("creating {}", log_path.display()))?;
        let index_path = |file| segment_path(dir, base_offset, file, stage);
        Ok(Self {
            dir: dir.to_path_buf(),
            base_offset,
            stage,
            log,
            size: 0,
            indexing: SegmentIndexing::empty(base_offset, index_interval_bytes),
            offset_index_file: IndexFile::create(index_path(SegmentFile::OffsetIndex), &[])?,
            time_index_file: IndexFile::create(index_path(SegmentFile::TimeIndex), &[])?,
            first_entry_timestamp: None,
            created_ms: None,
            log_synced: false,
        })
    }

    /// Opens a sealed segment whose offsets are below `upper_offset` (the next segment's base).
    /// Its indexes are checked cheaply (lengths, order, bounds, and the entry the last offset
    /// entry points at); if they fail, they are rebuilt from a scan and the reason returned.
    pub(crate) fn open_sealed(
        dir: &Path,
        base_offset: i64,
        upper_offset: i64,
        index_interval_bytes: u64,
    ) -> Result<(Self, Option<String>)> {
        let (mut segment, load_problem) =
            Self::open(dir, base_offset, FileStage::Live, index_interval_bytes)?;
        let problem = match load_problem {
            Some(problem) => Some(problem),
            None => segment.sealed_index_problem(upper_offset)?,
        };
        if problem.is_some() {
            let rescan = segment.rescan(OnDamage::Fail)?;
            if rescan.next_offset > upper_offset {
                return Err(Error::Corrupted(format!(
                    "{} holds offsets up to {}, past the next segment's base offset {upper_offset}",
                    segment.log_path().display(),
                    rescan.next_offset - 1
                )));
            }
            segment.seal()?;
        }
        Ok((segment, problem))
    }

    /// Opens the last segment (or a compaction's `.swap` segment) and scans all of it: damage
    /// is handled per `on_damage`, and indexes that disagree with the log are rewritten.
    pub(crate) fn open_and_scan(
        dir: &Path,
        base_offset: i64,
        stage: FileStage,
        index_interval_bytes: u64,
        on_damage: OnDamage,
    ) -> Result<(Self, Rescan)> {
        let (mut segment, load_problem) =
            Self::open(dir, base_offset, stage, index_interval_bytes)?;
        let mut rescan = segment.rescan(on_damage)?;
        if load_problem.is_some() {
            rescan.index_problem = load_problem;
        }
        Ok((segment, rescan))
    }

    /// Opens the files; indexes that cannot be read at all come back empty, with the reason.
    fn open(
        dir: &Path,
        base_offset: i64,
        stage: FileStage,
        index_interval_bytes: u64,
    ) -> Result<(Self, Option<String>)> {
        let path = |file| segment_path(dir, base_offset, file, stage);
        let log_path = path(SegmentFile::Log);
        let log = open_log(&log_path)?;
        let size = log
            .metadata()
            .context(|| format!("reading the size of {}", log_path.display()))?
            .len();
        if size > MAX_SEGMENT_FILE_BYTES {
            return Err(Error::Corrupted(format!(
                "{} has {size} bytes; segment positions are i32",
                log_path.display()
            )));
        }
        let (offset_entries, offset_index_file, offset_problem) =
            open_index::<OffsetIndexEntry>(path(SegmentFile::OffsetIndex))?;
        let (time_entries, time_index_file, time_problem) =
            open_index::<TimeIndexEntry>(path(SegmentFile::TimeIndex))?;
        let indexing = SegmentIndexing::loaded(
            OffsetIndex::new(base_offset, offset_entries),
            TimeIndex::new(base_offset, time_entries),
            base_offset,
            index_interval_bytes,
        );
        let segment = Self {
            dir: dir.to_path_buf(),
            base_offset,
            stage,
            log,
            size,
            indexing,
            offset_index_file,
            time_index_file,
            first_entry_timestamp: None,
            created_ms: None,
            log_synced: false,
        };
        Ok((segment, offset_problem.or(time_problem)))
    }

    /// Why the loaded indexes of a sealed segment cannot be right, if they cannot.
    fn sealed_index_problem(&self, upper_offset: i64) -> Result<Option<String>> {
        let offsets = &self.indexing.offsets;
        if let Err(problem) = offsets.check(upper_offset, self.size) {
            return Ok(Some(format!("offset index: {problem}")));
        }
        if let Err(problem) = self.indexing.times.check(upper_offset) {
            return Ok(Some(format!("time index: {problem}")));
        }
        // The last offset entry must point at an entry whose offset lies between the previous
        // index entry's and its own (exactly its own for kstate's per-entry indexing).
        let entries = offsets.entries();
        let Some(last) = entries.last() else {
            return Ok(None);
        };
        let lower = match entries.len().checked_sub(2).and_then(|i| entries.get(i)) {
            Some(previous) => self
                .base_offset
                .saturating_add(i64::from(previous.relative_offset)),
            None => self.base_offset - 1,
        };
        let upper = self
            .base_offset
            .saturating_add(i64::from(last.relative_offset));
        let position = u64::try_from(last.position).unwrap_or(0);
        if position + ENTRY_HEADER_BYTES as u64 > self.size {
            return Ok(Some(format!(
                "offset index: last entry {last:?} points into the last {} bytes of the log",
                self.size - position
            )));
        }
        let mut header = [0; 8];
        file_io::read_exact_at(&self.log, &mut header, position)
            .context(|| format!("reading {}", self.log_path().display()))?;
        let found = i64::from_be_bytes(header);
        if found <= lower || found > upper {
            return Ok(Some(format!(
                "offset index: last entry {last:?} points at an entry with offset {found}"
            )));
        }
        Ok(None)
    }

    /// Scans the whole log: checks every entry (CRC, offsets increasing and in range), handles
    /// a bad tail per `on_damage`, and replaces the indexes and state by what the log says.
    pub(crate) fn rescan(&mut self, on_damage: OnDamage) -> Result<Rescan> {
        let interval = self.indexing.index_interval_bytes();
        let mut fresh = SegmentIndexing::empty(self.base_offset, interval);
        let mut last_offset: Option<i64> = None;
        let mut first_entry_timestamp = None;
        let base_offset = self.base_offset;
        let end = scan_entries(
            &self.log,
            0,
            self.size,
            SCAN_CHUNK_BYTES,
            &mut |scanned: ScannedEntry<'_>| {
                let offset = scanned.entry.offset;
                if let Some(problem) =
                    entry_problem(base_offset, last_offset, offset, scanned.position)
                {
                    return Ok(Visit::Reject(problem));
                }
                first_entry_timestamp.get_or_insert(scanned.entry.timestamp);
                fresh.observe(
                    scanned.position,
                    offset,
                    scanned.entry.timestamp,
                    scanned.bytes.len() as u64,
                );
                last_offset = Some(offset);
                Ok(Visit::Continue)
            },
        )?;
        let truncated = self.handle_damage(end, on_damage)?;
        let next_offset = last_offset.map_or(self.base_offset, |offset| offset + 1);
        let index_problem = self.adopt_indexes(fresh, next_offset)?;
        self.first_entry_timestamp = first_entry_timestamp;
        Ok(Rescan {
            next_offset,
            truncated,
            index_problem,
        })
    }

    fn handle_damage(
        &mut self,
        end: ScanEnd,
        on_damage: OnDamage,
    ) -> Result<Option<TruncatedTail>> {
        let Some(problem) = end.problem else {
            return Ok(None);
        };
        if on_damage == OnDamage::Fail {
            return Err(Error::Corrupted(format!(
                "{}: bad entry at byte {}: {problem}",
                self.log_path().display(),
                end.position
            )));
        }
        self.set_log_len(end.position)?;
        let bytes_removed = self.size - end.position;
        self.size = end.position;
        Ok(Some(TruncatedTail {
            base_offset: self.base_offset,
            position: end.position,
            bytes_removed,
            problem,
        }))
    }

    /// Takes the indexes built by a scan, rewriting the files if they differ. An old index that
    /// is a prefix of the new one (entries not yet persisted when the process stopped) or the
    /// new one plus a seal entry is fine; anything else is reported.
    fn adopt_indexes(
        &mut self,
        fresh: SegmentIndexing,
        next_offset: i64,
    ) -> Result<Option<String>> {
        let old = &self.indexing;
        let mut sealed = fresh.clone();
        sealed.seal();
        let offsets_fine = fresh.offsets.entries().starts_with(old.offsets.entries());
        let times_fine =
            fresh.times.entries().starts_with(old.times.entries()) || sealed.times == old.times;
        let problem = if offsets_fine && times_fine {
            None
        } else if let Err(problem) = old.offsets.check(next_offset, self.size) {
            Some(format!("offset index: {problem}"))
        } else if let Err(problem) = old.times.check(next_offset) {
            Some(format!("time index: {problem}"))
        } else if !offsets_fine {
            Some("offset index: entries differ from the log's".to_string())
        } else {
            Some("time index: entries differ from the log's".to_string())
        };
        let offsets_changed = old.offsets != fresh.offsets;
        let times_changed = old.times != fresh.times;
        self.indexing = fresh;
        if offsets_changed {
            self.offset_index_file
                .rewrite(self.indexing.offsets.entries())?;
        }
        if times_changed {
            self.time_index_file
                .rewrite(self.indexing.times.entries())?;
        }
        Ok(problem)
    }

    /// Appends a message set (whole, valid entries with offsets above the segment's) and
    /// indexes its entries. Not durable until [`Self::flush`].
    pub(crate) fn append(&mut self, set: &[u8]) -> Result<()> {
        let mut entries = Vec::new();
        for entry in shallow_entries(set) {
            let entry = entry?;
            entries.push(BuiltEntry {
                position: entry.position,
                size: entry.size,
                offset: entry.offset,
                timestamp: entry.timestamp,
            });
        }
        self.append_indexed(set, &entries)
    }

    /// [`Self::append`] of a set whose top-level `entries` are known (a builder's: the set
    /// is not read back to index it).
    pub(crate) fn append_indexed(&mut self, set: &[u8], entries: &[BuiltEntry]) -> Result<()> {
        let position = self.size;
        self.log_synced = false;
        if let Err(error) = file_io::write_all_at(&self.log, set, position) {
            // Leave no partial set behind (best effort: the next open would cut it anyway).
            let _ = self.log.set_len(position);
            return Err(error).context(|| format!("appending to {}", self.log_path().display()));
        }
        self.size += set.len() as u64;
        for entry in entries {
            if position == 0 && entry.position == 0 {
                self.first_entry_timestamp = Some(entry.timestamp);
            }
            self.indexing.observe(
                position + entry.position as u64,
                entry.offset,
                entry.timestamp,
                entry.size as u64,
            );
        }
        Ok(())
    }

    /// Cuts the log at `position` (an entry boundary), drops index entries for offsets
    /// `>= first_removed_offset`, then rescans to recompute the segment's state.
    pub(crate) fn truncate(&mut self, position: u64, first_removed_offset: i64) -> Result<Rescan> {
        self.set_log_len(position)?;
        self.size = position;
        self.indexing.offsets.truncate_to(first_removed_offset);
        self.indexing.times.truncate_to(first_removed_offset);
        self.offset_index_file
            .truncate(self.indexing.offsets.entries().len())?;
        self.time_index_file
            .truncate(self.indexing.times.entries().len())?;
        self.rescan(OnDamage::Fail)
    }

    /// Marks the segment as no longer active: adds the final time entry and fsyncs everything.
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.indexing.seal();
        self.flush()
    }

    /// Records this segment, active and just flushed, as its partition closes cleanly (the
    /// partition's clean-shutdown file).
    pub(crate) fn remember_closed(&self, next_offset: i64) {
        if self.stage == FileStage::Live {
            clean_close::remember(
                &self.dir,
                &ClosedSegment {
                    base_offset: self.base_offset,
                    size: self.size,
                    indexing: self.indexing.clone(),
                    first_entry_timestamp: self.first_entry_timestamp,
                    next_offset,
                },
            );
        }
    }

    /// Opens the last segment as a clean close left it (`clean_close::take`):
    /// no scan, the indexes and the end offset as they were.
    pub(crate) fn open_closed(dir: &Path, closed: ClosedSegment) -> Result<(Self, Rescan)> {
        let path = |file| segment_path(dir, closed.base_offset, file, FileStage::Live);
        let log_path = path(SegmentFile::Log);
        let log = open_log(&log_path)?;
        let offset_index_file = IndexFile::open(
            path(SegmentFile::OffsetIndex),
            closed.indexing.offsets.entries().len(),
        )?;
        let time_index_file = IndexFile::open(
            path(SegmentFile::TimeIndex),
            closed.indexing.times.entries().len(),
        )?;
        let segment = Self {
            dir: dir.to_path_buf(),
            base_offset: closed.base_offset,
            stage: FileStage::Live,
            log,
            size: closed.size,
            indexing: closed.indexing,
            offset_index_file,
            time_index_file,
            first_entry_timestamp: closed.first_entry_timestamp,
            created_ms: None,
            log_synced: false,
        };
        let rescan = Rescan {
            next_offset: closed.next_offset,
            truncated: None,
            index_problem: None,
        };
        Ok((segment, rescan))
    }

    /// Writes pending index entries and fsyncs the log and both indexes.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.sync_log()?;
        self.offset_index_file.sync()?;
        self.time_index_file.sync()
    }

    /// Writes pending index entries and fsyncs the log only: what the active segment needs for
    /// its records to survive a crash (its indexes are rebuilt by the scan of any unclean open,
    /// and a clean close records their CRCs; sealing fsyncs them).
    pub(crate) fn sync_log(&mut self) -> Result<()> {
        self.persist_indexes()?;
        if !self.log_synced {
            self.log
                .sync_data()
                .context(|| format!("syncing {}", self.log_path().display()))?;
            self.log_synced = true;
        }
        Ok(())
    }

    /// Whether the log file holds nothing unsynced by this process (`sync_log` has nothing to do).
    #[cfg(test)]
    pub(crate) fn log_synced(&self) -> bool {
        self.log_synced
    }

    /// Writes index entries not yet in the files (no fsync).
    pub(crate) fn persist_indexes(&mut self) -> Result<()> {
        self.offset_index_file
            .persist(self.indexing.offsets.entries())?;
        self.time_index_file.persist(self.indexing.times.entries())
    }

    /// Renames the three files to another stage. Going to `Deleted`, the log goes first (the
    /// segment is then gone as far as open is concerned); otherwise the log goes last, so a
    /// `.log.swap` exists only once its indexes are renamed too.
    pub(crate) fn rename(&mut self, stage: FileStage) -> Result<()> {
        let to = |file| segment_path(&self.dir, self.base_offset, file, stage);
        let (log_to, offset_to, time_to) = (
            to(SegmentFile::Log),
            to(SegmentFile::OffsetIndex),
            to(SegmentFile::TimeIndex),
        );
        if stage == FileStage::Deleted {
            file_io::rename(&self.log_path(), &log_to)?;
        }
        self.offset_index_file.rename_to(offset_to)?;
        self.time_index_file.rename_to(time_to)?;
        if stage != FileStage::Deleted {
            file_io::rename(&self.log_path(), &log_to)?;
        }
        self.stage = stage;
        Ok(())
    }

    /// Deletes the segment's files, Kafka's way: rename to `.deleted`, then remove.
    pub(crate) fn delete(mut self) -> Result<()> {
        self.rename(FileStage::Deleted)?;
        for file in SegmentFile::ALL {
            file_io::remove_file(&segment_path(
                &self.dir,
                self.base_offset,
                file,
                FileStage::Deleted,
            ))?;
        }
        Ok(())
    }

    /// Visits the entries from `start` to the end of the segment.
    pub(crate) fn scan(
        &self,
        start: u64,
        chunk_bytes: usize,
        visit: &mut dyn FnMut(ScannedEntry<'_>) -> Result<Visit>,
    ) -> Result<ScanEnd> {
        let end = scan_entries(&self.log, start, self.size, chunk_bytes, visit)?;
        whole(end, &self.log_path())
    }

    /// The sealed log file as a compaction off the partition reads it, through a handle of its
    /// own: nothing appends to a sealed segment, and a deletion meanwhile leaves the handle
    /// readable.
    pub(crate) fn sealed_source(&self) -> Result<SealedSource> {
        let log = self
            .log
            .try_clone()
            .context(|| format!("opening {} again", self.log_path().display()))?;
        Ok(SealedSource {
            path: self.log_path(),
            base_offset: self.base_offset,
            size: self.size,
            log,
        })
    }

    pub(crate) fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Where to start reading for `offset` (the offset index lookup).
    pub(crate) fn position_for(&self, offset: i64) -> u64 {
        self.indexing.offsets.lookup(offset)
    }

    /// The offset to start at for the first timestamp `>= target` (the time index lookup).
    pub(crate) fn offset_for_time(&self, target: i64) -> i64 {
        self.indexing.times.lookup(target)
    }

    /// The largest entry timestamp, `NO_TIMESTAMP` if no entry has one.
    pub(crate) fn max_timestamp(&self) -> i64 {
        self.indexing.max_timestamp()
    }

    /// Kafka's `LogSegment.largestTimestamp`, what time retention compares: the largest
    /// timestamp, or the log file's modification time when no entry has a timestamp.
    pub(crate) fn largest_timestamp_for_retention(&self) -> Result<i64> {
        if self.max_timestamp() != NO_TIMESTAMP {
            return Ok(self.max_timestamp());
        }
        let modified = self
            .log
            .metadata()
            .and_then(|metadata| metadata.modified())
            .context(|| format!("reading the mtime of {}", self.log_path().display()))?;
        Ok(modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |age| i64::try_from(age.as_millis()).unwrap_or(i64::MAX)))
    }

    pub(crate) fn first_entry_timestamp(&self) -> Option<i64> {
        self.first_entry_timestamp
    }

    /// When the segment was created or first appended to by this process; set on first call.
    pub(crate) fn created_ms(&mut self, now_ms: i64) -> i64 {
        *self.created_ms.get_or_insert(now_ms)
    }

    fn log_path(&self) -> PathBuf {
        segment_path(&self.dir, self.base_offset, SegmentFile::Log, self.stage)
    }

    fn set_log_len(&mut self, len: u64) -> Result<()> {
        self.log_synced = false;
        self.log
            .set_len(len)
            .context(|| format!("truncating {}", self.log_path().display()))
    }
}

impl Drop for LogSegment {
    /// Index entries not yet written are written (not fsynced) so a clean stop keeps them;
    /// failing that, the next open rebuilds them.
    fn drop(&mut self) {
        let _ = self.persist_indexes();
    }
}

/// Why an entry at `position` with `offset` cannot follow `previous` in a segment based at
/// `base_offset`, if it cannot.
fn entry_problem(
    base_offset: i64,
    previous: Option<i64>,
    offset: i64,
    position: u64,
) -> Option<String> {
    if offset < base_offset {
        return Some(format!(
            "offset {offset} is below the segment's base offset {base_offset}"
        ));
    }
    if let Some(previous) = previous.filter(|&previous| offset <= previous) {
        return Some(format!(
            "offset {offset} does not follow the previous entry's {previous}"
        ));
    }
    if i32::try_from(offset - base_offset).is_err() {
        return Some(format!(
            "offset {offset} is too far from the base offset {base_offset} for an i32"
        ));
    }
    if position >= MAX_SEGMENT_FILE_BYTES {
        return Some(format!("position {position} does not fit an i32"));
    }
    None
}

/// Reads an index file and opens it for writing; an unusable file is emptied and the reason
/// returned.
fn open_log(path: &Path) -> Result<File> {
    File::options()
        .read(true)
        .write(true)
        .open(path)
        .context(|| format!("opening {}", path.display()))
}

fn open_index<E: IndexEntry>(path: PathBuf) -> Result<(Vec<E>, IndexFile<E>, Option<String>)> {
    let problem = match read_index::<E>(&path)? {
        StoredIndex::Entries(entries) => {
            let file = IndexFile::open(path, entries.len())?;
            return Ok((entries, file, None));
        }
        StoredIndex::Missing => format!("{} is missing", path.display()),
        StoredIndex::BadLength(len) => format!(
            "{} has {len} bytes, not a multiple of the {}-byte entry",
            path.display(),
            E::SIZE
        ),
    };
    Ok((Vec::new(), IndexFile::create(path, &[])?, Some(problem)))
}

//! A store's changelog (Kafka Streams' `<application.id>-<store>-changelog`, spec 1.3): one
//! partition of a Kafka log holding every committed write, and what restores the store.
//!
//! A commit's records may span several message sets, and a crash can leave some of them whole
//! on disk. So a commit counts only once it is *published*: after its records are flushed, a
//! marker file records its last offset (written to a temporary file, fsynced, renamed). Opening
//! cuts off whatever follows the marker, so a commit that never published is never replayed.
//! The marker plays the part of the commit marker of Kafka's EOS transactions.
//!
//! A changelog may also live elsewhere (an object store, `kstate.log.remote`). Then a
//! [`Publisher`] is the publication point: each commit's records go there as one segment file
//! before the marker is written, and this partition is a local cache of the remote log, taking
//! in what other writers published with [`Changelog::add_published`].

use std::fs;
use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::log::{
    self, CleanedSegments, CompactionJob, CompactionReport, FetchedAppend, LogConfig, NewRecord,
    Partition, RetentionReport,
};
use crate::record::{decode_columns, shallow_entries, RecordColumnsView};

/// In the partition directory, next to the segments (the log ignores other files).
const PUBLISHED_FILE: &str = ".kstate-published";
/// The first offset the cleaner has not compacted (Kafka's cleaner offset checkpoint).
const CLEANED_FILE: &str = ".kstate-cleaned";
/// A commit's records as one segment file, while a [`Publisher`] publishes it.
const PUBLISHING_FILE: &str = ".kstate-publishing.log";
/// Bytes read from the log per replay step.
const REPLAY_READ_BYTES: usize = 4 * 1024 * 1024;

/// What opening a changelog found, for the caller to log.
#[derive(Debug, Clone, Default)]
pub struct ChangelogOpenReport {
    pub log: log::OpenReport,
    /// Records of a commit that crashed before publishing, cut off.
    pub unpublished_records_dropped: i64,
}

/// Receives replayed records: decoded columns, the rows of them to apply, and the last offset
/// among those rows.
pub type ReplayBatch<'f> = dyn FnMut(&RecordColumnsView<'_>, Range<usize>, i64) -> Result<()> + 'f;

/// Publishes commits to a changelog's durable copy elsewhere.
pub trait Publisher: Send + Sync {
    /// Makes the commit whose records (offsets `first..=last`) are the segment file `segment`
    /// durable elsewhere, or fails, in which case nothing of it may count as published there.
    fn publish(&mut self, first: i64, last: i64, segment: &Path) -> Result<()>;
}

pub struct Changelog {
    /// First, so that it stops (and leaves no file behind) before the partition's lock goes.
    compaction: Option<BackgroundCompaction>,
    partition: Partition,
    marker: PathBuf,
    /// Offsets up to here are published; `None`: nothing is.
    published: Option<i64>,
    publisher: Option<Box<dyn Publisher>>,
    /// Sealed segments from this offset on were written since the last compaction.
    first_dirty: i64,
    /// The marker file is known durable: no write of it failed part-way since it was read.
    marker_durable: bool,
    /// Bytes of records appended since opening (published or not): how much a restore from
    /// here would replay, for deciding when a snapshot is due.
    appended_bytes: u64,
}

/// What [`Changelog::clean`] did.
#[derive(Debug, Clone, Copy, Default)]
pub struct CleaningReport {
    pub retention: RetentionReport,
    /// `None`: compaction was not due.
    pub compaction: Option<CompactionReport>,
}

/// Compactions of more sealed bytes than this run off the commit path ([`Changelog::clean`]):
/// reading and rewriting the log takes seconds at a few hundred MiB, and milliseconds below.
pub const COMPACT_IN_PLACE_BYTES: u64 = 8 << 20;

/// A compaction running on a thread of its own. Dropped before it is joined (the log cut, or
/// dropped without `close`), it is stopped and its files removed.
struct BackgroundCompaction {
    thread: Option<JoinHandle<Result<Option<CleanedSegments>>>>,
    cancel: Arc<AtomicBool>,
    /// The active segment's base offset when it started: the sealed part it cleans ends there.
    dirty_from: i64,
}

impl BackgroundCompaction {
    fn start(job: CompactionJob, dirty_from: i64) -> Result<Self> {
        let cancel = job.cancel_flag();
        let thread = std::thread::Builder::new()
            .name("kstate-log-cleaner".into())
            .spawn(move || job.run())
            .map_err(|e| Error::Storage(format!("starting the changelog's cleaner: {e}")))?;
        Ok(Self {
            thread: Some(thread),
            cancel,
            dirty_from,
        })
    }

    fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// What it cleaned (`None`: it was cancelled), once it has finished.
    fn join(mut self) -> Result<Option<CleanedSegments>> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(cleaned)) => cleaned,
            Some(Err(_)) => Err(Error::InvalidState(
                "the changelog's cleaner thread panicked".into(),
            )),
            None => Ok(None),
        }
    }
}

impl Drop for BackgroundCompaction {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(Ok(Ok(Some(cleaned)))) = self.thread.take().map(JoinHandle::join) {
            // Files left if this fails are `.cleaned` ones, which opening the log removes.
            let _ = cleaned.discard();
        }
    }
}

/// The offset a marker file (published, cleaned) holds; `None` before the first is written.
fn read_marker(path: &Path) -> Result<Option<i64>> {
    log::read_number_file(path, "changelog marker")
}

/// The last published offset as the marker in the partition directory `dir` records it, read
/// without opening the log: `None` when there is no marker (never opened as a changelog), -1
/// when nothing is published.
pub fn published_marker(dir: &Path) -> Result<Option<i64>> {
    read_marker(&dir.join(PUBLISHED_FILE))
}

impl Changelog {
    /// Opens (creating if needed) the partition directory `dir` and cuts off records that were
    /// never published. A log without a marker was written by another tool: all of it counts.
    pub fn open(dir: &Path, config: LogConfig) -> Result<(Self, ChangelogOpenReport)> {
        let (mut partition, log) = Partition::open(dir, config)?;
        let marker = dir.join(PUBLISHED_FILE);
        let last = partition.log_end_offset() - 1;
        let mut report = ChangelogOpenReport {
            log,
            ..ChangelogOpenReport::default()
        };
        let recorded = read_marker(&marker)?;
        let published = match recorded {
            Some(p) if p > last => {
                return Err(Error::Corrupted(format!(
                    "changelog {} lost published records: published up to offset {p}, log ends at {last}",
                    dir.display()
                )))
            }
            Some(p) => {
                if p < last {
                    partition.truncate_to(p + 1)?;
                    report.unpublished_records_dropped = last - p;
                }
                p
            }
            None => last,
        };
        let first_dirty = read_marker(&dir.join(CLEANED_FILE))?.unwrap_or(0);
        let mut changelog = Self {
            compaction: None,
            partition,
            marker,
            published: (published >= 0).then_some(published),
            publisher: None,
            first_dirty,
            marker_durable: false,
            appended_bytes: 0,
        };
        // A clean close left the marker durable (a marker write that failed part-way keeps the
        // close from being clean): rewriting and fsyncing it again would change nothing.
        if recorded == Some(published) && report.log.reopened_clean {
            changelog.marker_durable = true;
        } else {
            changelog.write_marker(published)?;
        }
        remove_if_present(&dir.join(PUBLISHING_FILE))?;
        Ok((changelog, report))
    }

    /// Makes `publisher` the publication point of every later commit.
    pub fn set_publisher(&mut self, publisher: Box<dyn Publisher>) {
        self.publisher = Some(publisher);
    }

    pub fn dir(&self) -> &Path {
        self.partition.dir()
    }

    /// The last published offset; `None` while nothing is.
    pub fn published(&self) -> Option<i64> {
        self.published
    }

    /// The first offset still in the log (retention and compaction move it up).
    pub fn log_start_offset(&self) -> i64 {
        self.partition.log_start_offset()
    }

    /// Appends records of the commit being built; they count once [`Self::publish`] returns.
    pub fn append(&mut self, records: &[NewRecord<'_>], now_ms: i64) -> Result<()> {
        if !records.is_empty() {
            let appended = self.partition.append(records, now_ms)?;
            self.appended_bytes += appended.bytes as u64;
        }
        Ok(())
    }

    /// Bytes of records appended since the changelog was opened.
    pub fn appended_bytes(&self) -> u64 {
        self.appended_bytes
    }

    /// Makes the appended records durable, then published: with a [`Publisher`], `uploaded`
    /// is called once it has them. Returns the last published offset.
    pub fn publish(&mut self, uploaded: &mut dyn FnMut()) -> Result<Option<i64>> {
        let last = self.partition.log_end_offset() - 1;
        if last >= 0 && Some(last) != self.published {
            self.partition.sync_appended()?;
            if let Some(publisher) = self.publisher.as_mut() {
                let first = self
                    .published
                    .map_or(self.partition.log_start_offset(), |p| p + 1);
                let path = self.partition.dir().join(PUBLISHING_FILE);
                write_segment_file(&self.partition, first, last, &path)?;
                let published = publisher.publish(first, last, &path);
                remove_if_present(&path)?;
                published?;
                uploaded();
            }
            self.write_marker(last)?;
            self.published = Some(last);
        }
        Ok(self.published)
    }

    /// Adds a segment file published elsewhere, with offsets `first..=last` (`None`: up to its
    /// last record), and counts it as published. When it does not follow the published records
    /// the log is cut or restarted at `first`: a compacted object replaces the records it
    /// covers, and a caller skipping objects knows the store holds what comes before.
    pub fn add_published(
        &mut self,
        segment: &Path,
        first: i64,
        last: Option<i64>,
        now_ms: i64,
    ) -> Result<FetchedAppend> {
        self.discard_unpublished()?;
        let end = self.partition.log_end_offset();
        if first != end {
            self.abandon_compaction();
        }
        if first < end {
            // The marker first, so a crash in between reopens to the shorter log.
            self.write_marker(first - 1)?;
            self.published = (first > 0).then_some(first - 1);
            self.partition.truncate_to(first)?;
        } else if first > end {
            self.partition.truncate_fully_and_start_at(first)?;
            self.write_marker(first - 1)?;
            self.published = Some(first - 1);
        }
        let appended = match self.partition.append_fetched(segment, first, last, now_ms) {
            Ok(appended) => appended,
            Err(error) => {
                self.discard_unpublished()?;
                return Err(error);
            }
        };
        self.partition.flush()?;
        self.write_marker(appended.last_offset)?;
        self.published = Some(appended.last_offset);
        Ok(appended)
    }

    /// Drops appended records that were not published (a commit that failed part-way).
    pub fn discard_unpublished(&mut self) -> Result<()> {
        let end = self.published.map_or(0, |p| p + 1);
        if self.partition.log_end_offset() > end {
            self.abandon_compaction();
            self.partition.truncate_to(end)?;
        }
        Ok(())
    }

    /// Withdraws every published record after `offset` (`None`: every record); returns how many
    /// went. kstate.spark retracts what a micro-batch published but never recorded as done (it
    /// crashed in between), before any store restores it. The marker moves first, so a crash
    /// part-way leaves records past the marker, which opening cuts.
    pub fn retract_to(&mut self, offset: Option<i64>) -> Result<i64> {
        let keep = offset.unwrap_or(-1);
        if keep < -1 {
            return Err(Error::InvalidArgument(format!(
                "cannot retract to offset {keep}"
            )));
        }
        let Some(published) = self.published.filter(|&p| p > keep) else {
            return Ok(0);
        };
        self.abandon_compaction();
        self.write_marker(keep)?;
        self.published = offset.filter(|&o| o >= 0);
        self.partition.truncate_to(keep + 1)?;
        Ok(published - keep)
    }

    fn write_marker(&mut self, offset: i64) -> Result<()> {
        self.marker_durable = false;
        log::write_number_file(&self.marker, offset)?;
        self.marker_durable = true;
        Ok(())
    }

    /// Kafka's log cleaner for a store's own changelog, run after commits: retention when
    /// `cleanup.policy` includes `delete`; compaction when it includes `compact` and the sealed
    /// segments written since the last compaction hold `min.cleanable.dirty.ratio` of the
    /// sealed bytes or more. A compaction of more than [`COMPACT_IN_PLACE_BYTES`] runs on a
    /// thread of its own (as Kafka's cleaner threads), so no commit waits for it: a later call
    /// swaps in what it wrote and reports it. A remote changelog's local cache is compacted
    /// where it lives; here it only drops the segments wholly at or below `store_offset`, the
    /// offset the store has committed (a store that falls behind the cache fetches again from
    /// the remote log).
    pub fn clean(&mut self, now_ms: i64, store_offset: Option<i64>) -> Result<CleaningReport> {
        let mut report = CleaningReport::default();
        if self.publisher.is_some() {
            if let Some(offset) = store_offset {
                report.retention = self.partition.delete_segments_below(offset + 1, now_ms)?;
            }
            return Ok(report);
        }
        report.retention = self.partition.delete_expired(now_ms)?;
        if !self.partition.config().cleanup_policy.compacts() {
            return Ok(report);
        }
        if let Some(running) = &self.compaction {
            if running.is_finished() {
                report.compaction = self.swap_in_compaction()?;
            }
            return Ok(report);
        }
        let segments = self.partition.segments();
        let sealed = &segments[..segments.len().saturating_sub(1)];
        let (clean, dirty) = sealed.iter().fold((0u64, 0u64), |(clean, dirty), s| {
            if s.base_offset < self.first_dirty {
                (clean + s.size_bytes, dirty)
            } else {
                (clean, dirty + s.size_bytes)
            }
        });
        let ratio = self.partition.config().min_cleanable_dirty_ratio;
        if dirty == 0 || (dirty as f64) < ratio * (clean + dirty) as f64 {
            return Ok(report);
        }
        // Everything sealed now is clean once compacted; the active segment starts the dirty part.
        let dirty_from = segments.last().map_or(0, |active| active.base_offset);
        if clean + dirty <= COMPACT_IN_PLACE_BYTES {
            report.compaction = Some(self.partition.compact(now_ms)?);
            self.mark_clean_below(dirty_from)?;
        } else if self.published == Some(self.partition.log_end_offset() - 1) {
            // Only published records are compacted off the commit path: whatever could still be
            // cut (an unpublished commit's) would otherwise decide what the compaction drops.
            if let Some(job) = self.partition.plan_compaction(now_ms, false)? {
                self.compaction = Some(BackgroundCompaction::start(job, dirty_from)?);
            }
        }
        Ok(report)
    }

    /// Whether a compaction runs off the commit path (its result not swapped in yet).
    pub fn is_compacting(&self) -> bool {
        self.compaction.is_some()
    }

    /// Waits for the compaction running off the commit path, if any, and swaps in what it
    /// cleaned.
    fn swap_in_compaction(&mut self) -> Result<Option<CompactionReport>> {
        let Some(running) = self.compaction.take() else {
            return Ok(None);
        };
        let dirty_from = running.dirty_from;
        let Some(cleaned) = running.join()? else {
            return Ok(None);
        };
        let report = self.partition.finish_compaction(cleaned)?;
        self.mark_clean_below(dirty_from)?;
        Ok(Some(report))
    }

    /// Records that the sealed segments below `offset` were compacted.
    fn mark_clean_below(&mut self, offset: i64) -> Result<()> {
        self.first_dirty = offset;
        log::write_number_file(&self.partition.dir().join(CLEANED_FILE), self.first_dirty)
    }

    /// Stops a compaction running off the commit path and removes what it wrote, before the
    /// log is cut (what it read may go).
    fn abandon_compaction(&mut self) {
        self.compaction = None;
    }

    /// Deletes the history before `offset`, which snapshots hold instead (kstate's snapshot
    /// collector): the log start offset becomes `offset` for good (Kafka's `DeleteRecords`,
    /// [`Partition::delete_records_before`]) and the segments wholly below it go. A store that
    /// later needs records below it cannot restore from this changelog
    /// ([`Error::ChangelogTruncated`]). Only published records may go; a remote changelog's
    /// cache deletes nothing here (the remote log is the one to delete from).
    pub fn delete_records_before(&mut self, offset: i64, now_ms: i64) -> Result<RetentionReport> {
        if self.publisher.is_some() {
            return Err(Error::InvalidState(
                "a remote changelog's history is deleted from its objects, not its local cache"
                    .into(),
            ));
        }
        let published_end = self.published.map_or(0, |p| p + 1);
        if offset > published_end {
            return Err(Error::InvalidArgument(format!(
                "cannot delete changelog history before offset {offset}: only offsets below \
                 {published_end} are published"
            )));
        }
        self.partition.delete_records_before(offset, now_ms)
    }

    /// The offset history was deleted before ([`Self::delete_records_before`]); 0 if never.
    pub fn deleted_records_before(&self) -> i64 {
        self.partition.deleted_records_before()
    }

    /// Passes the published records with offsets in `[from, to]` to `apply` in batches, with
    /// the last offset of each batch.
    pub fn replay(&self, from: i64, to: i64, apply: &mut ReplayBatch<'_>) -> Result<()> {
        let to = to.min(self.published.unwrap_or(-1));
        let mut next = from.max(self.partition.log_start_offset());
        while next <= to {
            let set = self.partition.read(next, REPLAY_READ_BYTES)?;
            let columns = decode_columns(&set, false)?;
            let view = columns.view()?;
            // A wrapper read from its start may hold offsets before `next`; the last set may
            // run past `to`.
            let start = view.offsets.partition_point(|&o| o < next);
            let end = view.offsets.partition_point(|&o| o <= to);
            if end <= start {
                break;
            }
            let last = view.offsets[end - 1];
            apply(&view, start..end, last)?;
            next = last + 1;
        }
        Ok(())
    }

    /// Closes the log, after swapping in a compaction that runs off the commit path (its report
    /// returned); cleanly (the next open skips the scan and the marker write) unless a marker
    /// write failed part-way, which the next open must then redo.
    pub fn close(mut self) -> Result<Option<CompactionReport>> {
        // Finished, not abandoned: a store opened for one commit at a time would never compact.
        let compaction = self.swap_in_compaction()?;
        if self.marker_durable {
            self.partition.close()?;
        } else {
            self.partition.flush()?;
        }
        Ok(compaction)
    }
}

/// Writes the records of offsets `first..=last` of `partition` to `path` as one segment file.
fn write_segment_file(partition: &Partition, first: i64, last: i64, path: &Path) -> Result<()> {
    let mut file = fs::File::create(path)?;
    let mut next = first;
    while next <= last {
        let set = partition.read(next, REPLAY_READ_BYTES)?;
        let mut read_to = None;
        for entry in shallow_entries(&set) {
            read_to = Some(entry?.offset);
        }
        let Some(read_to) = read_to else {
            break;
        };
        file.write_all(&set)?;
        next = read_to + 1;
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

//! Segmented stores (spec 1.8), the base of window and session stores: one transactional
//! `KeyValueStore` per time segment (a RocksDB at `<task>/<store>/<store>.<segment start ms>`, or
//! an ordered map in memory), stream-time retention, and commits that are atomic across segments.
//!
//! - Stream time is the largest segment timestamp put so far. A put into a segment older than
//!   `segment_id(stream_time - retention)` is dropped and counted; reads hide everything older
//!   than `stream_time - retention + 1` at once; expired segments are deleted when a commit makes
//!   the stream time that expired them durable (at once for non-transactional stores, as Kafka).
//! - A persistent transactional commit goes through the commit-intent file (`commit_intent.rs`):
//!   every segment's prepared batches and the offset are made durable in one file (in the task
//!   directory: Kafka's `openExisting` wants nothing but segments in the store's) first, then
//!   applied segment by segment (from the segments' own staged batches, or, when some spilled or
//!   on open after a crash, from the file); a crash in between is finished on open. The file also
//!   keeps the committed offset and stream time, so retention survives restarts.
//! - A commit that writes one segment (the common case: recent windows) skips the intent: the
//!   segment's batch, the offset and the stream time go into that segment in one atomic RocksDB
//!   write. On open the last commit is the newer of the intent's record and the segments' own
//!   (offsets only grow between such commits, stream time never goes back); an intent still
//!   holding batches is always the newer, since a one-segment commit first makes the intent on
//!   disk durable.
//! - Scans walk the segments in time order (reverse for backward scans) and filter each segment's
//!   key range with the query's predicate, as Kafka's `SegmentIterator` does.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rocksdb::WriteBatch;

use crate::error::{Error, Result};
use crate::format::write_batch;
use crate::segmented::commit_intent::{self, CommitIntent, IntentWriter};
use crate::segmented::segments::{
    parse_segment_dir, read_segment_interval, segment_id, segment_name, write_segment_interval,
};
use crate::segmented::snapshot::SegmentedFiles;
use crate::store::committed::Write;
use crate::store::key_range::{Direction, KeyRange};
use crate::store::key_value::{
    CommitProgress, CommittedFiles, Durability, KeyValueStore, ReadCommittedView, StoreOptions,
    VisitWrite,
};
use crate::store::memory_budget::StoreMemory;
use crate::store::merge::{ScanLimit, Scanned, VisitEntry};
use crate::store::rocks::ValueFormat;
use crate::store::rocks_options::RocksConfig;
use crate::store::ttl::Ttl;

/// Size of the batches a spilled segment's writes go into the commit intent in.
const INTENT_BATCH_BYTES: usize = 4 * 1024 * 1024;

pub type Row = (Vec<u8>, Vec<u8>);
/// Whether a store key found by a scan's byte bounds is really in the query.
pub type Accept = Arc<dyn Fn(&[u8]) -> Result<bool> + Send + Sync>;

#[derive(Clone)]
pub struct SegmentedOptions {
    pub retention_ms: i64,
    pub segment_interval: i64,
    pub format: ValueFormat,
    /// `max_uncommitted_bytes` bounds all segments together; `cache_max_bytes` is per segment.
    pub store: StoreOptions,
    pub ttl: Option<Ttl>,
    /// Whether segment tables carry Bloom filters: for stores that read points (a window store's
    /// `fetch(key, time)`), not for those that read only ranges (session stores, window stores
    /// with duplicates), where a filter is memory and write work that no read uses.
    pub bloom_filters: bool,
}

impl SegmentedOptions {
    fn segment_id(&self, timestamp: i64) -> i64 {
        segment_id(timestamp, self.segment_interval)
    }

    /// Segments below this id are expired at `stream_time` (Kafka's `minLiveSegment`).
    fn min_live_segment(&self, stream_time: i64) -> i64 {
        self.segment_id(stream_time.saturating_sub(self.retention_ms))
    }

    fn segment_store_options(&self) -> StoreOptions {
        StoreOptions {
            // The segmented store spills its segments itself, against the store-wide bound.
            max_uncommitted_bytes: usize::MAX,
            // Each segment gets the whole read cache budget: caches fill only with what is read,
            // which is mostly the newest segment, and Kafka's interval keeps at most 3-4 segments
            // live. Splitting the budget made the hot segment's cache thrash.
            ..self.store.clone()
        }
    }
}

/// The earliest timestamp reads show at `stream_time`: `stream_time - retention + 1`.
pub fn min_live_time(stream_time: i64, retention_ms: i64) -> i64 {
    stream_time.saturating_sub(retention_ms).saturating_add(1)
}

/// What opening a segmented store found, for the caller to log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentedOpenReport {
    pub segments: usize,
    /// Legacy segment directory names (`<store>:<ms>`, `<store>-yyyyMMddHHmm`) renamed.
    pub renamed_legacy: usize,
    /// A commit interrupted by a crash was finished (number of segment batches applied).
    pub finished_commit: Option<u64>,
    pub upgrade_mode: bool,
    pub unclean_shutdown: bool,
    pub discarded_spill: bool,
}

/// A scan: segments `first_segment..=last_segment`, each scanned over `range`, rows filtered
/// by `accept`.
#[derive(Clone)]
pub struct SegmentQuery {
    pub first_segment: i64,
    pub last_segment: i64,
    pub range: KeyRange,
    pub direction: Direction,
    pub accept: Accept,
}

impl SegmentQuery {
    pub fn empty(direction: Direction) -> Self {
        Self {
            first_segment: 0,
            last_segment: -1,
            range: KeyRange::all(),
            direction,
            accept: Arc::new(|_| Ok(false)),
        }
    }
}

/// Where a chunked scan goes on: the segment being scanned and the rest of its range, or the
/// next segment id to look for.
#[derive(Debug, Clone, Default)]
pub struct ScanCursor {
    current: Option<(i64, KeyRange)>,
    next: Option<i64>,
    done: bool,
}

impl ScanCursor {
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// Segments as a scan sees them: the store (staged writes included) or a read-committed view.
pub trait SegmentReader {
    fn stream_time(&self) -> i64;
    /// The first live segment id in `lo..=hi` in `direction` order.
    fn next_segment(&self, lo: i64, hi: i64, direction: Direction) -> Result<Option<i64>>;
    /// Passes the rows of segment `id` in `range` to `visit` up to `limit`, borrowed (none once
    /// the segment is gone); says what it passed.
    fn scan_segment(
        &self,
        id: i64,
        range: &KeyRange,
        direction: Direction,
        limit: ScanLimit,
        visit: &mut VisitEntry<'_>,
    ) -> Result<Scanned>;
}

/// Up to `limit` rows of `query` from where `cursor` stands; fewer only at the end.
pub fn scan(
    reader: &dyn SegmentReader,
    query: &SegmentQuery,
    cursor: &mut ScanCursor,
    limit: usize,
) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    scan_visit(
        reader,
        query,
        cursor,
        ScanLimit::rows(limit),
        &mut |key, value| {
            out.push((key.to_vec(), value.to_vec()));
            Ok(())
        },
    )?;
    Ok(out)
}

/// `scan`, passing each row to `visit` borrowed instead of copying it out, up to `limit`; says
/// what it passed (fewer rows than the limit only at the end, when `cursor` is done).
pub fn scan_visit(
    reader: &dyn SegmentReader,
    query: &SegmentQuery,
    cursor: &mut ScanCursor,
    limit: ScanLimit,
    visit: &mut VisitEntry<'_>,
) -> Result<Scanned> {
    let mut visited = Scanned::default();
    let mut last_key = Vec::new();
    let direction = query.direction;
    while !cursor.done && !visited.reached(limit) {
        // A segment's scan starts on the query's own range; only a resumed one needs its rest.
        let (id, rest) = match cursor.current.take() {
            Some((id, rest)) => (id, Cow::Owned(rest)),
            None => {
                let (lo, hi) = match (direction, cursor.next) {
                    (_, None) => (query.first_segment, query.last_segment),
                    (Direction::Forward, Some(next)) => (next, query.last_segment),
                    (Direction::Reverse, Some(next)) => (query.first_segment, next),
                };
                match reader.next_segment(lo, hi, direction)? {
                    Some(id) => (id, Cow::Borrowed(&query.range)),
                    None => {
                        cursor.done = true;
                        break;
                    }
                }
            }
        };
        // Only accepted rows are visited: a time range filters most rows of a segment out. The
        // rows filtered out count towards this call's limit too, so it ends and resumes.
        let scanned = reader.scan_segment(
            id,
            &rest,
            direction,
            limit.after(visited),
            &mut |key, value| {
                last_key.clear();
                last_key.extend_from_slice(key);
                if (query.accept)(key)? {
                    visited.count(key, value);
                    visit(key, value)?;
                }
                Ok(())
            },
        )?;
        if scanned.at_limit {
            // More may follow in this segment: the next chunk resumes after the last key seen.
            cursor.current = Some((id, rest.after(&last_key, direction)));
            continue;
        }
        let next = match direction {
            Direction::Forward => id.checked_add(1),
            Direction::Reverse => id.checked_sub(1),
        };
        match next {
            Some(next) => cursor.next = Some(next),
            None => cursor.done = true,
        }
    }
    visited.at_limit = !cursor.done;
    Ok(visited)
}

/// A segment directory found on open: its name, the name it has in Kafka's current form, its id.
pub(crate) struct SegmentDir {
    file_name: String,
    canonical: String,
    id: i64,
}

/// The segment directories under `dir`, every one checked before any is renamed, so a store
/// that fails to open is left as it was. A directory that is no segment of `interval`
/// (a store written with another retention) or a second directory of one segment is an error:
/// left unread or read as another segment, its windows would be lost or expire early without
/// a word.
pub(crate) fn segment_dirs(
    name: &str,
    dir: &Path,
    retention_ms: i64,
    interval: i64,
) -> Result<Vec<SegmentDir>> {
    let mut found: Vec<SegmentDir> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(segment) = parse_segment_dir(name, &file_name) else {
            continue;
        };
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let id = segment_id(segment.start_ms, interval);
        let canonical = segment_name(name, id, interval);
        let taken = file_name != canonical
            && (dir.join(&canonical).exists() || found.iter().any(|f| f.canonical == canonical));
        let created_with = read_segment_interval(&entry.path())?;
        if !segment.fits(interval) || taken || created_with.is_some_and(|i| i != interval) {
            let created = created_with.map_or(String::new(), |i| {
                format!(", created with a segment interval of {i} ms")
            });
            return Err(Error::InvalidState(format!(
                "store {name}: segment directory {file_name}{created} is not a segment of this \
                 store's segment interval ({interval} ms, from its retention of {} ms): the store \
                 was written with another retention. Open it with the retention it was written \
                 with, or remove {} (a logged store then restores from its changelog)",
                retention_ms,
                dir.display()
            )));
        }
        found.push(SegmentDir {
            file_name,
            canonical,
            id,
        });
    }
    Ok(found)
}

fn first_in<T>(map: &BTreeMap<i64, T>, lo: i64, hi: i64, direction: Direction) -> Option<i64> {
    if lo > hi {
        return None;
    }
    let mut ids = map.range(lo..=hi).map(|(id, _)| *id);
    match direction {
        Direction::Forward => ids.next(),
        Direction::Reverse => ids.next_back(),
    }
}

/// A store kept in time segments (window, session) whose store keys name their segment's
/// timestamp; a changelog needs both (see `logged_store`).
pub trait SegmentedKeys {
    fn segments(&self) -> &SegmentedStore;
    fn segments_mut(&mut self) -> &mut SegmentedStore;
    /// The segment timestamp a store key carries (window start, session end).
    fn segment_time(store_key: &[u8]) -> Result<i64>;
}

/// The committed state as other threads see it: read-committed views (the committed stream
/// time and each segment's view) and snapshots (the offset and each segment's files too).
pub(crate) struct Committed {
    pub(crate) open: bool,
    pub(crate) offset: Option<i64>,
    pub(crate) stream_time: i64,
    segments: BTreeMap<i64, ReadCommittedView>,
    /// Each segment's committed files (persistent transactional stores only).
    pub(crate) files: BTreeMap<i64, CommittedFiles>,
}

/// Puts of store keys for `SegmentedStore::put_all`: the keys side by side in one buffer.
#[derive(Default)]
pub struct StorePuts<'a> {
    keys: Vec<u8>,
    /// Each put's key end in `keys`, timestamp and value (`None` deletes).
    puts: Vec<(usize, i64, Option<&'a [u8]>)>,
}

impl<'a> StorePuts<'a> {
    /// Room for `puts` puts of keys of about `key_len` bytes.
    pub fn with_capacity(puts: usize, key_len: usize) -> Self {
        Self {
            keys: Vec::with_capacity(puts * key_len),
            puts: Vec::with_capacity(puts),
        }
    }

    pub fn push(&mut self, key: &[u8], timestamp: i64, value: Option<&'a [u8]>) {
        self.keys.extend_from_slice(key);
        self.puts.push((self.keys.len(), timestamp, value));
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], i64, Option<&'a [u8]>)> + '_ {
        let starts = std::iter::once(0).chain(self.puts.iter().map(|&(end, _, _)| end));
        self.puts
            .iter()
            .zip(starts)
            .map(|(&(end, timestamp, value), start)| (&self.keys[start..end], timestamp, value))
    }
}

pub struct SegmentedStore {
    name: String,
    /// `<task>/<store>` for persistent stores; `None` in memory.
    dir: Option<PathBuf>,
    options: SegmentedOptions,
    segments: BTreeMap<i64, KeyValueStore>,
    committed: Arc<RwLock<Committed>>,
    /// Held while a commit or restore changes the committed state (the segments' batches, their
    /// offsets, the segments a commit expires) and while a snapshot reads the offset and
    /// captures every segment, so the files always hold the commit of the offset read.
    writes: Arc<Mutex<()>>,
    /// Stream time including staged puts; reads use it, so expiry is visible at once.
    stream_time: i64,
    committed_stream_time: i64,
    committed_offset: Option<i64>,
    /// Bytes staged in memory across segments since they last spilled or committed.
    staged_bytes: usize,
    dropped_records: u64,
    open: bool,
    /// Whether the commit-intent file on disk is durable: until it is, a machine crash could
    /// bring back an older intent whose batches would be applied again on open, so a commit that
    /// skips the intent (`commit_one_segment`) first makes it durable.
    intent_durable: bool,
}

impl SegmentedStore {
    /// Opens (creating if needed) the segments under `dir` = `<task>/<store>`: renames legacy
    /// segment names, finishes a commit a crash interrupted, deletes expired segments.
    pub fn open_rocksdb(
        name: &str,
        dir: &Path,
        options: SegmentedOptions,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<(Self, SegmentedOpenReport)> {
        check_options(&options)?;
        std::fs::create_dir_all(dir)?;
        let mut report = SegmentedOpenReport::default();
        let mut ids = Vec::new();
        for segment in segment_dirs(name, dir, options.retention_ms, options.segment_interval)? {
            if segment.file_name != segment.canonical {
                std::fs::rename(dir.join(&segment.file_name), dir.join(&segment.canonical))?;
                report.renamed_legacy += 1;
            }
            ids.push(segment.id);
        }
        ids.sort_unstable();
        ids.dedup();
        let mut store = Self::new(name, Some(dir.to_path_buf()), options);
        for id in ids {
            let segment_report = store.open_segment(id, progress)?;
            report.upgrade_mode |= segment_report.upgrade_mode;
            report.unclean_shutdown |= segment_report.unclean_shutdown;
            report.discarded_spill |= segment_report.discarded_spill;
        }
        report.segments = store.segments.len();
        let intent_path = store.intent_path()?;
        // A commit killed while writing its intent left this; the intent never took effect.
        let torn = commit_intent::temp_path(&intent_path);
        if torn.exists() {
            std::fs::remove_file(torn)?;
        }
        match commit_intent::read(&intent_path)? {
            // A commit the intent did not finish: newer than any commit of one segment, which
            // makes the intent durable complete before it writes (`commit_one_segment`).
            Some(intent) if intent.entries > 0 => {
                report.finished_commit = Some(intent.entries);
                store.apply_intent(progress)?;
            }
            // The record of the last commit through the intent, then commits that wrote one
            // segment alone, newer: their offsets only grow and stream time never goes back, so
            // the largest of each is the last commit's.
            Some(record) => {
                let (offset, stream_time) = store.last_commit(record.offset, record.stream_time)?;
                store.complete_commit(CommitIntent {
                    offset,
                    stream_time,
                    entries: 0,
                })?;
            }
            // A directory Kafka wrote keeps its offset in each segment's `offsets` family (so do
            // commits of one segment before any commit went through the intent).
            None => {
                let (offset, stream_time) = store.last_commit(None, -1)?;
                store.stream_time = stream_time;
                store.set_committed(offset, stream_time)?;
            }
        }
        if report.unclean_shutdown && !store.options.store.transactional {
            // Segments written through may be ahead of the offset: restore from the changelog.
            store.committed_offset = None;
            commit_intent::write_record(&intent_path, None, store.committed_stream_time)?;
        }
        Ok((store, report))
    }

    /// The offset and stream time of the last commit: the largest of those given and those the
    /// segments recorded.
    fn last_commit(&self, offset: Option<i64>, stream_time: i64) -> Result<(Option<i64>, i64)> {
        let (mut offset, mut stream_time) = (offset, stream_time);
        for segment in self.segments.values() {
            offset = offset.max(segment.committed_offset()?);
            stream_time = stream_time.max(segment.segmented_stream_time()?.unwrap_or(-1));
        }
        Ok((offset, stream_time))
    }

    pub fn open_in_memory(name: &str, options: SegmentedOptions) -> Result<Self> {
        check_options(&options)?;
        Ok(Self::new(name, None, options))
    }

    fn new(name: &str, dir: Option<PathBuf>, options: SegmentedOptions) -> Self {
        Self {
            name: name.to_owned(),
            dir,
            options,
            segments: BTreeMap::new(),
            committed: Arc::new(RwLock::new(Committed {
                open: true,
                offset: None,
                stream_time: -1,
                segments: BTreeMap::new(),
                files: BTreeMap::new(),
            })),
            writes: Arc::default(),
            stream_time: -1,
            committed_stream_time: -1,
            committed_offset: None,
            staged_bytes: 0,
            dropped_records: 0,
            open: true,
            intent_durable: false,
        }
    }

    fn beside(&self, suffix: &str) -> Result<PathBuf> {
        match &self.dir {
            Some(dir) => beside(&self.name, dir, suffix),
            None => Err(Error::InvalidState(format!(
                "store {} has no task directory",
                self.name
            ))),
        }
    }

    fn intent_path(&self) -> Result<PathBuf> {
        self.beside(".commit")
    }

    /// Where a segment's staged writes spill: `<task>/.<segment>.uncommitted`.
    fn spill_path(&self, segment: &str) -> Result<PathBuf> {
        let suffix = segment.strip_prefix(&self.name).unwrap_or(segment);
        self.beside(&format!("{suffix}.uncommitted"))
    }

    fn check_open(&self) -> Result<()> {
        if self.open {
            Ok(())
        } else {
            Err(Error::Closed(format!("store {} is closed", self.name)))
        }
    }

    fn open_segment(
        &mut self,
        id: i64,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<crate::store::key_value::OpenReport> {
        let segment = segment_name(&self.name, id, self.options.segment_interval);
        let options = self.options.segment_store_options();
        let ttl = self.options.ttl.clone();
        let (store, report) = match &self.dir {
            Some(dir) => {
                let segment_dir = dir.join(&segment);
                let created = !segment_dir.exists();
                let config = RocksConfig::given_or_default(options.rocks.as_ref())?;
                let options = StoreOptions {
                    rocks: Some(config.for_segments(self.options.bloom_filters)),
                    ..options
                };
                let opened = KeyValueStore::open_rocksdb_with_ttl(
                    &segment,
                    &segment_dir,
                    &self.spill_path(&segment)?,
                    self.options.format,
                    options,
                    ttl,
                    progress,
                )?;
                if created {
                    write_segment_interval(&segment_dir, self.options.segment_interval)?;
                }
                opened
            }
            None => (
                KeyValueStore::open_in_memory_with_ttl(&segment, options, ttl),
                Default::default(),
            ),
        };
        {
            let mut committed = self
                .committed
                .write()
                .map_err(|_| Error::InvalidState("segment views lock poisoned".into()))?;
            committed.segments.insert(id, store.read_committed_view());
            if store.persistent() && store.transactional() {
                committed.files.insert(id, store.committed_files()?);
            }
        }
        self.segments.insert(id, store);
        Ok(report)
    }

    fn segment(&mut self, id: i64) -> Result<&mut KeyValueStore> {
        if !self.segments.contains_key(&id) {
            self.open_segment(id, &mut |_| {})?;
        }
        self.segments
            .get_mut(&id)
            .ok_or_else(|| Error::InvalidState(format!("segment {id} vanished")))
    }

    /// Closes and deletes the segments below `min_live`.
    fn drop_segments_before(&mut self, min_live: i64) -> Result<()> {
        if self
            .segments
            .first_key_value()
            .is_none_or(|(id, _)| *id >= min_live)
        {
            return Ok(());
        }
        let live = self.segments.split_off(&min_live);
        let expired = std::mem::replace(&mut self.segments, live);
        {
            let mut committed = self
                .committed
                .write()
                .map_err(|_| Error::InvalidState("segment views lock poisoned".into()))?;
            let live_views = committed.segments.split_off(&min_live);
            committed.segments = live_views;
            let live_files = committed.files.split_off(&min_live);
            committed.files = live_files;
        }
        for (id, mut segment) in expired {
            segment.close()?;
            if let Some(dir) = &self.dir {
                let name = segment_name(&self.name, id, self.options.segment_interval);
                for path in [dir.join(&name), self.spill_path(&name)?] {
                    if path.exists() {
                        remove_whole(&path)?;
                    }
                }
            }
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn options(&self) -> &SegmentedOptions {
        &self.options
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn persistent(&self) -> bool {
        self.dir.is_some()
    }

    pub fn transactional(&self) -> bool {
        self.options.store.transactional
    }

    /// Puts dropped because their segment had expired (Kafka's `dropped-records` metric).
    pub fn dropped_records(&self) -> u64 {
        self.dropped_records
    }

    pub fn committed_offset(&self) -> Result<Option<i64>> {
        self.check_open()?;
        Ok(self.committed_offset)
    }

    /// Ids of the open segments, oldest first.
    pub fn segment_ids(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }

    /// Bytes staged in memory across segments, and whether staged writes spilled to disk.
    pub fn uncommitted(&self) -> (usize, bool) {
        self.segments
            .values()
            .fold((0, false), |(bytes, spilled), s| {
                let (b, sp) = s.uncommitted();
                (bytes + b, spilled || sp)
            })
    }

    /// Memory and files of every open segment together.
    pub fn memory(&self) -> Result<StoreMemory> {
        self.check_open()?;
        let mut total = StoreMemory::default();
        for segment in self.segments.values() {
            total.add(&segment.memory()?);
        }
        Ok(total)
    }

    /// Writes `value` (`None` deletes) under store key `key`, in the segment of `timestamp`.
    /// Returns `false` when the segment has expired and the put was dropped.
    pub fn put(&mut self, key: &[u8], timestamp: i64, value: Option<&[u8]>) -> Result<bool> {
        self.check_open()?;
        self.stream_time = self.stream_time.max(timestamp);
        let id = self.options.segment_id(timestamp);
        let min_live = self.options.min_live_segment(self.stream_time);
        if id < min_live {
            self.dropped_records += 1;
            return Ok(false);
        }
        if !self.options.store.transactional {
            self.segment(id)?.put(key, value)?;
            self.drop_segments_before(min_live)?;
            return Ok(true);
        }
        self.put_run(id, &mut std::iter::once((key, value)))?;
        Ok(true)
    }

    /// `put` of each of `puts` in turn; returns how many were dropped as expired. A transactional
    /// store hands each run of puts into one segment to it in one call (no segment lookup,
    /// lock or budget update per put); the uncommitted bound is checked after each run.
    pub fn put_all(&mut self, puts: &StorePuts<'_>) -> Result<usize> {
        self.check_open()?;
        let mut dropped = 0;
        if !self.options.store.transactional {
            for (key, timestamp, value) in puts.iter() {
                dropped += usize::from(!self.put(key, timestamp, value)?);
            }
            return Ok(dropped);
        }
        let mut run: Vec<Write<'_>> = Vec::new();
        let mut run_segment = None;
        for (key, timestamp, value) in puts.iter() {
            self.stream_time = self.stream_time.max(timestamp);
            let id = self.options.segment_id(timestamp);
            if id < self.options.min_live_segment(self.stream_time) {
                self.dropped_records += 1;
                dropped += 1;
                continue;
            }
            if run_segment != Some(id) {
                if let Some(segment) = run_segment {
                    self.put_run(segment, &mut run.drain(..))?;
                }
                run_segment = Some(id);
            }
            run.push((key, value));
        }
        if let Some(segment) = run_segment {
            self.put_run(segment, &mut run.drain(..))?;
        }
        Ok(dropped)
    }

    /// Stages `writes` in segment `id` of a transactional store, then spills every segment if
    /// the staged bytes went past the bound.
    fn put_run(&mut self, id: i64, writes: &mut dyn Iterator<Item = Write<'_>>) -> Result<()> {
        let segment = self.segment(id)?;
        let before = segment.uncommitted().0;
        segment.put_all(writes)?;
        let after = segment.uncommitted().0;
        self.staged_bytes = (self.staged_bytes + after).saturating_sub(before);
        if self.staged_bytes > self.options.store.max_uncommitted_bytes && self.dir.is_some() {
            for segment in self.segments.values_mut() {
                segment.spill_staged()?;
            }
            self.staged_bytes = 0;
        }
        Ok(())
    }

    /// Deletes store key `key` from the segment of `timestamp` if that segment exists (Kafka's
    /// `remove`: it advances stream time but neither creates a segment nor counts a drop).
    pub fn remove(&mut self, key: &[u8], timestamp: i64) -> Result<()> {
        self.check_open()?;
        self.stream_time = self.stream_time.max(timestamp);
        let id = self.options.segment_id(timestamp);
        // An expired segment is as good as deleted (Kafka deletes it as stream time passes).
        if id < self.options.min_live_segment(self.stream_time) || !self.segments.contains_key(&id)
        {
            return Ok(());
        }
        self.put(key, timestamp, None).map(|_| ())
    }

    /// The value under store key `key` in the segment of `timestamp`, if not expired.
    pub fn get(&mut self, key: &[u8], timestamp: i64) -> Result<Option<Vec<u8>>> {
        self.get_with(key, timestamp, |v| v.map(<[u8]>::to_vec))
    }

    /// `get`, passing the value to `f` without copying it.
    pub fn get_with<R>(
        &mut self,
        key: &[u8],
        timestamp: i64,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        self.check_open()?;
        if timestamp < min_live_time(self.stream_time, self.options.retention_ms) {
            return Ok(f(None));
        }
        self.get_stored_with(key, timestamp, f)
    }

    /// `get_with` of what is stored, shown by reads or not: the value a commit publishes for
    /// `key` (staged or committed), even older than `stream_time - retention + 1`.
    pub fn get_stored_with<R>(
        &mut self,
        key: &[u8],
        timestamp: i64,
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        self.check_open()?;
        let id = self.options.segment_id(timestamp);
        match self.segments.get_mut(&id) {
            Some(segment) => segment.get_with(key, f),
            None => Ok(f(None)),
        }
    }

    /// Passes the staged writes of every live segment to `chunk` (segment by segment, each in
    /// key order), in chunks of about `chunk_bytes`: what a commit will apply.
    pub fn for_each_staged(
        &mut self,
        chunk_bytes: usize,
        chunk: &mut dyn FnMut(&[Write<'_>]) -> Result<()>,
    ) -> Result<()> {
        self.check_open()?;
        let min_live = self.options.min_live_segment(self.stream_time);
        for segment in self.segments.range_mut(min_live..).map(|(_, s)| s) {
            segment.for_each_staged(chunk_bytes, chunk)?;
        }
        Ok(())
    }

    /// Stages writes by store key (values as stored), each in the segment of the timestamp
    /// `segment_time` reads from its key; writes to expired segments are dropped as late puts.
    pub fn put_store_keys(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        segment_time: &dyn Fn(&[u8]) -> Result<i64>,
    ) -> Result<()> {
        for (key, value) in writes {
            self.put(key, segment_time(key)?, value)?;
        }
        Ok(())
    }

    /// Puts restored changelog records into their segments (see [`Self::put_store_keys`]) and
    /// commits them with `offset`: one atomic step.
    pub fn restore(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: i64,
        segment_time: &dyn Fn(&[u8]) -> Result<i64>,
    ) -> Result<()> {
        if self.uncommitted() != (0, false) {
            return Err(Error::InvalidState(
                "a store with uncommitted writes cannot restore; recover first".into(),
            ));
        }
        self.put_store_keys(writes, segment_time)?;
        self.commit(Some(offset), &mut |_| {})
    }

    /// Passes every store key a live segment has a staged write for to `visit`, with its
    /// committed value (`None`: absent): what undoes the transaction once it is committed.
    pub fn previous_values_of_staged(&mut self, visit: &mut VisitWrite<'_>) -> Result<()> {
        self.check_open()?;
        let min_live = self.options.min_live_segment(self.stream_time);
        for segment in self.segments.range_mut(min_live..).map(|(_, s)| s) {
            segment.previous_values_of_staged(visit)?;
        }
        Ok(())
    }

    /// Applies every staged write and `offset` atomically across segments (see module docs).
    pub fn commit(
        &mut self,
        offset: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        self.check_open()?;
        let writes = Arc::clone(&self.writes);
        let _writes = hold_writes(&writes)?;
        let min_live = self.options.min_live_segment(self.stream_time);
        match (&self.dir, self.options.store.transactional) {
            (Some(_), true) => {
                if let Some(id) = self.one_segment_commit(offset, min_live) {
                    self.commit_one_segment(id, offset)?;
                    self.staged_bytes = 0;
                    return Ok(());
                }
                let path = self.intent_path()?;
                let mut writer = IntentWriter::create(&path, offset, self.stream_time)?;
                if offset < self.committed_offset {
                    // Recovery takes the largest offset a segment recorded as the last commit's:
                    // a commit going back must reach every segment, so its intent always holds a
                    // batch (an empty one if nothing is staged) and is finished on open.
                    if let Some((&id, _)) = self.segments.range(min_live..).next_back() {
                        writer.entry(id, WriteBatch::default().data())?;
                    }
                }
                let mut spilled = false;
                for (&id, segment) in self.segments.range_mut(min_live..) {
                    spilled |= segment.uncommitted().1;
                    segment.prepare_commit(INTENT_BATCH_BYTES, &mut |batch| {
                        if write_batch::is_empty(batch) {
                            Ok(())
                        } else {
                            writer.entry(id, batch)
                        }
                    })?;
                }
                let entries = writer.entries();
                writer.finish(&path)?;
                self.intent_durable = true;
                // Unspilled segments still hold the batches the file got: no need to read it back.
                let applied = match spilled {
                    true => self.apply_intent(progress),
                    false => self.apply_staged(offset, entries, progress),
                };
                if let Err(e) = applied {
                    // Some segments may hold the commit and others not; the durable intent makes
                    // reopening finish it, so close rather than serve a mix.
                    let _ = self.close();
                    return Err(Error::InvalidState(format!(
                        "store {} failed while applying a commit ({e}); it is closed, reopen it to finish the commit",
                        self.name
                    )));
                }
            }
            (dir, _) => {
                // In memory nothing survives a crash; written through, each put is already on
                // disk: committing segment by segment is all there is to do.
                for segment in self.segments.values_mut() {
                    segment.commit(offset, progress)?;
                }
                if dir.is_some() {
                    commit_intent::write_record(&self.intent_path()?, offset, self.stream_time)?;
                    self.intent_durable = true;
                }
                self.set_committed(offset, self.stream_time)?;
                self.drop_segments_before(min_live)?;
            }
        }
        self.staged_bytes = 0;
        Ok(())
    }

    /// The segment a commit can write alone, with its offset and stream time in the same RocksDB
    /// write instead of through the commit intent: the only live segment with staged writes (or,
    /// with none staged, the newest), in memory, when the offset does not go back (recovery takes
    /// the largest a segment recorded) and no segment expires (dropping one waits for the stream
    /// time that expired it to be durable).
    fn one_segment_commit(&self, offset: Option<i64>, min_live: i64) -> Option<i64> {
        let expires = self.segments.range(..min_live).next().is_some();
        if offset < self.committed_offset || expires {
            return None;
        }
        let live = || self.segments.range(min_live..);
        let mut staged = live().filter(|(_, segment)| segment.has_staged());
        match (staged.next(), staged.next()) {
            (Some((&id, segment)), None) => (!segment.uncommitted().1).then_some(id),
            (None, _) => live().next_back().map(|(&id, _)| id),
            (Some(_), Some(_)) => None,
        }
    }

    /// Commits segment `id` alone (see `one_segment_commit`), after making the commit intent
    /// durable so that no older one can come back and be applied over this commit.
    fn commit_one_segment(&mut self, id: i64, offset: Option<i64>) -> Result<()> {
        if !self.intent_durable {
            commit_intent::sync_rename(&self.intent_path()?)?;
            self.intent_durable = true;
        }
        let stream_time = self.stream_time;
        self.segment(id)?.commit_segment(offset, stream_time)?;
        self.set_committed(offset, stream_time)
    }

    /// Applies the batches of the commit-intent file (after a commit wrote it, or on open after
    /// a crash), records the offset in every live segment, and marks the commit complete.
    fn apply_intent(&mut self, progress: &mut dyn FnMut(CommitProgress)) -> Result<()> {
        let path = self.intent_path()?;
        let intent = commit_intent::read(&path)?.ok_or_else(|| {
            Error::Corrupted(format!("commit intent {} is not readable", path.display()))
        })?;
        let mut applied = 0;
        commit_intent::for_each_entry(&path, &intent, |id, batch| {
            self.segment(id)?
                .apply_prepared(WriteBatch::from_data(batch))?;
            applied += 1;
            progress(CommitProgress {
                writes_applied: applied,
                writes_total: intent.entries,
            });
            Ok(())
        })?;
        self.complete_commit(intent)
    }

    /// Applies the commit of a durable intent with `entries` batches from the segments' staged
    /// writes, none of them spilled: the same batches the file holds.
    fn apply_staged(
        &mut self,
        offset: Option<i64>,
        entries: u64,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        let min_live = self.options.min_live_segment(self.stream_time);
        let mut applied = 0;
        for segment in self.segments.range_mut(min_live..).map(|(_, s)| s) {
            if segment.apply_staged()? {
                applied += 1;
                progress(CommitProgress {
                    writes_applied: applied,
                    writes_total: entries,
                });
            }
        }
        self.complete_commit(CommitIntent {
            offset,
            stream_time: self.stream_time,
            entries,
        })
    }

    /// Records the offset in every live segment once `intent`'s batches are applied, marks the
    /// commit complete and drops the segments it expired.
    fn complete_commit(&mut self, intent: CommitIntent) -> Result<()> {
        let min_live = self.options.min_live_segment(intent.stream_time);
        for segment in self.segments.range_mut(min_live..).map(|(_, s)| s) {
            segment.finish_prepared_commit(intent.offset)?;
        }
        if intent.entries > 0 {
            commit_intent::write_completion(
                &self.intent_path()?,
                intent.offset,
                intent.stream_time,
            )?;
            self.intent_durable = false;
        }
        self.stream_time = self.stream_time.max(intent.stream_time);
        self.set_committed(intent.offset, intent.stream_time)?;
        self.drop_segments_before(min_live)
    }

    fn set_committed(&mut self, offset: Option<i64>, stream_time: i64) -> Result<()> {
        self.committed_offset = offset;
        self.committed_stream_time = stream_time;
        let mut committed = self
            .committed
            .write()
            .map_err(|_| Error::InvalidState("segment views lock poisoned".into()))?;
        committed.offset = offset;
        committed.stream_time = stream_time;
        Ok(())
    }

    /// Discards staged writes (and the stream time they advanced). Returns whether the
    /// committed state is at `offset` or later, as `KeyValueStore::recover`.
    pub fn recover(&mut self, offset: Option<i64>) -> Result<bool> {
        self.check_open()?;
        for segment in self.segments.values_mut() {
            segment.recover(None)?;
        }
        self.staged_bytes = 0;
        if !self.options.store.transactional {
            return Ok(false);
        }
        self.stream_time = self.committed_stream_time;
        Ok(match (offset, self.committed_offset) {
            (None, _) => true,
            (Some(wanted), Some(committed)) => committed >= wanted,
            (Some(_), None) => false,
        })
    }

    pub fn close(&mut self) -> Result<()> {
        if !self.open {
            return Ok(());
        }
        self.open = false;
        if let Ok(mut committed) = self.committed.write() {
            committed.open = false;
            committed.segments.clear();
            committed.files.clear();
        }
        // Before the segments close: the last one to close lets the process's budget go.
        self.options.store.rocks = None;
        for segment in self.segments.values_mut() {
            segment.close()?;
        }
        self.segments.clear();
        Ok(())
    }

    pub fn approximate_num_entries(&self) -> Result<u64> {
        self.check_open()?;
        self.segments
            .values()
            .try_fold(0, |n, s| Ok(n + s.approximate_num_entries()?))
    }

    /// Compacts every segment now (the TTL's compaction filter drops expired values).
    pub fn compact(&self) -> Result<()> {
        self.check_open()?;
        self.segments.values().try_for_each(KeyValueStore::compact)
    }

    /// The committed state as files for snapshots (`crate::segmented::snapshot`): persistent
    /// transactional stores only, as for key-value stores.
    pub fn committed_files(&self) -> Result<SegmentedFiles> {
        self.check_open()?;
        if self.dir.is_none() || !self.options.store.transactional {
            return Err(Error::InvalidArgument(format!(
                "store {} cannot be snapshotted: only persistent transactional stores have \
                 committed files",
                self.name
            )));
        }
        Ok(SegmentedFiles::new(
            &self.name,
            &self.options,
            Arc::clone(&self.committed),
            Arc::clone(&self.writes),
        ))
    }

    pub fn read_committed_view(&self) -> SegmentedView {
        SegmentedView {
            name: self.name.clone(),
            committed: self.committed.clone(),
            options: self.options.clone(),
        }
    }
}

/// `<task>/.<store><suffix>` of the store at `dir` = `<task>/<store>`: kstate's own files stay
/// out of `<task>/<store>/`, where Kafka's `openExisting` gives up on every segment once it meets
/// a name that is not one.
fn beside(name: &str, dir: &Path, suffix: &str) -> Result<PathBuf> {
    let task_dir = dir
        .parent()
        .ok_or_else(|| Error::InvalidState(format!("store {name} has no task directory")))?;
    Ok(task_dir.join(format!(".{name}{suffix}")))
}

/// The commit-intent file of the store `name` at `dir` = `<task>/<store>`.
pub(crate) fn intent_path(name: &str, dir: &Path) -> Result<PathBuf> {
    beside(name, dir, ".commit")
}

/// Holds off the commits of a store (see `SegmentedStore::writes`).
pub(crate) fn hold_writes(writes: &Mutex<()>) -> Result<MutexGuard<'_, ()>> {
    writes
        .lock()
        .map_err(|_| Error::InvalidState("a segmented store's commit lock is poisoned".into()))
}

fn check_options(options: &SegmentedOptions) -> Result<()> {
    if options.retention_ms < 0 || options.segment_interval <= 0 {
        return Err(Error::InvalidArgument(format!(
            "retention ({} ms) must be >= 0 and the segment interval ({} ms) > 0",
            options.retention_ms, options.segment_interval
        )));
    }
    if options.store.durability != Durability::Wal {
        // A commit through the intent records its offset once every segment has its batch:
        // without the segments' WALs, a crash after that could lose batches the intent no
        // longer holds while the offset claims them.
        return Err(Error::InvalidArgument(
            "window and session stores keep RocksDB's write-ahead log: their commits span \
             several segments, which only the WAL keeps consistent with the committed offset"
                .into(),
        ));
    }
    Ok(())
}

impl SegmentReader for SegmentedStore {
    fn stream_time(&self) -> i64 {
        self.stream_time
    }

    fn next_segment(&self, lo: i64, hi: i64, direction: Direction) -> Result<Option<i64>> {
        self.check_open()?;
        Ok(first_in(&self.segments, lo, hi, direction))
    }

    fn scan_segment(
        &self,
        id: i64,
        range: &KeyRange,
        direction: Direction,
        limit: ScanLimit,
        visit: &mut VisitEntry<'_>,
    ) -> Result<Scanned> {
        self.check_open()?;
        match self.segments.get(&id) {
            Some(segment) => segment.scan_with(range, direction, limit, visit),
            None => Ok(Scanned::default()),
        }
    }
}

/// Reads only what is committed, from any thread; closing the store closes it.
#[derive(Clone)]
pub struct SegmentedView {
    name: String,
    committed: Arc<RwLock<Committed>>,
    options: SegmentedOptions,
}

impl SegmentedView {
    fn with<R>(&self, f: impl FnOnce(&Committed) -> Result<R>) -> Result<R> {
        let committed = self
            .committed
            .read()
            .map_err(|_| Error::InvalidState("segment views lock poisoned".into()))?;
        if !committed.open {
            return Err(Error::Closed(format!("store {} is closed", self.name)));
        }
        f(&committed)
    }

    pub fn is_open(&self) -> bool {
        self.with(|_| Ok(())).is_ok()
    }

    pub fn options(&self) -> &SegmentedOptions {
        &self.options
    }

    pub fn get(&self, key: &[u8], timestamp: i64) -> Result<Option<Vec<u8>>> {
        let view = self.with(|c| {
            if timestamp < min_live_time(c.stream_time, self.options.retention_ms) {
                return Ok(None);
            }
            Ok(c.segments.get(&self.options.segment_id(timestamp)).cloned())
        })?;
        view.map_or(Ok(None), |v| v.get(key))
    }
}

impl SegmentReader for SegmentedView {
    fn stream_time(&self) -> i64 {
        self.with(|c| Ok(c.stream_time)).unwrap_or(-1)
    }

    fn next_segment(&self, lo: i64, hi: i64, direction: Direction) -> Result<Option<i64>> {
        self.with(|c| Ok(first_in(&c.segments, lo, hi, direction)))
    }

    fn scan_segment(
        &self,
        id: i64,
        range: &KeyRange,
        direction: Direction,
        limit: ScanLimit,
        visit: &mut VisitEntry<'_>,
    ) -> Result<Scanned> {
        // The segment's view is cloned out so the scan does not hold the lock.
        match self.with(|c| Ok(c.segments.get(&id).cloned()))? {
            Some(view) => view.scan_with(range, direction, limit, visit),
            None => Ok(Scanned::default()),
        }
    }
}

/// Removes a segment's directory so that a process killed part-way never leaves a half-removed
/// RocksDB directory under a segment's name (the next open would take it for the segment): it is
/// renamed to `<name>.deleting` first (not a segment name), then removed; one left by a killed
/// process is removed with the next.
fn remove_whole(path: &Path) -> Result<()> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(std::fs::remove_dir_all(path)?);
    };
    let doomed = path.with_file_name(format!("{name}{DELETING_SUFFIX}"));
    if let Some(parent) = path.parent() {
        for entry in std::fs::read_dir(parent)? {
            let entry = entry?;
            if entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(DELETING_SUFFIX))
            {
                std::fs::remove_dir_all(entry.path())?;
            }
        }
    }
    std::fs::rename(path, &doomed)?;
    Ok(std::fs::remove_dir_all(doomed)?)
}

const DELETING_SUFFIX: &str = ".deleting";

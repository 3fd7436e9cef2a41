//! The key-value store users write to: uncommitted writes (overlay, then spill) over committed
//! state (RocksDB or memory), with KIP-892's `commit(offset)` / `recover(offset)`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rocksdb::WriteBatch;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::format::offsets::{self, STATUS_CLOSED, STATUS_OPEN};
use crate::store::committed::{CommittedState, OffsetWrite, Write};
use crate::store::key_range::{prefix_upper_bound, write_prefix_upper_bound, Direction, KeyRange};
use crate::store::memory::MemoryState;
use crate::store::memory_budget::{MemoryBudget, MemoryProbe, StoreAccount, StoreMemory};
use crate::store::merge::{Below, IterSource, ScanLimit, Scanned, SortedSource, VisitEntry};
use crate::store::overlay::Overlay;
use crate::store::read_cache::{Generations, ReadCache};
use crate::store::rocks::{RocksState, ValueFormat};
use crate::store::rocks_options::RocksConfig;
use crate::store::spill::Spill;
use crate::store::ttl::{self, Ttl};

/// Kafka's proposed default for `statestore.uncommitted.max.bytes` (64 MiB).
pub const DEFAULT_MAX_UNCOMMITTED_BYTES: usize = 64 * 1024 * 1024;
/// Size of the RocksDB batches a spilled commit is copied in where it cannot ingest (upgrade mode).
const SPILL_COPY_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// The table file a spilled commit writes and ingests, inside the spill's directory.
const SPILL_INGEST_FILE: &str = "commit.sst";
/// Receives one entry of a multi-prefix scan with its prefix's index; returns whether to go on.
pub type VisitPrefixed<'f> = dyn FnMut(usize, &[u8], &[u8]) -> Result<bool> + 'f;
/// Receives one key and a value (`None`: absent).
pub type VisitWrite<'f> = dyn FnMut(&[u8], Option<&[u8]>) -> Result<()> + 'f;
/// A key's committed value when known from elsewhere: `Some(None)` absent, `None` not known.
pub type KnownCommitted<'k> = dyn Fn(&[u8]) -> Option<Option<&'k [u8]>> + 'k;

/// Staged writes read per chunk when collecting the keys of a transaction.
const STAGED_KEYS_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Staged keys to read before a commit's undo first looks up the largest committed key (a
/// reverse seek costs about what a few point reads do).
const LARGEST_KEY_PROBE_MIN_KEYS: usize = 16;

/// What makes a RocksDB store's commits survive a crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// RocksDB's write-ahead log: a killed process reopens at its last commit.
    #[default]
    Wal,
    /// Kafka Streams' `RocksDBStore` (WAL off): commits reach disk when the memtables flush,
    /// all column families together (`atomic_flush`), so a killed process reopens at an older
    /// commit, whole (data and offset of exactly that commit), and the changelog restores the
    /// rest. A clean close flushes and loses nothing. Transactional key-value stores only.
    Changelog,
}

impl Durability {
    /// `"wal"` or `"changelog"`, as the Python option names them.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "wal" => Ok(Self::Wal),
            "changelog" => Ok(Self::Changelog),
            other => Err(Error::InvalidArgument(format!(
                "durability must be \"wal\" or \"changelog\", got {other:?}"
            ))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Stage writes and apply them atomically on commit (`enable.transactional.statestores`).
    pub transactional: bool,
    /// Past this many staged bytes the overlay spills to disk.
    pub max_uncommitted_bytes: usize,
    /// Key of this store's changelog offset in the `offsets` family: `<topic>-<partition>`.
    pub offset_key: String,
    /// Bytes of recently committed values kept in memory for reads (0 disables the cache).
    pub cache_max_bytes: usize,
    /// The process's memory budget and the user's RocksDB options (`None`: the process's
    /// budget as it is, no user options). In-memory stores ignore it.
    pub rocks: Option<Arc<RocksConfig>>,
    /// How a RocksDB store's commits become durable. In-memory stores ignore it.
    pub durability: Durability,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            transactional: true,
            max_uncommitted_bytes: DEFAULT_MAX_UNCOMMITTED_BYTES,
            offset_key: String::new(),
            cache_max_bytes: 0,
            rocks: None,
            durability: Durability::Wal,
        }
    }
}

/// What opening a store found, for the caller to log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    pub upgrade_mode: bool,
    /// A non-transactional store was not closed cleanly: its content may be ahead of its offset,
    /// so the offset was dropped and the store must be restored.
    pub unclean_shutdown: bool,
    /// A store with `Durability::Changelog` was not closed cleanly: the commits its memtables
    /// held were lost, so it reopened at its last flushed commit, which may be older than the
    /// last commit (the caller restores the rest from its changelog).
    pub unflushed_commits_lost: bool,
    /// A spilled commit interrupted by a crash was finished (number of writes copied).
    pub finished_spilled_commit: Option<u64>,
    /// Uncommitted spilled writes of a crashed writer were discarded.
    pub discarded_spill: bool,
}

/// Progress of a long commit, reported between copy batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitProgress {
    pub writes_applied: u64,
    pub writes_total: u64,
}

/// Committed state shared by a store and its read-committed views; `None` once closed.
#[derive(Clone)]
pub struct SharedState {
    name: Arc<str>,
    state: Arc<RwLock<Option<Box<dyn CommittedState>>>>,
    /// Held while a commit or restore changes the committed state (a spilled commit takes
    /// several writes) and while a snapshot reads the offset and captures the files, so the
    /// files always hold the commit of the offset read.
    writes: Arc<Mutex<()>>,
}

impl SharedState {
    fn new(name: &str, state: Box<dyn CommittedState>) -> Self {
        Self {
            name: name.into(),
            state: Arc::new(RwLock::new(Some(state))),
            writes: Arc::default(),
        }
    }

    fn hold_writes(writes: &Mutex<()>) -> Result<MutexGuard<'_, ()>> {
        writes
            .lock()
            .map_err(|_| Error::InvalidState("a store's commit lock is poisoned".into()))
    }

    fn with<R>(&self, f: impl FnOnce(&dyn CommittedState) -> Result<R>) -> Result<R> {
        let guard = self
            .state
            .read()
            .map_err(|_| Error::InvalidState(format!("store {} lock poisoned", self.name)))?;
        match guard.as_deref() {
            Some(state) => f(state),
            None => Err(Error::Closed(format!("store {} is closed", self.name))),
        }
    }

    fn take(&self) -> Result<Option<Box<dyn CommittedState>>> {
        let mut guard = self
            .state
            .write()
            .map_err(|_| Error::InvalidState(format!("store {} lock poisoned", self.name)))?;
        Ok(guard.take())
    }

    pub fn is_open(&self) -> bool {
        self.state.read().map(|g| g.is_some()).unwrap_or(false)
    }
}

impl MemoryProbe for SharedState {
    fn probe(&self) -> Result<StoreMemory> {
        self.with(|c| c.memory())
    }

    fn active_memtable_bytes(&self) -> usize {
        self.with(|c| Ok(c.active_memtable_bytes())).unwrap_or(0)
    }

    fn flush(&self, wait: bool) -> Result<()> {
        match self.with(|c| c.flush_memtables(wait)) {
            Err(Error::Closed(_)) => Ok(()),
            other => other,
        }
    }
}

/// Reads only what is committed; safe to use from another thread while the writer works.
/// Point reads go through the store's read cache, if it has one.
#[derive(Clone)]
pub struct ReadCommittedView {
    state: SharedState,
    ttl: Option<Ttl>,
    cache: Option<ReadCache>,
}

impl ReadCommittedView {
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, |v| v.map(<[u8]>::to_vec))
    }

    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R> {
        let ttl = &self.ttl;
        let Some(cache) = &self.cache else {
            return self
                .state
                .with(|c| visit_once(|visit| c.read(key, false, visit), |v| f(live(ttl, v))));
        };
        let mut f = Some(f);
        let changes = match cache.visit_or_changes(key, |v| f.take().map(|f| f(live(ttl, v)))) {
            Ok(found) => {
                return found.ok_or_else(|| Error::InvalidState("read visited twice".into()))
            }
            Err(changes) => changes,
        };
        let Some(f) = f else {
            return Err(Error::InvalidState("read visited twice".into()));
        };
        self.state.with(|c| {
            visit_once(
                |visit| c.read(key, false, visit),
                |v| {
                    // Absent keys are not cached: the Bloom filters answer them about as fast.
                    if v.is_some() {
                        cache.admit_unless_changed(key, v, changes);
                    }
                    f(live(ttl, v))
                },
            )
        })
    }

    pub fn get_many_with(
        &self,
        keys: &[&[u8]],
        visit: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let ttl = &self.ttl;
        self.state
            .with(|c| c.read_many(keys, &mut |i, v| visit(i, live(ttl, v))))
    }

    /// Passes the visible entries of `range` to `visit` up to `limit`, without copying them;
    /// says what it passed.
    pub fn scan_with(
        &self,
        range: &KeyRange,
        direction: Direction,
        limit: ScanLimit,
        visit: &mut VisitEntry<'_>,
    ) -> Result<Scanned> {
        self.state.with(|c| {
            let mut sources = c.sources(range, direction)?;
            ttl::merge_live(self.ttl.as_ref(), &mut sources, direction, limit, visit)
        })
    }

    pub fn approximate_num_entries(&self) -> Result<u64> {
        self.state.with(|c| c.approximate_num_entries())
    }

    pub fn is_open(&self) -> bool {
        self.state.is_open()
    }
}

/// A store's committed state as files, for a snapshot taken on another thread while the
/// store goes on committing (`crate::snapshot`).
#[derive(Clone)]
pub struct CommittedFiles {
    state: SharedState,
    offset_key: String,
}

impl CommittedFiles {
    /// Captures the committed state at `dir` (RocksDB's checkpoint: hard links of the table
    /// files) and returns the changelog offset the files hold; `None`, capturing nothing, while
    /// the store has no committed offset. The memtables are flushed first, while commits go on;
    /// commits wait only for the checkpoint of what is then on disk, which names the offset a
    /// crash would reopen at: without a WAL, the commits made during the flush are not in it
    /// (the changelog holds them). Should a flush end during the checkpoint, the files could
    /// hold a later commit than the offset read: then the checkpoint is taken again with the
    /// memtables flushed, commits waiting for that flush.
    pub fn capture(&self, dir: &Path) -> Result<Option<i64>> {
        self.flush()?;
        self.capture_flushed(dir)
    }

    /// [`Self::capture`] after its flush: the checkpoint, commits held off.
    pub fn capture_flushed(&self, dir: &Path) -> Result<Option<i64>> {
        let _writes = SharedState::hold_writes(&self.state.writes)?;
        self.state.with(|c| {
            let Some(committed) = c.committed_offset(&self.offset_key)? else {
                return Ok(None);
            };
            let persisted = c.persisted_offset(&self.offset_key)?;
            if let Some(offset) = persisted {
                c.checkpoint_persisted(dir)?;
                // A flush ending in between would have moved the persisted offset: one that
                // did not move names exactly what the files hold.
                if c.persisted_offset(&self.offset_key)? == persisted {
                    return Ok(Some(offset));
                }
                std::fs::remove_dir_all(dir)?;
            }
            c.checkpoint(dir)?;
            Ok(Some(committed))
        })
    }

    /// Flushes the memtables: the slow part of a capture, done before commits are held off.
    pub fn flush(&self) -> Result<()> {
        self.state.with(|c| c.flush_memtables(true))
    }

    /// RocksDB's checkpoint of the committed state at `dir`, for a caller that holds off the
    /// commits of a whole segmented store (a segment's own commits wait for it too).
    pub(crate) fn checkpoint(&self, dir: &Path) -> Result<()> {
        let _writes = SharedState::hold_writes(&self.state.writes)?;
        self.state.with(|c| c.checkpoint(dir))
    }
}

pub struct KeyValueStore {
    state: SharedState,
    options: StoreOptions,
    /// Staged writes, kept as records of the committed state's own write batch when it has
    /// one (`direct_batch`), so a commit hands them over in one piece.
    overlay: Overlay,
    /// Whether the overlay's batch is the committed state's (`CommittedState::batch_records`);
    /// otherwise a commit stages its writes one by one (`CommittedState::stage`).
    direct_batch: bool,
    /// Where uncommitted writes spill; `None` for in-memory stores, which never spill.
    spill_path: Option<PathBuf>,
    spill: Option<Spill>,
    /// Committed values in front of RocksDB; `None` for in-memory stores.
    cache: Option<ReadCache>,
    /// Expired values are hidden from every read (and dropped by RocksDB compactions).
    ttl: Option<Ttl>,
    /// The store's share of the process's memory budget; `None` in memory and once closed.
    account: Option<Arc<StoreAccount>>,
    /// How spills open RocksDB; `None` for in-memory stores.
    rocks: Option<Arc<RocksConfig>>,
}

impl KeyValueStore {
    /// Opens (creating if needed) a RocksDB store at `path`; `spill_path` is where uncommitted
    /// writes go past the memory bound. Finishes or discards what a crashed writer left there.
    pub fn open_rocksdb(
        name: &str,
        path: &Path,
        spill_path: &Path,
        format: ValueFormat,
        options: StoreOptions,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<(Self, OpenReport)> {
        Self::open_rocksdb_with_ttl(name, path, spill_path, format, options, None, progress)
    }

    /// `open_rocksdb` with a TTL (timestamped stores only).
    pub fn open_rocksdb_with_ttl(
        name: &str,
        path: &Path,
        spill_path: &Path,
        format: ValueFormat,
        options: StoreOptions,
        ttl: Option<Ttl>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<(Self, OpenReport)> {
        let config = RocksConfig::given_or_default(options.rocks.as_ref())?;
        if options.durability == Durability::Changelog && !options.transactional {
            return Err(Error::InvalidArgument(
                "changelog durability needs a transactional store: a non-transactional one \
                 writes outside commits, so a crash could leave data ahead of its offset"
                    .into(),
            ));
        }
        std::fs::create_dir_all(path)?;
        let rocks =
            RocksState::open_with_ttl(path, format, ttl.as_ref(), &config, options.durability)?;
        if let Some(ttl) = &ttl {
            if let Some(time) = rocks.committed_offset(offsets::TTL_STREAM_TIME_KEY)? {
                ttl.advance_to(time);
            }
        }
        let mut report = OpenReport {
            upgrade_mode: rocks.upgrade_mode(),
            ..OpenReport::default()
        };
        // Transactional stores never leave partial writes behind, so, like Kafka, they do not
        // write the OPEN/CLOSED marker; a stale OPEN from a non-transactional run still counts.
        // With changelog durability the marker says whether commits were lost: OPEN is made
        // durable before any commit, CLOSED only by the flush of a clean close.
        let changelog_durability = options.durability == Durability::Changelog;
        let marks_status = !options.transactional || changelog_durability;
        let previous = rocks.swap_status(marks_status.then_some(STATUS_OPEN))?;
        if previous == Some(STATUS_OPEN) && changelog_durability {
            report.unflushed_commits_lost = true;
        } else if previous == Some(STATUS_OPEN) {
            report.unclean_shutdown = true;
            let forget = OffsetWrite {
                key: &options.offset_key,
                offset: None,
                stream_time: None,
                segmented_stream_time: None,
            };
            rocks.apply(&mut std::iter::empty(), Some(forget))?;
            if options.transactional {
                rocks.swap_status(Some(STATUS_CLOSED))?;
            }
        }
        if Spill::exists(spill_path) {
            let spill = Spill::open(spill_path, &config)?;
            match spill.commit_marker()? {
                Some(offset) => {
                    let copied = copy_spill(
                        &spill,
                        &rocks,
                        &options.offset_key,
                        offset,
                        changelog_durability,
                        progress,
                    )?;
                    report.finished_spilled_commit = Some(copied);
                }
                None => report.discarded_spill = true,
            }
            spill.destroy()?;
        }
        let records = rocks.batch_records()?;
        let budget = config.budget().clone();
        let cache = (options.cache_max_bytes > 0)
            .then(|| ReadCache::new(options.cache_max_bytes, budget.clone()));
        let state = SharedState::new(name, Box::new(rocks));
        let account = budget.open_account(
            name,
            Some(path.to_path_buf()),
            Arc::new(state.clone()),
            cache.as_ref().map(ReadCache::generations),
        );
        let store = Self {
            state,
            cache,
            options,
            direct_batch: records.is_some(),
            overlay: Overlay::new(records.unwrap_or_default()),
            spill_path: Some(spill_path.to_path_buf()),
            spill: None,
            ttl,
            account: Some(account),
            rocks: Some(config),
        };
        Ok((store, report))
    }

    pub fn open_in_memory(name: &str, options: StoreOptions) -> Self {
        Self::open_in_memory_with_ttl(name, options, None)
    }

    /// `open_in_memory` with a TTL: expired values are hidden from reads.
    pub fn open_in_memory_with_ttl(name: &str, options: StoreOptions, ttl: Option<Ttl>) -> Self {
        Self {
            state: SharedState::new(name, Box::new(MemoryState::default())),
            options,
            overlay: Overlay::default(),
            direct_batch: false,
            spill_path: None,
            spill: None,
            cache: None,
            ttl,
            account: None,
            rocks: None,
        }
    }

    pub fn ttl(&self) -> Option<&Ttl> {
        self.ttl.as_ref()
    }

    fn ttl_stream_time(&self) -> Option<i64> {
        self.ttl.as_ref().and_then(Ttl::stream_time)
    }

    /// The memory budget the store is charged to; `None` in memory and once closed.
    pub fn memory_budget(&self) -> Option<&Arc<MemoryBudget>> {
        self.account.as_ref().map(|account| account.budget())
    }

    pub fn transactional(&self) -> bool {
        self.options.transactional
    }

    /// The committed state as files for snapshots (persistent transactional stores: a
    /// non-transactional one writes outside commits, so its files can hold writes its changelog
    /// never got).
    pub fn committed_files(&self) -> Result<CommittedFiles> {
        if !self.persistent() || !self.options.transactional {
            return Err(Error::InvalidArgument(format!(
                "store {} cannot be snapshotted: only persistent transactional stores have \
                 committed files",
                self.state.name
            )));
        }
        Ok(CommittedFiles {
            state: self.state.clone(),
            offset_key: self.options.offset_key.clone(),
        })
    }

    pub fn persistent(&self) -> bool {
        self.spill_path.is_some()
    }

    pub fn is_open(&self) -> bool {
        self.state.is_open()
    }

    pub fn read_committed_view(&self) -> ReadCommittedView {
        ReadCommittedView {
            state: self.state.clone(),
            ttl: self.ttl.clone(),
            cache: self.cache.clone(),
        }
    }

    /// Bytes staged in memory (the overlay's batch and index) and whether earlier staged writes
    /// spilled to disk.
    pub fn uncommitted(&self) -> (usize, bool) {
        (self.overlay.memory(), self.spill.is_some())
    }

    /// Passes the value of `key` to `f` without copying, uncommitted writes first. A legacy
    /// value found in upgrade mode is migrated; a committed value read from disk is cached.
    pub fn get_with<R>(&mut self, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R> {
        let Self {
            state,
            overlay,
            spill,
            cache,
            ttl,
            ..
        } = self;
        let f = |v: Option<&[u8]>| f(live(ttl, v));
        state.with(|c| {
            let mut f = Some(f);
            let known = {
                let cached = cache.as_ref().map(ReadCache::lock);
                with_known(overlay, spill, cached.as_deref(), key, |known| {
                    known.map(|v| f.take().map(|f| f(v)))
                })?
            };
            let Some(f) = f else {
                return known
                    .flatten()
                    .ok_or_else(|| Error::InvalidState("read visited twice".into()));
            };
            visit_once(
                |visit| c.read(key, true, visit),
                |v| {
                    if let Some(cache) = cache {
                        cache.admit(key, v);
                    }
                    f(v)
                },
            )
        })
    }

    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, |v| v.map(<[u8]>::to_vec))
    }

    /// Passes `(index, value)` of every key to `visit`, uncommitted writes first; never migrates.
    pub fn get_many_with(
        &mut self,
        keys: &[&[u8]],
        visit: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let Self {
            state,
            overlay,
            spill,
            cache,
            ttl,
            ..
        } = self;
        let visit = &mut |i: usize, v: Option<&[u8]>| visit(i, live(ttl, v));
        state.with(|c| {
            if overlay.is_empty() && spill.is_none() && cache.is_none() {
                return c.read_many(keys, visit);
            }
            let mut missing = Vec::new();
            {
                // One lock of the read cache for the whole batch.
                let cached = cache.as_ref().map(ReadCache::lock);
                for (i, key) in keys.iter().enumerate() {
                    with_known(
                        overlay,
                        spill,
                        cached.as_deref(),
                        key,
                        |known| match known {
                            Some(v) => visit(i, v),
                            None => missing.push(i),
                        },
                    )?;
                }
            }
            let lookup: Vec<&[u8]> = missing.iter().map(|&i| keys[i]).collect();
            let admitted = cache
                .as_ref()
                .map_or_else(Vec::new, |c| c.admissions(&lookup));
            // The admitted values copied into one buffer (RocksDB's slices end with the callback):
            // each admitted lookup with its value's span in `values`, `None` for an absent key.
            let mut values = Vec::new();
            let mut fetched: Vec<(usize, Option<(usize, usize)>)> = Vec::new();
            c.read_many(&lookup, &mut |j, v| {
                if admitted.get(j) == Some(&true) {
                    let span = v.map(|v| {
                        values.extend_from_slice(v);
                        (values.len() - v.len(), values.len())
                    });
                    fetched.push((j, span));
                }
                visit(missing[j], v)
            })?;
            if let Some(cache) = cache.as_ref() {
                cache.insert_many(
                    fetched.iter().map(|&(j, span)| {
                        (lookup[j], span.map(|(start, end)| &values[start..end]))
                    }),
                );
            }
            Ok(())
        })
    }

    pub fn get_many(&mut self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = vec![None; keys.len()];
        self.get_many_with(keys, &mut |i, v| out[i] = v.map(<[u8]>::to_vec))?;
        Ok(out)
    }

    /// Writes `value` (`None` deletes).
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.put_all(&mut std::iter::once((key, value)))
    }

    pub fn put_all<'a>(
        &mut self,
        writes: &mut dyn Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<()> {
        let Self {
            state,
            overlay,
            cache,
            options,
            ttl,
            ..
        } = self;
        let writes = &mut writes.inspect(|(_, value)| {
            if let (Some(ttl), Some(value)) = (ttl.as_ref(), value) {
                ttl.observe(value);
            }
        });
        if !options.transactional {
            state.with(|c| {
                let mut writes = writes.inspect(|(key, _)| {
                    if let Some(cache) = cache.as_ref() {
                        cache.remove(key);
                    }
                });
                c.apply(&mut writes, None)
            })?;
            return self.relieve_memtables();
        }
        if let n @ 2.. = writes.size_hint().0 {
            overlay.reserve(n);
        }
        state.with(|_| {
            for (key, value) in writes {
                overlay.stage(key, value)?;
            }
            Ok(())
        })?;
        let staged = self.settle_staged();
        let over_budget = self
            .account
            .as_ref()
            .is_some_and(|account| account.budget().should_spill(staged));
        if staged > self.options.max_uncommitted_bytes || over_budget {
            self.spill_overlay()?;
        }
        Ok(())
    }

    /// Tells the memory budget how many bytes this store stages in memory now; returns them.
    fn settle_staged(&mut self) -> usize {
        let staged = self.overlay.memory();
        if let Some(account) = &self.account {
            account.set_staged(staged);
        }
        staged
    }

    /// This store's memory (RocksDB's, staged writes, read cache) and files.
    pub fn memory(&self) -> Result<StoreMemory> {
        match &self.account {
            Some(account) => account.memory(),
            None => {
                self.state.with(|_| Ok(()))?;
                Ok(StoreMemory {
                    staged: self.uncommitted().0,
                    ..StoreMemory::default()
                })
            }
        }
    }

    fn spill_overlay(&mut self) -> Result<()> {
        let Some(path) = &self.spill_path else {
            return Ok(());
        };
        if self.spill.is_none() {
            let config = RocksConfig::given_or_default(self.rocks.as_ref())?;
            self.spill = Some(Spill::open(path, &config)?);
        }
        if let Some(spill) = &self.spill {
            spill.absorb(&self.overlay)?;
        }
        self.discard_staged();
        Ok(())
    }

    /// Drops the writes staged in memory (not those spilled).
    fn discard_staged(&mut self) {
        self.overlay.clear();
        self.settle_staged();
    }

    /// Writes `value` unless `key` has one; returns the existing value.
    pub fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        let existing = self.get(key)?;
        if existing.is_none() {
            self.put(key, Some(value))?;
        }
        Ok(existing)
    }

    /// Deletes `key`; returns the value it had.
    pub fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let existing = self.get(key)?;
        self.put(key, None)?;
        Ok(existing)
    }

    /// Up to `limit` visible entries of `range` in `direction`. Iterators call this repeatedly
    /// with `KeyRange::after` so no RocksDB iterator outlives a call.
    pub fn scan(
        &self,
        range: &KeyRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect_rows(limit, |visit| {
            self.scan_with(range, direction, ScanLimit::rows(limit), visit)
        })
    }

    /// Passes the visible entries of `range` to `visit` up to `limit`, without copying them,
    /// staged writes merged over committed ones; says what it passed.
    pub fn scan_with(
        &self,
        range: &KeyRange,
        direction: Direction,
        limit: ScanLimit,
        visit: &mut VisitEntry<'_>,
    ) -> Result<Scanned> {
        self.state.with(|c| {
            let mut sources = self.layered_sources(c, range, direction)?;
            ttl::merge_live(self.ttl.as_ref(), &mut sources, direction, limit, visit)
        })
    }

    /// Passes every visible entry under each of `prefixes` to `visit` with the prefix's index,
    /// prefix by prefix in key order, through one set of iterators that seeks from prefix to
    /// prefix: reading many keys' entries ahead costs one iterator, not one per key. No prefix
    /// may start another. `visit` returns `false` to end the scan there.
    pub fn scan_prefixes(&self, prefixes: &[&[u8]], visit: &mut VisitPrefixed<'_>) -> Result<()> {
        let mut order: Vec<usize> = (0..prefixes.len()).collect();
        order.sort_unstable_by_key(|&i| prefixes[i]);
        if let Some(pair) = order
            .windows(2)
            .find(|p| prefixes[p[1]].starts_with(prefixes[p[0]]))
        {
            return Err(Error::InvalidArgument(format!(
                "scan_prefixes: prefix {:?} starts {:?}",
                prefixes[pair[0]], prefixes[pair[1]]
            )));
        }
        let (Some(&first), Some(&last)) = (order.first(), order.last()) else {
            return Ok(());
        };
        let range = KeyRange {
            lower: Some(prefixes[first].to_vec()),
            upper: prefix_upper_bound(prefixes[last]),
        };
        self.state.with(|c| {
            let mut sources = self.layered_sources(c, &range, Direction::Forward)?;
            // One bound buffer and the windows inline: a prefix's scan allocates nothing.
            let mut end = Vec::new();
            for &i in &order {
                let bounded = write_prefix_upper_bound(prefixes[i], &mut end);
                let end = bounded.then_some(end.as_slice());
                let mut windows: SmallVec<[Below<'_, '_>; 4]> = SmallVec::new();
                for source in sources.iter_mut() {
                    windows.push(Below::window(source.as_mut(), prefixes[i], end)?);
                }
                let mut go_on = true;
                ttl::merge_live(
                    self.ttl.as_ref(),
                    &mut windows,
                    Direction::Forward,
                    ScanLimit::ALL,
                    &mut |k, v| {
                        if go_on {
                            go_on = visit(i, k, v)?;
                        }
                        Ok(())
                    },
                )?;
                if !go_on {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The layers a scan of `range` merges, highest first: staged, spilled, then committed.
    fn layered_sources<'a>(
        &'a self,
        committed: &'a dyn CommittedState,
        range: &KeyRange,
        direction: Direction,
    ) -> Result<Vec<Box<dyn SortedSource + 'a>>> {
        // Nothing staged (the usual state between commits) leaves committed state alone,
        // which the merge walks without comparing keys.
        if self.overlay.is_empty() && self.spill.is_none() {
            return committed.sources(range, direction);
        }
        let mut sources: Vec<Box<dyn SortedSource + 'a>> = Vec::new();
        if !self.overlay.is_empty() {
            sources.push(Box::new(IterSource::new(
                self.overlay.range(range, direction),
            )));
        }
        if let Some(spill) = &self.spill {
            sources.push(spill.source(range, direction)?);
        }
        sources.extend(committed.sources(range, direction)?);
        Ok(sources)
    }

    /// Compacts the committed data now (RocksDB); the TTL's compaction filter drops expired
    /// values on the way.
    pub fn compact(&self) -> Result<()> {
        self.state.with(|c| c.compact())
    }

    /// Starts a flush of the memtables to table files (RocksDB's background threads) once the
    /// active one holds `bytes` or more; says whether it did. For a store that is mostly read:
    /// a get searches the memtable's skip list first, far slower than a table's filter and
    /// index once it holds a large catch-up.
    pub fn flush_memtables_past(&self, bytes: usize) -> Result<bool> {
        self.state.with(|c| {
            if c.active_memtable_bytes() < bytes {
                return Ok(false);
            }
            c.flush_memtables(false)?;
            Ok(true)
        })
    }

    pub fn approximate_num_entries(&self) -> Result<u64> {
        let staged = self.overlay.len() as u64
            + self.spill.as_ref().map_or(Ok(0), Spill::approximate_len)?;
        self.state
            .with(|c| Ok(c.approximate_num_entries()? + staged))
    }

    pub fn committed_offset(&self) -> Result<Option<i64>> {
        self.state
            .with(|c| c.committed_offset(&self.options.offset_key))
    }

    /// The committed offset a crash now would reopen at: with changelog durability the last
    /// flushed commit's (memtables skipped), with the WAL the last commit's.
    pub fn durable_offset(&self) -> Result<Option<i64>> {
        self.state
            .with(|c| c.persisted_offset(&self.options.offset_key))
    }

    /// Passes every uncommitted write to `chunk`, in key order, in chunks of about
    /// `chunk_bytes` (the changelog carries them before the commit). Spilled writes are read
    /// back from disk, so a transaction of any size streams through.
    pub fn for_each_staged(
        &mut self,
        chunk_bytes: usize,
        chunk: &mut dyn FnMut(&[Write<'_>]) -> Result<()>,
    ) -> Result<()> {
        self.state.with(|_| Ok(()))?;
        if self.spill.is_some() {
            self.spill_overlay()?;
        }
        if let Some(spill) = &self.spill {
            return spill.for_each_batch(chunk_bytes, |batch| {
                let writes: Vec<Write<'_>> = batch
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_deref()))
                    .collect();
                chunk(&writes)
            });
        }
        // Room for a chunk of the usual write (or all of them): no regrowing while filled.
        let mut writes = Vec::with_capacity(self.overlay.len().min(chunk_bytes / 32 + 1));
        let mut bytes = 0;
        for (key, value) in self.overlay.iter() {
            bytes += key.len() + value.map_or(0, <[u8]>::len);
            writes.push((key, value));
            if bytes >= chunk_bytes {
                chunk(&writes)?;
                writes.clear();
                bytes = 0;
            }
        }
        if writes.is_empty() {
            return Ok(());
        }
        chunk(&writes)
    }

    /// Passes every key with an uncommitted write to `visit`, in key order, with its committed
    /// value (`None`: absent): what undoes the transaction once it is committed. kstate.spark
    /// keeps these with each micro-batch so a replayed batch can be rolled back.
    pub fn previous_values_of_staged(&mut self, visit: &mut VisitWrite<'_>) -> Result<()> {
        self.previous_values_of_staged_knowing(&|_| None, visit)
    }

    /// As [`Self::previous_values_of_staged`], taking a key's committed value from `known` when
    /// it has it (kstate.spark's read-ahead keeps those of the keys its batch wrote) before the
    /// read cache and the committed state.
    pub fn previous_values_of_staged_knowing<'k>(
        &mut self,
        known: &KnownCommitted<'k>,
        visit: &mut VisitWrite<'_>,
    ) -> Result<()> {
        // The staged keys copied into one buffer (a transaction may stage millions).
        let mut key_bytes: Vec<u8> = Vec::new();
        let mut key_ends: Vec<usize> = Vec::with_capacity(self.overlay.len());
        self.for_each_staged(STAGED_KEYS_CHUNK_BYTES, &mut |writes| {
            for (key, _) in writes {
                key_bytes.extend_from_slice(key);
                key_ends.push(key_bytes.len());
            }
            Ok(())
        })?;
        let starts = std::iter::once(0).chain(key_ends.iter().copied());
        let keys: Vec<&[u8]> = starts
            .zip(&key_ends)
            .map(|(s, &e)| &key_bytes[s..e])
            .collect();
        let Self { state, cache, .. } = self;
        state.with(|c| {
            // Committed values known already or read recently (the read cache) are taken as
            // they are; the rest come from the committed state in one multi-get.
            let mut missing = Vec::new();
            let mut found: Vec<Option<Option<Cow<'k, [u8]>>>> = vec![None; keys.len()];
            for (i, key) in keys.iter().enumerate() {
                if let Some(value) = known(key) {
                    found[i] = Some(value.map(Cow::Borrowed));
                    continue;
                }
                match cache.as_ref().and_then(|c| c.get(key)) {
                    Some(v) => found[i] = Some(v.map(Cow::Owned)),
                    None => missing.push(i),
                }
            }
            // Keys after the largest committed one are absent: a TTL index's or a timer store's
            // new entries (their keys start with a future time) need no read.
            if missing.len() >= LARGEST_KEY_PROBE_MIN_KEYS {
                let largest = largest_key(c)?;
                let beyond = missing.partition_point(|&i| largest.as_deref() >= Some(keys[i]));
                for &i in &missing[beyond..] {
                    found[i] = Some(None);
                }
                missing.truncate(beyond);
            }
            let lookup: Vec<&[u8]> = missing.iter().map(|&i| keys[i]).collect();
            c.read_many(&lookup, &mut |j, v| {
                found[missing[j]] = Some(v.map(|v| Cow::Owned(v.to_vec())))
            })?;
            keys.iter()
                .zip(&found)
                .try_for_each(|(key, value)| visit(key, value.as_ref().and_then(|v| v.as_deref())))
        })
    }

    /// Writes restored changelog records straight into the committed state together with
    /// their last `offset`, bypassing the transaction as Kafka's restore does. Each call is
    /// atomic, so an interrupted restore resumes after the last call that returned.
    pub fn restore(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: i64,
    ) -> Result<()> {
        self.restore_writes(writes, offset)?;
        self.relieve_memtables()
    }

    fn restore_writes(
        &mut self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: i64,
    ) -> Result<()> {
        if !self.overlay.is_empty() || self.spill.is_some() {
            return Err(Error::InvalidState(
                "a store with uncommitted writes cannot restore; recover first".into(),
            ));
        }
        let writes_lock = Arc::clone(&self.state.writes);
        let _writes = SharedState::hold_writes(&writes_lock)?;
        if let Some(cache) = &self.cache {
            cache.clear();
        }
        let mut offset_write = OffsetWrite {
            key: &self.options.offset_key,
            offset: Some(offset),
            stream_time: None,
            segmented_stream_time: None,
        };
        let Some(ttl) = &self.ttl else {
            return self.state.with(|c| c.apply(writes, Some(offset_write)));
        };
        // Restored records advance stream time as puts do, and it is recorded with the offset:
        // the writes are read before they are applied.
        let writes: Vec<Write<'_>> = writes
            .inspect(|(_, value)| value.iter().for_each(|v| ttl.observe(v)))
            .collect();
        offset_write.stream_time = ttl.stream_time();
        self.state
            .with(|c| c.apply(&mut writes.into_iter(), Some(offset_write)))
    }

    /// Applies every uncommitted write and `offset` atomically. On error nothing is lost: the
    /// staged writes stay staged and the committed state is the previous one.
    pub fn commit(
        &mut self,
        offset: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        self.commit_writes(offset, None, progress)?;
        self.relieve_memtables()
    }

    /// `commit` of a segment of a segmented store that commits this segment alone: the staged
    /// writes, `offset` and the store's `stream_time` in one atomic write (no commit intent).
    /// Not for spilled writes, which a commit applies in several writes.
    pub fn commit_segment(&mut self, offset: Option<i64>, stream_time: i64) -> Result<()> {
        if self.spill.is_some() || !self.options.transactional {
            return Err(Error::InvalidState(
                "only unspilled transactional writes commit in one write".into(),
            ));
        }
        self.commit_writes(offset, Some(stream_time), &mut |_| {})?;
        self.relieve_memtables()
    }

    /// The segmented store's stream time `commit_segment` recorded last, if any.
    pub fn segmented_stream_time(&self) -> Result<Option<i64>> {
        self.state
            .with(|c| c.committed_offset(offsets::SEGMENTED_STREAM_TIME_KEY))
    }

    /// Whether any write is staged (in memory or spilled).
    pub fn has_staged(&self) -> bool {
        !self.overlay.is_empty() || self.spill.is_some()
    }

    /// Past the process's memtable share, flushes the largest memtables of any store.
    fn relieve_memtables(&self) -> Result<()> {
        match &self.account {
            Some(account) => account.relieve_memtables(),
            None => Ok(()),
        }
    }

    fn commit_writes(
        &mut self,
        offset: Option<i64>,
        segmented_stream_time: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        let offset_key = self.options.offset_key.clone();
        let offset_write = OffsetWrite {
            key: &offset_key,
            offset,
            stream_time: self.ttl_stream_time(),
            segmented_stream_time,
        };
        let writes_lock = Arc::clone(&self.state.writes);
        let _writes = SharedState::hold_writes(&writes_lock)?;
        if !self.options.transactional {
            return self
                .state
                .with(|c| c.apply(&mut std::iter::empty(), Some(offset_write)));
        }
        if self.spill.is_none() {
            self.write_staged(Some(offset_write))?;
            if let Some(cache) = &self.cache {
                cache.refresh(self.overlay.writes());
            }
            self.discard_staged();
            return Ok(());
        }
        self.spill_overlay()?;
        let spill = self
            .spill
            .as_ref()
            .ok_or_else(|| Error::InvalidState("spill vanished".into()))?;
        let changelog_durability = self.options.durability == Durability::Changelog;
        if changelog_durability {
            // Once marked, the spill is redone at open over whatever is durable, and its table
            // file is durable at once: the commits before it must be durable first.
            self.state.with(|c| c.flush())?;
        }
        spill.mark_commit(offset)?;
        // A spilled commit may overwrite any cached key; dropping the cache is cheaper than
        // finding them.
        if let Some(cache) = &self.cache {
            cache.clear();
        }
        self.state.with(|c| {
            copy_spill(
                spill,
                c,
                &offset_key,
                offset,
                changelog_durability,
                progress,
            )
            .map(|_| ())
        })?;
        if let Some(spill) = self.spill.take() {
            spill.destroy()?;
        }
        Ok(())
    }

    /// Moves the writes staged in memory to the spill on disk: for a caller that bounds the
    /// uncommitted bytes of several stores together (segmented stores). No-op in memory.
    pub fn spill_staged(&mut self) -> Result<()> {
        self.spill_overlay()
    }

    /// Hands every uncommitted write to `sink` as serialized batches of the committed state's
    /// writes (about `batch_bytes` each when spilled), without applying them. With
    /// `apply_prepared` and `finish_prepared_commit` this splits `commit` for a caller that makes
    /// the commits of several RocksDB stores atomic by keeping the batches durably first
    /// (segmented stores' commit intent). Persistent transactional stores only: in-memory state
    /// has no batch form.
    pub fn prepare_commit(
        &mut self,
        batch_bytes: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        if self.spill.is_some() {
            self.spill_overlay()?;
        }
        let Self {
            state,
            overlay,
            direct_batch,
            spill,
            ..
        } = self;
        state.with(|c| match spill.as_ref() {
            Some(spill) => spill.for_each_batch(batch_bytes, |writes| {
                let mut spilled = WriteBatch::default();
                for (key, value) in writes {
                    c.stage(&mut spilled, key, value.as_deref())?;
                }
                sink(spilled.data())
            }),
            // The overlay's own batch, as `apply_staged` will hand it to RocksDB.
            None if *direct_batch => sink(overlay.write_batch()?),
            None => sink(staged_batch(c, overlay)?.data()),
        })
    }

    /// Applies the staged writes as `prepare_commit` handed them over, when they did not spill;
    /// returns whether there were any. With `finish_prepared_commit` after, as `apply_prepared`.
    pub fn apply_staged(&mut self) -> Result<bool> {
        if self.spill.is_some() {
            return Err(Error::InvalidState(
                "spilled writes are applied from their prepared batches".into(),
            ));
        }
        if self.overlay.is_empty() {
            return Ok(false);
        }
        self.write_staged(None)?;
        Ok(true)
    }

    /// Writes the overlay (not spilled) into the committed state, with `offset` if given.
    fn write_staged(&mut self, offset: Option<OffsetWrite<'_>>) -> Result<()> {
        let Self {
            state,
            overlay,
            direct_batch,
            ..
        } = self;
        state.with(|c| {
            if *direct_batch {
                // The overlay's own batch, the offset's records appended before RocksDB copies it.
                let tail = offset.map(|o| c.offset_batch(o)).transpose()?;
                let tail = tail.unwrap_or_default();
                let batch = overlay.with_tail(tail.data(), WriteBatch::from_data)?;
                return c.commit_staged(batch, &mut std::iter::empty(), None);
            }
            let staged = staged_batch(c, overlay)?;
            c.commit_staged(staged, &mut overlay.writes(), offset)
        })
    }

    /// Applies one batch of `prepare_commit` (possibly read back after a crash). Applying a
    /// batch again is harmless: it holds final values and deletes.
    pub fn apply_prepared(&self, batch: WriteBatch) -> Result<()> {
        self.state
            .with(|c| c.commit_staged(batch, &mut std::iter::empty(), None))
    }

    /// Records `offset` after the prepared batches are applied and forgets the staged writes.
    pub fn finish_prepared_commit(&mut self, offset: Option<i64>) -> Result<()> {
        let offset_write = OffsetWrite {
            key: &self.options.offset_key,
            offset,
            stream_time: self.ttl_stream_time(),
            segmented_stream_time: None,
        };
        self.state
            .with(|c| c.apply(&mut std::iter::empty(), Some(offset_write)))?;
        match (self.spill.take(), &self.cache) {
            (Some(spill), cache) => {
                spill.destroy()?;
                if let Some(cache) = cache {
                    cache.clear();
                }
            }
            (None, Some(cache)) => cache.refresh(self.overlay.writes()),
            (None, None) => {}
        }
        self.discard_staged();
        self.relieve_memtables()
    }

    /// Discards uncommitted writes. Returns whether the committed state is at `offset` or later
    /// (always `true` without an offset); `false` means the store must be restored from its
    /// changelog. A non-transactional store cannot tell what it holds and returns `false`.
    pub fn recover(&mut self, offset: Option<i64>) -> Result<bool> {
        self.state.with(|_| Ok(()))?;
        self.discard_staged();
        if let Some(spill) = self.spill.take() {
            spill.destroy()?;
        }
        if !self.options.transactional {
            return Ok(false);
        }
        Ok(match (offset, self.committed_offset()?) {
            (None, _) => true,
            (Some(wanted), Some(committed)) => committed >= wanted,
            (Some(_), None) => false,
        })
    }

    /// Discards uncommitted writes and closes; the next open sees the last commit.
    pub fn close(&mut self) -> Result<()> {
        self.discard_staged();
        // Gives the budget back the staged bytes and the read cache.
        let budget = self.account.take().map(|account| account.budget().clone());
        if let Some(spill) = self.spill.take() {
            spill.destroy()?;
        }
        if let Some(state) = self.state.take()? {
            state.prepare_close()?;
            if !self.options.transactional {
                state.flush()?;
                state.set_status(STATUS_CLOSED)?;
            } else if self.options.durability == Durability::Changelog {
                // Without a WAL the flush is what makes the commits durable; CLOSED goes with
                // them, so a close whose flush failed reopens as unclean.
                state.set_status(STATUS_CLOSED)?;
                state.flush()?;
            } else {
                // Commits are in the WAL already; flushing the memtables spares the next open
                // replaying it (a partition moving between Spark's Python workers: a 13 MB WAL
                // took ~0.2 s to replay, a flush ~0.02 s). A store that cannot flush (its
                // directory deleted under it) still closes; a later open replays the WAL.
                let _ = state.flush();
            }
            state.close()?;
        }
        // A closed store keeps nothing of the process's budget, so once the last store is
        // closed the budget and its block cache (blocks of closed tables only) can go too. Here,
        // not in the account's drop: RocksDB has closed by now, so the trim finds its memory free.
        self.cache = None;
        self.rocks = None;
        self.options.rocks = None;
        if let Some(budget) = budget {
            MemoryBudget::release_memory_if_idle(budget);
        }
        Ok(())
    }
}

/// What the layers above the committed state know of `key`: staged writes, then spilled writes,
/// then cached committed values. `None`: nothing; `Some(None)`: absent; `Some(Some(v))`: value.
fn with_known<R>(
    overlay: &Overlay,
    spill: &Option<Spill>,
    cache: Option<&Generations>,
    key: &[u8],
    f: impl FnOnce(Option<Option<&[u8]>>) -> R,
) -> Result<R> {
    if let Some(v) = overlay.get(key) {
        return Ok(f(Some(v)));
    }
    if let Some(spill) = spill {
        if let Some(v) = spill.get(key)? {
            return Ok(f(Some(v.as_deref())));
        }
    }
    Ok(f(cache.and_then(|c| c.get(key))))
}

/// `value` unless the TTL says it expired.
fn live<'a>(ttl: &Option<Ttl>, value: Option<&'a [u8]>) -> Option<&'a [u8]> {
    match ttl {
        Some(ttl) => value.filter(|v| !ttl.is_expired(v)),
        None => value,
    }
}

/// The overlay's writes as one batch of `committed`, staged write by write, for state whose
/// batch is not the overlay's own (in-memory state ignores it).
fn staged_batch(committed: &dyn CommittedState, overlay: &Overlay) -> Result<WriteBatch> {
    let mut batch = WriteBatch::default();
    for (key, value) in overlay.writes() {
        committed.stage(&mut batch, key, value)?;
    }
    Ok(batch)
}

/// The rows a visitor-style `scan` passes, copied out.
fn collect_rows(
    limit: usize,
    scan: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<Scanned>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::with_capacity(limit.min(4096));
    scan(&mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Ok(out)
}

/// Runs a visitor-style `read` and hands its one value to `f`.
fn visit_once<R>(
    read: impl FnOnce(&mut dyn FnMut(Option<&[u8]>)) -> Result<()>,
    f: impl FnOnce(Option<&[u8]>) -> R,
) -> Result<R> {
    let mut f = Some(f);
    let mut out = None;
    read(&mut |v| out = f.take().map(|f| f(v)))?;
    out.ok_or_else(|| Error::InvalidState("read produced no value".into()))
}

/// Copies a marked spill into the committed state; the offset goes with the last batch.
/// `flush_after` (changelog durability): the offset is made durable before the caller deletes
/// the spill that could redo the commit. (The commits before it were flushed before the spill
/// was marked: its table file, durable at once, must not land ahead of them.)
fn copy_spill(
    spill: &Spill,
    committed: &dyn CommittedState,
    offset_key: &str,
    offset: Option<i64>,
    flush_after: bool,
    progress: &mut dyn FnMut(CommitProgress),
) -> Result<u64> {
    let copied = copy_spill_writes(spill, committed, offset_key, offset, progress)?;
    if flush_after {
        committed.flush()?;
    }
    Ok(copied)
}

fn copy_spill_writes(
    spill: &Spill,
    committed: &dyn CommittedState,
    offset_key: &str,
    offset: Option<i64>,
    progress: &mut dyn FnMut(CommitProgress),
) -> Result<u64> {
    // One table file ingested: the spill's writes are sorted and final, so they skip the WAL
    // and the memtables (a batch copy writes each one twice more, then flushes it).
    let table = spill.scratch_file(SPILL_INGEST_FILE);
    if table.exists() {
        // Left by a commit that crashed before ingesting it.
        std::fs::remove_file(&table)?;
    }
    let total = spill.approximate_len()?;
    progress(CommitProgress {
        writes_applied: 0,
        writes_total: total,
    });
    let ingested = committed.ingest_sorted(&table, &mut |sink| spill.for_each(sink))?;
    if let Some(applied) = ingested {
        progress(CommitProgress {
            writes_applied: applied,
            writes_total: applied,
        });
        return record_spilled_commit(committed, offset_key, offset).map(|()| applied);
    }
    let mut applied = 0u64;
    spill.for_each_batch(SPILL_COPY_BATCH_BYTES, |batch| {
        let mut writes = batch.iter().map(|(k, v)| (k.as_slice(), v.as_deref()));
        committed.apply(&mut writes, None)?;
        applied += batch.len() as u64;
        progress(CommitProgress {
            writes_applied: applied,
            writes_total: total.max(applied),
        });
        Ok(())
    })?;
    record_spilled_commit(committed, offset_key, offset).map(|()| applied)
}

fn record_spilled_commit(
    committed: &dyn CommittedState,
    offset_key: &str,
    offset: Option<i64>,
) -> Result<()> {
    // The committing writer's stream time died with it; puts after reopening restore it.
    let offset_write = OffsetWrite {
        key: offset_key,
        offset,
        stream_time: None,
        segmented_stream_time: None,
    };
    committed.apply(&mut std::iter::empty(), Some(offset_write))
}

/// The largest key `state` holds (of any of its sources), or `None` if it holds none.
fn largest_key(state: &dyn CommittedState) -> Result<Option<Vec<u8>>> {
    let sources = state.sources(&KeyRange::all(), Direction::Reverse)?;
    Ok(sources
        .iter()
        .filter_map(|s| s.key())
        .max()
        .map(<[u8]>::to_vec))
}

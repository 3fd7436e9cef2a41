//! One memory budget per process (`statestore.memory.max.bytes`), shared by every store it opens:
//! one RocksDB block cache (a HyperClockCache), a `WriteBufferManager` charging memtables to that
//! cache, and kstate's own read caches and staged (uncommitted) writes, counted against the same
//! total.
//!
//! The budget `B` is split so no part can starve another:
//! - staged writes across stores: `B / 4`. Past it, a store that writes spills its own staged
//!   writes once they are at least its even share (`B / 4 / (2 * open stores)`), so the process
//!   never holds more than `1.5 * B / 4` staged (stores below their share add at most half);
//! - kstate read caches across stores: `B / 4`. Past it, caches drop their older generation, the
//!   least recently used first (idle stores' too), until the total is under three quarters of
//!   the share;
//! - RocksDB: the block cache gets what kstate does not use, less an eighth (`7 * B / 8` minus
//!   kstate's bytes, rounded up to `B / 64`, at least `3 * B / 8`); memtables are charged to it
//!   by the write buffer manager (flushes start when they reach `B / 4`), and index and filter
//!   blocks live in it;
//! - the eighth left out is what holding those bytes costs beyond them: the allocator's free
//!   memory between freed cache blocks, table readers and iterators (at 10M keys, 11 MiB free in
//!   malloc's arenas at the peak; benches/README.md, "Stores at scale").
//!
//! Stores register a `StoreAccount` when they open and drop it when they close, so the counts stay
//! right as partitions move. A process budget lives while a store holds it; the next store to
//! open after all closed starts a fresh one.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rocksdb::{Cache, WriteBufferManager};

use crate::error::{Error, Result};
use crate::store::read_cache::Generations;

/// A Spark Python worker's share of an executor: several workers (one per core) share its
/// memory overhead, which Spark sizes at 10% of executor memory (at least 384 MiB).
pub const DEFAULT_MEMORY_MAX_BYTES: usize = 256 << 20;
/// Below this a handful of stores' memtables and index blocks do not fit.
pub const MIN_MEMORY_MAX_BYTES: usize = 32 << 20;
/// Table files (SSTs) the stores of a process keep open, divided among the stores open when
/// one opens (RocksDB's `max_open_files` is per database and fixed when it opens).
pub const PROCESS_TABLE_FILES: usize = 4096;
const STORE_TABLE_FILES: std::ops::RangeInclusive<usize> = 16..=1024;
/// Staged bytes a store's count moves by before the budget hears of it.
const STAGED_REPORT_STEP: usize = 64 << 10;
/// Kafka Streams' default write buffer per column family (RocksDBStore.WRITE_BUFFER_SIZE).
const STORE_WRITE_BUFFER_BYTES: usize = 16 << 20;

/// Memory of the whole process, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    pub limit: usize,
    pub block_cache_capacity: usize,
    /// Everything in the block cache: data, index and filter blocks, memtable reservations.
    pub block_cache_usage: usize,
    /// Block cache entries in use (by iterators, pinned L0 index/filter blocks).
    pub block_cache_pinned: usize,
    pub memtables: usize,
    pub memtable_limit: usize,
    pub staged: usize,
    pub staged_limit: usize,
    pub read_cache: usize,
    pub read_cache_limit: usize,
    pub open_stores: usize,
}

/// Memory and disk of one store (a segment counts as a store), in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreMemory {
    pub memtables: usize,
    /// Table readers outside the block cache (index and filter blocks are in the cache).
    pub table_readers: usize,
    pub sst_bytes: u64,
    pub sst_files: usize,
    pub staged: usize,
    pub read_cache: usize,
}

impl StoreMemory {
    /// Adds `other` (another segment of the same store).
    pub fn add(&mut self, other: &StoreMemory) {
        self.memtables += other.memtables;
        self.table_readers += other.table_readers;
        self.sst_bytes += other.sst_bytes;
        self.sst_files += other.sst_files;
        self.staged += other.staged;
        self.read_cache += other.read_cache;
    }
}

/// One open store's name and memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUsage {
    pub name: String,
    pub path: Option<PathBuf>,
    pub memory: StoreMemory,
}

/// What the budget asks of a store's committed state (RocksDB).
pub trait MemoryProbe: Send + Sync {
    fn probe(&self) -> Result<StoreMemory>;
    /// Bytes in the memtables that take writes (not those already being flushed).
    fn active_memtable_bytes(&self) -> usize;
    /// Flushes the memtables to disk; with `wait`, returns once they are written.
    fn flush(&self, wait: bool) -> Result<()>;
}

pub struct MemoryBudget {
    limit: AtomicUsize,
    /// Whether the limit came from a store's config rather than the default.
    explicit: AtomicBool,
    cache: Cache,
    write_buffers: WriteBufferManager,
    staged: AtomicUsize,
    read_cache: AtomicUsize,
    /// Bytes read-aheads have reserved (`take_read_ahead`) or hold (`hold_read_ahead`): at most
    /// the read cache share together. Only what they hold is part of `read_cache`.
    read_ahead: AtomicUsize,
    /// Counts read cache uses, so the least recently used caches shrink first.
    clock: AtomicU64,
    /// kstate bytes currently taken out of the block cache's capacity; the mutex orders resizes.
    reserved: AtomicUsize,
    resizing: Mutex<()>,
    /// Held by the one thread that flushes other stores' memtables.
    relieving: Mutex<()>,
    open: AtomicUsize,
    accounts: Mutex<Vec<Weak<StoreAccount>>>,
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.limit())
            .finish_non_exhaustive()
    }
}

static PROCESS_BUDGET: Mutex<Weak<MemoryBudget>> = Mutex::new(Weak::new());

/// Gives the pages the allocator holds free back to the kernel (glibc's `malloc_trim`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_freed_memory() {
    // SAFETY: malloc_trim takes no pointers; it only unmaps or discards free pages.
    unsafe { libc::malloc_trim(0) };
}

/// Other allocators (musl, macOS) have no such call.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_memory() {}

/// Moves a byte counter from `previous` to `now` (what one holder of it had, and has now).
fn shift(counter: &AtomicUsize, previous: usize, now: usize) {
    if now >= previous {
        counter.fetch_add(now - previous, Ordering::Relaxed);
    } else {
        counter.fetch_sub(previous - now, Ordering::Relaxed);
    }
}

/// The part of a budget of `limit` the block cache leaves for what its bytes cost beyond
/// themselves (see the module's split).
fn unaccounted_share(limit: usize) -> usize {
    limit / 8
}

/// Checks a configured budget: at least `MIN_MEMORY_MAX_BYTES`.
pub fn check_limit(bytes: usize) -> Result<()> {
    if bytes < MIN_MEMORY_MAX_BYTES {
        return Err(Error::InvalidArgument(format!(
            "statestore.memory.max.bytes must be at least {} ({} MiB), got {bytes}",
            MIN_MEMORY_MAX_BYTES,
            MIN_MEMORY_MAX_BYTES >> 20
        )));
    }
    Ok(())
}

impl MemoryBudget {
    /// A budget of its own (tests, benchmarks); stores normally share `process`.
    pub fn new(limit: usize) -> Result<Arc<Self>> {
        check_limit(limit)?;
        // A clock cache, not an LRU one: a lookup is one probe of a lock-free table, with no list
        // to relink on every hit (at 10M keys the LRU's hash chains and list updates were ~12% of
        // a cold get's cycles). Charge 0 lets it size its table as blocks arrive.
        let cache = Cache::new_hyper_clock_cache(limit - unaccounted_share(limit), 0);
        let write_buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
            limit / 4,
            false,
            cache.clone(),
        );
        Ok(Arc::new(Self {
            limit: AtomicUsize::new(limit),
            explicit: AtomicBool::new(false),
            cache,
            write_buffers,
            staged: AtomicUsize::new(0),
            read_cache: AtomicUsize::new(0),
            read_ahead: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            reserved: AtomicUsize::new(0),
            resizing: Mutex::new(()),
            relieving: Mutex::new(()),
            open: AtomicUsize::new(0),
            accounts: Mutex::new(Vec::new()),
        }))
    }

    /// The process's budget. `requested` is a store's `statestore.memory.max.bytes` (`None`:
    /// not configured). Stores open in the process share one budget: a configured value
    /// replaces the default, and two different configured values are an error.
    pub fn process(requested: Option<usize>) -> Result<Arc<Self>> {
        if let Some(bytes) = requested {
            check_limit(bytes)?;
        }
        let mut slot = PROCESS_BUDGET
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(budget) = slot.upgrade() {
            if let Some(bytes) = requested {
                budget.adopt(bytes)?;
            }
            return Ok(budget);
        }
        let budget = Self::new(requested.unwrap_or(DEFAULT_MEMORY_MAX_BYTES))?;
        budget
            .explicit
            .store(requested.is_some(), Ordering::Relaxed);
        *slot = Arc::downgrade(&budget);
        Ok(budget)
    }

    /// The process's budget if a store holds one.
    pub fn current() -> Option<Arc<Self>> {
        PROCESS_BUDGET
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()
    }

    fn adopt(&self, bytes: usize) -> Result<()> {
        let limit = self.limit();
        if bytes == limit {
            self.explicit.store(true, Ordering::Relaxed);
            return Ok(());
        }
        if self.explicit.load(Ordering::Relaxed) {
            return Err(Error::InvalidArgument(format!(
                "statestore.memory.max.bytes is {bytes}, but the stores open in this process share a budget of \
                 {limit} bytes (one budget per process: give every store the same value)"
            )));
        }
        self.explicit.store(true, Ordering::Relaxed);
        self.limit.store(bytes, Ordering::Relaxed);
        self.write_buffers.set_buffer_size(bytes / 4);
        self.reserved.store(usize::MAX, Ordering::Relaxed);
        self.rebalance();
        Ok(())
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn staged_limit(&self) -> usize {
        self.limit() / 4
    }

    pub fn read_cache_limit(&self) -> usize {
        self.limit() / 4
    }

    pub(crate) fn block_cache(&self) -> &Cache {
        &self.cache
    }

    pub(crate) fn write_buffer_manager(&self) -> &WriteBufferManager {
        &self.write_buffers
    }

    /// The write buffer of one column family: Kafka's 16 MiB, less under a small budget so a
    /// single memtable never takes the whole memtable share.
    pub(crate) fn store_write_buffer_bytes(&self) -> usize {
        STORE_WRITE_BUFFER_BYTES.min(self.limit() / 8)
    }

    /// `max_open_files` of a store opening now: the process's table files shared with the
    /// stores already open (RocksDB keeps 10 of them for other files).
    pub(crate) fn table_files_per_store(&self) -> i32 {
        let share = PROCESS_TABLE_FILES / (self.open_stores() + 1);
        let files = share.clamp(*STORE_TABLE_FILES.start(), *STORE_TABLE_FILES.end());
        i32::try_from(files).unwrap_or(i32::MAX)
    }

    pub fn open_stores(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Called with a closing store's last hold on `budget`: once no store of the process is
    /// open, drops it (with it the block cache, once nothing else holds it) and gives what the
    /// allocator then holds free back to the system. glibc keeps the memory RocksDB frees in its
    /// arenas: a process that had closed a window store of 50M rows held 368 MiB; trimmed, 63
    /// MiB, in 34 ms (benches/README.md, issue 21's twelfth pass). A Spark Python worker lives
    /// on between tasks.
    pub(crate) fn release_memory_if_idle(budget: Arc<Self>) {
        let idle = budget.open_stores() == 0;
        drop(budget);
        if idle {
            release_freed_memory();
        }
    }

    fn live_accounts(&self) -> Vec<Arc<StoreAccount>> {
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        accounts.retain(|a| a.strong_count() > 0);
        accounts.iter().filter_map(Weak::upgrade).collect()
    }

    /// Registers an opened store; dropping the account releases what it holds.
    pub fn open_account(
        self: &Arc<Self>,
        name: &str,
        path: Option<PathBuf>,
        probe: Arc<dyn MemoryProbe>,
        read_cache: Option<Arc<Mutex<Generations>>>,
    ) -> Arc<StoreAccount> {
        let account = Arc::new(StoreAccount {
            budget: self.clone(),
            name: name.to_owned(),
            path,
            staged: AtomicUsize::new(0),
            probe,
            read_cache,
        });
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        accounts.retain(|a| a.strong_count() > 0);
        accounts.push(Arc::downgrade(&account));
        self.open.fetch_add(1, Ordering::Relaxed);
        account
    }

    /// Whether a store holding `own` staged bytes must spill them: the process is past its
    /// staged share and this store holds at least its even share of half of it.
    pub fn should_spill(&self, own: usize) -> bool {
        let limit = self.staged_limit();
        if own == 0 || self.staged.load(Ordering::Relaxed) <= limit {
            return false;
        }
        let stores = self.open_stores().max(1);
        own >= limit / (2 * stores)
    }

    pub(crate) fn charge_staged(&self, previous: usize, now: usize) {
        shift(&self.staged, previous, now);
        self.rebalance();
    }

    pub(crate) fn charge_read_cache(&self, previous: usize, now: usize) {
        shift(&self.read_cache, previous, now);
    }

    /// Reserves up to `wanted` bytes of the read cache share for a read-ahead (state read for a
    /// whole batch before it runs and held until it ends: kstate.spark's list and map state):
    /// what it may read. Read-aheads together never reserve more than the share, however many
    /// run at once. A reservation is not charged as read cache: [`Self::hold_read_ahead`]
    /// charges what the read-ahead then holds, so reading ahead a batch's few entries drops no
    /// store's cached values to make room for bytes it never read.
    pub fn take_read_ahead(&self, wanted: usize) -> usize {
        let share = self.read_cache_limit();
        let mut taken = 0;
        let _ = self
            .read_ahead
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                taken = wanted.min(share.saturating_sub(held));
                Some(held + taken)
            });
        taken
    }

    /// Turns a read-ahead's reservation of `reserved` bytes into the `held` bytes it read (0:
    /// it read nothing or failed), charged as read cache from now on: past the share, the
    /// stores' read caches shrink to make room. [`Self::resize_read_ahead`] follows what is held.
    pub fn hold_read_ahead(&self, reserved: usize, held: usize) {
        shift(&self.read_ahead, reserved, held);
        if held > 0 {
            self.charge_read_cache(0, held);
            self.after_read_cache_insert();
        }
    }

    /// Changes what a read-ahead holds from `previous` bytes to `now` (0: it is dropped).
    pub fn resize_read_ahead(&self, previous: usize, now: usize) {
        shift(&self.read_ahead, previous, now);
        self.charge_read_cache(previous, now);
        if now < previous {
            self.rebalance();
        }
    }

    /// Bytes read-aheads reserve or hold now (what they hold is part of
    /// [`ProcessMemory::read_cache`]).
    pub fn read_ahead_bytes(&self) -> usize {
        self.read_ahead.load(Ordering::Relaxed)
    }

    pub(crate) fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// After a read cache grew: past the read cache share, caches drop their older generation,
    /// least recently used first (a second round empties them), until the total is under three
    /// quarters of the share.
    pub(crate) fn after_read_cache_insert(&self) {
        let limit = self.read_cache_limit();
        if self.read_cache.load(Ordering::Relaxed) > limit {
            let mut caches: Vec<(u64, Arc<Mutex<Generations>>)> = self
                .live_accounts()
                .iter()
                .filter_map(|account| account.read_cache.clone())
                .filter_map(|cache| {
                    let last_used = cache.try_lock().ok()?.last_used();
                    Some((last_used, cache))
                })
                .collect();
            caches.sort_unstable_by_key(|(last_used, _)| *last_used);
            'rounds: for _ in 0..2 {
                for (_, cache) in &caches {
                    if self.read_cache.load(Ordering::Relaxed) <= limit / 4 * 3 {
                        break 'rounds;
                    }
                    // A cache busy in another thread is skipped; its owner trims it next.
                    if let Ok(mut generations) = cache.try_lock() {
                        generations.rotate(self);
                    }
                }
            }
        }
        self.rebalance();
    }

    /// After a store wrote to RocksDB: past the memtable share, flushes the largest active
    /// memtables of any open store until half the share is left. RocksDB's write buffer manager
    /// flushes only the database being written, so many stores written once per commit would
    /// each keep a memtable and together pass any bound.
    ///
    /// The flushes run in the background while the writer stages its next batch (waiting for
    /// them stalled a commit for 0.2-0.7 s every few commits of a large store: benches/README.md),
    /// and memtables already being flushed are left to finish: while the active ones hold under
    /// half the share, a new flush would only cut a small table file behind the large one.
    /// Memtables are charged to the block cache, so until a flush ends they take their room from
    /// cached blocks, not from outside the budget. Past one and a half shares the flushes have
    /// fallen behind the writers: then the writer waits for them, slowing to what the disk takes.
    pub fn relieve_memtables(&self) -> Result<()> {
        let limit = self.write_buffers.get_buffer_size();
        let mut usage = self.write_buffers.get_usage();
        if usage <= limit {
            return Ok(());
        }
        let behind = usage > limit + limit / 2;
        let Ok(_relieving) = self.relieving.try_lock() else {
            return Ok(()); // another thread is at it
        };
        let mut candidates: Vec<(usize, Arc<StoreAccount>)> = self
            .live_accounts()
            .into_iter()
            .map(|account| (account.probe.active_memtable_bytes(), account))
            .filter(|(bytes, _)| *bytes > 0)
            .collect();
        candidates.sort_unstable_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        let mut active: usize = candidates.iter().map(|(bytes, _)| bytes).sum();
        for (bytes, account) in candidates {
            if usage <= limit / 2 || (!behind && active <= limit / 2) {
                break;
            }
            account.probe.flush(behind)?;
            usage = usage.saturating_sub(bytes);
            active -= bytes;
        }
        Ok(())
    }

    /// Gives the block cache what kstate does not use, in steps of `limit / 64`.
    fn rebalance(&self) {
        let limit = self.limit();
        let granule = (limit / 64).max(1);
        let used = self.staged.load(Ordering::Relaxed) + self.read_cache.load(Ordering::Relaxed);
        let wanted = used
            .div_ceil(granule)
            .saturating_mul(granule)
            .min(limit / 2);
        if self.reserved.load(Ordering::Relaxed) == wanted {
            return;
        }
        let _resizing = self.resizing.lock().unwrap_or_else(PoisonError::into_inner);
        if self.reserved.swap(wanted, Ordering::Relaxed) != wanted {
            self.cache
                .clone()
                .set_capacity(limit - unaccounted_share(limit) - wanted);
        }
    }

    /// The block cache's capacity now (without asking the cache, which walks its table).
    pub(crate) fn block_cache_capacity(&self) -> usize {
        let limit = self.limit();
        let reserved = self.reserved.load(Ordering::Relaxed);
        (limit - unaccounted_share(limit)).saturating_sub(reserved)
    }

    pub fn usage(&self) -> ProcessMemory {
        ProcessMemory {
            limit: self.limit(),
            block_cache_capacity: self.block_cache_capacity(),
            block_cache_usage: self.cache.get_usage(),
            block_cache_pinned: self.cache.get_pinned_usage(),
            memtables: self.write_buffers.get_usage(),
            memtable_limit: self.write_buffers.get_buffer_size(),
            staged: self.staged.load(Ordering::Relaxed),
            staged_limit: self.staged_limit(),
            read_cache: self.read_cache.load(Ordering::Relaxed),
            read_cache_limit: self.read_cache_limit(),
            open_stores: self.open_stores(),
        }
    }

    /// Every open store's memory (closed stores are gone from the list).
    pub fn stores(&self) -> Result<Vec<StoreUsage>> {
        self.live_accounts()
            .iter()
            .map(|account| {
                Ok(StoreUsage {
                    name: account.name.clone(),
                    path: account.path.clone(),
                    memory: account.memory()?,
                })
            })
            .collect()
    }
}

/// An open store's share of the budget: its staged bytes and read cache, and a probe of its
/// RocksDB. Dropping it (the store closes) gives back what it held.
pub struct StoreAccount {
    budget: Arc<MemoryBudget>,
    name: String,
    path: Option<PathBuf>,
    staged: AtomicUsize,
    probe: Arc<dyn MemoryProbe>,
    read_cache: Option<Arc<Mutex<Generations>>>,
}

impl StoreAccount {
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Records that the store now holds `bytes` staged in memory. Changes under
    /// `STAGED_REPORT_STEP` are not passed on (a put costs no shared-counter update), except
    /// down to 0.
    pub fn set_staged(&self, bytes: usize) {
        let previous = self.staged.load(Ordering::Relaxed);
        if previous == bytes || (bytes != 0 && bytes.abs_diff(previous) < STAGED_REPORT_STEP) {
            return;
        }
        self.staged.store(bytes, Ordering::Relaxed);
        self.budget.charge_staged(previous, bytes);
    }

    /// See `MemoryBudget::relieve_memtables`.
    pub fn relieve_memtables(&self) -> Result<()> {
        self.budget.relieve_memtables()
    }

    pub fn memory(&self) -> Result<StoreMemory> {
        let mut memory = self.probe.probe()?;
        memory.staged = self.staged.load(Ordering::Relaxed);
        memory.read_cache = self.read_cache.as_ref().map_or(0, |cache| {
            cache.lock().unwrap_or_else(PoisonError::into_inner).bytes()
        });
        Ok(memory)
    }
}

impl Drop for StoreAccount {
    fn drop(&mut self) {
        self.set_staged(0);
        if let Some(cache) = &self.read_cache {
            cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear(&self.budget);
        }
        self.budget.open.fetch_sub(1, Ordering::Relaxed);
        self.budget.rebalance();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoProbe;
    impl MemoryProbe for NoProbe {
        fn probe(&self) -> Result<StoreMemory> {
            Ok(StoreMemory::default())
        }
        fn active_memtable_bytes(&self) -> usize {
            0
        }
        fn flush(&self, _wait: bool) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_budget_below_the_minimum_is_refused() {
        let error = MemoryBudget::new(MIN_MEMORY_MAX_BYTES - 1).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(m) if m.contains("at least")));
    }

    #[test]
    fn staged_bytes_are_counted_and_given_back_when_a_store_closes() {
        let budget = MemoryBudget::new(64 << 20).unwrap();
        let a = budget.open_account("a", None, Arc::new(NoProbe), None);
        let b = budget.open_account("b", None, Arc::new(NoProbe), None);
        a.set_staged(10 << 20);
        b.set_staged(7 << 20);
        assert_eq!(budget.usage().staged, 17 << 20);
        assert_eq!(budget.usage().open_stores, 2);
        // Past the staged share (16 MiB): a store with at least 16 / (2 * 2) MiB spills.
        assert!(budget.should_spill(4 << 20));
        assert!(!budget.should_spill(3 << 20));
        assert_eq!(
            budget.usage().block_cache_capacity,
            (56 << 20) - (17 << 20),
            "kstate's bytes, rounded up to 1 MiB, leave the block cache (and an eighth of it)"
        );
        drop(a);
        assert_eq!(budget.usage().staged, 7 << 20);
        assert_eq!(budget.usage().open_stores, 1);
        assert!(!budget.should_spill(7 << 20));
        drop(b);
        assert_eq!(budget.usage().staged, 0);
        assert_eq!(budget.usage().block_cache_capacity, 56 << 20);
    }

    #[test]
    fn read_caches_of_every_store_shrink_past_the_share() {
        let budget = MemoryBudget::new(32 << 20).unwrap();
        let caches: Vec<_> = (0..4)
            .map(|_| Arc::new(Mutex::new(Generations::new(8 << 20))))
            .collect();
        let _accounts: Vec<_> = caches
            .iter()
            .map(|c| budget.open_account("s", None, Arc::new(NoProbe), Some(c.clone())))
            .collect();
        for (i, cache) in caches.iter().enumerate() {
            for k in 0..2_000u32 {
                let key = [i as u8, (k >> 8) as u8, k as u8];
                cache
                    .lock()
                    .unwrap()
                    .insert(&key, Some(&[0; 1000]), &budget);
                budget.after_read_cache_insert();
            }
        }
        let usage = budget.usage();
        assert!(
            usage.read_cache <= usage.read_cache_limit + 1100,
            "{usage:?}"
        );
        let total: usize = caches.iter().map(|c| c.lock().unwrap().bytes()).sum();
        assert_eq!(total, usage.read_cache);
    }
}

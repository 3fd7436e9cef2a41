//! The RocksDB options of every store a process opens: tuned for state as Kafka Streams tunes
//! its stores, bound to the process's memory budget, then the user's own options
//! (`rocksdb.config.setter`, RocksDB's option string syntax) on top.
//!
//! Choices (Kafka Streams' `RocksDBStore` where it has one; `benches/README.md` measures them):
//! - block cache and memtables: the budget's one block cache (a HyperClockCache) and write buffer
//!   manager; index and filter blocks are kept in that cache (high priority) so they count too,
//!   pinned there while their table is open (about 2 bytes per key: 50M keys pin ~100 MiB), which
//!   made point reads ~10% fewer instructions than looking them up per read (rocksdict's default,
//!   index and filter in the table reader, measured level in CPU per get at 10M keys:
//!   `benches/README.md`);
//! - a full Bloom filter of 10 bits per key (Kafka's `BloomFilter()`): a point read of an absent
//!   key (the first read of every new key) skips the table's data blocks. Unlike Kafka, filters
//!   stay on the last level too (no `optimize_filters_for_hits`), since misses are common. Not in
//!   the segments of stores that read only ranges (session stores, window stores with
//!   duplicates: `RocksConfig::for_segments`);
//! - 4 KiB blocks (Kafka's, RocksDB's default) and 16 MiB write buffers, at most 3 (Kafka's);
//! - no compression (Kafka's default), SST format 5 (readable by Kafka Streams 3.x's RocksDB);
//! - level compaction with dynamic level sizes (RocksDB's default): Kafka picks universal
//!   compaction, which can need twice the store's size on disk while it compacts;
//! - a process-wide bound on open table files (`memory_budget::PROCESS_TABLE_FILES`, shared by
//!   the stores open when one opens: 16 to 1,024 per store), and RocksDB's info log at
//!   error level (Kafka's log level) to stderr instead of a LOG file per store, so many stores
//!   do not exhaust descriptors; memtable arena blocks of 64 KiB, so a store written a little
//!   holds a little;
//! - two memtable flushes at a time (RocksDB: one), so a writer does not stop for one flush's
//!   fsyncs;
//! - two WAL files recycled (RocksDB: none), so the WAL is written into files the file system
//!   has already allocated; not by the segments of window and session stores;
//! - a table file's blocks erased from the block cache once compaction deletes the file
//!   (RocksDB: left until evicted), so the cache does not fill with dead index and filter blocks;
//! - table files written back to disk as they grow, every MiB (RocksDB: all at the fsync that
//!   ends them), so a flush's fsync does not hold up the commits' own.

use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, BlockBasedTablePinningTier, DBCompressionType, InfoLogger, LogLevel, Options,
};

use crate::error::{Error, Result};
use crate::store::memory_budget::MemoryBudget;

const BLOCK_BYTES: usize = 4 << 10;
const BLOOM_BITS_PER_KEY: f64 = 10.0;
const MAX_WRITE_BUFFERS: i32 = 3;
const ARENA_BLOCK_BYTES: usize = 64 << 10;
/// WAL bytes a store keeps, in write buffers.
const WAL_WRITE_BUFFERS: usize = 4;
/// SST format 5, readable by the RocksDB of Kafka Streams 3.x (rocksdbjni 7.x) and of other
/// bindings; the bundled RocksDB's default (7) is not.
const FORMAT_VERSION: i32 = 5;
/// Options RocksDB takes only as a string (rust-rocksdb has no setter for them).
const NO_PREALLOCATION: &str = "allow_fallocate=false";
/// Two memtable flushes at a time, compactions still one at a time (RocksDB's default two
/// background jobs give one of each). A flush waits on fsyncs (its table file, the MANIFEST, the
/// directory, and with two column families every closed WAL: `SyncClosedWals`); with a single
/// flush thread a writer faster than those waits stops (`DelayWrite`) until the flush is done.
/// Two overlap them: 100k-key commits written back to back at 10M keys 2.2-2.3M -> 3.1M keys/s,
/// a commit 37 -> 25 ms (benches/README.md, issue 21's ninth pass). The flush thread pool is
/// the process's, so this is at most two flush threads for every store of the process.
const TWO_FLUSHES: &str = "max_background_flushes=2";
/// Two obsolete WAL files kept to be written over (RocksDB: none). With more than one column
/// family (every store: the offsets family) RocksDB syncs each closed WAL before a flush, and
/// writing the next WAL into a new file, whose blocks the file system must allocate while the
/// sync runs, cost a 100k-key commit at 10M keys a third more CPU: 24.3-25.2 -> 16.8 ms
/// (benches/README.md, issue 21's fourteenth pass). A clean close removes them (`wal_files`).
/// Stores without a WAL (`Durability::Changelog`) do not recycle, and RocksDB turns it off itself
/// under a `wal_recovery_mode` that cannot tell a recycled file's old records from damage.
const RECYCLED_WALS: &str = "recycle_log_file_num=2";
/// A table file's blocks leave the block cache when compaction makes the file obsolete (RocksDB:
/// they stay until the cache evicts them). Its pinned index and filter blocks are erased at once,
/// its data blocks until the first one found missing. Without it, at 50M windows the cache filled
/// with the index and filter blocks of deleted tables, held in RocksDB's compaction threads' malloc
/// arenas beside the free pages of the put phase: peak RSS 428 MiB against 301-316 MiB with it
/// (benches/README.md, issue 21's sixteenth pass).
const UNCACHE_OBSOLETE_TABLES: &str = "uncache_aggressiveness=1";
/// Bytes of a table file (or other file RocksDB writes in the background) after which RocksDB
/// asks the kernel to start writing them back (`sync_file_range`; RocksDB: 0, only the fsync
/// that ends the file; RocksDB's tuning guide: 1 MiB on Linux). Without it a flush or compaction
/// left tens of MiB dirty for its closing fsync, and a commit's own fdatasync of its changelog,
/// queued behind them on the file system's journal, took 25-60 ms: over 300 commits of 10k keys
/// at 1M keys the p99 47-50 -> 31 ms, put throughput -2.5% (benches/README.md, "Snapshots
/// beside the changelog", eighth pass).
const BYTES_PER_SYNC: u64 = 1 << 20;
/// One insert position kept per memtable across writes (RocksDB: none). A commit writes its keys
/// in about key order, mostly keys the memtable already holds an older version of; RocksDB's own
/// position from the last insert is dropped whenever the next key is not right beside it (an
/// older version lies between) and each insert searches the whole skip list, about 22 key
/// comparisons, where a kept position is moved from, a few. A fixed prefix of no bytes is one
/// hint for every key (a longer prefix would keep one per distinct prefix, ~250 bytes each).
const ONE_INSERT_HINT: &str = "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.0";
/// Options naming RocksDB's background jobs: a user's `max_background_jobs` is ignored once
/// `max_background_flushes` is set (RocksDB's rule for the deprecated per-kind limits), so a
/// user setting any of them replaces `TWO_FLUSHES`.
const BACKGROUND_JOB_OPTIONS: &str = "max_background_";

/// How a process's stores configure RocksDB: its memory budget and the user's options.
#[derive(Debug)]
pub struct RocksConfig {
    budget: Arc<MemoryBudget>,
    /// `name=value;...` as RocksDB's `GetOptionsFromString` reads it.
    user: Option<String>,
    /// Whether stores recycle WAL files (`RECYCLED_WALS`).
    wal_recycling: bool,
    /// Whether tables carry Bloom filters (`BLOOM_BITS_PER_KEY`).
    bloom_filters: bool,
}

impl RocksConfig {
    /// Checks `user` now (an unknown option or a bad value is `InvalidArgument`), so a store
    /// fails before it writes anything.
    pub fn new(budget: Arc<MemoryBudget>, user: Option<&str>) -> Result<Arc<Self>> {
        let config = Self {
            budget,
            user: user
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            wal_recycling: true,
            bloom_filters: true,
        };
        config.store_options()?;
        Ok(Arc::new(config))
    }

    /// The process's budget at its current (or default) size, no user options.
    pub fn process_default() -> Result<Arc<Self>> {
        Self::new(MemoryBudget::process(None)?, None)
    }

    /// `config`, or the process's default where a store was given none.
    pub fn given_or_default(config: Option<&Arc<Self>>) -> Result<Arc<Self>> {
        match config {
            Some(config) => Ok(config.clone()),
            None => Self::process_default(),
        }
    }

    /// The same budget and user options, for the segments of a window or session store.
    /// - They do not recycle WAL files: session puts at 50M rows ran 0.59-0.69M a second with
    ///   recycling against 0.87-0.97M without (benches/README.md, issue 21's fourteenth pass).
    /// - Their tables carry Bloom filters only with `bloom_filters`: a filter serves point reads
    ///   alone, and its 1.25 bytes a row stay pinned in the budget's cache (issue 21's fifteenth
    ///   pass). The user's options may set one back.
    pub fn for_segments(&self, bloom_filters: bool) -> Arc<Self> {
        Arc::new(Self {
            budget: self.budget.clone(),
            user: self.user.clone(),
            wal_recycling: false,
            bloom_filters,
        })
    }

    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Options of a store's database and of each of its column families.
    pub fn store_options(&self) -> Result<Options> {
        let mut options = self.shared_options();
        let mut table = self.table_options();
        if self.bloom_filters {
            table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
        }
        options.set_block_based_table_factory(&table);
        // RocksDB preallocates each live WAL file to 1.1 write buffers (~18 MB of disk for a
        // store holding a few KB); with many open stores per executor (every parked partition)
        // that is gigabytes of disk. The WAL is not synced per write, so preallocating buys
        // nothing measurable (benches/README.md, issue 21). The user's options may set it back.
        let mut defaults =
            format!("{NO_PREALLOCATION};{UNCACHE_OBSOLETE_TABLES};{ONE_INSERT_HINT}");
        if self.wal_recycling {
            defaults = format!("{defaults};{RECYCLED_WALS}");
        }
        if !self.user_names(BACKGROUND_JOB_OPTIONS) {
            defaults = format!("{defaults};{TWO_FLUSHES}");
        }
        let mut options = options
            .get_options_from_string(&defaults)
            .map_err(|e| Error::InvalidState(format!("RocksDB options: {}", e.into_string())))?;
        match &self.user {
            None => Ok(options),
            Some(user) => options.get_options_from_string(user).map_err(|e| {
                Error::InvalidArgument(format!(
                    "rocksdb.config.setter: {} (options: {user:?})",
                    e.into_string()
                ))
            }),
        }
    }

    /// Whether the user's options set one whose name starts with `prefix`.
    fn user_names(&self, prefix: &str) -> bool {
        self.user.as_deref().is_some_and(|user| {
            user.split(';')
                .any(|option| option.trim_start().starts_with(prefix))
        })
    }

    /// Options of a spill database (staged writes past the memory bound): the budget's cache
    /// and write buffers, no filters (spills are read back in order, once).
    pub fn spill_options(&self) -> Options {
        let mut options = self.shared_options();
        options.set_block_based_table_factory(&self.table_options());
        options
    }

    fn table_options(&self) -> BlockBasedOptions {
        let mut table = BlockBasedOptions::default();
        table.set_format_version(FORMAT_VERSION);
        table.set_block_size(BLOCK_BYTES);
        table.set_block_cache(self.budget.block_cache());
        table.set_cache_index_and_filter_blocks(true);
        table.set_cache_index_and_filter_blocks_with_high_priority(true);
        // Every open table's index and filter stay pinned in the cache: still charged to the
        // budget, but a point read uses the table reader's handles instead of looking both up in
        // the shared cache, and a filter is never evicted and read back whole for one get.
        table.set_unpartitioned_pinning_tier(BlockBasedTablePinningTier::All);
        table
    }

    fn shared_options(&self) -> Options {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // Kafka Streams' RocksDBStore stores values uncompressed; so do we, for speed and parity.
        options.set_compression_type(DBCompressionType::None);
        options.set_write_buffer_manager(self.budget.write_buffer_manager());
        options.set_write_buffer_size(self.budget.store_write_buffer_bytes());
        // The offsets family is written by every commit and holds a few bytes, so it is never
        // flushed for its size, and each WAL file stays until something flushes it: RocksDB's
        // default bound (4x all write buffers, ~600 MB a store) kept ~120 MB of WAL per 1M keys,
        // replayed at every open. Past this total RocksDB flushes the families holding the oldest.
        options.set_max_total_wal_size(
            (WAL_WRITE_BUFFERS * self.budget.store_write_buffer_bytes()) as u64,
        );
        options.set_max_write_buffer_number(MAX_WRITE_BUFFERS);
        options.set_max_open_files(self.budget.table_files_per_store());
        // Errors to stderr rather than a LOG file per store: one descriptor less each.
        options.set_info_logger(InfoLogger::new_stderr_logger(
            LogLevel::Error,
            Some("kstate rocksdb: "),
        ));
        // Memtables grow in blocks of this much (RocksDB: up to 1 MiB): each column family
        // written (the offsets family at every commit) holds a block, which with many stores
        // is most of the memtable share.
        options.set_arena_block_size(ARENA_BLOCK_BYTES);
        options.set_bytes_per_sync(BYTES_PER_SYNC);
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Arc<MemoryBudget> {
        MemoryBudget::new(64 << 20).unwrap()
    }

    /// The DB options a store opened with `user` options wrote to its OPTIONS file.
    fn written_options(user: Option<&str>) -> String {
        options_written_by(&RocksConfig::new(budget(), user).unwrap())
    }

    /// The DB options a store opened with `config` wrote to its OPTIONS file.
    fn options_written_by(config: &RocksConfig) -> String {
        let dir = tempfile::tempdir().unwrap();
        let db = rocksdb::DB::open(&config.store_options().unwrap(), dir.path()).unwrap();
        drop(db);
        let mut written = String::new();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
            {
                written = std::fs::read_to_string(path).unwrap();
            }
        }
        written
    }

    /// Asserts that a store opened with `user` options wrote each of `lines` to its OPTIONS file.
    fn assert_written(user: Option<&str>, lines: &[&str]) {
        let written = written_options(user);
        for line in lines {
            assert!(written.contains(line), "{line:?} not in {written}");
        }
    }

    #[test]
    fn two_flushes_run_at_once_unless_the_user_sets_background_jobs() {
        assert_written(
            None,
            &[
                "max_background_flushes=2\n",
                "max_background_compactions=-1\n",
            ],
        );
        assert_written(
            Some("max_background_jobs=8"),
            &["max_background_jobs=8\n", "max_background_flushes=-1\n"],
        );
        assert_written(
            Some("write_buffer_size=8388608; max_background_flushes=3"),
            &["max_background_flushes=3\n"],
        );
    }

    #[test]
    fn written_files_go_to_disk_as_they_grow_unless_the_user_says_otherwise() {
        assert_written(None, &["  bytes_per_sync=1048576\n"]);
        assert_written(Some("bytes_per_sync=0"), &["  bytes_per_sync=0\n"]);
    }

    #[test]
    fn memtables_keep_one_insert_hint_unless_the_user_says_otherwise() {
        assert_written(
            None,
            &["memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.0\n"],
        );
        assert_written(
            Some("memtable_insert_with_hint_prefix_extractor=nullptr"),
            &["memtable_insert_with_hint_prefix_extractor=nullptr\n"],
        );
    }

    #[test]
    fn wal_files_are_recycled_unless_the_user_or_the_store_says_otherwise() {
        assert_written(None, &["recycle_log_file_num=2\n"]);
        assert_written(
            Some("recycle_log_file_num=0"),
            &["recycle_log_file_num=0\n"],
        );
        let segments = RocksConfig::new(budget(), None).unwrap().for_segments(true);
        let written = options_written_by(&segments);
        assert!(written.contains("recycle_log_file_num=0\n"), "{written}");
    }

    #[test]
    fn tables_carry_bloom_filters_unless_the_segments_or_the_user_say_otherwise() {
        let bloom = "filter_policy=bloomfilter";
        assert!(written_options(None).contains(bloom));
        let config = RocksConfig::new(budget(), None).unwrap();
        assert!(options_written_by(&config.for_segments(true)).contains(bloom));
        let ranges_only = options_written_by(&config.for_segments(false));
        assert!(
            ranges_only.contains("filter_policy=nullptr\n"),
            "{ranges_only}"
        );
        let theirs = Some("block_based_table_factory={filter_policy=bloomfilter:10:false}");
        let config = RocksConfig::new(budget(), theirs).unwrap();
        let theirs = options_written_by(&config.for_segments(false));
        assert!(theirs.contains(bloom), "{theirs}");
    }

    /// Block cache bytes not pinned once `user`'s store has compacted four flushed tables into
    /// one: the blocks of the deleted tables, unless they left the cache with them.
    fn unpinned_after_compaction(user: Option<&str>) -> usize {
        let budget = budget();
        let config = RocksConfig::new(budget.clone(), user).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = rocksdb::DB::open(&config.store_options().unwrap(), dir.path()).unwrap();
        for round in 0..4u32 {
            for key in 0..20_000u32 {
                db.put(key.to_be_bytes(), round.to_be_bytes().repeat(25))
                    .unwrap();
            }
            db.flush().unwrap();
        }
        let cache = budget.block_cache();
        assert!(
            cache.get_pinned_usage() > 4 * 20_000,
            "index and filter pinned"
        );
        db.compact_range::<&[u8], &[u8]>(None, None);
        // A background job deletes the obsolete files after the compaction returns; it releases
        // their blocks before it deletes them.
        let table_files = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|entry| entry.as_ref().unwrap().path().extension() == Some("sst".as_ref()))
                .count()
        };
        for _ in 0..250 {
            if table_files() == 1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(table_files(), 1);
        cache.get_usage() - cache.get_pinned_usage()
    }

    #[test]
    fn tables_deleted_by_compaction_leave_the_block_cache() {
        let ours = unpinned_after_compaction(None);
        let rocksdb_default = unpinned_after_compaction(Some("uncache_aggressiveness=0"));
        // Four tables' index and filter blocks, left in the cache by RocksDB's default.
        assert!(rocksdb_default > 100 << 10, "{rocksdb_default}");
        assert!(ours < rocksdb_default / 4, "{ours} vs {rocksdb_default}");
    }

    #[test]
    fn user_options_are_checked_when_the_config_is_made() {
        assert!(RocksConfig::new(
            budget(),
            Some("max_open_files=64;write_buffer_size=8388608")
        )
        .is_ok());
        assert!(RocksConfig::new(
            budget(),
            Some("block_based_table_factory={block_size=16384}")
        )
        .is_ok());
        let unknown = RocksConfig::new(budget(), Some("no_such_option=1")).unwrap_err();
        assert!(
            matches!(&unknown, Error::InvalidArgument(m) if m.contains("no_such_option")),
            "{unknown:?}"
        );
        let bad_value = RocksConfig::new(budget(), Some("max_open_files=many")).unwrap_err();
        assert!(
            matches!(bad_value, Error::InvalidArgument(_)),
            "{bad_value:?}"
        );
    }
}

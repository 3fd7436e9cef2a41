//! Committed state in RocksDB with Kafka Streams' column families (spec 1.4, 4.2):
//! `default` (plain values), `keyValueWithTimestamp` (timestamped values), `offsets`.
//! A timestamped store whose `default` family still holds data opens in upgrade mode: reads fall
//! back to `default` and convert, point reads migrate, writes delete the legacy copy.

use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DBRawIterator, FlushOptions, IngestExternalFileOptions,
    Options, ReadOptions, ReadTier, SstFileWriter, WriteBatch, WriteOptions, DB,
    DEFAULT_COLUMN_FAMILY_NAME,
};

use crate::error::{Error, Result};
use crate::format::offsets::{self, OFFSETS_CF, STATUS_KEY, STATUS_OPEN};
use crate::format::timestamped;
use crate::format::write_batch::RecordPrefixes;
use crate::store::committed::{CommittedState, OffsetWrite, Write, WriteSink};
use crate::store::key_order::key_order;
use crate::store::key_range::{Direction, KeyRange};
use crate::store::key_value::Durability;
use crate::store::memory_budget::{MemoryBudget, StoreMemory};
use crate::store::merge::SortedSource;
use crate::store::rocks_options::RocksConfig;
use crate::store::ttl::Ttl;
use crate::store::wal_files;

pub const TIMESTAMPED_CF: &str = "keyValueWithTimestamp";

/// Reads (point reads and iterators) stop caching the data blocks they read once the store's
/// table files hold more than this many times the block cache: random reads then hit a cached
/// block less than one time in four, and inserting each block read (a 4 KiB allocation, an
/// eviction freeing a cold one) cost more than the hits saved, and a long scan would only push
/// out what else is cached (benches/README.md, "Stores at scale": at 10M keys, 1.1 GiB of
/// tables against a 224 MiB cache). Hot keys are still kept by the read cache; index and filter
/// blocks stay pinned in the block cache; reads of smaller stores fill it as before.
const UNCACHED_READS_PAST: u64 = 4;
/// Reads between two looks at the store's size.
const READS_PER_SIZE_CHECK: u32 = 1 << 16;
/// A read of many keys walks one iterator over them, instead of a multi-get's lookup per key,
/// when it asks for at least one key in this many of the store's (RocksDB's estimate): a
/// micro-batch that reads back most of its keys with a cold block cache (a partition that moved
/// to another Python worker) paid a third as much a key walking (`read_sorted_by_walk`).
const WALKED_READS_FROM_ONE_IN: u64 = 8;
/// Fewer keys than this are looked up: an iterator's set-up outweighs what it saves.
const WALKED_READS_MIN_KEYS: usize = 64;
/// How many entries a walk steps over towards its next key before it seeks to it instead.
const WALK_STEPS_BEFORE_SEEK: usize = 8;

/// Which column family holds the store's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueFormat {
    /// `RocksDBStore`: raw values in `default`.
    Plain,
    /// `RocksDBTimestampedStore`: `ValueAndTimestamp` bytes in `keyValueWithTimestamp`.
    Timestamped,
}

pub struct RocksState {
    db: DB,
    data_cf: &'static str,
    /// `Some("default")` while a timestamped store is in upgrade mode.
    legacy_cf: Option<&'static str>,
    write_options: WriteOptions,
    durability: Durability,
    // Kept rather than created per call: point reads are the hot path.
    read_options: ReadOptions,
    /// The same, not caching the data blocks read (`UNCACHED_READS_PAST`).
    uncached_read_options: ReadOptions,
    budget: Arc<MemoryBudget>,
    reads: AtomicU32,
    caches_blocks: AtomicBool,
    /// The data column family's options, for the table files `ingest_sorted` writes.
    table_file_options: Options,
}

fn is_empty(db: &DB, cf: &ColumnFamily) -> Result<bool> {
    let mut it = db.raw_iterator_cf(cf);
    it.seek_to_first();
    it.status()?;
    Ok(!it.valid())
}

impl RocksState {
    /// RocksDB's checkpoint at `dir`, flushing the memtables first when the WAL holds more than
    /// `log_size_for_flush` bytes (0: always; `u64::MAX`: never).
    fn checkpoint_flushing_past(&self, dir: &Path, log_size_for_flush: u64) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?
            .create_checkpoint_with_log_size(dir, log_size_for_flush)
            .map_err(|e| {
                Error::rocksdb(
                    e,
                    format_args!("capturing a checkpoint at {}", dir.display()),
                )
            })
    }

    /// The offset, a TTL's stream time and a segment's stream time as `offsets` family records.
    fn add_offset(&self, batch: &mut WriteBatch, offset: OffsetWrite<'_>) -> Result<()> {
        let OffsetWrite {
            key,
            offset,
            stream_time,
            segmented_stream_time,
        } = offset;
        let cf = self.cf(OFFSETS_CF)?;
        match offset {
            Some(o) => batch.put_cf(cf, key.as_bytes(), offsets::encode(o)),
            None => batch.delete_cf(cf, key.as_bytes()),
        }
        if let Some(time) = stream_time {
            batch.put_cf(cf, offsets::TTL_STREAM_TIME_KEY, offsets::encode(time));
        }
        if let Some(time) = segmented_stream_time {
            batch.put_cf(
                cf,
                offsets::SEGMENTED_STREAM_TIME_KEY,
                offsets::encode(time),
            );
        }
        Ok(())
    }

    /// Opens with the process's memory budget and no user options (offline tools).
    pub fn open(path: &Path, format: ValueFormat) -> Result<Self> {
        let config = RocksConfig::process_default()?;
        Self::open_with_ttl(path, format, None, &config, Durability::Wal)
    }

    /// Opens with a TTL: the timestamped column family gets the TTL's compaction filter, which
    /// drops expired values when RocksDB compacts (only timestamped values carry a timestamp).
    pub fn open_with_ttl(
        path: &Path,
        format: ValueFormat,
        ttl: Option<&Ttl>,
        config: &RocksConfig,
        durability: Durability,
    ) -> Result<Self> {
        if ttl.is_some() && format == ValueFormat::Plain {
            return Err(Error::InvalidArgument(
                "a TTL needs a timestamped store: plain values carry no timestamp".into(),
            ));
        }
        let mut opts = config.store_options()?;
        let mut write_options = WriteOptions::default();
        if durability == Durability::Changelog {
            // Without a WAL a flush is the only durability: every family's memtables flush
            // together, so a table file never holds data whose offset is not in one too.
            opts.set_atomic_flush(true);
            write_options.disable_wal(true);
            // RocksDB refuses writes without the WAL to a database that recycles WAL files.
            opts.set_recycle_log_file_num(0);
        }
        let existing = if path.join("CURRENT").exists() {
            DB::list_cf(&opts, path)?
        } else {
            Vec::new()
        };
        let mut families: Vec<String> = existing.clone();
        let wanted = match format {
            ValueFormat::Plain => vec![DEFAULT_COLUMN_FAMILY_NAME, OFFSETS_CF],
            ValueFormat::Timestamped => {
                vec![DEFAULT_COLUMN_FAMILY_NAME, TIMESTAMPED_CF, OFFSETS_CF]
            }
        };
        for name in &wanted {
            if !families.iter().any(|f| f == name) {
                families.push(name.to_string());
            }
        }
        let mut descriptors = Vec::with_capacity(families.len());
        for f in &families {
            let mut cf_options = config.store_options()?;
            if let (Some(ttl), TIMESTAMPED_CF) = (ttl, f.as_str()) {
                cf_options.set_compaction_filter("kstate-ttl", ttl.compaction_filter());
            }
            descriptors.push(ColumnFamilyDescriptor::new(f, cf_options));
        }
        let db = DB::open_cf_descriptors(&opts, path, descriptors).map_err(|e| {
            Error::rocksdb(e, format_args!("error opening store at {}", path.display()))
        })?;
        for family in &existing {
            if wanted.contains(&family.as_str()) {
                continue;
            }
            let cf = db
                .cf_handle(family)
                .ok_or_else(|| Error::Storage(format!("column family {family} vanished")))?;
            if !is_empty(&db, cf)? {
                return Err(Error::InvalidState(format!(
                    "store at {} holds data in column family {family:?}, a format this store type cannot read \
                     (downgrading a timestamped store to a plain one is not supported; wipe the local state and \
                     restore from the changelog)",
                    path.display()
                )));
            }
        }
        let (data_cf, legacy_cf) = match format {
            ValueFormat::Plain => (DEFAULT_COLUMN_FAMILY_NAME, None),
            ValueFormat::Timestamped => {
                let default = db
                    .cf_handle(DEFAULT_COLUMN_FAMILY_NAME)
                    .ok_or_else(|| Error::Storage("default column family missing".into()))?;
                let upgrade = !is_empty(&db, default)?;
                (
                    TIMESTAMPED_CF,
                    upgrade.then_some(DEFAULT_COLUMN_FAMILY_NAME),
                )
            }
        };
        let mut uncached_read_options = ReadOptions::default();
        uncached_read_options.fill_cache(false);
        Ok(Self {
            db,
            data_cf,
            legacy_cf,
            write_options,
            durability,
            read_options: ReadOptions::default(),
            uncached_read_options,
            budget: config.budget().clone(),
            reads: AtomicU32::new(0),
            caches_blocks: AtomicBool::new(true),
            table_file_options: opts,
        })
    }

    /// Opens the data family's table files not open yet with a cached read (an iterator seek to
    /// each file's first key): a table first opened by an uncached read would keep its index and
    /// filter outside the block cache, uncounted by the budget. Files already open cost a seek.
    fn open_tables_cached(&self) {
        let (Ok(cf), Ok(files)) = (self.cf(self.data_cf), self.db.live_files()) else {
            return;
        };
        let mut iter = self.db.raw_iterator_cf(cf);
        for file in files {
            if let (true, Some(first)) = (file.column_family_name == self.data_cf, file.start_key) {
                iter.seek(first);
            }
        }
    }

    /// Whether reads cache the data blocks they read: every `READS_PER_SIZE_CHECK` reads, whether
    /// the store's tables are small enough against the block cache (`UNCACHED_READS_PAST`).
    fn caches_blocks(&self) -> bool {
        if self
            .reads
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(READS_PER_SIZE_CHECK)
        {
            let tables = self
                .cf(self.data_cf)
                .and_then(|cf| {
                    Ok(self
                        .db
                        .property_int_value_cf(cf, c"rocksdb.total-sst-files-size")?)
                })
                .ok()
                .flatten()
                .unwrap_or(0);
            let cache = self.budget.block_cache_capacity() as u64;
            let caches = tables <= cache.saturating_mul(UNCACHED_READS_PAST);
            if !caches {
                self.open_tables_cached();
            }
            self.caches_blocks.store(caches, Ordering::Relaxed);
        }
        self.caches_blocks.load(Ordering::Relaxed)
    }

    fn read_offset(&self, key: &str, options: &ReadOptions) -> Result<Option<i64>> {
        match self
            .db
            .get_pinned_cf_opt(self.cf(OFFSETS_CF)?, key.as_bytes(), options)?
        {
            Some(bytes) => Ok(Some(offsets::decode(key.as_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    /// `read_many` of `keys` in key order: one multi-get, then the legacy family for the keys
    /// not found; or, when they are a good share of the store's keys, one walk over them.
    fn read_sorted(
        &self,
        keys: &[&[u8]],
        visit: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        if self.legacy_cf.is_none() && self.reads_a_share_of_keys(keys.len())? {
            return self.read_sorted_by_walk(keys, visit);
        }
        let found = self.db.batched_multi_get_cf_opt(
            self.cf(self.data_cf)?,
            keys.iter().copied(),
            true,
            self.point_read_options(),
        );
        for (i, (value, key)) in found.into_iter().zip(keys).enumerate() {
            match value? {
                Some(v) => visit(i, Some(&v)),
                None => visit(i, self.get_legacy(key)?.as_deref()),
            }
        }
        Ok(())
    }

    /// Whether `n` keys are at least one in `WALKED_READS_FROM_ONE_IN` of the store's. RocksDB's
    /// estimate counts the overwrites and deletes its memtables still hold, so a store that
    /// rewrites its keys at every batch looks larger than it is, by a few times at most.
    fn reads_a_share_of_keys(&self, n: usize) -> Result<bool> {
        if n < WALKED_READS_MIN_KEYS {
            return Ok(false);
        }
        let estimate = self
            .db
            .property_int_value_cf(self.cf(self.data_cf)?, c"rocksdb.estimate-num-keys")?
            .unwrap_or(u64::MAX);
        Ok((n as u64).saturating_mul(WALKED_READS_FROM_ONE_IN) >= estimate)
    }

    /// `read_sorted` with one iterator: it steps to each next key (an entry a key when they are
    /// dense), seeking only across a gap of more than `WALK_STEPS_BEFORE_SEEK` entries.
    fn read_sorted_by_walk(
        &self,
        keys: &[&[u8]],
        visit: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
            return Ok(());
        };
        let mut past_last = last.to_vec();
        past_last.push(0); // the least key after `last`
        let range = KeyRange {
            lower: Some(first.to_vec()),
            upper: Some(past_last),
        };
        let cf = self.cf(self.data_cf)?;
        let mut iter = range_iterator(
            &self.db,
            cf,
            &range,
            Direction::Forward,
            self.caches_blocks(),
        )?;
        for (i, &key) in keys.iter().enumerate() {
            let mut steps = 0;
            while iter.key().is_some_and(|k| k < key) {
                if steps == WALK_STEPS_BEFORE_SEEK {
                    iter.seek(key);
                } else {
                    iter.next();
                    steps += 1;
                }
                checked(&iter)?;
            }
            let found = iter.key() == Some(key);
            visit(i, if found { iter.value() } else { None });
        }
        Ok(())
    }

    fn point_read_options(&self) -> &ReadOptions {
        if self.caches_blocks() {
            &self.read_options
        } else {
            &self.uncached_read_options
        }
    }

    /// The column families the store opened.
    fn families(&self) -> impl Iterator<Item = &'static str> {
        let data = (self.data_cf != DEFAULT_COLUMN_FAMILY_NAME).then_some(self.data_cf);
        [DEFAULT_COLUMN_FAMILY_NAME, OFFSETS_CF]
            .into_iter()
            .chain(data)
    }

    /// Whether any memtable of the store holds a write (active or waiting to be flushed).
    fn holds_unflushed_writes(&self) -> Result<bool> {
        for name in self.families() {
            let cf = self.cf(name)?;
            for property in [
                c"rocksdb.num-entries-active-mem-table",
                c"rocksdb.num-immutable-mem-table",
            ] {
                if self.db.property_int_value_cf(cf, property)?.unwrap_or(0) > 0 {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// True while a timestamped store still reads legacy values from `default`.
    pub fn upgrade_mode(&self) -> bool {
        self.legacy_cf.is_some()
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| Error::Storage(format!("column family {name} is not open")))
    }

    fn get_legacy(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.legacy_cf {
            None => Ok(None),
            Some(legacy) => Ok(self
                .db
                .get_pinned_cf_opt(self.cf(legacy)?, key, &self.read_options)?
                .map(|v| timestamped::convert_legacy(&v))),
        }
    }

    /// Adds `writes` to `batch`; in upgrade mode each write also deletes the legacy copy.
    fn add_to_batch<'a>(
        &self,
        batch: &mut WriteBatch,
        writes: &mut dyn Iterator<Item = Write<'a>>,
    ) -> Result<()> {
        let data = self.cf(self.data_cf)?;
        let legacy = self.legacy_cf.map(|name| self.cf(name)).transpose()?;
        for (key, value) in writes {
            match value {
                Some(v) => batch.put_cf(data, key, v),
                None => batch.delete_cf(data, key),
            }
            if let Some(legacy) = legacy {
                batch.delete_cf(legacy, key);
            }
        }
        Ok(())
    }

    /// Entries in the value column family and, in upgrade mode, still in the legacy one,
    /// counted exactly (for an offline upgrade's report).
    pub fn count_entries(&self) -> Result<(u64, u64)> {
        let count = |cf: &str| -> Result<u64> {
            let mut iter = range_iterator(
                &self.db,
                self.cf(cf)?,
                &KeyRange::all(),
                Direction::Forward,
                true,
            )?;
            let mut n = 0u64;
            while iter.valid() {
                n += 1;
                step(&mut iter, Direction::Forward)?;
            }
            Ok(n)
        };
        let legacy = self.legacy_cf.map(count).transpose()?.unwrap_or(0);
        Ok((count(self.data_cf)?, legacy))
    }

    /// Moves every legacy value to the timestamped family now (what upgrade mode does lazily),
    /// in atomic batches of about `batch_bytes`; reports `(moved, total)` after each. A crash
    /// leaves a store still in upgrade mode, which reads right and resumes on the next run.
    pub fn migrate_legacy(
        &self,
        batch_bytes: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64> {
        let Some(legacy) = self.legacy_cf else {
            return Ok(0);
        };
        let (_, total) = self.count_entries()?;
        let mut moved = 0u64;
        let mut range = KeyRange::all();
        loop {
            let mut iter =
                range_iterator(&self.db, self.cf(legacy)?, &range, Direction::Forward, true)?;
            let mut batch = WriteBatch::default();
            let mut last = None;
            while let Some((key, value)) = iter.item() {
                let converted = timestamped::convert_legacy(value);
                self.add_to_batch(
                    &mut batch,
                    &mut std::iter::once((key, Some(converted.as_slice()))),
                )?;
                last = Some(key.to_vec());
                if batch.size_in_bytes() >= batch_bytes {
                    break;
                }
                step(&mut iter, Direction::Forward)?;
            }
            let Some(last) = last else {
                return Ok(moved);
            };
            moved += batch.len() as u64 / 2; // each key is a put and a legacy delete
            self.db.write_opt(batch, &self.write_options)?;
            progress(moved, total.max(moved));
            range = range.after(&last, Direction::Forward);
        }
    }

    /// Reads the `status` marker and replaces it with `status`; returns the previous marker.
    /// Without a WAL for the store's writes, OPEN goes through a synced WAL write, durable
    /// before any commit: a crash then always reopens to OPEN, never to an older CLOSED.
    pub fn swap_status(&self, status: Option<i64>) -> Result<Option<i64>> {
        let cf = self.cf(OFFSETS_CF)?;
        let previous = match self.db.get_pinned_cf(cf, STATUS_KEY)? {
            Some(bytes) => Some(offsets::decode(STATUS_KEY, &bytes)?),
            None => None,
        };
        if let Some(s) = status {
            let mut synced = WriteOptions::default();
            synced.set_sync(true);
            let options = if s == STATUS_OPEN && self.durability == Durability::Changelog {
                &synced
            } else {
                &self.write_options
            };
            self.db
                .put_cf_opt(cf, STATUS_KEY, offsets::encode(s), options)?;
        }
        Ok(previous)
    }
}

struct RocksSource<'a> {
    iter: DBRawIterator<'a>,
    direction: Direction,
    legacy: bool,
}

impl SortedSource for RocksSource<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.iter.key()
    }
    fn value(&self) -> Result<Option<Cow<'_, [u8]>>> {
        Ok(self.iter.value().map(|v| {
            if self.legacy {
                Cow::Owned(timestamped::convert_legacy(v))
            } else {
                Cow::Borrowed(v)
            }
        }))
    }
    fn advance(&mut self) -> Result<()> {
        step(&mut self.iter, self.direction)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.iter.seek(target);
        checked(&self.iter)
    }
}

/// A raw iterator over `range` of `cf`, positioned on the first entry in `direction`. Bounds
/// are set in RocksDB so it never reads past the range.
pub(crate) fn range_iterator<'a>(
    db: &'a DB,
    cf: &ColumnFamily,
    range: &KeyRange,
    direction: Direction,
    cache_blocks: bool,
) -> Result<DBRawIterator<'a>> {
    let mut read = ReadOptions::default();
    read.fill_cache(cache_blocks);
    if let Some(lower) = &range.lower {
        read.set_iterate_lower_bound(lower.clone());
    }
    if let Some(upper) = &range.upper {
        read.set_iterate_upper_bound(upper.clone());
    }
    let mut iter = db.raw_iterator_cf_opt(cf, read);
    // An unpositioned iterator is invalid, so an empty range yields nothing.
    if !range.is_empty() {
        match direction {
            Direction::Forward => iter.seek_to_first(),
            Direction::Reverse => iter.seek_to_last(),
        }
    }
    checked(&iter)?;
    Ok(iter)
}

/// The error that left `iter` invalid, if one did: a valid iterator has none (RocksDB's
/// contract), so the common case costs no call for the status.
pub(crate) fn checked(iter: &DBRawIterator<'_>) -> Result<()> {
    if iter.valid() {
        return Ok(());
    }
    Ok(iter.status()?)
}

/// Moves `iter` one entry on in `direction`.
pub(crate) fn step(iter: &mut DBRawIterator<'_>, direction: Direction) -> Result<()> {
    match direction {
        Direction::Forward => iter.next(),
        Direction::Reverse => iter.prev(),
    }
    checked(iter)
}

impl RocksState {
    fn source<'a>(
        &'a self,
        cf: &str,
        range: &KeyRange,
        direction: Direction,
        legacy: bool,
    ) -> Result<RocksSource<'a>> {
        Ok(RocksSource {
            iter: range_iterator(
                &self.db,
                self.cf(cf)?,
                range,
                direction,
                self.caches_blocks(),
            )?,
            direction,
            legacy,
        })
    }
}

impl CommittedState for RocksState {
    fn read(&self, key: &[u8], migrate: bool, visit: &mut dyn FnMut(Option<&[u8]>)) -> Result<()> {
        if let Some(v) =
            self.db
                .get_pinned_cf_opt(self.cf(self.data_cf)?, key, self.point_read_options())?
        {
            visit(Some(&v));
            return Ok(());
        }
        let converted = self.get_legacy(key)?;
        if let (Some(v), true) = (&converted, migrate) {
            // Moving a value between column families does not change what the store holds, so it
            // is written at once rather than staged in the transaction.
            let mut batch = WriteBatch::default();
            self.add_to_batch(&mut batch, &mut std::iter::once((key, Some(v.as_slice()))))?;
            self.db.write_opt(batch, &self.write_options)?;
        }
        visit(converted.as_deref());
        Ok(())
    }

    fn read_many(&self, keys: &[&[u8]], visit: &mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()> {
        // RocksDB reads keys in key order, sorting them itself through its comparator's virtual
        // calls when not told they are: sorting them here (a batch's keys come in the
        // grouping's order) cost half of that on shape 7a, `key_order` less again. The stores
        // keep RocksDB's bytewise comparator, the order of byte slices.
        if keys.is_sorted() {
            return self.read_sorted(keys, visit);
        }
        let order = key_order(keys);
        let sorted: Vec<&[u8]> = order.iter().map(|&i| keys[i as usize]).collect();
        self.read_sorted(&sorted, &mut |j, v| visit(order[j] as usize, v))
    }

    fn sources<'a>(
        &'a self,
        range: &KeyRange,
        direction: Direction,
    ) -> Result<Vec<Box<dyn SortedSource + 'a>>> {
        let mut sources: Vec<Box<dyn SortedSource + 'a>> = vec![Box::new(self.source(
            self.data_cf,
            range,
            direction,
            false,
        )?)];
        if let Some(legacy) = self.legacy_cf {
            sources.push(Box::new(self.source(legacy, range, direction, true)?));
        }
        Ok(sources)
    }

    fn batch_records(&self) -> Result<Option<RecordPrefixes>> {
        if self.legacy_cf.is_some() {
            return Ok(None);
        }
        let data = self.cf(self.data_cf)?;
        let (mut put, mut delete) = (WriteBatch::default(), WriteBatch::default());
        put.put_cf(data, b"", b"");
        delete.delete_cf(data, b"");
        RecordPrefixes::probe(&put, &delete).map(Some)
    }

    fn stage(&self, batch: &mut WriteBatch, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.add_to_batch(batch, &mut std::iter::once((key, value)))
    }

    fn offset_batch(&self, offset: OffsetWrite<'_>) -> Result<WriteBatch> {
        let mut batch = WriteBatch::default();
        self.add_offset(&mut batch, offset)?;
        Ok(batch)
    }

    fn commit_staged(
        &self,
        mut batch: WriteBatch,
        _writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: Option<OffsetWrite<'_>>,
    ) -> Result<()> {
        if let Some(offset) = offset {
            self.add_offset(&mut batch, offset)?;
        }
        self.db.write_opt(batch, &self.write_options)?;
        Ok(())
    }

    fn apply(
        &self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: Option<OffsetWrite<'_>>,
    ) -> Result<()> {
        let mut batch = WriteBatch::default();
        self.add_to_batch(&mut batch, writes)?;
        self.commit_staged(batch, &mut std::iter::empty(), offset)
    }

    fn ingest_sorted(
        &self,
        file: &Path,
        fill: &mut dyn FnMut(&mut WriteSink<'_>) -> Result<()>,
    ) -> Result<Option<u64>> {
        if self.legacy_cf.is_some() {
            return Ok(None);
        }
        let mut writer = SstFileWriter::create(&self.table_file_options);
        writer.open(file)?;
        let mut count = 0u64;
        fill(&mut |(key, value)| {
            match value {
                Some(v) => writer.put(key, v)?,
                None => writer.delete(key)?,
            }
            count += 1;
            Ok(())
        })?;
        if count == 0 {
            // RocksDB cannot finish a table without entries; there is nothing to ingest.
            drop(writer);
            std::fs::remove_file(file)?;
            return Ok(Some(0));
        }
        writer.finish()?;
        let mut ingest = IngestExternalFileOptions::default();
        // A hard link into the store: the file is written once.
        ingest.set_move_files(true);
        self.db
            .ingest_external_file_cf_opts(self.cf(self.data_cf)?, &ingest, vec![file])?;
        Ok(Some(count))
    }

    fn committed_offset(&self, key: &str) -> Result<Option<i64>> {
        self.read_offset(key, &self.read_options)
    }

    fn persisted_offset(&self, key: &str) -> Result<Option<i64>> {
        let mut persisted = ReadOptions::default();
        // Skips the memtables once the store wrote without its WAL.
        persisted.set_read_tier(ReadTier::Persisted);
        self.read_offset(key, &persisted)
    }

    fn approximate_num_entries(&self) -> Result<u64> {
        let mut total = 0u64;
        for cf in std::iter::once(self.data_cf).chain(self.legacy_cf) {
            total += self
                .db
                .property_int_value_cf(self.cf(cf)?, rocksdb::properties::ESTIMATE_NUM_KEYS)?
                .unwrap_or(0);
        }
        Ok(total)
    }

    fn flush(&self) -> Result<()> {
        self.flush_memtables(true)
    }

    fn flush_memtables(&self, wait: bool) -> Result<()> {
        let mut options = FlushOptions::default();
        options.set_wait(wait);
        // Each family once: with `atomic_flush` they are flushed as one.
        let families = self
            .families()
            .map(|name| self.cf(name))
            .collect::<Result<Vec<_>>>()?;
        self.db.flush_cfs_opt(&families, &options)?;
        Ok(())
    }

    fn prepare_close(&self) -> Result<()> {
        // WAL files are recycled (`rocks_options`). With deletions held, the close's flush opens
        // a new, empty WAL file: a recycled one would stay on disk as the live WAL, its old
        // records still in it.
        Ok(self.db.disable_file_deletions()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.enable_file_deletions()?;
        // Lets running flushes and compactions end first, so none makes another WAL file
        // obsolete after the bound is read.
        self.db.cancel_all_background_work(true);
        let keep_from = self
            .db
            .property_int_value(c"rocksdb.min-log-number-to-keep")?;
        // With every memtable empty the live WAL holds no write that is not in a table file.
        // It can still be a recycled file full of old records, when the close had nothing to
        // flush; emptied, it is read as the empty log it is. Only under the WAL durability,
        // whose WAL writes are never synced, so RocksDB records no synced size to check it by.
        let empty_live = self.durability == Durability::Wal && !self.holds_unflushed_writes()?;
        let dir = self.db.path().to_path_buf();
        drop(self);
        if let Some(keep_from) = keep_from {
            wal_files::remove_obsolete(&dir, keep_from);
            if empty_live {
                wal_files::empty_live(&dir, keep_from);
            }
        }
        Ok(())
    }

    fn set_status(&self, status: i64) -> Result<()> {
        self.swap_status(Some(status)).map(|_| ())
    }

    fn checkpoint(&self, dir: &Path) -> Result<()> {
        // 0 flushes every memtable first (all families at once with `atomic_flush`), so the
        // checkpoint holds the last commit in table files whatever the durability.
        self.checkpoint_flushing_past(dir, 0)
    }

    fn checkpoint_persisted(&self, dir: &Path) -> Result<()> {
        if self.durability == Durability::Wal {
            // The WAL makes the memtables persisted too, and a snapshot leaves WAL files out.
            return self.checkpoint(dir);
        }
        // No flush: the table files as they are, which hold what `persisted_offset` names.
        self.checkpoint_flushing_past(dir, u64::MAX)
    }

    fn active_memtable_bytes(&self) -> usize {
        self.families()
            .filter_map(|name| self.cf(name).ok())
            .filter_map(|cf| {
                self.db
                    .property_int_value_cf(cf, c"rocksdb.cur-size-active-mem-table")
                    .ok()
                    .flatten()
            })
            .map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX))
            .sum()
    }

    fn memory(&self) -> Result<StoreMemory> {
        let mut memory = StoreMemory::default();
        let property = |cf: &ColumnFamily, name: &std::ffi::CStr| -> Result<usize> {
            let value = self.db.property_int_value_cf(cf, name)?.unwrap_or(0);
            Ok(usize::try_from(value).unwrap_or(usize::MAX))
        };
        for name in self.families() {
            let cf = self.cf(name)?;
            memory.memtables += property(cf, c"rocksdb.cur-size-all-mem-tables")?;
            memory.table_readers += property(cf, c"rocksdb.estimate-table-readers-mem")?;
            memory.sst_bytes += property(cf, c"rocksdb.total-sst-files-size")? as u64;
        }
        memory.sst_files = self.db.live_files()?.len();
        Ok(memory)
    }

    fn compact(&self) -> Result<()> {
        self.flush()?;
        for cf in std::iter::once(self.data_cf).chain(self.legacy_cf) {
            self.db
                .compact_range_cf(self.cf(cf)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(state: &RocksState, keys: std::ops::Range<u32>, value: &[u8]) {
        let cf = state.cf(state.data_cf).unwrap();
        let mut batch = WriteBatch::default();
        for i in keys {
            batch.put_cf(cf, format!("key-{i:08}"), value);
        }
        state.db.write(batch).unwrap();
        state.db.flush_cf(cf).unwrap();
    }

    fn read(state: &RocksState, i: u32) -> Option<Vec<u8>> {
        let mut found = None;
        state
            .read(format!("key-{i:08}").as_bytes(), false, &mut |v| {
                found = v.map(<[u8]>::to_vec)
            })
            .unwrap();
        found
    }

    #[test]
    fn reads_of_most_keys_walk_one_iterator_and_find_what_lookups_find() {
        let dir = tempfile::tempdir().unwrap();
        let config = RocksConfig::new(MemoryBudget::new(32 << 20).unwrap(), None).unwrap();
        let state = RocksState::open_with_ttl(
            dir.path(),
            ValueFormat::Plain,
            None,
            &config,
            Durability::Wal,
        )
        .unwrap();
        write(&state, 0..3000, b"table");
        // Over the tables: overwrites, deletes (a gap of 100 entries) and a key before the
        // first, in the memtable.
        let cf = state.cf(state.data_cf).unwrap();
        let mut batch = WriteBatch::default();
        for i in 100..200 {
            batch.put_cf(cf, format!("key-{i:08}"), b"memtable");
        }
        for i in (300..400).chain([2999]) {
            batch.delete_cf(cf, format!("key-{i:08}"));
        }
        batch.put_cf(cf, "a", b"first");
        state.db.write(batch).unwrap();

        let read_many = |keys: &[String]| {
            let keys: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
            let mut found = vec![None; keys.len()];
            state
                .read_many(&keys, &mut |i, v| found[i] = v.map(<[u8]>::to_vec))
                .unwrap();
            found
        };
        let looked_up = |keys: &[String]| -> Vec<Option<Vec<u8>>> {
            (keys.iter())
                .map(|key| {
                    let mut found = None;
                    (state.read(key.as_bytes(), false, &mut |v| {
                        found = v.map(<[u8]>::to_vec)
                    }))
                    .unwrap();
                    found
                })
                .collect()
        };
        let name = |i: u32| format!("key-{i:08}");
        // Most keys, in order but for a few: absent ones, repeats, a skipped stretch of 200
        // entries (a seek), the first and the last key deleted, keys past the store's last.
        let mut dense: Vec<String> = ["a".to_owned(), "a0".to_owned()].into();
        dense.extend((0..3005).filter(|i| !(500..700).contains(i)).map(name));
        dense.extend([
            name(7),
            name(7),
            name(350),
            "key-".to_owned(),
            "z".to_owned(),
        ]);
        dense.rotate_left(5); // not sorted as given
        assert!(state.reads_a_share_of_keys(dense.len()).unwrap());
        let walked = read_many(&dense);
        assert_eq!(walked, looked_up(&dense));
        assert_eq!(
            walked.iter().filter(|v| v.is_some()).count(),
            3000 - 200 - 101 + 1 + 2
        );

        let sparse: Vec<String> = (0..3000).step_by(40).map(name).collect();
        assert!(!state.reads_a_share_of_keys(sparse.len()).unwrap());
        assert_eq!(read_many(&sparse), looked_up(&sparse));
    }

    #[test]
    fn point_reads_of_a_store_far_larger_than_the_block_cache_leave_it_to_index_and_filter() {
        let dir = tempfile::tempdir().unwrap();
        let budget = MemoryBudget::new(32 << 20).unwrap();
        let config = RocksConfig::new(budget.clone(), None).unwrap();
        let value = vec![7u8; 1000];
        let keys = 140_000; // ~140 MB of tables: over 4x the 28 MiB block cache
        let open = |path: &Path| {
            RocksState::open_with_ttl(path, ValueFormat::Plain, None, &config, Durability::Wal)
                .unwrap()
        };
        {
            let state = open(dir.path());
            for start in (0..keys).step_by(20_000) {
                write(&state, start..start + 20_000, &value);
            }
        }
        let state = open(dir.path());
        for i in (0..keys).step_by(97) {
            assert_eq!(read(&state, i).as_deref(), Some(&value[..]));
        }
        assert_eq!(read(&state, keys), None);
        assert!(!state.caches_blocks.load(Ordering::Relaxed));
        let usage = budget.usage();
        assert!(
            usage.block_cache_pinned >= 512 << 10,
            "index and filter blocks are in the cache: {usage:?}"
        );
        assert!(
            usage.block_cache_usage < usage.block_cache_pinned + (1 << 20),
            "data blocks read by gets are not cached: {usage:?}"
        );

        let small = tempfile::tempdir().unwrap();
        let state = open(small.path());
        write(&state, 0..1000, &value);
        assert_eq!(read(&state, 5).as_deref(), Some(&value[..]));
        assert!(state.caches_blocks.load(Ordering::Relaxed));
    }
}

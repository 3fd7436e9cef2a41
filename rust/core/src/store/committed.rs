//! What a store has committed: RocksDB on disk or an ordered map in memory, behind one trait so
//! the transactional layer (`key_value.rs`) and read-committed views do not care which.

use std::path::Path;

use rocksdb::WriteBatch;

use crate::error::{Error, Result};
use crate::format::write_batch::RecordPrefixes;
use crate::store::key_range::{Direction, KeyRange};
use crate::store::memory_budget::StoreMemory;
use crate::store::merge::SortedSource;

/// A changelog offset write that goes into the same atomic batch as the data.
#[derive(Debug, Clone, Copy)]
pub struct OffsetWrite<'a> {
    pub key: &'a str,
    /// `None` deletes the entry (a commit without changelog offset).
    pub offset: Option<i64>,
    /// A TTL's stream time to record (under [`crate::format::offsets::TTL_STREAM_TIME_KEY`]); `None`
    /// leaves the recorded one.
    pub stream_time: Option<i64>,
    /// The stream time of the segmented store this store is a segment of, at a commit that
    /// writes this segment alone (under
    /// [`crate::format::offsets::SEGMENTED_STREAM_TIME_KEY`]); `None` leaves the recorded one.
    pub segmented_stream_time: Option<i64>,
}

pub type Write<'a> = (&'a [u8], Option<&'a [u8]>);

/// Where `CommittedState::ingest_sorted`'s caller hands its writes, one at a time.
pub type WriteSink<'s> = dyn FnMut(Write<'_>) -> Result<()> + 's;

pub trait CommittedState: Send + Sync {
    /// Passes the value of `key` (in the store's value format, legacy values converted) to
    /// `visit` without copying it. With `migrate`, a legacy value found in upgrade mode is also
    /// moved to the new format on disk (Kafka's `get`; iterators and `getOnly` do not migrate).
    fn read(&self, key: &[u8], migrate: bool, visit: &mut dyn FnMut(Option<&[u8]>)) -> Result<()>;

    /// Passes `(index, value)` for every key to `visit`; never migrates.
    fn read_many(&self, keys: &[&[u8]], visit: &mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()> {
        for (i, key) in keys.iter().enumerate() {
            self.read(key, false, &mut |v| visit(i, v))?;
        }
        Ok(())
    }

    /// Sorted sources covering `range` in `direction`, highest priority first.
    fn sources<'a>(
        &'a self,
        range: &KeyRange,
        direction: Direction,
    ) -> Result<Vec<Box<dyn SortedSource + 'a>>>;

    /// The record prefixes of the state's write batch when staged writes can be kept as its
    /// records and committed as they are (`format::write_batch`); `None` where a commit must
    /// stage write by write (in memory; upgrade mode, whose writes also delete legacy copies).
    fn batch_records(&self) -> Result<Option<RecordPrefixes>> {
        Ok(None)
    }

    /// Adds one staged write to `batch`, the commit's writes in the state's own form. Building it
    /// while writes are staged makes a commit one write (Kafka's `RocksDBTransactionBuffer`
    /// keeps a `WriteBatch` the same way). State without a batch form ignores it.
    fn stage(&self, _batch: &mut WriteBatch, _key: &[u8], _value: Option<&[u8]>) -> Result<()> {
        Ok(())
    }

    /// The offset's records as a batch of their own, for a commit whose writes are already a
    /// serialized batch (`batch_records`): they are appended to it before RocksDB copies it.
    /// Only state with `batch_records` has them.
    fn offset_batch(&self, _offset: OffsetWrite<'_>) -> Result<WriteBatch> {
        Err(Error::InvalidState(
            "offset records asked of state without a batch form".into(),
        ))
    }

    /// Applies a commit and the offset atomically: `batch` as `stage` built it, or `writes` (the
    /// same writes, in key order) for state without a batch form.
    fn commit_staged(
        &self,
        _batch: WriteBatch,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: Option<OffsetWrite<'_>>,
    ) -> Result<()> {
        self.apply(writes, offset)
    }

    /// Applies `writes` and the offset in one atomic batch.
    fn apply(
        &self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: Option<OffsetWrite<'_>>,
    ) -> Result<()>;

    /// Applies many writes at once, bypassing the write-ahead log and memtables: `fill` hands
    /// its writes to the sink given (strictly increasing keys), which writes them into a table
    /// file at `file` (a path on the store's file system), then ingested in one atomic step.
    /// Returns the number of writes, or `None` (and never calls `fill`) where the state cannot
    /// (in memory; upgrade mode, whose writes also delete legacy copies): apply batches then.
    fn ingest_sorted(
        &self,
        _file: &Path,
        _fill: &mut dyn FnMut(&mut WriteSink<'_>) -> Result<()>,
    ) -> Result<Option<u64>> {
        Ok(None)
    }

    fn committed_offset(&self, key: &str) -> Result<Option<i64>>;

    /// `committed_offset` as a crash now would leave it: what RocksDB persisted (without a WAL,
    /// memtables are skipped).
    fn persisted_offset(&self, key: &str) -> Result<Option<i64>> {
        self.committed_offset(key)
    }

    fn approximate_num_entries(&self) -> Result<u64>;

    /// Makes everything applied so far durable (memtable flush for RocksDB).
    fn flush(&self) -> Result<()>;

    /// `flush`, returning at once when `wait` is false (RocksDB flushes in the background).
    fn flush_memtables(&self, wait: bool) -> Result<()> {
        let _ = wait;
        self.flush()
    }

    /// Compacts the stored data now (RocksDB), running compaction filters such as TTL's.
    fn compact(&self) -> Result<()> {
        Ok(())
    }

    /// Called before the close's last writes and flush (RocksDB: the flush then starts a WAL
    /// file of its own rather than reuse a recycled one).
    fn prepare_close(&self) -> Result<()> {
        Ok(())
    }

    /// Closes the state after the close's last writes and flush (RocksDB: also removes the
    /// WAL files it kept only to recycle).
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }

    /// Captures the state as it is now at `dir` (which must not exist): RocksDB's checkpoint,
    /// its table files hard links of the store's, its memtables flushed first. State without
    /// files (in memory) cannot.
    fn checkpoint(&self, dir: &Path) -> Result<()> {
        Err(Error::InvalidState(format!(
            "state in memory has no files to capture at {}",
            dir.display()
        )))
    }

    /// `checkpoint` of the state `persisted_offset` names: without a WAL, the table files as
    /// they are (memtables not flushed).
    fn checkpoint_persisted(&self, dir: &Path) -> Result<()> {
        self.checkpoint(dir)
    }

    /// Records the KIP-1035 OPEN/CLOSED marker where the state is persistent.
    fn set_status(&self, _status: i64) -> Result<()> {
        Ok(())
    }

    /// RocksDB's memory and files (nothing for state without them).
    fn memory(&self) -> Result<StoreMemory> {
        Ok(StoreMemory::default())
    }

    /// Bytes of the memtables taking writes (RocksDB).
    fn active_memtable_bytes(&self) -> usize {
        0
    }
}

//! Uncommitted writes beyond `statestore.uncommitted.max.bytes` (the KIP-892 seed's secondary
//! store with a commit marker). Staged writes move here when the in-memory overlay grows too big.
//! A spilled commit first makes the spill durable and writes a marker, then copies the spill into
//! the store in bounded batches with the offset in the last one. On open, a spill with a marker is
//! a commit that was interrupted and is finished; a spill without one is discarded.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DBRawIterator, Options, WriteBatch, WriteOptions, DB,
};

use crate::error::{Error, Result};
use crate::store::committed::WriteSink;
use crate::store::key_range::{Direction, KeyRange};
use crate::store::merge::SortedSource;
use crate::store::overlay::Overlay;
use crate::store::rocks::{checked, range_iterator, step};
use crate::store::rocks_options::RocksConfig;

const WRITES_CF: &str = "writes";
const MARKER_CF: &str = "commit";
const MARKER_KEY: &[u8] = b"offset";
const TAG_DELETE: u8 = 0;
const TAG_PUT: u8 = 1;
/// Bytes of spilled writes per RocksDB write: one write of the whole overlay (64 MiB by default)
/// would hold a second copy of it and land in one memtable of that size.
const ABSORB_BATCH_BYTES: usize = 4 << 20;

pub struct Spill {
    db: DB,
    path: PathBuf,
}

fn decode_tagged(bytes: &[u8]) -> Result<Option<&[u8]>> {
    match bytes.split_first() {
        Some((&TAG_PUT, value)) => Ok(Some(value)),
        Some((&TAG_DELETE, [])) => Ok(None),
        _ => Err(Error::Corrupted(
            "spilled uncommitted write has an unknown tag".into(),
        )),
    }
}

/// One batch of spilled writes, in key order: `(key, Some(value))` or `(key, None)` for deletes.
pub type SpilledWrites = Vec<(Vec<u8>, Option<Vec<u8>>)>;

impl Spill {
    pub fn exists(path: &Path) -> bool {
        path.join("CURRENT").exists()
    }

    /// Opens (creating if needed) with the process's memory budget (`config`).
    pub fn open(path: &Path, config: &RocksConfig) -> Result<Self> {
        let families =
            [WRITES_CF, MARKER_CF].map(|f| ColumnFamilyDescriptor::new(f, config.spill_options()));
        let db = DB::open_cf_descriptors(&config.spill_options(), path, families)?;
        Ok(Self {
            db,
            path: path.to_path_buf(),
        })
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| Error::Storage(format!("spill column family {name} is not open")))
    }

    /// Copies the overlay's writes into the spill (newer writes replace spilled ones), in writes
    /// of about `ABSORB_BATCH_BYTES`: a failure part way leaves a part spilled that the overlay,
    /// still whole, overrides. No WAL: uncommitted writes need not survive a crash, and
    /// `mark_commit` flushes before the marker.
    pub fn absorb(&self, overlay: &Overlay) -> Result<()> {
        let cf = self.cf(WRITES_CF)?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        let mut batch = WriteBatch::default();
        let mut tagged = Vec::new();
        // In key order: RocksDB's memtable inserts sorted keys faster.
        for (key, value) in overlay.iter() {
            tagged.clear();
            match value {
                Some(v) => {
                    tagged.push(TAG_PUT);
                    tagged.extend_from_slice(v);
                }
                None => tagged.push(TAG_DELETE),
            }
            batch.put_cf(cf, key, &tagged);
            if batch.size_in_bytes() >= ABSORB_BATCH_BYTES {
                self.db.write_opt(std::mem::take(&mut batch), &write)?;
            }
        }
        self.db.write_opt(batch, &write)?;
        Ok(())
    }

    /// `None`: not spilled; `Some(None)`: spilled delete; `Some(Some(v))`: spilled value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        match self.db.get_pinned_cf(self.cf(WRITES_CF)?, key)? {
            None => Ok(None),
            Some(bytes) => Ok(Some(decode_tagged(&bytes)?.map(<[u8]>::to_vec))),
        }
    }

    pub fn source<'a>(
        &'a self,
        range: &KeyRange,
        direction: Direction,
    ) -> Result<Box<dyn SortedSource + 'a>> {
        let iter = range_iterator(&self.db, self.cf(WRITES_CF)?, range, direction, true)?;
        Ok(Box::new(SpillSource { iter, direction }))
    }

    /// Makes the spilled writes durable and records that they are committed at `offset`.
    pub fn mark_commit(&self, offset: Option<i64>) -> Result<()> {
        self.db.flush_cf(self.cf(WRITES_CF)?)?;
        let mut marker = vec![u8::from(offset.is_some())];
        marker.extend_from_slice(&offset.unwrap_or(0).to_be_bytes());
        let mut write = WriteOptions::default();
        write.set_sync(true);
        self.db
            .put_cf_opt(self.cf(MARKER_CF)?, MARKER_KEY, marker, &write)?;
        Ok(())
    }

    /// The offset of a commit that was marked: `Some(offset)`; `None` when never marked.
    pub fn commit_marker(&self) -> Result<Option<Option<i64>>> {
        let Some(bytes) = self.db.get_pinned_cf(self.cf(MARKER_CF)?, MARKER_KEY)? else {
            return Ok(None);
        };
        match bytes.split_first() {
            Some((&has, rest)) if rest.len() == 8 && has <= 1 => {
                let offset = i64::from_be_bytes(
                    rest.try_into()
                        .map_err(|_| Error::Corrupted("marker".into()))?,
                );
                Ok(Some((has == 1).then_some(offset)))
            }
            _ => Err(Error::Corrupted(format!(
                "commit marker in {} is malformed",
                self.path.display()
            ))),
        }
    }

    /// Passes every spilled write to `visit`, in key order.
    pub fn for_each(&self, visit: &mut WriteSink<'_>) -> Result<()> {
        let mut iter = self.read_once()?;
        while let Some((key, tagged)) = iter.item() {
            visit((key, decode_tagged(tagged)?))?;
            iter.next();
        }
        iter.status()?;
        Ok(())
    }

    /// An iterator over every spilled write for a commit's one pass: its blocks are not cached,
    /// where they would only push the stores' own blocks out of the budget's shared cache.
    fn read_once(&self) -> Result<DBRawIterator<'_>> {
        let all = KeyRange::all();
        range_iterator(
            &self.db,
            self.cf(WRITES_CF)?,
            &all,
            Direction::Forward,
            false,
        )
    }

    /// A path inside the spill's directory for a file of the commit (deleted with the spill).
    pub fn scratch_file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Calls `apply` with consecutive batches of about `batch_bytes` of spilled writes.
    pub fn for_each_batch(
        &self,
        batch_bytes: usize,
        mut apply: impl FnMut(&SpilledWrites) -> Result<()>,
    ) -> Result<()> {
        let mut iter = self.read_once()?;
        let mut batch: SpilledWrites = Vec::new();
        let mut bytes = 0;
        while let Some((key, tagged)) = iter.item() {
            let value = decode_tagged(tagged)?.map(<[u8]>::to_vec);
            bytes += key.len() + tagged.len();
            batch.push((key.to_vec(), value));
            if bytes >= batch_bytes {
                apply(&batch)?;
                batch.clear();
                bytes = 0;
            }
            iter.next();
        }
        iter.status()?;
        if !batch.is_empty() {
            apply(&batch)?;
        }
        Ok(())
    }

    /// Number of spilled writes (RocksDB's estimate).
    pub fn approximate_len(&self) -> Result<u64> {
        Ok(self
            .db
            .property_int_value_cf(self.cf(WRITES_CF)?, rocksdb::properties::ESTIMATE_NUM_KEYS)?
            .unwrap_or(0))
    }

    /// Deletes the spill and its directory.
    pub fn destroy(self) -> Result<()> {
        let path = self.path.clone();
        drop(self.db);
        DB::destroy(&Options::default(), &path)?;
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        Ok(())
    }
}

struct SpillSource<'a> {
    iter: DBRawIterator<'a>,
    direction: Direction,
}

impl SortedSource for SpillSource<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.iter.key()
    }
    fn value(&self) -> Result<Option<Cow<'_, [u8]>>> {
        match self.iter.value() {
            Some(bytes) => Ok(decode_tagged(bytes)?.map(Cow::Borrowed)),
            None => Ok(None),
        }
    }
    fn advance(&mut self) -> Result<()> {
        step(&mut self.iter, self.direction)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.iter.seek(target);
        checked(&self.iter)
    }
}

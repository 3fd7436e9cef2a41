//! Uncommitted writes of a transactional store: staged puts (`Some`) and deletes (`None`) with
//! the byte accounting `statestore.uncommitted.max.bytes` is checked against.
//!
//! Writes are appended to one buffer as the records of a RocksDB write batch
//! (`format::write_batch`), in the order first staged: a commit hands the buffer to RocksDB in one
//! copy, and a key costs no allocation of its own to stage or to free. A hash table of record
//! indexes finds a key's write: a stream processor's reads and writes are point lookups, and a
//! B-tree's key comparisons made them the store's hottest code. An overwrite of a value by one
//! of the same length writes over it in place; any other overwrite appends a new record and
//! leaves the old one dead, to be dropped when dead records outweigh live ones and when the
//! batch is committed (overwritten values never reach RocksDB).
//!
//! Key order is built only when asked for: a range read builds an ordered key index once and
//! later writes keep it up to date; an ordered walk without one sorts. Spills walk the overlay
//! in key order, and so does a commit after overwrites, of keys staged far from key order, or
//! whose order a reader sorted already: the memtable inserts sorted keys about twice as fast.

use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::OnceLock;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::error::Result;
use crate::format::write_batch::{self, RecordPrefixes, RecordSpan};
use crate::store::committed::Write;
use crate::store::key_order::key_order;
use crate::store::key_range::{Direction, KeyRange};

/// Dead record bytes tolerated before the batch is rewritten without them (besides at least as
/// many dead bytes as live ones).
const DEAD_BYTES_SLACK: usize = 1 << 20;
/// A batch buffer up to this size is kept for the next transaction; a larger one is freed.
const KEPT_CAPACITY: usize = 256 * 1024;
/// Room left after the staged records for a commit's offset records (`with_tail`), so that
/// appending them does not move a batch sized for the transaction.
const TAIL_ROOM: usize = 256;
/// At most this many bytes of batch (and this many bytes / 64 writes) are reserved ahead for a
/// transaction like the last one.
const RESERVED_AHEAD: usize = 16 << 20;
/// Memory of one key in the ordered index besides its bytes: its `Vec` (24 bytes) in a B-tree
/// node about two thirds full, and its heap block's header and rounding.
const ORDERED_KEY_OVERHEAD: usize = 64;

#[derive(Debug, Default)]
pub struct Overlay {
    /// The staged writes as write batch records, in the order first staged, dead ones included.
    batch: Vec<u8>,
    prefixes: RecordPrefixes,
    /// Each staged key's latest record, in the order first staged.
    records: Vec<RecordSpan>,
    /// Indexes into `records`, hashed by key.
    index: HashTable<u32>,
    hasher: RandomState,
    /// The staged keys in order, once a range read needed them.
    ordered: OnceLock<BTreeSet<Vec<u8>>>,
    /// Indexes into `records` in key order, once asked: a commit walks its writes in key order
    /// more than once (the undo, the changelog, the batch), and sorts them once.
    sorted: OnceLock<Vec<u32>>,
    /// Key and value lengths of the live writes (Kafka's uncommitted bytes).
    bytes: usize,
    /// Lengths of the staged keys (the ordered index holds a copy of each).
    key_bytes: usize,
    /// Bytes of `batch` in records an overwrite replaced.
    dead: usize,
    /// Keys staged (first) right after a larger key: how far staging order is from key order.
    descents: usize,
    /// Writes and batch bytes of the last transaction: a transaction's first write makes room
    /// for as many (puts one at a time then do not grow the buffers step by step).
    last_size: (usize, usize),
}

fn key_of<'a>(batch: &'a [u8], record: &RecordSpan) -> &'a [u8] {
    &batch[record.key..record.key_end]
}

fn value_of<'a>(batch: &'a [u8], record: &RecordSpan) -> Option<&'a [u8]> {
    record.is_put.then(|| &batch[record.value..record.end])
}

fn write_bytes(key: &[u8], value: Option<&[u8]>) -> usize {
    key.len() + value.map_or(0, <[u8]>::len)
}

impl Overlay {
    /// Writes kept as records of the column family whose record prefixes are given.
    pub fn new(prefixes: RecordPrefixes) -> Self {
        Self {
            prefixes,
            ..Self::default()
        }
    }

    /// Makes room for `writes` more keys (not their bytes), so a large batch of puts does not
    /// grow the index step by step.
    pub fn reserve(&mut self, writes: usize) {
        let Self {
            batch,
            records,
            index,
            hasher,
            ..
        } = self;
        records.reserve(writes);
        index.reserve(writes, |&j| {
            hasher.hash_one(key_of(batch, &records[j as usize]))
        });
    }

    /// Stages a put (`Some`) or a delete (`None`); returns whether `key` was not staged before.
    pub fn stage(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<bool> {
        if self.batch.is_empty() {
            let (writes, bytes) = self.last_size;
            self.start_batch(bytes.min(RESERVED_AHEAD));
            self.reserve(writes.min(RESERVED_AHEAD / 64));
        }
        let Self {
            batch,
            prefixes,
            records,
            index,
            hasher,
            ..
        } = self;
        let hash = hasher.hash_one(key);
        let found = index
            .find(hash, |&i| key_of(batch, &records[i as usize]) == key)
            .copied();
        let Some(i) = found else {
            let i = u32::try_from(records.len()).map_err(|_| {
                crate::error::Error::InvalidArgument("over 4 billion staged writes".into())
            })?;
            if records.last().is_some_and(|last| key_of(batch, last) > key) {
                self.descents += 1;
            }
            let record = write_batch::push_record(batch, prefixes, key, value)?;
            records.push(record);
            index.insert_unique(hash, i, |&j| {
                hasher.hash_one(key_of(batch, &records[j as usize]))
            });
            self.bytes += write_bytes(key, value);
            self.key_bytes += key.len();
            if let Some(ordered) = self.ordered.get_mut() {
                ordered.insert(key.to_vec());
            }
            self.sorted.take();
            return Ok(true);
        };
        let old = records[i as usize];
        let old_value = value_of(batch, &old);
        self.bytes = self.bytes - write_bytes(key, old_value) + write_bytes(key, value);
        match value {
            Some(new) if old.is_put && new.len() == old.end - old.value => {
                batch[old.value..old.end].copy_from_slice(new);
            }
            _ => {
                records[i as usize] = write_batch::push_record(batch, prefixes, key, value)?;
                self.dead += old.end - old.start;
                if self.dead > DEAD_BYTES_SLACK && self.dead > self.batch.len() - self.dead {
                    self.drop_dead();
                }
            }
        }
        Ok(false)
    }

    /// Starts an empty batch in the (empty) buffer, with room for `bytes` of records.
    fn start_batch(&mut self, bytes: usize) {
        self.batch
            .reserve(write_batch::HEADER_LEN + bytes + TAIL_ROOM);
        self.batch.resize(write_batch::HEADER_LEN, 0);
    }

    /// Rewrites the batch without its dead records, in the order first staged.
    fn drop_dead(&mut self) {
        let order: Vec<u32> = (0..self.records.len() as u32).collect();
        let (batch, records) = self.rewritten(&order);
        self.batch = batch;
        self.records = records;
        self.dead = 0;
    }

    /// The live records in `order` as a new batch, and where each landed.
    fn rewritten(&self, order: &[u32]) -> (Vec<u8>, Vec<RecordSpan>) {
        let mut batch = write_batch::new_batch(self.batch.len() - self.dead + TAIL_ROOM);
        let mut records = vec![RecordSpan::default(); self.records.len()];
        for &i in order {
            let i = i as usize;
            let old = &self.records[i];
            records[i] = old.moved_to(batch.len());
            batch.extend_from_slice(&self.batch[old.start..old.end]);
        }
        (batch, records)
    }

    /// Whether the keys were first staged in about key order: at most one in four followed a
    /// larger key. RocksDB's memtable takes runs of ascending keys (a processor's, in Arrow's
    /// sort of its users) about as fast as sorted ones; shuffled keys took 1.6-2x as long to
    /// commit (`benches/commit_order.py`).
    fn mostly_ascending(&self) -> bool {
        self.descents * 4 <= self.records.len()
    }

    /// The staged writes as one serialized write batch: the buffer as staged when every record
    /// is live and in about key order (in key order if a reader sorted them already: a copy
    /// then costs less than the memtable's searches at each descent), else rewritten once in
    /// key order without the dead records (the buffer then stays so: asking again, as a
    /// segmented commit's intent and then its apply do, copies nothing).
    pub fn write_batch(&mut self) -> Result<&[u8]> {
        if self.batch.is_empty() {
            self.start_batch(0);
        }
        let sorted_already = self.descents > 0 && self.sorted.get().is_some();
        if self.dead > 0 || !self.mostly_ascending() || sorted_already {
            let (batch, records) = self.rewritten(self.key_order());
            self.batch = batch;
            self.records = records;
            self.dead = 0;
            self.descents = 0;
        }
        write_batch::set_count(&mut self.batch, self.records.len())?;
        Ok(&self.batch)
    }

    /// `write_batch` with the records of `tail` (a serialized batch) after the staged ones, passed
    /// to `f`; the overlay keeps only its staged writes. A commit's offset records go in this
    /// way before RocksDB copies the batch: appended to RocksDB's copy they reallocated it, a
    /// second copy of the whole commit into fresh pages (a page fault per 4 KiB committed).
    pub fn with_tail<T>(&mut self, tail: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        let staged = self.write_batch()?.len();
        let out = write_batch::append(&mut self.batch, tail).map(|()| f(&self.batch));
        self.batch.truncate(staged);
        write_batch::set_count(&mut self.batch, self.records.len())?;
        out
    }

    /// `None`: not staged; `Some(None)`: staged delete; `Some(Some(v))`: staged value.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        if self.records.is_empty() {
            // Nothing staged, the usual state of a read between commits: no hashing.
            return None;
        }
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |&i| {
                key_of(&self.batch, &self.records[i as usize]) == key
            })
            .map(|&i| value_of(&self.batch, &self.records[i as usize]))
    }

    /// Sum of key and value lengths of the staged writes (Kafka's uncommitted bytes).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Memory the staged writes take: the batch (dead records included), its index, and the
    /// key order once built (the ordered index's copies of the keys, the sorted positions).
    pub fn memory(&self) -> usize {
        if self.records.is_empty() {
            return 0;
        }
        let records = self.records.len();
        let ordered = self
            .ordered
            .get()
            .map_or(0, |_| self.key_bytes + records * ORDERED_KEY_OVERHEAD);
        let sorted = self
            .sorted
            .get()
            .map_or(0, |_| records * std::mem::size_of::<u32>());
        self.batch.len()
            + records * (std::mem::size_of::<RecordSpan>() + std::mem::size_of::<u32>() + 1)
            + ordered
            + sorted
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Forgets every staged write, keeping a small buffer for the next transaction.
    pub fn clear(&mut self) {
        if !self.records.is_empty() {
            self.last_size = (self.records.len(), self.batch.len() - self.dead);
        }
        if self.batch.capacity() > KEPT_CAPACITY {
            self.batch = Vec::new();
            self.records = Vec::new();
            self.index = HashTable::new();
        } else {
            self.batch.clear();
            self.records.clear();
            self.index.clear();
        }
        self.ordered = OnceLock::new();
        self.sorted = OnceLock::new();
        self.bytes = 0;
        self.key_bytes = 0;
        self.dead = 0;
        self.descents = 0;
    }

    /// Staged writes in the order they were first staged (for readers that need no order).
    pub fn writes(&self) -> impl Iterator<Item = Write<'_>> {
        self.records
            .iter()
            .map(|r| (key_of(&self.batch, r), value_of(&self.batch, r)))
    }

    /// Staged writes in key order.
    pub fn iter(&self) -> impl Iterator<Item = Write<'_>> {
        self.key_order().iter().map(|&i| {
            let record = &self.records[i as usize];
            (key_of(&self.batch, record), value_of(&self.batch, record))
        })
    }

    /// Indexes into `records` in key order (sorted once per set of staged keys).
    fn key_order(&self) -> &[u32] {
        self.sorted.get_or_init(|| {
            let keys: Vec<&[u8]> = (self.records.iter())
                .map(|record| key_of(&self.batch, record))
                .collect();
            key_order(&keys)
        })
    }

    /// Staged writes inside `range`, in `direction` order.
    pub fn range<'a>(
        &'a self,
        range: &KeyRange,
        direction: Direction,
    ) -> Box<dyn Iterator<Item = Write<'a>> + 'a> {
        if range.is_empty() {
            return Box::new(std::iter::empty());
        }
        let lower = range
            .lower
            .as_ref()
            .map_or(Bound::Unbounded, |l| Bound::Included(l.clone()));
        let upper = range
            .upper
            .as_ref()
            .map_or(Bound::Unbounded, |u| Bound::Excluded(u.clone()));
        let ordered = self
            .ordered
            .get_or_init(|| self.writes().map(|(k, _)| k.to_vec()).collect());
        let keys = ordered.range::<Vec<u8>, _>((lower, upper));
        match direction {
            Direction::Forward => Box::new(self.in_order(keys)),
            Direction::Reverse => Box::new(self.in_order(keys.rev())),
        }
    }

    /// The writes of `keys`, which are staged keys from the ordered index.
    fn in_order<'a>(
        &'a self,
        keys: impl Iterator<Item = &'a Vec<u8>> + 'a,
    ) -> impl Iterator<Item = Write<'a>> + 'a {
        keys.filter_map(|k| self.get(k).map(|v| (k.as_slice(), v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_follows_overwrites_and_deletes() {
        let mut o = Overlay::default();
        assert!(o.stage(b"k1", Some(b"12345")).unwrap());
        assert_eq!(o.bytes(), 7);
        assert!(!o.stage(b"k1", Some(b"1")).unwrap());
        assert_eq!(o.bytes(), 3);
        o.stage(b"k1", None).unwrap();
        assert_eq!(o.bytes(), 2);
        assert_eq!(o.get(b"k1"), Some(None));
        assert_eq!(o.get(b"k2"), None);
        o.clear();
        assert_eq!((o.bytes(), o.len()), (0, 0));
    }

    #[test]
    fn range_respects_bounds_and_direction() {
        let mut o = Overlay::default();
        for k in [b"a", b"b", b"c", b"d"] {
            o.stage(k, Some(k)).unwrap();
        }
        let r = KeyRange::inclusive(Some(b"b"), Some(b"c"));
        let fwd: Vec<_> = o
            .range(&r, Direction::Forward)
            .map(|(k, _)| k.to_vec())
            .collect();
        let rev: Vec<_> = o
            .range(&r, Direction::Reverse)
            .map(|(k, _)| k.to_vec())
            .collect();
        assert_eq!(fwd, vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(rev, vec![b"c".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn key_order_survives_writes_after_a_range_read() {
        let keys = |o: &Overlay| o.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>();
        let mut o = Overlay::default();
        for k in [b"d", b"b"] {
            o.stage(k, Some(k)).unwrap();
        }
        assert_eq!(keys(&o), vec![b"b".to_vec(), b"d".to_vec()]);
        assert_eq!(o.range(&KeyRange::all(), Direction::Forward).count(), 2);
        // The ordered index now exists; new keys join it, overwrites and deletes keep theirs.
        o.stage(b"a", Some(b"1")).unwrap();
        o.stage(b"c", None).unwrap();
        o.stage(b"d", Some(b"2")).unwrap();
        let all: Vec<_> = o
            .range(&KeyRange::all(), Direction::Forward)
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(
            all,
            vec![
                (b"a".to_vec(), Some(b"1".to_vec())),
                (b"b".to_vec(), Some(b"b".to_vec())),
                (b"c".to_vec(), None),
                (b"d".to_vec(), Some(b"2".to_vec())),
            ]
        );
        assert_eq!(
            keys(&o),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        o.clear();
        o.stage(b"z", None).unwrap();
        assert_eq!(o.range(&KeyRange::all(), Direction::Reverse).count(), 1);
    }

    #[test]
    fn keys_staged_far_from_key_order_or_walked_in_order_are_committed_sorted() {
        let staged = |keys: [&[u8]; 4]| {
            let mut o = Overlay::default();
            for key in keys {
                o.stage(key, Some(b"v")).unwrap();
            }
            o
        };
        let puts = |keys: [&[u8]; 4]| rocksdb_batch(&keys.map(|k| (k, Some(&b"v"[..]))));
        let runs: [&[u8]; 4] = [b"c", b"d", b"a", b"b"];
        let sorted: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
        // Runs of ascending keys (one descent in four keys) are handed over as staged.
        assert_eq!(staged(runs).write_batch().unwrap(), puts(runs));
        // The same runs once a reader walked them in key order (the changelog, the undo): that
        // order, copied.
        let mut walked = staged(runs);
        assert_eq!(walked.iter().count(), 4);
        assert_eq!(walked.write_batch().unwrap(), puts(sorted));
        // Shuffled (two descents in four keys): rewritten in key order.
        let mut shuffled = staged([b"d", b"b", b"c", b"a"]);
        assert_eq!(shuffled.write_batch().unwrap(), puts(sorted));
    }

    /// The batch RocksDB would build from `writes`, in that order.
    fn rocksdb_batch(writes: &[(&[u8], Option<&[u8]>)]) -> Vec<u8> {
        let mut batch = rocksdb::WriteBatch::default();
        for (k, v) in writes {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            }
        }
        batch.data().to_vec()
    }

    #[test]
    fn a_tail_is_committed_after_the_staged_writes_and_then_forgotten() {
        let mut o = Overlay::default();
        o.stage(b"a", Some(b"1")).unwrap();
        o.stage(b"b", None).unwrap();
        let tail = rocksdb_batch(&[(b"offset", Some(b"7"))]);
        let staged = o.batch.as_ptr();
        let (committed, moved) = o
            .with_tail(&tail, |bytes| (bytes.to_vec(), bytes.as_ptr() != staged))
            .unwrap();
        assert_eq!(
            committed,
            rocksdb_batch(&[(b"a", Some(b"1")), (b"b", None), (b"offset", Some(b"7"))])
        );
        assert!(!moved, "the tail went into the room left for it");
        assert_eq!(
            o.write_batch().unwrap(),
            rocksdb_batch(&[(b"a", Some(b"1")), (b"b", None)])
        );
        o.stage(b"c", Some(b"3")).unwrap();
        assert_eq!(o.writes().count(), 3);
    }

    #[test]
    fn the_batch_holds_the_latest_writes() {
        let mut o = Overlay::default();
        o.stage(b"a", None).unwrap();
        o.stage(b"b", Some(b"1")).unwrap();
        // Same length: written over in place, the batch is the buffer as staged.
        o.stage(b"b", Some(b"2")).unwrap();
        let staged = o.batch.as_ptr();
        assert_eq!(o.write_batch().unwrap().as_ptr(), staged);
        assert_eq!(
            o.write_batch().unwrap(),
            rocksdb_batch(&[(b"a", None), (b"b", Some(b"2"))])
        );
        // Another length or a delete: rewritten in key order without the dead records.
        o.stage(b"a", Some(b"long value")).unwrap();
        o.stage(b"c", Some(b"3")).unwrap();
        o.stage(b"b", None).unwrap();
        let expected = rocksdb_batch(&[
            (b"a", Some(b"long value")),
            (b"b", None),
            (b"c", Some(b"3")),
        ]);
        assert_eq!(o.write_batch().unwrap(), expected);
        // Rewritten once: asking again hands out the same buffer, which reads see too.
        let rewritten = o.batch.as_ptr();
        assert_eq!(o.write_batch().unwrap().as_ptr(), rewritten);
        assert_eq!(o.write_batch().unwrap(), expected);
        assert_eq!(o.get(b"b"), Some(None));
        o.stage(b"0", Some(b"first")).unwrap();
        assert_eq!(o.get(b"c"), Some(Some(&b"3"[..])));
        assert_eq!(o.len(), 4);
        o.stage(b"0", None).unwrap();
        assert_eq!(o.get(b"a"), Some(Some(&b"long value"[..])));
        assert_eq!(o.bytes(), 1 + 10 + 1 + 1 + 1 + 1);
        o.clear();
        assert!(o.is_empty());
        assert_eq!(o.write_batch().unwrap(), rocksdb_batch(&[]));
        // The next transaction starts in the kept buffer, with room reserved for the last one.
        o.stage(b"d", Some(b"4")).unwrap();
        assert_eq!(
            o.write_batch().unwrap(),
            rocksdb_batch(&[(b"d", Some(b"4"))])
        );
    }

    #[test]
    fn memory_counts_the_key_order_once_built() {
        let mut o = Overlay::default();
        let key = |i: u32| format!("a fairly long key number {i:08}").into_bytes();
        for i in (0..1_000).rev() {
            o.stage(&key(i), Some(b"v")).unwrap();
        }
        let staged = o.memory();
        assert_eq!(o.iter().count(), 1_000); // the sorted positions
        let sorted = o.memory();
        assert_eq!(sorted - staged, 1_000 * 4);
        assert_eq!(o.range(&KeyRange::all(), Direction::Forward).count(), 1_000);
        let ordered = o.memory();
        // At least each key's bytes and its Vec, in the ordered index's copies.
        assert!(
            ordered - sorted >= 1_000 * (key(0).len() + 24),
            "{ordered} - {sorted}"
        );
        o.stage(&key(1_000), Some(b"v")).unwrap(); // joins the ordered index
        assert!(o.memory() - ordered >= key(0).len() + 24);
        o.clear();
        o.stage(b"k", Some(b"v")).unwrap();
        assert!(o.memory() < 100, "{}", o.memory());
    }

    #[test]
    fn dead_records_are_dropped_as_they_pile_up() {
        let mut o = Overlay::default();
        let mut value = Vec::new();
        for i in 0..5_000u32 {
            // A new length every time: each overwrite leaves a dead record.
            value.resize(500 + (i % 2) as usize, b'x');
            o.stage(b"k", Some(&value)).unwrap();
            o.stage(&i.to_be_bytes(), Some(b"v")).unwrap();
        }
        assert!(
            o.memory() < 2 * DEAD_BYTES_SLACK + 5_000 * 100,
            "{}",
            o.memory()
        );
        assert_eq!(o.get(b"k"), Some(Some(&value[..])));
        assert_eq!(o.get(&4_999u32.to_be_bytes()), Some(Some(&b"v"[..])));
        assert_eq!(o.len(), 5_001);
        // First-staged order if the last overwrite dropped the dead records, else key order.
        let mut expected: Vec<(&[u8], Option<&[u8]>)> = vec![(b"k", Some(&value))];
        let keys: Vec<[u8; 4]> = (0..5_000u32).map(u32::to_be_bytes).collect();
        expected.extend(keys.iter().map(|k| (&k[..], Some(&b"v"[..]))));
        let staged_order = rocksdb_batch(&expected);
        expected.sort();
        let batch = o.write_batch().unwrap().to_vec();
        assert!(batch == staged_order || batch == rocksdb_batch(&expected));
    }
}

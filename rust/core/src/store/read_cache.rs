//! Recently committed values of a RocksDB store, so the reads of a read-modify-write loop (the
//! common stream-processing pattern) skip RocksDB. Kafka Streams puts a caching layer in front of
//! its stores for the same reason. Only committed state is cached, so it never needs undoing.
//!
//! Two generations bound the memory: inserts go to the young one; when it holds half the
//! capacity it becomes the old one and the previous old one is dropped. A generation keeps its
//! entries' bytes in chunks it appends to, found through a hash table of positions: no allocation
//! per entry, and an entry costs its key and value and ~40 bytes more (a hash map of two vectors
//! cost ~128: a quarter as many small entries fitted). A replaced or removed entry's bytes stay
//! in its chunk (and charged) until they outweigh the live entries' (the generation then copies
//! the live ones to new chunks) or the generation is dropped.
//!
//! Admission: until the young generation first fills, every value read from RocksDB is cached
//! (a store whose reads fit keeps them all), unless reads stop hitting: once a quarter of the
//! capacity is taken with fewer than one lookup in `MIN_HIT_SHARE` a hit, reads are random over
//! more keys than fit. From then on a key is cached on its second miss in a while (a doorkeeper
//! of two bits per key hash in a bitset cleared as it fills, as TinyLFU's doorkeeper): random
//! reads of a store far larger than the cache no longer copy and hash every value only to drop
//! it unread, and the memory stays with RocksDB's block cache.

use std::cell::Cell;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;
use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use crate::store::committed::Write;
use crate::store::memory_budget::MemoryBudget;

/// An entry's header in its chunk: the key's length and the value's (`ABSENT`: known absent).
const HEADER: usize = 8;
const ABSENT: u32 = u32::MAX;
/// Bytes charged per entry besides key and value: its header and its slot in the hash table (16
/// bytes, in a table between 44% and 88% full).
const ENTRY_OVERHEAD: usize = HEADER + 32;
/// A generation's chunks hold this many bytes (less for a small cache); an entry over a quarter
/// of a chunk gets a chunk of its own.
const CHUNK_BYTES: usize = 64 << 10;
/// Bytes of replaced and removed entries a generation keeps before it copies its live entries
/// to new chunks (besides at least as many as the live ones).
const DEAD_BYTES_SLACK: usize = 1 << 20;
/// While every read is admitted, at least one lookup in this many must hit the cache.
const MIN_HIT_SHARE: u64 = 8;
/// Doorkeeper bits per byte of capacity (one per 64 bytes: four per cacheable entry of 100-byte
/// values), between these bounds.
const CAPACITY_BYTES_PER_SEEN_BIT: usize = 64;
const SEEN_BITS: std::ops::RangeInclusive<usize> = (1 << 12)..=(1 << 22);

/// Where an entry is: its key's hash (compared before the bytes, and the table's rehash), chunk
/// and offset.
#[derive(Clone, Copy)]
struct Slot {
    hash: u64,
    chunk: u32,
    offset: u32,
}

/// One generation: entries appended to chunks, indexed by key.
#[derive(Default)]
struct Generation {
    chunks: Vec<Vec<u8>>,
    index: HashTable<Slot>,
    /// Bytes charged: every entry in the chunks, replaced and removed ones included.
    bytes: usize,
    /// Bytes of the entries the index points to.
    live: usize,
}

fn length_at(chunk: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([chunk[at], chunk[at + 1], chunk[at + 2], chunk[at + 3]])
}

fn entry_at<'a>(chunks: &'a [Vec<u8>], slot: &Slot) -> (&'a [u8], Option<&'a [u8]>) {
    let chunk = &chunks[slot.chunk as usize];
    let at = slot.offset as usize;
    let key_len = length_at(chunk, at) as usize;
    let value_len = length_at(chunk, at + 4);
    let key = &chunk[at + HEADER..at + HEADER + key_len];
    let value_at = at + HEADER + key_len;
    let value = (value_len != ABSENT).then(|| &chunk[value_at..value_at + value_len as usize]);
    (key, value)
}

/// Whether `slot` holds `key` (of hash `hash`): the hash first, the bytes only if it matches.
fn holds<'a>(chunks: &'a [Vec<u8>], hash: u64, key: &'a [u8]) -> impl Fn(&Slot) -> bool + 'a {
    move |slot| slot.hash == hash && entry_at(chunks, slot).0 == key
}

fn cost_at(chunks: &[Vec<u8>], slot: &Slot) -> usize {
    let (key, value) = entry_at(chunks, slot);
    cost(key.len(), value)
}

/// Appends an entry to the last chunk, or to a new one; returns the entry's chunk and offset.
fn append(
    chunks: &mut Vec<Vec<u8>>,
    key: &[u8],
    value: Option<&[u8]>,
    chunk_bytes: usize,
) -> (u32, u32) {
    let len = HEADER + key.len() + value.map_or(0, <[u8]>::len);
    if chunks.last().is_none_or(|c| c.capacity() - c.len() < len) {
        chunks.push(Vec::with_capacity(if len > chunk_bytes / 4 {
            len
        } else {
            chunk_bytes
        }));
    }
    let chunk = chunks.len() - 1;
    let bytes = &mut chunks[chunk];
    let offset = bytes.len();
    // Lengths fit: `Generations::insert_hashed` refuses an entry of 4 GiB or more.
    bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&value.map_or(ABSENT, |v| v.len() as u32).to_le_bytes());
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(value.unwrap_or_default());
    (chunk as u32, offset as u32)
}

impl Generation {
    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<&Slot> {
        let chunks = &self.chunks;
        self.index.find(hash, holds(chunks, hash, key))
    }

    fn get(&self, hash: u64, key: &[u8]) -> Option<Option<&[u8]>> {
        self.find(hash, key)
            .map(|slot| entry_at(&self.chunks, slot).1)
    }

    /// Appends the entry (`charge` bytes) and points `key` at it.
    fn put(
        &mut self,
        hash: u64,
        key: &[u8],
        value: Option<&[u8]>,
        charge: usize,
        chunk_bytes: usize,
    ) {
        let Self {
            chunks,
            index,
            bytes,
            live,
        } = self;
        let entry = index.entry(hash, holds(chunks, hash, key), |s| s.hash);
        if let Entry::Occupied(found) = &entry {
            *live -= cost_at(chunks, found.get());
        }
        let (chunk, offset) = append(chunks, key, value, chunk_bytes);
        let slot = Slot {
            hash,
            chunk,
            offset,
        };
        match entry {
            Entry::Occupied(mut found) => *found.get_mut() = slot,
            Entry::Vacant(vacant) => {
                vacant.insert(slot);
            }
        }
        *bytes += charge;
        *live += charge;
        if *bytes > 2 * *live + DEAD_BYTES_SLACK {
            self.compact(chunk_bytes);
        }
    }

    fn remove(&mut self, hash: u64, key: &[u8], chunk_bytes: usize) {
        let chunks = &self.chunks;
        let Ok(found) = self.index.find_entry(hash, holds(chunks, hash, key)) else {
            return;
        };
        self.live -= cost_at(chunks, found.get());
        found.remove();
        if self.index.is_empty() {
            *self = Self::default();
        } else if self.bytes > 2 * self.live + DEAD_BYTES_SLACK {
            self.compact(chunk_bytes);
        }
    }

    /// Copies the live entries to new chunks, dropping the replaced and removed ones.
    fn compact(&mut self, chunk_bytes: usize) {
        let old = std::mem::take(&mut self.chunks);
        for slot in self.index.iter_mut() {
            let (key, value) = entry_at(&old, slot);
            (slot.chunk, slot.offset) = append(&mut self.chunks, key, value, chunk_bytes);
        }
        self.bytes = self.live;
    }
}

/// A store's cached values. The process's memory budget reaches every store's generations
/// (through its `StoreAccount`) to shrink them all when the caches together pass their share.
#[derive(Default)]
pub struct Generations {
    young: Generation,
    old: Generation,
    /// Hashes keys for both generations and the doorkeeper.
    hasher: RandomState,
    capacity: usize,
    /// Bytes last charged to the budget.
    charged: usize,
    /// The budget's clock when the cache was last locked: which caches shrink first.
    last_used: u64,
    /// Whether the young generation ever filled (or reads stopped hitting): from then on keys are
    /// admitted on a second miss.
    filled: bool,
    /// Lookups that found a key, and reads from RocksDB, while every read is admitted.
    hits: Cell<u64>,
    misses: u64,
    /// The doorkeeper: bits of the hashes of keys that missed once (allocated when first used).
    seen: Vec<u64>,
    seen_count: usize,
    /// Changes of the committed state seen (commits, removals, clears): a reader on another
    /// thread admits what it read from RocksDB only if none came in between
    /// ([`ReadCache::admit_unless_changed`]).
    changes: u64,
}

fn cost(key_len: usize, value: Option<&[u8]>) -> usize {
    key_len + value.map_or(0, <[u8]>::len) + ENTRY_OVERHEAD
}

impl Generations {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    pub fn bytes(&self) -> usize {
        self.young.bytes + self.old.bytes
    }

    pub fn last_used(&self) -> u64 {
        self.last_used
    }

    fn settle(&mut self, budget: &MemoryBudget) {
        let now = self.bytes();
        if now != self.charged {
            budget.charge_read_cache(self.charged, now);
            self.charged = now;
        }
    }

    /// `None`: not cached; `Some(None)`: known absent; `Some(Some(v))`: the committed value.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        if self.young.is_empty() && self.old.is_empty() {
            return None;
        }
        let hash = self.hasher.hash_one(key);
        let found = self
            .young
            .get(hash, key)
            .or_else(|| self.old.get(hash, key));
        if found.is_some() && !self.filled {
            self.hits.set(self.hits.get() + 1);
        }
        found
    }

    /// Whether to cache the value of `key`, just read from RocksDB (see the module's admission).
    pub fn admits(&mut self, key: &[u8]) -> bool {
        if !self.filled {
            self.misses += 1;
            let lookups = self.misses + self.hits.get();
            if self.young.bytes < self.capacity / 4 || self.hits.get() * MIN_HIT_SHARE >= lookups {
                return true;
            }
            self.filled = true;
        }
        if self.seen.is_empty() {
            let bits = (self.capacity / CAPACITY_BYTES_PER_SEEN_BIT)
                .next_power_of_two()
                .clamp(*SEEN_BITS.start(), *SEEN_BITS.end());
            self.seen = vec![0; bits / 64];
        }
        // Two bits from one hash: a key never seen passes only if both are set (a false
        // admission in ~1/16 at the fullest, against 1/4 with one bit).
        let hash = self.hasher.hash_one(key);
        let mask = self.seen.len() * 64 - 1;
        let bits = [hash as usize & mask, (hash >> 32) as usize & mask];
        let is_set = |seen: &[u64], bit: usize| seen[bit / 64] & (1 << (bit % 64)) != 0;
        if bits.iter().all(|&bit| is_set(&self.seen, bit)) {
            return true;
        }
        for bit in bits {
            if !is_set(&self.seen, bit) {
                self.seen[bit / 64] |= 1 << (bit % 64);
                self.seen_count += 1;
            }
        }
        // A quarter of the bits set: forget them, so "seen" means seen lately.
        if self.seen_count > self.seen.len() * 16 {
            self.seen.fill(0);
            self.seen_count = 0;
        }
        false
    }

    /// Records the committed value of `key` (`None`: deleted).
    pub fn insert(&mut self, key: &[u8], value: Option<&[u8]>, budget: &MemoryBudget) {
        let hash = self.hasher.hash_one(key);
        self.insert_hashed(hash, key, value);
        self.settle(budget);
    }

    fn insert_hashed(&mut self, hash: u64, key: &[u8], value: Option<&[u8]>) {
        let charge = cost(key.len(), value);
        let too_long =
            key.len() >= ABSENT as usize || value.is_some_and(|v| v.len() >= ABSENT as usize);
        let chunk_bytes = self.chunk_bytes();
        if charge > self.capacity / 2 || too_long {
            self.forget(hash, key);
            return;
        }
        if !self.old.is_empty() {
            self.old.remove(hash, key, chunk_bytes);
        }
        self.young.put(hash, key, value, charge, chunk_bytes);
        if self.young.bytes > self.capacity / 2 {
            self.rotate_young();
        }
    }

    fn chunk_bytes(&self) -> usize {
        (self.capacity / 16).clamp(256, CHUNK_BYTES)
    }

    fn rotate_young(&mut self) {
        self.old = std::mem::take(&mut self.young);
        self.filled = true;
    }

    /// Drops the older generation; the younger becomes the older.
    pub fn rotate(&mut self, budget: &MemoryBudget) {
        self.rotate_young();
        self.settle(budget);
    }

    /// Brings the keys it holds up to date with a commit; keys it does not hold stay out, so a
    /// commit of keys nobody reads costs nothing here.
    pub fn refresh<'a>(
        &mut self,
        committed: impl Iterator<Item = Write<'a>>,
        budget: &MemoryBudget,
    ) {
        self.changes += 1;
        if self.young.is_empty() && self.old.is_empty() {
            return;
        }
        for (key, value) in committed {
            let hash = self.hasher.hash_one(key);
            if self.young.find(hash, key).is_some() || self.old.find(hash, key).is_some() {
                self.insert_hashed(hash, key, value);
            }
        }
        self.settle(budget);
    }

    pub fn remove(&mut self, key: &[u8], budget: &MemoryBudget) {
        self.forget(self.hasher.hash_one(key), key);
        self.settle(budget);
    }

    fn forget(&mut self, hash: u64, key: &[u8]) {
        self.changes += 1;
        let chunk_bytes = self.chunk_bytes();
        self.young.remove(hash, key, chunk_bytes);
        self.old.remove(hash, key, chunk_bytes);
    }

    pub fn clear(&mut self, budget: &MemoryBudget) {
        self.changes += 1;
        self.young = Generation::default();
        self.old = Generation::default();
        self.settle(budget);
    }
}

/// A store's read cache, charged to the process's memory budget. Clones share it (a store's
/// read-committed views read through it too).
#[derive(Clone)]
pub struct ReadCache {
    generations: Arc<Mutex<Generations>>,
    budget: Arc<MemoryBudget>,
}

impl ReadCache {
    /// At most `capacity` bytes, and never more than the budget's read cache share.
    pub fn new(capacity: usize, budget: Arc<MemoryBudget>) -> Self {
        let capacity = capacity.min(budget.read_cache_limit());
        Self {
            generations: Arc::new(Mutex::new(Generations::new(capacity))),
            budget,
        }
    }

    /// What the budget holds to shrink this cache.
    pub fn generations(&self) -> Arc<Mutex<Generations>> {
        self.generations.clone()
    }

    /// The generations, locked (and marked used): for a batch of lookups under one lock.
    pub fn lock(&self) -> MutexGuard<'_, Generations> {
        let mut generations = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        generations.last_used = self.budget.tick();
        generations
    }

    pub fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        self.lock().get(key).map(|v| v.map(<[u8]>::to_vec))
    }

    pub fn insert(&self, key: &[u8], value: Option<&[u8]>) {
        self.lock().insert(key, value, &self.budget);
        self.budget.after_read_cache_insert();
    }

    /// Caches the committed value of `key` just read from RocksDB, if admitted.
    pub fn admit(&self, key: &[u8], value: Option<&[u8]>) {
        {
            let mut generations = self.lock();
            if !generations.admits(key) {
                return;
            }
            generations.insert(key, value, &self.budget);
        }
        self.budget.after_read_cache_insert();
    }

    /// `visit(value)` of `key` if it is cached (`Ok`), else the changes seen so far (`Err`), for
    /// [`Self::admit_unless_changed`] once the value is read from RocksDB.
    pub fn visit_or_changes<R>(
        &self,
        key: &[u8],
        visit: impl FnOnce(Option<&[u8]>) -> R,
    ) -> std::result::Result<R, u64> {
        let generations = self.lock();
        match generations.get(key) {
            Some(value) => Ok(visit(value)),
            None => Err(generations.changes),
        }
    }

    /// [`Self::admit`] for a reader on another thread than the writer's: not if the committed
    /// state changed since `changes` ([`Self::visit_or_changes`]), when `value` may be older
    /// than what the commit left in the cache.
    pub fn admit_unless_changed(&self, key: &[u8], value: Option<&[u8]>, changes: u64) {
        {
            let mut generations = self.lock();
            if generations.changes != changes || !generations.admits(key) {
                return;
            }
            generations.insert(key, value, &self.budget);
        }
        self.budget.after_read_cache_insert();
    }

    /// Which of `keys`, about to be read from RocksDB, the cache would take (one lock).
    pub fn admissions(&self, keys: &[&[u8]]) -> Vec<bool> {
        let mut generations = self.lock();
        keys.iter().map(|key| generations.admits(key)).collect()
    }

    /// Caches the committed values of keys just read from RocksDB (and admitted), under one lock.
    pub fn insert_many<'a>(&self, entries: impl ExactSizeIterator<Item = Write<'a>>) {
        if entries.len() == 0 {
            return;
        }
        {
            let mut generations = self.lock();
            for (key, value) in entries {
                generations.insert(key, value, &self.budget);
            }
        }
        self.budget.after_read_cache_insert();
    }

    pub fn refresh<'a>(&self, committed: impl Iterator<Item = Write<'a>>) {
        self.lock().refresh(committed, &self.budget);
        self.budget.after_read_cache_insert();
    }

    pub fn remove(&self, key: &[u8]) {
        self.lock().remove(key, &self.budget);
    }

    pub fn clear(&self) {
        self.lock().clear(&self.budget);
    }

    pub fn bytes(&self) -> usize {
        self.lock().bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(capacity: usize) -> ReadCache {
        let budget = MemoryBudget::new(crate::store::memory_budget::MIN_MEMORY_MAX_BYTES).unwrap();
        ReadCache::new(capacity, budget)
    }

    #[test]
    fn keeps_the_latest_value_and_forgets_the_oldest_generation() {
        let cache = cache(2 * (3 * (2 + 1 + ENTRY_OVERHEAD)));
        cache.insert(b"k1", Some(b"a"));
        cache.insert(b"k1", None); // the replaced entry's bytes stay charged
        assert_eq!(cache.get(b"k1"), Some(None));
        cache.insert(b"k2", Some(b"b"));
        cache.insert(b"k3", Some(b"c")); // young over half: k1..k3 become old
        cache.insert(b"k4", Some(b"d"));
        assert_eq!(cache.get(b"k2"), Some(Some(b"b".to_vec())));
        cache.insert(b"k2", Some(b"B")); // moves k2 to the young generation
        assert_eq!(cache.get(b"k2"), Some(Some(b"B".to_vec())));
        for k in [b"k5", b"k6", b"k7"] {
            cache.insert(k, Some(b"e"));
        }
        assert_eq!(
            cache.get(b"k3"),
            None,
            "two rotations drop the first generation"
        );
        assert_eq!(cache.get(b"k7"), Some(Some(b"e".to_vec())));
    }

    #[test]
    fn an_entry_larger_than_a_generation_is_not_cached_and_evicts_its_stale_copy() {
        let cache = cache(2 * (2 + 1 + ENTRY_OVERHEAD));
        cache.insert(b"k1", Some(b"a"));
        cache.insert(b"k1", Some(&[0; 1000]));
        assert_eq!(cache.get(b"k1"), None);
    }

    #[test]
    fn once_full_a_key_is_admitted_on_its_second_miss() {
        let cache = cache(2 * (2 * (2 + 1 + ENTRY_OVERHEAD)));
        assert!(
            cache.lock().admits(b"k1"),
            "every read is cached until the cache fills"
        );
        for k in [b"k1", b"k2", b"k3"] {
            cache.admit(k, Some(b"v"));
        }
        assert!(cache.lock().filled);
        cache.admit(b"k4", Some(b"v"));
        assert_eq!(cache.get(b"k4"), None, "a first miss is not cached");
        cache.admit(b"k4", Some(b"w"));
        assert_eq!(cache.get(b"k4"), Some(Some(b"w".to_vec())));
        let admitted = cache.admissions(&[b"k5", b"k5"]);
        assert!(admitted[1], "the second miss of a batch is admitted");
    }

    #[test]
    fn reads_that_stop_hitting_switch_to_the_second_miss_before_the_cache_fills() {
        let entry = 2 + 1 + ENTRY_OVERHEAD;
        let reads = cache(64 * entry);
        for i in 0..16u8 {
            let key = [b'k', i];
            assert!(reads.lock().admits(&key), "admitted while under a quarter");
            reads.insert(&key, Some(b"v"));
        }
        assert!(
            !reads.lock().admits(b"kx"),
            "a quarter taken and no hits: selective"
        );
        assert!(reads.lock().filled);

        let reads = cache(64 * entry);
        for i in 0..24u8 {
            let key = [b'k', i];
            assert!(
                reads.lock().admits(&key),
                "reads that hit keep every read admitted"
            );
            reads.insert(&key, Some(b"v"));
            assert!(reads.lock().get(&key).is_some());
        }
        assert!(!reads.lock().filled);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = cache(0);
        cache.insert(b"k", Some(b"v"));
        assert_eq!(cache.get(b"k"), None);
    }

    #[test]
    fn small_entries_across_chunks_cost_their_bytes_and_a_fixed_overhead() {
        let cache = cache(4 << 20);
        let key = |i: u32| format!("key-{i:08}").into_bytes();
        for i in 0..20_000u32 {
            cache.insert(&key(i), (i % 7 != 0).then_some(&i.to_le_bytes()[..]));
        }
        assert_eq!(cache.bytes(), 20_000 * (12 + ENTRY_OVERHEAD) + 17_142 * 4);
        for i in 0..20_000u32 {
            let expected = (i % 7 != 0).then(|| i.to_le_bytes().to_vec());
            assert_eq!(cache.get(&key(i)), Some(expected), "entry {i}");
        }
    }

    #[test]
    fn an_entry_larger_than_a_chunk_is_kept_whole_among_small_ones() {
        let cache = cache(4 << 20);
        let large = vec![7u8; 3 * CHUNK_BYTES / 2];
        cache.insert(b"small-1", Some(b"a"));
        cache.insert(b"large", Some(&large));
        cache.insert(b"small-2", Some(b"b"));
        assert_eq!(cache.get(b"large"), Some(Some(large)));
        assert_eq!(cache.get(b"small-1"), Some(Some(b"a".to_vec())));
        assert_eq!(cache.get(b"small-2"), Some(Some(b"b".to_vec())));
    }

    #[test]
    fn a_commit_refreshes_the_keys_held_and_leaves_the_others_out() {
        let cache = cache(1 << 20);
        cache.insert(b"held", Some(b"old"));
        cache.insert(b"gone", Some(b"x"));
        let before = cache.bytes();
        let committed: Vec<Write<'_>> = vec![
            (b"held", Some(b"new")),
            (b"gone", None),
            (b"other", Some(b"y")),
        ];
        cache.refresh(committed.into_iter());
        assert_eq!(cache.get(b"held"), Some(Some(b"new".to_vec())));
        assert_eq!(
            cache.get(b"gone"),
            Some(None),
            "known absent after the delete"
        );
        assert_eq!(cache.get(b"other"), None);
        assert_eq!(
            cache.bytes(),
            before + cost(4, Some(b"new")) + cost(4, None),
            "replaced entries stay charged until their generation goes"
        );
    }

    #[test]
    fn replaced_entries_are_dropped_once_they_outweigh_the_live_ones() {
        let cache = cache(64 << 20);
        cache.insert(b"cold", Some(b"c"));
        for i in 0..5_000u32 {
            let value = vec![i as u8; 1024];
            cache.insert(b"hot", Some(&value));
            let live = cost(4, Some(b"c")) + cost(3, Some(&value));
            assert!(
                cache.bytes() <= 2 * live + DEAD_BYTES_SLACK + live,
                "at {i}: {}",
                cache.bytes()
            );
        }
        assert!(cache.bytes() < 5_000 * 1024 / 2, "compacted");
        assert_eq!(
            cache.get(b"hot"),
            Some(Some(vec![(4_999 % 256) as u8; 1024]))
        );
        assert_eq!(cache.get(b"cold"), Some(Some(b"c".to_vec())));
        cache.remove(b"hot");
        cache.remove(b"cold");
        assert_eq!(cache.bytes(), 0, "an emptied generation frees its chunks");
    }
}

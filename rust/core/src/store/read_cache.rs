//! Recently committed values of a RocksDB store, so the reads of a read-modify-write loop (the
//! common stream-processing pattern) skip RocksDB. Kafka Streams puts a caching layer in front of
//! its stores for the same reason. Only committed state is cached, so it never needs undoing.
//!
//! Two generations of a hash map bound the memory: inserts go to the young one; when it holds
//! half the capacity it becomes the old one and the previous old one is dropped.
//!
//! Admission: until the young generation first fills, every value read from RocksDB is cached
//! (a store whose reads fit keeps them all), unless reads stop hitting: once a quarter of the
//! capacity is taken with fewer than one lookup in `MIN_HIT_SHARE` a hit, reads are random over
//! more keys than fit. From then on a key is cached on its second miss in a while (a doorkeeper
//! of two bits per key hash in a bitset cleared as it fills, as TinyLFU's doorkeeper): random
//! reads of a store far larger than the cache no longer copy and hash every value only to drop
//! it unread, and the memory stays with RocksDB's block cache.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;

use crate::store::committed::Write;
use crate::store::memory_budget::MemoryBudget;

/// Bytes charged per entry besides key and value: the hash table's slot (two vector headers, 48
/// bytes, in a table between 44% and 88% full) and the heap blocks' headers and rounding
/// (glibc: 16-byte granules, 8 bytes of header each).
const ENTRY_OVERHEAD: usize = 128;
/// While every read is admitted, at least one lookup in this many must hit the cache.
const MIN_HIT_SHARE: u64 = 8;
/// Doorkeeper bits per byte of capacity (one per 64 bytes: four per cacheable entry of 100-byte
/// values), between these bounds.
const CAPACITY_BYTES_PER_SEEN_BIT: usize = 64;
const SEEN_BITS: std::ops::RangeInclusive<usize> = (1 << 12)..=(1 << 22);

type Generation = HashMap<Vec<u8>, Option<Vec<u8>>, RandomState>;

/// A store's cached values. The process's memory budget reaches every store's generations
/// (through its `StoreAccount`) to shrink them all when the caches together pass their share.
#[derive(Default)]
pub struct Generations {
    young: Generation,
    old: Generation,
    young_bytes: usize,
    old_bytes: usize,
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

fn cost(key_len: usize, value: &Option<Vec<u8>>) -> usize {
    key_len + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD
}

impl Generations {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    pub fn bytes(&self) -> usize {
        self.young_bytes + self.old_bytes
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
        let found = self.young.get(key).or_else(|| self.old.get(key));
        if found.is_some() && !self.filled {
            self.hits.set(self.hits.get() + 1);
        }
        found.map(Option::as_deref)
    }

    fn remove_old(&mut self, key: &[u8]) {
        if let Some(value) = self.old.remove(key) {
            self.old_bytes -= cost(key.len(), &value);
        }
    }

    /// Whether to cache the value of `key`, just read from RocksDB (see the module's admission).
    pub fn admits(&mut self, key: &[u8]) -> bool {
        if !self.filled {
            self.misses += 1;
            let lookups = self.misses + self.hits.get();
            if self.young_bytes < self.capacity / 4 || self.hits.get() * MIN_HIT_SHARE >= lookups {
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
        let hash = self.young.hasher().hash_one(key);
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
    pub fn insert(&mut self, key: Vec<u8>, value: Option<Vec<u8>>, budget: &MemoryBudget) {
        let key_len = key.len();
        let charge = cost(key_len, &value);
        if charge > self.capacity / 2 {
            self.remove(&key, budget);
            return;
        }
        if !self.old.is_empty() {
            self.remove_old(&key);
        }
        self.young_bytes += charge;
        if let Some(previous) = self.young.insert(key, value) {
            self.young_bytes -= cost(key_len, &previous);
        }
        if self.young_bytes > self.capacity / 2 {
            self.rotate_young();
        }
        self.settle(budget);
    }

    fn rotate_young(&mut self) {
        self.old = std::mem::take(&mut self.young);
        self.old_bytes = std::mem::take(&mut self.young_bytes);
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
            if self.young.contains_key(key) || self.old.contains_key(key) {
                self.insert(key.to_vec(), value.map(<[u8]>::to_vec), budget);
            }
        }
    }

    pub fn remove(&mut self, key: &[u8], budget: &MemoryBudget) {
        self.changes += 1;
        if let Some(value) = self.young.remove(key) {
            self.young_bytes -= cost(key.len(), &value);
        }
        self.remove_old(key);
        self.settle(budget);
    }

    pub fn clear(&mut self, budget: &MemoryBudget) {
        self.changes += 1;
        self.young.clear();
        self.old.clear();
        self.young_bytes = 0;
        self.old_bytes = 0;
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

    pub fn insert(&self, key: Vec<u8>, value: Option<Vec<u8>>) {
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
            generations.insert(key.to_vec(), value.map(<[u8]>::to_vec), &self.budget);
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
            generations.insert(key.to_vec(), value.map(<[u8]>::to_vec), &self.budget);
        }
        self.budget.after_read_cache_insert();
    }

    /// Which of `keys`, about to be read from RocksDB, the cache would take (one lock).
    pub fn admissions(&self, keys: &[&[u8]]) -> Vec<bool> {
        let mut generations = self.lock();
        keys.iter().map(|key| generations.admits(key)).collect()
    }

    pub fn insert_many(&self, entries: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        if entries.is_empty() {
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
        cache.insert(b"k1".to_vec(), Some(b"a".to_vec()));
        cache.insert(b"k1".to_vec(), None);
        assert_eq!(cache.get(b"k1"), Some(None));
        cache.insert(b"k2".to_vec(), Some(b"b".to_vec()));
        cache.insert(b"k3".to_vec(), Some(b"c".to_vec()));
        cache.insert(b"k4".to_vec(), Some(b"d".to_vec())); // young over half: k1..k4 become old
        assert_eq!(cache.get(b"k2"), Some(Some(b"b".to_vec())));
        cache.insert(b"k2".to_vec(), Some(b"B".to_vec())); // moves k2 to the young generation
        assert_eq!(cache.get(b"k2"), Some(Some(b"B".to_vec())));
        for k in [b"k5", b"k6", b"k7"] {
            cache.insert(k.to_vec(), Some(b"e".to_vec()));
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
        cache.insert(b"k1".to_vec(), Some(b"a".to_vec()));
        cache.insert(b"k1".to_vec(), Some(vec![0; 1000]));
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
            reads.insert(key.to_vec(), Some(b"v".to_vec()));
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
            reads.insert(key.to_vec(), Some(b"v".to_vec()));
            assert!(reads.lock().get(&key).is_some());
        }
        assert!(!reads.lock().filled);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = cache(0);
        cache.insert(b"k".to_vec(), Some(b"v".to_vec()));
        assert_eq!(cache.get(b"k"), None);
    }
}

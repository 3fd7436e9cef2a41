//! Recently committed values of a RocksDB store, so the reads of a read-modify-write loop (the
//! common stream-processing pattern) skip RocksDB. Kafka Streams puts a caching layer in front of
//! its stores for the same reason. Only committed state is cached, so it never needs undoing.
//!
//! Two generations of a hash map bound the memory: inserts go to the young one; when it holds
//! half the capacity it becomes the old one and the previous old one is dropped.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// Bytes charged per entry besides key and value (hash table slot and two vector headers).
const ENTRY_OVERHEAD: usize = 64;

type Generation = HashMap<Vec<u8>, Option<Vec<u8>>, RandomState>;

#[derive(Default)]
pub struct ReadCache {
    young: Generation,
    old: Generation,
    young_bytes: usize,
    capacity: usize,
}

fn cost(key_len: usize, value: &Option<Vec<u8>>) -> usize {
    key_len + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD
}

impl ReadCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    /// `None`: not cached; `Some(None)`: known absent; `Some(Some(v))`: the committed value.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.young
            .get(key)
            .or_else(|| self.old.get(key))
            .map(Option::as_deref)
    }

    /// Records the committed value of `key` (`None`: deleted).
    pub fn insert(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let key_len = key.len();
        let charge = cost(key_len, &value);
        if charge > self.capacity / 2 {
            self.remove(&key);
            return;
        }
        if !self.old.is_empty() {
            self.old.remove(&key);
        }
        self.young_bytes += charge;
        if let Some(previous) = self.young.insert(key, value) {
            self.young_bytes -= cost(key_len, &previous);
        }
        if self.young_bytes > self.capacity / 2 {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
    }

    /// Brings the keys it holds up to date with a commit; keys it does not hold stay out, so a
    /// commit of keys nobody reads costs nothing here.
    pub fn refresh(&mut self, committed: impl Iterator<Item = (Vec<u8>, Option<Vec<u8>>)>) {
        if self.young.is_empty() && self.old.is_empty() {
            return;
        }
        for (key, value) in committed {
            if self.young.contains_key(&key) || self.old.contains_key(&key) {
                self.insert(key, value);
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        if let Some(value) = self.young.remove(key) {
            self.young_bytes -= cost(key.len(), &value);
        }
        self.old.remove(key);
    }

    pub fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
        self.young_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_value_and_forgets_the_oldest_generation() {
        let mut cache = ReadCache::new(2 * (3 * (2 + 1 + ENTRY_OVERHEAD)));
        cache.insert(b"k1".to_vec(), Some(b"a".to_vec()));
        cache.insert(b"k1".to_vec(), None);
        assert_eq!(cache.get(b"k1"), Some(None));
        cache.insert(b"k2".to_vec(), Some(b"b".to_vec()));
        cache.insert(b"k3".to_vec(), Some(b"c".to_vec()));
        cache.insert(b"k4".to_vec(), Some(b"d".to_vec())); // young over half: k1..k4 become old
        assert_eq!(cache.get(b"k2"), Some(Some(&b"b"[..])));
        cache.insert(b"k2".to_vec(), Some(b"B".to_vec())); // moves k2 to the young generation
        assert_eq!(cache.get(b"k2"), Some(Some(&b"B"[..])));
        for k in [b"k5", b"k6", b"k7"] {
            cache.insert(k.to_vec(), Some(b"e".to_vec()));
        }
        assert_eq!(
            cache.get(b"k3"),
            None,
            "two rotations drop the first generation"
        );
        assert_eq!(cache.get(b"k7"), Some(Some(&b"e"[..])));
    }

    #[test]
    fn an_entry_larger_than_a_generation_is_not_cached_and_evicts_its_stale_copy() {
        let mut cache = ReadCache::new(2 * (2 + 1 + ENTRY_OVERHEAD));
        cache.insert(b"k1".to_vec(), Some(b"a".to_vec()));
        cache.insert(b"k1".to_vec(), Some(vec![0; 1000]));
        assert_eq!(cache.get(b"k1"), None);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut cache = ReadCache::new(0);
        cache.insert(b"k".to_vec(), Some(b"v".to_vec()));
        assert_eq!(cache.get(b"k"), None);
    }
}

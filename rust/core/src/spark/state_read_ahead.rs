//! A micro-batch's list and map state read ahead: every entry under each grouping key's prefix
//! (`state_layout::key_prefix`), read for all the batch's keys with one scan
//! (`KeyValueStore::scan_prefixes`), then kept in step with the writes the batch stages, so a
//! processor's reads of those keys, and the deletes a list `put` or a `clear` makes, never go
//! back to the store.
//!
//! What a read-ahead holds is charged to the store's memory budget, in its read cache share,
//! for as long as it is held: it reads at most what other read-aheads leave of that share
//! (`MemoryBudget::take_read_ahead`), so however many tasks read ahead at once, together they
//! stay inside the budget; the prefixes past its bound are read from the store call by call.
//! Only what it holds is charged (`MemoryBudget::hold_read_ahead`): the stores' cached values
//! make room for that, not for the whole bound.
//!
//! When nothing was staged in the store as it read, what a read-ahead holds is the committed
//! state; so the value it held for a key when the batch first wrote that key is the key's
//! committed value, which it keeps (its journal). At commit, those are the undo of the batch
//! for the keys the batch wrote through it ([`PrefixEntries::previous_values_of_staged`]), and
//! only the other staged keys are read from the store.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use smallvec::SmallVec;

use crate::error::Result;
use crate::spark::state_layout;
use crate::store::key_order::key_order;
use crate::store::key_value::VisitWrite;
use crate::store::memory_budget::MemoryBudget;
use crate::store::KeyValueStore;

/// What one read-ahead holds at most (keys, values and bookkeeping), less when the budget's
/// read cache share has less room: the keys past it are read from the store call by call, as
/// without a read-ahead.
pub const READ_AHEAD_MAX_BYTES: usize = 64 << 20;
/// Bookkeeping counted per entry besides its bytes (two [`Bytes`]).
const ENTRY_OVERHEAD: usize = 64;

/// An entry's key suffix or stored value: inline up to 24 bytes (a list sequence, a short map
/// key, a small value), so reading ahead and dropping most entries allocates nothing.
pub type Bytes = SmallVec<[u8; 24]>;

/// One entry under a prefix: what follows the prefix in its key (a list sequence, a map key),
/// and its stored `<expiry><value>`.
pub type Entry = (Bytes, Bytes);

/// A prefix held, inline up to 32 bytes (the length and pickle of a short grouping key).
type Prefix = SmallVec<[u8; 32]>;
/// A prefix's entries in key order, the first inline: a list kept by `put` is one entry, so
/// most prefixes cost no allocation of their own to read ahead and to drop.
type Held = SmallVec<[Entry; 1]>;

/// The bytes an entry counts for: its key, its stored value and the bookkeeping.
fn entry_bytes(key_len: usize, stored_len: usize) -> usize {
    key_len + stored_len + ENTRY_OVERHEAD
}

/// Bytes of a memory budget's read cache share taken by one read-ahead: reserved while it
/// reads, then held (charged as read cache), given back when dropped.
#[derive(Debug)]
struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
    /// Whether `bytes` is a reservation not yet turned into what is held.
    reserved: bool,
}

impl Charge {
    fn reserve(budget: &Arc<MemoryBudget>, wanted: usize) -> Self {
        Self {
            bytes: budget.take_read_ahead(wanted),
            budget: budget.clone(),
            reserved: true,
        }
    }

    fn resize(&mut self, bytes: usize) {
        if std::mem::take(&mut self.reserved) {
            self.budget.hold_read_ahead(self.bytes, bytes);
        } else {
            self.budget.resize_read_ahead(self.bytes, bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.resize(0);
    }
}

/// The committed values of the keys the batch wrote under held prefixes, kept at each key's
/// first write. A batch keeps one per key it writes: they share one buffer, so keeping one
/// allocates nothing new and dropping them all is two frees.
#[derive(Debug, Default)]
struct Journal {
    /// Every kept key followed by its committed stored value.
    bytes: Vec<u8>,
    /// The kept keys, hashed by key: where each lies in `bytes`.
    kept: HashTable<Kept>,
    hasher: RandomState,
    /// What the kept keys and values count for (`entry_bytes` of each).
    counted: usize,
    /// A key being looked up (no allocation for keys kept already).
    scratch: Vec<u8>,
    /// Whether held values are committed ones: the store had nothing staged when read.
    keeping: bool,
}

/// A kept key at `bytes[start..start + key_len]`, its committed value (`None`: absent) right
/// after it.
#[derive(Debug, Clone, Copy)]
struct Kept {
    start: usize,
    key_len: usize,
    value_len: Option<usize>,
}

/// The key `kept` names in `bytes` (a [`Journal`]'s buffer).
fn kept_key<'a>(bytes: &'a [u8], kept: &Kept) -> &'a [u8] {
    &bytes[kept.start..kept.start + kept.key_len]
}

impl Journal {
    /// The committed value kept for `key`: `None` if not kept, `Some(None)` if it was absent.
    fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let kept = self.kept.find(self.hasher.hash_one(key), |k| {
            kept_key(&self.bytes, k) == key
        })?;
        let value = kept.start + kept.key_len;
        Some(kept.value_len.map(|len| &self.bytes[value..value + len]))
    }

    /// Keeps `committed` as the committed value of the key in `scratch`, unless one is kept.
    /// Returns the bytes it counts for (0: kept already).
    fn keep_scratch(&mut self, committed: Option<&[u8]>) -> usize {
        let Self {
            bytes,
            kept,
            hasher,
            scratch,
            ..
        } = self;
        let hash = hasher.hash_one(scratch.as_slice());
        if kept
            .find(hash, |k| kept_key(bytes, k) == scratch.as_slice())
            .is_some()
        {
            return 0;
        }
        let entry = Kept {
            start: bytes.len(),
            key_len: scratch.len(),
            value_len: committed.map(<[u8]>::len),
        };
        bytes.extend_from_slice(scratch);
        bytes.extend_from_slice(committed.unwrap_or_default());
        kept.insert_unique(hash, entry, |k| hasher.hash_one(kept_key(bytes, k)));
        let counted = entry_bytes(entry.key_len, entry.value_len.unwrap_or(0));
        self.counted += counted;
        counted
    }

    fn len(&self) -> usize {
        self.kept.len()
    }
}

#[derive(Debug, Default)]
pub struct PrefixEntries {
    /// Each prefix read ahead, with its entries in key order.
    by_prefix: HashMap<Prefix, Held, RandomState>,
    /// What is held (journal included), charged to the store's budget (`None`: a store outside
    /// any budget).
    charge: Option<Charge>,
    journal: Journal,
}

impl PrefixEntries {
    /// Reads every entry under `prefixes` (in any order, repeats allowed) from `store` in one
    /// scan, up to about `max_bytes` or what the store's memory budget has room for: the
    /// prefixes the scan had not finished by then are not held (calls read them from the store).
    pub fn read(store: &KeyValueStore, prefixes: &[&[u8]], max_bytes: usize) -> Result<Self> {
        let mut unique: Vec<&[u8]> = (key_order(prefixes).into_iter())
            .map(|i| prefixes[i as usize])
            .collect();
        unique.dedup();
        let prefixes = unique.as_slice();
        let mut charge = store
            .memory_budget()
            .map(|budget| Charge::reserve(budget, max_bytes));
        let max_bytes = charge.as_ref().map_or(max_bytes, |charge| charge.bytes);
        let mut by_prefix: HashMap<Prefix, Held, RandomState> = prefixes
            .iter()
            .map(|p| (Prefix::from_slice(p), Held::new()))
            .collect();
        let mut bytes = 0;
        let mut unfinished: Option<usize> = None;
        store.scan_prefixes(prefixes, &mut |i, key, stored| {
            bytes += entry_bytes(key.len(), stored.len());
            if bytes > max_bytes {
                unfinished = Some(i);
                return Ok(false);
            }
            let prefix = prefixes[i];
            if let Some(entries) = by_prefix.get_mut(prefix) {
                entries.push((
                    Bytes::from_slice(&key[prefix.len()..]),
                    Bytes::from_slice(stored),
                ));
            }
            Ok(true)
        })?;
        if let Some(i) = unfinished {
            // The scan goes in key order: it had read no prefix from this one on.
            by_prefix.retain(|p, _| p.as_slice() < prefixes[i]);
        }
        let held = by_prefix
            .iter()
            .flat_map(|(prefix, entries)| {
                entries
                    .iter()
                    .map(|(suffix, stored)| entry_bytes(prefix.len() + suffix.len(), stored.len()))
            })
            .sum();
        if let Some(charge) = &mut charge {
            charge.resize(held);
        }
        let (staged, spilled) = store.uncommitted();
        let journal = Journal {
            keeping: staged == 0 && !spilled,
            ..Journal::default()
        };
        Ok(Self {
            by_prefix,
            charge,
            journal,
        })
    }

    /// [`Self::read`] again in the same batch, replacing what is held; the committed values
    /// kept so far stay. `keep_committed`: whether to keep more (someone takes them for an
    /// undo; otherwise they would only take memory).
    pub fn reread(
        &mut self,
        store: &KeyValueStore,
        prefixes: &[&[u8]],
        max_bytes: usize,
        keep_committed: bool,
    ) -> Result<()> {
        self.clear();
        let journal = std::mem::take(&mut self.journal);
        let kept = journal.counted;
        *self = Self::read(store, prefixes, max_bytes)?;
        let keeping = self.journal.keeping && keep_committed && journal.len() == 0;
        self.journal = Journal { keeping, ..journal };
        self.recharge(kept, 0);
        Ok(())
    }

    /// Bytes held now, as charged to the store's memory budget.
    pub fn charged_bytes(&self) -> Option<usize> {
        self.charge.as_ref().map(|charge| charge.bytes)
    }

    /// Keeps the charge in step with an entry grown by `added` bytes and shrunk by `removed`.
    fn recharge(&mut self, added: usize, removed: usize) {
        if let Some(charge) = &mut self.charge {
            let bytes = (charge.bytes + added).saturating_sub(removed);
            charge.resize(bytes);
        }
    }

    /// Whether `prefix`'s entries are held.
    pub fn holds(&self, prefix: &[u8]) -> bool {
        self.by_prefix.contains_key(prefix)
    }

    /// The entries under `prefix` in key order (`None`: not read ahead).
    pub fn entries(&self, prefix: &[u8]) -> Option<&[Entry]> {
        self.by_prefix.get(prefix).map(Held::as_slice)
    }

    /// The stored value of `<prefix><suffix>`: `None` if not read ahead, `Some(None)` if absent.
    pub fn get(&self, prefix: &[u8], suffix: &[u8]) -> Option<Option<&[u8]>> {
        let entries = self.by_prefix.get(prefix)?;
        Some(
            entries
                .binary_search_by(|(s, _)| s.as_slice().cmp(suffix))
                .ok()
                .map(|i| entries[i].1.as_slice()),
        )
    }

    /// The sequence a list's next entry takes: one past its newest entry's, whether live or
    /// expired (`None`: not read ahead).
    pub fn next_sequence(&self, prefix: &[u8]) -> Option<Result<u64>> {
        let entries = self.by_prefix.get(prefix)?;
        Some(
            entries
                .last()
                .map_or(Ok(0), |(suffix, _)| sequence_of(suffix).map(|s| s + 1)),
        )
    }

    /// Keeps a prefix held in step with a write staged to `<prefix><suffix>` (`None`: a delete).
    pub fn record(&mut self, prefix: &[u8], suffix: &[u8], stored: Option<&[u8]>) {
        let Some(entries) = self.by_prefix.get_mut(prefix) else {
            return;
        };
        let key_len = prefix.len() + suffix.len();
        let found = entries.binary_search_by(|(s, _)| s.as_slice().cmp(suffix));
        let mut kept = 0;
        let journal = &mut self.journal;
        if journal.keeping {
            journal.scratch.clear();
            journal.scratch.extend_from_slice(prefix);
            journal.scratch.extend_from_slice(suffix);
            kept = journal.keep_scratch(found.ok().map(|i| entries[i].1.as_slice()));
        }
        let (added, removed) = match (found, stored) {
            (Ok(i), Some(stored)) => {
                let held = &mut entries[i].1;
                let before = held.len();
                held.clear();
                held.extend_from_slice(stored);
                (stored.len(), before)
            }
            (Ok(i), None) => {
                let (_, old) = entries.remove(i);
                (0, entry_bytes(key_len, old.len()))
            }
            (Err(i), Some(stored)) => {
                entries.insert(i, (Bytes::from_slice(suffix), Bytes::from_slice(stored)));
                (entry_bytes(key_len, stored.len()), 0)
            }
            (Err(_), None) => (0, 0),
        };
        self.recharge(added + kept, removed);
    }

    /// Keeps a prefix held in step with a delete of all its entries.
    pub fn record_cleared(&mut self, prefix: &[u8]) {
        let suffixes: Vec<Bytes> = match self.by_prefix.get(prefix) {
            Some(entries) if self.journal.keeping => {
                entries.iter().map(|(s, _)| s.clone()).collect()
            }
            _ => Vec::new(),
        };
        for suffix in suffixes {
            self.record(prefix, &suffix, None);
        }
        let Some(entries) = self.by_prefix.get_mut(prefix) else {
            return;
        };
        let removed = entries
            .drain(..)
            .map(|(suffix, stored)| entry_bytes(prefix.len() + suffix.len(), stored.len()))
            .sum();
        self.recharge(0, removed);
    }

    /// Drops the entries held (the batch's input is done), giving their bytes back to the
    /// budget; the committed values kept for the undo stay until [`Self::forget`].
    pub fn clear(&mut self) {
        self.by_prefix = HashMap::default();
        self.journal.keeping = false;
        if let Some(charge) = &mut self.charge {
            charge.resize(self.journal.counted);
        }
    }

    /// Drops everything, the kept committed values too (the batch is over).
    pub fn forget(&mut self) {
        self.by_prefix = HashMap::default();
        self.journal = Journal::default();
        self.charge = None;
    }

    /// Passes every key with an uncommitted write in `store` (the store this read ahead) to
    /// `visit` with its committed value, exactly as `KeyValueStore::previous_values_of_staged`
    /// does, taking the values kept at the keys' first writes through this read-ahead. A store
    /// whose reads hide expired values (a store-level TTL) is left to read them all itself.
    pub fn previous_values_of_staged(
        &self,
        store: &mut KeyValueStore,
        visit: &mut VisitWrite<'_>,
    ) -> Result<()> {
        let journal = &self.journal;
        if journal.len() == 0 || store.ttl().is_some() {
            return store.previous_values_of_staged(visit);
        }
        store.previous_values_of_staged_knowing(&|key| journal.get(key), visit)
    }

    /// How many committed values are kept for the undo.
    pub fn kept_values(&self) -> usize {
        self.journal.len()
    }
}

/// The sequence a list entry's key suffix holds.
fn sequence_of(suffix: &[u8]) -> Result<u64> {
    state_layout::list_sequence(suffix, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spark::state_layout::{key_prefix, list_key, stored_value, NO_EXPIRY};
    use crate::store::rocks::ValueFormat;
    use crate::store::StoreOptions;

    fn open(dir: &std::path::Path) -> KeyValueStore {
        let options = StoreOptions {
            offset_key: "o".into(),
            ..StoreOptions::default()
        };
        open_named(dir, "list", options)
    }

    /// A transactional RocksDB store `name` under `dir`.
    fn open_named(dir: &std::path::Path, name: &str, options: StoreOptions) -> KeyValueStore {
        let (store, _) = KeyValueStore::open_rocksdb(
            name,
            &dir.join(format!("rocksdb/{name}")),
            &dir.join(format!("rocksdb/.{name}.uncommitted")),
            ValueFormat::Plain,
            options,
            &mut |_| {},
        )
        .unwrap();
        store
    }

    /// A store's options inside `budget`, with a read cache of up to `cache_max_bytes`.
    fn in_budget(budget: &Arc<MemoryBudget>, cache_max_bytes: usize) -> StoreOptions {
        StoreOptions {
            offset_key: "o".into(),
            cache_max_bytes,
            rocks: Some(
                crate::store::rocks_options::RocksConfig::new(budget.clone(), None).unwrap(),
            ),
            ..StoreOptions::default()
        }
    }

    fn element(prefix: &[u8], sequence: u64, value: &[u8]) -> (Vec<u8>, Vec<u8>) {
        (list_key(prefix, sequence), stored_value(NO_EXPIRY, value))
    }

    /// Users 0..20's lists (user `u` has `u % 4` elements), committed, then user 3's first
    /// element deleted and user 5 given one more element, staged.
    fn lists(store: &mut KeyValueStore) -> Vec<Vec<u8>> {
        let prefixes: Vec<Vec<u8>> = (0..20u8).map(|u| key_prefix(&[b'u', u]).unwrap()).collect();
        for (u, prefix) in prefixes.iter().enumerate() {
            for s in 0..(u as u64 % 4) {
                let (k, v) = element(prefix, s, &[u as u8, s as u8]);
                store.put(&k, Some(&v)).unwrap();
            }
        }
        store.commit(Some(1), &mut |_| {}).unwrap();
        store.put(&list_key(&prefixes[3], 0), None).unwrap();
        let (k, v) = element(&prefixes[5], 1, b"staged");
        store.put(&k, Some(&v)).unwrap();
        prefixes
    }

    #[test]
    fn reads_each_prefix_as_its_own_scan_would_staged_writes_included() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let prefixes = lists(&mut store);
        // Out of order, with gaps (users 0, 2, 4.. are not asked for).
        let asked: Vec<&[u8]> = [17usize, 3, 5, 1, 11, 19, 7]
            .iter()
            .map(|&u| prefixes[u].as_slice())
            .collect();
        let ahead = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        for prefix in &asked {
            let scanned: Vec<Entry> = store
                .scan(
                    &crate::KeyRange::prefix(prefix),
                    crate::Direction::Forward,
                    usize::MAX,
                )
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k[prefix.len()..].into(), v.into()))
                .collect();
            assert_eq!(ahead.entries(prefix).unwrap(), scanned.as_slice());
        }
        assert_eq!(
            ahead.entries(&prefixes[3]).unwrap().len(),
            2,
            "staged delete seen"
        );
        assert_eq!(
            ahead.entries(&prefixes[5]).unwrap().len(),
            2,
            "staged put seen"
        );
        assert!(!ahead.holds(&prefixes[2]), "not asked for");
        assert_eq!(ahead.next_sequence(&prefixes[7]).unwrap().unwrap(), 3);
        assert_eq!(ahead.next_sequence(&prefixes[3]).unwrap().unwrap(), 3);
        assert!(ahead.next_sequence(&prefixes[2]).is_none());
    }

    #[test]
    fn writes_keep_the_entries_in_step_and_the_byte_bound_leaves_the_rest_to_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let prefixes = lists(&mut store);
        let asked: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
        let mut ahead = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        let p = &prefixes[6];
        let second = 1u64.to_be_bytes();
        assert_eq!(
            ahead.get(p, &second).unwrap().unwrap(),
            stored_value(NO_EXPIRY, &[6, 1])
        );
        ahead.record(p, &second, None);
        assert_eq!(ahead.get(p, &second), Some(None));
        ahead.record(p, &9u64.to_be_bytes(), Some(b"x"));
        ahead.record(p, &1u64.to_be_bytes(), Some(b"y"));
        let suffixes: Vec<u64> = ahead
            .entries(p)
            .unwrap()
            .iter()
            .map(|(s, _)| sequence_of(s).unwrap())
            .collect();
        assert_eq!(suffixes, vec![0, 1, 9]);
        assert_eq!(ahead.next_sequence(p).unwrap().unwrap(), 10);
        ahead.record_cleared(p);
        assert_eq!(ahead.entries(p).unwrap(), &[] as &[Entry]);
        ahead.record(&prefixes[0][..3], b"", Some(b"not held"));
        assert!(!ahead.holds(&prefixes[0][..3]));

        // A bound of about four entries: the first prefixes in key order are held, the rest not.
        let bounded = PrefixEntries::read(&store, &asked, 4 * (ENTRY_OVERHEAD + 30)).unwrap();
        let mut sorted = asked.clone();
        sorted.sort();
        let held: Vec<bool> = sorted.iter().map(|p| bounded.holds(p)).collect();
        let first_missing = held.iter().position(|h| !h).expect("some prefix not held");
        assert!(first_missing > 0 && held[first_missing..].iter().all(|h| !h));
        for prefix in &sorted[..first_missing] {
            assert_eq!(
                bounded.entries(prefix),
                ahead_entries(&store, prefix).as_deref()
            );
        }
    }

    type Undo = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    fn undo_of(store: &mut KeyValueStore, ahead: Option<&PrefixEntries>) -> Undo {
        let mut out = Vec::new();
        let mut visit = |k: &[u8], v: Option<&[u8]>| {
            out.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        };
        match ahead {
            Some(ahead) => ahead.previous_values_of_staged(store, &mut visit).unwrap(),
            None => store.previous_values_of_staged(&mut visit).unwrap(),
        }
        out
    }

    /// Stages a write under a held prefix as the state variables do: the store, then the
    /// read-ahead kept in step.
    fn stage(
        store: &mut KeyValueStore,
        ahead: &mut PrefixEntries,
        prefix: &[u8],
        suffix: &[u8],
        value: Option<&[u8]>,
    ) {
        let key = [prefix, suffix].concat();
        store.put(&key, value).unwrap();
        ahead.record(prefix, suffix, value);
    }

    #[test]
    fn the_undo_from_kept_committed_values_is_what_the_store_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let prefixes = lists(&mut store);
        store.commit(Some(2), &mut |_| {}).unwrap();
        // Users 0..10 read ahead; 10..20 not.
        let asked: Vec<&[u8]> = prefixes[..10].iter().map(Vec::as_slice).collect();
        let mut ahead = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        let seq = |s: u64| s.to_be_bytes();
        // Through the read-ahead: replaced, deleted, new, written twice, a delete of nothing.
        stage(
            &mut store,
            &mut ahead,
            &prefixes[3],
            &seq(1),
            Some(b"replaced"),
        );
        stage(&mut store, &mut ahead, &prefixes[2], &seq(0), None);
        stage(&mut store, &mut ahead, &prefixes[1], &seq(5), Some(b"new"));
        stage(&mut store, &mut ahead, &prefixes[7], &seq(2), Some(b"once"));
        stage(
            &mut store,
            &mut ahead,
            &prefixes[7],
            &seq(2),
            Some(b"twice"),
        );
        stage(&mut store, &mut ahead, &prefixes[0], &seq(0), None);
        ahead.record_cleared(&prefixes[6]);
        for s in 0..3 {
            store.put(&list_key(&prefixes[6], s), None).unwrap();
        }
        assert_eq!(ahead.kept_values(), 7);
        // Around it: a prefix not read ahead, and after the input (a timer, the TTL sweep) a
        // key kept already and one not.
        store.put(&list_key(&prefixes[15], 0), Some(b"x")).unwrap();
        ahead.clear();
        store.put(&list_key(&prefixes[3], 1), None).unwrap();
        store.put(&list_key(&prefixes[9], 0), None).unwrap();
        let expected = undo_of(&mut store, None);
        assert_eq!(expected.len(), 10);
        assert_eq!(undo_of(&mut store, Some(&ahead)), expected);

        // Read while something was staged: it keeps nothing, and the store reads the undo.
        let mut late = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        stage(&mut store, &mut late, &prefixes[5], &seq(0), Some(b"late"));
        assert_eq!(late.kept_values(), 0);
        assert_eq!(undo_of(&mut store, Some(&late)), undo_of(&mut store, None));

        // Read again in the same batch: what was kept stays, nothing more is kept.
        ahead
            .reread(&store, &asked, READ_AHEAD_MAX_BYTES, true)
            .unwrap();
        stage(
            &mut store,
            &mut ahead,
            &prefixes[4],
            &seq(0),
            Some(b"after"),
        );
        assert_eq!(ahead.kept_values(), 7);
        assert_eq!(undo_of(&mut store, Some(&ahead)), undo_of(&mut store, None));
        ahead.forget();
        assert_eq!(ahead.kept_values(), 0);
    }

    #[test]
    fn read_aheads_together_stay_inside_the_budgets_read_cache_share() {
        let dir = tempfile::tempdir().unwrap();
        let budget = MemoryBudget::new(32 << 20).unwrap();
        let share = budget.read_cache_limit();
        let mut store = open_named(dir.path(), "list", in_budget(&budget, 0));
        // 12 MiB of list elements under 600 keys: more than the 8 MiB share.
        let prefixes: Vec<Vec<u8>> = (0..600u32)
            .map(|u| key_prefix(&u.to_be_bytes()).unwrap())
            .collect();
        for prefix in &prefixes {
            for s in 0..10 {
                let (k, v) = element(prefix, s, &[7; 2048]);
                store.put(&k, Some(&v)).unwrap();
            }
        }
        store.commit(Some(1), &mut |_| {}).unwrap();
        let asked: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
        let held = |ahead: &PrefixEntries| asked.iter().filter(|p| ahead.holds(p)).count();

        // One read-ahead takes what the share has, not its own 64 MiB bound, and is charged.
        let mut first = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        let charged = first.charged_bytes().unwrap();
        assert!(
            charged <= share && charged > share / 2,
            "{charged} of {share}"
        );
        assert!(held(&first) > 0 && held(&first) < asked.len());
        assert_eq!(budget.read_ahead_bytes(), charged);
        assert_eq!(budget.usage().read_cache, charged);

        // A second one at the same time gets only what is left: together inside the share.
        let second = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        let together = charged + second.charged_bytes().unwrap();
        assert!(together <= share, "{together} > {share}");
        assert_eq!(budget.read_ahead_bytes(), together);
        // What it could not hold is read from the store as without a read-ahead.
        let last = asked.iter().max().unwrap();
        assert!(!second.holds(last));

        // Writes kept in step are charged as they grow what is held, with the committed value
        // kept for the undo (here: none, a new key).
        let p = asked.iter().copied().find(|p| first.holds(p)).unwrap();
        first.record(p, &99u64.to_be_bytes(), Some(&[1; 1000]));
        let key_bytes = p.len() + 8 + ENTRY_OVERHEAD;
        assert_eq!(
            first.charged_bytes().unwrap(),
            charged + 2 * key_bytes + 1000
        );
        // Done with the input, only the kept committed values stay charged.
        first.clear();
        assert_eq!(first.charged_bytes().unwrap(), key_bytes);

        // Dropped, everything goes back; a later read-ahead has the room again.
        first.forget();
        drop(second);
        assert_eq!(budget.read_ahead_bytes(), 0);
        assert_eq!(budget.usage().read_cache, 0);
        let again = PrefixEntries::read(&store, &asked, READ_AHEAD_MAX_BYTES).unwrap();
        assert_eq!(again.charged_bytes(), Some(charged));
    }

    #[test]
    fn a_read_ahead_takes_from_the_read_caches_only_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let budget = MemoryBudget::new(256 << 20).unwrap();
        let open = |name: &str, cache_max_bytes: usize| {
            open_named(dir.path(), name, in_budget(&budget, cache_max_bytes))
        };
        // A value store's committed values cached by a batch's reads, as a processor's are.
        let mut values = open("totals", 64 << 20);
        let keys: Vec<Vec<u8>> = (0..2000u32).map(|k| k.to_be_bytes().to_vec()).collect();
        for key in &keys {
            values.put(key, Some(&[1; 100])).unwrap();
        }
        values.commit(Some(1), &mut |_| {}).unwrap();
        let asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        values.get_many(&asked).unwrap();
        let cached = budget.usage().read_cache;
        assert!(cached > 2000 * 100, "{cached}");

        // The next batch reads a list store's entries ahead: the values stay cached, and only
        // what the read-ahead holds is charged besides them.
        let mut recent = open("recent", 0);
        let prefixes = lists(&mut recent);
        let asked_lists: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
        let ahead = PrefixEntries::read(&recent, &asked_lists, READ_AHEAD_MAX_BYTES).unwrap();
        let held = ahead.charged_bytes().unwrap();
        assert!(held > 0);
        assert_eq!(budget.usage().read_cache, cached + held);
        drop(ahead);
        assert_eq!(budget.usage().read_cache, cached);
        assert_eq!(budget.read_ahead_bytes(), 0);
    }

    fn ahead_entries(store: &KeyValueStore, prefix: &[u8]) -> Option<Vec<Entry>> {
        PrefixEntries::read(store, &[prefix], READ_AHEAD_MAX_BYTES)
            .unwrap()
            .entries(prefix)
            .map(<[Entry]>::to_vec)
    }

    #[test]
    fn nested_prefixes_are_refused_repeated_ones_read_once() {
        let mut store = KeyValueStore::open_in_memory("m", StoreOptions::default());
        store.put(b"a1", Some(b"x")).unwrap();
        let twice = PrefixEntries::read(&store, &[b"a", b"b", b"a"], READ_AHEAD_MAX_BYTES).unwrap();
        assert_eq!(
            twice.entries(b"a").unwrap(),
            &[(Bytes::from_slice(b"1"), Bytes::from_slice(b"x"))]
        );
        let err = PrefixEntries::read(&store, &[b"ab", b"a"], READ_AHEAD_MAX_BYTES).unwrap_err();
        assert!(matches!(err, crate::Error::InvalidArgument(_)));
        assert!(PrefixEntries::read(&store, &[], READ_AHEAD_MAX_BYTES)
            .unwrap()
            .entries(b"a")
            .is_none());
    }
}

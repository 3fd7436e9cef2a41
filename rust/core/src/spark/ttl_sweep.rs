//! The sweep of a `transform_with_state` processor's expired state after a batch: every TTL
//! index entry due by the batch's processing time names one variable's entries of a grouping
//! key (`state_layout`'s `tws.ttl`); those whose expiry is at or before that time are deleted
//! (entries written again since keep their newer expiry), then the index entry.

use std::collections::{BTreeSet, HashMap};

use crate::error::Result;
use crate::spark::state_layout::{expiry_of, ordered_time, split_ttl_entry};
use crate::store::key_range::{Direction, KeyRange};
use crate::store::key_value::KeyValueStore;

/// A state variable's store, as its TTL index entries name its entries.
pub enum SweptStore<'s> {
    /// Value state: the grouping key is the store key.
    Value(&'s mut KeyValueStore),
    /// List or map state: each entry's store key starts with the grouping key's prefix.
    Entries(&'s mut KeyValueStore),
}

/// One variable's due state: store keys to check and grouping keys' prefixes to walk, each
/// once however many expiries it is due at (one iterator walks the prefixes).
#[derive(Default)]
struct Due<'a> {
    keys: BTreeSet<Vec<u8>>,
    prefixes: BTreeSet<&'a [u8]>,
}

/// Deletes the entries of `variables` (by name) that `index`'s entries due at `now_ms` name and
/// that expired by then, and the due index entries (those of variables not given too: a
/// variable no longer declared keeps its state); returns how many state entries it deleted.
pub fn sweep_expired(
    index: &mut KeyValueStore,
    variables: &mut HashMap<String, SweptStore<'_>>,
    now_ms: i64,
) -> Result<u64> {
    let due_range = KeyRange {
        lower: None,
        upper: Some(ordered_time(now_ms.saturating_add(1)).to_vec()),
    };
    let due = index.scan(&due_range, Direction::Forward, usize::MAX)?;
    let mut named: HashMap<&str, Due<'_>> = HashMap::new();
    for (raw, _) in &due {
        let entry = split_ttl_entry(raw)?;
        let Some(variable) = variables.get(entry.name) else {
            continue; // no longer declared: only the index entry goes
        };
        let Due { keys, prefixes } = named.entry(entry.name).or_default();
        match variable {
            SweptStore::Value(_) => {
                keys.insert(entry.key.to_vec());
            }
            // kstate 0.1's entries name one list element or map entry each.
            SweptStore::Entries(_) if !entry.suffix.is_empty() => {
                keys.insert([entry.prefix, entry.suffix].concat());
            }
            SweptStore::Entries(_) => {
                prefixes.insert(entry.prefix);
            }
        }
    }
    let mut removed = 0;
    for (name, store) in variables.iter_mut() {
        let Some(Due { keys, prefixes }) = named.remove(name.as_str()) else {
            continue; // nothing of it due
        };
        let store = match store {
            SweptStore::Value(store) | SweptStore::Entries(store) => store,
        };
        // A set: a key named both by its own entry and by its grouping key's is deleted and
        // counted once.
        let mut expired = BTreeSet::new();
        for key in keys {
            if let Some(stored) = store.get(&key)? {
                if expiry_of(&stored)? <= now_ms {
                    expired.insert(key);
                }
            }
        }
        let prefixes: Vec<&[u8]> = prefixes.into_iter().collect();
        store.scan_prefixes(&prefixes, &mut |_, key, stored| {
            if expiry_of(stored)? <= now_ms {
                expired.insert(key.to_vec());
            }
            Ok(true)
        })?;
        for key in &expired {
            store.put(key, None)?;
        }
        removed += expired.len() as u64;
    }
    for (raw, _) in &due {
        index.put(raw, None)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spark::state_layout::{key_prefix, list_key, stored_value, ttl_entry, ttl_name};
    use crate::store::StoreOptions;

    fn store(name: &str) -> KeyValueStore {
        KeyValueStore::open_in_memory(name, StoreOptions::default())
    }

    fn keys(store: &KeyValueStore) -> Vec<Vec<u8>> {
        let all = store.scan(&KeyRange::all(), Direction::Forward, usize::MAX);
        all.unwrap().into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn due_entries_delete_what_expired_and_keep_what_was_written_again() {
        let (mut index, mut value, mut list) = (store("tws.ttl"), store("v"), store("l"));
        let (a, b) = (key_prefix(b"a").unwrap(), key_prefix(b"b").unwrap());
        let mut indexed = |expiry: i64, name: &str, prefix: &[u8], suffix: &[u8]| {
            let entry = [
                &ttl_entry(expiry, &ttl_name(name).unwrap(), prefix)[..],
                suffix,
            ]
            .concat();
            index.put(&entry, Some(b"")).unwrap();
        };
        // Value "a" written at 10 then again at 20 (due twice); "b" at 10 only.
        value.put(b"a", Some(&stored_value(20, b"1"))).unwrap();
        value.put(b"b", Some(&stored_value(10, b"2"))).unwrap();
        indexed(10, "v", &a, b"");
        indexed(20, "v", &a, b"");
        indexed(10, "v", &b, b"");
        // Value "d" indexed at two expiries both due at the sweep: deleted and counted once.
        let d = key_prefix(b"d").unwrap();
        value.put(b"d", Some(&stored_value(12, b"4"))).unwrap();
        indexed(11, "v", &d, b"");
        indexed(12, "v", &d, b"");
        // List "a": elements 0, 1 written at 10, element 2 at 20; list "b": one element of
        // kstate 0.1's index (its own entry), one never indexed.
        for (sequence, expiry) in [(0, 10), (1, 10), (2, 20)] {
            list.put(&list_key(&a, sequence), Some(&stored_value(expiry, b"x")))
                .unwrap();
        }
        indexed(10, "l", &a, b"");
        indexed(20, "l", &a, b"");
        list.put(&list_key(&b, 0), Some(&stored_value(10, b"y")))
            .unwrap();
        indexed(10, "l", &b, &0u64.to_be_bytes());
        list.put(&list_key(&b, 1), Some(&stored_value(10, b"z")))
            .unwrap();
        // List "c": its element named both by its own entry and by the key's.
        let c = key_prefix(b"c").unwrap();
        list.put(&list_key(&c, 0), Some(&stored_value(10, b"w")))
            .unwrap();
        indexed(10, "l", &c, &0u64.to_be_bytes());
        indexed(10, "l", &c, b"");
        // A variable no longer declared: its index entry goes, its state stays.
        indexed(10, "gone", &a, b"");

        let mut variables = HashMap::from([
            ("v".to_string(), SweptStore::Value(&mut value)),
            ("l".to_string(), SweptStore::Entries(&mut list)),
        ]);
        assert_eq!(sweep_expired(&mut index, &mut variables, 15).unwrap(), 6);
        assert_eq!(keys(&value), [b"a".to_vec()]);
        assert_eq!(keys(&list), [list_key(&a, 2), list_key(&b, 1)]);
        assert_eq!(keys(&index).len(), 2, "the entries due at 20");

        let mut variables = HashMap::from([
            ("v".to_string(), SweptStore::Value(&mut value)),
            ("l".to_string(), SweptStore::Entries(&mut list)),
        ]);
        assert_eq!(sweep_expired(&mut index, &mut variables, 20).unwrap(), 2);
        assert_eq!(keys(&value), Vec::<Vec<u8>>::new());
        assert_eq!(keys(&list), [list_key(&b, 1)], "never indexed, never swept");
        assert!(keys(&index).is_empty());
    }
}

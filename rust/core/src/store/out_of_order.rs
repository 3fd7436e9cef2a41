//! Out-of-order updates of source tables (KAFKA-5533): on a timestamped store, a write only
//! applies when it is not older than the value it replaces, so the value with the larger record
//! timestamp wins whatever order the records arrive in.

use crate::error::Result;
use crate::format::timestamped;
use crate::store::key_value::KeyValueStore;

impl KeyValueStore {
    /// Writes `stored` (`ValueAndTimestamp` bytes; `None` deletes) if `key` has no value or one
    /// whose timestamp is at most `timestamp`. Returns whether it applied. Equal timestamps
    /// apply: of two records with the same time, the later one wins, as in Kafka.
    pub fn put_if_newer(
        &mut self,
        key: &[u8],
        stored: Option<&[u8]>,
        timestamp: i64,
    ) -> Result<bool> {
        let newer = self.get_with(key, |existing| -> Result<bool> {
            match existing {
                None => Ok(true),
                Some(bytes) => Ok(timestamped::decode(bytes)?.0 <= timestamp),
            }
        })??;
        if newer {
            self.put(key, stored)?;
        }
        Ok(newer)
    }
}

#[cfg(test)]
mod tests {
    use crate::format::timestamped::encode;
    use crate::store::key_value::{KeyValueStore, StoreOptions};

    #[test]
    fn the_larger_timestamp_wins_in_any_order() {
        let options = StoreOptions {
            transactional: true,
            max_uncommitted_bytes: usize::MAX,
            offset_key: "t-0".into(),
            cache_max_bytes: 0,
            rocks: None,
            durability: Default::default(),
        };
        let mut store = KeyValueStore::open_in_memory("s", options);
        assert!(store
            .put_if_newer(b"k", Some(&encode(10, b"a")), 10)
            .unwrap());
        assert!(!store
            .put_if_newer(b"k", Some(&encode(5, b"late")), 5)
            .unwrap());
        assert!(store
            .put_if_newer(b"k", Some(&encode(10, b"same")), 10)
            .unwrap());
        assert_eq!(store.get(b"k").unwrap(), Some(encode(10, b"same")));
        assert!(
            !store.put_if_newer(b"k", None, 9).unwrap(),
            "an older delete is ignored"
        );
        assert!(store.put_if_newer(b"k", None, 11).unwrap());
        assert_eq!(store.get(b"k").unwrap(), None);
        assert!(store.put_if_newer(b"k", Some(&encode(1, b"b")), 1).unwrap());
    }
}

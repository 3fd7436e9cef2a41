//! A store directory read without opening it for writing (`kstate inspect`): the offsets its
//! `offsets` column family records and its entry count, RocksDB's estimate or, when asked,
//! counted one by one (a scan: the estimate counts a key overwritten or deleted since the last
//! compaction more than once). RocksDB's read-only mode takes no lock, so a store a running job
//! holds can be inspected; it sees the last flush and the WAL at the time it opens.

use std::path::Path;

use rocksdb::{Options, DB};

use crate::error::{Error, Result};
use crate::format::offsets::{self, OFFSETS_CF, STATUS_KEY};

/// What `summarize` found in a store directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSummary {
    /// `(name, value)` of the `offsets` family: changelog offsets (`<topic>-<partition>`) and
    /// kstate's own entries (`kstate.ttl.stream-time`); the `status` marker is left out.
    pub offsets: Vec<(String, i64)>,
    /// RocksDB's estimate over the value column families.
    pub approximate_entries: u64,
    /// The entries of the value column families counted one by one (`count_entries`).
    pub entries: Option<u64>,
}

/// Reads the store at `path` read-only; `count_entries`: counts its entries by a scan too.
pub fn summarize(path: &Path, count_entries: bool) -> Result<StoreSummary> {
    if !path.join("CURRENT").exists() {
        return Err(Error::InvalidArgument(format!(
            "{} holds no RocksDB store",
            path.display()
        )));
    }
    let families = DB::list_cf(&Options::default(), path)?;
    let db = DB::open_cf_for_read_only(&Options::default(), path, &families, false)?;
    let mut summary = StoreSummary::default();
    for family in &families {
        let cf = db
            .cf_handle(family)
            .ok_or_else(|| Error::Storage(format!("column family {family} is not open")))?;
        if family != OFFSETS_CF {
            summary.approximate_entries += db
                .property_int_value_cf(cf, rocksdb::properties::ESTIMATE_NUM_KEYS)?
                .unwrap_or(0);
            if count_entries {
                *summary.entries.get_or_insert(0) += count(&db, cf)?;
            }
            continue;
        }
        let mut iter = db.raw_iterator_cf(cf);
        iter.seek_to_first();
        while let Some((key, value)) = iter.item() {
            if key != STATUS_KEY {
                let name = String::from_utf8_lossy(key).into_owned();
                summary.offsets.push((name, offsets::decode(key, value)?));
            }
            iter.next();
        }
        iter.status()?;
    }
    Ok(summary)
}

/// The entries of one column family, by a scan (RocksDB only estimates them).
pub(crate) fn count(db: &DB, cf: &rocksdb::ColumnFamily) -> Result<u64> {
    let mut iter = db.raw_iterator_cf(cf);
    iter.seek_to_first();
    let mut n = 0;
    while iter.valid() {
        n += 1;
        iter.next();
    }
    iter.status()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key_value::{KeyValueStore, StoreOptions};
    use crate::ValueFormat;

    #[test]
    fn reads_the_committed_offset_of_a_store_left_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rocksdb/s");
        let options = StoreOptions {
            offset_key: "app-s-changelog-3".into(),
            ..StoreOptions::default()
        };
        let (mut store, _) = KeyValueStore::open_rocksdb(
            "s",
            &path,
            &dir.path().join("rocksdb/.s.uncommitted"),
            ValueFormat::Timestamped,
            options,
            &mut |_| {},
        )
        .unwrap();
        for i in 0..100u32 {
            store.put(&i.to_be_bytes(), Some(b"v")).unwrap();
        }
        store.commit(Some(41), &mut |_| {}).unwrap();
        let summary = summarize(&path, false).unwrap();
        assert_eq!(summary.offsets, vec![("app-s-changelog-3".to_owned(), 41)]);
        assert_eq!(summary.approximate_entries, 100);
        assert_eq!(summary.entries, None);
        assert!(summarize(&dir.path().join("nothing"), false).is_err());
    }

    #[test]
    fn counts_entries_exactly_after_overwrites_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rocksdb/s");
        let (mut store, _) = KeyValueStore::open_rocksdb(
            "s",
            &path,
            &dir.path().join("rocksdb/.s.uncommitted"),
            ValueFormat::Timestamped,
            StoreOptions::default(),
            &mut |_| {},
        )
        .unwrap();
        for round in 0..3u8 {
            for i in 0..100u32 {
                store.put(&i.to_be_bytes(), Some(&[round])).unwrap();
            }
            store.commit(Some(i64::from(round)), &mut |_| {}).unwrap();
            store.flush_memtables_past(0).unwrap();
        }
        for i in 0..40u32 {
            store.put(&i.to_be_bytes(), None).unwrap();
        }
        store.commit(Some(3), &mut |_| {}).unwrap();
        let summary = summarize(&path, true).unwrap();
        // Only the scan is exact: the estimate depends on whether a background compaction has
        // merged the tables yet, which is timing.
        assert_eq!(summary.entries, Some(60));
    }
}

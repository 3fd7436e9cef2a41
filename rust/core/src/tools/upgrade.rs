//! Offline store-format upgrades (KIP-258): a store directory in the plain format (values in
//! `default`, as a plain `RocksDBStore` or Kafka Streams before 2.3 wrote it) is converted to the
//! timestamped format (`keyValueWithTimestamp`, legacy values stamped -1) all at once, instead of
//! key by key as upgrade mode does. Inspecting opens the directory read-only, so a dry run changes
//! nothing.

use std::path::Path;

use rocksdb::{Options, DB, DEFAULT_COLUMN_FAMILY_NAME};

use crate::error::{Error, Result};
use crate::store::rocks::{RocksState, ValueFormat, TIMESTAMPED_CF};

/// Bytes of converted values per atomic batch.
const UPGRADE_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// The format a store directory is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFormat {
    /// No store in the directory.
    Missing,
    /// Plain values in `default` only.
    Plain,
    /// Timestamped values, with legacy values still in `default` (upgrade mode).
    Upgrading,
    /// Timestamped values only.
    Timestamped,
}

impl StoreFormat {
    pub fn name(self) -> &'static str {
        match self {
            StoreFormat::Missing => "missing",
            StoreFormat::Plain => "plain",
            StoreFormat::Upgrading => "upgrading",
            StoreFormat::Timestamped => "timestamped",
        }
    }
}

/// What a store directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreInspection {
    pub format: StoreFormat,
    /// Values in the plain format (in `default`): what an upgrade converts.
    pub legacy_entries: u64,
    pub timestamped_entries: u64,
}

fn count(db: &DB, family: &str) -> Result<u64> {
    let cf = db
        .cf_handle(family)
        .ok_or_else(|| Error::Storage(format!("column family {family} is not open")))?;
    super::inspect::count(db, cf)
}

/// The format of the store at `path` and its entry counts, read-only.
pub fn inspect(path: &Path) -> Result<StoreInspection> {
    if !path.join("CURRENT").exists() {
        return Ok(StoreInspection {
            format: StoreFormat::Missing,
            legacy_entries: 0,
            timestamped_entries: 0,
        });
    }
    let families = DB::list_cf(&Options::default(), path)?;
    let db = DB::open_cf_for_read_only(&Options::default(), path, &families, false)?;
    let legacy_entries = count(&db, DEFAULT_COLUMN_FAMILY_NAME)?;
    let has_timestamped = families.iter().any(|f| f == TIMESTAMPED_CF);
    let timestamped_entries = if has_timestamped {
        count(&db, TIMESTAMPED_CF)?
    } else {
        0
    };
    let format = match (has_timestamped, legacy_entries) {
        (false, _) => StoreFormat::Plain,
        (true, 0) => StoreFormat::Timestamped,
        (true, _) => StoreFormat::Upgrading,
    };
    Ok(StoreInspection {
        format,
        legacy_entries,
        timestamped_entries,
    })
}

/// Converts the store at `path` to the timestamped format, reporting `(converted, total)`;
/// returns the number of values converted. Safe to interrupt and run again.
pub fn upgrade_to_timestamped(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
    if !path.join("CURRENT").exists() {
        return Err(Error::InvalidArgument(format!(
            "{} holds no store to upgrade",
            path.display()
        )));
    }
    RocksState::open(path, ValueFormat::Timestamped)?.migrate_legacy(UPGRADE_BATCH_BYTES, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::committed::CommittedState;

    #[test]
    fn a_plain_store_converts_with_timestamps_minus_one_and_dry_runs_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        assert_eq!(inspect(&path).unwrap().format, StoreFormat::Missing);
        let plain = RocksState::open(&path, ValueFormat::Plain).unwrap();
        let writes: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32)
            .map(|i| (format!("k{i:05}").into_bytes(), vec![b'v'; 5000]))
            .collect();
        plain
            .apply(
                &mut writes
                    .iter()
                    .map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
                None,
            )
            .unwrap();
        drop(plain);

        let before = inspect(&path).unwrap();
        assert_eq!(
            (before.format, before.legacy_entries),
            (StoreFormat::Plain, 2000)
        );
        assert_eq!(
            inspect(&path).unwrap(),
            before,
            "inspecting changes nothing"
        );

        let mut reports = Vec::new();
        assert_eq!(
            upgrade_to_timestamped(&path, &mut |done, total| reports.push((done, total))).unwrap(),
            2000
        );
        assert!(reports.len() > 1, "10 MB converts in several batches");
        assert_eq!(reports.last(), Some(&(2000, 2000)));
        let after = inspect(&path).unwrap();
        assert_eq!(
            (
                after.format,
                after.legacy_entries,
                after.timestamped_entries
            ),
            (StoreFormat::Timestamped, 0, 2000)
        );
        let store = RocksState::open(&path, ValueFormat::Timestamped).unwrap();
        assert!(!store.upgrade_mode());
        let mut value = None;
        store
            .read(b"k00007", false, &mut |v| value = v.map(<[u8]>::to_vec))
            .unwrap();
        assert_eq!(value.unwrap()[..8], (-1i64).to_be_bytes());
        drop(store);
        assert_eq!(
            upgrade_to_timestamped(&path, &mut |_, _| {}).unwrap(),
            0,
            "nothing left"
        );
    }
}

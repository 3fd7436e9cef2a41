//! The WAL files a closed store leaves behind. Key-value stores recycle their WAL files
//! (`rocks_options`): RocksDB keeps a few obsolete ones to write over, files already allocated
//! and cached, instead of new ones at every memtable switch, and deletes them only at the next
//! open. A clean close removes them itself, so a closed store's directory holds only what
//! recovery reads.

use std::fs;
use std::path::{Path, PathBuf};

/// Removes the WAL files (`<number>.log`) of the closed database in `dir` numbered below
/// `keep_from` (RocksDB's `rocksdb.min-log-number-to-keep`): no recovery reads them, and
/// RocksDB's next open would delete them. A file that cannot be removed is left to that open.
pub fn remove_obsolete(dir: &Path, keep_from: u64) {
    for (number, path) in wal_files(dir) {
        if number < keep_from {
            let _ = fs::remove_file(path);
        }
    }
}

/// Empties the live WAL files (numbered `keep_from` or above) of the closed database in `dir`,
/// for a database whose memtables were all empty: such a file holds no write that is not in a
/// table file, only the old records of its recycled past. A file that cannot be emptied is
/// left as it is: recovery stops at its old records.
pub fn empty_live(dir: &Path, keep_from: u64) {
    for (number, path) in wal_files(dir) {
        if number >= keep_from {
            let _ = fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|file| file.set_len(0));
        }
    }
}

/// `(number, path)` of each WAL file in `dir`.
fn wal_files(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let number = entry
                .file_name()
                .to_str()?
                .strip_suffix(".log")
                .filter(|stem| !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()))?
                .parse()
                .ok()?;
            Some((number, entry.path()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_wal_files_below_the_bound_and_empties_the_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "000007.log",
            "000009.log",
            "000010.log",
            "000012.log",
            "LOG",
            "LOG.old.1",
            "000008.sst",
            "x.log",
            ".log",
            "MANIFEST-000005",
        ] {
            fs::write(dir.path().join(name), b"old records").unwrap();
        }
        remove_obsolete(dir.path(), 10);
        empty_live(dir.path(), 12);
        let mut left: Vec<(String, u64)> = fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                (name, entry.metadata().unwrap().len())
            })
            .collect();
        left.sort();
        let kept = |name: &str| (name.to_string(), 11);
        assert_eq!(
            left,
            [
                kept(".log"),
                kept("000008.sst"),
                kept("000010.log"),
                ("000012.log".to_string(), 0),
                kept("LOG"),
                kept("LOG.old.1"),
                kept("MANIFEST-000005"),
                kept("x.log"),
            ]
        );
    }
}

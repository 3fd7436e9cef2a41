//! Helpers shared by the integration tests (each test file is a crate; `mod common;`).

use std::path::Path;

/// A RocksDB directory as a process killed now leaves it: every file as written so far (the
/// page cache survives a process), without `LOCK`, which died with the process.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

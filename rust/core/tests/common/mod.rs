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

/// Checks a chunk a scan passed on against what the scan says of it, and that it ends at its
/// bytes: no row after the one that reached `CHUNK_BYTES`.
pub fn assert_chunk(chunk: &[(Vec<u8>, Vec<u8>)], scanned: kstate_core::store::merge::Scanned) {
    let bytes: usize = chunk.iter().map(|(k, v)| k.len() + v.len()).sum();
    let last_row = chunk.last().map_or(0, |(k, v)| k.len() + v.len());
    assert_eq!((scanned.rows, scanned.bytes), (chunk.len(), bytes));
    assert!(
        bytes - last_row < kstate_core::store::merge::CHUNK_BYTES,
        "a chunk ends at its bytes"
    );
}

//! The files of a captured store (a RocksDB checkpoint directory) with their sizes and content
//! hashes, and the check a restore makes of files it fetched.
//!
//! A snapshot leaves out RocksDB's write-ahead log files (`<number>.log`): the capture flushed
//! every memtable with commits held off, so they hold no write the table files lack, and a
//! recycled WAL file (`recycle_log_file_num`) still holds a write buffer's worth of old records.
//! RocksDB opens the files without them and starts a new WAL.
//!
//! Hashing reads every byte, so [`FileHashes`] remembers the hash of each table file it has
//! read: RocksDB never changes a table file once written, and a checkpoint's table files are
//! hard links of the store's, so the next snapshot finds the same file (same inode, size and
//! modification time) and reads only what is new. Other files (`MANIFEST`, `CURRENT`,
//! `OPTIONS`, a copied WAL) are small and written afresh by each checkpoint: always read.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use twox_hash::xxhash3_128::Hasher;

use crate::error::{Error, Result};
use crate::snapshot::manifest::SnapshotFile;

const READ_BYTES: usize = 1 << 20;
/// RocksDB's table files: immutable once written.
const TABLE_SUFFIX: &str = ".sst";

/// Whether `name` is one of RocksDB's write-ahead log files, `<number>.log`.
fn is_wal(name: &str) -> bool {
    name.strip_suffix(".log")
        .is_some_and(|number| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
}

/// The size and XXH3-128 of a file's content.
pub fn content_hash(path: &Path) -> Result<(u64, u128)> {
    let mut file = File::open(path).map_err(|e| io_error(e, "reading", path))?;
    let mut hasher = Hasher::new();
    let mut buffer = vec![0u8; READ_BYTES];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error(e, "reading", path)),
        };
        hasher.write(&buffer[..n]);
        size += n as u64;
    }
    Ok((size, hasher.finish_128()))
}

/// What tells one table file from another on this machine without reading it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileIdentity {
    name: String,
    size: u64,
    device: u64,
    inode: u64,
    modified_ns: i128,
}

impl FileIdentity {
    fn of(name: &str, metadata: &std::fs::Metadata) -> Self {
        Self {
            name: name.to_string(),
            size: metadata.len(),
            device: metadata.dev(),
            inode: metadata.ino(),
            modified_ns: i128::from(metadata.mtime()) * 1_000_000_000
                + i128::from(metadata.mtime_nsec()),
        }
    }
}

/// Hashes of the table files read so far (see the module docs).
#[derive(Debug, Default)]
pub struct FileHashes {
    known: HashMap<FileIdentity, u128>,
}

/// What [`FileHashes::describe`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Described {
    pub files: u64,
    pub bytes: u64,
    /// Files and bytes read to hash them (the rest were known).
    pub files_hashed: u64,
    pub bytes_hashed: u64,
}

impl FileHashes {
    /// Every file under `dir` (subdirectories too) but WAL files, sorted by path, with size
    /// and hash. Remembers the table files' hashes and forgets those of files no longer there.
    pub fn describe(&mut self, dir: &Path) -> Result<(Vec<SnapshotFile>, Described)> {
        let mut found = Vec::new();
        walk(dir, "", &mut found)?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let mut known = HashMap::with_capacity(self.known.len());
        let mut files = Vec::with_capacity(found.len());
        let mut report = Described::default();
        for (path, full) in found {
            let metadata = std::fs::metadata(&full).map_err(|e| io_error(e, "reading", &full))?;
            let identity = path
                .ends_with(TABLE_SUFFIX)
                .then(|| FileIdentity::of(&path, &metadata));
            let remembered = identity.as_ref().and_then(|id| self.known.get(id).copied());
            let (size, hash) = match remembered {
                Some(hash) => (metadata.len(), hash),
                None => {
                    let (size, hash) = content_hash(&full)?;
                    report.files_hashed += 1;
                    report.bytes_hashed += size;
                    (size, hash)
                }
            };
            if let Some(identity) = identity.filter(|id| id.size == size) {
                known.insert(identity, hash);
            }
            report.files += 1;
            report.bytes += size;
            files.push(SnapshotFile { path, size, hash });
        }
        self.known = known;
        Ok((files, report))
    }
}

/// Collects `(relative path, full path)` of the regular files under `dir`.
fn walk(dir: &Path, prefix: &str, found: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let listing = std::fs::read_dir(dir).map_err(|e| io_error(e, "listing", dir))?;
    for entry in listing {
        let entry = entry.map_err(|e| io_error(e, "listing", dir))?;
        let name = entry.file_name().into_string().map_err(|name| {
            Error::InvalidState(format!(
                "file name {name:?} in {} is not UTF-8",
                dir.display()
            ))
        })?;
        let relative = format!("{prefix}{name}");
        let kind = entry.file_type().map_err(|e| io_error(e, "listing", dir))?;
        if kind.is_dir() {
            walk(&entry.path(), &format!("{relative}/"), found)?;
        } else if !is_wal(&name) {
            found.push((relative, entry.path()));
        }
    }
    Ok(())
}

/// The files of `files` that `dir` does not hold as listed (missing, another size, another
/// hash), each with what is wrong; empty when all are right.
pub fn verify(dir: &Path, files: &[SnapshotFile]) -> Result<Vec<(String, String)>> {
    let mut wrong = Vec::new();
    for file in files {
        let path = dir.join(&file.path);
        let problem = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("missing".to_string()),
            Err(e) => return Err(io_error(e, "reading", &path)),
            Ok(metadata) if metadata.len() != file.size => Some(format!(
                "{} bytes, the manifest says {}",
                metadata.len(),
                file.size
            )),
            Ok(_) => {
                let (_, hash) = content_hash(&path)?;
                (hash != file.hash).then(|| {
                    format!(
                        "content hash {hash:032x}, the manifest says {:032x}",
                        file.hash
                    )
                })
            }
        };
        if let Some(problem) = problem {
            wrong.push((file.path.clone(), problem));
        }
    }
    Ok(wrong)
}

fn io_error(error: std::io::Error, what: &str, path: &Path) -> Error {
    Error::Storage(format!("{what} {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_content_hash_is_xxh3_128_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            content_hash(&path).unwrap(),
            (
                bytes.len() as u64,
                twox_hash::xxhash3_128::Hasher::oneshot(&bytes)
            )
        );
    }

    #[test]
    fn table_files_are_read_once_other_files_every_time() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("000007.sst"), b"table").unwrap();
        std::fs::write(dir.path().join("CURRENT"), b"MANIFEST-000005\n").unwrap();
        std::fs::create_dir(dir.path().join("seg")).unwrap();
        std::fs::write(dir.path().join("seg/000001.sst"), b"segment table").unwrap();
        std::fs::write(dir.path().join("000011.log"), b"write-ahead log").unwrap();
        std::fs::write(dir.path().join("seg/000004.log"), b"write-ahead log").unwrap();
        let mut hashes = FileHashes::default();
        let (files, first) = hashes.describe(dir.path()).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["000007.sst", "CURRENT", "seg/000001.sst"],
            "WAL files left out"
        );
        assert_eq!(first.files_hashed, 3);
        let (again, second) = hashes.describe(dir.path()).unwrap();
        assert_eq!(again, files);
        assert_eq!((second.files_hashed, second.bytes_hashed), (1, 16));

        // A table file of the same name written anew (another inode) is read again.
        std::fs::write(dir.path().join("000007.sst.new"), b"TABLE").unwrap();
        std::fs::rename(
            dir.path().join("000007.sst.new"),
            dir.path().join("000007.sst"),
        )
        .unwrap();
        let (changed, third) = hashes.describe(dir.path()).unwrap();
        assert_eq!(third.files_hashed, 2);
        assert_ne!(changed[0].hash, files[0].hash);
    }

    #[test]
    fn verify_names_each_wrong_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.sst"), b"aaaa").unwrap();
        std::fs::write(dir.path().join("b"), b"bb").unwrap();
        std::fs::write(dir.path().join("c"), b"cc").unwrap();
        let (files, _) = FileHashes::default().describe(dir.path()).unwrap();
        assert!(verify(dir.path(), &files).unwrap().is_empty());
        std::fs::write(dir.path().join("a.sst"), b"aaab").unwrap();
        std::fs::write(dir.path().join("b"), b"bbb").unwrap();
        std::fs::remove_file(dir.path().join("c")).unwrap();
        let wrong = verify(dir.path(), &files).unwrap();
        let named: Vec<&str> = wrong.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(named, ["a.sst", "b", "c"]);
        assert!(wrong[0].1.contains("content hash"));
        assert!(wrong[1].1.contains("3 bytes"));
        assert_eq!(wrong[2].1, "missing");
    }
}

//! An index file on disk: fixed-size big-endian entries, nothing else.
//!
//! Kafka memory-maps index files preallocated to `segment.index.bytes` (10 MiB) and trims them
//! when a segment rolls. kstate keeps the entries in memory and writes new ones to a plain file
//! at [`IndexFile::persist`] (on flush, roll and close), so the file always has exactly its
//! entries: no preallocation, no mmap. Reading accepts Kafka's zero-filled preallocated tail.

use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use super::file_io::{self, IoContext};
use crate::error::Result;

/// A fixed-size index entry.
pub(crate) trait IndexEntry: Copy {
    const SIZE: usize;
    /// The entry's offset, relative to its segment's base offset.
    fn relative_offset(&self) -> i32;
    fn write_to(&self, out: &mut Vec<u8>);
    /// `bytes` is exactly `SIZE` long.
    fn read_from(bytes: &[u8]) -> Option<Self>;
}

/// What an index file on disk holds.
pub(crate) enum StoredIndex<E> {
    Missing,
    /// Not a whole number of entries.
    BadLength(u64),
    Entries(Vec<E>),
}

/// Reads every entry of the index file at `path`. Trailing all-zero entries are Kafka's
/// preallocated space, not entries, and are dropped; the first entry is kept even if zero,
/// since a time entry (0, base offset) is real (a zero offset entry is harmless: position 0).
pub(crate) fn read_index<E: IndexEntry>(path: &Path) -> Result<StoredIndex<E>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse_index(&bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(StoredIndex::Missing),
        Err(error) => Err(error).context(|| format!("reading {}", path.display())),
    }
}

/// The entries of an index file's bytes, as [`read_index`] reads them.
pub(crate) fn parse_index<E: IndexEntry>(bytes: &[u8]) -> StoredIndex<E> {
    if !bytes.len().is_multiple_of(E::SIZE) {
        return StoredIndex::BadLength(bytes.len() as u64);
    }
    let used = bytes
        .chunks_exact(E::SIZE)
        .rposition(|entry| entry.iter().any(|&b| b != 0))
        .map_or(0, |last_nonzero| last_nonzero + 1)
        .max(usize::from(!bytes.is_empty()));
    let entries = bytes
        .chunks_exact(E::SIZE)
        .take(used)
        .filter_map(E::read_from)
        .collect();
    StoredIndex::Entries(entries)
}

/// The CRC of the file holding exactly `entries`.
pub(crate) fn entries_crc<E: IndexEntry>(entries: &[E]) -> u32 {
    let mut bytes = Vec::with_capacity(entries.len() * E::SIZE);
    for entry in entries {
        entry.write_to(&mut bytes);
    }
    crc32fast::hash(&bytes)
}

/// An open index file holding the first `persisted` entries of its in-memory index.
pub(crate) struct IndexFile<E> {
    path: PathBuf,
    file: File,
    persisted: usize,
    entry: PhantomData<E>,
}

impl<E: IndexEntry> IndexFile<E> {
    /// Creates (or empties) the file and writes `entries`.
    pub(crate) fn create(path: PathBuf, entries: &[E]) -> Result<Self> {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .context(|| format!("creating {}", path.display()))?;
        let mut index = Self {
            path,
            file,
            persisted: 0,
            entry: PhantomData,
        };
        index.persist(entries)?;
        Ok(index)
    }

    /// Opens an existing file whose first `entries` entries are current, trimming anything
    /// after them (a preallocated tail).
    pub(crate) fn open(path: PathBuf, entries: usize) -> Result<Self> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .context(|| format!("opening {}", path.display()))?;
        let index = Self {
            path,
            file,
            persisted: entries,
            entry: PhantomData,
        };
        index.set_len(entries)?;
        Ok(index)
    }

    /// Writes the entries not yet in the file.
    pub(crate) fn persist(&mut self, entries: &[E]) -> Result<()> {
        if entries.len() < self.persisted {
            self.truncate(entries.len())?;
        }
        let Some(new) = entries.get(self.persisted..).filter(|new| !new.is_empty()) else {
            return Ok(());
        };
        let mut bytes = Vec::with_capacity(new.len() * E::SIZE);
        for entry in new {
            entry.write_to(&mut bytes);
        }
        file_io::write_all_at(&self.file, &bytes, (self.persisted * E::SIZE) as u64)
            .context(|| format!("writing {}", self.path.display()))?;
        self.persisted = entries.len();
        Ok(())
    }

    /// Cuts the file to its first `entries` entries.
    pub(crate) fn truncate(&mut self, entries: usize) -> Result<()> {
        if entries < self.persisted {
            self.set_len(entries)?;
            self.persisted = entries;
        }
        Ok(())
    }

    /// Replaces the whole file content with `entries`.
    pub(crate) fn rewrite(&mut self, entries: &[E]) -> Result<()> {
        self.set_len(0)?;
        self.persisted = 0;
        self.persist(entries)
    }

    /// Makes the persisted entries durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .context(|| format!("syncing {}", self.path.display()))
    }

    /// Renames the file; the open handle stays valid.
    pub(crate) fn rename_to(&mut self, path: PathBuf) -> Result<()> {
        file_io::rename(&self.path, &path)?;
        self.path = path;
        Ok(())
    }

    fn set_len(&self, entries: usize) -> Result<()> {
        self.file
            .set_len((entries * E::SIZE) as u64)
            .context(|| format!("truncating {}", self.path.display()))
    }
}

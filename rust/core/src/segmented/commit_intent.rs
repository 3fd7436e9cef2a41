//! The commit-intent file of a segmented store (`<task>/.<store>.commit`, beside the store's
//! directory, which must hold segments only), which makes a commit that writes several segment
//! databases atomic.
//!
//! A commit first writes every touched segment's RocksDB `WriteBatch`, the changelog offset and
//! the stream time into a new file (checksummed, fsynced, renamed over the old one), then applies
//! the batches segment by segment, then rewrites the file without batches. On open, a file that
//! still holds batches is a commit a crash interrupted: applying them again finishes it (a batch
//! holds final values and deletes, so applying twice is harmless). A file that fails its checksum
//! never replaced the previous one by rename, so it is ignored. Without batches the file is the
//! store's committed offset and stream time.
//!
//! Layout (integers big-endian): `KSTATEC1`, u8 has-offset, i64 offset, i64 stream time, then
//! entries of (i64 segment id, u64 length, batch bytes), then u64 entry count and the CRC-32 of
//! everything before it.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"KSTATEC1";
const HEADER_LEN: u64 = 8 + 1 + 8 + 8;
const TRAILER_LEN: u64 = 8 + 4;

/// What a commit-intent file says besides its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitIntent {
    pub offset: Option<i64>,
    pub stream_time: i64,
    /// Number of batches still to apply (0: the commit is complete).
    pub entries: u64,
}

/// Writes a commit-intent file next to its final path, then renames it into place.
pub struct IntentWriter {
    file: BufWriter<File>,
    tmp: PathBuf,
    crc: crc32fast::Hasher,
    entries: u64,
}

/// Where a commit-intent file is written before it is renamed to `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    path.with_extension("commit.tmp")
}

impl IntentWriter {
    pub fn create(path: &Path, offset: Option<i64>, stream_time: i64) -> Result<Self> {
        let tmp = temp_path(path);
        let mut writer = Self {
            file: BufWriter::with_capacity(1 << 20, File::create(&tmp)?),
            tmp,
            crc: crc32fast::Hasher::new(),
            entries: 0,
        };
        writer.write(MAGIC)?;
        writer.write(&[u8::from(offset.is_some())])?;
        writer.write(&offset.unwrap_or(0).to_be_bytes())?;
        writer.write(&stream_time.to_be_bytes())?;
        Ok(writer)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        self.file.write_all(bytes)?;
        Ok(())
    }

    /// Adds one segment's batch (`WriteBatch::data`).
    pub fn entry(&mut self, segment: i64, batch: &[u8]) -> Result<()> {
        self.write(&segment.to_be_bytes())?;
        self.write(&(batch.len() as u64).to_be_bytes())?;
        self.write(batch)?;
        self.entries += 1;
        Ok(())
    }

    /// Batches added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Seals the file, makes it durable and atomically replaces `path` with it.
    pub fn finish(self, path: &Path) -> Result<()> {
        self.seal(path, true)
    }

    /// Seals the file, writes it to disk and atomically replaces `path` with it; `durable` also
    /// makes the rename durable. The data is always synced first: a rename that survives a
    /// machine crash must never point at a file whose bytes did not (some file systems then keep
    /// an empty file, which would hide the durable intent it replaced).
    fn seal(mut self, path: &Path, durable: bool) -> Result<()> {
        let count = self.entries.to_be_bytes();
        self.write(&count)?;
        let crc = self.crc.clone().finalize().to_be_bytes();
        self.file.write_all(&crc)?;
        let file = self
            .file
            .into_inner()
            .map_err(|e| Error::Storage(format!("I/O: {}", e.error())))?;
        file.sync_data()?;
        drop(file);
        fs::rename(&self.tmp, path)?;
        if durable {
            sync_rename(path)?;
        }
        Ok(())
    }
}

/// Makes the last rename onto `path` durable (syncs its directory): after a machine crash the
/// file is the one renamed there, not an older one.
pub fn sync_rename(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Writes a file without batches, durably: the record of a complete commit.
pub fn write_record(path: &Path, offset: Option<i64>, stream_time: i64) -> Result<()> {
    IntentWriter::create(path, offset, stream_time)?.finish(path)
}

/// `write_record` over the intent of a commit just applied, without making the rename durable:
/// a machine crash that loses the rename leaves the durable intent, whose batches apply again
/// harmlessly on open (they hold final values).
pub fn write_completion(path: &Path, offset: Option<i64>, stream_time: i64) -> Result<()> {
    IntentWriter::create(path, offset, stream_time)?.seal(path, false)
}

fn read_array<const N: usize>(reader: &mut impl Read) -> Result<[u8; N]> {
    let mut buf = [0u8; N];
    reader.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads the file at `path`, checking its checksum. `None`: no file, or one that is not a
/// complete commit-intent file (ignored, as a rename never put it there).
pub fn read(path: &Path) -> Result<Option<CommitIntent>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = file.metadata()?.len();
    if len < HEADER_LEN + TRAILER_LEN {
        return Ok(None);
    }
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut crc = crc32fast::Hasher::new();
    let mut body = (&mut reader).take(len - 4);
    let mut chunk = vec![0u8; 1 << 16];
    let mut tail = Vec::with_capacity(HEADER_LEN as usize);
    loop {
        let n = body.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        crc.update(&chunk[..n]);
        if tail.len() < HEADER_LEN as usize {
            let want = (HEADER_LEN as usize - tail.len()).min(n);
            tail.extend_from_slice(&chunk[..want]);
        }
    }
    let stored_crc = u32::from_be_bytes(read_array(&mut reader)?);
    if crc.finalize() != stored_crc || &tail[..8] != MAGIC {
        return Ok(None);
    }
    let header = parse_header(&tail)?;
    // The entry count is the 8 bytes before the CRC.
    let mut file = File::open(path)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(len - TRAILER_LEN))?;
    let entries = u64::from_be_bytes(read_array(&mut file)?);
    Ok(Some(CommitIntent { entries, ..header }))
}

fn parse_header(bytes: &[u8]) -> Result<CommitIntent> {
    let has_offset = match bytes[8] {
        0 => false,
        1 => true,
        other => {
            return Err(Error::Corrupted(format!(
                "commit intent has offset flag {other}"
            )))
        }
    };
    let field = |at: usize| -> i64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        i64::from_be_bytes(b)
    };
    Ok(CommitIntent {
        offset: has_offset.then(|| field(9)),
        stream_time: field(17),
        entries: 0,
    })
}

/// Passes each `(segment id, batch bytes)` of a file `read` accepted to `apply`, in order.
pub fn for_each_entry(
    path: &Path,
    intent: &CommitIntent,
    mut apply: impl FnMut(i64, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path)?);
    let _header: [u8; HEADER_LEN as usize] = read_array(&mut reader)?;
    let mut batch = Vec::new();
    for _ in 0..intent.entries {
        let segment = i64::from_be_bytes(read_array(&mut reader)?);
        let len = u64::from_be_bytes(read_array(&mut reader)?);
        let len = usize::try_from(len)
            .map_err(|_| Error::Corrupted(format!("commit intent batch of {len} bytes")))?;
        batch.resize(len, 0);
        reader.read_exact(&mut batch)?;
        apply(segment, &batch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_and_without_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".s.commit");
        assert_eq!(read(&path).unwrap(), None);
        let mut w = IntentWriter::create(&path, Some(41), 1_000).unwrap();
        w.entry(3, b"batch-three").unwrap();
        w.entry(4, b"").unwrap();
        w.finish(&path).unwrap();
        let intent = read(&path).unwrap().unwrap();
        assert_eq!(
            intent,
            CommitIntent {
                offset: Some(41),
                stream_time: 1_000,
                entries: 2
            }
        );
        let mut seen = Vec::new();
        for_each_entry(&path, &intent, |s, b| {
            seen.push((s, b.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(3, b"batch-three".to_vec()), (4, Vec::new())]);
        write_record(&path, None, -1).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Some(CommitIntent {
                offset: None,
                stream_time: -1,
                entries: 0
            })
        );
        assert!(!temp_path(&path).exists());
    }

    #[test]
    fn torn_or_flipped_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".s.commit");
        let mut w = IntentWriter::create(&path, Some(7), 5).unwrap();
        w.entry(1, &[7; 100]).unwrap();
        w.finish(&path).unwrap();
        let good = fs::read(&path).unwrap();
        for cut in [0, 10, good.len() / 2, good.len() - 1] {
            fs::write(&path, &good[..cut]).unwrap();
            assert_eq!(read(&path).unwrap(), None, "cut at {cut}");
        }
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        fs::write(&path, &flipped).unwrap();
        assert_eq!(read(&path).unwrap(), None);
    }
}

//! A snapshot manifest: what makes a set of files a snapshot of a store. It names the changelog
//! offset the files hold (the store's committed offset when they were captured), the Spark
//! micro-batch that commit belongs to when known, the store kind, a window or session store's
//! stream time, and every file with its size and content hash. A snapshot exists once its
//! manifest does; the manifest is written last.
//!
//! Layout (integers big-endian): `KSTATESN`, u16 format version, i64 changelog offset,
//! u8 has-batch + i64 batch id, u8 store kind (1 key-value, 2 window, 3 session), i64 creation
//! time (ms), in version 2 only i64 stream time, then u32 file count, then per file u16 path
//! length + the path (UTF-8, `/`-separated, relative to the store's directory), u64 size, 16
//! bytes of XXH3-128 of the content; last the CRC-32 of everything before it.
//!
//! Version 1 holds key-value stores; version 2 adds the stream time that window and session
//! stores need beside their segments' files (which hold their offsets, not the stream time of
//! a commit that wrote several segments). A key-value store's manifest is still written as
//! version 1, so a build that reads only version 1 still reads it.
//!
//! A file's object name is its content address: the local file name with the hash before its
//! extension (`000012.sst` -> `000012-<32 hex digits>.sst`). Table files never change once
//! written, so a later snapshot holding the same file names the same object and need not copy
//! it again; two writers of different bytes under one local name (two executors that restored
//! the same snapshot and went on) name different objects.

use std::collections::HashSet;

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"KSTATESN";
/// The newest format this build reads and writes (for window and session stores).
pub const FORMAT_VERSION: u16 = 2;
/// The format of a manifest without a stream time (key-value stores).
const FORMAT_VERSION_KEY_VALUE: u16 = 1;
const CRC_LEN: usize = 4;

/// Which store's files a snapshot holds; a restore refuses another kind's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    KeyValue,
    Window,
    Session,
}

impl StoreKind {
    fn code(self) -> u8 {
        match self {
            StoreKind::KeyValue => 1,
            StoreKind::Window => 2,
            StoreKind::Session => 3,
        }
    }

    fn from_code(code: u8) -> Result<Self> {
        match code {
            1 => Ok(StoreKind::KeyValue),
            2 => Ok(StoreKind::Window),
            3 => Ok(StoreKind::Session),
            other => Err(corrupted(format!("unknown store kind {other}"))),
        }
    }

    /// `"key-value"`, `"window"` or `"session"`, as Python names them.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::KeyValue => "key-value",
            StoreKind::Window => "window",
            StoreKind::Session => "session",
        }
    }

    /// Whether the store is kept in time segments (window, session), whose manifest names
    /// its stream time.
    pub fn segmented(self) -> bool {
        matches!(self, StoreKind::Window | StoreKind::Session)
    }

    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "key-value" => Ok(StoreKind::KeyValue),
            "window" => Ok(StoreKind::Window),
            "session" => Ok(StoreKind::Session),
            other => Err(Error::InvalidArgument(format!(
                "store kind must be \"key-value\", \"window\" or \"session\", got {other:?}"
            ))),
        }
    }
}

/// One file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Relative to the store's directory, `/`-separated.
    pub path: String,
    pub size: u64,
    /// XXH3-128 of the content.
    pub hash: u128,
}

impl SnapshotFile {
    /// The object the file is stored as: its file name with the content hash before the
    /// extension (`000012-<hash>.sst`, `MANIFEST-000005-<hash>`).
    pub fn object_name(&self) -> String {
        let name = self.path.rsplit('/').next().unwrap_or(&self.path);
        match name.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() => {
                format!("{stem}-{:032x}.{extension}", self.hash)
            }
            _ => format!("{name}-{:032x}", self.hash),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotManifest {
    /// The changelog offset the files hold: the store's state after every record up to it.
    pub offset: i64,
    /// The Spark micro-batch whose commit the offset is, when known.
    pub batch_id: Option<i64>,
    pub kind: StoreKind,
    pub created_ms: i64,
    /// A window or session store's stream time at the offset (what its retention counts
    /// from); `None` for a key-value store.
    pub stream_time: Option<i64>,
    /// Sorted by path, each path once.
    pub files: Vec<SnapshotFile>,
}

impl SnapshotManifest {
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "a snapshot holds a committed offset, not {}",
                self.offset
            )));
        }
        check_files(&self.files).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        check_stream_time(self.kind, self.stream_time)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let version = match self.stream_time {
            Some(_) => FORMAT_VERSION,
            None => FORMAT_VERSION_KEY_VALUE,
        };
        let count = u32::try_from(self.files.len())
            .map_err(|_| Error::InvalidArgument("too many files for one snapshot".into()))?;
        let mut out = Vec::with_capacity(64 + self.files.len() * 48);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.push(u8::from(self.batch_id.is_some()));
        out.extend_from_slice(&self.batch_id.unwrap_or(0).to_be_bytes());
        out.push(self.kind.code());
        out.extend_from_slice(&self.created_ms.to_be_bytes());
        if let Some(stream_time) = self.stream_time {
            out.extend_from_slice(&stream_time.to_be_bytes());
        }
        out.extend_from_slice(&count.to_be_bytes());
        for file in &self.files {
            let path = file.path.as_bytes();
            let length = u16::try_from(path.len()).map_err(|_| {
                Error::InvalidArgument(format!("snapshot file path too long: {}", file.path))
            })?;
            out.extend_from_slice(&length.to_be_bytes());
            out.extend_from_slice(path);
            out.extend_from_slice(&file.size.to_be_bytes());
            out.extend_from_slice(&file.hash.to_be_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        Ok(out)
    }

    /// Decodes a manifest, checking its CRC, its version and every path (a path leaving the
    /// store's directory is refused: restore writes files where the manifest says).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < MAGIC.len() + 2 + CRC_LEN || &bytes[..MAGIC.len()] != MAGIC {
            return Err(corrupted("not a snapshot manifest".into()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - CRC_LEN);
        let mut reader = Reader {
            bytes: body,
            at: MAGIC.len(),
        };
        let version = u16::from_be_bytes(reader.array()?);
        if !(FORMAT_VERSION_KEY_VALUE..=FORMAT_VERSION).contains(&version) {
            return Err(corrupted(format!(
                "format version {version}; this kstate reads versions up to {FORMAT_VERSION}"
            )));
        }
        if crc32fast::hash(body).to_be_bytes() != crc {
            return Err(corrupted("CRC mismatch".into()));
        }
        let offset = reader.i64()?;
        let has_batch = reader.u8()?;
        let batch = reader.i64()?;
        let kind = StoreKind::from_code(reader.u8()?)?;
        let created_ms = reader.i64()?;
        let stream_time = match version {
            FORMAT_VERSION_KEY_VALUE => None,
            _ => Some(reader.i64()?),
        };
        let count = u32::from_be_bytes(reader.array()?) as usize;
        // Each file takes at least 26 bytes: a count the rest cannot hold is corrupt.
        if count > body.len() / 26 {
            return Err(corrupted(format!("{count} files in {} bytes", body.len())));
        }
        let mut files = Vec::with_capacity(count);
        for _ in 0..count {
            let length = u16::from_be_bytes(reader.array()?) as usize;
            let path = std::str::from_utf8(reader.take(length)?)
                .map_err(|_| corrupted("a file path is not UTF-8".into()))?
                .to_string();
            let size = u64::from_be_bytes(reader.array()?);
            let hash = u128::from_be_bytes(reader.array()?);
            files.push(SnapshotFile { path, size, hash });
        }
        if reader.at != body.len() {
            return Err(corrupted(format!(
                "{} bytes after the last file",
                body.len() - reader.at
            )));
        }
        if offset < 0 || has_batch > 1 {
            return Err(corrupted(format!(
                "offset {offset}, batch flag {has_batch}"
            )));
        }
        check_files(&files)?;
        check_stream_time(kind, stream_time)?;
        Ok(Self {
            offset,
            batch_id: (has_batch == 1).then_some(batch),
            kind,
            created_ms,
            stream_time,
            files,
        })
    }

    /// The files of this snapshot that `earlier` does not hold (by object name): what
    /// publishing it must copy when `earlier` is already published.
    pub fn files_not_in<'a>(&'a self, earlier: &SnapshotManifest) -> Vec<&'a SnapshotFile> {
        let held: HashSet<String> = earlier
            .files
            .iter()
            .map(SnapshotFile::object_name)
            .collect();
        self.files
            .iter()
            .filter(|f| !held.contains(&f.object_name()))
            .collect()
    }

    /// Bytes of every file.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Paths are relative, `/`-separated, without `.` or `..` parts, sorted, each once.
fn check_files(files: &[SnapshotFile]) -> Result<()> {
    for file in files {
        let path = &file.path;
        if path.is_empty()
            || path.starts_with('/')
            || path.contains('\0')
            || path.contains('\\')
            || path.split('/').any(|part| matches!(part, "" | "." | ".."))
        {
            return Err(corrupted(format!("file path {path:?} leaves the store")));
        }
    }
    if files.windows(2).any(|pair| pair[0].path >= pair[1].path) {
        return Err(corrupted("file paths are not sorted and distinct".into()));
    }
    Ok(())
}

/// A window or session store's manifest names its stream time (its segments' files cannot
/// say it); a key-value store's names none.
fn check_stream_time(kind: StoreKind, stream_time: Option<i64>) -> Result<()> {
    match (kind.segmented(), stream_time) {
        (true, None) => Err(corrupted(format!(
            "a {} store's snapshot names no stream time",
            kind.name()
        ))),
        (false, Some(_)) => Err(corrupted(format!(
            "a {} store's snapshot names a stream time",
            kind.name()
        ))),
        _ => Ok(()),
    }
}

fn corrupted(what: String) -> Error {
    Error::Corrupted(format!("snapshot manifest: {what}"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| corrupted("truncated".into()))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> SnapshotManifest {
        SnapshotManifest {
            offset: 41,
            batch_id: Some(7),
            kind: StoreKind::KeyValue,
            created_ms: 1_700_000_000_000,
            stream_time: None,
            files: vec![
                SnapshotFile {
                    path: "000012.sst".into(),
                    size: 1234,
                    hash: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
                },
                SnapshotFile {
                    path: "CURRENT".into(),
                    size: 16,
                    hash: 5,
                },
                SnapshotFile {
                    path: "MANIFEST-000005".into(),
                    size: 300,
                    hash: 6,
                },
            ],
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let m = manifest();
        assert_eq!(SnapshotManifest::decode(&m.encode().unwrap()).unwrap(), m);
        let without_batch = SnapshotManifest {
            batch_id: None,
            files: vec![],
            ..m
        };
        let bytes = without_batch.encode().unwrap();
        assert_eq!(SnapshotManifest::decode(&bytes).unwrap(), without_batch);
    }

    /// The bytes of a manifest of `kind` with one file `a`, as each version lays them out.
    fn layout(version: u16, kind: u8, stream_time: Option<i64>) -> Vec<u8> {
        let mut expected = b"KSTATESN".to_vec();
        expected.extend_from_slice(&version.to_be_bytes());
        expected.extend_from_slice(&1i64.to_be_bytes());
        expected.push(0);
        expected.extend_from_slice(&0i64.to_be_bytes());
        expected.push(kind);
        expected.extend_from_slice(&2i64.to_be_bytes());
        if let Some(time) = stream_time {
            expected.extend_from_slice(&time.to_be_bytes());
        }
        expected.extend_from_slice(&1u32.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b'a']);
        expected.extend_from_slice(&3u64.to_be_bytes());
        expected.extend_from_slice(&4u128.to_be_bytes());
        let crc = crc32fast::hash(&expected);
        expected.extend_from_slice(&crc.to_be_bytes());
        expected
    }

    #[test]
    fn the_layout_is_fixed() {
        let one_file = |kind, stream_time| SnapshotManifest {
            offset: 1,
            batch_id: None,
            kind,
            created_ms: 2,
            stream_time,
            files: vec![SnapshotFile {
                path: "a".into(),
                size: 3,
                hash: 4,
            }],
        };
        // A key-value store's manifest stays version 1: what earlier builds wrote reads back.
        let key_value = one_file(StoreKind::KeyValue, None);
        assert_eq!(key_value.encode().unwrap(), layout(1, 1, None));
        assert_eq!(
            SnapshotManifest::decode(&layout(1, 1, None)).unwrap(),
            key_value
        );
        for (kind, code) in [(StoreKind::Window, 2), (StoreKind::Session, 3)] {
            let segmented = one_file(kind, Some(-5));
            assert_eq!(segmented.encode().unwrap(), layout(2, code, Some(-5)));
            assert_eq!(
                SnapshotManifest::decode(&layout(2, code, Some(-5))).unwrap(),
                segmented
            );
        }
    }

    #[test]
    fn window_and_session_manifests_name_a_stream_time_and_key_value_ones_none() {
        let mut window = manifest();
        window.kind = StoreKind::Window;
        assert!(
            window.encode().is_err(),
            "a window store without stream time"
        );
        window.stream_time = Some(120_000);
        assert_eq!(
            SnapshotManifest::decode(&window.encode().unwrap()).unwrap(),
            window
        );
        let mut key_value = manifest();
        key_value.stream_time = Some(1);
        assert!(key_value.encode().is_err());
        // Version 1 has no room for one: a window store's manifest in it is refused.
        let error = SnapshotManifest::decode(&layout(1, 2, None)).unwrap_err();
        assert!(
            error.to_string().contains("names no stream time"),
            "{error}"
        );
        assert!(SnapshotManifest::decode(&layout(2, 1, Some(0))).is_err());
    }

    #[test]
    fn every_damaged_byte_is_refused() {
        let mut window = manifest();
        window.kind = StoreKind::Window;
        window.stream_time = Some(360_000);
        for bytes in [manifest().encode().unwrap(), window.encode().unwrap()] {
            every_damaged_byte_of(&bytes);
        }
    }

    fn every_damaged_byte_of(bytes: &[u8]) {
        for i in 0..bytes.len() {
            let mut damaged = bytes.to_vec();
            damaged[i] ^= 0x40;
            assert!(
                matches!(SnapshotManifest::decode(&damaged), Err(Error::Corrupted(_))),
                "byte {i} flipped"
            );
        }
        for cut in 0..bytes.len() {
            assert!(matches!(
                SnapshotManifest::decode(&bytes[..cut]),
                Err(Error::Corrupted(_))
            ));
        }
    }

    #[test]
    fn a_newer_format_is_refused_by_name() {
        let mut bytes = manifest().encode().unwrap();
        bytes[9] = 3;
        let body = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..body]).to_be_bytes();
        bytes[body..].copy_from_slice(&crc);
        let error = SnapshotManifest::decode(&bytes).unwrap_err().to_string();
        assert!(error.contains("format version 3"), "{error}");
    }

    #[test]
    fn paths_that_leave_the_store_are_refused() {
        for path in [
            "../x",
            "/etc/passwd",
            "a/../../b",
            "a//b",
            "",
            "./a",
            "a\\b",
        ] {
            let mut m = manifest();
            m.files = vec![SnapshotFile {
                path: path.into(),
                size: 1,
                hash: 1,
            }];
            assert!(m.encode().is_err(), "{path}");
        }
        let mut unsorted = manifest();
        unsorted.files.reverse();
        assert!(unsorted.encode().is_err());
        let mut negative = manifest();
        negative.offset = -1;
        assert!(negative.encode().is_err());
    }

    #[test]
    fn object_names_carry_the_content_hash() {
        let file = |path: &str, hash| SnapshotFile {
            path: path.into(),
            size: 1,
            hash,
        };
        assert_eq!(
            file("000012.sst", 0xab).object_name(),
            format!("000012-{:032x}.sst", 0xab)
        );
        assert_eq!(
            file("MANIFEST-000005", 1).object_name(),
            format!("MANIFEST-000005-{:032x}", 1)
        );
        assert_eq!(
            file("seg.60000/000007.sst", 2).object_name(),
            format!("000007-{:032x}.sst", 2)
        );
        assert_ne!(
            file("000012.sst", 1).object_name(),
            file("000012.sst", 2).object_name()
        );
    }

    #[test]
    fn only_files_an_earlier_snapshot_lacks_are_new() {
        let earlier = manifest();
        let mut later = manifest();
        later.files[1].hash = 99; // CURRENT rewritten
        later.files.push(SnapshotFile {
            path: "OPTIONS-000007".into(),
            size: 5,
            hash: 7,
        });
        let new: Vec<&str> = later
            .files_not_in(&earlier)
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(new, ["CURRENT", "OPTIONS-000007"]);
    }
}

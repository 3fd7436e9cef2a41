//! The native side of `kstate.log.snapshots`: capturing a store's committed files, describing
//! them with their content hashes as a snapshot manifest (`kstate_core::snapshot`, the format's
//! owner), and checking fetched files against a manifest. Where files go is Python's.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kstate_core::segmented::snapshot::SegmentedFiles;
use kstate_core::snapshot::files::{verify, FileHashes};
use kstate_core::snapshot::manifest::{SnapshotFile, SnapshotManifest, StoreKind};
use kstate_core::store::key_value::CommittedFiles;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{detached, guard};

/// `(path, size, object name)` of a snapshot's file.
type FileTuple = (String, u64, String);

fn file_tuple(file: &SnapshotFile) -> FileTuple {
    (file.path.clone(), file.size, file.object_name())
}

/// Where a store's committed files come from: a key-value store, or every live segment of a
/// window or session store together with its stream time.
pub enum Committed {
    KeyValue(CommittedFiles),
    Segmented(SegmentedFiles),
}

/// What the last `capture` captured, for the manifest of its files.
struct Captured {
    dir: PathBuf,
    offset: i64,
    stream_time: Option<i64>,
}

/// A store's committed state as files (`committed_files()` of a key-value, window or session
/// store), usable from a thread other than the store's writer; remembers the hashes of the
/// table files it described.
#[pyclass(module = "kstate._core", name = "CommittedFiles", frozen)]
pub struct NativeCommittedFiles {
    files: Committed,
    hashes: Mutex<FileHashes>,
    captured: Mutex<Option<Captured>>,
}

impl NativeCommittedFiles {
    pub fn new(files: Committed) -> Self {
        Self {
            files,
            hashes: Mutex::default(),
            captured: Mutex::default(),
        }
    }
}

fn poisoned(what: &str) -> kstate_core::Error {
    kstate_core::Error::InvalidState(format!("snapshot {what} poisoned"))
}

#[pymethods]
impl NativeCommittedFiles {
    /// Captures the committed state at `dir` (RocksDB checkpoints; `dir` must not exist and
    /// must be on the store's file system) and returns its changelog offset; `None` (nothing
    /// captured) while the store has none.
    fn capture(&self, py: Python<'_>, dir: &str) -> PyResult<Option<i64>> {
        detached(py, || {
            let captured = match &self.files {
                Committed::KeyValue(files) => {
                    files.capture(Path::new(dir))?.map(|offset| (offset, None))
                }
                Committed::Segmented(files) => files
                    .capture(Path::new(dir))?
                    .map(|c| (c.offset, Some(c.stream_time))),
            };
            *self.captured.lock().map_err(|_| poisoned("capture"))? =
                captured.map(|(offset, stream_time)| Captured {
                    dir: PathBuf::from(dir),
                    offset,
                    stream_time,
                });
            Ok(captured.map(|(offset, _)| offset))
        })
    }

    /// The manifest of the files captured at `dir` (content hashes read, table files once per
    /// instance), and `{files, bytes, files_hashed, bytes_hashed}`. A window or session store's
    /// names the stream time its last `capture` (of `dir`, at `offset`) read.
    fn manifest<'py>(
        &self,
        py: Python<'py>,
        dir: &str,
        offset: i64,
        batch_id: Option<i64>,
        kind: &str,
        created_ms: i64,
    ) -> PyResult<(NativeSnapshotManifest, Bound<'py, PyDict>)> {
        let kind = guard(|| StoreKind::parse(kind))?;
        let (files, described, stream_time) = detached(py, || {
            let stream_time = match &self.files {
                Committed::KeyValue(_) => None,
                Committed::Segmented(_) => {
                    let captured = self.captured.lock().map_err(|_| poisoned("capture"))?;
                    let time = captured
                        .as_ref()
                        .filter(|c| c.dir == Path::new(dir) && c.offset == offset)
                        .and_then(|c| c.stream_time);
                    Some(time.ok_or_else(|| {
                        kstate_core::Error::InvalidArgument(format!(
                            "{dir} at offset {offset} is not what this store captured last"
                        ))
                    })?)
                }
            };
            let mut hashes = self.hashes.lock().map_err(|_| poisoned("file hashes"))?;
            let (files, described) = hashes.describe(Path::new(dir))?;
            Ok((files, described, stream_time))
        })?;
        let report = PyDict::new(py);
        report.set_item("files", described.files)?;
        report.set_item("bytes", described.bytes)?;
        report.set_item("files_hashed", described.files_hashed)?;
        report.set_item("bytes_hashed", described.bytes_hashed)?;
        let manifest = SnapshotManifest {
            offset,
            batch_id,
            kind,
            created_ms,
            stream_time,
            files,
        };
        Ok((NativeSnapshotManifest { manifest }, report))
    }
}

/// A snapshot manifest (`kstate_core::snapshot::manifest`).
#[pyclass(module = "kstate._core", name = "SnapshotManifest", frozen)]
pub struct NativeSnapshotManifest {
    manifest: SnapshotManifest,
}

#[pymethods]
impl NativeSnapshotManifest {
    /// Reads a manifest's bytes; `CorruptedDataError` if they are not one (CRC, version, paths).
    #[staticmethod]
    fn decode(bytes: &[u8]) -> PyResult<Self> {
        let manifest = guard(|| SnapshotManifest::decode(bytes))?;
        Ok(Self { manifest })
    }

    fn encode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = guard(|| self.manifest.encode())?;
        Ok(PyBytes::new(py, &bytes))
    }

    #[getter]
    fn offset(&self) -> i64 {
        self.manifest.offset
    }

    #[getter]
    fn batch_id(&self) -> Option<i64> {
        self.manifest.batch_id
    }

    #[getter]
    fn kind(&self) -> &'static str {
        self.manifest.kind.name()
    }

    #[getter]
    fn created_ms(&self) -> i64 {
        self.manifest.created_ms
    }

    /// A window or session store's stream time at the offset; `None` for a key-value store.
    #[getter]
    fn stream_time(&self) -> Option<i64> {
        self.manifest.stream_time
    }

    #[getter]
    fn total_bytes(&self) -> u64 {
        self.manifest.total_bytes()
    }

    /// `(path, size, object name)` of every file, by path.
    #[getter]
    fn files(&self) -> Vec<FileTuple> {
        self.manifest.files.iter().map(file_tuple).collect()
    }

    /// The files `earlier` does not hold (by object name), as `files` gives them.
    fn files_not_in(&self, earlier: &NativeSnapshotManifest) -> Vec<FileTuple> {
        self.manifest
            .files_not_in(&earlier.manifest)
            .into_iter()
            .map(file_tuple)
            .collect()
    }

    /// `(path, problem)` of each file `dir` does not hold as listed (missing, another size or
    /// content hash); empty when every file is right.
    fn verify(&self, py: Python<'_>, dir: &str) -> PyResult<Vec<(String, String)>> {
        detached(py, || verify(Path::new(dir), &self.manifest.files))
    }
}

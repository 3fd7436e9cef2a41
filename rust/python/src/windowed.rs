//! What `kstate.windowed` needs from Rust, shared by the window and session store bindings:
//! opening a segmented store, and the chunked iterator yielding `(key, start, end, value)` rows.

use std::path::Path;

use kstate_core::format::packed::{BinaryBuilder, BinaryColumn};
use kstate_core::segmented::segmented_store::{
    self as segmented, ScanCursor, SegmentQuery, SegmentReader, SegmentedKeys,
};
use kstate_core::segmented::session_store::SessionQueries;
use kstate_core::segmented::snapshot as segmented_snapshot;
use kstate_core::segmented::window_store::WindowQueries;
use kstate_core::store::merge::ScanLimit;
use kstate_core::{SegmentedOptions, SegmentedStore, SegmentedView, StoreOptions, ValueFormat};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyTuple, PyType};

use crate::errors::{detached, guard, ErrorClass};
use crate::key_value_store::{ttl_of, untrack, PackedArray, RowSink, RowType};
use crate::progress::Progress;
use crate::session_store::NativeSessionStore;
use crate::window_store::NativeWindowStore;

/// A time argument in milliseconds: an int (not a bool) that fits in 64 bits, else
/// `InvalidArgumentError`, so Python may call the native store directly.
pub fn millis(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    let value = if obj.is_instance_of::<PyBool>() {
        None
    } else {
        obj.extract::<i64>().ok()
    };
    value.ok_or_else(|| {
        crate::errors::raise(
            ErrorClass::InvalidArgumentError,
            format!("{what} must be an int (ms) in 64 bits, got {obj}"),
        )
    })
}

/// Store-wide settings of a segmented store, as Python passes them (a dict).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct SegmentedConfig {
    pub timestamped: bool,
    pub retention_ms: i64,
    pub segment_interval: i64,
    pub transactional: bool,
    pub max_uncommitted_bytes: usize,
    pub cache_max_bytes: usize,
    pub offset_key: String,
    pub ttl_ms: Option<i64>,
    pub ttl_wall_clock: bool,
    pub memory_max_bytes: Option<usize>,
    pub rocksdb_config: Option<String>,
}

impl SegmentedConfig {
    fn options(self, persistent: bool, bloom_filters: bool) -> PyResult<SegmentedOptions> {
        let rocks = persistent
            .then(|| {
                guard(|| {
                    crate::memory::rocks_config(
                        self.memory_max_bytes,
                        self.rocksdb_config.as_deref(),
                    )
                })
            })
            .transpose()?;
        Ok(SegmentedOptions {
            retention_ms: self.retention_ms,
            segment_interval: self.segment_interval,
            format: if self.timestamped {
                ValueFormat::Timestamped
            } else {
                ValueFormat::Plain
            },
            store: StoreOptions {
                transactional: self.transactional,
                max_uncommitted_bytes: self.max_uncommitted_bytes,
                offset_key: self.offset_key,
                cache_max_bytes: self.cache_max_bytes,
                rocks,
                ..StoreOptions::default()
            },
            ttl: ttl_of(self.ttl_ms, self.ttl_wall_clock)?,
            bloom_filters,
        })
    }
}

/// Opens segments under `dir` (`None`: in memory); returns the store and what opening found.
/// `bloom_filters`: `SegmentedOptions::bloom_filters`, the store kind's choice.
pub fn open_segmented<'py>(
    py: Python<'py>,
    name: &str,
    dir: Option<&str>,
    config: SegmentedConfig,
    bloom_filters: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<(SegmentedStore, Bound<'py, PyDict>)> {
    let options = config.options(dir.is_some(), bloom_filters)?;
    let found = PyDict::new(py);
    let Some(dir) = dir else {
        return Ok((
            guard(|| SegmentedStore::open_in_memory(name, options))?,
            found,
        ));
    };
    let mut reporter = Progress::new(progress);
    let (store, report) = detached(py, || {
        SegmentedStore::open_rocksdb(name, Path::new(dir), options, &mut |p| reporter.report(p))
    })?;
    reporter.finish()?;
    found.set_item("segments", report.segments)?;
    found.set_item("renamed_legacy", report.renamed_legacy)?;
    found.set_item("finished_commit", report.finished_commit)?;
    found.set_item("upgrade_mode", report.upgrade_mode)?;
    found.set_item("unclean_shutdown", report.unclean_shutdown)?;
    found.set_item("discarded_spill", report.discarded_spill)?;
    Ok((store, found))
}

/// Where an iterator reads: a store (staged writes included) or a read-committed view.
pub enum Source {
    Window(Py<NativeWindowStore>),
    Session(Py<NativeSessionStore>),
    View(SegmentedView),
}

/// How rows' store keys become `(key, start, end)`.
#[derive(Clone, Copy)]
pub enum Decoder {
    Window(WindowQueries),
    Session(SessionQueries),
}

/// Iterates a query in chunks; each chunk is a fresh scan from the cursor, so no RocksDB
/// iterator outlives a call and a closed store raises instead of crashing. A chunk's rows are
/// made as the scan hands them over and given to Python as a list (`next_chunk`), which
/// Python's own iterators walk: no call into the binding per row.
#[pyclass(module = "kstate._core", name = "WindowedIterator")]
pub struct WindowedIterator {
    source: Source,
    query: SegmentQuery,
    cursor: ScanCursor,
    decoder: Decoder,
    chunk: ScanLimit,
    rows: WindowRows,
}

/// What a chunk's rows are.
#[derive(Clone, Copy)]
pub enum WindowRows {
    /// `(key, start, end, value)` tuples, for Python to decode.
    Plain,
    /// `KeyValue(start, value)` of the stored bytes (one key's windows, bytes serdes).
    ByStart,
    /// `KeyValue(Windowed(key, start, end), value)` of the stored bytes (bytes serdes).
    ByWindow,
}

/// `kstate.store_reads.KeyValue` and `kstate.windowed.Windowed`, registered by
/// `kstate.store_reads` when it loads (`register_window_rows`), so finished rows are made
/// without a Python call and this module imports no Python of kstate.
static ROW_TYPES: PyOnceLock<(RowType, RowType)> = PyOnceLock::new();

/// Called by `kstate.store_reads` with its `KeyValue` and `Windowed` (the first registration
/// stays).
#[pyfunction]
pub fn register_window_rows(
    py: Python<'_>,
    key_value: Py<PyType>,
    windowed: Py<PyType>,
) -> PyResult<()> {
    let types = (RowType::new(py, key_value)?, RowType::new(py, windowed)?);
    let _ = ROW_TYPES.set(py, types);
    Ok(())
}

impl WindowRows {
    /// `finished_rows` (`ByStart` or `ByWindow`) if `finished`, else `Plain`.
    pub fn finished_if(finished: bool, finished_rows: Self) -> Self {
        if finished {
            finished_rows
        } else {
            Self::Plain
        }
    }

    /// The row types finished rows are made of (`None` for plain rows).
    fn types(self, py: Python<'_>) -> PyResult<Option<&(RowType, RowType)>> {
        if let Self::Plain = self {
            return Ok(None);
        }
        ROW_TYPES.get(py).map(Some).ok_or_else(|| {
            crate::errors::raise(
                ErrorClass::KStateError,
                "finished window rows need kstate.store_reads (which registers KeyValue): import it"
                    .into(),
            )
        })
    }

    fn make(
        self,
        py: Python<'_>,
        types: Option<&(RowType, RowType)>,
        (key, start, end): (&[u8], i64, i64),
        value: &[u8],
    ) -> PyResult<Py<PyAny>> {
        let value = PyBytes::new(py, value).into_any();
        let window = |py| -> PyResult<[Bound<'_, PyAny>; 3]> {
            Ok([
                PyBytes::new(py, key).into_any(),
                start.into_pyobject(py)?.into_any(),
                end.into_pyobject(py)?.into_any(),
            ])
        };
        let Some((key_value, windowed)) = types else {
            let [key, start, end] = window(py)?;
            let row = PyTuple::new(py, [key, start, end, value])?.into_any();
            untrack(&row);
            return Ok(row.unbind());
        };
        let first = match self {
            Self::ByWindow => windowed.make(py, window(py)?)?,
            _ => start.into_pyobject(py)?.into_any(),
        };
        Ok(key_value.make(py, [first, value])?.unbind())
    }
}

impl WindowedIterator {
    pub fn new(source: Source, query: SegmentQuery, decoder: Decoder, rows: WindowRows) -> Self {
        Self {
            source,
            query,
            cursor: ScanCursor::default(),
            decoder,
            chunk: ScanLimit::first_chunk(),
            rows,
        }
    }

    /// The rows of the next chunk, made while the scan hands them over (none once done).
    fn read_chunk(&mut self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let Self {
            source,
            query,
            cursor,
            decoder,
            chunk,
            rows,
        } = self;
        let types = rows.types(py)?;
        let mut made = Vec::new();
        if !cursor.is_done() {
            made.reserve(chunk.rows);
        }
        let mut sink = RowSink::new(&mut made);
        let mut read = |reader: &dyn SegmentReader| {
            if cursor.is_done() {
                // Still checks the store is open, as every call on a closed store raises.
                return guard(|| reader.next_segment(0, -1, query.direction).map(|_| ()));
            }
            guard(|| {
                segmented::scan_visit(reader, query, cursor, *chunk, &mut |store_key, value| {
                    let key = match decoder {
                        Decoder::Window(q) => q.decode(store_key),
                        Decoder::Session(q) => q.decode(store_key),
                    }?;
                    sink.push(rows.make(py, types, key, value))
                })
            })
            .map(|_| ())
        };
        let scanned = match source {
            Source::Window(store) => read(store.bind(py).borrow().logged.inner.store.segments()),
            Source::Session(store) => read(store.bind(py).borrow().logged.inner.store.segments()),
            Source::View(view) => read(view),
        };
        sink.finish(scanned)?;
        *chunk = chunk.next_chunk();
        Ok(made)
    }
}

#[pymethods]
impl WindowedIterator {
    /// An iterator over the next chunk of rows (a list), or `None` at the end.
    fn next_chunk<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            // A chunk whose rows the query's filter all dropped is empty but not the end.
            let made = self.read_chunk(py)?;
            if !made.is_empty() {
                return Ok(Some(PyList::new(py, made)?.try_iter()?.into_any()));
            }
            if self.cursor.is_done() {
                return Ok(None);
            }
        }
    }

    fn close(&mut self) {
        self.cursor = ScanCursor::default();
        self.query = SegmentQuery::empty(self.query.direction);
    }
}

/// Checks that the snapshot's segments fetched into `dir` can be the store `name` of
/// `retention_ms` and `segment_interval` as opening it would (`InvalidStateError` if not);
/// returns how many there are.
#[pyfunction]
pub fn check_restored_segments(
    py: Python<'_>,
    name: &str,
    dir: &str,
    retention_ms: i64,
    segment_interval: i64,
) -> PyResult<usize> {
    detached(py, || {
        segmented_snapshot::check_restored(name, Path::new(dir), retention_ms, segment_interval)
    })
}

/// Makes the snapshot's segments moved to `dir` = `<task>/<store>` open at its commit: writes
/// `offset` and `stream_time` as the store's commit record beside them.
#[pyfunction]
pub fn install_restored_segments(
    py: Python<'_>,
    name: &str,
    dir: &str,
    offset: i64,
    stream_time: i64,
) -> PyResult<()> {
    detached(py, || {
        segmented_snapshot::install(name, Path::new(dir), offset, stream_time)
    })
}

/// Stages `keys`/`values` (equal lengths) in the segments their store keys name.
pub fn put_store_keys<T: SegmentedKeys + Send>(
    py: Python<'_>,
    store: &mut T,
    keys: Vec<Vec<u8>>,
    values: Vec<Option<Vec<u8>>>,
) -> PyResult<()> {
    if keys.len() != values.len() {
        return Err(crate::errors::raise(
            ErrorClass::InvalidArgumentError,
            format!("{} keys but {} values", keys.len(), values.len()),
        ));
    }
    let segments = store.segments_mut();
    detached(py, || {
        let mut writes = keys
            .iter()
            .map(Vec::as_slice)
            .zip(values.iter().map(Option::as_deref));
        segments.put_store_keys(&mut writes, &T::segment_time)
    })
}

/// Each of the store keys in the Arrow binary buffers given: the segment time it carries
/// (little-endian int64s, one per key) and its value as the staged writes leave it (`None`:
/// absent), shown by reads or not. What a commit changes, for exact row counts.
#[allow(clippy::too_many_arguments)]
pub fn staged_values<'py, T: SegmentedKeys + Send>(
    py: Python<'py>,
    store: &mut T,
    offsets: &[u8],
    data: &[u8],
    validity: Option<&[u8]>,
    start: usize,
    count: usize,
    large: bool,
) -> PyResult<(Bound<'py, PyBytes>, PackedArray<'py>)> {
    let segments = store.segments_mut();
    let (times, values) = detached(py, || {
        let keys = BinaryColumn::parse(offsets, data, validity, start, count, large)?;
        let mut times = Vec::with_capacity(keys.len() * 8);
        let values = BinaryBuilder::from_visits(keys.len(), large, |visit| {
            for i in 0..keys.len() {
                let key = keys
                    .get(i)
                    .ok_or_else(|| kstate_core::Error::InvalidArgument("null store key".into()))?;
                let time = T::segment_time(key)?;
                times.extend_from_slice(&time.to_le_bytes());
                segments.get_stored_with(key, time, |value| visit(i, value))?;
            }
            Ok(())
        })?;
        Ok((times, values))
    })?;
    let packed = (
        PyBytes::new(py, &values.validity),
        PyBytes::new(py, &values.offsets),
        PyBytes::new(py, &values.data),
        values.null_count,
    );
    Ok((PyBytes::new(py, &times), packed))
}

/// Adds what window and session stores share to a store class whose `logged.inner.store` is
/// one of them: state getters, segments, sizes and compaction.
macro_rules! segmented_store_methods {
    ($class:ty) => {
        #[pyo3::pymethods]
        impl $class {
            #[getter]
            fn is_open(&self) -> bool {
                self.segments().is_open()
            }

            #[getter]
            fn transactional(&self) -> bool {
                self.segments().transactional()
            }

            #[getter]
            fn persistent(&self) -> bool {
                self.segments().persistent()
            }

            #[getter]
            fn stream_time(&self) -> i64 {
                use kstate_core::segmented::segmented_store::SegmentReader;
                self.segments().stream_time()
            }

            #[getter]
            fn dropped_records(&self) -> u64 {
                self.segments().dropped_records()
            }

            fn segment_ids(&self) -> Vec<i64> {
                self.segments().segment_ids()
            }

            fn uncommitted(&self) -> (usize, bool) {
                self.segments().uncommitted()
            }

            /// Memory and table files of every open segment together (`kstate.memory`).
            fn memory<'py>(
                &self,
                py: pyo3::Python<'py>,
            ) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyDict>> {
                let memory = crate::errors::guard(|| self.segments().memory())?;
                crate::memory::store_memory_dict(py, &memory)
            }

            fn approximate_num_entries(&self) -> pyo3::PyResult<u64> {
                crate::errors::guard(|| self.segments().approximate_num_entries())
            }

            /// The store keys with staged writes and their committed values, as two packed
            /// Arrow binary arrays (the undo of the transaction).
            fn previous_values_of_staged<'py>(
                &mut self,
                py: pyo3::Python<'py>,
                large: bool,
            ) -> pyo3::PyResult<(
                crate::key_value_store::PackedArray<'py>,
                crate::key_value_store::PackedArray<'py>,
            )> {
                use kstate_core::segmented::segmented_store::SegmentedKeys;
                let segments = self.logged.inner.store.segments_mut();
                crate::key_value_store::packed_writes(py, large, 0, |visit| {
                    segments.previous_values_of_staged(visit)
                })
            }

            /// `staged_values` of the store keys in these Arrow binary buffers.
            #[allow(clippy::too_many_arguments)]
            fn staged_values_packed<'py>(
                &mut self,
                py: pyo3::Python<'py>,
                offsets: &[u8],
                data: &[u8],
                validity: Option<&[u8]>,
                start: usize,
                count: usize,
                large: bool,
            ) -> pyo3::PyResult<(
                pyo3::Bound<'py, pyo3::types::PyBytes>,
                crate::key_value_store::PackedArray<'py>,
            )> {
                crate::windowed::staged_values(
                    py,
                    &mut self.logged.inner.store,
                    offsets,
                    data,
                    validity,
                    start,
                    count,
                    large,
                )
            }

            /// Stages writes by store key (`None` deletes), values as stored.
            fn put_store_keys(
                &mut self,
                py: pyo3::Python<'_>,
                keys: Vec<Vec<u8>>,
                values: Vec<Option<Vec<u8>>>,
            ) -> pyo3::PyResult<()> {
                crate::windowed::put_store_keys(py, &mut self.logged.inner.store, keys, values)
            }

            /// Every live segment's committed state as files for snapshots, usable from
            /// another thread (`kstate.log.snapshots`); persistent transactional stores only.
            fn committed_files(&self) -> pyo3::PyResult<crate::snapshots::NativeCommittedFiles> {
                let files = crate::errors::guard(|| self.segments().committed_files())?;
                Ok(crate::snapshots::NativeCommittedFiles::new(
                    crate::snapshots::Committed::Segmented(files),
                ))
            }

            /// Compacts every segment now; with a TTL, expired values leave the disk.
            fn compact(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
                let segments = self.segments();
                crate::errors::detached(py, || segments.compact())
            }
        }

        impl $class {
            fn segments(&self) -> &kstate_core::SegmentedStore {
                use kstate_core::segmented::segmented_store::SegmentedKeys;
                self.logged.inner.store.segments()
            }
        }
    };
}

pub(crate) use segmented_store_methods;

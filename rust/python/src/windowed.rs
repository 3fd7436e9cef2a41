//! What `kstate.windowed` needs from Rust, shared by the window and session store bindings:
//! opening a segmented store, and the chunked iterator yielding `(key, start, end, value)` rows.

use std::collections::VecDeque;
use std::path::Path;

use kstate_core::segmented::segmented_store::{
    self as segmented, ScanCursor, SegmentQuery, SegmentReader, SegmentedKeys,
};
use kstate_core::segmented::session_store::SessionQueries;
use kstate_core::segmented::window_store::WindowQueries;
use kstate_core::store::merge::{ScanLimit, CHUNK_BYTES};
use kstate_core::{SegmentedOptions, SegmentedStore, SegmentedView, StoreOptions, ValueFormat};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyType};

use crate::errors::{guard, ErrorClass};
use crate::key_value_store::{ttl_of, RowType};
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
    fn options(self, persistent: bool) -> PyResult<SegmentedOptions> {
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
        })
    }
}

/// Opens segments under `dir` (`None`: in memory); returns the store and what opening found.
pub fn open_segmented<'py>(
    py: Python<'py>,
    name: &str,
    dir: Option<&str>,
    config: SegmentedConfig,
    progress: Option<Py<PyAny>>,
) -> PyResult<(SegmentedStore, Bound<'py, PyDict>)> {
    let options = config.options(dir.is_some())?;
    let found = PyDict::new(py);
    let Some(dir) = dir else {
        return Ok((
            guard(|| SegmentedStore::open_in_memory(name, options))?,
            found,
        ));
    };
    let mut reporter = Progress::new(progress);
    let (store, report) = py.detach(|| {
        guard(|| {
            SegmentedStore::open_rocksdb(name, Path::new(dir), options, &mut |p| reporter.report(p))
        })
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
/// iterator outlives a call and a closed store raises instead of crashing.
#[pyclass(module = "kstate._core", name = "WindowedIterator")]
pub struct WindowedIterator {
    source: Source,
    query: SegmentQuery,
    cursor: ScanCursor,
    decoder: Decoder,
    buffer: ChunkRows,
    chunk: ScanLimit,
    rows: WindowRows,
}

/// A chunk's rows, not yet yielded, in one byte buffer (no allocation per row).
#[derive(Default)]
struct ChunkRows {
    bytes: Vec<u8>,
    /// Where each row's store key ends and its value ends in `bytes`; its key starts where the
    /// row before it ends.
    ends: VecDeque<(usize, usize)>,
    /// Where the next row starts.
    start: usize,
}

impl ChunkRows {
    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Empties the buffer for a chunk of up to `rows` rows: room for that many, and (at the
    /// first push) for that many the size of the first row, up to the chunk's `CHUNK_BYTES`, so
    /// a chunk grows its buffers once or not at all.
    fn clear_for(&mut self, rows: usize) {
        self.clear();
        self.ends.reserve(rows);
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.bytes.is_empty() {
            let first = key.len() + value.len();
            self.bytes
                .reserve((self.ends.capacity() * first).min(CHUNK_BYTES));
        }
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.ends.push_back((key_end, self.bytes.len()));
    }

    /// The next row's store key and value.
    fn pop(&mut self) -> Option<(&[u8], &[u8])> {
        let (key_end, value_end) = self.ends.pop_front()?;
        let start = std::mem::replace(&mut self.start, value_end);
        Some((&self.bytes[start..key_end], &self.bytes[key_end..value_end]))
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.start = 0;
    }
}

/// What `__next__` yields.
enum WindowRows {
    /// `(key, start, end, value)` tuples, for Python to decode.
    Plain,
    /// Finished `KeyValue` rows of stored bytes (bytes serdes): `KeyValue(start, value)` without
    /// a `Windowed` type (one key's windows), else `KeyValue(Windowed(key, start, end), value)`.
    Finished {
        key_value: RowType,
        windowed: Option<RowType>,
    },
}

impl WindowedIterator {
    pub fn new(source: Source, query: SegmentQuery, decoder: Decoder) -> Self {
        Self {
            source,
            query,
            cursor: ScanCursor::default(),
            decoder,
            buffer: ChunkRows::default(),
            chunk: ScanLimit::first_chunk(),
            rows: WindowRows::Plain,
        }
    }

    fn fill(&mut self, py: Python<'_>) -> PyResult<()> {
        let Self {
            source,
            query,
            cursor,
            buffer,
            chunk,
            ..
        } = self;
        let mut read = |reader: &dyn SegmentReader| {
            if !buffer.is_empty() || cursor.is_done() {
                // Still checks the store is open, as every call on a closed store raises.
                return guard(|| reader.next_segment(0, -1, query.direction).map(|_| ()));
            }
            buffer.clear_for(chunk.rows);
            guard(|| {
                segmented::scan_visit(reader, query, cursor, *chunk, &mut |key, value| {
                    buffer.push(key, value);
                    Ok(())
                })
            })?;
            *chunk = chunk.next_chunk();
            Ok(())
        };
        match source {
            Source::Window(store) => read(store.bind(py).borrow().logged.inner.store.segments()),
            Source::Session(store) => read(store.bind(py).borrow().logged.inner.store.segments()),
            Source::View(view) => read(view),
        }
    }
}

#[pymethods]
impl WindowedIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `(key, start, end, value)`, or a finished row (`finished_rows`).
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.fill(py)?;
        let Some((store_key, value)) = self.buffer.pop() else {
            return Ok(None);
        };
        let (key, start, end) = guard(|| match &self.decoder {
            Decoder::Window(q) => q.decode(store_key),
            Decoder::Session(q) => q.decode(store_key),
        })?;
        let value = PyBytes::new(py, value);
        let WindowRows::Finished {
            key_value,
            windowed,
        } = &self.rows
        else {
            let row = (PyBytes::new(py, key), start, end, value);
            return Ok(Some(row.into_pyobject(py)?.into_any()));
        };
        let first = match windowed {
            None => start.into_pyobject(py)?.into_any(),
            Some(windowed) => {
                let fields = [
                    PyBytes::new(py, key).into_any(),
                    start.into_pyobject(py)?.into_any(),
                    end.into_pyobject(py)?.into_any(),
                ];
                windowed.make(py, fields)?
            }
        };
        key_value.make(py, [first, value.into_any()]).map(Some)
    }

    /// Makes `__next__` yield finished `KeyValue` rows of the stored bytes (see `WindowRows`);
    /// returns the iterator.
    #[pyo3(signature = (key_value, windowed=None))]
    fn finished_rows(
        mut slf: PyRefMut<'_, Self>,
        key_value: Py<PyType>,
        windowed: Option<Py<PyType>>,
    ) -> PyResult<PyRefMut<'_, Self>> {
        let py = slf.py();
        slf.rows = WindowRows::Finished {
            key_value: RowType::new(py, key_value)?,
            windowed: windowed.map(|w| RowType::new(py, w)).transpose()?,
        };
        Ok(slf)
    }

    fn close(&mut self) {
        self.buffer.clear();
        self.cursor = ScanCursor::default();
        self.query = SegmentQuery::empty(self.query.direction);
    }
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
    py.detach(|| {
        guard(|| {
            let mut writes = keys
                .iter()
                .map(Vec::as_slice)
                .zip(values.iter().map(Option::as_deref));
            segments.put_store_keys(&mut writes, &T::segment_time)
        })
    })
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
                crate::key_value_store::packed_writes(py, large, |visit| {
                    segments.previous_values_of_staged(visit)
                })
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

            /// Compacts every segment now; with a TTL, expired values leave the disk.
            fn compact(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
                let segments = self.segments();
                py.detach(|| crate::errors::guard(|| segments.compact()))
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

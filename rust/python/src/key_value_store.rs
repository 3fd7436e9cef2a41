//! Binds `kstate_core::store` for `kstate.key_value_store`: convert arguments, call the core,
//! map errors. No store logic lives here.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use kstate_core::changelog::{published_marker, Changelog};
use kstate_core::packed::{BinaryBuilder, BinaryColumn};
use kstate_core::store::VisitWrite;
use kstate_core::{
    Direction, KeyRange, KeyValueStore, ReadCommittedView, StoreOptions, Ttl, TtlClock, ValueFormat,
};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};

use crate::errors::{guard, raise};
use crate::logged::{log_config, logged_store_methods, Logged};
use crate::memory::{rocks_config, store_memory_dict};
use crate::progress::Progress;

/// `(validity, offsets, data, null_count)` of an Arrow binary array built here.
pub(crate) type PackedArray<'py> = (
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    usize,
);
/// Collects the writes `source` visits (on a thread without the GIL) into two packed Arrow
/// binary arrays, keys and values.
pub(crate) fn packed_writes<'py>(
    py: Python<'py>,
    large: bool,
    source: impl FnOnce(&mut VisitWrite<'_>) -> kstate_core::Result<()> + Send,
) -> PyResult<(PackedArray<'py>, PackedArray<'py>)> {
    let (mut keys, mut values) = (BinaryBuilder::new(0, large), BinaryBuilder::new(0, large));
    py.detach(|| {
        guard(|| {
            source(&mut |key, value| {
                keys.push(Some(key))?;
                values.push(value)
            })
        })
    })?;
    let packed = |b: &BinaryBuilder| {
        (
            PyBytes::new(py, &b.validity),
            PyBytes::new(py, &b.offsets),
            PyBytes::new(py, &b.data),
            b.null_count,
        )
    };
    Ok((packed(&keys), packed(&values)))
}

/// `(offsets, data, validity, start, large)` of an Arrow binary array passed in.
type ArrowColumn = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, usize, bool);

const FIRST_CHUNK: usize = 16;
const MAX_CHUNK: usize = 2048;

/// The bytes of a key or value; anything else is the caller's serialization error.
pub(crate) fn as_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    match obj.cast::<PyBytes>() {
        Ok(b) => Ok(b.as_bytes()),
        Err(_) if obj.is_none() => Err(raise(
            "InvalidArgumentError",
            format!("{what} cannot be None"),
        )),
        Err(_) => Err(raise(
            "SerializationError",
            format!(
                "{what} must be bytes, got {}",
                obj.get_type().name().map_or("?".into(), |n| n.to_string())
            ),
        )),
    }
}

fn bytes_list<'py>(items: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    items
        .try_iter()?
        .map(|item| {
            let item = item?;
            as_bytes(&item, "key")?;
            Ok(item.cast_into::<PyBytes>()?)
        })
        .collect()
}

/// A list of the values of `keys` (bytes or `None`), read by `read` without intermediate copies.
fn values_list<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
    read: impl FnOnce(&[&[u8]], &mut dyn FnMut(usize, Option<&[u8]>)) -> kstate_core::Result<()>,
) -> PyResult<Bound<'py, PyList>> {
    let keys = bytes_list(keys)?;
    let slices: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let mut values = vec![None; slices.len()];
    guard(|| {
        read(&slices, &mut |i, v| {
            values[i] = v.map(|b| PyBytes::new(py, b))
        })
    })?;
    PyList::new(py, values)
}

fn optional_bytes<'py>(py: Python<'py>, value: Option<Vec<u8>>) -> Option<Bound<'py, PyBytes>> {
    value.map(|v| PyBytes::new(py, &v))
}

fn packed<'py>(py: Python<'py>, builder: BinaryBuilder) -> PackedArray<'py> {
    (
        PyBytes::new(py, &builder.validity),
        PyBytes::new(py, &builder.offsets),
        PyBytes::new(py, &builder.data),
        builder.null_count,
    )
}

fn inclusive_range(from_key: Option<&[u8]>, to_key: Option<&[u8]>) -> KeyRange {
    KeyRange::inclusive(from_key, to_key)
}

/// The TTL of a store opened with `ttl_ms` (`None`: no TTL).
pub(crate) fn ttl_of(ttl_ms: Option<i64>, wall_clock: bool) -> PyResult<Option<Ttl>> {
    let clock = if wall_clock {
        TtlClock::WallClock
    } else {
        TtlClock::StreamTime
    };
    ttl_ms.map(|ms| guard(|| Ttl::new(ms, clock))).transpose()
}

/// A value argument: bytes, or `None` for a delete.
pub(crate) fn optional_value<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if value.is_none() {
        Ok(None)
    } else {
        as_bytes(value, "value").map(Some)
    }
}

pub(crate) fn direction(reverse: bool) -> Direction {
    if reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    }
}

#[pyclass(module = "kstate._core", name = "KeyValueStore")]
pub struct NativeKeyValueStore {
    pub(crate) logged: Logged<KeyValueStore>,
}

logged_store_methods!(NativeKeyValueStore);

#[pymethods]
impl NativeKeyValueStore {
    /// Opens a RocksDB store; returns the store and a dict of what opening found.
    #[staticmethod]
    #[pyo3(signature = (name, path, spill_path, timestamped, transactional, max_uncommitted_bytes, cache_max_bytes, offset_key, progress=None, ttl_ms=None, ttl_wall_clock=false, memory_max_bytes=None, rocksdb_config=None))]
    #[allow(clippy::too_many_arguments)]
    fn open_rocksdb<'py>(
        py: Python<'py>,
        name: &str,
        path: &str,
        spill_path: &str,
        timestamped: bool,
        transactional: bool,
        max_uncommitted_bytes: usize,
        cache_max_bytes: usize,
        offset_key: String,
        progress: Option<Py<PyAny>>,
        ttl_ms: Option<i64>,
        ttl_wall_clock: bool,
        memory_max_bytes: Option<usize>,
        rocksdb_config: Option<String>,
    ) -> PyResult<(Self, Bound<'py, PyDict>)> {
        let ttl = ttl_of(ttl_ms, ttl_wall_clock)?;
        let rocks = guard(|| rocks_config(memory_max_bytes, rocksdb_config.as_deref()))?;
        let format = if timestamped {
            ValueFormat::Timestamped
        } else {
            ValueFormat::Plain
        };
        let options = StoreOptions {
            transactional,
            max_uncommitted_bytes,
            offset_key,
            cache_max_bytes,
            rocks: Some(rocks),
        };
        let mut reporter = Progress::new(progress);
        let (inner, report) = py.detach(|| {
            guard(|| {
                KeyValueStore::open_rocksdb_with_ttl(
                    name,
                    Path::new(path),
                    Path::new(spill_path),
                    format,
                    options,
                    ttl,
                    &mut |p| reporter.report(p),
                )
            })
        })?;
        reporter.finish()?;
        let found = PyDict::new(py);
        found.set_item("upgrade_mode", report.upgrade_mode)?;
        found.set_item("unclean_shutdown", report.unclean_shutdown)?;
        found.set_item("finished_spilled_commit", report.finished_spilled_commit)?;
        found.set_item("discarded_spill", report.discarded_spill)?;
        Ok((
            Self {
                logged: Logged::unlogged(inner),
            },
            found,
        ))
    }

    #[staticmethod]
    #[pyo3(signature = (name, transactional, offset_key, ttl_ms=None, ttl_wall_clock=false))]
    fn open_in_memory(
        name: &str,
        transactional: bool,
        offset_key: String,
        ttl_ms: Option<i64>,
        ttl_wall_clock: bool,
    ) -> PyResult<Self> {
        let options = StoreOptions {
            transactional,
            max_uncommitted_bytes: usize::MAX,
            offset_key,
            cache_max_bytes: 0,
            rocks: None,
        };
        let ttl = ttl_of(ttl_ms, ttl_wall_clock)?;
        Ok(Self {
            logged: Logged::unlogged(KeyValueStore::open_in_memory_with_ttl(name, options, ttl)),
        })
    }

    #[getter]
    fn transactional(&self) -> bool {
        self.logged.inner.store.transactional()
    }

    #[getter]
    fn persistent(&self) -> bool {
        self.logged.inner.store.persistent()
    }

    #[getter]
    fn is_open(&self) -> bool {
        self.logged.inner.store.is_open()
    }

    /// `(bytes staged in memory, whether staged writes spilled to disk)`.
    fn uncommitted(&self) -> (usize, bool) {
        self.logged.inner.store.uncommitted()
    }

    /// The store's memory and table files (`kstate.memory`).
    fn memory<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let memory = guard(|| self.logged.inner.store.memory())?;
        store_memory_dict(py, &memory)
    }

    fn get<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        guard(|| {
            self.logged
                .inner
                .store
                .get_with(key, |v| v.map(|b| PyBytes::new(py, b)))
        })
    }

    fn get_many<'py>(
        &mut self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        values_list(py, keys, |slices, visit| {
            self.logged.inner.store.get_many_with(slices, visit)
        })
    }

    /// `get_many` over Arrow binary buffers; returns `(validity, offsets, data, null_count)`.
    #[allow(clippy::too_many_arguments)]
    fn get_many_packed<'py>(
        &mut self,
        py: Python<'py>,
        offsets: &[u8],
        data: &[u8],
        validity: Option<&[u8]>,
        start: usize,
        count: usize,
        large: bool,
    ) -> PyResult<PackedArray<'py>> {
        let store = &mut self.logged.inner.store;
        let builder = guard(|| {
            let column = BinaryColumn::parse(offsets, data, validity, start, count, large)?;
            let keys: Vec<&[u8]> = (0..column.len())
                .map(|i| {
                    column
                        .get(i)
                        .ok_or_else(|| kstate_core::Error::InvalidArgument("null key".into()))
                })
                .collect::<kstate_core::Result<_>>()?;
            BinaryBuilder::from_visits(keys.len(), large, |visit| store.get_many_with(&keys, visit))
        })?;
        Ok(packed(py, builder))
    }

    fn put(&mut self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = if value.is_none() {
            None
        } else {
            Some(as_bytes(value, "value")?)
        };
        guard(|| self.logged.inner.store.put(key, value))
    }

    /// Writes `keys[i] -> values[i]`; a `None` value deletes.
    fn put_all(&mut self, keys: &Bound<'_, PyAny>, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let keys = bytes_list(keys)?;
        let values: Vec<Option<Bound<'_, PyBytes>>> = values
            .try_iter()?
            .map(|v| {
                let v = v?;
                if v.is_none() {
                    Ok(None)
                } else {
                    Ok(Some(v.cast_into::<PyBytes>()?))
                }
            })
            .collect::<PyResult<_>>()?;
        if keys.len() != values.len() {
            return Err(crate::errors::to_py(kstate_core::Error::InvalidArgument(
                format!(
                    "put_all got {} keys and {} values",
                    keys.len(),
                    values.len()
                ),
            )));
        }
        let mut writes = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (k.as_bytes(), v.as_ref().map(|b| b.as_bytes())));
        guard(|| self.logged.inner.store.put_all(&mut writes))
    }

    /// `put_all` over Arrow buffers: `key` and `value` are `(offsets, data, validity, start, large)`.
    fn put_all_packed(
        &mut self,
        count: usize,
        key: ArrowColumn,
        value: ArrowColumn,
    ) -> PyResult<()> {
        guard(|| {
            let keys = BinaryColumn::parse(&key.0, &key.1, key.2.as_deref(), key.3, count, key.4)?;
            let values = BinaryColumn::parse(
                &value.0,
                &value.1,
                value.2.as_deref(),
                value.3,
                count,
                value.4,
            )?;
            let mut writes = Vec::with_capacity(count);
            for i in 0..count {
                let k = keys
                    .get(i)
                    .ok_or_else(|| kstate_core::Error::InvalidArgument("null key".into()))?;
                writes.push((k, values.get(i)));
            }
            self.logged.inner.store.put_all(&mut writes.into_iter())
        })
    }

    fn put_if_absent<'py>(
        &mut self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(optional_bytes(
            py,
            guard(|| self.logged.inner.store.put_if_absent(key, value))?,
        ))
    }

    fn delete<'py>(
        &mut self,
        py: Python<'py>,
        key: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(optional_bytes(
            py,
            guard(|| self.logged.inner.store.delete(key))?,
        ))
    }

    /// Writes `value` (timestamped bytes, `None` deletes) unless `key` holds a value with a
    /// larger timestamp; returns whether it applied.
    fn put_if_newer(
        &mut self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        timestamp: i64,
    ) -> PyResult<bool> {
        let key = as_bytes(key, "key")?;
        let value = optional_value(value)?;
        guard(|| self.logged.inner.store.put_if_newer(key, value, timestamp))
    }

    /// Compacts the store now; with a TTL, expired values leave the disk.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.logged.store();
        py.detach(|| guard(|| store.compact()))
    }

    /// Iterator over `[from_key, to_key]` (inclusive; `None` is unbounded) yielding
    /// `(key, value)` tuples, or instances of `row_type` (a tuple subclass) when given.
    #[pyo3(signature = (from_key, to_key, reverse=false, row_type=None, decode=None))]
    fn range(
        slf: Py<Self>,
        py: Python<'_>,
        from_key: Option<&[u8]>,
        to_key: Option<&[u8]>,
        reverse: bool,
        row_type: Option<Py<PyType>>,
        decode: Option<Py<PyAny>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::Store(slf),
            inclusive_range(from_key, to_key),
            direction(reverse),
            row_type,
            decode,
        )
    }

    #[pyo3(signature = (prefix, reverse=false, row_type=None, decode=None))]
    fn prefix_scan(
        slf: Py<Self>,
        py: Python<'_>,
        prefix: &[u8],
        reverse: bool,
        row_type: Option<Py<PyType>>,
        decode: Option<Py<PyAny>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::Store(slf),
            KeyRange::prefix(prefix),
            direction(reverse),
            row_type,
            decode,
        )
    }

    fn approximate_num_entries(&self) -> PyResult<u64> {
        guard(|| self.logged.inner.store.approximate_num_entries())
    }

    /// The keys with staged writes and their committed values, as two packed Arrow binary
    /// arrays `(validity, offsets, data, null_count)`.
    fn previous_values_of_staged<'py>(
        &mut self,
        py: Python<'py>,
        large: bool,
    ) -> PyResult<(PackedArray<'py>, PackedArray<'py>)> {
        let store = &mut self.logged.inner.store;
        packed_writes(py, large, |visit| store.previous_values_of_staged(visit))
    }

    fn read_committed_view(&self) -> NativeReadCommittedView {
        NativeReadCommittedView {
            inner: self.logged.inner.store.read_committed_view(),
        }
    }
}

/// Committed-only reads, usable from any thread.
#[pyclass(module = "kstate._core", name = "ReadCommittedView")]
pub struct NativeReadCommittedView {
    inner: ReadCommittedView,
}

/// Withdraws the records a changelog partition published after `offset` (`None`: all);
/// returns how many went.
#[pyfunction]
#[pyo3(signature = (partition_dir, config, offset))]
pub fn retract_changelog(
    py: Python<'_>,
    partition_dir: &str,
    config: HashMap<String, String>,
    offset: Option<i64>,
) -> PyResult<i64> {
    let log_config = log_config(&config)?;
    py.detach(|| {
        guard(|| {
            // The marker says whether there is anything to retract, without opening the log.
            let marker = published_marker(Path::new(partition_dir))?;
            if marker.is_some_and(|published| published <= offset.unwrap_or(-1)) {
                return Ok(0);
            }
            let (mut changelog, _) = Changelog::open(Path::new(partition_dir), log_config)?;
            let retracted = changelog.retract_to(offset)?;
            changelog.close()?;
            Ok(retracted)
        })
    })
}

#[pymethods]
impl NativeReadCommittedView {
    #[getter]
    fn is_open(&self) -> bool {
        self.inner.is_open()
    }

    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        guard(|| self.inner.get_with(key, |v| v.map(|b| PyBytes::new(py, b))))
    }

    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        values_list(py, keys, |slices, visit| {
            self.inner.get_many_with(slices, visit)
        })
    }

    #[pyo3(signature = (from_key, to_key, reverse=false, row_type=None, decode=None))]
    fn range(
        &self,
        py: Python<'_>,
        from_key: Option<&[u8]>,
        to_key: Option<&[u8]>,
        reverse: bool,
        row_type: Option<Py<PyType>>,
        decode: Option<Py<PyAny>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::View(self.inner.clone()),
            inclusive_range(from_key, to_key),
            direction(reverse),
            row_type,
            decode,
        )
    }

    #[pyo3(signature = (prefix, reverse=false, row_type=None, decode=None))]
    fn prefix_scan(
        &self,
        py: Python<'_>,
        prefix: &[u8],
        reverse: bool,
        row_type: Option<Py<PyType>>,
        decode: Option<Py<PyAny>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::View(self.inner.clone()),
            KeyRange::prefix(prefix),
            direction(reverse),
            row_type,
            decode,
        )
    }

    fn approximate_num_entries(&self) -> PyResult<u64> {
        guard(|| self.inner.approximate_num_entries())
    }
}

enum Reader {
    Store(Py<NativeKeyValueStore>),
    View(ReadCommittedView),
}

/// How an iterator's rows are made from stored bytes.
enum RowMaker {
    /// `(key, value)` tuples.
    Pair,
    /// Instances of a tuple subclass (a named tuple), built as `tuple.__new__(row_type, pair)`
    /// would be: calling `tuple.__new__` directly skips the named tuple's Python `__new__`.
    Tuple {
        tuple_new: Py<PyAny>,
        row_type: Py<PyType>,
    },
    /// `decode(key, value)`, a Python callable (serdes); `decode(key, None)` for a peeked key.
    Decode(Py<PyAny>),
}

/// Iterates a range in chunks; each chunk is a fresh merge, so no RocksDB iterator outlives a
/// call and a closed store raises instead of crashing. A chunk's rows are made as RocksDB hands
/// them over (no copy in between) and `__next__` only pops one, so a `for` loop runs no Python
/// code per row unless rows are decoded by a Python serde.
#[pyclass(module = "kstate._core", name = "RangeIterator")]
pub struct RangeIterator {
    reader: Reader,
    rest: KeyRange,
    direction: Direction,
    /// Rows made: tuples whose first item is the key.
    buffer: VecDeque<Py<PyAny>>,
    exhausted: bool,
    chunk: usize,
    rows: RowMaker,
}

impl RangeIterator {
    fn new(
        py: Python<'_>,
        reader: Reader,
        range: KeyRange,
        direction: Direction,
        row_type: Option<Py<PyType>>,
        decode: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let rows = match (decode, row_type) {
            (Some(decode), _) => RowMaker::Decode(decode),
            (None, Some(row_type)) => {
                let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?;
                RowMaker::Tuple {
                    tuple_new: tuple_new.unbind(),
                    row_type,
                }
            }
            (None, None) => RowMaker::Pair,
        };
        Ok(Self {
            reader,
            exhausted: range.is_empty(),
            rest: range,
            direction,
            buffer: VecDeque::new(),
            chunk: FIRST_CHUNK,
            rows,
        })
    }

    fn ensure_open(&self, py: Python<'_>) -> PyResult<()> {
        let open = match &self.reader {
            Reader::Store(store) => store.bind(py).borrow().logged.store().is_open(),
            Reader::View(view) => view.is_open(),
        };
        if open {
            Ok(())
        } else {
            Err(crate::errors::to_py(kstate_core::Error::Closed(
                "the store of this iterator is closed".into(),
            )))
        }
    }

    fn fill(&mut self, py: Python<'_>) -> PyResult<()> {
        self.ensure_open(py)?;
        if !self.buffer.is_empty() || self.exhausted {
            return Ok(());
        }
        let Self {
            reader,
            rest,
            direction,
            buffer,
            chunk,
            rows,
            ..
        } = self;
        let mut last_key: Vec<u8> = Vec::new();
        // A Python error while making a row stops the scan; it is raised after it.
        let mut failed: Option<PyErr> = None;
        let mut visit = |key: &[u8], value: &[u8]| {
            let made = make_row(py, rows, key, value).map(|row| buffer.push_back(row));
            if let Err(error) = made {
                failed = Some(error);
                return Err(kstate_core::Error::InvalidState("row not made".into()));
            }
            last_key.clear();
            last_key.extend_from_slice(key);
            Ok(())
        };
        let scanned = match reader {
            Reader::Store(store) => {
                let store = store.bind(py).borrow();
                store
                    .logged
                    .store()
                    .scan_with(rest, *direction, *chunk, &mut visit)
            }
            Reader::View(view) => view.scan_with(rest, *direction, *chunk, &mut visit),
        };
        if let Some(error) = failed {
            return Err(error);
        }
        let scanned = guard(|| scanned)?;
        if scanned < *chunk {
            self.exhausted = true;
        }
        if scanned > 0 {
            self.rest = self.rest.after(&last_key, self.direction);
        }
        self.chunk = (self.chunk * 4).min(MAX_CHUNK);
        Ok(())
    }
}

/// One row of `rows`' kind (a decoded row is decoded when it is taken).
fn make_row(py: Python<'_>, rows: &RowMaker, key: &[u8], value: &[u8]) -> PyResult<Py<PyAny>> {
    let pair = PyTuple::new(py, [PyBytes::new(py, key), PyBytes::new(py, value)])?;
    match rows {
        RowMaker::Pair | RowMaker::Decode(_) => Ok(pair.into_any().unbind()),
        RowMaker::Tuple {
            tuple_new,
            row_type,
        } => tuple_new.call1(py, (row_type, pair)),
    }
}

#[pymethods]
impl RangeIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.fill(py)?;
        let Some(row) = self.buffer.pop_front() else {
            return Ok(None);
        };
        let row = row.into_bound(py);
        match &self.rows {
            RowMaker::Decode(decode) => {
                decode.bind(py).call1(row.cast_into::<PyTuple>()?).map(Some)
            }
            RowMaker::Pair | RowMaker::Tuple { .. } => Ok(Some(row)),
        }
    }

    /// Key the next `__next__` returns (decoded like its rows), without consuming it; `None`
    /// at the end.
    fn peek_next_key<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.fill(py)?;
        let Some(row) = self.buffer.front() else {
            return Ok(None);
        };
        let key = row.bind(py).get_item(0)?;
        match &self.rows {
            RowMaker::Decode(decode) => decode.bind(py).call1((key, py.None())).map(Some),
            RowMaker::Pair | RowMaker::Tuple { .. } => Ok(Some(key)),
        }
    }

    fn close(&mut self) {
        self.buffer.clear();
        self.exhausted = true;
    }
}

//! Binds `kstate_core::store::key_value` for `kstate.key_value_store`: convert arguments, call the core,
//! map errors. No store logic lives here.

use std::collections::HashMap;
use std::path::Path;

use kstate_core::format::packed::{BinaryBuilder, BinaryColumn};
use kstate_core::logged::changelog::{published_marker, Changelog};
use kstate_core::store::key_value::{Durability, VisitWrite};
use kstate_core::store::merge::ScanLimit;
use kstate_core::{
    Direction, KeyRange, KeyValueStore, ReadCommittedView, StoreOptions, Ttl, TtlClock, ValueFormat,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use pyo3::{ffi, intern};

use crate::errors::{detached, guard, raise, ErrorClass};
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
/// binary arrays, keys and values; `rows`: how many it will visit, about (room made for them).
pub(crate) fn packed_writes<'py>(
    py: Python<'py>,
    large: bool,
    rows: usize,
    source: impl FnOnce(&mut VisitWrite<'_>) -> kstate_core::Result<()> + Send,
) -> PyResult<(PackedArray<'py>, PackedArray<'py>)> {
    let (mut keys, mut values) = (
        BinaryBuilder::new(rows, large),
        BinaryBuilder::new(rows, large),
    );
    detached(py, || {
        source(&mut |key, value| {
            keys.push(Some(key))?;
            values.push(value)
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

/// The bytes of a key or value; anything else is the caller's serialization error.
pub(crate) fn as_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    match obj.cast::<PyBytes>() {
        Ok(b) => Ok(b.as_bytes()),
        Err(_) => Err(not_bytes(obj, what)),
    }
}

/// `obj` as bytes, consumed (one type check per item of a list).
pub(crate) fn into_bytes<'py>(obj: Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyBytes>> {
    obj.cast_into::<PyBytes>()
        .map_err(|error| not_bytes(&error.into_inner(), what))
}

fn not_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyErr {
    if obj.is_none() {
        return raise(
            ErrorClass::InvalidArgumentError,
            format!("{what} cannot be None"),
        );
    }
    raise(
        ErrorClass::SerializationError,
        format!(
            "{what} must be bytes, got {}",
            obj.get_type().name().map_or("?".into(), |n| n.to_string())
        ),
    )
}

/// `f` of each item of `items`: a list's read in place, any other iterable's through its
/// iterator.
pub(crate) fn each_item<'py, T>(
    items: &Bound<'py, PyAny>,
    mut f: impl FnMut(Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    if let Ok(list) = items.cast::<PyList>() {
        return list.iter().map(f).collect();
    }
    items.try_iter()?.map(|item| f(item?)).collect()
}

pub(crate) fn bytes_list<'py>(items: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    each_item(items, |item| into_bytes(item, "key"))
}

/// Each item of `items` as bytes or `None` (a delete).
pub(crate) fn optional_bytes_list<'py>(
    items: &Bound<'py, PyAny>,
) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
    each_item(items, |item| {
        if item.is_none() {
            return Ok(None);
        }
        into_bytes(item, "value").map(Some)
    })
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

/// The keys of an Arrow binary array's buffers (`get_many_packed`); a null is refused.
fn packed_keys<'a>(
    offsets: &'a [u8],
    data: &'a [u8],
    validity: Option<&'a [u8]>,
    start: usize,
    count: usize,
    large: bool,
) -> kstate_core::Result<Vec<&'a [u8]>> {
    let column = BinaryColumn::parse(offsets, data, validity, start, count, large)?;
    (0..column.len())
        .map(|i| {
            column
                .get(i)
                .ok_or_else(|| kstate_core::Error::InvalidArgument("null key".into()))
        })
        .collect()
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
    #[pyo3(signature = (name, path, spill_path, timestamped, transactional, max_uncommitted_bytes, cache_max_bytes, offset_key, progress=None, ttl_ms=None, ttl_wall_clock=false, memory_max_bytes=None, rocksdb_config=None, durability="wal"))]
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
        durability: &str,
    ) -> PyResult<(Self, Bound<'py, PyDict>)> {
        let ttl = ttl_of(ttl_ms, ttl_wall_clock)?;
        let durability = guard(|| Durability::parse(durability))?;
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
            durability,
        };
        let mut reporter = Progress::new(progress);
        let (inner, report) = detached(py, || {
            KeyValueStore::open_rocksdb_with_ttl(
                name,
                Path::new(path),
                Path::new(spill_path),
                format,
                options,
                ttl,
                &mut |p| reporter.report(p),
            )
        })?;
        reporter.finish()?;
        let found = PyDict::new(py);
        found.set_item("upgrade_mode", report.upgrade_mode)?;
        found.set_item("unclean_shutdown", report.unclean_shutdown)?;
        found.set_item("unflushed_commits_lost", report.unflushed_commits_lost)?;
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
            durability: Durability::Wal,
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

    /// The committed offset a crash now would reopen at (`statestore.durability`).
    fn durable_offset(&self) -> PyResult<Option<i64>> {
        guard(|| self.logged.inner.store.durable_offset())
    }

    /// `(bytes staged in memory, whether staged writes spilled to disk)`.
    fn uncommitted(&self) -> (usize, bool) {
        self.logged.inner.store.uncommitted()
    }

    /// The committed state as files for snapshots, usable from another thread
    /// (`kstate.log.snapshots`); persistent transactional stores only.
    fn committed_files(&self) -> PyResult<crate::snapshots::NativeCommittedFiles> {
        let files = guard(|| self.logged.inner.store.committed_files())?;
        Ok(crate::snapshots::NativeCommittedFiles::new(
            crate::snapshots::Committed::KeyValue(files),
        ))
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
            let keys = packed_keys(offsets, data, validity, start, count, large)?;
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
        let values = optional_bytes_list(values)?;
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
        detached(py, || store.compact())
    }

    /// Starts flushing the memtables (in the background) once the active one holds `bytes` or
    /// more; whether it did.
    fn flush_memtables_past(&self, py: Python<'_>, bytes: usize) -> PyResult<bool> {
        let store = self.logged.store();
        detached(py, || store.flush_memtables_past(bytes))
    }

    /// Iterator over `[from_key, to_key]` (inclusive; `None` is unbounded) yielding
    /// `(key, value)` tuples, or instances of `row_type` (a tuple subclass) when given.
    #[pyo3(signature = (from_key, to_key, reverse=false, row_type=None))]
    fn range(
        slf: Py<Self>,
        py: Python<'_>,
        from_key: Option<&[u8]>,
        to_key: Option<&[u8]>,
        reverse: bool,
        row_type: Option<Py<PyType>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::Store(slf),
            inclusive_range(from_key, to_key),
            direction(reverse),
            row_type,
        )
    }

    #[pyo3(signature = (prefix, reverse=false, row_type=None))]
    fn prefix_scan(
        slf: Py<Self>,
        py: Python<'_>,
        prefix: &[u8],
        reverse: bool,
        row_type: Option<Py<PyType>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::Store(slf),
            KeyRange::prefix(prefix),
            direction(reverse),
            row_type,
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
        let (staged, _) = store.uncommitted();
        packed_writes(py, large, staged, |visit| {
            store.previous_values_of_staged(visit)
        })
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
    pub(crate) inner: ReadCommittedView,
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
    detached(py, || {
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

    /// `get_many` over Arrow binary buffers, as the store's `get_many_packed`.
    #[allow(clippy::too_many_arguments)]
    fn get_many_packed<'py>(
        &self,
        py: Python<'py>,
        offsets: &[u8],
        data: &[u8],
        validity: Option<&[u8]>,
        start: usize,
        count: usize,
        large: bool,
    ) -> PyResult<PackedArray<'py>> {
        let view = &self.inner;
        let builder = guard(|| {
            let keys = packed_keys(offsets, data, validity, start, count, large)?;
            BinaryBuilder::from_visits(keys.len(), large, |visit| view.get_many_with(&keys, visit))
        })?;
        Ok(packed(py, builder))
    }

    #[pyo3(signature = (from_key, to_key, reverse=false, row_type=None))]
    fn range(
        &self,
        py: Python<'_>,
        from_key: Option<&[u8]>,
        to_key: Option<&[u8]>,
        reverse: bool,
        row_type: Option<Py<PyType>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::View(self.inner.clone()),
            inclusive_range(from_key, to_key),
            direction(reverse),
            row_type,
        )
    }

    #[pyo3(signature = (prefix, reverse=false, row_type=None))]
    fn prefix_scan(
        &self,
        py: Python<'_>,
        prefix: &[u8],
        reverse: bool,
        row_type: Option<Py<PyType>>,
    ) -> PyResult<RangeIterator> {
        RangeIterator::new(
            py,
            Reader::View(self.inner.clone()),
            KeyRange::prefix(prefix),
            direction(reverse),
            row_type,
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

/// Makes instances of a tuple subclass such as a named tuple (`KeyValue`, `Windowed`) from their
/// items, as `tuple.__new__(row_type, items)` does, without the named tuple's Python `__new__`.
pub(crate) struct RowType {
    row_type: Py<PyType>,
    /// The type's `tp_alloc`: CPython's `tuple_subtype_new` allocates with it and sets the items,
    /// which is done here without the call and its argument tuples. `None` from Python 3.14,
    /// whose tuples cache their hash in a field only CPython initializes: then `tuple.__new__`.
    alloc: Option<ffi::allocfunc>,
    tuple_new: Py<PyAny>,
}

/// Whether this Python's tuples lack 3.14's cached hash field. Asked once: `version_info`
/// parses `sys.version` each time, ~7,700 instructions, once per iterator a query opens.
fn tuples_without_cached_hash(py: Python<'_>) -> bool {
    static BEFORE_3_14: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BEFORE_3_14.get_or_init(|| py.version_info() < (3, 14))
}

impl RowType {
    pub(crate) fn new(py: Python<'_>, row_type: Py<PyType>) -> PyResult<Self> {
        if !row_type.bind(py).is_subclass_of::<PyTuple>()? {
            return Err(raise(
                ErrorClass::InvalidArgumentError,
                "row_type must be a tuple subclass".into(),
            ));
        }
        let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?;
        let type_ptr = row_type.as_ptr().cast::<ffi::PyTypeObject>();
        // SAFETY: `type_ptr` is a live type object; slots are read only from heap types, which
        // `PyType_GetSlot` supports on every Python of the stable ABI.
        let alloc = unsafe {
            let heap = ffi::PyType_GetFlags(type_ptr) & ffi::Py_TPFLAGS_HEAPTYPE != 0;
            let slot = if heap && tuples_without_cached_hash(py) {
                ffi::PyType_GetSlot(type_ptr, ffi::Py_tp_alloc)
            } else {
                std::ptr::null_mut()
            };
            (!slot.is_null())
                .then(|| std::mem::transmute::<*mut std::ffi::c_void, ffi::allocfunc>(slot))
        };
        Ok(Self {
            row_type,
            alloc,
            tuple_new: tuple_new.unbind(),
        })
    }

    /// An instance holding `items`, which are bytes, ints or rows of them: such a row cannot be
    /// part of a reference cycle, so it is left out of the cyclic GC (CPython's own collection
    /// would untrack it later), which a chunk of thousands of rows would otherwise set off.
    pub(crate) fn make<'py, const N: usize>(
        &self,
        py: Python<'py>,
        items: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        let row = self.make_tracked(py, items)?;
        untrack(&row);
        Ok(row)
    }

    /// An instance holding `items`, left to the cyclic GC (items a caller may mutate).
    pub(crate) fn make_tracked<'py, const N: usize>(
        &self,
        py: Python<'py>,
        items: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.alloc {
            // SAFETY: `alloc` is the tuple subclass's `tp_alloc`, which returns a zeroed
            // instance of N items and refcount 1; `PyTuple_SetItem` steals each item into it.
            Some(alloc) => unsafe {
                let row = alloc(self.row_type.as_ptr().cast(), N as ffi::Py_ssize_t);
                let row = Bound::from_owned_ptr_or_err(py, row)?;
                for (i, item) in items.into_iter().enumerate() {
                    if ffi::PyTuple_SetItem(row.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr())
                        != 0
                    {
                        return Err(PyErr::fetch(py));
                    }
                }
                row
            },
            None => self
                .tuple_new
                .bind(py)
                .call1((self.row_type.bind(py), PyTuple::new(py, items)?))?,
        })
    }
}

/// Leaves a tuple of bytes and ints (or of such tuples) out of the cyclic GC.
pub(crate) fn untrack(row: &Bound<'_, PyAny>) {
    // SAFETY: untracking a GC object is always sound; it only stops cycle detection, and a tuple
    // of atomic values cannot be in a cycle.
    unsafe { ffi::PyObject_GC_UnTrack(row.as_ptr().cast()) };
}

/// Iterates a range in chunks; each chunk is a fresh merge, so no RocksDB iterator outlives a
/// call and a closed store raises instead of crashing. A chunk's rows are made as RocksDB hands
/// them over (no copy in between) and handed to Python as a list (`next_chunk`), which Python's
/// own iterators walk: no call into the binding per row.
#[pyclass(module = "kstate._core", name = "RangeIterator")]
pub struct RangeIterator {
    reader: Reader,
    rest: KeyRange,
    direction: Direction,
    /// Rows made and not handed out yet: tuples whose first item is the key.
    buffer: Vec<Py<PyAny>>,
    /// The last chunk handed out and Python's iterator over it (`peek_next_key` looks in it).
    current: Option<(Py<PyList>, Py<PyAny>)>,
    exhausted: bool,
    chunk: ScanLimit,
    /// Rows are `row_type(key, value)` (a named tuple) when given, else `(key, value)` tuples.
    row_type: Option<RowType>,
}

impl RangeIterator {
    fn new(
        py: Python<'_>,
        reader: Reader,
        range: KeyRange,
        direction: Direction,
        row_type: Option<Py<PyType>>,
    ) -> PyResult<Self> {
        Ok(Self {
            reader,
            exhausted: range.is_empty(),
            rest: range,
            direction,
            buffer: Vec::new(),
            current: None,
            chunk: ScanLimit::first_chunk(),
            row_type: row_type.map(|t| RowType::new(py, t)).transpose()?,
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
            row_type,
            ..
        } = self;
        let mut last_key: Vec<u8> = Vec::new();
        let mut rows = RowSink::new(buffer);
        let mut visit = |key: &[u8], value: &[u8]| {
            rows.push(make_row(py, row_type.as_ref(), key, value))?;
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
        let scanned = rows.finish(guard(|| scanned))?;
        if !scanned.at_limit {
            self.exhausted = true;
        }
        if scanned.rows > 0 {
            self.rest = self.rest.after(&last_key, self.direction);
        }
        self.chunk = self.chunk.next_chunk();
        Ok(())
    }
}

/// Where a scan's rows go as they are made. Making a row can fail in Python: that error ends the
/// scan (the core sees an `InvalidState`) and is the one raised after it (`finish`).
pub(crate) struct RowSink<'a> {
    rows: &'a mut Vec<Py<PyAny>>,
    failed: Option<PyErr>,
}

impl<'a> RowSink<'a> {
    pub(crate) fn new(rows: &'a mut Vec<Py<PyAny>>) -> Self {
        Self { rows, failed: None }
    }

    pub(crate) fn push(&mut self, row: PyResult<Py<PyAny>>) -> kstate_core::Result<()> {
        match row {
            Ok(row) => {
                self.rows.push(row);
                Ok(())
            }
            Err(error) => {
                self.failed = Some(error);
                Err(kstate_core::Error::InvalidState("row not made".into()))
            }
        }
    }

    /// What the scan returned, or the Python error that ended it.
    pub(crate) fn finish<T>(self, scanned: PyResult<T>) -> PyResult<T> {
        match self.failed {
            Some(error) => Err(error),
            None => scanned,
        }
    }
}

/// `row_type(key, value)`, or a `(key, value)` tuple.
fn make_row(
    py: Python<'_>,
    row_type: Option<&RowType>,
    key: &[u8],
    value: &[u8],
) -> PyResult<Py<PyAny>> {
    let items = [
        PyBytes::new(py, key).into_any(),
        PyBytes::new(py, value).into_any(),
    ];
    match row_type {
        Some(row_type) => row_type.make(py, items).map(Bound::unbind),
        None => {
            let pair = PyTuple::new(py, items)?.into_any();
            untrack(&pair);
            Ok(pair.unbind())
        }
    }
}

#[pymethods]
impl RangeIterator {
    /// An iterator over the next chunk of rows (a list), or `None` at the end.
    fn next_chunk<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.fill(py)?;
        if self.buffer.is_empty() {
            self.current = None;
            return Ok(None);
        }
        let rows = PyList::new(py, self.buffer.drain(..))?;
        let iter = rows.try_iter()?.into_any();
        self.current = Some((rows.unbind(), iter.clone().unbind()));
        Ok(Some(iter))
    }

    /// Key of the next row, without taking it; `None` at the end.
    fn peek_next_key<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if let Some((rows, iter)) = &self.current {
            // Python's list iterator knows how many rows of the chunk are left.
            let left: usize = iter
                .bind(py)
                .call_method0(intern!(py, "__length_hint__"))?
                .extract()?;
            let rows = rows.bind(py);
            if left > 0 {
                return rows.get_item(rows.len() - left)?.get_item(0).map(Some);
            }
        }
        self.fill(py)?;
        self.buffer
            .first()
            .map(|row| row.bind(py).get_item(0))
            .transpose()
    }

    fn close(&mut self) {
        self.buffer.clear();
        self.current = None;
        self.exhausted = true;
    }
}

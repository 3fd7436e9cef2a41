//! Binds `kstate_core::record` for `kstate.log.records`: convert arguments, call the core, build
//! the results. No codec logic lives here.
//!
//! `Record` is defined here rather than in Python so that decoding creates each record without
//! running Python code; its user documentation and the enums live in `kstate/log/records.py`.
//! Across this boundary timestamp types are Kafka's ids (-1 none, 0 CreateTime, 1
//! LogAppendTime) and compressions Kafka's codec ids (0 none, 1 gzip, 2 snappy, 3 lz4).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use kstate_core::format::packed::{BinaryBuilder, BinaryColumn};
use kstate_core::record::{
    self as codec, Compression, Entry, InnerRecords, Magic, MessageSetBuilder, RecordColumnsView,
    RecordView, TimestampType,
};
use kstate_core::Error;
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::errors::{detached, guard, raise, to_py, ErrorClass};

/// `(validity, offsets, data, null_count)` of an Arrow binary array built here.
type PackedArray = (ColumnBuffer, ColumnBuffer, ColumnBuffer, usize);
/// `(offsets, data, validity, start, large)` of an Arrow binary array passed in.
type ArrowColumn<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>, usize, bool);
/// What `decode_record_columns` returns: the record count, then the `offset`, `timestamp` and
/// `timestamp_type` buffers, then the `key` and `value` arrays.
type DecodedColumns = (
    usize,
    ColumnBuffer,
    ColumnBuffer,
    ColumnBuffer,
    PackedArray,
    PackedArray,
);
/// One shallow entry: `(position, size, offset, magic, compression, timestamp, timestamp_type,
/// key, value)`.
type EntryTuple<'py> = (
    usize,
    usize,
    i64,
    u8,
    u8,
    i64,
    i8,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
);

const NO_TIMESTAMP_TYPE_ID: i8 = -1;
const CREATE_TIME_ID: i8 = 0;
const LOG_APPEND_TIME_ID: i8 = 1;

fn invalid(message: String) -> PyErr {
    to_py(Error::InvalidArgument(message))
}

fn magic_of(byte: u8) -> PyResult<Magic> {
    Magic::from_byte(byte).ok_or_else(|| {
        invalid(format!(
            "magic {byte} is not a legacy message format (0 or 1)"
        ))
    })
}

fn compression_of(id: u8) -> PyResult<Compression> {
    match id {
        0 => Ok(Compression::None),
        1 => Ok(Compression::Gzip),
        2 => Ok(Compression::Snappy),
        3 => Ok(Compression::Lz4),
        _ => Err(invalid(format!(
            "compression codec {id} is not one of 0 none, 1 gzip, 2 snappy, 3 lz4"
        ))),
    }
}

fn compression_id(compression: Compression) -> u8 {
    match compression {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
    }
}

fn timestamp_type_id(timestamp_type: Option<TimestampType>) -> i8 {
    match timestamp_type {
        None => NO_TIMESTAMP_TYPE_ID,
        Some(TimestampType::CreateTime) => CREATE_TIME_ID,
        Some(TimestampType::LogAppendTime) => LOG_APPEND_TIME_ID,
    }
}

/// `kstate.log.records.TimestampType`, the class records report their type with: registered by
/// that module when it loads (`register_timestamp_type`), so this module imports no Python of kstate.
static TIMESTAMP_TYPE_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// Its members for ids -1, 0 and 1, so a getter returns one without a call into Python.
static TIMESTAMP_TYPE_MEMBERS: PyOnceLock<[Py<PyAny>; 3]> = PyOnceLock::new();

/// Called by `kstate.log.records` with its `TimestampType` (the first registration stays).
#[pyfunction]
pub fn register_timestamp_type(py: Python<'_>, timestamp_type: Py<PyAny>) {
    let _ = TIMESTAMP_TYPE_CLASS.set(py, timestamp_type);
}

fn timestamp_type_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    TIMESTAMP_TYPE_CLASS
        .get(py)
        .map(|class| class.bind(py))
        .ok_or_else(|| {
            raise(
                ErrorClass::KStateError,
                "records need kstate.log.records (which registers TimestampType): import it".into(),
            )
        })
}

fn timestamp_type_member(py: Python<'_>, id: i8) -> PyResult<Bound<'_, PyAny>> {
    let members = TIMESTAMP_TYPE_MEMBERS.get_or_try_init(py, || -> PyResult<_> {
        let class = timestamp_type_class(py)?;
        let member = |id: i8| class.call1((id,)).map(Bound::unbind);
        Ok([
            member(NO_TIMESTAMP_TYPE_ID)?,
            member(CREATE_TIME_ID)?,
            member(LOG_APPEND_TIME_ID)?,
        ])
    })?;
    // Ids come from `timestamp_type_id` or from `TimestampType` itself: always -1, 0 or 1.
    let index = usize::try_from(id + 1).unwrap_or_default().min(2);
    Ok(members[index].bind(py).clone())
}

/// The bytes of a key or value argument: exactly `bytes` (no subclass, which could refer back
/// to the record and so make a cycle; see `new_decoded_record`) or `None`.
fn optional_bytes<'py>(
    value: Option<Bound<'py, PyAny>>,
    what: &str,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    match value {
        None => Ok(None),
        Some(value) if value.is_none() => Ok(None),
        Some(value) => value
            .cast_into_exact::<PyBytes>()
            .map(Some)
            .map_err(|error| {
                let type_name = error
                    .into_inner()
                    .get_type()
                    .name()
                    .map_or("?".into(), |name| name.to_string());
                invalid(format!(
                    "a record {what} must be bytes or None, got {type_name}"
                ))
            }),
    }
}

fn py_bytes<'py>(py: Python<'py>, bytes: Option<&[u8]>) -> Option<Bound<'py, PyBytes>> {
    bytes.map(|b| PyBytes::new(py, b))
}

fn bytes_or_none(py: Python<'_>, bytes: Option<Bound<'_, PyBytes>>) -> Py<PyAny> {
    bytes.map_or_else(|| py.None(), |b| b.into_any().unbind())
}

/// The bytes of a `Record` field, which holds `bytes` or `None`.
fn bytes_of<'a>(field: &'a Py<PyAny>, py: Python<'a>) -> Option<&'a [u8]> {
    field.bind(py).cast::<PyBytes>().ok().map(|b| b.as_bytes())
}

/// A decoded or user-built record. The Python documentation is `kstate.log.records.Record`'s.
#[pyclass(module = "kstate._core", name = "Record", frozen)]
pub struct Record {
    #[pyo3(get)]
    offset: i64,
    #[pyo3(get)]
    timestamp: i64,
    timestamp_type: i8,
    /// `bytes` or `None`. Plain `Py` fields (not `Option`) become member slots that CPython
    /// reads directly, which keeps attribute access as fast as on a tuple.
    #[pyo3(get)]
    key: Py<PyAny>,
    #[pyo3(get)]
    value: Py<PyAny>,
}

impl Record {
    fn key_bytes<'a>(&'a self, py: Python<'a>) -> Option<&'a [u8]> {
        bytes_of(&self.key, py)
    }

    fn value_bytes<'a>(&'a self, py: Python<'a>) -> Option<&'a [u8]> {
        bytes_of(&self.value, py)
    }

    /// The fields in declaration order, as compared and hashed; `None` sorts before any bytes.
    #[allow(clippy::type_complexity)]
    fn fields<'a>(&'a self, py: Python<'a>) -> (i64, i64, i8, Option<&'a [u8]>, Option<&'a [u8]>) {
        (
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key_bytes(py),
            self.value_bytes(py),
        )
    }
}

#[pymethods]
impl Record {
    #[new]
    #[pyo3(signature = (offset, timestamp=-1, timestamp_type=None, key=None, value=None))]
    fn new(
        py: Python<'_>,
        offset: i64,
        timestamp: i64,
        timestamp_type: Option<Bound<'_, PyAny>>,
        key: Option<Bound<'_, PyAny>>,
        value: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let timestamp_type = match timestamp_type {
            None => CREATE_TIME_ID,
            // `TimestampType(...)` accepts members, ids and names, and raises for the rest.
            Some(given) => timestamp_type_class(py)?.call1((given,))?.extract()?,
        };
        Ok(Self {
            offset,
            timestamp,
            timestamp_type,
            key: bytes_or_none(py, optional_bytes(key, "key")?),
            value: bytes_or_none(py, optional_bytes(value, "value")?),
        })
    }

    #[getter]
    fn timestamp_type<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        timestamp_type_member(py, self.timestamp_type)
    }

    fn __richcmp__(&self, py: Python<'_>, other: &Bound<'_, Record>, op: CompareOp) -> bool {
        op.matches(self.fields(py).cmp(&other.get().fields(py)))
    }

    fn __hash__(&self, py: Python<'_>) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.fields(py).hash(&mut hasher);
        hasher.finish()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let repr =
            |bytes: &Py<PyAny>| -> PyResult<String> { Ok(bytes.bind(py).repr()?.to_string()) };
        Ok(format!(
            "Record(offset={}, timestamp={}, timestamp_type=TimestampType.{}, key={}, value={})",
            self.offset,
            self.timestamp,
            timestamp_type_member(py, self.timestamp_type)?.getattr("name")?,
            repr(&self.key)?,
            repr(&self.value)?,
        ))
    }

    /// Pickles as a constructor call (records travel to PySpark workers this way).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let record = slf.get();
        let arguments = (
            record.offset,
            record.timestamp,
            timestamp_type_member(py, record.timestamp_type)?,
            record.key.bind(py),
            record.value.bind(py),
        );
        (slf.get_type(), arguments).into_pyobject(py)
    }
}

/// Builds one message set from `records` (each a `Record` or an `(offset, timestamp, key,
/// value)` tuple); a `log_append_time` makes it a LogAppendTime set.
#[pyfunction]
#[pyo3(signature = (records, magic, compression, log_append_time=None))]
pub fn encode_records<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    magic: u8,
    compression: u8,
    log_append_time: Option<i64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (magic, compression) = (magic_of(magic)?, compression_of(compression)?);
    let mut builder = guard(|| match log_append_time {
        None => Ok(MessageSetBuilder::new(magic, compression)),
        Some(time) => MessageSetBuilder::with_log_append_time(magic, compression, time),
    })?;
    for item in records.try_iter()? {
        let item = item?;
        if let Ok(record) = item.cast::<Record>() {
            let record = record.get();
            let (key, value) = (record.key_bytes(py), record.value_bytes(py));
            guard(|| builder.append(record.offset, record.timestamp, key, value))?;
            continue;
        }
        let (offset, timestamp, key, value): (
            i64,
            i64,
            Option<Bound<'py, PyAny>>,
            Option<Bound<'py, PyAny>>,
        ) = item.extract().map_err(|_| {
            invalid(format!(
                "a record to encode must be a Record or an (offset, timestamp, key, value) \
                     tuple, got {}",
                item.get_type()
                    .name()
                    .map_or("?".into(), |name| name.to_string())
            ))
        })?;
        let (key, value) = (optional_bytes(key, "key")?, optional_bytes(value, "value")?);
        let (key, value) = (key.as_ref(), value.as_ref());
        guard(|| {
            builder.append(
                offset,
                timestamp,
                key.map(|k| k.as_bytes()),
                value.map(|v| v.as_bytes()),
            )
        })?;
    }
    // Compression runs without the interpreter lock, so other Python threads go on.
    let set = detached(py, || builder.build())?;
    Ok(PyBytes::new(py, &set))
}

/// Every record of `data` (deep: wrappers decompressed, absolute offsets) as `Record`s.
#[pyfunction]
pub fn decode_records<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let mut records = Vec::new();
    guard(|| {
        codec::visit_records(data, &mut |record| {
            records.push(new_decoded_record(py, record));
            Ok(())
        })
    })?;
    PyList::new(py, records.into_iter().collect::<PyResult<Vec<_>>>()?)
}

/// Records decoded per `__next__` call of `RecordChunks`: enough to make the per-call cost
/// negligible, few enough to stay small in memory.
const CHUNK_RECORDS: usize = 1024;

/// The records of a message set, decoded as they are read, as lists of up to `CHUNK_RECORDS`
/// (`kstate.log.records.iter_decode` flattens them in C with `itertools.chain`). A wrapper is
/// decompressed when its first record is needed.
#[pyclass(module = "kstate._core", name = "RecordChunks")]
pub struct RecordChunks {
    data: Py<PyBytes>,
    /// Where the next top-level entry starts in `data`.
    position: usize,
    /// The wrapper whose records are being read.
    inner: Option<InnerRecords>,
    /// An error met after some records of a chunk: raised by the next call, so the records
    /// before it are still returned.
    pending_error: Option<PyErr>,
    /// The set has ended, or an error was raised.
    done: bool,
}

impl RecordChunks {
    fn next_record<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, Record>>> {
        loop {
            if let Some(inner) = &mut self.inner {
                match guard(|| inner.next_record().transpose())? {
                    Some(record) => return new_decoded_record(py, record).map(Some),
                    None => self.inner = None,
                }
            }
            let data = self.data.bind(py).as_bytes();
            let Some(entry) = guard(|| codec::entry_at(data, self.position).transpose())? else {
                return Ok(None);
            };
            self.position += entry.size;
            if !entry.is_compressed() {
                return new_decoded_record(py, entry.record_view()).map(Some);
            }
            self.inner = Some(guard(|| entry.inner_records())?);
        }
    }
}

#[pymethods]
impl RecordChunks {
    #[new]
    fn new(data: Py<PyBytes>) -> Self {
        Self {
            data,
            position: 0,
            inner: None,
            pending_error: None,
            done: false,
        }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        if let Some(error) = self.pending_error.take() {
            self.done = true;
            return Err(error);
        }
        let mut chunk = Vec::with_capacity(CHUNK_RECORDS);
        while !self.done && chunk.len() < CHUNK_RECORDS {
            match self.next_record(py) {
                Ok(Some(record)) => chunk.push(record),
                Ok(None) => self.done = true,
                Err(error) if chunk.is_empty() => {
                    self.done = true;
                    return Err(error);
                }
                Err(error) => {
                    self.pending_error = Some(error);
                    break;
                }
            }
        }
        if chunk.is_empty() {
            return Ok(None);
        }
        PyList::new(py, chunk).map(Some)
    }
}

/// A `Record` of freshly made `bytes`, left out of the cyclic garbage collector: a record refers
/// only to exact `bytes` and so can never be part of a reference cycle (CPython untracks tuples
/// of such values the same way).
/// Tracked, every collection pass would rescan every record of a large decoded list, which
/// doubles the cost of decoding it.
fn new_decoded_record<'py>(
    py: Python<'py>,
    record: RecordView<'_>,
) -> PyResult<Bound<'py, Record>> {
    let record = Bound::new(
        py,
        Record {
            offset: record.offset,
            timestamp: record.timestamp,
            timestamp_type: timestamp_type_id(record.timestamp_type),
            key: bytes_or_none(py, py_bytes(py, record.key)),
            value: bytes_or_none(py, py_bytes(py, record.value)),
        },
    )?;
    // SAFETY: `record` is a live object of a GC type; untracking only stops the collector from
    // visiting it, and its deallocation untracks again only if it is tracked.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(record.as_ptr().cast()) };
    Ok(record)
}

/// The top-level entries of `data` as stored (a wrapper's value stays compressed).
#[pyfunction]
pub fn shallow_entries<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Vec<EntryTuple<'py>>> {
    let entries: Vec<Entry<'_>> = guard(|| codec::shallow_entries(data).collect())?;
    Ok(entries
        .into_iter()
        .map(|entry| {
            (
                entry.position,
                entry.size,
                entry.offset,
                entry.magic.as_byte(),
                compression_id(entry.compression),
                entry.timestamp,
                timestamp_type_id(entry.timestamp_type),
                py_bytes(py, entry.key),
                py_bytes(py, entry.value),
            )
        })
        .collect())
}

/// Column bytes made by the core, handed to pyarrow without a copy: Python wraps them with
/// `pyarrow.foreign_buffer(address, size, base=buffer)`, which keeps this object, and so the
/// bytes, alive as long as the Arrow buffer. Frozen, so the bytes never move.
#[pyclass(module = "kstate._core", name = "ColumnBuffer", frozen)]
pub struct ColumnBuffer {
    bytes: ColumnBytes,
}

enum ColumnBytes {
    Bytes(Vec<u8>),
    /// In native byte order, which is Arrow's.
    Int64(Vec<i64>),
}

#[pymethods]
impl ColumnBuffer {
    #[getter]
    fn address(&self) -> usize {
        match &self.bytes {
            ColumnBytes::Bytes(bytes) => bytes.as_ptr() as usize,
            ColumnBytes::Int64(values) => values.as_ptr() as usize,
        }
    }

    #[getter]
    fn size(&self) -> usize {
        match &self.bytes {
            ColumnBytes::Bytes(bytes) => bytes.len(),
            ColumnBytes::Int64(values) => std::mem::size_of_val(values.as_slice()),
        }
    }
}

impl From<Vec<u8>> for ColumnBuffer {
    fn from(bytes: Vec<u8>) -> Self {
        Self {
            bytes: ColumnBytes::Bytes(bytes),
        }
    }
}

impl From<Vec<i64>> for ColumnBuffer {
    fn from(values: Vec<i64>) -> Self {
        Self {
            bytes: ColumnBytes::Int64(values),
        }
    }
}

fn packed_array(built: BinaryBuilder) -> PackedArray {
    let null_count = built.null_count;
    (
        built.validity.into(),
        built.offsets.into(),
        built.data.into(),
        null_count,
    )
}

/// The `count` values of an Arrow int64 buffer passed in.
fn int64_values(buffer: &[u8], count: usize, what: &str) -> PyResult<Vec<i64>> {
    if buffer.len() != count * 8 {
        return Err(invalid(format!(
            "the {what} buffer has {} bytes, not 8 for each of {count} records",
            buffer.len()
        )));
    }
    Ok(buffer
        .chunks_exact(8)
        .map(|chunk| i64::from_le_bytes(chunk.try_into().unwrap_or_default()))
        .collect())
}

/// Every record of `data` as Arrow column buffers (see `DecodedColumns`); timestamp types are
/// int8 Kafka ids, which are the core's u8 codes read as signed (255 is -1).
#[pyfunction]
pub fn decode_record_columns(py: Python<'_>, data: &[u8], large: bool) -> PyResult<DecodedColumns> {
    let columns = detached(py, || codec::decode_columns(data, large))?;
    Ok((
        columns.len(),
        columns.offsets.into(),
        columns.timestamps.into(),
        columns.timestamp_types.into(),
        packed_array(columns.keys),
        packed_array(columns.values),
    ))
}

fn binary_column(column: ArrowColumn<'_>, count: usize) -> kstate_core::Result<BinaryColumn<'_>> {
    let (offsets, data, validity, start, large) = column;
    BinaryColumn::parse(offsets, data, validity, start, count, large)
}

/// One message set from Arrow column buffers: int64 `offsets` and `timestamps`, int8 timestamp
/// type ids (one per record), binary `key` and `value` arrays.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn encode_record_columns<'py>(
    py: Python<'py>,
    magic: u8,
    compression: u8,
    count: usize,
    offsets: &[u8],
    timestamps: &[u8],
    timestamp_types: &[u8],
    key: ArrowColumn<'_>,
    value: ArrowColumn<'_>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (magic, compression) = (magic_of(magic)?, compression_of(compression)?);
    let offsets = int64_values(offsets, count, "offset")?;
    let timestamps = int64_values(timestamps, count, "timestamp")?;
    let set = detached(py, || {
        let columns = RecordColumnsView {
            offsets: &offsets,
            timestamps: &timestamps,
            timestamp_types,
            keys: binary_column(key, count)?,
            values: binary_column(value, count)?,
        };
        codec::encode_columns(magic, compression, &columns)
    })?;
    Ok(PyBytes::new(py, &set))
}

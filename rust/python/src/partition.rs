//! Binds `kstate_core::log::Partition` for `kstate.log.partition`: convert, call, map errors.

use std::collections::HashMap;
use std::path::Path;

use kstate_core::log::{LogConfig, NewRecord, Partition};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{detached, guard};

/// `(timestamp, key, value)` of a record to append.
type RecordTuple = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

#[pyclass(module = "kstate._core", name = "Partition")]
pub struct NativePartition {
    /// `None` once closed.
    inner: Option<Partition>,
}

fn closed() -> kstate_core::Error {
    kstate_core::Error::Closed("the partition is closed".into())
}

impl NativePartition {
    fn partition(&self) -> PyResult<&Partition> {
        guard(|| self.inner.as_ref().ok_or_else(closed))
    }

    fn partition_mut(&mut self) -> PyResult<&mut Partition> {
        guard(|| self.inner.as_mut().ok_or_else(closed))
    }
}

#[pymethods]
impl NativePartition {
    /// Opens (creating if needed) a partition directory; returns it and what recovery did.
    #[staticmethod]
    fn open<'py>(
        py: Python<'py>,
        directory: &str,
        config: HashMap<String, String>,
    ) -> PyResult<(Self, Bound<'py, PyDict>)> {
        let (partition, report) = detached(py, || {
            let mut log_config = LogConfig::default();
            for (name, value) in &config {
                log_config.set(name, value)?;
            }
            log_config.validate()?;
            Partition::open(Path::new(directory), log_config)
        })?;
        let found = PyDict::new(py);
        found.set_item("created", report.created)?;
        found.set_item("segments", report.segments)?;
        let tail = report.truncated_tail.map(|t| (t.bytes_removed, t.problem));
        found.set_item("truncated_tail", tail)?;
        found.set_item("rebuilt_indexes", report.rebuilt_indexes)?;
        found.set_item("completed_swaps", report.completed_swaps)?;
        Ok((
            Self {
                inner: Some(partition),
            },
            found,
        ))
    }

    /// Appends `(timestamp, key, value)` records; returns `(first offset, last offset,
    /// log append time, max timestamp)`.
    fn append(
        &mut self,
        py: Python<'_>,
        records: Vec<RecordTuple>,
        now_ms: i64,
    ) -> PyResult<(i64, i64, i64, i64)> {
        let partition = self.partition_mut()?;
        detached(py, || {
            let rows: Vec<NewRecord<'_>> = records
                .iter()
                .map(|(timestamp, key, value)| NewRecord {
                    timestamp: *timestamp,
                    key: key.as_deref(),
                    value: value.as_deref(),
                })
                .collect();
            let info = partition.append(&rows, now_ms)?;
            Ok((
                info.first_offset,
                info.last_offset,
                info.log_append_time,
                info.max_timestamp,
            ))
        })
    }

    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        let partition = self.partition_mut()?;
        detached(py, || partition.flush())
    }

    fn sync_appended(&mut self, py: Python<'_>) -> PyResult<()> {
        let partition = self.partition_mut()?;
        detached(py, || partition.sync_appended())
    }

    /// Message-set bytes from the entry holding `from_offset`, about `max_bytes` of them.
    fn read<'py>(
        &self,
        py: Python<'py>,
        from_offset: i64,
        max_bytes: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let partition = self.partition()?;
        let set = detached(py, || partition.read(from_offset, max_bytes))?;
        Ok(PyBytes::new(py, &set))
    }

    /// `(timestamp, offset)` of the first record with a timestamp >= `timestamp`, or `None`.
    fn offsets_for_times(&self, py: Python<'_>, timestamp: i64) -> PyResult<Option<(i64, i64)>> {
        let partition = self.partition()?;
        let found = detached(py, || partition.offsets_for_times(timestamp))?;
        Ok(found.map(|t| (t.timestamp, t.offset)))
    }

    fn truncate_to(&mut self, py: Python<'_>, offset: i64) -> PyResult<()> {
        let partition = self.partition_mut()?;
        detached(py, || partition.truncate_to(offset))
    }

    /// Deletes the oldest segments whose records all lie below `offset` (never the active
    /// one); returns the new log start offset.
    fn delete_segments_below(&mut self, py: Python<'_>, offset: i64, now_ms: i64) -> PyResult<i64> {
        let partition = self.partition_mut()?;
        let report = detached(py, || partition.delete_segments_below(offset, now_ms))?;
        Ok(report.log_start_offset)
    }

    /// Deletes the records before `offset` (Kafka's `DeleteRecords`): the log start offset
    /// becomes `offset`, kept across reopening; returns `(segments deleted, log start offset)`.
    fn delete_records_before(
        &mut self,
        py: Python<'_>,
        offset: i64,
        now_ms: i64,
    ) -> PyResult<(usize, i64)> {
        let partition = self.partition_mut()?;
        let report = detached(py, || partition.delete_records_before(offset, now_ms))?;
        Ok((report.deleted_below_offset, report.log_start_offset))
    }

    /// Deletes segments past retention; returns what it deleted.
    fn delete_expired<'py>(
        &mut self,
        py: Python<'py>,
        now_ms: i64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let partition = self.partition_mut()?;
        let report = detached(py, || partition.delete_expired(now_ms))?;
        let out = PyDict::new(py);
        out.set_item("deleted_by_time", report.deleted_by_time)?;
        out.set_item("deleted_by_size", report.deleted_by_size)?;
        out.set_item("bytes_deleted", report.bytes_deleted)?;
        out.set_item("log_start_offset", report.log_start_offset)?;
        Ok(out)
    }

    /// Keeps the latest record per key in sealed segments; returns what it did.
    fn compact<'py>(&mut self, py: Python<'py>, now_ms: i64) -> PyResult<Bound<'py, PyDict>> {
        let partition = self.partition_mut()?;
        let report = detached(py, || partition.compact(now_ms))?;
        let out = PyDict::new(py);
        out.set_item("segments_before", report.segments_before)?;
        out.set_item("segments_after", report.segments_after)?;
        out.set_item("records_read", report.records_read)?;
        out.set_item("superseded_removed", report.superseded_removed)?;
        out.set_item("tombstones_removed", report.tombstones_removed)?;
        out.set_item("bytes_before", report.bytes_before)?;
        out.set_item("bytes_after", report.bytes_after)?;
        Ok(out)
    }

    #[getter]
    fn log_start_offset(&self) -> PyResult<i64> {
        Ok(self.partition()?.log_start_offset())
    }

    #[getter]
    fn log_end_offset(&self) -> PyResult<i64> {
        Ok(self.partition()?.log_end_offset())
    }

    #[getter]
    fn size_bytes(&self) -> PyResult<u64> {
        Ok(self.partition()?.size_bytes())
    }

    /// `(base offset, size in bytes, max timestamp)` of each segment, oldest first.
    fn segments(&self) -> PyResult<Vec<(i64, u64, i64)>> {
        Ok(self
            .partition()?
            .segments()
            .into_iter()
            .map(|s| (s.base_offset, s.size_bytes, s.max_timestamp))
            .collect())
    }

    #[getter]
    fn is_open(&self) -> bool {
        self.inner.is_some()
    }

    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.inner.take() {
            Some(partition) => detached(py, || partition.close()),
            None => Ok(()),
        }
    }
}

/// The offset the records of a partition directory were deleted before (Kafka's `DeleteRecords`),
/// read without opening the log; 0 if they never were.
#[pyfunction]
pub fn records_deleted_before(partition_dir: &str) -> PyResult<i64> {
    guard(|| kstate_core::log::records_deleted_before(Path::new(partition_dir)))
}

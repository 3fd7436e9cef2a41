//! A replica's reads of keys (`kstate.spark.serving.snapshot`) in one call each: Spark's
//! partition of the key (`pmod(hash(key), n)`, the query's routing) picks that partition's
//! read-committed view, which reads the key's bytes. For stores whose keys are their single key
//! column's values, stored as Kafka's serializers write them: a string's UTF-8 bytes, a
//! binary's bytes, a long's 8 big-endian bytes.

use kstate_core::spark::hash::{hash_value, pmod, Scalar, SEED};
use kstate_core::ReadCommittedView;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString};

use crate::errors::guard;
use crate::key_value_store::NativeReadCommittedView;

#[derive(Clone, Copy)]
enum KeyColumn {
    String,
    Binary,
    Bigint,
}

/// A key as its partition's hash and the store read it: `(hash, stored key bytes)`; `None` for
/// a value that is not a plain Python value of the key column's type.
fn routed(key: &Bound<'_, PyAny>, column: KeyColumn) -> Option<(i32, Vec<u8>)> {
    match column {
        KeyColumn::String => {
            let text = key.cast::<PyString>().ok()?.to_cow().ok()?;
            let bytes = text.as_bytes();
            Some((hash_value(Scalar::Bytes(bytes), SEED), bytes.to_vec()))
        }
        KeyColumn::Binary => {
            let bytes = key.cast::<PyBytes>().ok()?.as_bytes();
            Some((hash_value(Scalar::Bytes(bytes), SEED), bytes.to_vec()))
        }
        KeyColumn::Bigint => {
            if !key.is_exact_instance_of::<PyInt>() {
                return None;
            }
            let value: i64 = key.extract().ok()?;
            Some((
                hash_value(Scalar::Long(value), SEED),
                value.to_be_bytes().to_vec(),
            ))
        }
    }
}

/// The read-committed views of a store's partitions, in partition order, read by keys of a
/// key column of Spark type `spark_type` (`string`, `binary` or `bigint`).
#[pyclass(module = "kstate._core", name = "RoutedViews", frozen)]
pub struct RoutedViews {
    views: Vec<ReadCommittedView>,
    column: KeyColumn,
}

#[pymethods]
impl RoutedViews {
    #[new]
    fn new(
        views: Vec<PyRef<'_, NativeReadCommittedView>>,
        spark_type: &Bound<'_, PyString>,
    ) -> PyResult<Self> {
        let spark_type = spark_type.to_cow()?;
        let column = match spark_type.as_ref() {
            "string" => KeyColumn::String,
            "binary" => KeyColumn::Binary,
            "bigint" => KeyColumn::Bigint,
            other => {
                let other = other.to_string();
                return guard(|| {
                    Err(kstate_core::Error::InvalidArgument(format!(
                        "keys routed natively are string, binary or bigint values, not {other}"
                    )))
                });
            }
        };
        if views.is_empty() || views.len() > i32::MAX as usize {
            return guard(|| {
                Err(kstate_core::Error::InvalidArgument(
                    "routed views need one view per partition".into(),
                ))
            });
        }
        Ok(RoutedViews {
            views: views.iter().map(|v| v.inner.clone()).collect(),
            column,
        })
    }

    /// `(partition, stored value or None)` of `key`; `None` if `key` is not a plain value of the
    /// key column's type (read it the general way).
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(i32, Option<Bound<'py, PyBytes>>)>> {
        let Some((hash, bytes)) = routed(key, self.column) else {
            return Ok(None);
        };
        let partition = pmod(hash, self.views.len() as i32);
        let view = &self.views[partition as usize];
        let value = guard(|| view.get_with(&bytes, |v| v.map(|b| PyBytes::new(py, b))))?;
        Ok(Some((partition, value)))
    }

    /// `(partitions read, stored values in the keys' order)` of `keys`, each partition's keys
    /// read in one call; `None` if a key is not a plain value of the key column's type.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyList>,
    ) -> PyResult<Option<(Vec<i32>, Bound<'py, PyList>)>> {
        let count = self.views.len();
        let mut encoded = Vec::with_capacity(keys.len());
        let mut by_partition: Vec<Vec<usize>> = vec![Vec::new(); count];
        for (i, key) in keys.iter().enumerate() {
            let Some((hash, bytes)) = routed(&key, self.column) else {
                return Ok(None);
            };
            by_partition[pmod(hash, count as i32) as usize].push(i);
            encoded.push(bytes);
        }
        let mut values: Vec<Option<Bound<'py, PyBytes>>> = vec![None; encoded.len()];
        let mut read = Vec::new();
        for (partition, rows) in by_partition.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            read.push(partition as i32);
            let slices: Vec<&[u8]> = rows.iter().map(|&i| encoded[i].as_slice()).collect();
            guard(|| {
                self.views[partition].get_many_with(&slices, &mut |j, v| {
                    values[rows[j]] = v.map(|b| PyBytes::new(py, b));
                })
            })?;
        }
        Ok(Some((read, PyList::new(py, values)?)))
    }
}

//! A replica's reads of keys (`kstate.spark.serving.snapshot`) in one call each: Spark's
//! partition of the key (`pmod(hash(key), n)`, the query's routing) picks that partition's
//! read-committed view, which reads the key's bytes. For stores whose keys are their single key
//! column's values, stored as Kafka's serializers write them: a string's UTF-8 bytes, a
//! binary's bytes, a long's 8 big-endian bytes. Values of the same built-in serdes are decoded
//! here too; a value they cannot decode is left to the Python serde, whose error names it.

use kstate_core::spark::hash::{hash_value, pmod, Scalar, SEED};
use kstate_core::ReadCommittedView;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyType};

use crate::errors::guard;
use crate::key_value_store::{NativeReadCommittedView, RowType};
use crate::text::utf8;

#[derive(Clone, Copy)]
enum KeyColumn {
    String,
    Binary,
    Bigint,
}

/// A value serde whose bytes are decoded here (`kstate.serdes`' built-in ones).
#[derive(Clone, Copy)]
enum ValueSerde {
    Bytes,
    String,
    Long,
    Double,
}

impl ValueSerde {
    fn named(name: &str) -> Option<Self> {
        match name {
            "bytes" => Some(ValueSerde::Bytes),
            "string" => Some(ValueSerde::String),
            "int64" => Some(ValueSerde::Long),
            "double" => Some(ValueSerde::Double),
            _ => None,
        }
    }

    /// The value of `bytes`; `None` for bytes the serde rejects (its Python side says why).
    fn decode<'py>(self, py: Python<'py>, bytes: &[u8]) -> Option<Bound<'py, PyAny>> {
        Some(match self {
            ValueSerde::Bytes => PyBytes::new(py, bytes).into_any(),
            ValueSerde::String => PyString::new(py, std::str::from_utf8(bytes).ok()?).into_any(),
            ValueSerde::Long => {
                PyInt::new(py, i64::from_be_bytes(bytes.try_into().ok()?)).into_any()
            }
            ValueSerde::Double => {
                PyFloat::new(py, f64::from_be_bytes(bytes.try_into().ok()?)).into_any()
            }
        })
    }
}

/// A stored value as a read returns it: decoded by `serde`, or its bytes (`None`: the Python
/// serde decodes them). `Err(())`: bytes the serde rejects.
fn value_of<'py>(
    py: Python<'py>,
    serde: Option<ValueSerde>,
    stored: Option<&[u8]>,
) -> Result<Option<Bound<'py, PyAny>>, ()> {
    match (stored, serde) {
        (None, _) => Ok(None),
        (Some(bytes), None) => Ok(Some(PyBytes::new(py, bytes).into_any())),
        (Some(bytes), Some(serde)) => serde.decode(py, bytes).map(Some).ok_or(()),
    }
}

/// A key as its partition's hash and the store reads it: `(hash, stored key bytes)`; `None` for
/// a value that is not a plain Python value of the key column's type. A string's or a binary's
/// bytes are borrowed from the Python object.
fn routed<'a>(key: &'a Bound<'_, PyAny>, column: KeyColumn) -> Option<(i32, Cow<'a, [u8]>)> {
    let bytes = match column {
        KeyColumn::String => utf8(key.cast::<PyString>().ok()?.as_borrowed()).ok()?,
        KeyColumn::Binary => Cow::Borrowed(key.cast::<PyBytes>().ok()?.as_bytes()),
        KeyColumn::Bigint => {
            if !key.is_exact_instance_of::<PyInt>() {
                return None;
            }
            let value: i64 = key.extract().ok()?;
            return Some((
                hash_value(Scalar::Long(value), SEED),
                Cow::Owned(value.to_be_bytes().to_vec()),
            ));
        }
    };
    Some((hash_value(Scalar::Bytes(&bytes), SEED), bytes))
}

/// The read-committed views of a store's partitions, in partition order, read by keys of a
/// key column of Spark type `spark_type` (`string`, `binary` or `bigint`), their values decoded
/// by the built-in serde `value_serde` (`bytes`, `string`, `int64`, `double`; `None`: values
/// are returned as bytes). `batches`: per partition, the batch a read of it answers at and the
/// newest batch it holds, for `SnapshotRead`.
#[pyclass(module = "kstate._core", name = "RoutedViews", frozen)]
pub struct RoutedViews {
    views: Vec<ReadCommittedView>,
    column: KeyColumn,
    values: Option<ValueSerde>,
    batches: Vec<(Py<PyAny>, Py<PyAny>)>,
}

#[pymethods]
impl RoutedViews {
    #[new]
    #[pyo3(signature = (views, spark_type, value_serde=None, batches=Vec::new()))]
    fn new(
        views: Vec<PyRef<'_, NativeReadCommittedView>>,
        spark_type: &Bound<'_, PyString>,
        value_serde: Option<&str>,
        batches: Vec<(Py<PyAny>, Py<PyAny>)>,
    ) -> PyResult<Self> {
        let values = match value_serde {
            None => None,
            Some(name) => match ValueSerde::named(name) {
                Some(serde) => Some(serde),
                None => {
                    let name = name.to_string();
                    return guard(|| {
                        Err(kstate_core::Error::InvalidArgument(format!(
                            "values decoded natively are bytes, string, int64 or double, not {name}"
                        )))
                    });
                }
            },
        };
        if !batches.is_empty() && batches.len() != views.len() {
            return guard(|| {
                Err(kstate_core::Error::InvalidArgument(
                    "routed views need the batches of every partition or none".into(),
                ))
            });
        }
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
            values,
            batches,
        })
    }

    /// `(partition, value or None)` of `key`; `None` if `key` is not a plain value of the key
    /// column's type or its value is not one of the serde's (read it the general way).
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(i32, Option<Bound<'py, PyAny>>)>> {
        let Some((hash, bytes)) = routed(key, self.column) else {
            return Ok(None);
        };
        let partition = pmod(hash, self.views.len() as i32);
        let view = &self.views[partition as usize];
        let value = guard(|| view.get_with(&bytes, |v| value_of(py, self.values, v)))?;
        Ok(value.ok().map(|value| (partition, value)))
    }

    /// `(partitions read, values in the keys' order)` of `keys`, each partition's keys read in
    /// one call; `None` as for `get`, if it is so for any key.
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
            encoded.push(bytes.into_owned());
        }
        let mut values: Vec<Option<Bound<'py, PyAny>>> = vec![None; encoded.len()];
        let mut rejected = false;
        let mut read = Vec::new();
        for (partition, rows) in by_partition.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            read.push(partition as i32);
            let slices: Vec<&[u8]> = rows.iter().map(|&i| encoded[i].as_slice()).collect();
            guard(|| {
                self.views[partition].get_many_with(&slices, &mut |j, v| match value_of(
                    py,
                    self.values,
                    v,
                ) {
                    Ok(value) => values[rows[j]] = value,
                    Err(()) => rejected = true,
                })
            })?;
        }
        if rejected {
            return Ok(None);
        }
        Ok(Some((read, PyList::new(py, values)?)))
    }
}

impl RoutedViews {
    /// `get` as a replica's read answers it: `[value or None, batch, {partition: newest
    /// batch}]` with the partition's `batches`; `None` as for `get`.
    fn answer<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<[Bound<'py, PyAny>; 3]>> {
        let Some((partition, value)) = self.get(py, key)? else {
            return Ok(None);
        };
        let Some((batch, through)) = self.batches.get(partition as usize) else {
            return guard(|| {
                Err(kstate_core::Error::InvalidState(
                    "routed views made without their partitions' batches".into(),
                ))
            });
        };
        let partitions = PyDict::new(py);
        partitions.set_item(partition, through.bind(py))?;
        let value = value.unwrap_or_else(|| py.None().into_bound(py));
        Ok(Some([value, batch.bind(py).clone(), partitions.into_any()]))
    }
}

/// A seqlock's sequence (`kstate.spark.serving.readers_writer`): twice the writes finished, plus
/// one while a write runs. Native so that a read checks it without an attribute lookup.
#[pyclass(module = "kstate._core", name = "Seqlock", frozen)]
#[derive(Default)]
pub struct Seqlock {
    sequence: AtomicU64,
}

#[pymethods]
impl Seqlock {
    #[new]
    fn new() -> Self {
        Seqlock::default()
    }

    #[getter]
    fn sequence(&self) -> u64 {
        self.sequence.load(Ordering::Acquire)
    }

    /// Starts or ends a write.
    fn advance(&self) {
        self.sequence.fetch_add(1, Ordering::AcqRel);
    }
}

/// A replica's read of a key in one call (`StateReplica.get`'s common case): `views`' answer,
/// made an `answer_type` (the replica's `Answer`, a tuple subclass) while `seqlock` is still at
/// the `sequence` the replica's snapshot was taken at, before and after the read; `None` once an
/// update has started since, or for a key `views` cannot read: the replica then reads the key its general
/// way.
#[pyclass(module = "kstate._core", name = "SnapshotRead", frozen)]
pub struct SnapshotRead {
    views: Py<RoutedViews>,
    answer: RowType,
    seqlock: Py<Seqlock>,
    sequence: u64,
}

#[pymethods]
impl SnapshotRead {
    #[new]
    fn new(
        py: Python<'_>,
        views: Py<RoutedViews>,
        answer_type: Py<PyType>,
        seqlock: Py<Seqlock>,
        sequence: u64,
    ) -> PyResult<Self> {
        Ok(SnapshotRead {
            views,
            answer: RowType::new(py, answer_type)?,
            seqlock,
            sequence,
        })
    }

    fn read<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if !self.current() {
            return Ok(None);
        }
        let items = match self.views.get().answer(py, key) {
            Ok(Some(items)) => items,
            Ok(None) => return Ok(None),
            // A store closed by an update racing this read is the update's, not an error.
            Err(error) => return if self.current() { Err(error) } else { Ok(None) },
        };
        if !self.current() {
            return Ok(None);
        }
        self.answer.make_tracked(py, items).map(Some)
    }
}

impl SnapshotRead {
    fn current(&self) -> bool {
        self.seqlock.get().sequence() == self.sequence
    }
}

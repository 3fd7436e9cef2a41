//! Binds `kstate_core::spark::hash` for `kstate.spark.routing.hashing`: Spark's `hash()` and
//! `HashPartitioning` partition ids over Arrow column buffers, computed without the GIL; and
//! the partitions of rows of plain Python values (a replica's reads), without Arrow.

use kstate_core::spark::hash::{
    hash_columns, hash_value, pmod, to_partition_ids, ColumnBuffers, ColumnKind, Scalar, SEED,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString};

use crate::errors::{detached, guard};
use crate::text::utf8;

/// `(kind, offsets or None, data, validity or None, offset)` of one Arrow array: `kind` one of
/// `ColumnKind::ALL`'s names, `offset` the array's element offset into its buffers.
type HashColumn<'py> = (
    String,
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
    Option<Bound<'py, PyBytes>>,
    usize,
);

/// Spark's `hash(*columns)` of `count` rows as `count` little-endian i32s; with
/// `num_partitions`, `pmod(hash, num_partitions)` instead (the rows' Spark partitions).
#[pyfunction]
#[pyo3(signature = (count, columns, num_partitions=None))]
pub fn spark_hash<'py>(
    py: Python<'py>,
    count: usize,
    columns: Vec<HashColumn<'py>>,
    num_partitions: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let buffers = guard(|| {
        columns
            .iter()
            .map(|(kind, offsets, data, validity, offset)| {
                Ok(ColumnBuffers {
                    kind: ColumnKind::from_name(kind)?,
                    offsets: offsets.as_ref().map(|b| b.as_bytes()),
                    data: data.as_bytes(),
                    validity: validity.as_ref().map(|b| b.as_bytes()),
                    offset: *offset,
                })
            })
            .collect::<kstate_core::Result<Vec<_>>>()
    })?;
    let out = detached(py, || {
        let mut hashes = hash_columns(count, &buffers)?;
        if let Some(n) = num_partitions {
            to_partition_ids(&mut hashes, n)?;
        }
        let mut out = vec![0u8; hashes.len() * 4];
        for (bytes, h) in out.chunks_exact_mut(4).zip(&hashes) {
            bytes.copy_from_slice(&h.to_le_bytes());
        }
        Ok(out)
    })?;
    Ok(PyBytes::new(py, &out))
}

/// `value`, of a key column of Spark type `spark_type`, mixed into its row's `running` hash;
/// `None` when it is not a plain Python value of that type (the caller routes it through Arrow,
/// which converts or refuses it).
fn mixed(value: &Bound<'_, PyAny>, spark_type: &str, running: i32) -> Option<i32> {
    if value.is_none() {
        return Some(hash_value(Scalar::Null, running));
    }
    let int = || {
        if value.is_exact_instance_of::<PyInt>() {
            value.extract::<i64>().ok()
        } else {
            None
        }
    };
    let narrow = |fits: fn(i64) -> bool| int().filter(|v| fits(*v)).map(|v| Scalar::Int(v as i32));
    let scalar = match spark_type {
        "string" => {
            let text = utf8(value.cast::<PyString>().ok()?.as_borrowed()).ok()?;
            return Some(hash_value(Scalar::Bytes(&text), running));
        }
        "binary" => {
            let bytes = value.cast::<PyBytes>().ok()?;
            return Some(hash_value(Scalar::Bytes(bytes.as_bytes()), running));
        }
        "tinyint" => narrow(|v| i8::try_from(v).is_ok()),
        "smallint" => narrow(|v| i16::try_from(v).is_ok()),
        "int" => narrow(|v| i32::try_from(v).is_ok()),
        "bigint" => int().map(Scalar::Long),
        "boolean" if value.is_exact_instance_of::<PyBool>() => {
            Some(Scalar::Bool(value.is_truthy().ok()?))
        }
        "double" if value.is_exact_instance_of::<PyFloat>() => {
            Some(Scalar::Double(value.extract::<f64>().ok()?))
        }
        _ => None,
    }?;
    Some(hash_value(scalar, running))
}

/// The Spark partition (`pmod(hash(*row), num_partitions)`) of each row of `columns` (lists of
/// Python values, one per key column, of the Spark types `spark_types`) without Arrow; `None`
/// if a value is not a plain Python value of its column's type (string: `str`, binary: `bytes`,
/// tinyint to bigint: `int`, boolean: `bool`, double: `float`; `None` is a null) or a type is
/// another.
#[pyfunction]
pub fn spark_partitions_of_values(
    columns: Vec<Bound<'_, PyList>>,
    spark_types: Vec<String>,
    num_partitions: i32,
) -> PyResult<Option<Vec<i32>>> {
    let rows = columns.first().map_or(0, |c| c.len());
    if columns.len() != spark_types.len()
        || columns.iter().any(|c| c.len() != rows)
        || num_partitions <= 0
    {
        return guard(|| {
            Err(kstate_core::Error::InvalidArgument(format!(
                "{} columns of {:?} rows for {} types into {num_partitions} partitions",
                columns.len(),
                columns.iter().map(|c| c.len()).collect::<Vec<_>>(),
                spark_types.len()
            )))
        });
    }
    let mut partitions = Vec::with_capacity(rows);
    for i in 0..rows {
        let mut running = SEED;
        for (column, spark_type) in columns.iter().zip(&spark_types) {
            match mixed(&column.get_item(i)?, spark_type, running) {
                Some(hash) => running = hash,
                None => return Ok(None),
            }
        }
        partitions.push(pmod(running, num_partitions));
    }
    Ok(Some(partitions))
}

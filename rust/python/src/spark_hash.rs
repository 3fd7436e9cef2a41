//! Binds `kstate_core::spark::hash` for `kstate.spark.routing.hashing`: Spark's `hash()` and
//! `HashPartitioning` partition ids over Arrow column buffers, computed without the GIL.

use kstate_core::spark::hash::{hash_columns, to_partition_ids, ColumnBuffers, ColumnKind};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::guard;

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
    let out = py.detach(|| {
        guard(|| {
            let mut hashes = hash_columns(count, &buffers)?;
            if let Some(n) = num_partitions {
                to_partition_ids(&mut hashes, n)?;
            }
            let mut out = vec![0u8; hashes.len() * 4];
            for (bytes, h) in out.chunks_exact_mut(4).zip(&hashes) {
                bytes.copy_from_slice(&h.to_le_bytes());
            }
            Ok(out)
        })
    })?;
    Ok(PyBytes::new(py, &out))
}

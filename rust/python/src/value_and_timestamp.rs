//! Binds `kstate_core::format::timestamped` for `kstate.value_and_timestamp`.

use kstate_core::format::timestamped;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::guard;

/// `<i64 BE timestamp><raw>`.
#[pyfunction]
pub fn encode_value_and_timestamp<'py>(
    py: Python<'py>,
    timestamp: i64,
    raw: &[u8],
) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &timestamped::encode(timestamp, raw))
}

/// `(timestamp, raw)` of stored timestamped bytes.
#[pyfunction]
pub fn decode_value_and_timestamp<'py>(
    py: Python<'py>,
    stored: &[u8],
) -> PyResult<(i64, Bound<'py, PyBytes>)> {
    let (timestamp, raw) = guard(|| timestamped::decode(stored))?;
    Ok((timestamp, PyBytes::new(py, raw)))
}

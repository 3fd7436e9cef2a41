//! Binds `kstate_core::tools::upgrade` and `inspect` for `kstate.upgrade` and `kstate inspect`: offline
//! store-format upgrades, and what a store directory holds, read-only.

use std::collections::HashMap;
use std::path::Path;

use kstate_core::tools::{inspect, upgrade};
use pyo3::prelude::*;

use crate::errors::detached;
use crate::progress::Progress;

/// `(format name, legacy entries, timestamped entries)` of the store at `path`, read-only.
#[pyfunction]
pub fn inspect_store(py: Python<'_>, path: &str) -> PyResult<(&'static str, u64, u64)> {
    let found = detached(py, || upgrade::inspect(Path::new(path)))?;
    Ok((
        found.format.name(),
        found.legacy_entries,
        found.timestamped_entries,
    ))
}

/// Converts the store at `path` to the timestamped format; `progress(done, total)` after each
/// batch. Returns the number of values converted.
#[pyfunction]
#[pyo3(signature = (path, progress=None))]
pub fn upgrade_store_to_timestamped(
    py: Python<'_>,
    path: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<u64> {
    let mut reporter = Progress::new(progress);
    let converted = detached(py, || {
        upgrade::upgrade_to_timestamped(Path::new(path), &mut |done, total| {
            reporter.counts(done, total)
        })
    })?;
    reporter.finish()?;
    Ok(converted)
}

/// `(offsets as {name: value}, approximate entries, entries counted)` of the store at `path`,
/// read-only; the entries are counted (a scan) only with `count_entries`, else `None`.
#[pyfunction]
#[pyo3(signature = (path, count_entries=false))]
pub fn summarize_store(
    py: Python<'_>,
    path: &str,
    count_entries: bool,
) -> PyResult<(HashMap<String, i64>, u64, Option<u64>)> {
    let found = detached(py, || inspect::summarize(Path::new(path), count_entries))?;
    Ok((
        found.offsets.into_iter().collect(),
        found.approximate_entries,
        found.entries,
    ))
}

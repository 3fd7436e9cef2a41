//! Binds `kstate_core::log::compact_objects` for `kstate.log.remote`: the byte work of
//! compacting a remote changelog's objects. Listing, fetching and uploading are Python's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kstate_core::log::{compact_objects, SegmentObject};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{attached, detached};
use crate::logged::log_config;

/// `(first, last or None, path)` of a segment file.
type ObjectTuple = (i64, Option<i64>, PathBuf);
/// `(first, last, path, bytes)` of a compacted object written.
type CompactedTuple = (i64, i64, String, u64);

fn objects(tuples: Vec<ObjectTuple>) -> Vec<SegmentObject> {
    tuples
        .into_iter()
        .map(|(first, last, path)| SegmentObject { first, last, path })
        .collect()
}

/// Compacts `inputs` given the `newer` objects after them; writes the results to `out_dir`.
/// Returns `([(first, last, path, bytes)], report)`; `progress(done, total)` hears bytes read.
#[pyfunction]
#[pyo3(signature = (inputs, newer, config, now_ms, out_dir, progress=None))]
pub fn compact_changelog_objects<'py>(
    py: Python<'py>,
    inputs: Vec<ObjectTuple>,
    newer: Vec<ObjectTuple>,
    config: HashMap<String, String>,
    now_ms: i64,
    out_dir: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<(Vec<CompactedTuple>, Bound<'py, PyDict>)> {
    let config = log_config(&config)?;
    let (inputs, newer) = (objects(inputs), objects(newer));
    let mut progress_error = None;
    let (outputs, report) = detached(py, || {
        compact_objects(
            &inputs,
            &newer,
            &config,
            now_ms,
            Path::new(out_dir),
            &mut |done, total| {
                if let (Some(callback), None) = (&progress, &progress_error) {
                    if let Err(error) = attached(|py| callback.call1(py, (done, total))) {
                        progress_error = Some(error);
                    }
                }
            },
        )
    })?;
    if let Some(error) = progress_error {
        return Err(error);
    }
    let found = PyDict::new(py);
    found.set_item("objects_before", report.segments_before)?;
    found.set_item("objects_after", report.segments_after)?;
    found.set_item("distinct_keys", report.distinct_keys)?;
    found.set_item("records_read", report.records_read)?;
    found.set_item("superseded_removed", report.superseded_removed)?;
    found.set_item("tombstones_removed", report.tombstones_removed)?;
    found.set_item("keyless_removed", report.keyless_removed)?;
    found.set_item("bytes_before", report.bytes_before)?;
    found.set_item("bytes_after", report.bytes_after)?;
    let outputs = outputs
        .into_iter()
        .map(|o| {
            (
                o.first,
                o.last,
                o.path.to_string_lossy().into_owned(),
                o.bytes,
            )
        })
        .collect();
    Ok((outputs, found))
}

//! `kstate._core.FileWatch`: `kstate_core::file_watch` for `kstate.spark.protocol.idle`, which
//! waits on it for another worker's request for its parked stores (Linux only: elsewhere the
//! class is missing and the caller polls).

use std::path::PathBuf;
use std::time::Duration;

use kstate_core::file_watch;
use pyo3::prelude::*;

use crate::errors::{detached, to_py};

/// Directories watched for a file of one name being created or touched.
#[pyclass(module = "kstate._core", frozen)]
pub struct FileWatch {
    watch: file_watch::FileWatch,
}

#[pymethods]
impl FileWatch {
    #[new]
    fn new(name: &str) -> PyResult<Self> {
        Ok(Self {
            watch: file_watch::FileWatch::new(name).map_err(to_py)?,
        })
    }

    fn add(&self, dir: PathBuf) -> PyResult<()> {
        self.watch.add(&dir).map_err(to_py)
    }

    fn remove(&self, dir: PathBuf) {
        self.watch.remove(&dir)
    }

    /// Waits (without the GIL) up to `timeout` seconds for the file, or for `wake()`; whether
    /// either came.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let timeout = Duration::from_secs_f64(timeout.max(0.0));
        detached(py, || self.watch.wait(timeout))
    }

    fn wake(&self) -> PyResult<()> {
        self.watch.wake().map_err(to_py)
    }
}

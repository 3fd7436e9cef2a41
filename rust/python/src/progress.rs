//! Python callbacks that long native operations report to while the GIL is released.

use kstate_core::CommitProgress;
use pyo3::prelude::*;

use crate::errors::attached;

/// Calls an optional Python callable (`progress(done, total)`, `on_stage(name)`); its first error
/// is kept so the caller can raise it once the (already consistent) operation has finished.
pub struct Progress {
    callback: Option<Py<PyAny>>,
    error: Option<PyErr>,
}

impl Progress {
    pub fn new(callback: Option<Py<PyAny>>) -> Self {
        Self {
            callback,
            error: None,
        }
    }

    pub fn call(&mut self, args: impl for<'py> pyo3::call::PyCallArgs<'py>) {
        if let (Some(cb), None) = (&self.callback, &self.error) {
            if let Err(e) = attached(|py| cb.call1(py, args)) {
                self.error = Some(e);
            }
        }
    }

    pub fn counts(&mut self, done: u64, total: u64) {
        self.call((done, total));
    }

    pub fn report(&mut self, p: CommitProgress) {
        self.counts(p.writes_applied, p.writes_total);
    }

    pub fn finish(self) -> PyResult<()> {
        self.error.map_or(Ok(()), Err)
    }
}

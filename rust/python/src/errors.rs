//! Maps core errors (and any panic) to the exception classes of `kstate.errors`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use kstate_core::Error;
use pyo3::prelude::*;
use pyo3::types::PyModule;

fn raise_in(py: Python<'_>, class: &str, message: String) -> PyErr {
    match PyModule::import(py, "kstate.errors").and_then(|m| m.getattr(class)) {
        Ok(class) => PyErr::from_value(match class.call1((message.clone(),)) {
            Ok(instance) => instance,
            Err(e) => return e,
        }),
        Err(e) => e,
    }
}

/// An instance of `kstate.errors.<class>` with `message`.
pub fn raise(class: &str, message: String) -> PyErr {
    Python::attach(|py| raise_in(py, class, message))
}

pub fn to_py(error: Error) -> PyErr {
    Python::attach(|py| {
        let (class, message) = match error {
            Error::Closed(m) => ("StoreClosedError", m),
            Error::InvalidState(m)
                if m.starts_with(kstate_core::logged::logged_store::STORE_BEHIND_CHANGELOG) =>
            {
                ("StoreBehindChangelogError", m)
            }
            Error::InvalidState(m) => ("InvalidStateStoreError", m),
            Error::InvalidArgument(m) if m.starts_with(kstate_core::log::INVALID_TIMESTAMP) => {
                ("InvalidTimestampError", m)
            }
            Error::InvalidArgument(m) => ("InvalidArgumentError", m),
            Error::Corrupted(m) => ("CorruptedDataError", m),
            Error::Storage(m) => ("ProcessorStateError", m),
        };
        raise_in(py, class, message)
    })
}

/// Runs `f`, turning a core error into its Python class and a panic into `KStateError`, so no
/// Rust panic ever reaches Python as a `PanicException`.
pub fn guard<T>(f: impl FnOnce() -> kstate_core::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(to_py),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(raise(
                "KStateError",
                format!("internal error in kstate core: {what}"),
            ))
        }
    }
}

//! Binds `kstate_core::spark::state_layout` for `kstate.spark`'s state variables, state reader,
//! processor and rescale: the keys and values of processor state, built and read by the core.

use std::borrow::Cow;

use kstate_core::spark::pickled_key::{pickle_key, Part};
use kstate_core::spark::state_layout as layout;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};
use smallvec::SmallVec;

use crate::errors::to_py;
use crate::text::utf8;

type Bytes<'py> = Bound<'py, PyBytes>;

#[pyfunction]
pub fn state_key_prefix<'py>(py: Python<'py>, key: &[u8]) -> PyResult<Bytes<'py>> {
    Ok(PyBytes::new(py, &layout::key_prefix(key).map_err(to_py)?))
}

/// `(grouping key, offset of the rest)` of a length-prefixed key.
#[pyfunction]
pub fn state_split_prefixed<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<(Bytes<'py>, usize)> {
    let (key, rest) = layout::split_prefixed(raw).map_err(to_py)?;
    Ok((PyBytes::new(py, key), raw.len() - rest.len()))
}

#[pyfunction]
pub fn state_expiry_of(stored: &[u8]) -> PyResult<i64> {
    layout::expiry_of(stored).map_err(to_py)
}

/// `(expiry, value bytes)` of a stored value.
#[pyfunction]
pub fn state_split_stored<'py>(py: Python<'py>, stored: &[u8]) -> PyResult<(i64, Bytes<'py>)> {
    let (expiry, value) = layout::split_stored(stored).map_err(to_py)?;
    Ok((expiry, PyBytes::new(py, value)))
}

#[pyfunction]
pub fn state_ordered_time<'py>(py: Python<'py>, ms: i64) -> Bytes<'py> {
    PyBytes::new(py, &layout::ordered_time(ms))
}

/// The milliseconds of the ordered time at `raw[offset:]`.
#[pyfunction]
#[pyo3(signature = (raw, offset=0))]
pub fn state_time_of(raw: &[u8], offset: usize) -> PyResult<i64> {
    layout::time_of(raw.get(offset..).unwrap_or_default()).map_err(to_py)
}

/// The elements of the list entry `key` (a list state's store key) whose value after the
/// expiry is `raw`: `[raw]` for an element's entry, the run's elements for a run's.
#[pyfunction]
pub fn state_list_elements<'py>(
    py: Python<'py>,
    key: &[u8],
    raw: &[u8],
) -> PyResult<Vec<Bytes<'py>>> {
    let (_, suffix) = layout::split_prefixed(key).map_err(to_py)?;
    layout::list_elements(suffix, raw)
        .and_then(|elements| elements.collect::<kstate_core::Result<Vec<_>>>())
        .map(|elements| elements.into_iter().map(|e| PyBytes::new(py, e)).collect())
        .map_err(to_py)
}

/// `(by-time key, by-key key)` of a timer.
#[pyfunction]
pub fn state_timer_keys<'py>(
    py: Python<'py>,
    expiry_ms: i64,
    key: &[u8],
    prefix: &[u8],
) -> (Bytes<'py>, Bytes<'py>) {
    let (by_time, by_key) = layout::timer_keys(expiry_ms, key, prefix);
    (PyBytes::new(py, &by_time), PyBytes::new(py, &by_key))
}

/// `(expiry, grouping key)` of a by-time timer key.
#[pyfunction]
pub fn state_split_timer_by_time<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<(i64, Bytes<'py>)> {
    let (expiry, key) = layout::split_timer_by_time(raw).map_err(to_py)?;
    Ok((expiry, PyBytes::new(py, key)))
}

/// `(grouping key, expiry)` of a by-key timer key.
#[pyfunction]
pub fn state_split_timer_by_key<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<(Bytes<'py>, i64)> {
    let (key, expiry) = layout::split_timer_by_key(raw).map_err(to_py)?;
    Ok((PyBytes::new(py, key), expiry))
}

#[pyfunction]
pub fn state_ttl_name<'py>(py: Python<'py>, name: &str) -> PyResult<Bytes<'py>> {
    Ok(PyBytes::new(py, &layout::ttl_name(name).map_err(to_py)?))
}

/// `(expiry, variable name, grouping key, prefix, suffix)` of a TTL index entry (`suffix`
/// empty: every entry of the key; else, an entry of kstate 0.1, the one list or map entry
/// `<prefix><suffix>`).
#[pyfunction]
pub fn state_split_ttl_entry<'py>(
    py: Python<'py>,
    raw: &[u8],
) -> PyResult<(i64, String, Bytes<'py>, Bytes<'py>, Bytes<'py>)> {
    let entry = layout::split_ttl_entry(raw).map_err(to_py)?;
    Ok((
        entry.expiry,
        entry.name.to_owned(),
        PyBytes::new(py, entry.key),
        PyBytes::new(py, entry.prefix),
        PyBytes::new(py, entry.suffix),
    ))
}

#[pyfunction]
pub fn event_time_record<'py>(py: Python<'py>, batch_id: i64, time_ms: i64) -> Bytes<'py> {
    PyBytes::new(py, &layout::event_time_record(batch_id, time_ms))
}

/// `(batch id, largest event time)` of an event-time record.
#[pyfunction]
pub fn split_event_time_record(raw: &[u8]) -> PyResult<(i64, i64)> {
    layout::split_event_time_record(raw).map_err(to_py)
}

#[pyfunction]
pub fn event_time_history_key<'py>(py: Python<'py>, batch_id: i64) -> Bytes<'py> {
    PyBytes::new(py, &layout::event_time_history_key(batch_id))
}

/// `pickle.dumps(key, protocol=4)` of each of `keys` (`kstate_core::spark::pickled_key`), a key
/// the core does not write (not a tuple of `None`, `bool`, `int` within i64, `float`, `str` or
/// `bytes` of those very types, or too long) by `dumps(key)`.
#[pyfunction]
pub fn state_pickled_keys<'py>(
    keys: &Bound<'py, PyList>,
    dumps: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let py = keys.py();
    let mut pickled = Vec::with_capacity(keys.len());
    let mut out = Vec::with_capacity(64);
    for key in keys.iter() {
        out.clear();
        let written = match key.cast_exact::<PyTuple>() {
            Ok(tuple) => pickle_tuple(tuple, &mut out),
            Err(_) => false,
        };
        pickled.push(if written {
            PyBytes::new(py, &out).into_any()
        } else {
            dumps.call1((key,))?
        });
    }
    PyList::new(py, pickled)
}

/// Whether the core wrote `tuple`'s pickle to `out` (see `state_pickled_keys`). A key has a few
/// values: held inline, no allocation a key.
fn pickle_tuple(tuple: &Bound<'_, PyTuple>, out: &mut Vec<u8>) -> bool {
    let items: SmallVec<[Bound<'_, PyAny>; 8]> = tuple.iter().collect();
    let mut texts: SmallVec<[Option<Cow<'_, [u8]>>; 8]> = SmallVec::new();
    for item in &items {
        if let Ok(text) = item.cast_exact::<PyString>() {
            match utf8(text.as_borrowed()) {
                Ok(bytes) => texts.push(Some(bytes)),
                Err(_) => return false, // a lone surrogate: pickle writes it its own way
            }
        } else {
            texts.push(None);
        }
    }
    let mut parts: SmallVec<[Part<'_>; 8]> = SmallVec::new();
    for (item, text) in items.iter().zip(&texts) {
        let id = item.as_ptr() as usize;
        let part = if let Some(text) = text {
            Part::Str { utf8: text, id }
        } else if item.is_none() {
            Part::None
        } else if let Ok(flag) = item.cast_exact::<PyBool>() {
            Part::Bool(flag.is_true())
        } else if let Ok(int) = item.cast_exact::<PyInt>() {
            match int.extract::<i64>() {
                Ok(value) => Part::Int(value),
                Err(_) => return false,
            }
        } else if let Ok(float) = item.cast_exact::<PyFloat>() {
            Part::Float(float.value())
        } else if let Ok(bytes) = item.cast_exact::<PyBytes>() {
            Part::Bytes {
                bytes: bytes.as_bytes(),
                id,
            }
        } else {
            return false;
        };
        parts.push(part);
    }
    pickle_key(&parts, out)
}

/// Registers the functions and `STATE_LAYOUT_VERSION`, `STATE_NO_EXPIRY`, `LATEST_EVENT_TIME_KEY`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("STATE_LAYOUT_VERSION", layout::LAYOUT_VERSION)?;
    m.add("STATE_NO_EXPIRY", layout::NO_EXPIRY)?;
    m.add(
        "LATEST_EVENT_TIME_KEY",
        PyBytes::new(m.py(), layout::LATEST_EVENT_TIME_KEY),
    )?;
    for function in [
        wrap_pyfunction!(state_key_prefix, m)?,
        wrap_pyfunction!(state_pickled_keys, m)?,
        wrap_pyfunction!(state_split_prefixed, m)?,
        wrap_pyfunction!(state_expiry_of, m)?,
        wrap_pyfunction!(state_split_stored, m)?,
        wrap_pyfunction!(state_ordered_time, m)?,
        wrap_pyfunction!(state_time_of, m)?,
        wrap_pyfunction!(state_list_elements, m)?,
        wrap_pyfunction!(state_timer_keys, m)?,
        wrap_pyfunction!(state_split_timer_by_time, m)?,
        wrap_pyfunction!(state_split_timer_by_key, m)?,
        wrap_pyfunction!(state_ttl_name, m)?,
        wrap_pyfunction!(state_split_ttl_entry, m)?,
        wrap_pyfunction!(event_time_record, m)?,
        wrap_pyfunction!(split_event_time_record, m)?,
        wrap_pyfunction!(event_time_history_key, m)?,
    ] {
        m.add_function(function)?;
    }
    Ok(())
}

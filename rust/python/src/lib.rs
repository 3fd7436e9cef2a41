//! `kstate._core`: the thin PyO3 layer over `kstate-core`. One file per Python module it serves.

use pyo3::prelude::*;

mod errors;
mod key_value_store;
mod session_store;
mod value_and_timestamp;
mod window_store;
mod windowed;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<key_value_store::NativeKeyValueStore>()?;
    m.add_class::<key_value_store::NativeReadCommittedView>()?;
    m.add_class::<key_value_store::RangeIterator>()?;
    m.add_class::<window_store::NativeWindowStore>()?;
    m.add_class::<window_store::NativeWindowView>()?;
    m.add_class::<session_store::NativeSessionStore>()?;
    m.add_class::<session_store::NativeSessionView>()?;
    m.add_class::<windowed::WindowedIterator>()?;
    m.add_function(wrap_pyfunction!(
        value_and_timestamp::encode_value_and_timestamp,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        value_and_timestamp::decode_value_and_timestamp,
        m
    )?)?;
    Ok(())
}

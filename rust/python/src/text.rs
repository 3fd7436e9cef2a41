//! A Python string's UTF-8 bytes, borrowed from the string where the interpreter has them.
//!
//! PyO3 built for the stable ABI of Python 3.9 encodes every string into a new bytes object
//! (`PyUnicode_AsUTF8String`: ~300 instructions for a 14-byte key, a third of a replica's read
//! of a cached key) because `PyUnicode_AsUTF8AndSize` joined the stable ABI only in 3.10. Every
//! CPython 3 exports it with the same signature, so it is called directly: an ASCII string's
//! bytes are its own data, another string's are encoded once and kept by the string. Not on
//! Windows, where an extension links only what `python3.dll` exports (3.9's lacks it).

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::PyString;

#[cfg(not(windows))]
extern "C" {
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::os::raw::c_char;
}

/// `text`'s UTF-8 bytes (an error for a string holding lone surrogates, as `str.encode`).
#[cfg(not(windows))]
pub(crate) fn utf8<'a>(text: Borrowed<'a, '_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `text` is a live str; the bytes returned stay valid and unchanged while it lives
    // (CPython keeps them in the string object), which `'a` ties them to.
    unsafe {
        let data = PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size);
        if data.is_null() {
            return Err(PyErr::fetch(text.py()));
        }
        Ok(Cow::Borrowed(std::slice::from_raw_parts(
            data.cast::<u8>(),
            size as usize,
        )))
    }
}

#[cfg(windows)]
pub(crate) fn utf8<'a>(text: Borrowed<'a, '_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    Ok(Cow::Owned(text.to_cow()?.into_owned().into_bytes()))
}

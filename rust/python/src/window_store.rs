//! Binds `kstate_core::segmented::window_store` for `kstate.window_store`: convert, call the core, map
//! errors. No store logic lives here.

use kstate_core::format::key_schema::window;
use kstate_core::segmented::segmented_store::{SegmentReader, SegmentedKeys};
use kstate_core::segmented::window_store::{WindowQueries, WindowWrite};
use kstate_core::{SegmentedView, WindowStore};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::guard;
use crate::key_value_store::{
    as_bytes, bytes_list, direction, each_item, optional_bytes_list, optional_value,
};
use crate::logged::{logged_store_methods, Logged};
use crate::windowed::{
    millis, open_segmented, segmented_store_methods, Decoder, SegmentedConfig, Source, WindowRows,
    WindowedIterator,
};

#[pyclass(module = "kstate._core", name = "WindowStore")]
pub struct NativeWindowStore {
    pub(crate) logged: Logged<WindowStore>,
}

logged_store_methods!(NativeWindowStore);
segmented_store_methods!(NativeWindowStore);

#[pymethods]
impl NativeWindowStore {
    /// Opens a window store under `dir` (`None`: in memory); returns it and what opening found.
    #[staticmethod]
    #[pyo3(signature = (name, dir, config, window_size, retain_duplicates, progress=None))]
    fn open<'py>(
        py: Python<'py>,
        name: &str,
        dir: Option<&str>,
        config: SegmentedConfig,
        window_size: i64,
        retain_duplicates: bool,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<(Self, Bound<'py, PyDict>)> {
        // `fetch(key, time)` reads a point, where filters skip the tables without it; with
        // duplicates (Kafka's stream-stream joins) it reads a range, as every other read does.
        let bloom_filters = !retain_duplicates;
        let (segments, found) = open_segmented(py, name, dir, config, bloom_filters, progress)?;
        let store = guard(|| WindowStore::new(segments, window_size, retain_duplicates))?;
        Ok((
            Self {
                logged: Logged::unlogged(store),
            },
            found,
        ))
    }

    /// Returns `False` when the window had expired and the put was dropped.
    fn put(
        &mut self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        window_start: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let key = as_bytes(key, "key")?;
        let value = optional_value(value)?;
        let window_start = millis(window_start, "window_start")?;
        guard(|| self.logged.inner.store.put(key, value, window_start))
    }

    /// `put` of `keys[i], values[i], window_starts[i]` in one call (a `None` value deletes);
    /// returns how many were dropped as expired. Nothing is written if an argument is bad.
    fn put_all(
        &mut self,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        window_starts: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let keys = bytes_list(keys)?;
        let values = optional_bytes_list(values)?;
        let starts = each_item(window_starts, |start| millis(&start, "window_start"))?;
        if keys.len() != values.len() || keys.len() != starts.len() {
            return Err(crate::errors::to_py(kstate_core::Error::InvalidArgument(
                format!(
                    "put_all got {} keys, {} values and {} window starts",
                    keys.len(),
                    values.len(),
                    starts.len()
                ),
            )));
        }
        let writes: Vec<WindowWrite<'_>> = keys
            .iter()
            .zip(&values)
            .zip(starts)
            .map(|((k, v), start)| (k.as_bytes(), v.as_ref().map(|b| b.as_bytes()), start))
            .collect();
        guard(|| self.logged.inner.store.put_all(&writes))
    }

    fn fetch<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        time: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        guard(|| {
            self.logged
                .inner
                .store
                .fetch_with(key, time, |v| v.map(|b| PyBytes::new(py, b)))
        })
    }

    /// Windows of one key starting in `[time_from, time_to]`.
    /// `finished`: rows are `KeyValue(start, value)` (bytes serdes), else tuples to decode.
    #[pyo3(signature = (key, time_from, time_to, reverse=false, finished=false))]
    fn fetch_key(
        slf: Py<Self>,
        py: Python<'_>,
        key: &[u8],
        time_from: &Bound<'_, PyAny>,
        time_to: &Bound<'_, PyAny>,
        reverse: bool,
        finished: bool,
    ) -> PyResult<WindowedIterator> {
        let (time_from, time_to) = (millis(time_from, "time_from")?, millis(time_to, "time_to")?);
        let (query, decoder) = {
            let store = slf.bind(py).borrow();
            let q = *store.logged.inner.store.queries();
            let t = store.logged.inner.store.segments().stream_time();
            (
                q.key(t, key, time_from, time_to, direction(reverse)),
                Decoder::Window(q),
            )
        };
        Ok(WindowedIterator::new(
            Source::Window(slf),
            query,
            decoder,
            WindowRows::finished_if(finished, WindowRows::ByStart),
        ))
    }

    /// Windows of keys in `[key_from, key_to]` (`None` unbounded) starting in the time range;
    /// `finished`: rows are `KeyValue(Windowed(key, start, end), value)` (bytes serdes).
    #[pyo3(signature = (key_from, key_to, time_from, time_to, reverse=false, finished=false))]
    #[allow(clippy::too_many_arguments)]
    fn fetch_range(
        slf: Py<Self>,
        py: Python<'_>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
        reverse: bool,
        finished: bool,
    ) -> WindowedIterator {
        let (query, decoder) = {
            let store = slf.bind(py).borrow();
            let q = *store.logged.inner.store.queries();
            let t = store.logged.inner.store.segments().stream_time();
            (
                q.range(t, key_from, key_to, time_from, time_to, direction(reverse)),
                Decoder::Window(q),
            )
        };
        WindowedIterator::new(
            Source::Window(slf),
            query,
            decoder,
            WindowRows::finished_if(finished, WindowRows::ByWindow),
        )
    }

    fn read_committed_view(&self) -> NativeWindowView {
        NativeWindowView {
            view: self.segments().read_committed_view(),
            queries: *self.logged.inner.store.queries(),
            retain_duplicates: self.logged.inner.store.retain_duplicates(),
        }
    }
}

/// Committed-only reads of a window store, usable from any thread.
#[pyclass(module = "kstate._core", name = "ReadCommittedWindowView")]
pub struct NativeWindowView {
    view: SegmentedView,
    queries: WindowQueries,
    retain_duplicates: bool,
}

#[pymethods]
impl NativeWindowView {
    #[getter]
    fn is_open(&self) -> bool {
        self.view.is_open()
    }

    fn fetch<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        time: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        let value = guard(|| {
            if self.retain_duplicates {
                self.queries.first_at(&self.view, key, time)
            } else {
                self.view.get(&window::to_store_key(key, time, 0), time)
            }
        })?;
        Ok(value.map(|v| PyBytes::new(py, &v)))
    }

    #[pyo3(signature = (key, time_from, time_to, reverse=false, finished=false))]
    fn fetch_key(
        &self,
        key: &[u8],
        time_from: &Bound<'_, PyAny>,
        time_to: &Bound<'_, PyAny>,
        reverse: bool,
        finished: bool,
    ) -> PyResult<WindowedIterator> {
        let (time_from, time_to) = (millis(time_from, "time_from")?, millis(time_to, "time_to")?);
        let t = self.view.stream_time();
        let query = self
            .queries
            .key(t, key, time_from, time_to, direction(reverse));
        Ok(WindowedIterator::new(
            Source::View(self.view.clone()),
            query,
            Decoder::Window(self.queries),
            WindowRows::finished_if(finished, WindowRows::ByStart),
        ))
    }

    #[pyo3(signature = (key_from, key_to, time_from, time_to, reverse=false, finished=false))]
    fn fetch_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
        reverse: bool,
        finished: bool,
    ) -> WindowedIterator {
        let t = self.view.stream_time();
        let query = self
            .queries
            .range(t, key_from, key_to, time_from, time_to, direction(reverse));
        WindowedIterator::new(
            Source::View(self.view.clone()),
            query,
            Decoder::Window(self.queries),
            WindowRows::finished_if(finished, WindowRows::ByWindow),
        )
    }
}

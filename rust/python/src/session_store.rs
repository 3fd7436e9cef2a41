//! Binds `kstate_core::segmented::session_store` for `kstate.session_store`: convert, call the core, map
//! errors. No store logic lives here.

use kstate_core::format::key_schema::session;
use kstate_core::segmented::segmented_store::{SegmentReader, SegmentedKeys};
use kstate_core::segmented::session_store::{SessionQueries, SessionWrite};
use kstate_core::{SegmentedView, SessionStore};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::errors::{guard, raise, ErrorClass};
use crate::key_value_store::{
    as_bytes, bytes_list, direction, into_bytes, optional_bytes_list, optional_value,
};
use crate::logged::{logged_store_methods, Logged};
use crate::windowed::{
    millis, open_segmented, segmented_store_methods, Decoder, SegmentedConfig, Source, WindowRows,
    WindowedIterator,
};

#[pyclass(module = "kstate._core", name = "SessionStore")]
pub struct NativeSessionStore {
    pub(crate) logged: Logged<SessionStore>,
}

logged_store_methods!(NativeSessionStore);
segmented_store_methods!(NativeSessionStore);

#[pymethods]
impl NativeSessionStore {
    /// Opens a session store under `dir` (`None`: in memory); returns it and what opening found.
    #[staticmethod]
    #[pyo3(signature = (name, dir, config, progress=None))]
    fn open<'py>(
        py: Python<'py>,
        name: &str,
        dir: Option<&str>,
        config: SegmentedConfig,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<(Self, Bound<'py, PyDict>)> {
        // Session reads are all ranges, which Bloom filters do not serve.
        let (segments, found) = open_segmented(py, name, dir, config, false, progress)?;
        Ok((
            Self {
                logged: Logged::unlogged(SessionStore::new(segments)),
            },
            found,
        ))
    }

    /// Writes a session's aggregate (`None` removes it); `False` when dropped as expired.
    fn put(
        &mut self,
        key: &Bound<'_, PyAny>,
        start: i64,
        end: i64,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let key = as_bytes(key, "key")?;
        let value = optional_value(value)?;
        guard(|| self.logged.inner.store.put(key, start, end, value))
    }

    /// `put` of `keys[i], starts[i], ends[i], values[i]` in one call; returns how many were
    /// dropped as expired. Nothing is written if an argument is bad.
    fn put_all(
        &mut self,
        keys: &Bound<'_, PyAny>,
        starts: &Bound<'_, PyAny>,
        ends: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let keys = bytes_list(keys)?;
        let values = optional_bytes_list(values)?;
        let times = |times: &Bound<'_, PyAny>, what: &str| -> PyResult<Vec<i64>> {
            times.try_iter()?.map(|t| millis(&t?, what)).collect()
        };
        let (starts, ends) = (times(starts, "session start")?, times(ends, "session end")?);
        if [values.len(), starts.len(), ends.len()] != [keys.len(); 3] {
            return Err(crate::errors::to_py(kstate_core::Error::InvalidArgument(
                format!(
                    "put_all got {} keys, {} starts, {} ends and {} values",
                    keys.len(),
                    starts.len(),
                    ends.len(),
                    values.len()
                ),
            )));
        }
        let writes: Vec<SessionWrite<'_>> = keys
            .iter()
            .zip(starts)
            .zip(ends)
            .zip(&values)
            .map(|(((k, start), end), v)| {
                (k.as_bytes(), start, end, v.as_ref().map(|b| b.as_bytes()))
            })
            .collect();
        guard(|| self.logged.inner.store.put_all(&writes))
    }

    /// `put_all` of `(key, start, end)` tuples (`Windowed`) and their values, as many of each:
    /// the checks of `put_all` without splitting the sessions into columns in Python first.
    fn put_all_sessions(
        &mut self,
        sessions: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let values = optional_bytes_list(values)?;
        let mut keys = Vec::with_capacity(values.len());
        let mut times = Vec::with_capacity(values.len());
        for session in sessions.try_iter()? {
            let session = session?;
            let Some(parts) = session.cast::<PyTuple>().ok().filter(|t| t.len() == 3) else {
                return Err(raise(
                    ErrorClass::InvalidArgumentError,
                    format!(
                        "a session key is Windowed(key, start, end), got {}",
                        session.repr()?
                    ),
                ));
            };
            keys.push(into_bytes(parts.get_item(0)?, "key")?);
            times.push((
                millis(&parts.get_item(1)?, "session start")?,
                millis(&parts.get_item(2)?, "session end")?,
            ));
        }
        if keys.len() != values.len() {
            return Err(raise(
                ErrorClass::InvalidArgumentError,
                format!(
                    "put_all got {} sessions and {} aggregates",
                    keys.len(),
                    values.len()
                ),
            ));
        }
        let writes: Vec<SessionWrite<'_>> = keys
            .iter()
            .zip(times)
            .zip(&values)
            .map(|((k, (start, end)), v)| {
                (k.as_bytes(), start, end, v.as_ref().map(|b| b.as_bytes()))
            })
            .collect();
        guard(|| self.logged.inner.store.put_all(&writes))
    }

    fn remove(&mut self, key: &Bound<'_, PyAny>, start: i64, end: i64) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        guard(|| self.logged.inner.store.remove(key, start, end))
    }

    fn fetch_session<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        start: i64,
        end: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        let value = guard(|| self.logged.inner.store.fetch_session(key, start, end))?;
        Ok(value.map(|v| PyBytes::new(py, &v)))
    }

    /// Sessions of keys in `[key_from, key_to]` (`None` unbounded; equal keys: one key) that
    /// end at or after `earliest_end` and start at or before `latest_start`; `finished`: rows
    /// are `KeyValue(Windowed(key, start, end), value)` (bytes serdes).
    #[pyo3(signature = (key_from, key_to, earliest_end, latest_start, reverse=false, finished=false))]
    #[allow(clippy::too_many_arguments)]
    fn find_sessions(
        slf: Py<Self>,
        py: Python<'_>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: &Bound<'_, PyAny>,
        latest_start: &Bound<'_, PyAny>,
        reverse: bool,
        finished: bool,
    ) -> PyResult<WindowedIterator> {
        let earliest_end = millis(earliest_end, "earliest_session_end_time")?;
        let latest_start = millis(latest_start, "latest_session_start_time")?;
        let (query, decoder) = {
            let store = slf.bind(py).borrow();
            let q = *store.logged.inner.store.queries();
            let t = store.logged.inner.store.segments().stream_time();
            (
                q.find(
                    t,
                    key_from,
                    key_to,
                    earliest_end,
                    latest_start,
                    direction(reverse),
                ),
                Decoder::Session(q),
            )
        };
        Ok(WindowedIterator::new(
            Source::Session(slf),
            query,
            decoder,
            WindowRows::finished_if(finished, WindowRows::ByWindow),
        ))
    }

    fn read_committed_view(&self) -> NativeSessionView {
        NativeSessionView {
            view: self.segments().read_committed_view(),
            queries: *self.logged.inner.store.queries(),
        }
    }
}

/// Committed-only reads of a session store, usable from any thread.
#[pyclass(module = "kstate._core", name = "ReadCommittedSessionView")]
pub struct NativeSessionView {
    view: SegmentedView,
    queries: SessionQueries,
}

#[pymethods]
impl NativeSessionView {
    #[getter]
    fn is_open(&self) -> bool {
        self.view.is_open()
    }

    fn fetch_session<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        start: i64,
        end: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        let value = guard(|| self.view.get(&session::to_store_key(key, start, end), end))?;
        Ok(value.map(|v| PyBytes::new(py, &v)))
    }

    #[pyo3(signature = (key_from, key_to, earliest_end, latest_start, reverse=false, finished=false))]
    fn find_sessions(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: &Bound<'_, PyAny>,
        latest_start: &Bound<'_, PyAny>,
        reverse: bool,
        finished: bool,
    ) -> PyResult<WindowedIterator> {
        let earliest_end = millis(earliest_end, "earliest_session_end_time")?;
        let latest_start = millis(latest_start, "latest_session_start_time")?;
        let query = self.queries.find(
            self.view.stream_time(),
            key_from,
            key_to,
            earliest_end,
            latest_start,
            direction(reverse),
        );
        Ok(WindowedIterator::new(
            Source::View(self.view.clone()),
            query,
            Decoder::Session(self.queries),
            WindowRows::finished_if(finished, WindowRows::ByWindow),
        ))
    }
}

//! Binds `kstate_core::session_store` for `kstate.session_store`: convert, call the core, map
//! errors. No store logic lives here.

use kstate_core::key_schema::session;
use kstate_core::segmented::SegmentReader;
use kstate_core::session_store::SessionQueries;
use kstate_core::{SegmentedView, SessionStore};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::guard;
use crate::key_value_store::{as_bytes, direction, optional_value};
use crate::progress::Progress;
use crate::windowed::{open_segmented, Decoder, SegmentedConfig, Source, WindowedIterator};

#[pyclass(module = "kstate._core", name = "SessionStore")]
pub struct NativeSessionStore {
    pub(crate) inner: SessionStore,
}

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
        let (segments, found) = open_segmented(py, name, dir, config, progress)?;
        Ok((
            Self {
                inner: SessionStore::new(segments),
            },
            found,
        ))
    }

    #[getter]
    fn is_open(&self) -> bool {
        self.inner.segments().is_open()
    }

    #[getter]
    fn transactional(&self) -> bool {
        self.inner.segments().transactional()
    }

    #[getter]
    fn persistent(&self) -> bool {
        self.inner.segments().persistent()
    }

    #[getter]
    fn stream_time(&self) -> i64 {
        self.inner.segments().stream_time()
    }

    #[getter]
    fn dropped_records(&self) -> u64 {
        self.inner.segments().dropped_records()
    }

    fn segment_ids(&self) -> Vec<i64> {
        self.inner.segments().segment_ids()
    }

    fn uncommitted(&self) -> (usize, bool) {
        self.inner.segments().uncommitted()
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
        guard(|| self.inner.put(key, start, end, value))
    }

    fn remove(&mut self, key: &Bound<'_, PyAny>, start: i64, end: i64) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        guard(|| self.inner.remove(key, start, end))
    }

    fn fetch_session<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        start: i64,
        end: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = as_bytes(key, "key")?;
        let value = guard(|| self.inner.fetch_session(key, start, end))?;
        Ok(value.map(|v| PyBytes::new(py, &v)))
    }

    /// Sessions of keys in `[key_from, key_to]` (`None` unbounded; equal keys: one key) that
    /// end at or after `earliest_end` and start at or before `latest_start`.
    #[pyo3(signature = (key_from, key_to, earliest_end, latest_start, reverse=false))]
    fn find_sessions(
        slf: Py<Self>,
        py: Python<'_>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: i64,
        latest_start: i64,
        reverse: bool,
    ) -> WindowedIterator {
        let (query, decoder) = {
            let store = slf.bind(py).borrow();
            let q = *store.inner.queries();
            let t = store.inner.segments().stream_time();
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
        WindowedIterator::new(Source::Session(slf), query, decoder)
    }

    fn approximate_num_entries(&self) -> PyResult<u64> {
        guard(|| self.inner.segments().approximate_num_entries())
    }

    fn committed_offset(&self) -> PyResult<Option<i64>> {
        guard(|| self.inner.segments().committed_offset())
    }

    #[pyo3(signature = (offset, progress=None))]
    fn commit(
        &mut self,
        py: Python<'_>,
        offset: Option<i64>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let mut reporter = Progress::new(progress);
        let segments = self.inner.segments_mut();
        py.detach(|| guard(|| segments.commit(offset, &mut |p| reporter.report(p))))?;
        reporter.finish()
    }

    fn recover(&mut self, py: Python<'_>, offset: Option<i64>) -> PyResult<bool> {
        let segments = self.inner.segments_mut();
        py.detach(|| guard(|| segments.recover(offset)))
    }

    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        let segments = self.inner.segments_mut();
        py.detach(|| guard(|| segments.close()))
    }

    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        let segments = self.inner.segments();
        py.detach(|| guard(|| segments.compact()))
    }

    fn read_committed_view(&self) -> NativeSessionView {
        NativeSessionView {
            view: self.inner.segments().read_committed_view(),
            queries: *self.inner.queries(),
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

    #[pyo3(signature = (key_from, key_to, earliest_end, latest_start, reverse=false))]
    fn find_sessions(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_end: i64,
        latest_start: i64,
        reverse: bool,
    ) -> WindowedIterator {
        let query = self.queries.find(
            self.view.stream_time(),
            key_from,
            key_to,
            earliest_end,
            latest_start,
            direction(reverse),
        );
        WindowedIterator::new(
            Source::View(self.view.clone()),
            query,
            Decoder::Session(self.queries),
        )
    }
}

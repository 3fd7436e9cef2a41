//! The changelog half of every store binding (key-value, window, session): attaching a
//! changelog, restoring, publishing and committing through it, recovering. A store class whose
//! `logged` field is a [`Logged`] gets these methods from `logged_store_methods!`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use kstate_core::format::checkpoint::OffsetCheckpoint;
use kstate_core::log::{CompactionReport, LogConfig};
use kstate_core::logged::changelog::{Changelog, CleaningReport, Publisher};
use kstate_core::logged::logged_store::{ChangelogTarget, LoggedStore, StoreChangelog};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{detached, guard, raise, ErrorClass};

/// A store with its changelog, and what the Python publish callable of a remote changelog
/// raised (raised again by the commit it failed).
pub struct Logged<S> {
    pub inner: LoggedStore<S>,
    publish_failure: Arc<Mutex<Option<PyErr>>>,
}

impl<S: ChangelogTarget> Logged<S> {
    /// A store without a changelog yet (`attach_changelog` gives it one).
    pub fn unlogged(store: S) -> Self {
        Self {
            inner: LoggedStore::unlogged(store),
            publish_failure: Arc::default(),
        }
    }

    pub fn store(&self) -> &S {
        &self.inner.store
    }

    pub fn committed_offset(&self) -> PyResult<Option<i64>> {
        guard(|| self.inner.store.committed_offset())
    }

    pub fn changelog(&mut self) -> PyResult<&mut Changelog> {
        self.inner.changelog_mut().ok_or_else(|| {
            raise(
                ErrorClass::InvalidStateStoreError,
                "the store has no changelog".into(),
            )
        })
    }

    /// The exception the publish callable raised (typed by Python) in place of `error`.
    pub fn publish_failure_or(&self, error: PyErr) -> PyErr {
        let failure = self.publish_failure.lock().ok().and_then(|mut f| f.take());
        failure.unwrap_or(error)
    }

    /// Opens the changelog at `partition_dir` and attaches it; returns what opening found.
    #[allow(clippy::too_many_arguments)]
    pub fn attach_changelog<'py>(
        &mut self,
        py: Python<'py>,
        partition_dir: &str,
        config: HashMap<String, String>,
        topic: String,
        partition: i32,
        timestamped: bool,
        checkpoint_path: Option<&str>,
        publish: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>>
    where
        S: Send,
    {
        let log_config = log_config(&config)?;
        let Self {
            inner,
            publish_failure,
        } = self;
        let report = detached(py, || {
            let (mut changelog, report) = Changelog::open(Path::new(partition_dir), log_config)?;
            if let Some(callable) = publish {
                changelog.set_publisher(Box::new(PythonPublisher {
                    callable,
                    failure: Arc::clone(publish_failure),
                }));
            }
            inner.attach(StoreChangelog {
                changelog,
                checkpoint: checkpoint_path.map(OffsetCheckpoint::new),
                topic,
                partition,
                timestamped,
            })?;
            Ok(report)
        })?;
        let found = PyDict::new(py);
        found.set_item(
            "unpublished_records_dropped",
            report.unpublished_records_dropped,
        )?;
        let tail = report
            .log
            .truncated_tail
            .map(|t| (t.bytes_removed, t.problem));
        found.set_item("truncated_tail", tail)?;
        found.set_item("rebuilt_indexes", report.log.rebuilt_indexes.len())?;
        Ok(found)
    }
}

/// A remote changelog's publication point: a Python callable `publish(first, last, path)`.
struct PythonPublisher {
    callable: Py<PyAny>,
    failure: Arc<Mutex<Option<PyErr>>>,
}

impl Publisher for PythonPublisher {
    fn publish(&mut self, first: i64, last: i64, segment: &Path) -> kstate_core::Result<()> {
        let path = segment.to_string_lossy().into_owned();
        crate::errors::attached(|py| self.callable.call1(py, (first, last, path)).map(drop))
            .map_err(|error| {
                let message = format!("publishing offsets {first}..={last} failed: {error}");
                if let Ok(mut failure) = self.failure.lock() {
                    *failure = Some(error);
                }
                kstate_core::Error::Storage(message)
            })
    }
}

/// A cleaning report as a dict for Python's log line; `None` when nothing was deleted or
/// compacted.
pub(crate) fn cleaning_report(
    py: Python<'_>,
    report: Option<CleaningReport>,
) -> PyResult<Option<Bound<'_, PyDict>>> {
    let Some(report) = report else {
        return Ok(None);
    };
    let deleted = report.retention.deleted_by_time
        + report.retention.deleted_by_size
        + report.retention.deleted_below_offset;
    if deleted == 0 && report.compaction.is_none() {
        return Ok(None);
    }
    let out = PyDict::new(py);
    out.set_item("segments_deleted", deleted)?;
    out.set_item("bytes_deleted", report.retention.bytes_deleted)?;
    if let Some(c) = report.compaction {
        out.set_item("bytes_before", c.bytes_before)?;
        out.set_item("bytes_after", c.bytes_after)?;
        out.set_item(
            "records_removed",
            c.superseded_removed + c.tombstones_removed,
        )?;
        out.set_item("distinct_keys", c.distinct_keys)?;
    }
    Ok(Some(out))
}

/// A compaction finished when the changelog closed, as a cleaning report.
pub(crate) fn compaction_report(
    py: Python<'_>,
    compaction: Option<CompactionReport>,
) -> PyResult<Option<Bound<'_, PyDict>>> {
    let report = compaction.map(|compaction| CleaningReport {
        retention: Default::default(),
        compaction: Some(compaction),
    });
    cleaning_report(py, report)
}

/// Kafka topic configs given as strings, validated.
pub(crate) fn log_config(config: &HashMap<String, String>) -> PyResult<LogConfig> {
    let mut log_config = LogConfig::default();
    guard(|| {
        config
            .iter()
            .try_for_each(|(name, value)| log_config.set(name, value))?;
        log_config.validate()
    })?;
    Ok(log_config)
}

/// Adds the changelog methods to a store class with a `logged: Logged<_>` field.
macro_rules! logged_store_methods {
    ($class:ty) => {
        #[pyo3::pymethods]
        impl $class {
            /// Gives the store its changelog (the partition directory, Kafka topic configs as
            /// strings); returns what opening the changelog found. `publish(first, last,
            /// segment_path)`, if given, is the publication point of a remote changelog (see
            /// `Publisher`). `restore` then replays what the store lacks.
            #[pyo3(signature = (partition_dir, config, topic, partition, timestamped, checkpoint_path=None, publish=None))]
            #[allow(clippy::too_many_arguments)]
            fn attach_changelog<'py>(
                &mut self,
                py: pyo3::Python<'py>,
                partition_dir: &str,
                config: std::collections::HashMap<String, String>,
                topic: String,
                partition: i32,
                timestamped: bool,
                checkpoint_path: Option<&str>,
                publish: Option<pyo3::Py<pyo3::PyAny>>,
            ) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyDict>> {
                self.logged.attach_changelog(
                    py,
                    partition_dir,
                    config,
                    topic,
                    partition,
                    timestamped,
                    checkpoint_path,
                    publish,
                )
            }

            /// Closes the changelog, releasing its directory for another process, until
            /// `attach_changelog` gives it back.
            /// Closes the changelog, the store staying open; what a compaction finished then
            /// did (as `clean_changelog`'s), or `None`.
            fn detach_changelog<'py>(
                &mut self,
                py: pyo3::Python<'py>,
            ) -> pyo3::PyResult<Option<pyo3::Bound<'py, pyo3::types::PyDict>>> {
                let inner = &mut self.logged.inner;
                let compaction = crate::errors::detached(py, || inner.detach())?;
                crate::logged::compaction_report(py, compaction)
            }

            #[getter]
            fn logged(&self) -> bool {
                self.logged.inner.is_logged()
            }

            fn committed_offset(&self) -> pyo3::PyResult<Option<i64>> {
                self.logged.committed_offset()
            }

            /// Replays published changelog records the store lacks; returns how many.
            #[pyo3(signature = (progress=None))]
            fn restore(
                &mut self,
                py: pyo3::Python<'_>,
                progress: Option<pyo3::Py<pyo3::PyAny>>,
            ) -> pyo3::PyResult<u64> {
                let mut reporter = crate::progress::Progress::new(progress);
                let inner = &mut self.logged.inner;
                let restored = crate::errors::detached(py, || {
                        inner.restore(&mut |done, total| reporter.counts(done, total))
                    })?;
                reporter.finish()?;
                Ok(restored)
            }

            /// Withdraws the local changelog's records after `offset` (`None`: all); returns how
            /// many went.
            fn retract_changelog_to(
                &mut self,
                py: pyo3::Python<'_>,
                offset: Option<i64>,
            ) -> pyo3::PyResult<i64> {
                let changelog = self.logged.changelog()?;
                crate::errors::detached(py, || changelog.retract_to(offset))
            }

            /// Deletes the local changelog's history before `offset`, which snapshots hold
            /// (see `Changelog::delete_records_before`); returns `(segments deleted, bytes
            /// deleted, log start offset)`.
            fn delete_changelog_before(
                &mut self,
                py: pyo3::Python<'_>,
                offset: i64,
                now_ms: i64,
            ) -> pyo3::PyResult<(usize, u64, i64)> {
                let changelog = self.logged.changelog()?;
                let report = crate::errors::detached(py, || changelog.delete_records_before(offset, now_ms))?;
                Ok((
                    report.deleted_below_offset,
                    report.bytes_deleted,
                    report.log_start_offset,
                ))
            }

            /// Bytes of records the changelog took since it was attached.
            fn changelog_appended_bytes(&mut self) -> pyo3::PyResult<u64> {
                Ok(self.logged.changelog()?.appended_bytes())
            }

            /// `(log start offset, last published offset or None)` of the local changelog.
            fn changelog_range(&mut self) -> pyo3::PyResult<(i64, Option<i64>)> {
                let changelog = self.logged.changelog()?;
                Ok((changelog.log_start_offset(), changelog.published()))
            }

            /// Adds a segment file another writer published (offsets `first..=last`, `last`
            /// None: to its last record) to the local changelog; returns `(entries, bytes,
            /// last offset)`.
            fn add_published(
                &mut self,
                py: pyo3::Python<'_>,
                segment_path: &str,
                first: i64,
                last: Option<i64>,
                now_ms: i64,
            ) -> pyo3::PyResult<(u64, u64, i64)> {
                let changelog = self.logged.changelog()?;
                let path = std::path::Path::new(segment_path);
                let added = crate::errors::detached(py, || changelog.add_published(path, first, last, now_ms))?;
                Ok((added.entries, added.bytes, added.last_offset))
            }

            /// Commits; returns the changelog offset. `progress(done, total)` hears about long
            /// copies, `on_stage(name)` about each step of a logged commit.
            #[pyo3(signature = (offset, now_ms, progress=None, on_stage=None))]
            fn commit(
                &mut self,
                py: pyo3::Python<'_>,
                offset: Option<i64>,
                now_ms: i64,
                progress: Option<pyo3::Py<pyo3::PyAny>>,
                on_stage: Option<pyo3::Py<pyo3::PyAny>>,
            ) -> pyo3::PyResult<Option<i64>> {
                let mut reporter = crate::progress::Progress::new(progress);
                let mut stages = crate::progress::Progress::new(on_stage);
                let inner = &mut self.logged.inner;
                let committed = crate::errors::detached(py, || {
                    inner.commit(
                        offset,
                        now_ms,
                        &mut |p| reporter.report(p),
                        &mut |stage| stages.call((stage.name(),)),
                    )
                })
                .map_err(|error| self.logged.publish_failure_or(error))?;
                reporter.finish()?;
                stages.finish()?;
                Ok(committed)
            }

            /// Publishes the staged writes to the changelog, leaving them staged; returns the
            /// offset.
            fn publish(&mut self, py: pyo3::Python<'_>, now_ms: i64) -> pyo3::PyResult<Option<i64>> {
                let inner = &mut self.logged.inner;
                crate::errors::detached(py, || inner.publish(now_ms))
                    .map_err(|error| self.logged.publish_failure_or(error))
            }

            /// Applies the staged writes at the offset `publish` returned.
            #[pyo3(signature = (published, progress=None))]
            fn commit_published(
                &mut self,
                py: pyo3::Python<'_>,
                published: Option<i64>,
                progress: Option<pyo3::Py<pyo3::PyAny>>,
            ) -> pyo3::PyResult<()> {
                let mut reporter = crate::progress::Progress::new(progress);
                let inner = &mut self.logged.inner;
                crate::errors::detached(py, || {
                        inner.commit_published(published, &mut |p| reporter.report(p))
                    })?;
                reporter.finish()
            }

            /// Discards staged writes; a logged store then replays what its changelog has
            /// beyond it. Returns whether the store is current (see `LoggedStore::recover`).
            #[pyo3(signature = (offset, progress=None))]
            fn recover(
                &mut self,
                py: pyo3::Python<'_>,
                offset: Option<i64>,
                progress: Option<pyo3::Py<pyo3::PyAny>>,
            ) -> pyo3::PyResult<bool> {
                let mut reporter = crate::progress::Progress::new(progress);
                let inner = &mut self.logged.inner;
                let current = crate::errors::detached(py, || {
                        inner.recover(offset, &mut |done, total| reporter.counts(done, total))
                    })?;
                reporter.finish()?;
                Ok(current)
            }

            /// Runs the changelog's cleaner (retention, compaction when due); returns what it
            /// did as a dict, or `None` when nothing was removed.
            fn clean_changelog<'py>(
                &mut self,
                py: pyo3::Python<'py>,
                now_ms: i64,
            ) -> pyo3::PyResult<Option<pyo3::Bound<'py, pyo3::types::PyDict>>> {
                let inner = &mut self.logged.inner;
                let report = crate::errors::detached(py, || inner.clean_changelog(now_ms))?;
                crate::logged::cleaning_report(py, report)
            }

            /// Closes the store and its changelog; what a compaction finished then did (as
            /// `clean_changelog`'s), or `None`.
            fn close<'py>(
                &mut self,
                py: pyo3::Python<'py>,
            ) -> pyo3::PyResult<Option<pyo3::Bound<'py, pyo3::types::PyDict>>> {
                let inner = &mut self.logged.inner;
                let compaction = crate::errors::detached(py, || inner.close())?;
                crate::logged::compaction_report(py, compaction)
            }
        }
    };
}

pub(crate) use logged_store_methods;

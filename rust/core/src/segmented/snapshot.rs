//! Snapshots of a segmented store (window, session): every live segment's committed files at
//! one changelog offset, and what a store restored from them needs beside them.
//!
//! A commit through the commit intent writes several segments, so a capture holds off the
//! store's commits (`SegmentedStore`'s commit lock) while it reads the offset and stream time and
//! takes each live segment's RocksDB checkpoint at `<capture>/<store>.<segment start ms>`, the
//! name the segment has in the store's directory; the flushes that make those checkpoints quick
//! run before the lock is taken, as a key-value store's capture does. Each captured segment gets
//! the interval file the store gives the segments it creates, so the store restored from it
//! checks it as its own.
//!
//! The segments' files hold the committed offset (a commit through the intent records it in
//! every live segment, a commit of one segment in that one; reopening takes the largest), but not
//! always the stream time, which a commit through the intent records in the intent file alone.
//! So the snapshot's manifest names the stream time too (`crate::snapshot::manifest`), and a
//! restore writes it with the offset as the store's commit record ([`install`]), which the
//! store then opens at: retention counts from the same stream time as before.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::segmented::commit_intent;
use crate::segmented::segmented_store::{
    hold_writes, intent_path, segment_dirs, Committed, SegmentedOptions,
};
use crate::segmented::segments::{segment_id, segment_name, write_segment_interval};
use crate::store::key_value::CommittedFiles;

/// A segmented store's committed state as files, for a snapshot taken on another thread while
/// the store goes on committing (`SegmentedStore::committed_files`).
#[derive(Clone)]
pub struct SegmentedFiles {
    name: String,
    retention_ms: i64,
    segment_interval: i64,
    committed: Arc<RwLock<Committed>>,
    writes: Arc<Mutex<()>>,
}

/// What [`SegmentedFiles::capture`] captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentedCapture {
    /// The changelog offset every captured segment holds the commit of.
    pub offset: i64,
    /// The committed stream time at that offset.
    pub stream_time: i64,
    /// Live segments captured.
    pub segments: usize,
}

impl SegmentedFiles {
    pub(crate) fn new(
        name: &str,
        options: &SegmentedOptions,
        committed: Arc<RwLock<Committed>>,
        writes: Arc<Mutex<()>>,
    ) -> Self {
        // Only what a capture needs: holding the store's options would hold its memory budget
        // after the store closes.
        Self {
            name: name.to_string(),
            retention_ms: options.retention_ms,
            segment_interval: options.segment_interval,
            committed,
            writes,
        }
    }

    /// Captures every live segment's committed state under `dir` (which must not exist and must
    /// be on the store's file system): `dir/<store>.<segment start ms>/`, RocksDB's checkpoint
    /// of the segment and its interval file. Returns the offset and stream time the files hold;
    /// `None`, capturing nothing, while the store has no committed offset.
    pub fn capture(&self, dir: &Path) -> Result<Option<SegmentedCapture>> {
        // The slow part first, commits going on: what they wrote reaches table files. A segment
        // a commit expires meanwhile is closed: it needs no flush.
        for files in self.live()?.segments.values() {
            match files.flush() {
                Err(Error::Closed(_)) => {}
                other => other?,
            }
        }
        let writes = hold_writes(&self.writes)?;
        let live = self.live()?;
        let Some(offset) = live.offset else {
            return Ok(None);
        };
        std::fs::create_dir(dir)
            .map_err(|e| Error::Storage(format!("creating the capture {}: {e}", dir.display())))?;
        let segment_dir = |id| dir.join(segment_name(&self.name, id, self.segment_interval));
        for (&id, files) in &live.segments {
            files.checkpoint(&segment_dir(id))?;
        }
        drop(writes);
        for &id in live.segments.keys() {
            write_segment_interval(&segment_dir(id), self.segment_interval)?;
        }
        Ok(Some(SegmentedCapture {
            offset,
            stream_time: live.stream_time,
            segments: live.segments.len(),
        }))
    }

    /// The committed offset and stream time, and the files of the segments live at that
    /// stream time.
    fn live(&self) -> Result<Live> {
        let committed = self
            .committed
            .read()
            .map_err(|_| Error::InvalidState("segment views lock poisoned".into()))?;
        if !committed.open {
            return Err(Error::Closed(format!("store {} is closed", self.name)));
        }
        let stream_time = committed.stream_time;
        let min_live = segment_id(
            stream_time.saturating_sub(self.retention_ms),
            self.segment_interval,
        );
        Ok(Live {
            offset: committed.offset,
            stream_time,
            segments: committed
                .files
                .range(min_live..)
                .map(|(&id, files)| (id, files.clone()))
                .collect(),
        })
    }
}

/// The committed state as a capture reads it.
struct Live {
    offset: Option<i64>,
    stream_time: i64,
    segments: BTreeMap<i64, CommittedFiles>,
}

/// Checks that the directory `dir` holding a restored snapshot's segments can be the store
/// `name` of `retention_ms` and `segment_interval`, as opening it would (segment names of its
/// interval, the interval files): a snapshot of the store written with another retention is
/// refused before it replaces anything. Returns how many segments it holds.
pub fn check_restored(
    name: &str,
    dir: &Path,
    retention_ms: i64,
    segment_interval: i64,
) -> Result<usize> {
    Ok(segment_dirs(name, dir, retention_ms, segment_interval)?.len())
}

/// Makes the segments a snapshot restored at `dir` = `<task>/<store>` open at the snapshot's
/// commit: writes `offset` and `stream_time` as the store's commit record (the commit-intent
/// file without batches, beside `dir`).
pub fn install(name: &str, dir: &Path, offset: i64, stream_time: i64) -> Result<()> {
    commit_intent::write_record(&intent_path(name, dir)?, Some(offset), stream_time)
}

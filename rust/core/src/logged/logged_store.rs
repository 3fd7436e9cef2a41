//! A store and its changelog, committed in the order of the KIP-892 seed so that a crash at any
//! point reopens to exactly the last commit (spec 1.3, 1.9). The store is a key-value store or a
//! segmented (window, session) store, anything that is a [`ChangelogTarget`]:
//!
//! 1. the staged writes become changelog records (key; value without the timestamp prefix;
//!    record timestamp = the stored timestamp; null value = delete) and are published;
//! 2. the store applies them with the published offset in one RocksDB write;
//! 3. the task's `.checkpoint` records the offset (for tools: the `offsets` family is the truth).
//!
//! Opening and `recover` replay published records the store lacks, so a crash before 1
//! discards the transaction, one between 1 and 2 replays it, and one after 2 costs nothing.
//!
//! With a remote changelog, 1 ends by uploading the records (the publication point) before the
//! local marker; a crash in between is a crash between 1 and 2 once the caller has fetched the
//! upload back into the local log ([`crate::logged::changelog::Changelog::add_published`]).

use crate::error::{Error, Result};
use crate::format::checkpoint::{OffsetCheckpoint, Offsets};
use crate::log::{CompactionReport, NewRecord};
use crate::logged::changelog::{Changelog, CleaningReport};
use crate::segmented::segmented_store::SegmentedKeys;
use crate::store::committed::Write;
use crate::store::key_value::{CommitProgress, KeyValueStore};

/// How the message of [`Error::StoreBehindChangelog`] begins: the store must be wiped and
/// restored from scratch (Kafka Streams' `OffsetOutOfRange` -> wipe).
const STORE_BEHIND_CHANGELOG: &str = "store behind its changelog:";

/// Staged bytes turned into changelog records per append.
const CHANGELOG_CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// Where a commit got to, reported as it goes (and observable by tests that kill a writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStage {
    /// A remote changelog holds the commit; the local log does not count it yet.
    Uploaded,
    /// The changelog holds the commit durably; the store does not have it yet.
    Published,
    /// The store holds the commit and its offset.
    StoreCommitted,
    /// `.checkpoint` names the new offset.
    Checkpointed,
}

impl CommitStage {
    pub fn name(self) -> &'static str {
        match self {
            CommitStage::Uploaded => "uploaded",
            CommitStage::Published => "published",
            CommitStage::StoreCommitted => "store-committed",
            CommitStage::Checkpointed => "checkpointed",
        }
    }
}

/// The changelog of a store and where its offset is checkpointed.
pub struct StoreChangelog {
    pub changelog: Changelog,
    /// The task's `.checkpoint`; Kafka keeps one for persistent stores only.
    pub checkpoint: Option<OffsetCheckpoint>,
    /// The changelog's topic and partition, as `.checkpoint` names them.
    pub topic: String,
    pub partition: i32,
    /// Stored values carry an 8-byte timestamp prefix that the changelog keeps apart.
    pub timestamped: bool,
}

/// What a store does for its changelog: hand over its staged writes, apply restored records,
/// commit at an offset.
pub trait ChangelogTarget {
    fn committed_offset(&self) -> Result<Option<i64>>;
    /// Passes every staged write to `chunk`, in chunks of about `chunk_bytes`.
    fn for_each_staged(
        &mut self,
        chunk_bytes: usize,
        chunk: &mut dyn FnMut(&[Write<'_>]) -> Result<()>,
    ) -> Result<()>;
    /// The timestamp of the changelog record of a write under `key` whose value carries none
    /// (plain values, deletes); `None`: the time of the commit.
    fn record_timestamp(key: &[u8]) -> Result<Option<i64>>;
    /// Applies restored changelog records and their last `offset`; each call is atomic.
    fn restore(&mut self, writes: &mut dyn Iterator<Item = Write<'_>>, offset: i64) -> Result<()>;
    fn commit(
        &mut self,
        offset: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()>;
    fn recover(&mut self, offset: Option<i64>) -> Result<bool>;
    fn close(&mut self) -> Result<()>;
}

impl ChangelogTarget for KeyValueStore {
    fn committed_offset(&self) -> Result<Option<i64>> {
        KeyValueStore::committed_offset(self)
    }
    fn for_each_staged(
        &mut self,
        chunk_bytes: usize,
        chunk: &mut dyn FnMut(&[Write<'_>]) -> Result<()>,
    ) -> Result<()> {
        KeyValueStore::for_each_staged(self, chunk_bytes, chunk)
    }
    fn record_timestamp(_key: &[u8]) -> Result<Option<i64>> {
        Ok(None)
    }
    fn restore(&mut self, writes: &mut dyn Iterator<Item = Write<'_>>, offset: i64) -> Result<()> {
        KeyValueStore::restore(self, writes, offset)
    }
    fn commit(
        &mut self,
        offset: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        KeyValueStore::commit(self, offset, progress)
    }
    fn recover(&mut self, offset: Option<i64>) -> Result<bool> {
        KeyValueStore::recover(self, offset)
    }
    fn close(&mut self) -> Result<()> {
        KeyValueStore::close(self)
    }
}

/// Window and session stores. A plain value's record gets its segment's timestamp (window
/// start, session end): Kafka uses the timestamp of the record being processed, which kstate
/// does not have, and the segment timestamp keeps the changelog's time retention in step with
/// the store's.
impl<T: SegmentedKeys> ChangelogTarget for T {
    fn committed_offset(&self) -> Result<Option<i64>> {
        self.segments().committed_offset()
    }
    fn for_each_staged(
        &mut self,
        chunk_bytes: usize,
        chunk: &mut dyn FnMut(&[Write<'_>]) -> Result<()>,
    ) -> Result<()> {
        self.segments_mut().for_each_staged(chunk_bytes, chunk)
    }
    fn record_timestamp(key: &[u8]) -> Result<Option<i64>> {
        T::segment_time(key).map(Some)
    }
    fn restore(&mut self, writes: &mut dyn Iterator<Item = Write<'_>>, offset: i64) -> Result<()> {
        self.segments_mut()
            .restore(writes, offset, &T::segment_time)
    }
    fn commit(
        &mut self,
        offset: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        self.segments_mut().commit(offset, progress)
    }
    fn recover(&mut self, offset: Option<i64>) -> Result<bool> {
        self.segments_mut().recover(offset)
    }
    fn close(&mut self) -> Result<()> {
        self.segments_mut().close()
    }
}

pub struct LoggedStore<S = KeyValueStore> {
    pub store: S,
    changelog: Option<StoreChangelog>,
}

/// The changelog record of one staged write.
fn record_of<'a, S: ChangelogTarget>(
    key: &'a [u8],
    value: Option<&'a [u8]>,
    timestamped: bool,
    now_ms: i64,
) -> Result<NewRecord<'a>> {
    let (timestamp, value) = match value {
        Some(v) if timestamped => {
            let (ts, raw) = crate::format::timestamped::decode(v)?;
            (ts, Some(raw))
        }
        other => (S::record_timestamp(key)?.unwrap_or(now_ms), other),
    };
    Ok(NewRecord {
        timestamp,
        key: Some(key),
        value,
    })
}

impl<S: ChangelogTarget> LoggedStore<S> {
    /// A store without changelog: the caller supplies commit offsets.
    pub fn unlogged(store: S) -> Self {
        Self {
            store,
            changelog: None,
        }
    }

    /// A store with its changelog, restored up to the changelog's last published commit;
    /// returns the store and the number of records restored.
    pub fn logged(
        store: S,
        changelog: StoreChangelog,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(Self, u64)> {
        let mut logged = Self::unlogged(store);
        logged.attach(changelog)?;
        let restored = logged.restore(progress)?;
        Ok((logged, restored))
    }

    /// Gives an unlogged store its changelog; [`Self::restore`] then replays what the store
    /// lacks (a remote changelog's caller first fetches what other writers published).
    pub fn attach(&mut self, changelog: StoreChangelog) -> Result<()> {
        if self.changelog.is_some() {
            return Err(Error::InvalidState(
                "the store has a changelog already".into(),
            ));
        }
        self.changelog = Some(changelog);
        Ok(())
    }

    /// Closes the store's changelog (releasing its directory) and leaves the store unlogged
    /// until [`Self::attach`] gives it one again; staged writes stay staged. Returns what a
    /// compaction finished at the close did.
    pub fn detach(&mut self) -> Result<Option<CompactionReport>> {
        match self.changelog.take() {
            Some(log) => log.changelog.close(),
            None => Ok(None),
        }
    }

    pub fn is_logged(&self) -> bool {
        self.changelog.is_some()
    }

    /// The store's changelog, if it has one.
    pub fn changelog_mut(&mut self) -> Option<&mut Changelog> {
        self.changelog.as_mut().map(|log| &mut log.changelog)
    }

    /// Replays published changelog records after the store's offset into the store, reporting
    /// `(records restored, records to restore)`. Returns the number restored.
    pub fn restore(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        let Self {
            store,
            changelog: Some(log),
        } = self
        else {
            return Ok(0);
        };
        let committed = store.committed_offset()?;
        let Some(published) = log.changelog.published() else {
            return match committed {
                Some(c) => Err(Error::InvalidState(format!(
                    "store is at changelog offset {c} but its changelog {} is empty; \
                     delete the store directory to start over",
                    log.changelog.dir().display()
                ))),
                None => Ok(0),
            };
        };
        let start = log.changelog.log_start_offset();
        let from = match committed {
            Some(c) if c > published => {
                return Err(Error::InvalidState(format!(
                    "store is at changelog offset {c}, past its changelog's last commit {published}"
                )))
            }
            Some(c) if c + 1 < start => {
                return Err(Error::StoreBehindChangelog(format!(
                    "{STORE_BEHIND_CHANGELOG} the store is at changelog offset {c} but the \
                     changelog starts at {start}; its local state must be restored from scratch"
                )))
            }
            Some(c) => c + 1,
            None if log.changelog.deleted_records_before() > 0 => {
                return Err(Error::ChangelogTruncated(format!(
                    "changelog {} starts at offset {start}: its history before offset {} was \
                     deleted because snapshots hold it, and the store has no state of its own; \
                     it must start from a snapshot (none could be loaded)",
                    log.changelog.dir().display(),
                    log.changelog.deleted_records_before()
                )))
            }
            None => start,
        };
        let total = u64::try_from(published + 1 - from).unwrap_or(0);
        let mut restored = 0u64;
        let timestamped = log.timestamped;
        let mut buffer = Vec::new();
        log.changelog
            .replay(from, published, &mut |view, rows, last| {
                buffer.clear();
                let mut spans = Vec::with_capacity(rows.len());
                for i in rows.clone() {
                    let key = view.keys.get(i).ok_or_else(|| {
                        Error::Corrupted(format!(
                            "changelog record at offset {} has no key",
                            view.offsets[i]
                        ))
                    })?;
                    let value = view.values.get(i).map(|v| {
                        let begin = buffer.len();
                        if timestamped {
                            buffer.extend_from_slice(&view.timestamps[i].to_be_bytes());
                        }
                        buffer.extend_from_slice(v);
                        begin..buffer.len()
                    });
                    spans.push((key, value));
                }
                let mut writes = spans
                    .iter()
                    .map(|(k, v)| (*k, v.clone().map(|r| &buffer[r])));
                store.restore(&mut writes, last)?;
                restored += rows.len() as u64;
                progress(restored, total.max(restored));
                Ok(())
            })?;
        if store.committed_offset()? != Some(published) {
            // Compaction can leave the last published offsets without records.
            store.restore(&mut std::iter::empty(), published)?;
        }
        checkpoint(log, published)?;
        Ok(restored)
    }

    /// Commits the staged writes. A logged store publishes them to its changelog first and
    /// returns the changelog offset; an unlogged one commits at the caller's `offset`.
    pub fn commit(
        &mut self,
        offset: Option<i64>,
        now_ms: i64,
        progress: &mut dyn FnMut(CommitProgress),
        stage: &mut dyn FnMut(CommitStage),
    ) -> Result<Option<i64>> {
        let Self {
            store,
            changelog: Some(log),
        } = self
        else {
            self.store.commit(offset, progress)?;
            return Ok(offset);
        };
        if offset.is_some() {
            return Err(Error::InvalidArgument(
                "a logged store takes its offsets from its changelog: commit without an offset"
                    .into(),
            ));
        }
        let published = Self::publish_to(store, log, now_ms, &mut || stage(CommitStage::Uploaded))?;
        stage(CommitStage::Published);
        store.commit(published, progress)?;
        stage(CommitStage::StoreCommitted);
        if let Some(offset) = published {
            checkpoint(log, offset)?;
        }
        stage(CommitStage::Checkpointed);
        Ok(published)
    }

    /// The first half of [`Self::commit`], for callers that commit several stores as one unit
    /// (kstate.spark's micro-batches): publishes the staged writes to the changelog and returns
    /// the last published offset, leaving the writes staged until
    /// [`Self::commit_published`]. A failed publication publishes nothing.
    pub fn publish(&mut self, now_ms: i64) -> Result<Option<i64>> {
        let Self {
            store,
            changelog: Some(log),
        } = self
        else {
            return Err(Error::InvalidState(
                "only a logged store publishes to a changelog".into(),
            ));
        };
        Self::publish_to(store, log, now_ms, &mut || {})
    }

    fn publish_to(
        store: &mut S,
        log: &mut StoreChangelog,
        now_ms: i64,
        uploaded: &mut dyn FnMut(),
    ) -> Result<Option<i64>> {
        let timestamped = log.timestamped;
        let appended = store.for_each_staged(CHANGELOG_CHUNK_BYTES, &mut |writes| {
            let mut records = Vec::with_capacity(writes.len());
            for &(key, value) in writes {
                records.push(record_of::<S>(key, value, timestamped, now_ms)?);
            }
            log.changelog.append(&records, now_ms)
        });
        match appended.and_then(|()| log.changelog.publish(uploaded)) {
            Ok(published) => Ok(published),
            Err(error) => {
                log.changelog.discard_unpublished()?;
                Err(error)
            }
        }
    }

    /// The second half of [`Self::commit`]: applies the staged writes with the offset
    /// [`Self::publish`] returned, then checkpoints it.
    pub fn commit_published(
        &mut self,
        published: Option<i64>,
        progress: &mut dyn FnMut(CommitProgress),
    ) -> Result<()> {
        if let Some(log) = &self.changelog {
            if log.changelog.published() != published {
                return Err(Error::InvalidArgument(format!(
                    "offset {published:?} is not what the changelog published ({:?})",
                    log.changelog.published()
                )));
            }
        }
        self.store.commit(published, progress)?;
        if let (Some(log), Some(offset)) = (&self.changelog, published) {
            checkpoint(log, offset)?;
        }
        Ok(())
    }

    /// Discards uncommitted writes. A logged store then replays what its changelog published
    /// beyond it and is current (`true`); an unlogged one says whether it is at `offset`.
    pub fn recover(
        &mut self,
        offset: Option<i64>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<bool> {
        if !self.is_logged() {
            return self.store.recover(offset);
        }
        self.store.recover(None)?;
        self.restore(progress)?;
        Ok(true)
    }

    /// Runs the changelog's cleaner (see [`Changelog::clean`]); `None` without a changelog.
    pub fn clean_changelog(&mut self, now_ms: i64) -> Result<Option<CleaningReport>> {
        match &mut self.changelog {
            Some(log) => {
                let store_offset = self.store.committed_offset()?;
                log.changelog.clean(now_ms, store_offset).map(Some)
            }
            None => Ok(None),
        }
    }

    /// Closes the store and its changelog; returns what a compaction finished at the close did.
    pub fn close(&mut self) -> Result<Option<CompactionReport>> {
        self.store.close()?;
        self.detach()
    }
}

fn checkpoint(log: &StoreChangelog, offset: i64) -> Result<()> {
    let Some(checkpoint) = &log.checkpoint else {
        return Ok(());
    };
    checkpoint.update(&Offsets::from([(
        (log.topic.clone(), log.partition),
        offset,
    )]))
}

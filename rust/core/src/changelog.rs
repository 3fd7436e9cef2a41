//! A store's changelog (Kafka Streams' `<application.id>-<store>-changelog`, spec 1.3): one
//! partition of a Kafka log holding every committed write, and what restores the store.
//!
//! A commit's records may span several message sets, and a crash can leave some of them whole
//! on disk. So a commit counts only once it is *published*: after its records are flushed, a
//! marker file records its last offset (written to a temporary file, fsynced, renamed). Opening
//! cuts off whatever follows the marker, so a commit that never published is never replayed.
//! The marker plays the part of the commit marker of Kafka's EOS transactions.

use std::fs;
use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::{self, LogConfig, NewRecord, Partition};
use crate::record::{decode_columns, RecordColumnsView};

/// In the partition directory, next to the segments (the log ignores other files).
const PUBLISHED_FILE: &str = ".kstate-published";
/// Bytes read from the log per replay step.
const REPLAY_READ_BYTES: usize = 4 * 1024 * 1024;

/// What opening a changelog found, for the caller to log.
#[derive(Debug, Clone, Default)]
pub struct ChangelogOpenReport {
    pub log: log::OpenReport,
    /// Records of a commit that crashed before publishing, cut off.
    pub unpublished_records_dropped: i64,
}

/// Receives replayed records: decoded columns, the rows of them to apply, and the last offset
/// among those rows.
pub type ReplayBatch<'f> = dyn FnMut(&RecordColumnsView<'_>, Range<usize>, i64) -> Result<()> + 'f;

pub struct Changelog {
    partition: Partition,
    marker: PathBuf,
    /// Offsets up to here are published; `None`: nothing is.
    published: Option<i64>,
}

fn read_marker(path: &Path) -> Result<Option<i64>> {
    match fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            Error::Corrupted(format!(
                "changelog marker {} holds {text:?}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The last published offset as the marker in the partition directory `dir` records it, read
/// without opening the log: `None` when there is no marker (never opened as a changelog), -1
/// when nothing is published.
pub fn published_marker(dir: &Path) -> Result<Option<i64>> {
    read_marker(&dir.join(PUBLISHED_FILE))
}

impl Changelog {
    /// Opens (creating if needed) the partition directory `dir` and cuts off records that were
    /// never published. A log without a marker was written by another tool: all of it counts.
    pub fn open(dir: &Path, config: LogConfig) -> Result<(Self, ChangelogOpenReport)> {
        let (mut partition, log) = Partition::open(dir, config)?;
        let marker = dir.join(PUBLISHED_FILE);
        let last = partition.log_end_offset() - 1;
        let mut report = ChangelogOpenReport {
            log,
            ..ChangelogOpenReport::default()
        };
        let published = match read_marker(&marker)? {
            Some(p) if p > last => {
                return Err(Error::Corrupted(format!(
                    "changelog {} lost published records: published up to offset {p}, log ends at {last}",
                    dir.display()
                )))
            }
            Some(p) => {
                if p < last {
                    partition.truncate_to(p + 1)?;
                    report.unpublished_records_dropped = last - p;
                }
                p
            }
            None => last,
        };
        let changelog = Self {
            partition,
            marker,
            published: (published >= 0).then_some(published),
        };
        changelog.write_marker(published)?;
        Ok((changelog, report))
    }

    pub fn dir(&self) -> &Path {
        self.partition.dir()
    }

    /// The last published offset; `None` while nothing is.
    pub fn published(&self) -> Option<i64> {
        self.published
    }

    /// The first offset still in the log (retention and compaction move it up).
    pub fn log_start_offset(&self) -> i64 {
        self.partition.log_start_offset()
    }

    /// Appends records of the commit being built; they count once [`Self::publish`] returns.
    pub fn append(&mut self, records: &[NewRecord<'_>], now_ms: i64) -> Result<()> {
        if !records.is_empty() {
            self.partition.append(records, now_ms)?;
        }
        Ok(())
    }

    /// Makes the appended records durable, then published. Returns the last published offset.
    pub fn publish(&mut self) -> Result<Option<i64>> {
        let last = self.partition.log_end_offset() - 1;
        if last >= 0 && Some(last) != self.published {
            self.partition.flush()?;
            self.write_marker(last)?;
            self.published = Some(last);
        }
        Ok(self.published)
    }

    /// Drops appended records that were not published (a commit that failed part-way).
    pub fn discard_unpublished(&mut self) -> Result<()> {
        let end = self.published.map_or(0, |p| p + 1);
        if self.partition.log_end_offset() > end {
            self.partition.truncate_to(end)?;
        }
        Ok(())
    }

    /// Withdraws every published record after `offset` (`None`: every record); returns how many
    /// went. kstate.spark retracts what a micro-batch published but never recorded as done (it
    /// crashed in between), before any store restores it. The marker moves first, so a crash
    /// part-way leaves records past the marker, which opening cuts.
    pub fn retract_to(&mut self, offset: Option<i64>) -> Result<i64> {
        let keep = offset.unwrap_or(-1);
        if keep < -1 {
            return Err(Error::InvalidArgument(format!(
                "cannot retract to offset {keep}"
            )));
        }
        let Some(published) = self.published.filter(|&p| p > keep) else {
            return Ok(0);
        };
        self.write_marker(keep)?;
        self.published = offset.filter(|&o| o >= 0);
        self.partition.truncate_to(keep + 1)?;
        Ok(published - keep)
    }

    fn write_marker(&self, offset: i64) -> Result<()> {
        let tmp = self.marker.with_extension("tmp");
        let mut file = fs::File::create(&tmp)?;
        file.write_all(format!("{offset}\n").as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &self.marker)?;
        log::sync_dir(self.partition.dir())
    }

    /// Passes the published records with offsets in `[from, to]` to `apply` in batches, with
    /// the last offset of each batch.
    pub fn replay(&self, from: i64, to: i64, apply: &mut ReplayBatch<'_>) -> Result<()> {
        let to = to.min(self.published.unwrap_or(-1));
        let mut next = from.max(self.partition.log_start_offset());
        while next <= to {
            let set = self.partition.read(next, REPLAY_READ_BYTES)?;
            let columns = decode_columns(&set, false)?;
            let view = columns.view()?;
            // A wrapper read from its start may hold offsets before `next`; the last set may
            // run past `to`.
            let start = view.offsets.partition_point(|&o| o < next);
            let end = view.offsets.partition_point(|&o| o <= to);
            if end <= start {
                break;
            }
            let last = view.offsets[end - 1];
            apply(&view, start..end, last)?;
            next = last + 1;
        }
        Ok(())
    }

    pub fn close(self) -> Result<()> {
        self.partition.close()
    }
}

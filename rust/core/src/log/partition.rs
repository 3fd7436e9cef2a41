//! A partition's log: a directory of segments, appended to at the end (this file), read
//! ([`read`](super::read)), truncated, and cleaned by retention and compaction.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::config::LogConfig;
use super::file_io::{self, IoContext};
use super::file_names::FileStage;
use super::recovery::{index_interval, load_segments, OpenReport};
use super::segment::{LogSegment, MAX_SEGMENT_FILE_BYTES};
use super::timestamp_validation::validate_timestamps;
use crate::error::{Error, Result};
use crate::format::packed::BinaryColumn;
use crate::format::timestamped::NO_TIMESTAMP;
use crate::record::{Magic, MessageSetBuilder, TimestampType};

/// The message format kstate writes: v1 (KIP-32 timestamps), readable by every Kafka since 0.10.
const WRITE_MAGIC: Magic = Magic::V1;
/// Held exclusively (an OS file lock) while a `Partition` has the directory open: two writers
/// would corrupt the log.
const LOCK_FILE: &str = ".kstate.lock";
/// The log start offset [`Partition::delete_records_before`] set, which may lie inside the first
/// segment. Kafka keeps it in the log directory's `log-start-offset-checkpoint`, one file for
/// all partitions; kstate's partitions of one directory belong to different processes, so each
/// keeps its own (a number, written as the changelog's markers are).
pub(super) const LOG_START_FILE: &str = ".kstate-log-start-offset";

/// One record to append; the log assigns its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewRecord<'a> {
    /// Milliseconds since the epoch, or -1 for none. Replaced by the append time with
    /// LogAppendTime.
    pub timestamp: i64,
    /// `None` is a null key (not allowed on a compacted topic).
    pub key: Option<&'a [u8]>,
    /// `None` is a null value: a tombstone.
    pub value: Option<&'a [u8]>,
}

/// What an append did (Kafka's `LogAppendInfo`, in part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The time stamped on every record with LogAppendTime, else -1 (as in Kafka).
    pub log_append_time: i64,
    /// The largest record timestamp written, -1 if none.
    pub max_timestamp: i64,
    /// Bytes written to the segment.
    pub bytes: usize,
    /// Whether a new segment was rolled before the append.
    pub rolled: bool,
}

/// A segment as [`Partition::segments`] describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base_offset: i64,
    pub size_bytes: u64,
    /// The largest entry timestamp, -1 if none.
    pub max_timestamp: i64,
}

/// A partition's log in one directory. Not thread-safe for writes (`&mut self`); reads take
/// `&self`. After an I/O error the in-memory state may not match the files: drop the partition
/// and open it again, which recovers.
pub struct Partition {
    pub(super) dir: PathBuf,
    pub(super) config: LogConfig,
    /// Ordered by base offset, never empty; the last one is the active segment.
    pub(super) segments: Vec<LogSegment>,
    /// The offset the next record gets.
    pub(super) log_end_offset: i64,
    /// The log start offset records were deleted before ([`Self::delete_records_before`]), from
    /// `LOG_START_FILE`; 0 when none were.
    pub(super) deleted_before: i64,
    _lock: File,
}

impl Partition {
    /// Opens (creating if needed) the partition log in `dir`, recovering from a crash: see
    /// [`OpenReport`] for what that may involve.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<(Self, OpenReport)> {
        config.validate()?;
        let dir = dir.as_ref();
        let existed = dir.exists();
        std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
        if !existed {
            if let Some(parent) = dir.parent() {
                file_io::sync_dir(parent)?;
            }
        }
        let lock = lock_directory(dir)?;
        let (segments, log_end_offset, mut report) = load_segments(dir, &config)?;
        // A torn tail cut after the deletion can leave the end below it: never past the end.
        let deleted_before =
            file_io::read_number_file(&dir.join(LOG_START_FILE), "log start offset")?
                .unwrap_or(0)
                .clamp(0, log_end_offset);
        let partition = Self {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_end_offset,
            deleted_before,
            _lock: lock,
        };
        report.log_start_offset = partition.log_start_offset();
        Ok((partition, report))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The first offset the log may hold (Kafka's log start offset): the base offset of its
    /// first segment, or the offset records were deleted before if that is higher.
    pub fn log_start_offset(&self) -> i64 {
        self.segments
            .first()
            .map_or(self.log_end_offset, LogSegment::base_offset)
            .max(self.deleted_before)
    }

    /// The offset [`Self::delete_records_before`] deleted records before (0 if it never did):
    /// what lies below it was deleted on request, not by retention, so a reader that needs it
    /// cannot be served from this log at all.
    pub fn deleted_records_before(&self) -> i64 {
        self.deleted_before
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Bytes of all segment files.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(LogSegment::size).sum()
    }

    /// The segments, oldest first; the last one is active.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|segment| SegmentInfo {
                base_offset: segment.base_offset(),
                size_bytes: segment.size(),
                max_timestamp: segment.max_timestamp(),
            })
            .collect()
    }

    /// Appends records as one message set (one entry per record, or one compressed wrapper
    /// with `compression.type`), assigning offsets from [`Self::log_end_offset`], as a broker
    /// does for a produce request at `now_ms`:
    ///
    /// - With CreateTime, timestamps are checked against `now_ms` (spec 3.6); if any is out of
    ///   range the whole batch is rejected (`INVALID_TIMESTAMP (32)`, see
    ///   [`INVALID_TIMESTAMP`](super::INVALID_TIMESTAMP)) and nothing is written. With
    ///   LogAppendTime every record gets `now_ms`.
    /// - On a compacted topic every record needs a key (Kafka's `INVALID_RECORD`).
    /// - A new segment is rolled first if the active one is not empty and would exceed
    ///   `segment.bytes`, or if `segment.ms` has passed: measured, as in Kafka, from the
    ///   active segment's first timestamp to the largest timestamp being appended, or, when the
    ///   segment's first entry has no timestamp, from when this process created it or first
    ///   appended to it to `now_ms`.
    ///
    /// The data is written to the file but durable only after [`Self::flush`].
    pub fn append(&mut self, records: &[NewRecord<'_>], now_ms: i64) -> Result<AppendInfo> {
        self.append_rows(records.len(), |i| records.get(i).copied(), now_ms)
    }

    /// [`Self::append`] from columns (Arrow binary arrays for keys and values), without
    /// building a record per row.
    pub fn append_columns(
        &mut self,
        timestamps: &[i64],
        keys: &BinaryColumn<'_>,
        values: &BinaryColumn<'_>,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        if keys.len() != timestamps.len() || values.len() != timestamps.len() {
            return Err(Error::InvalidArgument(format!(
                "append columns differ in length: {} timestamps, {} keys, {} values",
                timestamps.len(),
                keys.len(),
                values.len()
            )));
        }
        let row = |i: usize| {
            Some(NewRecord {
                timestamp: *timestamps.get(i)?,
                key: keys.get(i),
                value: values.get(i),
            })
        };
        self.append_rows(timestamps.len(), row, now_ms)
    }

    fn append_rows<'a>(
        &mut self,
        count: usize,
        row: impl Fn(usize) -> Option<NewRecord<'a>>,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let rows = || (0..count).filter_map(&row);
        if count == 0 {
            return Err(Error::InvalidArgument(
                "append needs at least one record".into(),
            ));
        }
        validate_timestamps(&self.config, rows().map(|record| record.timestamp), now_ms)?;
        if self.config.cleanup_policy.compacts() {
            let keyless = rows().filter(|record| record.key.is_none()).count();
            if keyless > 0 {
                return Err(Error::InvalidArgument(format!(
                    "INVALID_RECORD (87): {keyless} of {count} records have no key, which a \
                     compacted topic cannot accept; nothing was appended"
                )));
            }
        }
        let log_append = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        if log_append && now_ms < 0 {
            return Err(Error::InvalidArgument(format!(
                "the append time {now_ms} of a LogAppendTime topic is negative"
            )));
        }
        let mut builder = if log_append {
            MessageSetBuilder::with_log_append_time(WRITE_MAGIC, self.config.compression, now_ms)?
        } else {
            MessageSetBuilder::new(WRITE_MAGIC, self.config.compression)
        };
        let bytes = rows()
            .map(|record| record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len))
            .sum();
        builder.reserve(count, bytes);
        let first_offset = self.log_end_offset;
        let mut max_timestamp = NO_TIMESTAMP;
        for (offset, record) in (first_offset..).zip(rows()) {
            builder.append(offset, record.timestamp, record.key, record.value)?;
            max_timestamp = max_timestamp.max(record.timestamp);
        }
        let (set, entries) = builder.build_indexed()?;
        let last_offset = first_offset + count as i64 - 1;
        let (log_append_time, max_timestamp) = if log_append {
            (now_ms, now_ms)
        } else {
            (NO_TIMESTAMP, max_timestamp)
        };

        let rolled = self.roll_if_needed(set.len() as u64, max_timestamp, last_offset, now_ms)?;
        let active = self.active_mut();
        active.created_ms(now_ms);
        active.append_indexed(&set, &entries)?;
        self.log_end_offset = last_offset + 1;
        Ok(AppendInfo {
            first_offset,
            last_offset,
            log_append_time,
            max_timestamp,
            bytes: set.len(),
            rolled,
        })
    }

    /// Kafka's `LogSegment.shouldRoll`, then the roll.
    pub(super) fn roll_if_needed(
        &mut self,
        set_bytes: u64,
        max_timestamp: i64,
        last_offset: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let segment_bytes = u64::try_from(self.config.segment_bytes).unwrap_or(0);
        let segment_ms = self.config.segment_ms;
        let active = self.active_mut();
        let size = active.size();
        if size == 0 {
            if set_bytes > MAX_SEGMENT_FILE_BYTES {
                return Err(Error::InvalidArgument(format!(
                    "a {set_bytes}-byte message set does not fit a segment (positions are i32)"
                )));
            }
            return Ok(false);
        }
        let full = size + set_bytes > segment_bytes || size + set_bytes > MAX_SEGMENT_FILE_BYTES;
        let offsets_overflow = i32::try_from(last_offset - active.base_offset()).is_err();
        let waited = match active.first_entry_timestamp().filter(|&ts| ts >= 0) {
            Some(first_timestamp) => max_timestamp.saturating_sub(first_timestamp),
            None => now_ms.saturating_sub(active.created_ms(now_ms)),
        };
        if full || offsets_overflow || waited > segment_ms {
            self.roll(now_ms)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Starts a new active segment at the log end offset, sealing (and fsyncing) the current
    /// one. Does nothing if the active segment is empty. Appends roll by themselves; this is
    /// for making everything so far eligible for compaction or retention.
    pub fn roll(&mut self, now_ms: i64) -> Result<()> {
        let active = self.active_mut();
        if active.size() == 0 {
            return Ok(());
        }
        active.seal()?;
        let mut segment = LogSegment::create(
            &self.dir,
            self.log_end_offset,
            FileStage::Live,
            index_interval(&self.config),
        )?;
        segment.created_ms(now_ms);
        file_io::sync_dir(&self.dir)?;
        self.segments.push(segment);
        Ok(())
    }

    /// Makes everything appended so far durable: fsyncs the active segment's log and indexes
    /// (earlier segments were fsynced when sealed).
    pub fn flush(&mut self) -> Result<()> {
        self.active_mut().flush()
    }

    /// Makes the records appended so far durable, as [`Self::flush`] does, but without
    /// fsyncing the active segment's index files: a crash is followed by a scan of the active
    /// segment that rebuilds them (a clean close records their CRCs, checked when reopened).
    pub fn sync_appended(&mut self) -> Result<()> {
        self.active_mut().sync_log()
    }

    /// Flushes and closes, leaving a clean-shutdown file: opening the partition again (in any
    /// process) skips the active segment's scan while its files stay as they are
    /// (`clean_close`).
    pub fn close(mut self) -> Result<()> {
        // The index files need no fsync: the clean-shutdown file holds their CRCs.
        self.sync_appended()?;
        let next_offset = self.log_end_offset;
        self.active_mut().remember_closed(next_offset);
        Ok(())
    }

    pub(super) fn active_mut(&mut self) -> &mut LogSegment {
        // `segments` is never empty: every operation that removes segments adds one first.
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    /// The index of the segment that holds `offset`: the last one based at or below it.
    pub(super) fn segment_index_for(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|segment| segment.base_offset() <= offset)
            .saturating_sub(1)
    }
}

/// The offset the records of the partition directory `dir` were deleted before
/// ([`Partition::delete_records_before`]), read without opening the log; 0 if they never were.
pub fn records_deleted_before(dir: &Path) -> Result<i64> {
    Ok(file_io::read_number_file(&dir.join(LOG_START_FILE), "log start offset")?.unwrap_or(0))
}

fn lock_directory(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::InvalidState(format!(
            "{} is already open (locked by another Partition or process)",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(error).context(|| format!("locking {}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append_one(partition: &mut Partition, value: &[u8]) {
        let record = NewRecord {
            timestamp: 1,
            key: Some(b"k"),
            value: Some(value),
        };
        partition.append(&[record], 1).unwrap();
    }

    #[test]
    fn the_active_log_is_synced_again_only_after_a_write_or_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut partition, _) = Partition::open(dir.path(), LogConfig::default()).unwrap();
        assert!(
            !partition.active_mut().log_synced(),
            "a segment just opened"
        );
        append_one(&mut partition, b"a");
        partition.sync_appended().unwrap();
        assert!(partition.active_mut().log_synced());
        append_one(&mut partition, b"b");
        assert!(!partition.active_mut().log_synced(), "an append");
        partition.truncate_to(1).unwrap();
        assert!(
            partition.active_mut().log_synced(),
            "a truncation is durable when it returns"
        );
        partition.close().unwrap(); // synced: the close writes its clean-shutdown file only

        let (mut partition, report) = Partition::open(dir.path(), LogConfig::default()).unwrap();
        assert!(report.reopened_clean);
        assert!(
            !partition.active_mut().log_synced(),
            "reopened after a clean close"
        );
        assert_eq!(partition.log_end_offset(), 1);
        partition.close().unwrap();
    }
}

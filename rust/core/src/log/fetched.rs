//! Appending a segment file written elsewhere, keeping its offsets (Kafka's
//! `appendAsFollower`): how a changelog's local cache takes in an object of its remote log.

use std::fs::File;
use std::path::Path;

use super::file_io::IoContext;
use super::partition::Partition;
use super::scan::{scan_entries, Visit, SCAN_CHUNK_BYTES};
use crate::error::{Error, Result};
use crate::format::timestamped::NO_TIMESTAMP;

/// What [`Partition::append_fetched`] appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedAppend {
    /// Entries appended (a compressed wrapper is one entry).
    pub entries: u64,
    pub bytes: u64,
    /// The last offset the file covers: `last` if given, else its last record's offset.
    pub last_offset: i64,
}

impl Partition {
    /// Appends the entries of the segment file at `path`, which holds offsets `first..=last`
    /// (`None`: up to its last entry), with their offsets and bytes as they are. `first` must
    /// be at or above the log end offset. Every entry's CRC is checked and its offset must be
    /// in the range and above the one before; a bad file is `Error::Corrupted` (whatever of it
    /// was appended stays: truncate to undo). When the last record is below `last` (compaction
    /// removed it) the log end offset still moves to `last + 1`.
    ///
    /// Segments roll as for [`Partition::append`]. Durable after [`Partition::flush`].
    pub fn append_fetched(
        &mut self,
        path: &Path,
        first: i64,
        last: Option<i64>,
        now_ms: i64,
    ) -> Result<FetchedAppend> {
        if first < self.log_end_offset || last.is_some_and(|last| last < first) {
            return Err(Error::InvalidArgument(format!(
                "cannot append offsets {first}..={} to a log ending at {}",
                last.map_or("end".into(), |last| last.to_string()),
                self.log_end_offset
            )));
        }
        let file = File::open(path).context(|| format!("opening {}", path.display()))?;
        let size = file
            .metadata()
            .context(|| format!("reading the size of {}", path.display()))?
            .len();
        let mut appended = FetchedAppend {
            entries: 0,
            bytes: 0,
            last_offset: first - 1,
        };
        let mut pending = Pending::default();
        let end = scan_entries(&file, 0, size, SCAN_CHUNK_BYTES, &mut |scanned| {
            let offset = scanned.entry.offset;
            let below = appended.last_offset.max(self.log_end_offset - 1);
            if offset <= below || last.is_some_and(|last| offset > last) {
                return Ok(Visit::Reject(format!(
                    "offset {offset} is not in {first}..={} above offset {below}",
                    last.map_or("end".into(), |last| last.to_string())
                )));
            }
            pending.bytes.extend_from_slice(scanned.bytes);
            pending.max_timestamp = pending.max_timestamp.max(scanned.entry.timestamp);
            appended.entries += 1;
            appended.bytes += scanned.bytes.len() as u64;
            appended.last_offset = offset;
            if pending.bytes.len() >= SCAN_CHUNK_BYTES {
                self.append_pending(&mut pending, offset, now_ms)?;
            }
            Ok(Visit::Continue)
        })?;
        if let Some(problem) = end.problem {
            return Err(Error::Corrupted(format!(
                "segment file {}: bad entry at byte {}: {problem}",
                path.display(),
                end.position
            )));
        }
        self.append_pending(&mut pending, appended.last_offset, now_ms)?;
        if let Some(last) = last {
            if self.log_end_offset <= last {
                self.start_segment_at(last + 1)?;
            }
            appended.last_offset = last;
        }
        Ok(appended)
    }

    fn append_pending(
        &mut self,
        pending: &mut Pending,
        last_offset: i64,
        now_ms: i64,
    ) -> Result<()> {
        if pending.bytes.is_empty() {
            return Ok(());
        }
        self.roll_if_needed(
            pending.bytes.len() as u64,
            pending.max_timestamp,
            last_offset,
            now_ms,
        )?;
        let active = self.active_mut();
        active.created_ms(now_ms);
        active.append(&pending.bytes)?;
        self.log_end_offset = last_offset + 1;
        *pending = Pending::default();
        Ok(())
    }
}

/// Entries read but not yet appended.
struct Pending {
    bytes: Vec<u8>,
    max_timestamp: i64,
}

impl Default for Pending {
    fn default() -> Self {
        Self {
            bytes: Vec::new(),
            max_timestamp: NO_TIMESTAMP,
        }
    }
}

//! Reading a message set (spec 3.1, 3.5 reader side): shallow entries as stored, and deep
//! records with wrappers decompressed and absolute offsets assigned, as Kafka's
//! `AbstractLegacyRecordBatch.DeepRecordsIterator` does.

use std::cell::Cell;

use super::compression;
use super::legacy::{self, Framing, Message, LOG_OVERHEAD};
use super::{Compression, Magic, Record, TimestampType};
use crate::error::{Error, Result};

/// One top-level entry of a message set as stored: a plain message or a compressed wrapper
/// (whose `value` is then the compressed inner message set). Its CRC has been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Byte position of the entry in the message set (what Kafka's offset index points at).
    pub position: usize,
    /// Bytes the entry takes: the 12-byte offset/size header plus the message.
    pub size: usize,
    /// For a wrapper, the absolute offset of its last inner record.
    pub offset: i64,
    pub magic: Magic,
    pub compression: Compression,
    /// For a v1 wrapper: the max inner timestamp (CreateTime) or the log-append time.
    pub timestamp: i64,
    pub timestamp_type: Option<TimestampType>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// One deep record borrowed from the set or from a decompressed wrapper value (see
/// [`visit_records`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'b> {
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: Option<TimestampType>,
    pub key: Option<&'b [u8]>,
    pub value: Option<&'b [u8]>,
}

impl RecordView<'_> {
    /// The record with its key and value copied.
    pub fn to_record(self) -> Record {
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
        }
    }
}

impl Entry<'_> {
    pub fn is_compressed(&self) -> bool {
        self.compression != Compression::None
    }

    /// The entry itself as a record; a wrapper's value stays compressed.
    pub fn to_record(&self) -> Record {
        self.record_view().to_record()
    }

    /// The records this entry holds: itself when plain, the decompressed inner records with
    /// absolute offsets when a wrapper.
    pub fn records(&self) -> Result<Vec<Record>> {
        let mut records = Vec::new();
        self.visit_records(&mut |record| {
            records.push(record.to_record());
            Ok(())
        })?;
        Ok(records)
    }

    /// Calls `visit` with each record of [`Entry::records`], without copying keys and values.
    pub fn visit_records(&self, visit: &mut dyn FnMut(RecordView<'_>) -> Result<()>) -> Result<()> {
        if !self.is_compressed() {
            return visit(self.record_view());
        }
        let mut inner = self.inner_records()?;
        while let Some(record) = inner.next_record() {
            visit(record?)?;
        }
        Ok(())
    }

    /// A plain entry as the record it is (a wrapper's value stays compressed).
    pub fn record_view(&self) -> RecordView<'_> {
        RecordView {
            offset: self.offset,
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            key: self.key,
            value: self.value,
        }
    }

    /// A compressed wrapper's records, decompressed now and parsed as they are read. Checks
    /// what must hold before the first record can be given its absolute offset: the value
    /// decompresses, the inner entries are framed, there is at least one, and (v1) the wrapper
    /// offset can be the last inner record's.
    pub fn inner_records(&self) -> Result<InnerRecords> {
        let mut inner = self.inner_records_as_stored()?;
        let last_inner_offset = inner
            .wrapper
            .last_inner_offset(&inner.decompressed)?
            .ok_or_else(|| {
                inner
                    .wrapper
                    .corrupted("compressed wrapper holds no messages")
            })?;
        inner.absolute_base = inner.wrapper.absolute_base(last_inner_offset)?;
        Ok(inner)
    }

    /// As [`Self::inner_records`], but the records' offsets are as stored (relative in v1)
    /// until [`InnerRecords::make_absolute`] fixes them once all are read: that saves the walk
    /// over the inner set which finding the last inner offset first takes.
    pub fn inner_records_as_stored(&self) -> Result<InnerRecords> {
        let wrapper = Wrapper {
            position: self.position,
            offset: self.offset,
            magic: self.magic,
            timestamp_type: self.timestamp_type,
            // A LogAppendTime wrapper's timestamp replaces the inner ones.
            log_append_time: match self.timestamp_type {
                Some(TimestampType::LogAppendTime) => Some(self.timestamp),
                _ => None,
            },
        };
        if !self.is_compressed() {
            return Err(wrapper.corrupted("a plain entry has no inner records"));
        }
        let value = self
            .value
            .ok_or_else(|| wrapper.corrupted("compressed wrapper has a null value"))?;
        let mut decompressed = SPARE_BUFFER.take();
        compression::decompress(self.compression, self.magic, value, &mut decompressed)
            .map_err(|problem| wrapper.corrupted(&problem))?;
        Ok(InnerRecords {
            wrapper,
            decompressed,
            position: 0,
            absolute_base: 0,
            failed: false,
        })
    }
}

/// What reading a wrapper's inner records needs to know about the wrapper.
#[derive(Debug, Clone, Copy)]
struct Wrapper {
    position: usize,
    offset: i64,
    magic: Magic,
    timestamp_type: Option<TimestampType>,
    log_append_time: Option<i64>,
}

impl Wrapper {
    /// The stored offset of the last inner entry, reading only the entries' framing; `None`
    /// when there is none. Like Kafka, a truncated last inner entry just ends the inner set.
    fn last_inner_offset(&self, decompressed: &[u8]) -> Result<Option<i64>> {
        let mut last = None;
        let mut position = 0;
        loop {
            let rest = decompressed.get(position..).unwrap_or_default();
            match legacy::next_entry(rest) {
                Framing::End => return Ok(last),
                Framing::Corrupt { offset, problem } => {
                    return Err(self.inner_corrupted(position, offset, &problem))
                }
                Framing::Entry { offset, message } => {
                    last = Some(offset);
                    position += LOG_OVERHEAD + message.len();
                }
            }
        }
    }

    /// What turns an inner offset as stored into an absolute one (spec 3.5 reader side).
    fn absolute_base(&self, last_inner_offset: i64) -> Result<i64> {
        match self.magic {
            // v0 inner offsets are absolute already.
            Magic::V0 => Ok(0),
            // Some librdkafka versions leave the wrapper offset 0 in produce requests.
            Magic::V1 if self.offset == 0 => Ok(0),
            Magic::V1 if self.offset < last_inner_offset => Err(self.corrupted(&format!(
                "wrapper offset is less than its last inner offset {last_inner_offset}"
            ))),
            Magic::V1 => self.offset.checked_sub(last_inner_offset).ok_or_else(|| {
                self.corrupted(&format!("inner offset {last_inner_offset} overflows"))
            }),
        }
    }

    /// The inner message `message` (stored at `inner_position` with `inner_offset`), checked
    /// and with its absolute offset.
    fn inner_record<'d>(
        &self,
        absolute_base: i64,
        inner_position: usize,
        inner_offset: i64,
        message: &'d [u8],
    ) -> Result<RecordView<'d>> {
        let fail = |problem: &str| self.inner_corrupted(inner_position, inner_offset, problem);
        let parsed: Message<'d> =
            legacy::parse_message(message).map_err(|problem| fail(&problem))?;
        if parsed.magic != self.magic {
            return Err(fail(&format!(
                "inner magic {} does not match the wrapper's magic {}",
                parsed.magic.as_byte(),
                self.magic.as_byte()
            )));
        }
        if parsed.compression != Compression::None {
            return Err(fail(&format!(
                "inner message is compressed too ({:?})",
                parsed.compression
            )));
        }
        let offset = absolute_base
            .checked_add(inner_offset)
            .ok_or_else(|| fail("inner offset overflows"))?;
        Ok(RecordView {
            offset,
            timestamp: self.log_append_time.unwrap_or(parsed.timestamp),
            // Every inner record reports the wrapper's type.
            timestamp_type: self.timestamp_type,
            key: parsed.key,
            value: parsed.value,
        })
    }

    fn corrupted(&self, problem: &str) -> Error {
        corrupted(self.position, self.offset, problem)
    }

    fn inner_corrupted(&self, inner_position: usize, inner_offset: i64, problem: &str) -> Error {
        self.corrupted(&format!(
            "inner entry at byte {inner_position} of the decompressed value \
             (stored offset {inner_offset}): {problem}"
        ))
    }
}

thread_local! {
    /// The decompression buffer of the last wrapper read on this thread, for the next one. As in
    /// Kafka's consumer (`BufferSupplier`), reusing it saves first-touching megabytes of fresh
    /// memory per wrapper, which costs more than inflating into them.
    static SPARE_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Larger decompression buffers are freed rather than kept for reuse.
const MAX_SPARE_BUFFER: usize = 32 << 20;

/// The records of one compressed wrapper (see [`Entry::inner_records`]): owns the decompressed
/// inner set and parses one message per [`InnerRecords::next_record`], so a reader holds one
/// record at a time however many the wrapper has.
#[derive(Debug)]
pub struct InnerRecords {
    wrapper: Wrapper,
    decompressed: Vec<u8>,
    /// Where the next inner entry starts in `decompressed`.
    position: usize,
    absolute_base: i64,
    failed: bool,
}

impl Drop for InnerRecords {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.decompressed);
        if buffer.capacity() <= MAX_SPARE_BUFFER {
            // Fails only while the thread exits, when there is no next wrapper to read.
            let _ = SPARE_BUFFER.try_with(|spare| spare.set(buffer));
        }
    }
}

impl InnerRecords {
    /// Bytes of the decompressed inner message set.
    pub fn set_len(&self) -> usize {
        self.decompressed.len()
    }

    /// Turns the offsets of every record read through [`Entry::inner_records_as_stored`]
    /// absolute, checking what [`Entry::inner_records`] checks first.
    pub fn make_absolute(&self, offsets: &mut [i64]) -> Result<()> {
        let last = offsets.last().copied().ok_or_else(|| {
            self.wrapper
                .corrupted("compressed wrapper holds no messages")
        })?;
        let base = self.wrapper.absolute_base(last)?;
        if base == 0 {
            return Ok(());
        }
        for offset in offsets {
            *offset = offset.checked_add(base).ok_or_else(|| {
                self.wrapper
                    .corrupted(&format!("inner offset {offset} overflows"))
            })?;
        }
        Ok(())
    }

    /// The next record, borrowing from the decompressed set; `None` at the end or after an
    /// error.
    pub fn next_record(&mut self) -> Option<Result<RecordView<'_>>> {
        if self.failed {
            return None;
        }
        let position = self.position;
        let rest = self.decompressed.get(position..).unwrap_or_default();
        let result = match legacy::next_entry(rest) {
            Framing::End => return None,
            Framing::Corrupt { offset, problem } => {
                Err(self.wrapper.inner_corrupted(position, offset, &problem))
            }
            Framing::Entry { offset, message } => {
                self.position += LOG_OVERHEAD + message.len();
                self.wrapper
                    .inner_record(self.absolute_base, position, offset, message)
            }
        };
        self.failed = result.is_err();
        Some(result)
    }
}

fn corrupted(position: usize, offset: i64, problem: &str) -> Error {
    Error::Corrupted(format!(
        "legacy message set: entry at byte {position} (offset {offset}): {problem}"
    ))
}

/// The top-level entries of `set`, in order. Stops after the first error.
pub fn shallow_entries(set: &[u8]) -> ShallowEntries<'_> {
    ShallowEntries {
        set,
        position: 0,
        failed: false,
    }
}

/// The top-level entry that starts at byte `position` of `set` (the `position + size` of the
/// entry before it); `None` at the end of the set or at a truncated trailing entry.
pub fn entry_at(set: &[u8], position: usize) -> Option<Result<Entry<'_>>> {
    ShallowEntries {
        set,
        position,
        failed: false,
    }
    .next()
}

/// Iterator of [`shallow_entries`].
pub struct ShallowEntries<'a> {
    set: &'a [u8],
    position: usize,
    failed: bool,
}

impl ShallowEntries<'_> {
    /// Bytes of the complete entries read so far. When iteration has ended without an error,
    /// a value below the set's length means the set ends in a truncated entry, which was
    /// dropped (as Kafka drops a partial entry at the end of a fetch response).
    pub fn position(&self) -> usize {
        self.position
    }
}

impl<'a> Iterator for ShallowEntries<'a> {
    type Item = Result<Entry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = self.set.get(self.position..)?;
        let result = match legacy::next_entry(rest) {
            Framing::End => return None,
            Framing::Corrupt { offset, problem } => Err(corrupted(self.position, offset, &problem)),
            Framing::Entry { offset, message } => legacy::parse_message(message)
                .map(|parsed| Entry {
                    position: self.position,
                    size: LOG_OVERHEAD + message.len(),
                    offset,
                    magic: parsed.magic,
                    compression: parsed.compression,
                    timestamp: parsed.timestamp,
                    timestamp_type: parsed.timestamp_type,
                    key: parsed.key,
                    value: parsed.value,
                })
                .map_err(|problem| corrupted(self.position, offset, &problem)),
        };
        match &result {
            Ok(entry) => self.position += entry.size,
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}

/// Every record of `set` with its absolute offset, wrappers decompressed. Stops after the
/// first error.
pub fn deep_records(set: &[u8]) -> DeepRecords<'_> {
    DeepRecords {
        entries: shallow_entries(set),
        pending: Vec::new().into_iter(),
    }
}

/// Iterator of [`deep_records`]; decompresses one wrapper at a time.
pub struct DeepRecords<'a> {
    entries: ShallowEntries<'a>,
    /// The rest of the current wrapper's records.
    pending: std::vec::IntoIter<Record>,
}

impl Iterator for DeepRecords<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(record) = self.pending.next() {
                return Some(Ok(record));
            }
            let records = self.entries.next()?.and_then(|entry| entry.records());
            match records {
                Ok(records) => self.pending = records.into_iter(),
                Err(error) => {
                    self.entries.failed = true;
                    return Some(Err(error));
                }
            }
        }
    }
}

/// Calls `visit` with every record of `set` (deep, as [`decode_records`]), borrowing keys and
/// values instead of copying them. Stops at the first error, from the set or from `visit`.
pub fn visit_records(
    set: &[u8],
    visit: &mut dyn FnMut(RecordView<'_>) -> Result<()>,
) -> Result<()> {
    for entry in shallow_entries(set) {
        entry?.visit_records(visit)?;
    }
    Ok(())
}

/// All records of `set` (deep), or the first error.
pub fn decode_records(set: &[u8]) -> Result<Vec<Record>> {
    deep_records(set).collect()
}

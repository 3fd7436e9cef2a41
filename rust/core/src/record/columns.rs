//! Deep records as columns, for vectorized callers: offsets and timestamps as i64 arrays,
//! timestamp types as u8 codes, keys and values as Arrow binary buffers.

use super::builder::MessageSetBuilder;
use super::reader::{shallow_entries, RecordView};
use super::{Compression, Magic, TimestampType};
use crate::error::{Error, Result};
use crate::format::packed::{BinaryBuilder, BinaryColumn};

/// Code of [`TimestampType::CreateTime`] in a timestamp-type column (Kafka's type id).
pub const TIMESTAMP_TYPE_CREATE_TIME: u8 = 0;
/// Code of [`TimestampType::LogAppendTime`] (Kafka's type id).
pub const TIMESTAMP_TYPE_LOG_APPEND_TIME: u8 = 1;
/// Code of a magic v0 record, which has no timestamp type: Kafka's id -1 read as unsigned.
pub const TIMESTAMP_TYPE_NONE: u8 = 255;

/// The decoded columns; all have one element per record.
pub struct RecordColumns {
    pub offsets: Vec<i64>,
    pub timestamps: Vec<i64>,
    /// `TIMESTAMP_TYPE_*` codes.
    pub timestamp_types: Vec<u8>,
    pub keys: BinaryBuilder,
    pub values: BinaryBuilder,
    /// Whether `keys` and `values` have i64 (`large_binary`) offsets.
    pub large_binary: bool,
}

impl RecordColumns {
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// These columns as the input of [`encode_columns`].
    pub fn view(&self) -> Result<RecordColumnsView<'_>> {
        Ok(RecordColumnsView {
            offsets: &self.offsets,
            timestamps: &self.timestamps,
            timestamp_types: &self.timestamp_types,
            keys: self.binary_view(&self.keys)?,
            values: self.binary_view(&self.values)?,
        })
    }

    fn binary_view<'a>(&self, built: &'a BinaryBuilder) -> Result<BinaryColumn<'a>> {
        BinaryColumn::parse(
            &built.offsets,
            &built.data,
            Some(&built.validity),
            0,
            self.len(),
            self.large_binary,
        )
    }
}

/// Borrowed columns to encode; all must have the same length.
pub struct RecordColumnsView<'a> {
    pub offsets: &'a [i64],
    pub timestamps: &'a [i64],
    /// `TIMESTAMP_TYPE_*` codes.
    pub timestamp_types: &'a [u8],
    pub keys: BinaryColumn<'a>,
    pub values: BinaryColumn<'a>,
}

/// Every record of `set` (deep, as [`decode_records`](super::decode_records)) as columns.
/// `large_binary` picks i64 offsets for keys and values; with i32 offsets, more than 2 GiB of
/// keys or values is an `InvalidArgument` error.
pub fn decode_columns(set: &[u8], large_binary: bool) -> Result<RecordColumns> {
    let mut columns = RecordColumns {
        offsets: Vec::new(),
        timestamps: Vec::new(),
        timestamp_types: Vec::new(),
        keys: BinaryBuilder::new(0, large_binary),
        values: BinaryBuilder::new(0, large_binary),
        large_binary,
    };
    columns.reserve_for(set.len());
    for entry in shallow_entries(set) {
        let entry = entry?;
        if !entry.is_compressed() {
            columns.push(entry.record_view())?;
            continue;
        }
        let mut inner = entry.inner_records_as_stored()?;
        columns.reserve_for(inner.set_len());
        let first = columns.len();
        while let Some(record) = inner.next_record() {
            columns.push(record?)?;
        }
        inner.make_absolute(&mut columns.offsets[first..])?;
    }
    Ok(columns)
}

impl RecordColumns {
    /// Makes room for the records of a message set of `set_bytes` bytes, sized for typical
    /// records (64 bytes or more, keys an eighth of the bytes at most); others grow the
    /// columns as they go. Growing 12 MB of values by doubling costs a tenth of a decode.
    fn reserve_for(&mut self, set_bytes: usize) {
        let records = set_bytes / 64;
        self.offsets.reserve(records);
        self.timestamps.reserve(records);
        self.timestamp_types.reserve(records);
        self.keys.reserve(records, set_bytes / 8);
        self.values.reserve(records, set_bytes);
    }

    fn push(&mut self, record: RecordView<'_>) -> Result<()> {
        self.offsets.push(record.offset);
        self.timestamps.push(record.timestamp);
        self.timestamp_types.push(match record.timestamp_type {
            None => TIMESTAMP_TYPE_NONE,
            Some(TimestampType::CreateTime) => TIMESTAMP_TYPE_CREATE_TIME,
            Some(TimestampType::LogAppendTime) => TIMESTAMP_TYPE_LOG_APPEND_TIME,
        });
        self.keys.push(record.key)?;
        self.values.push(record.value)
    }
}

/// Encodes the records in `columns` into one message set, like [`MessageSetBuilder`].
///
/// A set has one timestamp type, as in Kafka's builder: if every record is LogAppendTime, the
/// set is built with that log-append time (every record must then carry the same timestamp,
/// as a decoded LogAppendTime wrapper does); otherwise every code must be CreateTime or none
/// (what v0 decodes to) and the set is CreateTime. v0 stores neither timestamps nor types.
pub fn encode_columns(
    magic: Magic,
    compression: Compression,
    columns: &RecordColumnsView<'_>,
) -> Result<Vec<u8>> {
    let count = columns.offsets.len();
    let lengths = [
        columns.timestamps.len(),
        columns.timestamp_types.len(),
        columns.keys.len(),
        columns.values.len(),
    ];
    if lengths.iter().any(|&len| len != count) {
        return Err(Error::InvalidArgument(format!(
            "record columns differ in length: {count} offsets, {} timestamps, {} timestamp \
             types, {} keys, {} values",
            lengths[0], lengths[1], lengths[2], lengths[3]
        )));
    }
    let mut builder = new_builder(magic, compression, columns)?;
    let rows = columns.offsets.iter().zip(columns.timestamps);
    for (row, (&offset, &timestamp)) in rows.enumerate() {
        builder.append(
            offset,
            timestamp,
            columns.keys.get(row),
            columns.values.get(row),
        )?;
    }
    builder.build()
}

/// The builder for the set's one timestamp type (see [`encode_columns`]).
fn new_builder(
    magic: Magic,
    compression: Compression,
    columns: &RecordColumnsView<'_>,
) -> Result<MessageSetBuilder> {
    let types = columns.timestamp_types;
    let log_append = |code: &u8| *code == TIMESTAMP_TYPE_LOG_APPEND_TIME;
    if !types.is_empty() && types.iter().all(log_append) {
        let log_append_time = columns.timestamps.first().copied().unwrap_or_default();
        if columns.timestamps.iter().any(|&ts| ts != log_append_time) {
            return Err(Error::InvalidArgument(
                "LogAppendTime records of one message set must share one timestamp".into(),
            ));
        }
        return MessageSetBuilder::with_log_append_time(magic, compression, log_append_time);
    }
    if let Some(code) = types
        .iter()
        .find(|&&code| code != TIMESTAMP_TYPE_CREATE_TIME && code != TIMESTAMP_TYPE_NONE)
    {
        return Err(Error::InvalidArgument(format!(
            "timestamp type code {code} in a CreateTime message set (one set has one type; \
             codes are 0 CreateTime, 1 LogAppendTime, 255 none)"
        )));
    }
    Ok(MessageSetBuilder::new(magic, compression))
}

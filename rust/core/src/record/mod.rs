//! Kafka's legacy message format, magic v0 and v1 (KIP-31 / KIP-32; spec 3.1 to 3.5).
//!
//! A *message set* is a plain concatenation of entries `<i64 offset><i32 size><message>`. A
//! message is either a plain record or a *compressed wrapper* whose value holds a whole inner
//! message set, compressed with gzip, snappy or lz4.
//!
//! - [`MessageSetBuilder`] encodes records into a message set (uncompressed or one wrapper).
//! - [`shallow_entries`] walks the top-level entries as stored (wrappers stay compressed), with
//!   their byte positions, for segment files and indexes.
//! - [`deep_records`] / [`decode_records`] yield every record with its absolute offset,
//!   decompressing wrappers the way Kafka's consumer does; [`visit_records`] does the same
//!   without copying keys and values, and [`entry_at`] with [`Entry::inner_records`] reads
//!   them one at a time.
//! - [`decode_columns`] / [`encode_columns`] do the same as Arrow-style columns.
//!
//! Bad input is reported as [`Error::Corrupted`](crate::Error::Corrupted) naming the entry's
//! byte position and offset; decoding never panics. A truncated *trailing* entry is not an
//! error: Kafka fetch responses end that way, so reading just stops there.

mod builder;
mod columns;
mod compression;
mod legacy;
mod libdeflate;
mod reader;

pub use builder::{BuiltEntry, MessageSetBuilder};
pub use columns::{
    decode_columns, encode_columns, RecordColumns, RecordColumnsView, TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME, TIMESTAMP_TYPE_NONE,
};
pub use reader::{
    decode_records, deep_records, entry_at, shallow_entries, visit_records, DeepRecords, Entry,
    InnerRecords, RecordView, ShallowEntries,
};

/// The message format version (the message's magic byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Magic {
    /// Kafka 0.8 / 0.9: no timestamp, absolute offsets inside compressed wrappers.
    V0,
    /// Kafka 0.10 (KIP-31/32): an i64 timestamp, relative offsets inside compressed wrappers.
    V1,
}

impl Magic {
    /// The byte stored in each message.
    pub fn as_byte(self) -> u8 {
        match self {
            Magic::V0 => 0,
            Magic::V1 => 1,
        }
    }

    /// `None` for any byte other than 0 or 1 (2 is the v2 record batch, not handled here).
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Magic::V0),
            1 => Some(Magic::V1),
            _ => None,
        }
    }
}

/// What a v1 timestamp means (attribute bit 3). Magic v0 has no timestamp and so no type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the message; on a wrapper it overrides the inner
    /// records' own timestamps.
    LogAppendTime,
}

/// The codec of a compressed wrapper (attribute bits 0-2). Zstd (codec 4) exists only in the v2
/// format, so it is rejected here the way Kafka rejects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
}

/// One record as a consumer sees it: absolute offset, timestamp and the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    pub offset: i64,
    /// Milliseconds since the epoch, or -1 (`NO_TIMESTAMP`): always -1 for magic v0.
    pub timestamp: i64,
    /// `None` for magic v0.
    pub timestamp_type: Option<TimestampType>,
    /// `None` is a null key, distinct from an empty one.
    pub key: Option<Vec<u8>>,
    /// `None` is a null value (a tombstone), distinct from an empty one.
    pub value: Option<Vec<u8>>,
}

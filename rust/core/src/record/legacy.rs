//! One message-set entry (spec 3.1 to 3.4): the `<i64 offset><i32 size>` framing and the
//! message `<u32 crc><i8 magic><i8 attributes>[<i64 timestamp>]<bytes key><bytes value>`,
//! where the CRC-32 (IEEE) covers everything from the magic byte to the end of the message.

use super::libdeflate::crc32;
use super::{Compression, Magic, TimestampType};
use crate::error::{Error, Result};
use crate::format::timestamped::NO_TIMESTAMP;

/// Bytes before each message: the i64 offset and the i32 message size (`LOG_OVERHEAD`).
pub(crate) const LOG_OVERHEAD: usize = 12;
/// Position of the magic byte within a message (after the CRC).
const MAGIC_OFFSET: usize = 4;
/// The smallest possible message of each version: header plus both lengths, with null key/value.
const RECORD_OVERHEAD_V0: usize = 14;
const RECORD_OVERHEAD_V1: usize = 22;
/// Attribute bits 0-2 hold the compression codec; bit 3 the timestamp type (v1 only).
const CODEC_MASK: u8 = 0x07;
const TIMESTAMP_TYPE_BIT: u8 = 0x08;
const ZSTD_CODEC: u8 = 4;
/// The i32 length that stands for a null key or value.
const NULL_LENGTH: i32 = -1;

/// Parse failures carry only the problem; the reader adds where it happened.
pub(crate) type Parsed<T> = std::result::Result<T, String>;

/// The attribute byte for a message of `magic` with this codec and timestamp type.
pub(crate) fn attributes(magic: Magic, compression: Compression, ts_type: TimestampType) -> u8 {
    let codec = match compression {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
    };
    match (magic, ts_type) {
        (Magic::V1, TimestampType::LogAppendTime) => codec | TIMESTAMP_TYPE_BIT,
        _ => codec,
    }
}

/// Bytes of one record of `magic` besides its key and value (what its size field counts).
fn record_overhead(magic: Magic) -> usize {
    match magic {
        Magic::V0 => RECORD_OVERHEAD_V0,
        Magic::V1 => RECORD_OVERHEAD_V1,
    }
}

/// Bytes of one entry of `magic` besides its key and value (the log overhead included).
pub(crate) fn entry_overhead(magic: Magic) -> usize {
    LOG_OVERHEAD + record_overhead(magic)
}

/// Appends one entry to `out`. The timestamp is written only for v1, as Kafka does.
pub(crate) fn write_entry(
    out: &mut Vec<u8>,
    offset: i64,
    magic: Magic,
    attributes: u8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<()> {
    let overhead = record_overhead(magic);
    let key_len = key.map_or(0, <[u8]>::len);
    let value_len = value.map_or(0, <[u8]>::len);
    let size = overhead
        .checked_add(key_len)
        .and_then(|n| n.checked_add(value_len))
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "message at offset {offset} with a {key_len}-byte key and a {value_len}-byte \
                 value exceeds the i32 message size"
            ))
        })?;

    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    let crc_position = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(magic.as_byte());
    out.push(attributes);
    if magic == Magic::V1 {
        out.extend_from_slice(&timestamp.to_be_bytes());
    }
    write_nullable_bytes(out, key);
    write_nullable_bytes(out, value);

    // The CRC covers the magic byte to the end of what was just written; both positions were
    // produced above, so these ranges are always inside `out`.
    let crc = crc32(&out[crc_position + 4..]);
    out[crc_position..crc_position + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// `bytes(i32)`: the length (or -1 for null) and the bytes. Lengths were checked by the caller.
fn write_nullable_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.extend_from_slice(&NULL_LENGTH.to_be_bytes()),
        Some(b) => {
            out.extend_from_slice(&(b.len() as i32).to_be_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// What is at the start of the unread part of a message set.
pub(crate) enum Framing<'a> {
    /// No complete entry is left: the data ended, or ends in a truncated entry.
    End,
    /// A complete entry; `message` is exactly `size` bytes.
    Entry { offset: i64, message: &'a [u8] },
    /// The header is readable but impossible.
    Corrupt { offset: i64, problem: String },
}

/// Reads the framing of the entry at the start of `bytes`, in the order Kafka's
/// `ByteBufferLogInputStream` checks it: a bad size or magic is an error even in a trailing
/// entry, while a body cut short is the end of the data.
pub(crate) fn next_entry(bytes: &[u8]) -> Framing<'_> {
    let (Some(offset), Some(size)) = (read_i64(bytes, 0), read_i32(bytes, 8)) else {
        return Framing::End;
    };
    let size = match usize::try_from(size) {
        Ok(size) if size >= RECORD_OVERHEAD_V0 => size,
        _ => {
            let problem = format!(
                "message size {size} is less than the minimum message size {RECORD_OVERHEAD_V0}"
            );
            return Framing::Corrupt { offset, problem };
        }
    };
    let Some(&magic) = bytes.get(LOG_OVERHEAD + MAGIC_OFFSET) else {
        return Framing::End;
    };
    if Magic::from_byte(magic).is_none() {
        let problem = format!("unknown magic {magic} (this decoder reads the legacy v0 and v1)");
        return Framing::Corrupt { offset, problem };
    }
    match LOG_OVERHEAD
        .checked_add(size)
        .and_then(|end| bytes.get(LOG_OVERHEAD..end))
    {
        Some(message) => Framing::Entry { offset, message },
        None => Framing::End,
    }
}

/// One message's fields, borrowed from the bytes it was parsed from.
pub(crate) struct Message<'a> {
    pub magic: Magic,
    pub compression: Compression,
    /// `NO_TIMESTAMP` for v0.
    pub timestamp: i64,
    /// `None` for v0.
    pub timestamp_type: Option<TimestampType>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Checks the CRC and every length of one message (the bytes after the entry's size field).
/// Stricter than Kafka in one way: bytes left after the value are rejected.
pub(crate) fn parse_message(message: &[u8]) -> Parsed<Message<'_>> {
    let stored_crc = read_u32(message, 0).ok_or("message has no CRC")?;
    let checked = message.get(MAGIC_OFFSET..).ok_or("message has no CRC")?;
    let computed_crc = crc32(checked);
    if stored_crc != computed_crc {
        return Err(format!(
            "CRC mismatch: stored {stored_crc:#010x}, computed {computed_crc:#010x}"
        ));
    }

    let magic_byte = *message
        .get(MAGIC_OFFSET)
        .ok_or("message has no magic byte")?;
    let magic =
        Magic::from_byte(magic_byte).ok_or_else(|| format!("unknown magic {magic_byte}"))?;
    let attributes = *message
        .get(MAGIC_OFFSET + 1)
        .ok_or("message has no attributes")?;
    let compression = match attributes & CODEC_MASK {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        ZSTD_CODEC => return Err("zstd compression (codec 4) is not valid in magic v0/v1".into()),
        codec => return Err(format!("unknown compression codec {codec}")),
    };

    let mut position = MAGIC_OFFSET + 2;
    let (timestamp, timestamp_type) = match magic {
        Magic::V0 => (NO_TIMESTAMP, None),
        Magic::V1 => {
            let timestamp = read_i64(message, position).ok_or_else(|| {
                format!(
                    "v1 message of {} bytes is shorter than the minimum {RECORD_OVERHEAD_V1}",
                    message.len()
                )
            })?;
            position += 8;
            let ts_type = if attributes & TIMESTAMP_TYPE_BIT == 0 {
                TimestampType::CreateTime
            } else {
                TimestampType::LogAppendTime
            };
            (timestamp, Some(ts_type))
        }
    };
    let key = read_nullable_bytes(message, &mut position, "key")?;
    let value = read_nullable_bytes(message, &mut position, "value")?;
    if position != message.len() {
        return Err(format!(
            "{} bytes follow the value inside the message",
            message.len() - position
        ));
    }
    Ok(Message {
        magic,
        compression,
        timestamp,
        timestamp_type,
        key,
        value,
    })
}

/// Reads `bytes(i32)` at `*position` and moves past it.
fn read_nullable_bytes<'a>(
    message: &'a [u8],
    position: &mut usize,
    what: &str,
) -> Parsed<Option<&'a [u8]>> {
    let length = read_i32(message, *position)
        .ok_or_else(|| format!("message ends before its {what} length"))?;
    *position += 4;
    if length == NULL_LENGTH {
        return Ok(None);
    }
    let bytes = usize::try_from(length)
        .ok()
        .and_then(|len| message.get(*position..position.checked_add(len)?))
        .ok_or_else(|| {
            format!(
                "{what} length {length} does not fit the {} bytes left in the message",
                message.len().saturating_sub(*position)
            )
        })?;
    *position += bytes.len();
    Ok(Some(bytes))
}

/// `N` bytes at `position`, or `None` past the end.
fn read_array<const N: usize>(bytes: &[u8], position: usize) -> Option<[u8; N]> {
    bytes
        .get(position..position.checked_add(N)?)?
        .try_into()
        .ok()
}

fn read_i64(bytes: &[u8], position: usize) -> Option<i64> {
    read_array(bytes, position).map(i64::from_be_bytes)
}

fn read_i32(bytes: &[u8], position: usize) -> Option<i32> {
    read_array(bytes, position).map(i32::from_be_bytes)
}

fn read_u32(bytes: &[u8], position: usize) -> Option<u32> {
    read_array(bytes, position).map(u32::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(magic: Magic, key: Option<&[u8]>, value: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        let attributes = attributes(magic, Compression::None, TimestampType::CreateTime);
        write_entry(&mut out, 0, magic, attributes, 9_999_999, key, value).unwrap();
        out
    }

    #[test]
    fn crc_matches_spec_6_1() {
        let crc = |bytes: &[u8]| read_u32(bytes, LOG_OVERHEAD).unwrap();
        assert_eq!(
            crc(&entry(Magic::V0, Some(b"test"), Some(b"Super"))),
            278_251_978
        );
        assert_eq!(
            crc(&entry(Magic::V1, Some(b"test"), Some(b"Super"))),
            -2_095_076_219i32 as u32
        );
    }

    #[test]
    fn framing_reports_short_and_bad_headers() {
        let bytes = entry(Magic::V1, None, Some(b"v"));
        assert!(matches!(
            next_entry(&bytes),
            Framing::Entry { offset: 0, .. }
        ));
        assert!(matches!(next_entry(&bytes[..11]), Framing::End));
        assert!(matches!(
            next_entry(&bytes[..bytes.len() - 1]),
            Framing::End
        ));
        let mut negative = bytes.clone();
        negative[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            next_entry(&negative[..12]),
            Framing::Corrupt { .. }
        ));
    }

    #[test]
    fn parse_rejects_lengths_past_the_message() {
        let mut bytes = entry(Magic::V0, Some(b"k"), None);
        // key length 1 -> 100, then fix the CRC so only the length is wrong.
        bytes[18..22].copy_from_slice(&100i32.to_be_bytes());
        let crc = crc32(&bytes[16..]);
        bytes[12..16].copy_from_slice(&crc.to_be_bytes());
        let error = parse_message(&bytes[LOG_OVERHEAD..]).err().unwrap();
        assert!(error.contains("key length 100"), "{error}");
    }
}

//! The primitive types of the rebalance metadata (spec Conventions and 2.2): big-endian integers,
//! UUIDs, `bytes(i32)`, the generated messages' `string(i16)`, Java's `writeUTF` (u16 length +
//! modified UTF-8) and `writeChars` (UTF-16BE code units), and counted arrays.
//!
//! [`Reader`] never panics and never allocates from a length it has not checked against the bytes
//! that are left; every error is [`Error::Corrupted`] naming the message, version and field.

use super::modified_utf8;
use crate::error::{Error, Result};

/// A cursor over received bytes that knows what it is reading, for error messages.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    /// What is being decoded, e.g. "AssignmentInfo v7".
    context: String,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], context: impl Into<String>) -> Self {
        Reader {
            bytes,
            position: 0,
            context: context.into(),
        }
    }

    /// Replaces the context once the version is known.
    pub fn set_context(&mut self, context: impl Into<String>) {
        self.context = context.into();
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// An `Error::Corrupted` that says where the problem is.
    pub fn corrupted(&self, field: &str, problem: impl std::fmt::Display) -> Error {
        Error::Corrupted(format!("{}: {field}: {problem}", self.context))
    }

    fn take(&mut self, length: usize, field: &str) -> Result<&'a [u8]> {
        let end = self
            .position
            .checked_add(length)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                self.corrupted(
                    field,
                    format!(
                        "needs {length} bytes at byte {}, only {} left",
                        self.position,
                        self.remaining()
                    ),
                )
            })?;
        let taken = &self.bytes[self.position..end];
        self.position = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    pub fn i8(&mut self, field: &str) -> Result<i8> {
        self.array(field).map(i8::from_be_bytes)
    }

    pub fn i32(&mut self, field: &str) -> Result<i32> {
        self.array(field).map(i32::from_be_bytes)
    }

    pub fn i64(&mut self, field: &str) -> Result<i64> {
        self.array(field).map(i64::from_be_bytes)
    }

    /// A UUID: most significant i64, then least significant i64, i.e. 16 big-endian bytes.
    pub fn uuid(&mut self, field: &str) -> Result<[u8; 16]> {
        self.array(field)
    }

    /// An i32 element count, checked so that `count` elements of at least `min_element_size`
    /// bytes each fit in what is left: a huge count fails here instead of in an allocation.
    pub fn count(&mut self, field: &str, min_element_size: usize) -> Result<usize> {
        let count = self.i32(field)?;
        let fits = usize::try_from(count).ok().filter(|&n| {
            n.checked_mul(min_element_size)
                .is_some_and(|needed| needed <= self.remaining())
        });
        fits.ok_or_else(|| {
            self.corrupted(
                field,
                format!(
                    "count {count} does not fit the {} bytes left",
                    self.remaining()
                ),
            )
        })
    }

    /// `bytes(i32)`, non-nullable.
    pub fn bytes(&mut self, field: &str) -> Result<&'a [u8]> {
        let length = self.i32(field)?;
        let length = usize::try_from(length)
            .map_err(|_| self.corrupted(field, format!("negative length {length}")))?;
        self.take(length, field)
    }

    /// `bytes(i32)` holding UTF-8 text.
    pub fn utf8_bytes(&mut self, field: &str) -> Result<String> {
        let bytes = self.bytes(field)?;
        self.utf8(bytes, field)
    }

    /// The generated messages' nullable `string`: i16 length (-1 = null) and UTF-8.
    pub fn nullable_string(&mut self, field: &str) -> Result<Option<String>> {
        let length = i16::from_be_bytes(self.array(field)?);
        if length == -1 {
            return Ok(None);
        }
        let length = usize::try_from(length)
            .map_err(|_| self.corrupted(field, format!("negative string length {length}")))?;
        let bytes = self.take(length, field)?;
        self.utf8(bytes, field).map(Some)
    }

    /// Java's `readUTF`: u16 byte count, then modified UTF-8.
    pub fn java_utf(&mut self, field: &str) -> Result<String> {
        let length = u16::from_be_bytes(self.array(field)?);
        let bytes = self.take(usize::from(length), field)?;
        modified_utf8::decode(bytes).map_err(|problem| self.corrupted(field, problem))
    }

    /// `char_count` UTF-16BE code units, as `writeChars` wrote them.
    pub fn java_chars(&mut self, char_count: usize, field: &str) -> Result<String> {
        let length = char_count
            .checked_mul(2)
            .ok_or_else(|| self.corrupted(field, format!("{char_count} chars is too many")))?;
        let bytes = self.take(length, field)?;
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
            .collect();
        String::from_utf16(&units)
            .map_err(|_| self.corrupted(field, "UTF-16 chars hold an unpaired surrogate"))
    }

    fn utf8(&self, bytes: &[u8], field: &str) -> Result<String> {
        String::from_utf8(bytes.to_vec())
            .map_err(|e| self.corrupted(field, format!("invalid UTF-8: {e}")))
    }

    /// Known versions must be read to the last byte: anything left means the layout is wrong.
    pub fn finish(self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            left => Err(Error::Corrupted(format!(
                "{}: {left} bytes left after the last field",
                self.context
            ))),
        }
    }
}

/// Appends big-endian values and Java's string encodings; lengths are checked, not truncated.
pub(crate) struct Writer {
    pub out: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { out: Vec::new() }
    }

    pub fn i8(&mut self, value: i8) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub fn i32(&mut self, value: i32) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub fn i64(&mut self, value: i64) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    /// An element count or a length as i32.
    pub fn count(&mut self, count: usize, field: &str) -> Result<()> {
        let count = i32::try_from(count).map_err(|_| {
            Error::InvalidArgument(format!("{field}: {count} does not fit an i32 count"))
        })?;
        self.i32(count);
        Ok(())
    }

    /// `bytes(i32)`.
    pub fn bytes(&mut self, bytes: &[u8], field: &str) -> Result<()> {
        self.count(bytes.len(), field)?;
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    /// The generated messages' nullable `string`: i16 length (-1 = null) and UTF-8.
    pub fn nullable_string(&mut self, text: Option<&str>, field: &str) -> Result<()> {
        let Some(text) = text else {
            self.out.extend_from_slice(&(-1i16).to_be_bytes());
            return Ok(());
        };
        let length = i16::try_from(text.len()).map_err(|_| {
            Error::InvalidArgument(format!(
                "{field}: {} UTF-8 bytes is longer than the 32767 a string can hold",
                text.len()
            ))
        })?;
        self.out.extend_from_slice(&length.to_be_bytes());
        self.out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    /// Java's `writeUTF`: u16 byte count, then modified UTF-8.
    pub fn java_utf(&mut self, text: &str, field: &str) -> Result<()> {
        let bytes = modified_utf8::encode(text);
        let length = u16::try_from(bytes.len()).map_err(|_| {
            Error::InvalidArgument(format!(
                "{field}: {} bytes of modified UTF-8 is longer than writeUTF's 65535",
                bytes.len()
            ))
        })?;
        self.out.extend_from_slice(&length.to_be_bytes());
        self.out.extend_from_slice(&bytes);
        Ok(())
    }

    /// Java's `writeChars`: the UTF-16BE code units, no length.
    pub fn java_chars(&mut self, text: &str) {
        for unit in text.encode_utf16() {
            self.out.extend_from_slice(&unit.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked_against_the_bytes_left() {
        let bytes = [0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
        let mut reader = Reader::new(&bytes, "Test v1");
        let error = reader.count("things", 8).unwrap_err();
        assert!(error
            .to_string()
            .contains("Test v1: things: count 2147483647"));

        let bytes = [0xff, 0xff, 0xff, 0xff];
        assert!(Reader::new(&bytes, "Test").count("things", 1).is_err());
        let bytes = [0, 0, 0, 2, 9, 9];
        assert_eq!(Reader::new(&bytes, "Test").count("things", 1).unwrap(), 2);
    }

    #[test]
    fn nullable_string_reads_null_and_rejects_other_negatives() {
        assert_eq!(
            Reader::new(&[0xff, 0xff], "T")
                .nullable_string("s")
                .unwrap(),
            None
        );
        assert!(Reader::new(&[0xff, 0xfe], "T")
            .nullable_string("s")
            .is_err());
    }
}

//! Java's *modified* UTF-8, as written by `DataOutputStream.writeUTF` (spec Conventions): every
//! UTF-16 code unit is encoded on its own, so U+0000 becomes `C0 80` and a supplementary
//! character becomes two 3-byte surrogate encodings (6 bytes, where UTF-8 uses 4).

/// The modified UTF-8 bytes of `text`, without the u16 length prefix.
pub fn encode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for unit in text.encode_utf16() {
        match unit {
            0x0001..=0x007F => out.push(unit as u8),
            // U+0000 is the two-byte form so that the bytes never contain a zero.
            0x0000 | 0x0080..=0x07FF => {
                out.push(0xC0 | (unit >> 6) as u8);
                out.push(0x80 | (unit & 0x3F) as u8);
            }
            _ => {
                out.push(0xE0 | (unit >> 12) as u8);
                out.push(0x80 | ((unit >> 6) & 0x3F) as u8);
                out.push(0x80 | (unit & 0x3F) as u8);
            }
        }
    }
    out
}

/// Decodes modified UTF-8 the way `DataInputStream.readUTF` does (it also accepts a raw zero byte
/// and over-long forms). Java strings may hold unpaired surrogates; Rust strings cannot, so those
/// are an error here. The error names the byte position.
pub fn decode(bytes: &[u8]) -> Result<String, String> {
    let mut units = Vec::with_capacity(bytes.len());
    let mut position = 0;
    while let Some(&first) = bytes.get(position) {
        let continuation = |offset: usize| -> Result<u16, String> {
            match bytes.get(position + offset) {
                Some(&byte) if byte & 0xC0 == 0x80 => Ok(u16::from(byte & 0x3F)),
                Some(_) => Err(format!(
                    "malformed modified UTF-8: byte {} is not a continuation byte",
                    position + offset
                )),
                None => Err(format!(
                    "malformed modified UTF-8: the character at byte {position} is cut short"
                )),
            }
        };
        let (unit, width) = match first >> 4 {
            0..=7 => (u16::from(first), 1),
            12 | 13 => ((u16::from(first & 0x1F) << 6) | continuation(1)?, 2),
            14 => (
                (u16::from(first & 0x0F) << 12) | (continuation(1)? << 6) | continuation(2)?,
                3,
            ),
            _ => {
                return Err(format!(
                "malformed modified UTF-8: byte {position} ({first:#04x}) cannot start a character"
            ))
            }
        };
        units.push(unit);
        position += width;
    }
    String::from_utf16(&units).map_err(|_| "modified UTF-8 holds an unpaired surrogate".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_is_plain_utf8() {
        assert_eq!(encode("topic-1"), b"topic-1");
        assert_eq!(decode(b"topic-1").unwrap(), "topic-1");
    }
}

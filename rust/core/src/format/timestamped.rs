//! `ValueAndTimestamp` bytes (spec 1.1, 1.2): `<i64 BE timestamp><raw value>`.

use crate::error::{Error, Result};

/// Timestamp Kafka Streams gives values that were stored without one (`NO_TIMESTAMP`).
pub const NO_TIMESTAMP: i64 = -1;
const TIMESTAMP_LEN: usize = 8;

/// Prefixes `raw` with the big-endian timestamp.
pub fn encode(timestamp: i64, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TIMESTAMP_LEN + raw.len());
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.extend_from_slice(raw);
    out
}

/// Splits stored bytes into timestamp and raw value.
pub fn decode(bytes: &[u8]) -> Result<(i64, &[u8])> {
    if bytes.len() < TIMESTAMP_LEN {
        return Err(Error::Corrupted(format!(
            "timestamped value has {} bytes, fewer than the 8-byte timestamp prefix",
            bytes.len()
        )));
    }
    let (ts, raw) = bytes.split_at(TIMESTAMP_LEN);
    let mut buf = [0u8; TIMESTAMP_LEN];
    buf.copy_from_slice(ts);
    Ok((i64::from_be_bytes(buf), raw))
}

/// `TimestampedBytesStore.convertToTimestampedFormat`: a legacy plain value read through a
/// timestamped store gets timestamp -1.
pub fn convert_legacy(plain: &[u8]) -> Vec<u8> {
    encode(NO_TIMESTAMP, plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn spec_6_2_vectors() {
        assert_eq!(hex(&convert_legacy(b"1")), "ffffffffffffffff31");
        assert_eq!(hex(&convert_legacy(b"4444")), "ffffffffffffffff34343434");
        assert_eq!(hex(&encode(23, b"abc")), "0000000000000017616263");
    }

    #[test]
    fn decode_round_trip_and_empty_value() {
        let bytes = encode(-5, b"");
        assert_eq!(bytes.len(), 8);
        assert_eq!(decode(&bytes).unwrap(), (-5, &b""[..]));
        assert!(matches!(decode(b"short"), Err(Error::Corrupted(_))));
    }
}

//! The KIP-1035 `offsets` column family: changelog offset per topic-partition and the
//! OPEN/CLOSED `status` marker, all values i64 big-endian.

use crate::error::{Error, Result};

pub const OFFSETS_CF: &str = "offsets";
pub const STATUS_KEY: &[u8] = b"status";
pub const STATUS_OPEN: i64 = 1;
pub const STATUS_CLOSED: i64 = 0;
/// kstate's own entry: the stream time of a TTL store at its last commit. Kafka Streams reads
/// only `status`, `position` and its topic-partition keys, so it passes this one by.
pub const TTL_STREAM_TIME_KEY: &str = "kstate.ttl.stream-time";
/// kstate's own entry in a segment of a window or session store: the store's stream time at a
/// commit that wrote this segment alone (recorded with the offset, without the commit intent).
pub const SEGMENTED_STREAM_TIME_KEY: &str = "kstate.segmented.stream-time";

/// Key of a changelog offset: `TopicPartition.toString()`, i.e. `<topic>-<partition>`.
pub fn offset_key(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

pub fn encode(value: i64) -> [u8; 8] {
    value.to_be_bytes()
}

pub fn decode(key: &[u8], bytes: &[u8]) -> Result<i64> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::Corrupted(format!(
            "offsets entry {:?} has {} bytes, expected an 8-byte big-endian long",
            String::from_utf8_lossy(key),
            bytes.len()
        ))
    })?;
    Ok(i64::from_be_bytes(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_6_2_offsets_entry() {
        assert_eq!(
            offset_key("app-store-changelog", 3).as_bytes(),
            b"app-store-changelog-3"
        );
        assert_eq!(encode(1234), [0, 0, 0, 0, 0, 0, 4, 0xd2]);
        assert_eq!(decode(STATUS_KEY, &encode(STATUS_OPEN)).unwrap(), 1);
        assert!(decode(STATUS_KEY, b"\x01").is_err());
    }
}

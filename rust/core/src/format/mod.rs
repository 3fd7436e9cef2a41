//! Kafka Streams' on-disk byte formats that stores read and write: values with timestamps, window
//! and session keys, the `.checkpoint` file, the `offsets` column family, Arrow binary buffers.
//! Each format has one owner here; the stores above only call it.

pub mod checkpoint;
pub mod key_schema;
pub mod offsets;
pub mod packed;
pub mod timestamped;

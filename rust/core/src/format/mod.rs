//! Kafka Streams' on-disk byte formats that stores read and write: values with timestamps, window
//! and session keys, the `.checkpoint` file, the `offsets` column family, Arrow binary buffers;
//! and RocksDB's serialized write batch, which the overlay builds. Each format has one owner here;
//! the stores above only call it.

pub mod checkpoint;
pub mod key_schema;
pub mod offsets;
pub mod packed;
pub mod timestamped;
pub mod write_batch;

//! kstate's core: Kafka Streams-compatible state store bytes and transactional RocksDB stores.
//! Pure Rust (no Python); the `kstate-python` crate binds it as `kstate._core`.

pub mod changelog;
pub mod checkpoint;
pub mod committed;
pub mod error;
pub mod key_range;
pub mod key_schema;
pub mod log;
pub mod logged_store;
pub mod memory;
pub mod merge;
pub mod offsets;
pub mod overlay;
pub mod packed;
pub mod read_cache;
pub mod rebalance;
pub mod record;
pub mod rocks;
pub mod segments;
pub mod spill;
pub mod store;
pub mod timestamped;
pub mod upgrade;

pub use error::{Error, Result};
pub use key_range::{Direction, KeyRange};
pub use rocks::ValueFormat;
pub use store::{CommitProgress, KeyValueStore, OpenReport, ReadCommittedView, StoreOptions};

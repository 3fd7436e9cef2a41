//! kstate's core: Kafka Streams-compatible state store bytes and transactional RocksDB stores.
//! Pure Rust (no Python); the `kstate-python` crate binds it as `kstate._core`.

pub mod changelog;
pub mod checkpoint;
pub mod commit_intent;
pub mod committed;
pub mod error;
pub mod inspect;
pub mod key_range;
pub mod key_schema;
pub mod log;
pub mod logged_store;
pub mod memory;
pub mod memory_budget;
pub mod merge;
pub mod offsets;
pub mod out_of_order;
pub mod overlay;
pub mod packed;
pub mod read_cache;
pub mod rebalance;
pub mod record;
pub mod rocks;
pub mod rocks_options;
pub mod row_codec;
pub mod segmented;
pub mod segments;
pub mod session_store;
pub mod spark_hash;
pub mod spill;
pub mod store;
pub mod timestamped;
pub mod ttl;
pub mod upgrade;
pub mod window_store;

pub use error::{Error, Result};
pub use key_range::{Direction, KeyRange};
pub use memory_budget::{MemoryBudget, ProcessMemory, StoreMemory, StoreUsage};
pub use rocks::ValueFormat;
pub use rocks_options::RocksConfig;
pub use segmented::{SegmentedOptions, SegmentedStore, SegmentedView};
pub use session_store::SessionStore;
pub use store::{CommitProgress, KeyValueStore, OpenReport, ReadCommittedView, StoreOptions};
pub use ttl::{Ttl, TtlClock};
pub use window_store::WindowStore;

//! kstate's core: Kafka Streams-compatible state store bytes and transactional RocksDB stores.
//! Pure Rust (no Python); the `kstate-python` crate binds it as `kstate._core`.

pub mod error;
#[cfg(target_os = "linux")]
pub mod file_watch;
pub mod format;
pub mod log;
pub mod logged;
pub mod platform;
pub mod rebalance;
pub mod record;
pub mod segmented;
pub mod snapshot;
pub mod spark;
pub mod store;
pub mod tools;

pub use error::{Error, Result};
pub use segmented::session_store::SessionStore;
pub use segmented::window_store::WindowStore;
pub use segmented::{SegmentedOptions, SegmentedStore, SegmentedView};
pub use store::key_range::{Direction, KeyRange};
pub use store::memory_budget::{MemoryBudget, ProcessMemory, StoreMemory, StoreUsage};
pub use store::rocks::ValueFormat;
pub use store::rocks_options::RocksConfig;
pub use store::ttl::{Ttl, TtlClock};
pub use store::{CommitProgress, KeyValueStore, OpenReport, ReadCommittedView, StoreOptions};

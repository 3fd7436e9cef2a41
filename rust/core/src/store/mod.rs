//! The transactional key-value store and its layers, top to bottom: staged writes (`overlay`),
//! spilled writes (`spill`), recently read values (`read_cache`), committed state (`committed`:
//! `rocks` or `memory`), merged by `merge` for range scans. `memory_budget` and `rocks_options`
//! bound and tune every RocksDB a process opens; `ttl` and `out_of_order` are read/write rules;
//! `key_order` sorts a batch's many keys.

pub mod committed;
pub mod key_order;
pub mod key_range;
pub mod key_value;
pub mod memory;
pub mod memory_budget;
pub mod merge;
pub mod out_of_order;
pub mod overlay;
pub mod read_cache;
pub mod rocks;
pub mod rocks_options;
pub mod spill;
pub mod ttl;
pub mod wal_files;

pub use key_value::{
    CommitProgress, Durability, KeyValueStore, OpenReport, ReadCommittedView, StoreOptions,
};

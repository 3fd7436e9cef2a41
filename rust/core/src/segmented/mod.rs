//! Stores split into time segments (one `KeyValueStore` each): the segmented base with its
//! commit-intent file and its snapshots, and the window and session stores built on it.

pub mod commit_intent;
pub mod segmented_store;
pub mod segments;
pub mod session_store;
pub mod snapshot;
pub mod window_store;

pub use segmented_store::{SegmentedOptions, SegmentedStore, SegmentedView, StorePuts};

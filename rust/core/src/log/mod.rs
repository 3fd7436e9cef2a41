//! A Kafka-compatible partition log on disk (spec 3.6, 3.8): segments of legacy message sets
//! (format v1 written, v0 and v1 read) with KIP-33 offset and time indexes, in the same files
//! and layout as a Kafka broker's log directory.
//!
//! - [`Partition`]: one partition directory. [`Partition::open`] recovers from a crash
//!   (torn tail, stale indexes, interrupted compaction); then append (timestamps validated,
//!   offsets assigned, segments rolled), flush, read, look up offsets by time, truncate,
//!   delete by retention, and compact; take in segment files written elsewhere, offsets kept
//!   ([`Partition::append_fetched`]).
//! - [`compact_objects`]: compaction of segment files outside a partition (a remote log's
//!   immutable objects).
//! - [`Topic`]: the partitions of one topic under a log directory (`<topic>-<partition>/`).
//! - [`LogConfig`]: Kafka's topic configs that apply.
//!
//! Durability: appends are written to the active segment's file at once but are durable only
//! after [`Partition::flush`]. Every other change of files (roll, truncation, retention,
//! compaction) is durable when it returns. Only the active segment can lose data in a crash,
//! and [`Partition::open`] cuts it back to its last whole, CRC-valid entry.

mod clean_close;
mod compaction;
mod config;
mod fetched;
mod file_io;
mod file_names;
mod index_file;
mod indexing;
mod object_compaction;
mod offset_index;
mod partition;
mod read;
mod recovery;
mod retention;
mod scan;
mod segment;
mod sparse_index;
mod time_index;
mod timestamp_validation;
mod topic;
mod truncate;

pub use compaction::{CleanedSegments, CompactionJob, CompactionReport};
pub use config::{CleanupPolicy, LogConfig};
pub use fetched::FetchedAppend;
pub(crate) use file_io::{read_number_file, write_number_file};
pub use file_names::filename_prefix;
pub use object_compaction::{compact_objects, CompactedObject, SegmentObject};
pub use offset_index::OffsetIndexEntry;
pub use partition::{records_deleted_before, AppendInfo, NewRecord, Partition, SegmentInfo};
pub use read::TimestampAndOffset;
pub use recovery::OpenReport;
pub use retention::RetentionReport;
pub use segment::TruncatedTail;
pub use time_index::TimeIndexEntry;
pub use timestamp_validation::INVALID_TIMESTAMP;
pub use topic::{partition_dir, Topic};

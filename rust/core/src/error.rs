//! The one error type of the core. Each variant is one exception class of `kstate.errors`; the
//! binding maps them by one exhaustive match (`rust/python/src/errors.rs`), never by message.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The store (or the store a view or iterator belongs to) is closed.
    Closed(String),
    /// A call that is not valid in the store's current state or configuration.
    InvalidState(String),
    /// A logged store's offset is below its changelog's start: compaction or retention removed
    /// what it would replay, so its local state must be restored from scratch.
    StoreBehindChangelog(String),
    /// A store needs changelog records that were deleted because snapshots hold them (the
    /// history below the oldest snapshot kept), and has no snapshot to start from: restoring
    /// from the changelog would skip committed writes, so nothing was replayed.
    ChangelogTruncated(String),
    /// An argument that can never be valid (bad bounds, bad config value).
    InvalidArgument(String),
    /// A log rejected a batch whose timestamps are out of range (Kafka's `INVALID_TIMESTAMP`,
    /// error 32); nothing of the batch was written. The caller's fault, like `InvalidArgument`.
    InvalidTimestamp(String),
    /// Rebalance metadata the group protocol cannot reconcile (Kafka's `TaskAssignmentException`):
    /// a subscription or assignment newer than the other side can take.
    TaskAssignment(String),
    /// Bytes on disk that do not have the layout they must have.
    Corrupted(String),
    /// RocksDB or the file system failed.
    Storage(String),
    /// RocksDB found its own files damaged (its `Corruption` status): a store that is a copy of
    /// a changelog can be rebuilt from it.
    StorageCorrupted(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Closed(m)
            | Error::InvalidState(m)
            | Error::StoreBehindChangelog(m)
            | Error::ChangelogTruncated(m)
            | Error::InvalidArgument(m)
            | Error::InvalidTimestamp(m)
            | Error::TaskAssignment(m)
            | Error::Corrupted(m)
            | Error::Storage(m)
            | Error::StorageCorrupted(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// A RocksDB failure with `context` before its status: `StorageCorrupted` when RocksDB's
    /// status is `Corruption` (decided by the status's kind, not by the message), else `Storage`.
    pub fn rocksdb(e: rocksdb::Error, context: impl fmt::Display) -> Self {
        let corrupted = e.kind() == rocksdb::ErrorKind::Corruption;
        let message = format!("{context}: {}", e.into_string());
        if corrupted {
            Error::StorageCorrupted(message)
        } else {
            Error::Storage(message)
        }
    }
}

impl From<rocksdb::Error> for Error {
    fn from(e: rocksdb::Error) -> Self {
        Error::rocksdb(e, "RocksDB")
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Storage(format!("I/O: {e}"))
    }
}

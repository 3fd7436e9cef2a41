//! The one error type of the core. The binding layer maps each variant to a `kstate.errors` class.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The store (or the store a view or iterator belongs to) is closed.
    Closed(String),
    /// A call that is not valid in the store's current state or configuration.
    InvalidState(String),
    /// An argument that can never be valid (bad bounds, bad config value).
    InvalidArgument(String),
    /// Bytes on disk that do not have the layout they must have.
    Corrupted(String),
    /// RocksDB or the file system failed.
    Storage(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Closed(m)
            | Error::InvalidState(m)
            | Error::InvalidArgument(m)
            | Error::Corrupted(m)
            | Error::Storage(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<rocksdb::Error> for Error {
    fn from(e: rocksdb::Error) -> Self {
        Error::Storage(format!("RocksDB: {}", e.into_string()))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Storage(format!("I/O: {e}"))
    }
}

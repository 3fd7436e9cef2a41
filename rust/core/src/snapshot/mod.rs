//! Snapshots of a committed store, published beside its changelog so that a restore loads
//! files (bound by bytes per second) and replays only the changelog after them (bound by
//! records per second): a RocksDB checkpoint of the committed state
//! ([`crate::store::key_value::CommittedFiles`]), its files with sizes and content hashes
//! ([`files`]), and the manifest naming them and the changelog offset they hold ([`manifest`],
//! the byte format's one owner). Where the files go and when is `kstate.log.snapshots`' work.

pub mod files;
pub mod manifest;

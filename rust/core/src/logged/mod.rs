//! Stores with a changelog: the changelog partition and its publication marker, and the store +
//! changelog pair committed in KIP-892 order (restore, replay).

pub mod changelog;
pub mod logged_store;

//! Offline work on store directories: read-only inspection and the KIP-258 format upgrade.

pub mod inspect;
pub mod upgrade;

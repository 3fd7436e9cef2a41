//! One segment's index in memory (the offset index or the time index): sparse entries in
//! offset order, each offset relative to the segment's base offset as the files store it.

use super::index_file::IndexEntry;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SparseIndex<E> {
    base_offset: i64,
    entries: Vec<E>,
}

impl<E: IndexEntry> SparseIndex<E> {
    pub(crate) fn new(base_offset: i64, entries: Vec<E>) -> Self {
        Self {
            base_offset,
            entries,
        }
    }

    pub(crate) fn entries(&self) -> &[E] {
        &self.entries
    }

    /// Drops the entries for offsets `>= offset`.
    pub(crate) fn truncate_to(&mut self, offset: i64) {
        let keep = self
            .entries
            .partition_point(|entry| self.absolute(entry) < offset);
        self.entries.truncate(keep);
    }

    pub(super) fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub(super) fn last(&self) -> Option<&E> {
        self.entries.last()
    }

    pub(super) fn push(&mut self, entry: E) {
        self.entries.push(entry);
    }

    /// `offset` relative to the base offset, if an entry can hold it (an i32).
    pub(super) fn relative(&self, offset: i64) -> Option<i32> {
        offset
            .checked_sub(self.base_offset)
            .and_then(|relative| i32::try_from(relative).ok())
    }

    pub(super) fn absolute(&self, entry: &E) -> i64 {
        self.base_offset
            .saturating_add(i64::from(entry.relative_offset()))
    }
}

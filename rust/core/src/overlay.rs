//! Uncommitted writes of a transactional store: an ordered map of staged puts (`Some`) and
//! deletes (`None`) with the byte accounting `statestore.uncommitted.max.bytes` is checked against.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::committed::Write;
use crate::key_range::{Direction, KeyRange};

#[derive(Debug, Default)]
pub struct Overlay {
    staged: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    bytes: usize,
}

fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len)
}

impl Overlay {
    /// Stages a put (`Some`) or a delete (`None`); returns whether `key` was not staged before.
    pub fn stage(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let value = value.map(<[u8]>::to_vec);
        self.bytes += entry_bytes(key, &value);
        if let Some(old) = self.staged.get_mut(key) {
            self.bytes -= entry_bytes(key, old);
            *old = value;
            false
        } else {
            self.staged.insert(key.to_vec(), value);
            true
        }
    }

    /// `None`: not staged; `Some(None)`: staged delete; `Some(Some(v))`: staged value.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.staged.get(key).map(Option::as_deref)
    }

    /// Sum of key and value lengths of the staged writes (Kafka's uncommitted bytes).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.staged.len()
    }

    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    /// Empties the overlay, handing over its writes in key order.
    pub fn take(&mut self) -> impl Iterator<Item = (Vec<u8>, Option<Vec<u8>>)> {
        self.bytes = 0;
        std::mem::take(&mut self.staged).into_iter()
    }

    pub fn clear(&mut self) {
        self.staged.clear();
        self.bytes = 0;
    }

    /// Staged writes in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.staged
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// Staged writes inside `range`, in `direction` order.
    pub fn range<'a>(
        &'a self,
        range: &KeyRange,
        direction: Direction,
    ) -> Box<dyn Iterator<Item = Write<'a>> + 'a> {
        if range.is_empty() {
            return Box::new(std::iter::empty());
        }
        let lower = range
            .lower
            .as_ref()
            .map_or(Bound::Unbounded, |l| Bound::Included(l.clone()));
        let upper = range
            .upper
            .as_ref()
            .map_or(Bound::Unbounded, |u| Bound::Excluded(u.clone()));
        let items = self
            .staged
            .range::<Vec<u8>, _>((lower, upper))
            .map(|(k, v)| (k.as_slice(), v.as_deref()));
        match direction {
            Direction::Forward => Box::new(items),
            Direction::Reverse => Box::new(items.rev()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_follows_overwrites_and_deletes() {
        let mut o = Overlay::default();
        assert!(o.stage(b"k1", Some(b"12345")));
        assert_eq!(o.bytes(), 7);
        assert!(!o.stage(b"k1", Some(b"1")));
        assert_eq!(o.bytes(), 3);
        o.stage(b"k1", None);
        assert_eq!(o.bytes(), 2);
        assert_eq!(o.get(b"k1"), Some(None));
        assert_eq!(o.get(b"k2"), None);
        o.clear();
        assert_eq!((o.bytes(), o.len()), (0, 0));
    }

    #[test]
    fn range_respects_bounds_and_direction() {
        let mut o = Overlay::default();
        for k in [b"a", b"b", b"c", b"d"] {
            o.stage(k, Some(k));
        }
        let r = KeyRange::inclusive(Some(b"b"), Some(b"c"));
        let fwd: Vec<_> = o
            .range(&r, Direction::Forward)
            .map(|(k, _)| k.to_vec())
            .collect();
        let rev: Vec<_> = o
            .range(&r, Direction::Reverse)
            .map(|(k, _)| k.to_vec())
            .collect();
        assert_eq!(fwd, vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(rev, vec![b"c".to_vec(), b"b".to_vec()]);
    }
}

//! Half-open byte ranges `[lower, upper)` that every scan is normalized to.

/// The smallest key strictly greater than `key` in bytewise order.
pub fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// Upper bound of a prefix scan (Kafka's `incrementWithoutOverflow`): the prefix with its last
/// byte that is not 0xFF incremented and the rest dropped; `None` when every byte is 0xFF.
pub fn prefix_upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = Vec::new();
    write_prefix_upper_bound(prefix, &mut upper).then_some(upper)
}

/// [`prefix_upper_bound`] written into `out` (cleared first), for a caller bounding many
/// prefixes with one buffer; returns `false` (and leaves `out` empty) when there is none.
pub fn write_prefix_upper_bound(prefix: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let Some(last) = prefix.iter().rposition(|&b| b != 0xFF) else {
        return false;
    };
    out.extend_from_slice(&prefix[..=last]);
    out[last] += 1;
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Reverse,
}

/// A scan over `[lower, upper)`; `None` means unbounded on that side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    pub lower: Option<Vec<u8>>,
    pub upper: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn all() -> Self {
        Self::default()
    }

    /// Kafka's `range(from, to)`: both ends inclusive.
    pub fn inclusive(from: Option<&[u8]>, to: Option<&[u8]>) -> Self {
        Self {
            lower: from.map(<[u8]>::to_vec),
            upper: to.map(successor),
        }
    }

    pub fn prefix(prefix: &[u8]) -> Self {
        Self {
            lower: Some(prefix.to_vec()),
            upper: prefix_upper_bound(prefix),
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!((&self.lower, &self.upper), (Some(l), Some(u)) if l >= u)
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.lower.as_deref().is_none_or(|l| key >= l)
            && self.upper.as_deref().is_none_or(|u| key < u)
    }

    /// The rest of this range once `last` has been returned in `direction`.
    pub fn after(&self, last: &[u8], direction: Direction) -> Self {
        match direction {
            Direction::Forward => Self {
                lower: Some(successor(last)),
                upper: self.upper.clone(),
            },
            Direction::Reverse => Self {
                lower: self.lower.clone(),
                upper: Some(last.to_vec()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_upper_bound(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_upper_bound(&[0x61, 0xFF]), Some(vec![0x62]));
        assert_eq!(prefix_upper_bound(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_upper_bound(b""), None);
    }

    #[test]
    fn inclusive_range_contains_its_ends_only() {
        let r = KeyRange::inclusive(Some(b"b"), Some(b"d"));
        assert!(r.contains(b"b") && r.contains(b"d") && r.contains(b"c\xff"));
        assert!(!r.contains(b"a") && !r.contains(b"d\x00"));
        assert!(KeyRange::inclusive(Some(b"d"), Some(b"b")).is_empty());
    }

    #[test]
    fn continuation_excludes_the_last_key() {
        let r = KeyRange::all();
        assert!(!r.after(b"k", Direction::Forward).contains(b"k"));
        assert!(r.after(b"k", Direction::Forward).contains(b"k\x00"));
        assert!(!r.after(b"k", Direction::Reverse).contains(b"k"));
        assert!(r.after(b"k", Direction::Reverse).contains(b"j\xff"));
    }
}

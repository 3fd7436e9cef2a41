//! Values decoded from state's stored bytes, kept by those bytes, so that reading the same bytes
//! again gives the value decoded before instead of decoding it again.
//!
//! A processor reads the same stored bytes many times: a map walked with `keys()`, `values()`
//! and `iterator()` in one call of its handler, a map key (a category) stored under every
//! grouping key, small list elements and counts that repeat. Decoding builds new objects each
//! time (a Python tuple and its fields: most of a state read's cost). Kept values are handed
//! out again, so only values that cannot change once built, and that mean the same whenever
//! decoded, may be kept: whether a schema's values are such is the caller's decision.
//!
//! The cost of keeping is a hash of the bytes a read and an insert a miss; where values seldom
//! repeat (a key read once a batch, each with its own value) that buys nothing, so after each
//! [`WINDOW`] lookups that hit less than a quarter of the time, keeping pauses for [`PAUSE`]
//! reads, then tries again. At most [`CAPACITY`] values are kept (all dropped when it is
//! reached: repeats are found again within a few reads, and nothing needs ordering).

use foldhash::fast::FixedState;
use hashbrown::HashMap;

/// Values kept at most.
pub const CAPACITY: usize = 4096;
/// Longer stored values are neither looked up nor kept (they seldom repeat, and hash longer).
pub const MAX_BYTES: usize = 64;
/// Lookups between two checks of how often they hit.
pub const WINDOW: u32 = 4096;
/// Reads that skip the kept values after a window that hit too seldom.
pub const PAUSE: u32 = 16 * WINDOW;

/// What [`DecodedValues::lookup`] found for some stored bytes.
pub enum Lookup<'a, V> {
    /// Decoded before: this value.
    Kept(&'a V),
    /// Not kept: decode it and [`DecodedValues::keep`] it.
    Missing,
    /// Decode it, and do not keep it (too long, or keeping is paused).
    Skipped,
}

/// Decoded values by their stored bytes; see the module's documentation.
pub struct DecodedValues<V> {
    by_bytes: HashMap<Box<[u8]>, V, FixedState>,
    lookups: u32,
    hits: u32,
    paused_for: u32,
}

impl<V> Default for DecodedValues<V> {
    fn default() -> Self {
        Self {
            by_bytes: HashMap::with_hasher(FixedState::default()),
            lookups: 0,
            hits: 0,
            paused_for: 0,
        }
    }
}

impl<V> DecodedValues<V> {
    /// The value decoded from `raw` before, if kept.
    pub fn lookup(&mut self, raw: &[u8]) -> Lookup<'_, V> {
        if raw.len() > MAX_BYTES {
            return Lookup::Skipped;
        }
        if self.paused_for > 0 {
            self.paused_for -= 1;
            return Lookup::Skipped;
        }
        if self.lookups == WINDOW {
            let seldom = self.hits < WINDOW / 4;
            (self.lookups, self.hits) = (0, 0);
            if seldom {
                self.paused_for = PAUSE;
                self.by_bytes = HashMap::with_hasher(FixedState::default());
                return Lookup::Skipped;
            }
        }
        self.lookups += 1;
        match self.by_bytes.get(raw) {
            Some(value) => {
                self.hits += 1;
                Lookup::Kept(value)
            }
            None => Lookup::Missing,
        }
    }

    /// Keeps `value`, decoded from `raw` (after a [`Lookup::Missing`]).
    pub fn keep(&mut self, raw: &[u8], value: V) {
        if raw.len() > MAX_BYTES || self.paused_for > 0 {
            return;
        }
        if self.by_bytes.len() >= CAPACITY {
            self.by_bytes.clear();
        }
        self.by_bytes.insert(raw.into(), value);
    }

    /// How many values are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `raw` through `values`, decoding (counted in `decodes`) what is not kept.
    fn read(values: &mut DecodedValues<String>, raw: &[u8], decodes: &mut usize) -> String {
        match values.lookup(raw) {
            Lookup::Kept(v) => v.clone(),
            Lookup::Missing => {
                *decodes += 1;
                let v = String::from_utf8_lossy(raw).into_owned();
                values.keep(raw, v.clone());
                v
            }
            Lookup::Skipped => {
                *decodes += 1;
                String::from_utf8_lossy(raw).into_owned()
            }
        }
    }

    #[test]
    fn repeated_bytes_are_decoded_once() {
        let mut values = DecodedValues::default();
        let mut decodes = 0;
        for _ in 0..100 {
            for raw in [&b"books"[..], b"games", b"food"] {
                assert_eq!(
                    read(&mut values, raw, &mut decodes),
                    String::from_utf8_lossy(raw)
                );
            }
        }
        assert_eq!(decodes, 3);
    }

    #[test]
    fn long_values_are_not_kept() {
        let mut values = DecodedValues::default();
        let mut decodes = 0;
        let long = vec![b'x'; MAX_BYTES + 1];
        for _ in 0..3 {
            read(&mut values, &long, &mut decodes);
        }
        assert_eq!((decodes, values.len()), (3, 0));
    }

    #[test]
    fn values_that_seldom_repeat_pause_keeping_then_it_tries_again() {
        let mut values = DecodedValues::default();
        let mut decodes = 0;
        let distinct = |i: u32| i.to_be_bytes().to_vec();
        for i in 0..WINDOW {
            read(&mut values, &distinct(i), &mut decodes);
        }
        read(&mut values, b"next", &mut decodes);
        assert!(
            values.len() == 0,
            "a window without hits drops what it kept"
        );
        for i in 0..PAUSE {
            read(&mut values, &distinct(WINDOW + i), &mut decodes);
            assert!(values.len() == 0, "paused: nothing kept");
        }
        read(&mut values, b"again", &mut decodes);
        assert_eq!(values.len(), 1, "after the pause it keeps again");
        assert_eq!(decodes as u32, WINDOW + 1 + PAUSE + 1);
    }

    #[test]
    fn a_window_that_hits_often_keeps_what_it_kept() {
        let mut values = DecodedValues::default();
        let mut decodes = 0;
        for i in 0..2 * WINDOW {
            read(&mut values, &(i % 8).to_be_bytes(), &mut decodes);
        }
        assert_eq!((decodes, values.len()), (8, 8));
    }

    #[test]
    fn at_capacity_it_starts_over() {
        let mut values = DecodedValues::default();
        let mut decodes = 0;
        // Each value read twice in a row: half the lookups hit, so keeping never pauses.
        for i in 0..(CAPACITY as u32 + 10) {
            read(&mut values, &i.to_be_bytes(), &mut decodes);
            read(&mut values, &i.to_be_bytes(), &mut decodes);
        }
        assert!(values.len() <= CAPACITY);
        assert_eq!(decodes, CAPACITY + 10);
    }
}

//! Merged range iteration over layered sorted sources (staged writes over spilled writes over
//! committed column families). Higher layers win on equal keys; a staged delete hides the key.

use std::borrow::Cow;

use crate::error::Result;
use crate::store::key_range::Direction;

/// One sorted input of a merge, positioned on its current entry.
pub trait SortedSource {
    /// Key of the current entry; `None` once exhausted.
    fn key(&self) -> Option<&[u8]>;
    /// Value of the current entry; `None` is a tombstone that hides lower layers.
    fn value(&self) -> Result<Option<Cow<'_, [u8]>>>;
    fn advance(&mut self) -> Result<()>;
    /// Moves a forward source on to its first entry at or after `target` (never back). Sources
    /// that can seek (RocksDB's iterators) override the default, which steps.
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        while self.key().is_some_and(|k| k < target) {
            self.advance()?;
        }
        Ok(())
    }
}

impl<S: SortedSource + ?Sized> SortedSource for Box<S> {
    fn key(&self) -> Option<&[u8]> {
        (**self).key()
    }
    fn value(&self) -> Result<Option<Cow<'_, [u8]>>> {
        (**self).value()
    }
    fn advance(&mut self) -> Result<()> {
        (**self).advance()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
}

/// A forward source seen up to `end` (exclusive): one window of a source that a scan of many
/// disjoint ranges moves through with `seek`, so the ranges share one iterator.
pub struct Below<'s, 'a> {
    source: &'s mut (dyn SortedSource + 'a),
    end: Option<&'s [u8]>,
}

impl<'s, 'a> Below<'s, 'a> {
    /// `source` from its first entry at or after `start`, up to `end` (`None`: unbounded).
    pub fn window(
        source: &'s mut (dyn SortedSource + 'a),
        start: &[u8],
        end: Option<&'s [u8]>,
    ) -> Result<Self> {
        if source.key().is_some_and(|k| k < start) {
            source.seek(start)?;
        }
        Ok(Self { source, end })
    }
}

impl SortedSource for Below<'_, '_> {
    fn key(&self) -> Option<&[u8]> {
        let key = self.source.key()?;
        match self.end {
            Some(end) if key >= end => None,
            _ => Some(key),
        }
    }
    fn value(&self) -> Result<Option<Cow<'_, [u8]>>> {
        self.source.value()
    }
    fn advance(&mut self) -> Result<()> {
        self.source.advance()
    }
}

/// A source over an in-memory iterator that is already in the scan's direction.
pub struct IterSource<'a, I: Iterator<Item = (&'a [u8], Option<&'a [u8]>)>> {
    items: I,
    head: Option<(&'a [u8], Option<&'a [u8]>)>,
}

impl<'a, I: Iterator<Item = (&'a [u8], Option<&'a [u8]>)>> IterSource<'a, I> {
    pub fn new(mut items: I) -> Self {
        let head = items.next();
        Self { items, head }
    }
}

impl<'a, I: Iterator<Item = (&'a [u8], Option<&'a [u8]>)>> SortedSource for IterSource<'a, I> {
    fn key(&self) -> Option<&[u8]> {
        self.head.map(|(k, _)| k)
    }
    fn value(&self) -> Result<Option<Cow<'_, [u8]>>> {
        Ok(self.head.and_then(|(_, v)| v).map(Cow::Borrowed))
    }
    fn advance(&mut self) -> Result<()> {
        self.head = self.items.next();
        Ok(())
    }
}

/// Receives one merged entry (key, value); returns whether it counts towards the limit (a row
/// a TTL hides does not).
pub type VisitRow<'f> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'f;
/// Receives one entry (key, value) of a scan, borrowed.
pub type VisitEntry<'f> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'f;

/// The bytes an iterator's chunk holds at most, past its last row: a chunk of 2,048 rows of
/// 1 MiB values would otherwise hold 2 GiB outside any memory budget.
pub const CHUNK_BYTES: usize = 1 << 20;

/// How much one call of a chunked scan passes on: at most `rows` rows, and no row after the one
/// whose key and value bring the bytes passed on to `bytes` (so always at least one row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimit {
    pub rows: usize,
    pub bytes: usize,
}

impl ScanLimit {
    /// Every row of the range.
    pub const ALL: Self = Self::rows(usize::MAX);

    /// At most `rows` rows, whatever their size.
    pub const fn rows(rows: usize) -> Self {
        Self {
            rows,
            bytes: usize::MAX,
        }
    }

    /// An iterator's chunk: at most `rows` rows, stopping once they hold `CHUNK_BYTES`.
    pub const fn chunk(rows: usize) -> Self {
        Self {
            rows,
            bytes: CHUNK_BYTES,
        }
    }

    /// An iterator's first chunk: 16 rows, so a short read stays cheap.
    pub const fn first_chunk() -> Self {
        Self::chunk(16)
    }

    /// The chunk after this one: four times the rows, up to 2,048.
    pub fn next_chunk(self) -> Self {
        Self::chunk((self.rows * 4).min(2048))
    }

    /// What is left of this limit after `scanned`.
    pub fn after(self, scanned: Scanned) -> Self {
        Self {
            rows: self.rows.saturating_sub(scanned.rows),
            bytes: self.bytes.saturating_sub(scanned.bytes),
        }
    }
}

/// What a scan passed on, and whether it stopped at its limit, so that rows may follow in its
/// range (`at_limit`), rather than at the range's end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scanned {
    pub rows: usize,
    pub bytes: usize,
    pub at_limit: bool,
}

impl Scanned {
    /// Counts one row of `key` and `value`.
    pub fn count(&mut self, key: &[u8], value: &[u8]) {
        self.rows += 1;
        self.bytes += key.len() + value.len();
    }

    /// Whether `limit` is used up.
    pub fn reached(&self, limit: ScanLimit) -> bool {
        self.rows >= limit.rows || self.bytes >= limit.bytes
    }
}

/// Visits the entries of the merge of `sources` (highest priority first) in `direction` order
/// until the entries `visit` counted reach `limit`. Entries are borrowed from the sources, never
/// copied. A single source (committed state with nothing staged, the common case at scale) is
/// walked directly.
pub fn merge_visit<S: SortedSource>(
    sources: &mut [S],
    direction: Direction,
    limit: ScanLimit,
    visit: &mut VisitRow<'_>,
) -> Result<Scanned> {
    let mut scanned = Scanned::default();
    if let [source] = sources {
        while !scanned.reached(limit) {
            let Some(key) = source.key() else {
                return Ok(scanned);
            };
            if let Some(value) = source.value()? {
                if visit(key, &value)? {
                    scanned.count(key, &value);
                }
            }
            source.advance()?;
        }
        scanned.at_limit = true;
        return Ok(scanned);
    }
    // The winning key, reused: the sources move on before the next comparison.
    let mut key = Vec::new();
    while !scanned.reached(limit) {
        let mut best: Option<(usize, &[u8])> = None;
        for (i, source) in sources.iter().enumerate() {
            if let Some(candidate) = source.key() {
                let better = match best {
                    None => true,
                    Some((_, b)) => match direction {
                        Direction::Forward => candidate < b,
                        Direction::Reverse => candidate > b,
                    },
                };
                if better {
                    best = Some((i, candidate));
                }
            }
        }
        let Some((winner, best_key)) = best else {
            return Ok(scanned);
        };
        if let Some(value) = sources[winner].value()? {
            if visit(best_key, &value)? {
                scanned.count(best_key, &value);
            }
        }
        key.clear();
        key.extend_from_slice(best_key);
        for source in sources.iter_mut() {
            if source.key() == Some(key.as_slice()) {
                source.advance()?;
            }
        }
    }
    scanned.at_limit = true;
    Ok(scanned)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Entries = Vec<(&'static [u8], Option<&'static [u8]>)>;

    /// One source per layer, each in the scan's direction.
    fn sources(layers: Vec<Entries>, direction: Direction) -> Vec<Box<dyn SortedSource>> {
        layers
            .into_iter()
            .map(|mut l| {
                if direction == Direction::Reverse {
                    l.reverse();
                }
                Box::new(IterSource::new(l.into_iter())) as Box<dyn SortedSource>
            })
            .collect()
    }

    fn merged(layers: Vec<Entries>, direction: Direction, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut sources = sources(layers, direction);
        let mut out = Vec::new();
        merge_visit(
            &mut sources,
            direction,
            ScanLimit::rows(limit),
            &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(true)
            },
        )
        .unwrap();
        out
    }

    #[test]
    fn windows_of_one_source_move_forward_and_stop_at_their_end() {
        let entries: Entries = vec![
            (b"a1", Some(b"1")),
            (b"a2", Some(b"2")),
            (b"b1", Some(b"3")),
            (b"c1", Some(b"4")),
            (b"c2", None),
            (b"d1", Some(b"5")),
        ];
        let mut source = IterSource::new(entries.into_iter());
        let mut window = |start: &[u8], end: &[u8]| {
            let below = Below::window(&mut source, start, Some(end)).unwrap();
            let mut sources: Vec<Box<dyn SortedSource>> = vec![Box::new(below)];
            let mut out = Vec::new();
            merge_visit(
                &mut sources,
                Direction::Forward,
                ScanLimit::ALL,
                &mut |k, v| {
                    out.push((k.to_vec(), v.to_vec()));
                    Ok(true)
                },
            )
            .unwrap();
            out
        };
        assert_eq!(
            window(b"a", b"b"),
            vec![
                (b"a1".to_vec(), b"1".to_vec()),
                (b"a2".to_vec(), b"2".to_vec())
            ]
        );
        // b1 is skipped by the seek; c2's tombstone hides nothing below it here.
        assert_eq!(window(b"c", b"d"), vec![(b"c1".to_vec(), b"4".to_vec())]);
        assert_eq!(window(b"c", b"d"), vec![], "a window never moves back");
        assert_eq!(window(b"d", b"e"), vec![(b"d1".to_vec(), b"5".to_vec())]);
        assert_eq!(window(b"e", b"f"), vec![]);
    }

    #[test]
    fn a_byte_limit_ends_after_the_row_that_reaches_it() {
        static BIG: [u8; 600] = [7; 600];
        let big = &BIG;
        let top: Entries = vec![(b"b", Some(&big[..])), (b"c", None)];
        let base: Entries = vec![
            (b"a", Some(&big[..])),
            (b"c", Some(b"C")),
            (b"d", Some(b"D")),
            (b"e", Some(b"E")),
        ];
        let scan = |layers: Vec<Entries>, direction, limit| {
            let mut sources = sources(layers, direction);
            let mut keys = Vec::new();
            let scanned = merge_visit(&mut sources, direction, limit, &mut |k, _| {
                keys.push(k[0]);
                Ok(true)
            })
            .unwrap();
            (keys, scanned)
        };
        let limit = ScanLimit {
            rows: 10,
            bytes: 1000,
        };
        let single: Entries = vec![
            (b"a", Some(&big[..])),
            (b"b", Some(&big[..])),
            (b"c", Some(b"C")),
        ];
        // Merged and single-source scans alike: a (601 bytes), b (1,202: the limit), no more.
        for layers in [vec![top.clone(), base.clone()], vec![single]] {
            let (keys, scanned) = scan(layers, Direction::Forward, limit);
            assert_eq!(keys, vec![b'a', b'b']);
            assert_eq!(
                (scanned.rows, scanned.bytes, scanned.at_limit),
                (2, 1202, true)
            );
        }
        // A first row larger than the limit still passes: a scan always makes progress.
        let one = ScanLimit { rows: 10, bytes: 1 };
        let (keys, scanned) = scan(vec![top.clone(), base.clone()], Direction::Reverse, one);
        assert_eq!(
            (keys, scanned.rows, scanned.at_limit),
            (vec![b'e'], 1, true)
        );
        // The end of the range before the limit: not at the limit.
        let (keys, scanned) = scan(
            vec![top.clone(), base.clone()],
            Direction::Reverse,
            ScanLimit::chunk(10),
        );
        assert_eq!(keys, vec![b'e', b'd', b'b', b'a']);
        assert_eq!(
            (scanned.rows, scanned.bytes, scanned.at_limit),
            (4, 1206, false)
        );
        // Exactly `rows` rows reach the limit: the caller looks again and finds the end.
        let (_, scanned) = scan(vec![top, base], Direction::Forward, ScanLimit::rows(4));
        assert!(scanned.at_limit);
    }

    #[test]
    fn upper_layer_wins_and_tombstones_hide() {
        let top: Entries = vec![(b"b", Some(b"B2")), (b"c", None)];
        let base: Entries = vec![
            (b"a", Some(b"A")),
            (b"b", Some(b"B")),
            (b"c", Some(b"C")),
            (b"d", Some(b"D")),
        ];
        let fwd = merged(vec![top.clone(), base.clone()], Direction::Forward, 10);
        let keys: Vec<_> = fwd
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        assert_eq!(
            keys,
            vec![(&b"a"[..], &b"A"[..]), (b"b", b"B2"), (b"d", b"D")]
        );
        let rev = merged(vec![top, base], Direction::Reverse, 2);
        assert_eq!(rev[0].0, b"d");
        assert_eq!(rev[1], (b"b".to_vec(), b"B2".to_vec()));
    }
}

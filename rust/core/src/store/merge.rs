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

/// Visits the entries of the merge of `sources` (highest priority first) in `direction` order
/// until `visit` counted `limit` of them; returns how many it counted. Entries are borrowed
/// from the sources, never copied. A single source (committed state with nothing staged, the
/// common case at scale) is walked directly.
pub fn merge_visit(
    sources: &mut [Box<dyn SortedSource + '_>],
    direction: Direction,
    limit: usize,
    visit: &mut VisitRow<'_>,
) -> Result<usize> {
    let mut counted = 0;
    if let [source] = sources {
        while counted < limit {
            let Some(key) = source.key() else { break };
            if let Some(value) = source.value()? {
                counted += usize::from(visit(key, &value)?);
            }
            source.advance()?;
        }
        return Ok(counted);
    }
    // The winning key, reused: the sources move on before the next comparison.
    let mut key = Vec::new();
    while counted < limit {
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
            break;
        };
        if let Some(value) = sources[winner].value()? {
            counted += usize::from(visit(best_key, &value)?);
        }
        key.clear();
        key.extend_from_slice(best_key);
        for source in sources.iter_mut() {
            if source.key() == Some(key.as_slice()) {
                source.advance()?;
            }
        }
    }
    Ok(counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Entries = Vec<(&'static [u8], Option<&'static [u8]>)>;

    fn merged(layers: Vec<Entries>, direction: Direction, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut sources: Vec<Box<dyn SortedSource>> = layers
            .into_iter()
            .map(|mut l| {
                if direction == Direction::Reverse {
                    l.reverse();
                }
                Box::new(IterSource::new(l.into_iter())) as Box<dyn SortedSource>
            })
            .collect();
        let mut out = Vec::new();
        merge_visit(&mut sources, direction, limit, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
        out
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

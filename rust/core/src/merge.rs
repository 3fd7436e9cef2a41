//! Merged range iteration over layered sorted sources (staged writes over spilled writes over
//! committed column families). Higher layers win on equal keys; a staged delete hides the key.

use std::borrow::Cow;

use crate::error::Result;
use crate::key_range::Direction;

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

/// Appends up to `limit` visible entries of the merge of `sources` (highest priority first) to
/// `out`, in `direction` order. Returns `true` when the sources are exhausted.
pub fn merge_into(
    sources: &mut [Box<dyn SortedSource + '_>],
    direction: Direction,
    limit: usize,
    out: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<bool> {
    let mut emitted = 0;
    while emitted < limit {
        let mut best: Option<(usize, &[u8])> = None;
        for (i, source) in sources.iter().enumerate() {
            if let Some(key) = source.key() {
                let better = match best {
                    None => true,
                    Some((_, b)) => match direction {
                        Direction::Forward => key < b,
                        Direction::Reverse => key > b,
                    },
                };
                if better {
                    best = Some((i, key));
                }
            }
        }
        let Some((winner, key)) = best else {
            return Ok(true);
        };
        let key = key.to_vec();
        if let Some(value) = sources[winner].value()? {
            out.push((key.clone(), value.into_owned()));
            emitted += 1;
        }
        for source in sources.iter_mut() {
            if source.key() == Some(key.as_slice()) {
                source.advance()?;
            }
        }
    }
    Ok(sources.iter().all(|s| s.key().is_none()))
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
        merge_into(&mut sources, direction, limit, &mut out).unwrap();
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

//! Arrow binary/string column buffers (validity bitmap, little-endian offsets, data) read and
//! built without an Arrow dependency, for the vectorized `get_many` / `put_all` paths.

use crate::error::{Error, Result};

/// A view of `count` values of an Arrow `binary`/`string` (i32 offsets) or `large_*` (i64)
/// array starting at element `start` (an array slice's offset).
pub struct BinaryColumn<'a> {
    data: &'a [u8],
    offsets: Vec<usize>,
    validity: Option<&'a [u8]>,
    start: usize,
}

fn invalid(what: &str) -> Error {
    Error::InvalidArgument(format!("malformed Arrow binary array: {what}"))
}

impl<'a> BinaryColumn<'a> {
    pub fn parse(
        offsets: &[u8],
        data: &'a [u8],
        validity: Option<&'a [u8]>,
        start: usize,
        count: usize,
        large: bool,
    ) -> Result<Self> {
        let width = if large { 8 } else { 4 };
        let needed = start
            .checked_add(count)
            .and_then(|n| n.checked_add(1))
            .and_then(|n| n.checked_mul(width))
            .ok_or_else(|| invalid("length overflows"))?;
        if offsets.len() < needed {
            return Err(invalid("offsets buffer shorter than the array"));
        }
        let parsed: Vec<usize> = offsets[start * width..needed]
            .chunks_exact(width)
            .map(|c| {
                let v = if large {
                    i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))
                } else {
                    i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
                };
                usize::try_from(v).map_err(|_| invalid("negative offset"))
            })
            .collect::<Result<_>>()?;
        if parsed.windows(2).any(|w| w[0] > w[1])
            || parsed.last().is_some_and(|&end| end > data.len())
        {
            return Err(invalid("offsets decrease or point past the data buffer"));
        }
        if let Some(bits) = validity {
            if bits.len() * 8 < start + count {
                return Err(invalid("validity bitmap shorter than the array"));
            }
        }
        Ok(Self {
            data,
            offsets: parsed,
            validity,
            start,
        })
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i`; `None` when null.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let bit = self.start + i;
        if let Some(bits) = self.validity {
            if bits[bit / 8] & (1 << (bit % 8)) == 0 {
                return None;
            }
        }
        Some(&self.data[self.offsets[i]..self.offsets[i + 1]])
    }
}

/// Builds the buffers of an Arrow binary array (i32 or i64 offsets).
pub struct BinaryBuilder {
    pub validity: Vec<u8>,
    pub offsets: Vec<u8>,
    pub data: Vec<u8>,
    pub null_count: usize,
    len: usize,
    large: bool,
}

impl BinaryBuilder {
    pub fn new(capacity: usize, large: bool) -> Self {
        let width = if large { 8 } else { 4 };
        let mut offsets = Vec::with_capacity((capacity + 1) * width);
        offsets.extend_from_slice(&vec![0u8; width]);
        Self {
            validity: Vec::with_capacity(capacity.div_ceil(8)),
            offsets,
            data: Vec::new(),
            null_count: 0,
            len: 0,
            large,
        }
    }

    /// Makes room for `values` more values of `bytes` bytes in all.
    pub fn reserve(&mut self, values: usize, bytes: usize) {
        let width = if self.large { 8 } else { 4 };
        self.validity.reserve(values.div_ceil(8));
        self.offsets.reserve(values * width);
        self.data.reserve(bytes);
    }

    pub fn push(&mut self, value: Option<&[u8]>) -> Result<()> {
        if self.len.is_multiple_of(8) {
            self.validity.push(0);
        }
        match value {
            Some(v) => {
                if let Some(byte) = self.validity.last_mut() {
                    *byte |= 1 << (self.len % 8);
                }
                self.data.extend_from_slice(v);
            }
            None => self.null_count += 1,
        }
        let end = self.data.len();
        if self.large {
            self.offsets.extend_from_slice(&(end as i64).to_le_bytes());
        } else {
            let end = i32::try_from(end).map_err(|_| {
                Error::InvalidArgument("result exceeds 2 GiB; pass a large_binary array".into())
            })?;
            self.offsets.extend_from_slice(&end.to_le_bytes());
        }
        self.len += 1;
        Ok(())
    }

    /// Builds `len` values that `fill` visits once each, in any order (a lookup answers cached
    /// keys first), copying each value once into a scratch buffer instead of allocating per value.
    pub fn from_visits(
        len: usize,
        large: bool,
        fill: impl FnOnce(&mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()>,
    ) -> Result<Self> {
        let mut scratch = Vec::new();
        let mut spans: Vec<Option<(usize, usize)>> = vec![None; len];
        fill(&mut |i, value| {
            if let Some(v) = value {
                spans[i] = Some((scratch.len(), v.len()));
                scratch.extend_from_slice(v);
            }
        })?;
        let mut builder = Self::new(len, large);
        builder.reserve(0, scratch.len());
        for span in spans {
            builder.push(span.map(|(start, n)| &scratch[start..start + n]))?;
        }
        Ok(builder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_visits_orders_values_by_index() {
        let b = BinaryBuilder::from_visits(4, false, |visit| {
            visit(2, Some(b"cc"));
            visit(0, Some(b"a"));
            visit(3, None);
            visit(1, Some(b""));
            Ok(())
        })
        .unwrap();
        let col = BinaryColumn::parse(&b.offsets, &b.data, Some(&b.validity), 0, 4, false).unwrap();
        let got: Vec<Option<&[u8]>> = (0..4).map(|i| col.get(i)).collect();
        assert_eq!(
            got,
            vec![Some(&b"a"[..]), Some(&b""[..]), Some(&b"cc"[..]), None]
        );
        assert_eq!(b.null_count, 1);
    }

    #[test]
    fn build_then_parse_with_nulls_and_slice_offset() {
        let mut b = BinaryBuilder::new(3, false);
        b.push(Some(b"ab")).unwrap();
        b.push(None).unwrap();
        b.push(Some(b"")).unwrap();
        b.push(Some(b"xyz")).unwrap();
        assert_eq!(b.null_count, 1);
        let col = BinaryColumn::parse(&b.offsets, &b.data, Some(&b.validity), 1, 3, false).unwrap();
        assert_eq!(col.len(), 3);
        assert_eq!(
            (col.get(0), col.get(1), col.get(2)),
            (None, Some(&b""[..]), Some(&b"xyz"[..]))
        );
    }

    #[test]
    fn rejects_offsets_past_data() {
        let offsets: Vec<u8> = [0i32, 5].iter().flat_map(|o| o.to_le_bytes()).collect();
        assert!(BinaryColumn::parse(&offsets, b"abc", None, 0, 1, false).is_err());
        assert!(BinaryColumn::parse(&offsets, b"abcdef", None, 0, 2, false).is_err());
    }
}

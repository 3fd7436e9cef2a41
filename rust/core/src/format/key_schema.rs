//! Store keys of Kafka Streams' window and session stores (spec 1.6, 1.7), byte-exact, and the
//! range bounds their scans use. Keys carry no length prefix, so a store key is the record key
//! followed by a fixed-size time suffix, and scans filter what the byte bounds let through.

use crate::error::{Error, Result};

/// Window store key suffix: i64 window start, i32 sequence number.
pub const WINDOW_SUFFIX_LEN: usize = 12;
/// Session store key suffix: i64 session end, i64 session start.
pub const SESSION_SUFFIX_LEN: usize = 16;

/// `OrderedBytes.upperRange`: the smallest byte string that sorts after every `key'` ‖ suffix
/// with `key'` having `key` as a prefix and suffix <= `max_suffix`. Key bytes are kept while
/// they are >= the suffix's first byte (the first key byte always), so a longer key whose next
/// byte could begin a timestamp is still covered.
pub fn upper_range(key: &[u8], max_suffix: &[u8]) -> Vec<u8> {
    let first = max_suffix.first().copied().unwrap_or(0);
    let kept = if first == 0 {
        key.len()
    } else {
        key.iter()
            .enumerate()
            .take_while(|&(i, &b)| i < 1 || b >= first)
            .count()
    };
    [&key[..kept], max_suffix].concat()
}

/// An upper scan bound for every store key whose record key is at most `key`: Kafka's
/// [`upper_range`] covers the longer keys `key` begins, but not every shorter one (with
/// `key = [0]`, the empty key's windows sort after `[0] ‖ max_suffix` once the timestamps'
/// leading zero bytes line up), so the bound is also at least each prefix of `key` ‖
/// `max_suffix`. For keys whose bytes exceed the suffix's leading bytes (text keys and real
/// timestamps) it equals `upper_range`.
pub fn scan_upper_bound(key: &[u8], max_suffix: &[u8]) -> Vec<u8> {
    (0..key.len())
        .map(|prefix| [&key[..prefix], max_suffix].concat())
        .fold(upper_range(key, max_suffix), Ord::max)
}

/// `OrderedBytes.lowerRange`: `key` ‖ `min_suffix`.
pub fn lower_range(key: &[u8], min_suffix: &[u8]) -> Vec<u8> {
    [key, min_suffix].concat()
}

fn split_suffix<'a, const N: usize>(bytes: &'a [u8], what: &str) -> Result<(&'a [u8], [u8; N])> {
    let cut = bytes.len().checked_sub(N).ok_or_else(|| {
        Error::Corrupted(format!(
            "{what} key of {} bytes is shorter than its {N}-byte suffix",
            bytes.len()
        ))
    })?;
    let (key, suffix) = bytes.split_at(cut);
    let mut fixed = [0u8; N];
    fixed.copy_from_slice(suffix);
    Ok((key, fixed))
}

fn be_i64(bytes: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    i64::from_be_bytes(b)
}

/// `WindowKeySchema`: key ‖ i64 window start ‖ i32 sequence number.
pub mod window {
    use super::*;

    /// A decoded window store key.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct WindowedKey<'a> {
        pub key: &'a [u8],
        pub start: i64,
        pub seq: i32,
    }

    /// `toStoreKeyBinary`: the store (and changelog) key.
    pub fn to_store_key(key: &[u8], start: i64, seq: i32) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + WINDOW_SUFFIX_LEN);
        write_store_key(&mut out, key, start, seq);
        out
    }

    /// `to_store_key` into `out` (cleared first), for a caller reusing one buffer.
    pub fn write_store_key(out: &mut Vec<u8>, key: &[u8], start: i64, seq: i32) {
        out.clear();
        out.extend_from_slice(key);
        out.extend_from_slice(&start.to_be_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
    }

    /// `toBinary`: the windowed key of output topics (`TimeWindowedSerializer`), no sequence.
    pub fn to_binary(key: &[u8], start: i64) -> Vec<u8> {
        [key, &start.to_be_bytes()].concat()
    }

    pub fn from_store_key(bytes: &[u8]) -> Result<WindowedKey<'_>> {
        let (key, suffix) = split_suffix::<WINDOW_SUFFIX_LEN>(bytes, "window store")?;
        Ok(WindowedKey {
            key,
            start: be_i64(&suffix),
            seq: i32::from_be_bytes([suffix[8], suffix[9], suffix[10], suffix[11]]),
        })
    }

    /// Window end: start + size, clamped to `i64::MAX` as Kafka does.
    pub fn window_end(start: i64, size_ms: i64) -> i64 {
        start.saturating_add(size_ms)
    }

    /// Lower scan bound for `key` (the time is deliberately ignored: shorter keys interleave).
    pub fn lower_range(key: &[u8], _from: i64) -> Vec<u8> {
        super::lower_range(key, &[0; WINDOW_SUFFIX_LEN])
    }

    pub fn upper_range(key: &[u8], to: i64) -> Vec<u8> {
        super::upper_range(key, &to_store_key(&[], to, i32::MAX))
    }

    /// [`super::scan_upper_bound`] for keys up to `key` with windows starting by `to`.
    pub fn scan_upper_bound(key: &[u8], to: i64) -> Vec<u8> {
        super::scan_upper_bound(key, &to_store_key(&[], to, i32::MAX))
    }

    /// Bounds for one exact key: its entries are contiguous.
    pub fn lower_range_fixed_size(key: &[u8], from: i64) -> Vec<u8> {
        to_store_key(key, from.max(0), 0)
    }

    pub fn upper_range_fixed_size(key: &[u8], to: i64) -> Vec<u8> {
        to_store_key(key, to, i32::MAX)
    }
}

/// `SessionKeySchema`: key ‖ i64 session end ‖ i64 session start (end first, so "ends at or
/// after" searches are contiguous).
pub mod session {
    use super::*;

    /// A decoded session store key.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct SessionKey<'a> {
        pub key: &'a [u8],
        pub start: i64,
        pub end: i64,
    }

    /// The store, changelog and `SessionWindowedSerializer` key.
    pub fn to_store_key(key: &[u8], start: i64, end: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + SESSION_SUFFIX_LEN);
        write_store_key(&mut out, key, start, end);
        out
    }

    /// `to_store_key` into `out` (cleared first), for a caller reusing one buffer.
    pub fn write_store_key(out: &mut Vec<u8>, key: &[u8], start: i64, end: i64) {
        out.clear();
        out.extend_from_slice(key);
        out.extend_from_slice(&end.to_be_bytes());
        out.extend_from_slice(&start.to_be_bytes());
    }

    pub fn from_store_key(bytes: &[u8]) -> Result<SessionKey<'_>> {
        let (key, suffix) = split_suffix::<SESSION_SUFFIX_LEN>(bytes, "session store")?;
        Ok(SessionKey {
            key,
            end: be_i64(&suffix[..8]),
            start: be_i64(&suffix[8..]),
        })
    }

    pub fn lower_range(key: &[u8], _from: i64) -> Vec<u8> {
        super::lower_range(key, &[0; SESSION_SUFFIX_LEN])
    }

    pub fn upper_range(key: &[u8], to: i64) -> Vec<u8> {
        super::upper_range(key, &to_store_key(&[], to, i64::MAX))
    }

    /// [`super::scan_upper_bound`] for keys up to `key` with sessions starting by `to`.
    pub fn scan_upper_bound(key: &[u8], to: i64) -> Vec<u8> {
        super::scan_upper_bound(key, &to_store_key(&[], to, i64::MAX))
    }

    pub fn lower_range_fixed_size(key: &[u8], from: i64) -> Vec<u8> {
        to_store_key(key, 0, from.max(0))
    }

    pub fn upper_range_fixed_size(key: &[u8], to: i64) -> Vec<u8> {
        to_store_key(key, to, i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    const KEY: [u8; 3] = [0x0a, 0x0b, 0x0c];

    #[test]
    fn spec_6_2_window_keys() {
        assert_eq!(
            window::to_store_key(b"a", 1000, 1),
            hex("61 00000000000003e8 00000001")
        );
        assert_eq!(window::to_binary(b"a", 1000), hex("61 00000000000003e8"));
        let stored = hex("61 00000000000003e8 00000001");
        let decoded = window::from_store_key(&stored).unwrap();
        assert_eq!(
            (decoded.key, decoded.start, decoded.seq),
            (&b"a"[..], 1000, 1)
        );
        assert_eq!(
            window::upper_range(&KEY, 5),
            hex("0a0b0c 0000000000000005 7fffffff")
        );
        assert_eq!(
            window::upper_range(&KEY, i64::MAX),
            hex("0a 7fffffffffffffff 7fffffff")
        );
        assert_eq!(
            window::lower_range(&KEY, 77),
            hex("0a0b0c 000000000000000000000000")
        );
    }

    #[test]
    fn spec_6_2_session_keys() {
        assert_eq!(
            session::to_store_key(b"a", 10, 20),
            hex("61 0000000000000014 000000000000000a")
        );
        let stored = hex("61 0000000000000014 000000000000000a");
        let decoded = session::from_store_key(&stored).unwrap();
        assert_eq!(
            (decoded.key, decoded.start, decoded.end),
            (&b"a"[..], 10, 20)
        );
        assert_eq!(
            session::upper_range(&KEY, i64::MAX),
            hex("0a 7fffffffffffffff 7fffffffffffffff")
        );
        assert_eq!(
            session::upper_range(&[0x0a, 0x8f, 0x9f], i64::MAX),
            hex("0a8f9f 7fffffffffffffff 7fffffffffffffff")
        );
        assert_eq!(
            session::upper_range(&KEY, 0),
            hex("0a 7fffffffffffffff 0000000000000000")
        );
        assert_eq!(
            session::lower_range(&KEY, 123),
            [&KEY[..], &[0; 16]].concat()
        );
    }

    #[test]
    fn upper_range_edge_cases() {
        // A suffix starting with 0 keeps the whole key; an empty key keeps nothing.
        assert_eq!(
            upper_range(&[0xff, 0x00], &[0x00, 0x01]),
            vec![0xff, 0x00, 0x00, 0x01]
        );
        assert_eq!(upper_range(&[], &[0x7f]), vec![0x7f]);
        // The first key byte is kept even when it is below the suffix's first byte.
        assert_eq!(upper_range(&[0x01, 0x02], &[0x7f]), vec![0x01, 0x7f]);
    }

    #[test]
    fn upper_range_covers_every_entry_of_the_key_up_to_the_time() {
        let keys: [&[u8]; 5] = [b"", &[0x00], &KEY, &[0x0a, 0x8f, 0x9f], &[0xff, 0x7f, 0x80]];
        for key in keys {
            for to in [0, 5, 1 << 40, i64::MAX] {
                let bound = window::upper_range(key, to);
                for start in [0, to / 2, to] {
                    assert!(window::to_store_key(key, start, i32::MAX) <= bound);
                }
                let bound = session::upper_range(key, to);
                assert!(session::to_store_key(key, to, i64::MAX) <= bound);
            }
        }
    }

    #[test]
    fn the_scan_bound_covers_every_shorter_key_too() {
        // Kafka's bound misses the empty key's windows under key_to = [0]: this is the case.
        let (to, start) = (45_000, 45_000);
        let empty_key_window = window::to_store_key(b"", start, 1);
        assert!(empty_key_window > window::upper_range(&[0x00], to));
        assert!(empty_key_window <= window::scan_upper_bound(&[0x00], to));
        let keys: [&[u8]; 6] = [
            b"",
            &[0x00],
            &[0x00, 0x00],
            &KEY,
            &[0x7f, 0x7f],
            &[0xff, 0x00],
        ];
        for key_to in keys {
            for key in keys.iter().filter(|k| **k <= key_to) {
                assert!(
                    window::to_store_key(key, to, i32::MAX) <= window::scan_upper_bound(key_to, to)
                );
                assert!(
                    session::to_store_key(key, to, to) <= session::scan_upper_bound(key_to, to)
                );
            }
        }
        // Text keys: the same bound as Kafka's.
        assert_eq!(
            window::scan_upper_bound(&KEY, to),
            window::upper_range(&KEY, to)
        );
    }

    #[test]
    fn fixed_size_bounds_enclose_exactly_one_keys_range() {
        let lower = window::lower_range_fixed_size(b"k", -5);
        let upper = window::upper_range_fixed_size(b"k", 100);
        assert_eq!(lower, window::to_store_key(b"k", 0, 0));
        for start in [0, 50, 100] {
            let key = window::to_store_key(b"k", start, 3);
            assert!(lower <= key && key <= upper);
        }
        assert!(window::to_store_key(b"k", 101, 0) > upper);
        let lower = session::lower_range_fixed_size(b"k", 7);
        let upper = session::upper_range_fixed_size(b"k", 20);
        assert!(lower <= session::to_store_key(b"k", 3, 7));
        assert!(session::to_store_key(b"k", 20, i64::MAX) <= upper);
    }

    #[test]
    fn short_keys_are_corrupted_not_panics() {
        assert!(matches!(
            window::from_store_key(&[1; 11]),
            Err(Error::Corrupted(_))
        ));
        assert!(matches!(
            session::from_store_key(&[1; 15]),
            Err(Error::Corrupted(_))
        ));
        assert_eq!(window::from_store_key(&[0; 12]).unwrap().key, b"");
        assert_eq!(window::window_end(i64::MAX - 1, 10), i64::MAX);
    }
}

//! The bytes of a `transform_with_state` processor's state (kstate.spark's state variables,
//! timers, TTL index and event-time store), defined here once: the binding's `StateCodec` and
//! the Python modules (state variables, state reader, processor, rescale) all call these.
//!
//! Every state variable is a store; `<key>` is the pickled grouping key and
//! `<prefix>` = `<u32 BE length of key><key>` (so one key's entries are one prefix scan, and no
//! key's prefix is a prefix of another's):
//!
//! | store               | key                                           | value                      |
//! |---------------------|-----------------------------------------------|----------------------------|
//! | value state         | `<key>`                                       | `<i64 BE expiry><value>`   |
//! | list state          | `<prefix><u64 BE sequence>`                   | `<i64 BE expiry><element>` |
//! | map state           | `<prefix><map key>`                           | `<i64 BE expiry><value>`   |
//! | `tws.timers-by-time`| `<time><key>`                                 | empty                      |
//! | `tws.timers-by-key` | `<prefix><time>`                              | empty                      |
//! | `tws.ttl`           | `<time of expiry><u8 length><name><prefix>`   | empty                      |
//! | event time          | `max` (latest), `batch-<20 digits>` (rescale) | `<i64 BE batch><i64 BE ms>`|
//!
//! `expiry` is [`NO_EXPIRY`] without a TTL. `<time>` is [`ordered_time`]: 8 bytes that sort
//! as the signed milliseconds, so scans in key order are scans in time order. A TTL index
//! entry stands for every entry of one variable and grouping key written with that expiry (a
//! batch's writes share one: its processing time + the TTL): the sweep reads the key's entries
//! and deletes the expired ones, so a list or map written in a batch is one index entry, not one
//! per element. Entries of kstate 0.1 (before 2026-12) end with a `<suffix>`, the rest of the
//! one entry they stand for (a list sequence, a map key); [`split_ttl_entry`] reads both.

use crate::error::{Error, Result};

/// The expiry of a value without a TTL.
pub const NO_EXPIRY: i64 = i64::MAX;
/// The key of the event-time store's latest `(batch, largest event time)` record.
pub const LATEST_EVENT_TIME_KEY: &[u8] = b"max";

const EXPIRY_LEN: usize = 8;
const LENGTH_LEN: usize = 4;
const TIME_LEN: usize = 8;
const SEQUENCE_LEN: usize = 8;
const SIGN: u64 = 1 << 63;

fn corrupted(what: &str, raw: &[u8]) -> Error {
    Error::Corrupted(format!("processor state: {what} ({} bytes)", raw.len()))
}

fn be8(raw: &[u8]) -> [u8; 8] {
    raw[..8].try_into().expect("8 bytes")
}

/// `<expiry><value>`: a variable's stored value.
pub fn stored_value(expiry: i64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(EXPIRY_LEN + value.len());
    begin_stored_value(expiry, &mut out);
    out.extend_from_slice(value);
    out
}

/// Writes a stored value's expiry; the value's bytes follow (encoded in place by the caller).
pub fn begin_stored_value(expiry: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&expiry.to_be_bytes());
}

/// Splits a stored value into its expiry and the value's bytes.
pub fn split_stored(stored: &[u8]) -> Result<(i64, &[u8])> {
    if stored.len() < EXPIRY_LEN {
        return Err(corrupted("a value shorter than its 8-byte expiry", stored));
    }
    Ok((i64::from_be_bytes(be8(stored)), &stored[EXPIRY_LEN..]))
}

/// The expiry of a stored value.
pub fn expiry_of(stored: &[u8]) -> Result<i64> {
    split_stored(stored).map(|(expiry, _)| expiry)
}

/// `<u32 BE length><key>`: what every list, map and by-key timer entry of `key` starts with.
pub fn key_prefix(key: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(LENGTH_LEN + key.len());
    push_key_prefix(key, &mut out)?;
    Ok(out)
}

/// Appends [`key_prefix`]`(key)` to `out` (many keys' prefixes in one buffer).
pub fn push_key_prefix(key: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let length = u32::try_from(key.len()).map_err(|_| {
        Error::InvalidArgument(format!(
            "a grouping key of {} bytes is longer than processor state holds (4 GiB)",
            key.len()
        ))
    })?;
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(key);
    Ok(())
}

/// Splits a key that starts with a [`key_prefix`] into the grouping key and the rest.
pub fn split_prefixed(raw: &[u8]) -> Result<(&[u8], &[u8])> {
    let length = raw
        .get(..LENGTH_LEN)
        .map(|l| u32::from_be_bytes(l.try_into().expect("4 bytes")) as usize)
        .filter(|length| raw.len() - LENGTH_LEN >= *length)
        .ok_or_else(|| corrupted("a key shorter than its length prefix says", raw))?;
    let (key, rest) = raw[LENGTH_LEN..].split_at(length);
    Ok((key, rest))
}

/// A list element's key: `<prefix><u64 BE sequence>`.
pub fn list_key(prefix: &[u8], sequence: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + SEQUENCE_LEN);
    out.extend_from_slice(prefix);
    out.extend_from_slice(&sequence.to_be_bytes());
    out
}

/// The first and the last possible element key of the list under `prefix` (inclusive bounds:
/// a reverse scan's first entry is the newest element).
pub fn list_bounds(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    (list_key(prefix, 0), list_key(prefix, u64::MAX))
}

/// The sequence of a list element's key under `prefix`.
pub fn list_sequence(key: &[u8], prefix: &[u8]) -> Result<u64> {
    match key.strip_prefix(prefix) {
        Some(suffix) if suffix.len() == SEQUENCE_LEN => Ok(u64::from_be_bytes(be8(suffix))),
        _ => Err(corrupted("not a list element key of this prefix", key)),
    }
}

/// How a list becomes a new one ([`list_replacement`]): the writes to stage under its prefix
/// (`None`: a delete) and the sequence its next element takes.
pub struct ListReplacement {
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub next_sequence: u64,
}

/// The fewer writes that make the list under `prefix`, whose elements are `entries` (`(sequence
/// suffix, stored value)` in sequence order), hold `stored` instead, of two ways:
/// - in place: element `i` at the list's first sequence + `i`, written only where it differs,
///   the elements past the new list's end deleted;
/// - sliding, when the new list starts with a tail of the old one (a list kept as its last `N`
///   elements): the elements before that tail deleted, the rest appended.
///
/// Keeping the last `N` of a list by `put` then writes the elements that came and went, not all
/// `N` (the list's reads follow sequence order, wherever it starts).
pub fn list_replacement<S: AsRef<[u8]>, V: AsRef<[u8]>>(
    prefix: &[u8],
    entries: &[(S, V)],
    stored: Vec<Vec<u8>>,
) -> Result<ListReplacement> {
    let sequences = entries
        .iter()
        .map(|(suffix, _)| list_sequence(suffix.as_ref(), &[]))
        .collect::<Result<Vec<u64>>>()?;
    let (old, new) = (entries.len(), stored.len());
    let first = sequences.first().copied().unwrap_or(0);
    // In place: which new elements are already there, and which old ones go.
    let mut unchanged = vec![false; new];
    let mut deleted = Vec::new();
    for (position, (sequence, (_, value))) in sequences.iter().zip(entries).enumerate() {
        let at = (sequence - first) as usize;
        match stored.get(at) {
            Some(element) => unchanged[at] = element.as_slice() == value.as_ref(),
            None => deleted.push(position),
        }
    }
    let in_place_writes = deleted.len() + unchanged.iter().filter(|same| !**same).count();
    // Sliding: the fewest old elements to drop so that the rest begin the new list.
    let tail_start = (old.saturating_sub(new)..old).find(|&k| {
        entries[k..]
            .iter()
            .zip(&stored)
            .all(|((_, value), element)| value.as_ref() == element.as_slice())
    });
    match tail_start {
        Some(k) if k + new - (old - k) < in_place_writes => {
            let next = sequences[old - 1] + 1;
            let mut writes: Vec<_> = entries[..k]
                .iter()
                .map(|(suffix, _)| ([prefix, suffix.as_ref()].concat(), None))
                .collect();
            let appended = stored.into_iter().skip(old - k);
            let mut sequence = next;
            for element in appended {
                writes.push((list_key(prefix, sequence), Some(element)));
                sequence += 1;
            }
            Ok(ListReplacement {
                writes,
                next_sequence: sequence,
            })
        }
        _ => {
            let mut writes: Vec<_> = deleted
                .into_iter()
                .map(|position| ([prefix, entries[position].0.as_ref()].concat(), None))
                .collect();
            for (i, element) in stored.into_iter().enumerate() {
                if !unchanged[i] {
                    writes.push((list_key(prefix, first + i as u64), Some(element)));
                }
            }
            Ok(ListReplacement {
                writes,
                next_sequence: first + new as u64,
            })
        }
    }
}

/// Milliseconds as 8 bytes that sort as the signed value (big-endian, sign bit flipped).
pub fn ordered_time(ms: i64) -> [u8; 8] {
    ((ms as u64) ^ SIGN).to_be_bytes()
}

/// The milliseconds of the [`ordered_time`] that `raw` starts with.
pub fn time_of(raw: &[u8]) -> Result<i64> {
    if raw.len() < TIME_LEN {
        return Err(corrupted("a time shorter than 8 bytes", raw));
    }
    Ok((u64::from_be_bytes(be8(raw)) ^ SIGN) as i64)
}

/// A timer's two keys: `<time><key>` (by time) and `<prefix><time>` (by key).
pub fn timer_keys(expiry_ms: i64, key: &[u8], prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let time = ordered_time(expiry_ms);
    ([&time[..], key].concat(), [prefix, &time[..]].concat())
}

/// A by-time timer key's expiry and grouping key.
pub fn split_timer_by_time(raw: &[u8]) -> Result<(i64, &[u8])> {
    Ok((time_of(raw)?, &raw[TIME_LEN..]))
}

/// A by-key timer key's grouping key and expiry.
pub fn split_timer_by_key(raw: &[u8]) -> Result<(&[u8], i64)> {
    let (key, time) = split_prefixed(raw)?;
    if time.len() != TIME_LEN {
        return Err(corrupted("a by-key timer key without its 8-byte time", raw));
    }
    Ok((key, time_of(time)?))
}

/// The expiry of a by-key timer key given what follows its prefix (a read-ahead's suffix).
pub fn timer_suffix_time(suffix: &[u8]) -> Result<i64> {
    if suffix.len() != TIME_LEN {
        return Err(corrupted(
            "a by-key timer key without its 8-byte time",
            suffix,
        ));
    }
    time_of(suffix)
}

/// The `<u8 length><name>` a variable's TTL index entries carry.
pub fn ttl_name(name: &str) -> Result<Vec<u8>> {
    let length = u8::try_from(name.len()).map_err(|_| {
        Error::InvalidArgument(format!(
            "a state variable with a TTL needs a name under 256 bytes, got {name:?}"
        ))
    })?;
    Ok([&[length][..], name.as_bytes()].concat())
}

/// A TTL index entry: `<time of expiry><ttl name><prefix>` (`ttl_name` from [`ttl_name`]).
pub fn ttl_entry(expiry: i64, ttl_name: &[u8], prefix: &[u8]) -> Vec<u8> {
    [&ordered_time(expiry)[..], ttl_name, prefix].concat()
}

/// What a TTL index entry names.
#[derive(Debug, PartialEq, Eq)]
pub struct TtlEntry<'a> {
    pub expiry: i64,
    /// The state variable.
    pub name: &'a str,
    /// The pickled grouping key (a value state variable's store key).
    pub key: &'a [u8],
    /// The grouping key's prefix: a list or map variable's entries of the key.
    pub prefix: &'a [u8],
    /// Empty: every entry of the key; else (kstate 0.1's entries) the rest of the one list or
    /// map entry meant, `<prefix><suffix>`.
    pub suffix: &'a [u8],
}

/// Reads a TTL index entry.
pub fn split_ttl_entry(raw: &[u8]) -> Result<TtlEntry<'_>> {
    let bad = || corrupted("a TTL index entry cut short or with a name not UTF-8", raw);
    let expiry = time_of(raw)?;
    let name_length = *raw.get(TIME_LEN).ok_or_else(bad)? as usize;
    let name_end = TIME_LEN + 1 + name_length;
    let name = raw.get(TIME_LEN + 1..name_end).ok_or_else(bad)?;
    let name = std::str::from_utf8(name).map_err(|_| bad())?;
    let prefixed = &raw[name_end..];
    let (key, suffix) = split_prefixed(prefixed)?;
    Ok(TtlEntry {
        expiry,
        name,
        key,
        prefix: &prefixed[..prefixed.len() - suffix.len()],
        suffix,
    })
}

/// An event-time record: `<i64 BE batch id><i64 BE largest event time (ms)>`.
pub fn event_time_record(batch_id: i64, time_ms: i64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&batch_id.to_be_bytes());
    out[8..].copy_from_slice(&time_ms.to_be_bytes());
    out
}

/// `(batch id, largest event time)` of an event-time record.
pub fn split_event_time_record(raw: &[u8]) -> Result<(i64, i64)> {
    if raw.len() != 16 {
        return Err(corrupted("an event-time record not of 16 bytes", raw));
    }
    Ok((
        i64::from_be_bytes(be8(raw)),
        i64::from_be_bytes(be8(&raw[8..])),
    ))
}

/// The key of one batch's event-time record in a rescaled store's history:
/// `batch-<batch id, 20 digits>` (the batch ids' order).
pub fn event_time_history_key(batch_id: i64) -> Vec<u8> {
    format!("batch-{batch_id:020}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_values_round_trip_and_short_ones_are_corrupted() {
        let stored = stored_value(1_700_000_000_000, b"v");
        assert_eq!(stored[..8], 1_700_000_000_000i64.to_be_bytes());
        assert_eq!(
            split_stored(&stored).unwrap(),
            (1_700_000_000_000, &b"v"[..])
        );
        assert_eq!(expiry_of(&stored_value(NO_EXPIRY, b"")).unwrap(), NO_EXPIRY);
        assert!(matches!(expiry_of(b"short"), Err(Error::Corrupted(_))));
    }

    #[test]
    fn prefixes_round_trip_and_never_prefix_another_key() {
        let prefix = key_prefix(b"ab").unwrap();
        assert_eq!(prefix, b"\0\0\0\x02ab");
        let key = list_key(&prefix, 7);
        assert_eq!(
            split_prefixed(&key).unwrap(),
            (&b"ab"[..], &7u64.to_be_bytes()[..])
        );
        assert!(!list_key(&key_prefix(b"abc").unwrap(), 0).starts_with(&prefix));
        assert!(matches!(
            split_prefixed(b"\0\0\0\x09ab"),
            Err(Error::Corrupted(_))
        ));
        assert!(matches!(split_prefixed(b"\0\0"), Err(Error::Corrupted(_))));
    }

    #[test]
    fn list_keys_sort_by_sequence() {
        let prefix = key_prefix(b"k").unwrap();
        let keys: Vec<_> = [0u64, 1, 255, 256, u64::MAX]
            .iter()
            .map(|s| list_key(&prefix, *s))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let (first, last) = list_bounds(&prefix);
        assert!(keys.iter().all(|k| first <= *k && *k <= last));
        assert_eq!(list_sequence(&keys[3], &prefix).unwrap(), 256);
        assert!(matches!(
            list_sequence(&prefix, &prefix),
            Err(Error::Corrupted(_))
        ));
    }

    #[test]
    fn ordered_times_sort_as_signed_and_round_trip() {
        let times = [i64::MIN, -1_000, -1, 0, 1, 1_700_000_000_000, i64::MAX];
        let encoded: Vec<_> = times.iter().map(|t| ordered_time(*t)).collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for (t, e) in times.iter().zip(&encoded) {
            assert_eq!(time_of(e).unwrap(), *t);
        }
        assert_eq!(ordered_time(0), [0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(time_of(b"1234567"), Err(Error::Corrupted(_))));
    }

    #[test]
    fn timer_keys_round_trip_and_sort_by_time() {
        let prefix = key_prefix(b"key").unwrap();
        let (by_time, by_key) = timer_keys(-5, b"key", &prefix);
        assert_eq!(split_timer_by_time(&by_time).unwrap(), (-5, &b"key"[..]));
        assert_eq!(split_timer_by_key(&by_key).unwrap(), (&b"key"[..], -5));
        let (later, later_by_key) = timer_keys(10, b"a", &key_prefix(b"a").unwrap());
        assert!(by_time < later);
        assert!(by_key < timer_keys(10, b"key", &prefix).1);
        assert!(!later_by_key.starts_with(&prefix));
        assert!(matches!(
            split_timer_by_key(&prefix),
            Err(Error::Corrupted(_))
        ));
        assert_eq!(timer_suffix_time(&by_key[prefix.len()..]).unwrap(), -5);
        assert!(matches!(
            timer_suffix_time(&by_key[prefix.len() + 1..]),
            Err(Error::Corrupted(_))
        ));
    }

    #[test]
    fn ttl_entries_round_trip_and_sort_by_expiry() {
        let prefix = key_prefix(b"key").unwrap();
        let name = ttl_name("counts").unwrap();
        let entry = ttl_entry(42, &name, &prefix);
        let read = split_ttl_entry(&entry).unwrap();
        assert_eq!(read.expiry, 42);
        assert_eq!(read.name, "counts");
        assert_eq!(read.key, b"key");
        assert_eq!(read.prefix, prefix);
        assert_eq!(read.suffix, b"");
        assert!(ttl_entry(41, &name, &key_prefix(b"z").unwrap()) < entry);
        // kstate 0.1 indexed each list element and map entry: the element's key follows.
        let element = list_key(&prefix, 3);
        let old = [&ttl_entry(42, &name, b"")[..], &element].concat();
        let read = split_ttl_entry(&old).unwrap();
        assert_eq!((read.key, read.prefix), (&b"key"[..], &prefix[..]));
        assert_eq!(read.suffix, 3u64.to_be_bytes());
        assert!(matches!(
            ttl_name(&"x".repeat(256)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            split_ttl_entry(&entry[..12]),
            Err(Error::Corrupted(_))
        ));
    }

    #[test]
    fn event_time_records_round_trip() {
        let record = event_time_record(3, -7);
        assert_eq!(split_event_time_record(&record).unwrap(), (3, -7));
        assert!(matches!(
            split_event_time_record(&record[..15]),
            Err(Error::Corrupted(_))
        ));
        assert_eq!(event_time_history_key(12), b"batch-00000000000000000012");
        assert!(event_time_history_key(9) < event_time_history_key(10));
    }

    /// A list held as `sequence -> stored`, changed by a replacement's writes.
    fn replaced(
        prefix: &[u8],
        list: &std::collections::BTreeMap<u64, Vec<u8>>,
        new: &[Vec<u8>],
    ) -> (std::collections::BTreeMap<u64, Vec<u8>>, usize, u64) {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = list
            .iter()
            .map(|(sequence, value)| (sequence.to_be_bytes().to_vec(), value.clone()))
            .collect();
        let replacement = list_replacement(prefix, &entries, new.to_vec()).unwrap();
        let mut after = list.clone();
        for (key, value) in &replacement.writes {
            let sequence = list_sequence(key, prefix).unwrap();
            match value {
                Some(value) => after.insert(sequence, value.clone()),
                None => after.remove(&sequence),
            };
        }
        let written = replacement.writes.len();
        (after, written, replacement.next_sequence)
    }

    #[test]
    fn a_list_replaced_holds_the_new_list_with_the_fewest_writes() {
        let prefix = key_prefix(b"k").unwrap();
        let list = |first: u64, values: &[u8]| -> std::collections::BTreeMap<u64, Vec<u8>> {
            (first..).zip(values.iter().map(|v| vec![*v])).collect()
        };
        let new = |values: &[u8]| -> Vec<Vec<u8>> { values.iter().map(|v| vec![*v]).collect() };
        // The last three kept: one delete, one append, wherever the list starts.
        let (after, written, next) = replaced(&prefix, &list(7, b"abc"), &new(b"bcd"));
        assert_eq!(after, list(8, b"bcd"));
        assert_eq!((written, next), (2, 11));
        // The last 50 kept, two more: two deletes, two appends (in place: 50 writes).
        let fifty: Vec<u8> = (0..50).collect();
        let mut moved = fifty[2..].to_vec();
        moved.extend([200, 201]);
        let (after, written, _) = replaced(&prefix, &list(0, &fifty), &new(&moved));
        assert_eq!((after, written), (list(2, &moved), 4));
        // Unchanged: nothing written; appended to: only the new elements; shortened in place.
        assert_eq!(replaced(&prefix, &list(3, b"xyz"), &new(b"xyz")).1, 0);
        let (after, written, next) = replaced(&prefix, &list(0, b"xy"), &new(b"xyzw"));
        assert_eq!((after, written, next), (list(0, b"xyzw"), 2, 4));
        let (after, written, next) = replaced(&prefix, &list(5, b"xyzw"), &new(b"xq"));
        assert_eq!((after, written, next), (list(5, b"xq"), 3, 7));
        // From nothing, and to a list with nothing in common.
        assert_eq!(
            replaced(&prefix, &list(0, b""), &new(b"ab")).0,
            list(0, b"ab")
        );
        assert_eq!(
            replaced(&prefix, &list(9, b"ab"), &new(b"cd")).0,
            list(9, b"cd")
        );
    }

    #[test]
    fn random_replacements_hold_the_new_list_and_append_after_it() {
        let prefix = key_prefix(b"key").unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next_random = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let mut list = std::collections::BTreeMap::new();
        for _ in 0..5_000 {
            let held: Vec<Vec<u8>> = list.values().cloned().collect();
            let new: Vec<Vec<u8>> = match next_random(4) {
                // The last few kept, some appended.
                0 => {
                    let keep = next_random(held.len() as u64 + 1) as usize;
                    let mut kept = held[held.len() - keep..].to_vec();
                    kept.extend((0..next_random(4)).map(|_| vec![next_random(3) as u8]));
                    kept
                }
                // Elements changed here and there, the length changed.
                1 => {
                    let mut changed = held.clone();
                    for element in changed.iter_mut() {
                        if next_random(3) == 0 {
                            *element = vec![next_random(3) as u8];
                        }
                    }
                    changed.truncate(next_random(changed.len() as u64 + 3) as usize);
                    changed
                }
                // Anything: few distinct values, so tails often match by chance.
                _ => (0..next_random(8))
                    .map(|_| vec![next_random(3) as u8])
                    .collect(),
            };
            let (after, _, next_sequence) = replaced(&prefix, &list, &new);
            assert_eq!(after.values().cloned().collect::<Vec<_>>(), new);
            assert!(after.keys().all(|sequence| *sequence < next_sequence));
            // Holes (a TTL's expired elements) now and then.
            list = after;
            if next_random(5) == 0 && !list.is_empty() {
                let at = *list
                    .keys()
                    .nth(next_random(list.len() as u64) as usize)
                    .unwrap();
                list.remove(&at);
            }
        }
    }
}

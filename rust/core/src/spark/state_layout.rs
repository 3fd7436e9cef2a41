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
//! | list state: element | `<prefix><u64 BE sequence>`                   | `<i64 BE expiry><element>` |
//! | list state: run     | `<prefix><u64 BE sequence><u8 1>`             | `<i64 BE expiry>` then `<u32 BE length><element>` each |
//! | map state           | `<prefix><map key>`                           | `<i64 BE expiry><value>`   |
//! | `tws.timers-by-time`| `<time><key>`                                 | empty                      |
//! | `tws.timers-by-key` | `<prefix><time>`                              | empty                      |
//! | `tws.ttl`           | `<time of expiry><u8 length><name><prefix>`   | empty                      |
//! | event time          | `max` (latest), `batch-<20 digits>` (rescale) | `<i64 BE batch><i64 BE ms>`|
//!
//! A list is its entries in key order: a run holds the elements one `put` or `appendList` wrote
//! (one entry, one expiry, however long the list), an element what one `appendValue` wrote
//! (kstate before 2026-12 wrote every element so). A list's sequences go up by one an entry.
//! `expiry` is [`NO_EXPIRY`] without a TTL. `<time>` is [`ordered_time`]: 8 bytes that sort
//! as the signed milliseconds, so scans in key order are scans in time order. A TTL index
//! entry stands for every entry of one variable and grouping key written with that expiry (a
//! batch's writes share one: its processing time + the TTL): the sweep reads the key's entries
//! and deletes the expired ones, so a list or map written in a batch is one index entry, not one
//! per element. Entries of kstate 0.1 (before 2026-12) end with a `<suffix>`, the rest of the
//! one entry they stand for (a list sequence, a map key); [`split_ttl_entry`] reads both.

use crate::error::{Error, Result};

/// The version of this layout, recorded with the state's schemas (kstate.spark.format.
/// state_schemas) before a query writes: a kstate refuses state of a newer version instead of
/// misreading it. 1: a list is one entry per element; 2: a list's entries are also runs. Goes
/// up with any change an older kstate would misread.
pub const LAYOUT_VERSION: u32 = 2;
/// The expiry of a value without a TTL.
pub const NO_EXPIRY: i64 = i64::MAX;
/// The key of the event-time store's latest `(batch, largest event time)` record.
pub const LATEST_EVENT_TIME_KEY: &[u8] = b"max";

const EXPIRY_LEN: usize = 8;
const LENGTH_LEN: usize = 4;
const TIME_LEN: usize = 8;
const SEQUENCE_LEN: usize = 8;
/// The byte after a run's sequence in its key ([`list_run_key`]).
const RUN_TAG: u8 = 1;
const RUN_SUFFIX_LEN: usize = SEQUENCE_LEN + 1;
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

/// A list entry holding one element: `<prefix><u64 BE sequence>`.
pub fn list_key(prefix: &[u8], sequence: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + SEQUENCE_LEN + 1);
    push_list_key(prefix, sequence, &mut out);
    out
}

/// Appends [`list_key`]`(prefix, sequence)` to `out`.
pub fn push_list_key(prefix: &[u8], sequence: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(prefix);
    out.extend_from_slice(&sequence.to_be_bytes());
}

/// A list entry holding a run (the elements one call wrote): `<prefix><u64 BE sequence><RUN_TAG>`.
/// It sorts right after an element of the same sequence, so a scan reads a list's entries in
/// sequence order whichever kind each is.
pub fn list_run_key(prefix: &[u8], sequence: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + RUN_SUFFIX_LEN);
    push_list_run_key(prefix, sequence, &mut out);
    out
}

/// Appends [`list_run_key`]`(prefix, sequence)` to `out`.
pub fn push_list_run_key(prefix: &[u8], sequence: u64, out: &mut Vec<u8>) {
    push_list_key(prefix, sequence, out);
    out.push(RUN_TAG);
}

/// The sequence of a list entry given what follows its prefix, and whether the entry is a run.
pub fn split_list_suffix(suffix: &[u8]) -> Result<(u64, bool)> {
    match suffix.len() {
        SEQUENCE_LEN => Ok((u64::from_be_bytes(be8(suffix)), false)),
        RUN_SUFFIX_LEN if suffix[SEQUENCE_LEN] == RUN_TAG => {
            Ok((u64::from_be_bytes(be8(suffix)), true))
        }
        _ => Err(corrupted("not a list entry's key suffix", suffix)),
    }
}

/// The sequence of a list entry's key under `prefix`.
pub fn list_sequence(key: &[u8], prefix: &[u8]) -> Result<u64> {
    match key.strip_prefix(prefix) {
        Some(suffix) => split_list_suffix(suffix).map(|(sequence, _)| sequence),
        None => Err(corrupted("not a list entry key of this prefix", key)),
    }
}

/// Starts an element of a run being written after `out`'s `<expiry>`: its length's place,
/// which [`end_run_element`] fills once the element's bytes follow. Returns where it starts.
pub fn begin_run_element(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(&[0; LENGTH_LEN]);
    out.len()
}

/// Ends the run element begun at `start` ([`begin_run_element`]): its bytes are `out[start..]`.
pub fn end_run_element(out: &mut [u8], start: usize) -> Result<()> {
    let length = u32::try_from(out.len() - start).map_err(|_| {
        Error::InvalidArgument(format!(
            "a list element of {} bytes is longer than list state holds (4 GiB)",
            out.len() - start
        ))
    })?;
    out[start - LENGTH_LEN..start].copy_from_slice(&length.to_be_bytes());
    Ok(())
}

/// The elements of a list entry, given what follows its prefix and its value after the expiry:
/// the value itself for an element, each `<u32 BE length><element>` of it for a run.
pub fn list_elements<'a>(suffix: &[u8], value: &'a [u8]) -> Result<ListElements<'a>> {
    let (_, run) = split_list_suffix(suffix)?;
    Ok(ListElements {
        rest: value,
        run,
        done: false,
    })
}

/// The elements of one list entry ([`list_elements`]), in order.
pub struct ListElements<'a> {
    rest: &'a [u8],
    run: bool,
    done: bool,
}

impl<'a> Iterator for ListElements<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || (self.run && self.rest.is_empty()) {
            return None;
        }
        if !self.run {
            self.done = true;
            return Some(Ok(self.rest));
        }
        let element = self
            .rest
            .get(..LENGTH_LEN)
            .map(|l| u32::from_be_bytes(l.try_into().expect("4 bytes")) as usize)
            .and_then(|length| self.rest.get(LENGTH_LEN..LENGTH_LEN + length));
        match element {
            Some(element) => {
                self.rest = &self.rest[LENGTH_LEN + element.len()..];
                Some(Ok(element))
            }
            None => {
                self.done = true;
                Some(Err(corrupted(
                    "a list run cut inside an element",
                    self.rest,
                )))
            }
        }
    }
}

/// How a list becomes a new one ([`list_replacement`]): the writes to stage under its prefix
/// (`None`: a delete) and the sequence its next element takes.
pub struct ListReplacement {
    pub writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub next_sequence: u64,
}

/// The writes that make the list under `prefix`, whose entries are `entries` (`(suffix, stored
/// value)` in key order), hold the one run `stored` instead, at the list's first sequence (0 for
/// none): every other entry deleted, and the run not written where it is held already. A list
/// kept by `put` is one write a call, however long.
pub fn list_replacement<S: AsRef<[u8]>, V: AsRef<[u8]>>(
    prefix: &[u8],
    entries: &[(S, V)],
    stored: Vec<u8>,
) -> Result<ListReplacement> {
    let first = match entries.first() {
        Some((suffix, _)) => split_list_suffix(suffix.as_ref())?.0,
        None => 0,
    };
    let key = list_run_key(prefix, first);
    let suffix = &key[prefix.len()..];
    let mut writes = Vec::with_capacity(entries.len() + 1);
    let mut held = false;
    for (old, value) in entries {
        if old.as_ref() == suffix {
            held = value.as_ref() == stored.as_slice();
        } else {
            writes.push(([prefix, old.as_ref()].concat(), None));
        }
    }
    if !held {
        writes.push((key, Some(stored)));
    }
    Ok(ListReplacement {
        writes,
        next_sequence: first + 1,
    })
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
    fn list_entries_sort_by_sequence_whichever_their_kind() {
        let prefix = key_prefix(b"k").unwrap();
        let keys = [
            list_key(&prefix, 0),
            list_run_key(&prefix, 0),
            list_key(&prefix, 1),
            list_run_key(&prefix, 255),
            list_key(&prefix, 256),
            list_run_key(&prefix, u64::MAX),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(keys.iter().all(|k| k.starts_with(&prefix)));
        assert_eq!(
            split_list_suffix(&keys[3][prefix.len()..]).unwrap(),
            (255, true)
        );
        assert_eq!(
            split_list_suffix(&keys[4][prefix.len()..]).unwrap(),
            (256, false)
        );
        assert_eq!(list_sequence(&keys[5], &prefix).unwrap(), u64::MAX);
        for bad in [&b"1234567"[..], b"123456789", b"12345678\x01\x01", b""] {
            assert!(matches!(split_list_suffix(bad), Err(Error::Corrupted(_))));
        }
        assert!(matches!(
            list_sequence(&prefix, &prefix),
            Err(Error::Corrupted(_))
        ));
    }

    /// A run's stored value of `elements`, written as the binding writes one.
    fn run(expiry: i64, elements: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        begin_stored_value(expiry, &mut out);
        for element in elements {
            let start = begin_run_element(&mut out);
            out.extend_from_slice(element);
            end_run_element(&mut out, start).unwrap();
        }
        out
    }

    fn elements_of(suffix: &[u8], stored: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (_, value) = split_stored(stored)?;
        list_elements(suffix, value)?
            .map(|element| element.map(<[u8]>::to_vec))
            .collect()
    }

    #[test]
    fn runs_and_elements_read_back_and_a_cut_run_is_corrupted() {
        let run_suffix = &list_run_key(&[], 4)[..];
        let stored = run(9, &[b"ab", b"", b"\x00\x00\x00\x07c"]);
        assert_eq!(expiry_of(&stored).unwrap(), 9);
        assert_eq!(
            elements_of(run_suffix, &stored).unwrap(),
            [b"ab".to_vec(), vec![], b"\x00\x00\x00\x07c".to_vec()]
        );
        // An element's value is its one element, whatever its bytes.
        assert_eq!(
            elements_of(&4u64.to_be_bytes(), &stored).unwrap(),
            [stored[8..].to_vec()]
        );
        for cut in 9..stored.len() {
            let read = elements_of(run_suffix, &stored[..cut]);
            // Cut at an element's end reads as a shorter run; anywhere else it is corrupted.
            if [8 + 6, 8 + 10].contains(&cut) {
                assert!(read.is_ok());
            } else {
                assert!(matches!(read, Err(Error::Corrupted(_))), "cut at {cut}");
            }
        }
        assert!(elements_of(run_suffix, &run(1, &[])).unwrap().is_empty());
    }

    /// Pseudo-random numbers below each call's bound (xorshift from `seed`): a test's draws.
    fn randoms(mut state: u64) -> impl FnMut(u64) -> u64 {
        move |bound| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        }
    }

    #[test]
    fn garbage_list_entries_read_as_elements_or_corrupted_never_a_panic() {
        let mut next_random = randoms(0x2545_f491_4f6c_dd1du64);
        for _ in 0..50_000 {
            let suffix: Vec<u8> = (0..next_random(11)).map(|_| next_random(3) as u8).collect();
            // Small bytes often: lengths that fit, cut, or overrun.
            let value: Vec<u8> = (0..next_random(24)).map(|_| next_random(9) as u8).collect();
            match list_elements(&suffix, &value) {
                Err(error) => assert!(matches!(error, Error::Corrupted(_))),
                Ok(elements) => {
                    let mut total = 0;
                    for element in elements {
                        match element {
                            Ok(element) => total += element.len(),
                            Err(error) => assert!(matches!(error, Error::Corrupted(_))),
                        }
                    }
                    assert!(total <= value.len());
                }
            }
        }
    }

    /// A list held as `suffix -> stored`, changed by staged writes.
    type Entries = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

    fn apply(prefix: &[u8], list: &mut Entries, writes: &[(Vec<u8>, Option<Vec<u8>>)]) {
        for (key, value) in writes {
            let suffix = key.strip_prefix(prefix).unwrap().to_vec();
            match value {
                Some(value) => list.insert(suffix, value.clone()),
                None => list.remove(&suffix),
            };
        }
    }

    fn read(list: &Entries) -> Vec<Vec<u8>> {
        list.iter()
            .flat_map(|(suffix, stored)| elements_of(suffix, stored).unwrap())
            .collect()
    }

    fn replace(prefix: &[u8], list: &mut Entries, elements: &[&[u8]]) -> (usize, u64) {
        let entries: Vec<_> = list.iter().collect();
        let replacement = list_replacement(prefix, &entries, run(NO_EXPIRY, elements)).unwrap();
        apply(prefix, list, &replacement.writes);
        (replacement.writes.len(), replacement.next_sequence)
    }

    #[test]
    fn a_list_replaced_is_one_run_at_its_first_sequence() {
        let prefix = key_prefix(b"k").unwrap();
        // Written element by element (as kstate before runs wrote every list), from sequence 7.
        let mut list: Entries = (7..10u64)
            .map(|s| {
                (
                    s.to_be_bytes().to_vec(),
                    stored_value(NO_EXPIRY, &[s as u8]),
                )
            })
            .collect();
        assert_eq!(read(&list), [vec![7], vec![8], vec![9]]);
        assert_eq!(replace(&prefix, &mut list, &[b"b", b"c", b"d"]), (4, 8));
        assert_eq!(list.keys().collect::<Vec<_>>(), [&list_run_key(&[], 7)]);
        assert_eq!(read(&list), [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        // Kept as it is: nothing written; changed: the run overwritten, one write.
        assert_eq!(replace(&prefix, &mut list, &[b"b", b"c", b"d"]), (0, 8));
        assert_eq!(replace(&prefix, &mut list, &[b"c", b"d", b"e"]), (1, 8));
        // Appended to since (an element, a run), then replaced: the appends deleted.
        list.insert(8u64.to_be_bytes().to_vec(), stored_value(NO_EXPIRY, b"f"));
        list.insert(list_run_key(&[], 9), run(NO_EXPIRY, &[b"g", b"h"]));
        assert_eq!(read(&list).len(), 6);
        assert_eq!(replace(&prefix, &mut list, &[b"x"]), (3, 8));
        assert_eq!(read(&list), [b"x".to_vec()]);
        // From nothing: a run at 0.
        let mut empty = Entries::new();
        assert_eq!(replace(&prefix, &mut empty, &[b"a", b"b"]), (1, 1));
        assert_eq!(empty.keys().collect::<Vec<_>>(), [&list_run_key(&[], 0)]);
    }

    #[test]
    fn random_appends_replacements_and_expiries_read_back_in_order() {
        let prefix = key_prefix(b"key").unwrap();
        let mut next_random = randoms(0x9e37_79b9_7f4a_7c15u64);
        let mut list = Entries::new();
        let mut expected: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
        let mut next = 0u64;
        for _ in 0..5_000 {
            let n = next_random(4) as usize + 1;
            let elements: Vec<Vec<u8>> = (0..n).map(|_| vec![next_random(200) as u8]).collect();
            let slices: Vec<&[u8]> = elements.iter().map(Vec::as_slice).collect();
            match next_random(5) {
                0 => {
                    let (_, after) = replace(&prefix, &mut list, &slices);
                    let first = expected.first().map_or(0, |(s, _)| *s);
                    expected = vec![(first, elements)];
                    next = after;
                }
                1 => {
                    list.insert(
                        next.to_be_bytes().to_vec(),
                        stored_value(NO_EXPIRY, &elements[0]),
                    );
                    expected.push((next, vec![elements[0].clone()]));
                    next += 1;
                }
                2 | 3 => {
                    list.insert(list_run_key(&[], next), run(NO_EXPIRY, &slices));
                    expected.push((next, elements));
                    next += 1;
                }
                // An entry expired and swept, anywhere in the list.
                _ if !expected.is_empty() => {
                    let (sequence, _) =
                        expected.remove(next_random(expected.len() as u64) as usize);
                    list.retain(|suffix, _| split_list_suffix(suffix).unwrap().0 != sequence);
                }
                _ => {}
            }
            let flat: Vec<Vec<u8>> = expected.iter().flat_map(|(_, e)| e.clone()).collect();
            assert_eq!(read(&list), flat);
            assert!(list
                .keys()
                .all(|suffix| split_list_suffix(suffix).unwrap().0 < next));
        }
    }
}

//! A grouping key as a processor's state stores it: Python's pickle (protocol 4) of the tuple of
//! the key's column values, byte for byte what `pickle.dumps(key, protocol=4)` writes, for the
//! values Spark's grouping columns mostly give (`None`, `bool`, `int` within i64, `float`, `str`,
//! `bytes`). Anything else (and a key past [`MAX_PAYLOAD`]) is left to Python's pickle, which
//! also reads every key back.
//!
//! The pickle: `PROTO 4`, then (for a payload of 4 bytes or more) `FRAME <u64 LE length>`, then
//! each value's opcode, the tuple's opcode (`TUPLE1`-`TUPLE3`, or `MARK` .. `TUPLE`; `EMPTY_TUPLE`),
//! `STOP`. A `str`, a `bytes` and the tuple are memoized (`MEMOIZE`, indexes from 0 in that
//! order): a value that is the very object memoized before (`Part::Str` / `Part::Bytes` of the
//! same `id`) is written as `BINGET <index>`, as pickle does for one object seen twice.

use smallvec::SmallVec;

/// The largest payload written here: pickle splits frames past 64 KiB and writes large strings
/// and bytes outside them, which this does not.
pub const MAX_PAYLOAD: usize = 60_000;

/// One value of a grouping key. `id` tells objects apart (the Python object's address): pickle
/// memoizes by identity, not equality.
#[derive(Clone, Copy, Debug)]
pub enum Part<'a> {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str { utf8: &'a [u8], id: usize },
    Bytes { bytes: &'a [u8], id: usize },
}

const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const FRAME_HEADER_LEN: usize = 9;
const MIN_FRAMED_PAYLOAD: usize = 4;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const TUPLE: u8 = b't';
const EMPTY_TUPLE: u8 = b')';
const TUPLE1: u8 = 0x85;
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';

/// Appends the pickle of the tuple `parts` to `out`; `false` (and `out` as it was) where the
/// payload would pass [`MAX_PAYLOAD`].
pub fn pickle_key(parts: &[Part<'_>], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    out.extend_from_slice(&[PROTO, 4]);
    let framed = out.len();
    out.extend_from_slice(&[FRAME; FRAME_HEADER_LEN]); // its length once known
    let payload = out.len();
    let mut memo: SmallVec<[usize; 8]> = SmallVec::new();
    if parts.len() > 3 {
        out.push(MARK);
    }
    for part in parts {
        match *part {
            Part::None => out.push(NONE),
            Part::Bool(true) => out.push(NEWTRUE),
            Part::Bool(false) => out.push(NEWFALSE),
            Part::Int(value) => int(value, out),
            Part::Float(value) => {
                out.push(BINFLOAT);
                out.extend_from_slice(&value.to_be_bytes());
            }
            Part::Str { utf8, id } => memoized(id, &mut memo, out, |out| {
                sized(utf8, SHORT_BINUNICODE, BINUNICODE, out)
            }),
            Part::Bytes { bytes, id } => memoized(id, &mut memo, out, |out| {
                sized(bytes, SHORT_BINBYTES, BINBYTES, out)
            }),
        }
        if out.len() - payload > MAX_PAYLOAD {
            out.truncate(start);
            return false;
        }
    }
    match parts.len() {
        0 => out.push(EMPTY_TUPLE),
        n @ 1..=3 => out.extend_from_slice(&[TUPLE1 + (n as u8 - 1), MEMOIZE]),
        _ => out.extend_from_slice(&[TUPLE, MEMOIZE]),
    }
    out.push(STOP);
    let length = out.len() - payload;
    if length < MIN_FRAMED_PAYLOAD {
        out.drain(framed..payload);
    } else {
        out[framed + 1..payload].copy_from_slice(&(length as u64).to_le_bytes());
    }
    true
}

/// `BININT1` / `BININT2` / `BININT` where the value fits 32 signed bits (as pickle picks by the
/// bytes it needs), else `LONG1` with the fewest little-endian two's complement bytes.
fn int(value: i64, out: &mut Vec<u8>) {
    if let Ok(small) = i32::try_from(value) {
        let bytes = small.to_le_bytes();
        if bytes[2] != 0 || bytes[3] != 0 {
            out.push(BININT);
            out.extend_from_slice(&bytes);
        } else if bytes[1] != 0 {
            out.extend_from_slice(&[BININT2, bytes[0], bytes[1]]);
        } else {
            out.extend_from_slice(&[BININT1, bytes[0]]);
        }
        return;
    }
    let bytes = value.to_le_bytes();
    let mut len = bytes.len();
    // A top byte that only repeats the sign of the byte below it is not needed.
    while len > 1
        && ((bytes[len - 1] == 0 && bytes[len - 2] & 0x80 == 0)
            || (bytes[len - 1] == 0xff && bytes[len - 2] & 0x80 != 0))
    {
        len -= 1;
    }
    out.extend_from_slice(&[LONG1, len as u8]);
    out.extend_from_slice(&bytes[..len]);
}

/// The short opcode with a one-byte length below 256 bytes, else the long one with four.
fn sized(data: &[u8], short: u8, long: u8, out: &mut Vec<u8>) {
    if let Ok(len) = u8::try_from(data.len()) {
        out.extend_from_slice(&[short, len]);
    } else {
        out.push(long);
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(data);
}

/// The object `id` written by `write` and memoized, or fetched from the memo if it was before.
fn memoized(
    id: usize,
    memo: &mut SmallVec<[usize; 8]>,
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>),
) {
    match memo.iter().position(|&seen| seen == id) {
        Some(index) => match u8::try_from(index) {
            Ok(index) => out.extend_from_slice(&[BINGET, index]),
            Err(_) => {
                out.push(LONG_BINGET);
                out.extend_from_slice(&(index as u32).to_le_bytes());
            }
        },
        None => {
            write(out);
            out.push(MEMOIZE);
            memo.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pickled(parts: &[Part<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(pickle_key(parts, &mut out));
        out
    }

    // Expected bytes: Python 3.11's `pickle.dumps(key, protocol=4)` (the Python tests compare
    // every kind against pickle itself, on random keys).
    #[test]
    fn keys_pickle_as_python_pickles_them() {
        assert_eq!(pickled(&[]), b"\x80\x04).");
        let a = Part::Str { utf8: b"a", id: 1 };
        assert_eq!(
            pickled(&[a]),
            b"\x80\x04\x95\x07\x00\x00\x00\x00\x00\x00\x00\x8c\x01a\x94\x85\x94."
        );
        assert_eq!(
            pickled(&[a, a]),
            b"\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00\x8c\x01a\x94h\x00\x86\x94."
        );
        assert_eq!(
            pickled(&[Part::Int(256)]),
            b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00M\x00\x01\x85\x94."
        );
        assert_eq!(
            pickled(&[Part::Int(-2_164_260_864)]),
            b"\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00\x8a\x05\x00\x00\x00\x7f\xff\x85\x94."
        );
        assert_eq!(
            pickled(&[Part::Int(2_147_483_648)]),
            b"\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00\x8a\x05\x00\x00\x00\x80\x00\x85\x94."
        );
        assert_eq!(
            pickled(&[
                Part::Bool(true),
                Part::None,
                Part::Bytes { bytes: b"x", id: 2 }
            ]),
            b"\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00\x88NC\x01x\x94\x87\x94."
        );
        assert_eq!(
            pickled(&[Part::Int(1), Part::Int(2), Part::Int(3), Part::Int(4)]),
            b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00(K\x01K\x02K\x03K\x04t\x94."
        );
    }

    #[test]
    fn a_key_past_the_largest_payload_is_left_to_python() {
        let long = vec![b'x'; MAX_PAYLOAD];
        let mut out = b"kept".to_vec();
        assert!(!pickle_key(&[Part::Str { utf8: &long, id: 1 }], &mut out));
        assert_eq!(out, b"kept");
    }
}

//! What the codec takes from libdeflate (a small C library): inflating gzip wrapper values,
//! whole buffers at once, about twice as fast as a streaming inflater (zlib-rs) on Kafka's
//! record sets; and CRC-32, whose per-call cost on ~100-byte messages is a quarter of
//! crc32fast's.
//!
//! libdeflate needs the output buffer up front. A gzip member's trailer states its size mod
//! 2^32 (ISIZE), so a lone member usually inflates in one call; a wrong guess (a trailer that
//! lies, several members) grows the buffer and retries, up to deflate's best ratio (1032:1),
//! beyond which no valid stream can go.

use std::cell::RefCell;
use std::ptr::NonNull;

use libdeflate_sys::{
    libdeflate_alloc_decompressor, libdeflate_crc32, libdeflate_decompressor,
    libdeflate_free_decompressor, libdeflate_gzip_decompress_ex,
    libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE as INSUFFICIENT_SPACE,
    libdeflate_result_LIBDEFLATE_SUCCESS as SUCCESS,
};

use super::legacy::Parsed;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The most output one byte of deflate data can produce.
const DEFLATE_MAX_RATIO: usize = 1032;
/// The first guess for a member whose trailer is not believed.
const MIN_GUESS: usize = 64 * 1024;

/// A libdeflate decompressor (about 10 KiB of tables), one per thread.
struct Decompressor(NonNull<libdeflate_decompressor>);

impl Decompressor {
    fn new() -> Parsed<Self> {
        // SAFETY: allocation has no preconditions; NULL (out of memory) is checked.
        NonNull::new(unsafe { libdeflate_alloc_decompressor() })
            .map(Self)
            .ok_or_else(|| "out of memory allocating a gzip decompressor".to_string())
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: the pointer came from libdeflate_alloc_decompressor and is freed once.
        unsafe { libdeflate_free_decompressor(self.0.as_ptr()) }
    }
}

/// CRC-32 (IEEE) of `data`, as Kafka's message CRC.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    // SAFETY: libdeflate reads exactly `data.len()` bytes from `data`.
    unsafe { libdeflate_crc32(0, data.as_ptr().cast(), data.len()) }
}

thread_local! {
    static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
}

/// Appends the content of every gzip member in `data` to `out`. Like Java's
/// `GZIPInputStream`, which Kafka reads with, members may be concatenated and bytes after a
/// member that do not start another one are ignored; there must be at least one member.
pub(crate) fn gunzip(data: &[u8], out: &mut Vec<u8>) -> Parsed<()> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let decompressor = match &mut *slot {
            Some(decompressor) => decompressor,
            None => slot.insert(Decompressor::new()?),
        };
        let mut rest = data;
        loop {
            let consumed = inflate_member(decompressor, rest, out)?;
            rest = rest.get(consumed..).unwrap_or_default();
            if !rest.starts_with(&GZIP_MAGIC) {
                return Ok(());
            }
        }
    })
}

/// Inflates the gzip member at the start of `data` onto the end of `out`; returns the bytes of
/// `data` it took.
fn inflate_member(
    decompressor: &mut Decompressor,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Parsed<usize> {
    let limit = data.len().saturating_mul(DEFLATE_MAX_RATIO);
    let mut room = first_guess(data).min(limit).max(MIN_GUESS.min(limit));
    loop {
        out.reserve(room);
        let start = out.len();
        let available = out.capacity() - start;
        let (mut consumed, mut produced) = (0usize, 0usize);
        // SAFETY: `decompressor` is live and used by this call alone; the input is `data`;
        // the output is the `available` bytes of spare capacity after `out`'s length, which
        // libdeflate writes at most of, and it reports in `produced` how many it wrote.
        let result = unsafe {
            libdeflate_gzip_decompress_ex(
                decompressor.0.as_ptr(),
                data.as_ptr().cast(),
                data.len(),
                out.as_mut_ptr().add(start).cast(),
                available,
                &mut consumed,
                &mut produced,
            )
        };
        match result {
            SUCCESS => {
                // SAFETY: libdeflate initialized `produced <= available` bytes after `start`.
                unsafe { out.set_len(start + produced) };
                return Ok(consumed);
            }
            INSUFFICIENT_SPACE if available < limit => {
                room = available.saturating_mul(2).min(limit);
            }
            _ => return Err("gzip value does not decompress: corrupt deflate stream".into()),
        }
    }
}

/// The size the member's trailer states (ISIZE, its last 4 bytes, little-endian) if `data`
/// is one member, else a small guess.
fn first_guess(data: &[u8]) -> usize {
    match data.last_chunk::<4>() {
        Some(isize) => (u32::from_le_bytes(*isize) as usize).max(MIN_GUESS),
        None => MIN_GUESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn gunzipped(data: &[u8]) -> Parsed<Vec<u8>> {
        let mut out = Vec::new();
        gunzip(data, &mut out)?;
        Ok(out)
    }

    #[test]
    fn crc32_is_ieee() {
        // The check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn inflates_one_member_and_concatenated_members() {
        let text = b"kafka ".repeat(100_000);
        assert_eq!(gunzipped(&gzip(&text)).unwrap(), text);
        let mut two = gzip(b"first ");
        two.extend(gzip(b"second"));
        assert_eq!(gunzipped(&two).unwrap(), b"first second");
    }

    #[test]
    fn grows_the_buffer_past_a_small_guess() {
        // The guess comes from the last member's trailer: 5 bytes, while the first has 1 MiB.
        let big = b"y".repeat(1 << 20);
        let mut packed = gzip(&big);
        packed.extend(gzip(b"small"));
        let mut expected = big.clone();
        expected.extend_from_slice(b"small");
        assert_eq!(gunzipped(&packed).unwrap(), expected);
    }

    #[test]
    fn a_trailer_with_the_wrong_size_is_corrupt() {
        // As Java's GZIPInputStream ("Corrupt GZIP trailer").
        let mut packed = gzip(&b"x".repeat(1 << 20));
        let at = packed.len() - 4;
        packed[at..].copy_from_slice(&16u32.to_le_bytes());
        assert!(gunzipped(&packed).is_err());
    }

    #[test]
    fn ignores_bytes_after_a_member_that_start_no_member() {
        let mut packed = gzip(b"value");
        packed.extend_from_slice(b"junk");
        assert_eq!(gunzipped(&packed).unwrap(), b"value");
    }

    #[test]
    fn rejects_empty_truncated_and_corrupt_input() {
        assert!(gunzipped(b"").is_err());
        let packed = gzip(&b"kafka ".repeat(1000));
        assert!(gunzipped(&packed[..packed.len() / 2]).is_err());
        let mut flipped = packed.clone();
        flipped[20] ^= 0xff;
        assert!(gunzipped(&flipped).is_err());
        let mut second_corrupt = packed.clone();
        second_corrupt.extend_from_slice(&GZIP_MAGIC);
        assert!(gunzipped(&second_corrupt).is_err());
    }
}

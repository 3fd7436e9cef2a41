//! The codecs of a compressed wrapper's value (spec 3.4), framed the way Kafka's Java client
//! frames them:
//! - gzip: a plain gzip stream.
//! - snappy: xerial `SnappyOutputStream` framing (a 16-byte header, then blocks of
//!   `<i32 BE length><raw snappy block>`); old non-Java clients wrote unframed raw snappy, so
//!   reading accepts both.
//! - lz4: the LZ4 frame format, except that for magic v0 Kafka wrote a *wrong* header checksum
//!   (computed over the frame magic too, KIP-57); it writes that for v0 and ignores the
//!   checksum when reading v0, while v1 requires the correct one.

use std::borrow::Cow;
use std::io::{Read, Write};

use super::legacy::Parsed;
use super::libdeflate::gunzip;
use super::{Compression, Magic};
use crate::error::Result;

/// xerial's stream header: magic `\x82SNAPPY\0`, then i32 version 1 and i32 min-compatible
/// version 1.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];
/// Input bytes per xerial block (`SnappyOutputStream`'s default block size).
const XERIAL_BLOCK_SIZE: usize = 32 * 1024;
/// A snappy block states its decompressed length up front. The best any snappy element does
/// is a 3-byte copy that yields 64 bytes, so a claim above 22x the block is a lie; checking it
/// keeps a few corrupt bytes from requesting a 4 GiB buffer.
const SNAPPY_MAX_EXPANSION: usize = 22;

/// LZ4 frame magic number, as stored (little-endian 0x184D2204).
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];
/// Frame-descriptor flag bits that add optional descriptor fields.
const LZ4_FLAG_CONTENT_SIZE: u8 = 0x08;
const LZ4_FLAG_DICTIONARY_ID: u8 = 0x01;
/// The frame descriptor starts after the magic: FLG, BD, optional fields, then the checksum.
const LZ4_DESCRIPTOR_START: usize = 4;

/// Compresses an inner message set for a wrapper of `magic`.
pub(crate) fn compress(compression: Compression, magic: Magic, data: &[u8]) -> Result<Vec<u8>> {
    match compression {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(data)?;
            Ok(encoder.finish()?)
        }
        Compression::Snappy => snappy_xerial(data),
        Compression::Lz4 => lz4_frame(magic, data),
    }
}

/// Decompresses a wrapper's value into `out` (cleared first, so a reused buffer may be passed).
/// The error is the problem only; the caller names the entry.
pub(crate) fn decompress(
    compression: Compression,
    magic: Magic,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Parsed<()> {
    out.clear();
    match compression {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => gunzip(data, out)?,
        Compression::Snappy => unsnappy(data, out)?,
        Compression::Lz4 => unlz4(magic, data, out)?,
    }
    Ok(())
}

fn snappy_xerial(data: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = snap::raw::Encoder::new();
    let mut out = XERIAL_HEADER.to_vec();
    for chunk in data.chunks(XERIAL_BLOCK_SIZE) {
        let block = encoder
            .compress_vec(chunk)
            .map_err(|e| std::io::Error::other(format!("snappy: {e}")))?;
        // A block compresses at most 32 KiB, so its length always fits an i32.
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(&block);
    }
    Ok(out)
}

/// Xerial-framed when the value starts with xerial's magic (as kafka-python and librdkafka
/// detect it), raw snappy otherwise.
fn unsnappy(data: &[u8], out: &mut Vec<u8>) -> Parsed<()> {
    match data.split_at_checked(XERIAL_HEADER.len()) {
        Some((header, mut blocks)) if header.starts_with(&XERIAL_MAGIC) => {
            while !blocks.is_empty() {
                let (length, after_length) = blocks
                    .split_first_chunk::<4>()
                    .ok_or("xerial snappy stream ends inside a block length")?;
                let length = i32::from_be_bytes(*length);
                let (block, rest) = usize::try_from(length)
                    .ok()
                    .and_then(|len| after_length.split_at_checked(len))
                    .ok_or_else(|| {
                        format!(
                            "xerial snappy block length {length} does not fit the {} bytes left",
                            after_length.len()
                        )
                    })?;
                unsnappy_block(block, out)?;
                blocks = rest;
            }
        }
        _ => unsnappy_block(data, out)?,
    }
    Ok(())
}

/// Appends one raw snappy block's content to `out`.
fn unsnappy_block(block: &[u8], out: &mut Vec<u8>) -> Parsed<()> {
    let claimed = snap::raw::decompress_len(block)
        .map_err(|e| format!("snappy block does not decompress: {e}"))?;
    if claimed > block.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
        return Err(format!(
            "snappy block of {} bytes claims an impossible {claimed} decompressed bytes",
            block.len()
        ));
    }
    let start = out.len();
    out.resize(start + claimed, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| format!("snappy block does not decompress: {e}"))?;
    out.truncate(start + written);
    Ok(())
}

/// An LZ4 frame like Kafka's `KafkaLZ4BlockOutputStream`: 64 KiB independent blocks, no
/// checksums besides the header's, which is the broken one for magic v0.
fn lz4_frame(magic: Magic, data: &[u8]) -> Result<Vec<u8>> {
    let frame_info = lz4_flex::frame::FrameInfo::new()
        .block_size(lz4_flex::frame::BlockSize::Max64KB)
        .block_mode(lz4_flex::frame::BlockMode::Independent);
    let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(frame_info, Vec::new());
    encoder.write_all(data)?;
    let mut frame = encoder.finish().map_err(std::io::Error::from)?;
    if magic == Magic::V0 {
        // This frame's descriptor is just FLG and BD, so its checksum byte follows them.
        let checksum_position = LZ4_DESCRIPTOR_START + 2;
        let broken = lz4_header_checksum(frame.get(..checksum_position).unwrap_or_default());
        if let Some(byte) = frame.get_mut(checksum_position) {
            *byte = broken;
        }
    }
    Ok(frame)
}

/// For magic v0 the header checksum is ignored (Kafka's `ignoreFlagDescriptorChecksum`): the
/// byte is replaced by the correct one so the standard decoder accepts the frame.
fn unlz4(magic: Magic, data: &[u8], out: &mut Vec<u8>) -> Parsed<()> {
    let checksum_position = lz4_checksum_position(data)?;
    let frame: Cow<'_, [u8]> = match magic {
        Magic::V1 => Cow::Borrowed(data),
        Magic::V0 => {
            let descriptor = data
                .get(LZ4_DESCRIPTOR_START..checksum_position)
                .unwrap_or_default();
            let mut patched = data.to_vec();
            if let Some(byte) = patched.get_mut(checksum_position) {
                *byte = lz4_header_checksum(descriptor);
            }
            Cow::Owned(patched)
        }
    };
    lz4_flex::frame::FrameDecoder::new(&frame[..])
        .read_to_end(out)
        .map_err(|e| format!("lz4 value does not decompress: {e}"))?;
    Ok(())
}

/// Where the header checksum byte (HC) of the LZ4 frame at the start of `frame` is.
fn lz4_checksum_position(frame: &[u8]) -> Parsed<usize> {
    if frame.get(..LZ4_DESCRIPTOR_START) != Some(&LZ4_FRAME_MAGIC[..]) {
        return Err("lz4 value does not start with the LZ4 frame magic".into());
    }
    let flags = *frame
        .get(LZ4_DESCRIPTOR_START)
        .ok_or("lz4 frame ends inside its descriptor")?;
    let mut position = LZ4_DESCRIPTOR_START + 2; // FLG and BD
    if flags & LZ4_FLAG_CONTENT_SIZE != 0 {
        position += 8;
    }
    if flags & LZ4_FLAG_DICTIONARY_ID != 0 {
        position += 4;
    }
    if position >= frame.len() {
        return Err("lz4 frame ends inside its descriptor".into());
    }
    Ok(position)
}

/// The frame's HC byte: the second byte of xxHash32 (seed 0) of `hashed`, which is the
/// descriptor for a correct frame and magic-plus-descriptor for Kafka's broken v0 one.
fn lz4_header_checksum(hashed: &[u8]) -> u8 {
    (twox_hash::XxHash32::oneshot(0, hashed) >> 8) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: &[u8] = b"legacy kafka legacy kafka legacy kafka legacy kafka";

    fn decompressed(compression: Compression, magic: Magic, data: &[u8]) -> Parsed<Vec<u8>> {
        let mut out = b"left over from the last use".to_vec();
        decompress(compression, magic, data, &mut out)?;
        Ok(out)
    }

    fn unsnappied(data: &[u8]) -> Parsed<Vec<u8>> {
        let mut out = Vec::new();
        unsnappy(data, &mut out)?;
        Ok(out)
    }

    #[test]
    fn every_codec_round_trips_for_both_magics() {
        for compression in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
            for magic in [Magic::V0, Magic::V1] {
                let packed = compress(compression, magic, DATA).unwrap();
                assert_eq!(decompressed(compression, magic, &packed).unwrap(), DATA);
            }
        }
    }

    #[test]
    fn lz4_v0_writes_the_broken_checksum_and_v1_the_correct_one() {
        let v0 = compress(Compression::Lz4, Magic::V0, DATA).unwrap();
        let v1 = compress(Compression::Lz4, Magic::V1, DATA).unwrap();
        assert_eq!(v0[6], lz4_header_checksum(&v0[..6]));
        assert_eq!(v1[6], lz4_header_checksum(&v1[4..6]));
        assert_ne!(v0[6], v1[6]);
        assert!(decompressed(Compression::Lz4, Magic::V1, &v0).is_err());
        // v0 ignores the checksum, so the correct one is accepted too.
        assert_eq!(
            decompressed(Compression::Lz4, Magic::V0, &v1).unwrap(),
            DATA
        );
    }

    #[test]
    fn snappy_reads_raw_blocks_and_rejects_impossible_lengths() {
        let raw = snap::raw::Encoder::new().compress_vec(DATA).unwrap();
        assert_eq!(unsnappied(&raw).unwrap(), DATA);
        // A varint claiming ~4 GiB from five bytes.
        let lie = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(unsnappied(&lie).unwrap_err().contains("impossible"));
    }
}

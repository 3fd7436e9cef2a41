//! Legacy message format v0/v1 (spec 3.1 to 3.5, vectors 6.1): encode, decode, compressed
//! wrappers, columns, and corrupt input.

use std::io::{Read, Write};

use kstate_core::record::{
    decode_columns, decode_records, deep_records, encode_columns, shallow_entries, Compression,
    Magic, MessageSetBuilder, Record, TimestampType, TIMESTAMP_TYPE_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_NONE,
};
use kstate_core::{Error, Result};

const ALL_COMPRESSIONS: [Compression; 4] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
];

// ---------------------------------------------------------------------------------------------
// Helpers, written from the spec's byte layout independently of the encoder under test.

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// One entry laid out by hand (spec 3.1, 3.2, 3.3).
fn raw_entry(
    offset: i64,
    magic: u8,
    attributes: u8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    let mut message = vec![magic, attributes];
    if magic == 1 {
        message.extend_from_slice(&timestamp.to_be_bytes());
    }
    for field in [key, value] {
        match field {
            None => message.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(bytes) => {
                message.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                message.extend_from_slice(bytes);
            }
        }
    }
    let mut entry = offset.to_be_bytes().to_vec();
    entry.extend_from_slice(&(message.len() as i32 + 4).to_be_bytes());
    entry.extend_from_slice(&crc32fast::hash(&message).to_be_bytes());
    entry.extend_from_slice(&message);
    entry
}

/// Recomputes the CRC of the entry at `position` after a test edited it, so that only the
/// intended defect remains.
fn reseal(set: &mut [u8], position: usize) {
    let size = i32::from_be_bytes(set[position + 8..position + 12].try_into().unwrap()) as usize;
    let crc = crc32fast::hash(&set[position + 16..position + 12 + size]);
    set[position + 12..position + 16].copy_from_slice(&crc.to_be_bytes());
}

/// Byte position of a wrapper's value in its entry (null key): header 12, crc 4, magic,
/// attributes, [timestamp 8], key length 4, value length 4.
fn wrapper_value_position(magic: Magic) -> usize {
    match magic {
        Magic::V0 => 26,
        Magic::V1 => 34,
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn xxh32_second_byte(bytes: &[u8]) -> u8 {
    (twox_hash::XxHash32::oneshot(0, bytes) >> 8) as u8
}

fn record(offset: i64, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Record {
    Record {
        offset,
        timestamp,
        timestamp_type: None,
        key: key.map(<[u8]>::to_vec),
        value: value.map(<[u8]>::to_vec),
    }
}

/// Builds a set of `records` (their `timestamp_type` is ignored); `log_append_time` selects a
/// LogAppendTime builder.
fn build(
    magic: Magic,
    compression: Compression,
    log_append_time: Option<i64>,
    records: &[Record],
) -> Vec<u8> {
    let mut builder = match log_append_time {
        None => MessageSetBuilder::new(magic, compression),
        Some(time) => MessageSetBuilder::with_log_append_time(magic, compression, time).unwrap(),
    };
    for r in records {
        builder
            .append(r.offset, r.timestamp, r.key.as_deref(), r.value.as_deref())
            .unwrap();
    }
    builder.build().unwrap()
}

/// What decoding a set built from `records` must give.
fn expected(magic: Magic, log_append_time: Option<i64>, records: &[Record]) -> Vec<Record> {
    records
        .iter()
        .map(|r| {
            let (timestamp, timestamp_type) = match (magic, log_append_time) {
                (Magic::V0, _) => (-1, None),
                (Magic::V1, None) => (r.timestamp, Some(TimestampType::CreateTime)),
                (Magic::V1, Some(time)) => (time, Some(TimestampType::LogAppendTime)),
            };
            Record {
                timestamp,
                timestamp_type,
                ..r.clone()
            }
        })
        .collect()
}

/// Asserts a `Corrupted` error whose message contains every `needle`; returns the message.
fn corrupted<T: std::fmt::Debug>(result: Result<T>, needles: &[&str]) -> String {
    match result {
        Err(Error::Corrupted(message)) => {
            for needle in needles {
                assert!(message.contains(needle), "{needle:?} not in {message:?}");
            }
            message
        }
        other => panic!("expected Corrupted containing {needles:?}, got {other:?}"),
    }
}

fn three_plain_entries(magic: Magic) -> Vec<u8> {
    let records = [
        record(0, 10, Some(b"a"), Some(b"one")),
        record(1, 11, Some(b"b"), Some(b"two")),
        record(2, 12, Some(b"c"), Some(b"three")),
    ];
    build(magic, Compression::None, None, &records)
}

/// A v1 gzip wrapper at `wrapper_offset` around `inner` (an inner message set).
fn gzip_wrapper_v1(wrapper_offset: i64, inner: &[u8]) -> Vec<u8> {
    raw_entry(wrapper_offset, 1, 1, 50, None, Some(&gzip(inner)))
}

// ---------------------------------------------------------------------------------------------
// Spec 6.1 vectors (from Kafka / kafka-python / aiokafka tests): both directions.

const V0_ENTRY: &str =
    "0000000000000000 00000017 1095c9ca 00 00 00000004 74657374 00000005 5375706572";
const V1_ENTRY: &str = "0000000000000000 0000001f 831fac85 01 00 000000000098967f \
                        00000004 74657374 00000005 5375706572";

#[test]
fn spec_6_1_full_entries_encode_byte_for_byte() {
    let test_super = [record(0, 9_999_999, Some(b"test"), Some(b"Super"))];
    for (magic, vector) in [(Magic::V0, V0_ENTRY), (Magic::V1, V1_ENTRY)] {
        let built = build(magic, Compression::None, None, &test_super);
        assert_eq!(hex(&built), hex(&unhex(vector)), "{magic:?}");
    }
}

#[test]
fn spec_6_1_full_entries_decode_to_their_fields() {
    let v0 = decode_records(&unhex(V0_ENTRY)).unwrap();
    assert_eq!(v0, vec![record(0, -1, Some(b"test"), Some(b"Super"))]);

    let v1 = decode_records(&unhex(V1_ENTRY)).unwrap();
    let mut want = record(0, 9_999_999, Some(b"test"), Some(b"Super"));
    want.timestamp_type = Some(TimestampType::CreateTime);
    assert_eq!(v1, vec![want]);

    let bytes = unhex(V1_ENTRY);
    let entries: Vec<_> = shallow_entries(&bytes).collect::<Result<_>>().unwrap();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!((entry.position, entry.size, entry.offset), (0, 43, 0));
    assert_eq!(
        (entry.magic, entry.compression),
        (Magic::V1, Compression::None)
    );
}

/// key, value, v0 CRC, v1 CRC as the spec gives it (signed or unsigned).
type CrcRow = (Option<&'static [u8]>, Option<&'static [u8]>, u32, i64);

#[test]
fn spec_6_1_crc_table_both_directions() {
    let table: [CrcRow; 5] = [
        (Some(b"test"), Some(b"Super"), 278_251_978, -2_095_076_219),
        (Some(b"test"), None, 580_701_536, 164_492_157),
        (None, Some(b"Super"), 2_797_021_502, 3_315_209_433),
        (Some(b""), Some(b"Super"), 1_446_809_667, 890_351_012),
        (Some(b"test"), Some(b""), 4_230_475_139, 3_614_888_862),
    ];
    for (key, value, v0_crc, v1_crc) in table {
        let v1_crc = v1_crc as u32; // a signed Java int read as unsigned
        for (magic, magic_byte, crc) in [(Magic::V0, 0, v0_crc), (Magic::V1, 1, v1_crc)] {
            let input = [record(0, 9_999_999, key, value)];
            let built = build(magic, Compression::None, None, &input);
            let stored = u32::from_be_bytes(built[12..16].try_into().unwrap());
            assert_eq!(stored, crc, "{magic:?} key {key:?} value {value:?}");
            assert_eq!(built, raw_entry(0, magic_byte, 0, 9_999_999, key, value));

            let decoded = decode_records(&built).unwrap();
            assert_eq!(decoded, expected(magic, None, &input));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips: every compression x magic x timestamp type.

fn datasets() -> Vec<(&'static str, Vec<Record>)> {
    let null_vs_empty = vec![
        record(100, 5, Some(b"k"), Some(b"v")),
        record(101, -1, None, Some(b"")),
        record(102, 1_000, Some(b""), None),
        record(103, 7, None, None),
        record(104, 0, Some(b""), Some(b"")),
    ];
    let mut many = Vec::new();
    let mut noise = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..1_500i64 {
        let value = if i % 500 == 7 {
            // Large and incompressible: several lz4 blocks, several xerial blocks, stored blocks.
            (0..100_000)
                .map(|_| {
                    noise ^= noise << 13;
                    noise ^= noise >> 7;
                    noise ^= noise << 17;
                    noise as u8
                })
                .collect()
        } else {
            format!("value {i} ").repeat((i % 13) as usize).into_bytes()
        };
        let key = format!("key-{}", i % 97).into_bytes();
        many.push(record(
            i,
            1_600_000_000_000 + i * 3 % 1000,
            Some(&key),
            Some(&value),
        ));
    }
    let gapped = vec![
        record(10, 1, Some(b"a"), Some(b"x")),
        record(12, 3, Some(b"b"), Some(b"y")),
        record(20, 2, Some(b"c"), Some(b"z")),
    ];
    vec![
        ("single", vec![record(0, 42, Some(b"key"), Some(b"value"))]),
        ("null vs empty", null_vs_empty),
        ("many", many),
        ("gapped offsets", gapped),
    ]
}

#[test]
fn round_trips_every_compression_magic_and_timestamp_type() {
    for (name, records) in datasets() {
        for compression in ALL_COMPRESSIONS {
            for (magic, log_append_time) in [
                (Magic::V0, None),
                (Magic::V1, None),
                (Magic::V1, Some(1_700_000_000_123)),
            ] {
                let case = format!("{name} {compression:?} {magic:?} {log_append_time:?}");
                let set = build(magic, compression, log_append_time, &records);
                let want = expected(magic, log_append_time, &records);
                assert_eq!(decode_records(&set).unwrap(), want, "{case}");

                let entries: Vec<_> = shallow_entries(&set).collect::<Result<_>>().unwrap();
                if compression == Compression::None {
                    assert_eq!(entries.len(), records.len(), "{case}");
                } else {
                    assert_eq!(entries.len(), 1, "{case}");
                    let wrapper = &entries[0];
                    assert_eq!(wrapper.offset, records.last().unwrap().offset, "{case}");
                    assert_eq!(wrapper.compression, compression, "{case}");
                    assert_eq!((wrapper.position, wrapper.size), (0, set.len()), "{case}");
                    assert_eq!(wrapper.key, None, "{case}");
                    let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap();
                    let (timestamp, ts_type) = match (magic, log_append_time) {
                        (Magic::V0, _) => (-1, None),
                        (Magic::V1, None) => (max_timestamp, Some(TimestampType::CreateTime)),
                        (Magic::V1, Some(t)) => (t, Some(TimestampType::LogAppendTime)),
                    };
                    assert_eq!(wrapper.timestamp, timestamp, "{case}");
                    assert_eq!(wrapper.timestamp_type, ts_type, "{case}");
                }

                let columns = decode_columns(&set, name == "many").unwrap();
                assert_eq!(columns.len(), want.len(), "{case}");
                let view = columns.view().unwrap();
                for (row, r) in want.iter().enumerate() {
                    assert_eq!(columns.offsets[row], r.offset, "{case}");
                    assert_eq!(columns.timestamps[row], r.timestamp, "{case}");
                    assert_eq!(view.keys.get(row), r.key.as_deref(), "{case}");
                    assert_eq!(view.values.get(row), r.value.as_deref(), "{case}");
                }
                let re_encoded = encode_columns(magic, compression, &view).unwrap();
                assert_eq!(re_encoded, set, "{case}: columns encode like the builder");
            }
        }
    }
}

#[test]
fn wrapper_layout_matches_the_producer_rules() {
    let records = [
        record(7, 30, Some(b"a"), Some(b"1")),
        record(8, 90, Some(b"b"), Some(b"2")),
        record(9, 60, Some(b"c"), Some(b"3")),
    ];
    for magic in [Magic::V0, Magic::V1] {
        let set = build(magic, Compression::Gzip, None, &records);
        assert_eq!(
            i64::from_be_bytes(set[0..8].try_into().unwrap()),
            9,
            "last offset"
        );
        assert_eq!(set[17] & 0x07, 1, "gzip codec bits");
        let key_length_at = if magic == Magic::V1 { 26 } else { 18 };
        let key_length =
            i32::from_be_bytes(set[key_length_at..key_length_at + 4].try_into().unwrap());
        assert_eq!(key_length, -1, "wrapper key is null");
        if magic == Magic::V1 {
            assert_eq!(
                i64::from_be_bytes(set[18..26].try_into().unwrap()),
                90,
                "max timestamp"
            );
        }

        let inner = gunzip(&set[wrapper_value_position(magic)..]);
        let inner_offsets: Vec<i64> = shallow_entries(&inner)
            .map(|entry| entry.unwrap().offset)
            .collect();
        let want = if magic == Magic::V1 {
            vec![0, 1, 2]
        } else {
            vec![7, 8, 9]
        };
        assert_eq!(inner_offsets, want, "{magic:?}: v1 relative, v0 absolute");
    }
}

#[test]
fn log_append_time_on_the_wrapper_overrides_inner_timestamps_spec_6_1_item_3() {
    let records: Vec<Record> = (0..10)
        .map(|i| record(i, 9_999_999, Some(b"test"), Some(b"Super")))
        .collect();
    let mut set = build(Magic::V1, Compression::Gzip, None, &records);
    set[17] |= 0x08;
    set[18..26].copy_from_slice(&10_000_000i64.to_be_bytes());
    reseal(&mut set, 0);

    let decoded = decode_records(&set).unwrap();
    assert_eq!(decoded.len(), 10);
    for r in &decoded {
        assert_eq!(r.timestamp, 10_000_000);
        assert_eq!(r.timestamp_type, Some(TimestampType::LogAppendTime));
    }
    let columns = decode_columns(&set, false).unwrap();
    assert_eq!(columns.timestamps, vec![10_000_000; 10]);
    assert_eq!(
        columns.timestamp_types,
        vec![TIMESTAMP_TYPE_LOG_APPEND_TIME; 10]
    );
}

#[test]
fn log_append_time_builder_marks_wrapper_and_inner_messages() {
    let records = [
        record(0, 5, None, Some(b"x")),
        record(1, 6, None, Some(b"y")),
    ];
    let set = build(Magic::V1, Compression::Gzip, Some(777), &records);
    assert_eq!(set[17], 0x08 | 1);
    assert_eq!(i64::from_be_bytes(set[18..26].try_into().unwrap()), 777);
    let inner = gunzip(&set[wrapper_value_position(Magic::V1)..]);
    for entry in shallow_entries(&inner) {
        let entry = entry.unwrap();
        assert_eq!(entry.timestamp, 777);
        assert_eq!(entry.timestamp_type, Some(TimestampType::LogAppendTime));
    }
    assert!(MessageSetBuilder::with_log_append_time(Magic::V0, Compression::None, 1).is_err());
}

#[test]
fn v0_columns_report_no_timestamp_type() {
    let set = three_plain_entries(Magic::V0);
    let columns = decode_columns(&set, false).unwrap();
    assert_eq!(columns.timestamps, vec![-1; 3]);
    assert_eq!(columns.timestamp_types, vec![TIMESTAMP_TYPE_NONE; 3]);
}

// ---------------------------------------------------------------------------------------------
// Codec quirks.

#[test]
fn lz4_v0_broken_header_checksum_is_written_and_read() {
    let records = [record(0, 1, Some(b"k"), Some(b"lz4 under magic zero"))];
    let mut set = build(Magic::V0, Compression::Lz4, None, &records);
    let frame = wrapper_value_position(Magic::V0);
    let broken = xxh32_second_byte(&set[frame..frame + 6]); // magic + FLG + BD
    let correct = xxh32_second_byte(&set[frame + 4..frame + 6]); // FLG + BD
    assert_ne!(broken, correct);
    assert_eq!(set[frame + 6], broken, "v0 writes Kafka's broken checksum");
    assert_eq!(
        decode_records(&set).unwrap(),
        expected(Magic::V0, None, &records)
    );

    // Kafka ignores the header checksum under magic 0, so a correct one reads too.
    set[frame + 6] = correct;
    reseal(&mut set, 0);
    assert_eq!(
        decode_records(&set).unwrap(),
        expected(Magic::V0, None, &records)
    );
}

#[test]
fn lz4_v1_requires_the_correct_header_checksum() {
    // Magic 1 reads the frame as standard LZ4, like Kafka (`DESCRIPTOR_HASH_MISMATCH`): the
    // broken v0 checksum is corruption there.
    let records = [record(4, 1, Some(b"k"), Some(b"lz4 under magic one"))];
    let mut set = build(Magic::V1, Compression::Lz4, None, &records);
    let frame = wrapper_value_position(Magic::V1);
    assert_eq!(
        set[frame + 6],
        xxh32_second_byte(&set[frame + 4..frame + 6])
    );
    set[frame + 6] = xxh32_second_byte(&set[frame..frame + 6]);
    reseal(&mut set, 0);
    corrupted(decode_records(&set), &["(offset 4)", "lz4"]);
}

#[test]
fn lz4_frames_of_other_clients_decode() {
    // kafka-python / python-lz4 defaults: content size stored, linked blocks.
    let inner = build(
        Magic::V1,
        Compression::None,
        None,
        &[
            record(0, 3, None, Some(b"a")),
            record(1, 4, None, Some(b"b")),
        ],
    );
    let info = lz4_flex::frame::FrameInfo::new()
        .content_size(Some(inner.len() as u64))
        .block_mode(lz4_flex::frame::BlockMode::Linked)
        .content_checksum(true);
    let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
    encoder.write_all(&inner).unwrap();
    let frame = encoder.finish().unwrap();
    let set = raw_entry(41, 1, 3, 4, None, Some(&frame));
    let offsets: Vec<i64> = decode_records(&set)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, vec![40, 41]);
}

#[test]
fn snappy_decodes_xerial_framed_and_raw_payloads() {
    for magic in [Magic::V0, Magic::V1] {
        let records = [
            record(0, 8, Some(b"k0"), Some(b"snappy snappy snappy")),
            record(1, 9, Some(b"k1"), None),
        ];
        let xerial = build(magic, Compression::Snappy, None, &records);
        let value = &xerial[wrapper_value_position(magic)..];
        assert_eq!(
            &value[..16],
            b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
        );
        assert_eq!(
            decode_records(&xerial).unwrap(),
            expected(magic, None, &records)
        );

        // Raw snappy, as early non-Java clients wrote it. Inner offsets 0..1 are both the
        // absolute (v0) and the relative (v1) ones here.
        let inner = build(magic, Compression::None, None, &records);
        let raw = snap::raw::Encoder::new().compress_vec(&inner).unwrap();
        let set = raw_entry(1, magic.as_byte(), 2, 9, None, Some(&raw));
        assert_eq!(
            decode_records(&set).unwrap(),
            expected(magic, None, &records)
        );
    }
}

#[test]
fn v1_wrapper_offset_zero_means_base_zero() {
    // Certain librdkafka versions send the wrapper with offset 0 (spec 3.5).
    let inner = build(
        Magic::V1,
        Compression::None,
        None,
        &[
            record(0, 1, None, Some(b"a")),
            record(1, 2, None, Some(b"b")),
            record(2, 3, None, None),
        ],
    );
    let set = gzip_wrapper_v1(0, &inner);
    let offsets: Vec<i64> = decode_records(&set)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, vec![0, 1, 2]);

    let shifted = gzip_wrapper_v1(1_002, &inner);
    let offsets: Vec<i64> = decode_records(&shifted)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, vec![1_000, 1_001, 1_002]);
}

// ---------------------------------------------------------------------------------------------
// Corruption: always Error::Corrupted naming where, never a panic.

#[test]
fn flipped_crc_or_body_byte_names_the_entry() {
    for magic in [Magic::V0, Magic::V1] {
        let set = three_plain_entries(magic);
        let positions: Vec<usize> = shallow_entries(&set).map(|e| e.unwrap().position).collect();
        let (second, third) = (positions[1], positions[2]);
        // A CRC byte, then the last value byte.
        for flipped_at in [second + 12, third - 1] {
            let mut bad = set.clone();
            bad[flipped_at] ^= 0x40;
            let at = format!("entry at byte {second} (offset 1)");
            corrupted(decode_records(&bad), &[&at, "CRC mismatch"]);
        }
    }
}

#[test]
fn truncated_middle_entry_is_corrupt_but_truncated_trailing_entry_ends_the_set() {
    let set = three_plain_entries(Magic::V1);
    let positions: Vec<usize> = shallow_entries(&set).map(|e| e.unwrap().position).collect();

    // One byte missing from the middle entry: its stated size now reaches into the next entry.
    let mut middle = set.clone();
    middle.remove(positions[2] - 1);
    corrupted(decode_records(&middle), &["(offset 1)"]);

    // Any cut inside the last entry: the complete entries read, the partial one is dropped.
    for cut in positions[2]..set.len() {
        let truncated = &set[..cut];
        let offsets: Vec<i64> = decode_records(truncated)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(offsets, vec![0, 1], "cut at {cut}");
        let mut entries = shallow_entries(truncated);
        assert_eq!(entries.by_ref().count(), 2);
        assert_eq!(entries.position(), positions[2], "valid prefix length");
    }
}

#[test]
fn impossible_lengths_are_corrupt() {
    let set = three_plain_entries(Magic::V1);
    let second = shallow_entries(&set).nth(1).unwrap().unwrap().position;

    for size in [-1i32, -2_000_000_000, 0, 13] {
        let mut bad = set.clone();
        bad[second + 8..second + 12].copy_from_slice(&size.to_be_bytes());
        let at = format!("entry at byte {second} (offset 1)");
        corrupted(decode_records(&bad), &[&at, &format!("size {size}")]);
        // Also when the bad size is in a trailing header with nothing after it.
        corrupted(decode_records(&bad[..second + 12]), &["(offset 1)"]);
    }

    // Key length -2, key length past the message, value length past the message (CRC fixed, so
    // only the length is wrong). The v1 key length is at byte 26 of the entry.
    let key_length = second + 26;
    let value_length = second + 26 + 4 + 1; // key "b"
    for (position, length, what) in [
        (key_length, -2i32, "key length -2"),
        (key_length, 1_000, "key length 1000"),
        (value_length, 1_000, "value length 1000"),
        (value_length, i32::MAX, "value length 2147483647"),
    ] {
        let mut bad = set.clone();
        bad[position..position + 4].copy_from_slice(&length.to_be_bytes());
        reseal(&mut bad, second);
        corrupted(decode_records(&bad), &["(offset 1)", what]);
    }

    // A v0 message of the v0 minimum size relabelled as v1 is too short for v1's fields.
    let mut short = raw_entry(5, 0, 0, -1, None, None);
    short[16] = 1;
    reseal(&mut short, 0);
    corrupted(decode_records(&short), &["(offset 5)"]);

    // An entry size reaching past the end of the data cannot be told from a truncated trailing
    // entry, so (as in Kafka) the set ends before it.
    let mut oversized = set.clone();
    oversized[second + 8..second + 12].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(decode_records(&oversized).unwrap().len(), 1);
}

#[test]
fn unknown_magic_is_corrupt() {
    let set = three_plain_entries(Magic::V0);
    let second = shallow_entries(&set).nth(1).unwrap().unwrap().position;
    for magic in [2u8, 3, 0xff] {
        let mut bad = set.clone();
        bad[second + 16] = magic;
        reseal(&mut bad, second);
        corrupted(
            decode_records(&bad),
            &["(offset 1)", &format!("unknown magic {magic}")],
        );
    }
}

#[test]
fn zstd_and_unknown_codecs_are_corrupt() {
    let zstd = raw_entry(5, 1, 4, 0, None, Some(b"(zstd frame)"));
    corrupted(decode_records(&zstd), &["(offset 5)", "zstd"]);
    let v0_zstd = raw_entry(6, 0, 4, 0, None, Some(b"(zstd frame)"));
    corrupted(decode_records(&v0_zstd), &["(offset 6)", "zstd"]);
    let codec_7 = raw_entry(7, 1, 7, 0, None, Some(b"?"));
    corrupted(decode_records(&codec_7), &["(offset 7)", "codec 7"]);
}

#[test]
fn garbage_inside_a_compressed_wrapper_is_corrupt() {
    let garbage: Vec<u8> = (0..200u32).map(|i| (i * 7919 % 251) as u8).collect();
    for (codec, name) in [(1u8, "gzip"), (2, "snappy"), (3, "lz4")] {
        for magic in [0u8, 1] {
            let set = raw_entry(9, magic, codec, 0, None, Some(&garbage));
            corrupted(decode_records(&set), &["(offset 9)", name]);
        }
    }
    // Validly compressed garbage.
    corrupted(
        decode_records(&gzip_wrapper_v1(9, &garbage)),
        &["(offset 9)"],
    );
    // Null value, empty inner set.
    corrupted(
        decode_records(&raw_entry(9, 1, 1, 0, None, None)),
        &["(offset 9)", "null value"],
    );
    corrupted(
        decode_records(&gzip_wrapper_v1(9, b"")),
        &["(offset 9)", "no messages"],
    );

    let inner_v1 = build(
        Magic::V1,
        Compression::None,
        None,
        &[record(0, 1, None, Some(b"a"))],
    );
    // Nested compression.
    let nested = gzip_wrapper_v1(0, &inner_v1);
    let nested = gzip_wrapper_v1(9, &nested);
    corrupted(decode_records(&nested), &["(offset 9)", "compressed too"]);
    // Inner magic differing from the wrapper's.
    let inner_v0 = build(
        Magic::V0,
        Compression::None,
        None,
        &[record(0, 1, None, Some(b"a"))],
    );
    corrupted(
        decode_records(&gzip_wrapper_v1(9, &inner_v0)),
        &["(offset 9)", "magic 0"],
    );
    // Inner CRC flipped.
    let mut bad_inner = inner_v1.clone();
    bad_inner[13] ^= 1;
    corrupted(
        decode_records(&gzip_wrapper_v1(9, &bad_inner)),
        &["(offset 9)", "inner entry at byte 0", "CRC mismatch"],
    );
    // v1 wrapper offset below its last relative inner offset.
    let two = build(
        Magic::V1,
        Compression::None,
        None,
        &[
            record(0, 1, None, None),
            record(1, 1, None, None),
            record(2, 1, None, None),
        ],
    );
    corrupted(
        decode_records(&gzip_wrapper_v1(1, &two)),
        &["(offset 1)", "last inner offset 2"],
    );
}

#[test]
fn iteration_stops_after_the_first_error() {
    let mut set = three_plain_entries(Magic::V1);
    let second = shallow_entries(&set).nth(1).unwrap().unwrap().position;
    set[second + 20] ^= 1;
    let results: Vec<Result<Record>> = deep_records(&set).collect();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok());
    corrupted(results[1].clone(), &["(offset 1)"]);
    assert_eq!(shallow_entries(&set).count(), 2);
}

// ---------------------------------------------------------------------------------------------
// Encoder arguments.

#[test]
fn builder_rejects_bad_arguments_and_builds_empty_sets() {
    let mut builder = MessageSetBuilder::new(Magic::V1, Compression::Gzip);
    assert!(builder.is_empty());
    builder.append(5, 1, None, None).unwrap();
    for (offset, timestamp) in [(5, 1), (4, 1), (-1, 1), (6, -2)] {
        let result = builder.append(offset, timestamp, None, None);
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{offset} {timestamp}"
        );
    }
    assert!(MessageSetBuilder::with_log_append_time(Magic::V1, Compression::None, -5).is_err());

    let empty = MessageSetBuilder::new(Magic::V1, Compression::Lz4)
        .build()
        .unwrap();
    assert!(empty.is_empty());
    assert!(decode_records(&empty).unwrap().is_empty());
}

#[test]
fn encode_columns_rejects_inconsistent_columns() {
    let set = three_plain_entries(Magic::V1);
    let columns = decode_columns(&set, false).unwrap();

    let mut view = columns.view().unwrap();
    view.timestamps = &columns.timestamps[..2];
    let result = encode_columns(Magic::V1, Compression::None, &view);
    assert!(matches!(result, Err(Error::InvalidArgument(_))));

    let mixed_types = [0u8, 1, 0];
    let mut view = columns.view().unwrap();
    view.timestamp_types = &mixed_types;
    let result = encode_columns(Magic::V1, Compression::None, &view);
    assert!(matches!(result, Err(Error::InvalidArgument(_))));

    let all_log_append = [1u8, 1, 1];
    let mut view = columns.view().unwrap();
    view.timestamp_types = &all_log_append;
    let result = encode_columns(Magic::V1, Compression::None, &view);
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "timestamps differ"
    );
}

// ---------------------------------------------------------------------------------------------
// Randomized: mutated message sets decode to Ok or Corrupted, never panic.

/// xorshift64: deterministic, no dependency.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

fn mutate(bytes: &mut Vec<u8>, rng: &mut Prng) {
    if bytes.is_empty() {
        return;
    }
    match rng.below(4) {
        0 => {
            for _ in 0..=rng.below(4) {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
        }
        1 => {
            let interesting = [
                -1i32,
                0,
                1,
                13,
                14,
                22,
                0x7fff_ffff,
                i32::MIN,
                bytes.len() as i32,
            ];
            let value = interesting[rng.below(interesting.len())];
            let at = rng.below(bytes.len());
            for (i, byte) in value.to_be_bytes().into_iter().enumerate() {
                if let Some(slot) = bytes.get_mut(at + i) {
                    *slot = byte;
                }
            }
        }
        2 => bytes.truncate(rng.below(bytes.len())),
        _ => {
            let at = rng.below(bytes.len());
            bytes.insert(at, rng.next() as u8);
        }
    }
}

/// Best-effort CRC repair of every top-level entry, so mutations reach past the CRC check.
fn reseal_all(set: &mut [u8]) {
    let mut position = 0;
    while let Some(size) = set.get(position + 8..position + 12) {
        let size = i32::from_be_bytes(size.try_into().unwrap());
        let Ok(size) = usize::try_from(size) else {
            return;
        };
        if size < 4 || position + 12 + size > set.len() {
            return;
        }
        reseal(set, position);
        position += 12 + size;
    }
}

fn decode_everything(set: &[u8]) {
    for result in [
        decode_records(set).map(drop),
        decode_columns(set, false).map(drop),
        shallow_entries(set).try_for_each(|entry| entry.map(drop)),
    ] {
        if let Err(error) = result {
            assert!(matches!(error, Error::Corrupted(_)), "{error:?}");
        }
    }
}

#[test]
fn randomized_mutations_never_panic() {
    let records: Vec<Record> = (0..6)
        .map(|i| {
            let value = format!("value {i} value {i}").into_bytes();
            record(
                20 + i,
                1_000 + i,
                (i % 3 != 0).then_some(&b"key"[..]),
                Some(&value),
            )
        })
        .collect();
    let mut seeds = Vec::new();
    for compression in ALL_COMPRESSIONS {
        for magic in [Magic::V0, Magic::V1] {
            seeds.push(build(magic, compression, None, &records));
        }
    }
    seeds.push(build(Magic::V1, Compression::Snappy, Some(5), &records));
    let mixed = [seeds[0].clone(), seeds[3].clone(), seeds[5].clone()].concat();
    seeds.push(mixed);

    let mut rng = Prng(0x2545_F491_4F6C_DD1D);
    for round in 0..4_000 {
        let mut set = seeds[round % seeds.len()].clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut set, &mut rng);
        }
        if rng.below(2) == 0 {
            reseal_all(&mut set);
        }
        decode_everything(&set);
    }

    // Mutate the decompressed inner set of a wrapper, then re-wrap it validly.
    let inner = build(Magic::V1, Compression::None, None, &records);
    for _ in 0..2_000 {
        let mut mutated = inner.clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut mutated, &mut rng);
        }
        if rng.below(2) == 0 {
            reseal_all(&mut mutated);
        }
        decode_everything(&gzip_wrapper_v1(25, &mutated));
    }
}

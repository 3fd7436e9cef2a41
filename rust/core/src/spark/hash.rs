//! Spark's `hash()` (`Murmur3Hash`, seed 42) over Arrow column buffers, and the partition ids
//! of `HashPartitioning` (`pmod(hash(cols), n)`, what `repartition(n, cols)` routes by).
//!
//! Spark's semantics, per value (Spark's `HashExpression` / `Murmur3_x86_32`):
//! - a null leaves the running hash unchanged;
//! - bool (1/0), byte, short, int and date (days) are hashed as one 32-bit int;
//! - long and timestamp (microseconds) as one 64-bit long (low word, then high word);
//! - float: both zeros hash as the int 0, NaN as its canonical bits (`floatToIntBits`);
//!   double likewise as a long;
//! - string (UTF-8 bytes) and binary: Murmur3 over 4-byte little-endian words, then each tail
//!   byte on its own as a sign-extended int (Spark's legacy tail, unlike standard Murmur3);
//! - several columns: each column's hash is seeded with the previous column's result.

use crate::error::{Error, Result};
use crate::format::packed::BinaryColumn;

/// The seed of Spark's `hash()` and of `HashPartitioning`.
pub const SEED: i32 = 42;

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

fn mix_k1(k1: u32) -> u32 {
    k1.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
}

fn mix_h1(h1: u32, k1: u32) -> u32 {
    (h1 ^ k1)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

fn fmix(h1: u32, length: u32) -> u32 {
    let mut h = h1 ^ length;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Spark's `Murmur3_x86_32.hashInt`.
pub fn hash_int(input: i32, seed: i32) -> i32 {
    fmix(mix_h1(seed as u32, mix_k1(input as u32)), 4) as i32
}

/// Spark's `Murmur3_x86_32.hashLong`: the low 32 bits, then the high 32 bits.
pub fn hash_long(input: i64, seed: i32) -> i32 {
    let h1 = mix_h1(seed as u32, mix_k1(input as u32));
    let h1 = mix_h1(h1, mix_k1((input >> 32) as u32));
    fmix(h1, 8) as i32
}

/// Spark's `Murmur3_x86_32.hashUnsafeBytes` (strings' UTF-8 bytes, binaries): little-endian
/// 4-byte words, then every remaining byte mixed alone as a sign-extended int.
pub fn hash_bytes(bytes: &[u8], seed: i32) -> i32 {
    let mut h1 = seed as u32;
    let words = bytes.chunks_exact(4);
    let tail = words.remainder();
    for word in words {
        let k1 = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        h1 = mix_h1(h1, mix_k1(k1));
    }
    for &b in tail {
        h1 = mix_h1(h1, mix_k1(i32::from(b as i8) as u32));
    }
    fmix(h1, bytes.len() as u32) as i32
}

/// Spark's float hashing: both zeros as the int 0, every NaN as `floatToIntBits`' canonical NaN.
pub fn hash_float(value: f32, seed: i32) -> i32 {
    let bits = if value == 0.0 {
        0
    } else if value.is_nan() {
        0x7fc0_0000
    } else {
        value.to_bits() as i32
    };
    hash_int(bits, seed)
}

/// Spark's double hashing: both zeros as the long 0, every NaN as `doubleToLongBits`' NaN.
pub fn hash_double(value: f64, seed: i32) -> i32 {
    let bits = if value == 0.0 {
        0
    } else if value.is_nan() {
        0x7ff8_0000_0000_0000
    } else {
        value.to_bits() as i64
    };
    hash_long(bits, seed)
}

/// Java's `pmod(hash, n)` for `n > 0`: the partition `HashPartitioning` gives the hash.
pub fn pmod(hash: i32, n: i32) -> i32 {
    let r = hash % n;
    if r < 0 {
        r + n
    } else {
        r
    }
}

/// The physical kind of a column's buffers, as Arrow lays them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// Arrow `null`: every value null, the hash unchanged.
    Null,
    /// Bit-packed booleans (hashed as int 1/0).
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    /// Days since the epoch (i32).
    Date32,
    /// Microseconds since the epoch (i64).
    TimestampMicros,
    /// `binary` / `utf8`: i32 offsets.
    Binary,
    /// `large_binary` / `large_utf8`: i64 offsets.
    LargeBinary,
}

impl ColumnKind {
    /// Every kind with its name, in the order error messages list them.
    pub const ALL: [(&'static str, ColumnKind); 12] = [
        ("null", ColumnKind::Null),
        ("bool", ColumnKind::Bool),
        ("int8", ColumnKind::Int8),
        ("int16", ColumnKind::Int16),
        ("int32", ColumnKind::Int32),
        ("int64", ColumnKind::Int64),
        ("float32", ColumnKind::Float32),
        ("float64", ColumnKind::Float64),
        ("date32", ColumnKind::Date32),
        ("timestamp_us", ColumnKind::TimestampMicros),
        ("binary", ColumnKind::Binary),
        ("large_binary", ColumnKind::LargeBinary),
    ];

    /// The kind named `name` (one of [`ColumnKind::ALL`]'s names).
    pub fn from_name(name: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                Error::InvalidArgument(format!(
                    "unsupported column kind {name:?} for Spark's hash; supported: {}",
                    names.join(", ")
                ))
            })
    }
}

/// The raw buffers of one Arrow array: `offsets` for the binary kinds only, `validity` the
/// optional null bitmap, `offset` the array's element offset (a slice's start) into all of them.
#[derive(Clone, Copy, Debug)]
pub struct ColumnBuffers<'a> {
    pub kind: ColumnKind,
    pub offsets: Option<&'a [u8]>,
    pub data: &'a [u8],
    pub validity: Option<&'a [u8]>,
    pub offset: usize,
}

fn malformed(kind: ColumnKind, what: &str) -> Error {
    Error::InvalidArgument(format!("malformed Arrow {kind:?} array: {what}"))
}

fn is_valid(validity: Option<&[u8]>, bit: usize) -> bool {
    validity.is_none_or(|bits| bits[bit / 8] & (1 << (bit % 8)) != 0)
}

/// The number of bytes `bits` bits take, checked.
fn bits_end(kind: ColumnKind, start: usize, count: usize) -> Result<usize> {
    start
        .checked_add(count)
        .map(|bits| bits.div_ceil(8))
        .ok_or_else(|| malformed(kind, "length overflows"))
}

/// Applies `hash(value, running)` to every valid value of a fixed-width column.
fn update_fixed<const W: usize>(
    hashes: &mut [i32],
    column: &ColumnBuffers<'_>,
    hash: impl Fn([u8; W], i32) -> i32,
) -> Result<()> {
    let count = hashes.len();
    let start = column.offset;
    let (begin, end) = start
        .checked_mul(W)
        .zip(start.checked_add(count).and_then(|n| n.checked_mul(W)))
        .ok_or_else(|| malformed(column.kind, "length overflows"))?;
    let values = column
        .data
        .get(begin..end)
        .ok_or_else(|| malformed(column.kind, "data buffer shorter than the array"))?;
    let pairs = hashes.iter_mut().zip(values.chunks_exact(W));
    let bytes = |value: &[u8]| {
        let mut bytes = [0u8; W];
        bytes.copy_from_slice(value);
        bytes
    };
    match column.validity {
        None => pairs.for_each(|(h, value)| *h = hash(bytes(value), *h)),
        validity => {
            for (i, (h, value)) in pairs.enumerate() {
                if is_valid(validity, start + i) {
                    *h = hash(bytes(value), *h);
                }
            }
        }
    }
    Ok(())
}

/// Mixes one column into the running `hashes` (one per row), as Spark's `hash()` does.
pub fn update_column(hashes: &mut [i32], column: &ColumnBuffers<'_>) -> Result<()> {
    let count = hashes.len();
    let kind = column.kind;
    let start = column.offset;
    let binary = matches!(kind, ColumnKind::Binary | ColumnKind::LargeBinary);
    if column.offsets.is_some() && !binary {
        return Err(malformed(kind, "offsets are for binary kinds only"));
    }
    if let Some(bits) = column.validity {
        if bits.len() < bits_end(kind, start, count)? {
            return Err(malformed(kind, "validity bitmap shorter than the array"));
        }
    }
    match kind {
        ColumnKind::Null => Ok(()),
        ColumnKind::Binary | ColumnKind::LargeBinary => {
            let offsets = column
                .offsets
                .ok_or_else(|| malformed(kind, "no offsets buffer"))?;
            let values = BinaryColumn::parse(
                offsets,
                column.data,
                column.validity,
                start,
                count,
                kind == ColumnKind::LargeBinary,
            )?;
            for (i, h) in hashes.iter_mut().enumerate() {
                if let Some(value) = values.get(i) {
                    *h = hash_bytes(value, *h);
                }
            }
            Ok(())
        }
        ColumnKind::Bool => {
            if column.data.len() < bits_end(kind, start, count)? {
                return Err(malformed(kind, "data buffer shorter than the array"));
            }
            for (i, h) in hashes.iter_mut().enumerate() {
                let bit = start + i;
                if is_valid(column.validity, bit) {
                    let value = column.data[bit / 8] >> (bit % 8) & 1;
                    *h = hash_int(i32::from(value), *h);
                }
            }
            Ok(())
        }
        ColumnKind::Int8 => update_fixed::<1>(hashes, column, |b, h| {
            hash_int(i32::from(i8::from_le_bytes(b)), h)
        }),
        ColumnKind::Int16 => update_fixed::<2>(hashes, column, |b, h| {
            hash_int(i32::from(i16::from_le_bytes(b)), h)
        }),
        ColumnKind::Int32 | ColumnKind::Date32 => {
            update_fixed::<4>(hashes, column, |b, h| hash_int(i32::from_le_bytes(b), h))
        }
        ColumnKind::Int64 | ColumnKind::TimestampMicros => {
            update_fixed::<8>(hashes, column, |b, h| hash_long(i64::from_le_bytes(b), h))
        }
        ColumnKind::Float32 => {
            update_fixed::<4>(hashes, column, |b, h| hash_float(f32::from_le_bytes(b), h))
        }
        ColumnKind::Float64 => {
            update_fixed::<8>(hashes, column, |b, h| hash_double(f64::from_le_bytes(b), h))
        }
    }
}

/// Spark's `hash(col1, col2, ...)` of `count` rows: a hash per row, starting at [`SEED`], each
/// column mixed in turn.
pub fn hash_columns(count: usize, columns: &[ColumnBuffers<'_>]) -> Result<Vec<i32>> {
    let mut hashes = vec![SEED; count];
    for column in columns {
        update_column(&mut hashes, column)?;
    }
    Ok(hashes)
}

/// One row's value of a key column, for hashing a single row without Arrow buffers (a read
/// routed to its partition): the value as the column's kind hashes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar<'a> {
    /// A null: the running hash unchanged.
    Null,
    /// bool (as int 1/0).
    Bool(bool),
    /// byte, short, int, date (days): one 32-bit int.
    Int(i32),
    /// long, timestamp (microseconds): one 64-bit long.
    Long(i64),
    Double(f64),
    /// A string's UTF-8 bytes, or a binary.
    Bytes(&'a [u8]),
}

/// `value` mixed into the running hash of its row (start at [`SEED`], a column at a time).
pub fn hash_value(value: Scalar<'_>, running: i32) -> i32 {
    match value {
        Scalar::Null => running,
        Scalar::Bool(b) => hash_int(i32::from(b), running),
        Scalar::Int(v) => hash_int(v, running),
        Scalar::Long(v) => hash_long(v, running),
        Scalar::Double(v) => hash_double(v, running),
        Scalar::Bytes(b) => hash_bytes(b, running),
    }
}

/// Spark's hash of one row's `values` (its key columns, in order): what [`hash_columns`] gives
/// that row.
pub fn hash_row(values: &[Scalar<'_>]) -> i32 {
    values
        .iter()
        .fold(SEED, |running, value| hash_value(*value, running))
}

/// Turns hashes into `HashPartitioning`'s partition ids, `pmod(hash, num_partitions)`, in place.
pub fn to_partition_ids(hashes: &mut [i32], num_partitions: i32) -> Result<()> {
    if num_partitions <= 0 {
        return Err(Error::InvalidArgument(format!(
            "the number of partitions must be positive, got {num_partitions}"
        )));
    }
    for h in hashes.iter_mut() {
        *h = pmod(*h, num_partitions);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le<T: Copy, const W: usize>(values: &[T], to: impl Fn(T) -> [u8; W]) -> Vec<u8> {
        values.iter().flat_map(|v| to(*v)).collect()
    }

    fn column<'a>(kind: ColumnKind, data: &'a [u8]) -> ColumnBuffers<'a> {
        ColumnBuffers {
            kind,
            offsets: None,
            data,
            validity: None,
            offset: 0,
        }
    }

    fn one(kind: ColumnKind, data: &[u8]) -> i32 {
        hash_columns(1, &[column(kind, data)]).unwrap()[0]
    }

    /// `(offsets, data)` of a `binary` (i32 offsets) or `large_binary` array of `values`.
    fn binary(values: &[&[u8]], large: bool) -> (Vec<u8>, Vec<u8>) {
        let mut offsets = vec![0i64];
        let mut data = Vec::new();
        for v in values {
            data.extend_from_slice(v);
            offsets.push(data.len() as i64);
        }
        let offsets = if large {
            le(&offsets, i64::to_le_bytes)
        } else {
            offsets
                .iter()
                .flat_map(|o| (*o as i32).to_le_bytes())
                .collect()
        };
        (offsets, data)
    }

    fn hash_binary(values: &[&[u8]], large: bool) -> Vec<i32> {
        let (offsets, data) = binary(values, large);
        let kind = if large {
            ColumnKind::LargeBinary
        } else {
            ColumnKind::Binary
        };
        let col = ColumnBuffers {
            offsets: Some(&offsets),
            ..column(kind, &data)
        };
        hash_columns(values.len(), &[col]).unwrap()
    }

    // Reference values: Spark 4.1.4's `SELECT hash(...)` (pyspark, local mode).

    #[test]
    fn strings_and_binaries_hash_like_spark_every_tail_length() {
        let values: [&[u8]; 11] = [
            b"",
            b"a",
            b"ab",
            b"abc",
            b"abcd",
            b"abcde",
            "h\u{e9}llo w\u{f6}rld".as_bytes(),
            "\u{65e5}\u{672c}\u{8a9e}".as_bytes(),
            &[0xff],
            &[0x80, 0xfe, 0x7f],
            b"",
        ];
        let spark = [
            142_593_372,
            1_485_273_170,
            -97_053_317,
            1_322_437_556,
            -396_302_900,
            814_637_928,
            -281_075_962,
            -1_143_049_834,
            1_398_487_324,
            -1_130_351_051,
            142_593_372,
        ];
        assert_eq!(hash_binary(&values, false), spark);
        assert_eq!(hash_binary(&values, true), spark);
        for (v, h) in values.iter().zip(spark) {
            assert_eq!(hash_bytes(v, SEED), h);
        }
    }

    #[test]
    fn integers_hash_like_spark() {
        let ints = [1, 0, -1, i32::MAX, i32::MIN];
        let spark_ints = [
            -559_580_957,
            933_211_791,
            -1_604_776_387,
            133_916_647,
            723_455_942,
        ];
        let data = le(&ints, i32::to_le_bytes);
        let col = column(ColumnKind::Int32, &data);
        assert_eq!(hash_columns(5, &[col]).unwrap(), spark_ints);

        let longs = [1i64, 0, -1, i64::MAX, i64::MIN];
        let spark_longs = [
            -1_712_319_331,
            -1_670_924_195,
            -939_490_007,
            -1_604_625_029,
            -853_646_085,
        ];
        let data = le(&longs, i64::to_le_bytes);
        let col = column(ColumnKind::Int64, &data);
        assert_eq!(hash_columns(5, &[col]).unwrap(), spark_longs);

        assert_eq!(one(ColumnKind::Int8, &[1]), -559_580_957);
        assert_eq!(
            one(ColumnKind::Int8, &(-128i8).to_le_bytes()),
            1_110_053_733
        );
        assert_eq!(
            one(ColumnKind::Int16, &(-2i16).to_le_bytes()),
            -1_160_545_675
        );
        assert_eq!(
            one(ColumnKind::Date32, &19_782i32.to_le_bytes()),
            653_915_859
        );
        assert_eq!(
            one(ColumnKind::Date32, &(-1i32).to_le_bytes()),
            -1_604_776_387
        );
        // timestamp_ntz'2024-02-29 12:34:56.789012'
        let micros = 1_709_210_096_789_012i64;
        assert_eq!(
            one(ColumnKind::TimestampMicros, &micros.to_le_bytes()),
            -1_367_554_535
        );
    }

    #[test]
    fn booleans_are_bit_packed_and_hash_as_one_or_zero() {
        // true, false, true, true, false, false, false, false | true (bit 8, next byte)
        let bits = [0b0000_1101u8, 0b0000_0001];
        let hashes = hash_columns(9, &[column(ColumnKind::Bool, &bits)]).unwrap();
        let (t, f) = (-559_580_957, 933_211_791);
        assert_eq!(hashes, [t, f, t, t, f, f, f, f, t]);
        // A slice starting at bit 2.
        let sliced = ColumnBuffers {
            offset: 2,
            ..column(ColumnKind::Bool, &bits)
        };
        assert_eq!(hash_columns(3, &[sliced]).unwrap(), [t, t, f]);
    }

    #[test]
    fn floats_hash_like_spark_zeros_and_nans_normalized() {
        let floats = [1.5f32, -0.0, 0.0, f32::NAN, -f32::NAN, f32::INFINITY];
        let data = le(&floats, f32::to_le_bytes);
        let hashes = hash_columns(6, &[column(ColumnKind::Float32, &data)]).unwrap();
        let nan = -349_261_430;
        assert_eq!(
            hashes,
            [
                -221_251_528,
                933_211_791,
                933_211_791,
                nan,
                nan,
                2_026_854_605
            ]
        );
        // A NaN with a payload hashes as the canonical NaN too.
        assert_eq!(hash_float(f32::from_bits(0x7fc0_0123), SEED), nan);

        let doubles = [1.5f64, -0.0, 0.0, f64::NAN, f64::NEG_INFINITY];
        let data = le(&doubles, f64::to_le_bytes);
        let hashes = hash_columns(5, &[column(ColumnKind::Float64, &data)]).unwrap();
        let nan = -1_281_358_385;
        assert_eq!(
            hashes,
            [
                1_290_763_749,
                -1_670_924_195,
                -1_670_924_195,
                nan,
                461_104_036
            ]
        );
        assert_eq!(
            hash_double(f64::from_bits(0xfff8_0000_0000_0001), SEED),
            nan
        );
    }

    #[test]
    fn columns_chain_and_nulls_leave_the_hash_unchanged() {
        // hash('key', 7L), hash(null, 5L), hash(null, null)
        let (offsets, data) = binary(&[b"key", b"", b""], false);
        let validity = [0b001u8];
        let strings = ColumnBuffers {
            offsets: Some(&offsets),
            validity: Some(&validity),
            ..column(ColumnKind::Binary, &data)
        };
        let longs = le(&[7i64, 5, 0], i64::to_le_bytes);
        let long_validity = [0b011u8];
        let longs = ColumnBuffers {
            validity: Some(&long_validity),
            ..column(ColumnKind::Int64, &longs)
        };
        let null = column(ColumnKind::Null, &[]);
        assert_eq!(
            hash_columns(3, &[strings, null, longs]).unwrap(),
            [-1_186_108_738, 1_607_884_268, SEED]
        );

        // hash(3, 'abc', X'0102')
        let (offsets, data) = binary(&[b"abc"], true);
        let ints = 3i32.to_le_bytes();
        let bytes = [1u8, 2];
        let binary_offsets = le(&[0i32, 2], i32::to_le_bytes);
        let columns = [
            column(ColumnKind::Int32, &ints),
            ColumnBuffers {
                offsets: Some(&offsets),
                ..column(ColumnKind::LargeBinary, &data)
            },
            ColumnBuffers {
                offsets: Some(&binary_offsets),
                ..column(ColumnKind::Binary, &bytes)
            },
        ];
        assert_eq!(hash_columns(1, &columns).unwrap(), [1_660_511_606]);
    }

    #[test]
    fn slices_start_at_their_offset_in_data_and_validity() {
        let longs = le(&[0i64, 0, 0, 1, 99, -1], i64::to_le_bytes);
        // bits 3 and 5 valid, 4 null
        let validity = [0b0010_1000u8];
        let col = ColumnBuffers {
            validity: Some(&validity),
            offset: 3,
            ..column(ColumnKind::Int64, &longs)
        };
        assert_eq!(
            hash_columns(3, &[col]).unwrap(),
            [-1_712_319_331, SEED, -939_490_007]
        );
        let (offsets, data) = binary(&[b"x", b"a", b"abc"], false);
        let col = ColumnBuffers {
            offsets: Some(&offsets),
            offset: 1,
            ..column(ColumnKind::Binary, &data)
        };
        assert_eq!(
            hash_columns(2, &[col]).unwrap(),
            [1_485_273_170, 1_322_437_556]
        );
    }

    #[test]
    fn partition_ids_are_pmod_of_the_hash() {
        let (offsets, data) = binary(&[b"a"], false);
        let col = ColumnBuffers {
            offsets: Some(&offsets),
            ..column(ColumnKind::Binary, &data)
        };
        let mut ids = hash_columns(1, &[col]).unwrap();
        to_partition_ids(&mut ids, 7).unwrap();
        assert_eq!(ids, [3]);
        assert_eq!(pmod(hash_long(-1, SEED), 200), 193);
        assert_eq!(pmod(i32::MIN, 7), 5);
        assert_eq!(pmod(-1, 1), 0);
        assert!(matches!(
            to_partition_ids(&mut ids, 0),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_row_hashes_as_its_columns_do() {
        let (offsets, data) = binary(&[b"user-17"], false);
        let string = ColumnBuffers {
            offsets: Some(&offsets),
            ..column(ColumnKind::Binary, &data)
        };
        let long = le(&[-5_000_000_000i64], i64::to_le_bytes);
        let int = le(&[-7i32], i32::to_le_bytes);
        let double = le(&[-0.0f64], f64::to_le_bytes);
        let columns = [
            string,
            column(ColumnKind::Int64, &long),
            column(ColumnKind::Int32, &int),
            column(ColumnKind::Bool, &[1]),
            column(ColumnKind::Float64, &double),
        ];
        let row = [
            Scalar::Bytes(b"user-17"),
            Scalar::Long(-5_000_000_000),
            Scalar::Int(-7),
            Scalar::Bool(true),
            Scalar::Double(-0.0),
        ];
        assert_eq!(hash_row(&row), hash_columns(1, &columns).unwrap()[0]);
        assert_eq!(
            hash_row(&[Scalar::Bytes(b"a")]),
            hash_binary(&[b"a"], false)[0]
        );
        assert_eq!(
            hash_row(&[Scalar::Null, Scalar::Long(1)]),
            hash_long(1, SEED)
        );
        assert_eq!(hash_row(&[]), SEED);
    }

    #[test]
    fn malformed_buffers_are_invalid_arguments_not_panics() {
        let bad = |count: usize, col: ColumnBuffers<'_>| {
            assert!(
                matches!(hash_columns(count, &[col]), Err(Error::InvalidArgument(_))),
                "{col:?} x {count}"
            );
        };
        let longs = le(&[1i64, 2], i64::to_le_bytes);
        bad(3, column(ColumnKind::Int64, &longs));
        bad(
            2,
            ColumnBuffers {
                offset: 1,
                ..column(ColumnKind::Int64, &longs)
            },
        );
        bad(
            2,
            ColumnBuffers {
                offset: usize::MAX,
                ..column(ColumnKind::Int64, &longs)
            },
        );
        bad(9, column(ColumnKind::Bool, &[0xff]));
        bad(
            2,
            ColumnBuffers {
                validity: Some(&[]),
                ..column(ColumnKind::Int64, &longs)
            },
        );
        // binary: no offsets, offsets past the data, decreasing offsets, too few offsets
        bad(1, column(ColumnKind::Binary, b"abc"));
        let past = le(&[0i32, 4], i32::to_le_bytes);
        let decreasing = le(&[2i32, 1], i32::to_le_bytes);
        for offsets in [&past, &decreasing] {
            bad(
                1,
                ColumnBuffers {
                    offsets: Some(offsets),
                    ..column(ColumnKind::Binary, b"abc")
                },
            );
        }
        bad(
            2,
            ColumnBuffers {
                offsets: Some(&decreasing[..4]),
                ..column(ColumnKind::LargeBinary, b"abc")
            },
        );
        // offsets on a fixed-width kind
        bad(
            1,
            ColumnBuffers {
                offsets: Some(&past),
                ..column(ColumnKind::Int64, &longs)
            },
        );
        assert!(ColumnKind::from_name("decimal128").is_err());
        assert_eq!(
            ColumnKind::from_name("timestamp_us"),
            Ok(ColumnKind::TimestampMicros)
        );
    }

    #[test]
    fn spark_hash_of_its_documented_example() {
        // Spark's docs: SELECT hash('Spark', array(123), 2) = -1321691492 (an array's elements
        // are mixed in one by one, like further columns).
        let h = hash_bytes(b"Spark", SEED);
        let h = hash_int(123, h);
        assert_eq!(hash_int(2, h), -1_321_691_492);
    }
}

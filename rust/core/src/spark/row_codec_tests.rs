use super::*;

fn field(name: &str, data_type: DataType) -> StructField {
    StructField::new(name, data_type, true)
}

fn codec(fields: Vec<StructField>) -> RowCodec {
    RowCodec::new(fields)
}

/// xorshift64*: deterministic randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn random_type(rng: &mut Rng, depth: u32) -> DataType {
    let leaves = [
        DataType::Boolean,
        DataType::Byte,
        DataType::Short,
        DataType::Integer,
        DataType::Long,
        DataType::Float,
        DataType::Double,
        DataType::String,
        DataType::Varchar(4),
        DataType::Binary,
        DataType::Date,
        DataType::Timestamp,
        DataType::TimestampNtz,
        DataType::Decimal {
            precision: 10,
            scale: 2,
        },
        DataType::Decimal {
            precision: 30,
            scale: 4,
        },
    ];
    let roll = rng.below(100);
    if depth == 0 || roll < 60 {
        return leaves[rng.below(leaves.len() as u64) as usize].clone();
    }
    if roll < 75 {
        return DataType::Array {
            element: Box::new(random_type(rng, depth - 1)),
            contains_null: rng.chance(70),
        };
    }
    if roll < 88 {
        return DataType::Map {
            key: Box::new(leaves[rng.below(5) as usize].clone()),
            value: Box::new(random_type(rng, depth - 1)),
            value_contains_null: rng.chance(70),
        };
    }
    DataType::Struct(random_fields(rng, depth - 1))
}

fn random_fields(rng: &mut Rng, depth: u32) -> Vec<StructField> {
    (0..1 + rng.below(6))
        .map(|i| StructField::new(&format!("f{i}"), random_type(rng, depth), rng.chance(80)))
        .collect()
}

fn random_value(rng: &mut Rng, data_type: &DataType, nullable: bool) -> Value {
    if nullable && rng.chance(15) {
        return Value::Null;
    }
    let extremes = |rng: &mut Rng, low: i64, high: i64| match rng.below(4) {
        0 => low,
        1 => high,
        2 => 0,
        _ => low + (rng.next() % ((high - low) as u64).saturating_add(1).max(1)) as i64,
    };
    match data_type {
        DataType::Boolean => Value::Boolean(rng.chance(50)),
        DataType::Byte => Value::Integer(extremes(rng, -128, 127)),
        DataType::Short => Value::Integer(extremes(rng, -32768, 32767)),
        DataType::Integer => Value::Integer(extremes(rng, i32::MIN as i64, i32::MAX as i64)),
        DataType::Long => Value::Integer(match rng.below(4) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.next() as i64,
        }),
        DataType::Float => Value::Float(
            [0.0, -0.0, f32::MAX, f32::MIN_POSITIVE, f32::INFINITY, 1.5][rng.below(6) as usize],
        ),
        DataType::Double => Value::Double(
            [
                0.0,
                f64::MAX,
                f64::MIN,
                5e-324,
                f64::NEG_INFINITY,
                rng.next() as f64,
            ][rng.below(6) as usize],
        ),
        DataType::String | DataType::Char(_) | DataType::Varchar(_) => Value::Text(
            ["", "naïve ☃", "𝄞", "x"][rng.below(4) as usize].repeat(rng.below(5) as usize),
        ),
        DataType::Binary => Value::Binary((0..rng.below(20)).map(|_| rng.next() as u8).collect()),
        DataType::Date => Value::Date(extremes(rng, -719_162, 2_932_896)),
        DataType::Timestamp | DataType::TimestampNtz => Value::Timestamp(rng.next() as i64 >> 8),
        DataType::Decimal { precision, .. } => Value::Decimal(if Kind::small_decimal(*precision) {
            DecimalValue::Unscaled(extremes(
                rng,
                -999_999_999_999_999_999,
                999_999_999_999_999_999,
            ))
        } else {
            DecimalValue::Text(format!("-{}.5", rng.next()))
        }),
        DataType::Array {
            element,
            contains_null,
        } => Value::Array(
            (0..rng.below(6))
                .map(|_| random_value(rng, element, *contains_null))
                .collect(),
        ),
        DataType::Map {
            key,
            value,
            value_contains_null,
        } => Value::Map(
            (0..rng.below(4))
                .map(|_| {
                    (
                        random_value(rng, key, false),
                        random_value(rng, value, *value_contains_null),
                    )
                })
                .collect(),
        ),
        DataType::Struct(fields) => Value::Row(
            fields
                .iter()
                .map(|f| random_value(rng, &f.data_type, f.nullable))
                .collect(),
        ),
    }
}

#[test]
fn the_encoding_is_compact_and_stable() {
    let counts = codec(vec![
        field("count", DataType::Long),
        field("total", DataType::Long),
    ]);
    let raw = counts
        .encode_value(&Value::Row(vec![Value::Integer(3), Value::Integer(300)]))
        .unwrap();
    // null bitmap, zigzag varints 3 -> 6 and 300 -> 600 (0xd8 0x04)
    assert_eq!(raw, [0, 6, 0xD8, 0x04]);
    let nulls = counts
        .encode_value(&Value::Row(vec![Value::Null, Value::Integer(-1)]))
        .unwrap();
    assert_eq!(nulls, [0b01, 1]);
}

#[test]
fn every_layout_matches_the_documented_bytes() {
    let schema = codec(vec![
        field("b", DataType::Boolean),
        field("f", DataType::Float),
        field("s", DataType::String),
        field("d", DataType::Date),
        field(
            "m",
            DataType::Decimal {
                precision: 30,
                scale: 1,
            },
        ),
        field(
            "a",
            DataType::Array {
                element: Box::new(DataType::Integer),
                contains_null: true,
            },
        ),
        field(
            "kv",
            DataType::Map {
                key: Box::new(DataType::String),
                value: Box::new(DataType::Long),
                value_contains_null: true,
            },
        ),
        field("n", DataType::Struct(vec![field("x", DataType::Short)])),
    ]);
    let row = Value::Row(vec![
        Value::Boolean(true),
        Value::Float(1.5),
        Value::Text("hé".into()),
        Value::Date(-1),
        Value::Decimal(DecimalValue::Text("-1.5".into())),
        Value::Array(vec![Value::Integer(1), Value::Null, Value::Integer(-2)]),
        Value::Map(vec![(Value::Text("k".into()), Value::Null)]),
        Value::Row(vec![Value::Integer(64)]),
    ]);
    let raw = schema.encode_value(&row).unwrap();
    let mut expected = vec![0, 1]; // bitmap of 8 fields, true
    expected.extend(1.5f32.to_le_bytes());
    expected.extend([3, b'h', 0xC3, 0xA9, 1, 4, b'-', b'1', b'.', b'5']);
    expected.extend([3, 0b010, 2, 3]); // array: count, bitmap, 1 and -2
    expected.extend([1, 0, 1, b'k', 1, 0b1]); // keys ["k"], values [null]
    expected.extend([0, 0x80, 0x01]); // struct: bitmap, 64 -> 128
    assert_eq!(raw, expected);
    assert_eq!(schema.decode_value(None, &raw).unwrap(), row);
}

#[test]
fn random_values_of_random_schemas_round_trip() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..2_000 {
        let fields = random_fields(&mut rng, 3);
        let codec = codec(fields.clone());
        for _ in 0..5 {
            let row = random_value(&mut rng, &DataType::Struct(fields.clone()), false);
            let raw = codec.encode_value(&row).unwrap();
            assert_eq!(codec.decode_value(None, &raw).unwrap(), row, "{fields:?}");
        }
    }
}

#[test]
fn garbage_bytes_decode_to_an_error_or_a_value_never_a_panic() {
    let mut rng = Rng(42);
    for _ in 0..3_000 {
        let fields = random_fields(&mut rng, 3);
        let codec = codec(fields.clone());
        for _ in 0..20 {
            let raw: Vec<u8> = (0..rng.below(40)).map(|_| rng.next() as u8).collect();
            match codec.decode_value(None, &raw) {
                Ok(_) | Err(Error::Corrupted(_)) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
        // Truncations and bit flips of a valid value too.
        let row = random_value(&mut rng, &DataType::Struct(fields.clone()), false);
        let mut raw = codec.encode_value(&row).unwrap();
        for cut in 0..raw.len() {
            assert!(matches!(
                codec.decode_value(None, &raw[..cut]),
                Err(Error::Corrupted(_))
            ));
        }
        if !raw.is_empty() {
            let at = rng.below(raw.len() as u64) as usize;
            raw[at] ^= 1 << rng.below(8);
            let _ = codec.decode_value(None, &raw);
        }
    }
}

#[test]
fn huge_counts_and_long_varints_are_corrupt_not_allocated() {
    let array = codec(vec![field(
        "a",
        DataType::Array {
            element: Box::new(DataType::Struct(vec![])),
            contains_null: true,
        },
    )]);
    let huge = [0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F];
    assert!(matches!(
        array.decode_value(None, &huge),
        Err(Error::Corrupted(_))
    ));
    let long = codec(vec![field("n", DataType::Long)]);
    let eleven = [
        0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
    ];
    assert!(matches!(
        long.decode_value(None, &eleven),
        Err(Error::Corrupted(_))
    ));
    let max = long
        .encode_value(&Value::Row(vec![Value::Integer(i64::MIN)]))
        .unwrap();
    assert_eq!(max.len(), 11);
    assert_eq!(
        long.decode_value(None, &max).unwrap(),
        Value::Row(vec![Value::Integer(i64::MIN)])
    );
}

#[test]
fn values_that_do_not_fit_name_the_field() {
    let schema = codec(vec![
        StructField::new("count", DataType::Long, false),
        field("inner", DataType::Struct(vec![field("x", DataType::Byte)])),
    ]);
    let null = schema.encode_value(&Value::Row(vec![Value::Null, Value::Null]));
    assert!(matches!(null, Err(Error::InvalidArgument(m)) if m.contains("count")));
    let wide = Value::Row(vec![
        Value::Integer(1),
        Value::Row(vec![Value::Integer(300)]),
    ]);
    assert!(
        matches!(schema.encode_value(&wide), Err(Error::InvalidArgument(m)) if m.contains("inner.x"))
    );
    let text = Value::Row(vec![Value::Text("1".into()), Value::Null]);
    assert!(
        matches!(schema.encode_value(&text), Err(Error::InvalidArgument(m)) if m.contains("count"))
    );
}

#[test]
fn compatible_changes_read_old_values_also_in_nested_structs() {
    let old = vec![
        field("count", DataType::Integer),
        field("ratio", DataType::Float),
        field(
            "inner",
            DataType::Struct(vec![
                field("x", DataType::Short),
                field("gone", DataType::Boolean),
            ]),
        ),
    ];
    let new = vec![
        field("note", DataType::String),
        field(
            "inner",
            DataType::Struct(vec![field("y", DataType::Date), field("x", DataType::Long)]),
        ),
        field("count", DataType::Long),
        field("ratio", DataType::Double),
    ];
    assert!(evolution_problems(&old, &new, "").is_empty());
    let (writer, reader) = (codec(old), codec(new));
    let plan = ReadPlan::new(&writer, &reader).unwrap();
    let raw = writer
        .encode_value(&Value::Row(vec![
            Value::Integer(5),
            Value::Float(0.5),
            Value::Row(vec![Value::Integer(7), Value::Boolean(true)]),
        ]))
        .unwrap();
    assert_eq!(
        writer.decode_value(Some(&plan), &raw).unwrap(),
        Value::Row(vec![
            Value::Null,
            Value::Row(vec![Value::Null, Value::Integer(7)]),
            Value::Integer(5),
            Value::Double(0.5),
        ])
    );
}

#[test]
fn incompatible_changes_are_named_as_python_names_them() {
    let old = vec![
        field("count", DataType::Long),
        field("name", DataType::String),
    ];
    let narrowed = vec![
        field("count", DataType::Integer),
        field("name", DataType::String),
    ];
    let required = vec![
        field("count", DataType::Long),
        field("name", DataType::String),
        StructField::new("extra", DataType::Long, false),
    ];
    let nested = vec![field(
        "m",
        DataType::Map {
            key: Box::new(DataType::String),
            value: Box::new(DataType::Struct(vec![field(
                "d",
                DataType::Decimal {
                    precision: 5,
                    scale: 1,
                },
            )])),
            value_contains_null: true,
        },
    )];
    let nested_new = vec![field(
        "m",
        DataType::Map {
            key: Box::new(DataType::Integer),
            value: Box::new(DataType::Struct(vec![field(
                "d",
                DataType::Decimal {
                    precision: 6,
                    scale: 1,
                },
            )])),
            value_contains_null: true,
        },
    )];
    assert_eq!(
        evolution_problems(&old, &narrowed, ""),
        ["field count changed type bigint -> int"]
    );
    assert_eq!(
        evolution_problems(&old, &required, ""),
        ["new field extra must be nullable (old values have none)"]
    );
    assert_eq!(
        evolution_problems(&nested, &nested_new, ""),
        [
            "field m{key} changed type string -> int",
            "field m{value}.d changed type decimal(5,1) -> decimal(6,1)"
        ]
    );
    let mut tightened = old.clone();
    tightened[1].nullable = false;
    assert_eq!(
        evolution_problems(&old, &tightened, ""),
        ["field name was nullable and is not any more"]
    );
    assert!(ReadPlan::new(&codec(old), &codec(narrowed)).is_err());
}

fn flat_field_type(rng: &mut Rng) -> DataType {
    let kinds = [
        DataType::Boolean,
        DataType::Byte,
        DataType::Short,
        DataType::Integer,
        DataType::Long,
        DataType::Double,
        DataType::String,
        DataType::Varchar(4),
    ];
    kinds[rng.below(kinds.len() as u64) as usize].clone()
}

fn as_flat(value: &Value) -> FlatValue<'_> {
    match value {
        Value::Null => FlatValue::Null,
        Value::Boolean(b) => FlatValue::Boolean(*b),
        Value::Integer(n) => FlatValue::Integer(*n),
        Value::Double(d) => FlatValue::Double(*d),
        Value::Text(text) => FlatValue::Text(text.as_bytes()),
        other => panic!("not a flat field's value: {other:?}"),
    }
}

#[test]
fn flat_rows_are_written_as_the_schema_walk_writes_them() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for _ in 0..2_000 {
        let fields: Vec<StructField> = (0..1 + rng.below(10))
            .map(|i| StructField::new(&format!("f{i}"), flat_field_type(&mut rng), rng.chance(50)))
            .collect();
        let codec = codec(fields.clone());
        assert!(codec.is_flat(), "{fields:?}");
        for _ in 0..5 {
            let row = random_value(&mut rng, &DataType::Struct(fields.clone()), false);
            let Value::Row(values) = &row else {
                panic!("a struct's value is a row")
            };
            let flat: Vec<FlatValue<'_>> = values.iter().map(as_flat).collect();
            let mut out = vec![0xAB];
            assert!(codec.encode_flat(&flat, &mut out), "{fields:?} {row:?}");
            assert_eq!(out[0], 0xAB, "appended, not overwritten");
            assert_eq!(
                out[1..],
                codec.encode_value(&row).unwrap(),
                "{fields:?} {row:?}"
            );
        }
    }
}

#[test]
fn values_that_do_not_fit_a_flat_row_are_left_to_the_schema_walk() {
    let codec = codec(vec![
        StructField::new("count", DataType::Byte, false),
        StructField::new("name", DataType::String, true),
    ]);
    let text = Value::Text("x".into());
    let refused = [
        vec![Value::Null, text.clone()],          // a null where none may be
        vec![Value::Integer(128), text.clone()],  // past a byte
        vec![Value::Integer(-129), text.clone()], // below a byte
        vec![Value::Double(1.0), text.clone()],   // another kind
        vec![Value::Integer(1), Value::Integer(2)], // another kind
        vec![Value::Integer(1)],                  // too few values
        vec![Value::Integer(1), text.clone(), text.clone()], // too many
    ];
    for values in refused {
        let flat: Vec<FlatValue<'_>> = values.iter().map(as_flat).collect();
        let mut out = vec![1, 2, 3];
        assert!(!codec.encode_flat(&flat, &mut out), "{values:?}");
        assert_eq!(out, [1, 2, 3], "nothing written for {values:?}");
        assert!(
            codec.encode_value(&Value::Row(values.clone())).is_err(),
            "{values:?}"
        );
    }
    let fits = [Value::Integer(-128), Value::Null];
    let mut out = Vec::new();
    let flat: Vec<FlatValue<'_>> = fits.iter().map(as_flat).collect();
    assert!(codec.encode_flat(&flat, &mut out));
    assert_eq!(out, codec.encode_value(&Value::Row(fits.to_vec())).unwrap());
}

#[test]
fn rows_with_other_kinds_or_nesting_are_not_flat() {
    for data_type in [
        DataType::Float,
        DataType::Binary,
        DataType::Date,
        DataType::Timestamp,
        DataType::Decimal {
            precision: 10,
            scale: 2,
        },
        DataType::Array {
            element: Box::new(DataType::Long),
            contains_null: true,
        },
        DataType::Struct(vec![field("x", DataType::Long)]),
    ] {
        let codec = codec(vec![
            field("n", DataType::Long),
            field("other", data_type.clone()),
        ]);
        assert!(!codec.is_flat(), "{data_type:?}");
        let mut out = Vec::new();
        assert!(!codec.encode_flat(&[FlatValue::Integer(1), FlatValue::Null], &mut out));
        assert!(out.is_empty());
    }
}

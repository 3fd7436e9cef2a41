//! Typed state values (`kstate.spark.format.row_codec`): a Spark `StructType`'s binary row encoding.
//!
//! A row is a null bitmap (`ceil(n / 8)` bytes, bit `i % 8` of byte `i / 8` set when field `i` is
//! null) followed by the non-null fields in schema order. Booleans are one byte; every integer
//! width and dates / timestamps are zigzag LEB128 varints; floats and doubles little-endian IEEE
//! 754; strings and binaries a varint length and the bytes; decimals of precision <= 18 the zigzag
//! varint of the unscaled value, wider ones a varint length and the decimal's text; arrays a
//! varint count, the elements' null bitmap and the non-null elements; maps the array of keys then
//! the array of values; structs a nested row.
//!
//! A schema compiles to a [`RowCodec`]: its types as a flat list of [`Node`]s (the root row is
//! node 0, children follow their parent in preorder). Encoding pulls values from a
//! [`ValueSource`] and decoding pushes them into a [`ValueSink`], so the same layout code serves
//! [`Value`] (this module's model) and the Python binding's objects. A [`ReadPlan`] reads what
//! an older schema wrote as a newer, compatible one (fields matched by name, integer and float
//! widening; [`evolution_problems`] names every change that cannot be read).

use smallvec::SmallVec;

use crate::{Error, Result};

/// A Spark data type the row encoding can hold.
#[derive(Debug, Clone, PartialEq)]
pub enum DataType {
    Boolean,
    Byte,
    Short,
    Integer,
    Long,
    Float,
    Double,
    String,
    Char(u32),
    Varchar(u32),
    Binary,
    Date,
    Timestamp,
    TimestampNtz,
    Decimal {
        precision: u32,
        scale: i32,
    },
    Array {
        element: Box<DataType>,
        contains_null: bool,
    },
    Map {
        key: Box<DataType>,
        value: Box<DataType>,
        value_contains_null: bool,
    },
    Struct(Vec<StructField>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct StructField {
    pub name: String,
    pub data_type: DataType,
    pub nullable: bool,
}

impl StructField {
    pub fn new(name: &str, data_type: DataType, nullable: bool) -> Self {
        StructField {
            name: name.to_string(),
            data_type,
            nullable,
        }
    }
}

impl DataType {
    /// Spark's `typeName()`: what evolution compares (a char's length is not part of it).
    pub fn type_name(&self) -> &'static str {
        match self {
            DataType::Boolean => "boolean",
            DataType::Byte => "byte",
            DataType::Short => "short",
            DataType::Integer => "integer",
            DataType::Long => "long",
            DataType::Float => "float",
            DataType::Double => "double",
            DataType::String => "string",
            DataType::Char(_) => "char",
            DataType::Varchar(_) => "varchar",
            DataType::Binary => "binary",
            DataType::Date => "date",
            DataType::Timestamp => "timestamp",
            DataType::TimestampNtz => "timestamp_ntz",
            DataType::Decimal { .. } => "decimal",
            DataType::Array { .. } => "array",
            DataType::Map { .. } => "map",
            DataType::Struct(_) => "struct",
        }
    }

    /// Spark's `simpleString()`.
    pub fn simple_string(&self) -> String {
        match self {
            DataType::Byte => "tinyint".into(),
            DataType::Short => "smallint".into(),
            DataType::Integer => "int".into(),
            DataType::Long => "bigint".into(),
            DataType::Char(n) => format!("char({n})"),
            DataType::Varchar(n) => format!("varchar({n})"),
            DataType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            DataType::Array { element, .. } => format!("array<{}>", element.simple_string()),
            DataType::Map { key, value, .. } => {
                format!("map<{},{}>", key.simple_string(), value.simple_string())
            }
            DataType::Struct(fields) => struct_simple_string(fields),
            other => other.type_name().into(),
        }
    }

    /// The type named by Spark's `typeName()` (leaf types; containers are built directly).
    pub fn from_type_name(name: &str, length: u32, precision: u32, scale: i32) -> Result<Self> {
        Ok(match name {
            "boolean" => DataType::Boolean,
            "byte" => DataType::Byte,
            "short" => DataType::Short,
            "integer" => DataType::Integer,
            "long" => DataType::Long,
            "float" => DataType::Float,
            "double" => DataType::Double,
            "string" => DataType::String,
            "char" => DataType::Char(length),
            "varchar" => DataType::Varchar(length),
            "binary" => DataType::Binary,
            "date" => DataType::Date,
            "timestamp" => DataType::Timestamp,
            "timestamp_ntz" => DataType::TimestampNtz,
            "decimal" => DataType::Decimal { precision, scale },
            other => {
                return Err(Error::InvalidArgument(format!(
                    "kstate cannot store state of type {other}"
                )))
            }
        })
    }
}

pub fn struct_simple_string(fields: &[StructField]) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|f| format!("{}:{}", f.name, f.data_type.simple_string()))
        .collect();
    format!("struct<{}>", inner.join(","))
}

pub type NodeId = usize;

/// How an integer is checked on write (every width is stored the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    Byte,
    Short,
    Integer,
    Long,
}

impl Width {
    pub fn bounds(self) -> (i64, i64) {
        match self {
            Width::Byte => (i8::MIN as i64, i8::MAX as i64),
            Width::Short => (i16::MIN as i64, i16::MAX as i64),
            Width::Integer => (i32::MIN as i64, i32::MAX as i64),
            Width::Long => (i64::MIN, i64::MAX),
        }
    }
}

/// One position of a compiled schema: its type, whether it may be null, how it is named.
#[derive(Debug, Clone)]
pub struct Node {
    pub kind: Kind,
    pub nullable: bool,
    /// Where the position is, for messages: `count`, `inner.x`, `items[]`, `tags{key}`.
    pub path: String,
}

#[derive(Debug, Clone)]
pub enum Kind {
    Boolean,
    Integer(Width),
    Float,
    Double,
    Text,
    Binary,
    Date,
    Timestamp {
        ntz: bool,
    },
    Decimal {
        precision: u32,
        scale: i32,
    },
    Array {
        element: NodeId,
    },
    Map {
        key: NodeId,
        value: NodeId,
    },
    Struct {
        fields: Vec<NodeId>,
        names: Vec<String>,
    },
}

impl Kind {
    /// Decimals of precision <= 18 are stored as their unscaled value, wider ones as text.
    pub fn small_decimal(precision: u32) -> bool {
        precision <= 18
    }
}

/// A compiled `StructType`: node 0 is the row, every other node follows its parent (preorder:
/// a struct's fields in order, an array's element, a map's key then value).
#[derive(Debug, Clone)]
pub struct RowCodec {
    schema: Vec<StructField>,
    nodes: Vec<Node>,
    /// Whether every field is a boolean, an integer, a double or a string: rows
    /// [`Self::encode_flat`] writes without walking the schema.
    flat: bool,
}

/// A field's value of a flat row (see [`RowCodec::encode_flat`]).
#[derive(Debug, Clone, Copy)]
pub enum FlatValue<'a> {
    Null,
    Boolean(bool),
    Integer(i64),
    Double(f64),
    /// A string's UTF-8 bytes.
    Text(&'a [u8]),
}

impl RowCodec {
    pub fn new(schema: Vec<StructField>) -> Self {
        let mut nodes = Vec::new();
        compile_struct(&schema, true, String::new(), &mut nodes);
        let flat = match &nodes[0].kind {
            Kind::Struct { fields, .. } => fields.iter().all(|&f| {
                matches!(
                    nodes[f].kind,
                    Kind::Boolean | Kind::Integer(_) | Kind::Double | Kind::Text
                )
            }),
            _ => false,
        };
        RowCodec {
            schema,
            nodes,
            flat,
        }
    }

    /// Whether [`Self::encode_flat`] can write this schema's rows.
    pub fn is_flat(&self) -> bool {
        self.flat
    }

    /// Appends the row whose fields are `values`, in order, exactly as [`Self::encode`] writes
    /// it, for a flat schema ([`Self::is_flat`]): the common state value (a count, a total, a
    /// name) without a walk of the schema per value. Returns `false`, having written nothing,
    /// where a value does not fit its field as given (another kind, a null where none may be,
    /// an integer past its width, a count of values other than the fields'): the caller then
    /// encodes the row with [`Self::encode`], which converts or refuses it with its message.
    pub fn encode_flat(&self, values: &[FlatValue<'_>], out: &mut Vec<u8>) -> bool {
        let Kind::Struct { fields, .. } = &self.nodes[0].kind else {
            return false;
        };
        if !self.flat || values.len() != fields.len() {
            return false;
        }
        let start = out.len();
        out.resize(start + fields.len().div_ceil(8), 0);
        for (i, (&field, value)) in fields.iter().zip(values).enumerate() {
            let node = &self.nodes[field];
            match (&node.kind, *value) {
                (_, FlatValue::Null) if node.nullable => out[start + (i >> 3)] |= 1 << (i & 7),
                (Kind::Boolean, FlatValue::Boolean(b)) => out.push(b as u8),
                (Kind::Integer(width), FlatValue::Integer(n)) => {
                    let (low, high) = width.bounds();
                    if !(low..=high).contains(&n) {
                        out.truncate(start);
                        return false;
                    }
                    write_varint(out, zigzag(n));
                }
                (Kind::Double, FlatValue::Double(d)) => out.extend_from_slice(&d.to_le_bytes()),
                (Kind::Text, FlatValue::Text(text)) => {
                    write_varint(out, text.len() as u64);
                    out.extend_from_slice(text);
                }
                _ => {
                    out.truncate(start);
                    return false;
                }
            }
        }
        true
    }

    pub fn schema(&self) -> &[StructField] {
        &self.schema
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Appends `row` (the root struct's value) to `out`.
    pub fn encode<S: ValueSource>(
        &self,
        source: &mut S,
        row: &S::Value,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), S::Error> {
        Encoder {
            codec: self,
            source,
            out,
        }
        .value(0, row)
    }

    /// Reads one row written with this schema at `*pos`, as this schema (`plan = None`) or as a
    /// plan's reader schema; `*pos` ends after the row.
    pub fn decode<S: ValueSink>(
        &self,
        plan: Option<&ReadPlan>,
        raw: &[u8],
        pos: &mut usize,
        sink: &mut S,
    ) -> std::result::Result<S::Value, S::Error> {
        let mut decoder = Decoder {
            codec: self,
            plan,
            input: Input { raw, pos: *pos },
            sink,
        };
        let value = decoder.value(0)?;
        *pos = decoder.input.pos;
        Ok(value)
    }
}

fn compile_struct(fields: &[StructField], nullable: bool, path: String, nodes: &mut Vec<Node>) {
    let id = nodes.len();
    nodes.push(Node {
        kind: Kind::Boolean, // replaced below, once the children have ids
        nullable,
        path: path.clone(),
    });
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}.")
    };
    let ids = fields
        .iter()
        .map(|f| {
            compile(
                &f.data_type,
                f.nullable,
                format!("{prefix}{}", f.name),
                nodes,
            )
        })
        .collect();
    nodes[id].kind = Kind::Struct {
        fields: ids,
        names: fields.iter().map(|f| f.name.clone()).collect(),
    };
}

fn compile(data_type: &DataType, nullable: bool, path: String, nodes: &mut Vec<Node>) -> NodeId {
    let id = nodes.len();
    let leaf = |kind| Node {
        kind,
        nullable,
        path: path.clone(),
    };
    match data_type {
        DataType::Struct(fields) => {
            compile_struct(fields, nullable, path, nodes);
            return id;
        }
        DataType::Array {
            element,
            contains_null,
        } => {
            nodes.push(leaf(Kind::Boolean));
            let element = compile(element, *contains_null, format!("{path}[]"), nodes);
            nodes[id].kind = Kind::Array { element };
            return id;
        }
        DataType::Map {
            key,
            value,
            value_contains_null,
        } => {
            nodes.push(leaf(Kind::Boolean));
            let key = compile(key, false, format!("{path}{{key}}"), nodes);
            let value = compile(
                value,
                *value_contains_null,
                format!("{path}{{value}}"),
                nodes,
            );
            nodes[id].kind = Kind::Map { key, value };
            return id;
        }
        _ => {}
    }
    let kind = match data_type {
        DataType::Boolean => Kind::Boolean,
        DataType::Byte => Kind::Integer(Width::Byte),
        DataType::Short => Kind::Integer(Width::Short),
        DataType::Integer => Kind::Integer(Width::Integer),
        DataType::Long => Kind::Integer(Width::Long),
        DataType::Float => Kind::Float,
        DataType::Double => Kind::Double,
        DataType::String | DataType::Char(_) | DataType::Varchar(_) => Kind::Text,
        DataType::Binary => Kind::Binary,
        DataType::Date => Kind::Date,
        DataType::Timestamp => Kind::Timestamp { ntz: false },
        DataType::TimestampNtz => Kind::Timestamp { ntz: true },
        DataType::Decimal { precision, scale } => Kind::Decimal {
            precision: *precision,
            scale: *scale,
        },
        DataType::Array { .. } | DataType::Map { .. } | DataType::Struct(_) => unreachable!(),
    };
    nodes.push(leaf(kind));
    id
}

// -- encoding ----------------------------------------------------------------------------------

/// A decimal as stored: the unscaled value (precision <= 18) or the decimal's text.
#[derive(Debug, Clone, PartialEq)]
pub enum DecimalValue {
    Unscaled(i64),
    Text(String),
}

/// Where the encoder takes values from. Each method gets the node the value is written at (its
/// type, nullability and path); a method whose value does not fit the node's type returns the
/// source's error. Nulls are asked for first (`is_null`); the others never see one.
pub trait ValueSource {
    type Value;
    /// A struct's value, ready to hand out its fields.
    type Row;
    type Error: From<Error>;

    fn is_null(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> std::result::Result<bool, Self::Error>;
    /// The error for a null at a non-nullable node.
    fn null_error(&mut self, node: NodeId) -> Self::Error;
    fn boolean(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> std::result::Result<bool, Self::Error>;
    fn integer(
        &mut self,
        value: &Self::Value,
        node: NodeId,
        width: Width,
    ) -> std::result::Result<i64, Self::Error>;
    fn float(&mut self, value: &Self::Value, node: NodeId)
        -> std::result::Result<f32, Self::Error>;
    fn double(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> std::result::Result<f64, Self::Error>;
    /// Calls `write` with the UTF-8 bytes of a string or the bytes of a binary.
    fn bytes(
        &mut self,
        value: &Self::Value,
        node: NodeId,
        binary: bool,
        write: &mut dyn FnMut(&[u8]),
    ) -> std::result::Result<(), Self::Error>;
    /// Days since 1970-01-01.
    fn date(&mut self, value: &Self::Value, node: NodeId) -> std::result::Result<i64, Self::Error>;
    /// Microseconds since the epoch.
    fn timestamp(
        &mut self,
        value: &Self::Value,
        node: NodeId,
        ntz: bool,
    ) -> std::result::Result<i64, Self::Error>;
    fn decimal(
        &mut self,
        value: &Self::Value,
        node: NodeId,
        precision: u32,
        scale: i32,
    ) -> std::result::Result<DecimalValue, Self::Error>;
    fn elements(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> std::result::Result<Vec<Self::Value>, Self::Error>;
    /// A map's keys and values, in the same order.
    #[allow(clippy::type_complexity)]
    fn entries(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> std::result::Result<(Vec<Self::Value>, Vec<Self::Value>), Self::Error>;
    fn row(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> std::result::Result<Self::Row, Self::Error>;
    /// Field `index` (named `name`, at node `field`) of a row.
    fn field(
        &mut self,
        row: &Self::Row,
        index: usize,
        name: &str,
        field: NodeId,
    ) -> std::result::Result<Self::Value, Self::Error>;
}

pub fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

pub fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

pub fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

struct Encoder<'a, S: ValueSource> {
    codec: &'a RowCodec,
    source: &'a mut S,
    out: &'a mut Vec<u8>,
}

impl<S: ValueSource> Encoder<'_, S> {
    /// Writes a non-null value (or fails on a null where none may be).
    fn value(&mut self, node: NodeId, value: &S::Value) -> std::result::Result<(), S::Error> {
        let codec = self.codec;
        match &codec.nodes[node].kind {
            Kind::Boolean => {
                let b = self.source.boolean(value, node)?;
                self.out.push(b as u8);
            }
            Kind::Integer(width) => {
                let n = self.source.integer(value, node, *width)?;
                write_varint(self.out, zigzag(n));
            }
            Kind::Float => {
                let f = self.source.float(value, node)?;
                self.out.extend_from_slice(&f.to_le_bytes());
            }
            Kind::Double => {
                let d = self.source.double(value, node)?;
                self.out.extend_from_slice(&d.to_le_bytes());
            }
            Kind::Text | Kind::Binary => {
                let binary = matches!(codec.nodes[node].kind, Kind::Binary);
                let out = &mut *self.out;
                self.source.bytes(value, node, binary, &mut |b| {
                    write_varint(out, b.len() as u64);
                    out.extend_from_slice(b);
                })?;
            }
            Kind::Date => {
                let days = self.source.date(value, node)?;
                write_varint(self.out, zigzag(days));
            }
            Kind::Timestamp { ntz } => {
                let micros = self.source.timestamp(value, node, *ntz)?;
                write_varint(self.out, zigzag(micros));
            }
            Kind::Decimal { precision, scale } => {
                match self.source.decimal(value, node, *precision, *scale)? {
                    DecimalValue::Unscaled(n) if Kind::small_decimal(*precision) => {
                        write_varint(self.out, zigzag(n))
                    }
                    DecimalValue::Text(text) if !Kind::small_decimal(*precision) => {
                        write_varint(self.out, text.len() as u64);
                        self.out.extend_from_slice(text.as_bytes());
                    }
                    other => {
                        return Err(Error::InvalidArgument(format!(
                            "{}: decimal({precision},{scale}) given as {other:?}",
                            codec.nodes[node].path
                        ))
                        .into())
                    }
                }
            }
            Kind::Array { element } => {
                let elements = self.source.elements(value, node)?;
                self.array(*element, &elements)?;
            }
            Kind::Map {
                key,
                value: value_node,
            } => {
                let (keys, values) = self.source.entries(value, node)?;
                self.array(*key, &keys)?;
                self.array(*value_node, &values)?;
            }
            Kind::Struct { fields, names } => {
                let row = self.source.row(value, node)?;
                // A state value's row has a few fields: held inline, no allocation a value.
                let mut values: SmallVec<[S::Value; 8]> = SmallVec::with_capacity(fields.len());
                for (index, (&field, name)) in fields.iter().zip(names).enumerate() {
                    values.push(self.source.field(&row, index, name, field)?);
                }
                self.nullable(|i| fields[i], &values)?;
            }
        }
        Ok(())
    }

    fn array(&mut self, element: NodeId, values: &[S::Value]) -> std::result::Result<(), S::Error> {
        write_varint(self.out, values.len() as u64);
        self.nullable(|_| element, values)
    }

    /// A null bitmap of `values`, then the non-null ones; `node_of(i)` is position `i`'s node.
    fn nullable(
        &mut self,
        node_of: impl Fn(usize) -> NodeId,
        values: &[S::Value],
    ) -> std::result::Result<(), S::Error> {
        let bitmap = self.out.len();
        self.out.resize(bitmap + values.len().div_ceil(8), 0);
        for (i, v) in values.iter().enumerate() {
            let node = node_of(i);
            if self.source.is_null(v, node)? {
                if !self.codec.nodes[node].nullable {
                    return Err(self.source.null_error(node));
                }
                self.out[bitmap + (i >> 3)] |= 1 << (i & 7);
            } else {
                self.value(node, v)?;
            }
        }
        Ok(())
    }
}

// -- decoding ----------------------------------------------------------------------------------

/// What the decoder builds values with.
pub trait ValueSink {
    type Value;
    type Error: From<Error>;

    fn null(&mut self) -> std::result::Result<Self::Value, Self::Error>;
    fn boolean(&mut self, value: bool) -> std::result::Result<Self::Value, Self::Error>;
    fn integer(&mut self, value: i64) -> std::result::Result<Self::Value, Self::Error>;
    fn float(&mut self, value: f32) -> std::result::Result<Self::Value, Self::Error>;
    fn double(&mut self, value: f64) -> std::result::Result<Self::Value, Self::Error>;
    fn text(&mut self, value: &str) -> std::result::Result<Self::Value, Self::Error>;
    fn binary(&mut self, value: &[u8]) -> std::result::Result<Self::Value, Self::Error>;
    fn date(&mut self, days: i64) -> std::result::Result<Self::Value, Self::Error>;
    fn timestamp(
        &mut self,
        micros: i64,
        ntz: bool,
    ) -> std::result::Result<Self::Value, Self::Error>;
    fn decimal(
        &mut self,
        value: DecimalValue,
        scale: i32,
    ) -> std::result::Result<Self::Value, Self::Error>;
    fn array(&mut self, values: Vec<Self::Value>) -> std::result::Result<Self::Value, Self::Error>;
    fn map(
        &mut self,
        keys: Vec<Self::Value>,
        values: Vec<Self::Value>,
    ) -> std::result::Result<Self::Value, Self::Error>;
    fn row(&mut self, values: Vec<Self::Value>) -> std::result::Result<Self::Value, Self::Error>;
}

struct Input<'a> {
    raw: &'a [u8],
    pos: usize,
}

fn corrupted(what: &str, pos: usize) -> Error {
    Error::Corrupted(format!("typed state value: {what} at byte {pos}"))
}

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.raw.len())
            .ok_or_else(|| corrupted("truncated", self.pos))?;
        let chunk = &self.raw[self.pos..end];
        self.pos = end;
        Ok(chunk)
    }

    fn varint(&mut self) -> Result<u64> {
        let start = self.pos;
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .raw
                .get(self.pos)
                .ok_or_else(|| corrupted("truncated varint", start))?;
            self.pos += 1;
            let bits = (byte & 0x7F) as u64;
            if shift == 63 && bits > 1 {
                break;
            }
            n |= bits << shift;
            if byte < 0x80 {
                return Ok(n);
            }
        }
        Err(corrupted("varint longer than 64 bits", start))
    }

    fn count(&mut self) -> Result<usize> {
        let start = self.pos;
        let n = self.varint()?;
        // Every element takes at least a bitmap bit: more than that cannot be in the bytes left.
        let left = (self.raw.len() - self.pos) as u64;
        if n > left.saturating_mul(8) {
            return Err(corrupted(&format!("count {n} past the end"), start));
        }
        Ok(n as usize)
    }
}

/// How a reader schema reads what a writer schema wrote: per writer struct node, the writer
/// field each reader field takes (`None`: a field the writer lacks, read as null); per writer
/// float node, whether the reader wants a double.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    picks: Vec<Option<Vec<Option<usize>>>>,
    widen_float: Vec<bool>,
}

impl ReadPlan {
    /// The plan reading `writer`'s rows as `reader`'s; fails naming every incompatible change.
    pub fn new(writer: &RowCodec, reader: &RowCodec) -> Result<Self> {
        let problems = evolution_problems(writer.schema(), reader.schema(), "");
        if !problems.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "values written as {} cannot be read as {}: {}",
                struct_simple_string(writer.schema()),
                struct_simple_string(reader.schema()),
                problems.join("; ")
            )));
        }
        let mut plan = ReadPlan {
            picks: vec![None; writer.nodes.len()],
            widen_float: vec![false; writer.nodes.len()],
        };
        plan.walk(writer, 0, reader, 0);
        Ok(plan)
    }

    fn walk(&mut self, writer: &RowCodec, w: NodeId, reader: &RowCodec, r: NodeId) {
        match (&writer.nodes[w].kind, &reader.nodes[r].kind) {
            (
                Kind::Struct {
                    fields: wf,
                    names: wn,
                },
                Kind::Struct {
                    fields: rf,
                    names: rn,
                },
            ) => {
                let picks: Vec<Option<usize>> = rn
                    .iter()
                    .map(|name| wn.iter().position(|n| n == name))
                    .collect();
                for (reader_index, pick) in picks.iter().enumerate() {
                    if let Some(writer_index) = pick {
                        self.walk(writer, wf[*writer_index], reader, rf[reader_index]);
                    }
                }
                let identity =
                    picks.len() == wn.len() && picks.iter().enumerate().all(|(i, p)| *p == Some(i));
                if !identity {
                    self.picks[w] = Some(picks);
                }
            }
            (Kind::Array { element: we }, Kind::Array { element: re }) => {
                self.walk(writer, *we, reader, *re)
            }
            (Kind::Map { key: wk, value: wv }, Kind::Map { key: rk, value: rv }) => {
                self.walk(writer, *wk, reader, *rk);
                self.walk(writer, *wv, reader, *rv);
            }
            (Kind::Float, Kind::Double) => self.widen_float[w] = true,
            _ => {}
        }
    }
}

struct Decoder<'a, 'r, S: ValueSink> {
    codec: &'a RowCodec,
    plan: Option<&'a ReadPlan>,
    input: Input<'r>,
    sink: &'a mut S,
}

impl<S: ValueSink> Decoder<'_, '_, S> {
    fn value(&mut self, node: NodeId) -> std::result::Result<S::Value, S::Error> {
        let codec = self.codec;
        match &codec.nodes[node].kind {
            Kind::Boolean => {
                let b = self.input.take(1)?[0] != 0;
                self.sink.boolean(b)
            }
            Kind::Integer(_) => {
                let n = unzigzag(self.input.varint()?);
                self.sink.integer(n)
            }
            Kind::Float => {
                let bytes = self.input.take(4)?;
                let f = f32::from_le_bytes(bytes.try_into().expect("4 bytes"));
                if self.plan.is_some_and(|p| p.widen_float[node]) {
                    self.sink.double(f as f64)
                } else {
                    self.sink.float(f)
                }
            }
            Kind::Double => {
                let bytes = self.input.take(8)?;
                self.sink
                    .double(f64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            }
            Kind::Text => {
                let start = self.input.pos;
                let n = self.input.varint()?;
                let bytes = self.input.take(usize::try_from(n).unwrap_or(usize::MAX))?;
                let text =
                    std::str::from_utf8(bytes).map_err(|_| corrupted("string not UTF-8", start))?;
                self.sink.text(text)
            }
            Kind::Binary => {
                let n = self.input.varint()?;
                let bytes = self.input.take(usize::try_from(n).unwrap_or(usize::MAX))?;
                self.sink.binary(bytes)
            }
            Kind::Date => {
                let days = unzigzag(self.input.varint()?);
                self.sink.date(days)
            }
            Kind::Timestamp { ntz } => {
                let micros = unzigzag(self.input.varint()?);
                self.sink.timestamp(micros, *ntz)
            }
            Kind::Decimal { precision, scale } => {
                if Kind::small_decimal(*precision) {
                    let n = unzigzag(self.input.varint()?);
                    self.sink.decimal(DecimalValue::Unscaled(n), *scale)
                } else {
                    let start = self.input.pos;
                    let n = self.input.varint()?;
                    let bytes = self.input.take(usize::try_from(n).unwrap_or(usize::MAX))?;
                    let text = std::str::from_utf8(bytes)
                        .map_err(|_| corrupted("decimal not UTF-8", start))?;
                    self.sink
                        .decimal(DecimalValue::Text(text.to_string()), *scale)
                }
            }
            Kind::Array { element } => {
                let values = self.array(*element)?;
                self.sink.array(values)
            }
            Kind::Map { key, value } => {
                let start = self.input.pos;
                let keys = self.array(*key)?;
                let values = self.array(*value)?;
                if keys.len() != values.len() {
                    return Err(corrupted("map with more keys than values, or fewer", start).into());
                }
                self.sink.map(keys, values)
            }
            Kind::Struct { fields, .. } => {
                let mut values = self.nullable(fields.len(), |i| fields[i])?;
                match self.plan.and_then(|p| p.picks[node].as_ref()) {
                    None => self.sink.row(values),
                    Some(picks) => {
                        let mut taken: Vec<Option<S::Value>> = values.drain(..).map(Some).collect();
                        let mut row = Vec::with_capacity(picks.len());
                        for pick in picks {
                            row.push(match pick.and_then(|i| taken[i].take()) {
                                Some(v) => v,
                                None => self.sink.null()?,
                            });
                        }
                        self.sink.row(row)
                    }
                }
            }
        }
    }

    fn array(&mut self, element: NodeId) -> std::result::Result<Vec<S::Value>, S::Error> {
        let n = self.input.count()?;
        self.nullable(n, |_| element)
    }

    fn nullable(
        &mut self,
        count: usize,
        node_of: impl Fn(usize) -> NodeId,
    ) -> std::result::Result<Vec<S::Value>, S::Error> {
        let bitmap = self.input.take(count.div_ceil(8))?;
        let mut values = Vec::with_capacity(count);
        for i in 0..count {
            if bitmap[i >> 3] & (1 << (i & 7)) != 0 {
                values.push(self.sink.null()?);
            } else {
                values.push(self.value(node_of(i))?);
            }
        }
        Ok(values)
    }
}

// -- schema evolution --------------------------------------------------------------------------

const INTEGERS: [&str; 4] = ["byte", "short", "integer", "long"];

fn widens(old: &str, new: &str) -> bool {
    if old == "float" && new == "double" {
        return true;
    }
    match (
        INTEGERS.iter().position(|t| *t == old),
        INTEGERS.iter().position(|t| *t == new),
    ) {
        (Some(a), Some(b)) => a <= b,
        _ => false,
    }
}

/// Why values `writer` wrote cannot be read as `reader` (empty: they can): fields are matched by
/// name; a field the writer lacks must be nullable; types must be equal or widen (byte -> short
/// -> int -> long, float -> double), structs recursively, arrays and maps by their element types.
pub fn evolution_problems(
    writer: &[StructField],
    reader: &[StructField],
    path: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    for field in reader {
        let at = format!("{path}{}", field.name);
        match writer.iter().find(|f| f.name == field.name) {
            None => {
                if !field.nullable {
                    problems.push(format!(
                        "new field {at} must be nullable (old values have none)"
                    ));
                }
            }
            Some(before) => {
                problems.extend(type_problems(&before.data_type, &field.data_type, &at));
                if before.nullable && !field.nullable {
                    problems.push(format!("field {at} was nullable and is not any more"));
                }
            }
        }
    }
    problems
}

fn type_problems(old: &DataType, new: &DataType, at: &str) -> Vec<String> {
    match (old, new) {
        (DataType::Struct(a), DataType::Struct(b)) => {
            return evolution_problems(a, b, &format!("{at}."))
        }
        (DataType::Array { element: a, .. }, DataType::Array { element: b, .. }) => {
            return type_problems(a, b, &format!("{at}[]"))
        }
        (
            DataType::Map {
                key: ak, value: av, ..
            },
            DataType::Map {
                key: bk, value: bv, ..
            },
        ) => {
            let mut problems = type_problems(ak, bk, &format!("{at}{{key}}"));
            problems.extend(type_problems(av, bv, &format!("{at}{{value}}")));
            return problems;
        }
        _ => {}
    }
    let (a, b) = (old.type_name(), new.type_name());
    let same = a == b
        && match (old, new) {
            (
                DataType::Decimal {
                    precision: p1,
                    scale: s1,
                },
                DataType::Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => (p1, s1) == (p2, s2),
            _ => true,
        };
    if same || widens(a, b) {
        return Vec::new();
    }
    vec![format!(
        "field {at} changed type {} -> {}",
        old.simple_string(),
        new.simple_string()
    )]
}

// -- the value model ---------------------------------------------------------------------------

/// A decoded value (what the pure-Rust tests and any Rust caller encode from and decode to).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Integer(i64),
    Float(f32),
    Double(f64),
    Text(String),
    Binary(Vec<u8>),
    /// Days since 1970-01-01.
    Date(i64),
    /// Microseconds since the epoch; `ntz` as the schema says.
    Timestamp(i64),
    Decimal(DecimalValue),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Row(Vec<Value>),
}

/// Encodes and decodes [`Value`]s, checking each against the schema (errors name the field's path).
pub struct ValueModel<'a> {
    pub codec: &'a RowCodec,
}

impl ValueModel<'_> {
    fn mismatch(&self, value: &Value, node: NodeId) -> Error {
        Error::InvalidArgument(format!(
            "field {}: {value:?} does not fit {:?}",
            self.codec.node(node).path,
            self.codec.node(node).kind
        ))
    }
}

impl ValueSource for ValueModel<'_> {
    type Value = Value;
    type Row = Vec<Value>;
    type Error = Error;

    fn is_null(&mut self, value: &Value, _: NodeId) -> Result<bool> {
        Ok(matches!(value, Value::Null))
    }
    fn null_error(&mut self, node: NodeId) -> Error {
        Error::InvalidArgument(format!(
            "field {}: not nullable, got null",
            self.codec.node(node).path
        ))
    }
    fn boolean(&mut self, value: &Value, node: NodeId) -> Result<bool> {
        match value {
            Value::Boolean(b) => Ok(*b),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn integer(&mut self, value: &Value, node: NodeId, width: Width) -> Result<i64> {
        let (low, high) = width.bounds();
        match value {
            Value::Integer(n) if (low..=high).contains(n) => Ok(*n),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn float(&mut self, value: &Value, node: NodeId) -> Result<f32> {
        match value {
            Value::Float(f) => Ok(*f),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn double(&mut self, value: &Value, node: NodeId) -> Result<f64> {
        match value {
            Value::Double(d) => Ok(*d),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn bytes(
        &mut self,
        value: &Value,
        node: NodeId,
        binary: bool,
        write: &mut dyn FnMut(&[u8]),
    ) -> Result<()> {
        match (value, binary) {
            (Value::Text(s), false) => write(s.as_bytes()),
            (Value::Binary(b), true) => write(b),
            (other, _) => return Err(self.mismatch(other, node)),
        }
        Ok(())
    }
    fn date(&mut self, value: &Value, node: NodeId) -> Result<i64> {
        match value {
            Value::Date(d) => Ok(*d),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn timestamp(&mut self, value: &Value, node: NodeId, _: bool) -> Result<i64> {
        match value {
            Value::Timestamp(t) => Ok(*t),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn decimal(&mut self, value: &Value, node: NodeId, _: u32, _: i32) -> Result<DecimalValue> {
        match value {
            Value::Decimal(d) => Ok(d.clone()),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn elements(&mut self, value: &Value, node: NodeId) -> Result<Vec<Value>> {
        match value {
            Value::Array(values) => Ok(values.clone()),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn entries(&mut self, value: &Value, node: NodeId) -> Result<(Vec<Value>, Vec<Value>)> {
        match value {
            Value::Map(entries) => Ok(entries.iter().cloned().unzip()),
            other => Err(self.mismatch(other, node)),
        }
    }
    fn row(&mut self, value: &Value, node: NodeId) -> Result<Vec<Value>> {
        match (value, &self.codec.node(node).kind) {
            (Value::Row(values), Kind::Struct { fields, .. }) if values.len() == fields.len() => {
                Ok(values.clone())
            }
            (other, _) => Err(self.mismatch(other, node)),
        }
    }
    fn field(&mut self, row: &Vec<Value>, index: usize, _: &str, _: NodeId) -> Result<Value> {
        Ok(row[index].clone())
    }
}

impl ValueSink for ValueModel<'_> {
    type Value = Value;
    type Error = Error;

    fn null(&mut self) -> Result<Value> {
        Ok(Value::Null)
    }
    fn boolean(&mut self, value: bool) -> Result<Value> {
        Ok(Value::Boolean(value))
    }
    fn integer(&mut self, value: i64) -> Result<Value> {
        Ok(Value::Integer(value))
    }
    fn float(&mut self, value: f32) -> Result<Value> {
        Ok(Value::Float(value))
    }
    fn double(&mut self, value: f64) -> Result<Value> {
        Ok(Value::Double(value))
    }
    fn text(&mut self, value: &str) -> Result<Value> {
        Ok(Value::Text(value.to_string()))
    }
    fn binary(&mut self, value: &[u8]) -> Result<Value> {
        Ok(Value::Binary(value.to_vec()))
    }
    fn date(&mut self, days: i64) -> Result<Value> {
        Ok(Value::Date(days))
    }
    fn timestamp(&mut self, micros: i64, _: bool) -> Result<Value> {
        Ok(Value::Timestamp(micros))
    }
    fn decimal(&mut self, value: DecimalValue, _: i32) -> Result<Value> {
        Ok(Value::Decimal(value))
    }
    fn array(&mut self, values: Vec<Value>) -> Result<Value> {
        Ok(Value::Array(values))
    }
    fn map(&mut self, keys: Vec<Value>, values: Vec<Value>) -> Result<Value> {
        Ok(Value::Map(keys.into_iter().zip(values).collect()))
    }
    fn row(&mut self, values: Vec<Value>) -> Result<Value> {
        Ok(Value::Row(values))
    }
}

impl RowCodec {
    /// `row` (a [`Value::Row`]) encoded, checked against the schema.
    pub fn encode_value(&self, row: &Value) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode(&mut ValueModel { codec: self }, row, &mut out)?;
        Ok(out)
    }

    /// The row at the start of `raw` (which it must fill exactly), as `plan`'s reader reads it.
    pub fn decode_value(&self, plan: Option<&ReadPlan>, raw: &[u8]) -> Result<Value> {
        let mut pos = 0;
        let value = self.decode(plan, raw, &mut pos, &mut ValueModel { codec: self })?;
        if pos != raw.len() {
            return Err(corrupted("trailing bytes", pos));
        }
        Ok(value)
    }
}

#[cfg(test)]
#[path = "row_codec_tests.rs"]
mod tests;

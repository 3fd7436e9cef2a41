//! Binds `kstate_core::spark::row_codec` for `kstate.spark.format.row_codec`: Python objects in and out of the
//! core's row layout, checked on write as Spark's `_make_type_verifier` checks them (same
//! exception kind, Spark's message naming the field). The layout itself is the core's.

use kstate_core::spark::row_codec::{
    self as core, DataType, DecimalValue, Kind, NodeId, StructField, ValueSink, ValueSource, Width,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};
use pyo3::{intern, IntoPyObjectExt};
use smallvec::SmallVec;
use std::borrow::Cow;

use crate::errors::{raise, to_py, ErrorClass};
use crate::text::utf8;

/// The Python functions the conversions use (temporal and decimal arithmetic exactly as Python
/// does it), registered by `kstate.spark.format.row_codec` when it loads (`register_row_conversions`),
/// and the standard types checked against.
struct Helpers {
    plain: Py<PyAny>,
    micros: Py<PyAny>,
    timestamp_of: Py<PyAny>,
    unscaled: Py<PyAny>,
    decimal_of: Py<PyAny>,
    decimal_text: Py<PyAny>,
    date_type: Py<PyAny>,
    datetime_type: Py<PyAny>,
    decimal_type: Py<PyAny>,
    array_type: Py<PyAny>,
}

static HELPERS: PyOnceLock<Helpers> = PyOnceLock::new();

/// Called by `kstate.spark.format.row_codec` with its conversions (the first registration stays).
#[pyfunction]
pub fn register_row_conversions(
    py: Python<'_>,
    plain: Py<PyAny>,
    micros: Py<PyAny>,
    timestamp_of: Py<PyAny>,
    unscaled: Py<PyAny>,
    decimal_of: Py<PyAny>,
    decimal_text: Py<PyAny>,
) -> PyResult<()> {
    let datetime = py.import("datetime")?;
    let _ = HELPERS.set(
        py,
        Helpers {
            plain,
            micros,
            timestamp_of,
            unscaled,
            decimal_of,
            decimal_text,
            date_type: datetime.getattr("date")?.unbind(),
            datetime_type: datetime.getattr("datetime")?.unbind(),
            decimal_type: py.import("decimal")?.getattr("Decimal")?.unbind(),
            array_type: py.import("array")?.getattr("array")?.unbind(),
        },
    );
    Ok(())
}

fn helpers(py: Python<'_>) -> PyResult<&Helpers> {
    HELPERS.get(py).ok_or_else(|| {
        raise(
            ErrorClass::KStateError,
            "typed state needs kstate.spark.format.row_codec (which registers its conversions): import it"
                .into(),
        )
    })
}

/// An error while encoding or decoding: a value that does not fit (raised as Spark's verifier
/// would: `TypeError` or `ValueError` kind), or anything else.
pub(crate) enum CodecError {
    Mismatch { type_error: bool, message: String },
    Py(PyErr),
    Core(kstate_core::Error),
}

impl From<kstate_core::Error> for CodecError {
    fn from(e: kstate_core::Error) -> Self {
        CodecError::Core(e)
    }
}

impl From<PyErr> for CodecError {
    fn from(e: PyErr) -> Self {
        CodecError::Py(e)
    }
}

type Converted<T> = std::result::Result<T, CodecError>;

const EPOCH_ORDINAL: i64 = 719_163;
const MAX_ORDINAL: i64 = 3_652_059;

/// A compiled `StructType` with what Spark's verifier says about each position: the type's
/// `str()` and the name it gives the position (`field x in <variable>`).
#[pyclass(module = "kstate._core", frozen)]
pub struct RowCodec {
    pub(crate) codec: core::RowCodec,
    types: Vec<String>,
    names: Vec<Option<String>>,
    simple: String,
    /// `repr()` of the state variable's name, for messages.
    variable: Option<String>,
}

fn parse(spec: &Bound<'_, PyAny>, types: &mut Vec<String>) -> PyResult<DataType> {
    let spec = spec.cast::<PyTuple>()?;
    let name: String = spec.get_item(0)?.extract()?;
    types.push(spec.get_item(1)?.extract()?);
    Ok(match name.as_str() {
        "struct" => DataType::Struct(parse_fields(&spec.get_item(2)?, types)?),
        "array" => DataType::Array {
            element: Box::new(parse(&spec.get_item(2)?, types)?),
            contains_null: spec.get_item(3)?.extract()?,
        },
        "map" => {
            let key = parse(&spec.get_item(2)?, types)?;
            let value = parse(&spec.get_item(3)?, types)?;
            DataType::Map {
                key: Box::new(key),
                value: Box::new(value),
                value_contains_null: spec.get_item(4)?.extract()?,
            }
        }
        "decimal" => DataType::from_type_name(
            &name,
            0,
            spec.get_item(2)?.extract()?,
            spec.get_item(3)?.extract()?,
        )
        .map_err(to_py)?,
        "char" | "varchar" => {
            DataType::from_type_name(&name, spec.get_item(2)?.extract()?, 0, 0).map_err(to_py)?
        }
        _ => DataType::from_type_name(&name, 0, 0, 0).map_err(to_py)?,
    })
}

fn parse_fields(fields: &Bound<'_, PyAny>, types: &mut Vec<String>) -> PyResult<Vec<StructField>> {
    fields
        .try_iter()?
        .map(|f| {
            let (name, nullable, spec): (String, bool, Bound<'_, PyAny>) = f?.extract()?;
            Ok(StructField::new(&name, parse(&spec, types)?, nullable))
        })
        .collect()
}

impl RowCodec {
    pub(crate) fn compile(spec: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<Self> {
        let spec = spec.cast::<PyTuple>()?;
        let mut types = vec![spec.get_item(1)?.extract()?];
        let fields = parse_fields(&spec.get_item(2)?, &mut types)?;
        let codec = core::RowCodec::new(fields);
        if types.len() != codec.nodes().len() {
            return Err(raise(
                ErrorClass::KStateError,
                "schema spec and compiled schema differ".into(),
            ));
        }
        let mut names = vec![None; codec.nodes().len()];
        names[0] = name;
        // Spark's verifier names: `field f in <parent>` (`field f` under an unnamed root), and
        // `element in array <parent>`, `key of map <parent>`, `value of map <parent>`.
        for id in 0..codec.nodes().len() {
            let parent = names[id].clone();
            let under = |prefix: &str| format!("{prefix} {}", parent.as_deref().unwrap_or("None"));
            match &codec.node(id).kind {
                Kind::Struct {
                    fields,
                    names: field_names,
                } => {
                    for (&child, field) in fields.iter().zip(field_names) {
                        names[child] = Some(match &parent {
                            Some(p) => format!("field {field} in {p}"),
                            None => format!("field {field}"),
                        });
                    }
                }
                Kind::Array { element } => names[*element] = Some(under("element in array")),
                Kind::Map { key, value } => {
                    names[*key] = Some(under("key of map"));
                    names[*value] = Some(under("value of map"));
                }
                _ => {}
            }
        }
        let simple = core::struct_simple_string(codec.schema());
        let variable = match &names[0] {
            Some(name) => Some(PyString::new(spec.py(), name).repr()?.to_string()),
            None => None,
        };
        Ok(RowCodec {
            codec,
            types,
            names,
            simple,
            variable,
        })
    }

    /// Whether every value of this schema decodes to Python objects that cannot change and mean
    /// the same whenever decoded (tuples of numbers, strings, dates, time-zone-free timestamps),
    /// so one decoded value may be handed out again for the same bytes. Not: arrays, maps and
    /// binaries (a list, dict or bytearray its reader may change), timestamps (local time at
    /// decoding), decimals (built in the thread's decimal context).
    pub(crate) fn decodes_to_constants(&self) -> bool {
        self.codec.nodes().iter().all(|node| match node.kind {
            Kind::Boolean
            | Kind::Integer(_)
            | Kind::Float
            | Kind::Double
            | Kind::Text
            | Kind::Date
            | Kind::Timestamp { ntz: true }
            | Kind::Struct { .. } => true,
            Kind::Binary
            | Kind::Timestamp { ntz: false }
            | Kind::Decimal { .. }
            | Kind::Array { .. }
            | Kind::Map { .. } => false,
        })
    }

    /// Appends `value` (a tuple, list, `Row`, dict or object) checked against the schema.
    pub(crate) fn encode_into(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        if self.codec.is_flat() && self.encode_flat_tuple(value, out) {
            return Ok(());
        }
        let mut source = PySource {
            py,
            codec: self,
            helpers: helpers(py)?,
        };
        let row = self.reordered_row(value)?;
        let row = row.as_ref().unwrap_or(value);
        self.codec
            .encode(&mut source, row, out)
            .map_err(|e| self.encode_error(value, e))
    }

    /// Writes `value` through the core's flat-row path when it is a plain tuple of the fields'
    /// own Python types (`bool`, `int`, `float`, `str`, `None`): no conversion to make, nothing
    /// to check but kinds, nulls and widths, which `encode_flat` does. `false`: anything else
    /// (a `Row`, a list, another type, a value that does not fit), left to the schema walk.
    fn encode_flat_tuple(&self, value: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> bool {
        let Ok(tuple) = value.cast_exact::<PyTuple>() else {
            return false;
        };
        // Borrowed items (the tuple holds them): no reference counting per field.
        let items: SmallVec<[Borrowed<'_, '_, PyAny>; 8]> = tuple.iter_borrowed().collect();
        let mut values: SmallVec<[core::FlatValue<'_>; 8]> = SmallVec::new();
        for item in &items {
            values.push(if item.is_exact_instance_of::<PyInt>() {
                match item.extract::<i64>() {
                    Ok(n) => core::FlatValue::Integer(n),
                    Err(_) => return false, // past 64 bits: the walk says why
                }
            } else if item.is_none() {
                core::FlatValue::Null
            } else if let Ok(text) = item.cast_exact::<PyString>() {
                match utf8(text) {
                    Ok(Cow::Borrowed(bytes)) => core::FlatValue::Text(bytes),
                    _ => return false, // a lone surrogate: the walk says why
                }
            } else if let Ok(f) = item.cast_exact::<PyFloat>() {
                core::FlatValue::Double(f.value())
            } else if let Ok(b) = item.cast_exact::<PyBool>() {
                core::FlatValue::Boolean(b.is_true())
            } else {
                return false;
            });
        }
        self.codec.encode_flat(&values, out)
    }

    /// A `Row` whose fields are the schema's in another order, as a dict (read by name).
    fn reordered_row<'py>(&self, value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if value.is_exact_instance_of::<PyTuple>() || !value.is_instance_of::<PyTuple>() {
            return Ok(None);
        }
        let Ok(fields) = value.getattr(intern!(value.py(), "__fields__")) else {
            return Ok(None);
        };
        let fields: Vec<String> = match fields.extract() {
            Ok(f) => f,
            Err(_) => return Ok(None),
        };
        let Kind::Struct { names, .. } = &self.codec.node(0).kind else {
            unreachable!("the root is a struct")
        };
        let mut sorted_fields = fields.clone();
        let mut sorted_names = names.clone();
        sorted_fields.sort();
        sorted_names.sort();
        if &fields == names || sorted_fields != sorted_names {
            return Ok(None);
        }
        Ok(Some(value.call_method0(intern!(value.py(), "asDict"))?))
    }

    fn encode_error(&self, value: &Bound<'_, PyAny>, error: CodecError) -> PyErr {
        match error {
            CodecError::Py(e) => e,
            CodecError::Core(e) => to_py(e),
            CodecError::Mismatch {
                type_error,
                message,
            } => {
                let shown = value
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| "<value>".into());
                let text = match &self.variable {
                    Some(variable) => format!(
                        "state variable {variable}: {shown} does not fit {}: {message}",
                        self.simple
                    ),
                    None => format!("{shown} does not fit {}: {message}", self.simple),
                };
                raise(
                    if type_error {
                        ErrorClass::StateTypeError
                    } else {
                        ErrorClass::InvalidArgumentError
                    },
                    text,
                )
            }
        }
    }
}

/// The row `writer` wrote at `raw[offset..]`, read through `plan` (or as written), and where it ends.
pub(crate) fn decode_row<'py>(
    py: Python<'py>,
    writer: &core::RowCodec,
    plan: Option<&core::ReadPlan>,
    raw: &[u8],
    offset: usize,
) -> PyResult<(Bound<'py, PyAny>, usize)> {
    let mut pos = offset.min(raw.len());
    let mut sink = PySink {
        py,
        helpers: helpers(py)?,
    };
    let value = writer
        .decode(plan, raw, &mut pos, &mut sink)
        .map_err(|e| match e {
            CodecError::Py(e) => e,
            CodecError::Core(e) => to_py(e),
            CodecError::Mismatch { message, .. } => raise(ErrorClass::CorruptedDataError, message),
        })?;
    Ok((value, pos))
}

#[pymethods]
impl RowCodec {
    /// `spec`: `kstate.spark.format.row_codec._spec(schema)`; `name`: the name Spark's verifier gives
    /// the row (the state variable's), or `None`.
    #[new]
    #[pyo3(signature = (spec, name=None))]
    fn new(spec: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<Self> {
        Self::compile(spec, name)
    }

    /// `value` encoded (checked against the schema first).
    fn encode<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::new();
        self.encode_into(py, value, &mut out)?;
        Ok(PyBytes::new(py, &out))
    }

    /// `(row as a tuple, end position)` of the row this schema wrote at `raw[offset:]`.
    #[pyo3(signature = (raw, offset=0))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        offset: usize,
    ) -> PyResult<(Bound<'py, PyAny>, usize)> {
        decode_row(py, &self.codec, None, raw, offset)
    }

    /// How rows this schema wrote read as `reader`'s (fails naming every incompatible change).
    fn reader(&self, reader: &RowCodec) -> PyResult<RowReader> {
        let plan = core::ReadPlan::new(&self.codec, &reader.codec).map_err(to_py)?;
        Ok(RowReader {
            writer: self.codec.clone(),
            plan,
        })
    }

    /// Why rows this schema wrote cannot be read as `reader`'s (empty: they can); field names
    /// in the messages start with `path`.
    #[pyo3(signature = (reader, path=""))]
    fn evolution_problems(&self, reader: &RowCodec, path: &str) -> Vec<String> {
        core::evolution_problems(self.codec.schema(), reader.codec.schema(), path)
    }
}

/// Reads rows one schema wrote as another, compatible one.
#[pyclass(module = "kstate._core", frozen)]
pub struct RowReader {
    pub(crate) writer: core::RowCodec,
    pub(crate) plan: core::ReadPlan,
}

#[pymethods]
impl RowReader {
    /// `(row as a tuple of the reader's fields, end position)`.
    #[pyo3(signature = (raw, offset=0))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        offset: usize,
    ) -> PyResult<(Bound<'py, PyAny>, usize)> {
        decode_row(py, &self.writer, Some(&self.plan), raw, offset)
    }
}

// -- Python objects as the encoder's source ------------------------------------------------------

struct PySource<'a, 'py> {
    py: Python<'py>,
    codec: &'a RowCodec,
    helpers: &'a Helpers,
}

pub(crate) enum PyRow<'py> {
    Sequence(Bound<'py, PyAny>),
    Mapping(Bound<'py, PyAny>),
}

impl<'py> PySource<'_, 'py> {
    fn name(&self, node: NodeId) -> Option<&str> {
        self.codec.names.get(node).and_then(|n| n.as_deref())
    }

    /// Spark's `FIELD_DATA_TYPE_UNACCEPTABLE` for `value` at `node`.
    fn unacceptable(&self, value: &Bound<'py, PyAny>, node: NodeId) -> CodecError {
        let shown = value.repr().map(|r| r.to_string()).unwrap_or_default();
        let kind = value
            .get_type()
            .str()
            .map(|r| r.to_string())
            .unwrap_or_default();
        let data_type = &self.codec.types[node];
        let message = match self.name(node) {
            Some(name) => format!(
                "[FIELD_DATA_TYPE_UNACCEPTABLE_WITH_NAME] {name}: {data_type} can not accept object {shown} in type {kind}."
            ),
            None => format!("[FIELD_DATA_TYPE_UNACCEPTABLE] {data_type} can not accept object {shown} in type {kind}."),
        };
        CodecError::Mismatch {
            type_error: true,
            message,
        }
    }

    fn mismatch(&self, node: NodeId, message: String) -> CodecError {
        CodecError::Mismatch {
            type_error: false,
            message: match self.name(node) {
                Some(name) => format!("{name}: {message}"),
                None => message,
            },
        }
    }

    /// `value` if `accept`s it, else the value as Spark stores it (numpy scalars as Python
    /// numbers, pandas timestamps as datetimes: `row_codec._plain`) if that is accepted.
    fn accepted(
        &self,
        value: &Bound<'py, PyAny>,
        node: NodeId,
        accept: impl Fn(&Bound<'py, PyAny>) -> bool,
    ) -> Converted<Bound<'py, PyAny>> {
        if accept(value) {
            return Ok(value.clone());
        }
        let plain = self.helpers.plain.bind(self.py).call1((value,))?;
        if accept(&plain) {
            Ok(plain)
        } else {
            Err(self.unacceptable(&plain, node))
        }
    }

    fn is(&self, value: &Bound<'py, PyAny>, class: &Py<PyAny>) -> bool {
        value.get_type().is(class.bind(self.py))
    }
}

impl<'py> ValueSource for PySource<'_, 'py> {
    type Value = Bound<'py, PyAny>;
    type Row = PyRow<'py>;
    type Error = CodecError;

    fn is_null(&mut self, value: &Self::Value, node: NodeId) -> Converted<bool> {
        if value.is_none() {
            return Ok(true);
        }
        // Spark reads a NaN decimal as null.
        if matches!(self.codec.codec.node(node).kind, Kind::Decimal { .. })
            && self.is(value, &self.helpers.decimal_type)
        {
            return Ok(value
                .call_method0(intern!(self.py, "is_nan"))?
                .is_truthy()?);
        }
        Ok(false)
    }

    fn null_error(&mut self, node: NodeId) -> CodecError {
        CodecError::Mismatch {
            type_error: false,
            message: match self.name(node) {
                Some(name) => format!("[FIELD_NOT_NULLABLE_WITH_NAME] {name}: This field is not nullable, but got None."),
                None => "[FIELD_NOT_NULLABLE] Field is not nullable, but got None.".into(),
            },
        }
    }

    fn boolean(&mut self, value: &Self::Value, node: NodeId) -> Converted<bool> {
        let value = self.accepted(value, node, |v| v.is_exact_instance_of::<PyBool>())?;
        Ok(value.is_truthy()?)
    }

    fn integer(&mut self, value: &Self::Value, node: NodeId, width: Width) -> Converted<i64> {
        let value = self.accepted(value, node, |v| v.is_exact_instance_of::<PyInt>())?;
        let (low, high) = width.bounds();
        match value.extract::<i64>() {
            Ok(n) if (low..=high).contains(&n) => Ok(n),
            _ => Err(self.mismatch(
                node,
                format!("[VALUE_OUT_OF_BOUNDS] Value for `obj` must be between {low} and {high} (inclusive), got {}", value.str()?),
            )),
        }
    }

    fn float(&mut self, value: &Self::Value, node: NodeId) -> Converted<f32> {
        let x = self.double(value, node)?;
        let narrowed = x as f32;
        if narrowed.is_infinite() && x.is_finite() {
            return Err(self.mismatch(node, format!("{x} is too large for a float")));
        }
        Ok(narrowed)
    }

    fn double(&mut self, value: &Self::Value, node: NodeId) -> Converted<f64> {
        let value = self.accepted(value, node, |v| v.is_exact_instance_of::<PyFloat>())?;
        Ok(value.extract::<f64>()?)
    }

    fn bytes(
        &mut self,
        value: &Self::Value,
        node: NodeId,
        binary: bool,
        write: &mut dyn FnMut(&[u8]),
    ) -> Converted<()> {
        if binary {
            let value = self.accepted(value, node, |v| {
                v.is_exact_instance_of::<PyBytes>() || v.is_exact_instance_of::<PyByteArray>()
            })?;
            match value.cast::<PyBytes>() {
                Ok(b) => write(b.as_bytes()),
                Err(_) => write(&value.cast::<PyByteArray>().map_err(PyErr::from)?.to_vec()),
            }
            return Ok(());
        }
        // Spark stores any object's str in a string field.
        let text = if value.is_exact_instance_of::<PyString>() {
            value.cast::<PyString>().map_err(PyErr::from)?.clone()
        } else {
            self.helpers.plain.bind(self.py).call1((value,))?.str()?
        };
        // A lone surrogate has no UTF-8 form: refused as a value that does not fit, not as
        // Python's UnicodeEncodeError.
        let encoded = utf8(text.as_borrowed()).map_err(|_| CodecError::Mismatch {
            type_error: false,
            message: "not valid Unicode text (a lone surrogate has no UTF-8 form)".into(),
        })?;
        write(&encoded);
        Ok(())
    }

    fn date(&mut self, value: &Self::Value, node: NodeId) -> Converted<i64> {
        let h = self.helpers;
        let value = self.accepted(value, node, |v| {
            self.is(v, &h.date_type) || self.is(v, &h.datetime_type)
        })?;
        let ordinal: i64 = value
            .call_method0(intern!(self.py, "toordinal"))?
            .extract()?;
        Ok(ordinal - EPOCH_ORDINAL)
    }

    fn timestamp(&mut self, value: &Self::Value, node: NodeId, ntz: bool) -> Converted<i64> {
        let value = self.accepted(value, node, |v| self.is(v, &self.helpers.datetime_type))?;
        Ok(self
            .helpers
            .micros
            .bind(self.py)
            .call1((value, ntz))?
            .extract()?)
    }

    fn decimal(
        &mut self,
        value: &Self::Value,
        node: NodeId,
        precision: u32,
        scale: i32,
    ) -> Converted<DecimalValue> {
        let value = self.accepted(value, node, |v| self.is(v, &self.helpers.decimal_type))?;
        if Kind::small_decimal(precision) {
            let unscaled = self.helpers.unscaled.bind(self.py).call1((value, scale))?;
            return match unscaled.extract::<i64>() {
                Ok(n) => Ok(DecimalValue::Unscaled(n)),
                Err(_) => Err(self.mismatch(
                    node,
                    format!("{} does not fit in a 64-bit integer", unscaled.str()?),
                )),
            };
        }
        Ok(DecimalValue::Text(value.str()?.to_cow()?.into_owned()))
    }

    fn elements(&mut self, value: &Self::Value, node: NodeId) -> Converted<Vec<Self::Value>> {
        let h = self.helpers;
        let value = self.accepted(value, node, |v| {
            v.is_instance_of::<PyList>()
                || v.is_instance_of::<PyTuple>()
                || self.is(v, &h.array_type)
        })?;
        Ok(value.try_iter()?.collect::<PyResult<Vec<_>>>()?)
    }

    fn entries(
        &mut self,
        value: &Self::Value,
        node: NodeId,
    ) -> Converted<(Vec<Self::Value>, Vec<Self::Value>)> {
        let value = self.accepted(value, node, |v| v.is_instance_of::<PyDict>())?;
        let dict = value.cast::<PyDict>().map_err(PyErr::from)?;
        let (mut keys, mut values) = (
            Vec::with_capacity(dict.len()),
            Vec::with_capacity(dict.len()),
        );
        for (k, v) in dict.iter() {
            keys.push(k);
            values.push(v);
        }
        Ok((keys, values))
    }

    fn row(&mut self, value: &Self::Value, node: NodeId) -> Converted<PyRow<'py>> {
        let Kind::Struct { fields, .. } = &self.codec.codec.node(node).kind else {
            unreachable!("rows are read at struct nodes")
        };
        let expected = fields.len();
        let sequence =
            |v: &Bound<'py, PyAny>| v.is_instance_of::<PyTuple>() || v.is_instance_of::<PyList>();
        let value = if sequence(value) || value.is_instance_of::<PyDict>() {
            value.clone()
        } else if let Ok(attributes) = value.getattr(intern!(self.py, "__dict__")) {
            return Ok(PyRow::Mapping(attributes));
        } else {
            let plain = self.helpers.plain.bind(self.py).call1((value,))?;
            if !(sequence(&plain) || plain.is_instance_of::<PyDict>()) {
                return Err(self.unacceptable(&plain, node));
            }
            plain
        };
        if value.is_instance_of::<PyDict>() {
            return Ok(PyRow::Mapping(value));
        }
        let length = value.len()?;
        if length != expected {
            let message = format!(
                "Length of object ({length}) does not match with length of fields ({expected})."
            );
            return Err(CodecError::Mismatch {
                type_error: false,
                message: match self.name(node) {
                    Some(name) => {
                        format!("[FIELD_STRUCT_LENGTH_MISMATCH_WITH_NAME] {name}: {message}")
                    }
                    None => format!("[FIELD_STRUCT_LENGTH_MISMATCH] {message}"),
                },
            });
        }
        Ok(PyRow::Sequence(value))
    }

    fn field(
        &mut self,
        row: &PyRow<'py>,
        index: usize,
        name: &str,
        _: NodeId,
    ) -> Converted<Self::Value> {
        Ok(match row {
            PyRow::Sequence(values) => match values.cast::<PyTuple>() {
                Ok(tuple) => tuple.get_item(index)?,
                Err(_) => values.get_item(index)?,
            },
            PyRow::Mapping(mapping) => match mapping.cast::<PyDict>() {
                Ok(dict) => dict
                    .get_item(name)?
                    .unwrap_or_else(|| self.py.None().into_bound(self.py)),
                Err(_) => mapping.call_method1(intern!(self.py, "get"), (name,))?,
            },
        })
    }
}

// -- Python objects from the decoder -------------------------------------------------------------

struct PySink<'a, 'py> {
    py: Python<'py>,
    helpers: &'a Helpers,
}

fn corrupted(message: String) -> CodecError {
    CodecError::Core(kstate_core::Error::Corrupted(message))
}

impl<'py> ValueSink for PySink<'_, 'py> {
    type Value = Bound<'py, PyAny>;
    type Error = CodecError;

    fn null(&mut self) -> Converted<Self::Value> {
        Ok(self.py.None().into_bound(self.py))
    }
    fn boolean(&mut self, value: bool) -> Converted<Self::Value> {
        Ok(PyBool::new(self.py, value).to_owned().into_any())
    }
    fn integer(&mut self, value: i64) -> Converted<Self::Value> {
        Ok(value.into_bound_py_any(self.py)?)
    }
    fn float(&mut self, value: f32) -> Converted<Self::Value> {
        Ok(PyFloat::new(self.py, value as f64).into_any())
    }
    fn double(&mut self, value: f64) -> Converted<Self::Value> {
        Ok(PyFloat::new(self.py, value).into_any())
    }
    fn text(&mut self, value: &str) -> Converted<Self::Value> {
        Ok(PyString::new(self.py, value).into_any())
    }
    fn binary(&mut self, value: &[u8]) -> Converted<Self::Value> {
        Ok(PyByteArray::new(self.py, value).into_any())
    }
    fn date(&mut self, days: i64) -> Converted<Self::Value> {
        let ordinal = days.saturating_add(EPOCH_ORDINAL);
        if !(1..=MAX_ORDINAL).contains(&ordinal) {
            return Err(corrupted(format!(
                "typed state value: date {days} days from 1970 is out of range"
            )));
        }
        Ok(self
            .helpers
            .date_type
            .bind(self.py)
            .call_method1(intern!(self.py, "fromordinal"), (ordinal,))?)
    }
    fn timestamp(&mut self, micros: i64, ntz: bool) -> Converted<Self::Value> {
        self.helpers
            .timestamp_of
            .bind(self.py)
            .call1((micros, ntz))
            .map_err(|e| corrupted(format!("typed state value: timestamp {micros} us: {e}")))
    }
    fn decimal(&mut self, value: DecimalValue, scale: i32) -> Converted<Self::Value> {
        let h = self.helpers;
        match value {
            DecimalValue::Unscaled(n) => Ok(h.decimal_of.bind(self.py).call1((n, scale))?),
            DecimalValue::Text(text) => h
                .decimal_text
                .bind(self.py)
                .call1((text.as_str(),))
                .map_err(|_| corrupted(format!("typed state value: {text:?} is not a decimal"))),
        }
    }
    fn array(&mut self, values: Vec<Self::Value>) -> Converted<Self::Value> {
        Ok(PyList::new(self.py, values)?.into_any())
    }
    fn map(&mut self, keys: Vec<Self::Value>, values: Vec<Self::Value>) -> Converted<Self::Value> {
        let dict = PyDict::new(self.py);
        for (k, v) in keys.into_iter().zip(values) {
            dict.set_item(k, v)?;
        }
        Ok(dict.into_any())
    }
    fn row(&mut self, values: Vec<Self::Value>) -> Converted<Self::Value> {
        Ok(PyTuple::new(self.py, values)?.into_any())
    }
}

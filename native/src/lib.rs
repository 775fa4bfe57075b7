//! sparkcdc's native row-image decoder.
//!
//! Decodes the body of a binlog WRITE/UPDATE/DELETE_ROWS event (v1 or v2) into rows of
//! canonical text values, the same values `sparkcdc.upstream.values` produces from
//! mysql-replication's output (see the table in `sparkcdc/model/events.py`). A `RowLayout` is
//! compiled once per table version in Python (`sparkcdc.upstream.native_decode`) from the
//! TABLE_MAP column metadata and the schema store's `TableInfo`; per row the decoder only reads
//! bytes and creates the value strings, with no intermediate Python objects.
//!
//! `ChangeBatchBuilder` is the columnar form of the same decoding: it appends the row changes of
//! many events to Arrow buffers (the `before`/`after` `list<string>` columns, commit-ts, seq, op
//! and a table code per row) without creating a Python object per value, and hands the buffers
//! to Python, which wraps them as a `pyarrow.RecordBatch` (`sparkcdc.upstream.range_reader`).
//!
//! `binlog::BinlogRangeReader` frames the replication stream itself (packets, event headers,
//! checksums, TABLE_MAP/ROTATE/GTID bookkeeping) and feeds ROWS events to a `ChangeBatchBuilder`
//! without going through mysql-replication.
//!
//! `canal_json::CanalJsonLayout` goes the other way on the driver: it encodes such columns as
//! canal-json bytes (`sparkcdc.sink.codec.canal_json`), and `csv::CsvLayout` as CSV lines
//! (`sparkcdc.sink.codec.csv`).

mod arrow_input;
mod binlog;
mod canal_json;
mod csv;
mod text_rows;

use std::ffi::{c_char, CString};
use std::fmt::Write as _;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

const WRITE_ROWS_V1: u8 = 23;
const UPDATE_ROWS_V1: u8 = 24;
const DELETE_ROWS_V1: u8 = 25;
const WRITE_ROWS_V2: u8 = 30;
const UPDATE_ROWS_V2: u8 = 31;
const DELETE_ROWS_V2: u8 = 32;

const DIGITS_TO_BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
const MICROS_PER_FRACTION_UNIT: [u64; 4] = [0, 10_000, 100, 1];

/// How one column is read from a row image and written as canonical text.
enum Kind {
    Int { width: usize, unsigned: bool },
    Float,
    Double,
    Decimal { precision: usize, scale: usize },
    Bit { bytes: usize, bits: usize },
    Date,
    DateTime { fsp: usize },
    Timestamp { fsp: usize },
    Time { fsp: usize },
    Year,
    Enum { size: usize, elements: Vec<Py<PyString>>, texts: Vec<String> },
    Set { size: usize, elements: Vec<String> },
    /// A character string: UTF-8 (fast path) or another Python codec with its error handler.
    Text { length_size: usize, utf8: bool, encoding: CString, errors: CString },
    /// Bytes as ISO-8859-1 text; BINARY(n) is padded back to n bytes with 0x00.
    Bytes { length_size: usize, pad_to: usize },
}

impl Kind {
    fn from_spec(py: Python<'_>, spec: &ColumnSpec) -> PyResult<Kind> {
        let (name, a, b) = (spec.0.as_str(), spec.1, spec.2);
        Ok(match name {
            "int" => Kind::Int { width: a, unsigned: b != 0 },
            "float" => Kind::Float,
            "double" => Kind::Double,
            "decimal" => {
                if a > 65 || b > 38 || b > a {
                    return Err(PyValueError::new_err(format!("decimal({a},{b}) is out of range")));
                }
                Kind::Decimal { precision: a, scale: b }
            }
            "bit" => {
                if a == 0 || a > 8 {
                    return Err(PyValueError::new_err(format!("bit column of {a} bytes is out of range")));
                }
                Kind::Bit { bytes: a, bits: b }
            }
            "date" => Kind::Date,
            "datetime" => Kind::DateTime { fsp: check_fsp(a)? },
            "timestamp" => Kind::Timestamp { fsp: check_fsp(a)? },
            "time" => Kind::Time { fsp: check_fsp(a)? },
            "year" => Kind::Year,
            "enum" => Kind::Enum {
                size: check_size(a)?,
                elements: spec.3.iter().map(|e| PyString::new(py, e).unbind()).collect(),
                texts: spec.3.clone(),
            },
            "set" => Kind::Set { size: check_size(a)?, elements: spec.3.clone() },
            "text" => {
                let (encoding, errors) = (&spec.4, &spec.5);
                let utf8 = matches!(encoding.to_ascii_lowercase().as_str(), "utf8" | "utf-8") && errors == "strict";
                Kind::Text {
                    length_size: check_length_size(a)?,
                    utf8,
                    encoding: CString::new(encoding.as_str())?,
                    errors: CString::new(errors.as_str())?,
                }
            }
            "bytes" => Kind::Bytes { length_size: check_length_size(a)?, pad_to: b },
            other => return Err(PyValueError::new_err(format!("unknown column kind {other:?}"))),
        })
    }
}

fn check_fsp(fsp: usize) -> PyResult<usize> {
    if fsp > 6 {
        return Err(PyValueError::new_err(format!("fractional seconds precision {fsp} is above 6")));
    }
    Ok(fsp)
}

fn check_size(size: usize) -> PyResult<usize> {
    if size == 0 || size > 8 {
        return Err(PyValueError::new_err(format!("enum/set storage size {size} is out of range")));
    }
    Ok(size)
}

fn check_length_size(size: usize) -> PyResult<usize> {
    if size == 0 || size > 4 {
        return Err(PyValueError::new_err(format!("length prefix of {size} bytes is out of range")));
    }
    Ok(size)
}

/// `(kind, a, b, elements, encoding, errors)` as `native_decode.compile_layout` builds it.
#[derive(FromPyObject)]
struct ColumnSpec(String, usize, usize, Vec<String>, String, String);

/// A table's compiled row layout: one `Kind` per column, in table order.
#[pyclass(frozen, module = "sparkcdc_native")]
struct RowLayout {
    name: String,
    kinds: Vec<Kind>,
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or_else(|| {
            format!("row image truncated: need {n} bytes at offset {} of {}", self.pos, self.data.len())
        })?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    #[inline]
    fn uint_le(&mut self, n: usize) -> Result<u64, String> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    #[inline]
    fn uint_be(&mut self, n: usize) -> Result<u64, String> {
        Ok(be(self.take(n)?))
    }

    fn length_encoded(&mut self) -> Result<u64, String> {
        let first = self.take(1)?[0];
        match first {
            0..=250 => Ok(first as u64),
            252 => self.uint_le(2),
            253 => self.uint_le(3),
            254 => self.uint_le(8),
            _ => Err(format!("invalid length-encoded integer prefix {first}")),
        }
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

#[inline]
fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64)
}

#[inline]
fn bit_set(bitmap: &[u8], index: usize) -> bool {
    bitmap[index / 8] & (1 << (index % 8)) != 0
}

/// `value` as the reference writes it (Python's `repr` for DOUBLE, numpy's unique positional
/// form for FLOAT). All give the shortest digits that read back as `value`, but when two such
/// candidates are equally near it (an exact tie, e.g. 70368744177664.625 at 2 decimals) Rust's
/// Display takes the upper one and the reference the even one; correctly rounded formatting at
/// the same number of decimals breaks the tie to even.
fn push_shortest<F>(out: &mut String, value: F)
where
    F: std::fmt::Display + std::str::FromStr + PartialEq + Copy,
{
    let start = out.len();
    let _ = write!(out, "{value}");
    if let Some(dot) = out[start..].find('.') {
        let decimals = out.len() - start - dot - 1;
        let even = format!("{value:.decimals$}");
        if even != out[start..] && even.parse::<F>().ok() == Some(value) {
            out.truncate(start);
            out.push_str(&even);
        }
    }
}

fn push_fraction(out: &mut String, micros: u64, fsp: usize) {
    if fsp > 0 {
        let mut digits = [b'0'; 6];
        let mut value = micros;
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            value /= 10;
        }
        out.push('.');
        out.push_str(std::str::from_utf8(&digits[..fsp]).unwrap());
    }
}

fn push_zero_datetime(out: &mut String, fsp: usize) {
    out.push_str("0000-00-00 00:00:00");
    push_fraction(out, 0, fsp);
}

fn push_datetime(out: &mut String, parts: [u64; 6], micros: u64, fsp: usize) {
    let [year, month, day, hour, minute, second] = parts;
    let _ = write!(out, "{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}");
    push_fraction(out, micros, fsp);
}

/// Microseconds stored in `(fsp + 1) / 2` big-endian bytes after a temporal value.
fn read_fraction(cur: &mut Cursor, fsp: usize) -> Result<u64, String> {
    let n = fsp.div_ceil(2);
    if n == 0 {
        return Ok(0);
    }
    Ok(cur.uint_be(n)? * MICROS_PER_FRACTION_UNIT[n])
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day)
}

fn push_decimal(cur: &mut Cursor, out: &mut String, precision: usize, scale: usize) -> Result<(), String> {
    let integral = precision - scale;
    let (int_words, int_rest) = (integral / 9, integral % 9);
    let (frac_words, frac_rest) = (scale / 9, scale % 9);
    let size = DIGITS_TO_BYTES[int_rest] + int_words * 4 + frac_words * 4 + DIGITS_TO_BYTES[frac_rest];
    let raw = cur.take(size)?;
    if raw.is_empty() {
        return Err("decimal with no digits".into());
    }
    let negative = raw[0] & 0x80 == 0;
    let mask: u8 = if negative { 0xFF } else { 0 };
    let mut bytes = [0u8; 32];
    for (i, &b) in raw.iter().enumerate() {
        bytes[i] = b ^ mask;
    }
    bytes[0] ^= 0x80;
    let mut digits = String::with_capacity(precision + 2);
    let mut at = 0;
    let mut group = |n: usize, width: usize, digits: &mut String| {
        let value = be(&bytes[at..at + n]);
        at += n;
        if width == 0 {
            let _ = write!(digits, "{value}");
        } else {
            let _ = write!(digits, "{value:0width$}");
        }
    };
    group(DIGITS_TO_BYTES[int_rest], 0, &mut digits);
    for _ in 0..int_words {
        group(4, 9, &mut digits);
    }
    let integer_end = digits.len();
    for _ in 0..frac_words {
        group(4, 9, &mut digits);
    }
    if frac_rest > 0 {
        group(DIGITS_TO_BYTES[frac_rest], frac_rest, &mut digits);
    }
    let integer = digits[..integer_end].trim_start_matches('0');
    let fraction = &digits[integer_end..];
    let is_zero = integer.is_empty() && fraction.bytes().all(|d| d == b'0');
    if negative && !is_zero {
        out.push('-');
    }
    out.push_str(if integer.is_empty() { "0" } else { integer });
    if scale > 0 {
        out.push('.');
        out.push_str(fraction);
    }
    Ok(())
}

enum Value {
    Text,                       // the canonical text (UTF-8) is in the scratch buffer
    Object(*mut ffi::PyObject), // a new reference
}

impl RowLayout {
    /// Reads one present, non-NULL value: its text goes to `out`, or it is returned as an object.
    fn read_value(&self, py: Python<'_>, kind: &Kind, cur: &mut Cursor, out: &mut String) -> Result<Value, String> {
        match kind {
            Kind::Enum { size, elements, .. } => {
                let index = cur.uint_le(*size)? as usize;
                if index == 0 {
                    return Ok(Value::Text); // the invalid value '' (out is empty)
                }
                let element = elements
                    .get(index - 1)
                    .ok_or_else(|| format!("enum index {index} is past the {} members", elements.len()))?;
                Ok(Value::Object(element.clone_ref(py).into_ptr()))
            }
            Kind::Text { length_size, utf8, encoding, errors } => {
                let length = cur.uint_le(*length_size)? as usize;
                let bytes = cur.take(length)?;
                let object = unsafe {
                    if *utf8 {
                        ffi::PyUnicode_DecodeUTF8(bytes.as_ptr() as *const c_char, length as isize, c"strict".as_ptr())
                    } else {
                        ffi::PyUnicode_Decode(
                            bytes.as_ptr() as *const c_char,
                            length as isize,
                            encoding.as_ptr(),
                            errors.as_ptr(),
                        )
                    }
                };
                python_object(object)
            }
            Kind::Bytes { length_size, pad_to } => {
                let length = cur.uint_le(*length_size)? as usize;
                let bytes = cur.take(length)?;
                let object = if length < *pad_to {
                    let mut padded = bytes.to_vec();
                    padded.resize(*pad_to, 0);
                    unsafe { ffi::PyUnicode_DecodeLatin1(padded.as_ptr() as *const c_char, padded.len() as isize, std::ptr::null()) }
                } else {
                    unsafe { ffi::PyUnicode_DecodeLatin1(bytes.as_ptr() as *const c_char, length as isize, std::ptr::null()) }
                };
                python_object(object)
            }
            _ => self.read_scalar(kind, cur, out).map(|()| Value::Text),
        }
    }

    /// Reads one present, non-NULL value of a kind whose text needs no Python (all but ENUM,
    /// strings and bytes) into `out`: it runs without the GIL.
    fn read_scalar(&self, kind: &Kind, cur: &mut Cursor, out: &mut String) -> Result<(), String> {
        match kind {
            Kind::Int { width, unsigned } => {
                let raw = cur.uint_le(*width)?;
                let mut buffer = itoa::Buffer::new();
                let text = if *unsigned {
                    buffer.format(raw)
                } else {
                    let shift = 64 - 8 * *width as u32;
                    buffer.format(((raw << shift) as i64) >> shift)
                };
                out.push_str(text);
            }
            Kind::Float => {
                let value = f32::from_le_bytes(cur.take(4)?.try_into().unwrap());
                push_shortest(out, value);
            }
            Kind::Double => {
                let value = f64::from_le_bytes(cur.take(8)?.try_into().unwrap());
                push_shortest(out, value);
            }
            Kind::Decimal { precision, scale } => push_decimal(cur, out, *precision, *scale)?,
            Kind::Bit { bytes, bits } => {
                let mut value = cur.uint_be(*bytes)?;
                if *bits < 64 {
                    value &= (1u64 << *bits) - 1;
                }
                out.push_str(itoa::Buffer::new().format(value));
            }
            Kind::Date => {
                let raw = cur.uint_le(3)?;
                let (year, month, day) = (raw >> 9, (raw >> 5) & 0x0F, raw & 0x1F);
                let _ = write!(out, "{year:04}-{month:02}-{day:02}");
            }
            Kind::DateTime { fsp } => {
                let raw = cur.uint_be(5)?;
                let micros = read_fraction(cur, *fsp)?;
                let year_month = (raw >> 22) & 0x1_FFFF;
                let parts = [
                    year_month / 13,
                    year_month % 13,
                    (raw >> 17) & 0x1F,
                    (raw >> 12) & 0x1F,
                    (raw >> 6) & 0x3F,
                    raw & 0x3F,
                ];
                push_datetime(out, parts, micros, *fsp);
            }
            Kind::Timestamp { fsp } => {
                let seconds = cur.uint_be(4)?;
                let micros = read_fraction(cur, *fsp)?;
                if seconds == 0 && micros == 0 {
                    push_zero_datetime(out, *fsp);
                } else {
                    let (year, month, day) = civil_from_days((seconds / 86_400) as i64);
                    let time = seconds % 86_400;
                    let parts = [year as u64, month, day, time / 3600, time / 60 % 60, time % 60];
                    push_datetime(out, parts, micros, *fsp);
                }
            }
            Kind::Time { fsp } => {
                let fraction_bytes = fsp.div_ceil(2);
                let raw = cur.uint_be(3 + fraction_bytes)? as i64;
                let shift = 8 * fraction_bytes as u32;
                let mut value = raw - (0x80_0000i64 << shift);
                let negative = value < 0;
                if negative {
                    value = -value;
                }
                let fraction = (value & ((1i64 << shift) - 1)) as u64;
                let hms = (value >> shift) as u64;
                let total = (((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 0x3F) * 60 + (hms & 0x3F)) * 1_000_000
                    + fraction * MICROS_PER_FRACTION_UNIT[fraction_bytes];
                if negative && total != 0 {
                    out.push('-');
                }
                let (seconds, micros) = (total / 1_000_000, total % 1_000_000);
                let _ = write!(out, "{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60);
                push_fraction(out, micros, *fsp);
            }
            Kind::Year => {
                let raw = cur.take(1)?[0];
                if raw == 0 {
                    out.push_str("0000");
                } else {
                    let _ = write!(out, "{:04}", 1900 + raw as u32);
                }
            }
            Kind::Set { size, elements } => {
                let bits = cur.uint_le(*size)?;
                let mut first = true;
                for (i, element) in elements.iter().enumerate() {
                    if i < 64 && bits & (1u64 << i) != 0 {
                        if !first {
                            out.push(',');
                        }
                        out.push_str(element);
                        first = false;
                    }
                }
            }
            Kind::Enum { .. } | Kind::Text { .. } | Kind::Bytes { .. } => {
                return Err("internal error: a value kind without a text form of its own".into());
            }
        }
        Ok(())
    }

    /// One row image as a new tuple reference.
    fn read_row(&self, py: Python<'_>, cur: &mut Cursor, present: &[u8], out: &mut String) -> PyResult<*mut ffi::PyObject> {
        let columns = self.kinds.len();
        let present_count = (0..columns).filter(|&i| bit_set(present, i)).count();
        let nulls = cur.take(present_count.div_ceil(8)).map_err(|e| self.error(e))?;
        let tuple = unsafe { ffi::PyTuple_New(columns as isize) };
        if tuple.is_null() {
            return Err(PyErr::fetch(py));
        }
        let mut null_index = 0;
        for (i, kind) in self.kinds.iter().enumerate() {
            let item = if !bit_set(present, i) {
                none(py)
            } else {
                let is_null = bit_set(nulls, null_index);
                null_index += 1;
                if is_null {
                    none(py)
                } else {
                    out.clear();
                    match self.read_value(py, kind, cur, out) {
                        Ok(Value::Text) => unsafe {
                            ffi::PyUnicode_FromStringAndSize(out.as_ptr() as *const c_char, out.len() as isize)
                        },
                        Ok(Value::Object(object)) => object,
                        Err(message) => {
                            unsafe { ffi::Py_DECREF(tuple) };
                            return Err(PyErr::take(py).unwrap_or_else(|| self.error(message)));
                        }
                    }
                }
            };
            if item.is_null() {
                unsafe { ffi::Py_DECREF(tuple) };
                return Err(PyErr::fetch(py));
            }
            unsafe { ffi::PyTuple_SET_ITEM(tuple, i as isize, item) };
        }
        Ok(tuple)
    }

    fn error(&self, message: String) -> PyErr {
        PyValueError::new_err(format!("table {}: {message}", self.name))
    }
}

/// A rows event body split into its parts: the column bitmaps and a cursor at the first row.
struct EventBody<'a> {
    is_update: bool,
    op: u8,
    present_before: &'a [u8],
    present_after: &'a [u8],
    rows: Cursor<'a>,
}

const OP_INSERT: u8 = 0;
const OP_UPDATE: u8 = 1;
const OP_DELETE: u8 = 2;

impl RowLayout {
    /// Checks the event type and the post-header, and reads the column count and bitmaps.
    fn body<'a>(
        &self,
        event_type: u8,
        data: &'a [u8],
        start: usize,
        end: Option<usize>,
        post_header_extra: usize,
    ) -> PyResult<EventBody<'a>> {
        let end = end.unwrap_or(data.len());
        if start > end || end > data.len() {
            return Err(self.error(format!("body range {start}..{end} is outside the {} bytes given", data.len())));
        }
        let mut cur = Cursor { data: &data[start..end], pos: 0 };
        let (op, post_header_v2) = match event_type {
            WRITE_ROWS_V1 => (OP_INSERT, false),
            DELETE_ROWS_V1 => (OP_DELETE, false),
            UPDATE_ROWS_V1 => (OP_UPDATE, false),
            WRITE_ROWS_V2 => (OP_INSERT, true),
            DELETE_ROWS_V2 => (OP_DELETE, true),
            UPDATE_ROWS_V2 => (OP_UPDATE, true),
            other => return Err(self.error(format!("event type {other} is not a WRITE/UPDATE/DELETE_ROWS event"))),
        };
        let is_update = op == OP_UPDATE;
        cur.take(6 + 2).map_err(|e| self.error(e))?; // table id, flags
        let extra_data = if post_header_v2 { cur.uint_le(2).map_err(|e| self.error(e))? as usize } else { 0 };
        cur.take(post_header_extra + extra_data.saturating_sub(2)).map_err(|e| self.error(e))?;
        let columns = cur.length_encoded().map_err(|e| self.error(e))? as usize;
        if columns != self.kinds.len() {
            return Err(self.error(format!(
                "the event has {columns} columns but the layout {}; the table changed outside a recorded DDL",
                self.kinds.len()
            )));
        }
        let bitmap_len = columns.div_ceil(8);
        let present_before = cur.take(bitmap_len).map_err(|e| self.error(e))?;
        let present_after = if is_update { cur.take(bitmap_len).map_err(|e| self.error(e))? } else { present_before };
        Ok(EventBody { is_update, op, present_before, present_after, rows: cur })
    }

    /// Reads one present, non-NULL value as canonical UTF-8 text into `out`. Called without the
    /// GIL: only a non-UTF-8 Python codec, or invalid UTF-8 (to raise the same UnicodeDecodeError
    /// as the tuple path), takes it, and its result is copied out as UTF-8.
    fn read_text(&self, kind: &Kind, cur: &mut Cursor, out: &mut String) -> PyResult<()> {
        match kind {
            Kind::Enum { size, texts, .. } => {
                let index = cur.uint_le(*size).map_err(|e| self.error(e))? as usize;
                if index > 0 {
                    let element = texts.get(index - 1).ok_or_else(|| {
                        self.error(format!("enum index {index} is past the {} members", texts.len()))
                    })?;
                    out.push_str(element);
                }
            }
            Kind::Text { length_size, utf8, encoding, errors } => {
                let length = cur.uint_le(*length_size).map_err(|e| self.error(e))? as usize;
                let bytes = cur.take(length).map_err(|e| self.error(e))?;
                if *utf8 {
                    match std::str::from_utf8(bytes) {
                        Ok(text) => out.push_str(text),
                        Err(_) => {
                            return Err(Python::with_gil(|py| {
                                let object = unsafe {
                                    ffi::PyUnicode_DecodeUTF8(bytes.as_ptr() as *const c_char, length as isize, c"strict".as_ptr())
                                };
                                if !object.is_null() {
                                    unsafe { ffi::Py_DECREF(object) };
                                    return self.error("invalid UTF-8 in a text value".into());
                                }
                                PyErr::fetch(py)
                            }));
                        }
                    }
                } else {
                    Python::with_gil(|py| -> PyResult<()> {
                        let object = unsafe {
                            ffi::PyUnicode_Decode(bytes.as_ptr() as *const c_char, length as isize, encoding.as_ptr(), errors.as_ptr())
                        };
                        if object.is_null() {
                            return Err(PyErr::fetch(py));
                        }
                        let mut size: ffi::Py_ssize_t = 0;
                        let utf8_text = unsafe { ffi::PyUnicode_AsUTF8AndSize(object, &mut size) };
                        if utf8_text.is_null() {
                            unsafe { ffi::Py_DECREF(object) };
                            return Err(PyErr::fetch(py));
                        }
                        let text = unsafe { std::slice::from_raw_parts(utf8_text as *const u8, size as usize) };
                        // PyUnicode_AsUTF8AndSize only returns valid UTF-8.
                        out.push_str(unsafe { std::str::from_utf8_unchecked(text) });
                        unsafe { ffi::Py_DECREF(object) };
                        Ok(())
                    })?;
                }
            }
            Kind::Bytes { length_size, pad_to } => {
                let length = cur.uint_le(*length_size).map_err(|e| self.error(e))? as usize;
                let bytes = cur.take(length).map_err(|e| self.error(e))?;
                // ISO-8859-1: each byte is the code point of the same value.
                out.extend(bytes.iter().map(|&b| b as char));
                for _ in length..*pad_to {
                    out.push('\0');
                }
            }
            _ => self.read_scalar(kind, cur, out).map_err(|e| self.error(e))?,
        }
        Ok(())
    }

    /// Appends one row image to `column` as a list of values.
    fn append_image(
        &self,
        cur: &mut Cursor,
        present: &[u8],
        out: &mut String,
        column: &mut ImageColumn,
    ) -> PyResult<()> {
        let present_count = (0..self.kinds.len()).filter(|&i| bit_set(present, i)).count();
        let nulls = cur.take(present_count.div_ceil(8)).map_err(|e| self.error(e))?;
        let mut null_index = 0;
        for (i, kind) in self.kinds.iter().enumerate() {
            if !bit_set(present, i) {
                column.push_null_value();
                continue;
            }
            let is_null = bit_set(nulls, null_index);
            null_index += 1;
            if is_null {
                column.push_null_value();
                continue;
            }
            out.clear();
            self.read_text(kind, cur, out)?;
            column.push_value(out.as_bytes());
        }
        column.end_list();
        Ok(())
    }
}

#[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87
fn push_bit(bitmap: &mut Vec<u8>, index: usize, set: bool) {
    if index % 8 == 0 {
        bitmap.push(0);
    }
    if set {
        bitmap[index / 8] |= 1 << (index % 8);
    }
}

fn le_bytes<'py, T: Copy, const N: usize>(py: Python<'py>, values: &[T], to_le: fn(T) -> [u8; N]) -> Bound<'py, PyBytes> {
    let mut raw = Vec::with_capacity(values.len() * N);
    for &value in values {
        raw.extend_from_slice(&to_le(value));
    }
    PyBytes::new(py, &raw)
}

/// One `list<string>` column as Arrow buffers: the lists (validity, offsets into the values) and
/// the values (validity, offsets into `data`, UTF-8 `data`).
struct ImageColumn {
    list_validity: Vec<u8>,
    list_offsets: Vec<i32>,
    list_nulls: usize,
    value_validity: Vec<u8>,
    value_offsets: Vec<i32>,
    value_nulls: usize,
    data: Vec<u8>,
}

impl ImageColumn {
    fn new() -> Self {
        ImageColumn {
            list_validity: Vec::new(),
            list_offsets: vec![0],
            list_nulls: 0,
            value_validity: Vec::new(),
            value_offsets: vec![0],
            value_nulls: 0,
            data: Vec::new(),
        }
    }

    fn values(&self) -> usize {
        self.value_offsets.len() - 1
    }

    fn lists(&self) -> usize {
        self.list_offsets.len() - 1
    }

    fn push_value(&mut self, text: &[u8]) {
        let index = self.values();
        push_bit(&mut self.value_validity, index, true);
        self.data.extend_from_slice(text);
        // Batches are cut at a few thousand rows, far below 2 GiB; checked again in `finish`.
        self.value_offsets.push(self.data.len().min(i32::MAX as usize) as i32);
    }

    fn push_null_value(&mut self) {
        let index = self.values();
        push_bit(&mut self.value_validity, index, false);
        self.value_nulls += 1;
        self.value_offsets.push(self.data.len().min(i32::MAX as usize) as i32);
    }

    fn end_list(&mut self) {
        let index = self.lists();
        push_bit(&mut self.list_validity, index, true);
        self.list_offsets.push(self.values() as i32);
    }

    fn push_null_list(&mut self) {
        let index = self.lists();
        push_bit(&mut self.list_validity, index, false);
        self.list_nulls += 1;
        self.list_offsets.push(self.values() as i32);
    }

    /// `(list_validity, list_offsets, list_nulls, value_validity, value_offsets, data, value_count, value_nulls)`.
    fn to_python<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        if self.data.len() > i32::MAX as usize {
            return Err(PyValueError::new_err("a batch's values exceed 2 GiB; cut batches smaller"));
        }
        PyTuple::new(
            py,
            [
                PyBytes::new(py, &self.list_validity).into_any(),
                le_bytes(py, &self.list_offsets, i32::to_le_bytes).into_any(),
                self.list_nulls.into_pyobject(py)?.into_any(),
                PyBytes::new(py, &self.value_validity).into_any(),
                le_bytes(py, &self.value_offsets, i32::to_le_bytes).into_any(),
                PyBytes::new(py, &self.data).into_any(),
                self.values().into_pyobject(py)?.into_any(),
                self.value_nulls.into_pyobject(py)?.into_any(),
            ],
        )
    }
}

/// Row changes of many ROWS events as Arrow buffers, for one `pyarrow.RecordBatch`.
///
/// Per row: commit-ts, seq, a table code (the caller's index into its table names) and an op
/// code (0 insert, 1 update, 2 delete); `before` and `after` are `list<string>` columns, NULL
/// where the op has no such image. After an error the builder is unusable (it may hold part of
/// an event); the caller discards it with the failed read.
#[pyclass(unsendable, module = "sparkcdc_native")]
struct ChangeBatchBuilder {
    commit_ts: Vec<i64>,
    seq: Vec<i64>,
    table: Vec<i32>,
    op: Vec<u8>,
    before: ImageColumn,
    after: ImageColumn,
    scratch: String,
    broken: bool,
}

impl ChangeBatchBuilder {
    fn len(&self) -> usize {
        self.commit_ts.len()
    }

    fn check(&self) -> PyResult<()> {
        if self.broken {
            return Err(PyValueError::new_err("this ChangeBatchBuilder failed earlier and holds partial rows"));
        }
        Ok(())
    }

    fn push_row(&mut self, commit_ts: i64, seq: i64, table: i32, op: u8) {
        self.commit_ts.push(commit_ts);
        self.seq.push(seq);
        self.table.push(table);
        self.op.push(op);
    }

    fn append_event(
        &mut self,
        layout: &RowLayout,
        body: EventBody,
        commit_ts: i64,
        seq: i64,
        table: i32,
    ) -> PyResult<usize> {
        let EventBody { op, present_before, present_after, rows: mut cur, .. } = body;
        let mut out = std::mem::take(&mut self.scratch);
        let mut added = 0usize;
        let result = (|| -> PyResult<()> {
            while !cur.done() {
                match op {
                    OP_INSERT => {
                        self.before.push_null_list();
                        layout.append_image(&mut cur, present_before, &mut out, &mut self.after)?;
                    }
                    OP_DELETE => {
                        layout.append_image(&mut cur, present_before, &mut out, &mut self.before)?;
                        self.after.push_null_list();
                    }
                    _ => {
                        layout.append_image(&mut cur, present_before, &mut out, &mut self.before)?;
                        layout.append_image(&mut cur, present_after, &mut out, &mut self.after)?;
                    }
                }
                self.push_row(commit_ts, seq + added as i64, table, op);
                added += 1;
            }
            Ok(())
        })();
        self.scratch = out;
        if let Err(error) = result {
            self.broken = true;
            return Err(error);
        }
        Ok(added)
    }
}

fn append_python_image(column: &mut ImageColumn, image: Option<Vec<Option<String>>>) {
    match image {
        None => column.push_null_list(),
        Some(values) => {
            for value in values {
                match value {
                    Some(text) => column.push_value(text.as_bytes()),
                    None => column.push_null_value(),
                }
            }
            column.end_list();
        }
    }
}

#[pymethods]
impl ChangeBatchBuilder {
    #[new]
    fn new() -> Self {
        ChangeBatchBuilder {
            commit_ts: Vec::new(),
            seq: Vec::new(),
            table: Vec::new(),
            op: Vec::new(),
            before: ImageColumn::new(),
            after: ImageColumn::new(),
            scratch: String::with_capacity(64),
            broken: false,
        }
    }

    /// Row changes appended since the last `finish`.
    fn __len__(&self) -> usize {
        self.commit_ts.len()
    }

    /// Decodes the rows event body `data[start:end]` with `layout` (as `RowLayout.decode`) and
    /// appends its row changes with seq `seq`, `seq + 1`, ...; returns how many it appended.
    #[pyo3(signature = (layout, event_type, data, start, end, post_header_extra, commit_ts, seq, table))]
    #[allow(clippy::too_many_arguments)]
    fn add_event(
        &mut self,
        py: Python<'_>,
        layout: &RowLayout,
        event_type: u8,
        data: &[u8],
        start: usize,
        end: usize,
        post_header_extra: usize,
        commit_ts: i64,
        seq: i64,
        table: i32,
    ) -> PyResult<usize> {
        self.check()?;
        let body = layout.body(event_type, data, start, Some(end), post_header_extra)?;
        py.allow_threads(|| self.append_event(layout, body, commit_ts, seq, table))
    }

    /// Appends one row change decoded elsewhere (a table the native layouts do not cover).
    #[pyo3(signature = (commit_ts, seq, table, op, before, after))]
    fn add_row(
        &mut self,
        commit_ts: i64,
        seq: i64,
        table: i32,
        op: u8,
        before: Option<Vec<Option<String>>>,
        after: Option<Vec<Option<String>>>,
    ) -> PyResult<()> {
        self.check()?;
        if op > OP_DELETE {
            return Err(PyValueError::new_err(format!("op code {op} is not 0 (insert), 1 (update) or 2 (delete)")));
        }
        append_python_image(&mut self.before, before);
        append_python_image(&mut self.after, after);
        self.push_row(commit_ts, seq, table, op);
        Ok(())
    }

    /// The buffers of the rows appended so far, and an empty builder again:
    /// `(rows, commit_ts, seq, table, op, before, after)`; int64/int32/uint8 little-endian
    /// bytes for the per-row columns, `ImageColumn` tuples for the images.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        self.check()?;
        let result = PyTuple::new(
            py,
            [
                self.commit_ts.len().into_pyobject(py)?.into_any(),
                le_bytes(py, &self.commit_ts, i64::to_le_bytes).into_any(),
                le_bytes(py, &self.seq, i64::to_le_bytes).into_any(),
                le_bytes(py, &self.table, i32::to_le_bytes).into_any(),
                PyBytes::new(py, &self.op).into_any(),
                self.before.to_python(py)?.into_any(),
                self.after.to_python(py)?.into_any(),
            ],
        )?;
        let scratch = std::mem::take(&mut self.scratch);
        *self = ChangeBatchBuilder::new();
        self.scratch = scratch;
        Ok(result)
    }
}

fn none(py: Python<'_>) -> *mut ffi::PyObject {
    py.None().into_ptr()
}

fn python_object(object: *mut ffi::PyObject) -> Result<Value, String> {
    if object.is_null() {
        // Leave the Python exception (e.g. UnicodeDecodeError) set; the caller raises it.
        return Err(String::new());
    }
    Ok(Value::Object(object))
}

#[pymethods]
impl RowLayout {
    /// `columns`: one `(kind, a, b, elements, encoding, errors)` per column, in table order.
    #[new]
    fn new(py: Python<'_>, name: String, columns: Vec<ColumnSpec>) -> PyResult<Self> {
        let kinds = columns.iter().map(|spec| Kind::from_spec(py, spec)).collect::<PyResult<Vec<_>>>()?;
        Ok(RowLayout { name, kinds })
    }

    #[getter]
    fn column_count(&self) -> usize {
        self.kinds.len()
    }

    /// Decodes the rows event body `data[start:end]` (from the table id to before the checksum).
    /// `post_header_extra` is how many bytes the format description declares beyond the
    /// 8-byte (v1) or 10-byte (v2) post-header.
    ///
    /// Returns a list of row tuples; for UPDATE events the list alternates before and after
    /// images. Values are canonical text or None (SQL NULL, or a column absent from the image).
    #[pyo3(signature = (event_type, data, start=0, end=None, post_header_extra=0))]
    fn decode(
        &self,
        py: Python<'_>,
        event_type: u8,
        data: &[u8],
        start: usize,
        end: Option<usize>,
        post_header_extra: usize,
    ) -> PyResult<PyObject> {
        let body = self.body(event_type, data, start, end, post_header_extra)?;
        let (is_update, present_before, present_after, mut cur) =
            (body.is_update, body.present_before, body.present_after, body.rows);
        let mut rows: Vec<*mut ffi::PyObject> = Vec::new();
        let mut out = String::with_capacity(64);
        let mut failure = None;
        while !cur.done() {
            match self.read_row(py, &mut cur, present_before, &mut out) {
                Ok(row) => rows.push(row),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            if is_update {
                match self.read_row(py, &mut cur, present_after, &mut out) {
                    Ok(row) => rows.push(row),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(error) = failure {
            for row in rows {
                unsafe { ffi::Py_DECREF(row) };
            }
            return Err(error);
        }
        unsafe {
            let list = ffi::PyList_New(rows.len() as isize);
            if list.is_null() {
                for row in rows {
                    ffi::Py_DECREF(row);
                }
                return Err(PyErr::fetch(py));
            }
            for (i, row) in rows.into_iter().enumerate() {
                ffi::PyList_SET_ITEM(list, i as isize, row);
            }
            Ok(PyObject::from_owned_ptr(py, list))
        }
    }
}

#[pymodule]
fn sparkcdc_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RowLayout>()?;
    m.add_class::<ChangeBatchBuilder>()?;
    m.add_class::<canal_json::CanalJsonLayout>()?;
    m.add_class::<csv::CsvLayout>()?;
    binlog::register(m)?;
    text_rows::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! CSV lines encoded straight from Arrow buffers (`CsvLayout`), byte for byte what
//! `sparkcdc.sink.codec.csv.CSVEncoder.encode_rows` writes; the Python encoder compiles the
//! layout (quoted op/table/schema prefixes, per-column value kinds, handle-key columns and the
//! csv options) and stays the reference.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::arrow_input::{bytes_of, fixed, i32_at, i64_at, Encoded, Image, ImageSpec};

const OP_INSERT: i32 = 0;
const OP_UPDATE: i32 = 1;
const OP_DELETE: i32 = 2;

/// How a column's value is written (`CSVEncoder.format_value`).
#[derive(Clone, Copy, PartialEq)]
enum ValueKind {
    /// Integers, bit, year: the text as is.
    Bare,
    /// float/double: Go's `%v` of the shortest decimal text.
    Float,
    /// Binary: the ISO-8859-1 bytes as hex or base64, quoted.
    Binary,
    /// Everything else: quoted.
    Quoted,
}

#[pyclass(frozen, module = "sparkcdc_native")]
pub struct CsvLayout {
    name: String,
    /// `quoted(op) delimiter quoted(table) delimiter quoted(schema)` for D, I and U lines.
    prefixes: [Vec<u8>; 3],
    kinds: Vec<ValueKind>,
    handle_key: Vec<usize>,
    delimiter: Vec<u8>,
    quote: Vec<u8>,
    escaped_delimiter: Vec<u8>,
    null: Vec<u8>,
    terminator: Vec<u8>,
    include_commit_ts: bool,
    output_old_value: bool,
    output_handle_key: bool,
    hex: bool,
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_base64(out: &mut Vec<u8>, raw: &[u8]) {
    for chunk in raw.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(BASE64[(n >> 18) as usize & 63]);
        out.push(BASE64[(n >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 { BASE64[(n >> 6) as usize & 63] } else { b'=' });
        out.push(if chunk.len() > 2 { BASE64[n as usize & 63] } else { b'=' });
    }
}

/// `csv.go_float_text`: Go's `%v` of a float given as decimal text (shortest digits; exponent
/// form when the decimal exponent is < -4 or >= 6).
fn push_go_float(out: &mut Vec<u8>, text: &[u8]) -> Result<(), String> {
    let bad = || format!("{:?} is not a decimal number", String::from_utf8_lossy(text));
    let (negative, body) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent_text) = match body.iter().position(|&b| b == b'e' || b == b'E') {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let mut exponent: i64 = match exponent_text {
        None => 0,
        Some(e) => {
            let digits = e.strip_prefix(b"+").or_else(|| e.strip_prefix(b"-")).unwrap_or(e);
            if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_digit) {
                return Err(bad());
            }
            let value: i64 = std::str::from_utf8(digits).unwrap().parse().unwrap();
            if e.first() == Some(&b'-') { -value } else { value }
        }
    };
    let (whole, fraction) = match mantissa.iter().position(|&b| b == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &mantissa[mantissa.len()..]),
    };
    if whole.is_empty() && fraction.is_empty()
        || !whole.iter().chain(fraction).all(u8::is_ascii_digit)
    {
        return Err(bad());
    }
    exponent -= fraction.len() as i64;
    let all: Vec<u8> = whole.iter().chain(fraction).copied().collect();
    let first = all.iter().position(|&b| b != b'0');
    let Some(first) = first else {
        out.extend_from_slice(if negative { b"-0" } else { b"0" });
        return Ok(());
    };
    let mut digits = &all[first..];
    while digits.last() == Some(&b'0') {
        digits = &digits[..digits.len() - 1];
        exponent += 1;
    }
    let exp10 = digits.len() as i64 - 1 + exponent;
    if negative {
        out.push(b'-');
    }
    if !(-4..6).contains(&exp10) {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp10 < 0 { b'-' } else { b'+' });
        let magnitude = exp10.unsigned_abs();
        if magnitude < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(itoa::Buffer::new().format(magnitude).as_bytes());
    } else if exponent >= 0 {
        out.extend_from_slice(digits);
        out.resize(out.len() + exponent as usize, b'0');
    } else {
        let point = digits.len() as i64 + exponent;
        if point > 0 {
            out.extend_from_slice(&digits[..point as usize]);
            out.push(b'.');
            out.extend_from_slice(&digits[point as usize..]);
        } else {
            out.extend_from_slice(b"0.");
            out.resize(out.len() + (-point) as usize, b'0');
            out.extend_from_slice(digits);
        }
    }
    Ok(())
}

/// Python's `str.isdigit()` of `text` after `lstrip("-")`; non-ASCII text is asked of Python.
fn is_integer_handle(text: &[u8]) -> bool {
    let start = text.iter().position(|&b| b != b'-').unwrap_or(text.len());
    let stripped = &text[start..];
    if stripped.is_ascii() {
        return !stripped.is_empty() && stripped.iter().all(u8::is_ascii_digit);
    }
    let Ok(text) = std::str::from_utf8(stripped) else { return false };
    Python::with_gil(|py| {
        PyString::new(py, text).call_method0("isdigit").and_then(|result| result.extract::<bool>()).unwrap_or(false)
    })
}

impl CsvLayout {
    fn push_quoted(&self, out: &mut Vec<u8>, text: &[u8]) {
        if !self.quote.is_empty() {
            out.extend_from_slice(&self.quote);
            let mut rest = text;
            while let Some(at) = find(rest, &self.quote) {
                out.extend_from_slice(&rest[..at + self.quote.len()]);
                out.extend_from_slice(&self.quote);
                rest = &rest[at + self.quote.len()..];
            }
            out.extend_from_slice(rest);
            out.extend_from_slice(&self.quote);
            return;
        }
        // No quote char: backslash-escape CR, LF, backslash and the delimiter.
        let mut i = 0;
        while i < text.len() {
            if !self.delimiter.is_empty() && text[i..].starts_with(&self.delimiter) {
                out.extend_from_slice(&self.escaped_delimiter);
                i += self.delimiter.len();
                continue;
            }
            match text[i] {
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\\' => out.extend_from_slice(b"\\\\"),
                byte => out.push(byte),
            }
            i += 1;
        }
    }

    fn push_value(&self, out: &mut Vec<u8>, kind: ValueKind, value: Option<&[u8]>, scratch: &mut Vec<u8>) -> Result<(), String> {
        let Some(text) = value else {
            out.extend_from_slice(&self.null);
            return Ok(());
        };
        match kind {
            ValueKind::Bare => out.extend_from_slice(text),
            ValueKind::Float => push_go_float(out, text)?,
            ValueKind::Quoted => self.push_quoted(out, text),
            ValueKind::Binary => {
                // The canonical form is ISO-8859-1 text: one char per byte.
                let mut raw = Vec::with_capacity(text.len());
                for ch in std::str::from_utf8(text).map_err(|_| "a value is not valid UTF-8".to_string())?.chars() {
                    let code = ch as u32;
                    if code > 0xFF {
                        return Err(format!("binary value has the character {ch:?}, not ISO-8859-1"));
                    }
                    raw.push(code as u8);
                }
                scratch.clear();
                if self.hex {
                    for byte in raw {
                        scratch.push(HEX[(byte >> 4) as usize]);
                        scratch.push(HEX[(byte & 0xF) as usize]);
                    }
                } else {
                    push_base64(scratch, &raw);
                }
                self.push_quoted(out, scratch);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn line(
        &self,
        out: &mut Vec<u8>,
        prefix: usize,
        commit_ts: i64,
        is_update: bool,
        values: &[Option<&[u8]>],
        scratch: &mut Vec<u8>,
    ) -> Result<(), String> {
        if values.len() != self.kinds.len() {
            return Err(format!("a row image has {} values but the table {} columns", values.len(), self.kinds.len()));
        }
        out.extend_from_slice(&self.prefixes[prefix]);
        if self.include_commit_ts {
            out.extend_from_slice(&self.delimiter);
            out.extend_from_slice(itoa::Buffer::new().format(commit_ts).as_bytes());
        }
        if self.output_old_value {
            out.extend_from_slice(&self.delimiter);
            out.extend_from_slice(if is_update { b"true" } else { b"false" });
        }
        if self.output_handle_key {
            // kv.Handle.String(): the integer for an int handle, `{v1, v2}` for a common handle.
            out.extend_from_slice(&self.delimiter);
            scratch.clear();
            let parts: Vec<&[u8]> = self.handle_key.iter().map(|&i| values[i].unwrap_or(b"")).collect();
            if parts.len() == 1 && is_integer_handle(parts[0]) {
                scratch.extend_from_slice(parts[0]);
            } else {
                scratch.push(b'{');
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        scratch.extend_from_slice(b", ");
                    }
                    scratch.extend_from_slice(part);
                }
                scratch.push(b'}');
            }
            let key = std::mem::take(scratch);
            self.push_quoted(out, &key);
            *scratch = key;
        }
        for (&kind, &value) in self.kinds.iter().zip(values) {
            out.extend_from_slice(&self.delimiter);
            self.push_value(out, kind, value, scratch)?;
        }
        out.extend_from_slice(&self.terminator);
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() == 1 {
        return haystack.iter().position(|&b| b == needle[0]);
    }
    haystack.windows(needle.len()).position(|window| window == needle)
}

const PREFIX_DELETE: usize = 0;
const PREFIX_INSERT: usize = 1;
const PREFIX_UPDATE: usize = 2;

#[pymethods]
impl CsvLayout {
    /// `prefixes`: the D, I and U line starts; `kinds`: "bare" | "float" | "binary" | "quoted"
    /// per column; `handle_key`: column indexes; `text`: (delimiter, quote, escaped delimiter,
    /// null, terminator); `flags`: (include_commit_ts, output_old_value, output_handle_key, hex).
    #[new]
    fn new(
        name: String,
        prefixes: (String, String, String),
        kinds: Vec<String>,
        handle_key: Vec<usize>,
        text: (String, String, String, String, String),
        flags: (bool, bool, bool, bool),
    ) -> PyResult<Self> {
        let kinds = kinds
            .iter()
            .map(|kind| match kind.as_str() {
                "bare" => Ok(ValueKind::Bare),
                "float" => Ok(ValueKind::Float),
                "binary" => Ok(ValueKind::Binary),
                "quoted" => Ok(ValueKind::Quoted),
                other => Err(PyValueError::new_err(format!("unknown CSV value kind {other:?}"))),
            })
            .collect::<PyResult<Vec<_>>>()?;
        if let Some(&bad) = handle_key.iter().find(|&&i| i >= kinds.len()) {
            return Err(PyValueError::new_err(format!("handle-key column {bad} is past the {} columns", kinds.len())));
        }
        Ok(CsvLayout {
            name,
            prefixes: [prefixes.0.into_bytes(), prefixes.1.into_bytes(), prefixes.2.into_bytes()],
            kinds,
            handle_key,
            delimiter: text.0.into_bytes(),
            quote: text.1.into_bytes(),
            escaped_delimiter: text.2.into_bytes(),
            null: text.3.into_bytes(),
            terminator: text.4.into_bytes(),
            include_commit_ts: flags.0,
            output_old_value: flags.1,
            output_handle_key: flags.2,
            hex: flags.3,
        })
    }

    /// Like `CanalJsonLayout.encode`: one `(commit_ts, bytes)` per run of equal commit-ts.
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        rows: usize,
        commit_ts: pyo3::buffer::PyBuffer<i8>,
        commit_ts_offset: usize,
        ops: pyo3::buffer::PyBuffer<i8>,
        ops_offset: usize,
        before: ImageSpec,
        after: ImageSpec,
    ) -> PyResult<Vec<(i64, Bound<'py, PyBytes>)>> {
        let error = |message: String| PyValueError::new_err(format!("CSV encoding of {}: {message}", self.name));
        let commit_ts = fixed(bytes_of(&commit_ts)?, commit_ts_offset, rows, 8, "commit_ts").map_err(error)?;
        let ops = fixed(bytes_of(&ops)?, ops_offset, rows, 4, "ops").map_err(error)?;
        let before_image = Image::new(&before, rows).map_err(error)?;
        let after_image = Image::new(&after, rows).map_err(error)?;
        // Encoded without the GIL, like CanalJsonLayout.encode.
        let encoded = py
            .allow_threads(|| -> Result<Encoded, String> {
                let mut encoded = Encoded::with_capacity(rows * 128);
                let (mut before, mut after, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
                for row in 0..rows {
                    let ts = i64_at(commit_ts, row);
                    let op = i32_at(ops, row);
                    encoded.start_row(ts);
                    let has_before = before_image.values(row, &mut before)?;
                    let has_after = after_image.values(row, &mut after)?;
                    let result = match (op, has_before, has_after) {
                        (OP_INSERT, false, true) => self.line(&mut encoded.out, PREFIX_INSERT, ts, false, &after, &mut scratch),
                        (OP_DELETE, true, false) => self.line(&mut encoded.out, PREFIX_DELETE, ts, false, &before, &mut scratch),
                        (OP_UPDATE, true, true) if self.output_old_value => self
                            .line(&mut encoded.out, PREFIX_DELETE, ts, true, &before, &mut scratch)
                            .and_then(|()| self.line(&mut encoded.out, PREFIX_INSERT, ts, true, &after, &mut scratch)),
                        (OP_UPDATE, true, true) => {
                            // The before image is not written, but RowChange still requires a valid one.
                            if before.len() != self.kinds.len() {
                                Err(format!("a row image has {} values but the table {} columns", before.len(), self.kinds.len()))
                            } else {
                                self.line(&mut encoded.out, PREFIX_UPDATE, ts, true, &after, &mut scratch)
                            }
                        }
                        (OP_INSERT, ..) => Err("insert row needs before=False after=True".into()),
                        (OP_UPDATE, ..) => Err("update row needs before=True after=True".into()),
                        (OP_DELETE, ..) => Err("delete row needs before=True after=False".into()),
                        _ => Err(format!("op code {op} is not insert/update/delete")),
                    };
                    result?;
                }
                Ok(encoded)
            })
            .map_err(error)?;
        Ok(encoded.into_python(py))
    }
}

//! Canal-JSON rows encoded straight from Arrow buffers (`CanalJsonLayout`).
//!
//! The Python encoder (`sparkcdc.sink.codec.canal_json`) stays the reference: it compiles a
//! table's layout once (the message prefix, quoted column names, Java types, `mysqlType` maps,
//! enum/set members, the handle-key mask and the encoder's options) and per call hands over
//! the buffers of one table's rows (commit-ts, op codes and the `before`/`after` `list<string>`
//! columns of `range_reader.CHANGE_SCHEMA`) through the buffer protocol. The result is one
//! `(commit_ts, bytes)` per transaction (a run of equal commit-ts), byte for byte what
//! `CanalJSONEncoder.encode_rows` writes for the same rows, with no Python object per value.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::arrow_input::{bytes_of, fixed, i32_at, i64_at, Encoded, Image, ImageSpec};

const OP_INSERT: i32 = 0;
const OP_UPDATE: i32 = 1;
const OP_DELETE: i32 = 2;
const LOGICAL_BITS: u32 = 18;

/// The bytes Go's encoders escape (HTML-safe JSON): 0 = as is, else the short escape letter,
/// or `u` for `\u00xx`.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'<' as usize] = b'u';
    table[b'>' as usize] = b'u';
    table[b'&' as usize] = b'u';
    table[0xE2] = b'?'; // maybe U+2028 / U+2029 (E2 80 A8 / E2 80 A9)
    table
};
const HEX: &[u8; 16] = b"0123456789abcdef";

/// A JSON string literal as `gojson.quote` writes it; `text` is valid UTF-8.
fn push_quoted(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        let byte = text[i];
        let escape = ESCAPE[byte as usize];
        if escape == 0 {
            i += 1;
            continue;
        }
        if escape == b'?' {
            if i + 2 < text.len() && text[i + 1] == 0x80 && (text[i + 2] == 0xA8 || text[i + 2] == 0xA9) {
                out.extend_from_slice(&text[start..i]);
                out.extend_from_slice(if text[i + 2] == 0xA8 { b"\\u2028" } else { b"\\u2029" });
                i += 3;
                start = i;
            } else {
                i += 1;
            }
            continue;
        }
        out.extend_from_slice(&text[start..i]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(byte >> 4) as usize]);
            out.push(HEX[(byte & 0xF) as usize]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&text[start..]);
    out.push(b'"');
}

fn push_int<I: itoa::Integer>(out: &mut Vec<u8>, value: I) {
    let mut buffer = itoa::Buffer::new();
    out.extend_from_slice(buffer.format(value).as_bytes());
}

/// What canal-json writes instead of the canonical text (`canal_json.canal_value`).
enum Convert {
    None,
    /// 1-based member index; '' is 0 unless it is a member.
    Enum(HashMap<Vec<u8>, u64>),
    /// Bit mask of the comma-separated members.
    Set(HashMap<Vec<u8>, u32>),
}

struct Column {
    /// `"name"`, JSON-quoted.
    name: Vec<u8>,
    /// java.sql.Types code; for unsigned integers the code when the value is at most `limit`.
    java: i32,
    /// `(limit, promoted)`: an unsigned value above `limit` has Java type `promoted`.
    promotion: Option<(u64, i32)>,
    convert: Convert,
    handle_key: bool,
    /// The column name unquoted, for error messages.
    label: String,
}

/// `(quoted_name, java, promotion_limit or None, promoted, convert, members, handle_key, label)`.
#[derive(FromPyObject)]
struct ColumnSpec(String, i32, Option<u64>, i32, String, Vec<String>, bool, String);

/// Is the unsigned integer text above `limit`? (Python's `int(value) > limit`.)
fn above(text: &[u8], limit: u64) -> Option<bool> {
    if let Some(digits) = text.strip_prefix(b"-") {
        return if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) { Some(false) } else { None };
    }
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let significant = &text[text.iter().position(|&b| b != b'0').unwrap_or(text.len())..];
    if significant.len() > 20 {
        return Some(true);
    }
    let value: u128 = std::str::from_utf8(significant).ok()?.parse().unwrap_or(0);
    Some(value > limit as u128)
}

/// A table's canal-json layout, compiled once per table version by `canal_json._TableLayout`.
#[pyclass(frozen, module = "sparkcdc_native")]
pub struct CanalJsonLayout {
    name: String,
    prefix: Vec<u8>,
    columns: Vec<Column>,
    mysql_types: Vec<u8>,
    handle_key_mysql_types: Vec<u8>,
    terminator: Vec<u8>,
    only_updated: bool,
    delete_only_handle_key: bool,
    tidb_extension: bool,
}

struct Scratch<'a> {
    before: Vec<Option<&'a [u8]>>,
    after: Vec<Option<&'a [u8]>>,
    keep: Vec<bool>,
    old_keep: Vec<bool>,
    number: String,
}

impl CanalJsonLayout {
    fn converted<'v>(&self, column: &Column, value: &'v [u8], number: &'v mut String) -> Result<&'v [u8], String> {
        let not_member = |kind: &str, text: &[u8]| {
            format!("column {}: {:?} is not a member of the {kind}", column.label, String::from_utf8_lossy(text))
        };
        let index = match &column.convert {
            Convert::None => return Ok(value),
            Convert::Enum(members) => match members.get(value) {
                Some(&index) => index,
                None if value.is_empty() => 0,
                None => return Err(not_member("enum", value)),
            },
            Convert::Set(members) => {
                let mut mask = 0u64;
                if !value.is_empty() {
                    for member in value.split(|&b| b == b',') {
                        let position = members.get(member).ok_or_else(|| not_member("set", member))?;
                        mask |= 1u64 << position;
                    }
                }
                mask
            }
        };
        number.clear();
        number.push_str(itoa::Buffer::new().format(index));
        Ok(number.as_bytes())
    }

    fn fill(&self, out: &mut Vec<u8>, values: &[Option<&[u8]>], keep: &[bool], number: &mut String) -> Result<(), String> {
        if self.columns.is_empty() {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        out.extend_from_slice(b"[{");
        let mut first = true;
        for ((column, value), &k) in self.columns.iter().zip(values).zip(keep) {
            if !k {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(&column.name);
            out.push(b':');
            match value {
                None => out.extend_from_slice(b"null"),
                Some(text) => {
                    let text = self.converted(column, text, number)?;
                    push_quoted(out, text);
                }
            }
        }
        out.extend_from_slice(b"}]");
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn row<'a>(
        &self,
        out: &mut Vec<u8>,
        commit_ts: i64,
        op: i32,
        now_ms: i64,
        before: Option<&[Option<&'a [u8]>]>,
        after: Option<&[Option<&'a [u8]>]>,
        scratch_keep: &mut Vec<bool>,
        scratch_old_keep: &mut Vec<bool>,
        number: &mut String,
    ) -> Result<(), String> {
        let (name, image) = match (op, before, after) {
            (OP_INSERT, None, Some(after)) => ("INSERT", after),
            (OP_UPDATE, Some(_), Some(after)) => ("UPDATE", after),
            (OP_DELETE, Some(before), None) => ("DELETE", before),
            (OP_INSERT, ..) => return Err("insert row needs before=False after=True".into()),
            (OP_UPDATE, ..) => return Err("update row needs before=True after=True".into()),
            (OP_DELETE, ..) => return Err("delete row needs before=True after=False".into()),
            _ => return Err(format!("op code {op} is not insert/update/delete")),
        };
        for values in [before, after].into_iter().flatten() {
            if values.len() != self.columns.len() {
                return Err(format!("a row image has {} values but the table {} columns", values.len(), self.columns.len()));
            }
        }
        let only_handle_key = op == OP_DELETE && self.delete_only_handle_key;
        scratch_keep.clear();
        scratch_keep.extend(self.columns.iter().map(|c| !only_handle_key || c.handle_key));
        let keep = &scratch_keep[..];

        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\",\"es\":");
        push_int(out, commit_ts >> LOGICAL_BITS);
        out.extend_from_slice(b",\"ts\":");
        push_int(out, now_ms);
        out.extend_from_slice(b",\"sql\":\"\",\"sqlType\":");
        if keep.iter().any(|&k| k) {
            out.push(b'{');
            let mut first = true;
            for ((column, value), &k) in self.columns.iter().zip(image).zip(keep) {
                if !k {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(&column.name);
                out.push(b':');
                let mut java = column.java;
                if let (Some((limit, promoted)), Some(text)) = (column.promotion, value) {
                    match above(text, limit) {
                        Some(true) => java = promoted,
                        Some(false) => {}
                        None => {
                            return Err(format!(
                                "column {}: {:?} is not an integer",
                                column.label,
                                String::from_utf8_lossy(text)
                            ))
                        }
                    }
                }
                push_int(out, java);
            }
            out.push(b'}');
        } else {
            out.extend_from_slice(b"null");
        }
        out.push(b',');
        out.extend_from_slice(if only_handle_key { &self.handle_key_mysql_types } else { &self.mysql_types });
        out.extend_from_slice(b",\"old\":");
        if op == OP_UPDATE {
            let (before, after) = (before.unwrap(), after.unwrap());
            let old_keep: &[bool] = if self.only_updated {
                scratch_old_keep.clear();
                scratch_old_keep.extend(keep.iter().zip(before).zip(after).map(|((&k, b), a)| k && b != a));
                scratch_old_keep
            } else {
                keep
            };
            self.fill(out, before, old_keep, number)?;
            out.extend_from_slice(b",\"data\":");
            self.fill(out, after, keep, number)?;
        } else {
            out.extend_from_slice(b"null,\"data\":");
            self.fill(out, image, keep, number)?;
        }
        if self.tidb_extension {
            out.extend_from_slice(b",\"_tidb\":{\"commitTs\":");
            push_int(out, commit_ts);
            out.push(b'}');
        }
        out.push(b'}');
        out.extend_from_slice(&self.terminator);
        Ok(())
    }
}

#[pymethods]
impl CanalJsonLayout {
    /// `flags`: (only_updated_columns, delete_only_output_handle_key_columns, enable_tidb_extension).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        prefix: String,
        mysql_types: String,
        handle_key_mysql_types: String,
        terminator: Vec<u8>,
        flags: (bool, bool, bool),
        columns: Vec<ColumnSpec>,
    ) -> PyResult<Self> {
        let mut compiled = Vec::with_capacity(columns.len());
        for spec in columns {
            let convert = match spec.4.as_str() {
                "" => Convert::None,
                "enum" => {
                    let mut members = HashMap::new();
                    for (i, member) in spec.5.iter().enumerate() {
                        members.entry(member.as_bytes().to_vec()).or_insert(i as u64 + 1);
                    }
                    Convert::Enum(members)
                }
                "set" => {
                    if spec.5.len() > 64 {
                        return Err(PyValueError::new_err(format!("set column {} has over 64 members", spec.7)));
                    }
                    let mut members = HashMap::new();
                    for (i, member) in spec.5.iter().enumerate() {
                        members.entry(member.as_bytes().to_vec()).or_insert(i as u32);
                    }
                    Convert::Set(members)
                }
                other => return Err(PyValueError::new_err(format!("unknown value conversion {other:?}"))),
            };
            compiled.push(Column {
                name: spec.0.into_bytes(),
                java: spec.1,
                promotion: spec.2.map(|limit| (limit, spec.3)),
                convert,
                handle_key: spec.6,
                label: spec.7,
            });
        }
        Ok(CanalJsonLayout {
            name,
            prefix: prefix.into_bytes(),
            columns: compiled,
            mysql_types: mysql_types.into_bytes(),
            handle_key_mysql_types: handle_key_mysql_types.into_bytes(),
            terminator,
            only_updated: flags.0,
            delete_only_handle_key: flags.1,
            tidb_extension: flags.2,
        })
    }

    /// Encodes `rows` rows: `commit_ts` (int64) and `ops` (int32 codes 0 insert, 1 update,
    /// 2 delete) buffers read from their offsets, and the two images. Returns one
    /// `(commit_ts, bytes)` per run of equal commit-ts.
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        rows: usize,
        now_ms: i64,
        commit_ts: pyo3::buffer::PyBuffer<i8>,
        commit_ts_offset: usize,
        ops: pyo3::buffer::PyBuffer<i8>,
        ops_offset: usize,
        before: ImageSpec,
        after: ImageSpec,
    ) -> PyResult<Vec<(i64, Bound<'py, PyBytes>)>> {
        let error = |message: String| PyValueError::new_err(format!("canal-json encoding of {}: {message}", self.name));
        let commit_ts = fixed(bytes_of(&commit_ts)?, commit_ts_offset, rows, 8, "commit_ts").map_err(error)?;
        let ops = fixed(bytes_of(&ops)?, ops_offset, rows, 4, "ops").map_err(error)?;
        let before = Image::new(&before, rows).map_err(error)?;
        let after = Image::new(&after, rows).map_err(error)?;

        // The rows are encoded without the GIL (the puller and the sink's threads share this
        // process); the buffers stay alive and unchanged while `before`/`after` hold them.
        let encoded = py
            .allow_threads(|| -> Result<Encoded, String> {
                let mut encoded = Encoded::with_capacity(rows * 256);
                let mut scratch = Scratch {
                    before: Vec::new(),
                    after: Vec::new(),
                    keep: Vec::new(),
                    old_keep: Vec::new(),
                    number: String::new(),
                };
                for row in 0..rows {
                    let ts = i64_at(commit_ts, row);
                    let op = i32_at(ops, row);
                    encoded.start_row(ts);
                    let has_before = before.values(row, &mut scratch.before)?;
                    let has_after = after.values(row, &mut scratch.after)?;
                    self.row(
                        &mut encoded.out,
                        ts,
                        op,
                        now_ms,
                        has_before.then_some(&scratch.before[..]),
                        has_after.then_some(&scratch.after[..]),
                        &mut scratch.keep,
                        &mut scratch.old_keep,
                        &mut scratch.number,
                    )?;
                }
                Ok(encoded)
            })
            .map_err(error)?;
        Ok(encoded.into_python(py))
    }
}

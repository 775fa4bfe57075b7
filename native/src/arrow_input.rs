//! Borrowed views of the Arrow columns the native encoders read (`encode_arrow`'s arguments):
//! buffers handed over through the buffer protocol, with the array offsets of sliced arrays.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `(validity, offset, offsets, value_validity, value_offset, value_offsets, data)`: a
/// `list<string>` array's buffers (validity may be None) and the offsets of it and its values.
#[derive(FromPyObject)]
pub struct ImageSpec(
    Option<PyBuffer<i8>>,
    usize,
    PyBuffer<i8>,
    Option<PyBuffer<i8>>,
    usize,
    PyBuffer<i8>,
    Option<PyBuffer<i8>>,
);

pub fn bytes_of(buffer: &PyBuffer<i8>) -> PyResult<&[u8]> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("Arrow buffers must be contiguous"));
    }
    // The exporting object (a pyarrow.Buffer) stays alive and unchanged while `buffer` is held.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) })
}

fn optional_bytes(buffer: &Option<PyBuffer<i8>>) -> PyResult<Option<&[u8]>> {
    buffer.as_ref().map(bytes_of).transpose()
}

fn bit(bitmap: Option<&[u8]>, index: usize) -> Result<bool, String> {
    match bitmap {
        None => Ok(true),
        Some(bits) => bits
            .get(index / 8)
            .map(|b| b & (1 << (index % 8)) != 0)
            .ok_or_else(|| "validity bitmap too short".to_string()),
    }
}

fn int32_at(buffer: &[u8], index: usize) -> Result<usize, String> {
    let raw = buffer.get(index * 4..index * 4 + 4).ok_or_else(|| "offsets buffer too short".to_string())?;
    let value = i32::from_le_bytes(raw.try_into().unwrap());
    usize::try_from(value).map_err(|_| "negative offset".to_string())
}

/// A `list<string>` column over borrowed Arrow buffers.
pub struct Image<'a> {
    validity: Option<&'a [u8]>,
    offset: usize,
    offsets: &'a [u8],
    value_validity: Option<&'a [u8]>,
    value_offset: usize,
    value_offsets: &'a [u8],
    data: &'a [u8],
}

impl<'a> Image<'a> {
    pub fn new(spec: &'a ImageSpec, rows: usize) -> Result<Image<'a>, String> {
        let py_err = |e: PyErr| e.to_string();
        let image = Image {
            validity: optional_bytes(&spec.0).map_err(py_err)?,
            offset: spec.1,
            offsets: bytes_of(&spec.2).map_err(py_err)?,
            value_validity: optional_bytes(&spec.3).map_err(py_err)?,
            value_offset: spec.4,
            value_offsets: bytes_of(&spec.5).map_err(py_err)?,
            data: optional_bytes(&spec.6).map_err(py_err)?.unwrap_or(&[]),
        };
        if rows > 0 {
            // Every value this call can reach is valid UTF-8 (checked once, not per value).
            let first = int32_at(image.offsets, image.offset)?;
            let last = int32_at(image.offsets, image.offset + rows)?;
            if last < first {
                return Err("list offsets decrease".into());
            }
            let start = int32_at(image.value_offsets, image.value_offset + first)?;
            let end = int32_at(image.value_offsets, image.value_offset + last)?;
            let text = image.data.get(start..end).ok_or("string data shorter than its offsets")?;
            if std::str::from_utf8(text).is_err() {
                return Err("a value is not valid UTF-8".into());
            }
        }
        Ok(image)
    }

    /// The value indexes of row `row`'s list, or None for a null list.
    fn list(&self, row: usize) -> Result<Option<(usize, usize)>, String> {
        let index = self.offset + row;
        if !bit(self.validity, index)? {
            return Ok(None);
        }
        let (start, end) = (int32_at(self.offsets, index)?, int32_at(self.offsets, index + 1)?);
        if end < start {
            return Err("list offsets decrease".into());
        }
        Ok(Some((start, end)))
    }

    fn value(&self, index: usize) -> Result<Option<&'a [u8]>, String> {
        let index = self.value_offset + index;
        if !bit(self.value_validity, index)? {
            return Ok(None);
        }
        let (start, end) = (int32_at(self.value_offsets, index)?, int32_at(self.value_offsets, index + 1)?);
        self.data.get(start..end).map(Some).ok_or_else(|| "string offsets out of range".to_string())
    }

    pub fn values(&self, row: usize, into: &mut Vec<Option<&'a [u8]>>) -> Result<bool, String> {
        into.clear();
        match self.list(row)? {
            None => Ok(false),
            Some((start, end)) => {
                for index in start..end {
                    into.push(self.value(index)?);
                }
                Ok(true)
            }
        }
    }
}

/// Rows `offset..offset + rows` of a fixed-width little-endian buffer of `width`-byte values.
pub fn fixed<'a>(buffer: &'a [u8], offset: usize, rows: usize, width: usize, what: &str) -> Result<&'a [u8], String> {
    buffer.get(offset * width..(offset + rows) * width).ok_or_else(|| format!("{what} buffer too short"))
}

pub fn i64_at(buffer: &[u8], row: usize) -> i64 {
    i64::from_le_bytes(buffer[row * 8..row * 8 + 8].try_into().unwrap())
}

pub fn i32_at(buffer: &[u8], row: usize) -> i32 {
    i32::from_le_bytes(buffer[row * 4..row * 4 + 4].try_into().unwrap())
}

/// Encoded rows and where each transaction (a run of equal commit-ts) starts in them.
pub struct Encoded {
    pub out: Vec<u8>,
    pub cuts: Vec<(i64, usize)>,
}

impl Encoded {
    pub fn with_capacity(bytes: usize) -> Self {
        Encoded { out: Vec::with_capacity(bytes), cuts: Vec::new() }
    }

    /// Marks the start of a row of `commit_ts`; a new commit-ts starts a transaction.
    pub fn start_row(&mut self, commit_ts: i64) {
        if self.cuts.last().map(|&(last, _)| last) != Some(commit_ts) {
            self.cuts.push((commit_ts, self.out.len()));
        }
    }

    /// One `(commit_ts, bytes)` per transaction.
    pub fn into_python(self, py: Python<'_>) -> Vec<(i64, Bound<'_, PyBytes>)> {
        let mut result = Vec::with_capacity(self.cuts.len());
        for (i, &(ts, start)) in self.cuts.iter().enumerate() {
            let end = self.cuts.get(i + 1).map_or(self.out.len(), |&(_, next)| next);
            result.push((ts, PyBytes::new(py, &self.out[start..end])));
        }
        result
    }
}

//! A text-protocol result set read straight from the socket: the initial snapshot's chunk reads.
//!
//! Python (`sparkcdc.upstream.snapshot_reader`) opens the connection with pymysql, starts the
//! consistent-snapshot transaction, sends the chunk's SELECT as a COM_QUERY on its own socket and
//! hands over the file descriptor. This module frames the answer (column count, column
//! definitions, EOF, rows, EOF or ERR: pymysql asks for no CLIENT_DEPRECATE_EOF) and appends each
//! row's values to one `list<string>` image column, the `after` of the change batch, without a
//! Python object per value. Values are the server's text, checked to be UTF-8, except columns
//! whose canonical text differs from it (`MODE_LATIN1`: binary strings, one char per byte as the
//! binlog decoder gives them; `MODE_BIT`: BIT's big-endian bytes as an unsigned integer). Columns
//! that need Python's formatting (FLOAT, DOUBLE) keep the table on pymysql's path.
//! After the last row (EOF) or an ERR packet the connection is idle again and back with pymysql.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::time::Duration;

use crate::binlog::{borrowed_stream, Packets};
use crate::ImageColumn;

const MODE_TEXT: u8 = 0;
const MODE_LATIN1: u8 = 1;
const MODE_BIT: u8 = 2;

fn malformed(message: String) -> PyErr {
    PyValueError::new_err(format!("malformed result set from the upstream: {message}"))
}

/// A length-encoded integer at `*pos`; None for the NULL marker (0xFB).
fn lenenc(p: &[u8], pos: &mut usize) -> Result<Option<u64>, String> {
    let first = *p.get(*pos).ok_or("a row ends inside a value")?;
    *pos += 1;
    let width = match first {
        0xFB => return Ok(None),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        0xFF => return Err("0xFF is no length".into()),
        small => return Ok(Some(small as u64)),
    };
    let bytes = p.get(*pos..*pos + width).ok_or("a row ends inside a length")?;
    *pos += width;
    Ok(Some(bytes.iter().rev().fold(0u64, |acc, b| acc << 8 | *b as u64)))
}

fn is_eof(p: &[u8]) -> bool {
    !p.is_empty() && p[0] == 0xFE && p.len() < 9
}

/// One SELECT's rows as `list<string>` images, `batch_rows` at a time.
#[pyclass(unsendable, module = "sparkcdc_native")]
pub struct TextRowReader {
    packets: Packets,
    modes: Vec<u8>,
    after: ImageColumn,
    rows: usize,
    /// 0: the header is next; 1: rows; 2: the result set ended.
    state: u8,
    scratch: Vec<u8>,
}

impl TextRowReader {
    fn read_header(&mut self, py: Python<'_>) -> PyResult<Option<Vec<u8>>> {
        let which = self.packets.next(py)?;
        let p = self.packets.payload(&which);
        if !p.is_empty() && p[0] == 0xFF {
            return Ok(Some(p.to_vec()));
        }
        let mut pos = 0;
        let count = lenenc(p, &mut pos).map_err(malformed)?.unwrap_or(0) as usize;
        if count != self.modes.len() {
            return Err(malformed(format!("{count} columns where {} were asked for", self.modes.len())));
        }
        for _ in 0..count {
            self.packets.next(py)?;
        }
        let which = self.packets.next(py)?;
        if !is_eof(self.packets.payload(&which)) {
            return Err(malformed("no EOF after the column definitions".into()));
        }
        self.state = 1;
        Ok(None)
    }

    fn append_row(after: &mut ImageColumn, modes: &[u8], scratch: &mut Vec<u8>, p: &[u8]) -> Result<(), String> {
        let mut pos = 0;
        for mode in modes {
            let Some(length) = lenenc(p, &mut pos)? else {
                after.push_null_value();
                continue;
            };
            let end = pos.checked_add(length as usize).filter(|end| *end <= p.len()).ok_or("a value runs past its row")?;
            let value = &p[pos..end];
            pos = end;
            match *mode {
                MODE_TEXT => {
                    std::str::from_utf8(value).map_err(|_| "a text value is not UTF-8".to_string())?;
                    after.push_value(value);
                }
                MODE_LATIN1 => {
                    scratch.clear();
                    for &b in value {
                        if b < 0x80 {
                            scratch.push(b);
                        } else {
                            scratch.extend_from_slice(&[0xC0 | (b >> 6), 0x80 | (b & 0x3F)]);
                        }
                    }
                    after.push_value(scratch);
                }
                MODE_BIT => {
                    if value.len() > 8 {
                        return Err("a BIT value over 64 bits".into());
                    }
                    let number = value.iter().fold(0u64, |acc, b| acc << 8 | *b as u64);
                    let mut text = itoa::Buffer::new();
                    after.push_value(text.format(number).as_bytes());
                }
                other => return Err(format!("unknown column mode {other}")),
            }
        }
        if pos != p.len() {
            return Err(format!("a row has {} bytes past its {} values", p.len() - pos, modes.len()));
        }
        after.end_list();
        Ok(())
    }
}

#[pymethods]
impl TextRowReader {
    /// `fd`: the connection's socket, its COM_QUERY sent; `modes`: one per selected column
    /// (TEXT_MODE_TEXT, TEXT_MODE_LATIN1, TEXT_MODE_BIT); `read_timeout`: seconds, 0 for none.
    #[new]
    fn new(fd: i32, modes: Vec<u8>, read_timeout: f64) -> PyResult<Self> {
        let timeout = if read_timeout > 0.0 { Some(Duration::from_secs_f64(read_timeout)) } else { None };
        Ok(TextRowReader {
            packets: Packets::new(borrowed_stream(fd, timeout)?),
            modes,
            after: ImageColumn::new(),
            rows: 0,
            state: 0,
            scratch: Vec::new(),
        })
    }

    /// Up to `batch_rows` rows: `(rows, image buffers)` (`ChangeBatchBuilder.finish`'s image
    /// tuple), None once the result set has ended, or the ERR packet's bytes when the server
    /// answered with an error (the connection is idle again then too).
    fn read<'py>(&mut self, py: Python<'py>, batch_rows: usize) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.state == 0 {
            if let Some(error) = self.read_header(py)? {
                self.state = 2;
                finish_reading(&mut self.packets)?;
                return Ok(Some(PyBytes::new(py, &error).into_any()));
            }
        }
        // Framing and decoding need no Python: the driver's other chunk reads and its writer run
        // meanwhile (pipeline/stream_reader.py: read_chunks_in_driver).
        let (packets, after, modes, scratch) = (&mut self.packets, &mut self.after, &self.modes, &mut self.scratch);
        let (state, rows) = (&mut self.state, &mut self.rows);
        let answered = py.allow_threads(|| -> PyResult<Option<Vec<u8>>> {
            while *state == 1 && *rows < batch_rows {
                let which = packets.next_released()?;
                let p = packets.payload(&which);
                if is_eof(p) {
                    *state = 2;
                    finish_reading(packets)?;
                    break;
                }
                if !p.is_empty() && p[0] == 0xFF {
                    let error = p.to_vec();
                    *state = 2;
                    finish_reading(packets)?;
                    return Ok(Some(error));
                }
                if let Err(message) = TextRowReader::append_row(after, modes, scratch, p) {
                    *state = 2;
                    return Err(malformed(message));
                }
                *rows += 1;
            }
            Ok(None)
        })?;
        if let Some(error) = answered {
            return Ok(Some(PyBytes::new(py, &error).into_any()));
        }
        if self.rows == 0 {
            return Ok(None);
        }
        let result = PyTuple::new(py, [self.rows.into_pyobject(py)?.into_any(), self.after.to_python(py)?.into_any()])?;
        self.after = ImageColumn::new();
        self.rows = 0;
        Ok(Some(result.into_any()))
    }
}

/// The answer is read to its end: nothing may be left buffered, and the socket goes back to
/// pymysql without our read timeout.
fn finish_reading(packets: &mut Packets) -> PyResult<()> {
    packets.clear_timeout();
    if packets.buffered() != 0 {
        return Err(malformed(format!("{} bytes after the result set's end", packets.buffered())));
    }
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TextRowReader>()?;
    m.add("TEXT_MODE_TEXT", MODE_TEXT)?;
    m.add("TEXT_MODE_LATIN1", MODE_LATIN1)?;
    m.add("TEXT_MODE_BIT", MODE_BIT)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{lenenc, TextRowReader};
    use crate::ImageColumn;

    #[test]
    fn lengths_and_nulls() {
        let mut pos = 0;
        assert_eq!(lenenc(&[0xFB], &mut pos), Ok(None));
        pos = 0;
        assert_eq!(lenenc(&[0xFC, 0x01, 0x02], &mut pos), Ok(Some(0x0201)));
        assert_eq!(pos, 3);
        pos = 0;
        assert!(lenenc(&[0xFD, 0x01], &mut pos).is_err());
    }

    #[test]
    fn rows_of_every_mode() {
        let mut after = ImageColumn::new();
        let mut scratch = Vec::new();
        // 'ab', NULL, 0xE9 (latin1 é), BIT 0x0102
        let row = [2, b'a', b'b', 0xFB, 1, 0xE9, 2, 0x01, 0x02];
        TextRowReader::append_row(&mut after, &[0, 0, 1, 2], &mut scratch, &row).unwrap();
        assert_eq!(after.data, "abé258".as_bytes());
        assert!(TextRowReader::append_row(&mut after, &[0, 0], &mut scratch, &row).is_err());
        assert!(TextRowReader::append_row(&mut after, &[0], &mut scratch, &[1, 0xFF]).is_err());
    }
}

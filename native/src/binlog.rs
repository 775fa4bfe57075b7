//! The native binlog framer: reads a replication stream's packets straight from the socket and
//! decodes one transaction-aligned range into a `ChangeBatchBuilder`.
//!
//! Python opens the replication connection (auth, checksum negotiation, COM_BINLOG_DUMP) with
//! pymysql and hands over the socket's file descriptor (`sparkcdc.upstream.range_reader`). From
//! there this module frames MySQL packets (payloads over 16 MB span several packets), the event
//! header and the CRC32 trailer, follows ROTATE/FORMAT_DESCRIPTION/TABLE_MAP, counts transactions
//! by their GTID events and appends ROWS events with the table's compiled `RowLayout` — the
//! mysql-replication reading loop of `range_reader._row_events`, event for event, without a
//! Python object per event. Python is called back (a status from `read`) only for what it
//! decides: a TABLE_MAP not seen before (to compile its layout), a table on the pure decoding
//! path, an event the range cannot hold, a server error, and each full batch.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::{ChangeBatchBuilder, RowLayout};

/// `read` results: what the caller does next.
const DONE: u8 = 0; // the range's end is reached
const BATCH: u8 = 1; // `batch_rows` rows or more are buffered: call `finish`
const TABLE_MAP: u8 = 2; // `pending()` = (table_id, TABLE_MAP packet or None): call `resolve`
const PURE_ROWS: u8 = 3; // `pending()` = (table_id, ROWS packet, commit_ts, seq): add its rows, call `pure_done`
const UNSUPPORTED: u8 = 4; // `pending()` = (type, packet) of an event the range must not skip
const SERVER_ERROR: u8 = 5; // `pending()` = (0, ERR packet)
const TOO_MANY_TRANSACTIONS: u8 = 6; // a GTID event past the indexed transactions
const BINLOG_ENDED: u8 = 7; // the server sent EOF (non-blocking dump) before the range's end

const MAX_PACKET: usize = 0xFF_FFFF;
const HEADER: usize = 19;
const CHECKSUM: usize = 4;

const QUERY: u8 = 2;
const ROTATE: u8 = 4;
const FORMAT_DESCRIPTION: u8 = 15;
const XID: u8 = 16;
const TABLE_MAP_EVENT: u8 = 19;
const GTID: u8 = 33;
const XA_PREPARE: u8 = 38;
const MARIADB_GTID: u8 = 162;

/// Event types mysql-replication has a class for; any other type (and ANONYMOUS_GTID, 34) is
/// its `NotImplementedEvent`, which a range refuses to skip.
fn has_event_class(event_type: u8) -> bool {
    matches!(event_type, 2..=5 | 13..=19 | 23..=25 | 27 | 29..=33 | 35 | 38 | 39 | 160..=164)
}

fn is_rows(event_type: u8) -> bool {
    matches!(event_type, 23..=25 | 30..=32)
}

fn known_post_header(event_type: u8) -> usize {
    if event_type >= 30 { 10 } else { 8 }
}

// CRC-32 (IEEE), slice-by-8.
const fn crc_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut t = 1;
    while t < 8 {
        let mut i = 0;
        while i < 256 {
            let previous = tables[t - 1][i];
            tables[t][i] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            i += 1;
        }
        t += 1;
    }
    tables
}

static CRC_TABLES: [[u32; 256]; 8] = crc_tables();

fn crc32(data: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut crc = !0u32;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let low = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = t[7][(low & 0xFF) as usize]
            ^ t[6][((low >> 8) & 0xFF) as usize]
            ^ t[5][((low >> 16) & 0xFF) as usize]
            ^ t[4][(low >> 24) as usize]
            ^ t[3][c[4] as usize]
            ^ t[2][c[5] as usize]
            ^ t[1][c[6] as usize]
            ^ t[0][c[7] as usize];
    }
    for &byte in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ byte as u32) & 0xFF) as usize];
    }
    !crc
}

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64)
}

fn malformed(message: String) -> PyErr {
    PyValueError::new_err(format!("malformed binlog stream: {message}"))
}

/// MySQL packets from a socket someone else owns (pymysql's): never closed here.
pub(crate) struct Packets {
    stream: ManuallyDrop<TcpStream>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// A payload spread over several packets, joined.
    joined: Vec<u8>,
}

pub(crate) enum Payload {
    Buffered(usize, usize),
    Joined,
}

impl Packets {
    pub(crate) fn new(stream: ManuallyDrop<TcpStream>) -> Self {
        Packets { stream, buf: vec![0; 1 << 18], start: 0, end: 0, joined: Vec::new() }
    }

    /// Makes at least `need` unread bytes available, reading with the GIL released (`py`: the
    /// caller holds it; None: the caller has released it already).
    fn fill(&mut self, py: Option<Python<'_>>, need: usize) -> PyResult<()> {
        if self.end - self.start >= need {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < need {
            let size = need.max(self.buf.len() * 2);
            self.buf.resize(size, 0);
        }
        while self.end < need {
            let stream: &mut TcpStream = &mut self.stream;
            let target = &mut self.buf[self.end..];
            let mut read_all = || loop {
                match stream.read(target) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            let read = match py {
                Some(py) => py.allow_threads(read_all),
                None => read_all(),
            };
            match read {
                Ok(0) => return Err(PyOSError::new_err("the upstream closed the connection")),
                Ok(n) => self.end += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(PyTimeoutError::new_err(
                        "no data from the upstream within the read timeout",
                    ))
                }
                Err(e) => return Err(PyOSError::new_err(format!("reading from the upstream: {e}"))),
            }
            // Let a Ctrl-C or a task kill through between reads (a caller without the GIL
            // returns to Python at every batch, where it is checked).
            if let Some(py) = py {
                py.check_signals()?;
            }
        }
        Ok(())
    }

    /// The next payload, joined when it spans packets; sequence numbers are not checked
    /// (TCP keeps the order, and the server sends nothing else on this connection).
    pub(crate) fn next(&mut self, py: Python<'_>) -> PyResult<Payload> {
        self.next_in(Some(py))
    }

    /// `next` for a caller that has released the GIL.
    pub(crate) fn next_released(&mut self) -> PyResult<Payload> {
        self.next_in(None)
    }

    fn next_in(&mut self, py: Option<Python<'_>>) -> PyResult<Payload> {
        let mut joined = false;
        loop {
            self.fill(py, 4)?;
            let h = &self.buf[self.start..self.start + 4];
            let length = h[0] as usize | (h[1] as usize) << 8 | (h[2] as usize) << 16;
            self.fill(py, 4 + length)?;
            let (from, to) = (self.start + 4, self.start + 4 + length);
            self.start = to;
            if !joined && length < MAX_PACKET {
                return Ok(Payload::Buffered(from, to));
            }
            if !joined {
                self.joined.clear();
                joined = true;
            }
            self.joined.extend_from_slice(&self.buf[from..to]);
            if length < MAX_PACKET {
                return Ok(Payload::Joined);
            }
        }
    }

    /// Bytes read from the socket and not yet framed.
    pub(crate) fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Takes the read timeout off the socket again, before it goes back to its owner.
    pub(crate) fn clear_timeout(&self) {
        let _ = self.stream.set_read_timeout(None);
    }

    pub(crate) fn payload(&self, which: &Payload) -> &[u8] {
        match which {
            Payload::Buffered(from, to) => &self.buf[*from..*to],
            Payload::Joined => &self.joined,
        }
    }
}

enum Resolution {
    Unresolved,
    Skip,
    Native(Py<RowLayout>),
    Pure,
}

struct MappedTable {
    /// The TABLE_MAP event's body after the table id (None for a map given by `seed_table`).
    body: Option<Vec<u8>>,
    /// The whole TABLE_MAP packet, for Python to parse when it resolves the table.
    packet: Option<Vec<u8>>,
    schema: String,
    table: String,
    resolution: Resolution,
}

struct Pending {
    status: u8,
    table_id: u64,
    event_type: u8,
    packet: Vec<u8>,
}

/// Everything but the socket, so that a payload borrowed from `Packets` can be processed.
struct RangeState {
    checksum: bool,
    file: String,
    file_number: i64,
    pos: u64,
    end_key: (i64, i64),
    post_header: Vec<u8>,
    format_description: Option<Vec<u8>>,
    tables: HashMap<u64, MappedTable>,
    commit_ts: Vec<i64>,
    txn: i64,
    seq_txn: i64,
    seq: i64,
    first_seq: i64,
    builder: ChangeBatchBuilder,
    table_codes: HashMap<(String, String), i32>,
    table_names: Vec<(String, String)>,
    pending: Option<Pending>,
    /// The event that made `read` return (a pure-path event) is done; the end check follows.
    event_open: bool,
    done: bool,
    events: u64,
}

fn file_number(name: &str) -> i64 {
    name.rsplit('.').next().and_then(|n| n.parse().ok()).unwrap_or(-1)
}

impl RangeState {
    fn table_code(&mut self, schema: &str, table: &str) -> i32 {
        if let Some(code) = self.table_codes.get(&(schema.to_owned(), table.to_owned())) {
            return *code;
        }
        let code = self.table_names.len() as i32;
        self.table_names.push((schema.to_owned(), table.to_owned()));
        self.table_codes.insert((schema.to_owned(), table.to_owned()), code);
        code
    }

    /// Processes one payload; Some(status) when `read` must return to Python.
    fn process(&mut self, p: &[u8]) -> PyResult<Option<u8>> {
        match p.first() {
            Some(0x00) => {}
            Some(0xFF) => {
                self.pending = Some(Pending { status: SERVER_ERROR, table_id: 0, event_type: 0, packet: p.to_vec() });
                return Ok(Some(SERVER_ERROR));
            }
            Some(0xFE) if p.len() < 9 => return Ok(Some(BINLOG_ENDED)),
            _ => return Ok(None), // as mysql-replication: anything but OK is skipped
        }
        if p.len() < 1 + HEADER {
            return Err(malformed(format!("a {}-byte event packet is shorter than an event header", p.len())));
        }
        self.events += 1;
        let timestamp = le(&p[1..5]);
        let event_type = p[5];
        let event_size = le(&p[10..14]) as usize;
        let log_pos = le(&p[14..18]);
        if event_size + 1 != p.len() {
            return Err(malformed(format!(
                "event type {event_type} at {}:{} declares {event_size} bytes but its packet holds {}",
                self.file,
                self.pos,
                p.len() - 1
            )));
        }
        let body_end = if self.checksum {
            if event_size < HEADER + CHECKSUM {
                return Err(malformed(format!("event type {event_type} is too short for its checksum")));
            }
            let end = p.len() - CHECKSUM;
            let expected = le(&p[end..]) as u32;
            if crc32(&p[1..end]) != expected {
                return Err(malformed(format!(
                    "CRC32 mismatch in event type {event_type} ending at {}:{log_pos}",
                    self.file
                )));
            }
            end
        } else {
            p.len()
        };
        let body = &p[1 + HEADER..body_end];

        if event_type == ROTATE {
            if body.len() < 8 {
                return Err(malformed("ROTATE event shorter than its position".into()));
            }
            self.pos = le(&body[0..8]);
            self.file = String::from_utf8_lossy(&body[8..]).into_owned();
            self.file_number = file_number(&self.file);
            if timestamp != 0 {
                // A real rotation may follow a restart, which reuses table ids (as mysql-replication).
                self.tables.clear();
            }
        } else if log_pos != 0 {
            self.pos = log_pos;
        }

        let delivered = match event_type {
            FORMAT_DESCRIPTION => {
                self.read_format_description(p, body)?;
                false
            }
            TABLE_MAP_EVENT => {
                self.read_table_map(p, body)?;
                false
            }
            t if is_rows(t) => body.len() >= 6 && self.tables.contains_key(&le(&body[0..6])),
            MARIADB_GTID | GTID | QUERY | XID | ROTATE | XA_PREPARE => true,
            t => !has_event_class(t) || t == 34,
        };
        if !delivered {
            return Ok(None);
        }
        if event_type != ROTATE {
            // A piece ends where the next begins, maybe right after a TABLE_MAP.
            let start = log_pos as i64 - event_size as i64;
            if (self.file_number, start) >= self.end_key {
                self.done = true;
                return Ok(Some(DONE));
            }
        }
        match event_type {
            MARIADB_GTID | GTID => {
                self.txn += 1;
                if self.txn >= self.commit_ts.len() as i64 {
                    return Ok(Some(TOO_MANY_TRANSACTIONS));
                }
            }
            t if is_rows(t) => {
                if let Some(status) = self.rows_event(p, event_type, body_end)? {
                    return Ok(Some(status));
                }
            }
            QUERY | XID | ROTATE => {}
            t => {
                self.pending = Some(Pending { status: UNSUPPORTED, table_id: 0, event_type: t, packet: p.to_vec() });
                return Ok(Some(UNSUPPORTED));
            }
        }
        Ok(None)
    }

    fn read_format_description(&mut self, p: &[u8], body: &[u8]) -> PyResult<()> {
        const FIXED: usize = 2 + 50 + 4 + 1;
        if body.len() < FIXED {
            return Err(malformed("FORMAT_DESCRIPTION event shorter than its fixed part".into()));
        }
        let version = String::from_utf8_lossy(&body[2..52]);
        let numbers: Vec<u64> = version
            .trim_end_matches('\0')
            .split('-')
            .next()
            .unwrap_or("")
            .split('.')
            .map(|n| n.parse().unwrap_or(0))
            .collect();
        let major = numbers.first().copied().unwrap_or(0);
        let minor = numbers.get(1).copied().unwrap_or(0);
        let checksum_aware = (major, minor) >= (5, 6) || major >= 10;
        // As mysql-replication: the algorithm byte, and a checksum it was not told about.
        let trailer = if checksum_aware { 1 + if self.checksum { 0 } else { CHECKSUM } } else { 0 };
        let lengths = body.len().checked_sub(FIXED + trailer).ok_or_else(|| {
            malformed("FORMAT_DESCRIPTION event too short for its checksum metadata".into())
        })?;
        self.post_header = body[FIXED..FIXED + lengths].to_vec();
        self.format_description = Some(p.to_vec());
        Ok(())
    }

    fn read_table_map(&mut self, p: &[u8], body: &[u8]) -> PyResult<()> {
        if body.len() < 8 + 2 {
            return Err(malformed("TABLE_MAP event shorter than its post-header".into()));
        }
        let table_id = le(&body[0..6]);
        let rest = &body[6..];
        if let Some(known) = self.tables.get(&table_id) {
            if known.body.as_deref() == Some(rest) {
                return Ok(()); // the same map again (every transaction repeats it)
            }
        }
        // flags (2), schema (length, name, NUL), table (length, name, NUL)
        let name = |at: usize| -> PyResult<(String, usize)> {
            let length = *rest.get(at).ok_or_else(|| malformed("TABLE_MAP event cut in its names".into()))? as usize;
            let text = rest
                .get(at + 1..at + 1 + length)
                .ok_or_else(|| malformed("TABLE_MAP event cut in its names".into()))?;
            Ok((String::from_utf8_lossy(text).into_owned(), at + 1 + length + 1))
        };
        let (schema, next) = name(2)?;
        let (table, _) = name(next)?;
        self.tables.insert(
            table_id,
            MappedTable {
                body: Some(rest.to_vec()),
                packet: Some(p.to_vec()),
                schema,
                table,
                resolution: Resolution::Unresolved,
            },
        );
        Ok(())
    }

    /// Appends a ROWS event of a mapped table, or asks Python for what only it can do.
    fn rows_event(&mut self, p: &[u8], event_type: u8, body_end: usize) -> PyResult<Option<u8>> {
        let table_id = le(&p[1 + HEADER..1 + HEADER + 6]);
        let mapped = self.tables.get(&table_id).expect("rows_event is called for mapped tables only");
        let native = match &mapped.resolution {
            Resolution::Skip => return Ok(None),
            Resolution::Unresolved => {
                self.pending = Some(Pending { status: TABLE_MAP, table_id, event_type, packet: p.to_vec() });
                return Ok(Some(TABLE_MAP));
            }
            Resolution::Pure => false,
            Resolution::Native(_) => true,
        };
        if self.txn < 0 {
            return Err(malformed(format!(
                "a ROWS event at {}:{} comes before its transaction's GTID",
                self.file, self.pos
            )));
        }
        if self.txn != self.seq_txn {
            self.seq_txn = self.txn;
            self.seq = if self.txn == 0 { self.first_seq } else { 0 };
        }
        if !native {
            self.pending = Some(Pending { status: PURE_ROWS, table_id, event_type, packet: p.to_vec() });
            return Ok(Some(PURE_ROWS));
        }
        let known = known_post_header(event_type);
        let declared = self.post_header.get(event_type as usize - 1).map_or(known, |&n| n as usize);
        if declared < known {
            return Err(malformed(format!(
                "event type {event_type} declares post-header length {declared}, shorter than {known}"
            )));
        }
        let (schema, table) = (mapped.schema.clone(), mapped.table.clone());
        let code = self.table_code(&schema, &table);
        let Resolution::Native(layout) = &self.tables[&table_id].resolution else {
            unreachable!("checked above");
        };
        let layout = layout.get(); // frozen and Sync: no GIL needed
        let body = layout.body(event_type, p, 1 + HEADER, Some(body_end), declared - known)?;
        let commit_ts = self.commit_ts[self.txn as usize];
        let added = self.builder.append_event(layout, body, commit_ts, self.seq, code)?;
        self.seq += added as i64;
        Ok(None)
    }

    /// After an event: the range's end, or a full batch.
    fn end_of_event(&mut self, batch_rows: usize) -> Option<u8> {
        self.event_open = false;
        if (self.file_number, self.pos as i64) >= self.end_key {
            self.done = true;
        }
        if self.builder.len() >= batch_rows {
            return Some(BATCH);
        }
        if self.done {
            return Some(DONE);
        }
        None
    }
}

/// Reads one range from a replication connection whose COM_BINLOG_DUMP has been sent.
///
/// `fd` stays owned by the caller (it is never closed here). `end_file_number`/`end_pos` is
/// the range's end; `commit_ts` one per transaction; `first_txn` is -1 (the range starts at a
/// GTID) or 0 (a piece that starts inside its transaction); `first_seq` the seq of the range's
/// first row.
#[pyclass(module = "sparkcdc_native")]
pub struct BinlogRangeReader {
    packets: Packets,
    state: RangeState,
    read_timeout: Option<Duration>,
}

pub(crate) fn borrowed_stream(fd: i32, timeout: Option<Duration>) -> PyResult<ManuallyDrop<TcpStream>> {
    if fd < 0 {
        return Err(PyValueError::new_err(format!("file descriptor {fd} is not open")));
    }
    let stream = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
    stream
        .set_read_timeout(timeout)
        .map_err(|e| PyOSError::new_err(format!("setting the read timeout: {e}")))?;
    Ok(stream)
}

#[pymethods]
impl BinlogRangeReader {
    #[new]
    #[pyo3(signature = (
        fd, checksum, read_timeout, start_file, start_pos, end_file_number, end_pos, commit_ts, first_txn, first_seq
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        fd: i32,
        checksum: bool,
        read_timeout: f64,
        start_file: String,
        start_pos: u64,
        end_file_number: i64,
        end_pos: i64,
        commit_ts: Vec<i64>,
        first_txn: i64,
        first_seq: i64,
    ) -> PyResult<Self> {
        let timeout = if read_timeout > 0.0 { Some(Duration::from_secs_f64(read_timeout)) } else { None };
        let stream = borrowed_stream(fd, timeout)?;
        let number = file_number(&start_file);
        Ok(BinlogRangeReader {
            packets: Packets::new(stream),
            state: RangeState {
                checksum,
                file: start_file,
                file_number: number,
                pos: start_pos,
                end_key: (end_file_number, end_pos),
                post_header: Vec::new(),
                format_description: None,
                tables: HashMap::new(),
                commit_ts,
                txn: first_txn,
                seq_txn: -1,
                seq: 0,
                first_seq,
                builder: ChangeBatchBuilder::new(),
                table_codes: HashMap::new(),
                table_names: Vec::new(),
                pending: None,
                event_open: false,
                done: false,
                events: 0,
            },
            read_timeout: timeout,
        })
    }

    /// Goes on reading from a new connection whose dump starts at (`file`, `pos`), after the
    /// previous one was lost: what was read so far (tables, transactions, rows) is kept, bytes of
    /// a partly received event are dropped.
    fn reconnect(&mut self, fd: i32) -> PyResult<()> {
        self.packets.stream = borrowed_stream(fd, self.read_timeout)?;
        self.packets.start = 0;
        self.packets.end = 0;
        self.packets.joined.clear();
        Ok(())
    }

    /// Reads on until Python has something to do; returns the status (module constants).
    fn read(&mut self, py: Python<'_>, batch_rows: usize) -> PyResult<u8> {
        let state = &mut self.state;
        if let Some(pending) = state.pending.take() {
            match pending.status {
                TABLE_MAP => {
                    let body_end = pending.packet.len() - if state.checksum { CHECKSUM } else { 0 };
                    if let Some(status) = state.rows_event(&pending.packet, pending.event_type, body_end)? {
                        return Ok(status);
                    }
                    state.event_open = true;
                }
                PURE_ROWS => {
                    return Err(PyValueError::new_err("pure_done was not called for the pending ROWS event"));
                }
                other => return Ok(other), // terminal: the caller raises
            }
        }
        if state.event_open {
            if let Some(status) = state.end_of_event(batch_rows) {
                return Ok(status);
            }
        }
        // Framing and decoding need no Python: other threads (the driver's writer) run meanwhile.
        let packets = &mut self.packets;
        py.allow_threads(|| loop {
            if state.done {
                return Ok(DONE);
            }
            let which = packets.next_released()?;
            let payload = packets.payload(&which);
            if let Some(status) = state.process(payload)? {
                if status == TABLE_MAP || status == PURE_ROWS {
                    return Ok(status); // the event ends once Python is done with it
                }
                if status != BATCH {
                    return Ok(status);
                }
            }
            if payload.first() == Some(&0) && payload.len() > HEADER {
                if let Some(status) = state.end_of_event(batch_rows) {
                    return Ok(status);
                }
            }
        })
    }

    /// What `read` returned TABLE_MAP, PURE_ROWS, UNSUPPORTED or SERVER_ERROR for:
    /// `(table_id, packet, event_type, commit_ts, seq)`; the packet is the whole payload with its
    /// OK byte, as pymysql would return it (None for a seeded table map).
    fn pending<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let state = &self.state;
        let pending = state.pending.as_ref().ok_or_else(|| PyValueError::new_err("nothing is pending"))?;
        let packet = if pending.status == TABLE_MAP {
            match state.tables.get(&pending.table_id).and_then(|t| t.packet.as_ref()) {
                Some(packet) => PyBytes::new(py, packet).into_any(),
                None => py.None().into_bound(py),
            }
        } else {
            PyBytes::new(py, &pending.packet).into_any()
        };
        let commit_ts = if state.txn >= 0 && (state.txn as usize) < state.commit_ts.len() {
            state.commit_ts[state.txn as usize]
        } else {
            0
        };
        PyTuple::new(
            py,
            [
                pending.table_id.into_pyobject(py)?.into_any(),
                packet,
                pending.event_type.into_pyobject(py)?.into_any(),
                commit_ts.into_pyobject(py)?.into_any(),
                state.seq.into_pyobject(py)?.into_any(),
            ],
        )
    }

    /// How rows of `table_id` are decoded: `layout` natively, None with `include` on the pure
    /// path (`pure_done` after each event), or not at all (`include` false).
    #[pyo3(signature = (table_id, include, layout=None))]
    fn resolve(&mut self, table_id: u64, include: bool, layout: Option<Py<RowLayout>>) -> PyResult<()> {
        let table = self
            .state
            .tables
            .get_mut(&table_id)
            .ok_or_else(|| PyValueError::new_err(format!("table id {table_id} has no TABLE_MAP")))?;
        table.resolution = match (include, layout) {
            (false, _) => Resolution::Skip,
            (true, Some(layout)) => Resolution::Native(layout),
            (true, None) => Resolution::Pure,
        };
        Ok(())
    }

    /// A table id mapped before the range starts (the TABLE_MAPs a piece reads first).
    fn seed_table(&mut self, table_id: u64, schema: String, table: String) {
        self.state.tables.insert(
            table_id,
            MappedTable { body: None, packet: None, schema, table, resolution: Resolution::Unresolved },
        );
    }

    /// Appends one row change decoded in Python (a pure-path table).
    #[pyo3(signature = (seq, schema, table, op, before, after))]
    #[allow(clippy::too_many_arguments)]
    fn add_row(
        &mut self,
        seq: i64,
        schema: &str,
        table: &str,
        op: u8,
        before: Option<Vec<Option<String>>>,
        after: Option<Vec<Option<String>>>,
    ) -> PyResult<()> {
        let state = &mut self.state;
        let commit_ts = state.commit_ts[state.txn.max(0) as usize];
        let code = state.table_code(schema, table);
        state.builder.add_row(commit_ts, seq, code, op, before, after)
    }

    /// The pending pure-path ROWS event is done: it held `rows` rows.
    fn pure_done(&mut self, rows: i64) -> PyResult<()> {
        match self.state.pending.take() {
            Some(Pending { status: PURE_ROWS, .. }) => {
                self.state.seq += rows;
                self.state.event_open = true;
                Ok(())
            }
            _ => Err(PyValueError::new_err("no pure-path ROWS event is pending")),
        }
    }

    /// The buffered rows as `(ChangeBatchBuilder.finish() tuple, [(schema, table), ...])`, the
    /// table list indexed by the batch's table codes; the buffers start empty again.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let state = &mut self.state;
        let buffers = state.builder.finish(py)?;
        let names = PyList::empty(py);
        for (schema, table) in state.table_names.drain(..) {
            names.append((schema, table))?;
        }
        state.table_codes.clear();
        PyTuple::new(py, [buffers.into_any(), names.into_any()])
    }

    /// The last FORMAT_DESCRIPTION packet (for Python's parse of a TABLE_MAP or pure ROWS event).
    #[getter]
    fn format_description<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.state.format_description.as_ref().map(|p| PyBytes::new(py, p))
    }

    /// Rows buffered since the last `finish`.
    #[getter]
    fn rows(&self) -> usize {
        self.state.builder.len()
    }

    /// Transactions begun in the range so far (counting a piece's first, begun before it).
    #[getter]
    fn transactions(&self) -> i64 {
        self.state.txn + 1
    }

    #[getter]
    fn file(&self) -> &str {
        &self.state.file
    }

    #[getter]
    fn pos(&self) -> u64 {
        self.state.pos
    }

    /// Whether events carry a CRC32 trailer.
    #[getter]
    fn checksum(&self) -> bool {
        self.state.checksum
    }

    /// Events framed so far (for benchmarks and to see progress).
    #[getter]
    fn events(&self) -> u64 {
        self.state.events
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BinlogRangeReader>()?;
    m.add("BINLOG_READ_DONE", DONE)?;
    m.add("BINLOG_READ_BATCH", BATCH)?;
    m.add("BINLOG_READ_TABLE_MAP", TABLE_MAP)?;
    m.add("BINLOG_READ_PURE_ROWS", PURE_ROWS)?;
    m.add("BINLOG_READ_UNSUPPORTED", UNSUPPORTED)?;
    m.add("BINLOG_READ_SERVER_ERROR", SERVER_ERROR)?;
    m.add("BINLOG_READ_TOO_MANY_TRANSACTIONS", TOO_MANY_TRANSACTIONS)?;
    m.add("BINLOG_READ_ENDED", BINLOG_ENDED)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn crc32_matches_the_ieee_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let bytewise = {
            let mut crc = !0u32;
            for &b in &long {
                crc ^= b as u32;
                for _ in 0..8 {
                    crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
                }
            }
            !crc
        };
        assert_eq!(crc32(&long), bytewise);
    }
}

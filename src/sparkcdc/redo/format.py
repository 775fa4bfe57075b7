"""The redo log's own file format (version 1), documented for users in docs/redo.md.

A log file is a sequence of frames. Each frame is a 44-byte big-endian header and a payload:

    magic "SCRD" | version u8 | kind u8 | flags u8 | reserved u8 | run u64 | start u64 | end u64
    | part u32 | payload length u32 | payload CRC-32 u32 | payload

`kind` is ROW (one table's rows of one batch), DDL (the batch's DDLs) or COMMIT (the batch is
complete: `part` is the number of ROW and DDL frames it has). `run` tells the writers of
different changefeed runs apart; (run, start, end) names the batch (start, end]. `flags` bit 0
means the payload is a u32 uncompressed size and an LZ4 frame. Payloads are UTF-8 JSON:

    ROW    {"table": <TableInfo>, "rows": [[commit_ts, seq, op, before, after], ...]}
    DDL    {"ddls": [{"commit_ts", "schema", "table", "query", "ddl_type"}, ...]}
    COMMIT {"frames": N}

A torn or corrupt frame (short read, bad magic or CRC) ends the file for a reader: it can only
be the tail a crash cut off, and its batch then has no COMMIT and is ignored.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa

from sparkcdc.model.events import DDLEvent, RowChange, TableInfo

MAGIC = b"SCRD"
FORMAT_VERSION = 1
HEADER = struct.Struct(">4sBBBBQQQIII")
_RAW_SIZE = struct.Struct(">I")  # before an LZ4 payload: its uncompressed size
KIND_ROW, KIND_DDL, KIND_COMMIT = 1, 2, 3
FLAG_LZ4 = 1
META_FILE = "redo.meta"
LOG_SUFFIX = ".log"


@dataclass(frozen=True)
class Frame:
    kind: int
    run: int
    start: int
    end: int
    part: int
    payload: bytes  # decompressed

    @property
    def batch(self) -> tuple[int, int, int]:
        return (self.run, self.start, self.end)


def encode_frame(kind: int, run: int, start: int, end: int, part: int, payload: bytes, compress: bool) -> bytes:
    flags = 0
    if compress:
        payload = _RAW_SIZE.pack(len(payload)) + pa.compress(payload, codec="lz4", asbytes=True)
        flags |= FLAG_LZ4
    header = HEADER.pack(MAGIC, FORMAT_VERSION, kind, flags, 0, run, start, end, part, len(payload),
                         zlib.crc32(payload))
    return header + payload


def decode_frames(data: bytes) -> Iterator[Frame]:
    """The frames of one log file, up to the first torn or corrupt one."""
    offset = 0
    while offset + HEADER.size <= len(data):
        magic, version, kind, flags, _, run, start, end, part, length, crc = HEADER.unpack_from(data, offset)
        body_start = offset + HEADER.size
        payload = data[body_start:body_start + length]
        if magic != MAGIC or version != FORMAT_VERSION or len(payload) != length or zlib.crc32(payload) != crc:
            return
        if flags & FLAG_LZ4:
            payload = _decompress(payload)
        yield Frame(kind, run, start, end, part, payload)
        offset = body_start + length


def _decompress(payload: bytes) -> bytes:
    (size,) = _RAW_SIZE.unpack_from(payload)
    return pa.decompress(payload[_RAW_SIZE.size:], decompressed_size=size, codec="lz4", asbytes=True)


def encode_rows(info: TableInfo, rows: Sequence[RowChange]) -> bytes:
    body = json.dumps([(r.commit_ts, r.seq, r.op, r.before, r.after) for r in rows],
                      ensure_ascii=False, separators=(",", ":"))
    return ('{"table":' + info.to_json() + ',"rows":' + body + "}").encode("utf-8", "surrogatepass")


def decode_rows(payload: bytes) -> tuple[TableInfo, list[RowChange]]:
    document = json.loads(payload.decode("utf-8", "surrogatepass"))
    info = TableInfo.from_json(json.dumps(document["table"]))
    rows = [
        RowChange(commit_ts=commit_ts, schema=info.schema, table=info.table, op=op,
                  before=tuple(before) if before is not None else None,
                  after=tuple(after) if after is not None else None, seq=seq)
        for commit_ts, seq, op, before, after in document["rows"]
    ]
    return info, rows


def encode_ddls(ddls: Sequence[DDLEvent]) -> bytes:
    return json.dumps({"ddls": [{"commit_ts": d.commit_ts, "schema": d.schema, "table": d.table,
                                 "query": d.query, "ddl_type": d.ddl_type} for d in ddls]},
                      ensure_ascii=False).encode("utf-8")


def decode_ddls(payload: bytes) -> list[DDLEvent]:
    return [DDLEvent(**item) for item in json.loads(payload)["ddls"]]


def encode_commit(frames: int) -> bytes:
    return json.dumps({"frames": frames}).encode()


def decode_commit(payload: bytes) -> int:
    return int(json.loads(payload)["frames"])


def log_file_name(kind: str, start: int, run: int, number: int) -> str:
    """`row_<first batch start>_<run>_<n>.log`: names sort by where the file begins."""
    return f"{kind}_{start:020d}_{run:016x}_{number:06d}{LOG_SUFFIX}"


@dataclass(frozen=True)
class RedoMeta:
    """The meta file: everything <= checkpoint_ts is downstream; the log is complete up to
    resolved_ts, and no change above resolved_ts was applied downstream."""

    checkpoint_ts: int
    resolved_ts: int
    changefeed: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps({"format-version": FORMAT_VERSION, "changefeed": self.changefeed,
                           "checkpoint-ts": self.checkpoint_ts, "resolved-ts": self.resolved_ts},
                          indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "RedoMeta":
        document = json.loads(data)
        return cls(int(document["checkpoint-ts"]), int(document["resolved-ts"]), document.get("changefeed", ""))

"""TiCDC Open Protocol (pkg/sink/codec/open, internal/message_key.go, internal/column.go).

A Kafka message batches up to `max-batch-size` events of one partition:
key = `[uint64 BE version=1]` then per event `[uint64 BE len][key JSON]`; value = per event
`[uint64 BE len][value JSON]`. Key JSON `{"ts","scm","tbl","t"}` (t: 1 row, 2 DDL, 3 resolved);
row value `{"u":{...},"p":{...}}` or `{"d":{...}}`, columns by name in Go's sorted-map order,
each `{"t":type,"h":true?,"f":flags,"v":value}`.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo, Value
from sparkcdc.schema.ddl_types import action_type
from sparkcdc.sink.codec import gojson
from sparkcdc.sink.codec.encoder import Message, MessageEncoder
from sparkcdc.sink.codec.large_message import CLAIM_CHECK, HANDLE_KEY_ONLY, RECORD_OVERHEAD, LargeMessageHandle
from sparkcdc.sink.codec.mysqltypes import enum_index, enum_name, is_binary, set_mask, set_names, type_name

BATCH_VERSION = 1
TYPE_ROW, TYPE_DDL, TYPE_RESOLVED = 1, 2, 3

# TiDB's mysql type codes (parser/mysql/type.go).
MYSQL_TYPE_CODES = {
    "tinyint": 1, "smallint": 2, "int": 3, "float": 4, "double": 5, "timestamp": 7, "bigint": 8,
    "mediumint": 9, "date": 10, "time": 11, "datetime": 12, "year": 13, "varchar": 15, "varbinary": 15,
    "bit": 16, "json": 245, "decimal": 246, "enum": 247, "set": 248, "tinyblob": 249, "tinytext": 249,
    "mediumblob": 250, "mediumtext": 250, "longblob": 251, "longtext": 251, "blob": 252, "text": 252,
    "char": 254, "binary": 254, "geometry": 255,
}
_BLOB_CODES = (249, 250, 251, 252)

# model.ColumnFlagType bits.
FLAG_BINARY, FLAG_HANDLE, FLAG_GENERATED, FLAG_PRIMARY = 0x01, 0x02, 0x04, 0x08
FLAG_UNIQUE, FLAG_MULTIPLE, FLAG_NULLABLE, FLAG_UNSIGNED = 0x10, 0x20, 0x40, 0x80
_STRING_CHARSET_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


def type_code(col: ColumnInfo) -> int:
    return MYSQL_TYPE_CODES.get(type_name(col), 15)


def column_flags(table: TableInfo, col: ColumnInfo) -> int:
    """Flags as TiCDC derives them; TiDB gives non-string types the binary charset."""
    flag = 0
    name = type_name(col)
    if is_binary(col) or name not in _STRING_CHARSET_TYPES:
        flag |= FLAG_BINARY
    if col.name in table.handle_key:
        flag |= FLAG_HANDLE
    if col.generated:
        flag |= FLAG_GENERATED
    if col.is_primary_key:
        flag |= FLAG_PRIMARY
    if col.is_unique_key and not col.is_primary_key:
        flag |= FLAG_UNIQUE
    if col.nullable and not col.is_primary_key:
        flag |= FLAG_NULLABLE
    if col.unsigned:
        flag |= FLAG_UNSIGNED
    return flag


def go_float(text: str) -> str:
    """A float as Go's encoding/json writes it ('f' format, exponent outside [1e-6, 1e21))."""
    number = float(text)
    if number == 0 or 1e-6 <= abs(number) < 1e21:
        return text if text not in ("-0",) else "-0"
    mantissa, _, exponent = repr(number).partition("e")
    if not exponent:
        mantissa, _, exponent = f"{number:e}".partition("e")
    sign = "-" if exponent.startswith("-") else "+"
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def go_quote_bytes(raw: bytes) -> str:
    """strconv.Quote(string(raw)) without the surrounding quotes."""
    out = []
    text = raw.decode("utf-8", errors="surrogateescape")
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an invalid UTF-8 byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable() and code > 0x7F:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def _value_json(col: ColumnInfo, value: Value) -> str:
    if value is None:
        return "null"
    code = type_code(col)
    name = type_name(col)
    if code in _BLOB_CODES:
        raw = value.encode("latin-1") if is_binary(col) else value.encode("utf-8")
        return gojson.quote(base64.b64encode(raw).decode())
    if code in (15, 254):
        if is_binary(col):
            return gojson.quote(go_quote_bytes(value.encode("latin-1")))
        return gojson.quote(value)
    if name == "enum":
        return str(enum_index(col, value))
    if name == "set":
        return str(set_mask(col, value))
    if name in ("tinyint", "smallint", "mediumint", "int", "bigint", "bit", "year"):
        return str(int(value))
    if name in ("float", "double"):
        return go_float(value)
    return gojson.quote(value)  # decimal, temporal, json, geometry text


def _columns_json(table: TableInfo, image: Sequence[Value], only_handle: bool = False) -> str:
    entries = []
    for col, value in sorted(zip(table.columns, image), key=lambda pair: pair[0].name):
        flags = column_flags(table, col)
        if only_handle and not flags & FLAG_HANDLE:
            continue
        handle = ',"h":true' if flags & FLAG_HANDLE else ""
        entries.append(f'{gojson.quote(col.name)}:{{"t":{type_code(col)}{handle},"f":{flags},"v":{_value_json(col, value)}}}')
    return "{" + ",".join(entries) + "}"


def _key_json(ts: int, schema: str, table: str, kind: int, only_handle_key: bool = False,
              claim_check_location: str = "") -> str:
    parts = [f'"ts":{ts}']
    if schema:
        parts.append('"scm":' + gojson.quote(schema))
    if table:
        parts.append('"tbl":' + gojson.quote(table))
    parts.append(f'"t":{kind}')
    if only_handle_key:
        parts.append('"ohk":true')
    if claim_check_location:
        parts.append('"ccl":' + gojson.quote(claim_check_location))
    return "{" + ",".join(parts) + "}"


def _frame(*chunks: bytes) -> bytes:
    return b"".join(struct.pack(">Q", len(c)) + c for c in chunks)


_VERSION = struct.pack(">Q", BATCH_VERSION)
_SINGLE_OVERHEAD = RECORD_OVERHEAD + 16 + 8  # one row alone: version, two length frames, record


class OpenProtocolEncoder(MessageEncoder):
    """Batches rows of one partition group into messages of up to `max-batch-size` events and
    max-message-bytes; a row too large alone follows the large-message-handle option."""

    ddl_broadcast = True

    def __init__(self, sink: SinkConfig, large: Optional[LargeMessageHandle] = None):
        self._sink = sink
        self._max_batch = sink.kafka_config.codec_config.max_batch_size
        self._large = large or LargeMessageHandle(protocol="open-protocol")
        self._old_value = sink.open.output_old_value

    def row_value(self, table: TableInfo, row: RowChange, only_handle_key: bool = False) -> str:
        if row.op == "delete":
            assert row.before is not None
            only_handle = only_handle_key or self._sink.delete_only_output_handle_key_columns
            return '{"d":' + _columns_json(table, row.before, only_handle) + "}"
        assert row.after is not None
        text = '{"u":' + _columns_json(table, row.after, only_handle_key)
        if row.op == "update" and self._old_value:
            assert row.before is not None
            text += ',"p":' + _columns_json(table, row.before, only_handle_key)
        return text + "}"

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str = "") -> list[Message]:
        messages: list[Message] = []
        keys: list[bytes] = []
        values: list[bytes] = []
        length = 0  # of the open message, as TiCDC counts it: version, frames, record overhead

        def close() -> None:
            nonlocal length
            if keys:
                messages.append(Message(_VERSION + _frame(*keys), _frame(*values), rows=len(keys)))
            keys.clear()
            values.clear()
            length = 0

        for row in rows:
            key = _key_json(row.commit_ts, table.schema, table.table, TYPE_ROW).encode()
            value = self._large.compress(self.row_value(table, row).encode())
            if self._large.too_large(len(key) + len(value) + _SINGLE_OVERHEAD):
                key, value = self._reduce(table, row, key, value)
                if self._large.option == CLAIM_CHECK:  # its own message, like TiCDC's
                    close()
                    messages.append(Message(_VERSION + _frame(key), _frame(value)))
                    continue
            if keys and (len(keys) >= self._max_batch or self._large.too_large(length + len(key) + len(value) + 16)):
                close()
            if not keys:
                length = 8 + RECORD_OVERHEAD
            keys.append(key)
            values.append(value)
            length += len(key) + len(value) + 16
        close()
        return messages

    def _reduce(self, table: TableInfo, row: RowChange, key: bytes, value: bytes) -> tuple[bytes, bytes]:
        """Key and value of a row too large for one message, per large-message-handle-option."""
        large = self._large
        if large.option == HANDLE_KEY_ONLY:
            key = _key_json(row.commit_ts, table.schema, table.table, TYPE_ROW, only_handle_key=True).encode()
            after = "keeping only the handle key"
        elif large.option == CLAIM_CHECK:
            assert large.claim_check is not None
            location = large.claim_check.write(_VERSION + _frame(key), _frame(value))
            key = _key_json(row.commit_ts, table.schema, table.table, TYPE_ROW,
                            claim_check_location=location).encode()
            after = "moving the row to claim-check storage"
        else:
            raise large.refuse(len(key) + len(value) + _SINGLE_OVERHEAD, table.schema, table.table)
        value = large.compress(self.row_value(table, row, only_handle_key=True).encode())
        if large.too_large(len(key) + len(value) + _SINGLE_OVERHEAD):
            raise large.refuse(len(key) + len(value) + _SINGLE_OVERHEAD, table.schema, table.table, after)
        return key, value

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]:
        key = _key_json(ddl.commit_ts, ddl.schema, ddl.table, TYPE_DDL).encode()
        value = ('{"q":' + gojson.quote(ddl.query) + f',"t":{action_type(ddl.ddl_type)}}}').encode()
        return Message(_VERSION + _frame(key), _frame(self._large.compress(value)), rows=0)

    def encode_checkpoint(self, ts: int) -> Optional[Message]:
        key = _key_json(ts, "", "", TYPE_RESOLVED).encode()
        return Message(_VERSION + _frame(key), _frame(b""), rows=0)


# -- decoding (the consumer) -------------------------------------------------------------------
@dataclass(frozen=True)
class OpenEvent:
    kind: int  # TYPE_ROW | TYPE_DDL | TYPE_RESOLVED
    commit_ts: int
    schema: str
    table: str
    value: dict  # the value JSON (empty for resolved)
    only_handle_key: bool = False  # large-message-handle: the value holds only the handle key
    claim_check_location: str = ""  # large-message-handle: the full event is in claim-check storage


def _unframe(data: bytes) -> Iterator[bytes]:
    position = 0
    while position < len(data):
        (length,) = struct.unpack_from(">Q", data, position)
        position += 8
        yield data[position:position + length]
        position += length


def decode_message(key: bytes, value: bytes, compression: str = "none") -> list[OpenEvent]:
    """The events of one open-protocol Kafka message, in order (row and DDL values decompressed
    per large-message-handle-compression)."""
    from sparkcdc.sink.codec.large_message import decompress

    (version,) = struct.unpack_from(">Q", key, 0)
    if version != BATCH_VERSION:
        raise ValueError(f"unexpected open protocol batch version {version}")
    events = []
    for key_json, value_json in zip(_unframe(key[8:]), _unframe(value)):
        k = json.loads(key_json)
        if value_json and k["t"] != TYPE_RESOLVED:
            value_json = decompress(compression, value_json)
        events.append(OpenEvent(k["t"], k["ts"], k.get("scm", ""), k.get("tbl", ""),
                                json.loads(value_json) if value_json else {},
                                bool(k.get("ohk")), k.get("ccl", "")))
    return events


def canonical_value(col: ColumnInfo, column: dict) -> Value:
    """An open-protocol column back in sparkcdc's canonical text form (`col` from downstream)."""
    value = column.get("v")
    if value is None:
        return None
    code = column.get("t")
    binary = bool(column.get("f", 0) & FLAG_BINARY)
    if code in _BLOB_CODES:
        raw = base64.b64decode(value)
        return raw.decode("latin-1") if binary else raw.decode("utf-8")
    if code in (15, 254) and binary:
        return _go_unquote(value).decode("latin-1")
    if code == 247:
        return enum_name(col, int(value))
    if code == 248:
        return set_names(col, int(value))
    if isinstance(value, float):
        return repr(value)
    return str(value)


_GO_SIMPLE_ESCAPES = {"a": b"\a", "b": b"\b", "f": b"\f", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v",
                      "\\": b"\\", '"': b'"', "'": b"'"}


def _go_unquote(text: str) -> bytes:
    """Inverse of go_quote_bytes: `\\xHH` is one raw byte, `\\uHHHH`/`\\UHHHHHHHH` a rune in UTF-8."""
    out = bytearray()
    position = 0
    while position < len(text):
        ch = text[position]
        if ch != "\\":
            out += ch.encode("utf-8")
            position += 1
            continue
        escape = text[position + 1]
        if escape == "x":
            out.append(int(text[position + 2:position + 4], 16))
            position += 4
        elif escape in "uU":
            width = 4 if escape == "u" else 8
            out += chr(int(text[position + 2:position + 2 + width], 16)).encode("utf-8")
            position += 2 + width
        else:
            out += _GO_SIMPLE_ESCAPES[escape]
            position += 2
    return bytes(out)

"""Canal-JSON as TiCDC writes it (pkg/sink/codec/canal/canal_json_row_event_encoder.go).

One JSON object per row, field order `id, database, table, pkNames, isDdl, type, es, ts, sql,
sqlType, mysqlType, old, data[, _tidb]`. Every value is a JSON string or null. Enum and set
are written as their numbers and bit as an unsigned integer (the mounter's values); binary
bytes as ISO-8859-1 text, which the canonical value form already is.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo, Value
from sparkcdc.model.tso import physical_ms
from sparkcdc.sink.codec import gojson
from sparkcdc.sink.codec.encoder import FileEncoder, Message, MessageEncoder
from sparkcdc.sink.codec.large_message import CLAIM_CHECK, HANDLE_KEY_ONLY, NONE, RECORD_OVERHEAD, LargeMessageHandle
from sparkcdc.sink.codec.mysqltypes import display_length, is_binary, mounted_value, type_name

if TYPE_CHECKING:
    import pyarrow as pa

WATERMARK_TYPE = "TIDB_WATERMARK"

# java.sql.Types codes (pkg/sink/codec/internal/java.go MySQLType2JavaType).
JAVA_BIT, JAVA_TINYINT, JAVA_SMALLINT, JAVA_INTEGER, JAVA_BIGINT = -7, -6, 5, 4, -5
JAVA_REAL, JAVA_DOUBLE, JAVA_DECIMAL, JAVA_CHAR, JAVA_VARCHAR = 7, 8, 3, 1, 12
JAVA_DATE, JAVA_TIME, JAVA_TIMESTAMP, JAVA_BINARY, JAVA_BLOB, JAVA_CLOB = 91, 92, 93, -2, 2004, 2005

_JAVA_BY_TYPE = {
    "tinyint": JAVA_TINYINT,
    "smallint": JAVA_SMALLINT,
    "mediumint": JAVA_INTEGER,
    "int": JAVA_INTEGER,
    "bigint": JAVA_BIGINT,
    "float": JAVA_REAL,
    "double": JAVA_DOUBLE,
    "decimal": JAVA_DECIMAL,
    "timestamp": JAVA_TIMESTAMP,
    "datetime": JAVA_TIMESTAMP,
    "date": JAVA_DATE,
    "time": JAVA_TIME,
    "year": JAVA_VARCHAR,
    "enum": JAVA_INTEGER,
    "set": JAVA_BIT,
    "bit": JAVA_BIT,
    "json": JAVA_VARCHAR,
    "geometry": JAVA_BINARY,
    "char": JAVA_CHAR,
    "varchar": JAVA_VARCHAR,
}
# Unsigned values above the signed maximum move up one Java type (canal's LogEventConvert).
_UNSIGNED_PROMOTION = {
    "tinyint": (127, JAVA_SMALLINT),
    "smallint": (32767, JAVA_INTEGER),
    "int": (2**31 - 1, JAVA_BIGINT),
    "bigint": (2**63 - 1, JAVA_DECIMAL),
}

# Canal EventType of a DDL, keyed by TiDB action name (canal_entry.go convertDdlEventType).
_DDL_EVENT_TYPE = {
    "create table": "CREATE",
    "rename table": "RENAME",
    "rename tables": "RENAME",
    "add index": "CINDEX",
    "create index": "CINDEX",
    "add foreign key": "CINDEX",
    "add primary key": "CINDEX",
    "drop index": "DINDEX",
    "drop foreign key": "DINDEX",
    "drop primary key": "DINDEX",
    "drop table": "ERASE",
    "truncate table": "TRUNCATE",
}
_ALTER_ACTIONS = frozenset(
    {
        "add column", "drop column", "modify column", "rebase auto id", "rebase auto_increment id",
        "set default value", "modify table comment", "rename index", "add partition",
        "add table partition", "drop partition", "drop table partition",
        "modify table charset and collate", "truncate partition", "truncate table partition",
        "alter index visibility", "multi-schema change", "multi schema change",
        "reorganize partition", "reorganize table partition",
        "alter table reorganize partition", "alter table partition by",
        "alter table partitioning", "remove partitioning", "remove table partitioning",
        "alter table remove partitioning",
        "add columns", "drop columns", "add multi-columns", "drop multi-columns", "alter table",
    }
)


def ddl_event_type(ddl_type: str) -> str:
    """Canal's event type name for a DDL (`QUERY` when canal has no closer one)."""
    action = ddl_type.lower()
    if action in _DDL_EVENT_TYPE:
        return _DDL_EVENT_TYPE[action]
    if action in _ALTER_ACTIONS:
        return "ALTER"
    return "QUERY"


def mysql_type(col: ColumnInfo, full: bool) -> str:
    """`mysqlType` entry: bare name (`int unsigned`), or the full type with content-compatible."""
    name = type_name(col)
    if full:
        name = name + _type_params(col, name)
    if col.unsigned and name.split("(")[0] not in ("bit", "year"):
        name += " unsigned"
    return name


def _type_params(col: ColumnInfo, name: str) -> str:
    if name in ("enum", "set"):
        return "(" + ",".join("'" + e.replace("'", "''") + "'" for e in col.elements) + ")"
    if name in ("datetime", "timestamp", "time"):
        return f"({col.scale})" if col.scale else ""
    if name == "decimal":
        precision = col.precision if col.precision is not None else 10
        return f"({precision},{col.scale or 0})"
    if name in ("float", "double") or name.endswith(("blob", "text")) or name in ("json", "date"):
        return ""
    length = display_length(col)
    return f"({length})" if length is not None else ""


def java_type(col: ColumnInfo, value: Value) -> int:
    name = type_name(col)
    binary = is_binary(col)
    if name.endswith("blob") or name.endswith("text"):
        return JAVA_BLOB if binary else JAVA_CLOB
    if name in ("char", "varchar", "binary", "varbinary"):
        if binary:
            return JAVA_BLOB
        return JAVA_CHAR if name == "char" else JAVA_VARCHAR
    java = _JAVA_BY_TYPE.get(name, JAVA_VARCHAR)
    if col.unsigned and value is not None and name in _UNSIGNED_PROMOTION:
        limit, promoted = _UNSIGNED_PROMOTION[name]
        if int(value) > limit:
            return promoted
    return java


class _TableLayout:
    """Everything about a table version that is the same for each of its rows, computed once."""

    def __init__(self, table: TableInfo, full_types: bool):
        columns = table.columns
        pk_names = table.primary_key
        self.columns = columns
        self.prefix = ",".join([
            '{"id":0',
            '"database":' + gojson.quote(table.schema),
            '"table":' + gojson.quote(table.table),
            '"pkNames":' + (gojson.dumps(list(pk_names)) if pk_names else "null"),
            '"isDdl":false',
        ])
        self.quoted_names = [gojson.quote(c.name) for c in columns]
        # The Java type of unsigned integers depends on the value; every other is fixed.
        self.static_java = [
            None if c.unsigned and type_name(c) in _UNSIGNED_PROMOTION else java_type(c, None)
            for c in columns
        ]
        self.converts = [type_name(c) in ("enum", "set") for c in columns]
        self.all_columns = [True] * len(columns)
        self.handle_key_only = [c.name in table.handle_key for c in columns]

        def mysql_types(keep):
            return '"mysqlType":{' + ",".join(
                name + ":" + gojson.quote(mysql_type(c, full_types))
                for c, name, k in zip(columns, self.quoted_names, keep) if k
            ) + "}"

        self.mysql_types = mysql_types(self.all_columns)
        self.handle_key_mysql_types = mysql_types(self.handle_key_only)

    def fill(self, values: Sequence[Value], keep: Sequence[bool]) -> str:
        if not self.columns:
            return "null"
        fields = []
        for col, name, convert, value, k in zip(self.columns, self.quoted_names, self.converts, values, keep):
            if not k:
                continue
            if value is None:
                rendered = "null"
            else:
                rendered = gojson.quote(mounted_value(col, value) if convert else value)
            fields.append(name + ":" + rendered)
        return "[{" + ",".join(fields) + "}]"


class CanalJSONEncoder(FileEncoder):
    """Canal-JSON rows for storage files (TiCDC's JSONTxnEventEncoder) and MQ messages."""

    file_extension = "json"

    def __init__(self, sink: SinkConfig, clock: Callable[[], float] = time.time, native: bool = True):
        """`native`: encode `encode_arrow` rows with sparkcdc_native when it is built with the
        encoder (else, or when False, with the Python reference)."""
        self._sink = sink
        self._clock = clock
        self._terminator = sink.terminator.encode()
        self._full_types = sink.content_compatible
        # TiCDC turns on only-output-updated-columns whenever content-compatible is set.
        self._only_updated = sink.only_output_updated_columns or sink.content_compatible
        self._layouts: dict[tuple, _TableLayout] = {}
        self._native = None
        if native:
            from sparkcdc.upstream.native_decode import native_encoder_module

            self._native = native_encoder_module()
        self._native_layouts: dict[tuple, Any] = {}

    @property
    def is_native(self) -> bool:
        """Whether `encode_arrow` runs in sparkcdc_native."""
        return self._native is not None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange]) -> bytes:
        return self._encode_rows(table, rows, self._now_ms())

    def _encode_rows(self, table: TableInfo, rows: Sequence[RowChange], now_ms: int) -> bytes:
        out = bytearray()
        for row in rows:
            out += self._row_text(table, row, "", now_ms).encode()
            out += self._terminator
        return bytes(out)

    def encode_arrow(self, table: TableInfo, commit_ts: pa.Int64Array, ops: pa.StringArray,
                     before: pa.ListArray, after: pa.ListArray) -> list[tuple[int, bytes]]:
        """`encode_rows` per transaction of one table's rows given as columns (see
        FileEncoder.encode_arrow); `ts` is read from the clock once per call."""
        from sparkcdc.sink.codec.arrow_input import arrow_buffers, arrow_rows, arrow_transactions

        native = self._native_layout(table)
        rows = arrow_rows(table, commit_ts, ops, before, after, check_widths=native is None)
        now_ms = self._now_ms()
        if not len(rows):
            return []
        if native is None:
            return [(ts, self._encode_rows(table, changes, now_ms)) for ts, changes in arrow_transactions(table, rows)]
        return native.encode(len(rows), now_ms, *arrow_buffers(rows))

    def _native_layout(self, table: TableInfo) -> Optional[Any]:
        """The table's compiled native layout, or None without the native encoder or for a
        table it does not handle (a SET of over 64 members)."""
        if self._native is None:
            return None
        key = (table.schema, table.table, table.version, table.columns)
        if key not in self._native_layouts:
            self._native_layouts[key] = self._compile_native(table)
        return self._native_layouts[key]

    def _compile_native(self, table: TableInfo) -> Optional[Any]:
        assert self._native is not None
        layout = self._layout(table)
        specs = []
        for col, name, static, convert, handle_key in zip(
                table.columns, layout.quoted_names, layout.static_java, layout.converts, layout.handle_key_only):
            kind = type_name(col) if convert else ""
            if kind == "set" and len(col.elements) > 64:
                return None
            promotion = _UNSIGNED_PROMOTION.get(type_name(col)) if static is None else None
            java = static if static is not None else java_type(col, None)
            specs.append((name, java, promotion[0] if promotion else None, promotion[1] if promotion else 0,
                          kind, list(col.elements), handle_key, col.name))
        flags = (self._only_updated, self._sink.delete_only_output_handle_key_columns,
                 self._sink.enable_tidb_extension)
        return self._native.CanalJsonLayout(f"{table.schema}.{table.table}", layout.prefix, layout.mysql_types,
                                            layout.handle_key_mysql_types, self._terminator, flags, specs)

    def _layout(self, table: TableInfo) -> "_TableLayout":
        key = (table.schema, table.table, table.version, table.columns)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = _TableLayout(table, self._full_types)
        return layout

    def encode_row(self, table: TableInfo, row: RowChange, large: str = "") -> str:
        """One row message. `large` (a message over max-message-bytes, TiCDC's large-message-handle)
        keeps only the handle-key columns and marks the `_tidb` extension: "handle-key-only" adds
        `"onlyHandleKey":true`, any other value is the claim-check location of the full message."""
        return self._row_text(table, row, large, self._now_ms())

    def _row_text(self, table: TableInfo, row: RowChange, large: str, now_ms: int) -> str:
        layout = self._layout(table)
        columns = table.columns
        only_handle_key = bool(large) or (row.op == "delete" and self._sink.delete_only_output_handle_key_columns)
        keep = layout.handle_key_only if only_handle_key else layout.all_columns
        image = row.before if row.op == "delete" else row.after
        assert image is not None
        parts = [
            layout.prefix,
            '"type":' + gojson.quote(row.op.upper()),
            f'"es":{physical_ms(row.commit_ts)}',
            f'"ts":{now_ms}',
            '"sql":""',
        ]
        sql_types = [
            name + ":" + (str(static) if static is not None else str(java_type(c, v)))
            for c, name, static, v, k in zip(columns, layout.quoted_names, layout.static_java, image, keep)
            if k
        ]
        parts.append('"sqlType":' + ("{" + ",".join(sql_types) + "}" if sql_types else "null"))
        parts.append(layout.handle_key_mysql_types if only_handle_key else layout.mysql_types)
        if row.op == "update":
            assert row.before is not None and row.after is not None
            old_keep = keep
            if self._only_updated:
                old_keep = [k and b != a for k, b, a in zip(keep, row.before, row.after)]
            parts.append('"old":' + layout.fill(row.before, old_keep))
            parts.append('"data":' + layout.fill(row.after, keep))
        else:
            parts.append('"old":null')
            parts.append('"data":' + layout.fill(image, keep))
        text = ",".join(parts)
        if self._sink.enable_tidb_extension:
            text += ',"_tidb":{"commitTs":' + str(row.commit_ts)
            if large == HANDLE_KEY_ONLY:
                text += ',"onlyHandleKey":true'
            elif large:
                text += ',"claimCheckLocation":' + gojson.quote(large)
            text += "}"
        return text + "}"

    def _message(self, schema: str, table: str, is_ddl: bool, event_type: str, ts: int,
                 query: str, extension: Optional[dict]) -> bytes:
        message = {
            "id": 0,
            "database": schema,
            "table": table,
            "pkNames": None,
            "isDdl": is_ddl,
            "type": event_type,
            "es": physical_ms(ts),
            "ts": self._now_ms(),
            "sql": query,
            "sqlType": None,
            "mysqlType": None,
            "data": None,
            "old": None,
        }
        if extension is not None:
            message["_tidb"] = extension
        return gojson.dumps(message).encode() + self._terminator

    def encode_ddl(self, ddl: DDLEvent) -> Optional[bytes]:
        extension = {"commitTs": ddl.commit_ts} if self._sink.enable_tidb_extension else None
        return self._message(ddl.schema, ddl.table, True, ddl_event_type(ddl.ddl_type),
                             ddl.commit_ts, ddl.query, extension)

    def encode_watermark(self, ts: int) -> Optional[bytes]:
        if not self._sink.enable_tidb_extension:
            return None
        return self._message("", "", False, WATERMARK_TYPE, ts, "", {"watermarkTs": ts})


class CanalJSONMessageEncoder(MessageEncoder):
    """Canal-JSON over Kafka: one message per row, key nil, no line terminator, rows over
    max-message-bytes handled as `[sink.kafka-config.large-message-handle]` says."""

    ddl_broadcast = False

    def __init__(self, sink: SinkConfig, clock: Optional[Callable[[], float]] = None,
                 large: Optional[LargeMessageHandle] = None):
        self._encoder = CanalJSONEncoder(sink, clock=clock) if clock else CanalJSONEncoder(sink)
        # encode_arrow's rows one per line: JSON escapes every newline inside a value.
        lines = replace(sink, terminator="\n")
        self._line_encoder = CanalJSONEncoder(lines, clock=clock) if clock else CanalJSONEncoder(lines)
        self._large = large or LargeMessageHandle(protocol="canal-json")

    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str) -> list[Message]:
        return [Message(None, self._encode_row(table, row)) for row in rows]

    def encode_arrow(self, table: TableInfo, commit_ts: "pa.Int64Array", ops: "pa.StringArray",
                     before: "pa.ListArray", after: "pa.ListArray") -> list[tuple[int, list[bytes]]]:
        """The values `encode_rows` gives, per transaction (commit_ts, values in row order) of one
        table's rows as columns (MessageEncoder.encode_arrow). A transaction with a value over
        max-message-bytes is encoded the RowChange way, which applies large-message-handle."""
        large = self._large
        transactions = []
        first = 0
        for ts, text in self._line_encoder.encode_arrow(table, commit_ts, ops, before, after):
            values = text.split(b"\n")
            values.pop()  # what follows the last row's terminator
            if large.compression != NONE:
                values = [large.compress(value) for value in values]
            if values and large.too_large(max(map(len, values)) + RECORD_OVERHEAD):
                values = [self._encode_row(table, row) for row in _transaction_rows(
                    table, (commit_ts, ops, before, after), first, len(values))]
            transactions.append((ts, values))
            first += len(values)
        if first != len(commit_ts):
            raise AssertionError(f"canal-json encode_arrow gave {first} messages for {len(commit_ts)} rows "
                                 f"of {table.schema}.{table.table}")
        return transactions

    def _encode_row(self, table: TableInfo, row: RowChange) -> bytes:
        large = self._large
        value = large.compress(self._encoder.encode_row(table, row).encode())
        if not large.too_large(len(value) + RECORD_OVERHEAD):
            return value
        if large.option == HANDLE_KEY_ONLY:
            reduced = large.compress(self._encoder.encode_row(table, row, HANDLE_KEY_ONLY).encode())
            after = "keeping only the handle key"
        elif large.option == CLAIM_CHECK:
            assert large.claim_check is not None
            location = large.claim_check.write(None, value)
            reduced = large.compress(self._encoder.encode_row(table, row, location).encode())
            after = "moving the row to claim-check storage"
        else:
            raise large.refuse(len(value) + RECORD_OVERHEAD, table.schema, table.table)
        if large.too_large(len(reduced) + RECORD_OVERHEAD):
            raise large.refuse(len(reduced) + RECORD_OVERHEAD, table.schema, table.table, after)
        return reduced

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]:
        value = self._encoder.encode_ddl(ddl)
        return Message(None, self._large.compress(value)) if value is not None else None

    def encode_checkpoint(self, ts: int) -> Optional[Message]:
        value = self._encoder.encode_watermark(ts)
        return Message(None, self._large.compress(value)) if value is not None else None


def _transaction_rows(table: TableInfo, columns: tuple, first: int, count: int) -> list[RowChange]:
    """Rows first .. first + count of encode_arrow's columns (one transaction) as RowChanges."""
    from sparkcdc.sink.codec.arrow_input import arrow_rows, arrow_transactions

    rows = arrow_rows(table, *(column.slice(first, count) for column in columns))
    return [row for _, changes in arrow_transactions(table, rows) for row in changes]

"""Avro with a Confluent schema registry, as TiCDC writes it (pkg/sink/codec/avro/avro.go).

A row is one Kafka message: key = the handle-key columns, value = all columns (plus the
`_tidb_op`, `_tidb_commit_ts`, `_tidb_commit_physical_time` fields with enable-tidb-extension),
each in the Confluent wire format `[0x00][schema id, int32 BE][Avro binary]`. A DELETE is the
key with a null value (a tombstone); an UPDATE carries no old value. Schemas are registered under
TopicNameStrategy subjects `<topic>-key` / `<topic>-value` (dots in the topic become `_`), once
per table version. The schema JSON is byte-for-byte Go's json.Marshal of TiCDC's structs: map
keys sorted, `connect.parameters.tidb_type` on every column, decimals as `bytes`+`decimal` (or
string), BIGINT UNSIGNED as long (or string), BIT as bytes with `length`, ENUM/SET as strings
with `allowed`. DDL and checkpoints are sent only with enable-tidb-extension and
avro-enable-watermark: `[0x01]` + DDL JSON, `[0x02]` + uint64 BE ts (TiCDC's testing aid, which
its consumer and ours use to order rows).
"""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import threading
from decimal import Decimal
from typing import Any, Callable, Optional, Sequence

from sparkcdc.config.replica import SinkConfig
from sparkcdc.config.sink_uri import mask_sink_uri
from sparkcdc.errors import ErrAvroSchemaRegistry, ErrSinkUnsupported
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo, Value
from sparkcdc.model.tso import physical_ms
from sparkcdc.schema.ddl_types import action_type
from sparkcdc.sink.codec import gojson
from sparkcdc.sink.codec.encoder import Message, MessageEncoder
from sparkcdc.sink.codec.mysqltypes import display_length, is_binary, type_name

MAGIC_BYTE, DDL_BYTE, CHECKPOINT_BYTE = 0, 1, 2
TIDB_OP, TIDB_COMMIT_TS, TIDB_PHYSICAL_TIME = "_tidb_op", "_tidb_commit_ts", "_tidb_commit_physical_time"
DEFAULT_NAMESPACE = "default"  # the changefeed namespace
_NAME_INVALID = re.compile(r"[^A-Za-z0-9_]")
_TEXT_TYPES = ("char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
               "tinyblob", "blob", "mediumblob", "longblob")
_INT_TYPES = ("tinyint", "smallint", "mediumint")
_TIDB_TYPE = {
    "tinyint": "INT", "smallint": "INT", "mediumint": "INT", "int": "INT", "bigint": "BIGINT",
    "float": "FLOAT", "double": "DOUBLE", "bit": "BIT", "decimal": "DECIMAL", "enum": "ENUM", "set": "SET",
    "json": "JSON", "date": "DATE", "datetime": "DATETIME", "timestamp": "TIMESTAMP", "time": "TIME",
    "year": "YEAR", **{name: "TEXT" for name in _TEXT_TYPES},
}


def sanitize_name(name: str) -> str:
    """Avro-safe name (TiCDC's sanitizeName): invalid characters become `_`, a leading digit gets `_`."""
    text = _NAME_INVALID.sub("_", name)
    return "_" + text if text[:1].isdigit() else text


def subject_topic(topic: str) -> str:
    """TiCDC's sanitizeTopic: the topic part of a subject, with `.` replaced."""
    return topic.replace(".", "_")


def _nullable(col: ColumnInfo) -> bool:
    return col.nullable and not col.is_primary_key


def tidb_type(col: ColumnInfo) -> str:
    name = type_name(col)
    base = _TIDB_TYPE.get(name)
    if base is None:
        raise ErrSinkUnsupported(f"column {col.name!r} of type {name} cannot be encoded in Avro (TiCDC neither)")
    if col.unsigned and base in ("INT", "BIGINT"):
        return base + " UNSIGNED"
    if base == "TEXT" and is_binary(col):
        return "BLOB"
    return base


def _column_type(col: ColumnInfo, decimal_mode: str, unsigned_mode: str) -> dict:
    """TiCDC's columnToAvroSchema, as an ordered dict in Go's field order."""
    name = type_name(col)
    parameters = {"tidb_type": tidb_type(col)}
    if name in _INT_TYPES or name == "year":
        kind = "int"
    elif name == "int":
        kind = "long" if col.unsigned else "int"
    elif name == "bigint":
        kind = "string" if col.unsigned and unsigned_mode == "string" else "long"
    elif name in ("float", "double"):
        kind = name
    elif name == "bit":
        kind = "bytes"
        parameters = {"length": str(display_length(col) or 1), "tidb_type": "BIT"}
    elif name == "decimal":
        if decimal_mode == "precise":
            return {"type": "bytes", "connect.parameters": parameters, "logicalType": "decimal",
                    "precision": col.precision if col.precision is not None else 10,
                    "scale": col.scale if col.scale is not None else 0}
        kind = "string"
    elif name in _TEXT_TYPES:
        kind = "bytes" if is_binary(col) else "string"
    elif name in ("enum", "set"):
        allowed = ",".join(e.replace(",", "\\,").replace("\\'", "'").replace("''", "'") for e in col.elements)
        parameters = {"allowed": allowed, "tidb_type": parameters["tidb_type"]}
        kind = "string"
    else:  # json, date, datetime, timestamp, time
        kind = "string"
    return {"type": kind, "connect.parameters": parameters}


def record_schema(namespace: str, table: TableInfo, columns: Sequence[ColumnInfo], extension: bool,
                  decimal_mode: str = "precise", unsigned_mode: str = "long") -> str:
    """The schema JSON TiCDC registers (rowToAvroSchema + json.Marshal)."""
    fields = []
    for col in columns:
        avro_type = _column_type(col, decimal_mode, unsigned_mode)
        # Map keys come out sorted: default, name, type. A default other than null puts its type
        # first in a nullable union; decimals (logical types) get none (goavro cannot hold one).
        default = None if avro_type.get("logicalType") else schema_default(col, decimal_mode, unsigned_mode)
        if _nullable(col):
            kinds = ["null", avro_type] if default is None else [avro_type, "null"]
            fields.append({"default": default, "name": sanitize_name(col.name), "type": kinds})
        elif default is not None:
            fields.append({"default": default, "name": sanitize_name(col.name), "type": avro_type})
        else:
            fields.append({"name": sanitize_name(col.name), "type": avro_type})
    if extension:
        fields += [{"default": "", "name": TIDB_OP, "type": "string"},
                   {"default": 0, "name": TIDB_COMMIT_TS, "type": "long"},
                   {"default": 0, "name": TIDB_PHYSICAL_TIME, "type": "long"}]
    top = {"type": "record", "name": sanitize_name(table.table),
           "namespace": f"{sanitize_name(namespace)}.{sanitize_name(table.schema)}", "fields": fields}
    return gojson.dumps(top)


def schema_default(col: ColumnInfo, decimal_mode: str = "precise", unsigned_mode: str = "long") -> Any:
    """The column default as TiCDC's rowToAvroSchema puts it in the schema: columnToAvroData of
    the default, marshalled by Go's json (bytes become base64, floats their float64 text)."""
    if col.default is None:
        return None
    name = type_name(col)
    try:
        if name == "bit":  # TiDB keeps a BIT default as (flen+7)/8 bytes
            width = ((display_length(col) or 1) + 7) // 8
            return base64.b64encode(int(col.default).to_bytes(width, "big")).decode()
        if name in _TEXT_TYPES and is_binary(col):
            return base64.b64encode(col.default.encode("latin-1")).decode()
        datum = avro_value(col, col.default, decimal_mode, unsigned_mode)
    except (ValueError, ArithmeticError):
        return None  # an expression default on a numeric column: TiCDC could not encode it either
    if isinstance(datum, Decimal):
        return None
    if isinstance(datum, float):
        if name == "float":  # strconv.ParseFloat(v, 32): the float32 value, widened
            import numpy

            datum = float(numpy.float32(datum))
        return int(datum) if datum.is_integer() and abs(datum) < 1e21 else datum
    return datum


def avro_value(col: ColumnInfo, value: Value, decimal_mode: str = "precise", unsigned_mode: str = "long") -> Any:
    """A canonical value as the Avro datum TiCDC's columnToAvroData produces."""
    if value is None:
        return None
    name = type_name(col)
    if name in _INT_TYPES or name in ("int", "year"):
        return int(value)
    if name == "bigint":
        number = int(value)
        if col.unsigned:
            if unsigned_mode == "string":
                return value
            return number - 2**64 if number >= 2**63 else number
        return number
    if name in ("float", "double"):
        return float(value)
    if name == "bit":
        number = int(value)
        return number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")  # NewBinaryLiteralFromUint(v, -1)
    if name == "decimal":
        return Decimal(value) if decimal_mode == "precise" else value
    if name in _TEXT_TYPES:
        return value.encode("latin-1") if is_binary(col) else value
    return value  # enum/set names, json, temporal text


def canonical_value(col: ColumnInfo, datum: Any) -> Value:
    """An Avro datum (as fastavro decodes it) back in sparkcdc's canonical text form."""
    if datum is None:
        return None
    name = type_name(col)
    if name == "bit":
        return str(int.from_bytes(datum, "big"))
    if isinstance(datum, bytes):
        return datum.decode("latin-1")
    if isinstance(datum, Decimal):
        text = format(datum, "f")
        return text[1:] if text.startswith("-") and not datum else text
    if name == "bigint" and col.unsigned and isinstance(datum, int) and datum < 0:
        return str(datum + 2**64)
    if name == "year":
        return f"{int(datum):04d}"
    if name == "float":
        import numpy

        return numpy.format_float_positional(numpy.float32(datum), unique=True, trim="-")
    if name == "double":
        text = repr(float(datum))
        if "e" in text:
            import numpy

            return numpy.format_float_positional(float(datum), unique=True, trim="-")
        return text[:-2] if text.endswith(".0") else text
    return str(datum)


def envelope(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", MAGIC_BYTE, schema_id) + body


def parse_envelope(data: bytes) -> tuple[int, bytes]:
    if len(data) < 5 or data[0] != MAGIC_BYTE:
        raise ValueError("not a Confluent Avro message (magic byte 0 and a schema id expected)")
    return struct.unpack_from(">I", data, 1)[0], data[5:]


class ConfluentSchemaRegistry:
    """The schema registry calls TiCDC's Avro codec makes (register a subject's schema, look one up
    by id), through confluent-kafka's maintained SchemaRegistryClient: basic auth (user:password in
    the URL), TLS, retries of transient failures and its caches are the client's. Its errors become
    ErrAvroSchemaRegistry."""

    def __init__(self, url: str, timeout: float = 10.0):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.url = url.rstrip("/")
        self._client = SchemaRegistryClient({"url": self.url, "timeout": timeout})
        self._by_id: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return call()
        except SchemaRegistryError as exc:
            raise ErrAvroSchemaRegistry(f"{what} on {mask_sink_uri(self.url)}: HTTP {exc.http_status_code} "
                                        f"{exc.error_message}"[:500]) from None
        except Exception as exc:  # httpx's transport errors: refused, unresolvable, timed out
            raise ErrAvroSchemaRegistry(f"schema registry {mask_sink_uri(self.url)} unreachable: {exc}; "
                                        "check schema-registry= in the sink URI") from None

    def register(self, subject: str, schema: str) -> int:
        from confluent_kafka.schema_registry import Schema

        return int(self._call(f"registering subject {subject!r}",
                              lambda: self._client.register_schema(subject, Schema(schema, "AVRO"))))

    def parsed_schema(self, schema_id: int) -> Any:
        """The fastavro-parsed schema of an id, fetched once."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is None:
            import fastavro

            text = self._call(f"looking up schema id {schema_id}", lambda: self._client.get_schema(schema_id).schema_str)
            cached = fastavro.parse_schema(json.loads(text))
            with self._lock:
                self._by_id[schema_id] = cached
        return cached


class AvroEncoder(MessageEncoder):
    """Row changes to Confluent-framed Avro messages, registering schemas as tables change."""

    ddl_broadcast = True

    def __init__(self, sink: SinkConfig, registry: ConfluentSchemaRegistry, namespace: str = DEFAULT_NAMESPACE):
        codec = sink.kafka_config.codec_config
        self._registry = registry
        self._namespace = namespace
        self._extension = sink.enable_tidb_extension or codec.enable_tidb_extension
        self._watermark = self._extension and codec.avro_enable_watermark
        self._decimal_mode = codec.avro_decimal_handling_mode
        self._unsigned_mode = codec.avro_bigint_unsigned_handling_mode
        # (subject, table id) -> (table version, schema id, parsed schema): TiCDC's schemaManager cache.
        self._schemas: dict[tuple[str, int], tuple[int, int, Any]] = {}

    def schema_text(self, table: TableInfo, is_key: bool) -> str:
        columns = [c for c in table.columns if c.name in table.handle_key] if is_key else list(table.columns)
        return record_schema(self._namespace, table, columns, self._extension and not is_key,
                             self._decimal_mode, self._unsigned_mode)

    def _schema(self, topic: str, table: TableInfo, is_key: bool) -> tuple[int, Any]:
        import fastavro

        subject = subject_topic(topic) + ("-key" if is_key else "-value")
        cached = self._schemas.get((subject, table.table_id))
        if cached is not None and cached[0] == table.version:
            return cached[1], cached[2]
        text = self.schema_text(table, is_key)
        schema_id = self._registry.register(subject, text)
        parsed = fastavro.parse_schema(json.loads(text))
        self._schemas[(subject, table.table_id)] = (table.version, schema_id, parsed)
        return schema_id, parsed

    def _encode(self, topic: str, table: TableInfo, row: RowChange, is_key: bool) -> Optional[bytes]:
        import fastavro

        image = row.before if row.op == "delete" else row.after
        assert image is not None
        columns = [(c, v) for c, v in zip(table.columns, image) if not is_key or c.name in table.handle_key]
        if not columns:
            return None
        schema_id, parsed = self._schema(topic, table, is_key)
        record = {sanitize_name(c.name): avro_value(c, v, self._decimal_mode, self._unsigned_mode) for c, v in columns}
        if self._extension and not is_key:
            record[TIDB_OP] = "c" if row.op == "insert" else "u"
            record[TIDB_COMMIT_TS] = row.commit_ts
            record[TIDB_PHYSICAL_TIME] = physical_ms(row.commit_ts)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        return envelope(schema_id, buffer.getvalue())

    def encode_row(self, topic: str, table: TableInfo, row: RowChange) -> Message:
        value = None if row.op == "delete" else self._encode(topic, table, row, False)
        return Message(self._encode(topic, table, row, True), value)

    # -- the Kafka MessageEncoder protocol ----------------------------------------------------
    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str = "") -> list[Message]:
        return [self.encode_row(topic, table, row) for row in rows]

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]:
        if not self._watermark:
            return None
        body = {"query": ddl.query, "type": action_type(ddl.ddl_type), "schema": ddl.schema,
                "table": ddl.table, "commitTs": ddl.commit_ts}
        return Message(None, bytes([DDL_BYTE]) + gojson.dumps(body).encode(), rows=0)

    def encode_checkpoint(self, ts: int) -> Optional[Message]:
        if not self._watermark:
            return None
        return Message(None, struct.pack(">BQ", CHECKPOINT_BYTE, ts), rows=0)


# -- decoding (the consumer) -------------------------------------------------------------------
class AvroDecoder:
    """Decodes Avro messages with the schemas the registry holds: rows, DDLs and watermarks."""

    def __init__(self, registry: ConfluentSchemaRegistry):
        self.registry = registry

    def decode_record(self, data: bytes) -> dict:
        import fastavro

        schema_id, body = parse_envelope(data)
        return fastavro.schemaless_reader(io.BytesIO(body), self.registry.parsed_schema(schema_id))

    def decode(self, key: Optional[bytes], value: Optional[bytes]) -> tuple[str, Any]:
        """("row", (key record, value record or None)) | ("ddl", dict) | ("watermark", ts)."""
        if value and value[0] == DDL_BYTE:
            return "ddl", json.loads(value[1:])
        if value and value[0] == CHECKPOINT_BYTE:
            return "watermark", struct.unpack_from(">Q", value, 1)[0]
        key_record = self.decode_record(key) if key else None
        value_record = self.decode_record(value) if value else None
        return "row", (key_record, value_record)


def make_avro_encoder(sink: SinkConfig, schema_registry: str,
                      clock: Optional[Callable[[], float]] = None) -> AvroEncoder:
    return AvroEncoder(sink, ConfluentSchemaRegistry(schema_registry))

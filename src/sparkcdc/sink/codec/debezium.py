"""Debezium JSON as TiCDC writes it (pkg/sink/codec/debezium/codec.go).

One message per row: key `{"payload":{handle key},"schema":{...Key}}`, value
`{"payload":{"source":{...},"ts_ms","transaction":null,"op","before","after"},"schema":{...Envelope}}`.
Values follow Debezium's MySQL connector: dates as epoch days, datetimes as epoch ms (fsp <= 3)
or µs, timestamps as ISO text in UTC, times as µs, binary as base64, BIT(1) as a boolean and
wider bits as little-endian bytes. DDL and watermarks are not sent. TiCDC's jsoniter writer does
not escape HTML, so strings are quoted without it here.

Decimals and BIGINT UNSIGNED follow `[sink.debezium]`'s modes, named as Debezium's connector names
them. TiCDC's codec writes decimals as float64 and BIGINT UNSIGNED as a wrapped int64, which are
the defaults (`double`, `long`): a DECIMAL(20,6) loses digits, and a Debezium consumer reads the
float64 of 99999999999999.999999 (1e14) as out of range. `precise` writes Kafka Connect's
`org.apache.kafka.connect.data.Decimal` (bytes: the big-endian two's-complement unscaled value,
base64 in JSON, with `scale` and, for DECIMAL, `connect.decimal.precision` in the field's
parameters); the decimal mode `string` writes the plain decimal text.
"""

from __future__ import annotations

import base64
import datetime
import re
import time
from decimal import Decimal
from typing import Callable, Optional, Sequence

from sparkcdc.config.replica import DebeziumConfig, SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo, Value
from sparkcdc.model.tso import physical_ms
from sparkcdc.sink.codec.mysqltypes import display_length, is_binary, type_name
from sparkcdc.sink.codec.encoder import Message, MessageEncoder

CONNECTOR_VERSION = "2.4.0.Final"
DEFAULT_CLUSTER_ID = "default"  # the changefeed namespace
_EPOCH = datetime.datetime(1970, 1, 1)
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?$")
_TIME = re.compile(r"^(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
_NAME_INVALID = re.compile(r"[^A-Za-z0-9_]")
_TOPIC_INVALID = re.compile(r"[^A-Za-z0-9._\-]")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\u2028": "\\u2028", "\u2029": "\\u2029"}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\u2028\u2029]')
_DEFAULT_MODES = DebeziumConfig()
KAFKA_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def quote(text: str) -> str:
    """A JSON string as jsoniter writes it with EscapeHTML=false."""
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text) + '"'


def sanitize_name(name: str) -> str:
    """Avro/Debezium-safe name: invalid characters become `_`, a leading digit gets a `_` prefix."""
    text = _NAME_INVALID.sub("_", name)
    return "_" + text if text[:1].isdigit() else text


def schema_topic_name(cluster_id: str, schema: str, table: str) -> str:
    return f"{sanitize_name(cluster_id)}.{sanitize_name(schema)}.{_TOPIC_INVALID.sub('_', table)}"


def go_float64(number: float) -> str:
    """strconv.AppendFloat(f, 'f' or 'e', -1, 64) as jsoniter's WriteFloat64 chooses them."""
    if number == 0:
        return "0" if str(number)[0] != "-" else "-0"
    magnitude = abs(number)
    if 1e-6 <= magnitude < 1e21:
        return format(Decimal(repr(number)).normalize(), "f")
    mantissa, _, exponent = repr(number).partition("e")
    if not exponent:
        mantissa, _, exponent = f"{number:e}".partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    sign = "-" if exponent.startswith("-") else "+"
    digits = exponent.lstrip("+-").lstrip("0") or "0"
    return f"{mantissa}e{sign}{digits}"


def _is_zero_date(match: re.Match) -> bool:
    return int(match.group(2)) == 0 or int(match.group(3)) == 0


def _field_schema(col: ColumnInfo, modes: DebeziumConfig = _DEFAULT_MODES) -> Optional[str]:
    """The Kafka Connect schema of one column (with its `default` after `field`, as TiCDC writes
    it), or None for a type Debezium has no mapping for."""
    schema = _field_type_schema(col, modes)
    if schema is None or col.default is None:
        return schema
    default = _default_json(col, col.default, modes)
    return schema if default is None else schema[:-1] + f',"default":{default}}}'


def _exact_number(col: ColumnInfo, modes: DebeziumConfig) -> bool:
    """Whether the column's values are written as Kafka Connect Decimals or decimal text."""
    name = type_name(col)
    if name == "decimal":
        return modes.decimal_handling_mode != "double"
    return name == "bigint" and col.unsigned and modes.bigint_unsigned_handling_mode == "precise"


def _default_json(col: ColumnInfo, default: str, modes: DebeziumConfig = _DEFAULT_MODES) -> Optional[str]:
    """TiCDC's writeDebeziumFieldSchema `default`: numbers through ParseFloat (so `5` and `5.5`),
    temporal ones as their values would be (CURRENT_TIMESTAMP as the epoch), None when it writes
    nothing. (TiCDC also writes a NULL value as the default; we keep NULL values NULL.)"""
    name = type_name(col)
    not_null = not col.nullable or col.is_primary_key
    try:
        if name == "bit":
            return field_value(col, str(int(default)))
        if _exact_number(col, modes):  # the default as the column's values are written
            scale = (col.scale or 0) if name == "decimal" else 0
            return field_value(col, f"{Decimal(default):.{scale}f}", modes)
        if name in ("varchar", "char", "varbinary", "binary", "enum", "set", "json") or \
                name.endswith("text") or name.endswith("blob"):
            return quote(default)
        if name == "date":
            match = _DATETIME.match(default)
            if match is None or _is_zero_date(match):
                return "0" if not_null else None
            return field_value(col, default)
        if name == "datetime":
            match = _DATETIME.match(default)
            if match is None or _is_zero_date(match) or int(match.group(1)) == 0:
                return "0"  # CURRENT_TIMESTAMP[(n)] and unparseable text
            return field_value(col, default)
        if name == "timestamp":
            if default == "CURRENT_TIMESTAMP":
                return '"1970-01-01T00:00:00Z"' if not_null else None
            match = _DATETIME.match(default)
            if match is None:
                return "0"  # CURRENT_TIMESTAMP(n): StrToDateTime fails and TiCDC writes 0
            if _is_zero_date(match) or int(match.group(1)) == 0:
                return '"1970-01-01T00:00:00Z"' if not_null else None
            return field_value(col, default)
        if name == "time":
            return field_value(col, default) if _TIME.match(default) else None
        if name == "year":
            year = float(default)
            year += 2000 if year < 70 else 1900 if year < 100 else 0
            return go_float64(year)
        if name in ("tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal"):
            return go_float64(float(default))
    except (ValueError, ArithmeticError):  # not a number: Decimal's InvalidOperation too
        return None
    return None


def _field_type_schema(col: ColumnInfo, modes: DebeziumConfig = _DEFAULT_MODES) -> Optional[str]:
    name = type_name(col)
    optional = "true" if col.nullable and not col.is_primary_key else "false"
    head = f'"optional":{optional}'
    field = f'"field":{quote(col.name)}'

    def simple(kind: str) -> str:
        return f'{{"type":"{kind}",{head},{field}}}'

    def named(kind: str, logical: str, parameters: str = "") -> str:
        params = f',"parameters":{{{parameters}}}' if parameters else ""
        return f'{{"type":"{kind}",{head},"name":"{logical}","version":1{params},{field}}}'

    if name == "bit":
        length = display_length(col) or 1
        if length == 1:
            return simple("boolean")
        return named("bytes", "io.debezium.data.Bits", f'"length":"{length}"')
    if name in ("varchar", "char", "varbinary", "binary") or name.endswith("text") or name.endswith("blob"):
        return simple("string")
    if name == "enum":
        allowed = ",".join(e.replace(",", "\\,").replace("\\'", "'").replace("''", "'") for e in col.elements)
        return named("string", "io.debezium.data.Enum", f'"allowed":{quote(allowed)}')
    if name == "set":
        return named("string", "io.debezium.data.EnumSet", f'"allowed":{quote(",".join(col.elements))}')
    if name == "date":
        return named("int32", "io.debezium.time.Date")
    if name == "datetime":
        logical = "io.debezium.time.Timestamp" if (col.scale or 0) <= 3 else "io.debezium.time.MicroTimestamp"
        return named("int64", logical)
    if name == "timestamp":
        return named("string", "io.debezium.time.ZonedTimestamp")
    if name == "time":
        return named("int64", "io.debezium.time.MicroTime")
    if name == "json":
        return named("string", "io.debezium.data.Json")
    if name == "tinyint":
        return simple("int16")
    if name == "smallint":
        return simple("int32" if col.unsigned else "int16")
    if name == "mediumint":
        return simple("int32")
    if name == "int":
        return simple("int64" if col.unsigned else "int32")
    if name == "bigint":
        if col.unsigned and modes.bigint_unsigned_handling_mode == "precise":
            return named("bytes", KAFKA_CONNECT_DECIMAL, '"scale":"0"')
        return simple("int64")
    if name == "float":
        return simple("float")
    if name == "decimal" and modes.decimal_handling_mode == "precise":
        return named("bytes", KAFKA_CONNECT_DECIMAL,
                     f'"scale":"{col.scale or 0}","connect.decimal.precision":"{col.precision or 10}"')
    if name == "decimal" and modes.decimal_handling_mode == "string":
        return simple("string")
    if name in ("double", "decimal"):
        return simple("double")
    if name == "year":
        return named("int32", "io.debezium.time.Year")
    return None  # geometry and the like: TiCDC logs "unsupported field type" and writes nothing


def connect_decimal_bytes(unscaled: int) -> bytes:
    """Kafka Connect's Decimal bytes: Java's BigInteger.toByteArray() of the unscaled value
    (big-endian two's complement, as few bytes as hold the sign)."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def field_value(col: ColumnInfo, value: Value, modes: DebeziumConfig = _DEFAULT_MODES) -> str:
    """One column value as Debezium JSON text."""
    if value is None:
        return "null"
    name = type_name(col)
    if _exact_number(col, modes):
        if name == "decimal" and modes.decimal_handling_mode == "string":
            return quote(value)  # the canonical text: the column's scale, as BigDecimal.toPlainString()
        unscaled = int(value.replace(".", ""))
        return '"' + base64.b64encode(connect_decimal_bytes(unscaled)).decode() + '"'
    not_null = not col.nullable or col.is_primary_key
    if name == "bit":
        number = int(value)
        length = display_length(col) or 1
        if length == 1:
            return "true" if number else "false"
        raw = number.to_bytes(8, "little")[: (length + 7) // 8]
        return '"' + base64.b64encode(raw).decode() + '"'
    if name in ("varchar", "char", "varbinary", "binary") or name.endswith("text") or name.endswith("blob"):
        if is_binary(col):
            return '"' + base64.b64encode(value.encode("latin-1")).decode() + '"'
        return quote(value)
    if name in ("enum", "set", "json"):
        return quote(value)
    if name == "decimal":
        return go_float64(float(value))
    if name == "date":
        match = _DATETIME.match(value)
        if match is None or _is_zero_date(match):
            return "0" if not_null else "null"
        days = (datetime.date(*map(int, match.group(1, 2, 3))) - datetime.date(1970, 1, 1)).days
        return str(days)
    if name == "datetime":
        match = _DATETIME.match(value)
        if match is None or _is_zero_date(match) or int(match.group(1)) == 0:
            return "0" if not_null else "null"
        micros = _epoch_micros(match)
        return str(micros // 1000 if (col.scale or 0) <= 3 else micros)
    if name == "timestamp":
        if value.startswith("0000-00-00"):
            return '"1970-01-01T00:00:00Z"'
        date, _, clock = value.partition(" ")
        seconds, _, fraction = clock.partition(".")
        fsp = col.scale or 0
        text = f"{date}T{seconds}"
        if fsp > 0:
            text += "." + fraction.ljust(6, "0")[:fsp]
        return quote(text + "Z")
    if name == "time":
        match = _TIME.match(value)
        if match is None:
            return "0"
        sign, hours, minutes, seconds, fraction = match.groups()
        micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000
        micros += int((fraction or "").ljust(6, "0") or 0)
        return str(-micros if sign else micros)
    if name == "bigint" and col.unsigned:
        number = int(value)
        return str(number - 2**64 if number >= 2**63 else number)
    if name in ("tinyint", "smallint", "mediumint", "int", "bigint", "year"):
        return str(int(value))
    if name in ("float", "double"):
        return go_float64(float(value)) if name == "double" else _go_float32(value)
    return '"' + base64.b64encode(value.encode("latin-1")).decode() + '"'  # geometry: []byte


def _go_float32(text: str) -> str:
    """A float32 as jsoniter writes it: the canonical text is already the shortest float32 form."""
    number = float(text)
    if number == 0 or 1e-6 <= abs(number) < 1e21:
        return format(Decimal(text).normalize(), "f") if "e" not in text.lower() else go_float64(number)
    return go_float64(number)


def _epoch_micros(match: re.Match) -> int:
    year, month, day, hour, minute, second, fraction = match.groups()
    moment = datetime.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + int((fraction or "").ljust(6, "0") or 0)


_SOURCE_SCHEMA = (
    '{"type":"struct","fields":['
    '{"type":"string","optional":false,"field":"version"},'
    '{"type":"string","optional":false,"field":"connector"},'
    '{"type":"string","optional":false,"field":"name"},'
    '{"type":"int64","optional":false,"field":"ts_ms"},'
    '{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,'
    '"parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},'
    '{"type":"string","optional":false,"field":"db"},'
    '{"type":"string","optional":true,"field":"sequence"},'
    '{"type":"string","optional":true,"field":"table"},'
    '{"type":"int64","optional":false,"field":"server_id"},'
    '{"type":"string","optional":true,"field":"gtid"},'
    '{"type":"string","optional":false,"field":"file"},'
    '{"type":"int64","optional":false,"field":"pos"},'
    '{"type":"int32","optional":false,"field":"row"},'
    '{"type":"int64","optional":true,"field":"thread"},'
    '{"type":"string","optional":true,"field":"query"}'
    '],"optional":false,"name":"io.debezium.connector.mysql.Source","field":"source"}'
)
_TRANSACTION_SCHEMA = (
    '{"type":"struct","fields":['
    '{"type":"string","optional":false,"field":"id"},'
    '{"type":"int64","optional":false,"field":"total_order"},'
    '{"type":"int64","optional":false,"field":"data_collection_order"}'
    '],"optional":true,"name":"event.block","version":1,"field":"transaction"}'
)


class DebeziumEncoder(MessageEncoder):
    """Row changes to Debezium messages (key and value), one per row."""

    ddl_broadcast = True

    def __init__(self, sink: SinkConfig, clock: Callable[[], float] = time.time,
                 cluster_id: str = DEFAULT_CLUSTER_ID):
        self._sink = sink
        self._clock = clock
        self._cluster_id = cluster_id
        self._modes = sink.debezium
        self._output_old_value = sink.debezium.output_old_value
        self._fields: dict[tuple[str, str, int], tuple[str, str]] = {}

    def _schemas(self, table: TableInfo) -> tuple[str, str]:
        """(value fields JSON, key fields JSON) of one table version, computed once."""
        cache_key = (table.schema, table.table, table.version)
        cached = self._fields.get(cache_key)
        if cached is None:
            value_fields = ",".join(f for f in (_field_schema(c, self._modes) for c in table.columns) if f is not None)
            key_cols = [c for c in table.columns if c.name in table.handle_key]
            key_fields = ",".join(f for f in (_field_schema(c, self._modes) for c in key_cols) if f is not None)
            cached = self._fields[cache_key] = (value_fields, key_fields)
        return cached

    def _values(self, table: TableInfo, image: Sequence[Value], only: Optional[tuple[str, ...]] = None) -> str:
        parts = [f"{quote(col.name)}:{field_value(col, value, self._modes)}" for col, value in zip(table.columns, image)
                 if (only is None or col.name in only) and _field_type_schema(col) is not None]
        return "{" + ",".join(parts) + "}"

    def encode_key(self, table: TableInfo, row: RowChange) -> bytes:
        image = row.before if row.op == "delete" else row.after
        assert image is not None
        _, key_fields = self._schemas(table)
        name = schema_topic_name(self._cluster_id, table.schema, table.table)
        return ('{"payload":' + self._values(table, image, table.handle_key)
                + ',"schema":{"type":"struct","name":' + quote(name + ".Key")
                + ',"optional":false,"fields":[' + key_fields + "]}}").encode()

    def encode_value(self, table: TableInfo, row: RowChange) -> bytes:
        name = schema_topic_name(self._cluster_id, table.schema, table.table)
        source = (
            f'{{"version":"{CONNECTOR_VERSION}","connector":"TiCDC","name":{quote(self._cluster_id)},'
            f'"ts_ms":{physical_ms(row.commit_ts)},"snapshot":"{"true" if row.snapshot else "false"}",'
            f'"db":{quote(table.schema)},'
            f'"table":{quote(table.table)},"server_id":0,"gtid":null,"file":"","pos":0,"row":0,'
            f'"thread":0,"query":null,"commit_ts":{row.commit_ts},"cluster_id":{quote(self._cluster_id)}}}'
        )
        payload = f'{{"source":{source},"ts_ms":{int(self._clock() * 1000)},"transaction":null,'
        if row.op == "insert":
            assert row.after is not None
            # A snapshot read is Debezium's "r", with source.snapshot "true".
            payload += f'"op":"{"r" if row.snapshot else "c"}","before":null,"after":' + self._values(table, row.after)
        elif row.op == "delete":
            assert row.before is not None
            payload += '"op":"d","after":null,"before":' + self._values(table, row.before)
        else:
            assert row.before is not None and row.after is not None
            payload += '"op":"u",'
            if self._output_old_value:
                payload += '"before":' + self._values(table, row.before) + ","
            payload += '"after":' + self._values(table, row.after)
        payload += "}"
        value_fields, _ = self._schemas(table)
        struct_name = quote(name + ".Value")
        image_schema = ('{"type":"struct","optional":true,"name":' + struct_name + ',"field":"%s","fields":['
                        + value_fields + "]}")
        schema = ('{"type":"struct","optional":false,"name":' + quote(name + ".Envelope") + ',"version":1,"fields":['
                  + image_schema % "before" + "," + image_schema % "after" + "," + _SOURCE_SCHEMA + ","
                  + '{"type":"string","optional":false,"field":"op"},'
                  + '{"type":"int64","optional":true,"field":"ts_ms"},' + _TRANSACTION_SCHEMA + "]}")
        return ('{"payload":' + payload + ',"schema":' + schema + "}").encode()

    # -- the Kafka MessageEncoder protocol ----------------------------------------------------
    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str = "") -> list[Message]:
        return [Message(self.encode_key(table, row), self.encode_value(table, row)) for row in rows]

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]:
        return None  # TiCDC's Debezium codec sends no schema change events

    def encode_checkpoint(self, ts: int) -> Optional[Message]:
        return None


# -- decoding (tests and tools; TiCDC's consumer does not read Debezium) ------------------------
def decode_value(table: TableInfo, value: bytes) -> RowChange:
    """A Debezium value message back to a RowChange in canonical form, for round-trip checks;
    each value is read by its field's schema in the message (decimals are exact unless written
    as doubles)."""
    import json

    message = json.loads(value)
    payload = message["payload"]
    source = payload["source"]
    op = {"c": "insert", "u": "update", "d": "delete"}[payload["op"]]
    image_schema = next(f for f in message["schema"]["fields"] if f["field"] == "after")
    field_schemas = {f["field"]: f for f in image_schema["fields"]}

    def image(fields: Optional[dict]) -> Optional[tuple]:
        if fields is None:
            return None
        return tuple(canonical_value(col, fields.get(col.name), field_schemas.get(col.name)) for col in table.columns)

    return RowChange(int(source["commit_ts"]), source["db"], source["table"], op,
                     before=image(payload.get("before")) if op != "insert" else None,
                     after=image(payload.get("after")) if op != "delete" else None)


def canonical_value(col: ColumnInfo, value, field_schema: Optional[dict] = None) -> Value:
    """A decoded Debezium JSON value back in sparkcdc's canonical text form, read as its field's
    schema says (a double for a decimal is lossy)."""
    if value is None:
        return None
    name = type_name(col)
    if field_schema is not None and field_schema.get("name") == KAFKA_CONNECT_DECIMAL:
        scale = int(field_schema["parameters"]["scale"])
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return f"{Decimal(unscaled).scaleb(-scale):.{scale}f}"
    if name == "decimal" and isinstance(value, str):
        return value
    if name == "bit":
        if isinstance(value, bool):
            return "1" if value else "0"
        return str(int.from_bytes(base64.b64decode(value), "little"))
    if name in ("varchar", "char", "varbinary", "binary") or name.endswith("text") or name.endswith("blob"):
        return base64.b64decode(value).decode("latin-1") if is_binary(col) else value
    if name in ("enum", "set", "json"):
        return value
    if name == "date":
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=value)).isoformat()
    if name == "datetime":
        fsp = col.scale or 0
        micros = value * 1000 if fsp <= 3 else value
        moment = _EPOCH + datetime.timedelta(microseconds=micros)
        text = moment.strftime("%Y-%m-%d %H:%M:%S").rjust(19, "0")
        return text + ("." + f"{moment.microsecond:06d}"[:fsp] if fsp else "")
    if name == "timestamp":
        date, _, rest = value.rstrip("Z").partition("T")
        seconds, _, fraction = rest.partition(".")
        fsp = col.scale or 0
        return f"{date} {seconds}" + ("." + fraction.ljust(fsp, "0") if fsp else "")
    if name == "time":
        sign = "-" if value < 0 else ""
        micros = abs(value)
        seconds, fraction = divmod(micros, 1_000_000)
        text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        fsp = col.scale or 0
        return text + ("." + f"{fraction:06d}"[:fsp] if fsp else "")
    if name == "bigint" and col.unsigned and value < 0:
        return str(value + 2**64)  # the long mode's wrapped int64
    if name == "decimal":
        scale = col.scale or 0
        return f"{Decimal(repr(float(value))):.{scale}f}"
    if name in ("float", "double"):
        return repr(float(value)) if not float(value).is_integer() else str(int(value))
    if name == "year":
        return f"{int(value):04d}"
    return str(value)

"""TiCDC's Simple protocol, JSON encoding (pkg/sink/codec/simple/message.go, encoder.go).

Messages are Go json.Marshal of TiCDC's `message` struct, in its field order with omitempty:
`version, database, table, tableID, type, sql, commitTs, buildTs, schemaVersion, data, old,
tableSchema, preTableSchema`. Types: INSERT/UPDATE/DELETE rows (`data` new image, `old` old
image, values as strings: numbers in decimal, enum/set as their numeric values, bit as an
integer, binary as base64, timestamps as `{"location","value"}`), DDLs (CREATE, ALTER, ...,
with the table schema after and before), WATERMARK, and BOOTSTRAP: a table's schema, sent to
every partition before the table's first row and then every 120 s or 10000 messages.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Callable, Optional, Sequence, Union

from sparkcdc.config.replica import SinkConfig
from sparkcdc.model.events import ColumnInfo, DDLEvent, RowChange, TableInfo, Value
from sparkcdc.sink.codec import gojson
from sparkcdc.sink.codec.canal_json import ddl_event_type
from sparkcdc.sink.codec.mysqltypes import (
    display_length,
    enum_index,
    enum_name,
    is_binary,
    set_mask,
    set_names,
    type_name,
)
from sparkcdc.sink.codec.encoder import Message, MessageEncoder

VERSION = 1
BOOTSTRAP_INTERVAL_SECONDS = 120  # send-bootstrap-interval-in-sec
BOOTSTRAP_MESSAGE_COUNT = 10000  # send-bootstrap-in-msg-count
TIME_ZONE = "UTC"  # sparkcdc's canonical timestamps are UTC


def _string_type(name: str) -> bool:
    return name in ("char", "varchar", "binary", "varbinary", "enum", "set") or name.endswith(("text", "blob"))


def data_type(col: ColumnInfo) -> dict:
    """TiCDC's dataType: mysqlType, charset, collate, then omitempty length/decimal/elements/flags."""
    name = type_name(col)
    if _string_type(name) and not is_binary(col):
        charset = col.charset or "utf8mb4"
        collate = f"{charset}_bin"
    else:
        charset, collate = "binary", "binary"
    entry: dict = {"mysqlType": name, "charset": charset, "collate": collate}
    length = display_length(col)
    if length:
        entry["length"] = length
    if name not in ("float", "double") and col.scale:
        entry["decimal"] = col.scale
    if col.elements:
        entry["elements"] = list(col.elements)
    if col.unsigned:
        entry["unsigned"] = True
    return entry


def column_default(col: ColumnInfo) -> Union[str, int, None]:
    """TiCDC's GetColumnDefaultValue: the text TiDB records, a BIT default as its integer."""
    if col.default is not None and col.mysql_type == "bit":
        try:
            return int(col.default)
        except ValueError:
            return col.default
    return col.default


def table_schema(table: TableInfo) -> dict:
    """TiCDC's TableSchema. Index names are not in our metadata: `primary` and `uk`, as TiDB names
    the primary key when it is the clustered handle."""
    columns = [{"name": c.name, "dataType": data_type(c), "nullable": c.nullable and not c.is_primary_key,
                "default": column_default(c)} for c in table.columns]
    indexes = []
    if table.primary_key:
        indexes.append({"name": "primary", "unique": True, "primary": True, "nullable": False,
                        "columns": list(table.primary_key)})
    elif table.handle_key:
        nullable = any(table.column(n).nullable for n in table.handle_key)
        indexes.append({"name": "uk", "unique": True, "primary": False, "nullable": nullable,
                        "columns": list(table.handle_key)})
    return {"schema": table.schema, "table": table.table, "tableID": table.table_id, "version": table.version,
            "columns": columns, "indexes": indexes}


def encode_value(col: ColumnInfo, value: Value):
    """One column as TiCDC's encodeValue writes it (a string, or the timestamp object)."""
    if value is None:
        return None
    name = type_name(col)
    if name == "timestamp":
        return {"location": TIME_ZONE, "value": value}
    if name == "enum":
        return str(enum_index(col, value))
    if name == "set":
        return str(set_mask(col, value))
    if is_binary(col) and _string_type(name):
        return base64.b64encode(value.encode("latin-1")).decode()
    return value


def canonical_value(col: ColumnInfo, value) -> Value:
    """A Simple column value back in sparkcdc's canonical text form."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("value")
    name = type_name(col)
    if name == "enum":
        return enum_name(col, int(value))
    if name == "set":
        return set_names(col, int(value))
    if is_binary(col) and _string_type(name):
        return base64.b64decode(value).decode("latin-1")
    return value


class SimpleEncoder(MessageEncoder):
    """Rows, DDLs, watermarks and bootstrap messages in Simple JSON; one message per event."""

    ddl_broadcast = True

    def __init__(self, sink: SinkConfig, clock: Callable[[], float] = time.time):
        self._sink = sink
        self._clock = clock
        # (topic, table id) -> [table version, last bootstrap time, messages since]
        self._bootstrapped: dict[tuple[str, int], list] = {}

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _dumps(self, message: dict) -> bytes:
        return gojson.dumps(message).encode()

    def _columns(self, table: TableInfo, image: Sequence[Value]) -> dict:
        values = {col.name: encode_value(col, value) for col, value in zip(table.columns, image)}
        return dict(sorted(values.items()))  # Go marshals a map with sorted keys

    def row_message(self, table: TableInfo, row: RowChange) -> bytes:
        message: dict = {"version": VERSION, "database": table.schema, "table": table.table}
        if table.table_id:
            message["tableID"] = table.table_id
        message["type"] = row.op.upper()
        message["commitTs"] = row.commit_ts
        message["buildTs"] = self._now_ms()
        if table.version:
            message["schemaVersion"] = table.version
        if row.op in ("insert", "update"):
            assert row.after is not None
            message["data"] = self._columns(table, row.after)
        if row.op in ("update", "delete"):
            assert row.before is not None
            message["old"] = self._columns(table, row.before)
        return self._dumps(message)

    def bootstrap(self, table: TableInfo, topic: str) -> Optional[Message]:
        """A BOOTSTRAP message when this table's schema is due on `topic`, else None."""
        now = self._clock()
        state = self._bootstrapped.get((topic, table.table_id))
        due = (state is None or state[0] != table.version or now - state[1] >= BOOTSTRAP_INTERVAL_SECONDS
               or state[2] >= BOOTSTRAP_MESSAGE_COUNT)
        if not due:
            return None
        self._bootstrapped[(topic, table.table_id)] = [table.version, now, 0]
        message = {"version": VERSION, "type": "BOOTSTRAP", "commitTs": 0, "buildTs": self._now_ms(),
                   "tableSchema": table_schema(table)}
        return Message(None, self._dumps(message), rows=0)

    # -- the Kafka MessageEncoder protocol ----------------------------------------------------
    def encode_rows(self, table: TableInfo, rows: Sequence[RowChange], topic: str = "") -> list[Message]:
        state = self._bootstrapped.get((topic, table.table_id))
        if state is not None:
            state[2] += len(rows)
        return [Message(None, self.row_message(table, row)) for row in rows]

    def encode_ddl(self, ddl: DDLEvent) -> Optional[Message]:
        message: dict = {"version": VERSION, "type": ddl_event_type(ddl.ddl_type), "sql": ddl.query,
                         "commitTs": ddl.commit_ts, "buildTs": self._now_ms()}
        if ddl.table_info is not None:
            message["tableSchema"] = table_schema(ddl.table_info)
        elif ddl.table and ddl.pre_table_info is None:
            # TiCDC always has the table's info for a table DDL (a DROP TABLE's is the dropped
            # table); where ours has none, the names still tell consumers where the DDL applies.
            message["tableSchema"] = {"schema": ddl.schema, "table": ddl.table, "tableID": 0,
                                      "version": ddl.commit_ts, "columns": [], "indexes": []}
        if ddl.pre_table_info is not None:
            message["preTableSchema"] = table_schema(ddl.pre_table_info)
        return Message(None, self._dumps(message), rows=0)

    def encode_checkpoint(self, ts: int) -> Optional[Message]:
        message = {"version": VERSION, "type": "WATERMARK", "commitTs": ts, "buildTs": self._now_ms()}
        return Message(None, self._dumps(message), rows=0)


def decode(value: bytes) -> dict:
    return json.loads(value)

"""Read one upstream row by its handle key, in sparkcdc's canonical text (model/events.py).

A Kafka consumer needs this for `handle-key-only` large messages, which carry only the key.
TiCDC's consumer reads the row from TiDB at the message's commit-ts (a snapshot read); MariaDB
keeps no such history, so this reads the row as it is now: a row changed again later is applied
with its newer values (the later change then re-applies the same values), and a row deleted since
is skipped (its delete follows). The downstream converges to upstream once the consumer catches up.
"""

from __future__ import annotations

from typing import Callable, Optional

from sparkcdc.model.events import ColumnInfo, TableInfo, Value
from sparkcdc.model.sql_values import to_parameter
from sparkcdc.upstream.values import _double, _float


def _select_expression(column: ColumnInfo) -> str:
    quoted = "`" + column.name.replace("`", "``") + "`"
    kind = column.mysql_type
    if column.is_binary or kind in ("float", "double", "geometry"):
        return quoted  # bytes or a Python float, turned into text below
    if kind == "bit":
        return f"CAST({quoted}+0 AS CHAR)"
    if kind == "year":
        return f"LPAD(CAST({quoted} AS CHAR), 4, '0')"
    return f"CAST({quoted} AS CHAR)"


def _canonical(column: ColumnInfo, value) -> Value:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if column.mysql_type == "float":
        return _float(value)
    if column.mysql_type == "double":
        return _double(value)
    return value


class UpstreamRowReader:
    """`read(table, key)`: the row's canonical values in `table`'s column order, or None if gone."""

    def __init__(self, connect: Callable[[], object]):
        self._connect = connect
        self._connection = None

    def read(self, table: TableInfo, key: dict[str, Value]) -> Optional[tuple]:
        if not key:
            raise ValueError(f"{table.schema}.{table.table}: a handle-key-only message without key columns")
        columns = {c.name: c for c in table.columns}
        select = ", ".join(_select_expression(c) for c in table.columns)
        where = " AND ".join("`" + name.replace("`", "``") + "` = %s" for name in key)
        # Typed, so each reads back exactly (a FLOAT key bound as the text '3.3' finds no row).
        arguments = [to_parameter(columns[name], value) for name, value in key.items()]
        sql = f"SELECT {select} FROM `{table.schema}`.`{table.table}` WHERE {where} LIMIT 1"
        if self._connection is None:
            self._connection = self._connect()
            with self._connection.cursor() as cursor:
                cursor.execute("SET SESSION time_zone = '+00:00'")  # canonical timestamps are UTC
        with self._connection.cursor() as cursor:
            cursor.execute(sql, arguments)
            row = cursor.fetchone()
        if row is None:
            return None
        return tuple(_canonical(c, v) for c, v in zip(table.columns, row))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

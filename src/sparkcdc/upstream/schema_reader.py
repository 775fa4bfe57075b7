"""Reads a table's current definition from information_schema into a `TableInfo`."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from sparkcdc.model.events import ColumnInfo, ForeignKey, TableInfo

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

_JSON_CHECK = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)


def parse_elements(column_type: str) -> tuple[str, ...]:
    """Members of `enum('a','b,c','it''s')` / `set(...)`, honouring quotes, doubled quotes and commas."""
    start = column_type.index("(") + 1
    end = column_type.rindex(")")
    body = column_type[start:end]
    elements: list[str] = []
    i = 0
    while i < len(body):
        if body[i] != "'":
            i += 1
            continue
        i += 1
        chars: list[str] = []
        while i < len(body):
            ch = body[i]
            if ch == "'" and i + 1 < len(body) and body[i + 1] == "'":
                chars.append("'")
                i += 2
            elif ch == "\\" and i + 1 < len(body):
                chars.append(body[i + 1])
                i += 2
            elif ch == "'":
                i += 1
                break
            else:
                chars.append(ch)
                i += 1
        elements.append("".join(chars))
    return tuple(elements)


def _bit_width(column_type: str) -> int:
    match = re.search(r"\((\d+)\)", column_type)
    return int(match.group(1)) if match else 1


def _with_default(column: ColumnInfo, column_default) -> ColumnInfo:
    """MariaDB's COLUMN_DEFAULT is SQL NULL for no default, the text `NULL` for DEFAULT NULL and
    quotes string literals; it parses like a DEFAULT clause, so both paths agree."""
    from sparkcdc.schema.defaults import canonical_default
    from sparkcdc.schema.parser import parse_default

    if column_default is None:
        return column
    if isinstance(column_default, (bytes, bytearray)):
        column_default = column_default.decode("utf-8", "surrogateescape")
    return replace(column, default=canonical_default(column, parse_default(column_default)))


def read_table_info(conn, schema: str, table: str, version: int, table_id: int) -> Optional[TableInfo]:
    """The table as information_schema shows it now, or None if it does not exist."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, "
            "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, EXTRA, COLUMN_DEFAULT "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        column_rows = cur.fetchall()
        if not column_rows:
            return None
        cur.execute(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME='PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        index_rows = cur.fetchall()
        json_columns: set[str] = set()
        try:
            cur.execute(
                "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                "WHERE CONSTRAINT_SCHEMA=%s AND TABLE_NAME=%s",
                (schema, table),
            )
            for (clause,) in cur.fetchall():
                json_columns.update(m.replace("``", "`") for m in _JSON_CHECK.findall(clause or ""))
        except Exception:  # MySQL < 8.0.16 has no CHECK_CONSTRAINTS; MySQL reports JSON natively
            pass

    indexes: dict[str, list[str]] = {}
    unique: dict[str, bool] = {}
    for index_name, non_unique, column_name in index_rows:
        indexes.setdefault(index_name, []).append(column_name)
        unique[index_name] = not int(non_unique)
    primary = indexes.get("PRIMARY", [])
    unique_columns = {c for name, cols in indexes.items() if unique[name] and name != "PRIMARY" for c in cols}

    columns = []
    for (name, data_type, column_type, is_nullable, charset, char_len, num_prec, num_scale, dt_prec, extra,
         column_default) in column_rows:
        mysql_type = data_type.lower()
        raw_column_type, column_type = column_type, column_type.lower()
        if name in json_columns and mysql_type == "longtext":
            mysql_type = "json"
        length = precision = scale = None
        elements: tuple[str, ...] = ()
        if mysql_type in ("char", "varchar", "binary", "varbinary"):
            length = int(char_len) if char_len is not None else None
        elif mysql_type == "bit":
            length = _bit_width(column_type)
        elif mysql_type == "decimal":
            precision, scale = int(num_prec), int(num_scale)
        elif mysql_type in ("datetime", "timestamp", "time"):
            scale = int(dt_prec or 0)
        elif mysql_type in ("enum", "set"):
            elements = parse_elements(raw_column_type)
        if mysql_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
            charset = "binary"
        elif mysql_type == "json":
            charset = charset or "utf8mb4"
        extra = (extra or "").upper()
        column = ColumnInfo(
            name=name,
            mysql_type=mysql_type,
            unsigned="unsigned" in column_type,
            nullable=is_nullable == "YES",
            is_primary_key=name in primary,
            is_unique_key=name in unique_columns,
            charset=charset,
            length=length,
            precision=precision,
            scale=scale,
            elements=elements,
            generated="GENERATED" in extra or "VIRTUAL" in extra or "PERSISTENT" in extra,
        )
        columns.append(_with_default(column, column_default))

    by_name = {c.name: c for c in columns}
    handle_key: tuple[str, ...] = tuple(primary)
    if not handle_key:
        for index_name, index_columns in indexes.items():
            if unique[index_name] and all(
                not by_name[c].nullable and not by_name[c].generated for c in index_columns if c in by_name
            ):
                handle_key = tuple(index_columns)
                break
    return TableInfo(schema, table, table_id, tuple(columns), version, handle_key)


def list_tables(conn) -> list[tuple[str, str]]:
    """Every user base table, as (schema, table)."""
    placeholders = ",".join(["%s"] * len(SYSTEM_SCHEMAS))
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            f"WHERE TABLE_TYPE='BASE TABLE' AND TABLE_SCHEMA NOT IN ({placeholders}) ORDER BY 1, 2",
            SYSTEM_SCHEMAS,
        )
        return [(s, t) for s, t in cur.fetchall()]


def read_table_definition(conn, schema: str, table: str):
    """The table as the schema store keeps it (columns, every index, default charset), or None."""
    from sparkcdc.schema.catalog import IndexDef, TableDef
    from sparkcdc.schema.parser import charset_of_collation

    info = read_table_info(conn, schema, table, 0, 0)
    if info is None:
        return None
    with conn.cursor() as cur:
        cur.execute(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, INDEX_TYPE FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME='PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        index_rows = cur.fetchall()
        cur.execute(
            "SELECT TABLE_COLLATION, TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        row = cur.fetchone()
    collation, comment = (row or (None, ""))
    indexes: dict[str, tuple[str, list[str]]] = {}
    for name, non_unique, column, index_type in index_rows:
        if name == "PRIMARY":
            kind = "primary"
        elif not int(non_unique):
            kind = "unique"
        elif (index_type or "").upper() in ("FULLTEXT", "SPATIAL"):
            kind = index_type.lower()
        else:
            kind = "index"
        indexes.setdefault(name, (kind, []))[1].append(column)
    return TableDef(
        schema,
        table,
        info.columns,
        tuple(IndexDef(name, kind, tuple(columns)) for name, (kind, columns) in indexes.items()),
        charset_of_collation(collation) if collation else "utf8mb4",
        comment or "",
    )


def read_catalog(conn):
    """Every user database and base table as the schema store keeps them."""
    from sparkcdc.schema.catalog import Catalog

    placeholders = ",".join(["%s"] * len(SYSTEM_SCHEMAS))
    with conn.cursor() as cur:
        cur.execute("SELECT @@character_set_server")
        server_charset = cur.fetchone()[0]
        cur.execute(
            f"SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA "
            f"WHERE SCHEMA_NAME NOT IN ({placeholders})",
            SYSTEM_SCHEMAS,
        )
        databases = {name: charset for name, charset in cur.fetchall()}
    catalog = Catalog(server_charset, databases, {})
    for schema, table in list_tables(conn):
        definition = read_table_definition(conn, schema, table)
        if definition is not None:
            catalog.tables[(schema, table)] = definition
    return catalog


_SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


def read_foreign_keys(conn) -> list[ForeignKey]:
    """Every FOREIGN KEY constraint of the server's user tables, with its referential actions."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT k.TABLE_SCHEMA, k.TABLE_NAME, k.CONSTRAINT_NAME, k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA, "
            "k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME, r.DELETE_RULE, r.UPDATE_RULE "
            "FROM information_schema.KEY_COLUMN_USAGE k JOIN information_schema.REFERENTIAL_CONSTRAINTS r "
            "ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.TABLE_NAME = k.TABLE_NAME "
            "AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME "
            "WHERE k.REFERENCED_TABLE_NAME IS NOT NULL AND k.TABLE_SCHEMA NOT IN %s "
            "ORDER BY k.TABLE_SCHEMA, k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION",
            (_SYSTEM_SCHEMAS,))
        rows = cur.fetchall()
    constraints: dict[tuple[str, str, str], list] = {}
    for schema, table, name, column, parent_schema, parent_table, parent_column, on_delete, on_update in rows:
        entry = constraints.setdefault((schema, table, name), [parent_schema, parent_table, [], [], on_delete,
                                                               on_update])
        entry[2].append(column)
        entry[3].append(parent_column)
    return [ForeignKey(schema, table, name, tuple(columns), parent_schema, parent_table, tuple(parent_columns),
                       on_delete, on_update)
            for (schema, table, name), (parent_schema, parent_table, columns, parent_columns, on_delete, on_update)
            in constraints.items()]

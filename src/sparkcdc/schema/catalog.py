"""Table and database definitions, and how one parsed DDL turns a catalog into the next one.

A `TableDef` holds what a `TableInfo` cannot (every index by name, the table's default charset)
so the next DDL can be applied to it; `TableDef.info(version)` is what decoders and sinks see.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

from sparkcdc.model.events import ColumnInfo, TableInfo
from sparkcdc.schema import ddl_types as T
from sparkcdc.schema.defaults import canonical_default
from sparkcdc.schema.parser import (
    AddColumn,
    AddIndex,
    ChangeColumn,
    ColumnSpec,
    ConvertPartition,
    ConvertTable,
    DefaultValue,
    DropColumn,
    DropIndex,
    ExchangePartition,
    IndexSpec,
    ParsedDDL,
    RenameColumn,
    RenameIndex,
    RenameTo,
    SetColumnDefault,
    SetOptions,
    TableName,
    charset_of_collation,
)

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

_STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_TEXT_LADDER = ["tinytext", "text", "mediumtext", "longtext"]
_BLOB_LADDER = ["tinyblob", "blob", "mediumblob", "longblob"]
_LADDER_BYTES = [255, 65535, 16777215, 4294967295]
_MAX_BYTES_PER_CHAR = {
    "utf8mb4": 4, "utf8mb3": 3, "utf16": 4, "utf16le": 4, "utf32": 4, "ucs2": 2, "big5": 2, "gbk": 2,
    "gb2312": 2, "sjis": 2, "cp932": 2, "euckr": 2, "ujis": 3, "eucjpms": 3,
}


class SchemaApplyError(ValueError):
    """A DDL does not fit the schema we hold (unknown table/column): the store cannot follow it."""


def stable_table_id(schema: str, table: str) -> int:
    """A table id that is the same in every process (MariaDB exposes no persistent one)."""
    return zlib.crc32(f"{schema}.{table}".encode("utf-8")) & 0x7FFFFFFF


@dataclass(frozen=True)
class IndexDef:
    name: str
    kind: str  # primary, unique, index, fulltext, spatial
    columns: tuple[str, ...]

    @property
    def is_unique(self) -> bool:
        return self.kind in ("primary", "unique")


@dataclass(frozen=True)
class TableDef:
    schema: str
    table: str
    columns: tuple[ColumnInfo, ...]
    indexes: tuple[IndexDef, ...] = ()
    charset: str = "utf8mb4"
    comment: str = ""

    def info(self, version: int) -> TableInfo:
        """The TableInfo decoders and sinks use, with key flags and handle key derived from the indexes."""
        primary = next((i for i in self.indexes if i.kind == "primary"), None)
        primary_columns = {c.lower() for c in primary.columns} if primary else set()
        unique_columns = {c.lower() for i in self.indexes if i.kind == "unique" for c in i.columns}
        columns = tuple(
            replace(c, is_primary_key=c.name.lower() in primary_columns, is_unique_key=c.name.lower() in unique_columns)
            for c in self.columns
        )
        by_name = {c.name.lower(): c for c in columns}
        handle: tuple[str, ...] = ()
        if primary is not None:
            handle = tuple(by_name[c.lower()].name for c in primary.columns)
        else:
            for index in sorted((i for i in self.indexes if i.kind == "unique"), key=lambda i: i.name.lower()):
                if all(c.lower() in by_name and not by_name[c.lower()].nullable and not by_name[c.lower()].generated
                       for c in index.columns):
                    handle = tuple(by_name[c.lower()].name for c in index.columns)
                    break
        return TableInfo(self.schema, self.table, stable_table_id(self.schema, self.table), columns, version, handle)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "TableDef":
        raw = json.loads(text)
        return cls(
            schema=raw["schema"],
            table=raw["table"],
            columns=tuple(ColumnInfo(**{**c, "elements": tuple(c.get("elements", ()))}) for c in raw["columns"]),
            indexes=tuple(IndexDef(i["name"], i["kind"], tuple(i["columns"])) for i in raw["indexes"]),
            charset=raw.get("charset", "utf8mb4"),
            comment=raw.get("comment", ""),
        )

    @classmethod
    def from_table_info(cls, info: TableInfo, charset: str) -> "TableDef":
        """Best effort for versions recorded before definitions were stored: PK and handle key only."""
        indexes = []
        if info.primary_key:
            indexes.append(IndexDef("PRIMARY", "primary", info.primary_key))
        elif info.handle_key:
            indexes.append(IndexDef(info.handle_key[0], "unique", info.handle_key))
        return cls(info.schema, info.table, info.columns, tuple(indexes), charset)

    def column_index(self, name: str) -> int:
        for i, c in enumerate(self.columns):
            if c.name.lower() == name.lower():
                return i
        return -1


@dataclass
class Catalog:
    """Every database (name -> default charset) and table the upstream has at one point."""

    server_charset: str = "utf8mb4"
    databases: dict[str, str] = field(default_factory=dict)
    tables: dict[tuple[str, str], TableDef] = field(default_factory=dict)

    def copy(self) -> "Catalog":
        return Catalog(self.server_charset, dict(self.databases), dict(self.tables))

    def database_charset(self, schema: str) -> str:
        return self.databases.get(schema, self.server_charset)


@dataclass
class Change:
    """What one DDL did: tables whose definition changed (None: gone) and databases (None: dropped)."""

    tables: dict[tuple[str, str], Optional[TableDef]] = field(default_factory=dict)
    databases: dict[str, Optional[str]] = field(default_factory=dict)


# ---- building columns from specs ---------------------------------------------------------------


def max_bytes_per_char(charset: Optional[str]) -> int:
    return _MAX_BYTES_PER_CHAR.get(charset or "", 1)


def _sized(ladder: list[str], needed_bytes: int) -> str:
    for name, limit in zip(ladder, _LADDER_BYTES):
        if needed_bytes <= limit:
            return name
    return ladder[-1]


def build_column(spec: ColumnSpec, table_charset: str) -> ColumnInfo:
    """A column as information_schema would describe it, from its definition and the table charset."""
    mysql_type = spec.type_name
    charset = spec.charset
    length = spec.length
    if mysql_type in ("char", "varchar", "text") and charset == "binary":
        mysql_type = {"char": "binary", "varchar": "varbinary", "text": "blob"}[mysql_type]
    if mysql_type in _BINARY_TYPES:
        charset = "binary"
    elif mysql_type in _STRING_TYPES:
        charset = charset or table_charset
    elif mysql_type == "json":
        charset = "utf8mb4"
    else:
        charset = None
    if mysql_type == "text":
        if length is not None:
            mysql_type = _sized(_TEXT_LADDER, length * max_bytes_per_char(charset))
        length = None
    elif mysql_type == "blob":
        if length is not None:
            mysql_type = _sized(_BLOB_LADDER, length)
        length = None
    if mysql_type not in ("char", "varchar", "binary", "varbinary", "bit"):
        length = None
    column = ColumnInfo(
        name=spec.name,
        mysql_type=mysql_type,
        unsigned=spec.unsigned and mysql_type not in ("bit", "year"),
        # AUTO_INCREMENT implies NOT NULL unless the column says NULL (MariaDB keeps it nullable).
        nullable=not (spec.not_null or spec.primary or (spec.auto_increment and spec.not_null is None)),
        charset=charset,
        length=length,
        precision=spec.precision if mysql_type == "decimal" else None,
        scale=spec.scale if mysql_type in ("decimal", "datetime", "timestamp", "time") else None,
        elements=spec.elements if mysql_type in ("enum", "set") else (),
        generated=spec.generated,
    )
    if spec.default is None or spec.auto_increment:
        return column
    return replace(column, default=canonical_default(column, spec.default))


def _index_name(wanted: Optional[str], columns: tuple[str, ...], taken: set[str]) -> str:
    """MySQL's name for an unnamed index: its first column, then _2, _3, ... until free."""
    if wanted:
        return wanted
    base = columns[0]
    name, n = base, 2
    while name.lower() in taken:
        name, n = f"{base}_{n}", n + 1
    return name


class _TableEditor:
    """Applies column and index changes to one table definition, MySQL's way."""

    def __init__(self, table: TableDef, where: str):
        self.schema, self.table = table.schema, table.table
        self.columns = list(table.columns)
        self.indexes = list(table.indexes)
        self.charset = table.charset
        self.comment = table.comment
        self.where = where

    def result(self) -> TableDef:
        return TableDef(self.schema, self.table, tuple(self.columns), tuple(self.indexes), self.charset, self.comment)

    def find(self, name: str) -> int:
        for i, c in enumerate(self.columns):
            if c.name.lower() == name.lower():
                return i
        return -1

    def require(self, name: str) -> int:
        i = self.find(name)
        if i < 0:
            raise SchemaApplyError(f"{self.where}: column {name} does not exist in {self.schema}.{self.table}")
        return i

    def place(self, column: ColumnInfo, position: Optional[str]) -> None:
        if position is None:
            self.columns.append(column)
        elif position == "":
            self.columns.insert(0, column)
        else:
            self.columns.insert(self.require(position) + 1, column)

    def add_column(self, spec: ColumnSpec, position: Optional[str], if_not_exists: bool = False) -> None:
        if self.find(spec.name) >= 0:
            if if_not_exists:
                return
            raise SchemaApplyError(f"{self.where}: column {spec.name} already exists in {self.schema}.{self.table}")
        self.place(build_column(spec, self.charset), position)
        self.inline_keys(spec)

    def inline_keys(self, spec: ColumnSpec) -> None:
        if spec.primary:
            self.add_index(IndexSpec("PRIMARY", "primary", (spec.name,)))
        if spec.unique:
            self.add_index(IndexSpec(None, "unique", (spec.name,)))

    def change_column(self, old: str, spec: ColumnSpec, position: Optional[str]) -> None:
        i = self.require(old)
        in_primary = any(ix.kind == "primary" and old.lower() in (c.lower() for c in ix.columns) for ix in self.indexes)
        column = build_column(spec, self.charset)
        if in_primary:
            column = replace(column, nullable=False)
        if position is None:
            self.columns[i] = column
        else:
            del self.columns[i]
            self.place(column, position)
        if old.lower() != spec.name.lower() or old != spec.name:
            self.rename_in_indexes(old, spec.name)
        self.inline_keys(spec)

    def set_default(self, name: str, default: Optional[DefaultValue]) -> None:
        i = self.require(name)
        self.columns[i] = replace(self.columns[i], default=canonical_default(self.columns[i], default))

    def rename_column(self, old: str, new: str) -> None:
        i = self.require(old)
        self.columns[i] = replace(self.columns[i], name=new)
        self.rename_in_indexes(old, new)

    def rename_columns(self, names: dict[str, str]) -> None:
        """Several renames at once, each naming a column as it was before any of them."""
        positions = {self.require(old): new for old, new in names.items()}
        originals = {self.columns[i].name: new for i, new in positions.items()}
        for i, new in positions.items():
            self.columns[i] = replace(self.columns[i], name=new)
        lowered = {old.lower(): new for old, new in originals.items()}
        self.indexes = [IndexDef(ix.name, ix.kind, tuple(lowered.get(c.lower(), c) for c in ix.columns))
                        for ix in self.indexes]

    def rename_in_indexes(self, old: str, new: str) -> None:
        self.indexes = [
            IndexDef(ix.name, ix.kind, tuple(new if c.lower() == old.lower() else c for c in ix.columns))
            for ix in self.indexes
        ]

    def drop_column(self, name: str, if_exists: bool = False) -> None:
        i = self.find(name)
        if i < 0:
            if if_exists:
                return
            raise SchemaApplyError(f"{self.where}: column {name} does not exist in {self.schema}.{self.table}")
        del self.columns[i]
        indexes = []
        for ix in self.indexes:
            columns = tuple(c for c in ix.columns if c.lower() != name.lower())
            if columns:
                indexes.append(IndexDef(ix.name, ix.kind, columns))
        self.indexes = indexes

    def add_index(self, spec: IndexSpec, if_not_exists: bool = False) -> None:
        if spec.kind not in ("primary", "unique", "index", "fulltext", "spatial"):
            return
        taken = {ix.name.lower() for ix in self.indexes}
        name = "PRIMARY" if spec.kind == "primary" else _index_name(spec.name, spec.columns, taken)
        if name.lower() in taken:
            if if_not_exists:
                return
            raise SchemaApplyError(f"{self.where}: index {name} already exists on {self.schema}.{self.table}")
        # Key columns as the table spells them: `PRIMARY KEY (id)` on column `ID` keys `ID`.
        spec = replace(spec, columns=tuple(self.columns[self.require(column)].name for column in spec.columns))
        if spec.kind == "primary":
            primary = {c.lower() for c in spec.columns}
            self.columns = [replace(c, nullable=False) if c.name.lower() in primary else c for c in self.columns]
            self.indexes.insert(0, IndexDef("PRIMARY", "primary", spec.columns))
        else:
            self.indexes.append(IndexDef(name, spec.kind, spec.columns))

    def drop_index(self, name: str, if_exists: bool = False, constraint: bool = False) -> None:
        for i, ix in enumerate(self.indexes):
            if ix.name.lower() == name.lower():
                del self.indexes[i]
                return
        if not (if_exists or constraint):
            raise SchemaApplyError(f"{self.where}: index {name} does not exist on {self.schema}.{self.table}")

    def rename_index(self, old: str, new: str) -> None:
        for i, ix in enumerate(self.indexes):
            if ix.name.lower() == old.lower():
                self.indexes[i] = IndexDef(new, ix.kind, ix.columns)
                return
        raise SchemaApplyError(f"{self.where}: index {old} does not exist on {self.schema}.{self.table}")

    def convert_charset(self, charset: str) -> None:
        """CONVERT TO CHARACTER SET: text columns change charset, TEXT types grow to keep their length."""
        columns = []
        for c in self.columns:
            if c.mysql_type in _STRING_TYPES and c.charset != "binary":
                mysql_type = c.mysql_type
                if mysql_type in _TEXT_LADDER and max_bytes_per_char(charset) > max_bytes_per_char(c.charset):
                    mysql_type = _TEXT_LADDER[min(_TEXT_LADDER.index(mysql_type) + 1, 3)]
                c = replace(c, charset=charset, mysql_type=mysql_type)
            columns.append(c)
        self.columns = columns


def _table_charset(options, fallback: str) -> str:
    if options.charset:
        return options.charset
    if options.collation:
        return charset_of_collation(options.collation)
    return fallback


def apply_ddl(catalog: Catalog, ddl: ParsedDDL, where: str = "") -> Change:
    """Apply one parsed DDL to `catalog` in place and return what changed.

    Raises SchemaApplyError when the DDL does not fit the catalog (the store then stops following
    those tables rather than guessing).
    """
    change = Change()
    if ddl.temporary:
        return change  # temporary tables are session-local and carry no rows in the binlog

    def set_table(key: tuple[str, str], table: Optional[TableDef]) -> None:
        if table is None:
            catalog.tables.pop(key, None)
        else:
            catalog.tables[key] = table
        change.tables[key] = table

    def existing(name: TableName) -> TableDef:
        table = catalog.tables.get((name.schema, name.table))
        if table is None:
            raise SchemaApplyError(f"{where}: table {name.schema}.{name.table} is not in the schema store")
        return table

    kind = ddl.kind
    if kind == "create database":
        if ddl.schema in catalog.databases and ddl.if_not_exists:
            return change
        if ddl.or_replace:
            for key in [k for k in catalog.tables if k[0] == ddl.schema]:
                set_table(key, None)
        charset = _table_charset(ddl.options, catalog.server_charset)
        catalog.databases[ddl.schema] = charset
        change.databases[ddl.schema] = charset
    elif kind == "alter database":
        charset = _table_charset(ddl.options, catalog.database_charset(ddl.schema))
        catalog.databases[ddl.schema] = charset
        change.databases[ddl.schema] = charset
    elif kind == "drop database":
        for key in [k for k in catalog.tables if k[0] == ddl.schema]:
            set_table(key, None)
        catalog.databases.pop(ddl.schema, None)
        change.databases[ddl.schema] = None
    elif kind == "create table":
        name = ddl.tables[0]
        key = (name.schema, name.table)
        if key in catalog.tables and ddl.if_not_exists:
            return change
        if ddl.like is not None:
            source = existing(ddl.like)
            set_table(key, replace(source, schema=name.schema, table=name.table))
            return change
        charset = _table_charset(ddl.options, catalog.database_charset(name.schema))
        editor = _TableEditor(TableDef(name.schema, name.table, (), (), charset, ddl.options.comment or ""), where)
        for spec in ddl.columns:
            editor.add_column(spec, None)
        for index in ddl.indexes:
            editor.add_index(index)
        set_table(key, editor.result())
    elif kind == "drop table":
        for name in ddl.tables:
            key = (name.schema, name.table)
            # A name the store does not hold is dropped as it stands: MariaDB logs DROP TABLE for a
            # SEQUENCE too (a table to it, not to the store), and nothing is left to follow.
            if key in catalog.tables:
                set_table(key, None)
    elif kind == "truncate table":
        name = ddl.tables[0]
        set_table((name.schema, name.table), existing(name))
    elif kind == "rename table":
        # Sequential: RENAME a TO b, b TO c is valid and swaps go through a temporary name.
        for old, new in ddl.rename_pairs:
            table = catalog.tables.get((old.schema, old.table))
            if table is None:
                # The server renamed something the store does not follow (a SEQUENCE, a
                # TEMPORARY table): nothing to move, and rules.py sends no RENAME for it.
                continue
            set_table((old.schema, old.table), None)
            set_table((new.schema, new.table), replace(table, schema=new.schema, table=new.table))
    elif kind == "alter table":
        name = ddl.tables[0]
        key = (name.schema, name.table)
        if key not in catalog.tables and (ddl.if_exists or name.schema in SYSTEM_SCHEMAS
                                          or ddl.ddl_type == T.REBUILD_PARTITION):
            # ANALYZE/OPTIMIZE/REPAIR PARTITION of a missing table is logged too (the server
            # reports the error as a result row); it changes nothing either way.
            return change
        editor = _TableEditor(existing(name), where)
        renamed_to: Optional[TableName] = None
        renames = [op for op in ddl.ops if isinstance(op, RenameColumn)]
        if len(renames) > 1:
            # Every RENAME COLUMN of one ALTER names a column of the table as it was:
            # `RENAME COLUMN k TO l, RENAME COLUMN l TO k` swaps them.
            editor.rename_columns({op.old_name: op.new_name for op in renames})
        for op in ddl.ops:
            if isinstance(op, RenameColumn) and len(renames) > 1:
                continue
            if isinstance(op, AddColumn):
                editor.add_column(op.column, op.position, op.if_not_exists)
            elif isinstance(op, DropColumn):
                editor.drop_column(op.name, op.if_exists)
            elif isinstance(op, ChangeColumn):
                if op.if_exists and editor.find(op.old_name) < 0:
                    continue
                editor.change_column(op.old_name, op.column, op.position)
            elif isinstance(op, RenameColumn):
                editor.rename_column(op.old_name, op.new_name)
            elif isinstance(op, SetColumnDefault):
                editor.set_default(op.name, op.default)
            elif isinstance(op, AddIndex):
                editor.add_index(op.index, op.if_not_exists)
            elif isinstance(op, DropIndex):
                editor.drop_index(op.name, op.if_exists, op.constraint)
            elif isinstance(op, RenameIndex):
                editor.rename_index(op.old_name, op.new_name)
            elif isinstance(op, SetOptions):
                options = op.options
                if options.charset or options.collation:
                    charset = _table_charset(options, editor.charset)
                    if options.convert:
                        editor.convert_charset(charset)
                    editor.charset = charset
                if options.comment is not None:
                    editor.comment = options.comment
            elif isinstance(op, RenameTo):
                renamed_to = op.new
        table = editor.result()
        if renamed_to is not None and (renamed_to.schema, renamed_to.table) != key:
            set_table(key, None)
            key = (renamed_to.schema, renamed_to.table)
            table = replace(table, schema=renamed_to.schema, table=renamed_to.table)
        set_table(key, table)
        moves = ddl.moves_rows
        if isinstance(moves, ExchangePartition):
            # Both tables keep their definitions (MariaDB requires them equal); each gets a new
            # version, so rows after the exchange are told apart from rows before it.
            other = moves.table
            set_table((other.schema, other.table), existing(other))
        elif isinstance(moves, ConvertPartition):
            other = moves.table
            if (other.schema, other.table) in catalog.tables:
                raise SchemaApplyError(f"{where}: table {other.schema}.{other.table} already exists")
            set_table((other.schema, other.table), replace(table, schema=other.schema, table=other.table))
        elif isinstance(moves, ConvertTable):
            other = moves.table
            existing(other)
            set_table((other.schema, other.table), None)
    return change


__all__ = [
    "Catalog", "Change", "IndexDef", "SchemaApplyError", "TableDef", "apply_ddl", "build_column", "stable_table_id",
    "SYSTEM_SCHEMAS", "T",
]

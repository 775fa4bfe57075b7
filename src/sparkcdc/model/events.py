"""Table info and change events: plain frozen dataclasses, usable without Spark.

Row values travel between stages in one canonical text form, so codecs and sinks are
pure functions of (TableInfo, event). `None` is SQL NULL; otherwise a value is a `str`:

| column type                         | canonical text                                               |
|-------------------------------------|--------------------------------------------------------------|
| tinyint..bigint (signed/unsigned)   | decimal integer (`-5`, `18446744073709551615`)               |
| decimal(p,s)                        | fixed point with exactly s fraction digits (`1.50`, `-0.001`)|
| float                               | shortest text that round-trips as float32, no exponent       |
| double                              | shortest text that round-trips as float64, no exponent       |
| bit(n)                              | the unsigned integer value in decimal (`5` for b'101')       |
| char/varchar/*text                  | the string                                                   |
| binary/varbinary/*blob, geometry    | the bytes decoded as ISO-8859-1 (lossless; `.encode("latin-1")` restores them) |
| date                                | `YYYY-MM-DD` (`0000-00-00` for the zero date)                |
| datetime(fsp), timestamp(fsp)       | `YYYY-MM-DD HH:MM:SS` plus `.` and exactly fsp digits when fsp > 0; timestamps in UTC |
| time(fsp)                           | `[-]HH:MM:SS` (hours up to 838) plus `.` and fsp digits      |
| year                                | four digits (`2024`, `0000`)                                 |
| enum                                | the element name (`''` for the invalid value 0)              |
| set                                 | element names joined by `,` in definition order              |
| json                                | the JSON text                                                |
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from typing import Literal, Optional

Op = Literal["insert", "update", "delete"]
Value = Optional[str]

BINARY_CHARSET = "binary"

# Base type names, as TiCDC's canal-json writes them in `mysqlType`.
INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
STRING_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
TEMPORAL_TYPES = frozenset({"date", "datetime", "timestamp", "time", "year"})
GEOMETRY_TYPES = frozenset({
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection",
})


@dataclass(frozen=True)
class ColumnInfo:
    """One column as the binlog's full row metadata describes it."""

    name: str
    mysql_type: str  # base name: int, varchar, decimal, datetime, enum, blob, ...
    unsigned: bool = False
    nullable: bool = True
    is_primary_key: bool = False
    is_unique_key: bool = False  # part of a UNIQUE index (TiCDC's UniqueKeyFlag)
    charset: Optional[str] = None  # "binary" for binary strings; None where not a string
    length: Optional[int] = None  # characters for char/varchar/binary/varbinary, bits for bit
    precision: Optional[int] = None  # decimal precision
    scale: Optional[int] = None  # decimal scale, or fractional seconds precision (fsp)
    elements: tuple[str, ...] = ()  # enum/set members in definition order
    generated: bool = False
    # The column default as TiDB records it (TiCDC's GetColumnDefaultValue): a literal in the
    # canonical text of the column's type, or an expression such as `CURRENT_TIMESTAMP(3)`.
    # None when there is none, and for DEFAULT NULL (TiDB keeps no difference).
    default: Optional[str] = None

    @property
    def is_binary(self) -> bool:
        return self.mysql_type in BINARY_TYPES or (
            self.charset == BINARY_CHARSET and self.mysql_type in ("char", "varchar")
        )


@dataclass(frozen=True)
class TableInfo:
    """A table's columns at one version. `version` is the commit-ts it took effect at."""

    schema: str
    table: str
    table_id: int
    columns: tuple[ColumnInfo, ...]
    version: int
    # Columns of the handle key: the PK, else the first UK whose columns are all NOT NULL.
    handle_key: tuple[str, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def primary_key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.is_primary_key)

    @property
    def has_valid_index(self) -> bool:
        return bool(self.handle_key)

    def is_eligible(self, force_replicate: bool) -> bool:
        """Whether the table's rows are replicated (TiCDC's TableInfo.IsEligible): only with a
        valid index, since rows without one cannot be keyed downstream, unless force-replicate."""
        return force_replicate or self.has_valid_index

    def column(self, name: str) -> ColumnInfo:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> str:
        # Kept on the instance (not a field: equality, hashing and asdict ignore it): the planner
        # packs every replicated table's JSON for its read tasks (range_reader.PackedTables), and
        # a changefeed may have 10,000 tables.
        text = self.__dict__.get("_json")
        if text is None:
            raw = asdict(self)
            # A column without a default is written as before defaults were tracked, so the JSON of
            # such tables (schema store, redo logs) keeps its bytes.
            for column in raw["columns"]:
                if column["default"] is None:
                    del column["default"]
            text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_json", text)
        return text

    @classmethod
    def from_json(cls, text: str) -> "TableInfo":
        """The table of `text`; the same (immutable) instance for the same text while it is among
        the last TABLE_INFO_CACHE parsed, so a schema store read for every batch or status query
        parses each table version once per process."""
        return _table_info_from_json(text)

    def with_version(self, version: int) -> "TableInfo":
        return TableInfo(self.schema, self.table, self.table_id, self.columns, version, self.handle_key)


# Table versions kept parsed per process (TableInfo.from_json): more than the tables of the
# largest changefeed we measure (10,000), a few KB each.
TABLE_INFO_CACHE = 1 << 14


@functools.lru_cache(maxsize=TABLE_INFO_CACHE)
def _table_info_from_json(text: str) -> TableInfo:
    raw = json.loads(text)
    columns = tuple(
        ColumnInfo(**{**c, "elements": tuple(c.get("elements", ()))}) for c in raw["columns"]
    )
    info = TableInfo(
        schema=raw["schema"],
        table=raw["table"],
        table_id=raw["table_id"],
        columns=columns,
        version=raw["version"],
        handle_key=tuple(raw.get("handle_key", ())),
    )
    # Its JSON is the text it came from (written by to_json, maybe by an older release that wrote
    # fewer keys; it reads back to the same table): a new process planning its first batch with
    # 10,000 tables would otherwise serialize each again.
    object.__setattr__(info, "_json", text)
    return info


@dataclass(frozen=True)
class RowChange:
    """One row change. `before`/`after` hold canonical values in `TableInfo.columns` order."""

    commit_ts: int
    schema: str
    table: str
    op: Op
    before: Optional[tuple[Value, ...]] = None  # delete and update
    after: Optional[tuple[Value, ...]] = None  # insert and update
    seq: int = 0  # position of the row within its transaction
    snapshot: bool = False  # an insert read by the initial snapshot (pipeline/snapshot.py)

    def __post_init__(self):
        needs = {"insert": (False, True), "update": (True, True), "delete": (True, False)}[self.op]
        if (self.before is not None, self.after is not None) != needs:
            raise ValueError(f"{self.op} row needs before={needs[0]} after={needs[1]}")


@dataclass(frozen=True)
class DDLEvent:
    """A schema change at `commit_ts`. `table` is empty for database-level DDL."""

    commit_ts: int
    schema: str
    table: str
    query: str
    ddl_type: str  # TiCDC's action name: "create table", "add column", "drop database", ...
    table_info: Optional[TableInfo] = None  # the table after the DDL (None if dropped/db-level)
    pre_table_info: Optional[TableInfo] = None
    extra: dict = field(default_factory=dict)


# Referential actions that change child rows (information_schema's DELETE_RULE / UPDATE_RULE).
CASCADING_RULES = frozenset({"CASCADE", "SET NULL", "SET DEFAULT"})


@dataclass(frozen=True)
class ForeignKey:
    """One FOREIGN KEY constraint: `table`'s `columns` reference `parent_table`'s `parent_columns`."""

    schema: str
    table: str
    name: str
    columns: tuple[str, ...]
    parent_schema: str
    parent_table: str
    parent_columns: tuple[str, ...]
    on_delete: str = "RESTRICT"
    on_update: str = "RESTRICT"

    @property
    def cascades(self) -> bool:
        """Whether a change of a parent row changes child rows (InnoDB does it; the binlog
        records only the parent's change)."""
        return self.on_delete in CASCADING_RULES or self.on_update in CASCADING_RULES


# How the upstream ran a transaction's row events (MariaDB's foreign_key_checks, recorded per ROWS
# event in the binlog): all with checks, all without, or some of each.
FK_CHECKS_ON, FK_CHECKS_OFF, FK_CHECKS_MIXED = "on", "off", "mixed"


@dataclass(frozen=True)
class OrderedTransaction:
    """One upstream transaction's row changes of tables a sink applies in binlog order
    (`Sink.keeps_binlog_order`: the MySQL sink's tables linked by cascading foreign keys): every
    row as the binlog has it, not netted, across tables in (seq) order.

    `end_position` (the binlog position after the transaction, the same on every capture) and the
    rows' seq say how far the sink got; `foreign_key_checks` is how the upstream ran them."""

    commit_ts: int
    end_position: str  # FILE:POS
    foreign_key_checks: str
    changes: tuple[tuple[TableInfo, RowChange], ...]

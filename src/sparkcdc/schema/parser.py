"""A MySQL/MariaDB DDL parser: the statement's TiCDC DDL type and the structured change it makes.

Hand-written over a small tokenizer because the store must understand every clause that changes a
table's columns or indexes (CHANGE/MODIFY with FIRST/AFTER, MariaDB's IF [NOT] EXISTS on specs,
partition clauses, `CONVERT TO CHARACTER SET`), and a generic SQL parser falls back to an opaque
command for several of those. Anything it does not understand raises `DDLParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Union

from sparkcdc.schema import ddl_types as T


class DDLParseError(ValueError):
    """The statement looks like DDL but is not in the grammar we understand."""


# ---- tokens ----------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<vcomment>/\*[!M]!?\d*)           # executable comment opener: its body is SQL
  | (?P<vclose>\*/)
  | (?P<comment>/\*.*?\*/|--[ \t][^\n]*|--$|\#[^\n]*)
  | (?P<qid>`(?:[^`]|``)*`)
  | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)
  | (?P<id>[A-Za-z0-9_$\u0080-\uffff]+)
  | (?P<op><=>|<=|>=|<>|!=|:=|\|\||&&|[-+*/%(),.;=<>!@~^&|?:{}\[\]])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str  # id, qid, str, num, op
    text: str
    start: int = 0  # offset in the statement (to quote a clause of it as written)

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "id" else ""

    @property
    def name(self) -> str:
        """The identifier this token names (backticks removed)."""
        if self.kind == "qid":
            return self.text[1:-1].replace("``", "`")
        return self.text


def tokenize(sql: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        if not match:
            raise DDLParseError(f"unexpected character {sql[pos]!r} at offset {pos}")
        pos = match.end()
        kind = match.lastgroup
        if kind in ("ws", "comment", "vcomment", "vclose"):
            continue
        tokens.append(Token(kind, match.group(), match.start()))
    while tokens and tokens[-1].text == ";":
        tokens.pop()
    return tokens


def unquote_string(text: str) -> str:
    quote = text[0]
    body = text[1:-1]
    out: list[str] = []
    i = 0
    escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "Z": "\x1a", "b": "\b"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
        elif ch == quote and i + 1 < len(body) and body[i + 1] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


# ---- the parsed statement ---------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class TableName:
    schema: str
    table: str

    def __str__(self) -> str:
        return f"{quote_identifier(self.schema)}.{quote_identifier(self.table)}"


@dataclass(frozen=True)
class DefaultValue:
    """A DEFAULT clause as written. `kind` is null, string, number, bits (text: the integer in
    decimal), bytes (text: the bytes as ISO-8859-1) or expression (text: normalized, see
    `_expression_text`; CURRENT_TIMESTAMP and its synonyms as `CURRENT_TIMESTAMP[(fsp)]`)."""

    kind: str
    text: str = ""


@dataclass(frozen=True)
class ColumnSpec:
    """A column definition as written (defaults such as the table charset are applied later)."""

    name: str
    type_name: str  # canonical base type: int, varchar, decimal, double, json, ...
    unsigned: bool = False
    length: Optional[int] = None
    precision: Optional[int] = None
    scale: Optional[int] = None
    elements: tuple[str, ...] = ()
    charset: Optional[str] = None  # explicit CHARACTER SET (or implied by COLLATE / NATIONAL)
    collation: Optional[str] = None
    not_null: Optional[bool] = None  # None: not said
    primary: bool = False
    unique: bool = False
    generated: bool = False
    auto_increment: bool = False
    default: Optional[DefaultValue] = None  # None: no DEFAULT clause


@dataclass(frozen=True)
class IndexSpec:
    name: Optional[str]  # None: unnamed, gets MySQL's generated name
    kind: str  # primary, unique, index, fulltext, spatial, foreign, check
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableOptions:
    charset: Optional[str] = None
    collation: Optional[str] = None
    comment: Optional[str] = None
    convert: bool = False  # CONVERT TO CHARACTER SET: every text column changes too


@dataclass(frozen=True)
class AddColumn:
    column: ColumnSpec
    position: Optional[str] = None  # None (last), "" (FIRST) or the name it goes after
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class ChangeColumn:
    """MODIFY (old_name == column.name) or CHANGE old new."""

    old_name: str
    column: ColumnSpec
    position: Optional[str] = None
    if_exists: bool = False


@dataclass(frozen=True)
class RenameColumn:
    old_name: str
    new_name: str


@dataclass(frozen=True)
class SetColumnDefault:
    """ALTER COLUMN c SET DEFAULT v (default) or DROP DEFAULT (default None)."""

    name: str
    default: Optional[DefaultValue]


@dataclass(frozen=True)
class AddIndex:
    index: IndexSpec
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropIndex:
    name: str  # "PRIMARY" for DROP PRIMARY KEY
    if_exists: bool = False
    constraint: bool = False  # DROP CONSTRAINT: a unique key of that name, else a check


@dataclass(frozen=True)
class RenameIndex:
    old_name: str
    new_name: str


@dataclass(frozen=True)
class RenameTo:
    new: TableName


@dataclass(frozen=True)
class SetOptions:
    options: TableOptions


@dataclass(frozen=True)
class ExchangePartition:
    """EXCHANGE PARTITION p WITH TABLE t: the partition's rows and t's rows trade places."""

    partition: str
    table: TableName
    validation: str = ""  # "", "WITH VALIDATION" or "WITHOUT VALIDATION"


@dataclass(frozen=True)
class ConvertPartition:
    """CONVERT PARTITION p TO TABLE t (MariaDB 10.7+): the partition leaves, with its rows, as table t."""

    partition: str
    table: TableName


@dataclass(frozen=True)
class ConvertTable:
    """CONVERT TABLE t TO PARTITION ... (MariaDB 10.7+): t and its rows become a partition; t is gone.
    `definition` is the partition definition as written."""

    table: TableName
    definition: str


@dataclass(frozen=True)
class RemovePartitionRows:
    """TRUNCATE PARTITION and DROP PARTITION, and REORGANIZE of LIST partitions, where MariaDB
    drops the rows whose value no new partition lists (10.11, without an error or a warning):
    rows leave the table without row events. `partitions`: those named, () for ALL."""

    statement: str  # "TRUNCATE PARTITION", "DROP PARTITION" or "REORGANIZE PARTITION"
    partitions: tuple[str, ...]


# The partition DDLs that move rows between the altered table and another table, without row events.
MovesRows = Union[ExchangePartition, ConvertPartition, ConvertTable]

AlterOp = Union[AddColumn, DropColumn, ChangeColumn, RenameColumn, SetColumnDefault, AddIndex, DropIndex, RenameIndex,
                RenameTo, SetOptions, ExchangePartition, ConvertPartition, ConvertTable, RemovePartitionRows]


@dataclass(frozen=True)
class ParsedDDL:
    ddl_type: str  # TiCDC's DDL type (ddl_types)
    kind: str  # statement form: create database, create table, alter table, rename table, ...
    schema: str  # the database a database DDL is about, else the first table's database
    tables: tuple[TableName, ...] = ()  # for rename: old, new, old, new, ...
    columns: tuple[ColumnSpec, ...] = ()
    indexes: tuple[IndexSpec, ...] = ()
    options: TableOptions = field(default_factory=TableOptions)
    ops: tuple[AlterOp, ...] = ()
    like: Optional[TableName] = None
    if_exists: bool = False
    if_not_exists: bool = False
    or_replace: bool = False
    temporary: bool = False

    @property
    def rename_pairs(self) -> list[tuple[TableName, TableName]]:
        return list(zip(self.tables[0::2], self.tables[1::2]))

    @property
    def renames_tables(self) -> bool:
        """RENAME TABLE, or ALTER TABLE ... RENAME TO (whose `tables` are then old, new)."""
        return self.kind == "rename table" or any(isinstance(op, RenameTo) for op in self.ops)

    @property
    def moves_rows(self) -> Optional["MovesRows"]:
        """The EXCHANGE / CONVERT PARTITION / CONVERT TABLE of this ALTER, if it is one."""
        return next((op for op in self.ops if isinstance(op, (ExchangePartition, ConvertPartition, ConvertTable))),
                    None)

    @property
    def partition_rows(self) -> Optional[Union["MovesRows", RemovePartitionRows]]:
        """The partition change of this ALTER that moves or removes rows without row events, if any
        (ADD, COALESCE, RANGE and HASH REORGANIZE, PARTITION BY and REMOVE PARTITIONING keep every
        row: MariaDB refuses them when a row would not fit)."""
        return next((op for op in self.ops if isinstance(
            op, (ExchangePartition, ConvertPartition, ConvertTable, RemovePartitionRows))), None)


# ---- column types -----------------------------------------------------------------------------

_INTEGER_ALIASES = {
    "tinyint": "tinyint", "int1": "tinyint", "bool": "tinyint", "boolean": "tinyint",
    "smallint": "smallint", "int2": "smallint", "mediumint": "mediumint", "int3": "mediumint",
    "middleint": "mediumint", "int": "int", "integer": "int", "int4": "int", "bigint": "bigint",
    "int8": "bigint",
}
_DECIMAL_ALIASES = {"decimal", "dec", "numeric", "fixed", "number"}
_SIMPLE_TYPES = {
    "date": "date", "year": "year", "json": "json", "tinytext": "tinytext",
    "mediumtext": "mediumtext", "longtext": "longtext", "tinyblob": "tinyblob",
    "mediumblob": "mediumblob", "longblob": "longblob", "geometry": "geometry", "point": "point",
    "linestring": "linestring", "polygon": "polygon", "multipoint": "multipoint",
    "multilinestring": "multilinestring", "multipolygon": "multipolygon",
    "geometrycollection": "geometrycollection", "geomcollection": "geometrycollection",
    "uuid": "uuid", "inet4": "inet4", "inet6": "inet6",
}
_KEY_WORDS = {"PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "CONSTRAINT", "FOREIGN", "CHECK", "PERIOD"}


# ---- the parser -------------------------------------------------------------------------------


class _Parser:
    def __init__(self, sql: str, default_schema: str):
        self.sql = sql
        self.tokens = tokenize(sql)
        self.i = 0
        self.default_schema = default_schema

    # -- token helpers

    def peek(self, ahead: int = 0) -> Optional[Token]:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def peek_word(self, ahead: int = 0) -> str:
        token = self.peek(ahead)
        return token.upper if token else ""

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def next(self) -> Token:
        token = self.peek()
        if token is None:
            raise DDLParseError("unexpected end of statement")
        self.i += 1
        return token

    def accept(self, *words: str) -> bool:
        """Consume the words (keywords or punctuation) if they come next, in order."""
        for k, word in enumerate(words):
            token = self.peek(k)
            if token is None:
                return False
            if word.isalpha() or "_" in word:
                if token.upper != word:
                    return False
            elif token.text != word:
                return False
        self.i += len(words)
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise DDLParseError(f"expected {' '.join(words)} at {self.context()}")

    def context(self) -> str:
        rest = " ".join(t.text for t in self.tokens[self.i:self.i + 6])
        return repr(rest) if rest else "the end"

    def identifier(self) -> str:
        token = self.next()
        if token.kind in ("id", "qid"):
            return token.name
        if token.kind == "str":  # MySQL accepts 'name' in a few places (aliases, some options)
            return unquote_string(token.text)
        raise DDLParseError(f"expected a name, got {token.text!r}")

    def table_name(self) -> TableName:
        first = self.identifier()
        if self.accept("."):
            return TableName(first, self.identifier())
        return TableName(self.default_schema, first)

    def skip_parens(self) -> None:
        """Skip a balanced parenthesised group starting at '('."""
        self.expect("(")
        depth = 1
        while depth:
            token = self.next()
            if token.text == "(":
                depth += 1
            elif token.text == ")":
                depth -= 1

    def skip_expression(self, stops: tuple[str, ...] = (",", ")")) -> None:
        """Skip an expression up to a top-level stop token or keyword."""
        depth = 0
        while not self.at_end():
            token = self.peek()
            if depth == 0 and (token.text in stops or token.upper in stops):
                return
            if token.text == "(":
                depth += 1
            elif token.text == ")":
                if depth == 0:
                    return
                depth -= 1
            self.i += 1

    def string_or_name(self) -> str:
        token = self.next()
        if token.kind == "str":
            return unquote_string(token.text)
        return token.name

    def integer(self) -> int:
        token = self.next()
        if token.kind != "num" or not token.text.isdigit():
            raise DDLParseError(f"expected a number, got {token.text!r}")
        return int(token.text)

    def int_list(self) -> list[int]:
        self.expect("(")
        values = [self.integer()]
        while self.accept(","):
            values.append(self.integer())
        self.expect(")")
        return values

    # -- statements

    def parse(self) -> ParsedDDL:
        word = self.peek_word()
        if word == "CREATE":
            self.i += 1
            return self.create()
        if word == "DROP":
            self.i += 1
            return self.drop()
        if word == "ALTER":
            self.i += 1
            return self.alter()
        if word == "RENAME":
            self.i += 1
            if self.accept("TABLE") or self.accept("TABLES"):
                return self.rename_tables()
            return ParsedDDL(T.OTHER, "other", self.default_schema)  # RENAME USER
        if word == "TRUNCATE":
            self.i += 1
            self.accept("TABLE")
            name = self.table_name()
            self.wait_option()
            self.finish()
            return ParsedDDL(T.TRUNCATE_TABLE, "truncate table", name.schema, (name,))
        raise DDLParseError(f"not a DDL statement: {self.context()}")

    def finish(self) -> None:
        if not self.at_end():
            raise DDLParseError(f"unexpected {self.context()}")

    def create(self) -> ParsedDDL:
        or_replace = self.accept("OR", "REPLACE")
        # View prefixes: ALGORITHM=..., DEFINER=..., SQL SECURITY ...
        self.view_prefix()
        self.accept("ONLINE") or self.accept("OFFLINE")
        temporary = self.accept("TEMPORARY")
        word = self.peek_word()
        if word in ("DATABASE", "SCHEMA"):
            self.i += 1
            if_not_exists = self.accept("IF", "NOT", "EXISTS")
            name = self.identifier()
            options = self.database_options()
            return ParsedDDL(T.CREATE_DATABASE, "create database", name, options=options,
                             if_not_exists=if_not_exists, or_replace=or_replace)
        if word == "TABLE":
            self.i += 1
            return self.create_table(or_replace, temporary)
        if word in ("UNIQUE", "FULLTEXT", "SPATIAL", "INDEX"):
            return self.create_index(or_replace)
        if word == "VIEW":
            self.i += 1
            self.accept("IF", "NOT", "EXISTS")
            name = self.table_name()
            return ParsedDDL(T.CREATE_VIEW, "create view", name.schema, (name,), or_replace=or_replace)
        return ParsedDDL(T.OTHER, "other", self.default_schema)  # trigger, procedure, user, ...

    def view_prefix(self) -> None:
        while True:
            if self.accept("ALGORITHM", "="):
                self.next()
            elif self.accept("DEFINER", "="):
                self.next()  # user
                if self.accept("@"):
                    self.next()
                elif self.peek() is not None and self.peek().text.startswith("@"):
                    self.next()
                if self.accept("(", ")"):
                    pass
            elif self.accept("SQL", "SECURITY"):
                self.next()
            else:
                return

    def database_options(self) -> TableOptions:
        charset = collation = comment = None
        while not self.at_end():
            self.accept("DEFAULT")
            if self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
                self.accept("=")
                charset = self.string_or_name().lower()
            elif self.accept("COLLATE"):
                self.accept("=")
                collation = self.string_or_name().lower()
            elif self.accept("COMMENT"):
                self.accept("=")
                comment = self.string_or_name()
            else:
                raise DDLParseError(f"unknown database option at {self.context()}")
        return TableOptions(charset, collation, comment)

    def create_table(self, or_replace: bool, temporary: bool) -> ParsedDDL:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.table_name()
        if self.accept("LIKE") or self.accept("(", "LIKE"):
            like = self.table_name()
            self.accept(")")
            self.finish()
            return ParsedDDL(T.CREATE_TABLE, "create table", name.schema, (name,), like=like,
                             if_not_exists=if_not_exists, or_replace=or_replace, temporary=temporary)
        columns: list[ColumnSpec] = []
        indexes: list[IndexSpec] = []
        if self.peek() is not None and self.peek().text == "(" and not self.starts_select(1):
            self.i += 1
            while True:
                if self.peek_word() in _KEY_WORDS and not self.is_column_named_like_keyword():
                    index = self.index_definition()
                    if index is not None:
                        indexes.append(index)
                else:
                    columns.append(self.column_definition())
                if self.accept(")"):
                    break
                self.expect(",")
        options = self.table_options(stop_at_select=True)
        if not self.at_end():
            self.accept("IGNORE") or self.accept("REPLACE")
            self.accept("AS")
            if self.peek_word() in ("SELECT", "WITH") or (self.peek() is not None and self.peek().text == "("):
                # CREATE ... SELECT: the binlog (ROW format) logs the full column list instead.
                if not columns:
                    raise DDLParseError("CREATE TABLE ... SELECT without column definitions")
                self.i = len(self.tokens)
        self.finish()
        return ParsedDDL(T.CREATE_TABLE, "create table", name.schema, (name,), tuple(columns), tuple(indexes),
                         options, if_not_exists=if_not_exists, or_replace=or_replace, temporary=temporary)

    def starts_select(self, ahead: int) -> bool:
        return self.peek_word(ahead) in ("SELECT", "WITH", "VALUES")

    def is_column_named_like_keyword(self) -> bool:
        """`key INT` / `index VARCHAR(3)`: a quoted or bare column whose name is a key word."""
        token = self.peek()
        if token.kind == "qid":
            return True
        nxt = self.peek(1)
        if token.upper in ("KEY", "INDEX") and nxt is not None and nxt.kind in ("id",) and nxt.upper not in (
            "USING", "IF"
        ) and self.peek(2) is not None and self.peek(2).text not in ("(",):
            # KEY name (cols) has '(' after the name; KEY int has a type after it.
            return nxt.upper in _ALL_TYPE_WORDS
        return False

    def index_definition(self) -> Optional[IndexSpec]:
        """PRIMARY KEY / UNIQUE / INDEX / FULLTEXT / SPATIAL / FOREIGN KEY / CHECK; None for checks."""
        constraint_name = None
        if self.accept("CONSTRAINT"):
            self.accept("IF", "NOT", "EXISTS")
            if self.peek_word() not in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
                constraint_name = self.identifier()
        word = self.next().upper
        if word == "CHECK":
            self.skip_parens()
            self.accept("NOT") and self.expect("ENFORCED")
            self.accept("ENFORCED")
            return IndexSpec(constraint_name, "check")
        if word == "PERIOD":
            self.expect("FOR")
            self.identifier()
            self.skip_parens()
            return None
        if word == "PRIMARY":
            self.expect("KEY")
            kind = "primary"
        elif word == "UNIQUE":
            self.accept("KEY") or self.accept("INDEX")
            kind = "unique"
        elif word == "FOREIGN":
            self.expect("KEY")
            kind = "foreign"
        elif word in ("FULLTEXT", "SPATIAL"):
            self.accept("KEY") or self.accept("INDEX")
            kind = word.lower()
        elif word in ("INDEX", "KEY"):
            kind = "index"
        else:
            raise DDLParseError(f"expected an index definition, got {word}")
        self.accept("IF", "NOT", "EXISTS")
        name = constraint_name
        if self.peek() is not None and self.peek().text != "(" and self.peek_word() not in ("USING", "TYPE"):
            name = self.identifier()
        if self.accept("USING") or self.accept("TYPE"):
            self.next()
        columns = self.key_parts()
        if kind == "foreign":
            self.expect("REFERENCES")
            self.table_name()
            if self.peek() is not None and self.peek().text == "(":
                self.skip_parens()
            self.skip_expression()
        else:
            self.index_options()
        if kind == "primary":
            name = "PRIMARY"
        return IndexSpec(name, kind, tuple(columns))

    def key_parts(self) -> list[str]:
        self.expect("(")
        columns = []
        while True:
            if self.peek() is not None and self.peek().text == "(":
                raise DDLParseError("functional key parts are not supported")
            columns.append(self.identifier())
            if self.peek() is not None and self.peek().text == "(":
                self.skip_parens()  # prefix length
            self.accept("ASC") or self.accept("DESC")
            if self.peek_word() == "WITHOUT":
                # An application-time period: MariaDB keys its end and start columns (and makes
                # them NOT NULL); the store does not model periods, so it stops here.
                raise DDLParseError("WITHOUT OVERLAPS keys are not supported")
            if self.accept(")"):
                return columns
            self.expect(",")

    def index_options(self) -> None:
        while not self.at_end():
            if self.accept("USING") or self.accept("TYPE"):
                self.next()
            elif self.accept("KEY_BLOCK_SIZE"):
                self.accept("=")
                self.next()
            elif self.accept("COMMENT"):
                self.next()
            elif self.accept("WITH", "PARSER"):
                self.next()
            elif self.accept("VISIBLE") or self.accept("INVISIBLE") or self.accept("IGNORED") or self.accept(
                "NOT", "IGNORED"
            ) or self.accept("CLUSTERED") or self.accept("NONCLUSTERED"):
                pass
            elif not self.engine_attribute():
                return

    def column_type(self) -> dict:
        word = self.next().upper
        spec: dict = {}
        if word in ("NATIONAL",):
            word = self.next().upper
            spec["charset"] = "utf8mb3"
        if word in ("NCHAR", "NVARCHAR"):
            spec["charset"] = "utf8mb3"
            word = "CHAR" if word == "NCHAR" else "VARCHAR"
            if word == "CHAR" and self.accept("VARYING"):
                word = "VARCHAR"
        lower = word.lower()
        if lower in _INTEGER_ALIASES:
            spec["type_name"] = _INTEGER_ALIASES[lower]
            if self.peek() is not None and self.peek().text == "(":
                self.int_list()
        elif lower in _DECIMAL_ALIASES:
            spec["type_name"] = "decimal"
            precision, scale = 10, 0
            if self.peek() is not None and self.peek().text == "(":
                values = self.int_list()
                precision = values[0]
                scale = values[1] if len(values) > 1 else 0
            spec["precision"], spec["scale"] = precision, scale
        elif lower in ("float", "double", "real", "float4", "float8"):
            name = {"real": "double", "float4": "float", "float8": "double"}.get(lower, lower)
            if lower == "double":
                self.accept("PRECISION")
            if self.peek() is not None and self.peek().text == "(":
                values = self.int_list()
                if name == "float" and len(values) == 1 and values[0] > 24:
                    name = "double"
            spec["type_name"] = name
        elif lower == "bit":
            spec["type_name"] = "bit"
            spec["length"] = self.int_list()[0] if self.peek() is not None and self.peek().text == "(" else 1
        elif lower in ("char", "character", "varchar", "varchar2", "binary", "varbinary"):
            if lower == "character" and self.accept("VARYING"):
                lower = "varchar"
            elif lower == "char" and self.accept("VARYING"):
                lower = "varchar"
            name = {"character": "char", "varchar2": "varchar"}.get(lower, lower)
            if self.peek() is not None and self.peek().text == "(":
                spec["length"] = self.int_list()[0]
            elif name in ("char", "binary"):
                spec["length"] = 1
            else:
                raise DDLParseError(f"{name} needs a length")
            if name in ("binary", "varbinary"):
                spec["charset"] = "binary"
            spec["type_name"] = name
        elif lower in ("text", "blob"):
            spec["type_name"] = lower
            if self.peek() is not None and self.peek().text == "(":
                spec["length"] = self.int_list()[0]  # resolved against the charset later
        elif lower == "long":
            if self.accept("VARBINARY"):
                spec["type_name"] = "mediumblob"
            else:
                self.accept("VARCHAR") or self.accept("CHARACTER", "VARYING")
                spec["type_name"] = "mediumtext"
        elif lower in ("datetime", "timestamp", "time"):
            spec["type_name"] = lower
            spec["scale"] = self.int_list()[0] if self.peek() is not None and self.peek().text == "(" else 0
        elif lower in ("enum", "set"):
            spec["type_name"] = lower
            self.expect("(")
            elements = []
            while True:
                token = self.next()
                if token.kind != "str":
                    raise DDLParseError(f"expected an {lower} member, got {token.text!r}")
                elements.append(unquote_string(token.text))
                if self.accept(")"):
                    break
                self.expect(",")
            spec["elements"] = tuple(elements)
        elif lower == "serial":
            spec.update(type_name="bigint", unsigned=True, not_null=True, auto_increment=True, unique=True)
        elif lower in _SIMPLE_TYPES:
            spec["type_name"] = _SIMPLE_TYPES[lower]
            if lower == "year" and self.peek() is not None and self.peek().text == "(":
                self.int_list()
        else:
            raise DDLParseError(f"unknown column type {word}")
        # Type attributes.
        while True:
            if self.accept("UNSIGNED"):
                spec["unsigned"] = True
            elif self.accept("SIGNED"):
                pass
            elif self.accept("ZEROFILL"):
                spec["unsigned"] = True
            elif self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
                spec["charset"] = _charset_name(self.string_or_name())
            elif self.accept("ASCII"):
                spec["charset"] = "latin1"
            elif self.accept("UNICODE"):
                spec["charset"] = "ucs2"
            elif self.accept("BYTE"):
                spec["charset"] = "binary"
            elif self.peek_word() == "BINARY" and spec.get("type_name") not in ("binary", "varbinary"):
                self.i += 1  # a _bin collation of the same charset
            else:
                break
        return spec

    def column_definition(self) -> ColumnSpec:
        name = self.identifier()
        spec = self.column_type()
        spec["name"] = name
        self.column_attributes(spec)
        return _column_spec(spec)

    def column_attributes(self, spec: dict) -> None:
        while not self.at_end():
            token = self.peek()
            if token.text in (",", ")") or self.at_partitioning_clause():
                return
            word = token.upper
            if self.accept("NOT", "NULL"):
                spec["not_null"] = True
            elif self.accept("NULL"):
                spec["not_null"] = False
            elif self.accept("DEFAULT"):
                spec["default"] = self.default_value()
            elif self.accept("ON", "UPDATE"):
                self.default_value()
            elif self.accept("AUTO_INCREMENT"):
                spec["auto_increment"] = True
            elif self.accept("UNIQUE"):
                self.accept("KEY")
                spec["unique"] = True
            elif self.accept("PRIMARY", "KEY") or self.accept("KEY"):
                spec["primary"] = True
            elif self.accept("COMMENT"):
                self.next()
            elif self.accept("COLLATE"):
                collation = self.string_or_name().lower()
                spec["collation"] = collation
                if collation != "binary" or spec.get("charset") is None:
                    spec.setdefault("charset", _charset_of_collation(collation))
            elif self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
                spec["charset"] = _charset_name(self.string_or_name())
            elif self.accept("COLUMN_FORMAT") or self.accept("STORAGE"):
                self.next()
            elif self.accept("GENERATED", "ALWAYS") or word == "AS":
                if self.accept("AS", "ROW"):
                    self.next()  # START / END (system versioning)
                    continue
                self.accept("AS")
                if self.accept("IDENTITY"):
                    continue
                self.skip_parens()
                spec["generated"] = True
            elif self.accept("VIRTUAL") or self.accept("STORED") or self.accept("PERSISTENT"):
                pass
            elif self.accept("REFERENCES"):
                self.table_name()
                if self.peek() is not None and self.peek().text == "(":
                    self.skip_parens()
                while self.accept("ON", "DELETE") or self.accept("ON", "UPDATE") or self.accept("MATCH"):
                    self.reference_action()
            elif self.accept("CONSTRAINT"):
                if self.peek_word() != "CHECK":
                    self.identifier()
            elif self.accept("CHECK"):
                self.skip_parens()
            elif self.accept("INVISIBLE") or self.accept("VISIBLE") or self.accept("COMPRESSED") or self.accept(
                "WITH", "SYSTEM", "VERSIONING"
            ) or self.accept("WITHOUT", "SYSTEM", "VERSIONING") or self.accept("SERIAL", "DEFAULT", "VALUE"):
                if token.upper == "COMPRESSED" and self.accept("="):
                    self.next()
            elif word in ("FIRST", "AFTER"):
                return  # ALTER ... ADD/MODIFY column position: the caller reads it
            elif word in ("SRID",):
                self.i += 1
                self.next()
            elif self.engine_attribute():
                pass
            else:
                raise DDLParseError(f"unknown column attribute at {self.context()}")
            # MySQL allows "ENFORCED" after checks.
            self.accept("NOT", "ENFORCED") or self.accept("ENFORCED")

    def reference_action(self) -> None:
        if self.accept("SET", "NULL") or self.accept("SET", "DEFAULT") or self.accept("NO", "ACTION"):
            return
        self.next()

    def default_value(self) -> DefaultValue:
        """The value after DEFAULT (also MariaDB's information_schema COLUMN_DEFAULT text)."""
        start = self.i
        token = self.next()
        following = self.peek()
        if token.text == "(":
            self.i -= 1
            self.skip_parens()
            inner = self.tokens[start + 1:self.i - 1]
            if len(inner) == 1 or (len(inner) == 2 and inner[0].text in ("-", "+")):
                return _Parser.from_tokens(inner).default_value()  # DEFAULT (5), DEFAULT ('x')
            return _expression(inner)
        if token.text in ("-", "+") and following is not None and following.kind == "num":
            self.next()
            return DefaultValue("number", ("-" if token.text == "-" else "") + following.text)
        if token.kind == "num":
            if token.text == "0" and following is not None and following.kind == "id" and \
                    following.text[:1] in ("x", "b") and re.fullmatch(r"[xX][0-9a-fA-F]+|b[01]+", following.text):
                self.next()  # 0x1F, 0b101
                digits = following.text[1:]
                return DefaultValue("bits", str(int(digits, 16 if following.text[0] in "xX" else 2)))
            return DefaultValue("number", token.text)
        if token.kind == "str":
            return DefaultValue("string", unquote_string(token.text))
        if token.kind != "id":
            return _expression([token])
        word = token.upper
        if following is not None and following.kind == "str" and (
                word.startswith("_") or word in ("N", "DATE", "TIME", "TIMESTAMP", "B", "X")):
            self.next()
            if word == "B":
                return DefaultValue("bits", str(int(following.text[1:-1] or "0", 2)))
            if word == "X":
                return DefaultValue("bytes", bytes.fromhex(following.text[1:-1]).decode("latin-1"))
            return DefaultValue("string", unquote_string(following.text))
        if word == "NULL":
            return DefaultValue("null")
        if word in ("TRUE", "FALSE"):
            return DefaultValue("number", "1" if word == "TRUE" else "0")
        if following is not None and following.text == "(":
            self.skip_parens()
        call = self.tokens[start:self.i]
        if word in _CURRENT_TIMESTAMP:
            digits = [t.text for t in call if t.kind == "num"]
            fsp = int(digits[0]) if digits else 0
            return DefaultValue("expression", f"CURRENT_TIMESTAMP({fsp})" if fsp else "CURRENT_TIMESTAMP")
        return _expression(call)

    @classmethod
    def from_tokens(cls, tokens: list[Token]) -> "_Parser":
        parser = cls("", "")
        parser.tokens = list(tokens)
        return parser

    def table_options(self, stop_at_select: bool = False, stop_at: tuple[str, ...] = ()) -> TableOptions:
        charset = collation = comment = None
        convert = False
        while not self.at_end():
            word = self.peek_word()
            if word in stop_at or (stop_at_select and word in ("SELECT", "AS", "IGNORE", "REPLACE", "WITH")):
                break
            if self.peek().text == "(" and stop_at_select:
                break
            if self.accept(","):
                continue
            if word == "PARTITION" or word == "PARTITIONS":
                self.skip_partition_clause()
                continue
            self.accept("DEFAULT")
            if self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
                self.accept("=")
                charset = _charset_name(self.string_or_name())
            elif self.accept("COLLATE"):
                self.accept("=")
                collation = self.string_or_name().lower()
            elif self.accept("COMMENT"):
                self.accept("=")
                comment = self.string_or_name()
            elif self.accept("UNION"):
                self.accept("=")
                self.skip_parens()
            elif self.peek() is not None and self.peek().kind in ("id", "qid"):
                self.i += 1  # ENGINE, AUTO_INCREMENT, ROW_FORMAT, ... [=] value
                if self.peek_word() in ("DIRECTORY",):
                    self.i += 1
                self.accept("=")
                if not self.at_end():
                    self.next()
            else:
                raise DDLParseError(f"unknown table option at {self.context()}")
        return TableOptions(charset, collation, comment, convert)

    def skip_partition_clause(self) -> None:
        """PARTITION BY ... [PARTITIONS n] [SUBPARTITION ...] [(partition definitions)]: no column change."""
        depth = 0
        while not self.at_end():
            token = self.peek()
            if depth == 0 and token.upper in ("SELECT", "AS"):
                return
            if token.text == "(":
                depth += 1
            elif token.text == ")":
                depth -= 1
            self.i += 1

    def create_index(self, or_replace: bool) -> ParsedDDL:
        kind = "index"
        if self.accept("UNIQUE"):
            kind = "unique"
        elif self.accept("FULLTEXT"):
            kind = "fulltext"
        elif self.accept("SPATIAL"):
            kind = "spatial"
        self.expect("INDEX")
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.identifier()
        if self.accept("USING") or self.accept("TYPE"):
            self.next()
        self.expect("ON")
        table = self.table_name()
        self.wait_option()
        columns = self.key_parts()
        self.index_options()
        self.lock_and_algorithm()
        self.finish()
        return ParsedDDL(T.CREATE_INDEX, "alter table", table.schema, (table,),
                         ops=(AddIndex(IndexSpec(name, kind, tuple(columns)), if_not_exists or or_replace),))

    def lock_and_algorithm(self) -> None:
        self.wait_option()
        while self.accept("ALGORITHM") or self.accept("LOCK"):
            self.accept("=")
            self.next()

    def drop(self) -> ParsedDDL:
        self.accept("TEMPORARY")
        word = self.peek_word()
        if word in ("DATABASE", "SCHEMA"):
            self.i += 1
            if_exists = self.accept("IF", "EXISTS")
            name = self.identifier()
            self.finish()
            return ParsedDDL(T.DROP_DATABASE, "drop database", name, if_exists=if_exists)
        if word in ("TABLE", "TABLES"):
            self.i += 1
            if_exists = self.accept("IF", "EXISTS")
            names = [self.table_name()]
            while self.accept(","):
                names.append(self.table_name())
            self.wait_option()
            self.accept("RESTRICT") or self.accept("CASCADE")
            self.finish()
            return ParsedDDL(T.DROP_TABLE, "drop table", names[0].schema, tuple(names), if_exists=if_exists)
        if word == "VIEW":
            self.i += 1
            if_exists = self.accept("IF", "EXISTS")
            names = [self.table_name()]
            while self.accept(","):
                names.append(self.table_name())
            return ParsedDDL(T.DROP_VIEW, "drop view", names[0].schema, tuple(names), if_exists=if_exists)
        if word == "INDEX" or (word in ("ONLINE", "OFFLINE") and self.peek_word(1) == "INDEX"):
            self.accept("ONLINE") or self.accept("OFFLINE")
            self.expect("INDEX")
            if_exists = self.accept("IF", "EXISTS")
            name = self.identifier()
            self.expect("ON")
            table = self.table_name()
            self.lock_and_algorithm()
            self.finish()
            if name.upper() == "PRIMARY":
                return ParsedDDL(T.DROP_PRIMARY_KEY, "alter table", table.schema, (table,),
                                 ops=(DropIndex("PRIMARY", if_exists),))
            return ParsedDDL(T.DROP_INDEX, "alter table", table.schema, (table,), ops=(DropIndex(name, if_exists),))
        return ParsedDDL(T.OTHER, "other", self.default_schema)

    def rename_tables(self) -> ParsedDDL:
        names: list[TableName] = []
        while True:
            names.append(self.table_name())
            self.expect("TO")
            names.append(self.table_name())
            if not self.accept(","):
                break
        self.finish()
        return ParsedDDL(T.RENAME_TABLE, "rename table", names[0].schema, tuple(names))

    def alter(self) -> ParsedDDL:
        self.accept("ONLINE") or self.accept("OFFLINE")
        self.accept("IGNORE")
        word = self.peek_word()
        if word in ("DATABASE", "SCHEMA"):
            self.i += 1
            name = self.default_schema
            if self.peek_word() not in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT"):
                name = self.identifier()
            options = self.database_options()
            return ParsedDDL(T.MODIFY_SCHEMA_CHARSET, "alter database", name, options=options)
        if word == "TABLE":
            self.i += 1
            return self.alter_table()
        self.view_prefix()
        if self.accept("VIEW"):
            name = self.table_name()
            return ParsedDDL(T.CREATE_VIEW, "create view", name.schema, (name,), or_replace=True)
        return ParsedDDL(T.OTHER, "other", self.default_schema)

    def alter_table(self) -> ParsedDDL:
        if_exists = self.accept("IF", "EXISTS")
        table = self.table_name()
        self.wait_option()
        types: list[str] = []
        ops: list[AlterOp] = []
        while not self.at_end():
            ddl_type, op = self.alter_spec(table)
            if ddl_type is not None:
                types.append(ddl_type)
            if op is not None:
                ops.append(op)
            # Table options and a partitioning clause may follow without a comma
            # (`ENGINE=X ROW_FORMAT=Y PARTITION BY ...`).
            if not self.accept(",") and not self.at_partitioning_clause() and not self.at_table_option():
                break
        self.finish()
        ddl_type = _combine(types)
        tables = (table,)
        for op in ops:
            if isinstance(op, RenameTo):
                tables = (table, op.new)
            elif isinstance(op, (ExchangePartition, ConvertPartition, ConvertTable)):
                tables = (table, op.table)
        return ParsedDDL(ddl_type, "alter table", table.schema, tables, ops=tuple(ops), if_exists=if_exists)

    def at_table_option(self) -> bool:
        """A table option comes next: a known option word, or any `name = value` (MariaDB's
        engine-defined options)."""
        token, following = self.peek(), self.peek(1)
        if token is None or token.kind != "id":
            return False
        return token.upper in _TABLE_OPTION_WORDS | {"UNION", "COMMENT", "AUTO_INCREMENT", "DEFAULT", "CHARACTER",
                                                     "CHARSET", "COLLATE"} or (
            following is not None and following.text == "=")

    def wait_option(self) -> None:
        """MariaDB's `WAIT n` / `NOWAIT` (how long a DDL waits for its metadata lock)."""
        if self.accept("NOWAIT"):
            return
        if self.accept("WAIT"):
            self.next()

    def engine_attribute(self) -> bool:
        """MariaDB's engine-defined attribute of a column, index or table: `name = value`."""
        token, following = self.peek(), self.peek(1)
        if token is None or token.kind not in ("id", "qid") or following is None or following.text != "=":
            return False
        self.i += 2
        self.next()
        return True

    def at_partitioning_clause(self) -> bool:
        return (self.peek_word() == "PARTITION" and self.peek_word(1) == "BY") or (
            self.peek_word() == "REMOVE" and self.peek_word(1) == "PARTITIONING")

    def position(self) -> Optional[str]:
        if self.accept("FIRST"):
            return ""
        if self.accept("AFTER"):
            return self.identifier()
        return None

    def alter_spec(self, table: TableName) -> tuple[Optional[str], Optional[AlterOp]]:
        if self.accept("ADD"):
            nxt = self.peek_word()
            if nxt == "PARTITION":
                self.i += 1
                self.accept("IF", "NOT", "EXISTS")
                return self.added_partitions(), None
            if nxt in _KEY_WORDS and not (self.peek().kind == "qid") and nxt not in ("KEY",) or nxt in ("KEY",) and (
                self.peek(1) is not None and (self.peek(1).text == "(" or self.peek_word(1) in ("IF", "USING"))
                or self.peek_word(2) in ("USING", "TYPE")
                or self.peek(2) is not None and self.peek(2).text == "("
            ):
                if_not_exists = False
                index = self.index_definition()
                if index.kind == "primary":
                    return T.ADD_PRIMARY_KEY, AddIndex(index)
                if index.kind in ("unique", "index", "fulltext", "spatial"):
                    return T.CREATE_INDEX, AddIndex(index, if_not_exists)
                if index.kind == "foreign":
                    return T.ADD_FOREIGN_KEY, None
                return T.ADD_CHECK_CONSTRAINT, None
            self.accept("COLUMN")
            if_not_exists = self.accept("IF", "NOT", "EXISTS")
            if self.accept("("):
                columns = [self.column_definition()]
                while self.accept(","):
                    columns.append(self.column_definition())
                self.expect(")")
                # Several columns in one spec: each is added at the end, in order.
                ops = [AddColumn(c, None, if_not_exists) for c in columns]
                return T.ADD_COLUMN, _Many(tuple(ops))
            column = self.column_definition()
            return T.ADD_COLUMN, AddColumn(column, self.position(), if_not_exists)
        if self.accept("DROP"):
            nxt = self.peek_word()
            if self.accept("PRIMARY", "KEY"):
                return T.DROP_PRIMARY_KEY, DropIndex("PRIMARY")
            if nxt in ("INDEX", "KEY") and self.peek(1) is not None:
                self.i += 1
                if_exists = self.accept("IF", "EXISTS")
                return T.DROP_INDEX, DropIndex(self.identifier(), if_exists)
            if self.accept("FOREIGN", "KEY"):
                self.accept("IF", "EXISTS")
                self.identifier()
                return T.DROP_FOREIGN_KEY, None
            if self.accept("CONSTRAINT") or self.accept("CHECK"):
                if_exists = self.accept("IF", "EXISTS")
                return T.DROP_CHECK_CONSTRAINT, DropIndex(self.identifier(), if_exists, constraint=True)
            if self.accept("PARTITION"):
                self.accept("IF", "EXISTS")
                return T.DROP_PARTITION, RemovePartitionRows("DROP PARTITION", self.partition_names())
            if self.accept("SYSTEM", "VERSIONING") or self.accept("PERIOD", "FOR"):
                self.skip_expression()
                return T.ALTER_TABLE, None
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            name = self.identifier()
            self.accept("RESTRICT") or self.accept("CASCADE")
            return T.DROP_COLUMN, DropColumn(name, if_exists)
        if self.accept("MODIFY"):
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            column = self.column_definition()
            return T.MODIFY_COLUMN, ChangeColumn(column.name, column, self.position(), if_exists)
        if self.accept("CHANGE"):
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            old = self.identifier()
            column = self.column_definition()
            return T.MODIFY_COLUMN, ChangeColumn(old, column, self.position(), if_exists)
        if self.accept("ALTER"):
            if self.accept("INDEX") or self.accept("KEY"):
                self.identifier()
                if not (self.accept("VISIBLE") or self.accept("INVISIBLE") or self.accept("IGNORED")
                        or self.accept("NOT", "IGNORED")):
                    raise DDLParseError(f"unknown ALTER INDEX clause at {self.context()}")
                return T.ALTER_INDEX_VISIBILITY, None
            if self.accept("CHECK") or self.accept("CONSTRAINT"):
                self.identifier()
                self.skip_expression((",",))
                return T.ALTER_TABLE, None
            self.accept("COLUMN")
            self.accept("IF", "EXISTS")
            name = self.identifier()
            if self.accept("SET", "DEFAULT"):
                return T.SET_DEFAULT_VALUE, SetColumnDefault(name, self.default_value())
            if self.accept("DROP", "DEFAULT"):
                return T.SET_DEFAULT_VALUE, SetColumnDefault(name, None)
            if self.accept("SET", "VISIBLE") or self.accept("SET", "INVISIBLE"):
                return T.ALTER_TABLE, None
            raise DDLParseError(f"unknown ALTER COLUMN {name} clause at {self.context()}")
        if self.accept("RENAME"):
            if self.accept("COLUMN"):
                self.accept("IF", "EXISTS")
                old = self.identifier()
                self.expect("TO")
                return T.MODIFY_COLUMN, RenameColumn(old, self.identifier())
            if self.accept("INDEX") or self.accept("KEY"):
                self.accept("IF", "EXISTS")
                old = self.identifier()
                self.expect("TO")
                return T.RENAME_INDEX, RenameIndex(old, self.identifier())
            self.accept("TO") or self.accept("AS")
            return T.RENAME_TABLE, RenameTo(self.table_name())
        if self.accept("CONVERT", "TO"):
            self.accept("CHARACTER", "SET") or self.accept("CHARSET")
            charset = _charset_name(self.string_or_name())
            collation = None
            if self.accept("COLLATE"):
                collation = self.string_or_name().lower()
            return T.MODIFY_TABLE_CHARSET, SetOptions(TableOptions(charset, collation, None, True))
        partition_spec = self.partition_spec()
        if partition_spec is not None:
            return partition_spec
        if self.accept("ALGORITHM") or self.accept("LOCK"):
            self.accept("=")
            self.next()
            return None, None
        if self.accept("FORCE") or self.accept("ENABLE", "KEYS") or self.accept("DISABLE", "KEYS") or \
                self.accept("DISCARD", "TABLESPACE") or self.accept("IMPORT", "TABLESPACE") or \
                self.accept("WITH", "VALIDATION") or self.accept("WITHOUT", "VALIDATION") or \
                self.accept("ADD", "SYSTEM", "VERSIONING"):
            return T.ALTER_TABLE, None
        if self.accept("ORDER", "BY"):
            while True:
                self.skip_expression((",",))
                if not (self.peek() is not None and self.peek().text == "," and self.peek(1) is not None
                        and self.peek(1).kind in ("id", "qid") and self.peek(1).upper not in _ALTER_SPEC_WORDS):
                    break
                self.i += 1
            return T.ALTER_TABLE, None
        # Table options, one per spec.
        options = self.table_option_spec()
        return options

    def table_option_spec(self) -> tuple[Optional[str], Optional[AlterOp]]:
        start = self.i
        self.accept("DEFAULT")
        if self.accept("CHARACTER", "SET") or self.accept("CHARSET"):
            self.accept("=")
            charset = _charset_name(self.string_or_name())
            collation = None
            if self.accept("COLLATE"):
                self.accept("=")
                collation = self.string_or_name().lower()
            return T.MODIFY_TABLE_CHARSET, SetOptions(TableOptions(charset, collation))
        if self.accept("COLLATE"):
            self.accept("=")
            collation = self.string_or_name().lower()
            return T.MODIFY_TABLE_CHARSET, SetOptions(TableOptions(None, collation))
        if self.accept("COMMENT"):
            self.accept("=")
            return T.MODIFY_TABLE_COMMENT, SetOptions(TableOptions(comment=self.string_or_name()))
        if self.accept("AUTO_INCREMENT"):
            self.accept("=")
            self.next()
            return T.REBASE_AUTO_ID, None
        if self.accept("UNION"):
            self.accept("=")
            self.skip_parens()
            return T.ALTER_TABLE, None
        if self.i == start and self.peek() is not None and self.peek().upper in _TABLE_OPTION_WORDS:
            self.i += 1
            if self.peek_word() == "DIRECTORY":
                self.i += 1
            self.accept("=")
            self.next()
            return T.ALTER_TABLE, None
        if self.i == start and self.engine_attribute():
            return T.ALTER_TABLE, None
        raise DDLParseError(f"unknown ALTER TABLE clause at {self.context()}")

    def partition_spec(self) -> Optional[tuple[str, Optional[AlterOp]]]:
        """A partition-management spec of ALTER TABLE (other than ADD/DROP PARTITION), classified
        as TiDB classifies the same statement's job: COALESCE and REORGANIZE are both
        `reorganize table partition`. MariaDB's CONVERT PARTITION/TABLE, which TiDB lacks, count as
        the partition list change they make (drop / add a partition). None: not one."""
        if self.peek_word() == "PARTITION" and self.peek_word(1) == "BY":
            self.skip_partition_clause_in_alter()
            return T.ALTER_PARTITIONING, None
        if self.accept("REMOVE", "PARTITIONING"):
            return T.REMOVE_PARTITIONING, None
        if self.accept("TRUNCATE", "PARTITION"):
            return T.TRUNCATE_PARTITION, RemovePartitionRows("TRUNCATE PARTITION", self.partition_names())
        if self.accept("EXCHANGE", "PARTITION"):
            partition = self.identifier()
            self.expect("WITH", "TABLE")
            other = self.table_name()
            validation = ""
            if self.accept("WITH", "VALIDATION"):
                validation = "WITH VALIDATION"
            elif self.accept("WITHOUT", "VALIDATION"):
                validation = "WITHOUT VALIDATION"
            return T.EXCHANGE_PARTITION, ExchangePartition(partition, other, validation)
        if self.accept("REORGANIZE", "PARTITION"):
            self.no_write_to_binlog()
            if not self.at_end() and self.peek().text != ",":
                names = self.partition_names()
                self.expect("INTO")
                start = self.i
                self.skip_parens()
                words = [token.upper for token in self.tokens[start:self.i]]
                if any(a == "VALUES" and b == "IN" for a, b in zip(words, words[1:])):  # LIST partitions
                    return T.REORGANIZE_PARTITION, RemovePartitionRows("REORGANIZE PARTITION", names)
            return T.REORGANIZE_PARTITION, None
        if self.accept("COALESCE", "PARTITION"):
            self.no_write_to_binlog()
            self.integer()
            return T.REORGANIZE_PARTITION, None
        for action in ("REBUILD", "OPTIMIZE", "ANALYZE", "CHECK", "REPAIR"):
            if self.accept(action, "PARTITION"):
                self.no_write_to_binlog()
                self.partition_names()
                self.accept("FOR", "UPGRADE")
                return T.REBUILD_PARTITION, None
        if self.accept("DISCARD", "PARTITION") or self.accept("IMPORT", "PARTITION"):
            self.partition_names()
            self.expect("TABLESPACE")
            return T.ALTER_TABLE, None
        if self.accept("CONVERT", "PARTITION"):
            partition = self.identifier()
            self.expect("TO", "TABLE")
            return T.DROP_PARTITION, ConvertPartition(partition, self.table_name())
        if self.accept("CONVERT", "TABLE"):
            other = self.table_name()
            self.expect("TO")
            start = self.i
            self.skip_partition_clause_in_alter()
            if start == self.i or self.tokens[start].upper != "PARTITION":
                raise DDLParseError(f"expected a partition definition at {self.context()}")
            end = self.tokens[self.i - 1]
            definition = self.sql[self.tokens[start].start:end.start + len(end.text)]
            return T.ADD_PARTITION, ConvertTable(other, definition)
        return None

    def added_partitions(self) -> str:
        """ADD PARTITION's type as TiDB gives it: adding to a HASH/KEY table (PARTITIONS n, or
        definitions without VALUES) redistributes every row, a `reorganize table partition`."""
        if self.accept("PARTITIONS"):
            self.integer()
            return T.REORGANIZE_PARTITION
        start = self.i
        self.skip_parens()
        words = {token.upper for token in self.tokens[start:self.i]}
        if self.accept("PARTITIONS"):  # MariaDB allows a count after the definitions too
            self.integer()
        return T.ADD_PARTITION if words & {"VALUES", "HISTORY", "CURRENT"} else T.REORGANIZE_PARTITION

    def no_write_to_binlog(self) -> None:
        self.accept("NO_WRITE_TO_BINLOG") or self.accept("LOCAL")

    def partition_names(self) -> tuple[str, ...]:
        """`ALL` (returned as ()), or partition names separated by commas (not followed by another spec)."""
        if self.accept("ALL"):
            return ()
        names = [self.identifier()]
        while self.peek() is not None and self.peek().text == "," and self.peek(1) is not None and \
                self.peek(1).kind in ("id", "qid") and self.peek(1).upper not in _ALTER_SPEC_WORDS:
            self.i += 1
            names.append(self.identifier())
        return tuple(names)

    def skip_partition_clause_in_alter(self) -> None:
        depth = 0
        while not self.at_end():
            token = self.peek()
            if depth == 0 and token.text == ",":
                return
            if token.text == "(":
                depth += 1
            elif token.text == ")":
                depth -= 1
            self.i += 1



@dataclass(frozen=True)
class _Many:
    """ADD COLUMN (a INT, b INT): several ops from one spec."""

    ops: tuple[AlterOp, ...]


_ALTER_SPEC_WORDS = {
    "ADD", "DROP", "MODIFY", "CHANGE", "ALTER", "RENAME", "CONVERT", "ALGORITHM", "LOCK", "FORCE",
    "ENGINE", "COMMENT", "AUTO_INCREMENT", "DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "ORDER",
}
_TABLE_OPTION_WORDS = {
    "ENGINE", "TYPE", "ROW_FORMAT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM", "COMPRESSION",
    "CONNECTION", "DATA", "INDEX", "DELAY_KEY_WRITE", "ENCRYPTION", "ENCRYPTED", "ENCRYPTION_KEY_ID",
    "INSERT_METHOD", "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "PAGE_CHECKSUM",
    "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "PASSWORD", "STATS_AUTO_RECALC", "STATS_PERSISTENT",
    "STATS_SAMPLE_PAGES", "TABLESPACE", "TRANSACTIONAL", "IETF_QUOTES", "SEQUENCE", "STORAGE",
    "AUTOEXTEND_SIZE", "START",
}
_ALL_TYPE_WORDS = (
    {w.upper() for w in _INTEGER_ALIASES} | {w.upper() for w in _DECIMAL_ALIASES} | {w.upper() for w in _SIMPLE_TYPES}
    | {"FLOAT", "DOUBLE", "REAL", "BIT", "CHAR", "CHARACTER", "VARCHAR", "BINARY", "VARBINARY", "TEXT", "BLOB",
       "DATETIME", "TIMESTAMP", "TIME", "ENUM", "SET", "SERIAL", "NATIONAL", "NCHAR", "NVARCHAR", "LONG"}
)


def _combine(types: list[str]) -> str:
    """One ALTER TABLE's DDL type: the spec's type, or multi schema change when they differ."""
    meaningful = [t for t in types if t != T.ALTER_TABLE]
    distinct = list(dict.fromkeys(meaningful))
    if not distinct:
        return T.ALTER_TABLE
    if len(distinct) == 1:
        return distinct[0]
    return T.MULTI_SCHEMA_CHANGE


def _charset_name(name: str) -> str:
    name = name.lower()
    return "utf8mb3" if name == "utf8" else name


def _charset_of_collation(collation: str) -> str:
    if collation == "binary":
        return "binary"
    return _charset_name(collation.split("_", 1)[0])


def charset_of_collation(collation: str) -> str:
    return _charset_of_collation(collation.lower())


_CURRENT_TIMESTAMP = frozenset({"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"})


def _expression(tokens: list[Token]) -> DefaultValue:
    """A default expression in one spelling whatever its spacing and case, so the text from a
    DDL and MariaDB's re-printed COLUMN_DEFAULT (`1 + 2` for `(1+2)`) compare equal."""
    parts: list[str] = []
    previous: Optional[Token] = None
    for token in tokens:
        text = token.text.lower() if token.kind == "id" else token.text
        if previous is not None and previous.kind in ("id", "num", "qid") and token.kind in ("id", "num", "qid"):
            parts.append(" ")
        parts.append(text)
        previous = token
    return DefaultValue("expression", "".join(parts))


def parse_default(text: str) -> DefaultValue:
    """A default as MariaDB's information_schema COLUMN_DEFAULT writes it (`NULL` is the text;
    an expression comes without its parentheses, `1 + 2`)."""
    parser = _Parser(text, "")
    value = parser.default_value()
    if not parser.at_end():
        return _expression(parser.tokens)
    return value


def _column_spec(spec: dict) -> ColumnSpec:
    if spec.get("charset") is None and spec.get("collation"):
        spec["charset"] = _charset_of_collation(spec["collation"])
    return ColumnSpec(**spec)


def _flatten(ops: tuple) -> tuple[AlterOp, ...]:
    out: list[AlterOp] = []
    for op in ops:
        out.extend(op.ops if isinstance(op, _Many) else (op,))
    return tuple(out)


_DDL_START = re.compile(r"^\s*(?:CREATE|ALTER|DROP|RENAME|TRUNCATE)\b", re.I)


def looks_like_ddl(sql: str) -> bool:
    try:
        tokens = tokenize(sql)
    except DDLParseError:
        return bool(_DDL_START.match(sql))
    return bool(tokens) and tokens[0].upper in ("CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE")


def parse(sql: str, default_schema: str) -> ParsedDDL:
    """Parse one DDL statement; names without a database resolve to `default_schema`.

    Raises DDLParseError for statements outside the grammar (the caller reports them).
    """
    parsed = _Parser(sql, default_schema).parse()
    if parsed.ops and any(isinstance(op, _Many) for op in parsed.ops):
        parsed = ParsedDDL(**{**parsed.__dict__, "ops": _flatten(parsed.ops)})
    return parsed


_OBJECT_WORDS = ("TABLE", "DATABASE", "SCHEMA", "ON")


def guess_target(sql: str, default_schema: str) -> Optional[TableName]:
    """The object a DDL the grammar rejects is about, read leniently from its head: the name after
    the first TABLE (or INDEX ... ON), or a database (`table` empty) after DATABASE/SCHEMA.
    None when even that cannot be read. Used only to decide whether a changefeed's filter
    excludes an unparseable DDL; never to change a schema."""
    try:
        head = _Parser(sql, default_schema)
    except DDLParseError:  # a token the lexer rejects: names come before the first parenthesis
        try:
            head = _Parser(sql.split("(", 1)[0], default_schema)
        except DDLParseError:
            return None
    if head.peek_word() not in ("ALTER", "CREATE", "DROP", "TRUNCATE", "RENAME"):
        return None
    if head.peek_word() == "TRUNCATE" and head.peek_word(1) != "TABLE":
        head.next()
        return _name_or_none(head)
    while not head.at_end():
        word = head.next().upper
        if word not in _OBJECT_WORDS:
            continue
        if word == "ON" and head.peek_word() in ("UPDATE", "DELETE"):  # not CREATE INDEX ... ON
            continue
        head.accept("IF", "NOT", "EXISTS") or head.accept("IF", "EXISTS")
        if word in ("DATABASE", "SCHEMA"):
            try:
                return TableName(head.identifier(), "")
            except DDLParseError:
                return None
        return _name_or_none(head)
    return None


def _name_or_none(head: _Parser) -> Optional[TableName]:
    try:
        return head.table_name()
    except DDLParseError:
        return None

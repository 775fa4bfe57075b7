"""Classifies binlog Query events: transaction control, DDL (with the tables it touches), or other."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_COMMENTS = re.compile(r"/\*(?!!).*?\*/|^\s*(?:--|#)[^\n]*\n", re.DOTALL)
_LEADING_VERSIONED = re.compile(r"^/\*!\d*\s*")

_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("create database", re.compile(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:DATABASE|SCHEMA)\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<names>{_NAME})", re.I)),
    ("drop database", re.compile(rf"^DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?(?P<names>{_NAME})", re.I)),
    ("create table", re.compile(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<names>{_QUALIFIED})", re.I)),
    ("alter table", re.compile(rf"^ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(?P<names>{_QUALIFIED})", re.I)),
    ("drop table", re.compile(rf"^DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(?P<names>{_QUALIFIED}(?:\s*,\s*{_QUALIFIED})*)", re.I)),
    ("truncate table", re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?(?P<names>{_QUALIFIED})", re.I)),
    ("rename table", re.compile(rf"^RENAME\s+TABLES?\s+(?P<names>{_QUALIFIED}\s+TO\s+{_QUALIFIED}(?:\s*,\s*{_QUALIFIED}\s+TO\s+{_QUALIFIED})*)", re.I)),
    # Index DDL changes the table's definition; we treat it as an alter of that table.
    ("alter table", re.compile(rf"^(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}\s+ON\s+(?P<names>{_QUALIFIED})", re.I)),
]
_OTHER_DDL = re.compile(r"^(?:CREATE|ALTER|DROP|RENAME)\s", re.I)
_NOT_DDL = re.compile(r"^(?:CREATE|ALTER|DROP|RENAME)\s+(?:DEFINER\s*=\s*\S+\s+)?(?:USER|ROLE|SERVER)\b", re.I)
_NAME_TOKEN = re.compile(_NAME)


@dataclass(frozen=True)
class DDL:
    ddl_type: str  # create table / drop table / alter table / truncate table / rename table / create database / drop database / other
    tables: tuple[tuple[str, str], ...]  # (schema, table) touched; for rename: (old, new) pairs flattened in order
    schema: str  # the affected schema (database DDL) or the first table's schema


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _split_qualified(text: str, default_schema: str) -> tuple[str, str]:
    parts = [_unquote(p) for p in _NAME_TOKEN.findall(text)]
    return (parts[0], parts[1]) if len(parts) == 2 else (default_schema, parts[0])


def strip_comments(query: str) -> str:
    query = _COMMENTS.sub(" ", query).strip()
    return _LEADING_VERSIONED.sub("", query).strip()


def classify(query: str) -> str:
    """'begin', 'commit', 'rollback', 'savepoint', 'xa' or 'statement'."""
    head = query.lstrip()[:16].upper()
    if head.startswith("BEGIN") or head.startswith("START TRANSACTION"):
        return "begin"
    if head.startswith("COMMIT"):
        return "commit"
    if head.startswith("ROLLBACK TO") or head.startswith("SAVEPOINT") or head.startswith("RELEASE SAVEPOINT"):
        return "savepoint"
    if head.startswith("ROLLBACK"):
        return "rollback"
    if head.startswith("XA "):
        return "xa"
    return "statement"


def parse_ddl(query: str, default_schema: str) -> Optional[DDL]:
    """The DDL a standalone statement performs, or None if it changes no schema (GRANT, FLUSH, ...)."""
    text = strip_comments(query)
    for ddl_type, pattern in _PATTERNS:
        match = pattern.match(text)
        if not match:
            continue
        names = match["names"]
        if ddl_type in ("create database", "drop database"):
            schema = _unquote(names)
            return DDL(ddl_type, (), schema)
        if ddl_type == "rename table":
            tables = []
            for pair in re.split(r"\s*,\s*(?=[`\w$])", names):
                old, new = re.split(r"\s+TO\s+", pair, flags=re.I)
                tables += [_split_qualified(old, default_schema), _split_qualified(new, default_schema)]
            return DDL(ddl_type, tuple(tables), tables[0][0])
        if ddl_type == "drop table":
            tables = [_split_qualified(n, default_schema) for n in re.split(r"\s*,\s*", names)]
            return DDL(ddl_type, tuple(tables), tables[0][0])
        table = _split_qualified(names, default_schema)
        return DDL(ddl_type, (table,), table[0])
    if _OTHER_DDL.match(text) and not _NOT_DDL.match(text):
        return DDL("other", (), default_schema)
    return None

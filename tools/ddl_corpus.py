"""Measure the DDL parser on MariaDB's own test suite: extract every DDL statement from the
mysqltest files (`*.test`, `*.inc`) of Debian's `mariadb-test-data` package, classify them, and
count how many the schema parser understands, and how many it follows correctly on a real server.

    apt-get download mariadb-test-data && dpkg-deb -x mariadb-test-data_*.deb pkg
    python tools/ddl_corpus.py extract pkg/usr/share/mysql/mysql-test -o corpus.jsonl
    python tools/ddl_corpus.py parse corpus.jsonl                 # the parser on PYTHONPATH (+ sqlglot)
    python tools/ddl_corpus.py run corpus.jsonl --port 3306       # against a scratch MariaDB (see below)
    python tools/ddl_corpus.py sample corpus.jsonl -o tests/data/ddl_corpus_sample.jsonl

`parse` classifies each statement (by its head, and by the TiCDC DDL type the parser gives it)
and reports the share parsed; with sqlglot installed it also reports how many sqlglot's MySQL
dialect turns into a statement tree instead of an opaque `Command`. `run` replays each test file's
DDL, in order, on a MariaDB the caller gives it (root, no password, binlog on; it DROPS EVERY
NON-SYSTEM DATABASE of that server between files: never point it at a server with data; start a
scratch one with `python -m sparkcdc.testing.mariadb start --dir DIR`). After each statement the
server accepts, it applies what the server wrote to its binlog (as a changefeed would see it:
CREATE ... SELECT with its columns, nothing for TEMPORARY tables) to the schema store and
compares with information_schema: the same tables exist, and every table the statement touched
has the same columns, unique keys, handle key and charset ("correct"), and non-unique indexes
too ("exact"). To measure another version of the parser, put its `src` first on PYTHONPATH.

mysqltest is a small language: `--command` lines, `command args;` statements, `delimiter`,
`if`/`while` blocks, heredocs (`perl`, `write_file` ... `EOF`), `eval` with `$variables`. Only SQL
statements are kept; statements expected to fail (`--error`) and `eval`/`send_eval` statements
that still contain a `$variable` are marked so, and left out of the measures.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

# mysqltest's own commands (client/mysqltest.cc command_names); anything else is SQL.
MYSQLTEST_COMMANDS = frozenset("""
connection query connect sleep real_sleep inc dec source disconnect let echo expr while end system
result require save_master_pos sync_with_master sync_slave_with_master error send reap dirty_close
replace_result replace_column ping eval evalp enable_query_log disable_query_log enable_result_log
disable_result_log enable_connect_log disable_connect_log wait_for_slave_to_stop enable_warnings
disable_warnings enable_info disable_info enable_session_track_info disable_session_track_info
enable_metadata disable_metadata enable_column_names disable_column_names exec execw
exec_in_background delimiter disable_abort_on_error enable_abort_on_error vertical_results
horizontal_results query_vertical query_horizontal sorted_result partially_sorted_result
lowercase_result start_timer end_timer character_set disable_ps_protocol enable_ps_protocol
enable_ps2_protocol disable_ps2_protocol disable_view_protocol enable_view_protocol
disable_service_connection enable_service_connection enable_non_blocking_api
disable_non_blocking_api disable_reconnect enable_reconnect if disable_parsing enable_parsing
replace_regex remove_file file_exists write_file copy_file perl die exit skip chmod append_file
cat_file diff_files send_quit change_user mkdir rmdir list_files list_files_write_file
list_files_append_file send_shutdown shutdown_server result_format move_file remove_files_wildcard
copy_files_wildcard send_eval output reset_connection enable_prepare_warnings
disable_prepare_warnings enable_cursor_protocol disable_cursor_protocol
""".split())
HEREDOC_COMMANDS = frozenset({"perl", "write_file", "append_file", "list_files_write_file"})
SQL_PREFIX_COMMANDS = frozenset({"send", "eval", "evalp", "send_eval", "query", "query_vertical",
                                 "query_horizontal"})
DDL_HEAD = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(CREATE|ALTER|DROP|RENAME|TRUNCATE)\b", re.I | re.S)
USE = re.compile(r"^\s*USE\s+(`[^`]+`|\w+)\s*$", re.I)
SYSTEM_SCHEMAS = {"mysql", "information_schema", "performance_schema", "sys"}


@dataclass
class Statement:
    file: str  # relative to the mysql-test directory
    line: int
    sql: str
    expect_error: bool = False
    has_variable: bool = False  # an eval whose $variables were not expanded


def _strip_command_word(text: str) -> tuple[str, str]:
    stripped = text.lstrip()
    word = re.match(r"[A-Za-z_]+", stripped)
    return (word.group().lower(), stripped[word.end():]) if word else ("", stripped)


_BLOCK_HEAD = re.compile(r"^(?:if|while)\s*\(.*\)\s*\{?\s*$", re.I)


def _find_delimiter(text: str, delimiter: str) -> int:
    """Where `delimiter` first ends a statement in `text`: outside quotes and /* comments */."""
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                return -1
            i = close + 2
            continue
        elif text.startswith(delimiter, i):
            return i
        i += 1
    return -1


def mysqltest_statements(path: str, relative: str) -> Iterator[Statement]:
    """The SQL statements of one mysqltest file, in order."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().split("\n")
    state = {"delimiter": ";", "expect_error": False, "parsing": True}
    pending = ""
    start_line = 0
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        stripped = raw.strip()
        if not pending.strip():
            pending = ""
            if not stripped or stripped.startswith(("#", "}", "{", "-- ")) or _BLOCK_HEAD.match(stripped):
                continue  # comments, and the lines that open and close if/while blocks
            if stripped.startswith("--") and stripped != "--":
                i = yield from _dash_command(stripped[2:], state, relative, i, lines)
                continue
            start_line = i
        pending += raw + "\n"
        while True:
            end = _find_delimiter(pending, state["delimiter"])
            if end < 0:
                break
            text, pending = pending[:end].strip(), pending[end + len(state["delimiter"]):]
            if pending.strip().startswith("#"):
                pending = ""
            i = yield from _statement(text, state, relative, start_line, i, lines)


def _dash_command(command: str, state: dict, relative: str, i: int, lines: list[str]):
    """A `--command args` line (no delimiter); returns where reading goes on."""
    word, rest = _strip_command_word(command)
    if word == "disable_parsing":
        state["parsing"] = False
    elif word == "enable_parsing":
        state["parsing"] = True
    elif word == "error":
        state["expect_error"] = True
    elif word == "delimiter":
        state["delimiter"] = rest.strip() or state["delimiter"]
    elif word in SQL_PREFIX_COMMANDS and state["parsing"]:
        sql = rest.strip()
        if sql.endswith(state["delimiter"]):
            sql = sql[: -len(state["delimiter"])].strip()
        if sql:
            yield Statement(relative, i, sql, state["expect_error"], word.startswith(("eval", "send_eval")) and "$" in sql)
        state["expect_error"] = False
    elif word in HEREDOC_COMMANDS:
        return _skip_heredoc(lines, i, rest)
    return i


def _statement(text: str, state: dict, relative: str, line: int, i: int, lines: list[str]):
    """One delimited piece of a mysqltest file: a command or SQL; returns where reading goes on."""
    word, rest = _strip_command_word(text)
    if word == "delimiter":
        state["delimiter"] = rest.strip() or state["delimiter"]
    elif word == "enable_parsing":
        state["parsing"] = True
    elif not state["parsing"] or (word in ("if", "while") and "{" in text):
        pass
    elif word == "error":
        state["expect_error"] = True
    elif word in HEREDOC_COMMANDS:
        return _skip_heredoc(lines, i, rest)
    elif word in SQL_PREFIX_COMMANDS:
        yield Statement(relative, line, rest.strip(), state["expect_error"],
                        word.startswith(("eval", "send_eval")) and "$" in rest)
        state["expect_error"] = False
    elif word not in MYSQLTEST_COMMANDS and text:
        yield Statement(relative, line, text, state["expect_error"], False)
        state["expect_error"] = False
    return i


def _skip_heredoc(lines: list[str], i: int, rest: str) -> int:
    """Past the `EOF` (or named) terminator of a perl/write_file block starting at line i."""
    words = rest.replace(";", " ").split()
    terminator = "EOF"
    if words and not words[-1].startswith("$") and "/" not in words[-1] and "." not in words[-1] and len(words) >= 1:
        # `perl END;` names its terminator; `write_file $path END;` too (the last word).
        if words[-1].isupper():
            terminator = words[-1]
    while i < len(lines) and lines[i].strip() != terminator:
        i += 1
    return i + 1


def extract(directory: str) -> Iterator[Statement]:
    for root, _, files in sorted(os.walk(directory)):
        for name in sorted(files):
            if name.endswith((".test", ".inc")):
                path = os.path.join(root, name)
                for statement in mysqltest_statements(path, os.path.relpath(path, directory)):
                    if DDL_HEAD.match(statement.sql) or USE.match(statement.sql):  # USE: context for `run`
                        yield statement


def load(path: str) -> list[Statement]:
    with open(path, encoding="utf-8") as handle:
        return [Statement(**json.loads(line)) for line in handle if line.strip()]


def ddl_only(statements: list[Statement]) -> list[Statement]:
    return [s for s in statements if DDL_HEAD.match(s.sql)]


def statement_kind(sql: str) -> str:
    """The statement's head: CREATE TABLE, ALTER TABLE, DROP INDEX, CREATE TRIGGER, ..."""
    text = re.sub(r"/\*.*?\*/", " ", sql, flags=re.S)
    words = re.findall(r"[A-Za-z_]+|`[^`]*`|\S", text)[:12]
    upper = [w.upper() for w in words]
    verb = upper[0] if upper else ""
    skip = {"OR", "REPLACE", "TEMPORARY", "ONLINE", "OFFLINE", "IGNORE", "UNIQUE", "FULLTEXT", "SPATIAL",
            "DEFINER", "ALGORITHM", "SQL", "SECURITY", "INVOKER", "AGGREGATE", "IF", "NOT", "EXISTS",
            "MERGE", "TEMPTABLE", "UNDEFINED", "=", "@", "CURRENT_USER", "(", ")", "DEFAULT"}
    objects = {"TABLE", "TABLES", "DATABASE", "SCHEMA", "INDEX", "VIEW", "TRIGGER", "PROCEDURE", "FUNCTION",
               "EVENT", "USER", "ROLE", "SERVER", "SEQUENCE", "TABLESPACE", "LOGFILE", "PACKAGE", "SPATIAL",
               "SYNONYM"}
    for word in upper[1:]:
        if word in objects:
            return f"{verb} {word.replace('TABLES', 'TABLE').replace('SCHEMA', 'DATABASE')}"
        if word not in skip and not word.startswith(("`", "'")) and verb == "TRUNCATE":
            return "TRUNCATE TABLE"
        if word not in skip and word.isalpha() and word not in objects and verb != "CREATE":
            break
    return f"{verb} {upper[1] if len(upper) > 1 else ''}".strip() if verb == "TRUNCATE" else f"{verb} other"


_CREATE_TABLE_NAME = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                                r"(?:`[^`]*`|[\w$]+)(?:\s*\.\s*(?:`[^`]*`|[\w$]+))?\s*", re.I)


def is_create_select(sql: str) -> bool:
    """CREATE TABLE ... SELECT (or AS VALUES) without its own column list: a ROW-format binlog
    logs it as a plain CREATE TABLE with the columns the SELECT gave (and the rows as row events),
    so a binlog reader never meets this text."""
    match = _CREATE_TABLE_NAME.match(sql)
    if not match:
        return False
    rest = sql[match.end():]
    if re.match(r"\(\s*(?!SELECT\b|WITH\b|VALUES\b|\()", rest, re.I):
        return False  # its own column list
    return bool(re.search(r"\b(SELECT|VALUES|TABLE)\b", rest, re.I))


def alter_table_clause(sql: str) -> str:
    """The first clause word of an ALTER TABLE (ADD, DROP, MODIFY, PARTITION, ...)."""
    match = re.search(r"\bTABLE\s+(?:IF\s+EXISTS\s+)?(?:`[^`]*`|\w+)(?:\s*\.\s*(?:`[^`]*`|\w+))?\s*(\w+)", sql, re.I | re.S)
    return match.group(1).upper() if match else ""


_PARTITION_CLAUSES = [(name, re.compile(pattern, re.I)) for name, pattern in (
    ("ADD PARTITION", r"\bADD\s+PARTITION\b"), ("DROP PARTITION", r"\bDROP\s+PARTITION\b"),
    ("TRUNCATE PARTITION", r"\bTRUNCATE\s+PARTITION\b"), ("COALESCE PARTITION", r"\bCOALESCE\s+PARTITION\b"),
    ("REORGANIZE PARTITION", r"\bREORGANIZE\s+PARTITION\b"), ("EXCHANGE PARTITION", r"\bEXCHANGE\s+PARTITION\b"),
    ("REMOVE PARTITIONING", r"\bREMOVE\s+PARTITIONING\b"), ("CONVERT PARTITION", r"\bCONVERT\s+PARTITION\b"),
    ("CONVERT TABLE", r"\bCONVERT\s+TABLE\b"),
    ("ANALYZE/CHECK/OPTIMIZE/REBUILD/REPAIR PARTITION", r"\b(ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR)\s+PARTITION\b"),
    ("DISCARD/IMPORT PARTITION", r"\b(DISCARD|IMPORT)\s+PARTITION\b"), ("PARTITION BY", r"\bPARTITION\s+BY\b"),
)]


def partition_clause(sql: str) -> Optional[str]:
    """The partition operation of an ALTER TABLE, if it has one."""
    if statement_kind(sql) != "ALTER TABLE":
        return None
    return next((name for name, pattern in _PARTITION_CLAUSES if pattern.search(sql)), None)


# -- parse: the share each parser understands ------------------------------------------------------------------


def _sqlglot_structured(sql: str) -> Optional[bool]:
    """True: sqlglot's MySQL dialect gives a statement tree; False: an opaque Command or an error.
    None: sqlglot is not installed."""
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError:
        return None
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # a warning per Command fallback
    try:
        tree = sqlglot.parse_one(sql, read="mysql")
    except Exception:  # noqa: BLE001 - every parse failure counts the same
        return False
    return tree is not None and not isinstance(tree, exp.Command)


def measure_parse(statements: list[Statement]) -> dict:
    from sparkcdc.schema.parser import DDLParseError, parse

    statements = ddl_only(statements)
    kept = [s for s in statements if not s.expect_error and not s.has_variable]
    unique = list({s.sql: s for s in kept}.values())
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_type: collections.Counter = collections.Counter()
    failures: dict[str, list[str]] = collections.defaultdict(list)
    partitions: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for statement in unique:
        kind = statement_kind(statement.sql)
        if kind == "ALTER TABLE":
            kind = f"ALTER TABLE {alter_table_clause(statement.sql)}".strip()
        elif kind == "CREATE TABLE" and is_create_select(statement.sql):
            kind = "CREATE TABLE ... SELECT (binlogged with its columns)"
        counts = by_kind[kind]
        counts["statements"] += 1
        failed_before = counts["failed"]
        try:
            parsed = parse(statement.sql, "test")
            counts["parsed"] += 1
            by_type[parsed.ddl_type] += 1
        except (DDLParseError, Exception) as exc:  # noqa: BLE001 - a parser gap is a measure here
            counts["failed"] += 1
            by_type["(not parsed)"] += 1
            if len(failures[kind]) < 5:
                failures[kind].append(f"{statement.file}:{statement.line}: {statement.sql[:160]!r}: {exc}")
        structured = _sqlglot_structured(statement.sql)
        if structured is not None:
            counts["sqlglot_tree"] += int(structured)
        clause = partition_clause(statement.sql)
        if clause is not None:
            partitions[clause]["statements"] += 1
            partitions[clause]["parsed"] += int(counts["failed"] == failed_before)
            partitions[clause]["sqlglot_tree"] += int(bool(structured))
    totals = collections.Counter()
    for counts in by_kind.values():
        totals.update(counts)
    return {
        "statements_in_files": len(statements), "expected_to_fail": sum(s.expect_error for s in statements),
        "with_variables": sum(s.has_variable for s in statements), "measured_unique": len(unique),
        "totals": dict(totals), "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "partition_ddls": {k: dict(v) for k, v in sorted(partitions.items())},
        "by_ticdc_type": dict(by_type.most_common()), "failure_examples": dict(failures),
    }


# -- run: correctness against a real server ---------------------------------------------------------------------


def _execute(conn, sql: str) -> Optional[str]:
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
        return None
    except Exception as exc:  # noqa: BLE001 - the server's verdict
        return str(exc)


def _user_tables(conn) -> set[tuple[str, str]]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE IN "
                    "('BASE TABLE', 'SYSTEM VERSIONED') AND TABLE_SCHEMA NOT IN "
                    "('mysql', 'information_schema', 'performance_schema', 'sys')")
        return {(schema, table) for schema, table in cur.fetchall()}


def _same_definition(ours, theirs, every_index: bool) -> bool:
    """Columns (types, charsets, nullability, defaults, key flags), handle key, table charset and
    unique keys; with `every_index` the non-unique indexes too (they never make a handle key)."""
    if ours is None or theirs is None:
        return ours is None and theirs is None
    a, b = ours.info(0), theirs.info(0)

    def keys(table):
        return {(i.name, i.kind, i.columns) for i in table.indexes if every_index or i.is_unique}

    return (a.columns == b.columns and a.handle_key == b.handle_key and ours.charset == theirs.charset
            and keys(ours) == keys(theirs))


def _reset_server(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("SHOW DATABASES")
        for (name,) in cur.fetchall():
            if name.lower() not in SYSTEM_SCHEMAS:
                cur.execute(f"DROP DATABASE `{name}`")
        cur.execute("CREATE DATABASE test")
        cur.execute("USE test")
        cur.execute("SET SESSION max_statement_time = 5, SESSION sql_mode = DEFAULT, "
                    "SESSION default_storage_engine = InnoDB")


_EXECUTABLE = re.compile(r"^\s*(?:CREATE|ALTER|DROP|RENAME|TRUNCATE)\b(?:(?!\b(?:USER|ROLE|SERVER|LOGFILE|TABLESPACE|"
                         r"PROCEDURE|FUNCTION|TRIGGER|EVENT|PACKAGE)\b)[\s\S])*?\b(?:TABLES?|DATABASE|SCHEMA|INDEX|VIEW"
                         r"|SEQUENCE)\b", re.I)


def _binlog_position(conn) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], row[1]


def _logged_ddls(conn, since: tuple[str, int]) -> list[tuple[str, str]]:
    """(default database, query) of the DDL Query events the server logged since `since`: what a
    binlog reader sees (CREATE ... SELECT as CREATE TABLE with columns; nothing for TEMPORARY)."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{since[0]}' FROM {since[1]}")
        rows = cur.fetchall()
    logged = []
    for row in rows:
        if row[2] != "Query":
            continue
        info = row[5]
        use = re.match(r"use `((?:[^`]|``)*)`; ", info)
        database, query = (use.group(1).replace("``", "`"), info[use.end():]) if use else ("", info)
        query = re.sub(r"^(?:set \w+=\w+; )+", "", query)  # session settings SHOW BINLOG EVENTS prefixes
        if DDL_HEAD.match(query):
            logged.append((database, query))
    return logged


def measure_run(statements: list[Statement], host: str, port: int, limit_files: int, deadline_s: float,
                seed: int, only: str = "") -> dict:
    import random

    import pymysql

    from sparkcdc.schema import ddl_types as T
    from sparkcdc.schema.parser import guess_target
    from sparkcdc.schema.store import SchemaStore
    from sparkcdc.upstream.schema_reader import read_catalog, read_table_definition

    by_file: dict[str, list[Statement]] = collections.defaultdict(list)
    for statement in statements:
        if not statement.expect_error and not statement.has_variable:
            by_file[statement.file].append(statement)

    def connect():
        return pymysql.connect(host=host, port=port, user="root", autocommit=True, charset="utf8mb4")

    conn = connect()
    started = time.monotonic()
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    wrong: dict[str, list[str]] = collections.defaultdict(list)
    files = sorted(f for f in by_file if only in f)
    random.Random(seed).shuffle(files)  # a deadline then stops at a sample of every suite
    files = files[: limit_files or None]
    done = resynced = 0
    for file in files:
        if time.monotonic() - started > deadline_s:
            break
        done += 1
        try:
            _reset_server(conn)
        except Exception:  # noqa: BLE001 - the server dropped the connection: a fresh one
            conn = connect()
            _reset_server(conn)
        store = SchemaStore(read_catalog(conn))
        database = "test"
        for n, statement in enumerate(by_file[file]):
            if time.monotonic() - started > deadline_s * 1.2:
                break  # a long file: stop inside it
            sql = statement.sql
            use = USE.match(sql)
            if use:
                if _execute(conn, sql) is None:
                    database = use.group(1).strip("`")
                continue
            target = guess_target(sql, database)
            if not _EXECUTABLE.match(sql) or (target is not None and target.schema.lower() in SYSTEM_SCHEMAS):
                continue
            try:
                since = _binlog_position(conn)
                if {k for k in store.catalog.tables if k[0].lower() not in SYSTEM_SCHEMAS} != _user_tables(conn):
                    # Tables made by what the corpus does not hold (PREPARE/EXECUTE, procedures,
                    # `--exec mysql`): start from the server's catalog, so the next statement
                    # is judged on its own.
                    store = SchemaStore(read_catalog(conn))
                    resynced += 1
            except Exception:  # noqa: BLE001
                conn = connect()
                break
            if _execute(conn, sql) is not None:
                continue  # the server refused it: it never reaches a binlog
            logged = _logged_ddls(conn, since)
            if not logged:
                continue  # on a TEMPORARY table: not in a ROW-format binlog
            kind = statement_kind(sql)
            counts[kind]["run"] += 1
            parsed = True
            for default_database, query in logged:
                outcome = store.apply(query, default_database or database, n + 1, f"{file}:{statement.line}")
                parsed = parsed and outcome.event.ddl_type != T.UNPARSEABLE
            if not parsed:
                if len(wrong[kind + " (not parsed)"]) < 5:
                    wrong[kind + " (not parsed)"].append(f"{file}:{statement.line}: {logged[0][1][:200]!r}")
                store = SchemaStore(read_catalog(conn))
                continue
            counts[kind]["parsed"] += 1
            touched = set()
            for default_database, query in logged:
                named = guess_target(query, default_database or database)
                if named is not None and named.table:
                    touched.add((named.schema, named.table))
            right = exact = {k for k in store.catalog.tables if k[0].lower() not in SYSTEM_SCHEMAS} == _user_tables(conn)
            for schema, table in touched | set(outcome.tables):
                if schema.lower() in SYSTEM_SCHEMAS:
                    continue
                ours, theirs = store.catalog.tables.get((schema, table)), read_table_definition(conn, schema, table)
                right = right and _same_definition(ours, theirs, every_index=False)
                exact = exact and _same_definition(ours, theirs, every_index=True)
            counts[kind]["correct"] += int(right)
            counts[kind]["exact"] += int(exact)
            if not exact and right and len(wrong[kind + " (other indexes)"]) < 5:
                wrong[kind + " (other indexes)"].append(f"{file}:{statement.line}: {sql[:200]!r}")
            if not right and len(wrong[kind]) < 8:
                wrong[kind].append(f"{file}:{statement.line}: {sql[:200]!r}")
            if not exact:
                store = SchemaStore(read_catalog(conn))  # measure the next statement on its own
    totals = collections.Counter()
    for c in counts.values():
        totals.update(c)
    _reset_server(conn)
    conn.close()
    return {"files": done, "files_total": len(files), "seconds": round(time.monotonic() - started), "resynced": resynced,
            "totals": dict(totals), "by_kind": {k: dict(v) for k, v in sorted(counts.items())},
            "wrong_examples": dict(wrong)}


def sample(statements: list[Statement], per_kind: int) -> list[Statement]:
    """A few statements of every kind, for a committed test corpus."""
    kept = [s for s in ddl_only(statements) if not s.expect_error and not s.has_variable]
    chosen: dict[str, list[Statement]] = collections.defaultdict(list)
    seen = set()
    for statement in kept:
        kind = statement_kind(statement.sql)
        if kind == "ALTER TABLE":
            kind = partition_clause(statement.sql) or kind + " " + alter_table_clause(statement.sql)
        if statement.sql in seen or len(chosen[kind]) >= per_kind or len(statement.sql) > 600:
            continue
        seen.add(statement.sql)
        chosen[kind].append(statement)
    return [s for kind in sorted(chosen) for s in chosen[kind]]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("extract", help="DDL statements of a mysql-test directory, as JSON lines")
    p.add_argument("directory")
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("parse", help="the share of the corpus the parser (and sqlglot) understands")
    p.add_argument("corpus")
    p = sub.add_parser("run", help="replay the corpus on a scratch MariaDB and check the schema store")
    p.add_argument("corpus")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--files", type=int, default=0, help="only the first N test files (0: all)")
    p.add_argument("--deadline", type=float, default=3600.0, help="stop starting new files after this many seconds")
    p.add_argument("--seed", type=int, default=21, help="the files run in an order shuffled with this seed")
    p.add_argument("--only", default="", help="only test files whose path contains this")
    p = sub.add_parser("sample", help="a few statements of every kind")
    p.add_argument("corpus")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--per-kind", type=int, default=8)
    args = parser.parse_args(argv)
    if args.command == "extract":
        with open(args.output, "w", encoding="utf-8") as out:
            for statement in extract(args.directory):
                out.write(json.dumps(asdict(statement), ensure_ascii=False) + "\n")
        return 0
    statements = load(args.corpus)
    if args.command == "parse":
        result = measure_parse(statements)
    elif args.command == "run":
        result = measure_run(statements, args.host, args.port, args.files, args.deadline, args.seed, args.only)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            for statement in sample(statements, args.per_kind):
                out.write(json.dumps(asdict(statement), ensure_ascii=False) + "\n")
        return 0
    json.dump(result, sys.stdout, indent=1, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

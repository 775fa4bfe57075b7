"""SQL for row changes, as TiCDC writes it (pkg/sqlmodel/multirow.go, row_change.go).

Pure functions of (TableInfo, images): statements use `?` placeholders and carry typed
parameters converted from the canonical text form (`model/sql_values.to_parameter`). `render` turns a statement
into text with a connection's literal quoting, so many statements can go in one round trip.

A transaction arrives with one change per key, as TiCDC's does: the pipeline reduces the
binlog's row images to their net effect per key before any sink (pipeline/netting.py). Then,
as in TiCDC: deletes, then updates, then inserts. Updates that change a PK/UK value are split
into delete + insert so two updates can never collide on a key (a PK swap); in safe mode and in
the replay window every update is split and inserts become REPLACE. A transaction's other
updates go as one statement where batch DML allows: TiDB's CASE-WHEN UPDATE, or elsewhere an
upsert of the after images (`_plan_updates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from sparkcdc.model.events import ColumnInfo, RowChange, TableInfo, Value
from sparkcdc.model.sql_values import to_parameter

Image = tuple[Value, ...]


@dataclass(frozen=True)
class Statement:
    """One SQL statement with `?` placeholders, its parameters, and how many rows it writes."""

    sql: str
    args: tuple[Any, ...]
    rows: int = 1


@dataclass(frozen=True)
class PlanOptions:
    """How a transaction becomes SQL; see TiCDC's mysql backend (cdc/sink/dmlsink/txn/mysql)."""

    split_updates: bool = False  # safe mode or replay window: update -> delete + replace
    use_replace: bool = False  # INSERT becomes REPLACE (translateToInsert is false)
    batch_dml: bool = True
    downstream_tidb: bool = False  # multi-row CASE-WHEN UPDATE only on TiDB
    max_txn_row: int = 256
    max_multi_update_row: int = 40
    max_multi_update_row_size: int = 1024


# ---------------------------------------------------------------------------------------------
# Values and names
# ---------------------------------------------------------------------------------------------

def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def quote_table(schema: str, table: str) -> str:
    return f"{quote_name(schema)}.{quote_name(table)}"


def writable_columns(info: TableInfo) -> list[tuple[int, ColumnInfo]]:
    """Columns a statement may write: generated columns are computed downstream."""
    return [(i, c) for i, c in enumerate(info.columns) if not c.generated]


def _where_columns(info: TableInfo, image: Image) -> list[tuple[int, ColumnInfo]]:
    """The handle key's columns, or every writable column when there is none (or it holds NULL)."""
    if info.handle_key:
        positions = [info.column_names.index(name) for name in info.handle_key]
        if all(image[p] is not None for p in positions):
            return [(p, info.columns[p]) for p in positions]
    return writable_columns(info)


def where_clause(info: TableInfo, image: Image) -> tuple[str, list[Any]]:
    """`a` = ? AND `b` IS ? : NULL-safe, with NULLs compared by IS as TiCDC does."""
    parts, args = [], []
    for position, column in _where_columns(info, image):
        value = image[position]
        parts.append(f"{quote_name(column.name)} {'IS' if value is None else '='} ?")
        args.append(to_parameter(column, value))
    return " AND ".join(parts), args


# ---------------------------------------------------------------------------------------------
# Statement shapes (exact strings as in TiCDC's multirow_test.go / row_change_test.go)
# ---------------------------------------------------------------------------------------------

def insert_sql(info: TableInfo, images: Sequence[Image], replace: bool = False) -> Statement:
    """INSERT INTO `db`.`t` (`a`,`b`) VALUES (?,?),(?,?) ; REPLACE INTO when `replace`."""
    columns = writable_columns(info)
    names = ",".join(quote_name(c.name) for _, c in columns)
    holder = "(" + ",".join("?" * len(columns)) + ")"
    verb = "REPLACE INTO " if replace else "INSERT INTO "
    sql = f"{verb}{quote_table(info.schema, info.table)} ({names}) VALUES " + ",".join([holder] * len(images))
    args = [to_parameter(c, image[p]) for image in images for p, c in columns]
    return Statement(sql, tuple(args), len(images))


def upsert_sql(info: TableInfo, images: Sequence[Image]) -> Statement:
    """INSERT ... ON DUPLICATE KEY UPDATE `a`=VALUES(`a`), ...: a row with the same key is
    overwritten in place, never deleted (REPLACE deletes it, which runs ON DELETE actions)."""
    insert = insert_sql(info, images)
    return Statement(insert.sql + upsert_clause(info), insert.args, insert.rows)


def upsert_clause(info: TableInfo) -> str:
    """What makes an INSERT an upsert: ` ON DUPLICATE KEY UPDATE `a`=VALUES(`a`), ...`."""
    updates = ", ".join(f"{quote_name(c.name)}=VALUES({quote_name(c.name)})" for _, c in writable_columns(info))
    return f" ON DUPLICATE KEY UPDATE {updates}"


def delete_row_sql(info: TableInfo, before: Image) -> Statement:
    """DELETE FROM `db`.`t` WHERE `id` = ? LIMIT 1"""
    where, args = where_clause(info, before)
    return Statement(f"DELETE FROM {quote_table(info.schema, info.table)} WHERE {where} LIMIT 1", tuple(args))


def delete_rows_sql(info: TableInfo, befores: Sequence[Image]) -> Statement:
    """DELETE FROM `db`.`t` WHERE (`c` = ?) OR (`c` = ?)"""
    clauses, args = [], []
    for before in befores:
        where, where_args = where_clause(info, before)
        clauses.append(where)
        args.extend(where_args)
    sql = f"DELETE FROM {quote_table(info.schema, info.table)} WHERE (" + ") OR (".join(clauses) + ")"
    return Statement(sql, tuple(args), len(befores))


def update_row_sql(info: TableInfo, before: Image, after: Image) -> Statement:
    """UPDATE `db`.`t` SET `a` = ?, `b` = ? WHERE `id` = ? LIMIT 1"""
    columns = writable_columns(info)
    assignments = ", ".join(f"{quote_name(c.name)} = ?" for _, c in columns)
    where, where_args = where_clause(info, before)
    args = [to_parameter(c, after[p]) for p, c in columns] + where_args
    return Statement(
        f"UPDATE {quote_table(info.schema, info.table)} SET {assignments} WHERE {where} LIMIT 1", tuple(args)
    )


def update_rows_sql(info: TableInfo, pairs: Sequence[tuple[Image, Image]]) -> Statement:
    """TiDB's multi-row form: UPDATE t SET `a`=CASE WHEN `id` = ? THEN ? ... END, ... WHERE (...) OR (...)"""
    wheres = [where_clause(info, before) for before, _ in pairs]
    columns = writable_columns(info)
    assignments, args = [], []
    for position, column in columns:
        whens = "".join(f" WHEN {where} THEN ?" for where, _ in wheres)
        assignments.append(f"{quote_name(column.name)}=CASE{whens} END")
        for (where, where_args), (_, after) in zip(wheres, pairs):
            args.extend(where_args)
            args.append(to_parameter(column, after[position]))
    for _, where_args in wheres:
        args.extend(where_args)
    sql = (f"UPDATE {quote_table(info.schema, info.table)} SET " + ", ".join(assignments)
           + " WHERE (" + ") OR (".join(where for where, _ in wheres) + ")")
    return Statement(sql, tuple(args), len(pairs))


# ---------------------------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------------------------

def changes_unique_key(
    info: TableInfo, before: Image, after: Image, unique_keys: Iterable[Sequence[str]] = ()
) -> bool:
    """True when an update changes the handle key or any unique key's value."""
    names = info.column_names
    for key in [info.handle_key, *unique_keys]:
        positions = [names.index(n) for n in key if n in names]
        if any(before[p] != after[p] for p in positions):
            return True
    return False


def _chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _row_size(image: Image) -> int:
    return sum(len(v) for v in image if v is not None)


def plan_transaction(
    info: TableInfo,
    rows: Sequence[RowChange],
    options: PlanOptions,
    unique_keys: Sequence[Sequence[str]] = (),
) -> list[Statement]:
    """The statements for one upstream transaction of one table (one change per key, see
    pipeline/netting.py), in execution order."""
    if not info.has_valid_index:
        return _plan_keyless(info, rows, options)
    deletes: list[Image] = []
    updates: list[tuple[Image, Image]] = []
    inserts: list[Image] = []
    for row in rows:
        if row.op == "insert":
            inserts.append(row.after)
        elif row.op == "delete":
            deletes.append(row.before)
        elif options.split_updates or changes_unique_key(info, row.before, row.after, unique_keys):
            deletes.append(row.before)
            inserts.append(row.after)
        else:
            updates.append((row.before, row.after))

    statements: list[Statement] = []
    if options.batch_dml and len(deletes) > 1:
        statements += [delete_rows_sql(info, chunk) for chunk in _chunks(deletes, options.max_txn_row)]
    else:
        statements += [delete_row_sql(info, before) for before in deletes]
    statements += _plan_updates(info, updates, options)
    for chunk in _chunks(inserts, options.max_txn_row if options.batch_dml else 1):
        statements.append(insert_sql(info, chunk, replace=options.use_replace))
    return statements


def _plan_updates(info: TableInfo, updates: list[tuple[Image, Image]], options: PlanOptions) -> list[Statement]:
    """TiDB: TiCDC's multi-row CASE-WHEN UPDATE. MySQL/MariaDB, where TiCDC sends one UPDATE a row:
    a multi-row upsert of the after images. These updates keep every key's value (the others were
    split), so each row's insert meets its own row on the primary key, which InnoDB checks first,
    and is overwritten in place: the same rows as the UPDATEs for less than half the downstream's
    CPU (docs/benchmarks.md, "One upsert for a transaction's updates")."""
    if not updates:
        return []
    if options.batch_dml and len(updates) > 1:
        if not options.downstream_tidb:
            return [upsert_sql(info, [after for _, after in chunk]) for chunk in _chunks(updates, options.max_txn_row)]
        average = sum(_row_size(after) for _, after in updates) / len(updates)
        if average < options.max_multi_update_row_size:
            return [update_rows_sql(info, chunk) for chunk in _chunks(updates, options.max_multi_update_row)]
    return [update_row_sql(info, before, after) for before, after in updates]


def _plan_keyless(info: TableInfo, rows: Sequence[RowChange], options: PlanOptions) -> list[Statement]:
    """Without a key rows cannot be merged or reordered: one statement per row, in upstream order,
    except that consecutive inserts share one multi-row INSERT."""
    statements: list[Statement] = []
    pending_inserts: list[Image] = []

    def flush_inserts() -> None:
        limit = options.max_txn_row if options.batch_dml else 1
        for chunk in _chunks(pending_inserts, limit):
            statements.append(insert_sql(info, chunk, replace=options.use_replace))
        pending_inserts.clear()

    for row in rows:
        if row.op == "insert":
            pending_inserts.append(row.after)
            continue
        flush_inserts()
        if row.op == "delete":
            statements.append(delete_row_sql(info, row.before))
        elif options.split_updates:
            statements.append(delete_row_sql(info, row.before))
            pending_inserts.append(row.after)
        else:
            statements.append(update_row_sql(info, row.before, row.after))
    flush_inserts()
    return statements


# ---------------------------------------------------------------------------------------------
# DDL sessions
# ---------------------------------------------------------------------------------------------

DATABASE_DDL_TYPES = frozenset({"create database", "create schema", "drop database", "drop schema"})
RESET_TIMESTAMP = "SET TIMESTAMP = DEFAULT"


def ddl_prelude(schema: str, ddl_type: str, commit_physical_ms: int) -> list[str]:
    """What runs before a DDL's query on its session (TiCDC's execDDL): `USE` its database unless
    the DDL creates or drops one, then the session timestamp set to the upstream commit time so
    DEFAULT CURRENT_TIMESTAMP fills the same value. RESET_TIMESTAMP runs after the query."""
    statements = []
    if schema and ddl_type not in DATABASE_DDL_TYPES:
        statements.append(f"USE {quote_name(schema)}")
    statements.append(RESET_TIMESTAMP)
    if commit_physical_ms > 0:
        statements.append(f"SET TIMESTAMP = {commit_physical_ms / 1000:.3f}")
    return statements


def render(sql: str, args: Sequence[Any], literal: Callable[[Any], str]) -> str:
    """`sql` with each `?` outside backquoted names replaced by `literal(arg)`."""
    out: list[str] = []
    position = 0
    # Splitting on backquotes alternates outside/inside a name; a doubled `` inside a name
    # yields an empty outside segment, so the alternation still holds.
    for index, segment in enumerate(sql.split("`")):
        if index:
            out.append("`")
        if index % 2:
            out.append(segment)
            continue
        pieces = segment.split("?")
        out.append(pieces[0])
        for piece in pieces[1:]:
            out.append(literal(args[position]))
            out.append(piece)
            position += 1
    if position != len(args):
        raise ValueError(f"statement has {position} placeholders but {len(args)} arguments")
    return "".join(out)

"""The MySQL sink's columnar entry: upstream transactions as Arrow columns (the batch writer's
`write_arrow`) become the same conflict keys and the same SQL text their RowChanges would
(causality.py, sql.py), without a Python object per value.

Per run of transactions (one `write_arrow` call) the work is done a column at a time: conflict
keys hash every row's key values at once (FNV-1a over the same bytes as `KeySpace.image_keys`),
and SQL literals are made per column (Arrow compute for integers and strings, the connection's
own `escape` per value for the other types), then joined per row into the pieces statements are
made of: an insert's `(...)` tuple, a before image's WHERE condition, an update's SET list. A
transaction's statements join those pieces with sql.py's separators, so the text sent
downstream is the same as `render(plan_transaction(...))`'s (tests/unit/test_mysql_columnar.py
compares them for every column type, op mix and option).
"""

from __future__ import annotations

import struct
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES

from sparkcdc.model.change_batch import OP_CODES, OP_NAMES, runs_of_equal
from sparkcdc.model.events import GEOMETRY_TYPES, INTEGER_TYPES, ColumnInfo, RowChange, TableInfo
from sparkcdc.model.sql_values import to_parameter
from sparkcdc.sink.mysql.causality import _FNV_OFFSET, _FNV_PRIME, KeySpace, fnv32a, fold_text
from sparkcdc.sink.mysql.sql import (
    PlanOptions,
    Statement,
    plan_transaction,
    quote_name,
    quote_table,
    render,
    upsert_clause,
    writable_columns,
)

INSERT, UPDATE, DELETE = OP_CODES["insert"], OP_CODES["update"], OP_CODES["delete"]
# pymysql's converters.escape_string, in the order that keeps it one pass: backslash first.
_BACKSLASH_ESCAPES = (("\\", "\\\\"), ("\0", "\\0"), ("\n", "\\n"), ("\r", "\\r"), ("\x1a", "\\Z"),
                      ('"', '\\"'), ("'", "\\'"))
_QUOTE_ESCAPES = (("'", "''"),)  # the server runs with NO_BACKSLASH_ESCAPES
_NEEDS_BACKSLASH_ESCAPE = "[\\x00\\\\\\n\\r\\x1a\"']"
# Integer text that int() prints back unchanged: then the text itself is the literal.
_CANONICAL_INTEGER = "^(0|-?[1-9][0-9]*)$"
# Values are worked on as large_string whatever the batch's string type (Spark may give either):
# one kernel type, and a run's joined text may pass 2 GiB.
_TEXT = pa.large_string()


def _text(value: str) -> pa.Scalar:
    return pa.scalar(value, _TEXT)


# ---------------------------------------------------------------------------------------------
# Conflict keys
# ---------------------------------------------------------------------------------------------

def _fnv_update(state: np.ndarray, data: pa.Array) -> np.ndarray:
    """FNV-1a of each row's hash so far continued over that row's UTF-8 bytes in `data`."""
    data = pc.fill_null(data, "").cast(pa.large_string())
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int64)[data.offset:data.offset + len(data) + 1]
    body = data.buffers()[2]
    content = np.frombuffer(body, dtype=np.uint8) if body is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    prime = np.uint32(_FNV_PRIME)
    for position in range(int(lengths.max(initial=0))):
        rows = np.flatnonzero(lengths > position)
        state[rows] = (state[rows] ^ content[starts[rows] + position]) * prime
    return state


def _fnv_constant(state: np.ndarray, data: bytes) -> np.ndarray:
    prime = np.uint32(_FNV_PRIME)
    for byte in data:
        state = (state ^ np.uint32(byte)) * prime
    return state


def transaction_key_sets(key_space: KeySpace, columns: "ArrowRun") -> list[set[int]]:
    """Per transaction of the run, `key_space.transaction_keys` of its rows."""
    if not key_space.indexes:
        return [{fnv32a(struct.pack(">q", key_space.table_id))} for _ in columns.transactions]
    hashes, valid = [], []
    for side in (columns.before, columns.after):
        present = side.is_valid().to_numpy(zero_copy_only=False)
        for number, positions in enumerate(key_space.indexes):
            state = np.full(len(side), _FNV_OFFSET, dtype=np.uint32)
            usable = present.copy()
            for position in positions:
                values = columns.raw(side, position)
                usable &= values.is_valid().to_numpy(zero_copy_only=False)
                if position in key_space.folded:
                    values = pa.array([None if v is None else fold_text(v) for v in values.to_pylist()], _TEXT)
                state = _fnv_constant(_fnv_update(state, values), b"\0")
            hashes.append(_fnv_constant(state, struct.pack(">qq", number, key_space.table_id)))
            valid.append(usable)
    all_hashes, all_valid = np.stack(hashes), np.stack(valid)
    return [set(all_hashes[:, low:high][all_valid[:, low:high]].tolist()) for low, high in columns.transactions]


# ---------------------------------------------------------------------------------------------
# Literals and statement pieces
# ---------------------------------------------------------------------------------------------

def _literals(column: ColumnInfo, values: pa.Array, no_backslash_escapes: bool,
              escape: Callable[[object], str]) -> pa.Array:
    """Each value as `escape(to_parameter(column, value))` writes it, NULL as NULL."""
    kind = column.mysql_type
    if kind in INTEGER_TYPES or kind in ("bit", "year"):
        if pc.all(pc.match_substring_regex(values, _CANONICAL_INTEGER)).as_py() is not False:
            return pc.fill_null(values, "NULL")
    elif not (kind in ("decimal", "float", "double") or column.is_binary or kind in GEOMETRY_TYPES):
        needs = "'" if no_backslash_escapes else _NEEDS_BACKSLASH_ESCAPE
        if pc.any(pc.match_substring_regex(values, needs)).as_py():
            for old, new in (_QUOTE_ESCAPES if no_backslash_escapes else _BACKSLASH_ESCAPES):
                values = pc.replace_substring(values, old, new)
        return pc.fill_null(pc.binary_join_element_wise(_text("'"), values, _text("'"), _text("")), "NULL")
    return pa.array([escape(to_parameter(column, v)) for v in values.to_pylist()], _TEXT)


class _Pieces:
    """A run's SQL fragments in one quoting mode, each kind made for all rows at once on first
    use (None where a row has no such image): an after image's `(lit,...)` tuple (`insert`),
    a before image's WHERE condition (`where`), an after image's SET list (`assignments`), and
    per writable column the after literals (TiDB's multi-row UPDATE)."""

    def __init__(self, run: "ArrowRun", no_backslash_escapes: bool, escape: Callable[[object], str]):
        # A proxy: the run holds its pieces, and a strong reference back made a cycle that kept a
        # batch's columns and SQL pieces (~100 MB per 140k rows) until Python's cyclic collector ran.
        self._run = weakref.proxy(run)
        self._no_backslash_escapes = no_backslash_escapes
        self._escape = escape
        self._literals: dict[tuple[str, int], pa.Array] = {}
        self._lists: dict[str, list] = {}
        self._columns = writable_columns(run.info)

    def get(self, kind: str) -> list:
        made = self._lists.get(kind)
        if made is None:
            made = self._lists[kind] = getattr(self, "_" + kind)()
        return made

    def _literal(self, side: str, position: int) -> pa.Array:
        literal = self._literals.get((side, position))
        if literal is None:
            values = self._run.raw(getattr(self._run, side), position)
            literal = _literals(self._run.info.columns[position], values, self._no_backslash_escapes, self._escape)
            self._literals[(side, position)] = literal
        return literal

    def _scattered(self, rows: np.ndarray, parts: list[pa.Array], separator: str) -> list[Optional[str]]:
        """`parts` (one array per column, over `rows` of the run) joined per row by `separator`,
        as a list over every row of the run: None for rows not in `rows`."""
        out = np.full(len(self._run), None, dtype=object)
        if len(rows):
            out[rows] = (pc.binary_join_element_wise(*parts, _text(separator)).to_pylist() if parts
                         else [""] * len(rows))
        return out.tolist()

    def _rows_literal(self, side: str, position: int, rows: pa.Array) -> pa.Array:
        return self._literal(side, position).take(rows)

    def _insert(self) -> list[Optional[str]]:
        rows = np.flatnonzero(self._run.after.is_valid().to_numpy(zero_copy_only=False))
        take = pa.array(rows)
        values = self._scattered(rows, [self._rows_literal("after", p, take) for p, _ in self._columns], ",")
        return [None if v is None else "(" + v + ")" for v in values]

    def _assignments(self) -> list[Optional[str]]:
        rows = np.flatnonzero(self._run.codes == UPDATE)
        take = pa.array(rows)
        return self._scattered(rows, [pc.binary_join_element_wise(_text(quote_name(c.name) + " = "),
                                                                  self._rows_literal("after", p, take), _text(""))
                                      for p, c in self._columns], ", ")

    def _where(self) -> list[Optional[str]]:
        """sql.where_clause: the handle key's columns, or every writable column where it holds NULL."""
        run, info = self._run, self._run.info
        has_before = run.before.is_valid().to_numpy(zero_copy_only=False)
        handle = [info.column_names.index(name) for name in info.handle_key]
        handle_null = np.zeros(len(run), dtype=bool) if handle else np.ones(len(run), dtype=bool)
        for p in handle:
            handle_null |= run.raw(run.before, p).is_null().to_numpy(zero_copy_only=False)
        by_handle = np.flatnonzero(has_before & ~handle_null)
        take = pa.array(by_handle)
        where = self._scattered(by_handle, [
            pc.binary_join_element_wise(_text(quote_name(info.columns[p].name) + " = "),
                                        self._rows_literal("before", p, take), _text(""))
            for p in handle], " AND ")
        every = np.flatnonzero(has_before & handle_null)
        if len(every):
            take = pa.array(every)
            every_where = self._scattered(every, [
                pc.binary_join_element_wise(_text(quote_name(c.name)),
                                            pc.if_else(pc.is_null(run.raw(run.before, p).take(take)), _text("IS"),
                                                       _text("=")),
                                            self._rows_literal("before", p, take), _text(" "))
                for p, c in self._columns], " AND ")
            for row in every.tolist():
                where[row] = every_where[row]
        return where

    def _after_literals(self) -> list[list[Optional[str]]]:
        return [self._literal("after", p).to_pylist() for p, _ in self._columns]


class ArrowRun:
    """One `write_arrow` call's rows: whole transactions of one table, in commit order."""

    def __init__(self, info: TableInfo, commit_ts: pa.Array, ops: pa.Array, before: pa.Array, after: pa.Array):
        self.info = info
        self.commit_ts = commit_ts
        self.ops = ops
        self.before = before
        self.after = after
        codes = pc.index_in(ops, value_set=OP_NAMES)
        if codes.null_count:
            raise ValueError(f"unknown row op in {set(ops.to_pylist()) - set(OP_NAMES.to_pylist())}")
        self.codes = codes.to_numpy(zero_copy_only=False)
        self.transactions = runs_of_equal(commit_ts.to_numpy(zero_copy_only=False))
        self._raw: dict[tuple[int, int], pa.Array] = {}
        self._pieces: dict[bool, _Pieces] = {}
        self._key_changes: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()
        self.quoted_table = quote_table(info.schema, info.table)
        self.quoted_names = ",".join(quote_name(c.name) for _, c in writable_columns(info))  # of an INSERT
        self.upsert_clause = upsert_clause(info)

    def __len__(self) -> int:
        return len(self.codes)

    def raw(self, side: pa.Array, position: int) -> pa.Array:
        """One column's canonical text of the before or after images (null where there is none)."""
        cache_key = (id(side), position)
        values = self._raw.get(cache_key)
        if values is None:
            values = self._raw[cache_key] = pc.list_element(side, position).cast(_TEXT)
        return values

    def row_changes(self, low: int, high: int) -> list[RowChange]:
        """Rows [low, high) as RowChanges (seq: the position in the slice)."""
        info = self.info
        before, after = self.before[low:high].to_pylist(), self.after[low:high].to_pylist()
        ops = self.ops[low:high].to_pylist()
        commit_ts = self.commit_ts[low:high].to_pylist()
        return [RowChange(ts, info.schema, info.table, op, None if b is None else tuple(b),
                          None if a is None else tuple(a), seq)
                for seq, (ts, op, b, a) in enumerate(zip(commit_ts, ops, before, after))]

    def key_changes(self, unique_keys: Sequence[Sequence[str]]) -> np.ndarray:
        """Per row, sql.changes_unique_key of its images (meaningful for updates)."""
        cache_key = tuple(tuple(k) for k in unique_keys)
        with self._lock:
            changed = self._key_changes.get(cache_key)
            if changed is not None:
                return changed
            names = self.info.column_names
            positions = sorted({names.index(n) for key in [self.info.handle_key, *unique_keys] for n in key
                                if n in names})
            changed = np.zeros(len(self), dtype=bool)
            for position in positions:
                old, new = self.raw(self.before, position), self.raw(self.after, position)
                differ = pc.or_(pc.fill_null(pc.not_equal(old, new), False), pc.xor(pc.is_null(old), pc.is_null(new)))
                changed |= differ.to_numpy(zero_copy_only=False)
            self._key_changes[cache_key] = changed
            return changed

    def text_size(self, rows: np.ndarray) -> int:
        """sql._row_size summed over the after images of `rows`."""
        total = 0
        for position in range(len(self.info.columns)):
            lengths = pc.utf8_length(self.raw(self.after, position).take(pa.array(rows)))
            total += pc.sum(lengths).as_py() or 0
        return total

    def pieces(self, connection, kind: str) -> list:
        """One kind of the run's statement pieces (see _Pieces) with `connection`'s literal quoting."""
        no_backslash_escapes = bool(connection.server_status & SERVER_STATUS_NO_BACKSLASH_ESCAPES)
        with self._lock:
            pieces = self._pieces.get(no_backslash_escapes)
            if pieces is None:
                pieces = self._pieces[no_backslash_escapes] = _Pieces(self, no_backslash_escapes, connection.escape)
            return pieces.get(kind)


# ---------------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArrowStatement:
    """One statement over rows of a run; its text is joined from the run's pieces.
    `kind`: insert, replace, upsert, delete (one row, LIMIT 1), deletes, update (one row), updates (TiDB)."""

    kind: str
    run: ArrowRun
    positions: tuple[int, ...]  # rows of the run, in statement order
    rows: int

    def text(self, connection) -> str:
        pieces = self.run.pieces
        info = self.run.info
        table = self.run.quoted_table
        kind, positions = self.kind, self.positions
        if kind in ("insert", "replace", "upsert"):
            verb = "REPLACE INTO " if kind == "replace" else "INSERT INTO "
            insert = pieces(connection, "insert")
            text = f"{verb}{table} ({self.run.quoted_names}) VALUES " + ",".join([insert[i] for i in positions])
            return text + self.run.upsert_clause if kind == "upsert" else text
        where = pieces(connection, "where")
        if kind == "deletes":
            return f"DELETE FROM {table} WHERE (" + ") OR (".join([where[i] for i in positions]) + ")"
        if kind == "delete":
            return f"DELETE FROM {table} WHERE {where[positions[0]]} LIMIT 1"
        if kind == "update":
            row = positions[0]
            return f"UPDATE {table} SET {pieces(connection, 'assignments')[row]} WHERE {where[row]} LIMIT 1"
        wheres = [where[i] for i in positions]
        assignments = []
        for (_, column), literals in zip(writable_columns(info), pieces(connection, "after_literals")):
            whens = "".join([f" WHEN {w} THEN {literals[i]}" for w, i in zip(wheres, positions)])
            assignments.append(f"{quote_name(column.name)}=CASE{whens} END")
        return f"UPDATE {table} SET " + ", ".join(assignments) + " WHERE (" + ") OR (".join(wheres) + ")"


@dataclass(frozen=True)
class ArrowTransaction:
    """Rows [low, high) of a run: one upstream transaction."""

    run: ArrowRun
    low: int
    high: int

    def __len__(self) -> int:
        return self.high - self.low

    def plan(self, options: PlanOptions, unique_keys: Sequence[Sequence[str]] = ()) -> list:
        """sql.plan_transaction's statements, in the same order and shapes."""
        run, low, high = self.run, self.low, self.high
        if not run.info.has_valid_index:
            return plan_transaction(run.info, run.row_changes(low, high), options, unique_keys)
        codes = run.codes[low:high]
        is_update = codes == UPDATE
        split = is_update if options.split_updates else is_update & run.key_changes(unique_keys)[low:high]
        deletes = (np.flatnonzero((codes == DELETE) | split) + low).tolist()
        updates = (np.flatnonzero(is_update & ~split) + low).tolist()
        inserts = (np.flatnonzero((codes == INSERT) | split) + low).tolist()
        statements: list = []
        if options.batch_dml and len(deletes) > 1:
            statements += [ArrowStatement("deletes", run, tuple(chunk), len(chunk))
                           for chunk in _chunks(deletes, options.max_txn_row)]
        else:
            statements += [ArrowStatement("delete", run, (row,), 1) for row in deletes]
        if updates:
            batched = options.batch_dml and len(updates) > 1
            multi = (batched and options.downstream_tidb
                     and run.text_size(np.array(updates)) / len(updates) < options.max_multi_update_row_size)
            if batched and not options.downstream_tidb:
                statements += [ArrowStatement("upsert", run, tuple(chunk), len(chunk))
                               for chunk in _chunks(updates, options.max_txn_row)]
            elif multi:
                statements += [ArrowStatement("updates", run, tuple(chunk), len(chunk))
                               for chunk in _chunks(updates, options.max_multi_update_row)]
            else:
                statements += [ArrowStatement("update", run, (row,), 1) for row in updates]
        verb = "replace" if options.use_replace else "insert"
        statements += [ArrowStatement(verb, run, tuple(chunk), len(chunk))
                       for chunk in _chunks(inserts, options.max_txn_row if options.batch_dml else 1)]
        return statements


def _chunks(items: list, size: int) -> list[list]:
    return [items[start:start + size] for start in range(0, len(items), size)]


def statement_text(statement: Statement | ArrowStatement, connection) -> str:
    """What goes over the wire for a planned statement of either path."""
    if isinstance(statement, ArrowStatement):
        return statement.text(connection)
    return render(statement.sql, statement.args, connection.escape)


_IMAGE = pa.list_(pa.field("element", pa.string()))


def arrow_run_of(info: TableInfo, rows: Sequence[RowChange]) -> Optional[ArrowRun]:
    """RowChanges as a run, so they take the columnar planner too (converting costs less than
    the per-value Python it saves); None when they cannot be Arrow text (a lone surrogate) or
    an image has the wrong width: those keep sql.py's path, which reports a malformed row."""
    try:
        before = pa.array([r.before for r in rows], _IMAGE)
        after = pa.array([r.after for r in rows], _IMAGE)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    width = len(info.columns)
    for images in (before, after):
        lengths = pc.list_value_length(images)
        if pc.any(pc.not_equal(lengths, width)).as_py():
            return None
    return ArrowRun(info, pa.array([r.commit_ts for r in rows], pa.int64()), pa.array([r.op for r in rows]),
                    before, after)


def transactions_of(run: ArrowRun) -> list[ArrowTransaction]:
    """The run's upstream transactions: runs of one commit_ts, as sink._transactions groups RowChanges."""
    return [ArrowTransaction(run, low, high) for low, high in run.transactions]

